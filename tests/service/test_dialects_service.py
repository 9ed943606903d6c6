"""The service with gangs of every dialect: Events and status go to the gang's own object,
a basic pod group binds one by one, and an edited gang size answers held binds at once."""

import asyncio
from typing import Any

import pytest
from support import NODES, bind, gang_objects, pod_of, reserve_all, started

from builders import (
    composite_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    node_obj,
    pod_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.groups.status import GroupPhase
from phalanx.core.inventory import parse_node
from phalanx.core.model import Dialect, GroupRef

pytestmark = pytest.mark.anyio


def volcano_gang(size: int, min_member: int | None = None) -> list[dict[str, Any]]:
    return [
        volcano_podgroup_obj("job", min_member or size),
        *(pod_obj(f"job-{i}", 8, volcano_group="job") for i in range(size)),
    ]


async def test_a_volcano_gangs_events_and_status_go_to_its_pod_group() -> None:
    ext, source = await started(volcano_gang(2))
    reserve_all(ext, ["job-0", "job-1"])
    await asyncio.sleep(0)
    assert ("PodGroup", "volcano:default/job", "Reserved") in {e[:3] for e in source.events}
    status = source.statuses["volcano:default/job"]
    assert (status.ref, status.phase) == (
        GroupRef("default", "job", Dialect.VOLCANO),
        GroupPhase.SCHEDULING,
    )
    await ext.stop()


async def test_a_pod_naming_a_pod_group_its_workload_lacks_is_told_on_the_workload() -> None:
    ext, source = await started(
        [
            workload_obj("train", {"worker": 2}),
            pod_obj("w-0", 8, workload_ref={"name": "train", "podGroup": "workers"}),
        ]
    )
    assert ext.filter(pod_of(ext, "w-0"), NODES).feasible == ()
    await asyncio.sleep(0)
    [(kind, key, reason, message, _, warning)] = source.events
    assert (kind, key, reason, warning) == (
        "Workload",
        "upstream:default/train",
        "InvalidGang",
        True,
    )
    assert 'has no pod group "workers"' in message
    assert source.statuses == {}  # a v1alpha1 Workload has no status
    await ext.stop()


async def test_the_members_of_a_basic_pod_group_bind_one_by_one() -> None:
    ext, source = await started(
        [
            upstream_podgroup_obj("solo", None),
            *(pod_obj(f"solo-{i}", 8, scheduling_group="solo") for i in range(2)),
        ]
    )
    assert ext.filter(pod_of(ext, "solo-0"), NODES).feasible == tuple(NODES)
    assert await bind(ext, "solo-0", "n1") == ""  # not held for the other member
    assert source.bindings == [("default/solo-0", "n1")]
    await ext.stop()


async def test_an_edited_gang_size_answers_the_binds_held_for_the_old_plan() -> None:
    ext, source = await started(volcano_gang(3, min_member=2), complete_members=False)
    [node] = ext.filter(pod_of(ext, "job-0"), NODES).feasible
    held = asyncio.create_task(bind(ext, "job-0", node))
    await asyncio.sleep(0.01)
    assert not held.done()

    source.apply(volcano_podgroup_obj("job", 3))

    error = await asyncio.wait_for(held, 1)
    assert "changed (gang size 2 -> 3); re-planning the gang" in error
    assert source.bindings == []
    released = [e for e in source.events if e[2] == "ReservationReleased"]
    assert released
    assert released[0][1] == "volcano:default/job"
    await ext.stop()


def being_deleted(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` after `kubectl delete`, held by an operator's finalizer."""
    metadata = {
        **obj["metadata"],
        "deletionTimestamp": "2026-12-05T18:00:00Z",
        "finalizers": ["example.com/hold"],
    }
    return {**obj, "metadata": metadata}


async def test_a_gang_object_being_deleted_answers_the_held_binds_and_gets_no_status_write() -> (
    None
):
    ext, source = await started(volcano_gang(3, min_member=2), complete_members=False)
    [node] = ext.filter(pod_of(ext, "job-0"), NODES).feasible
    held = asyncio.create_task(bind(ext, "job-0", node))
    await asyncio.sleep(0.01)
    assert not held.done()
    written = source.statuses["volcano:default/job"]

    source.apply(being_deleted(volcano_podgroup_obj("job", 2)))

    error = await asyncio.wait_for(held, 1)
    assert "PodGroup default/job is being deleted (gang volcano:default/job)" in error
    assert ext.filter(pod_of(ext, "job-1"), NODES).feasible == ()
    ext.reporter.refresh_statuses()
    await asyncio.sleep(0)
    assert source.bindings == []
    assert source.statuses["volcano:default/job"] is written  # nothing written since
    said = {e[2]: e[3] for e in source.events if e[1] == "volcano:default/job"}
    assert said["ReservationReleased"].startswith("PodGroup default/job is being deleted")
    assert said["Unschedulable"].startswith("PodGroup default/job is being deleted")
    await ext.stop()


async def test_the_debug_views_say_whether_a_gangs_object_is_being_deleted() -> None:
    ext, source = await started(volcano_gang(2))
    ref = GroupRef("default", "job", Dialect.VOLCANO)
    before = ext.views.group(ref)

    source.apply(being_deleted(volcano_podgroup_obj("job", 2)))

    after = ext.views.group(ref)
    [listed] = ext.views.groups()
    assert before is not None
    assert after is not None
    assert (before["deleting"], after["deleting"], listed["deleting"]) == (False, True, True)
    await ext.stop()


async def test_the_debug_view_shows_the_disruption_mode_of_an_upstream_gang_only() -> None:
    objects = [
        upstream_podgroup_obj("whole", 1, disruption_mode="all"),
        pod_obj("whole-0", 8, scheduling_group="whole"),
        *volcano_gang(1),
    ]
    ext, _ = await started(objects)
    upstream = ext.views.group(GroupRef("default", "whole", Dialect.UPSTREAM))
    volcano = ext.views.group(GroupRef("default", "job", Dialect.VOLCANO))
    assert upstream is not None
    assert volcano is not None
    assert (upstream["disruption_mode"], volcano["disruption_mode"]) == ("all", None)
    await ext.stop()


async def test_a_gang_whose_object_is_being_deleted_is_not_requeued_when_a_node_opens() -> None:
    # Refused as unfit, its members would be asked back on every node change only to be
    # refused again: they can only succeed once the object is gone, which this gang never is.
    ext, source = await started(volcano_gang(2) + gang_objects(size=4))
    source.apply(being_deleted(volcano_podgroup_obj("job", 2)))
    for name in ("job-0", "g-0"):
        assert not ext.filter(pod_of(ext, name), NODES).feasible
    await asyncio.sleep(0)

    ext.apply(lambda state: state.upsert_node(parse_node(node_obj("n4"))))
    await asyncio.sleep(0)

    assert sorted(source.requeued) == ["default/g-0", "default/g-1", "default/g-2", "default/g-3"]
    await ext.stop()


def mpi_member(name: str, task: str) -> dict[str, Any]:
    return pod_obj(name, 4, volcano_group="mpi", annotations={"volcano.sh/task-spec": task})


async def test_a_volcano_gang_with_task_minima_binds_only_once_each_task_has_its_minimum() -> None:
    # Volcano's MPI example: 3 members, at least the master and 2 workers.
    ext, source = await started(
        [
            volcano_podgroup_obj("mpi", 3, min_task_member={"master": 1, "worker": 2}),
            *(mpi_member(f"mpi-worker-{i}", "worker") for i in range(3)),
        ],
        complete_members=False,
    )
    assert ext.filter(pod_of(ext, "mpi-worker-0"), NODES).feasible == ()
    await asyncio.sleep(0)
    assert "task master has 0 of 1 member(s)" in source.statuses["volcano:default/mpi"].message
    assert ext.state.reservations() == {}

    source.apply(mpi_member("mpi-master-0", "master"))
    workers = reserve_all(ext, [f"mpi-worker-{i}" for i in range(3)])
    held = [asyncio.create_task(bind(ext, name, node)) for name, node in workers.items()]
    await asyncio.sleep(0.01)
    assert not any(h.done() for h in held)  # 3 members, but no master: no quorum
    assert source.bindings == []

    [node] = ext.filter(pod_of(ext, "mpi-master-0"), NODES).feasible
    assert await bind(ext, "mpi-master-0", node) == ""
    assert await asyncio.gather(*held) == ["", "", ""]
    assert {pod for pod, _ in source.bindings} == {
        "default/mpi-master-0",
        *(f"default/mpi-worker-{i}" for i in range(3)),
    }
    await ext.stop()


async def test_a_gate_that_times_out_short_of_a_task_says_which_task_was_missing() -> None:
    # The workers alone make the count; the master was reserved but never reached /bind.
    ext, _ = await started(
        [
            volcano_podgroup_obj("mpi", 3, min_task_member={"master": 1, "worker": 2}),
            mpi_member("mpi-master-0", "master"),
            *(mpi_member(f"mpi-worker-{i}", "worker") for i in range(3)),
        ],
        complete_members=False,
        barrier=0.1,
    )
    workers = reserve_all(ext, [f"mpi-worker-{i}" for i in range(3)])
    errors = await asyncio.wait_for(
        asyncio.gather(*(bind(ext, name, node) for name, node in workers.items())), 5
    )
    assert all(
        "only 3 of 3 member(s), but task master has 0 of 1 member(s) (spec.minTaskMember), "
        "reached bind" in e
        for e in errors
    ), errors
    await ext.stop()


async def test_a_kai_gate_that_times_out_short_of_a_subgroup_names_kai_s_field() -> None:
    ext, _ = await started(
        [
            kai_podgroup_obj("serve", 3, sub_groups={"leader": 1, "workers": 2}),
            kai_pod_obj("serve-leader", "serve", "leader", gpus=4),
            *(kai_pod_obj(f"serve-worker-{i}", "serve", "workers", gpus=4) for i in range(3)),
        ],
        complete_members=False,
        barrier=0.1,
    )
    workers = reserve_all(ext, [f"serve-worker-{i}" for i in range(3)])
    errors = await asyncio.wait_for(
        asyncio.gather(*(bind(ext, name, node) for name, node in workers.items())), 5
    )
    assert all(
        "only 3 of 3 member(s), but task leader has 0 of 1 member(s) (spec.subGroups), "
        "reached bind" in e
        for e in errors
    ), errors
    await ext.stop()


# --- an upstream composite gang (1.37 CompositePodGroup) ---------------------------------


def ray_cluster(workers: int) -> list[dict[str, Any]]:
    """A KubeRay-shaped composite: a head PodGroup and a worker PodGroup under one root."""
    return [
        composite_obj("ray", 2),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        upstream_podgroup_obj("ray-workers", workers, parent="ray"),
        pod_obj("head-0", 8, scheduling_group="ray-head"),
        *(pod_obj(f"worker-{i}", 8, scheduling_group="ray-workers") for i in range(workers)),
    ]


async def test_a_composite_whose_workers_cannot_fit_binds_nothing_and_says_so_on_it() -> None:
    ext, source = await started(ray_cluster(3))  # four whole-node pods, three nodes
    assert ext.filter(pod_of(ext, "head-0"), NODES).feasible == ()
    assert await bind(ext, "head-0", "n1") != ""
    await asyncio.sleep(0)
    assert source.bindings == []
    said = [e for e in source.events if e[:2] == ("CompositePodGroup", "composite:default/ray")]
    assert said
    assert said[0][2] == "Unschedulable"
    for key in (
        "composite:default/ray",
        "upstream:default/ray-head",
        "upstream:default/ray-workers",
    ):
        assert source.statuses[key].reason == "unfit"
        assert not source.statuses[key].placed
    await ext.stop()


async def test_a_composite_that_fits_binds_every_child_group_together() -> None:
    ext, source = await started(ray_cluster(2), complete_members=False)
    nodes = reserve_all(ext, ["head-0", "worker-0", "worker-1"])
    held = [asyncio.create_task(bind(ext, n, nodes[n])) for n in ("head-0", "worker-0")]
    await asyncio.sleep(0.01)
    assert not any(task.done() for task in held)  # the composite quorum is not at /bind
    assert source.bindings == []
    assert await bind(ext, "worker-1", nodes["worker-1"]) == ""
    assert [await task for task in held] == ["", ""]
    assert sorted(b[0] for b in source.bindings) == [
        "default/head-0",
        "default/worker-0",
        "default/worker-1",
    ]
    await asyncio.sleep(0.01)
    assert source.statuses["upstream:default/ray-head"].placed
    await ext.stop()


async def test_a_composite_waiting_for_members_names_the_short_child_on_the_composite() -> None:
    ext, source = await started(ray_cluster(2)[:-1])  # worker-1 not created yet
    assert ext.filter(pod_of(ext, "head-0"), NODES).feasible == ()
    await asyncio.sleep(0)
    [said] = [e for e in source.events if e[:2] == ("CompositePodGroup", "composite:default/ray")]
    assert (
        "PodGroup ray-workers has 1 of 2 member(s) (spec.schedulingPolicy.gang.minGroupCount)"
        in said[3]
    )
    await ext.stop()


def refused_composite() -> list[dict[str, Any]]:
    """Composite `r` (gang of 3) over PodGroups `a`, `x`, `y` (priority 0), one whole-node
    member each: `a-0` is of priority 500, so kube-scheduler runs no cycle of it."""
    return [
        composite_obj("r", 3),
        *(upstream_podgroup_obj(name, 1, parent="r") for name in ("a", "x", "y")),
        pod_obj("a-0", 8, scheduling_group="a", priority=500),
        *(pod_obj(f"{name}-0", 8, scheduling_group=name) for name in ("x", "y")),
    ]


async def test_a_composite_with_a_pod_group_kube_scheduler_refuses_binds_none_of_its_pods() -> None:
    # kube-scheduler filters and binds x-0 and y-0 but never a-0: were the composite
    # reserved, x-0's /bind would complete the gang and bind a-0 before any cycle of it.
    ext, source = await started(refused_composite())
    assert ext.filter(pod_of(ext, "x-0"), NODES).feasible == ()
    error = await bind(ext, "x-0", "n1")
    await asyncio.sleep(0)

    told = "pod default/a-0 has priority 500 but the PodGroup's spec.priority is 0"
    assert told in error
    assert source.bindings == []
    assert ext.state.reservations() == {}
    said = [e for e in source.events if e[:2] == ("CompositePodGroup", "composite:default/r")]
    assert [e[2] for e in said] == ["InvalidGang"]
    assert told in said[0][3]
    for key in ("composite:default/r", "upstream:default/a", "upstream:default/x"):
        assert source.statuses[key].reason == "invalid", key
    view = ext.views.group(GroupRef("default", "r", Dialect.COMPOSITE))
    assert view is not None
    assert told in str(view["error"])
    await ext.stop()


async def test_a_member_arriving_that_kube_scheduler_refuses_its_gang_for_answers_held_binds() -> (
    None
):
    ext, source = await started(
        [
            upstream_podgroup_obj("job", 2),
            *(pod_obj(f"job-{i}", 8, scheduling_group="job") for i in range(2)),
        ],
        complete_members=False,
    )
    [node] = ext.filter(pod_of(ext, "job-0"), NODES).feasible
    held = asyncio.create_task(bind(ext, "job-0", node))
    await asyncio.sleep(0.01)
    assert not held.done()

    source.apply(pod_obj("job-2", 8, scheduling_group="job", priority=500))

    error = await asyncio.wait_for(held, 1)
    assert "pod default/job-2 has priority 500" in error
    assert ext.state.reservations() == {}
    await asyncio.sleep(0)
    said = [e[2] for e in source.events if e[1] == "upstream:default/job"]
    assert said[-2:] == ["ReservationReleased", "InvalidGang"]
    assert source.bindings == []
    await ext.stop()


async def test_the_debug_view_shows_a_composite_gang_as_one_with_every_childs_members() -> None:
    ext, _ = await started(ray_cluster(2))
    view = ext.views.group(GroupRef("default", "ray", Dialect.COMPOSITE))
    assert view is not None
    assert (view["dialect"], view["source"], view["min_member"], view["members"]) == (
        "composite",
        "CompositePodGroup",
        3,
        3,
    )
    await ext.stop()


async def test_a_composites_status_follows_its_members_after_the_decision_as_a_pod_groups_does() -> (  # noqa: E501
    None
):
    ext, source = await started(ray_cluster(2))
    nodes = reserve_all(ext, ["head-0", "worker-0", "worker-1"])
    await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    await asyncio.sleep(0)
    source.delete_pod(pod_of(ext, "worker-1").uid)

    ext.refresh_statuses()
    await asyncio.sleep(0)

    composite = source.statuses["composite:default/ray"]
    assert (composite.scheduled, composite.running) == (2, 2)
    for child in ("upstream:default/ray-head", "upstream:default/ray-workers"):
        assert source.statuses[child].scheduled == 2, child  # the composite's, said on each
    await ext.stop()


async def test_a_waiting_composites_status_keeps_its_wait_reason_on_every_object_after_a_refresh() -> (  # noqa: E501
    None
):
    ext, source = await started(ray_cluster(2)[:-1])  # worker-1 not created yet
    assert ext.filter(pod_of(ext, "head-0"), NODES).feasible == ()
    await asyncio.sleep(0)

    ext.refresh_statuses()
    await asyncio.sleep(0)

    for key in (
        "composite:default/ray",
        "upstream:default/ray-head",
        "upstream:default/ray-workers",
    ):
        status = source.statuses[key]
        assert (status.phase, status.reason) == (GroupPhase.PENDING, "waiting-for-members"), key
        assert "PodGroup ray-workers has 1 of 2 member(s)" in status.message, key
    await ext.stop()


def kueue_gang(*counts: str) -> list[dict[str, Any]]:
    """Kueue pod group `job`: one member per total count given, each asking a whole node."""
    labels = {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/pod-group-name": "job"}
    return [
        pod_obj(
            f"job-{i}",
            8,
            labels=labels,
            annotations={"kueue.x-k8s.io/pod-group-total-count": count},
        )
        for i, count in enumerate(counts)
    ]


async def test_a_kueue_gangs_events_go_to_its_first_member_and_no_status_is_written() -> None:
    ext, source = await started(kueue_gang("2", "2"))
    reserve_all(ext, ["job-0", "job-1"])
    await asyncio.sleep(0)
    assert ("Pod", "default/job-0", "Reserved") in {e[:3] for e in source.events}
    assert source.statuses == {}
    view = ext.views.group(GroupRef("default", "job", Dialect.KUEUE))
    assert view is not None
    assert (view["dialect"], view["source"], view["api_version"], view["min_member"]) == (
        "kueue",
        "annotations",
        "",
        2,
    )
    await ext.stop()


async def test_kueue_members_that_disagree_on_the_total_count_are_told_on_the_first_member() -> (
    None
):
    ext, source = await started(kueue_gang("2", "3"))
    assert ext.filter(pod_of(ext, "job-1"), NODES).feasible == ()
    await asyncio.sleep(0)
    [(kind, key, reason, message, _, warning)] = source.events
    assert (kind, key, reason, warning) == ("Pod", "default/job-0", "InvalidGang", True)
    assert message == (
        "members of gang kueue:default/job disagree on kueue.x-k8s.io/pod-group-total-count: 2, 3"
    )
    await ext.stop()
