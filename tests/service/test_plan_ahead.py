"""Planning a gang ahead of kube-scheduler: a gang whose quorum appears is planned when its
last member is created, not when kube-scheduler first reaches one of its members, and,
behind other pending pods, bound whole without any `/bind` when Phalanx may bind every
member itself. The commit record, all-or-nothing and every later answer stay as for completion.

Each test starts with the cluster synced; gangs pending at the start are inherited and left
to kube-scheduler (a commit record may name them). Only a Phalanx whose kube-scheduler asks
it things plans ahead (the leader's, with several replicas): each test first lets
kube-scheduler try the pod queued ahead (`asked`).
"""

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from support import (
    NODES,
    RecordingSource,
    ScriptedSource,
    bind,
    carried,
    pod_of,
    reserve_all,
    started,
)

from builders import pod_obj, podgroup_obj
from clocks import FakeClock
from phalanx.core.rollforward import CommitRecord
from phalanx.service.extender import ACTS_ALONE_SECONDS, Extender
from phalanx.sources.base import BindError

pytestmark = pytest.mark.anyio

QUEUED = pod_obj("queued", 1)  # a pod outside the gang, pending ahead of its members


def with_host_port(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    return obj


async def settle() -> None:
    """Let the gate's task write the record and the bindings."""
    for _ in range(20):
        await asyncio.sleep(0)


def asked(ext: Extender) -> None:
    """kube-scheduler tries the pod queued ahead of the gang (refused or not)."""
    ext.filter(pod_of(ext, "queued"), NODES)


def create_gang(
    source: ScriptedSource,
    size: int = 3,
    gpus: int = 4,
    *,
    shapes: Sequence[int] | None = None,
) -> None:
    source.apply(podgroup_obj("g", size))
    for i in range(size):
        source.apply(pod_obj(f"g-{i}", shapes[i] if shapes else gpus, group="g"))


async def test_behind_a_backlog_a_gang_is_bound_whole_as_its_last_member_is_created() -> None:
    ext, source = await started([QUEUED], source_class=RecordingSource)
    asked(ext)
    create_gang(source, shapes=(8, 4, 4))  # mixed shapes: no template, quorum first
    await settle()

    assert sorted(n for n, _ in source.bindings) == ["default/g-0", "default/g-1", "default/g-2"]
    assert set(carried(source)) == {"g-0", "g-1", "g-2"}  # each binding carried the record
    assert ext.metrics.registry.get_sample_value("phalanx_members_completed_total") == 3
    assert any("bound 3 member(s) together, 3 of them before" in e[3] for e in source.events)
    assert not ext.planner.parked("default/g", [pod_of(ext, "g-0").ref])  # nobody refused
    # kube-scheduler's own cycle of a member, when it comes, follows the binding.
    node = dict(source.bindings)["default/g-1"]
    assert reserve_all(ext, ["g-1"]) == {"g-1": node}
    assert await bind(ext, "g-1", node) == ""
    assert len(source.bindings) == 3
    await ext.stop()


async def test_a_gang_whose_pod_group_comes_after_its_members_is_planned_when_it_comes() -> None:
    # Pods and PodGroups arrive on separate watches, in no common order.
    ext, source = await started([QUEUED], source_class=RecordingSource)
    asked(ext)
    for i, gpus in enumerate((8, 4, 4)):
        source.apply(pod_obj(f"g-{i}", gpus, group="g"))
    await settle()
    assert source.bindings == []  # no PodGroup yet: its members wait for it

    source.apply(podgroup_obj("g", 3))
    await settle()
    assert sorted(n for n, _ in source.bindings) == ["default/g-0", "default/g-1", "default/g-2"]
    assert set(carried(source)) == {"g-0", "g-1", "g-2"}
    await ext.stop()


async def test_with_nothing_else_pending_the_gang_is_planned_and_bound_at_its_first_bind() -> None:
    # kube-scheduler reaches a member next: the gang is reserved before that, and the
    # first member's /bind binds it whole. Nothing is bound without a /bind.
    ext, source = await started([QUEUED], source_class=RecordingSource)
    asked(ext)
    source.apply(pod_obj("queued", 1, node="n1"))  # bound: nothing else pending
    create_gang(source, shapes=(8, 4, 4))
    await settle()

    reservation = ext.state.reservation("default/g")
    assert reservation is not None
    assert source.bindings == []
    nodes = {m.pod_key.split("/")[1]: m.node for m in reservation.members}
    assert ext.filter(pod_of(ext, "g-1"), NODES).feasible == (nodes["g-1"],)
    assert await bind(ext, "g-1", nodes["g-1"]) == ""
    assert sorted(n for n, _ in source.bindings) == ["default/g-0", "default/g-1", "default/g-2"]
    assert ext.metrics.registry.get_sample_value("phalanx_members_completed_total") == 2
    await ext.stop()


async def test_switched_off_with_completion_nothing_is_planned_ahead() -> None:
    ext, source = await started([QUEUED], complete_members=False)
    asked(ext)
    create_gang(source, shapes=(8, 4, 4))
    await settle()

    assert ext.state.reservation("default/g") is None
    await ext.stop()


async def test_a_gang_with_a_member_only_kube_scheduler_judges_is_left_to_kube_scheduler() -> None:
    ext, source = await started([QUEUED], source_class=RecordingSource)
    asked(ext)
    source.apply(podgroup_obj("g", 2))
    source.apply(pod_obj("g-0", 4, group="g"))
    source.apply(with_host_port(pod_obj("g-1", 8, group="g")))
    await settle()

    assert ext.state.reservation("default/g") is None
    assert source.bindings == []
    await ext.stop()


async def test_a_gang_that_does_not_fit_is_said_unfit_once_and_nobody_counts_as_refused() -> None:
    ext, source = await started([QUEUED], source_class=RecordingSource)
    asked(ext)
    create_gang(source, size=len(NODES) + 1, gpus=8)  # one member more than there are nodes
    await settle()

    assert ext.state.reservation("default/g") is None
    assert source.bindings == []
    unfit = [e for e in source.events if e[2] == "Unschedulable"]
    assert len(unfit) == 1
    members = [p.ref for p in ext.state.members("default/g")]
    assert ext.planner.parked("default/g", members) == []  # no requeue for a refusal never made
    await ext.stop()


async def test_a_gang_reserved_at_its_first_filter_binds_when_its_last_slot_is_claimed() -> None:
    ext, source = await started([QUEUED], source_class=RecordingSource)
    asked(ext)
    source.apply(podgroup_obj("g", 3))
    source.apply(pod_obj("g-0", 4, group="g"))
    nodes = reserve_all(ext, ["g-0"])  # g-0 and two template slots; g-0 never reaches bind
    source.apply(pod_obj("g-1", 4, group="g"))
    await settle()
    assert source.bindings == []  # a slot is still unclaimed
    source.apply(pod_obj("g-2", 4, group="g"))
    await settle()

    assert sorted(n for n, _ in source.bindings) == ["default/g-0", "default/g-1", "default/g-2"]
    assert dict(source.bindings)["default/g-0"] == nodes["g-0"]
    assert await bind(ext, "g-0", nodes["g-0"]) == ""  # its own /bind, late: a success
    await ext.stop()


async def test_a_binding_that_fails_is_not_retried_from_watch_events() -> None:
    ext, source = await started(
        [QUEUED],
        source_class=RecordingSource,
        failures={"g-2": [BindError("refused", conflict=True)] * 5},
    )
    asked(ext)
    create_gang(source, shapes=(8, 4, 4))
    await settle()
    assert sorted(n for n, _ in source.bindings) == ["default/g-0", "default/g-1"]

    source.apply(pod_obj("late", 1))  # more watch events
    source.apply(pod_obj("later", 1))
    await settle()
    assert len(source.failures["g-2"]) == 4  # tried once; its own /bind takes it from here
    await ext.stop()


async def test_a_phalanx_its_kube_scheduler_has_not_asked_lately_plans_nothing_ahead() -> None:
    # A standby replica: its kube-scheduler does not lead and sends it nothing, while the
    # leader's Phalanx holds reservations this one cannot see.
    clock = FakeClock()
    ext, source = await started([QUEUED], source_class=RecordingSource, clock=clock)
    create_gang(source, shapes=(8, 4, 4))
    await settle()
    assert ext.state.reservation("default/g") is None

    asked(ext)  # it leads now
    clock.now += ACTS_ALONE_SECONDS + 1  # ... and then nothing for a while
    source.apply(podgroup_obj("h", 2))
    source.apply(pod_obj("h-0", 8, group="h"))
    source.apply(pod_obj("h-1", 4, group="h"))
    await settle()
    assert ext.state.reservation("default/h") is None
    assert source.bindings == []
    await ext.stop()


async def test_a_gang_a_commit_record_names_is_left_to_roll_forward() -> None:
    ext, source = await started([QUEUED], source_class=RecordingSource)
    asked(ext)
    source.apply(podgroup_obj("g", 2))
    source.apply(pod_obj("g-0", 8, group="g"))
    # Another replica wrote the record and died before binding anything.
    source.records["default/g"] = CommitRecord("default/g", {"default/g-0": "n1"}, {})
    source.apply(pod_obj("g-1", 4, group="g"))
    await settle()
    assert ext.state.reservation("default/g") is None
    assert source.bindings == []
    await ext.stop()
