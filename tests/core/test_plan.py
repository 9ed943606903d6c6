"""The plan language: parsing `phalanx.io/plan`, its members (`leaves`) and data flow (`edges`)."""

from __future__ import annotations

import json
import pickle

import pytest

from phalanx.core.plan import (
    EMPTY_PLAN,
    NodeKind,
    PlanError,
    PlanNode,
    dump_plan,
    edges,
    leaves,
    parse_plan,
)
from plan_builders import ex, par, seq


def parse(obj: object, **limits: int) -> PlanNode:
    return parse_plan(json.dumps(obj), **limits)


# ---- every node kind parses -----------------------------------------------------------

LEAF_A = PlanNode(NodeKind.EXECUTE, id="a")
LEAF_B = PlanNode(NodeKind.EXECUTE, id="b")


@pytest.mark.parametrize(
    ("plan", "tree"),
    [
        pytest.param({"execute": "a"}, LEAF_A, id="execute"),
        pytest.param({"step": "a"}, PlanNode(NodeKind.STEP, id="a"), id="step"),
        pytest.param(
            seq(ex("a"), ex("b")),
            PlanNode(NodeKind.SEQUENCE, children=(LEAF_A, LEAF_B)),
            id="sequence",
        ),
        pytest.param(
            par(ex("a"), ex("b")),
            PlanNode(NodeKind.PARALLEL, children=(LEAF_A, LEAF_B)),
            id="parallel",
        ),
        pytest.param(
            {"composite": ["a", "b"]}, PlanNode(NodeKind.COMPOSITE, ids=("a", "b")), id="composite"
        ),
        pytest.param({"stream": ["a"]}, PlanNode(NodeKind.STREAM, ids=("a",)), id="stream"),
        pytest.param(
            {"loop": "c", "body": ex("a")},
            PlanNode(NodeKind.LOOP, id="c", children=(LEAF_A,)),
            id="loop",
        ),
        pytest.param(
            {"branch": "c", "arms": {"yes": ex("a"), "no": ex("b")}},
            PlanNode(NodeKind.BRANCH, id="c", children=(LEAF_A, LEAF_B), arms=("yes", "no")),
            id="branch-keeps-arm-order",
        ),
        pytest.param(
            {"remote": ex("a"), "tag": "gpu"},
            PlanNode(NodeKind.REMOTE, children=(LEAF_A,), tag="gpu"),
            id="remote",
        ),
        pytest.param(
            {"tag": "gpu", "remote": ex("a")},
            PlanNode(NodeKind.REMOTE, children=(LEAF_A,), tag="gpu"),
            id="remote-keys-in-any-order",
        ),
        pytest.param(
            {"trials": [ex("a"), ex("b")]},
            PlanNode(NodeKind.TRIALS, children=(LEAF_A, LEAF_B)),
            id="trials",
        ),
        pytest.param({}, EMPTY_PLAN, id="empty"),
        pytest.param(seq(), PlanNode(NodeKind.SEQUENCE), id="empty-sequence"),
        pytest.param({"composite": []}, PlanNode(NodeKind.COMPOSITE), id="empty-composite"),
        pytest.param(
            {"branch": "c", "arms": {}}, PlanNode(NodeKind.BRANCH, id="c"), id="branch-no-arms"
        ),
        pytest.param(
            {"loop": "c", "body": {}},
            PlanNode(NodeKind.LOOP, id="c", children=(EMPTY_PLAN,)),
            id="loop-empty-body",
        ),
        pytest.param(
            {"execute": "node-7.é/x"}, PlanNode(NodeKind.EXECUTE, id="node-7.é/x"), id="any-id-text"
        ),
    ],
)
def test_every_node_kind_parses_into_its_tree(plan: object, tree: PlanNode) -> None:
    assert parse(plan) == tree
    assert parse_plan(dump_plan(tree)) == tree


# ---- malformed plans name the path and the problem ----------------------------------

MALFORMED = [
    # text that is no plan node at all
    pytest.param("{", "plan", "not valid JSON", id="not-json"),
    pytest.param("", "plan", "not valid JSON", id="empty-text"),
    pytest.param("1" * 5000, "plan", "not valid JSON", id="number-too-long-to-convert"),
    pytest.param("[]", "plan", "expected a plan node (a JSON object), got array", id="array"),
    pytest.param("null", "plan", "got null", id="null"),
    pytest.param('"a"', "plan", "got string", id="string"),
    pytest.param("NaN", "plan", "got number", id="nan"),
    # kinds
    pytest.param(
        '{"sequence": [{"execute": "a"}, {"parallel": [{"foo": 1}]}]}',
        "plan.sequence[1].parallel[0]",
        'unknown node kind "foo"; expected one of execute, step, sequence, parallel, '
        "composite, stream, loop, branch, remote, trials",
        id="unknown-kind-nested",
    ),
    pytest.param(
        '{"Execute": "a"}', "plan", 'unknown node kind "Execute"', id="kinds-are-case-sensitive"
    ),
    pytest.param(
        '{"execute": "a", "step": "b"}',
        "plan",
        'one object has 2 node kinds ("execute", "step")',
        id="two-kinds",
    ),
    pytest.param(
        '{"execute": "a", "execute": "b"}', "plan", 'key "execute" appears twice', id="repeated-key"
    ),
    # extra and missing keys
    pytest.param(
        '{"step": "a", "name": "x"}', "plan", 'unexpected key "name" beside "step"', id="extra-key"
    ),
    pytest.param(
        '{"execute": "a", "tag": "gpu"}',
        "plan",
        'unexpected key "tag" beside "execute"; it belongs beside "remote"',
        id="tag-beside-execute",
    ),
    pytest.param(
        '{"remote": {}, "tag": "gpu", "body": {}}',
        "plan",
        'unexpected key "body" beside "remote"; it belongs beside "loop"',
        id="body-beside-remote",
    ),
    pytest.param(
        '{"loop": "c", "body": {}, "arms": {}}',
        "plan",
        'unexpected key "arms" beside "loop"; it belongs beside "branch"',
        id="arms-beside-loop",
    ),
    pytest.param(
        '{"tag": "gpu"}',
        "plan",
        'key "tag" without a node kind; it belongs beside "remote"',
        id="companion-alone",
    ),
    pytest.param('{"loop": "c"}', "plan", '"loop" needs "body" (a plan node)', id="loop-no-body"),
    pytest.param('{"branch": "c"}', "plan", '"branch" needs "arms"', id="branch-no-arms"),
    pytest.param('{"remote": {}}', "plan", '"remote" needs "tag" (a string)', id="remote-no-tag"),
    # member ids
    pytest.param(
        '{"execute": 7}',
        "plan.execute",
        "expected a member id (a string), got number",
        id="id-number",
    ),
    pytest.param('{"step": null}', "plan.step", "got null", id="id-null"),
    pytest.param('{"execute": ""}', "plan.execute", "empty member id", id="id-empty"),
    pytest.param('{"execute": "  "}', "plan.execute", "empty member id", id="id-blank"),
    pytest.param(
        '{"execute": " a"}', "plan.execute", "leading or trailing whitespace", id="id-padded"
    ),
    pytest.param('{"execute": "a,b"}', "plan.execute", "contains a comma", id="id-with-comma"),
    pytest.param(
        '{"sequence": [{"execute": "a"}, {"parallel": [{"execute": "b"}, {"step": "a"}]}]}',
        "plan.sequence[1].parallel[1].step",
        'duplicate member id "a" (first at plan.sequence[0].execute)',
        id="duplicate-id-across-subtrees",
    ),
    pytest.param(
        '{"sequence": [{"composite": ["x", "y"]}, {"execute": "y"}]}',
        "plan.sequence[1].execute",
        'duplicate member id "y" (first at plan.sequence[0].composite[1])',
        id="duplicate-id-composite-and-execute",
    ),
    pytest.param(
        '{"loop": "c", "body": {"execute": "c"}}',
        "plan.body.execute",
        'duplicate member id "c" (first at plan.loop)',
        id="duplicate-id-loop-controller-in-body",
    ),
    pytest.param(
        '{"stream": ["s", "s"]}',
        "plan.stream[1]",
        'duplicate member id "s"',
        id="duplicate-in-stream",
    ),
    # lists
    pytest.param(
        '{"sequence": {"execute": "a"}}',
        "plan.sequence",
        "expected an array of plan nodes, got object",
        id="sequence-not-array",
    ),
    pytest.param(
        '{"parallel": ["a"]}',
        "plan.parallel[0]",
        "expected a plan node (a JSON object), got string",
        id="parallel-of-strings",
    ),
    pytest.param('{"trials": [[]]}', "plan.trials[0]", "got array", id="trials-of-arrays"),
    pytest.param(
        '{"composite": "a"}',
        "plan.composite",
        "expected an array of member ids, got string",
        id="composite-not-array",
    ),
    pytest.param(
        '{"composite": ["a", {"execute": "b"}]}',
        "plan.composite[1]",
        "expected a member id (a string), got object",
        id="composite-of-nodes",
    ),
    pytest.param(
        '{"stream": ["a", ""]}', "plan.stream[1]", "empty member id", id="stream-empty-id"
    ),
    # loop and branch
    pytest.param('{"loop": ["c"], "body": {}}', "plan.loop", "got array", id="loop-id-array"),
    pytest.param(
        '{"loop": "c", "body": []}',
        "plan.body",
        "expected a plan node (a JSON object), got array",
        id="loop-body-array",
    ),
    pytest.param(
        '{"branch": "c", "arms": [{"execute": "a"}]}',
        "plan.arms",
        "expected an object of named plan nodes, got array",
        id="arms-array",
    ),
    pytest.param(
        '{"branch": "c", "arms": {"yes": "a"}}', "plan.arms.yes", "got string", id="arm-not-node"
    ),
    pytest.param(
        '{"branch": "c", "arms": {"no way": {"foo": 1}}}',
        'plan.arms["no way"]',
        'unknown node kind "foo"',
        id="arm-name-needing-quotes",
    ),
    pytest.param(
        '{"branch": "c", "arms": {"": {}}}', "plan.arms", "empty arm name", id="arm-empty-name"
    ),
    pytest.param(
        '{"branch": "c", "arms": {"x": {}, "x": {}}}',
        "plan.arms",
        'arm "x" appears twice',
        id="arm-twice",
    ),
    # remote
    pytest.param(
        '{"remote": {}, "tag": ["gpu"]}',
        "plan.tag",
        "expected a node tag (a string), got array",
        id="tag-not-string",
    ),
    pytest.param(
        '{"remote": {}, "tag": "GPU!"}',
        "plan.tag",
        '"GPU!" is not a valid tag: it becomes the label tag.phalanx.io/<tag>',
        id="tag-bad-characters",
    ),
    pytest.param('{"remote": {}, "tag": ""}', "plan.tag", "is not a valid tag", id="tag-empty"),
    pytest.param(
        json.dumps({"remote": {}, "tag": "g" * 64}),
        "plan.tag",
        "is not a valid tag",
        id="tag-too-long",
    ),
    pytest.param(
        '{"remote": {"execute": 1}, "tag": "gpu"}',
        "plan.remote.execute",
        "got number",
        id="remote-inner",
    ),
]


@pytest.mark.parametrize(("text", "path", "problem"), MALFORMED)
def test_a_malformed_plan_is_rejected_naming_the_path_and_the_problem(
    text: str, path: str, problem: str
) -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(text)
    assert caught.value.path == path
    assert problem in caught.value.problem
    assert str(caught.value) == f"{path}: {caught.value.problem}"


def test_a_plan_error_is_a_value_error_that_survives_pickling() -> None:
    error = PlanError("plan.sequence[0]", "empty member id")
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.problem, str(copy)) == (error.path, error.problem, str(error))


def test_a_tag_of_63_label_characters_is_accepted() -> None:
    tag = "a" + "-_." * 20 + "9z"
    assert len(tag) == 63
    assert parse({"remote": {}, "tag": tag}).tag == tag


# ---- limits keep a hostile annotation cheap -------------------------------------------


def test_a_plan_with_more_nodes_than_the_limit_is_rejected() -> None:
    assert leaves(parse(seq(ex("a"), ex("b")), max_nodes=3)) == ("a", "b")
    with pytest.raises(PlanError, match=r"^plan\.sequence\[2\]: plan has more than 3 nodes$"):
        parse(seq(ex("a"), ex("b"), ex("c")), max_nodes=3)


def test_composite_members_count_toward_the_node_limit() -> None:
    with pytest.raises(PlanError, match=r"^plan\.composite: plan has more than 5 nodes$"):
        parse({"composite": [f"m{i}" for i in range(5)]}, max_nodes=5)


def test_a_plan_nested_deeper_than_the_limit_is_rejected() -> None:
    assert parse(seq(seq(ex("a"))), max_depth=3) == parse(seq(seq(ex("a"))))
    with pytest.raises(
        PlanError, match=r"^plan\.sequence\[0\]\.body: plan nests deeper than 2 levels$"
    ):
        parse(seq({"loop": "c", "body": {}}), max_depth=2)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * 100_000, id="deep-arrays"),
        pytest.param('{"a":' * 100_000, id="deep-objects"),
        pytest.param('{"sequence": [' * 5_000 + "]}" * 5_000, id="deep-sequences"),
        pytest.param('{"remote": ' * 300 + "{}" + ', "tag": "t"}' * 300, id="deep-remotes"),
    ],
)
def test_absurdly_deep_text_is_a_plan_error_not_a_crash(text: str) -> None:
    with pytest.raises(PlanError, match=r"^plan.*: (JSON|plan) nests"):
        parse_plan(text)


def test_a_long_path_is_shortened_in_the_message() -> None:
    text = '{"sequence": [' * 60 + '{"foo": 1}' + "]}" * 60
    with pytest.raises(PlanError) as caught:
        parse_plan(text)
    assert caught.value.path.startswith("plan.sequence[0].sequence[0]")
    assert "…" in caught.value.path
    assert len(caught.value.path) < 300


def test_wide_parallels_in_sequence_are_rejected_before_their_edges_explode() -> None:
    wide = seq(par(*(ex(f"a{i}") for i in range(4))), par(*(ex(f"b{i}") for i in range(4))))
    assert len(edges(parse(wide, max_edges=16))) == 16
    with pytest.raises(PlanError, match=r"^plan: plan has more than 15 data-flow edges"):
        parse(wide, max_edges=15)


def test_limits_outside_their_range_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        parse_plan("{}", max_depth=10_000)
    with pytest.raises(ValueError, match="max_nodes"):
        parse_plan("{}", max_nodes=0)


# ---- leaves ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "members"),
    [
        pytest.param({}, (), id="empty"),
        pytest.param(ex("a"), ("a",), id="leaf"),
        pytest.param(
            seq(ex("a"), par(ex("b"), ex("c")), ex("d")), ("a", "b", "c", "d"), id="nested"
        ),
        pytest.param(
            {"loop": "c", "body": seq(ex("x"), {"composite": ["y", "z"]})},
            ("c", "x", "y", "z"),
            id="loop-controller-first",
        ),
        pytest.param(
            {"branch": "c", "arms": {"z": ex("z1"), "a": {"stream": ["a1", "a2"]}}},
            ("c", "z1", "a1", "a2"),
            id="branch-condition-then-arms-in-written-order",
        ),
        pytest.param(
            {"remote": {"trials": [ex("t0"), ex("t1")]}, "tag": "gpu"}, ("t0", "t1"), id="remote"
        ),
    ],
)
def test_leaves_lists_every_member_in_execution_order(
    plan: object, members: tuple[str, ...]
) -> None:
    assert leaves(parse(plan)) == members


# ---- edges ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "flow"),
    [
        pytest.param(ex("a"), [], id="leaf"),
        pytest.param(par(ex("a"), ex("b")), [], id="parallel-branches-are-independent"),
        pytest.param(seq(ex("a"), ex("b"), ex("c")), ["a>b", "b>c"], id="sequence"),
        pytest.param(
            seq(ex("a"), {}, par(), seq(), ex("b")), ["a>b"], id="sequence-skips-empty-elements"
        ),
        pytest.param(
            seq(ex("load"), ex("normalize"), par(ex("train_a"), ex("train_b"))),
            ["load>normalize", "normalize>train_a", "normalize>train_b"],
            id="sequence-then-parallel-fans-out",
        ),
        pytest.param(
            seq(par(ex("a"), ex("b")), ex("join")), ["a>join", "b>join"], id="parallel-joins"
        ),
        pytest.param(
            seq(ex("s"), par(seq(ex("a1"), ex("a2")), ex("b")), ex("t")),
            ["s>a1", "s>b", "a1>a2", "a2>t", "b>t"],
            id="branch-entries-and-exits",
        ),
        pytest.param({"composite": ["x", "y", "z"]}, ["x>y", "y>z"], id="composite-chain"),
        pytest.param({"stream": ["f", "g"]}, ["f>g"], id="stream-chain"),
        pytest.param(
            seq(ex("a"), {"composite": ["x", "y"]}, ex("b")),
            ["a>x", "x>y", "y>b"],
            id="composite-enters-first-exits-last",
        ),
        pytest.param(
            seq(ex("a"), {"loop": "c", "body": seq(ex("x"), ex("y"))}, ex("b")),
            ["a>c", "c>x", "x>y", "y>b"],
            id="loop-controller-feeds-body",
        ),
        pytest.param(
            seq(ex("a"), {"loop": "c", "body": {}}, ex("b")),
            ["a>c", "c>b"],
            id="loop-without-body-exits-from-controller",
        ),
        pytest.param(
            seq(
                ex("a"),
                {"branch": "c", "arms": {"yes": ex("x"), "no": seq(ex("y"), ex("z"))}},
                ex("b"),
            ),
            ["a>c", "c>x", "c>y", "y>z", "x>b", "z>b"],
            id="branch-condition-feeds-each-arm",
        ),
        pytest.param(
            seq({"branch": "c", "arms": {"yes": ex("x"), "no": {}}}, ex("b")),
            ["c>x", "c>b", "x>b"],
            id="an-empty-arm-passes-the-condition-on",
        ),
        pytest.param(
            seq(ex("a"), {"remote": ex("b"), "tag": "gpu"}), ["a>b"], id="remote-is-transparent"
        ),
        pytest.param(
            seq(ex("prep"), {"trials": [ex("t1"), ex("t2")]}, ex("report")),
            ["prep>t1", "prep>t2", "t1>report", "t2>report"],
            id="trials-fan-out-and-in",
        ),
    ],
)
def test_edges_follow_data_flow_in_execution_order(plan: object, flow: list[str]) -> None:
    assert [f"{a}>{b}" for a, b in edges(parse(plan))] == flow
