"""Planning a gang ahead of kube-scheduler (`GangPlanner.plan_ahead`): once its quorum
exists, as its first member's filter would, but only for a gang Phalanx may bind whole by
itself, and without counting any member as refused."""

from dataclasses import replace

from builders import gang, gpu_node, podgroup, present
from phalanx.core.cache import ClusterState
from phalanx.core.journal import Outcome
from phalanx.core.model import GroupRef, Pod, PodGroup
from phalanx.core.planner import GangPlanner

NODES = ["n1", "n2", "n3"]
G = GroupRef("default", "g")


def setup(
    *pods: Pod, group: PodGroup | None = None, synced: bool = True
) -> tuple[ClusterState, GangPlanner]:
    state = ClusterState()
    for n in NODES:
        state.upsert_node(gpu_node(n))
    planner = GangPlanner(state)
    if not synced:
        planner.note_synced()  # synced empty: what comes later is this instance's own
    if group is not None:
        state.upsert_group(group)
    for p in pods:
        state.upsert_pod(p)
    if synced:
        planner.note_synced()
    return state, planner


def test_a_gang_whose_quorum_exists_is_reserved_on_nodes_every_member_may_use() -> None:
    members = gang("g", 3, 4)
    state, planner = setup(*members, group=podgroup("g", 3), synced=False)
    decision = planner.plan_ahead(G, now=5)
    assert decision is not None
    reservation = present(state.reservation("default/g"))
    assert decision.reserved is reservation
    assert {m.pod_uid for m in reservation.members} == {p.uid for p in members}
    assert reservation.expires_at == 5 + podgroup("g", 3).timeout_seconds
    assert [e.outcome for e in decision.events] == [Outcome.COMMITTED]
    assert planner.parked("default/g", [p.ref for p in members]) == []


def test_no_plan_before_the_quorum_exists_or_once_the_gang_holds_a_reservation() -> None:
    members = gang("g", 3, 4)
    state, planner = setup(*members[:2], group=podgroup("g", 3), synced=False)
    assert planner.plan_ahead(G, now=0) is None  # 2 of 3: kube-scheduler's filter decides
    assert state.reservation("default/g") is None
    state.upsert_pod(members[2])
    assert planner.plan_ahead(G, now=1) is not None
    assert planner.plan_ahead(G, now=2) is None  # reserved already


def test_a_gang_pending_when_this_instance_synced_is_left_to_its_filters() -> None:
    members = gang("g", 2, 4)
    state, planner = setup(*members, group=podgroup("g", 2), synced=True)
    assert planner.plan_ahead(G, now=0) is None  # a commit record may name it
    assert state.reservation("default/g") is None


def test_a_gang_with_a_bound_or_unjudged_member_is_not_planned_ahead() -> None:
    members = gang("g", 2, 4)
    bound = replace(members[0], node_name="n1")
    _, planner = setup(bound, members[1], group=podgroup("g", 2), synced=False)
    assert planner.plan_ahead(G, now=0) is None

    members = gang("g", 2, 4)
    ported = replace(members[1], unjudged="host ports")
    _, planner = setup(members[0], ported, group=podgroup("g", 2), synced=False)
    assert planner.plan_ahead(G, now=0) is None


def test_a_gang_that_does_not_fit_is_said_unfit_and_remembered() -> None:
    members = gang("g", 4, 8)  # 4 whole nodes asked of 3
    _, planner = setup(*members, group=podgroup("g", 4), synced=False)
    decision = planner.plan_ahead(G, now=0)
    assert decision is not None
    assert decision.reserved is None
    assert [e.outcome for e in decision.events] == [Outcome.UNFIT]
    assert planner.parked("default/g", [p.ref for p in members]) == []
    # Its members' filters recall the verdict until capacity changes.
    assert not planner.filter(members[0], NODES, now=1).result.feasible


def test_a_gang_whose_task_is_below_its_minimum_is_not_planned_ahead() -> None:
    group = replace(podgroup("g", 3), min_task_member=(("master", 1), ("worker", 2)))
    workers = gang("g", 3, 4, task="worker")
    state, planner = setup(*workers, group=group, synced=False)
    assert planner.plan_ahead(G, now=0) is None
    assert state.reservation("default/g") is None
