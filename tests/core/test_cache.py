"""The cache (ClusterState): usage accounting, snapshots, overlays, the reservation lifecycle."""

from collections.abc import Callable
from dataclasses import replace

import pytest

from builders import gpu_node, pod, podgroup, present
from phalanx.core.cache import (
    SLOT_PREFIX,
    ClusterState,
    MemberReservation,
    MemberState,
    ReleaseCause,
    Released,
    Reservation,
    StateError,
)
from phalanx.core.model import NVIDIA_GPU, Node, Pod, PodPhase, Resources
from phalanx.core.snapshot import Overlay


def state_with(*nodes: Node) -> ClusterState:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    return state


def reservation(
    key: str, *members: tuple[Pod, str], at: float = 0.0, ttl: float = 60.0
) -> Reservation:
    return Reservation(
        group_key=key,
        members=tuple(MemberReservation(p.uid, p.key, node, p.requests) for p, node in members),
        reserved_at=at,
        expires_at=at + ttl,
    )


def pending_pair(gpus: int, *nodes: Node) -> tuple[ClusterState, Pod, Pod]:
    """A state with `nodes` (n1 when none) and members a and b of gang g, pending, asking
    `gpus` GPUs each."""
    state = state_with(*(nodes or (gpu_node("n1"),)))
    a, b = pod("a", gpus, group="g"), pod("b", gpus, group="g")
    for p in (a, b):
        state.upsert_pod(p)
    return state, a, b


def free_gpus(state: ClusterState, name: str) -> int:
    info = state.node(name)
    assert info is not None, name
    return info.free.get(NVIDIA_GPU)


def test_bound_non_terminal_pods_count_toward_usage() -> None:
    state = state_with(gpu_node("n1"))
    state.upsert_pod(pod("a", 3, node="n1"))
    state.upsert_pod(pod("b", 2, node="n1", phase=PodPhase.SUCCEEDED))
    state.upsert_pod(pod("c", 1))  # pending: not on any node
    assert free_gpus(state, "n1") == 5


def test_a_pod_that_finishes_returns_its_resources() -> None:
    state = state_with(gpu_node("n1"))
    running = pod("a", 3, node="n1", uid="u-a")
    state.upsert_pod(running)
    state.upsert_pod(replace(running, phase=PodPhase.SUCCEEDED))
    assert free_gpus(state, "n1") == 8


def test_a_pod_seen_before_its_node_is_counted_once_the_node_arrives() -> None:
    state = ClusterState()
    state.upsert_pod(pod("a", 3, node="n1"))
    state.upsert_node(gpu_node("n1"))
    assert free_gpus(state, "n1") == 5


def test_deleting_a_node_with_pods_keeps_exact_accounting_until_they_go() -> None:
    state = state_with(gpu_node("n1"))
    p = pod("a", 3, node="n1")
    state.upsert_pod(p)
    state.remove_node("n1")
    assert "n1" not in [i.name for i in state.snapshot() if i.node.ready]
    state.remove_pod(p.uid)
    assert state.node("n1") is None


def test_a_snapshot_does_not_change_when_the_state_does() -> None:
    state = state_with(gpu_node("n1"))
    snap = state.snapshot()
    state.upsert_pod(pod("a", 3, node="n1"))
    assert present(snap.get("n1")).free.get(NVIDIA_GPU) == 8
    assert present(state.snapshot().get("n1")).free.get(NVIDIA_GPU) == 5


def test_an_overlay_tracks_deltas_without_touching_the_snapshot() -> None:
    state = state_with(gpu_node("n1"), gpu_node("n2"))
    snap = state.snapshot()
    overlay = Overlay(snap)
    overlay.add("n1", Resources({NVIDIA_GPU: 6}))
    assert overlay.free("n1").get(NVIDIA_GPU) == 2
    assert overlay.free("n2").get(NVIDIA_GPU) == 8
    assert present(snap.get("n1")).free.get(NVIDIA_GPU) == 8
    assert set(overlay.touched) == {"n1"}
    overlay.remove("n1", Resources({NVIDIA_GPU: 6}))
    assert overlay.touched == {}


def test_reserved_capacity_is_used_for_everyone_and_release_returns_exactly_it() -> None:
    state = state_with(gpu_node("n1"))
    a, b = pod("a", 3, group="g"), pod("b", 2, group="g")
    state.upsert_pod(a)
    state.upsert_pod(b)
    before = state.node("n1")
    state.reserve(reservation("default/g", (a, "n1"), (b, "n1")))
    assert free_gpus(state, "n1") == 3
    assert state.reserved_gpus() == 5
    state.release("default/g")
    assert state.node("n1") == before
    assert state.reserved_gpus() == 0


def test_a_reservation_that_no_longer_fits_is_refused_and_changes_nothing() -> None:
    state = state_with(gpu_node("n1"))
    a = pod("a", 9, group="g")
    state.upsert_pod(a)
    before = state.node("n1")
    with pytest.raises(StateError, match="no longer fits n1"):
        state.reserve(reservation("default/g", (a, "n1")))
    assert state.node("n1") == before
    assert state.reservation("default/g") is None


def test_assume_moves_a_member_from_reserved_to_requested_and_forget_moves_it_back() -> None:
    state = state_with(gpu_node("n1"))
    a = pod("a", 4, group="g")
    state.upsert_pod(a)
    state.reserve(reservation("default/g", (a, "n1")))
    state.assume(a.uid, "n1")
    info = present(state.node("n1"))
    assert (info.requested.get(NVIDIA_GPU), info.reserved.get(NVIDIA_GPU)) == (4, 0)
    assert (
        present(present(state.reservation("default/g")).member(a.uid)).state is MemberState.ASSUMED
    )
    state.forget(a.uid)
    info = present(state.node("n1"))
    assert (info.requested.get(NVIDIA_GPU), info.reserved.get(NVIDIA_GPU)) == (0, 4)


def test_a_reservation_finds_each_member_by_uid_and_a_replaced_one_sees_its_own_members() -> None:
    a, b = pod("a", 4, group="g"), pod("b", 4, group="g")
    r = reservation("default/g", (a, "n1"), (b, "n2"))
    assert (present(r.member(a.uid)).node, present(r.member(b.uid)).node, r.member("other")) == (
        "n1",
        "n2",
        None,
    )
    moved = replace(r, members=(replace(present(r.member(a.uid)), node="n3"),))
    assert (present(moved.member(a.uid)).node, moved.member(b.uid)) == ("n3", None)
    assert present(r.member(a.uid)).node == "n1"


def test_the_bound_count_counts_live_members_bound_or_being_bound() -> None:
    state = state_with(gpu_node("n1"), gpu_node("n2"))
    running = pod("a", 1, group="g", node="n1")
    assumed = pod("b", 1, group="g")
    pending = pod("c", 1, group="g")
    finished = pod("d", 1, group="g", node="n2", phase=PodPhase.SUCCEEDED)
    for p in (running, assumed, pending, finished):
        state.upsert_pod(p)
    state.reserve(reservation("default/g", (assumed, "n2"), (pending, "n2")))
    state.assume(assumed.uid, "n2")
    assert state.bound_count("default/g") == len(state.bound_members("default/g")) == 2
    assert state.bound_count("default/other") == 0


def test_confirming_every_member_ends_the_reservation() -> None:
    state, a, b = pending_pair(4)
    state.reserve(reservation("default/g", (a, "n1"), (b, "n1")))
    for p in (a, b):
        state.assume(p.uid, "n1")
        state.upsert_pod(replace(p, node_name="n1"))
    assert state.reservation("default/g") is None
    assert free_gpus(state, "n1") == 0


def test_expiry_releases_only_reservations_past_their_deadline() -> None:
    state = state_with(gpu_node("n1"))
    a, b = pod("a", 2, group="g1"), pod("b", 2, group="g2")
    for p in (a, b):
        state.upsert_pod(p)
    state.reserve(reservation("default/g1", (a, "n1"), at=0, ttl=10))
    state.reserve(reservation("default/g2", (b, "n1"), at=0, ttl=100))
    released = state.expire(now=50)
    assert [r.group_key for r in released] == ["default/g1"]
    assert free_gpus(state, "n1") == 6


def test_a_pending_member_that_is_deleted_gives_back_its_reservation() -> None:
    state, a, b = pending_pair(2)
    state.reserve(reservation("default/g", (a, "n1"), (b, "n1")))
    state.remove_pod(a.uid)
    assert free_gpus(state, "n1") == 6
    assert [m.pod_uid for m in present(state.reservation("default/g")).members] == [b.uid]


def test_removing_a_node_releases_reservations_that_used_it() -> None:
    state, a, b = pending_pair(2, gpu_node("n1"), gpu_node("n2"))
    state.reserve(reservation("default/g", (a, "n1"), (b, "n2")))
    assert state.remove_node("n1") == ["default/g"]
    assert state.reservation("default/g") is None
    assert free_gpus(state, "n2") == 8


def test_a_member_whose_node_was_removed_mid_binding_is_not_reserved_again_when_it_fails() -> None:
    # Removing the node released the gang; the failed binding must not bring a piece of it
    # back onto a node that is gone (a later release then found no such node).
    state, a, b = pending_pair(2, gpu_node("n1"), gpu_node("n2"))
    state.reserve(reservation("default/g", (a, "n1"), (b, "n2"), ttl=10.0))
    state.assume(a.uid, "n1")
    assert state.remove_node("n1") == ["default/g"]
    state.forget(a.uid)  # its binding failed
    assert state.reservation("default/g") is None
    assert state.reserved_gpus() == 0
    assert state.expire(now=100.0) == []
    assert free_gpus(state, "n2") == 8


def test_a_recreated_pod_with_the_same_name_replaces_the_old_one() -> None:
    state = state_with(gpu_node("n1"))
    state.upsert_pod(pod("a", 3, node="n1", uid="old"))
    state.upsert_pod(pod("a", 1, node="n1", uid="new"))
    assert free_gpus(state, "n1") == 7
    assert state.pod("old") is None


def test_a_uid_under_a_new_name_leaves_its_old_one_and_no_new_pod_there_removes_it() -> None:
    # A pod copied in a cluster file with only its name changed (the API never renames).
    state = state_with(gpu_node("n1"))
    state.upsert_pod(pod("a", 3, node="n1", uid="same"))
    state.upsert_pod(pod("b", 3, node="n1", uid="same"))
    assert state.pod_by_key("default", "a") is None
    state.upsert_pod(pod("a", 1, node="n1", uid="other"))
    assert present(state.pod_by_key("default", "b")).uid == "same"
    assert present(state.pod_by_key("default", "a")).uid == "other"
    assert free_gpus(state, "n1") == 4


def test_assuming_an_unknown_or_bound_pod_is_a_caller_bug() -> None:
    state = state_with(gpu_node("n1"))
    with pytest.raises(StateError, match="unknown pod"):
        state.assume("nope", "n1")
    state.upsert_pod(pod("a", 1, node="n1", uid="a"))
    with pytest.raises(StateError, match="already bound"):
        state.assume("a", "n1")


def test_each_published_reservation_gets_a_new_serial() -> None:
    state = state_with(gpu_node("n1"))
    a = pod("a", 2, group="g")
    state.upsert_pod(a)
    first = state.reserve(reservation("default/g", (a, "n1")))
    state.release("default/g")
    second = state.reserve(reservation("default/g", (a, "n1")))
    assert 0 < first.serial < second.serial
    assert state.reservation("default/g") is second


def test_a_release_for_an_older_serial_leaves_the_newer_reservation_alone() -> None:
    state = state_with(gpu_node("n1"))
    a = pod("a", 2, group="g")
    state.upsert_pod(a)
    old = state.reserve(reservation("default/g", (a, "n1")))
    state.release("default/g")
    new = state.reserve(reservation("default/g", (a, "n1")))
    assert state.release("default/g", serial=old.serial) is None
    assert state.reservation("default/g") is new
    assert state.release("default/g", serial=new.serial) is new
    assert free_gpus(state, "n1") == 8


@pytest.mark.parametrize(
    ("release", "cause", "why"),
    [
        (lambda st: st.expire(now=100), ReleaseCause.EXPIRED, "reservation expired after 60s"),
        (lambda st: st.remove_node("n1"), ReleaseCause.NODE_GONE, "node n1 was removed"),
        (
            lambda st: st.remove_group("default/g"),
            ReleaseCause.GROUP_GONE,
            "PodGroup default/g was deleted",
        ),
        (
            lambda st: st.release("default/g", ReleaseCause.REPLAN, "not offered"),
            ReleaseCause.REPLAN,
            "not offered",
        ),
    ],
    ids=["expiry", "node-removed", "podgroup-deleted", "explicit"],
)
def test_every_release_whatever_its_cause_is_told_to_the_listener(
    release: Callable[[ClusterState], object], cause: ReleaseCause, why: str
) -> None:
    told: list[Released] = []
    state = ClusterState(on_release=told.append)
    state.upsert_node(gpu_node("n1"))
    a = pod("a", 2, group="g")
    state.upsert_pod(a)
    published = state.reserve(reservation("default/g", (a, "n1")))
    release(state)
    assert [(r.reservation, r.cause) for r in told] == [(published, cause)]
    assert why in told[0].why


def test_members_dropped_because_they_bound_are_not_a_release() -> None:
    told: list[Released] = []
    state = ClusterState(on_release=told.append)
    state.upsert_node(gpu_node("n1"))
    a = pod("a", 2, group="g")
    state.upsert_pod(a)
    state.reserve(reservation("default/g", (a, "n1")))
    state.assume(a.uid, "n1")
    state.upsert_pod(replace(a, node_name="n1"))
    assert state.reservation("default/g") is None
    assert told == []


# ---- what the barrier's sweep re-checks, and what the unfit memory trusts ---------------


def test_the_touched_record_names_pods_gangs_and_nodes_that_changed_since_it_was_taken() -> None:
    state = state_with(gpu_node("n1"), gpu_node("n2"))
    member = pod("m", 4, group="g")
    state.upsert_pod(member)
    state.take_touched()
    state.upsert_node(gpu_node("n1"))  # a heartbeat
    assert not state.take_touched()
    state.upsert_pod(member)  # e.g. kube-scheduler's condition written on the pending pod
    state.reserve(reservation("default/g", (member, "n1")))
    state.upsert_node(gpu_node("n2", unschedulable=True))
    touched = state.take_touched()
    assert touched.pods == {member.uid}
    assert touched.groups == {"default/g"}
    assert touched.nodes == {"n2"}
    assert not state.take_touched()


def test_removals_and_releases_are_touches() -> None:
    state = state_with(gpu_node("n1"), gpu_node("n2"))
    member = pod("m", 4, group="g")
    state.upsert_pod(member)
    state.reserve(reservation("default/g", (member, "n1")))
    state.take_touched()
    state.release("default/g")
    state.remove_pod(member.uid)
    state.remove_node("n2")
    touched = state.take_touched()
    assert (touched.pods, touched.groups, touched.nodes) == ({member.uid}, {"default/g"}, {"n2"})


def test_a_gangs_bound_count_follows_its_members_bindings_finishes_and_departures() -> None:
    state, a, b = pending_pair(2)
    assert state.bound_count("default/g") == 0
    state.assume(a.uid, "n1")
    assert state.bound_count("default/g") == 1
    state.forget(a.uid)
    assert state.bound_count("default/g") == 0
    state.upsert_pod(replace(a, node_name="n1"))
    state.upsert_pod(replace(b, node_name="n1"))
    assert state.bound_count("default/g") == 2
    state.upsert_pod(replace(b, node_name="n1", phase=PodPhase.SUCCEEDED))  # finished
    assert state.bound_count("default/g") == 1
    state.upsert_pod(replace(a, node_name="n1", group=None))  # relabelled out of the gang
    assert state.bound_count("default/g") == 0
    state.upsert_pod(replace(a, node_name="n1"))
    assert state.bound_count("default/g") == 1
    state.remove_pod(a.uid)
    assert state.bound_count("default/g") == 0


def test_extending_a_reservation_moves_only_its_deadline_and_never_in() -> None:
    state, a, b = pending_pair(2)
    held = state.reserve(reservation("default/g", (a, "n1"), (b, "n1"), ttl=60))
    state.extend("default/g", held.serial, 100.0)
    later = present(state.reservation("default/g"))
    assert later.expires_at == 100.0
    assert (later.members, later.serial, later.pods_reserved) == (held.members, held.serial, 2)
    assert later.member(b.uid) == held.member(b.uid)
    assert later.node_of(a.uid) == "n1"
    state.extend("default/g", held.serial, 50.0)  # never in
    assert present(state.reservation("default/g")).expires_at == 100.0
    state.extend("default/g", held.serial + 1, 200.0)  # not this reservation's serial
    assert present(state.reservation("default/g")).expires_at == 100.0
    assert free_gpus(state, "n1") == 4


def built_afresh(r: Reservation) -> Reservation:
    return replace(r, members=r.members)  # every derived field computed from the members


def assert_derived_as_afresh(r: Reservation) -> None:
    fresh = built_afresh(r)
    assert r.slots() == fresh.slots()
    assert r.pods_reserved == fresh.pods_reserved
    assert {m.pod_uid: r.member(m.pod_uid) for m in r.members} == {
        m.pod_uid: fresh.member(m.pod_uid) for m in fresh.members
    }
    assert len({m.pod_uid for m in r.members}) == len(r.members)


def test_claims_assumes_give_backs_and_bindings_keep_a_reservation_as_if_built_afresh() -> None:
    # Each of them updates the member index, the slots and the count of reserved pods in
    # place of rebuilding them; whatever the order, they must say what a rebuild would.
    state = state_with(gpu_node("n1"), gpu_node("n2"))
    a, b, c = (pod(n, 2, group="g") for n in "abc")
    for p in (a, b, c):
        state.upsert_pod(p)
    slots = [
        MemberReservation(f"{SLOT_PREFIX}{i}", "", f"n{1 + i % 2}", a.requests) for i in range(4)
    ]
    held = state.reserve(
        Reservation("default/g", tuple(slots), reserved_at=0.0, expires_at=60.0, template=True)
    )

    def now() -> Reservation:
        r = present(state.reservation("default/g"))
        assert_derived_as_afresh(r)
        return r

    assert [m.pod_uid for m in now().slots()] == [s.pod_uid for s in slots]
    state.claim("default/g", f"{SLOT_PREFIX}1", b)  # not the first slot
    state.claim("default/g", f"{SLOT_PREFIX}0", a)
    state.claim("default/g", f"{SLOT_PREFIX}3", c)
    assert [m.pod_uid for m in now().slots()] == [f"{SLOT_PREFIX}2"]
    assert now().pods_reserved == 3
    state.unclaim("default/g", b.uid)  # b's slot is back, in its place among the slots
    assert [m.pod_uid for m in now().slots()] == [f"{SLOT_PREFIX}{b.uid}", f"{SLOT_PREFIX}2"]
    assert [m.node for m in now().members] == [s.node for s in slots]  # order kept
    state.assume(a.uid, "n1")
    assert now().pods_reserved == 1
    assert present(now().member(a.uid)).state is MemberState.ASSUMED
    state.upsert_pod(replace(a, node_name="n1"))  # a's binding lands: its member goes
    assert now().member(a.uid) is None
    assert [m.pod_uid for m in now().members] == [
        f"{SLOT_PREFIX}{b.uid}",
        f"{SLOT_PREFIX}2",
        c.uid,
    ]
    assert now().serial == held.serial


def test_a_gang_s_members_follow_every_change_to_its_pods_between_two_reads() -> None:
    # `members` is kept between reads; each read must still see the pods as they are now.
    state = state_with(gpu_node("n1"))
    b, a, c = pod("b", 1, group="g"), pod("a", 1, group="g"), pod("c", 1, group="g")
    for p in (b, a, c):
        state.upsert_pod(p)

    def names() -> list[str]:
        return [p.name for p in state.members("default/g")]

    assert names() == ["a", "b", "c"]
    state.upsert_pod(replace(a, node_name="n1"))  # a binding: the member read is the new pod
    assert present(state.members("default/g")[0]).node_name == "n1"
    state.upsert_pod(replace(b, phase=PodPhase.SUCCEEDED))  # finished: not live any more
    assert names() == ["a", "c"]
    assert [p.name for p in state.members("default/g", include_finished=True)] == ["a", "b", "c"]
    state.upsert_pod(pod("c", 1, group="h"))  # relabelled into another gang
    assert names() == ["a"]
    assert [p.name for p in state.members("default/h")] == ["c"]
    state.members("default/g").append(c)  # a caller's list is its own
    assert names() == ["a"]
    state.remove_pod(a.uid)
    assert names() == []
    assert "default/g" not in state._live_members  # noqa: SLF001  # nothing kept for a gone gang


def test_a_gang_whose_last_member_is_relabelled_away_is_forgotten_as_if_it_was_deleted() -> None:
    # A gang without an object is known by its members alone: once the last one is
    # relabelled into another gang, it is gone from the gang list (views, status sweeps).
    state = state_with(gpu_node("n1"))
    member = pod("m", 1, group="typo")
    state.upsert_pod(member)
    assert state.group_keys() == {"default/typo"}
    state.upsert_pod(pod("m", 1, group="g", uid=member.uid))
    assert state.group_keys() == {"default/g"}
    assert state.member_count("default/typo") == 0


def test_a_gang_moves_when_a_member_its_object_or_its_reservation_changes() -> None:
    # What the status refresh recomputes: nothing else changes a gang's status.
    state = state_with(gpu_node("n1"))
    member = pod("m", 4, group="g")
    state.upsert_group(podgroup("g", 1))
    assert state.take_moved() == {"default/g"}
    state.upsert_pod(pod("loner", 1))
    state.upsert_node(gpu_node("n1"))  # a heartbeat
    assert state.take_moved() == set()
    state.upsert_pod(member)
    assert state.take_moved() == {"default/g"}
    state.reserve(reservation("default/g", (member, "n1")))
    assert state.take_moved() == {"default/g"}
    state.assume(member.uid, "n1")
    assert state.take_moved() == {"default/g"}
    state.forget(member.uid)
    assert state.take_moved() == {"default/g"}
    state.upsert_pod(replace(member, group=None))  # relabelled out of the gang
    assert state.take_moved() == {"default/g"}
    state.upsert_pod(member)
    state.take_moved()
    state.remove_pod(member.uid)
    assert state.take_moved() == {"default/g"}
    state.remove_group("default/g")
    assert state.take_moved() == {"default/g"}


def test_capacity_given_back_moves_freed_and_capacity_taken_does_not() -> None:
    state = state_with(gpu_node("n1"))
    busy = pod("busy", 4, node="n1")
    freed = state.freed
    state.upsert_pod(busy)
    member = pod("m", 2, group="g")
    state.upsert_pod(member)
    state.reserve(reservation("default/g", (member, "n1")))
    state.assume(member.uid, "n1")
    state.upsert_node(gpu_node("n1"))  # a heartbeat
    assert state.freed == freed
    state.remove_pod(busy.uid)
    assert state.freed == freed + 1
    state.upsert_node(gpu_node("n1", 16))
    assert state.freed == freed + 2
    state.forget(member.uid)  # a failed binding gives the node back to the reservation
    state.release("default/g")
    assert state.freed > freed + 2


def test_the_pending_count_follows_every_pod_through_assume_bind_forget_and_end() -> None:
    state = state_with(gpu_node("n1"))
    a, b = pod("a", 1, group="g"), pod("b", 1, group="g")
    lone = pod("lone", 1)
    for p in (a, b, lone):
        state.upsert_pod(p)
    assert (state.pending_count(), state.pending_count("default/g")) == (3, 2)
    state.assume(a.uid, "n1")  # a binding in flight is no longer pending
    assert (state.pending_count(), state.pending_count("default/g")) == (2, 1)
    state.forget(a.uid)  # the binding failed
    assert state.pending_count() == 3
    state.assume(a.uid, "n1")
    state.upsert_pod(replace(a, node_name="n1"))  # the API confirms it
    assert state.pending_count() == 2
    state.upsert_pod(replace(b, phase=PodPhase.FAILED))
    state.remove_pod(lone.uid)
    assert (state.pending_count(), state.pending_count("default/g")) == (0, 0)


def test_a_gang_a_new_pending_member_joins_without_a_reservation_is_reported_once() -> None:
    state = state_with(gpu_node("n1"))
    g1 = pod("g-1", 1, group="g")
    state.upsert_pod(pod("g-0", 1, group="g"))
    state.upsert_pod(g1)
    state.upsert_pod(pod("solo", 1))
    assert [g.key for g in state.take_joined()] == ["default/g"]  # once for both members
    assert state.take_joined() == []
    state.upsert_pod(replace(g1, labels={"a": "b"}))  # an update, not a new member
    state.upsert_pod(pod("h-0", 1, group="h", node="n1"))  # bound already
    assert state.take_joined() == []
    g2 = pod("g-2", 1, group="g")
    state.reserve(reservation("default/g", (g2, "n1")))
    state.upsert_pod(g2)  # its gang holds a reservation: an arrival, not a join
    assert state.take_joined() == []
    assert state.take_arrivals() == [g2]


def test_a_gang_whose_object_comes_after_its_members_is_reported_joined_then() -> None:
    # Pods and gang objects arrive on separate watches, in no common order.
    state = state_with(gpu_node("n1"))
    state.upsert_pod(pod("g-0", 1, group="g"))
    state.upsert_pod(pod("g-1", 1, group="g"))
    state.take_joined()
    state.upsert_group(podgroup("g", 2))
    assert [g.key for g in state.take_joined()] == ["default/g"]
    state.upsert_group(podgroup("g", 2))  # a relist: the same object
    state.upsert_group(podgroup("h", 2))  # no members yet
    assert state.take_joined() == []
    state.upsert_group(podgroup("g", 1))  # edited: its quorum may exist now
    assert [g.key for g in state.take_joined()] == ["default/g"]
    state.reserve(reservation("default/g", (pod("g-0", 1, group="g"), "n1")))
    state.upsert_group(podgroup("g", 1, timeout=5))  # changed: releases, rejoins
    assert [g.key for g in state.take_joined()] == ["default/g"]


def test_a_pod_bound_here_that_then_says_unscheduled_is_reported_misreported_once() -> None:
    # kube-scheduler's own cycle of a member bound with its gang can fail after the binding
    # ("is in the cache, so can't be assumed") and write PodScheduled False on the bound pod.
    state = state_with(gpu_node("n1"))
    here, elsewhere = pod("here", 1), pod("elsewhere", 1)
    for p in (here, elsewhere):
        state.upsert_pod(p)
    state.assume(here.uid, "n1")
    state.upsert_pod(replace(here, node_name="n1"))  # the binding Phalanx made, confirmed
    state.upsert_pod(replace(elsewhere, node_name="n1"))  # bound by someone else
    assert state.take_misreported() == []
    said = replace(here, node_name="n1", unscheduled="SchedulerError")
    state.upsert_pod(said)
    state.upsert_pod(replace(elsewhere, node_name="n1", unscheduled="SchedulerError"))
    state.upsert_pod(replace(pod("pending", 1), unscheduled="Unschedulable"))
    assert state.take_misreported() == [said]
    assert state.take_misreported() == []
    state.upsert_pod(said)  # a watch event before the correction lands: asked again
    state.upsert_pod(replace(here, node_name="n1"))  # corrected meanwhile
    assert state.take_misreported() == []
    state.remove_pod(here.uid)
    state.upsert_pod(said)  # a relist after deletion: not bound here as far as we know
    assert state.take_misreported() == []
