"""Plan-aware placement through kube-scheduler (DESIGN.md §3, execution plan): a pipeline
plan on a PodGroup and a trials study land as the plan rules say, and Phalanx's
``/debug/groups/{ns}/{name}`` shows the phases and data transfers of what landed."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import TAG_LABEL_PREFIX, Scenario

pytestmark = pytest.mark.e2e

# ingest, then two independent two-step branches, then training on a GPU-tagged node.
PIPELINE = {
    "sequence": [
        {"execute": "ingest"},
        {
            "parallel": [
                {"sequence": [{"execute": "prep-en"}, {"execute": "tok-en"}]},
                {"sequence": [{"execute": "prep-de"}, {"execute": "tok-de"}]},
            ]
        },
        {"remote": {"execute": "train"}, "tag": "gpu"},
    ]
}
PIPELINE_IDS = ["ingest", "prep-en", "tok-en", "prep-de", "tok-de", "train"]
# The plan's data-flow edges (plan_tree.edges): each feeds the next element of its sequence.
PIPELINE_EDGES = [
    ("ingest", "prep-en"),
    ("ingest", "prep-de"),
    ("prep-en", "tok-en"),
    ("prep-de", "tok-de"),
    ("tok-en", "train"),
    ("tok-de", "train"),
]


def test_a_pipeline_plan_keeps_sequences_together_branches_apart_and_tags_honoured(
    cluster: Scenario,  # noqa: F811
) -> None:
    # Only "tagged" carries tag.phalanx.io/gpu; it is the smallest node, so a placement
    # that ignored the tag would have no reason to pick it.
    tagged = cluster.node("tagged", 4, labels={f"{TAG_LABEL_PREFIX}gpu": "true"})
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    gang = cluster.gang("pipeline", len(PIPELINE_IDS), 1, plan=PIPELINE, plan_nodes=PIPELINE_IDS)
    where = cluster.wait_gang(gang)
    node_of = {pid: where[f"pipeline-{pid}"] for pid in PIPELINE_IDS}

    # remote(tag gpu) is hard: train only on the tagged node.
    assert node_of["train"] == tagged, node_of
    # The sequence's own members (outside the parallel) share a node: no transfer.
    assert node_of["ingest"] == node_of["train"], node_of
    # Each parallel branch is one unit, and the branches land apart.
    assert node_of["prep-en"] == node_of["tok-en"], node_of
    assert node_of["prep-de"] == node_of["tok-de"], node_of
    assert node_of["prep-en"] != node_of["prep-de"], node_of

    view = cluster.phalanx.debug_group(cluster.namespace, "pipeline")
    assert view is not None
    plan = view["plan"]
    assert plan["warnings"] == [], plan["warnings"]  # capacity allowed every soft rule
    phases = [(p["kind"], p["members"]) for p in plan["phases"]]
    assert phases == [
        ("sequential", ["ingest"]),
        ("parallel", ["prep-en", "tok-en", "prep-de", "tok-de"]),
        ("sequential", ["train"]),
    ]
    parallel = plan["phases"][1]
    assert sorted(parallel["nodes"]) == sorted([node_of["prep-en"], node_of["prep-de"]])
    expected_transfers = [
        {"from": a, "to": b, "from_node": node_of[a], "to_node": node_of[b]}
        for a, b in PIPELINE_EDGES
        if node_of[a] != node_of[b]
    ]
    assert plan["data_transfers"] == expected_transfers
    assert len(expected_transfers) >= 2  # at least one branch left the ingest node and came back


def test_study_trials_go_round_robin_across_the_eligible_nodes(
    cluster: Scenario,  # noqa: F811
) -> None:
    nodes = [cluster.node(s, 8) for s in ("a", "b", "c")]
    cluster.nodes_ready()
    trial_ids = [f"trial-{i}" for i in range(6)]
    study = {"trials": [{"execute": t} for t in trial_ids]}
    gang = cluster.gang("sweep", len(trial_ids), 1, plan=study, plan_nodes=trial_ids)
    where = cluster.wait_gang(gang)
    order = [where[f"sweep-{t}"] for t in trial_ids]

    # Round-robin: every node gets two trials, and consecutive trials never share one
    # (pack alone would put all six 1-GPU trials on one node).
    assert Counter(order) == dict.fromkeys(nodes, 2), order
    assert all(a != b for a, b in itertools.pairwise(order)), order
    assert order[:3] == order[3:], f"not a round-robin cycle: {order}"

    view = cluster.phalanx.debug_group(cluster.namespace, "sweep")
    assert view is not None
    phases = view["plan"]["phases"]
    assert [p["kind"] for p in phases] == ["trial"] * 6
    assert [p["trial"] for p in phases] == [f"{i + 1}/6" for i in range(6)]
    assert [p["nodes"] for p in phases] == [[n] for n in order]
    assert view["plan"]["data_transfers"] == []  # trials are independent
