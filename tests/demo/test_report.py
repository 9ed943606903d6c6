"""The report checks each gang's nodes against its policy from the node labels, and draws
every node's GPUs in a bar of bounded width."""

from __future__ import annotations

import json

import pytest

from builders import gpu_node
from phalanx.core.model import Node
from phalanx.demo.report import (
    BAR_CELLS,
    NodeLine,
    Report,
    check_policy,
    check_tags,
    render_group_view,
    render_text,
)

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


INT64_MAX = 2**63 - 1


def node_line(gpus: int, used: int = 0, reserved: int = 0) -> NodeLine:
    return NodeLine("n", "H100", "", "", gpus, used, reserved, "", [])


def bar_of(line: NodeLine) -> str:
    text = render_text(Report("t", nodes=[line]))
    return next(cell for cell in text.split() if cell.startswith("["))


@pytest.mark.parametrize(
    ("line", "bar"),
    [
        (node_line(8, used=3, reserved=2), "[###rr...]"),
        (node_line(4, used=6), "[######]"),  # over-committed: the excess shows
        (node_line(BAR_CELLS * 4, used=BAR_CELLS), "[" + "#" * 8 + "." * 24 + "]"),
        (node_line(INT64_MAX), "[" + "." * BAR_CELLS + "]"),
        (node_line(INT64_MAX, used=1, reserved=1), "[#r" + "." * (BAR_CELLS - 2) + "]"),
        (node_line(INT64_MAX, used=INT64_MAX, reserved=1), "[" + "#" * BAR_CELLS + "]"),
    ],
    ids=["one-cell-a-gpu", "over-committed", "scaled", "absurd", "absurd-in-use", "absurd-full"],
)
def test_a_nodes_gpu_bar_has_a_cell_per_gpu_up_to_a_fixed_width_then_scales(
    line: NodeLine, bar: str
) -> None:
    assert bar_of(line) == bar


def test_the_gang_view_names_each_member_refused_for_its_own_annotations() -> None:
    view = {
        "group": "default/notes",
        "min_member": 2,
        "invalid_members": {"default/notes-1": 'annotation phalanx.io/placement: "bogus" ...'},
    }
    shown = render_group_view(view)
    assert '  refused member: default/notes-1: annotation phalanx.io/placement: "bogus"' in shown


def test_the_gang_view_names_upstreams_disruption_mode_when_the_gang_has_one() -> None:
    view = {"group": "upstream:ml/job", "source": "PodGroup", "min_member": 2}
    assert ", disruptionMode all)" in render_group_view({**view, "disruption_mode": "all"})
    assert "disruptionMode" not in render_group_view({**view, "disruption_mode": None})


@pytest.mark.parametrize(
    ("deleting", "shown"),
    [(True, True), (False, False)],
    ids=["being-deleted", "live"],
)
def test_the_gang_view_has_a_deleting_line_only_while_its_object_is_being_deleted(
    deleting: bool, shown: bool
) -> None:
    view = {"group": "volcano:default/job", "deleting": deleting}
    lines = render_group_view(view).splitlines()
    assert ("  deleting:       true (its object is being deleted)" in lines) is shown
