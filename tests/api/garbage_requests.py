"""Request bodies kube-scheduler never sends, each with what the refusal must name."""

from __future__ import annotations

import json
from typing import Any

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": []}}


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


GARBAGE: list[tuple[str, bytes, str]] = [
    ("filter", b"not json", "not JSON"),
    ("filter", b"", "not JSON"),
    ("filter", b"\xff\xfe", "not JSON"),
    ("filter", b"[1, 2]", "must be a JSON object, not an array"),
    ("filter", b'"Pod"', "must be a JSON object, not a string"),
    ("filter", b"null", "must be a JSON object, not null"),
    ("filter", body({"NodeNames": ["n1"]}), "Pod is missing or null"),
    ("filter", body({"Pod": None, "NodeNames": ["n1"]}), "Pod is missing or null"),
    ("filter", body({"Pod": [], "NodeNames": ["n1"]}), "Pod must be a v1.Pod object, not an array"),
    ("filter", body({"Pod": POD, "NodeNames": 5}), "NodeNames must be an array"),
    (
        "filter",
        body({"Pod": POD, "NodeNames": ["n1", 5]}),
        "NodeNames[1] must be a non-empty string",
    ),
    ("filter", body({"Pod": POD, "NodeNames": [""]}), "NodeNames[0] must be a non-empty string"),
    ("filter", body({"Pod": POD, "Nodes": None, "NodeNames": None}), "both missing or null"),
    ("filter", body({"Pod": POD}), "both missing or null"),
    ("filter", body({"Pod": POD, "Nodes": {"items": []}, "NodeNames": []}), "both set"),
    ("filter", body({"Pod": POD, "Nodes": []}), "Nodes must be a v1.NodeList object, not an array"),
    ("filter", body({"Pod": POD, "Nodes": {"items": {}}}), "Nodes.items must be an array"),
    ("filter", body({"Pod": POD, "Nodes": {"items": [7]}}), "Nodes.items[0] must be an object"),
    (
        "filter",
        body({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}),
        "Nodes.items[0].metadata.name must be a non-empty string",
    ),
    ("bind", body({"PodNamespace": "ns", "PodUID": "u", "Node": "n"}), "PodName is missing"),
    ("bind", body({"PodName": "p", "PodUID": "u", "Node": "n"}), "PodNamespace is missing"),
    ("bind", body({"PodName": "p", "PodNamespace": "ns", "Node": ""}), "Node is missing or empty"),
    (
        "bind",
        body({"PodName": "p", "PodNamespace": "ns", "PodUID": 7, "Node": "n"}),
        "PodUID must be a string",
    ),
    (
        "bind",
        body({"PodName": ["p"], "PodNamespace": "ns", "Node": "n"}),
        "PodName must be a string",
    ),
    ("preempt", body({"NodeNameToMetaVictims": {}}), "Pod is missing or null"),
    (
        "bind",
        body({"PodName": "p" * 100_000, "PodNamespace": "default", "Node": "n1"}),
        "PodName must be at most 253 characters, not 100000",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToVictims": {}, "NodeNameToMetaVictims": {}}),
        "both set",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": []}),
        "NodeNameToMetaVictims must be an object",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n1": 3}}),
        "NodeNameToMetaVictims['n1'] must be an object",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": {}}}}),
        "NodeNameToMetaVictims['n1'].Pods must be an array",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"Name": "x"}]}}}),
        "NodeNameToMetaVictims['n1'].Pods[0].UID must be a non-empty string",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": "1"}}}),
        "NumPDBViolations must be an integer, not a string",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": 1.5}}}),
        "NumPDBViolations must be an integer, not a number",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": True}}}),
        "NumPDBViolations must be an integer, not a boolean",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": -5}}}),
        "NumPDBViolations must be between 0 and 9223372036854775807, not -5",
    ),
    (
        "preempt",
        body(
            {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": 2**63}}}
        ),
        "NumPDBViolations must be between 0 and 9223372036854775807, not 9223372036854775808",
    ),
    (
        "preempt",
        body({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {}}]}}}),
        "NodeNameToVictims['n1'].Pods[0].metadata.uid must be a non-empty string",
    ),
    (  # a node name is cut where no node name is longer, never echoed whole
        "preempt",
        body({"Pod": POD, "NodeNameToMetaVictims": {"n" * 100_000: 3}}),
        "NodeNameToMetaVictims['" + "n" * 253 + "…'] must be an object",
    ),
]

VERBS = ["filter", "prioritize", "bind", "preempt"]

# (id, body, what the refusal names): a body that is no JSON object at all, for every verb.
NOT_AN_OBJECT: list[tuple[str, bytes, str]] = [
    ("not-json", b"not json", "request body is not JSON"),
    ("empty", b"", "request body is not JSON"),
    ("array", b"[1, 2]", "request body must be a JSON object, not an array"),
    ("null", b"null", "request body must be a JSON object, not null"),
    ("string", b'"Pod"', "request body must be a JSON object, not a string"),
]
