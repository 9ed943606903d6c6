"""Plan-aware placement: the seed scheduler's rules on Kubernetes nodes, with real capacity."""

import json
from collections.abc import Iterable
from typing import Any

from builders import cpu_node, gpu_node, pod, present
from phalanx.core.cache import ClusterState
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.inventory import parse_placement
from phalanx.core.model import Node, Pod
from phalanx.core.plan import (
    PlanIntent,
    derive_intent,
    hard_rule_violations,
    leaves,
    parse_plan,
    tags_from_labels,
)


def cluster(*nodes: Node) -> ClusterState:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    return state


def members_for(plan: dict[str, Any], gpus: int = 1, **per_id: int) -> tuple[Pod, ...]:
    ids = parse_plan(json.dumps(plan))
    return tuple(
        pod(i, per_id.get(i, gpus), plan_node=i, group="g", memory_gib=1) for i in leaves(ids)
    )


def place(
    state: ClusterState,
    plan: dict[str, Any],
    members: tuple[Pod, ...],
    policy: str = "pack",
    differentiable: Iterable[str] = frozenset(),
) -> tuple[Placed | Unfit, PlanIntent]:
    tree = parse_plan(json.dumps(plan))
    intent = derive_intent(tree, frozenset(differentiable))
    spec = GangSpec("default/g", parse_placement(policy), members, plan=tree, intent=intent)
    return place_gang(state.snapshot(), spec), intent


def where(result: Placed | Unfit, members: Iterable[Pod]) -> dict[str, str]:
    assert isinstance(result, Placed), result
    return {p.plan_node: result.assignment[p.uid] for p in members}


def two_nodes() -> ClusterState:
    return cluster(gpu_node("w1"), gpu_node("w2"))


def test_sequential_steps_land_on_the_same_node() -> None:
    plan = {"sequence": [{"execute": "normalize"}, {"execute": "select"}, {"execute": "classify"}]}
    members = members_for(plan)
    result, _ = place(two_nodes(), plan, members)
    assert len(set(where(result, members).values())) == 1
    assert isinstance(result, Placed)
    assert result.warnings == ()


def test_parallel_branches_are_distributed() -> None:
    plan = {"parallel": [{"execute": "train_svm"}, {"execute": "train_knn"}]}
    members = members_for(plan)
    placed = where(place(two_nodes(), plan, members)[0], members)
    assert placed["train_svm"] != placed["train_knn"]


def test_no_eligible_nodes_is_an_unfit_with_a_reason() -> None:
    plan = {"execute": "test"}
    members = members_for(plan)
    result, _ = place(cluster(gpu_node("w1", unschedulable=True)), plan, members)
    assert isinstance(result, Unfit)
    assert "cordoned" in result.reason


def test_a_sequence_then_parallel_keeps_the_steps_together_and_spreads_the_branches() -> None:
    plan = {
        "sequence": [
            {"execute": "load"},
            {"execute": "normalize"},
            {"parallel": [{"execute": "train_a"}, {"execute": "train_b"}]},
        ]
    }
    members = members_for(plan)
    placed = where(place(two_nodes(), plan, members)[0], members)
    assert placed["load"] == placed["normalize"]
    assert placed["train_a"] != placed["train_b"]


def test_a_split_reports_the_data_transfer() -> None:
    plan = {
        "sequence": [
            {"execute": "preprocess"},
            {"parallel": [{"execute": "branch_a"}, {"execute": "branch_b"}]},
        ]
    }
    members = members_for(plan)
    result, _ = place(two_nodes(), plan, members)
    placed = where(result, members)
    assert isinstance(result, Placed)
    moved = {(t.from_member, t.to_member) for t in present(result.outcome).transfers}
    for branch in ("branch_a", "branch_b"):
        assert (("preprocess", branch) in moved) == (placed[branch] != placed["preprocess"])
    assert moved


def test_a_sequence_that_does_not_fit_one_node_is_split_with_a_warning() -> None:
    plan = {"sequence": [{"execute": "a"}, {"execute": "b"}]}
    members = members_for(plan, 6)
    result, _ = place(two_nodes(), plan, members)
    assert len(set(where(result, members).values())) == 2
    assert isinstance(result, Placed)
    assert any("sequence" in w for w in result.warnings)


def test_connected_differentiable_members_always_share_a_node() -> None:
    plan = {"sequence": [{"execute": "enc"}, {"execute": "dec"}, {"execute": "eval"}]}
    members = members_for(plan, 5)  # 15 GPUs: the sequence cannot stay on one 8-GPU node
    result, intent = place(
        cluster(gpu_node("w1"), gpu_node("w2"), gpu_node("w3")),
        plan,
        members,
        differentiable={"enc", "dec"},
    )
    # enc+dec need 10 GPUs on one node: impossible, so the gang must not be placed at all.
    assert isinstance(result, Unfit)
    members = members_for(plan, 4)
    result, intent = place(
        cluster(gpu_node("w1"), gpu_node("w2")), plan, members, differentiable={"enc", "dec"}
    )
    placed = where(result, members)
    assert placed["enc"] == placed["dec"]
    assert hard_rule_violations(intent, placed, {}) == ()


def test_composite_and_stream_blocks_stay_on_one_node_or_nowhere() -> None:
    plan = {"parallel": [{"composite": ["f1", "f2", "f3"]}, {"stream": ["s1", "s2"]}]}
    members = members_for(plan, 2)
    placed = where(place(two_nodes(), plan, members)[0], members)
    assert placed["f1"] == placed["f2"] == placed["f3"]
    assert placed["s1"] == placed["s2"]
    big = members_for(plan, 3)  # the composite needs 9 GPUs: more than any node
    assert isinstance(place(two_nodes(), plan, big)[0], Unfit)


def test_remote_tags_restrict_nodes() -> None:
    tagged = gpu_node("tagged", labels={"tag.phalanx.io/gpu": "true"})
    plan = {"sequence": [{"execute": "prep"}, {"remote": {"execute": "train"}, "tag": "gpu"}]}
    members = members_for(plan)
    result, intent = place(cluster(gpu_node("a"), tagged), plan, members)
    placed = where(result, members)
    assert placed["train"] == "tagged"
    tags = {n: tags_from_labels(s.labels) for n, s in (("a", gpu_node("a")), ("tagged", tagged))}
    assert hard_rule_violations(intent, placed, tags) == ()


def test_trials_go_round_robin_across_eligible_nodes() -> None:
    plan = {"trials": [{"execute": f"t{i}"} for i in range(6)]}
    members = members_for(plan)
    state = cluster(gpu_node("w1"), gpu_node("w2"), gpu_node("w3"))
    result, _ = place(state, plan, members)
    placed = where(result, members)
    counts = sorted(list(placed.values()).count(n) for n in ("w1", "w2", "w3"))
    assert counts == [2, 2, 2]
    assert isinstance(result, Placed)
    assert not any("round-robin" in w for w in result.warnings)


def test_trials_that_cannot_be_round_robin_say_so() -> None:
    plan = {"trials": [{"execute": f"t{i}"} for i in range(4)]}
    members = members_for(plan, 4)
    # w2 has room for one 4-GPU trial only: counts 3/1 instead of 2/2.
    state = cluster(gpu_node("w1", 12), gpu_node("w2", 4))
    result, _ = place(state, plan, members)
    assert isinstance(result, Placed)
    assert any("round-robin" in w for w in result.warnings)


def test_plan_members_honour_cpu_capacity_not_slots() -> None:
    plan = {"sequence": [{"execute": "a"}, {"execute": "b"}]}
    members = tuple(
        pod(i, 0, cpu_milli=3000, plan_node=i, group="g", memory_gib=1) for i in ("a", "b")
    )
    state = cluster(cpu_node("c1", cpu=4), cpu_node("c2", cpu=4))
    result, _ = place(state, plan, members)
    assert len(set(where(result, members).values())) == 2
    assert isinstance(result, Placed)
    assert any("sequence" in w for w in result.warnings)
