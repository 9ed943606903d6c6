"""The extender wire format on its own: decoding rules and what an answer may contain."""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import fixture_bytes, fixture_json
from garbage_requests import GARBAGE, POD, body

from phalanx.api import wire
from phalanx.core.decisions import FilterResult

# ---- ExtenderArgs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod_key", "names_key"),
    [
        ("Pod", "NodeNames"),
        ("pod", "nodenames"),
        ("POD", "NODENAMES"),
        ("pOd", "nodeNames"),
        ("Pod", "NodeNameſ"),  # U+017F folds to "s" in Go's decoder too
    ],
    ids=["go-names", "legacy-lower-case", "upper-case", "mixed-case", "unicode-fold"],
)
def test_extender_args_keys_match_in_any_casing(pod_key: str, names_key: str) -> None:
    args = wire.decode_extender_args(body({pod_key: POD, names_key: ["n1", "n2"]}))
    assert args.pod == POD
    assert args.node_names == ("n1", "n2")
    assert args.nodes is None


def test_a_later_duplicate_key_wins_as_in_go() -> None:
    args = wire.decode_extender_args(b'{"Pod": {}, "nodenames": ["a"], "NodeNames": ["b"]}')
    assert args.node_names == ("b",)


def test_unknown_keys_are_ignored() -> None:
    args = wire.decode_extender_args(body({"Pod": POD, "NodeNames": ["n1"], "Extra": 1}))
    assert args.node_names == ("n1",)


def test_full_nodes_keep_the_original_objects_by_name_in_order() -> None:
    doc = fixture_json("filter_nodes.json")
    args = wire.decode_extender_args(fixture_bytes("filter_nodes.json"))
    assert args.node_names == ("gpu-a", "gpu-b", "cpu-1")
    assert args.nodes is not None
    assert list(args.nodes.values()) == doc["Nodes"]["items"]


def test_an_empty_node_list_serialised_as_null_items_offers_nothing() -> None:
    args = wire.decode_extender_args(body({"Pod": POD, "Nodes": {"metadata": {}, "items": None}}))
    assert args.node_names == ()
    assert args.nodes == {}


def test_embedded_kubernetes_objects_are_read_by_their_json_tags_only() -> None:
    doc = {"Pod": POD, "Nodes": {"items": [{"Metadata": {"Name": "n1"}}]}}
    with pytest.raises(wire.WireError, match=r"Nodes\.items\[0\]\.metadata must be an object"):
        wire.decode_extender_args(body(doc))


def test_repeated_node_names_are_offered_once() -> None:
    args = wire.decode_extender_args(body({"Pod": POD, "NodeNames": ["a", "b", "a"]}))
    assert args.node_names == ("a", "b")


# ---- ExtenderBindingArgs / ExtenderPreemptionArgs ----------------------------------------


@pytest.mark.parametrize("name", ["bind.json", "bind_legacy_lowercase.json"])
def test_binding_args_decode_from_go_and_legacy_names(name: str) -> None:
    args = wire.decode_binding_args(fixture_bytes(name))
    assert args == wire.ExtenderBindingArgs("solo", "team-a", "uid-team-a-solo", "gpu-a")


def test_a_binding_without_uid_skips_nothing_but_the_uid() -> None:
    args = wire.decode_binding_args(body({"PodName": "p", "PodNamespace": "ns", "Node": "n"}))
    assert args.pod_uid == ""


@pytest.mark.parametrize(
    "name",
    ["preempt_meta_victims.json", "preempt_full_victims.json", "preempt_legacy_lowercase.json"],
)
def test_victims_in_either_form_reduce_to_uids_with_their_pdb_violations(name: str) -> None:
    args = wire.decode_preemption_args(fixture_bytes(name))
    assert args.victims == {
        "gpu-a": wire.MetaVictims(("uid-team-a-victim",), 1),
        "gpu-b": wire.MetaVictims(("uid-team-a-other",), 0),
    }


def test_no_victims_at_all_is_a_request_without_candidates() -> None:
    args = wire.decode_preemption_args(body({"Pod": POD}))
    assert args.victims == {}


def test_a_null_victims_entry_means_nothing_to_evict_there() -> None:
    args = wire.decode_preemption_args(body({"Pod": POD, "NodeNameToMetaVictims": {"n1": None}}))
    assert args.victims == {"n1": wire.MetaVictims((), 0)}


# ---- garbage -----------------------------------------------------------------------------

DECODERS = {
    "filter": wire.decode_extender_args,
    "bind": wire.decode_binding_args,
    "preempt": wire.decode_preemption_args,
}


@pytest.mark.parametrize(
    ("verb", "raw", "problem"), GARBAGE, ids=[f"{v}-{i}" for i, (v, _, _) in enumerate(GARBAGE)]
)
def test_garbage_is_refused_with_a_reason_naming_the_field(
    verb: str, raw: bytes, problem: str
) -> None:
    with pytest.raises(wire.WireError) as refused:
        DECODERS[verb](raw)
    assert problem in str(refused.value)


# ---- answers -----------------------------------------------------------------------------


def names_args(*names: str) -> wire.ExtenderArgs:
    return wire.ExtenderArgs(POD, names, None)


def test_a_filter_answer_never_names_a_node_that_was_not_offered() -> None:
    result = FilterResult(
        feasible=("ghost",), failed={"b": "full", "ghost2": "x"}, unresolvable={"ghost3": "y"}
    )
    answer = wire.filter_answer(names_args("a", "b"), result)
    assert answer == {
        "Nodes": None,
        "NodeNames": [],
        "FailedNodes": {"b": "full"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_unresolvable_wins_over_failed() -> None:
    result = FilterResult(failed={"a": "full", "b": "full"}, unresolvable={"b": "tainted"})
    answer = wire.filter_answer(names_args("a", "b", "c"), result)
    assert answer["NodeNames"] == []
    assert answer["FailedNodes"] == {"a": "full"}
    assert answer["FailedAndUnresolvableNodes"] == {"b": "tainted"}


def test_a_failed_node_is_never_kept_and_a_kept_one_at_most_once() -> None:
    result = FilterResult(
        feasible=("a", "b", "c", "c"),
        failed={"a": "full", "b": "full"},
        unresolvable={"b": "tainted"},
    )
    answer = wire.filter_answer(names_args("a", "b", "c"), result)
    assert answer["NodeNames"] == ["c"]


def test_an_answer_that_keeps_a_node_gives_no_reasons_for_the_others() -> None:
    # kube-scheduler reads the reasons only for a pod no node is left for; it would decode
    # and store every one in each cycle for nothing.
    result = FilterResult(feasible=("a",), failed={"b": "full"}, unresolvable={"c": "tainted"})
    answer = wire.filter_answer(names_args("a", "b", "c"), result)
    assert answer["NodeNames"] == ["a"]
    assert answer["FailedNodes"] == {}
    assert answer["FailedAndUnresolvableNodes"] == {}


def test_a_full_nodes_filter_answer_returns_the_kept_node_objects_and_no_names() -> None:
    node_a = {"metadata": {"name": "a", "labels": {"x": "y"}}, "status": {}}
    node_b = {"metadata": {"name": "b"}}
    args = wire.ExtenderArgs(POD, ("a", "b"), {"a": node_a, "b": node_b})
    answer = wire.filter_answer(args, FilterResult(feasible=("b",), failed={"a": "full"}))
    assert answer["Nodes"] == {"items": [node_b]}
    assert answer["Nodes"]["items"][0] is node_b
    assert answer["NodeNames"] is None


def test_priorities_are_one_integer_from_0_to_10_per_offered_node_in_order() -> None:
    scores = {"b": 42, "a": -3, "ghost": 5}
    assert wire.priorities_answer(names_args("a", "b", "c"), scores) == [
        {"Host": "a", "Score": 0},
        {"Host": "b", "Score": 10},
        {"Host": "c", "Score": 0},
    ]


def test_a_preemption_answer_keeps_only_sent_nodes_and_their_pdb_violations() -> None:
    args = wire.ExtenderPreemptionArgs(
        POD, {"n1": wire.MetaVictims(("u1",), 2), "n2": wire.MetaVictims(("u2",), 0)}
    )
    answer = wire.preemption_answer(args, {"n1": ["u1", "u3", "u1"], "ghost": ["u9"]})
    assert answer == {
        "NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "u1"}, {"UID": "u3"}], "NumPDBViolations": 2}
        }
    }


@pytest.mark.parametrize(
    ("pod", "key"),
    [
        ({"metadata": {"namespace": "ns", "name": "p"}}, "ns/p"),
        ({"metadata": {"name": "p"}}, "?/p"),
        ({"metadata": "nope"}, "?/?"),
        ({}, "?/?"),
    ],
)
def test_a_pod_key_is_read_as_far_as_possible(pod: dict[str, Any], key: str) -> None:
    assert wire.pod_key(pod) == key
