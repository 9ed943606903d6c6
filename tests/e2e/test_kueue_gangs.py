"""Kueue's plain pod groups through the real kube-scheduler (1.35) and Phalanx: all bound or
none, where kube-scheduler alone places an admitted group one pod at a time.

Kueue itself is not installed: the test plays its part. It creates the pods as a Kueue user
writes them (``kueue.x-k8s.io/queue-name``, the group label and its total count), behind
Kueue's ``kueue.x-k8s.io/admission`` scheduling gate as Kueue's webhook puts them, then
removes the gate from every member as Kueue does once it admits the group. Phalanx and
kube-scheduler are real; the invariant monitor judges each group by its total count.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import A_KUEUE_TOTAL_COUNT, KUEUE_GROUP_LABEL, Obj, Scenario, pod_body

pytestmark = pytest.mark.e2e

ADMISSION_GATE = "kueue.x-k8s.io/admission"
SERVING = "kueue.x-k8s.io/pod-group-serving"


def kueue_pod(
    sc: Scenario, name: str, group: str, count: int, gpus: int, *, gated: bool = True, **notes: str
) -> Obj:
    """A member of Kueue pod group ``group`` of ``count`` pods, held at Kueue's gate unless
    ``gated`` is False (a replacement created after the group was admitted)."""
    labels = {"kueue.x-k8s.io/queue-name": "user-queue", KUEUE_GROUP_LABEL: group}
    body = pod_body(
        name,
        gpus=gpus,
        node_selector=sc.selector,
        labels=labels,
        annotations={A_KUEUE_TOTAL_COUNT: str(count), **notes},
    )
    if gated:
        body["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)


def admit(sc: Scenario, names: list[str]) -> None:
    """Kueue's admission: the gate lifted from every member."""
    for name in names:
        sc.ungate(name)


def kueue_group(sc: Scenario, group: str, count: int, gpus: int, **notes: str) -> list[str]:
    names = [f"{group}-{i}" for i in range(count)]
    for name in names:
        kueue_pod(sc, name, group, count, gpus, gated=True, **notes)
    return names


def debug_view(sc: Scenario, group: str) -> dict[str, Any]:
    answer = sc.phalanx.get(f"/debug/groups/kueue:{sc.namespace}/{group}")
    answer.raise_for_status()
    view: dict[str, Any] = answer.json()
    return view


def test_an_admitted_kueue_group_that_fits_binds_whole(cluster: Scenario) -> None:  # noqa: F811
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    names = kueue_group(cluster, "train", 3, 4)
    cluster.assert_unbound_for(names, 1.0)  # behind Kueue's gate, nobody schedules them

    admit(cluster, names)

    where = cluster.wait_bound(names)
    assert len(set(where.values())) == 2, where
    # No gang object: Phalanx tells the gang's first member.
    cluster.wait_event("train-0", "bound 3 member(s) together", reason="Bound")
    view = debug_view(cluster, "train")
    assert (view["dialect"], view["source"], view["min_member"], view["bound"]) == (
        "kueue",
        "annotations",
        3,
        3,
    )


def test_an_admitted_kueue_group_one_node_short_waits_whole_and_says_why(
    cluster: Scenario,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    names = kueue_group(cluster, "wide", 3, 8)

    admit(cluster, names)

    cluster.wait_unschedulable(
        "wide-0", f"cannot place 3 member(s) of gang kueue:{cluster.namespace}/wide"
    )
    cluster.assert_unbound_for(names, 3.0)
    view = debug_view(cluster, "wide")
    assert (view["last_decision"], view["reservation"], view["bound"]) == ("unfit", None, 0)


def test_a_replacement_pod_of_a_whole_serving_group_binds_alone(cluster: Scenario) -> None:  # noqa: F811
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    names = kueue_group(cluster, "serve", 2, 8, **{SERVING: "true"})
    admit(cluster, names)
    where = cluster.wait_bound(names)

    # A serving group's pod is replaced when it goes (Kueue keeps the group admitted).
    cluster.delete_pods(["serve-1"])
    cluster.wait("serve-1 gone", lambda: "serve-1" not in cluster.pods() or None)
    kueue_pod(cluster, "serve-1b", "serve", 2, 8, gated=False, **{SERVING: "true"})

    moved = cluster.wait_bound(["serve-1b"])
    assert moved["serve-1b"] == where["serve-1"], (where, moved)
    assert cluster.placement(["serve-0"]) == {"serve-0": where["serve-0"]}
    # It joined the gang (whole again), not bound as a pod of no gang.
    view = debug_view(cluster, "serve")
    assert (view["members"], view["min_member"]) == (2, 2)
