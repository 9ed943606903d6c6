"""The benchmark's figures, from hand-made observations (no cluster): what each number means."""

from __future__ import annotations

import dataclasses
import struct
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import png  # bench/png.py
import report  # bench/report.py
import run  # bench/run.py
import schedulers  # bench/schedulers.py
import workloads  # bench/workloads.py
from workloads import Group, Member, Workload


def two_gangs_of_two() -> Workload:
    pods = (
        Member("a-0", 1, group="a"),
        Member("a-1", 1, group="a"),
        Member("b-0", 4, group="b"),
        Member("b-1", 4, group="b"),
        Member("solo", 2),
    )
    return Workload("gangs", "t", 2, (Group("a", 2), Group("b", 2)), pods, 2, all_fit=False)


def record(bound: dict[str, float], *, end: float = 10.0, **extra: Any) -> SimpleNamespace:
    created = {"a-0": 0.0, "a-1": 0.5, "b-0": 0.2, "b-1": 0.3, "solo": 0.1}
    fields = {
        "scheduler": "phalanx",
        "t_first_create": 0.0,
        "t_last_create": 0.5,
        "t_end": end,
        "end_reason": "all bound",
        "error": "",
        "create_errors": 0,
        "created": created,
        "bound": {name: (t, "bench-node-0000") for name, t in bound.items()},
        "seen": {},
        "watch_restarts": 0,
        "processes": {},
        "phalanx_metrics": "",
        "scheduler_metrics": "",
        "apiserver_metrics": ("", ""),
        "scheduler_config": {},
    }
    fields.update(extra)
    return SimpleNamespace(**fields)


def test_partial_gang_seconds_run_from_the_first_member_bound_to_the_quorum() -> None:
    figs = report.run_figures(
        two_gangs_of_two(), record({"a-0": 1.0, "a-1": 1.25, "b-0": 2.0, "b-1": 2.0})
    )
    assert figs["partial_gang_seconds"] == pytest.approx(0.25)
    assert figs["longest_partial_window_s"] == pytest.approx(0.25)
    assert figs["gangs_partial_over_1s"] == 0


def test_a_gang_that_never_becomes_whole_is_partial_until_the_run_ends() -> None:
    figs = report.run_figures(
        two_gangs_of_two(), record({"a-0": 1.0, "a-1": 1.0, "b-0": 4.0}, end=10.0)
    )
    assert figs["gangs_placed"] == 1
    assert figs["gangs_partial_at_end"] == 1
    assert figs["partial_gang_seconds"] == pytest.approx(6.0)
    assert figs["gpus_allocated"] == 6
    assert figs["gpus_in_whole_gangs"] == 2  # gang a only: b's bound member does no work


def test_time_to_whole_gang_starts_when_the_first_member_is_created() -> None:
    figs = report.run_figures(
        two_gangs_of_two(), record({"a-0": 1.0, "a-1": 1.5, "b-0": 3.2, "b-1": 3.2, "solo": 0.4})
    )
    assert figs["time_to_whole_gang_p50_s"] == pytest.approx(1.5)  # a: created 0.0, whole 1.5
    assert figs["time_to_whole_gang_p99_s"] == pytest.approx(3.0)  # b: created 0.2, whole 3.2
    assert figs["pods_per_second"] == pytest.approx(5 / 3.2, abs=1e-3)


def test_the_audit_figures_time_each_binding_by_the_api_servers_answer() -> None:
    watched = {"a-0": 1.0, "a-1": 1.5, "b-0": 3.2, "b-1": 3.2, "solo": 0.4}
    answered = {"a-0": 0.9, "a-1": 1.2, "b-0": 2.2, "b-1": 2.0, "solo": 0.3}
    figs = report.run_figures(two_gangs_of_two(), record(watched, bound_at_apiserver=answered))
    assert figs["time_to_whole_gang_p99_s"] == pytest.approx(3.0)  # b by the watch
    assert figs["time_to_whole_gang_p50_api_s"] == pytest.approx(1.2)  # a: created 0.0
    assert figs["time_to_whole_gang_p99_api_s"] == pytest.approx(2.0)  # b: created 0.2
    assert figs["binding_seen_after_p50_s"] == pytest.approx(0.3)
    assert figs["binding_seen_after_p99_s"] == pytest.approx(1.2, abs=0.01)
    # A run without the audit log (older results) has none of these figures.
    bare = report.run_figures(two_gangs_of_two(), record(watched))
    assert bare["time_to_whole_gang_p99_api_s"] is None
    assert bare["binding_seen_after_p50_s"] is None


@pytest.mark.parametrize(
    ("phalanx", "floor", "met"),
    [(95.0, 100.0, True), (90.0, 100.0, True), (89.0, 100.0, False)],
    ids=["above", "exactly-nine-tenths", "below"],
)
def test_the_singles_goal_is_nine_tenths_of_the_do_nothing_extender(
    phalanx: float, floor: float, met: bool
) -> None:
    runs = [
        {"workload": "singles", "scheduler": "phalanx", "pods_per_second": phalanx},
        {"workload": "singles", "scheduler": "vanilla", "pods_per_second": 2 * floor},
        {"workload": "singles", "scheduler": "floor", "pods_per_second": floor},
    ]
    (goal,) = report.goals(runs)
    assert goal["met"] is met
    assert "0.9× the do-nothing extender" in goal["target"]


def test_without_the_floor_the_singles_goal_is_not_judged() -> None:
    runs = [
        {"workload": "singles", "scheduler": "phalanx", "pods_per_second": 50.0},
        {"workload": "singles", "scheduler": "vanilla", "pods_per_second": 100.0},
    ]
    (goal,) = report.goals(runs)
    assert goal["met"] is None


def test_the_gang_goals_are_judged_for_each_phalanx_configuration_by_name() -> None:
    def run(scheduler: str, p50: float, p99: float) -> dict[str, Any]:
        return {
            "workload": "contended",
            "scheduler": scheduler,
            "time_to_whole_gang_p50_s": p50,
            "time_to_whole_gang_p99_s": p99,
            "gangs_placed": 10,
            "gpus_in_whole_gangs": 100,
            "partial_gang_seconds": 0,
            "longest_partial_window_s": 0,
            "gangs_partial_over_1s": 0,
            "gangs_partial_at_end": 0,
        }

    runs = [run("phalanx", 30.0, 40.0), run("phalanx-queuesort", 9.0, 15.0)]
    runs.append(run("coscheduling", 10.0, 35.0) | {"gpus_in_whole_gangs": 70})
    met = {g["goal"]: g["met"] for g in report.goals(runs)}
    assert met["contended: time to whole gang p50"] is False
    assert met["contended: time to whole gang p50 (queueSort: Coscheduling)"] is True
    assert met["contended: time to whole gang p99 (queueSort: Coscheduling)"] is True  # 0.43×
    assert met["contended: GPUs in whole gangs (queueSort: Coscheduling)"] is True  # 1.43×


@pytest.mark.parametrize(("over_1s", "at_end", "met"), [(0, 0, True), (1, 0, False), (0, 1, False)])
def test_a_gang_is_partial_only_for_its_bind_fan_out(over_1s: int, at_end: int, met: bool) -> None:
    # Binding takes one API call per member, so the windows are never zero; a window over a
    # second, or a gang partial when the run ends, is a gang left holding GPUs.
    run = {
        "workload": "gangs",
        "scheduler": "phalanx",
        "partial_gang_seconds": 3.2,
        "longest_partial_window_s": 0.4,
        "gangs_partial_over_1s": over_1s,
        "gangs_partial_at_end": at_end,
    }
    (goal,) = report.goals([run])
    assert goal["goal"] == "gangs: no gang partial beyond its bind fan-out"
    assert goal["met"] is met


def test_latency_quantiles_interpolate_inside_prometheus_buckets() -> None:
    text = "\n".join(
        [
            'phalanx_request_duration_seconds_bucket{verb="filter",result="ok",le="0.001"} 50',
            'phalanx_request_duration_seconds_bucket{verb="filter",result="ok",le="0.002"} 90',
            'phalanx_request_duration_seconds_bucket{verb="filter",result="ok",le="0.004"} 100',
            'phalanx_request_duration_seconds_bucket{verb="filter",result="ok",le="+Inf"} 100',
            'phalanx_request_duration_seconds_sum{verb="filter",result="ok"} 0.1',
            'phalanx_request_duration_seconds_count{verb="filter",result="ok"} 100',
        ]
    )
    lat = report.phalanx_figures(text)["request_latency"]["filter"]
    assert lat == {"count": 100, "mean_ms": 1.0, "p50_ms": 1.0, "p99_ms": 3.8}


def test_the_loop_lag_is_read_from_its_own_histogram() -> None:
    text = "\n".join(
        [
            'phalanx_event_loop_lag_seconds_bucket{le="0.00025"} 0',
            'phalanx_event_loop_lag_seconds_bucket{le="0.0005"} 10',
            'phalanx_event_loop_lag_seconds_bucket{le="+Inf"} 10',
            "phalanx_event_loop_lag_seconds_sum 0.004",
            "phalanx_event_loop_lag_seconds_count 10",
        ]
    )
    lag = report.phalanx_figures(text)["loop_lag"]
    assert lag == {"count": 10, "mean_ms": 0.4, "p50_ms": 0.375, "p99_ms": 0.497}


def test_the_watch_delay_is_read_from_its_own_histogram() -> None:
    text = "\n".join(
        [
            'phalanx_watch_delay_seconds_bucket{le="0.064"} 1',
            'phalanx_watch_delay_seconds_bucket{le="0.128"} 4',
            'phalanx_watch_delay_seconds_bucket{le="+Inf"} 4',
            "phalanx_watch_delay_seconds_sum 0.3",
            "phalanx_watch_delay_seconds_count 4",
        ]
    )
    delay = report.phalanx_figures(text)["watch_delay"]
    assert delay is not None
    assert delay["count"] == 4
    assert delay["mean_ms"] == pytest.approx(75.0)


def test_an_opened_gates_steps_are_read_per_step_with_the_partial_window() -> None:
    text = "\n".join(
        [
            'phalanx_gang_bind_step_seconds_bucket{step="record",le="0.128"} 2',
            'phalanx_gang_bind_step_seconds_bucket{step="record",le="+Inf"} 2',
            'phalanx_gang_bind_step_seconds_sum{step="record"} 0.2',
            'phalanx_gang_bind_step_seconds_count{step="record"} 2',
            'phalanx_gang_bind_step_seconds_bucket{step="bindings",le="0.512"} 2',
            'phalanx_gang_bind_step_seconds_bucket{step="bindings",le="+Inf"} 2',
            'phalanx_gang_bind_step_seconds_sum{step="bindings"} 0.9',
            'phalanx_gang_bind_step_seconds_count{step="bindings"} 2',
            'phalanx_gang_bind_window_seconds_bucket{le="0.512"} 2',
            'phalanx_gang_bind_window_seconds_bucket{le="+Inf"} 2',
            "phalanx_gang_bind_window_seconds_sum 0.7",
            "phalanx_gang_bind_window_seconds_count 2",
        ]
    )
    figures = report.phalanx_figures(text)
    assert {step: h["mean_ms"] for step, h in figures["bind_steps"].items()} == {
        "record": 100.0,
        "bindings": 450.0,
    }
    assert figures["bind_window"]["mean_ms"] == 350.0


def test_phalanx_api_client_counts_are_read_by_name_and_lane() -> None:
    text = "\n".join(
        [
            "phalanx_api_client_attempts_total 812.0",
            "phalanx_api_client_throttled_total 3.0",
            'phalanx_api_client_token_wait_seconds_total{lane="bind"} 0.25',
            'phalanx_api_client_token_wait_seconds_total{lane="report"} 0.5',
            'phalanx_api_client_slot_wait_seconds_total{lane="bind"} 1.5',
            'phalanx_api_client_slot_wait_seconds_total{lane="report"} 42.0',
        ]
    )
    assert report.phalanx_figures(text)["api_client"] == {
        "attempts": 812.0,
        "throttled": 3.0,
        "token_wait_seconds": 0.75,
        "token_wait_seconds_bind": 0.25,
        "token_wait_seconds_report": 0.5,
        "slot_wait_seconds_bind": 1.5,
        "slot_wait_seconds_report": 42.0,
    }
    assert {key for key, _heading in report.API_CLIENT_COLUMNS} >= set(
        report.phalanx_figures(text)["api_client"]
    )


def test_api_writes_are_the_mutating_requests_served_between_two_scrapes() -> None:
    def scrape(bindings: int, status: int, lists: int) -> str:
        metric = "apiserver_request_total"
        return "\n".join(
            [
                f'{metric}{{code="201",resource="pods",subresource="binding",verb="POST"}} '
                f"{bindings}",
                f'{metric}{{code="200",resource="pods",subresource="status",verb="PATCH"}} '
                f"{status}",
                f'{metric}{{code="409",resource="pods",subresource="status",verb="PATCH"}} 1',
                f'{metric}{{code="200",resource="pods",subresource="",verb="LIST"}} {lists}',
            ]
        )

    writes = report.api_writes(scrape(10, 5, 3), scrape(30, 12, 90))
    # Refused writes count too (the API server served them); reads do not.
    assert writes == {"POST pods/binding": 20, "PATCH pods/status": 7}
    assert report.api_writes("", scrape(1, 1, 1)) is None


def test_the_pod_watch_cache_figures_are_the_pod_watchers_closed_between_two_scrapes() -> None:
    def scrape(pods_closed: int, nodes_closed: int, capacity: int) -> str:
        return "\n".join(
            [
                f'apiserver_terminated_watchers_total{{group="",resource="pods"}} {pods_closed}',
                f'apiserver_terminated_watchers_total{{group="",resource="nodes"}} {nodes_closed}',
                f'watch_cache_capacity{{group="",resource="pods"}} {capacity}',
                'watch_cache_capacity{group="",resource="nodes"} 51200',
            ]
        )

    figures = report.pod_watch_cache(scrape(2, 0, 200), scrape(7, 4, 3200))
    # Only pods' watchers count; the capacity is the pod cache's at each scrape.
    assert figures == {"watchers_closed": 5, "capacity_at_start": 200, "capacity_at_end": 3200}
    # A fresh API server has closed none yet: the counter is not exported before its first.
    assert report.pod_watch_cache("", scrape(1, 1, 100)) is None
    assert report.pod_watch_cache(
        'watch_cache_capacity{group="",resource="pods"} 100', scrape(3, 0, 100)
    ) == {
        "watchers_closed": 3,
        "capacity_at_start": 100,
        "capacity_at_end": 100,
    }


def test_the_plugins_share_of_a_cycle_counts_only_extension_points_inside_the_algorithm() -> None:
    def point(name: str, count: int, seconds: float) -> list[str]:
        labels = f'extension_point="{name}",profile="phalanx",status="Success"'
        metric = "scheduler_framework_extension_point_duration_seconds"
        return [
            f'{metric}_bucket{{{labels},le="+Inf"}} {count}',
            f"{metric}_sum{{{labels}}} {seconds}",
            f"{metric}_count{{{labels}}} {count}",
        ]

    algorithm = "scheduler_scheduling_algorithm_duration_seconds"
    text = "\n".join(
        [
            f'{algorithm}_bucket{{le="+Inf"}} 100',
            f"{algorithm}_sum 1.0",
            f"{algorithm}_count 100",
            *point("PreFilter", 100, 0.05),
            *point("Filter", 100, 0.2),
            *point("Score", 50, 0.05),
            *point("PostFilter", 10, 0.5),  # after a failed cycle: outside the algorithm
            *point("Bind", 90, 9.0),
        ]
    )
    figures = report.kube_scheduler_figures(text)
    assert figures["algorithm_duration"]["mean_ms"] == 10.0
    # (50 + 200 + 50) ms over 100 cycles
    assert report.plugin_ms_per_cycle(figures) == 3.0
    assert report.plugin_ms_per_cycle({}) is None


def test_the_feasibility_reference_skips_a_gang_that_cannot_fit_whole() -> None:
    pods = tuple(Member(f"big-{i}", 8, group="big") for i in range(3)) + tuple(
        Member(f"small-{i}", 4, group="small") for i in range(2)
    )
    work = Workload("contended", "t", 2, (Group("big", 3), Group("small", 2)), pods, 0, False)
    assert workloads.feasible_gangs(work) == 1


def test_line_charts_are_valid_pngs(tmp_path: Path) -> None:
    path = tmp_path / "chart.png"
    png.line_chart(path, "Title", "x", "y", [png.Series("phalanx", [(0, 0), (1, 2), (3, 5)])],
                   width=300, height=200)  # fmt: skip
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    length, kind = struct.unpack(">I4s", data[8:16])
    width, height = struct.unpack(">II", data[16:24])
    assert (kind, width, height) == (b"IHDR", 300, 200)
    idat_at = data.index(b"IDAT")
    (idat_len,) = struct.unpack(">I", data[idat_at - 4 : idat_at])
    raw = zlib.decompress(data[idat_at + 4 : idat_at + 4 + idat_len])
    assert len(raw) == height * (1 + width * 3)
    assert length == 13


def test_members_completed_at_the_first_bind_are_read_from_their_counter() -> None:
    assert report.phalanx_figures("phalanx_members_completed_total 42.0")["members_completed"] == 42
    figures = report.phalanx_figures("phalanx_partial_gangs 0")
    assert figures["members_completed"] == 0
    assert "phalanx_members_completed_total" not in figures["gauges_at_end"]


def test_watch_restarts_are_summed_and_kept_by_kind_and_reason() -> None:
    text = "\n".join(
        [
            'phalanx_watch_restarts_total{kind="Pod",reason="closed"} 2.0',
            'phalanx_watch_restarts_total{kind="Node",reason="gone"} 1.0',
            'phalanx_watch_restarts_total{kind="Node",reason="error"} 0.0',
        ]
    )
    figures = report.phalanx_figures(text)
    assert figures["gauges_at_end"]["phalanx_watch_restarts_total"] == 3
    assert figures["watch_restarts"] == {"Pod/closed": 2, "Node/gone": 1}


def test_every_contender_has_a_place_in_the_run_order_and_the_report_columns() -> None:
    # A contender missing from either list would be accepted by --only, then never run or
    # never shown.
    assert set(run.SCHEDULER_ORDER) == set(schedulers.SCHEDULERS)
    assert list(report.ORDER) == list(run.SCHEDULER_ORDER)


def test_the_watch_delay_runs_from_a_pods_creation_answered_to_its_first_sight() -> None:
    seen = {"a-0": 0.05, "a-1": 0.6, "b-0": 0.5, "b-1": 0.4, "solo": 0.1}
    figs = report.run_figures(two_gangs_of_two(), record({"a-0": 1.0, "a-1": 1.0}, seen=seen))
    # delays: a-0 0.05, a-1 0.1, b-0 0.3, b-1 0.1, solo 0.0 (seen as its creation returned)
    assert figs["watch_delay_p50_s"] == pytest.approx(0.1)
    assert figs["watch_delay_p90_s"] == pytest.approx(0.3)


def test_a_gated_workloads_watch_delay_is_not_judged_its_pods_were_seen_before_release() -> None:
    gated = dataclasses.replace(two_gangs_of_two(), gated=True)
    figs = report.run_figures(gated, record({}, seen=dict.fromkeys(("a-0", "b-0"), 0.0)))
    assert figs["watch_delay_p50_s"] is None


def test_the_report_says_where_the_control_plane_ran() -> None:
    pinned = {"others": [1], "etcd": [0], "kube-apiserver": [0]}

    line = report.cpus_line({"cpu_affinity": pinned})

    assert "kube-apiserver on CPU(s) 0 and etcd on 0" in line
    assert "(kwok, the schedulers, Phalanx, the load) on 1" in line
    assert report.cpus_line({"cpu_affinity": {}}) == "Every process shared every core. "
    assert report.cpus_line({}) == "Every process shared every core. "  # runs before the flag
