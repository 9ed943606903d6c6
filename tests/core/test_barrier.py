"""The bind barrier's decisions, without an event loop: may this bind join, is the quorum
present, is a held member still bindable."""

from collections.abc import Callable, Iterable
from dataclasses import replace

import pytest

from builders import gang, gpu_node, pod, podgroup
from phalanx.core.barrier import (
    Answer,
    BindAlone,
    BindReserved,
    Completion,
    Join,
    admit,
    completable,
    completions,
    fits_alone,
    quorum_present,
    still_bindable,
    tasks_short,
)
from phalanx.core.cache import ClusterState, MemberReservation, Reservation
from phalanx.core.model import Binding, Pod, PodGroup, PodRef, Taint, TaintEffect
from phalanx.core.resolution import GroupDefaults

DEFAULTS = GroupDefaults()


def cluster(
    *pods: Pod, groups: Iterable[PodGroup] = (), nodes: Iterable[str] = ("n1", "n2")
) -> ClusterState:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(gpu_node(n))
    for g in groups:
        state.upsert_group(g)
    for p in pods:
        state.upsert_pod(p)
    return state


def reserve(state: ClusterState, key: str, *placed: tuple[Pod, str]) -> Reservation:
    return state.reserve(
        Reservation(
            key,
            tuple(MemberReservation(p.uid, p.key, n, p.requests) for p, n in placed),
            reserved_at=0,
            expires_at=60,
        )
    )


def to(p: Pod, node: str, uid: str | None = None) -> Binding:
    return Binding(PodRef(p.namespace, p.name, p.uid if uid is None else uid), node)


def test_a_reserved_member_of_an_unbound_gang_joins_the_gate_of_its_reservation() -> None:
    a, b = gang("g", 2, 4)
    state = cluster(a, b, groups=[podgroup("g", 2)])
    published = reserve(state, "default/g", (a, "n1"), (b, "n2"))
    decision = admit(state, to(a, "n1"), DEFAULTS)
    assert isinstance(decision, Join)
    assert (decision.serial, decision.bound, decision.group.min_member) == (published.serial, 0, 2)


@pytest.mark.parametrize(
    ("binding", "expected"),
    [
        (Binding(PodRef("default", "ghost"), "n1"), "pod default/ghost is unknown to Phalanx"),
        (
            Binding(PodRef("default", "g-0", "stale"), "n1"),
            ", not stale: it was recreated",
        ),
        (Binding(PodRef("default", "g-0"), "n2"), "gang default/g reserved n1 for pod default/g-0"),
    ],
    ids=["unknown-pod", "recreated-pod", "another-node"],
)
def test_binds_that_can_never_succeed_are_answered_at_once(binding: Binding, expected: str) -> None:
    a, b = gang("g", 2, 4)
    state = cluster(a, b, groups=[podgroup("g", 2)])
    reserve(state, "default/g", (a, "n1"), (b, "n2"))
    decision = admit(state, binding, DEFAULTS)
    assert isinstance(decision, Answer)
    assert expected in decision.error


def test_a_pod_already_bound_to_the_node_asked_for_is_a_success_and_elsewhere_a_refusal() -> None:
    done = pod("done", 1, node="n1")
    state = cluster(done)
    assert admit(state, to(done, "n1"), DEFAULTS) == Answer("")
    refused = admit(state, to(done, "n2"), DEFAULTS)
    assert isinstance(refused, Answer)
    assert "is already bound to n1" in refused.error


def test_a_pod_being_bound_is_not_bound_twice() -> None:
    solo = pod("solo", 1)
    state = cluster(solo)
    state.assume(solo.uid, "n1")
    refused = admit(state, to(solo, "n1"), DEFAULTS)
    assert isinstance(refused, Answer)
    assert "is already being bound" in refused.error


def test_a_pod_in_no_gang_binds_alone() -> None:
    solo = pod("solo", 1)
    assert admit(cluster(solo), to(solo, "n1"), DEFAULTS) == BindAlone(solo, "n1")


def test_a_member_without_a_reservation_waits_for_nothing_and_says_why() -> None:
    a, b = gang("g", 2, 4)
    state = cluster(a, b, groups=[podgroup("g", 2)])
    decision = admit(state, to(a, "n1"), DEFAULTS)
    assert isinstance(decision, Answer)
    assert "holds no reservation for pod default/g-0" in decision.error


def test_a_member_of_an_unresolvable_gang_gets_its_reason() -> None:
    a = pod("a", 1, group="nogroup")
    decision = admit(cluster(a), to(a, "n1"), DEFAULTS)
    assert isinstance(decision, Answer)
    assert "waiting for PodGroup default/nogroup to exist" in decision.error


def test_members_beyond_a_bound_quorum_bind_now_in_or_out_of_a_reservation() -> None:
    bound = [replace(p, node_name="n1") for p in gang("g", 2, 2)]
    extra, reserved = pod("g-2", 2, group="g"), pod("g-3", 2, group="g")
    state = cluster(*bound, extra, reserved, groups=[podgroup("g", 2)])
    reserve(state, "default/g", (reserved, "n2"))
    assert admit(state, to(extra, "n2"), DEFAULTS) == BindAlone(extra, "n2")
    assert admit(state, to(reserved, "n2"), DEFAULTS) == BindReserved(reserved, "n2")


def test_bound_members_missing_a_tasks_minimum_are_no_quorum_the_rest_still_join_the_gate() -> None:
    group = replace(podgroup("g", 2), min_task_member=(("master", 1), ("worker", 1)))
    bound = [replace(p, node_name="n1") for p in gang("g", 2, 2, task="worker")]
    master = pod("g-master", 2, group="g", task="master")
    state = cluster(*bound, master, groups=[group])
    published = reserve(state, "default/g", (master, "n2"))
    decision = admit(state, to(master, "n2"), DEFAULTS)
    assert isinstance(decision, Join)
    assert (decision.serial, decision.bound) == (published.serial, 2)


def test_the_tasks_short_are_counted_over_the_held_and_the_bound() -> None:
    minima = (("master", 1), ("worker", 2))
    bound = replace(pod("g-worker-0", 2, group="g", task="worker"), node_name="n1")
    master = pod("g-master", 2, group="g", task="master")
    worker = pod("g-worker-1", 2, group="g", task="worker")
    state = cluster(bound, master, worker, groups=[podgroup("g", 3)])
    assert tasks_short(state, "default/g", minima, [master, worker]) == ""
    assert tasks_short(state, "default/g", minima, [worker]) == "task master has 0 of 1 member(s)"
    assert tasks_short(state, "default/g", (), []) == ""


@pytest.mark.parametrize(
    ("waiting", "bound", "need", "present"),
    [(1, 0, 2, False), (2, 0, 2, True), (1, 1, 2, True), (0, 3, 3, True), (2, 0, 3, False)],
    ids=["half", "all-waiting", "with-bound", "all-bound", "one-short"],
)
def test_the_quorum_counts_the_held_and_the_bound(
    waiting: int, bound: int, need: int, present: bool
) -> None:
    assert quorum_present(waiting, bound, need) is present


def test_a_held_member_stays_bindable_only_while_its_reservation_and_node_hold() -> None:
    a, b = gang("g", 2, 4)
    state = cluster(a, b, groups=[podgroup("g", 2)])
    published = reserve(state, "default/g", (a, "n1"), (b, "n2"))
    assert still_bindable(state, "default/g", published.serial, a, "n1") == ""
    assert "no longer holds" in still_bindable(state, "default/g", published.serial + 1, a, "n1")
    assert "no longer holds n2" in still_bindable(state, "default/g", published.serial, a, "n2")
    state.upsert_node(gpu_node("n1", unschedulable=True))
    assert "node n1 is gone, cordoned" in still_bindable(
        state, "default/g", published.serial, a, "n1"
    )
    state.remove_pod(a.uid)
    assert "pod default/g-0 no longer exists" in still_bindable(
        state, "default/g", published.serial, a, "n1"
    )


def test_a_held_member_whose_requests_grew_past_its_reservation_is_no_longer_bindable() -> None:
    # Bound anyway, its member had over-committed its node (the extender fuzz found it).
    a, b = gang("g", 2, 4)
    state = cluster(a, b, groups=[podgroup("g", 2)])
    published = reserve(state, "default/g", (a, "n1"), (b, "n1"))
    state.upsert_pod(replace(a, requests=a.requests + pod("more", 0, cpu_milli=100_000).requests))
    assert still_bindable(state, "default/g", published.serial, a, "n1") == (
        "pod default/g-0 now asks for more than gang default/g reserved for it on n1"
    )
    state.upsert_pod(replace(a, requests=pod("less", 2).requests))
    assert still_bindable(state, "default/g", published.serial, a, "n1") == ""


def test_a_lone_pod_must_still_fit_its_node() -> None:
    big = pod("big", 6)
    state = cluster(pod("there", 4, node="n1"), big)
    assert "no longer fits node n1 (insufficient nvidia.com/gpu)" in fits_alone(state, big, "n1")
    assert fits_alone(state, big, "n2") == ""
    assert "node n9 is unknown" in fits_alone(state, big, "n9")


def test_the_gang_s_other_reserved_members_are_completions_once_one_is_held() -> None:
    a, b, c = gang("g", 3, 4)
    state = cluster(a, b, c, groups=[podgroup("g", 3)])
    published = reserve(state, "default/g", (a, "n1"), (b, "n1"), (c, "n2"))
    found = completions(state, "default/g", published.serial, held={a.uid})
    assert found == [Completion(b, "n1"), Completion(c, "n2")]
    assert completions(state, "default/g", published.serial + 1, held={a.uid}) == []
    assert completions(state, "default/h", published.serial, held={a.uid}) == []


def test_a_member_that_asks_for_what_only_kube_scheduler_judges_is_never_a_completion() -> None:
    a, b, c = gang("g", 3, 4)
    b = replace(b, unjudged="host ports")
    c = replace(c, invalid="phalanx.io/placement: unknown policy")
    state = cluster(a, b, c, groups=[podgroup("g", 3)])
    published = reserve(state, "default/g", (a, "n1"), (b, "n1"), (c, "n2"))
    assert completions(state, "default/g", published.serial, held={a.uid}) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda p: p, True),
        (lambda p: replace(p, unjudged="host ports"), False),
        (lambda p: replace(p, invalid="phalanx.io/placement: unknown policy"), False),
        (lambda p: replace(p, deleting=True), False),
    ],
    ids=["plain", "unjudged", "invalid", "deleting"],
)
def test_a_pod_says_whether_the_gate_may_bind_it_without_its_own_cycle(
    change: Callable[[Pod], Pod], expected: bool
) -> None:
    # What the pod alone says; the reservation and eligibility are judged at the gate.
    (member,) = gang("g", 1, 4)
    assert completable(change(member), gpu_node("n1")) is expected


def test_members_being_bound_deleting_or_no_longer_eligible_are_not_completions() -> None:
    a, b, c, d = gang("g", 4, 2)
    state = cluster(a, b, c, d, groups=[podgroup("g", 4)])
    published = reserve(state, "default/g", (a, "n1"), (b, "n1"), (c, "n2"), (d, "n2"))
    state.assume(b.uid, "n1")  # already being bound
    state.upsert_pod(replace(c, deleting=True))
    taint = Taint("maintenance", "", TaintEffect.NO_SCHEDULE)
    state.upsert_node(gpu_node("n2", taints=(taint,)))  # its cycle would have refused d here
    assert completions(state, "default/g", published.serial, held={a.uid}) == []
    state.upsert_node(gpu_node("n2"))
    assert completions(state, "default/g", published.serial, held={a.uid}) == [Completion(d, "n2")]


def test_an_unclaimed_template_slot_is_no_completion() -> None:
    a, b = gang("g", 2, 4)
    state = cluster(a, b, groups=[podgroup("g", 3)])
    published = state.reserve(
        Reservation(
            "default/g",
            (
                MemberReservation(a.uid, a.key, "n1", a.requests),
                MemberReservation(b.uid, b.key, "n1", b.requests),
                MemberReservation("slot/0", "", "n2", a.requests),
            ),
            reserved_at=0,
            expires_at=60,
            template=True,
        )
    )
    assert completions(state, "default/g", published.serial, held={a.uid}) == [Completion(b, "n1")]


def test_every_reserved_member_is_a_completion_even_with_nothing_else_pending() -> None:
    # kube-scheduler would reach b and c next, but completing them is still sooner.
    a, b, c = gang("g", 3, 4)
    state = cluster(a, b, c, groups=[podgroup("g", 3)])
    published = reserve(state, "default/g", (a, "n1"), (b, "n1"), (c, "n2"))
    assert state.pending_count() == state.member_count("default/g")
    found = completions(state, "default/g", published.serial, held={a.uid})
    assert found == [Completion(b, "n1"), Completion(c, "n2")]
