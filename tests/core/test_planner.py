"""GangPlanner: quorum, whole-gang reservation, following it, re-plan, expiry, singles, preempt."""

from dataclasses import replace
from typing import Any

import pytest

from builders import (
    composite_obj,
    gang,
    gpu_node,
    pod,
    pod_obj,
    podgroup,
    upstream_podgroup_obj,
    workload_obj,
)
from phalanx.core.cache import ClusterState, MemberState
from phalanx.core.groups import registry
from phalanx.core.groups.composite import CompositePodGroup
from phalanx.core.groups.upstream import Workload
from phalanx.core.inventory import parse_pod
from phalanx.core.journal import Outcome
from phalanx.core.model import PodPhase
from phalanx.core.planner import GangPlanner, PlannerSettings
from phalanx.core.topology import JOB_COMPLETION_INDEX_LABEL

NODES = ["n1", "n2", "n3"]


def setup(*nodes, groups=(), pods=(), template=True):
    state = ClusterState()
    for n in nodes or [gpu_node(n) for n in NODES]:
        state.upsert_node(n)
    for g in groups:
        state.upsert_group(g)
    for p in pods:
        state.upsert_pod(p)
    return state, GangPlanner(state, PlannerSettings(template_reservation=template))


def outcomes(planner):
    return [e.outcome for e in planner.events]


def test_a_member_waits_until_min_member_pods_exist():
    members = gang("g", 4, 8)
    state, planner = setup(groups=[podgroup("g", 4)], pods=members[:3], template=False)
    result = planner.filter(members[0], NODES, now=0).result
    assert result.feasible == ()
    assert set(result.unresolvable.values()) == {"waiting for gang members: 3/4 exist"}
    assert outcomes(planner) == [Outcome.WAITING]
    assert state.reservations() == {}


def test_a_member_counts_as_parked_from_a_refusal_until_its_next_filter_passes():
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


def test_every_member_of_a_gang_pending_at_the_first_sync_counts_as_parked():
    # A previous instance may have refused any of them; this one cannot know which.
    members = gang("g", 3, 8)
    _, planner = setup(groups=[podgroup("g", 3)], pods=members)
    planner.note_synced()
    refs = [p.ref for p in members]
    assert planner.parked("default/g", refs) == refs
    assert planner.parked("default/other", refs) == []


def test_the_first_member_reserves_the_whole_gang_and_gets_its_own_node():
    members = gang("g", 3, 8)
    state, planner = setup(groups=[podgroup("g", 3)], pods=members)
    result = planner.filter(members[1], NODES, now=0).result
    reservation = state.reservation("default/g")
    assert reservation is not None
    assert len(reservation.members) == 3
    assert result.feasible == (reservation.node_of(members[1].uid),)
    assert state.reserved_gpus() == 24


def test_later_members_follow_their_reservation_without_re_planning():
    members = gang("g", 3, 8)
    state, planner = setup(groups=[podgroup("g", 3)], pods=members)
    planner.filter(members[0], NODES, now=0)
    reservation = state.reservation("default/g")
    for m in members[1:]:
        result = planner.filter(m, NODES, now=1).result
        assert result.feasible == (reservation.node_of(m.uid),)
        assert len(result.unresolvable) == 2
    assert state.reservation("default/g") is reservation


def test_a_reserved_node_not_offered_triggers_one_re_plan_without_it():
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    first = state.reservation("default/g").node_of(members[1].uid)
    offered = [n for n in NODES if n != first]
    result = planner.filter(members[1], offered, now=1).result
    assert Outcome.REPLANNED in outcomes(planner)
    assert result.feasible
    assert result.feasible[0] != first
    assert all(m.node != first for m in state.reservation("default/g").members)


def test_a_second_refusal_releases_the_reservation_with_a_reason():
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    for _ in range(2):
        node = state.reservation("default/g").node_of(members[1].uid)
        result = planner.filter(members[1], [n for n in NODES if n != node], now=1).result
    assert state.reservation("default/g") is None
    assert "again after a re-plan" in next(iter(result.unresolvable.values()))
    assert state.reserved_gpus() == 0


def test_a_reservation_expires_after_the_group_timeout():
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


def test_a_gang_that_cannot_fit_reserves_nothing_and_says_why():
    members = gang("g", 4, 8)
    state, planner = setup(groups=[podgroup("g", 4, placement="same-node")], pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert state.reservations() == {}
    reason = next(iter(result.unresolvable.values()))
    assert "cannot place 4 member(s) of gang default/g" in reason
    assert "lacks 24 nvidia.com/gpu" in reason


def test_single_pods_never_eat_into_reservations():
    members = gang("g", 3, 8)
    _state, planner = setup(groups=[podgroup("g", 3)], pods=members)
    planner.filter(members[0], NODES, now=0)
    single = pod("solo", 1)
    result = planner.filter(single, NODES, now=0).result
    assert result.feasible == ()
    assert all("reserved for gangs" in r for r in result.unresolvable.values())


def test_two_gangs_never_hold_half_of_each_other():
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


def test_an_elastic_gang_reserves_its_lowest_ranks_as_quorum_when_not_all_members_fit():
    members = gang("g", 4, 8)
    state, planner = setup(gpu_node("n1"), gpu_node("n2"), groups=[podgroup("g", 2)], pods=members)
    result = planner.filter(members[3], ["n1", "n2"], now=0).result
    reservation = state.reservation("default/g")
    assert {m.pod_key for m in reservation.members} == {"default/g-0", "default/g-1"}
    assert result.feasible == ()
    assert "joins once the quorum is bound" in result.unresolvable["n1"]


def test_an_elastic_gang_quorum_follows_the_operators_rank_labels_not_names():
    ranks = {"g-a": "3", "g-b": "0", "g-c": "2", "g-d": "1"}
    members = [
        pod(name, 8, group="g", labels={JOB_COMPLETION_INDEX_LABEL: rank})
        for name, rank in ranks.items()
    ]
    state, planner = setup(gpu_node("n1"), gpu_node("n2"), groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[1], ["n1", "n2"], now=0)
    reservation = state.reservation("default/g")
    assert {m.pod_key for m in reservation.members} == {"default/g-b", "default/g-d"}


def test_annotation_only_groups_are_synthesized_from_their_members():
    members = [replace(p, min_member=2) for p in gang("ann", 2, 2)]
    state, planner = setup(pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert result.feasible
    assert state.reservation("default/ann") is not None


def test_members_that_disagree_on_min_member_are_reported():
    members = [
        replace(gang("ann", 1, 1)[0], min_member=2),
        replace(gang("ann", 1, 1)[0], name="ann-1", min_member=3),
    ]
    _state, planner = setup(pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "disagree on phalanx.io/min-member: 2, 3" in next(iter(result.unresolvable.values()))


def test_label_members_without_their_podgroup_wait_for_it():
    members = gang("g", 2, 1)
    _, planner = setup(pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "waiting for PodGroup default/g to exist" in next(iter(result.unresolvable.values()))


def test_an_invalid_pod_is_refused_on_every_node_with_its_reason():
    bad = replace(
        pod("bad", 1), invalid='annotation phalanx.io/min-member: "abc" is not a positive integer'
    )
    _, planner = setup(pods=[bad])
    result = planner.filter(bad, NODES, now=0).result
    assert set(result.unresolvable) == set(NODES)
    assert "abc" in result.unresolvable["n1"]


def test_an_invalid_podgroup_is_reported_to_its_members():
    members = gang("g", 2, 1)
    state, planner = setup(pods=members)
    state.set_group_error("default/g", "spec.minMember: must be at least 1")
    result = planner.filter(members[0], NODES, now=0).result
    assert "PodGroup default/g is invalid: spec.minMember" in result.unresolvable["n1"]


def test_an_invalid_plan_is_reported_not_raised():
    members = gang("g", 2, 1)
    _, planner = setup(groups=[podgroup("g", 2, plan='{"sequence": 5}')], pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "phalanx.io/plan on PodGroup default/g is invalid" in result.unresolvable["n1"]


def test_waiting_is_reported_once_per_change_not_once_per_filter():
    members = gang("g", 4, 1)
    _, planner = setup(groups=[podgroup("g", 4)], pods=members[:2], template=False)
    for _ in range(5):
        planner.filter(members[0], NODES, now=0)
    assert outcomes(planner) == [Outcome.WAITING]


def test_prioritize_gives_the_reserved_node_the_top_score():
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    node = state.reservation("default/g").node_of(members[0].uid)
    scores = planner.prioritize(members[0], NODES)
    assert scores[node] == 10
    assert all(v == 0 for n, v in scores.items() if n != node)


def test_prioritize_prefers_the_fullest_node_that_fits_for_single_pods():
    _state, planner = setup(pods=[pod("x", 6, node="n2")])
    scores = planner.prioritize(pod("solo", 2), NODES)
    assert scores["n2"] == 10
    assert scores["n1"] == scores["n3"] == 2
    assert all(isinstance(v, int) and 0 <= v <= 10 for v in scores.values())


@pytest.mark.parametrize(
    ("victims", "kept"),
    [
        (["g-0"], {}),  # would leave g at 1 of 2 on another node: drop the node
        (["solo"], {"n1": ["solo"]}),
    ],
    ids=["half-a-gang", "single-pod"],
)
def test_preemption_never_leaves_a_running_gang_below_min_member(victims, kept):
    g0 = pod("g-0", 4, node="n1", group="g", uid="g-0", phase=PodPhase.RUNNING)
    g1 = pod("g-1", 4, node="n2", group="g", uid="g-1", phase=PodPhase.RUNNING)
    solo = pod("solo", 2, node="n1", uid="solo", phase=PodPhase.RUNNING)
    _, planner = setup(groups=[podgroup("g", 2)], pods=[g0, g1, solo])
    assert planner.preempt({"n1": victims}) == kept


def test_preemption_takes_a_whole_gang_that_lives_on_one_node():
    g0 = pod("g-0", 2, node="n1", group="g", uid="g-0")
    g1 = pod("g-1", 2, node="n1", group="g", uid="g-1")
    _, planner = setup(groups=[podgroup("g", 2)], pods=[g0, g1])
    assert planner.preempt({"n1": ["g-0"]}) == {"n1": ["g-0", "g-1"]}


def test_preemption_never_takes_a_running_gangs_last_member_of_a_task():
    # Three of four would still make minMember 3, but not without the master.
    minima = (("master", 1), ("worker", 2))
    master = pod("m-0", 4, node="n1", group="g", uid="m-0", task="master", phase=PodPhase.RUNNING)
    workers = [
        pod(f"w-{i}", 4, node="n2", group="g", uid=f"w-{i}", task="worker", phase=PodPhase.RUNNING)
        for i in range(3)
    ]
    group = replace(podgroup("g", 3), min_task_member=minima)
    _, planner = setup(groups=[group], pods=[master, *workers])
    assert planner.preempt({"n1": ["m-0"]}) == {}
    assert planner.preempt({"n2": ["w-0"]}) == {"n2": ["w-0"]}  # 2 workers still make it


def upstream(*objects: dict[str, Any]) -> GangPlanner:
    """A planner over n1..n3 and raw gang objects and pods, as the sources feed them."""
    state, planner = setup()
    for obj in objects:
        if obj["kind"] == "Pod":
            state.upsert_pod(parse_pod(obj))
            continue
        parsed = registry.parse_group_object(obj)
        assert parsed is not None
        if isinstance(parsed.value, CompositePodGroup):
            state.upsert_composite(parsed.value)
        elif isinstance(parsed.value, Workload):
            state.upsert_workload(parsed.value)
        else:
            state.upsert_group(parsed.value)
    return planner


def running(name: str, node: str, group: str, gpus: int = 4) -> dict[str, Any]:
    """A running member of upstream PodGroup `group` on `node` (its UID is its name)."""
    return pod_obj(name, gpus, node=node, phase="Running", uid=name, scheduling_group=group)


# A PodGroup of minCount 2 with two members on n1 and two on n2.
SPREAD = [running("a-0", "n1", "a"), running("a-1", "n1", "a")]
SPREAD += [running("a-2", "n2", "a"), running("a-3", "n2", "a")]


@pytest.mark.parametrize(
    ("mode", "victims", "kept"),
    [
        ("all", ["a-0"], {}),
        ("all", ["a-0", "a-1"], {}),
        ("single", ["a-0"], {"n1": ["a-0"]}),
        ("single", ["a-0", "a-1"], {"n1": ["a-0", "a-1"]}),
    ],
    ids=["all-one", "all-a-node", "single-one", "single-a-node"],
)
def test_preemption_takes_no_part_of_a_pod_group_with_disruption_mode_all(mode, victims, kept):
    # With `single` two of four members still make minCount 2; with `all` none may go alone.
    planner = upstream(upstream_podgroup_obj("a", 2, disruption_mode=mode), *SPREAD)
    assert planner.preempt({"n1": victims}) == kept


def test_preemption_widens_to_an_all_pod_group_that_lives_on_the_victims_node():
    planner = upstream(
        upstream_podgroup_obj("a", 1, disruption_mode="all"),
        running("a-0", "n1", "a"),
        running("a-1", "n1", "a"),
    )
    assert planner.preempt({"n1": ["a-0"]}) == {"n1": ["a-0", "a-1"]}


def test_preemption_drops_a_node_whose_victims_are_bound_elsewhere():
    # kube-scheduler 1.37 offers an `all` unit spread over nodes as one node's victims, and
    # fails its whole preemption when an extender returns a pod it cannot find on the node.
    planner = upstream(upstream_podgroup_obj("a", 2, disruption_mode="all"), *SPREAD)
    assert planner.preempt({"n1": ["a-0", "a-1", "a-2", "a-3"]}) == {}


def ray(mode: str, *, min_group_count: int = 1, head_mode: str = "single") -> list[Any]:
    """A composite gang over a head PodGroup (minCount 1, on n1) and a worker PodGroup
    (minCount 2, two workers on n2 and one on n3)."""
    return [
        composite_obj("ray", min_group_count, disruption_mode=mode),
        upstream_podgroup_obj("head", 1, parent="ray", disruption_mode=head_mode),
        upstream_podgroup_obj("workers", 2, parent="ray"),
        running("head-0", "n1", "head"),
        running("worker-0", "n2", "workers"),
        running("worker-1", "n2", "workers"),
        running("worker-2", "n3", "workers"),
    ]


def test_preemption_takes_a_composite_with_disruption_mode_all_whole_or_not_at_all():
    planner = upstream(*ray("all"))
    # The workers alone still make minGroupCount 1, but the composite goes only whole.
    assert planner.preempt({"n1": ["head-0"], "n3": ["worker-2"]}) == {}


def test_preemption_under_a_single_composite_judges_each_child_by_its_own_mode_and_quorum():
    planner = upstream(*ray("single", head_mode="all"))
    assert planner.preempt({"n1": ["head-0"]}) == {"n1": ["head-0"]}  # the workers suffice
    assert planner.preempt({"n3": ["worker-2"]}) == {"n3": ["worker-2"]}  # 2 of 2 remain
    # The head alone makes minGroupCount 1, but the workers would be left at 1 of 2.
    assert planner.preempt({"n2": ["worker-0", "worker-1"]}) == {}


def test_preemption_takes_a_child_pod_group_with_disruption_mode_all_whole_or_not_at_all():
    objects = ray("single")
    objects[2] = upstream_podgroup_obj("workers", 2, parent="ray", disruption_mode="all")
    planner = upstream(*objects)
    assert planner.preempt({"n3": ["worker-2"]}) == {}
    assert planner.preempt({"n1": ["head-0"]}) == {"n1": ["head-0"]}


def test_a_basic_composite_with_disruption_mode_all_takes_its_separate_gangs_together():
    planner = upstream(
        composite_obj("job", None, disruption_mode="all"),
        upstream_podgroup_obj("a", 1, parent="job"),
        upstream_podgroup_obj("b", 1, parent="job"),
        running("a-0", "n1", "a"),
        running("b-0", "n1", "b"),
        running("b-1", "n2", "b"),
    )
    assert planner.preempt({"n1": ["a-0"]}) == {}  # b-1 on n2 would stay
    assert planner.preempt({"n1": ["a-0"], "n2": ["b-1"]}) == {}


def test_preemption_never_leaves_a_composite_gang_below_its_min_group_count():
    planner = upstream(*ray("single", min_group_count=2))
    assert planner.preempt({"n1": ["head-0"]}) == {}


def test_preemption_never_leaves_a_workload_pod_group_below_its_min_count():
    planner = upstream(
        workload_obj("job", {"workers": 2}),
        *(
            pod_obj(
                f"w-{i}",
                4,
                node=f"n{i + 1}",
                phase="Running",
                uid=f"w-{i}",
                workload_ref={"name": "job", "podGroup": "workers"},
            )
            for i in range(2)
        ),
    )
    assert planner.preempt({"n1": ["w-0"]}) == {}


def test_a_bound_member_follows_its_node():
    members = gang("g", 2, 4)
    state, planner = setup(groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], NODES, now=0)
    node = state.reservation("default/g").node_of(members[0].uid)
    state.assume(members[0].uid, node)
    assert state.reservation("default/g").member(members[0].uid).state is MemberState.ASSUMED
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
    group_placement, member_placements, expected_nodes
):
    members = [
        replace(p, placement=policy)
        for p, policy in zip(gang("g", 2, 2), member_placements, strict=True)
    ]
    state, planner = setup(groups=[podgroup("g", 2, placement=group_placement)], pods=members)
    planner.filter(members[0], NODES, now=0)
    reservation = state.reservation("default/g")
    assert len({m.node for m in reservation.members}) == expected_nodes


def test_members_that_disagree_on_placement_are_reported():
    members = [
        replace(p, placement=policy)
        for p, policy in zip(gang("g", 2, 2), ["spread", "pack"], strict=True)
    ]
    _, planner = setup(groups=[podgroup("g", 2)], pods=members)
    result = planner.filter(members[0], NODES, now=0).result
    assert "disagree on phalanx.io/placement: pack, spread" in result.unresolvable["n1"]


def test_a_gang_that_left_the_model_is_forgotten():
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


def test_a_gang_with_enough_members_waits_while_a_task_is_below_its_minimum():
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
    reservation = state.reservation("default/mpi")
    assert master.uid in {m.pod_uid for m in reservation.members}


def test_an_elastic_gangs_quorum_holds_each_tasks_minimum_before_lower_ranks():
    # The parameter servers rank first by name; 4 nodes hold 4 of the 6 members.
    group = replace(podgroup("tf", 4), min_task_member=(("ps", 2), ("worker", 2)))
    ps = [pod(f"tf-ps-{i}", 8, group="tf", task="ps") for i in range(3)]
    workers = [pod(f"tf-worker-{i}", 8, group="tf", task="worker") for i in range(3)]
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    state, planner = setup(*nodes, groups=[group], pods=[*ps, *workers])
    planner.filter(ps[0], [n.name for n in nodes], now=0)
    reservation = state.reservation("default/tf")
    assert {m.pod_key for m in reservation.members} == {
        "default/tf-ps-0",
        "default/tf-ps-1",
        "default/tf-worker-0",
        "default/tf-worker-1",
    }
