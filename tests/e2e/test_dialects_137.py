"""Every gang dialect on Kubernetes 1.37 through its real kube-scheduler and Phalanx: the
upstream dialect's standalone ``scheduling.k8s.io/v1beta1`` PodGroups
(``spec.schedulingGroup`` pods), the ``PodGroupInitiallyScheduled`` condition, a mutable
``minCount``, the ``basic`` policy and kube-scheduler's own pod-group cycle next to Phalanx;
and a gang in each other dialect (scheduler-plugins, annotation-only, Volcano) becoming
whole on the same control plane.

This module runs on ``control_plane_137`` (kube-apiserver and kube-scheduler 1.37.2 with
``GenericWorkload``, ``scheduling.k8s.io/v1beta1`` served), with the scheduler-plugins and
Volcano PodGroup CRDs installed before Phalanx starts: with that gate kube-scheduler
queues a PodGroup's members as one entity and runs its pod-group cycle whatever the
profile says, and adds ``GangScheduling`` to every profile; the chart's profile disables it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import (  # noqa: F401  # fixtures
    Scheduler,
    cluster,
    native_gang_plugin_holds_a_lone_member,
    phalanx,
    phalanx_hears_a_lone_member_and_binds_the_pair,
    scheduler,
    scheduler_config,
)
from scheduling import A_VOLCANO_GROUP, Api, Obj, Scenario, pod_body
from volcano import ensure_volcano_crd, volcano_path, volcano_pod_group, volcano_sizes

pytestmark = pytest.mark.e2e

API = "/apis/scheduling.k8s.io/v1beta1"
CONDITION = "PodGroupInitiallyScheduled"


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> launcher.ControlPlane:
    """Every fixture of this module (namespace, nodes, Phalanx, kube-scheduler) on 1.37,
    with Volcano's PodGroup CRD served (the scheduler-plugins one the ``phalanx`` fixture
    installs)."""
    ensure_volcano_crd(control_plane_137)
    return control_plane_137


def pod_group(sc: Scenario, name: str, min_count: int | None) -> Obj:
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    return sc.api.create(
        f"{API}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": policy},
        },
    )


def member(sc: Scenario, name: str, group: str, gpus: int, *, gated: bool = False) -> Obj:
    body = pod_body(name, gpus=gpus, node_selector=sc.selector, gated=gated)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    created = sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    assert created["spec"].get("schedulingGroup") == {"podGroupName": group}  # the gate took
    return created


def group_path(sc: Scenario, name: str) -> str:
    return f"{API}/namespaces/{sc.namespace}/podgroups/{name}"


def condition(sc: Scenario, name: str) -> Obj | None:
    status = sc.api.get(group_path(sc, name)).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == CONDITION), None)


def status_managers(sc: Scenario, name: str) -> set[str]:
    """Who wrote the PodGroup's status (its managedFields on the status subresource)."""
    fields = sc.api.get(group_path(sc, name))["metadata"].get("managedFields") or []
    return {f.get("manager", "") for f in fields if f.get("subresource") == "status"}


def upstream_sizes(api: Api, namespace: str) -> dict[str, int]:
    return {
        f"upstream:{g['metadata']['name']}": int(
            (g["spec"]["schedulingPolicy"].get("gang") or {}).get("minCount") or 0
        )
        for g in api.items(f"{API}/namespaces/{namespace}/podgroups")
    }


def judged(sc: Scenario) -> Scenario:
    sc.monitor.gang_sizes.extend([upstream_sizes, volcano_sizes])
    return sc


def debug_view(sc: Scenario, key: str) -> Obj:
    """What the running Phalanx shows about gang `key` (any dialect's key) at /debug."""
    answer = httpx.get(f"{sc.phalanx.url}/debug/groups/{key}", timeout=10, trust_env=False)
    assert answer.status_code == 200, answer.text
    view: Obj = answer.json()
    return view


def test_a_pod_group_becomes_whole_and_its_condition_says_so(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    pod_group(sc, "train", 3)
    names = [f"train-{i}" for i in range(3)]
    for name in names:
        member(sc, name, "train", 4, gated=True)
    for name in names:
        sc.ungate(name)
    where = sc.wait_bound(names)
    assert len(set(where.values())) == 2, where
    placed = sc.wait(
        "PodGroupInitiallyScheduled True",
        lambda: (c := condition(sc, "train")) is not None and c["status"] == "True" and c,
    )
    assert placed["reason"] == "Scheduled", placed
    event = sc.wait_event("train", "bound 3 member(s) together", reason="Bound")
    assert event["involvedObject"]["apiVersion"] == "scheduling.k8s.io/v1beta1"
    view = debug_view(sc, f"upstream:{sc.namespace}/train")
    assert (view["dialect"], view["source"], view["bound"]) == ("upstream", "PodGroup", 3), view


def test_a_gang_that_cannot_fit_is_unschedulable_in_phalanxs_words(cluster: Scenario) -> None:  # noqa: F811
    """Phalanx writes the condition (the object's status managers say so); a condition of
    another type written meanwhile survives every later write of it, and the gang binds
    once a node makes room."""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    pod_group(sc, "wide", 3)
    names = [f"wide-{i}" for i in range(3)]
    for name in names:
        member(sc, name, "wide", 8)
    refused = sc.wait(
        "PodGroupInitiallyScheduled False, written by Phalanx",
        lambda: (
            (c := condition(sc, "wide")) is not None
            and c["status"] == "False"
            and "phalanx" in status_managers(sc, "wide")
            and c
        ),
    )
    assert refused["reason"] == "Unschedulable", refused
    sc.assert_unbound_for(names, 2.0)
    # Another writer's condition, then room for the gang: Phalanx's and kube-scheduler's
    # writes of PodGroupInitiallyScheduled leave it alone (both patch their own condition).
    theirs = {
        "type": "DisruptionTarget",
        "status": "False",
        "reason": "NotDisrupted",
        "message": "written by another controller",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    sc.api.call(
        "PATCH",
        f"{group_path(sc, 'wide')}/status",
        {"status": {"conditions": [theirs]}},
        content_type="application/strategic-merge-patch+json",
    )
    sc.node("c", 8)
    sc.nodes_ready()
    sc.wait_bound(names, timeout=60)
    sc.wait(
        "PodGroupInitiallyScheduled True",
        lambda: (c := condition(sc, "wide")) is not None and c["status"] == "True",
    )
    status = sc.api.get(group_path(sc, "wide"))["status"]
    kept = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
    assert [c["message"] for c in kept] == ["written by another controller"], status


def test_an_edited_min_count_re_plans_the_held_reservation(cluster: Scenario) -> None:  # noqa: F811
    """minCount is mutable in v1beta1. Two members of a gang of 3 hold a reservation for 3
    (Phalanx reserves the missing member's slot from their shape) and wait at /bind for the
    third; lowered to 2, the PodGroup compares unequal: the reservation is released with
    that cause, the held binds are answered, and the gang is re-planned at 2 and binds."""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    pod_group(sc, "grow", 3)
    for name in ("grow-0", "grow-1"):
        member(sc, name, "grow", 4)
    sc.wait_event("grow", "reserved 3 member(s)", reason="Reserved")
    sc.api.merge_patch(
        group_path(sc, "grow"), {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    )
    released = sc.wait_event(
        "grow", "changed (gang size 3 -> 2); re-planning the gang", reason="ReservationReleased"
    )
    assert released["involvedObject"]["kind"] == "PodGroup"
    sc.wait_bound(["grow-0", "grow-1"], timeout=60)
    sc.wait_event("grow", "bound 2 member(s) together", reason="Bound")


def test_a_basic_pod_group_schedules_its_members_one_by_one(cluster: Scenario) -> None:  # noqa: F811
    cluster.node("a", 8)
    cluster.nodes_ready()
    pod_group(cluster, "solo", None)
    member(cluster, "solo-0", "solo", 8)
    cluster.wait_bound(["solo-0"])  # not held for a sibling that never comes


# ---- the other dialects on 1.37 ----------------------------------------------------------------


def scheduler_plugins_gang(sc: Scenario, name: str, size: int, gpus: int) -> list[str]:
    return list(sc.gang(name, size, gpus).members)


def annotation_gang(sc: Scenario, name: str, size: int, gpus: int) -> list[str]:
    return list(sc.gang(name, size, gpus, form="annotations").members)


def volcano_gang(sc: Scenario, name: str, size: int, gpus: int) -> list[str]:
    volcano_pod_group(sc, name, size)
    names = [f"{name}-{i}" for i in range(size)]
    for member_name in names:
        body = pod_body(
            member_name,
            gpus=gpus,
            node_selector=sc.selector,
            annotations={A_VOLCANO_GROUP: name},
            gated=True,
        )
        sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    for member_name in names:
        sc.ungate(member_name)
    return names


def scheduler_plugins_placed(sc: Scenario, name: str) -> bool:
    status = sc.get_pod_group(name).get("status") or {}
    conditions = status.get("conditions") or [{}]
    return status.get("phase") in ("Scheduled", "Running") and conditions[0].get("status") == "True"


def volcano_placed(sc: Scenario, name: str) -> bool:
    status = sc.api.get(volcano_path(sc, name)).get("status") or {}
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "Scheduled"]
    return status.get("phase") == "Running" and [c.get("status") for c in scheduled] == ["True"]


Declare = Callable[[Scenario, str, int, int], list[str]]
Placed = Callable[[Scenario, str], bool]

OTHER_DIALECTS: list[tuple[Declare, Placed | None, str, str]] = [
    # (make the gang, its status says placed (None: no status), its key's prefix, dialect)
    (scheduler_plugins_gang, scheduler_plugins_placed, "", "scheduler-plugins"),
    (annotation_gang, None, "", "annotations"),
    (volcano_gang, volcano_placed, "volcano:", "volcano"),
]


@pytest.mark.parametrize(
    ("declare", "placed", "prefix", "dialect"),
    OTHER_DIALECTS,
    ids=[row[3] for row in OTHER_DIALECTS],
)
def test_a_gang_of_every_other_dialect_becomes_whole_on_1_37(
    cluster: Scenario,  # noqa: F811
    declare: Declare,
    placed: Placed | None,
    prefix: str,
    dialect: str,
) -> None:
    """None of these pods names an upstream PodGroup, so kube-scheduler's pod-group cycle
    leaves them alone: each is scheduled pod by pod, gated and bound whole by Phalanx."""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    names = declare(sc, "job", 3, 4)
    where = sc.wait_bound(names)
    assert len(set(where.values())) == 2, where
    if placed is not None:
        sc.wait(f"the {dialect} status to say placed", lambda: placed(sc, "job"))
    view = debug_view(sc, f"{prefix}{sc.namespace}/job")
    assert (view["dialect"], view["bound"], view["min_member"]) == (dialect, 3, 3), view


# ---- kube-scheduler's pod-group cycle next to Phalanx -----------------------------------------


def test_in_the_supported_setup_phalanx_gates_the_gang_under_the_pod_group_cycle(
    cluster: Scenario,  # noqa: F811
) -> None:
    """kube-scheduler runs its pod-group cycle (GenericWorkload), the chart's profile keeps
    GangScheduling off: Phalanx hears of the first member while it is alone, the gang binds
    whole when the second arrives, and kube-scheduler and Phalanx both write the condition."""
    sc = judged(cluster)
    phalanx_hears_a_lone_member_and_binds_the_pair(sc, pod_group, member)
    sc.wait(
        "PodGroupInitiallyScheduled True",
        lambda: (c := condition(sc, "pair")) is not None and c["status"] == "True",
    )
    assert not sc.events("pair", reason="NativeGangScheduling")


def test_with_the_native_gang_plugin_left_on_phalanx_says_so_and_kube_scheduler_holds_members(
    control_plane: launcher.ControlPlane,
    cluster: Scenario,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    tmp_path: Path,
) -> None:
    native_gang_plugin_holds_a_lone_member(
        control_plane, scheduler, judged(cluster), tmp_path, pod_group, member
    )
