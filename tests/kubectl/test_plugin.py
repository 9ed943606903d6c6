"""`kubectl-phalanx`'s commands end to end over a fake transport: what they print and how
they exit. (Against a real API server and Phalanx: tests/e2e/test_kubectl_plugin.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_api import FakeApi

from builders import node_obj, pod_obj, podgroup_obj
from phalanx.kubectl.cluster import ClusterApi, Target
from phalanx.kubectl.plugin import main
from phalanx.sources.informer import ApiError

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
PODS = "/api/v1/namespaces/team-a/pods"
POD_GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups"
EVENTS = "/api/v1/namespaces/team-a/events"


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def cluster_api() -> FakeApi:
    pods = [
        pod_obj("pair-0", 4, namespace="team-a", group="pair", node="gpu-1"),
        pod_obj("pair-1", 4, namespace="team-a", group="pair", node="gpu-1"),
        pod_obj("trio-0", 4, namespace="team-a", group="trio"),
    ]
    groups = [
        podgroup_obj("pair", 2, namespace="team-a"),
        podgroup_obj("trio", 3, namespace="team-a"),
    ]
    return FakeApi(
        {
            PODS: [strip(p) for p in pods],
            "/api/v1/pods": [strip(p) for p in pods],
            POD_GROUPS: [strip(g) for g in groups],
            "/apis/scheduling.x-k8s.io/v1alpha1/podgroups": [strip(g) for g in groups],
            EVENTS: [],
            "/api/v1/nodes": [strip(node_obj("gpu-1")), strip(node_obj("gpu-2"))],
        }
    )


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://k:6443"}}],
                "contexts": [{"name": "prod", "context": {"cluster": "c", "namespace": "team-a"}}],
                "current-context": "prod",
            }
        )
    )
    return path


def run(kubeconfig: Path, api: FakeApi, *args: str) -> int:
    def connector(target: Target, timeout: float) -> ClusterApi:
        assert target.context == "prod"
        return api

    return main([f"--kubeconfig={kubeconfig}", *args], connector=connector, clock=lambda: NOW)


def test_status_prints_the_context_namespace_and_its_gangs(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, cluster_api(), "status") == 0
    out = capsys.readouterr().out
    assert out.startswith("Context prod, namespace team-a\n")
    assert "team-a/pair" in out
    assert "team-a/trio" in out


def test_status_json_is_json(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(kubeconfig, cluster_api(), "status", "-A", "-o", "json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["namespace"] is None
    assert {g["gang"]: g["state"] for g in answer["gangs"]} == {
        "team-a/pair": "whole",
        "team-a/trio": "waiting",
    }


def test_status_reads_no_events_when_every_gang_is_whole(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cluster_api()
    api.lists[PODS] = api.lists[PODS][:2]
    api.lists[POD_GROUPS] = api.lists[POD_GROUPS][:1]
    assert run(kubeconfig, api, "status") == 0
    assert not [c for c in api.calls if "/events" in c]


def test_explain_takes_a_bare_name_in_the_contexts_namespace(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, cluster_api(), "explain", "trio", "-o", "json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["gang"]["gang"] == "team-a/trio"
    assert answer["wait"]["state"] == "waiting"


def test_an_unknown_gang_is_a_no(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(kubeconfig, cluster_api(), "explain", "team-a/nope") == 1
    err = capsys.readouterr().err
    assert "gang team-a/nope not found (context prod)" in err


def test_an_unreachable_api_server_is_exit_2_with_where(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeApi(errors={POD_GROUPS: ApiError(0, "MaxRetryError", "connection refused")})
    assert run(kubeconfig, api, "status") == 2
    err = capsys.readouterr().err
    assert err.startswith("kubectl phalanx status: cannot reach the API server https://k:6443")


def test_a_usage_error_is_exit_2(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(kubeconfig, cluster_api(), "status", "-o", "yaml") == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err


def test_flags_go_before_or_after_the_command(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, cluster_api(), "-o", "json", "-n", "elsewhere", "status") == 0
    assert json.loads(capsys.readouterr().out)["namespace"] == "elsewhere"
    assert run(kubeconfig, cluster_api(), "-n", "elsewhere", "status", "-n", "team-a") == 0
    assert "namespace team-a" in capsys.readouterr().out


def test_simulate_hands_the_dump_to_phalanx_simulate(
    kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.json"
    code = run(kubeconfig, cluster_api(), "simulate", "--dump", str(dump), "-o", "json")
    assert code == 0
    captured = capsys.readouterr()
    assert "dumped 2 nodes, 3 pods and 2 PodGroups from context prod" in captured.err
    report = json.loads(captured.out)
    assert report["title"] == "phalanx simulate dump.json"
    trio = next(g for g in report["groups"] if g["group"] == "team-a/trio")
    assert trio["status"] == "waiting"  # two of three members do not exist
    assert json.loads(dump.read_text())["kind"] == "List"


def test_simulate_passes_flags_after_a_double_dash_to_the_simulator(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(kubeconfig, cluster_api(), "simulate", "--", "--default-placement", "sideways")
    assert code == 2
    assert "phalanx simulate" in capsys.readouterr().err
