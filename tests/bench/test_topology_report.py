"""The NVL72 churn benchmark's figures, from hand-made observations (no cluster)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "controlplane"))

import churn  # bench/churn.py
import report_topology as rt  # bench/report_topology.py
import workloads  # bench/workloads.py
from workloads import CLIQUE_LABEL, LEAF_LABEL, ChurnWorkload, Job, JobShape

RACK = JobShape("72gpu", 2, 4, required=CLIQUE_LABEL)
SMALL = JobShape("8gpu", 2, 4)


def work(*jobs: Job, window_jobs: float = 10.0) -> ChurnWorkload:
    # A last "tick" job fixes the arrival window; it never arrives in the records.
    tick = Job("tick", SMALL, window_jobs, 1.0)
    return ChurnWorkload("topology", "t", 2, (*jobs, tick), drain_seconds=5.0, warmup_seconds=2.0)


def domains() -> dict[str, dict[str, str]]:
    """Two cliques of two nodes (a real run has 18 per clique)."""
    return {
        f"c{c}-n{n}": {CLIQUE_LABEL: f"c{c}", LEAF_LABEL: "l0"} for c in range(2) for n in range(2)
    }


def record(**fields: object) -> churn.ChurnRecord:
    rec = churn.ChurnRecord("topology", "phalanx", "ns", end=12.0)
    for key, value in fields.items():
        setattr(rec, key, value)
    return rec


def test_a_job_within_one_clique_and_its_wait_are_measured_from_creation_to_whole() -> None:
    job = Job("rack", RACK, 1.0, 5.0)
    rec = record(
        arrived={"rack": 1.0},
        bound={"rack-00": (1.5, "c0-n0"), "rack-01": (2.0, "c0-n1")},
        whole={"rack": 2.0},
        deleted={"rack": 7.0},
    )
    figures = rt.run_figures(work(job), rec, domains())
    assert figures["within_one_clique"] == 1.0
    assert figures["wait_by_class"]["small (4-8 GPUs)"]["p99_s"] == 1.0
    assert figures["required_violations"] == 0
    assert figures["required_checked"] == 1
    # Only the member bound first waited, half a second, for the other: 4 GPUs × 0.5 s.
    assert figures["gpu_seconds_partial"] == 2.0


def test_a_required_clique_split_over_two_cliques_is_a_violation() -> None:
    job = Job("rack", RACK, 0.0, 5.0)
    rec = record(
        arrived={"rack": 0.0},
        bound={"rack-00": (1.0, "c0-n0"), "rack-01": (1.0, "c1-n0")},
        whole={"rack": 1.0},
        deleted={"rack": 6.0},
    )
    figures = rt.run_figures(work(job), rec, domains())
    assert figures["required_violations"] == 1
    assert figures["within_one_clique"] == 0.0


def test_a_job_never_whole_waits_for_ever_and_holds_its_bound_members_to_the_end() -> None:
    job = Job("stuck", SMALL, 0.0, 5.0)
    rec = record(arrived={"stuck": 0.0}, bound={"stuck-00": (1.0, "c0-n0")})
    figures = rt.run_figures(work(job), rec, domains())
    small = figures["wait_by_class"]["small (4-8 GPUs)"]
    assert small["never_whole"] == 1
    assert small["p99_s"] == "never"
    assert figures["gpu_seconds_partial"] == 4 * (12.0 - 1.0)


def test_whole_cliques_are_counted_in_the_steady_state_only() -> None:
    # Clique c0 is held from 1 s to 11 s; c1 is never used. Steady state: 2 s .. 10 s.
    job = Job("a", SMALL, 0.0, 10.0)
    rec = record(
        arrived={"a": 0.0},
        bound={"a-00": (1.0, "c0-n0"), "a-01": (1.0, "c0-n1")},
        whole={"a": 1.0},
        deleted={"a": 11.0},
    )
    figures = rt.run_figures(work(job), rec, domains())
    assert figures["whole_cliques_free"] == {"mean": 1.0, "min": 1.0, "of": 2}
    # 8 GPUs busy for the 8 s window, of 16 GPUs: half.
    assert figures["gpu_utilisation_whole_jobs"] == 0.5


def phalanx_and_peer(
    ours: float, theirs: float, rack_ours: object, rack_theirs: object
) -> list[dict[str, Any]]:
    def run(scheduler: str, mean: float, rack: object) -> dict[str, Any]:
        return {
            "scheduler": scheduler,
            "error": None,
            "required_violations": 0,
            "required_checked": 3,
            "whole_cliques_free": {"mean": mean, "min": 0, "of": 16},
            "wait_by_class": {rt.RACK_CLASS: {"p99_s": rack}},
        }

    return [run("phalanx", ours, rack_ours), run("coscheduling", theirs, rack_theirs)]


@pytest.mark.parametrize(
    ("runs", "met"),
    [
        (phalanx_and_peer(3.0, 2.0, 10.0, 12.0), [True, True, True]),
        (phalanx_and_peer(2.2, 2.0, 10.0, 12.0), [True, False, True]),
        (phalanx_and_peer(3.0, 2.0, "never", 12.0), [True, True, False]),
        (phalanx_and_peer(3.0, 0.0, 10.0, "never"), [True, True, True]),
    ],
    ids=["all-met", "too-few-whole-cliques", "rack-never-placed", "peer-never-frees-a-clique"],
)
def test_goals_compare_phalanx_with_the_best_peer(
    runs: list[dict[str, Any]], met: list[bool]
) -> None:
    assert [g["met"] for g in rt.goals(runs)] == met


def test_the_workload_is_reproducible_and_offers_the_configured_load() -> None:
    first, again = workloads.topology(1.0), workloads.topology(1.0)
    assert first.jobs == again.jobs
    assert first.cliques == 16
    assert first.nodes == 16 * 18
    asked = sum(j.shape.total_gpus * j.duration for j in first.jobs)
    offered = asked / (first.gpus * first.arrival_window)
    assert offered == pytest.approx(workloads.TOPOLOGY_LOAD, rel=0.25)
    assert {j.shape.key for j in first.jobs} == {s.key for s in workloads.JOB_SHAPES}


def test_markdown_shows_the_figures_and_goals(tmp_path: Path) -> None:
    job = Job("rack", RACK, 1.0, 5.0)
    rec = record(
        arrived={"rack": 1.0},
        bound={"rack-00": (1.5, "c0-n0"), "rack-01": (2.0, "c0-n1")},
        whole={"rack": 2.0},
        deleted={"rack": 7.0},
        end_reason="every job ran and was deleted",
    )
    peer = record(scheduler="coscheduling", arrived={"rack": 1.0})
    paths = rt.write(tmp_path, "t", {"mode": "quick"}, work(job), [rec, peer], domains())
    text = (tmp_path / "t-topology.md").read_text()
    assert "| within one clique | 100% | - |" in text
    assert "## Goals" in text
    assert "(t-topology-whole-cliques.png)" in text
    assert {p.name for p in paths} == {
        "t-topology.md",
        "t-topology.json",
        "t-topology-whole-cliques.png",
    }
