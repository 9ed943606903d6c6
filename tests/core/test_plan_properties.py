"""Properties of the plan modules over random well-formed plans and random garbage."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.plan import (
    NodeKind,
    PlanError,
    PlanNode,
    derive_intent,
    describe,
    dump_plan,
    edges,
    hard_rule_violations,
    leaves,
    parse_plan,
)
from plan_builders import TAGS, plans, plans_json

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6))
_keys = st.one_of(
    st.sampled_from([k.value for k in NodeKind] + ["tag", "body", "arms"]), st.text(max_size=4)
)
garbage = st.recursive(
    _scalars,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(_keys, c, max_size=3)),
    max_leaves=30,
)


def _placeholders(value: object) -> int:
    if isinstance(value, str):
        return 1 if value.startswith("m") and value[1:].isdigit() else 0
    if isinstance(value, list):
        return sum(_placeholders(v) for v in value)
    if isinstance(value, dict):
        return sum(_placeholders(v) for k, v in value.items() if k != "tag")
    return 0


# ---- parsing ----------------------------------------------------------------------------


@given(plans_json)
def test_a_well_formed_plan_parses_with_unique_leaves_and_round_trips(tree: object) -> None:
    plan = parse_plan(json.dumps(tree))
    members = leaves(plan)
    assert len(set(members)) == len(members) == _placeholders(tree)
    assert parse_plan(dump_plan(plan)) == plan


def parse_or_error(text: str) -> PlanNode | PlanError:
    """The tree, or the PlanError; any other exception escapes and fails the test."""
    try:
        return parse_plan(text)
    except PlanError as error:
        return error


@given(garbage)
def test_garbage_values_raise_nothing_but_plan_error(value: object) -> None:
    result = parse_or_error(json.dumps(value))
    if isinstance(result, PlanError):
        assert result.path.startswith("plan")
        assert result.problem


@given(st.text(max_size=40))
def test_garbage_text_raises_nothing_but_plan_error(text: str) -> None:
    assert isinstance(parse_or_error(text), PlanNode | PlanError)


@given(plans_json, st.data())
def test_a_plan_with_one_id_changed_to_garbage_raises_plan_error(
    tree: object, data: st.DataObject
) -> None:
    text = json.dumps(tree)
    members = leaves(parse_plan(text))
    if not members:
        return
    victim = data.draw(st.sampled_from(members))
    replacement = data.draw(
        st.sampled_from(["", " ", "a,b", members[0] if victim != members[0] else ""])
    )
    broken = text.replace(json.dumps(victim), json.dumps(replacement), 1)
    assert isinstance(parse_or_error(broken), PlanError), broken


# ---- data flow and intent -------------------------------------------------------------


@given(plans)
def test_edges_join_distinct_members_once(plan: PlanNode) -> None:
    members = set(leaves(plan))
    flow = edges(plan)
    assert len(set(flow)) == len(flow)
    assert all(a in members and b in members and a != b for a, b in flow)


@given(plans, st.data())
def test_units_partition_the_members_and_hold_connected_differentiable_ones(
    plan: PlanNode, data: st.DataObject
) -> None:
    members = leaves(plan)
    differentiable = frozenset(data.draw(st.sets(st.sampled_from(members))) if members else ())
    intent = derive_intent(plan, differentiable)

    assert all(intent.units)
    assert sorted(m for unit in intent.units for m in unit) == sorted(members)
    firsts = [min(members.index(m) for m in unit) for unit in intent.units]
    assert firsts == sorted(firsts)

    unit_of = intent.unit_of()
    for a, b in edges(plan):
        if a in differentiable and b in differentiable:
            assert unit_of[a] == unit_of[b]
    for sets in (intent.together, *intent.apart, *intent.trials):
        assert all(s <= set(members) for s in sets)
    for together in intent.together:
        assert len({unit_of[m] for m in together}) > 1


@given(plans)
def test_units_on_their_own_nodes_break_no_hard_rule_and_a_split_unit_does(plan: PlanNode) -> None:
    intent = derive_intent(plan, frozenset())
    assignment = {m: f"node-{i}" for i, unit in enumerate(intent.units) for m in unit}
    every_tag = {node: frozenset(TAGS) for node in assignment.values()}
    assert hard_rule_violations(intent, assignment, every_tag) == ()

    for unit in intent.units:
        if len(unit) > 1:
            split = dict(assignment)
            split[min(unit)] = "elsewhere"
            every_tag["elsewhere"] = frozenset(TAGS)
            assert any("is split" in v for v in hard_rule_violations(intent, split, every_tag))
            break


# ---- describe ---------------------------------------------------------------------------


@given(plans)
def test_everything_on_one_node_moves_no_data_and_keeps_every_together_rule(plan: PlanNode) -> None:
    intent = derive_intent(plan, frozenset())
    result = describe(plan, intent, dict.fromkeys(leaves(plan), "n1"), eligible_nodes=1)
    assert result.transfers == ()
    # Only spreading can fail on one node: every together rule holds.
    assert all(
        w.startswith("parallel branches [") and " share node n1: " in w for w in result.warnings
    )


@given(plans, st.data())
def test_phases_cover_each_member_once_and_transfers_are_exactly_the_split_edges(
    plan: PlanNode, data: st.DataObject
) -> None:
    members = leaves(plan)
    nodes = st.sampled_from(["n1", "n2", "n3"])
    assignment = {m: data.draw(nodes) for m in members}
    result = describe(plan, derive_intent(plan, frozenset()), assignment, eligible_nodes=3)

    assert [p.index for p in result.phases] == list(range(len(result.phases)))
    assert [m for p in result.phases for m in p.members] == list(members)
    split = [(a, b) for a, b in edges(plan) if assignment[a] != assignment[b]]
    assert [(t.from_member, t.to_member) for t in result.transfers] == split
    assert all(
        (t.from_node, t.to_node) == (assignment[t.from_member], assignment[t.to_member])
        for t in result.transfers
    )
    assert describe(plan, derive_intent(plan, frozenset()), assignment, eligible_nodes=3) == result
