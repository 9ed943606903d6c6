"""What an operator sees of a gang through the real API and Phalanx's endpoints: PodGroup
status, Events on pods and PodGroups, /metrics, /debug and the JSON logs (DESIGN.md §7);
and that the kube-scheduler under test runs the chart's own configuration (§2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest_scheduling import (  # noqa: F401  # fixtures
    Scheduler,
    chart_scheduler_config,
    cluster,
    phalanx,
    scheduler,
)
from phalanx_process import PhalanxProcess
from scheduling import Scenario

pytestmark = pytest.mark.e2e


def test_the_kube_scheduler_under_test_runs_the_charts_configuration(
    scheduler: Scheduler,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    chart = chart_scheduler_config()
    assert chart is not None, "deploy/manifests/phalanx.yaml holds no KubeSchedulerConfiguration"
    assert scheduler.origin == "deploy/manifests/phalanx.yaml"
    running = scheduler.config
    # Only what must differ in a throw-away cluster was rewritten.
    for extender in running["extenders"]:
        assert extender.pop("urlPrefix") == phalanx.url
    for extender in chart["extenders"]:
        extender.pop("urlPrefix")
    for key in ("resourceNamespace", "resourceName"):
        running["leaderElection"].pop(key)
        chart["leaderElection"].pop(key, None)
    running.get("clientConnection", {}).pop("kubeconfig", None)
    assert running == chart
    # The facts DESIGN.md §2 pins, as the chart states them.
    extender = chart["extenders"][0]
    assert chart["percentageOfNodesToScore"] == 100
    assert [p["schedulerName"] for p in chart["profiles"]] == ["phalanx"]
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert extender["httpTimeout"] == "30s"
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["preemptVerb"] == "preempt"


def _decisions(phalanx: PhalanxProcess) -> dict[str, float]:  # noqa: F811
    return {
        dict(labels)["result"]: value
        for (name, labels), value in phalanx.scrape().items()
        if name == "phalanx_gang_decisions_total"
    }


def _requests(phalanx: PhalanxProcess, verb: str) -> float:  # noqa: F811
    return phalanx.metric("phalanx_request_duration_seconds_count", verb=verb, result="ok")


def test_a_gangs_life_shows_in_status_events_metrics_debug_and_logs(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    node = cluster.node("a", 8)
    cluster.nodes_ready()
    ns = cluster.namespace
    decided = _decisions(phalanx)
    bound_before = phalanx.metric("phalanx_gang_time_to_bind_seconds_count")
    filters, binds = _requests(phalanx, "filter"), _requests(phalanx, "bind")
    completed = phalanx.metric("phalanx_members_completed_total")

    # ---- waiting for members (a plan makes the members distinct, so the gang waits for its
    # quorum rather than being reserved from its first member's shape)
    plan = {"sequence": [{"execute": "a"}, {"execute": "b"}, {"execute": "c"}]}
    gang = cluster.gang(
        "observed", 3, 2, create=2, arrival="staggered", plan=plan, plan_nodes=["a", "b", "c"]
    )
    cluster.wait_event(gang.name, "waiting for gang members: ", reason="WaitingForMembers")

    def pending_status() -> dict[str, Any] | None:
        status = cluster.get_pod_group(gang.name).get("status") or {}
        conditions = status.get("conditions") or [{}]
        return status if conditions[0].get("message", "").endswith("2/3 exist") else None

    status = cluster.wait("PodGroup status: waiting for members", pending_status)
    assert status["phase"] == "Pending", status
    assert status.get("scheduled", 0) == 0, status
    assert status.get("scheduleStartTime"), status
    condition = status["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodGroupScheduled",
        "False",
        "WaitingForMembers",
    )
    assert cluster.events(gang.members[0], reason="FailedScheduling")

    # ---- the last member arrives
    cluster.add_member(gang, 2)
    cluster.wait_gang(gang, timeout=45)

    def scheduled_status() -> dict[str, Any] | None:
        # "scheduled" counts members being bound too: the decision still says "Committed"
        # until the last binding has answered, and the status after that says where it is.
        status = cluster.get_pod_group(gang.name).get("status") or {}
        conditions = status.get("conditions") or [{}]
        settled = conditions[0].get("reason") != "Committed"
        return status if status.get("scheduled") == 3 and settled else None

    status = cluster.wait("PodGroup status: scheduled", scheduled_status)
    assert status["phase"] in ("Scheduled", "Running"), status
    condition = status["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodGroupScheduled",
        "True",
        "Bound",
    )
    cluster.wait_event(gang.name, f"reserved 3 member(s) on {node}", reason="Reserved")
    cluster.wait_event(gang.name, "bound 3 member(s) together", reason="Bound")
    for member in gang.members:  # kube-scheduler's record, or Phalanx's for a completed member
        cluster.wait_event(member, f"Successfully assigned {ns}/{member} to {node}")

    # ---- /metrics
    after = _decisions(phalanx)
    for result in ("waiting-for-members", "committed", "bound"):
        assert after.get(result, 0) > decided.get(result, 0), (result, decided, after)
    assert phalanx.metric("phalanx_gang_time_to_bind_seconds_count") == bound_before + 1
    assert _requests(phalanx, "filter") >= filters + 3
    # Each member was bound at its own /bind or completed with the first (parked members are).
    own_binds = _requests(phalanx, "bind") - binds
    completions = phalanx.metric("phalanx_members_completed_total") - completed
    assert own_binds >= 1, own_binds
    assert own_binds + completions >= 3, (own_binds, completions)
    assert phalanx.metric("phalanx_gpus", node=node, state="used") == 6
    assert phalanx.metric("phalanx_gpus", node=node, state="free") == 2
    assert phalanx.metric("phalanx_gpus", node=node, state="reserved") == 0
    assert phalanx.metric("phalanx_partial_gangs") == 0
    assert phalanx.metric("phalanx_reserved_gpus") == 0
    assert phalanx.metric("phalanx_barrier_waiting") == 0
    assert phalanx.metric("phalanx_cache_synced") == 1
    assert phalanx.metric("phalanx_overcommitted_nodes") == 0

    # ---- /debug
    summary = next(g for g in phalanx.debug_groups() if g["group"] == f"{ns}/{gang.name}")
    assert summary["bound"] == 3
    assert summary["min_member"] == 3
    assert summary["last_decision"] == "bound"
    view = phalanx.debug_group(ns, gang.name)
    assert view is not None
    assert view["plan"]["placements"] == {f"{ns}/{m}": node for m in gang.members}
    assert view["reservation"] is None
    assert phalanx.debug_group(ns, "no-such-gang") is None  # a 404 naming the gang

    # ---- JSON logs: decisions carry the group key
    decisions = [
        r["result"]
        for r in phalanx.log_records()
        if r.get("msg") == "gang decision" and r.get("group") == f"{ns}/{gang.name}"
    ]
    assert decisions[-3:] == ["waiting-for-members", "committed", "bound"] or (
        decisions[-2:] == ["committed", "bound"] and "waiting-for-members" in decisions
    ), decisions


def test_an_unfit_gang_says_why_on_its_pod_group_and_in_metrics(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    cluster.node("a", 4)
    cluster.nodes_ready()
    unfit_before = _decisions(phalanx).get("unfit", 0)
    gang = cluster.gang("too-big", 2, 4)  # 8 GPUs on a 4-GPU node

    cluster.wait_event(gang.name, "cannot place 2 member(s)", reason="Unschedulable")

    def unfit_status() -> dict[str, Any] | None:
        status = cluster.get_pod_group(gang.name).get("status") or {}
        conditions = status.get("conditions") or [{}]
        return status if conditions[0].get("reason") == "Unfit" else None

    status = cluster.wait("PodGroup status: unfit", unfit_status)
    assert status["phase"] == "PreScheduling", status
    condition = status["conditions"][0]
    assert condition["status"] == "False"
    assert "cannot place 2 member(s)" in condition["message"]
    assert _decisions(phalanx).get("unfit", 0) > unfit_before
    assert cluster.bound_count(gang) == 0


def test_pod_group_status_follows_its_members_after_they_bind(
    cluster: Scenario,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.nodes_ready()
    gang = cluster.gang("runs", 2, 2)
    cluster.wait_gang(gang)
    cluster.wait(
        "every member Running (kwok's pod stage)",
        lambda: all(
            (p.get("status") or {}).get("phase") == "Running"
            for name, p in cluster.pods().items()
            if name in gang.members
        ),
    )

    def status_with(**want: object) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            status = cluster.get_pod_group(gang.name).get("status") or {}
            return status if all(status.get(k) == v for k, v in want.items()) else None

        return probe

    # The quorum runs: phase Running (the CRD's documented phases).
    cluster.wait(
        "PodGroup status Running, 2 running",
        status_with(phase="Running", running=2, scheduled=2),
        timeout=8,
    )
    # A member goes away: the counts follow (the gang ran whole; it is not partial).
    cluster.delete_pods(gang.members[:1])
    cluster.wait(
        "PodGroup status counts 1 scheduled, 1 running",
        status_with(running=1, scheduled=1),
        timeout=8,
    )
