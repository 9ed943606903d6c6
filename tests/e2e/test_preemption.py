"""Preemption through the real kube-scheduler and Phalanx's ``/preempt`` (the chart's
``preemptVerb``): kube-scheduler proposes victims per node, Phalanx keeps only sets that
leave every running gang whole or entirely gone, and kube-scheduler deletes what is kept.

* on the session's control plane, a scheduler-plugins gang of low priority (no
  PriorityClass: priority 0) on one node, and a pod of a high PriorityClass that fits
  only if part of it goes: Phalanx widens kube-scheduler's victim (one member) to the
  whole gang, which goes entirely, and the preemptor binds;
* on ``control_plane_137`` (1.37.2, ``GenericWorkload``; see ``test_group_deletion_137``),
  an upstream PodGroup with ``disruptionMode: {all: {}}`` across two nodes, whose
  ``minCount`` 1 either half would still make, and a lone pod of the same priority on a
  third node: a preemptor needing one node's worth takes the lone pod's node and no part
  of the PodGroup. kube-scheduler 1.37 itself offers the PodGroup's members, on both
  nodes, as one node's victims, and fails its whole preemption attempt when an extender
  keeps a victim it cannot find on that node; Phalanx drops such a node.

Each also checks what Phalanx says of its answer: ``phalanx_preemption_nodes_total`` and a
``preemption verdict`` log line (widened on 1.35, dropped naming the PodGroup on 1.37).
A nested CompositePodGroup is preempted in ``test_preemption_137``.

kwok finalizes a pod once it carries a deletionTimestamp (``pod-delete`` stage), so
kube-scheduler's victims disappear from the API. Each test runs on the control plane its
parameter names (``control_plane`` is overridden here, per test, so the module's Phalanx
and kube-scheduler are started once on each).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Obj, Scenario, pod_body
from test_group_deletion_137 import member

pytestmark = pytest.mark.e2e

#: The session fixture holding each control plane, by the parameter naming it.
CONTROL_PLANES = {"1.35": "control_plane", "1.37": "control_plane_137"}
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
UPSTREAM = "/apis/scheduling.k8s.io/v1beta1"
PREEMPT_CALLS = "phalanx_request_duration_seconds_count"
PREEMPT_NODES = "phalanx_preemption_nodes_total"


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest) -> launcher.ControlPlane:
    cp: launcher.ControlPlane = request.getfixturevalue(CONTROL_PLANES[request.param])
    return cp


@contextlib.contextmanager
def priority_class(sc: Scenario, suffix: str, value: int) -> Iterator[str]:
    """A PriorityClass of the test's own (cluster-scoped, named after its namespace),
    deleted afterwards."""
    name = f"{sc.namespace}-{suffix}"
    sc.api.create(
        PRIORITY_CLASSES,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        },
    )
    try:
        yield name
    finally:
        sc.api.delete(f"{PRIORITY_CLASSES}/{name}")


@pytest.fixture
def high(cluster: Scenario) -> Iterator[str]:  # noqa: F811
    """A PriorityClass of this test's own, above the default 0: the preemptor's."""
    with priority_class(cluster, "high", 1000) as name:
        yield name


def urgent(sc: Scenario, name: str, gpus: int, priority_class: str) -> Obj:
    """A pod outside any gang, of `priority_class`."""
    body = pod_body(name, gpus=gpus, node_selector=sc.selector)
    body["spec"]["priorityClassName"] = priority_class
    created = sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    assert created["spec"].get("priority") == 1000, created["spec"]  # admission resolved it
    return created


def preempt_calls(sc: Scenario) -> float:
    return sc.phalanx.metric(PREEMPT_CALLS, verb="preempt")


def preempt_nodes(sc: Scenario, outcome: str) -> float:
    return sc.phalanx.metric(PREEMPT_NODES, outcome=outcome)


def verdicts(sc: Scenario, preemptor: str, outcome: str) -> list[dict[str, Any]]:
    """Phalanx's log lines about `preemptor`'s proposed nodes with `outcome`."""
    pod = f"{sc.namespace}/{preemptor}"
    return [
        r
        for r in sc.phalanx.log_records()
        if r.get("msg") == "preemption verdict"
        and r.get("pod") == pod
        and r.get("outcome") == outcome
    ]


def gone(sc: Scenario, names: list[str]) -> bool:
    return not set(names) & set(sc.pods())


@pytest.mark.parametrize("control_plane", ["1.35"], indirect=True)
def test_a_gang_in_the_way_of_a_higher_priority_pod_goes_entirely_and_the_pod_binds(
    cluster: Scenario,  # noqa: F811
    high: str,
) -> None:
    sc = cluster
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    low = sc.gang("low", 2, 4, placement="same-node")
    where = sc.wait_gang(low)
    (gang_node,) = set(where.values())
    # The other node is filled by a pod that may not be preempted (same priority).
    sc.wait_bound([urgent(sc, "filler", 8, high)["metadata"]["name"]])
    before = preempt_calls(sc)
    widened = preempt_nodes(sc, "widened")

    urgent(sc, "urgent", 4, high)  # needs one member's GPUs: kube-scheduler offers one

    sc.phalanx.wait_metric(
        PREEMPT_CALLS, lambda v: v > before, labels={"verb": "preempt"}, what="a /preempt"
    )
    sc.wait("the whole gang preempted", lambda: gone(sc, list(low.members)) or None)
    assert sc.wait_bound(["urgent"]) == {"urgent": gang_node}
    assert sc.placement(["filler"]) != {"filler": gang_node}
    # Phalanx said what it did with kube-scheduler's one-member proposal: a metric, a log line.
    assert preempt_nodes(sc, "widened") >= widened + 1
    (line, *_) = verdicts(sc, "urgent", "widened")
    assert line["node"] == gang_node
    assert line["group"] == f"{sc.namespace}/low"
    assert line["added"] == 1, line


@pytest.mark.parametrize("control_plane", ["1.37"], indirect=True)
def test_a_preemptor_takes_no_part_of_a_pod_group_disrupted_only_whole(
    cluster: Scenario,  # noqa: F811
    high: str,
) -> None:
    sc = cluster
    for suffix in "abc":
        sc.node(suffix, 8)
    sc.nodes_ready()
    created = sc.api.create(
        f"{UPSTREAM}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "whole"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 1}},
                "disruptionMode": {"all": {}},
            },
        },
    )
    assert created["spec"].get("disruptionMode") == {"all": {}}, created["spec"]
    members = ["whole-0", "whole-1"]
    for name in members:
        member(sc, name, "whole", 8)  # a node each
    where = sc.wait_bound(members)
    assert len(set(where.values())) == 2, where
    lone = sc.pod("lone", 8)  # priority 0, like the gang: the third node
    (lone_node,) = sc.wait_bound([lone["metadata"]["name"]]).values()
    dropped = preempt_nodes(sc, "dropped")

    urgent(sc, "urgent", 8, high)  # one node's worth: either member, or the lone pod

    # kube-scheduler offers the PodGroup's two members as one victim set (its own pod
    # preemption groups an `all` unit); Phalanx keeps only the lone pod's node.
    assert sc.wait_bound(["urgent"]) == {"urgent": lone_node}
    pods = sc.pods()
    assert "lone" not in pods
    assert {n: pods[n]["spec"].get("nodeName") for n in members} == where
    assert not [n for n in members if pods[n]["metadata"].get("deletionTimestamp")]
    # The PodGroup's node was dropped, and Phalanx says so: a metric, a log line naming it.
    assert preempt_nodes(sc, "dropped") >= dropped + 1
    lines = verdicts(sc, "urgent", "dropped")
    assert {line["group"] for line in lines} == {f"upstream:{sc.namespace}/whole"}, lines
