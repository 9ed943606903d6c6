"""The demo, end to end: the real app on an ephemeral 127.0.0.1 port, driven over HTTP.

Placements are checked against the node objects' own labels, not against what the report
claims, so a planner that breaks a policy fails here even if the report agrees with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import httpx
import pytest

from phalanx.cli import main
from phalanx.demo import cluster, scenario, workload
from phalanx.demo.driver import DriveResult, gpus_of, key_of
from phalanx.demo.objects import GROUP_LABEL, node, pod, podgroup
from phalanx.demo.report import Report

LABELS = {o["metadata"]["name"]: o["metadata"]["labels"] for o in cluster.nodes()}
ALLOCATABLE = {
    o["metadata"]["name"]: int(o["status"]["allocatable"].get("nvidia.com/gpu", 0))
    for o in cluster.nodes()
}
GANGS = {g.key: g for g in workload.DEMO_GANGS}
PODS = {key_of(o): o for o in workload.objects() if o["kind"] == "Pod"}


class Run:
    def __init__(self, report: Report, result: DriveResult) -> None:
        self.report = report
        self.result = result

    def nodes_of(self, group: str) -> dict[str, str]:
        return {o.key: o.node for o in self.result.outcomes.values() if o.group == group and o.node}


async def _run_demo() -> Run:
    async with scenario.session(cluster.objects()) as session:
        driven = await session.drive(workload.objects(), title="test")
    return Run(driven.report, driven.result)


@pytest.fixture(scope="module")
def demo() -> Run:
    return asyncio.run(asyncio.wait_for(_run_demo(), timeout=60))


PLACEABLE = [g for g in workload.DEMO_GANGS if g.bound]


@pytest.mark.parametrize("gang", PLACEABLE, ids=lambda g: g.key)
def test_every_placeable_gang_binds_at_least_its_quorum_together(
    demo: Run, gang: workload.DemoGang
) -> None:
    placed = demo.nodes_of(gang.key)
    assert len(placed) == gang.bound, demo.result.outcomes
    assert gang.bound >= gang.min_member


def test_same_node_gang_shares_one_node(demo: Run) -> None:
    assert len(set(demo.nodes_of("training/allreduce-bench").values())) == 1


def test_spread_gang_uses_distinct_nodes(demo: Run) -> None:
    nodes = list(demo.nodes_of("research/ray-workers").values())
    assert len(set(nodes)) == len(nodes) == 3


def test_interconnect_local_gang_stays_in_one_nvlink_clique(demo: Run) -> None:
    nodes = set(demo.nodes_of("training/llm-pretrain").values())
    cliques = {LABELS[n].get("nvidia.com/gpu.clique") for n in nodes}
    assert len(cliques) == 1
    assert None not in cliques
    assert all(LABELS[n]["nvidia.com/gpu.product"].startswith("NVIDIA-H100") for n in nodes)


def test_zone_domain_gang_stays_in_one_zone(demo: Run) -> None:
    nodes = set(demo.nodes_of("research/eval-suite").values())
    assert len({LABELS[n]["topology.kubernetes.io/zone"] for n in nodes}) == 1


def test_plan_remote_member_lands_on_a_tagged_node(demo: Run) -> None:
    train = demo.nodes_of("training/data-pipeline")["training/data-pipeline-train"]
    assert LABELS[train].get("tag.phalanx.io/gpu") == "true"


def test_nothing_lands_on_cordoned_or_tainted_nodes(demo: Run) -> None:
    used = {o.node for o in demo.result.outcomes.values() if o.node}
    assert not used & {"a100-a3", "h100-b4"}


def test_the_impossible_gang_binds_nothing_and_says_what_is_missing(demo: Run) -> None:
    assert demo.nodes_of("research/too-big") == {}
    line = next(g for g in demo.report.groups if g.group == "research/too-big")
    assert line.status == "waiting"
    assert "nvidia.com/gpu" in line.reason or "GPU" in line.reason, line.reason
    assert all(o.reason for o in demo.result.outcomes.values() if o.group == "research/too-big")


def test_single_pods_are_bound(demo: Run) -> None:
    for key in workload.DEMO_SINGLES:
        assert demo.result.outcomes[key].node, demo.result.outcomes[key]


def test_no_partial_gang_no_reservation_left_no_node_overcommitted(demo: Run) -> None:
    assert demo.report.partial_gangs == []
    assert demo.report.reserved_gpus == 0
    assert demo.report.overcommitted_nodes == []
    used: dict[str, int] = {}
    for obj in cluster.running_pods():
        used[obj["spec"]["nodeName"]] = used.get(obj["spec"]["nodeName"], 0) + gpus_of(obj)
    for out in demo.result.outcomes.values():
        if out.node:
            used[out.node] = used.get(out.node, 0) + gpus_of(PODS[out.key])
    assert {n: g for n, g in used.items() if g > ALLOCATABLE[n]} == {}


def test_the_report_agrees_every_policy_holds(demo: Run) -> None:
    assert demo.report.policy_violations == []
    placed = {g.group for g in demo.report.placed}
    assert placed == {g.key for g in PLACEABLE}


def test_the_demo_is_deterministic(demo: Run) -> None:
    again = asyncio.run(asyncio.wait_for(_run_demo(), timeout=60))
    assert {k: o.node for k, o in again.result.outcomes.items()} == {
        k: o.node for k, o in demo.result.outcomes.items()
    }


def test_phalanx_demo_exit_prints_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--exit", "--port", "0"]) == 0
    out = capsys.readouterr().out
    assert "extender listening on http://127.0.0.1:" in out
    assert "research/too-big" in out
    assert "waiting" in out
    assert "partial gangs: 0" in out
    assert "reserved GPUs after the run: 0" in out


def test_phalanx_demo_json_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--exit", "--port", "0", "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert data["summary"]["partial_gangs"] == 0
    assert data["summary"]["gangs_waiting"] == 1


def test_phalanx_demo_keeps_serving_metrics_and_debug_until_ctrl_c() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    cmd = [sys.executable, "-m", "phalanx.cli", "demo", "--port", "0"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:  # ends at "Ctrl-C to stop." (or EOF if the demo died)
            if "extender listening on " in line:
                url = line.rsplit(" ", 1)[1].strip()
            if line.startswith("Ctrl-C to stop."):
                break
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, timeout=10, trust_env=False) as client:
            metrics = client.get("/metrics").text
            assert "phalanx_partial_gangs 0.0" in metrics
            assert "phalanx_reserved_gpus 0.0" in metrics
            groups = client.get("/debug/groups").json()["groups"]
            assert "training/llm-pretrain" in {g["group"] for g in groups}
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_elastic_gang_that_fits_whole_binds_every_member() -> None:
    gang = [
        podgroup("ml", "elastic", 2),
        *(pod("ml", f"elastic-{i}", gpus=2, labels={GROUP_LABEL: "elastic"}) for i in range(4)),
    ]

    async def run() -> scenario.Driven:
        async with scenario.session([node("n1", gpus=8, zone="z")]) as session:
            return await session.drive(gang, title="elastic")

    driven = asyncio.run(asyncio.wait_for(run(), timeout=60))
    assert [o.node for o in driven.result.outcomes.values()] == ["n1"] * 4
    assert driven.report.reserved_gpus == 0
