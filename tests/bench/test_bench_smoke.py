"""`bench/run.py --quick` end to end: a real control plane (Kubernetes 1.37 with the upstream
gang API), vanilla kube-scheduler, kube-scheduler + Phalanx and kube-scheduler's native gang
scheduling, at 1/10 scale. Checks that the benchmark runs and writes complete, well-formed
results; it asserts nothing about speed. It keeps the runs' logs (`--keep-logs`), as one would
to find out why a figure is what it is, and gives the control plane a core of its own
(`--control-plane-cpus 0`), as one would to see what a dedicated control plane changes.

The workloads are one of each path through the benchmark, so CI's time stays about what it
was with two schedulers and every workload: single pods, plans, gangs in both dialects
(upstream's small gangs), an impossible gang (prefill, gated release, the verdict) and the
NVL72 churn (on four cliques; native is not among its contenders). `make bench` runs every
workload.

Skipped without the control-plane binaries (tests/controlplane/build-tools.sh), unless
PHALANX_REQUIRE_E2E=1 (CI), which turns the skip into a failure, as in tests/e2e.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controlplane"))

import launcher  # tests/controlplane/launcher.py

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

SCHEDULERS = ("vanilla", "phalanx", "phalanx-queuesort", "native")
WORKLOADS = ("singles", "plans", "upstream-small-gangs", "unschedulable-full")
#: Contenders that run only some workloads (bench/schedulers.py SchedulerSpec.workloads).
ONLY = {"phalanx-queuesort": ("singles", "plans")}
CHURN = ("topology",)
#: The churn workload's contenders among SCHEDULERS (bench/run.py CHURN_SCHEDULERS).
CHURN_SCHEDULERS = ("vanilla", "phalanx", "native")
IMPOSSIBLE = ("unschedulable-full",)
GANG_SCHEDULERS = ("phalanx", "phalanx-queuesort", "native")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    try:
        launcher.find_tools(kube_version="1.37")  # the bench's control plane (bench/run.py)
    except launcher.ToolsMissingError as exc:
        if os.environ.get("PHALANX_REQUIRE_E2E", "") not in ("", "0"):
            pytest.fail(f"PHALANX_REQUIRE_E2E is set, but {exc}", pytrace=False)
        pytest.skip(f"control plane unavailable: {exc}")
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--quick",
            "--only",
            ",".join(SCHEDULERS),
            "--workloads",
            ",".join((*WORKLOADS, *CHURN)),
            "--out",
            str(out),
            "--name",
            "smoke",
            "--keep-logs",
            str(out / "logs"),
            "--control-plane-cpus",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "smoke.json").read_text()), out


@pytest.mark.timeout(1500)
def test_every_workload_runs_on_every_scheduler_asked_for(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = quick_results
    ran = {(r["workload"], r["scheduler"]) for r in doc["runs"]}
    assert ran == {(w, s) for w in WORKLOADS for s in SCHEDULERS if w in ONLY.get(s, WORKLOADS)}
    assert all(r["error"] is None for r in doc["runs"])


@pytest.mark.timeout(1500)
def test_workloads_that_fit_are_bound_completely(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = quick_results
    for run in doc["runs"]:
        if run["workload"] != "contended" and run["workload"] not in IMPOSSIBLE:
            assert run["pods_bound"] == run["pods"], (run["workload"], run["scheduler"])
            assert run["gangs_placed"] == run["gangs"], (run["workload"], run["scheduler"])


@pytest.mark.timeout(1500)
def test_gang_schedulers_leave_no_gang_partially_bound(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = quick_results
    for run in doc["runs"]:
        if run["scheduler"] in GANG_SCHEDULERS:
            key = (run["workload"], run["scheduler"])
            assert run["gangs_partial_at_end"] == 0, key
            if run["scheduler"] in ("phalanx", "phalanx-queuesort"):
                assert run["gangs_partial_over_1s"] == 0, key
    # Each Phalanx run says how many members it completed at a gang's first /bind (how many
    # depends on kube-scheduler's timing; tests/e2e/test_gangs.py proves completion itself).
    completed = [
        run["phalanx"]["members_completed"]
        for run in doc["runs"]
        if run["scheduler"].startswith("phalanx") and run["workload"] not in IMPOSSIBLE
    ]
    assert completed
    assert all(isinstance(n, int) and n >= 0 for n in completed), completed


@pytest.mark.timeout(1500)
def test_an_impossible_gang_is_reported_by_gang_schedulers_and_split_by_vanilla(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, out = quick_results
    for run in doc["runs"]:
        if run["workload"] not in IMPOSSIBLE:
            continue
        figures = run["unschedulable"]
        if run["scheduler"] in GANG_SCHEDULERS:
            assert figures["time_to_unschedulable_s"] is not None, run["scheduler"]
            assert figures["gpus_held"] == 0, run["scheduler"]
        else:
            assert figures["members_bound"] == figures["members"] - 1
    assert "reported unschedulable after (s)" in (out / "smoke.md").read_text()


@pytest.mark.timeout(1500)
def test_results_carry_ratios_goals_latency_and_process_figures(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = quick_results
    assert set(doc["ratios"]) == set(WORKLOADS)
    assert all(set(peers) == {"vanilla", "native"} for peers in doc["ratios"].values())
    assert any(g["goal"].startswith("singles: pods/s") for g in doc["goals"])
    phalanx = [r for r in doc["runs"] if r["scheduler"] == "phalanx"]
    for run in phalanx:
        assert run["phalanx"]["request_latency"]["filter"]["count"] > 0
        # Its bindings went through the API client, whose counts the report reads.
        assert run["phalanx"]["api_client"]["attempts"] >= run["pods_bound"]
        assert set(run["phalanx"]["api_client"]) >= {
            "slot_wait_seconds_bind",
            "slot_wait_seconds_report",
        }
        assert run["processes"]["phalanx"]["cpu_seconds"] >= 0
        assert run["processes"]["phalanx"]["rss_mib_max"] > 0
        # kube-scheduler said which events filled its queue: every pod was added once.
        moved = run["kube_scheduler"]["incoming_pods"]
        added = ("UnscheduledPodAdd/", "UnschedulablePodAdd/")  # 1.37's name, 1.34's
        assert sum(v for k, v in moved.items() if k.startswith(added)) == run["pods"]
    # The API server's audit log timed every binding, and no watch sees one before its answer.
    gangs = next(r for r in phalanx if r["workload"] == "upstream-small-gangs")
    assert gangs["time_to_whole_gang_p99_api_s"] is not None
    assert gangs["time_to_whole_gang_p99_api_s"] <= gangs["time_to_whole_gang_p99_s"]
    assert gangs["binding_seen_after_p50_s"] >= 0
    assert gangs["pod_watch_cache"]["capacity_at_end"] >= 100
    assert doc["meta"]["machine"]["cores"] >= 1


@pytest.mark.timeout(1500)
def test_markdown_and_plots_are_written_and_hold_no_local_paths(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, out = quick_results
    md = (out / "smoke.md").read_text()
    assert "## Goals" in md
    assert "phalanx ÷ vanilla" in md
    assert "phalanx ÷ native" in md
    assert "## Phalanx's API client (its /metrics)" in md
    assert "## Requeues and releases" in md
    plots = sorted(p for p in out.glob("smoke-*.png") if not p.name.startswith("smoke-topology"))
    assert plots
    for plot in plots:
        assert plot.read_bytes().startswith(PNG_SIGNATURE)
        assert f"]({plot.name})" in md
    text = md + json.dumps(doc)
    for local in (str(out), str(Path.home()), str(ROOT)):
        assert local not in text


@pytest.mark.timeout(1500)
def test_kept_logs_hold_each_runs_gang_decisions_and_scheduling_attempts(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, out = quick_results
    logs = out / "logs"
    for run in doc["runs"]:
        if run["scheduler"] != "phalanx" or run["workload"] != "upstream-small-gangs":
            continue
        stem = f"b-{run['workload']}-{run['scheduler']}-"
        (phalanx,) = logs.glob(f"{stem}*-phalanx.log")
        assert '"msg":"gang decision"' in phalanx.read_text()
        (scheduler,) = logs.glob(f"{stem}*-kube-scheduler.log")
        text = scheduler.read_text()
        assert "Attempting to schedule pod" in text  # --v=3
        # This run's kube-scheduler only: one start, and only this run's pods.
        assert text.count("\n===== ") == 1
        namespaces = {line.split('pod="')[1].split("/")[0] for line in text.splitlines()
                      if "Attempting to schedule pod" in line}  # fmt: skip
        assert namespaces == {phalanx.name.removesuffix("-phalanx.log")}
        break
    else:
        raise AssertionError("no Phalanx run of upstream-small-gangs")


@pytest.mark.timeout(1500)
def test_the_topology_churn_runs_and_phalanx_keeps_every_required_gang_in_its_domain(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    _, out = quick_results
    doc = json.loads((out / "smoke-topology.json").read_text())
    runs = {r["scheduler"]: r for r in doc["runs"]}
    assert set(runs) == set(CHURN_SCHEDULERS)
    assert all(r["error"] is None for r in runs.values())
    phalanx = runs["phalanx"]
    assert phalanx["jobs_created"] == doc["workload"]["jobs"]
    assert phalanx["required_checked"] > 0
    assert phalanx["required_violations"] == 0
    assert doc["goals"][0]["met"]
    md = (out / "smoke-topology.md").read_text()
    assert "## Goals" in md
    assert "](smoke-topology-whole-cliques.png)" in md
    for local in (str(out), str(Path.home()), str(ROOT)):
        assert local not in md + json.dumps(doc)


def test_the_control_plane_ran_on_a_core_of_its_own(
    quick_results: tuple[dict[str, Any], Path],
) -> None:
    doc, out = quick_results
    pinned = doc["meta"]["cpu_affinity"]  # each process's affinity, read back once set

    assert pinned["kube-apiserver"] == [0]
    assert pinned["etcd"] == [0]
    assert pinned["others"]
    assert 0 not in pinned["others"]
    assert "The control plane had cores of its own" in (out / "smoke.md").read_text()
