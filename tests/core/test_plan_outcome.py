"""Describing a placement against its plan: phases, data transfers, broken soft rules."""

from __future__ import annotations

import json

import pytest

from phalanx.core.plan import (
    PARALLEL,
    SEQUENTIAL,
    TRIAL,
    DataTransfer,
    PlanOutcome,
    PlanPhase,
    derive_intent,
    describe,
    parse_plan,
)
from plan_builders import ex, par, seq


def trials(*items: object) -> dict[str, object]:
    return {"trials": list(items)}


def outcome(
    obj: object, placed: str, *, eligible: int = 2, differentiable: str = ""
) -> PlanOutcome:
    """`placed` reads "member@node ...", e.g. "load@gpu-1 train@gpu-2"."""
    plan = parse_plan(json.dumps(obj))
    intent = derive_intent(plan, frozenset(differentiable.split()))
    assignment = dict(pair.split("@") for pair in placed.split())
    return describe(plan, intent, assignment, eligible_nodes=eligible)


def transfers(result: PlanOutcome) -> list[str]:
    return [f"{t.from_member}@{t.from_node}>{t.to_member}@{t.to_node}" for t in result.transfers]


# ---- the seed's scenarios, on Kubernetes nodes ----------------------------------------

PIPELINE = seq(ex("normalize"), ex("select"), ex("classify"))


def test_sequential_steps_on_one_node_need_no_transfer_and_warn_nothing() -> None:
    result = outcome(PIPELINE, "normalize@gpu-1 select@gpu-1 classify@gpu-1")
    assert result.phases == (
        PlanPhase(0, SEQUENTIAL, ("normalize", "select", "classify"), ("gpu-1",)),
    )
    assert result.transfers == ()
    assert result.warnings == ()


def test_a_split_sequence_warns_and_moves_its_data() -> None:
    result = outcome(PIPELINE, "normalize@gpu-1 select@gpu-2 classify@gpu-2")
    assert result.warnings == (
        "sequence [normalize, select, classify] spans 2 nodes (gpu-1, gpu-2): "
        "not enough free capacity on one node",
    )
    assert result.transfers == (DataTransfer("normalize", "select", "gpu-1", "gpu-2"),)
    assert result.phases[0].nodes == ("gpu-1", "gpu-2")


@pytest.mark.parametrize(
    ("placed", "eligible", "warnings"),
    [
        pytest.param("train_svm@gpu-1 train_knn@gpu-2", 2, (), id="distinct-nodes"),
        pytest.param(
            "train_svm@gpu-1 train_knn@gpu-1",
            2,
            (
                "parallel branches [train_svm] and [train_knn] share node gpu-1: "
                "not enough free capacity on distinct nodes",
            ),
            id="shared-for-capacity",
        ),
        pytest.param(
            "train_svm@gpu-1 train_knn@gpu-1",
            1,
            (
                "parallel branches [train_svm] and [train_knn] share node gpu-1: "
                "only 1 eligible node for 2 branches",
            ),
            id="shared-for-lack-of-nodes",
        ),
    ],
)
def test_parallel_branches_sharing_a_node_warn(
    placed: str, eligible: int, warnings: tuple[str, ...]
) -> None:
    result = outcome(par(ex("train_svm"), ex("train_knn")), placed, eligible=eligible)
    assert result.warnings == warnings
    assert result.phases == (
        PlanPhase(
            0, PARALLEL, ("train_svm", "train_knn"), tuple(n.split("@")[1] for n in placed.split())
        ),
    )


def test_sequence_then_parallel_keeps_the_steps_together_and_spreads_the_branches() -> None:
    result = outcome(
        seq(ex("load"), ex("normalize"), par(ex("train_a"), ex("train_b"))),
        "load@gpu-1 normalize@gpu-1 train_a@gpu-1 train_b@gpu-2",
    )
    assert result.warnings == ()
    assert result.phases == (
        PlanPhase(0, SEQUENTIAL, ("load", "normalize"), ("gpu-1",)),
        PlanPhase(1, PARALLEL, ("train_a", "train_b"), ("gpu-1", "gpu-2")),
    )


SPLIT = seq(ex("preprocess"), par(ex("branch_a"), ex("branch_b")))


def test_a_branch_on_another_node_than_preprocess_receives_a_transfer() -> None:
    result = outcome(SPLIT, "preprocess@gpu-1 branch_a@gpu-1 branch_b@gpu-2")
    assert transfers(result) == ["preprocess@gpu-1>branch_b@gpu-2"]


def test_everything_on_one_node_needs_no_transfer() -> None:
    result = outcome(SPLIT, "preprocess@gpu-1 branch_a@gpu-1 branch_b@gpu-1", eligible=1)
    assert result.transfers == ()
    assert result.warnings == (
        "parallel branches [branch_a] and [branch_b] share node gpu-1: "
        "only 1 eligible node for 2 branches",
    )


# ---- phases ---------------------------------------------------------------------------


def kinds(result: PlanOutcome) -> list[str]:
    def one(p: PlanPhase) -> str:
        trial = f" {p.trial_index}/{p.trial_total}" if p.kind == TRIAL else ""
        return f"{p.index}:{p.kind}{trial}[{' '.join(p.members)}]"

    return [one(p) for p in result.phases]


@pytest.mark.parametrize(
    ("plan", "phases"),
    [
        pytest.param({}, [], id="empty"),
        pytest.param(ex("a"), ["0:sequential[a]"], id="one-member"),
        pytest.param(
            seq(ex("a"), {"composite": ["x", "y"]}, ex("b")),
            ["0:sequential[a]", "1:sequential[x y]", "2:sequential[b]"],
            id="composite-is-its-own-phase",
        ),
        pytest.param(
            seq(ex("f0"), {"stream": ["f1", "f2"]}),
            ["0:sequential[f0]", "1:sequential[f1 f2]"],
            id="stream-is-its-own-phase",
        ),
        pytest.param(
            seq(ex("prep"), trials(ex("t0"), {}, seq(ex("t1"), ex("e1"))), ex("report")),
            [
                "0:sequential[prep]",
                "1:trial 0/2[t0]",
                "2:trial 1/2[t1 e1]",
                "3:sequential[report]",
            ],
            id="each-trial-is-a-phase",
        ),
        pytest.param(
            seq(ex("a"), {"loop": "c", "body": seq(ex("x"), par(ex("y"), ex("z")))}, ex("b")),
            ["0:sequential[a c x]", "1:parallel[y z]", "2:sequential[b]"],
            id="loop-flattens-into-its-sequence",
        ),
        pytest.param(
            seq(ex("a"), seq(ex("b"), ex("c")), {"remote": ex("d"), "tag": "gpu"}),
            ["0:sequential[a b c d]"],
            id="nested-sequences-and-remotes-flatten",
        ),
        pytest.param(
            {"branch": "c", "arms": {"yes": ex("x"), "no": ex("y")}},
            ["0:sequential[c x y]"],
            id="branch-condition-then-arms",
        ),
        pytest.param(
            par(seq(ex("a"), trials(ex("t0"), ex("t1"))), ex("b")),
            ["0:parallel[a t0 t1 b]"],
            id="a-parallel-covers-everything-inside-its-branches",
        ),
    ],
)
def test_phases_follow_execution_order(plan: object, phases: list[str]) -> None:
    plan_node = parse_plan(json.dumps(plan))
    result = describe(plan_node, derive_intent(plan_node, frozenset()), {}, eligible_nodes=1)
    assert kinds(result) == phases


def test_phase_nodes_are_distinct_in_member_order_but_one_per_branch_for_a_parallel() -> None:
    result = outcome(
        seq(ex("a"), ex("b"), ex("c"), par(seq(ex("p1"), ex("p2")), ex("q"), ex("r"))),
        "a@n2 b@n1 c@n2 p1@n1 p2@n2 q@n1 r@n3",
        eligible=3,
    )
    assert [p.nodes for p in result.phases] == [("n2", "n1"), ("n1", "n1", "n3")]


def test_trial_phases_carry_their_nodes() -> None:
    result = outcome(trials(seq(ex("t0"), ex("e0")), ex("t1")), "t0@n1 e0@n2 t1@n2")
    assert [(p.trial_index, p.trial_total, p.nodes) for p in result.phases] == [
        (0, 2, ("n1", "n2")),
        (1, 2, ("n2",)),
    ]


# ---- soft-rule warnings ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "placed", "eligible", "warnings"),
    [
        pytest.param(
            seq(ex("a"), {"remote": ex("b"), "tag": "gpu"}),
            "a@cpu-1 b@gpu-1",
            2,
            [
                "sequence [a, b] spans 2 nodes (cpu-1, gpu-1): no node with enough free "
                "capacity carries every tag they need (gpu)"
            ],
            id="sequence-split-by-tags",
        ),
        pytest.param(
            par(seq(ex("a1"), ex("a2")), ex("b")),
            "a1@n1 a2@n2 b@n3",
            3,
            [
                "parallel branch [a1, a2] spans 2 nodes (n1, n2): "
                "not enough free capacity on one node"
            ],
            id="branch-split",
        ),
        pytest.param(
            trials(seq(ex("t0"), ex("e0")), ex("t1")),
            "t0@n1 e0@n2 t1@n2",
            2,
            ["trial [t0, e0] spans 2 nodes (n1, n2): not enough free capacity on one node"],
            id="trial-split",
        ),
        pytest.param(
            par(ex("a"), ex("b"), ex("c"), ex("d")),
            "a@n1 b@n1 c@n1 d@n2",
            4,
            [
                "parallel branches [a], [b] and [c] share node n1: "
                "not enough free capacity on distinct nodes"
            ],
            id="three-branches-share-one-node",
        ),
        pytest.param(
            {"loop": "c", "body": par(ex("y"), ex("z"))},
            "c@n1 y@n1 z@n1",
            2,
            ["parallel branches [y] and [z] share node n1: a hard rule binds them to one node"],
            id="branches-inside-a-loop",
        ),
        pytest.param(
            seq({"composite": ["x", "y"]}, ex("z")),
            "x@n1 y@n2 z@n2",
            2,
            ["sequence [x, y, z] spans 2 nodes (n1, n2): not enough free capacity on one node"],
            id="a-split-unit-is-not-judged-here-but-its-sequence-is",
        ),
        pytest.param(
            seq({"composite": ["x", "y"]}),
            "x@n1 y@n2",
            2,
            [],
            id="a-sequence-within-one-unit-is-no-soft-rule",
        ),
        pytest.param(
            seq(ex("a"), ex("b"), ex("c")),
            "a@n1",
            2,
            [],
            id="unplaced-members-are-not-judged",
        ),
    ],
)
def test_warnings_name_each_broken_soft_rule(
    plan: object, placed: str, eligible: int, warnings: list[str]
) -> None:
    assert list(outcome(plan, placed, eligible=eligible).warnings) == warnings


def test_branches_joined_by_differentiable_members_share_a_node_for_a_hard_reason() -> None:
    result = outcome(seq(ex("a"), par(ex("b"), ex("c"))), "a@n1 b@n1 c@n1", differentiable="a b c")
    assert result.warnings == (
        "parallel branches [b] and [c] share node n1: a hard rule binds them to one node",
    )


@pytest.mark.parametrize(
    ("placed", "eligible", "warning"),
    [
        pytest.param("t0@n1 t1@n2 t2@n1 t3@n2", 2, None, id="balanced"),
        pytest.param("t0@n1 t1@n2 t2@n3 t3@n1", 3, None, id="uneven-by-one"),
        pytest.param(
            "t0@n1 t1@n1 t2@n1 t3@n2",
            2,
            "n1 has 3 trials while n2 has 1",
            id="uneven-by-two",
        ),
        pytest.param(
            "t0@n1 t1@n2 t2@n1 t3@n2", 3, "4 trials use 2 of 3 eligible nodes", id="node-left-idle"
        ),
        pytest.param("t0@n1 t1@n1 t2@n1 t3@n1", 1, None, id="one-eligible-node"),
        pytest.param("t0@n1 t1@n2 t2@n3 t3@n4", 1, None, id="misreported-eligible-count"),
        pytest.param(
            "t0@n1 t1@n1", 3, "2 trials use 1 of 3 eligible nodes", id="fewer-trials-than-nodes"
        ),
        pytest.param("t0@n1", 3, None, id="one-placed-trial"),
    ],
)
def test_trials_go_round_robin(placed: str, eligible: int, warning: str | None) -> None:
    plan = trials(ex("t0"), ex("t1"), ex("t2"), ex("t3"))
    result = outcome(plan, placed, eligible=eligible)
    expected = (
        () if warning is None else (f"trials [t0, t1, t2, t3] are not round-robin: {warning}",)
    )
    assert result.warnings == expected


def test_long_member_lists_are_shortened_in_warnings() -> None:
    members = [f"m{i:02}" for i in range(15)]
    placed = " ".join(f"{m}@{'n1' if i < 8 else 'n2'}" for i, m in enumerate(members))
    (warning,) = outcome(seq(*map(ex, members)), placed).warnings
    assert warning.startswith(
        "sequence [m00, m01, m02, m03, m04, m05, m06, m07, m08, m09, … 5 more]"
    )


# ---- transfers ------------------------------------------------------------------------


def test_transfers_follow_edges_in_execution_order_and_skip_unplaced_members() -> None:
    result = outcome(
        seq(ex("s"), par(seq(ex("a1"), ex("a2")), ex("b")), ex("t"), ex("u")),
        "s@n1 a1@n2 a2@n1 b@n1 t@n3",
        eligible=3,
    )
    assert transfers(result) == ["s@n1>a1@n2", "a1@n2>a2@n1", "a2@n1>t@n3", "b@n1>t@n3"]


def test_describe_is_deterministic() -> None:
    plan = seq(ex("a"), par(ex("b"), ex("c")), trials(ex("t0"), ex("t1"), ex("t2")))
    placed = "a@n1 b@n2 c@n2 t0@n1 t1@n1 t2@n1"
    assert outcome(plan, placed) == outcome(plan, placed)
