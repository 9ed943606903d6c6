"""Volcano gangs on the session's control plane, through the real kube-scheduler: a hard
``networkTopology`` is searched from tier 1 upward (docs/topology.md: hard is required
``tier:<highestTierAllowed>`` and preferred ``tier:1``), and a gang whose members
succeeded ends ``Completed`` (docs/gang-dialects.md, "Status").

Tiers count from the default topology's labels: tier 1 is ``nvidia.com/gpu.clique``, tier 2
the leaf, tier 3 the spine. The rack set, two cliques of three four-GPU nodes under one
leaf, has label values unique to the test's namespace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from podgroup_crd import CRDS
from scheduling import A_VOLCANO_GROUP, CLIQUE_LABEL, Obj, Scenario, owned_by_job, pod_body
from volcano import (
    VOLCANO_CRD_NAME,
    ensure_volcano_crd,
    volcano_path,
    volcano_pod_group,
    volcano_sizes,
)

pytestmark = pytest.mark.e2e

SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
HOSTNAME = "kubernetes.io/hostname"
GPUS = 4  # per node, and per member


@pytest.fixture(scope="module")
def control_plane(control_plane: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """The session's control plane, with Volcano's PodGroup CRD served before this module's
    Phalanx starts; removed afterwards."""
    ensure_volcano_crd(control_plane)
    yield control_plane
    control_plane.request("DELETE", f"{CRDS}/{VOLCANO_CRD_NAME}")


def volcano_gang(
    sc: Scenario,
    name: str,
    size: int,
    *,
    network_topology: Mapping[str, Any] | None = None,
    job: str | None = None,
) -> list[str]:
    """A Volcano PodGroup and ``size`` four-GPU members, released together; ``job``: the
    Job the members say they belong to (kwok completes them once they run)."""
    volcano_pod_group(sc, name, size, network_topology=network_topology)
    names = [f"{name}-{i}" for i in range(size)]
    for member in names:
        body = pod_body(
            member,
            gpus=GPUS,
            node_selector=sc.selector,
            annotations={A_VOLCANO_GROUP: name},
            gated=True,
        )
        if job is not None:
            owned_by_job(body, job)
        sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    for member in names:
        sc.ungate(member)
    return names


def judged(sc: Scenario) -> Scenario:
    """Make the invariant monitor judge Volcano gangs too."""
    sc.monitor.gang_sizes.append(volcano_sizes)
    return sc


def test_a_hard_network_topology_keeps_a_gang_one_clique_holds_in_that_clique(
    cluster: Scenario,  # noqa: F811
) -> None:
    """highestTierAllowed 2 would allow the leaf; clique 0, one node busy, still has two free
    nodes that a spread over the leaf would fill first (the most broken clique), but clique
    1 holds the gang whole, and tier 1 is tried first."""
    sc = judged(cluster)
    ns = sc.namespace
    for c in range(2):
        for n in range(3):
            labels = {SPINE: f"{ns}-s0", LEAF: f"{ns}-l0"}
            sc.node(f"c{c}-n{n}", GPUS, clique=f"{ns}-c{c}", labels=labels)
    sc.nodes_ready()
    sc.pod("busy", GPUS, node_selector={HOSTNAME: f"{ns}-c0-n0"})
    sc.wait_bound(["busy"])
    names = volcano_gang(sc, "ring", 3, network_topology={"mode": "hard", "highestTierAllowed": 2})
    where = sc.wait_bound(names)
    cliques = {sc.node_labels(node)[CLIQUE_LABEL] for node in where.values()}
    assert cliques == {f"{ns}-c1"}, where
    assert len(set(where.values())) == 3, where


def test_a_volcano_gang_whose_members_succeeded_ends_completed(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    sc.node("a", 8)
    sc.nodes_ready()
    names = volcano_gang(sc, "batch", 2, job="batch")
    sc.wait_bound(names)

    def completed() -> Obj | None:
        status: Obj = sc.api.get(volcano_path(sc, "batch")).get("status") or {}
        return status if status.get("phase") == "Completed" else None

    status = sc.wait("Volcano PodGroup status Completed", completed, timeout=15)
    assert status.get("succeeded") == 2, status
    assert status.get("running", 0) == 0, status
