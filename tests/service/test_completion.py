"""Completing a gang at its first `/bind`: once one member of a reserved gang reaches bind,
the barrier binds the gang's other reserved members with it, without waiting for
kube-scheduler's cycle of each, as long as they ask for nothing only kube-scheduler judges.
All-or-nothing, the commit record and every answer stay as for members that came themselves.

A member is completed whether or not kube-scheduler would reach it soon.
"""

import asyncio
from typing import Any

import pytest
from support import (
    NODES,
    FakeTimers,
    RecordingSource,
    bind,
    carried,
    gang_objects,
    pod_of,
    reserve_all,
    started,
)

from builders import pod_obj, podgroup_obj, present
from clocks import FakeClock
from phalanx.service.barrier import ANNOUNCE_AFTER_SECONDS
from phalanx.service.extender import ACTS_ALONE_SECONDS, Extender
from phalanx.sources.base import BindError

pytestmark = pytest.mark.anyio


def sample(ext: Extender, name: str) -> float:
    return ext.metrics.registry.get_sample_value(name) or 0


async def started_on_test_time(
    size: int,
) -> tuple[Extender, RecordingSource, FakeClock, FakeTimers]:
    """A reserved gang of `size`, its timers on the test's clock."""
    clock = FakeClock()
    timers = FakeTimers(clock)
    ext, source = await started(
        [*gang_objects(size=size, gpus=4)],
        source_class=RecordingSource,
        clock=clock,
        timers=timers,
    )
    return ext, source, clock, timers


async def test_the_first_member_at_bind_binds_the_whole_reserved_gang() -> None:
    ext, source, clock, timers = await started_on_test_time(4)
    nodes = reserve_all(ext, ["g-0"])  # the first filter reserves every member
    reservation = present(ext.state.reservation("default/g"))
    nodes.update({m.pod_key.split("/")[1]: m.node for m in reservation.members})

    assert await asyncio.wait_for(bind(ext, "g-0", nodes["g-0"]), timeout=2) == ""

    assert sorted(source.bindings) == sorted((f"default/{n}", nodes[n]) for n in nodes)
    # No record is written apart: each binding carries the whole gang's, onto its pod.
    assert "commit default/g" not in source.order
    assert carried(source) == {f"g-{i}": {f"default/g-{j}" for j in range(4)} for i in range(4)}
    assert sample(ext, "phalanx_members_completed_total") == 3
    assert ext.state.reservation("default/g") is None
    await asyncio.sleep(0)  # Events are written off the bind path
    assert any("bound 4 member(s) together, 3 of them before" in e[3] for e in source.events)
    # kube-scheduler's own /bind for a completed member, when it comes, is a success.
    assert await bind(ext, "g-2", nodes["g-2"]) == ""
    assert "already bound" in await bind(ext, "g-2", "n9" if nodes["g-2"] != "n9" else "n1")
    assert len(source.bindings) == 4
    clock.now += ANNOUNCE_AFTER_SECONDS
    timers.fire_due()
    await asyncio.sleep(0)
    # g-2's Event is kube-scheduler's (its /bind succeeded); g-0's too, as for any member.
    scheduled = {key: msg for _, key, reason, msg, *_ in source.events if reason == "Scheduled"}
    assert sorted(scheduled) == ["default/g-1", "default/g-3"]
    assert scheduled["default/g-1"].startswith(
        f"Successfully assigned default/g-1 to {nodes['g-1']}"
    )
    await ext.stop()


async def test_a_completed_member_s_scheduled_event_waits_for_kube_scheduler_s_own_bind() -> None:
    """A cycle under way when its gang was bound still ends at /bind, and on success
    kube-scheduler writes the pod's `Scheduled` Event: one Event per member, never two."""
    ext, source, clock, timers = await started_on_test_time(3)
    nodes = reserve_all(ext, ["g-0"])
    nodes.update(
        {
            m.pod_key.split("/")[1]: m.node
            for m in present(ext.state.reservation("default/g")).members
        }
    )
    assert await bind(ext, "g-0", nodes["g-0"]) == ""
    while not any("bound 3 member(s) together" in e[3] for e in source.events):
        await asyncio.sleep(0)  # the gang's fan-out is over
    wrong = "n9" if nodes["g-1"] != "n9" else "n1"
    assert (
        await bind(ext, "g-1", wrong) != ""
    )  # a refused /bind: kube-scheduler writes no Scheduled

    bound_at = clock.now
    clock.now = bound_at + ANNOUNCE_AFTER_SECONDS / 2
    timers.fire_due()
    await asyncio.sleep(0)
    assert not [e for e in source.events if e[2] == "Scheduled"]  # still waiting
    assert await bind(ext, "g-2", nodes["g-2"]) == ""  # kube-scheduler's cycle reached bind

    clock.now = bound_at + ANNOUNCE_AFTER_SECONDS
    timers.fire_due()
    await asyncio.sleep(0)
    assert [e[1] for e in source.events if e[2] == "Scheduled"] == ["default/g-1"]
    clock.now += 60
    timers.fire_due()
    await asyncio.sleep(0)
    assert [e[1] for e in source.events if e[2] == "Scheduled"] == ["default/g-1"]  # once
    await ext.stop()


async def test_a_bind_for_a_member_being_completed_gets_that_binding_s_own_answer() -> None:
    ext, source = await started(
        [*gang_objects(size=3, gpus=4)],
        failures={"g-2": [BindError("pod not found", gone=True)]},
        yielding=True,
    )
    nodes = reserve_all(ext, ["g-0"])
    members = present(ext.state.reservation("default/g")).members
    nodes.update({m.pod_key.split("/")[1]: m.node for m in members})
    first = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    while not ext.state.assumed_node(pod_of(ext, "g-1").uid):
        await asyncio.sleep(0)  # the gate opened and assumed g-1 and g-2 with g-0
    answers = await asyncio.gather(
        bind(ext, "g-1", nodes["g-1"]), bind(ext, "g-2", nodes["g-2"]), first
    )
    assert answers[0] == ""
    assert "binding pod default/g-2" in answers[1]
    assert "not found" in answers[1]
    assert answers[2] == ""
    assert sorted(n for n, _ in source.bindings) == ["default/g-0", "default/g-1"]
    assert ext.state.assumed_node(pod_of(ext, "g-2").uid) is None  # forgotten, not stuck
    await ext.stop()


async def test_the_members_kube_scheduler_has_not_sent_are_bound_before_the_held_ones() -> None:
    """kube-scheduler pays a whole cycle for a completed member it pops before the member's
    binding lands, and nothing for a held `/bind` that waits: completions go out first, in
    the gang's order, then the held members."""
    ext, source, _, _ = await started_on_test_time(4)
    nodes = reserve_all(ext, ["g-0"])
    reservation = present(ext.state.reservation("default/g"))
    nodes.update({m.pod_key.split("/")[1]: m.node for m in reservation.members})

    assert await asyncio.wait_for(bind(ext, "g-2", nodes["g-2"]), timeout=2) == ""

    bound = [entry.removeprefix("bind ") for entry in source.order if entry.startswith("bind ")]
    assert bound == ["g-0", "g-1", "g-3", "g-2"]
    await ext.stop()


def with_host_port(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    return obj


async def test_a_member_only_kube_scheduler_can_judge_is_waited_for_and_the_rest_completed() -> (
    None
):
    objects = [
        podgroup_obj("g", 3),
        pod_obj("g-0", 4, group="g"),
        pod_obj("g-1", 4, group="g"),
        with_host_port(pod_obj("g-2", 4, group="g")),
    ]
    ext, source = await started(objects, source_class=RecordingSource)
    nodes = reserve_all(ext, ["g-0", "g-2"])
    nodes["g-1"] = present(
        present(ext.state.reservation("default/g")).node_of(pod_of(ext, "g-1").uid)
    )
    first = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    await asyncio.sleep(0.05)
    assert not first.done()  # g-2 must pass kube-scheduler's own NodePorts filter first
    assert source.bindings == []

    assert await bind(ext, "g-2", nodes["g-2"]) == ""
    assert await first == ""
    assert sorted(source.bindings) == sorted((f"default/{n}", nodes[n]) for n in nodes)
    assert sample(ext, "phalanx_members_completed_total") == 1  # g-1
    await ext.stop()


async def test_a_member_created_later_completes_the_gang_its_first_member_waits_for() -> None:
    objects = [podgroup_obj("g", 3), pod_obj("g-0", 4, group="g")]
    ext, source = await started(objects, source_class=RecordingSource)
    nodes = reserve_all(ext, ["g-0"])  # g-0 and two template slots
    first = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    source.apply(pod_obj("g-1", 4, group="g"))  # claims a slot on arrival
    await asyncio.sleep(0.05)
    assert not first.done()
    assert source.bindings == []
    source.apply(pod_obj("g-2", 4, group="g"))  # the last slot: the gang can bind
    assert await asyncio.wait_for(first, timeout=2) == ""
    assert sorted(n for n, _ in source.bindings) == [f"default/g-{i}" for i in range(3)]
    await ext.stop()


async def test_held_binds_whose_kube_scheduler_went_quiet_wait_for_a_bind_to_open_the_gate() -> (
    None
):
    # A kube-scheduler that died leaves its /binds counted at the gate; with several replicas
    # a standby's may lead by now and plan over the gang. Only a bind, or a kube-scheduler
    # heard from lately, opens the gate for a member that arrives.
    clock = FakeClock()
    objects = [podgroup_obj("g", 3), pod_obj("g-0", 4, group="g")]
    ext, source = await started(objects, source_class=RecordingSource, clock=clock)
    nodes = reserve_all(ext, ["g-0"])
    first = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    await asyncio.sleep(0)
    clock.now += ACTS_ALONE_SECONDS + 1  # kube-scheduler asks nothing more
    source.apply(pod_obj("g-1", 4, group="g"))
    source.apply(pod_obj("g-2", 4, group="g"))  # the gang could bind now
    await asyncio.sleep(0.05)
    assert not first.done()
    assert source.bindings == []
    # A kube-scheduler leading again follows the reservation, and its /bind opens the gate.
    nodes.update(reserve_all(ext, ["g-1"]))
    assert await asyncio.wait_for(bind(ext, "g-1", nodes["g-1"]), timeout=2) == ""
    assert await asyncio.wait_for(first, timeout=2) == ""
    assert sorted(n for n, _ in source.bindings) == [f"default/g-{i}" for i in range(3)]
    await ext.stop()


async def test_a_bind_arriving_while_the_record_is_written_joins_and_binds_once() -> None:
    ext, source = await started(
        [*gang_objects(size=3, gpus=4)], source_class=RecordingSource, carried_record_bytes=0
    )
    nodes = reserve_all(ext, ["g-0"])
    members = present(ext.state.reservation("default/g")).members
    nodes.update({m.pod_key.split("/")[1]: m.node for m in members})
    late: list[asyncio.Task[str]] = []
    source.on("commit", lambda: late.append(asyncio.create_task(bind(ext, "g-1", nodes["g-1"]))))
    assert await bind(ext, "g-0", nodes["g-0"]) == ""
    assert await late[0] == ""
    assert sorted(n for n, _ in source.bindings) == [f"default/g-{i}" for i in range(3)]
    assert source.order.count("commit default/g") == 1
    assert sample(ext, "phalanx_members_completed_total") == 1  # g-2; g-1 came itself
    await ext.stop()


async def test_switched_off_every_member_waits_for_its_own_bind() -> None:
    ext, source = await started(gang_objects(size=2, gpus=4), complete_members=False)
    nodes = reserve_all(ext, ["g-0"])
    first = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    await asyncio.sleep(0.05)
    assert not first.done()
    assert source.bindings == []
    nodes.update(reserve_all(ext, ["g-1"]))
    assert await bind(ext, "g-1", nodes["g-1"]) == ""
    assert await first == ""
    assert sample(ext, "phalanx_members_completed_total") == 0
    await ext.stop()


async def test_a_cycle_of_a_completed_member_under_way_keeps_it_on_its_node() -> None:
    ext, _ = await started([*gang_objects(size=2, gpus=4)])
    nodes = reserve_all(ext, ["g-0"])
    member = pod_of(ext, "g-1")  # as kube-scheduler popped it, before the completion
    assert await bind(ext, "g-0", nodes["g-0"]) == ""
    node = ext.state.bound_node(pod_of(ext, "g-1"))
    assert node
    assert ext.filter(member, NODES).feasible == (node,)
    assert await bind(ext, "g-1", node) == ""
    await ext.stop()


async def test_with_nothing_else_pending_a_parked_member_and_a_new_one_are_completed() -> None:
    # Two shapes: the gang waits for its quorum, so g-1's first filter refused it and
    # kube-scheduler holds it parked. g-2 is new and next in kube-scheduler's queue, with
    # no other pod pending: completing it is still sooner than its own cycle.
    ext, source = await started([], source_class=RecordingSource, carried_record_bytes=0)
    for obj in (podgroup_obj("g", 3), pod_obj("g-0", 4, group="g"), pod_obj("g-1", 2, group="g")):
        source.apply(obj)
    assert ext.filter(pod_of(ext, "g-1"), NODES).feasible == ()
    source.apply(pod_obj("g-2", 4, group="g"))
    nodes = reserve_all(ext, ["g-0"])

    assert await asyncio.wait_for(bind(ext, "g-0", nodes["g-0"]), timeout=2) == ""
    assert sorted(n for n, _ in source.bindings) == [f"default/g-{i}" for i in range(3)]
    assert sample(ext, "phalanx_members_completed_total") == 2
    await ext.stop()


async def test_a_chosen_member_retried_during_the_record_write_is_still_completed() -> None:
    # The reservation's requeue lets kube-scheduler retry a parked member at any moment: by
    # the time the commit record is written it is no longer parked, and that changes nothing.
    ext, source = await started([], source_class=RecordingSource, carried_record_bytes=0)
    for obj in (podgroup_obj("g", 3), pod_obj("g-0", 4, group="g"), pod_obj("g-1", 2, group="g")):
        source.apply(obj)
    assert ext.filter(pod_of(ext, "g-1"), NODES).feasible == ()  # refused: parked
    source.apply(pod_obj("g-2", 4, group="g"))
    nodes = reserve_all(ext, ["g-0", "g-2"])
    retried = []
    source.on("commit", lambda: retried.append(ext.filter(pod_of(ext, "g-1"), NODES).feasible))
    answers = await asyncio.gather(bind(ext, "g-0", nodes["g-0"]), bind(ext, "g-2", nodes["g-2"]))
    assert list(answers) == ["", ""]  # (gather gives a list; its types say tuple)
    assert len(retried[0]) == 1  # its retry followed its reservation
    assert sorted(n for n, _ in source.bindings) == [f"default/g-{i}" for i in range(3)]
    assert sample(ext, "phalanx_members_completed_total") == 1
    await ext.stop()


async def test_a_completed_member_kube_scheduler_then_says_unscheduled_is_corrected() -> None:
    # kube-scheduler's own cycle of a completed member can fail after the binding reached its
    # cache ("is in the cache, so can't be assumed"): it then writes PodScheduled False on
    # the bound pod, which would say so for good. Phalanx sets it True again, once.
    ext, source = await started([*gang_objects(size=2, gpus=4)], source_class=RecordingSource)
    nodes = reserve_all(ext, ["g-0"])
    assert await asyncio.wait_for(bind(ext, "g-0", nodes["g-0"]), timeout=2) == ""
    node = ext.state.bound_node(pod_of(ext, "g-1"))
    said = pod_obj("g-1", 4, group="g", node=node, phase="Running")
    said["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}
    ]
    source.apply(said)
    await asyncio.sleep(0)
    assert source.marked_scheduled == ["default/g-1"]
    assert sample(ext, "phalanx_pod_conditions_corrected_total") == 1
    source.apply(pod_obj("g-0", 4, group="g", node=nodes["g-0"], phase="Running"))
    await asyncio.sleep(0)
    assert source.marked_scheduled == ["default/g-1"]  # nothing else to correct
    await ext.stop()
