"""The extender service: gang reservation through filter, the bind barrier, expiry, metrics."""

import asyncio

import pytest
from support import (
    NODES,
    ScriptedSource,
    bind,
    carried,
    gang_objects,
    group_view,
    pod_of,
    reserve_all,
    started,
)

from builders import node_obj, pod_obj, podgroup_obj
from clocks import FakeClock
from phalanx.core.decisions import FilterResult
from phalanx.core.inventory import parse_node, parse_pod
from phalanx.core.model import Binding, PodRef
from phalanx.service.extender import NOT_SYNCED
from phalanx.service.reporter import NOMINATION_COST
from phalanx.sources.base import BindError, StateSink

pytestmark = pytest.mark.anyio


async def test_the_barrier_holds_binds_until_the_whole_gang_arrives_then_binds_all() -> None:
    ext, source = await started(gang_objects(size=3), complete_members=False)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    first = [asyncio.create_task(bind(ext, n, nodes[n])) for n in ("g-0", "g-1")]
    await asyncio.sleep(0.05)
    assert not any(t.done() for t in first)
    assert source.bindings == []
    assert ext.metrics.registry.get_sample_value("phalanx_barrier_waiting") == 2
    last = await bind(ext, "g-2", nodes["g-2"])
    assert last == ""
    assert await asyncio.gather(*first) == ["", ""]
    assert sorted(source.bindings) == sorted((f"default/{n}", nodes[n]) for n in nodes)
    # Every binding carries the gang's commit record: no member is bound without it.
    assert carried(source) == {n: {f"default/{m}" for m in nodes} for n in nodes}
    assert ext.state.reserved_gpus() == 0
    assert ext.partial_gangs() == []
    await ext.stop()


async def test_a_barrier_that_times_out_fails_every_waiter_and_releases_the_reservation() -> None:
    ext, source = await started(gang_objects(size=3), barrier=0.1, complete_members=False)
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    errors = await asyncio.gather(bind(ext, "g-0", nodes["g-0"]), bind(ext, "g-1", nodes["g-1"]))
    assert all("only 2 of 3 member(s) reached bind within 0.1s" in e for e in errors)
    assert ext.state.reservation("default/g") is None
    assert ext.state.reserved_gpus() == 0
    assert source.bindings == []
    released = ext.metrics.registry.get_sample_value
    assert released("phalanx_releases_total", {"cause": "barrier"}) == 1
    assert released("phalanx_releases_total", {"cause": "expired"}) is None
    await ext.stop()


async def test_pods_in_no_group_bind_immediately() -> None:
    ext, source = await started([pod_obj("solo", 2)])
    assert ext.filter(pod_of(ext, "solo"), NODES).feasible
    assert await bind(ext, "solo", "n1") == ""
    assert source.bindings == [("default/solo", "n1")]
    await ext.stop()


@pytest.mark.parametrize(
    ("name", "uid", "expected"),
    [
        ("ghost", "x", "pod default/ghost is unknown to Phalanx"),
        ("solo", "other-uid", "has UID uid-default-solo, not other-uid: it was recreated"),
    ],
    ids=["unknown-pod", "wrong-uid"],
)
async def test_bind_refuses_unknown_pods_and_wrong_uids(name: str, uid: str, expected: str) -> None:
    ext, _ = await started([pod_obj("solo", 2)])
    assert expected in await ext.bind(Binding(PodRef("default", name, uid), "n1"))
    await ext.stop()


async def test_a_member_without_a_reservation_is_refused_with_a_reason() -> None:
    ext, _ = await started(gang_objects(size=2))
    error = await bind(ext, "g-0", "n1")
    assert "holds no reservation for pod default/g-0" in error
    await ext.stop()


async def test_a_transient_bind_failure_is_retried_and_the_gang_still_binds_whole() -> None:
    ext, source = await started(gang_objects(size=2), failures={"g-1": [BindError("etcd timeout")]})
    nodes = reserve_all(ext, ["g-0", "g-1"])
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    assert results == ["", ""]
    assert len(source.bindings) == 2
    await ext.stop()


async def test_a_member_deleted_as_the_barrier_opens_fails_the_re_check_and_nothing_binds() -> None:
    ext, source = await started(gang_objects(size=2), complete_members=False)
    nodes = reserve_all(ext, ["g-0", "g-1"])
    first = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    await asyncio.sleep(0)
    second = asyncio.create_task(bind(ext, "g-1", nodes["g-1"]))
    await asyncio.sleep(0)  # g-1 opened the barrier; the re-check has not run yet
    source.delete_pod(pod_of(ext, "g-0").uid)
    errors = await asyncio.gather(first, second)
    assert "pod default/g-0 no longer exists" in errors[0]
    assert "only 1 of 2 member(s) still bindable" in errors[1]
    assert source.bindings == []
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


async def test_reserved_gpus_return_to_zero_after_expiry() -> None:
    clock = FakeClock()
    ext, _ = await started(gang_objects(size=2, timeout=30), clock=clock)
    reserve_all(ext, ["g-0", "g-1"])
    assert ext.state.reserved_gpus() == 16
    clock.now += 31
    ext.expire()
    assert ext.state.reserved_gpus() == 0
    text = ext.metrics.registry.get_sample_value("phalanx_reserved_gpus")
    assert text == 0
    assert (
        ext.metrics.registry.get_sample_value("phalanx_gang_decisions_total", {"result": "expired"})
        == 1
    )
    assert (
        ext.metrics.registry.get_sample_value("phalanx_releases_total", {"cause": "expired"}) == 1
    )
    await ext.stop()


async def test_elastic_members_beyond_a_bound_quorum_bind_immediately() -> None:
    ext, source = await started(gang_objects(size=3, gpus=4, min_member=2))
    first = reserve_all(ext, ["g-0", "g-1"])
    results = await asyncio.gather(*(bind(ext, n, first[n]) for n in first))
    assert results == ["", ""]
    extra = ext.filter(pod_of(ext, "g-2"), NODES)
    assert extra.feasible
    assert await bind(ext, "g-2", extra.feasible[0]) == ""
    assert len(source.bindings) == 3
    await ext.stop()


async def test_metrics_count_gpus_per_node_by_state() -> None:
    ext, _ = await started(gang_objects(size=2, gpus=4))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    node = nodes["g-0"]
    reserved = ext.metrics.registry.get_sample_value(
        "phalanx_gpus", {"node": node, "state": "reserved"}
    )
    assert reserved == sum(4 for n in nodes.values() if n == node)
    await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    used = ext.metrics.registry.get_sample_value("phalanx_gpus", {"node": node, "state": "used"})
    assert used == reserved
    assert ext.metrics.registry.get_sample_value("phalanx_partial_gangs") == 0
    assert ext.metrics.registry.get_sample_value("phalanx_gang_time_to_bind_seconds_count") == 1
    await ext.stop()


async def test_a_pod_first_seen_in_a_request_is_learned() -> None:
    ext, _ = await started([])
    fresh = parse_pod(pod_obj("late", 1))
    assert ext.filter(fresh, NODES).feasible
    assert ext.state.pod(fresh.uid) is not None
    await ext.stop()


async def test_the_debug_view_shows_the_reservation_and_the_last_decision() -> None:
    ext, _ = await started(gang_objects(size=2))
    reserve_all(ext, ["g-0", "g-1"])
    view = group_view(ext, "g")
    assert view["last_decision"] == "committed"
    assert {m["pod"] for m in view["reservation"]["members"]} == {"default/g-0", "default/g-1"}
    assert ext.debug_group("default", "nope") is None
    await ext.stop()


async def test_a_fresh_reservation_nominates_the_other_members_to_their_nodes_and_retries_them() -> (  # noqa: E501
    None
):
    ext, source = await started(gang_objects(size=3))
    ext.filter(pod_of(ext, "g-1"), NODES)
    await asyncio.sleep(0)
    reservation = ext.state.reservation("default/g")
    assert reservation is not None
    held = {m.pod_key: m.node for m in reservation.members}
    # The member whose filter made the reservation is being placed already: not nominated.
    assert source.nominated == {k: held[k] for k in ("default/g-0", "default/g-2")}
    assert sorted(source.requeued) == ["default/g-0", "default/g-2"]
    ext.filter(pod_of(ext, "g-0"), NODES)  # following the reservation: nothing new to say
    await asyncio.sleep(0)
    assert len(source.requeued) == 2
    await ext.stop()


async def test_behind_a_long_backlog_members_are_requeued_without_a_nomination() -> None:
    # Each nominated node costs every other pod's cycle until kube-scheduler reaches the
    # member: behind a backlog longer than the nodes / NOMINATION_COST, it costs more than
    # it saves.
    backlog = [pod_obj(f"solo-{i}", 1) for i in range(len(NODES) // NOMINATION_COST + 1)]
    ext, source = await started(gang_objects(size=3) + backlog)
    ext.filter(pod_of(ext, "g-1"), NODES)
    await asyncio.sleep(0)
    assert source.nominated == {}
    assert sorted(source.requeued) == ["default/g-0", "default/g-2"]
    await ext.stop()


async def test_behind_a_backlog_only_the_members_refused_here_are_requeued() -> None:
    # A requeue moves a pod out of kube-scheduler's unschedulable queue, where it parks a pod
    # an extender refused. A member never refused is not there (its first cycle is still to
    # come): touching it is an API write, and a watch event everywhere, for nothing.
    backlog = [pod_obj(f"solo-{i}", 1) for i in range(len(NODES) // NOMINATION_COST + 1)]
    # Members that go through their own cycle: with completion on, this gang would be
    # planned and bound as its quorum appears, behind the backlog (see the next tests).
    ext, source = await started(backlog, complete_members=False)
    source.apply(podgroup_obj("g", 3))
    # Mixed shapes: no template to reserve from, so members wait for the quorum.
    for name, gpus in (("g-0", 8), ("g-1", 4)):
        source.apply(pod_obj(name, gpus, group="g"))
    assert not ext.filter(pod_of(ext, "g-0"), NODES).feasible  # waiting: kube-scheduler parks it
    source.apply(pod_obj("g-2", 4, group="g"))  # g-1 has had no cycle yet

    assert ext.filter(pod_of(ext, "g-2"), NODES).feasible
    await asyncio.sleep(0)
    assert source.nominated == {}
    assert source.requeued == ["default/g-0"]
    await ext.stop()


async def test_members_pending_before_the_first_sync_are_all_requeued() -> None:
    # Whom a previous instance refused is not known: every pending member may be parked.
    backlog = [pod_obj(f"solo-{i}", 1) for i in range(len(NODES) // NOMINATION_COST + 1)]
    ext, source = await started(gang_objects(size=3, gpus=4) + backlog)
    assert ext.filter(pod_of(ext, "g-1"), NODES).feasible
    await asyncio.sleep(0)
    assert sorted(source.requeued) == ["default/g-0", "default/g-2"]
    await ext.stop()


@pytest.mark.parametrize(
    ("nominate_members", "nominated"),
    [
        pytest.param(True, {"default/g-0", "default/g-2"}, id="on"),
        pytest.param(False, set(), id="off"),
    ],
)
async def test_nominate_members_decides_between_a_nomination_and_the_plain_requeue(
    nominate_members: bool, nominated: set[str]
) -> None:
    # Off, the members are requeued exactly as where RBAC refuses pods/status: each cycle
    # filters every node again, and no other pod's cycle pays for a nominated node.
    ext, source = await started(gang_objects(size=3), nominate_members=nominate_members)
    ext.filter(pod_of(ext, "g-1"), NODES)
    await asyncio.sleep(0)
    assert set(source.nominated) == nominated
    assert sorted(source.requeued) == ["default/g-0", "default/g-2"]
    await ext.stop()


async def test_with_nominations_off_a_release_writes_no_withdrawal() -> None:
    clock = FakeClock()
    ext, source = await started(
        gang_objects(size=3, timeout=30), clock=clock, barrier=30, nominate_members=False
    )
    ext.filter(pod_of(ext, "g-0"), NODES)
    clock.now += 31
    ext.expire()
    await asyncio.sleep(0)
    assert ext.state.reservation("default/g") is None
    assert source.nominated == {}  # nothing was nominated: no pods/status write clears it
    await ext.stop()


async def test_a_released_reservation_withdraws_the_nominations_of_its_pending_members() -> None:
    # kube-scheduler counts a nominated pod on its node for everyone else: a nomination
    # left behind would hold capacity Phalanx has handed back.
    clock = FakeClock()
    ext, source = await started(gang_objects(size=3, timeout=30), clock=clock, barrier=30)
    ext.filter(pod_of(ext, "g-0"), NODES)
    await asyncio.sleep(0)
    assert set(source.nominated) == {"default/g-1", "default/g-2"}
    assert all(source.nominated.values())
    clock.now += 31
    ext.expire()
    await asyncio.sleep(0)
    assert source.nominated == {"default/g-1": "", "default/g-2": ""}
    await ext.stop()


async def test_a_bound_gang_leaves_no_nomination_to_withdraw() -> None:
    ext, source = await started(gang_objects(size=2))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", ""]
    await asyncio.sleep(0)
    assert source.nominated == {"default/g-1": nodes["g-1"]}  # set once, never cleared
    ext.refresh_statuses()
    assert ext.reporter._nominated == {}  # noqa: SLF001  # nothing kept for bound pods
    await ext.stop()


async def test_podgroup_status_follows_members_after_the_gang_decision() -> None:
    ext, source = await started(gang_objects(size=2))
    nodes = reserve_all(ext, ["g-0", "g-1"])
    await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    ext.refresh_statuses()
    await asyncio.sleep(0)
    status = source.statuses["default/g"]
    assert (status.phase, status.scheduled, status.running) == ("Running", 2, 2)
    source.delete_pod(pod_of(ext, "g-1").uid)
    ext.refresh_statuses()
    await asyncio.sleep(0)
    assert source.statuses["default/g"].scheduled == 1
    await ext.stop()


async def test_an_expired_reservation_answers_binds_held_at_the_barrier_at_once() -> None:
    clock = FakeClock()
    ext, source = await started(
        gang_objects(size=3, timeout=30), clock=clock, barrier=30, complete_members=False
    )
    nodes = reserve_all(ext, ["g-0", "g-1", "g-2"])
    held = asyncio.create_task(bind(ext, "g-0", nodes["g-0"]))
    await asyncio.sleep(0.01)
    clock.now += 31
    ext.expire()
    error = await asyncio.wait_for(held, timeout=1)
    assert "its reservation expired while 1 of 3 member(s) waited at bind" in error
    assert ext.state.reserved_gpus() == 0
    assert source.bindings == []
    await ext.stop()


async def test_an_annotation_only_gang_reports_its_phase_from_its_members_annotations() -> None:
    members = [
        pod_obj(
            f"ann-{i}", 2, annotations={"phalanx.io/pod-group": "ann", "phalanx.io/min-member": "2"}
        )
        for i in range(2)
    ]
    ext, _ = await started(members)
    nodes = reserve_all(ext, ["ann-0", "ann-1"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", ""]
    view = group_view(ext, "ann")
    assert view["source"] == "annotations"
    assert view["phase"] == "Running"  # minMember 2 of 2 bound (and running in the file)
    await ext.stop()


async def test_a_node_that_becomes_schedulable_sends_unfit_gangs_back_to_kube_scheduler() -> None:
    # Three 8-GPU nodes cannot hold four 8-GPU members. kube-scheduler may see a new node
    # before Phalanx does and be refused on Phalanx's older view; Phalanx retries them itself.
    ext, source = await started(gang_objects(size=4))
    assert not ext.filter(pod_of(ext, "g-0"), NODES).feasible
    await asyncio.sleep(0)
    assert source.requeued == []
    ext.apply(lambda state: state.upsert_node(parse_node(node_obj("n4", ready=False))))
    await asyncio.sleep(0)
    assert source.requeued == []  # not schedulable yet: nothing to retry for
    ext.apply(lambda state: state.upsert_node(parse_node(node_obj("n4"))))
    await asyncio.sleep(0)
    assert sorted(source.requeued) == ["default/g-0", "default/g-1", "default/g-2", "default/g-3"]
    ext.apply(lambda state: state.upsert_node(parse_node(node_obj("n4"))))  # a heartbeat
    await asyncio.sleep(0)
    assert len(source.requeued) == 4
    await ext.stop()


class _ListingSource(ScriptedSource):
    """Lists nodes and pods at start and the gang objects only when `finish_list` says: the
    window after a restart in which the first full list is still arriving."""

    async def start(self, sink: StateSink) -> None:
        later = [o for o in self._objects if o["kind"] == "PodGroup"]
        self._objects = [o for o in self._objects if o["kind"] != "PodGroup"]
        await super().start(sink)
        self._synced = False
        self._objects = later

    def finish_list(self) -> None:
        for obj in self._objects:
            self.apply(obj)
        self._synced = True


async def test_verbs_asked_before_the_first_full_list_answer_an_error_kube_scheduler_retries() -> (
    None
):
    # A refusal ("waiting for PodGroup g to exist") would park the member in kube-scheduler's
    # unschedulable queue, and nothing asks for it back when the list completes. An error
    # sends it to the backoff queue, which retries it.
    ext, source = await started(gang_objects(size=2), source_class=_ListingSource)
    assert not ext.ready
    early = ext.filter(pod_of(ext, "g-0"), NODES)
    assert early == FilterResult(error=NOT_SYNCED)
    assert ext.state.reservation("default/g") is None
    assert ext.preempt(pod_of(ext, "g-0"), {"n1": ["default/g-1"]}) == {}
    assert await bind(ext, "g-0", "n1") == NOT_SYNCED
    assert source.bindings == []

    source.finish_list()  # synced: the same member plans, and the gang binds whole
    nodes = reserve_all(ext, ["g-0", "g-1"])
    assert await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes)) == ["", ""]
    assert sorted(node for _, node in source.bindings) == sorted(nodes.values())
    await ext.stop()
