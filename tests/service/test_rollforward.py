"""Roll-forward carried out (issue #16, item 4): the real `RollForward`, built from a started
extender's parts, over a source that keeps commit records, on the test's clocks.

What a dead instance leaves behind is written straight into the source (its commit record,
and any bindings it issued); the pass under test then decides and acts on it.
"""

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from support import (
    NODES,
    RecordingSource,
    bind,
    binding,
    gang_objects,
    pod_of,
    reserve_all,
    started,
)

from builders import node_obj, pod_obj, podgroup_obj
from clocks import Clocks
from phalanx.core.cache import Released
from phalanx.core.journal import Outcome
from phalanx.core.rollforward import CommitRecord, Decision, Verdict
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.service.rollforward import RollForward, RollForwardSettings
from phalanx.sources.base import BindError

pytestmark = pytest.mark.anyio

KEY = "default/g"
GRACE = 15.0
# The extender's own roll-forward task never acts during a test: only the pass under test does.
IDLE = RollForwardSettings(interval_seconds=3600, grace_seconds=3600)


async def extender(
    objects: list[dict[str, Any]], clocks: Clocks, **kw: Any
) -> tuple[Extender, RecordingSource]:
    return await started(
        objects, clock=clocks.mono, source_class=RecordingSource, roll_forward=IDLE, **kw
    )


def roller(
    ext: Extender, source: RecordingSource, clocks: Clocks, grace: float = GRACE
) -> RollForward:
    """A roll-forward of the extender's own parts (as `Extender.__init__` builds it)."""
    return RollForward(
        ext.state,
        ext.planner,
        ext.binder,
        ext.reporter,
        source=source,
        settings=RollForwardSettings(interval_seconds=3600, grace_seconds=grace),
        synced=lambda: source.synced,
        clock=clocks.mono,
        wall_clock=clocks.wall,
    )


def write(
    ext: Extender, source: RecordingSource, placements: Mapping[str, str], at: str = ""
) -> None:
    """The commit record a barrier wrote for gang g: member name -> node."""
    source.records[KEY] = CommitRecord(
        KEY,
        {f"default/{n}": node for n, node in placements.items()},
        {f"default/{n}": pod_of(ext, n).uid for n in placements},
        at,
    )


async def bound_by_the_dead_instance(
    ext: Extender, source: RecordingSource, name: str, node: str
) -> None:
    await source.bind(binding(name, node, uid=pod_of(ext, name).uid))


def verdicts(decisions: Iterable[Decision]) -> list[Verdict]:
    return [d.verdict for d in decisions]


def last_outcome(ext: Extender) -> Outcome | None:
    return ext.planner.journal.record(KEY).last_outcome


async def events_settled(
    source: RecordingSource, reason: str
) -> list[tuple[str, str, str, str, str, bool]]:
    await asyncio.sleep(0)  # Events are written by background tasks
    return [e for e in source.events if e[2] == reason]


# ---- the grace period --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written_seconds_ago", "due_after"),
    [
        (None, GRACE),
        (0.0, GRACE),
        (GRACE - 5, 5.0),
        (GRACE, 0.0),
        ("yesterday", GRACE),
    ],
    ids=[
        "no-write-time:-grace-after-first-seen",
        "written-just-now:-grace-after-both",
        "written-a-while-ago:-grace-after-its-write",
        "written-a-grace-ago:-due-at-once",
        "unreadable-write-time:-grace-after-first-seen",
    ],
)
async def test_a_record_is_left_to_its_barrier_until_the_grace_has_passed(
    written_seconds_ago: float | str | None, due_after: float
) -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=8), clocks)
    if written_seconds_ago is None:
        at = ""
    elif isinstance(written_seconds_ago, str):
        at = written_seconds_ago
    else:
        at = clocks.rfc3339(written_seconds_ago)
    write(ext, source, {"g-0": "n1", "g-1": "n2"}, at=at)
    rf = roller(ext, source, clocks)

    if due_after > 0:
        assert await rf.run_once() == []  # first seen now: younger than the grace
        clocks.advance(due_after - 1)
        assert await rf.run_once() == []  # still a second short
        assert source.bindings == []
        assert ext.state.assumed_node(pod_of(ext, "g-0").uid) is None
        clocks.advance(1)
    assert verdicts(await rf.run_once()) == [Verdict.ROLL_FORWARD]
    assert sorted(source.bindings) == [("default/g-0", "n1"), ("default/g-1", "n2")]
    await ext.stop()


async def test_the_grace_counts_from_first_sight_by_this_instance_not_from_each_pass() -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=8), clocks)
    write(ext, source, {"g-0": "n1", "g-1": "n2"})
    rf = roller(ext, source, clocks)
    for _ in range(3):  # passes in between do not restart the grace
        assert await rf.run_once() == []
        clocks.advance(GRACE / 3 - 0.01)
    clocks.advance(0.03)
    assert verdicts(await rf.run_once()) == [Verdict.ROLL_FORWARD]
    await ext.stop()


# ---- a record the bindings carried ------------------------------------------------------


async def test_a_gang_whose_binding_failed_is_finished_from_the_record_a_bound_member_carries() -> (
    None
):
    clocks = Clocks()
    refused = BindError("the API server is overloaded")
    ext, source = await extender(
        gang_objects(size=2, gpus=8), clocks, failures={"g-1": [refused]}, retries=0
    )
    nodes = reserve_all(ext, ["g-0", "g-1"])
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    assert results[0] == ""
    assert "overloaded" in results[1]
    assert source.bindings == [("default/g-0", nodes["g-0"])]  # partial: g-0 carries the record
    assert set(source.carried) == {"g-0"}

    (decision,) = await roller(ext, source, clocks, grace=0.0).run_once()

    assert decision.verdict is Verdict.ROLL_FORWARD, decision.reason
    assert sorted(source.bindings) == sorted((f"default/{n}", nodes[n]) for n in nodes)
    assert ext.partial_gangs() == []
    await ext.stop()


# ---- the grace of a record a crash left: its nodes are held -----------------------------


async def restarted_over_a_cut_gang(
    clocks: Clocks, *, big: bool = True, nominate_members: bool = True, lease_held: bool = True
) -> tuple[Extender, RecordingSource]:
    """A fresh instance over what a crash left: gang g (3 of 3 members of 4 GPUs) cut after
    2 of its 3 bindings, whose record sends g-2 to n2; n3 is full; a pod of 8 GPUs waits
    (unless not `big`: then nothing pending outside the gang, and nominating pays). Not
    `lease_held`: a standby, or an instance whose Lease is not yet its own."""
    objects = [
        *(node_obj(n) for n in NODES),
        podgroup_obj("g", 3),
        pod_obj("g-0", 4, group="g", node="n1", phase="Running"),
        pod_obj("g-1", 4, group="g", node="n1", phase="Running"),
        pod_obj("g-2", 4, group="g"),
        pod_obj("other-job", 8, node="n3", phase="Running"),
        *([pod_obj("big", 8)] if big else []),
    ]
    source = RecordingSource(objects)
    source.lease_held = lease_held
    placements = {"g-0": "n1", "g-1": "n1", "g-2": "n2"}
    source.records[KEY] = CommitRecord(
        KEY,
        {f"default/{n}": node for n, node in placements.items()},
        {f"default/{n}": f"uid-default-{n}" for n in placements},
        clocks.rfc3339(0),
    )
    ext = Extender(
        source,
        ServiceSettings(
            bind_retry_backoff_seconds=0.0,
            roll_forward=RollForwardSettings(interval_seconds=3600, grace_seconds=GRACE),
            nominate_members=nominate_members,
        ),
        clock=clocks.mono,
        wall_clock=clocks.wall,
    )
    await ext.start()
    return ext, source


async def test_a_restarted_instance_holds_the_node_a_record_names_so_no_other_pod_takes_it() -> (
    None
):
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks)

    # Before, kube-scheduler's cycle of `big` got n2 during the grace, and g stayed 2 of 3.
    assert ext.filter(pod_of(ext, "big"), NODES).feasible == ()
    assert ext.filter(pod_of(ext, "g-2"), NODES).feasible == ("n2",)
    assert await bind(ext, "g-2", "n2") == ""
    assert ("default/g-2", "n2") in source.bindings
    assert ext.partial_gangs() == []
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


async def test_the_hold_is_the_gangs_reserved_decision_in_its_journal_and_events() -> None:
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks)

    assert last_outcome(ext) is Outcome.COMMITTED
    (event,) = await events_settled(source, "Reserved")
    assert event[3] == "reserved 1 member(s) on n2, as its commit record names"
    await ext.stop()


async def test_a_held_member_kube_scheduler_does_not_reach_is_rolled_forward_once_due() -> None:
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks)
    assert ext.filter(pod_of(ext, "big"), NODES).feasible == ()
    assert ext.roll_forward is not None

    clocks.advance(GRACE)
    (decision,) = await ext.roll_forward.run_once()

    assert decision.verdict is Verdict.ROLL_FORWARD, decision.reason
    assert source.bindings == [("default/g-2", "n2")]
    assert ext.state.reservation(KEY) is None
    assert ext.state.reserved_gpus() == 0
    assert ext.filter(pod_of(ext, "big"), NODES).feasible == ()  # nothing is free now
    await ext.stop()


# ---- the hold's members are nominated, as a fresh reservation's are ---------------------


@pytest.mark.parametrize(
    ("big", "nominate_members", "nominated"),
    [
        pytest.param(False, True, {"default/g-2": "n2"}, id="nominated-to-the-held-node"),
        pytest.param(True, True, {}, id="behind-a-backlog:-requeued-only"),
        pytest.param(False, False, {}, id="nominations-off:-requeued-only"),
    ],
)
async def test_a_hold_nominates_its_pending_member_to_the_held_node_where_that_pays(
    big: bool, nominate_members: bool, nominated: dict[str, str]
) -> None:
    # Before, kube-scheduler left a member it had parked before the restart parked until its
    # own retry, and counted the held node free for everyone else (preemption included).
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(
        clocks, big=big, nominate_members=nominate_members
    )
    await asyncio.sleep(0)  # nominations and requeues are written by background tasks

    assert source.nominated == nominated
    # Pending when this instance synced: whoever refused it, it may be parked.
    assert source.requeued == ["default/g-2"]
    await ext.stop()


async def test_a_hold_made_without_the_duty_is_nominated_by_the_first_pass_that_has_it() -> None:
    # A standby's nominations would be withdrawn when its hold lapses, clearing the leader's.
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks, big=False, lease_held=False)
    assert ext.roll_forward is not None
    await asyncio.sleep(0)
    assert ext.state.reservation(KEY) is not None  # held all the same: who leads is unknown
    assert source.nominated == {}
    assert source.requeued == []

    source.lease_held = True
    assert await ext.roll_forward.run_once() == []  # within the grace: nothing due
    await asyncio.sleep(0)
    assert source.nominated == {"default/g-2": "n2"}
    assert source.requeued == ["default/g-2"]
    await ext.roll_forward.run_once()  # once only
    await asyncio.sleep(0)
    assert source.requeued == ["default/g-2"]
    await ext.stop()


async def test_a_hold_that_lapsed_before_the_duty_came_is_not_nominated() -> None:
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks, big=False, lease_held=False)
    assert ext.roll_forward is not None
    hold = ext.state.reservation(KEY)
    assert hold is not None
    clocks.advance(hold.expires_at - clocks.mono.now + 1)
    ext.expire()
    assert ext.state.reservation(KEY) is None

    source.lease_held = True
    (decision,) = await ext.roll_forward.run_once()  # the record is due: bound, not held
    await asyncio.sleep(0)

    assert decision.verdict is Verdict.ROLL_FORWARD, decision.reason
    assert source.bindings == [("default/g-2", "n2")]
    assert source.nominated == {}
    await ext.stop()


async def test_a_hold_that_expires_withdraws_its_nomination() -> None:
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks, big=False)
    reservation = ext.state.reservation(KEY)
    assert reservation is not None

    clocks.advance(reservation.expires_at - clocks.mono.now + 1)
    ext.expire()
    await asyncio.sleep(0)

    assert ext.state.reservation(KEY) is None
    assert source.nominated == {"default/g-2": ""}
    await ext.stop()


async def test_a_hold_that_roll_forward_releases_withdraws_its_nomination() -> None:
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks, big=False)
    assert ext.roll_forward is not None
    cordon_node(source, "n2")

    clocks.advance(GRACE)
    (decision,) = await ext.roll_forward.run_once()
    await asyncio.sleep(0)

    assert decision.verdict is Verdict.RELEASE, decision.reason
    assert ext.state.reservation(KEY) is None
    assert source.nominated == {"default/g-2": ""}
    await ext.stop()


async def test_a_hold_its_gang_binds_through_leaves_no_nomination_to_withdraw() -> None:
    clocks = Clocks()
    ext, source = await restarted_over_a_cut_gang(clocks, big=False)
    assert ext.filter(pod_of(ext, "g-2"), NODES).feasible == ("n2",)
    assert await bind(ext, "g-2", "n2") == ""
    await asyncio.sleep(0)

    assert ext.partial_gangs() == []
    assert source.nominated == {"default/g-2": "n2"}  # set once, never cleared
    ext.refresh_statuses()
    assert ext.reporter._nominated == {}  # noqa: SLF001  # nothing kept for bound pods
    await ext.stop()


# ---- the record wins -------------------------------------------------------------------


async def test_the_record_wins_over_a_reservation_of_the_gang_pointing_elsewhere() -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=4), clocks)
    reserved = reserve_all(ext, ["g-0", "g-1"])
    elsewhere = next(n for n in reversed(NODES) if n not in reserved.values())
    held = asyncio.create_task(bind(ext, "g-0", reserved["g-0"]))
    await asyncio.sleep(0)
    write(ext, source, {"g-0": elsewhere, "g-1": elsewhere})

    (decision,) = await roller(ext, source, clocks, grace=0.0).run_once()

    assert decision.verdict is Verdict.ROLL_FORWARD
    error = await asyncio.wait_for(held, timeout=1)
    assert "its reservation was released while 1 of 2 member(s) waited at bind" in error
    assert "its commit record wins" in error
    assert sorted(source.bindings) == [("default/g-0", elsewhere), ("default/g-1", elsewhere)]
    assert ext.state.reservation(KEY) is None
    assert ext.state.reserved_gpus() == 0
    assert ext.state.overcommitted_nodes() == []
    assert last_outcome(ext) is Outcome.ROLLED_FORWARD
    (event,) = await events_settled(source, "RolledForward")
    assert event[3] == "bound 2 member(s) to the nodes in the commit record"
    await ext.stop()


async def test_the_record_wins_even_when_it_swaps_the_nodes_the_gang_reserved() -> None:
    """The gang's own reservation is released first, so the record's nodes are free for it."""
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=8), clocks)
    reserved = reserve_all(ext, ["g-0", "g-1"])
    swapped = {"g-0": reserved["g-1"], "g-1": reserved["g-0"]}
    write(ext, source, swapped)

    (decision,) = await roller(ext, source, clocks, grace=0.0).run_once()

    assert decision.verdict is Verdict.ROLL_FORWARD, decision.reason
    assert sorted(source.bindings) == sorted((f"default/{n}", node) for n, node in swapped.items())
    assert ext.state.reserved_gpus() == 0
    assert ext.state.overcommitted_nodes() == []
    await ext.stop()


async def test_a_reservation_that_agrees_with_the_record_is_bound_through_not_released() -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=4), clocks)
    reserved = reserve_all(ext, ["g-0", "g-1"])
    write(ext, source, reserved)
    releases: list[Released] = []
    listener = ext.state.on_release
    assert listener is not None

    def kept_and_told(released: Released) -> None:
        releases.append(released)
        listener(released)

    ext.state.on_release = kept_and_told

    (decision,) = await roller(ext, source, clocks, grace=0.0).run_once()

    assert decision.verdict is Verdict.ROLL_FORWARD
    assert releases == []  # its members were assumed out of the reservation they held
    assert sorted(source.bindings) == sorted((f"default/{n}", node) for n, node in reserved.items())
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


# ---- a record that cannot be carried out -------------------------------------------------


def remove_node(source: RecordingSource, node: str) -> None:
    source.delete_node(node)


def fill_node(source: RecordingSource, node: str) -> None:
    source.apply(pod_obj("squatter", 8, node=node, phase="Running", group=None))


def cordon_node(source: RecordingSource, node: str) -> None:
    source.apply(node_obj(node, unschedulable=True))


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (remove_node, "recorded node {node} of pod default/g-1 is gone"),
        (fill_node, "recorded node {node} no longer has room (insufficient nvidia.com/gpu)"),
        (cordon_node, "recorded node {node} of pod default/g-1 is cordoned"),
    ],
    ids=["node-gone", "node-full", "node-cordoned"],
)
async def test_a_recorded_node_that_cannot_take_its_member_releases_the_gang_and_binds_nothing(
    spoil: Callable[[RecordingSource, str], None], why: str
) -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=4), clocks)
    reserved = reserve_all(ext, ["g-0", "g-1"])
    recorded = next(n for n in reversed(NODES) if n not in reserved.values())
    first = next(n for n in NODES if n != recorded)
    write(ext, source, {"g-0": first, "g-1": recorded})
    spoil(source, recorded)

    (decision,) = await roller(ext, source, clocks, grace=0.0).run_once()

    assert decision.verdict is Verdict.RELEASE
    assert why.format(node=recorded) in decision.reason
    assert decision.reason.endswith("the gang will be re-planned")
    assert source.bindings == []
    assert [p.key for p in ext.state.pods() if ext.state.assumed_node(p.uid)] == []
    assert ext.state.reservation(KEY) is None
    assert ext.state.reserved_gpus() == 0
    assert source.cleared == [KEY]
    assert KEY not in source.records
    assert last_outcome(ext) is Outcome.RELEASED
    (event,) = await events_settled(source, "ReservationReleased")
    assert event[:4] == ("PodGroup", KEY, "ReservationReleased", decision.reason)
    await ext.stop()


async def test_a_record_of_a_gang_being_deleted_before_any_binding_binds_nothing() -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=4), clocks)
    write(ext, source, {"g-0": "n1", "g-1": "n2"})
    held = podgroup_obj("g", 2)
    held["metadata"] |= {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x/y"]}
    source.apply(held)

    (decision,) = await roller(ext, source, clocks, grace=0.0).run_once()

    assert decision.verdict is Verdict.RELEASE
    assert decision.reason.startswith("PodGroup default/g is being deleted (gang default/g)")
    assert source.bindings == []
    assert source.cleared == [KEY]
    await ext.stop()


async def test_after_a_release_the_gang_plans_afresh() -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=4), clocks)
    write(ext, source, {"g-0": "n1", "g-1": "n9"})
    (decision,) = await roller(ext, source, clocks, grace=0.0).run_once()
    assert decision.verdict is Verdict.RELEASE
    nodes = reserve_all(ext, ["g-0", "g-1"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", ""]
    assert ext.partial_gangs() == []
    await ext.stop()


# ---- the lease --------------------------------------------------------------------------


async def test_an_instance_without_the_lease_leaves_every_record_alone() -> None:
    clocks = Clocks()
    objects = gang_objects(size=2, gpus=8) + gang_objects(name="done", size=1, gpus=1)
    ext, source = await extender(objects, clocks)
    write(ext, source, {"g-0": "n1", "g-1": "n2"}, at=clocks.rfc3339(GRACE * 10))
    await bound_by_the_dead_instance(ext, source, "done-0", "n3")
    source.records["default/done"] = CommitRecord(
        "default/done", {"default/done-0": "n3"}, {}, clocks.rfc3339(GRACE * 10)
    )
    already = list(source.bindings)
    source.lease_held = False
    rf = roller(ext, source, clocks)

    clocks.advance(GRACE * 2)
    assert await rf.run_once() == []
    assert source.bindings == already
    assert source.cleared == []
    assert sorted(source.records) == ["default/done", KEY]

    source.lease_held = True  # the same pass, once this instance holds the duty
    assert sorted(verdicts(await rf.run_once())) == [Verdict.COMPLETE, Verdict.ROLL_FORWARD]
    await ext.stop()


# ---- complete, and vanished members ------------------------------------------------------


async def test_a_gang_whose_recorded_members_are_all_bound_has_its_record_cleared() -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=2, gpus=8), clocks)
    write(ext, source, {"g-0": "n1", "g-1": "n2"})
    for name, node in (("g-0", "n1"), ("g-1", "n2")):
        await bound_by_the_dead_instance(ext, source, name, node)
    already = list(source.bindings)
    rf = roller(ext, source, clocks, grace=0.0)

    (decision,) = await rf.run_once()

    assert decision.verdict is Verdict.COMPLETE
    assert decision.bound == 2
    assert source.cleared == [KEY]
    assert source.records == {}
    assert source.bindings == already
    assert await rf.run_once() == []
    await ext.stop()


def delete(ext: Extender, source: RecordingSource, name: str) -> None:
    source.delete_pod(pod_of(ext, name).uid)


def recreate(ext: Extender, source: RecordingSource, name: str) -> None:
    delete(ext, source, name)
    source.apply(pod_obj(name, 8, group="g", uid=f"{name}-again"))


@pytest.mark.parametrize("vanish", [delete, recreate], ids=["deleted", "recreated-with-a-new-uid"])
async def test_a_vanished_member_is_skipped_and_the_rest_roll_forward(
    vanish: Callable[[Extender, RecordingSource, str], None],
) -> None:
    clocks = Clocks()
    ext, source = await extender(gang_objects(size=3, gpus=8, min_member=2), clocks)
    write(ext, source, {"g-0": "n1", "g-1": "n2", "g-2": "n3"})
    vanish(ext, source, "g-2")
    rf = roller(ext, source, clocks, grace=0.0)

    (decision,) = await rf.run_once()

    assert decision.verdict is Verdict.ROLL_FORWARD
    assert decision.vanished == ("default/g-2",)
    assert sorted(source.bindings) == [("default/g-0", "n1"), ("default/g-1", "n2")]
    assert last_outcome(ext) is Outcome.ROLLED_FORWARD
    assert ext.planner.journal.record(KEY).last_reason == (
        "bound 2 member(s) to the nodes in the commit record"
    )
    assert ext.partial_gangs() == []

    (done,) = await rf.run_once()
    assert done.verdict is Verdict.COMPLETE
    assert done.vanished == ("default/g-2",)
    assert source.cleared == [KEY]
    await ext.stop()
