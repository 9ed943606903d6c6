"""Placement intent: the hard units and soft rules a plan asks of the gang engine."""

from __future__ import annotations

import json

import pytest

from phalanx.core.plan import (
    PlanError,
    PlanIntent,
    derive_intent,
    hard_rule_violations,
    parse_plan,
    tags_from_labels,
    together_rules,
)
from plan_builders import ex, par, seq


def intent_of(obj: object, differentiable: str = "") -> PlanIntent:
    ids = frozenset(differentiable.split()) if differentiable else frozenset()
    return derive_intent(parse_plan(json.dumps(obj)), ids)


def sets(*groups: str) -> tuple[frozenset[str], ...]:
    """`sets("a b", "c")` -> ({a, b}, {c})."""
    return tuple(frozenset(g.split()) for g in groups)


# ---- the seed's rules, restated as intent ---------------------------------------------


def test_a_sequence_asks_for_its_steps_on_one_node() -> None:
    intent = intent_of(seq(ex("normalize"), ex("select"), ex("classify")))
    assert intent.together == sets("normalize select classify")
    assert intent.units == sets("normalize", "select", "classify")
    assert intent.apart == ()


def test_parallel_branches_are_asked_to_land_on_distinct_nodes() -> None:
    intent = intent_of(par(ex("train_svm"), ex("train_knn")))
    assert intent.apart == (sets("train_svm", "train_knn"),)
    assert intent.together == ()


def test_a_parallel_inside_a_sequence_still_spreads_its_branches() -> None:
    intent = intent_of(seq(ex("load"), ex("normalize"), par(ex("train_a"), ex("train_b"))))
    assert intent.together == sets("load normalize")
    assert intent.apart == (sets("train_a", "train_b"),)


# ---- soft rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "together", "apart"),
    [
        pytest.param(
            par(seq(ex("a1"), ex("a2")), seq(ex("b1"), ex("b2"))),
            sets("a1 a2", "b1 b2"),
            (sets("a1 a2", "b1 b2"),),
            id="each-branch-together-branches-apart",
        ),
        pytest.param(
            par(par(ex("a"), ex("b")), ex("c")),
            (),
            (sets("a b", "c"), sets("a", "b")),
            id="inner-parallel-wins-over-its-branch-unit",
        ),
        pytest.param(
            seq(ex("load"), par(ex("a"), ex("b")), ex("report")),
            sets("load report"),
            (sets("a", "b"),),
            id="sequence-members-around-a-parallel",
        ),
        pytest.param(
            seq(ex("a"), seq(ex("b"), ex("c"))),
            sets("a b c", "b c"),
            (),
            id="nested-sequence-has-its-own-rule",
        ),
        pytest.param(
            seq(ex("a"), {"remote": ex("b"), "tag": "gpu"}),
            sets("a b"),
            (),
            id="remote-stays-in-its-sequence",
        ),
        pytest.param(
            seq({"composite": ["x", "y"]}), (), (), id="a-sequence-inside-one-unit-is-no-soft-rule"
        ),
        pytest.param(
            {"loop": "c", "body": seq(ex("x"), par(ex("y"), ex("z")))},
            (),
            (sets("y", "z"),),
            id="loop-body-parallel-is-still-reported",
        ),
        pytest.param(
            par(ex("a"), {}, par()), (), (), id="fewer-than-two-non-empty-branches-is-no-rule"
        ),
        pytest.param(
            seq(ex("a"), {"composite": ["x", "y"]}),
            sets("a x y"),
            (),
            id="a-sequence-spanning-units",
        ),
    ],
)
def test_soft_rules(
    plan: object, together: tuple[frozenset[str], ...], apart: tuple[object, ...]
) -> None:
    intent = intent_of(plan)
    assert intent.together == together
    assert intent.apart == apart


def test_together_rules_name_their_origin_and_keep_execution_order() -> None:
    plan = parse_plan(
        json.dumps(
            seq(
                ex("load"),
                par(seq(ex("a2"), ex("a1")), ex("b")),
                {"trials": [seq(ex("t0b"), ex("t0a")), ex("t1")]},
                ex("z"),
            )
        )
    )
    assert [(r.what, r.members) for r in together_rules(plan)] == [
        ("sequence", ("load", "z")),
        ("parallel branch", ("a2", "a1")),
        ("trial", ("t0b", "t0a")),
    ]


def test_trials_are_listed_in_order_without_empty_trials() -> None:
    intent = intent_of(
        seq(ex("prep"), {"trials": [seq(ex("t0"), ex("e0")), {}, ex("t1"), ex("t2")]})
    )
    assert intent.trials == (sets("t0 e0", "t1", "t2"),)
    assert intent.together == sets("t0 e0")  # "prep" alone is no rule
    assert intent.apart == ()


def test_every_trials_node_is_its_own_round_robin() -> None:
    intent = intent_of(par({"trials": [ex("a0"), ex("a1")]}, {"trials": [ex("b0")]}))
    assert intent.trials == (sets("a0", "a1"), sets("b0"))


# ---- hard units ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "units"),
    [
        pytest.param(seq(ex("a"), ex("b")), sets("a", "b"), id="a-sequence-is-no-hard-unit"),
        pytest.param(
            seq(ex("a"), {"composite": ["x", "y", "z"]}),
            sets("a", "x y z"),
            id="composite",
        ),
        pytest.param({"stream": ["f", "g"]}, sets("f g"), id="stream"),
        pytest.param(
            seq(ex("a"), {"loop": "c", "body": seq(ex("x"), par(ex("y"), ex("z")))}),
            sets("a", "c x y z"),
            id="loop-with-its-whole-body",
        ),
        pytest.param(
            {"branch": "c", "arms": {"yes": ex("x"), "no": {"stream": ["s1", "s2"]}}},
            sets("c x s1 s2"),
            id="branch-with-every-arm",
        ),
        pytest.param({"loop": "c", "body": {}}, sets("c"), id="loop-without-body"),
        pytest.param(
            {"remote": seq(ex("a"), ex("b")), "tag": "gpu"}, sets("a", "b"), id="remote-is-no-unit"
        ),
        pytest.param(
            seq(ex("z"), {"composite": ["b", "a"]}, ex("m")),
            sets("z", "b a", "m"),
            id="ordered-by-first-member-in-execution-order",
        ),
        pytest.param({}, (), id="empty-plan"),
    ],
)
def test_hard_units(plan: object, units: tuple[frozenset[str], ...]) -> None:
    assert intent_of(plan).units == units


@pytest.mark.parametrize(
    ("plan", "differentiable", "units"),
    [
        pytest.param(seq(ex("a"), ex("b"), ex("c")), "a b", sets("a b", "c"), id="neighbours-join"),
        pytest.param(
            seq(ex("a"), ex("b"), ex("c")), "a b c", sets("a b c"), id="joined-transitively"
        ),
        pytest.param(
            seq(ex("a"), ex("b"), ex("c")),
            "a c",
            sets("a", "b", "c"),
            id="a-plain-member-between-breaks-the-chain",
        ),
        pytest.param(
            par(ex("a"), ex("b")), "a b", sets("a", "b"), id="parallel-branches-are-not-connected"
        ),
        pytest.param(
            seq(ex("a"), par(ex("b"), ex("c"))),
            "a b c",
            sets("a b c"),
            id="fan-out-connects-branches-through-their-source",
        ),
        pytest.param(
            seq(ex("a"), {}, ex("b")), "a b", sets("a b"), id="an-empty-element-does-not-disconnect"
        ),
        pytest.param(
            seq(ex("a"), {"composite": ["x", "y"]}, ex("b")),
            "a x",
            sets("a x y", "b"),
            id="joins-a-composite-unit",
        ),
        pytest.param(
            seq(ex("a"), {"loop": "c", "body": ex("x")}),
            "a c",
            sets("a c x"),
            id="joins-a-loop-unit",
        ),
        pytest.param(
            seq(ex("a"), {"remote": ex("b"), "tag": "gpu"}),
            "a b",
            sets("a b"),
            id="across-a-remote-boundary",
        ),
        pytest.param(
            seq(ex("a"), ex("b"), {"trials": [ex("t0"), ex("t1")]}),
            "a",
            sets("a", "b", "t0", "t1"),
            id="one-differentiable-member-joins-nothing",
        ),
    ],
)
def test_connected_differentiable_members_share_a_unit(
    plan: object, differentiable: str, units: tuple[frozenset[str], ...]
) -> None:
    assert intent_of(plan, differentiable).units == units


def test_differentiable_ids_the_plan_lacks_are_a_plan_error_naming_them() -> None:
    with pytest.raises(PlanError) as caught:
        intent_of(seq(ex("a"), ex("b")), "a ghost zombie")
    assert (
        str(caught.value) == 'differentiable: names ids the plan does not have: "ghost", "zombie"'
    )


# ---- required tags -------------------------------------------------------------------


def test_remote_tags_restrict_their_subtree_and_accumulate_when_nested() -> None:
    intent = intent_of(
        seq(
            ex("prep"),
            {
                "remote": seq(
                    ex("a"),
                    {"remote": {"composite": ["x", "y"]}, "tag": "a100"},
                    {"loop": "c", "body": ex("d")},
                ),
                "tag": "gpu",
            },
        )
    )
    gpu, both = frozenset({"gpu"}), frozenset({"gpu", "a100"})
    assert dict(intent.required_tags) == {"a": gpu, "x": both, "y": both, "c": gpu, "d": gpu}
    assert "prep" not in intent.required_tags


def test_tags_come_from_labels_set_to_true() -> None:
    labels = {
        "tag.phalanx.io/gpu": "true",
        "tag.phalanx.io/a100": "True",
        "tag.phalanx.io/spot": "false",
        "gpu": "true",
        "example.com/tag.phalanx.io/x": "true",
    }
    assert tags_from_labels(labels) == frozenset({"gpu"})


# ---- hard rule check ------------------------------------------------------------------

CHECKED = seq(ex("prep"), {"remote": {"composite": ["x", "y"]}, "tag": "gpu"})
TAGS = {"gpu-1": frozenset({"gpu"}), "gpu-2": frozenset({"gpu", "a100"})}


@pytest.mark.parametrize(
    ("assignment", "violations"),
    [
        pytest.param({"prep": "cpu-1", "x": "gpu-1", "y": "gpu-1"}, [], id="all-hold"),
        pytest.param(
            {"prep": "gpu-2", "x": "gpu-1", "y": "gpu-2"},
            ["unit [x, y] is split across nodes gpu-1, gpu-2"],
            id="split-unit",
        ),
        pytest.param(
            {"prep": "cpu-1", "x": "cpu-1", "y": "cpu-1"},
            [
                "member x is on node cpu-1, which lacks tag gpu",
                "member y is on node cpu-1, which lacks tag gpu",
            ],
            id="missing-tag",
        ),
        pytest.param({"prep": "cpu-1", "x": "gpu-1"}, [], id="unassigned-members-are-skipped"),
    ],
)
def test_hard_rule_violations(assignment: dict[str, str], violations: list[str]) -> None:
    intent = intent_of(CHECKED)
    assert list(hard_rule_violations(intent, assignment, TAGS)) == violations
