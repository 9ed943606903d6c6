"""A gang that did not fit is not planned again until capacity comes back, its nodes
change, or the gang itself does (phalanx.core.unfit)."""

from collections.abc import Callable
from dataclasses import replace

import pytest

from builders import gang, gpu_node, pod, podgroup
from phalanx.core import planner as planner_module
from phalanx.core.cache import ClusterState
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.model import Pod, PodPhase
from phalanx.core.planner import GangPlanner
from phalanx.core.snapshot import Snapshot

NODES = ["n1", "n2"]


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """How many times the planner placed a gang on a snapshot (the real place_gang runs)."""
    calls: list[str] = []
    real = place_gang

    def counted(snapshot: Snapshot, spec: GangSpec) -> Placed | Unfit:
        calls.append(spec.key)
        return real(snapshot, spec)

    monkeypatch.setattr(planner_module, "place_gang", counted)
    return calls


def full_cluster(*extra: Pod) -> tuple[ClusterState, GangPlanner, list[Pod], list[Pod]]:
    """Two 8-GPU nodes with 6 GPUs used on each, and a 2 x 4-GPU gang that cannot fit."""
    state = ClusterState()
    for n in NODES:
        state.upsert_node(gpu_node(n))
    busy = [pod(f"busy-{n}", 6, node=n) for n in NODES]
    for p in busy:
        state.upsert_pod(p)
    state.upsert_group(podgroup("g", 2))
    members = gang("g", 2, 4)
    for p in (*members, *extra):
        state.upsert_pod(p)
    return state, GangPlanner(state), members, busy


def test_a_retried_member_of_a_gang_that_does_not_fit_gets_the_same_refusal_unplanned(
    plans: list[str],
) -> None:
    _, planner, members, _ = full_cluster()
    first = planner.filter(members[0], NODES, now=0).result
    again = planner.filter(members[1], NODES, now=1).result
    assert plans == ["default/g"]
    assert not first.feasible
    assert not again.feasible
    assert again.unresolvable == first.unresolvable
    assert "cannot place 2 member(s) of gang default/g" in again.unresolvable["n1"]


def test_capacity_taken_elsewhere_keeps_the_verdict(plans: list[str]) -> None:
    state, planner, members, _ = full_cluster()
    planner.filter(members[0], NODES, now=0)
    state.upsert_pod(pod("other", 1, node="n1"))
    assert not planner.filter(members[1], NODES, now=1).result.feasible
    assert plans == ["default/g"]


def test_capacity_given_back_plans_the_gang_again_and_it_is_reserved(plans: list[str]) -> None:
    state, planner, members, busy = full_cluster()
    planner.filter(members[0], NODES, now=0)
    state.remove_pod(busy[0].uid)
    decision = planner.filter(members[1], NODES, now=1)
    assert plans == ["default/g", "default/g"]
    assert decision.reserved is not None
    assert decision.result.feasible


def test_a_pod_that_finishes_gives_its_capacity_back(plans: list[str]) -> None:
    state, planner, members, busy = full_cluster()
    planner.filter(members[0], NODES, now=0)
    state.upsert_pod(replace(busy[1], phase=PodPhase.SUCCEEDED))
    assert planner.filter(members[1], NODES, now=1).result.feasible
    assert len(plans) == 2


def test_a_released_reservation_gives_its_capacity_back(plans: list[str]) -> None:
    state, planner, members, busy = full_cluster()
    for p in busy:
        state.remove_pod(p.uid)
    state.upsert_group(podgroup("h", 2))
    holders = gang("h", 2, 8)
    for p in holders:
        state.upsert_pod(p)
    assert planner.filter(holders[0], NODES, now=0).reserved is not None
    assert not planner.filter(members[0], NODES, now=0).result.feasible
    state.release("default/h")
    assert planner.filter(members[1], NODES, now=1).result.feasible
    assert plans == ["default/h", "default/g", "default/g"]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda state: state.upsert_node(gpu_node("n3")), id="a node joins"),
        pytest.param(lambda state: state.upsert_node(gpu_node("n1", 16)), id="a node's GPUs grow"),
        pytest.param(
            lambda state: state.upsert_node(gpu_node("n1", labels={"pool": "a"})),
            id="a node's labels change",
        ),
    ],
)
def test_a_node_that_appears_or_changes_voids_the_verdict(
    plans: list[str], change: Callable[[ClusterState], object]
) -> None:
    state, planner, members, _ = full_cluster()
    planner.filter(members[0], NODES, now=0)
    change(state)
    planner.filter(members[1], [*NODES, "n3"], now=1)
    assert plans == ["default/g", "default/g"]


def test_a_node_heartbeat_keeps_the_verdict(plans: list[str]) -> None:
    state, planner, members, _ = full_cluster()
    planner.filter(members[0], NODES, now=0)
    state.upsert_node(gpu_node("n1"))  # the same node, reported again
    planner.filter(members[1], NODES, now=1)
    assert plans == ["default/g"]


def test_a_changed_gang_is_planned_again(plans: list[str]) -> None:
    state, planner, members, _ = full_cluster()
    planner.filter(members[0], NODES, now=0)
    planned = len(plans)
    state.upsert_pod(pod("g-2", 8, group="g"))  # a new member: a different gang to place
    planner.filter(members[1], NODES, now=1)
    assert len(plans) > planned
    planned = len(plans)
    state.upsert_group(podgroup("g", 3, placement="spread"))
    planner.filter(members[1], NODES, now=2)
    assert len(plans) > planned


def test_a_template_verdict_holds_until_the_gang_grows(plans: list[str]) -> None:
    state = ClusterState()
    for n in NODES:
        state.upsert_node(gpu_node(n))
        state.upsert_pod(pod(f"busy-{n}", 6, node=n))
    state.upsert_group(podgroup("t", 4))
    first, second = gang("t", 2, 4)
    state.upsert_pod(first)
    planner = GangPlanner(state)
    planner.filter(first, NODES, now=0)
    planner.filter(first, NODES, now=1)
    assert plans == ["default/t"]
    state.upsert_pod(second)
    planner.filter(second, NODES, now=2)
    assert plans == ["default/t", "default/t"]


def test_a_gang_that_left_the_model_is_forgotten() -> None:
    state, planner, members, _ = full_cluster()
    planner.filter(members[0], NODES, now=0)
    assert len(planner.unfit) == 1
    for p in members:
        state.remove_pod(p.uid)
    state.remove_group("default/g")
    planner.forget_gone()
    assert len(planner.unfit) == 0
