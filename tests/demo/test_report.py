"""The report checks each gang's nodes against its policy from the node labels."""

from __future__ import annotations

import json

import pytest

from builders import gpu_node
from phalanx.core.model import Node
from phalanx.demo.report import check_policy, check_tags

A1 = gpu_node(
    "a1", clique="nvl-a", labels={"topology.kubernetes.io/zone": "z1", "tag.phalanx.io/gpu": "true"}
)
A2 = gpu_node("a2", clique="nvl-a", labels={"topology.kubernetes.io/zone": "z2"})
B1 = gpu_node("b1", clique="nvl-b", labels={"topology.kubernetes.io/zone": "z1"})
LONE = gpu_node("lone")
ZONE = "domain:topology.kubernetes.io/zone"


@pytest.mark.parametrize(
    ("placement", "nodes", "pods", "ok"),
    [
        ("same-node", [A1], 3, True),
        ("same-node", [A1, A2], 3, False),
        ("spread", [A1, A2, B1], 3, True),
        ("spread", [A1, A2], 3, False),
        ("interconnect-local", [A1, A2], 2, True),
        ("interconnect-local", [A1, B1], 2, False),
        ("interconnect-local", [LONE], 2, True),
        ("interconnect-local", [LONE, A1], 2, False),
        (ZONE, [A1, B1], 2, True),
        (ZONE, [A1, A2], 2, False),
        (ZONE, [LONE], 1, False),
        ("pack", [A1, A2, B1], 3, True),
    ],
    ids=[
        "same-node-one",
        "same-node-two",
        "spread-distinct",
        "spread-shared",
        "clique-one",
        "clique-two",
        "clique-lone-node",
        "clique-lone-plus-other",
        "zone-one",
        "zone-two",
        "zone-unlabelled",
        "pack-anything",
    ],
)
def test_policy_check_reads_node_labels(
    placement: str, nodes: list[Node], pods: int, ok: bool
) -> None:
    assert check_policy(placement, nodes, pods).ok is ok


PLAN = json.dumps(
    {"sequence": [{"execute": "prep"}, {"remote": {"execute": "train"}, "tag": "gpu"}]}
)


def test_a_remote_member_on_an_untagged_node_is_a_violation() -> None:
    nodes = {"a1": A1, "a2": A2}
    good = check_tags(PLAN, {"prep": "a2", "train": "a1"}, nodes)
    bad = check_tags(PLAN, {"prep": "a1", "train": "a2"}, nodes)
    assert good is not None
    assert good.ok
    assert bad is not None
    assert not bad.ok
    assert "train on a2 lacks tag gpu" in bad.detail


def test_a_plan_without_remote_tags_has_no_tag_check() -> None:
    assert check_tags(json.dumps({"execute": "x"}), {"x": "a1"}, {"a1": A1}) is None
