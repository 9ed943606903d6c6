"""Node labels that change under a reserved gang, through the real kube-scheduler: a
relabel that splits a reservation across two domains of the gang's required level, or
one of its slices across two domains of the slice level, releases it
(``phalanx_releases_total{cause="topology-changed"}``, an Event on the gang), and the gang
is then bound with the constraint kept (docs/topology.md, "Relabelled nodes").

The gang is held reserved and unbindable by a member kept behind its scheduling gate:
Phalanx plans it with the gang, kube-scheduler does not schedule it, and the bind barrier
never binds a gated member itself, so nothing of the gang is being bound when the labels
change.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from phalanx_process import PhalanxProcess
from scheduling import CLIQUE_LABEL, Scenario

pytestmark = pytest.mark.e2e

SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
REQUIRED = "phalanx.io/topology-required"
SLICE_SIZE = "phalanx.io/topology-slice-size"
SLICE_REQUIRED = "phalanx.io/topology-slice-required"
GPUS = 4  # per node, and per member


def reserved_nodes(phalanx: PhalanxProcess, namespace: str, gang: str) -> list[str] | None:  # noqa: F811
    """The nodes of the gang's reservation, once it holds every member (None before)."""
    placed = reserved_members(phalanx, namespace, gang)
    return None if placed is None else sorted(placed.values())


def reserved_members(
    phalanx: PhalanxProcess,  # noqa: F811
    namespace: str,
    gang: str,
) -> dict[str, str] | None:
    """Pod key -> node of the gang's reservation, once it holds every member (None before)."""
    view: dict[str, Any] = phalanx.debug_group(namespace, gang) or {}
    members = (view.get("reservation") or {}).get("members") or []
    if len(members) < 2 or any(m.get("state") != "reserved" for m in members):
        return None
    return {m["pod"]: m["node"] for m in members}


def test_a_relabel_that_splits_a_reserved_gang_across_required_cliques_releases_it(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    sc = cluster
    ns = sc.namespace
    for c in range(2):
        for n in range(3):
            labels = {SPINE: f"{ns}-s0", LEAF: f"{ns}-l0"}
            sc.node(f"c{c}-n{n}", GPUS, clique=f"{ns}-c{c}", labels=labels)
    sc.nodes_ready()
    released = {"cause": "topology-changed"}
    before = phalanx.metric("phalanx_releases_total", **released)
    sc.pod_group("pair", 2, annotations={REQUIRED: CLIQUE_LABEL})
    gang = sc.gang("pair", 2, GPUS, create_pod_group=False, held=(1,))
    nodes = sc.wait(
        "the gang reserved whole", lambda: reserved_nodes(phalanx, ns, "pair"), timeout=30
    )
    (clique,) = {sc.node_labels(n)[CLIQUE_LABEL] for n in nodes}
    other = f"{ns}-c1" if clique == f"{ns}-c0" else f"{ns}-c0"

    sc.api.merge_patch(f"/api/v1/nodes/{nodes[0]}", {"metadata": {"labels": {CLIQUE_LABEL: other}}})

    phalanx.wait_metric(
        "phalanx_releases_total", lambda v: v == before + 1, labels=released, timeout=15
    )
    sc.wait_event("pair", "node labels changed and its reserved nodes now lie in 2")
    sc.ungate(gang.members[1])
    where = sc.wait_gang(gang)
    cliques = {sc.node_labels(node)[CLIQUE_LABEL] for node in where.values()}
    assert len(cliques) == 1, f"{where}: {cliques}"
    assert phalanx.metric("phalanx_releases_total", **released) == before + 1


def test_a_relabel_that_splits_a_reserved_slice_across_cliques_releases_the_gang(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    sc = cluster
    ns = sc.namespace
    for c in range(2):
        for n in range(3):
            labels = {SPINE: f"{ns}-s0", LEAF: f"{ns}-l0"}
            sc.node(f"c{c}-n{n}", GPUS, clique=f"{ns}-c{c}", labels=labels)
    sc.nodes_ready()
    released = {"cause": "topology-changed"}
    before = phalanx.metric("phalanx_releases_total", **released)
    slices = {SLICE_SIZE: "2", SLICE_REQUIRED: CLIQUE_LABEL}
    sc.pod_group("quad", 4, annotations=slices)
    gang = sc.gang("quad", 4, GPUS, create_pod_group=False, held=(3,))
    placed = sc.wait(
        "the gang reserved whole", lambda: reserved_members(phalanx, ns, "quad"), timeout=30
    )
    first = placed[f"{ns}/quad-0"]  # slice 1 is quad-0 and quad-1
    assert (
        sc.node_labels(first)[CLIQUE_LABEL] == sc.node_labels(placed[f"{ns}/quad-1"])[CLIQUE_LABEL]
    )
    clique = sc.node_labels(first)[CLIQUE_LABEL]
    other = f"{ns}-c1" if clique == f"{ns}-c0" else f"{ns}-c0"

    sc.api.merge_patch(f"/api/v1/nodes/{first}", {"metadata": {"labels": {CLIQUE_LABEL: other}}})

    phalanx.wait_metric(
        "phalanx_releases_total", lambda v: v == before + 1, labels=released, timeout=15
    )
    sc.wait_event("quad", "slice 1 of 2 (quad-0..quad-1) must lie in one")
    sc.ungate(gang.members[3])
    where = sc.wait_gang(gang)
    for pair in (("quad-0", "quad-1"), ("quad-2", "quad-3")):
        cliques = {sc.node_labels(where[m])[CLIQUE_LABEL] for m in pair}
        assert len(cliques) == 1, f"{where}: {pair} in {cliques}"
