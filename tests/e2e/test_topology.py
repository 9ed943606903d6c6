"""Topology through the real kube-scheduler: kwok nodes labelled like NVL72 racks (Topograph's
spine and leaf labels, GPU Feature Discovery's clique), gangs that require or prefer a level
or ask for slices, in Phalanx's PodGroup annotations and in Kueue's pod-set annotations.
Each test asserts where the pods were actually bound, and what the Events, the PodGroup
status and /debug say; bad intent gives a Warning Event and binds nothing.

The test's rack set, three cliques of three four-GPU nodes (cliques 0 and 1 under leaf 0,
clique 2 under leaf 1, one spine), has label values unique to the test's namespace, so
tests sharing the control plane never share a domain.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from phalanx_process import PhalanxProcess
from scheduling import POD_GROUP_LABEL, Scenario

pytestmark = pytest.mark.e2e

SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
CLIQUE = "nvidia.com/gpu.clique"
HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "phalanx.io/topology-required"
PREFERRED = "phalanx.io/topology-preferred"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CLIQUES, PER_CLIQUE, GPUS = 3, 3, 4


def racks(cluster: Scenario) -> dict[str, dict[str, str]]:  # noqa: F811
    """The test's rack set (see the module docstring): node -> its topology labels."""
    ns = cluster.namespace
    made: dict[str, dict[str, str]] = {}
    for c in range(CLIQUES):
        for n in range(PER_CLIQUE):
            labels = {SPINE: f"{ns}-s0", LEAF: f"{ns}-l{c // 2}"}
            name = cluster.node(f"c{c}-n{n}", GPUS, clique=f"{ns}-c{c}", labels=labels)
            made[name] = {**labels, CLIQUE: f"{ns}-c{c}"}
    cluster.nodes_ready()
    return made


def members(
    cluster: Scenario,  # noqa: F811
    gang: str,
    size: int,
    *,
    annotations: Mapping[str, str] | None = None,
    ranked: bool = False,
    gpus: int = GPUS,
) -> list[str]:
    """`size` members of PodGroup `gang` (four GPUs each unless `gpus`), created gated and
    released together (as a Job's pods come); `ranked` gives them Indexed Job completion
    indexes, last first."""
    names = [f"{gang}-{i}" for i in range(size)]
    for i in reversed(range(size)):
        labels = {POD_GROUP_LABEL: gang}
        if ranked:
            labels[COMPLETION_INDEX] = str(i)
        cluster.pod(names[i], gpus, labels=labels, annotations=annotations, gated=True)
    for name in names:
        cluster.ungate(name)
    return names


def status_message(cluster: Scenario, name: str) -> str:  # noqa: F811
    """The message of the PodGroup's PodGroupScheduled condition ("" before any)."""
    conditions = (cluster.get_pod_group(name).get("status") or {}).get("conditions") or [{}]
    return str(conditions[0].get("message", ""))


def domains(
    where: Mapping[str, str], labels: Mapping[str, Mapping[str, str]], key: str
) -> set[str]:
    return {labels[node][key] for node in where.values()}


def test_a_required_clique_binds_the_gang_inside_the_tightest_clique(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    labels = racks(cluster)
    ns = cluster.namespace
    # One node of clique 1 is busy: it is the tightest clique that still holds the gang.
    busy = f"{ns}-c1-n0"
    cluster.pod("busy", GPUS, node_selector={HOSTNAME: busy})
    cluster.wait_bound(["busy"])
    cluster.pod_group("rack", 2, annotations={REQUIRED: CLIQUE})
    names = members(cluster, "rack", 2)
    where = cluster.wait_bound(names)
    assert domains(where, labels, CLIQUE) == {f"{ns}-c1"}, where
    explanation = f"required {CLIQUE}: placed within {CLIQUE}={ns}-c1"
    cluster.wait_event("rack", explanation, reason="Reserved")
    cluster.wait(
        "the PodGroup status to say where the gang landed",
        lambda: explanation in status_message(cluster, "rack"),
    )
    plan = (phalanx.debug_group(ns, "rack") or {}).get("plan") or {}
    assert plan.get("level") == CLIQUE
    assert explanation in plan.get("explanation", "")


def test_a_preferred_clique_falls_back_to_one_leaf_and_says_why(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    labels = racks(cluster)
    ns = cluster.namespace
    before = phalanx.metric("phalanx_gang_placements_total", level=LEAF)
    cluster.pod_group("wide", 4, annotations={PREFERRED: CLIQUE, REQUIRED: LEAF})
    names = members(cluster, "wide", 4)  # 16 GPUs: more than a clique's 12
    where = cluster.wait_bound(names)
    assert domains(where, labels, LEAF) == {f"{ns}-l0"}, where
    assert len(domains(where, labels, CLIQUE)) == 2
    event = cluster.wait_event("wide", f"placed within {LEAF}={ns}-l0", reason="Reserved")
    assert f"preferred {CLIQUE}: no" in event["message"]
    phalanx.wait_metric(
        "phalanx_gang_placements_total", lambda v: v == before + 1, labels={"level": LEAF}
    )


def test_kueue_slices_put_each_run_of_ranks_in_one_clique(
    cluster: Scenario,  # noqa: F811
) -> None:
    labels = racks(cluster)
    ns = cluster.namespace
    kueue = {KUEUE_REQUIRED: SPINE, KUEUE_SLICE_REQUIRED: CLIQUE, KUEUE_SLICE_SIZE: "2"}
    cluster.pod_group("dp", 4)
    names = members(cluster, "dp", 4, annotations=kueue, ranked=True)
    where = cluster.wait_bound(names)
    first = domains({n: where[n] for n in names[:2]}, labels, CLIQUE)
    second = domains({n: where[n] for n in names[2:]}, labels, CLIQUE)
    assert len(first) == 1, where
    assert len(second) == 1, where
    assert first != second  # three nodes per clique: two slices of two cannot share one
    cluster.wait_event("dp", "every 2 consecutive members within one clique", reason="Reserved")
    assert ns in next(iter(first))


def test_kueue_multi_layer_slices_keep_each_outer_run_of_ranks_in_one_leaf(
    cluster: Scenario,  # noqa: F811
) -> None:
    labels = racks(cluster)
    ns = cluster.namespace
    # Clique 1 is full and clique 0 has one node left: leaf 0 holds one slice of two
    # two-GPU members (the tightest clique for it), but not the four of a leaf's slice.
    busy = [f"{ns}-c1-n{n}" for n in range(PER_CLIQUE)] + [f"{ns}-c0-n0", f"{ns}-c0-n1"]
    for i, node in enumerate(busy):
        cluster.pod(f"busy-{i}", GPUS, node_selector={HOSTNAME: node})
    cluster.wait_bound([f"busy-{i}" for i in range(len(busy))])
    layers = json.dumps([{"topology": LEAF, "size": 4}, {"topology": CLIQUE, "size": 2}])
    kueue = {KUEUE_REQUIRED: SPINE, KUEUE_SLICE_LAYERS: layers}
    cluster.pod_group("tp", 4)
    names = members(cluster, "tp", 4, annotations=kueue, ranked=True, gpus=2)
    where = cluster.wait_bound(names)
    assert domains(where, labels, LEAF) == {f"{ns}-l1"}, where
    for run in (names[:2], names[2:]):
        assert len(domains({n: where[n] for n in run}, labels, CLIQUE)) == 1, where
    cluster.wait_event(
        "tp",
        "every 4 consecutive members within one leaf; every 2 consecutive members within one "
        "clique",
        reason="Reserved",
    )


def test_bad_topology_intent_is_an_event_on_the_group_and_binds_nothing(
    cluster: Scenario,  # noqa: F811
) -> None:
    labels = racks(cluster)
    ns = cluster.namespace
    cluster.pod_group("typo", 2, annotations={REQUIRED: "clique"})
    cluster.pod_group("uneven", 3, annotations={
        "phalanx.io/topology-slice-size": "2", "phalanx.io/topology-slice-required": CLIQUE,
    })  # fmt: skip
    cluster.pod_group("fine", 2, annotations={REQUIRED: CLIQUE})
    typo, uneven = members(cluster, "typo", 2), members(cluster, "uneven", 3)
    fine = members(cluster, "fine", 2)
    where = cluster.wait_bound(fine)
    assert len(domains(where, labels, CLIQUE)) == 1
    event = cluster.wait_event(
        "typo", 'required level "clique" is not a level', reason="InvalidGang"
    )
    assert event["type"] == "Warning"
    assert f"gang {ns}/typo" in event["message"]
    cluster.wait_event(
        "uneven", "slice size 2 does not divide the gang's minMember 3", reason="InvalidGang"
    )
    cluster.wait_event(typo[0], 'required level "clique" is not a level', reason="FailedScheduling")
    cluster.assert_unbound_for([*typo, *uneven], 2.0)


def test_a_node_with_inconsistent_labels_is_said_once_on_the_node_and_kept_apart(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    labels = racks(cluster)
    ns = cluster.namespace
    # A fourth node claims clique 0 but sits under leaf 1: the labels contradict the others'.
    stray = cluster.node(
        "stray", GPUS, clique=f"{ns}-c0", labels={SPINE: f"{ns}-s0", LEAF: f"{ns}-l1"}
    )
    cluster.nodes_ready()
    cluster.pod_group("rack", 4, annotations={REQUIRED: CLIQUE})
    names = members(cluster, "rack", 4)  # only clique 0 "has" four nodes, one of them stray
    cluster.assert_unbound_for(names, 2.0)

    def node_event() -> dict[str, Any] | None:
        events = cluster.api.items("/api/v1/namespaces/default/events")
        return next(
            (
                e
                for e in events
                if (e.get("involvedObject") or {}).get("name") == stray
                and e.get("reason") == "InconsistentTopologyLabels"
            ),
            None,
        )

    event = cluster.wait("the Node's InconsistentTopologyLabels event", node_event)
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Node"
    assert f"{CLIQUE}={ns}-c0 is under" in event["message"]
    assert event.get("count", 1) == 1
    assert phalanx.metric("phalanx_topology_inconsistent_nodes") >= 1
    assert all(node != stray for node in cluster.placement().values())
    assert labels  # the three cliques of three stay as they are
