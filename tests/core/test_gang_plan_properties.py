"""Properties of plan-aware gang placement over random plans and clusters (Hypothesis)."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import gpu_node, pod, present
from phalanx.core.cache import ClusterState
from phalanx.core.gang import GangSpec, Placed, place_gang
from phalanx.core.model import Placement, Pod
from phalanx.core.plan import (
    PlanNode,
    derive_intent,
    hard_rule_violations,
    leaves,
    parse_plan,
    tags_from_labels,
    together_rules,
)
from plan_builders import TAGS, plans_json

Scenario = tuple[PlanNode, frozenset[str], ClusterState, tuple[Pod, ...]]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    tree = parse_plan(json.dumps(draw(plans_json)))
    ids = leaves(tree)
    differentiable = frozenset(draw(st.sets(st.sampled_from(ids)))) if ids else frozenset()
    state = ClusterState()
    for i in range(draw(st.integers(1, 6))):
        tags = draw(st.sets(st.sampled_from(TAGS)))
        labels = {f"tag.phalanx.io/{t}": "true" for t in tags}
        state.upsert_node(gpu_node(f"n{i}", draw(st.sampled_from([2, 4, 8])), labels=labels))
    members = tuple(
        pod(i, draw(st.integers(0, 2)), plan_node=i, group="g", cpu_milli=500, memory_gib=1)
        for i in ids
    )
    return tree, differentiable, state, members


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_committed_plan_placement_keeps_the_hard_rules_and_warns_of_every_soft_break(
    scenario: Scenario,
) -> None:
    tree, differentiable, state, members = scenario
    intent = derive_intent(tree, differentiable)
    snapshot = state.snapshot()
    spec = GangSpec("default/g", Placement(), members, plan=tree, intent=intent)
    result = place_gang(snapshot, spec)
    if not isinstance(result, Placed):
        assert result.reason
        return
    by_id = {p.plan_node: result.assignment[p.uid] for p in members}
    node_tags = {info.name: tags_from_labels(info.node.labels) for info in snapshot}
    assert hard_rule_violations(intent, by_id, node_tags) == ()
    # A soft together rule that ends up split is never silent.
    for rule in together_rules(tree):
        if len({by_id[m] for m in rule.members}) > 1:
            assert any(rule.what in w and "spans" in w for w in result.warnings), (
                rule,
                result.warnings,
            )
    # Capacity is hard: the placement can be reserved as it stands.
    per_node: dict[str, int] = {}
    for p in members:
        node = result.assignment[p.uid]
        per_node[node] = per_node.get(node, 0) + p.requests.gpus()
    for node, gpus in per_node.items():
        assert gpus <= present(snapshot.get(node)).free.gpus()
