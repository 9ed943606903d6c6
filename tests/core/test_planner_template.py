"""Template reservation: an interchangeable gang is reserved from its first member's shape
before every sibling exists; members claim slots as they arrive (phalanx.core.template)."""

from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest

from builders import gang, gpu_node, pod, podgroup, present
from phalanx.core.cache import ClusterState, MemberReservation, MemberState
from phalanx.core.decisions import FilterResult
from phalanx.core.journal import Outcome
from phalanx.core.model import (
    NVIDIA_GPU,
    Pod,
    PodGroup,
    Resources,
    SubGroupPolicy,
    TopologyConstraint,
)
from phalanx.core.planner import GangPlanner

NODES = ["n1", "n2", "n3"]


def setup(
    *pods: Pod, group: PodGroup | None = None, nodes: Iterable[str] = NODES
) -> tuple[ClusterState, GangPlanner]:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(gpu_node(n))
    if group is not None:
        state.upsert_group(group)
    for p in pods:
        state.upsert_pod(p)
    return state, GangPlanner(state)


def arrive(
    state: ClusterState,
    planner: GangPlanner,
    member: Pod,
    offered: Sequence[str] = NODES,
    now: float = 1,
) -> FilterResult:
    state.upsert_pod(member)
    return planner.filter(member, offered, now=now).result


def test_the_first_member_reserves_slots_for_the_members_not_created_yet() -> None:
    members = gang("g", 4, 4)
    state, planner = setup(members[0], group=podgroup("g", 4))
    decision = planner.filter(members[0], NODES, now=0)
    reservation = present(state.reservation("default/g"))
    assert decision.reserved is reservation
    assert reservation.template
    assert len(reservation.members) == 4
    assert len(reservation.slots()) == 3
    assert state.reserved_gpus() == 16
    assert decision.result.feasible == (reservation.node_of(members[0].uid),)
    assert "3 of them for members not created yet" in decision.events[0].reason


def test_siblings_claim_slots_as_they_arrive_without_a_re_plan() -> None:
    members = gang("g", 4, 4)
    state, planner = setup(members[0], group=podgroup("g", 4))
    planner.filter(members[0], NODES, now=0)
    serial = present(state.reservation("default/g")).serial
    for m in members[1:]:
        result = arrive(state, planner, m)
        assert result.feasible == (present(state.reservation("default/g")).node_of(m.uid),)
    reservation = present(state.reservation("default/g"))
    assert reservation.serial == serial
    assert reservation.slots() == ()
    assert {m.pod_uid for m in reservation.members} == {m.uid for m in members}
    assert state.reserved_gpus() == 16


def test_a_member_of_another_shape_matches_no_slot_and_the_gang_waits_for_its_quorum() -> None:
    members = gang("g", 3, 4)
    state, planner = setup(members[0], group=podgroup("g", 3))
    planner.filter(members[0], NODES, now=0)
    bigger = replace(members[1], requests=members[1].requests + Resources({NVIDIA_GPU: 4}))
    result = arrive(state, planner, bigger)
    assert state.reservation("default/g") is None  # released: mixed shapes wait for quorum
    assert state.reserved_gpus() == 0
    assert "waiting for gang members: 2/3 exist" in next(iter(result.unresolvable.values()))
    assert Outcome.REPLANNED in [e.outcome for e in planner.events]


@pytest.mark.parametrize(
    "group",
    [
        podgroup("g", 3, plan='{"sequence": [{"execute": "a"}, {"execute": "b"}]}'),
        podgroup("g", 3, differentiable=frozenset({"a", "b"})),
        podgroup(
            "g",
            3,
            topology=TopologyConstraint(slice_size=3, slice_required="nvidia.com/gpu.clique"),
        ),
        # Which subgroup a member not yet created is in, its labels will say.
        podgroup(
            "g",
            3,
            topology=TopologyConstraint(
                subgroups=(SubGroupPolicy("worker", keys=("partition",), required="tier:1"),)
            ),
        ),
    ],
    ids=["with-a-plan", "with-differentiable-members", "with-slices", "with-volcano-subgroups"],
)
def test_gangs_that_are_not_interchangeable_keep_quorum_first(group: PodGroup) -> None:
    first = gang("g", 3, 4)[0]
    state, planner = setup(first, group=group)
    result = planner.filter(first, NODES, now=0).result
    assert state.reservation("default/g") is None
    assert "waiting for gang members: 1/3 exist" in next(iter(result.unresolvable.values()))


def test_existing_members_of_mixed_shapes_keep_quorum_first() -> None:
    a, b = pod("g-0", 4, group="g"), pod("g-1", 2, group="g")
    state, planner = setup(a, b, group=podgroup("g", 3))
    planner.filter(a, NODES, now=0)
    assert state.reservation("default/g") is None


def test_a_claimed_member_that_vanishes_gives_its_slot_back_to_its_replacement() -> None:
    members = gang("g", 3, 4)
    state, planner = setup(members[0], group=podgroup("g", 3))
    planner.filter(members[0], NODES, now=0)
    arrive(state, planner, members[1])
    serial = present(state.reservation("default/g")).serial
    state.remove_pod(members[1].uid)
    assert len(present(state.reservation("default/g")).slots()) == 2
    assert state.reserved_gpus() == 12  # nothing returned: the slot still holds it
    again = replace(members[1], uid="recreated", name="g-1b")
    assert len(arrive(state, planner, again).feasible) == 1
    reservation = present(state.reservation("default/g"))
    assert reservation.member("recreated") is not None
    assert reservation.serial == serial


def test_min_resources_raise_each_slot_to_its_share() -> None:
    first = gang("g", 2, 2)[0]
    group = replace(podgroup("g", 2), min_resources=Resources({NVIDIA_GPU: 8}))
    state, planner = setup(first, group=group)
    planner.filter(first, NODES, now=0)
    reservation = present(state.reservation("default/g"))
    assert [m.requests.gpus() for m in reservation.members] == [2, 4]  # own, then a slot


def test_a_slot_on_a_node_kube_scheduler_did_not_offer_is_traded_for_an_offered_one() -> None:
    members = gang("g", 3, 8)  # one member per node
    state, planner = setup(members[0], group=podgroup("g", 3))
    planner.filter(members[0], NODES, now=0)
    reservation = present(state.reservation("default/g"))
    slot_nodes = [m.node for m in reservation.slots()]
    result = arrive(state, planner, members[1], offered=[slot_nodes[1]])
    assert result.feasible == (slot_nodes[1],)
    assert present(state.reservation("default/g")).serial == reservation.serial


def test_unclaimed_slots_expire_like_any_reservation_and_say_so() -> None:
    first = gang("g", 3, 4)[0]
    state, planner = setup(first, group=replace(podgroup("g", 3), timeout_seconds=30))
    planner.filter(first, NODES, now=0)
    [event] = planner.expire(now=31)
    assert event.outcome is Outcome.EXPIRED
    assert "a slot no member claimed" in event.reason
    assert state.reserved_gpus() == 0


def test_a_template_gang_that_cannot_fit_reserves_nothing() -> None:
    first = gang("g", 4, 8)[0]
    state, planner = setup(first, group=podgroup("g", 4))
    result = planner.filter(first, NODES, now=0).result
    assert state.reservations() == {}
    assert "cannot place 4 member(s) of gang default/g" in next(iter(result.unresolvable.values()))


def test_assuming_a_claimed_member_moves_its_slot_capacity_to_the_pod() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(members[0], group=podgroup("g", 2))
    planner.filter(members[0], NODES, now=0)
    arrive(state, planner, members[1])
    node = present(present(state.reservation("default/g")).node_of(members[1].uid))
    state.assume(members[1].uid, node)
    assert (
        present(present(state.reservation("default/g")).member(members[1].uid)).state
        is MemberState.ASSUMED
    )
    assert state.reserved_gpus() == 4


# ---- claimed on arrival (the service nominates the slot's node before the first cycle) ----


def test_a_member_arriving_while_its_gang_holds_slots_is_reported_and_claims_one_before_filter() -> (  # noqa: E501
    None
):
    members = gang("g", 3, 4)
    state, planner = setup(members[0], group=podgroup("g", 3))
    assert state.take_arrivals() == []  # no reservation yet when the first one came
    planner.filter(members[0], NODES, now=0)
    serial = present(state.reservation("default/g")).serial
    state.upsert_pod(members[1])
    assert state.take_arrivals() == [members[1]]
    assert state.take_arrivals() == []  # said once
    claimed = planner.claim_arrival(members[1])
    assert claimed is not None
    assert claimed.pod_uid == members[1].uid
    assert len(present(state.reservation("default/g")).slots()) == 1
    assert planner.claim_arrival(members[1]) is None  # it holds its place already
    result = planner.filter(members[1], NODES, now=1).result
    assert result.feasible == (claimed.node,)
    assert present(state.reservation("default/g")).serial == serial  # no re-plan


def test_a_member_of_another_shape_claims_nothing_on_arrival_and_its_filter_decides() -> None:
    members = gang("g", 3, 4)
    state, planner = setup(members[0], group=podgroup("g", 3))
    planner.filter(members[0], NODES, now=0)
    bigger = replace(members[1], requests=members[1].requests + Resources({NVIDIA_GPU: 4}))
    state.upsert_pod(bigger)
    assert planner.claim_arrival(bigger) is None
    assert len(present(state.reservation("default/g")).slots()) == 2


def claimed_on_arrival() -> tuple[ClusterState, GangPlanner, list[Pod], MemberReservation, str]:
    """A gang of three whole-node members reserved by its first; the second arrives and
    claims a slot before its first filter. Returns the second's claim and a free slot's node."""
    members = gang("g", 3, 8)  # one member per node
    state, planner = setup(members[0], group=podgroup("g", 3))
    planner.filter(members[0], NODES, now=0)
    state.upsert_pod(members[1])
    claimed = planner.claim_arrival(members[1])
    assert claimed is not None
    other = next(m.node for m in present(state.reservation("default/g")).slots())
    return state, planner, members, claimed, other


def test_a_slot_claimed_on_arrival_on_a_node_not_offered_is_traded_at_filter_without_a_re_plan() -> (  # noqa: E501
    None
):
    state, planner, members, claimed, other = claimed_on_arrival()
    serial = present(state.reservation("default/g")).serial
    result = planner.filter(members[1], [other], now=1).result
    assert result.feasible == (other,)
    reservation = present(state.reservation("default/g"))
    assert reservation.serial == serial
    assert reservation.node_of(members[1].uid) == other
    assert [m.node for m in reservation.slots()] == [claimed.node]  # given back
    assert Outcome.REPLANNED not in [e.outcome for e in planner.events]


def test_only_the_first_filter_trades_a_slot_claimed_on_arrival_later_the_gang_re_plans() -> None:
    _state, planner, members, claimed, other = claimed_on_arrival()
    assert planner.filter(members[1], NODES, now=1).result.feasible == (claimed.node,)
    planner.filter(members[1], [other], now=2)  # its bind may be held on claimed.node by now
    assert Outcome.REPLANNED in [e.outcome for e in planner.events]


def test_a_member_that_gives_slots_back_twice_leaves_two_distinct_slots() -> None:
    state, planner, members, claimed, other = claimed_on_arrival()
    planner.filter(members[1], [other], now=1)  # traded: its first slot is given back
    state.remove_pod(members[1].uid)  # gone before binding: its second slot is given back
    reservation = present(state.reservation("default/g"))
    assert sorted(m.node for m in reservation.slots()) == sorted([claimed.node, other])
    assert len({m.pod_uid for m in reservation.members}) == 3
    assert [n.reserved.gpus() for n in state.nodes()] == [8, 8, 8]


@pytest.mark.parametrize("min_member", [13, 1_000_000_000])
def test_a_gang_the_whole_cluster_could_never_hold_is_refused_before_any_slot_is_made(
    min_member: int,
) -> None:
    # Three 8-GPU nodes hold 12 members of 2 GPUs even empty. A billion slots, one
    # placeholder each, would hold the service for minutes: the count is judged first.
    members = gang("g", 1, 2)
    state, planner = setup(members[0], group=podgroup("g", min_member))
    result = planner.filter(members[0], NODES, now=0).result
    assert state.reservation("default/g") is None
    reason = next(iter(result.unresolvable.values()))
    assert reason == (
        f"cannot place {min_member:,} member(s) of gang default/g: all 3 node(s) together "
        "could hold 12 of them ({cpu: 1, memory: 4Gi, nvidia.com/gpu: 2} each), even empty"
    )
    assert planner.events[-1].outcome is Outcome.UNFIT


def test_a_gang_that_fills_the_empty_cluster_exactly_is_still_reserved() -> None:
    members = gang("g", 1, 2)
    state, planner = setup(members[0], group=podgroup("g", 12))
    planner.filter(members[0], NODES, now=0)
    assert len(present(state.reservation("default/g")).slots()) == 11


# --- Volcano task minima ------------------------------------------------------------------


def test_a_gang_whose_task_minima_name_two_tasks_keeps_quorum_first() -> None:
    group = replace(podgroup("mpi", 3), min_task_member=(("master", 1), ("worker", 2)))
    master = pod("mpi-master-0", 4, group="mpi", task="master")
    state, planner = setup(master, group=group)
    result = planner.filter(master, NODES, now=0).result
    assert state.reservation("default/mpi") is None
    assert set(result.unresolvable.values()) == {
        "waiting for gang members: 1/3 exist, but task worker has 0 of 2 member(s) "
        "(spec.minTaskMember)"
    }


def test_a_gang_whose_task_minima_name_one_task_is_reserved_from_a_member_of_it() -> None:
    group = replace(podgroup("g", 3), min_task_member=(("worker", 2),))
    workers = gang("g", 3, 4, task="worker")
    state, planner = setup(workers[0], group=group)
    planner.filter(workers[0], NODES, now=0)
    reservation = present(state.reservation("default/g"))
    assert reservation.template
    assert reservation.slot_task == "worker"
    assert len(reservation.slots()) == 2


def test_a_member_of_another_task_claims_no_slot_reserved_for_the_minimum_task() -> None:
    group = replace(podgroup("g", 3), min_task_member=(("worker", 2),))
    workers = gang("g", 3, 4, task="worker")
    launcher = pod("g-launcher", 4, group="g", task="launcher")
    state, planner = setup(workers[0], group=group)
    planner.filter(workers[0], NODES, now=0)
    assert planner.claim_arrival(launcher) is None
    result = arrive(state, planner, launcher)
    # Released rather than given a worker's slot: 2 members of mixed tasks wait for a third.
    assert state.reservation("default/g") is None
    assert "waiting for gang members: 2/3 exist" in next(iter(result.unresolvable.values()))
    arrive(state, planner, workers[1])
    reservation = present(state.reservation("default/g"))
    assert {m.pod_uid for m in reservation.members} == {
        workers[0].uid,
        workers[1].uid,
        launcher.uid,
    }
