"""Time to unschedulable, from hand-made pod observations: when an impossible gang counts as
reported, and what the report says next to kube-scheduler's native gang scheduling."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import report  # bench/report.py
import workloads  # bench/workloads.py
from observe import Condition  # bench/observe.py

MEMBERS = ("m-0", "m-1", "m-2")
#: Released (ungated) at 10.0, 10.1 and 10.2: the last member's release is 10.2.
RELEASED = {"m-0": 10.0, "m-1": 10.1, "m-2": 10.2}
GATED = Condition(9.0, "False", "SchedulingGated", "Scheduling is blocked")


def unschedulable(t: float, message: str = "gang does not fit") -> Condition:
    return Condition(t, "False", "Unschedulable", message)


def scheduled(t: float) -> Condition:
    return Condition(t, "True", "", "")


@pytest.mark.parametrize(
    ("conditions", "bound", "reported"),
    [
        (
            {m: [GATED, unschedulable(10.5)] for m in MEMBERS},
            {},
            10.5,
        ),
        (
            {
                "m-0": [GATED, unschedulable(10.05)],
                "m-1": [GATED, unschedulable(10.15)],
                "m-2": [GATED, unschedulable(10.3)],
            },
            {},
            10.3,
        ),
        (
            {"m-0": [GATED, unschedulable(10.5)], "m-1": [GATED], "m-2": [GATED]},
            {},
            None,
        ),
        (
            {m: [unschedulable(9.5)] for m in MEMBERS},
            {},
            None,
        ),
        (
            {
                "m-0": [GATED, scheduled(10.4)],
                "m-1": [GATED, unschedulable(10.5)],
                "m-2": [GATED, unschedulable(10.5)],
            },
            {"m-0": (10.4, "node-0")},
            None,
        ),
        (
            {
                "m-0": [
                    GATED,
                    unschedulable(10.3),
                    Condition(10.6, "False", "SchedulerError", "x"),
                ],
                "m-1": [GATED, unschedulable(10.4)],
                "m-2": [GATED, unschedulable(10.7)],
            },
            {},
            None,
        ),
    ],
    ids=[
        "every-member-judged-after-the-release",
        "judged-while-the-release-was-under-way",
        "a-member-never-judged",
        "judged-only-before-the-release",
        "a-member-bound-is-a-partial-gang",
        "a-member-no-longer-unschedulable-at-the-verdict",
    ],
)
def test_a_gang_is_reported_once_every_member_is_judged_unschedulable_since_its_release(
    conditions: dict[str, list[Condition]],
    bound: dict[str, tuple[float, str]],
    reported: float | None,
) -> None:
    assert report.reported_unschedulable_at(MEMBERS, RELEASED, bound, conditions) == reported


def test_a_partial_gang_settles_when_its_bound_and_refused_members_are_all_accounted_for() -> None:
    conditions = {
        "m-0": [GATED, scheduled(10.3)],
        "m-1": [GATED, scheduled(10.4)],
        "m-2": [GATED, unschedulable(10.6)],
    }
    bound = {"m-0": (10.3, "node-0"), "m-1": (10.4, "node-1")}
    assert report.gang_settled_at(MEMBERS, RELEASED, bound, conditions) == 10.6
    assert report.reported_unschedulable_at(MEMBERS, RELEASED, bound, conditions) is None


def test_a_gang_not_yet_released_whole_is_not_settled() -> None:
    conditions = {m: [GATED, unschedulable(10.5)] for m in MEMBERS}
    partly = {"m-0": 10.0, "m-1": 10.1}
    assert report.gang_settled_at(MEMBERS, partly, {}, conditions) is None


# ---- the impossible-gang figures --------------------------------------------------------------


def impossible() -> workloads.Workload:
    return workloads.unschedulable_wide(0.02)


def record(work: workloads.Workload, **extra: Any) -> SimpleNamespace:
    names = [m.name for m in work.pods]
    fields: dict[str, Any] = {
        "created": {n: 10.0 + i * 0.01 for i, n in enumerate(names)},
        "bound": {},
        "conditions": {},
        "group_status": [],
    }
    fields.update(extra)
    return SimpleNamespace(**fields)


def test_vanillas_partial_gang_is_never_reported_and_its_held_gpus_are_counted() -> None:
    work = impossible()
    names = [m.name for m in work.pods]
    *held, refused = names
    rec = record(
        work,
        bound={n: (10.2, f"node-{i}") for i, n in enumerate(held)},
        conditions={refused: [GATED, unschedulable(10.3, "0/20 nodes are available")]},
    )
    figs = report.unschedulable_figures(work, rec)
    assert figs["time_to_unschedulable_s"] is None
    assert figs["members_bound"] == workloads.IMPOSSIBLE_REACH
    assert figs["gpus_held"] == workloads.IMPOSSIBLE_REACH * workloads.NODE_GPUS
    assert figs["every_member_settled_s"] == pytest.approx(0.21)
    assert figs["message"] == "0/20 nodes are available"


def test_a_verdict_before_the_last_release_counts_as_zero_and_the_group_status_is_shown() -> None:
    work = impossible()
    names = [m.name for m in work.pods]
    last_release = 10.0 + (len(names) - 1) * 0.01
    rec = record(
        work,
        conditions={n: [GATED, unschedulable(10.05)] for n in names},
        group_status=[
            (
                10.5,
                {
                    "conditions": [
                        {
                            "type": "PodGroupInitiallyScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                        }
                    ]
                },
            ),
        ],
    )
    figs = report.unschedulable_figures(work, rec)
    assert figs["time_to_unschedulable_s"] == 0
    assert figs["gpus_held"] == 0
    assert figs["group_condition_false"] == {
        "condition": "PodGroupInitiallyScheduled",
        "reason": "Unschedulable",
        "after_s": pytest.approx(10.5 - last_release),
    }
    assert figs["group_status_at_end"] == "PodGroupInitiallyScheduled=False (Unschedulable)"


@pytest.mark.parametrize(
    ("status", "summary"),
    [
        ({}, "no status"),
        ({"phase": "PreScheduling", "running": 0}, "phase PreScheduling"),
        (
            {
                "phase": "Pending",
                "conditions": [{"type": "PodGroupScheduled", "status": "False", "reason": "Unfit"}],
            },
            "PodGroupScheduled=False (Unfit)",
        ),
    ],
    ids=["none", "phase-only", "scheduler-plugins-condition"],
)
def test_the_gang_objects_status_is_summed_up_in_its_own_dialects_terms(
    status: dict[str, Any], summary: str
) -> None:
    assert report.group_summary(status) == summary


# ---- next to native gang scheduling -------------------------------------------------------------


def run(workload: str, scheduler: str, **figures: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"workload": workload, "scheduler": scheduler, "error": None}
    base.update({key: None for key, _label, _ in report.COMPARED})
    base.update(figures)
    return base


def test_ratios_against_native_include_time_to_unschedulable() -> None:
    runs = [
        run("unschedulable-wide", "phalanx", unschedulable={report.UNSCHEDULABLE: 0.3}),
        run("unschedulable-wide", "native", unschedulable={report.UNSCHEDULABLE: 0.1}),
    ]
    ratios = report.ratios(runs)["unschedulable-wide"]["native"]
    assert ratios[report.UNSCHEDULABLE] == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("phalanx", "native", "ahead"),
    [(2.0, 1.0, True), (1.05, 1.0, False), (0.5, 1.0, False)],
    ids=["native-twice-as-fast", "within-the-margin", "phalanx-ahead"],
)
def test_native_is_noted_ahead_only_beyond_the_margin(
    phalanx: float, native: float, ahead: bool
) -> None:
    runs = [
        run("upstream-small-gangs", "phalanx", time_to_whole_gang_p99_s=phalanx),
        run("upstream-small-gangs", "native", time_to_whole_gang_p99_s=native),
    ]
    found = report.native_ahead(runs)
    assert bool(found) is ahead
    if ahead:
        (item,) = found
        assert [f["figure"] for f in item["figures"]] == ["time_to_whole_gang_p99_s"]


def test_the_notes_give_the_explanation_kept_for_a_workload_or_mark_it_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = [
        run("upstream-big-gangs", "phalanx", pods_per_second=50.0),
        run("upstream-big-gangs", "native", pods_per_second=100.0),
        run("singles", "phalanx", pods_per_second=50.0),
        run("singles", "native", pods_per_second=100.0),
    ]
    monkeypatch.setattr(report, "WHY_NATIVE_AHEAD", {"singles": "an HTTP round trip per pod."})
    text = "\n".join(report.native_notes(report.native_ahead(runs), native_ran=True))
    assert "### upstream-big-gangs" in text
    assert "pods/s: Phalanx 50 vs native 100 (0.50×)" in text
    big, singles = text.split("### singles")
    assert f"> **Why:** {report.WHY_PLACEHOLDER}" in big
    assert "> **Why:** an HTTP round trip per pod." in singles


@pytest.mark.parametrize(
    ("seconds", "held", "met"),
    [(0.2, 0, True), (None, 0, False), (0.2, 72, False), (300.0, 0, False)],
    ids=["reported-holding-nothing", "never-reported", "holding-gpus", "slower-than-kai"],
)
def test_the_impossible_gang_goal_wants_a_verdict_within_kais_time_holding_nothing(
    seconds: float | None, held: int, met: bool
) -> None:
    figures = {report.UNSCHEDULABLE: seconds, "gpus_held": held, "members_bound": held // 8}
    runs = [
        run("unschedulable-full", "phalanx", unschedulable=figures),
        run("unschedulable-full", "native", unschedulable={**figures, report.UNSCHEDULABLE: 0.1}),
    ]
    (goal,) = report.goals(runs)
    assert goal["goal"].startswith("#12 unschedulable-full")
    assert goal["met"] is met
