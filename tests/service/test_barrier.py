"""The bind barrier under concurrency and partial failure (issue #16): every release answers
held binds at once, a gate releases only its own reservation, every await is followed by a
re-check, and each branch a kube-scheduler or an API server can take is pinned.

These hold binds at the gate, so the gang's other members are left to reach bind themselves
(`complete_members=False`), as members that ask for something only kube-scheduler judges
are; completing the rest of a gang is specified in test_completion.py."""

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping

import pytest
import support
from support import (
    NODES,
    FakeTimers,
    RecordingSource,
    ScriptedSource,
    bind,
    binding,
    gang_objects,
    pod_of,
    reserve_all,
)

from clocks import FakeClock
from phalanx.core.model import Pod
from phalanx.core.rollforward import CommitRecord
from phalanx.service.binder import Binder
from phalanx.service.extender import Extender
from phalanx.sources.base import BindError

pytestmark = pytest.mark.anyio

started = functools.partial(support.started, complete_members=False)


def sample(ext: Extender, name: str, labels: dict[str, str] | None = None) -> float | None:
    return ext.metrics.registry.get_sample_value(name, labels or {})


def assumed(ext: Extender) -> list[str]:
    return [p.key for p in ext.state.pods() if ext.state.assumed_node(p.uid)]


async def held(
    ext: Extender, names: Iterable[str], nodes: Mapping[str, str]
) -> list[asyncio.Task[str]]:
    """Binds of `names` sent and held at the barrier (not yet answered)."""
    tasks = [asyncio.create_task(bind(ext, n, nodes[n])) for n in names]
    await asyncio.sleep(0.01)
    assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]
    return tasks


# ---- defect 1: every release fails the gate, and only its own reservation ----------------


async def test_a_filter_that_expires_the_reservation_answers_the_held_binds_at_once() -> None:
    clock = FakeClock()
    ext, source = await started(gang_objects(size=3, timeout=5), clock=clock, barrier=30)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    [waiting] = await held(ext, ["g-0"], nodes)
    clock.now += 6
    ext.filter(pod_of(ext, "g-1"), NODES)  # expiry runs first, then g-1 re-plans
    error = await asyncio.wait_for(waiting, timeout=1)
    assert "its reservation expired while 1 of 3 member(s) waited at bind" in error
    assert source.bindings == []
    await ext.stop()


async def test_a_gate_that_times_out_never_releases_a_newer_reservation_of_its_gang() -> None:
    clock = FakeClock()
    ext, _ = await started(gang_objects(size=3, timeout=5), clock=clock, barrier=0.2)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    [waiting] = await held(ext, ["g-0"], nodes)
    clock.now += 6
    ext.filter(pod_of(ext, "g-1"), NODES)  # expires the first reservation, makes a new one
    fresh = ext.state.reservation("default/g")
    assert fresh is not None
    assert "expired" in await asyncio.wait_for(waiting, timeout=1)
    await asyncio.sleep(0.3)  # past the first gate's own timeout
    assert ext.state.reservation("default/g") is fresh
    await ext.stop()


@pytest.mark.parametrize(
    ("release", "cause"),
    [
        (lambda ext, src: src.delete_node("n1"), "node n1 was removed"),
        (lambda ext, src: src.delete_group("default/g"), "PodGroup default/g was deleted"),
    ],
    ids=["node-removed", "podgroup-deleted"],
)
async def test_a_release_from_the_cluster_answers_held_binds_with_its_cause(
    release: Callable[[Extender, ScriptedSource], object], cause: str
) -> None:
    ext, source = await started(gang_objects(size=3, gpus=8))
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    [waiting] = await held(ext, ["g-0"], nodes)
    release(ext, source)
    error = await asyncio.wait_for(waiting, timeout=1)
    assert "its reservation was released while 1 of 3 member(s) waited at bind" in error
    assert cause in error
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


async def test_a_re_plan_answers_the_binds_held_for_the_reservation_it_replaced() -> None:
    ext, _ = await started(gang_objects(size=2, gpus=4))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    [waiting] = await held(ext, ["g-0"], nodes)
    refused = nodes["g-1"]
    ext.filter(pod_of(ext, "g-1"), [n for n in NODES if n != refused])
    error = await asyncio.wait_for(waiting, timeout=1)
    assert f"kube-scheduler did not offer node {refused}" in error
    await ext.stop()


# ---- where the commit record goes ---------------------------------------------------------


async def test_a_short_record_rides_on_every_binding_and_nothing_is_written_apart() -> None:
    ext, source = await started(gang_objects(size=3, gpus=8), complete_members=False)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", "", ""]
    assert sorted(source.order) == ["bind g-0", "bind g-1", "bind g-2"]  # one write each
    members = {f"default/{n}": node for n, node in nodes.items()}
    assert {n: dict(r.placements) for n, r in source.carried.items()} == dict.fromkeys(
        nodes, members
    )
    assert {r.pod_uids[f"default/{n}"] for n, r in source.carried.items()} == {
        pod_of(ext, n).uid for n in nodes
    }
    steps = "phalanx_gang_bind_step_seconds"
    assert sample(ext, f"{steps}_count", {"step": "record"}) is None  # no write to time
    assert sample(ext, f"{steps}_count", {"step": "bindings"}) == 1
    await ext.stop()


async def test_a_record_too_long_for_the_bindings_is_written_before_the_first_of_them() -> None:
    ext, source = await started(gang_objects(size=3, gpus=8), carried_record_bytes=100)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", "", ""]
    assert source.order[0] == "commit default/g"
    assert sorted(source.order[1:]) == ["bind g-0", "bind g-1", "bind g-2"]
    assert source.carried == {}
    assert set(source.records["default/g"].placements) == {f"default/{n}" for n in nodes}
    await ext.stop()


# ---- defect 2: the commit-record window ------------------------------------------------
# A record too long for the gang's bindings to carry is written before them, and the await
# is a window; `carried_record_bytes=0` makes every record such a one.


async def test_a_member_deleted_during_the_commit_record_write_binds_and_assumes_nothing() -> None:
    ext, source = await started(
        gang_objects(size=2), source_class=RecordingSource, carried_record_bytes=0
    )
    assert isinstance(source, RecordingSource)  # (a partial of `started` loses its overloads)
    nodes = reserve_all(ext, ["g-0", "g-1"])
    source.on("commit", lambda: source.delete_pod(pod_of(ext, "g-1").uid))
    results = await asyncio.wait_for(
        asyncio.gather(*(bind(ext, n, nodes[n]) for n in ("g-0", "g-1"))), timeout=2
    )
    assert "only 1 of 2 member(s) still bindable after re-check" in results[0]
    assert "pod default/g-1 no longer exists" in results[1]
    assert source.bindings == []
    assert assumed(ext) == []
    assert ext.state.reserved_gpus() == 0
    await asyncio.sleep(0)
    assert source.cleared == ["default/g"]  # the record of a gang that never bound is taken back
    await ext.stop()


async def test_a_reservation_expiring_while_the_commit_record_is_written_never_overcommits() -> (
    None
):
    clock = FakeClock()
    objects = gang_objects(size=2, gpus=8, timeout=30) + gang_objects(name="h", size=3, gpus=8)
    ext, source = await started(objects, clock=clock, carried_record_bytes=0)
    nodes = reserve_all(ext, ["g-0", "g-1"])

    def expire_and_let_another_gang_in() -> None:
        clock.now += 31
        ext.expire()
        assert ext.filter(pod_of(ext, "h-0"), NODES).feasible  # h takes the freed GPUs

    source.on("commit", expire_and_let_another_gang_in)
    results = await asyncio.wait_for(
        asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)), timeout=2
    )
    # The gate is still open while its record is written, so the release answers it at once.
    assert all("its reservation expired while 2 of 2" in r for r in results), results
    assert ext.state.overcommitted_nodes() == []
    assert source.bindings == []
    assert assumed(ext) == []
    await ext.stop()


async def test_an_exception_inside_the_barrier_answers_every_waiter_and_leaves_nothing_assumed() -> (  # noqa: E501
    None
):
    ext, source = await started(gang_objects(size=2))
    nodes = reserve_all(ext, ["g-0", "g-1"])

    class BrokenBinder(Binder):  # a collaborator with a bug: the barrier must survive it
        async def bind_assumed(
            self, pod: Pod, node: str, *, record: CommitRecord | None = None
        ) -> str:
            raise RuntimeError("bug in the binder")

    ext.barrier.binder = BrokenBinder(ext.state, source, ext.metrics)
    results = await asyncio.wait_for(
        asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)), timeout=2
    )
    assert all("internal error at the bind barrier" in r for r in results)
    assert assumed(ext) == []
    assert ext.state.reservation("default/g") is None
    assert source.bindings == []
    await ext.stop()


# ---- the branches, one by one ----------------------------------------------------------


async def test_a_member_re_sent_after_its_timeout_replaces_the_old_waiter_and_the_gang_binds_once() -> (  # noqa: E501
    None
):
    ext, source = await started(gang_objects(size=2))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    [old] = await held(ext, ["g-0"], nodes)
    again = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    assert "a newer bind request for pod default/g-0 replaced this one" in await old
    assert await bind(ext, "g-1", nodes["g-1"]) == ""
    assert await again == ""
    assert sorted(source.bindings) == sorted((f"default/{n}", nodes[n]) for n in nodes)
    await ext.stop()


async def test_the_same_pod_bound_twice_is_success_on_its_node_and_refused_elsewhere() -> None:
    ext, source = await started(gang_objects(size=2))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", ""]
    assert await bind(ext, "g-0", nodes["g-0"]) == ""
    other = next(n for n in NODES if n != nodes["g-0"])
    assert f"is already bound to {nodes['g-0']}" in await bind(ext, "g-0", other)
    assert len(source.bindings) == 2
    await ext.stop()


async def test_a_bind_to_another_node_than_the_reserved_one_is_refused() -> None:
    ext, source = await started(gang_objects(size=2))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    other = next(n for n in NODES if n != nodes["g-0"])
    error = await bind(ext, "g-0", other)
    assert f"gang default/g reserved {nodes['g-0']} for pod default/g-0, not {other}" in error
    assert source.bindings == []
    assert ext.state.reservation("default/g") is not None  # nothing given up for a wrong node
    await ext.stop()


async def test_two_gangs_interleaving_at_the_barrier_each_bind_whole() -> None:
    objects = gang_objects(name="a", size=2, gpus=4) + gang_objects(name="b", size=2, gpus=4)
    ext, source = await started(objects, yielding=True)
    nodes = reserve_all(ext, ["a-0", "a-1", "b-0", "b-1"])
    order = ["a-0", "b-0", "b-1", "a-1"]
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in order))
    assert results == ["", "", "", ""]
    assert len(source.bindings) == 4
    assert ext.partial_gangs() == []
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


async def test_a_late_member_joins_after_the_gate_opened_and_binds_at_once() -> None:
    ext, source = await started(gang_objects(size=3, gpus=4, min_member=2))
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    late = []
    # While the quorum's first binding is in flight, the third member's bind arrives.
    source.on("bind", lambda: late.append(asyncio.ensure_future(bind(ext, "g-2", nodes["g-2"]))))
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in ("g-0", "g-1"))) == ["", ""]
    assert await late[0] == ""
    assert len(source.bindings) == 3
    assert ext.partial_gangs() == []
    await ext.stop()


async def test_a_permanent_conflict_is_not_retried_is_forgotten_reported_and_counted_partial() -> (
    None
):
    conflict = BindError("pod is already assigned to node n9", conflict=True)
    ext, source = await started(gang_objects(size=2, gpus=4), failures={"g-1": [conflict]})
    nodes = reserve_all(ext, ["g-0", "g-1"])
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    assert results[0] == ""
    assert "already assigned" in results[1]
    assert source.failures["g-1"] == []  # tried once: a conflict is never retried
    assert ext.state.assumed_node(pod_of(ext, "g-1").uid) is None
    assert sample(ext, "phalanx_bindings_total", {"result": "conflict"}) == 1
    assert ext.partial_gangs() == ["default/g"]
    assert sample(ext, "phalanx_partial_gangs") == 1
    assert sample(ext, "phalanx_gang_decisions_total", {"result": "unfit"}) == 1
    await ext.stop()


async def test_retries_exhausted_answer_the_error_and_forget_the_pod() -> None:
    flaky = [BindError("etcd timeout")] * 3
    ext, _ = await started(gang_objects(size=2, gpus=4), failures={"g-1": flaky}, retries=2)
    nodes = reserve_all(ext, ["g-0", "g-1"])
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    assert "etcd timeout" in results[1]
    assert ext.state.assumed_node(pod_of(ext, "g-1").uid) is None
    assert sample(ext, "phalanx_bindings_total", {"result": "failed"}) == 1
    await ext.stop()


async def test_a_failed_commit_record_write_binds_nothing_and_says_so() -> None:
    ext, source = await started(gang_objects(size=2), carried_record_bytes=0)
    source.commit_failures.append(RuntimeError("the API server is gone"))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    assert all("could not write the commit record" in r for r in results)
    assert all("nothing was bound" in r for r in results)
    assert source.bindings == []
    assert assumed(ext) == []
    assert ext.state.reservation("default/g") is None
    await ext.stop()


async def test_an_opened_gate_times_its_commit_record_and_then_its_bindings() -> None:
    clock = FakeClock()
    ext, source = await started(gang_objects(size=2), clock=clock, carried_record_bytes=0)
    source.on("commit", lambda: setattr(clock, "now", clock.now + 0.25))
    source.on("bind", lambda: setattr(clock, "now", clock.now + 0.5))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", ""]
    steps = "phalanx_gang_bind_step_seconds"
    assert sample(ext, f"{steps}_count", {"step": "record"}) == 1
    assert sample(ext, f"{steps}_sum", {"step": "record"}) == pytest.approx(0.25)
    assert sample(ext, f"{steps}_sum", {"step": "bindings"}) == pytest.approx(0.5)
    await ext.stop()


async def test_a_bind_for_an_unknown_uid_or_pod_is_refused_before_any_gate() -> None:
    ext, _ = await started(gang_objects(size=2))
    reserve_all(ext, ["g-0", "g-1"])
    assert "is unknown to Phalanx" in await ext.bind(binding("ghost", "n1"))
    assert "it was recreated" in await ext.bind(binding("g-0", "n1", uid="stale"))
    assert sample(ext, "phalanx_barrier_waiting") == 0
    await ext.stop()


# ---- configuration guard ---------------------------------------------------------------


async def test_a_schedule_timeout_below_the_barrier_timeout_is_warned_about_once() -> None:
    ext, source = await started(gang_objects(size=2, timeout=5), barrier=10)
    for _ in range(2):
        reserve_all(ext, ["g-0", "g-1"])
        ext.state.release("default/g")
    await asyncio.sleep(0)
    warnings = [e for e in source.events if e[2] == "ScheduleTimeoutBelowBarrier"]
    assert len(warnings) == 1
    assert "scheduleTimeoutSeconds 5 is below the bind barrier timeout of 10s" in warnings[0][3]
    await ext.stop()


# ---- a gang that takes longer to reach bind than one /bind may be held ----------------------


async def arrive(
    ext: Extender,
    timers: FakeTimers,
    clock: FakeClock,
    name: str,
    nodes: Mapping[str, str],
    seconds: float,
) -> asyncio.Task[str]:
    """`name`'s bind sent, then `seconds` pass on the test's clock (timers due fire)."""
    task = asyncio.create_task(bind(ext, name, nodes[name]))
    await asyncio.sleep(0)
    clock.now += seconds
    timers.fire_due()
    await asyncio.sleep(0)
    return task


async def test_members_arriving_past_the_timeout_are_parked_counted_and_bound_with_the_gang() -> (
    None
):
    clock = FakeClock()
    timers = FakeTimers(clock)
    objects = gang_objects(size=4, gpus=2, timeout=30)
    ext, source = await started(objects, barrier=20, clock=clock, timers=timers)
    names = ["g-0", "g-1", "g-2", "g-3"]
    nodes = reserve_all(ext, names)
    # Each arrives 15 s after the one before: 45 s in all, the timeout is 20 s.
    tasks = [await arrive(ext, timers, clock, n, nodes, 15) for n in names[:3]]
    parked = await asyncio.wait_for(tasks[0], timeout=1)
    assert "2 of 4 member(s) have reached bind and more are arriving" in parked
    assert "pod default/g-0 stays counted on" in parked
    [gate] = ext.barrier.held()
    assert [b.pod.name for b in gate.parked] == ["g-0", "g-1"]  # each held 20 s
    assert source.bindings == []
    assert await bind(ext, "g-3", nodes["g-3"]) == ""
    assert await tasks[2] == ""
    # g-0's and g-1's requests were answered long ago; they are bound with their gang.
    assert sorted(source.bindings) == sorted((f"default/{n}", nodes[n]) for n in names)
    assert ext.partial_gangs() == []
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


async def test_each_new_member_at_bind_gives_the_reservation_the_gangs_timeout_again() -> None:
    clock = FakeClock()
    timers = FakeTimers(clock)
    ext, _ = await started(gang_objects(size=3, timeout=30), barrier=20, clock=clock, timers=timers)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    reserved_at = clock.now
    await arrive(ext, timers, clock, "g-0", nodes, 18)
    await arrive(ext, timers, clock, "g-1", nodes, 18)
    # Past the original deadline (reserved + 30 s), the gang still holds its reservation.
    reservation = ext.state.reservation("default/g")
    assert reservation is not None
    assert reservation.expires_at == reserved_at + 18 + 30
    ext.expire()
    assert ext.state.reservation("default/g") is reservation
    await ext.stop()


async def test_a_member_sent_again_is_not_progress_and_the_stalled_gang_is_given_up() -> None:
    clock = FakeClock()
    timers = FakeTimers(clock)
    ext, source = await started(gang_objects(size=3), barrier=20, clock=clock, timers=timers)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    first = await arrive(ext, timers, clock, "g-0", nodes, 10)
    again = await arrive(ext, timers, clock, "g-0", nodes, 10)  # 20 s since the last new one
    assert "replaced this one" in await first
    assert "only 1 of 3 member(s) reached bind within 20s of the last one" in await again
    assert ext.state.reservation("default/g") is None
    assert source.bindings == []
    await ext.stop()
