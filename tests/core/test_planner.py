"""GangPlanner: quorum, whole-gang reservation, following it, re-plan, expiry, singles."""

from collections.abc import Iterable
from dataclasses import replace

import pytest

from builders import (
    gang,
    gpu_node,
    pod,
    podgroup,
    present,
)
from phalanx.core.cache import ClusterState, MemberState
from phalanx.core.decisions import FilterResult
from phalanx.core.journal import Outcome, ReplanCause
from phalanx.core.model import Node, Pod, PodGroup
from phalanx.core.planner import GangPlanner, PlannerSettings
from phalanx.core.topology import JOB_COMPLETION_INDEX_LABEL

NODES = ["n1", "n2", "n3"]


def setup(
    *nodes: Node, groups: Iterable[PodGroup] = (), pods: Iterable[Pod] = (), template: bool = True
) -> tuple[ClusterState, GangPlanner]:
    state = ClusterState()
    for n in nodes or [gpu_node(n) for n in NODES]:
        state.upsert_node(n)
    for g in groups:
        state.upsert_group(g)
    for p in pods:
        state.upsert_pod(p)
    return state, GangPlanner(state, PlannerSettings(template_reservation=template))


def outcomes(planner: GangPlanner) -> list[Outcome]:
    return [e.outcome for e in planner.events]


def test_a_member_waits_until_min_member_pods_exist() -> None:
    members = gang("g", 4, 8)
    state, planner = setup(groups=[podgroup("g", 4)], pods=members[:3], template=False)
    result = planner.filter(members[0], NODES, now=0).result
    assert result.feasible == ()
    assert set(result.unresolvable.values()) == {"waiting for gang members: 3/4 exist"}
    assert outcomes(planner) == [Outcome.WAITING]
    assert state.reservations() == {}


def test_a_member_counts_as_parked_from_a_refusal_until_its_next_filter_passes() -> None:
    members = gang("g", 3, 8)
    state, planner = setup(groups=[podgroup("g", 3)], pods=members[:2], template=False)
    refs = [p.ref for p in members]
    planner.filter(members[0], NODES, now=0)  # waiting for the third
    assert planner.parked("default/g", refs) == [members[0].ref]

    state.upsert_pod(members[2])
    assert planner.filter(members[2], NODES, now=1).result.feasible
    assert planner.parked("default/g", refs) == [members[0].ref]
    assert planner.filter(members[0], NODES, now=2).result.feasible
    assert planner.parked("default/g", refs) == []


def test_every_member_of_a_gang_pending_at_the_first_sync_counts_as_parked() -> None:
    # A previous instance may have refused any of them; this one cannot know which.
    members = gang("g", 3, 8)
    _, planner = setup(groups=[podgroup("g", 3)], pods=members)
    planner.note_synced()
    refs = [p.ref for p in members]
    assert planner.parked("default/g", refs) == refs
    assert planner.parked("default/other", refs) == []


def test_the_first_member_reserves_the_whole_gang_and_gets_its_own_node() -> None:
    members = gang("g", 3, 8)
    state, planner = setup(groups=[podgroup("g", 3)], pods=members)
    result = planner.filter(members[1], NODES, now=0).result
    reservation = state.reservation("default/g")
    assert reservation is not None
    assert len(reservation.members) == 3
    assert result.feasible == (reservation.node_of(members[1].uid),)
    assert state.reserved_gpus() == 24


def test_later_members_follow_their_reservation_without_re_planning() -> None:
    members = gang("g", 3, 8)
    state, planner = setup(groups=[podgroup("g", 3)], pods=members)
    planner.filter(members[0], NODES, now=0)
    reservation = present(state.reservation("default/g"))
    for m in members[1:]:
        result = planner.filter(m, NODES, now=1).result
        assert result == FilterResult((present(reservation.node_of(m.uid)),))  # no other reasons
    assert state.reservation("default/g") is reservation


def test_a_reserved_node_not_offered_triggers_one_re_plan_without_it() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    first = present(present(state.reservation("default/g")).node_of(members[1].uid))
    offered = [n for n in NODES if n != first]
    result = planner.filter(members[1], offered, now=1).result
    assert Outcome.REPLANNED in outcomes(planner)
    assert result.feasible
    assert result.feasible[0] != first
    assert all(m.node != first for m in present(state.reservation("default/g")).members)


def test_a_reserved_member_whose_requests_grew_is_re_planned_at_its_filter() -> None:
    # Its reserved capacity no longer holds it: following the reservation would only have
    # its bind refused (`still_bindable`), after the whole wait at the gate.
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    grown = replace(members[1], requests=pod("big", 8).requests)
    state.upsert_pod(grown)
    result = planner.filter(grown, NODES, now=1).result
    [event] = [e for e in planner.events if e.outcome is Outcome.REPLANNED]
    assert event.cause is ReplanCause.GREW
    assert event.reason.startswith("pod default/g-1 now asks for more than gang default/g")
    reservation = present(state.reservation("default/g"))
    assert present(reservation.member(grown.uid)).requests == grown.requests
    assert result == FilterResult((present(reservation.node_of(grown.uid)),))
    assert state.reserved_gpus() == 12


def test_a_reserved_member_whose_requests_shrank_follows_its_reservation() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    reservation = present(state.reservation("default/g"))
    shrunk = replace(members[1], requests=pod("small", 2).requests)
    state.upsert_pod(shrunk)
    result = planner.filter(shrunk, NODES, now=1).result
    assert result == FilterResult((present(reservation.node_of(shrunk.uid)),))
    assert Outcome.REPLANNED not in outcomes(planner)


def test_a_second_refusal_releases_the_reservation_with_a_reason() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    for _ in range(2):
        node = present(present(state.reservation("default/g")).node_of(members[1].uid))
        result = planner.filter(members[1], [n for n in NODES if n != node], now=1).result
    assert state.reservation("default/g") is None
    assert "again after a re-plan" in next(iter(result.unresolvable.values()))
    assert state.reserved_gpus() == 0


def test_a_reservation_expires_after_the_group_timeout() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2, timeout=30)], pods=members)
    planner.filter(members[0], NODES, now=100)
    planner.expire(now=129)
    assert state.reservation("default/g") is not None
    planner.expire(now=130)
    assert state.reservation("default/g") is None
    assert state.reserved_gpus() == 0
    assert outcomes(planner)[-1] is Outcome.EXPIRED
    assert "expired after 30s" in planner.events[-1].reason


def test_a_gang_that_cannot_fit_reserves_nothing_and_says_why() -> None:
    members = gang("g", 4, 8)
    state, planner = setup(groups=[podgroup("g", 4, placement="same-node")], pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert state.reservations() == {}
    reason = next(iter(result.unresolvable.values()))
    assert "cannot place 4 member(s) of gang default/g" in reason
    assert "lacks 24 nvidia.com/gpu" in reason


def test_single_pods_never_eat_into_reservations() -> None:
    members = gang("g", 3, 8)
    _state, planner = setup(groups=[podgroup("g", 3)], pods=members)
    planner.filter(members[0], NODES, now=0)
    single = pod("solo", 1)
    result = planner.filter(single, NODES, now=0).result
    assert result.feasible == ()
    assert all("reserved for gangs" in r for r in result.unresolvable.values())


def test_two_gangs_never_hold_half_of_each_other() -> None:
    # 16 GPUs, two gangs of 2x8: each fits alone, not both. The first reserves whole; the
    # second waits with a reason instead of grabbing half (the coscheduling deadlock).
    a, b = gang("a", 2, 8), gang("b", 2, 8)
    state, planner = setup(
        gpu_node("n1"), gpu_node("n2"), groups=[podgroup("a", 2), podgroup("b", 2)], pods=[*a, *b]
    )
    assert planner.filter(a[0], ["n1", "n2"], now=0).result.feasible
    result = planner.filter(b[0], ["n1", "n2"], now=0).result
    assert result.feasible == ()
    assert state.reservation("default/b") is None
    assert state.reserved_gpus() == 16


def test_an_elastic_gang_reserves_its_lowest_ranks_as_quorum_when_not_all_members_fit() -> None:
    members = gang("g", 4, 8)
    state, planner = setup(gpu_node("n1"), gpu_node("n2"), groups=[podgroup("g", 2)], pods=members)
    result = planner.filter(members[3], ["n1", "n2"], now=0).result
    reservation = present(state.reservation("default/g"))
    assert {m.pod_key for m in reservation.members} == {"default/g-0", "default/g-1"}
    assert result.feasible == ()
    assert "joins once the quorum is bound" in result.unresolvable["n1"]


def test_an_elastic_gang_quorum_follows_the_operators_rank_labels_not_names() -> None:
    ranks = {"g-a": "3", "g-b": "0", "g-c": "2", "g-d": "1"}
    members = [
        pod(name, 8, group="g", labels={JOB_COMPLETION_INDEX_LABEL: rank})
        for name, rank in ranks.items()
    ]
    state, planner = setup(gpu_node("n1"), gpu_node("n2"), groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[1], ["n1", "n2"], now=0)
    reservation = present(state.reservation("default/g"))
    assert {m.pod_key for m in reservation.members} == {"default/g-b", "default/g-d"}


def test_annotation_only_groups_are_synthesized_from_their_members() -> None:
    members = [replace(p, min_member=2) for p in gang("ann", 2, 2)]
    state, planner = setup(pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert result.feasible
    assert state.reservation("default/ann") is not None


def test_members_that_disagree_on_min_member_are_reported() -> None:
    members = [
        replace(gang("ann", 1, 1)[0], min_member=2),
        replace(gang("ann", 1, 1)[0], name="ann-1", min_member=3),
    ]
    _state, planner = setup(pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "disagree on phalanx.io/min-member: 2, 3" in next(iter(result.unresolvable.values()))


def test_label_members_without_their_podgroup_wait_for_it() -> None:
    members = gang("g", 2, 1)
    _, planner = setup(pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "waiting for PodGroup default/g to exist" in next(iter(result.unresolvable.values()))


def test_an_invalid_pod_is_refused_on_every_node_with_its_reason() -> None:
    bad = replace(
        pod("bad", 1), invalid='annotation phalanx.io/min-member: "abc" is not a positive integer'
    )
    _, planner = setup(pods=[bad])
    result = planner.filter(bad, NODES, now=0).result
    assert set(result.unresolvable) == set(NODES)
    assert "abc" in result.unresolvable["n1"]


def test_an_invalid_podgroup_is_reported_to_its_members() -> None:
    members = gang("g", 2, 1)
    state, planner = setup(pods=members)
    state.set_group_error("default/g", "spec.minMember: must be at least 1")
    result = planner.filter(members[0], NODES, now=0).result
    assert "PodGroup default/g is invalid: spec.minMember" in result.unresolvable["n1"]


def test_an_invalid_plan_is_reported_not_raised() -> None:
    members = gang("g", 2, 1)
    _, planner = setup(groups=[podgroup("g", 2, plan='{"sequence": 5}')], pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "phalanx.io/plan on PodGroup default/g is invalid" in result.unresolvable["n1"]


def test_waiting_is_reported_once_per_change_not_once_per_filter() -> None:
    members = gang("g", 4, 1)
    _, planner = setup(groups=[podgroup("g", 4)], pods=members[:2], template=False)
    for _ in range(5):
        planner.filter(members[0], NODES, now=0)
    assert outcomes(planner) == [Outcome.WAITING]


def test_prioritize_gives_the_reserved_node_the_top_score() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    node = present(present(state.reservation("default/g")).node_of(members[0].uid))
    scores = planner.prioritize(members[0], NODES)
    assert scores[node] == 10
    assert all(v == 0 for n, v in scores.items() if n != node)


def test_prioritize_prefers_the_fullest_node_that_fits_for_single_pods() -> None:
    _state, planner = setup(pods=[pod("x", 6, node="n2")])
    scores = planner.prioritize(pod("solo", 2), NODES)
    assert scores["n2"] == 10
    assert scores["n1"] == scores["n3"] == 2
    assert all(isinstance(v, int) and 0 <= v <= 10 for v in scores.values())


def test_a_bound_member_follows_its_node() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    node = present(present(state.reservation("default/g")).node_of(members[0].uid))
    state.assume(members[0].uid, node)
    assert (
        present(present(state.reservation("default/g")).member(members[0].uid)).state
        is MemberState.ASSUMED
    )
    assert planner.filter(members[0], NODES, now=0).result.feasible == (node,)


@pytest.mark.parametrize(
    ("group_placement", "member_placements", "expected_nodes"),
    [
        (None, ["spread", "spread"], 2),  # the members' common annotation applies
        ("same-node", ["spread", "spread"], 1),  # the PodGroup's own annotation wins
        (None, ["", ""], 1),  # nothing declared: the default, pack
    ],
    ids=["members-decide", "group-wins", "default-pack"],
)
def test_the_placement_comes_from_the_group_then_its_members_then_the_default(
    group_placement: str | None, member_placements: list[str], expected_nodes: int
) -> None:
    members = [
        replace(p, placement=policy)
        for p, policy in zip(gang("g", 2, 2), member_placements, strict=True)
    ]
    state, planner = setup(groups=[podgroup("g", 2, placement=group_placement)], pods=members)
    planner.filter(members[0], NODES, now=0)
    reservation = present(state.reservation("default/g"))
    assert len({m.node for m in reservation.members}) == expected_nodes


def test_members_that_disagree_on_placement_are_reported() -> None:
    members = [
        replace(p, placement=policy)
        for p, policy in zip(gang("g", 2, 2), ["spread", "pack"], strict=True)
    ]
    _, planner = setup(groups=[podgroup("g", 2)], pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "disagree on phalanx.io/placement: pack, spread" in result.unresolvable["n1"]


def test_a_gang_that_left_the_model_is_forgotten() -> None:
    members = gang("g", 2, 2)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    planner.forget_gone()
    assert "default/g" in planner.records  # still here: reserved, members exist
    for p in members:
        state.remove_pod(p.uid)
    state.remove_group("default/g")
    planner.forget_gone()
    assert planner.records == {}


# --- Volcano task minima (spec.minTaskMember) ------------------------------------------------


def test_a_gang_with_enough_members_waits_while_a_task_is_below_its_minimum() -> None:
    # An MPI job: a quorum of 3 workers and no master must not be placed.
    group = replace(podgroup("mpi", 3), min_task_member=(("master", 1), ("worker", 2)))
    workers = gang("mpi", 4, 8, task="worker")
    state, planner = setup(groups=[group], pods=workers)
    result = planner.filter(workers[0], NODES, now=0).result
    assert result.feasible == ()
    assert set(result.unresolvable.values()) == {
        "waiting for gang members: 4/3 exist, but task master has 0 of 1 member(s) "
        "(spec.minTaskMember)"
    }
    assert state.reservations() == {}

    master = pod("mpi-master-0", 8, group="mpi", task="master")
    state.upsert_pod(master)
    planner.filter(workers[0], NODES, now=1)
    reservation = present(state.reservation("default/mpi"))
    assert master.uid in {m.pod_uid for m in reservation.members}


def test_an_elastic_gangs_quorum_holds_each_tasks_minimum_before_lower_ranks() -> None:
    # The parameter servers rank first by name; 4 nodes hold 4 of the 6 members.
    group = replace(podgroup("tf", 4), min_task_member=(("ps", 2), ("worker", 2)))
    ps = [pod(f"tf-ps-{i}", 8, group="tf", task="ps") for i in range(3)]
    workers = [pod(f"tf-worker-{i}", 8, group="tf", task="worker") for i in range(3)]
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    state, planner = setup(*nodes, groups=[group], pods=[*ps, *workers])
    planner.filter(ps[0], [n.name for n in nodes], now=0)
    reservation = present(state.reservation("default/tf"))
    assert {m.pod_key for m in reservation.members} == {
        "default/tf-ps-0",
        "default/tf-ps-1",
        "default/tf-worker-0",
        "default/tf-worker-1",
    }
