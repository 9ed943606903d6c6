"""The Grafana dashboard and the Prometheus alert rules: valid, tested, and about metrics that
Phalanx really exports (checked against a live extender's /metrics, not a list)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from deploykit import CHART, DEPLOY, run
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from served_gangs import schedule_pods, serve

from builders import node_obj, pod_obj, podgroup_obj
from phalanx.api.app import create_metrics_app
from phalanx.service.extender import Extender
from phalanx.sources.clusterfile import ClusterFileSource
from phalanx.sources.kube_async import AsyncKubeCounts

ALERTS = CHART / "files" / "phalanx-alerts.yaml"
DASHBOARD = CHART / "files" / "phalanx-dashboard.json"
ALERT_TESTS = DEPLOY / "prometheus" / "phalanx-alerts.test.yaml"

# The metric families Phalanx exports (DESIGN §7), as Prometheus names them.
EXPORTED_FAMILIES = {
    "phalanx_request_duration_seconds",
    "phalanx_gang_decisions_total",
    "phalanx_gang_time_to_bind_seconds",
    "phalanx_gang_bind_window_seconds",
    "phalanx_gang_bind_step_seconds",
    "phalanx_barrier_waiting",
    "phalanx_reports_held",
    "phalanx_event_loop_lag_seconds",
    "phalanx_bindings_total",
    "phalanx_watch_restarts_total",
    "phalanx_watch_delay_seconds",
    "phalanx_plan_data_transfers",
    "phalanx_gpus",
    "phalanx_cluster_gpus",
    "phalanx_reserved_gpus",
    "phalanx_reservations",
    "phalanx_partial_gangs",
    "phalanx_cache_synced",
    "phalanx_overcommitted_nodes",
    "phalanx_replans_total",
    "phalanx_releases_total",
    "phalanx_members_completed_total",
    "phalanx_pod_conditions_corrected_total",
    "phalanx_preemption_nodes_total",
    "phalanx_preemption_added_pods_total",
    "phalanx_dra_claims_off_node",
    "phalanx_gang_placements_total",
    "phalanx_topology_free_domains",
    "phalanx_topology_domains",
    "phalanx_topology_inconsistent_nodes",
    "phalanx_api_client_attempts_total",
    "phalanx_api_client_retries_total",
    "phalanx_api_client_throttled_total",
    "phalanx_api_client_server_errors_total",
    "phalanx_api_client_no_answer_total",
    "phalanx_api_client_token_wait_seconds_total",
    "phalanx_api_client_slot_wait_seconds_total",
}
METRIC = re.compile(r"\bphalanx_[a-z0-9_]*[a-z0-9]")
SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def family_of(name: str) -> str:
    for suffix in SERIES_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def referenced_metrics() -> set[str]:
    """Every phalanx_* name in a dashboard query or an alert expression."""
    exprs = dashboard_exprs() + [r["expr"] for r in alert_rules()]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            q = variable["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return {m for e in exprs for m in METRIC.findall(e)}


async def _exposition_after_a_gang() -> str:
    """/metrics text of a live extender after a 2-member gang was filtered and bound."""
    objects = [
        node_obj("gpu-a"),
        node_obj("gpu-b"),
        podgroup_obj("trainer", 2),
        *(pod_obj(f"trainer-{i}", 8, group="trainer") for i in range(2)),
    ]
    async with serve(objects) as served:
        # A file source writes through no API client; `phalanx serve` on a cluster does.
        served.extender.metrics.watch_api_client(AsyncKubeCounts)
        pods = [o for o in objects if o["kind"] == "Pod"]
        await schedule_pods(served, pods, ["gpu-a", "gpu-b"])
        return generate_latest(served.extender.metrics.registry).decode()


@pytest.fixture(scope="module")
def exposition() -> str:
    return asyncio.run(_exposition_after_a_gang())


def exported(exposition: str) -> tuple[set[str], set[str]]:
    """(family names, sample names) of an exposition; families include those without samples."""
    families = {f.name for f in text_string_to_metric_families(exposition)}
    # The parser strips _total from counter families; the TYPE lines keep Prometheus' name.
    typed = set(re.findall(r"^# TYPE (\S+) ", exposition, flags=re.MULTILINE))
    samples = {s.name for f in text_string_to_metric_families(exposition) for s in f.samples}
    return families | typed, samples


# ---- metric names --------------------------------------------------------------------


def test_phalanx_exports_exactly_the_documented_metric_families(exposition: str) -> None:
    families, _ = exported(exposition)
    assert {f for f in families if f.startswith("phalanx_")} >= EXPORTED_FAMILIES
    typed = set(re.findall(r"^# TYPE (phalanx_\S+) ", exposition, flags=re.MULTILINE))
    # prometheus-client adds a <family>_created gauge per counter and histogram.
    assert {t for t in typed if not t.endswith("_created")} == EXPORTED_FAMILIES


def test_every_metric_the_dashboard_and_alerts_use_is_exported(exposition: str) -> None:
    families, samples = exported(exposition)
    missing = {m for m in referenced_metrics() if m not in samples and family_of(m) not in families}
    assert not missing, f"not exported by Phalanx: {sorted(missing)}"


def test_histogram_series_are_queried_by_their_series_names(exposition: str) -> None:
    _, samples = exported(exposition)
    for name in referenced_metrics():
        if name.endswith(SERIES_SUFFIXES):
            assert name in samples, name


def test_the_gang_shows_up_in_the_metrics_operators_watch(exposition: str) -> None:
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(exposition)
        for s in f.samples
    }
    assert values[("phalanx_gang_decisions_total", (("result", "committed"),))] == 1
    assert values[("phalanx_bindings_total", (("result", "bound"),))] == 2
    assert values[("phalanx_partial_gangs", ())] == 0
    assert values[("phalanx_reserved_gpus", ())] == 0
    assert values[("phalanx_cache_synced", ())] == 1
    assert values[("phalanx_gpus", (("node", "gpu-a"), ("state", "used")))] == 8
    assert values[("phalanx_gang_time_to_bind_seconds_count", ())] == 1


# ---- the dashboard -------------------------------------------------------------------


def test_dashboard_has_the_panels_operators_need() -> None:
    titles = {p["title"] for p in dashboard()["panels"]}
    for needed in (
        "Gang decisions by result",
        "Time to whole gang",
        "GPUs per node: reserved / used / free",
        "Request latency per verb (p50 / p99)",
        "Bind barrier waiters, held reports",
        "Watch restarts",
        "Preemption: nodes by Phalanx's answer",
        "Partial gangs (must be 0)",
        "Cache synced",
    ):
        assert needed in titles


def test_the_partial_gangs_stat_turns_red_at_one() -> None:
    (panel,) = [p for p in dashboard()["panels"] if p["title"] == "Partial gangs (must be 0)"]
    assert panel["type"] == "stat"
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps == [{"color": "green", "value": None}, {"color": "red", "value": 1}]


def test_every_dashboard_query_uses_the_chosen_data_source_and_job() -> None:
    panels = [p for p in dashboard()["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"], (panel["title"], target["expr"])


# ---- the alert rules -----------------------------------------------------------------


def test_alert_rules_cover_the_invariants() -> None:
    names = {r["alert"] for r in alert_rules()}
    assert {
        "PhalanxPartialGang",
        "PhalanxReservationsStuck",
        "PhalanxCacheNotSynced",
        "PhalanxExtenderLatencyNearTimeout",
        "PhalanxOvercommittedNodes",
        "PhalanxApiServerPushingBack",
        "PhalanxBindingsWaitInClient",
    } <= names
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["description"], rule["alert"]


def test_every_alert_has_a_unit_test() -> None:
    tested = {
        t["alertname"]
        for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for t in case.get("alert_rule_test", [])
    }
    assert {r["alert"] for r in alert_rules()} <= tested


def test_deploy_holds_identical_copies_of_the_chart_files() -> None:
    assert (DEPLOY / "prometheus" / "phalanx-alerts.yaml").read_bytes() == ALERTS.read_bytes()
    assert (DEPLOY / "grafana" / "phalanx-dashboard.json").read_bytes() == DASHBOARD.read_bytes()


def test_alert_rules_pass_promtool_check(promtool: Path) -> None:
    proc = run([promtool, "check", "rules", DEPLOY / "prometheus" / "phalanx-alerts.yaml"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_alert_rules_pass_their_promtool_unit_tests(promtool: Path) -> None:
    proc = run([promtool, "test", "rules", ALERT_TESTS])
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- what the chart's probes and ServiceMonitor reach --------------------------------


async def _probe_metrics_listener() -> dict[str, int]:
    """Status codes of the metrics-only app (--metrics-port) before and after the model syncs."""
    source = ClusterFileSource([node_obj("gpu-a")])
    extender = Extender(source)
    transport = httpx.ASGITransport(app=create_metrics_app(extender))
    async with httpx.AsyncClient(transport=transport, base_url="http://phalanx") as client:
        codes = {"readyz before sync": (await client.get("/readyz")).status_code}
        await extender.start()
        try:
            for path in ("/healthz", "/readyz", "/metrics"):
                codes[path] = (await client.get(path)).status_code
        finally:
            await extender.stop()
    return codes


def test_the_chart_probes_and_scrapes_paths_the_metrics_listener_serves() -> None:
    assert asyncio.run(_probe_metrics_listener()) == {
        "readyz before sync": 503,
        "/healthz": 200,
        "/readyz": 200,
        "/metrics": 200,
    }
