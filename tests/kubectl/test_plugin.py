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

from builders import (
    event_obj,
    node_obj,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.model import Dialect, GroupRef
from phalanx.kubectl.cluster import ClusterApi, PluginError, Target
from phalanx.kubectl.plugin import gang_ref, main
from phalanx.sources.informer import ApiError

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
PODS = "/api/v1/namespaces/team-a/pods"
POD_GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups"
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups"
UPSTREAM = "/apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups"
WORKLOADS = "/apis/scheduling.k8s.io/v1alpha1/namespaces/team-a/workloads"
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


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("trio", GroupRef("team-a", "trio")),
        ("ml/trio", GroupRef("ml", "trio")),
        ("volcano:job", GroupRef("team-a", "job", Dialect.VOLCANO)),
        ("volcano:ml/job", GroupRef("ml", "job", Dialect.VOLCANO)),
        ("upstream:job", GroupRef("team-a", "job", Dialect.UPSTREAM)),
        ("upstream:ml/train/workers", GroupRef("ml", "train", Dialect.UPSTREAM, "workers")),
        ("upstream:ml/lws/group/3", GroupRef("ml", "lws", Dialect.UPSTREAM, "group", "3")),
        ("composite:ray", GroupRef("team-a", "ray", Dialect.COMPOSITE)),
        ("kueue:sweep", GroupRef("team-a", "sweep", Dialect.KUEUE)),
        ("lws:serve-0", GroupRef("team-a", "serve-0", Dialect.LWS)),
        ("yunikorn:spark-pi", GroupRef("team-a", "spark-pi", Dialect.YUNIKORN)),
    ],
    ids=[
        "bare-name",
        "namespaced",
        "volcano-bare",
        "volcano",
        "upstream-bare",
        "workload",
        "workload-replica",
        "composite-bare",
        "kueue-bare",
        "lws-bare",
        "yunikorn-bare",
    ],
)
def test_a_gang_is_named_by_its_key_and_a_key_without_a_slash_is_in_the_namespace(
    text: str, ref: GroupRef
) -> None:
    assert gang_ref(text, "team-a") == ref


@pytest.mark.parametrize(
    "text", ["ml/", "volcano:ml/job/workers", "Team/job", "slurm:job"], ids=str
)
def test_a_text_that_names_no_gang_is_a_usage_error_naming_the_forms(text: str) -> None:
    with pytest.raises(PluginError, match=r"names no gang; keys are NAMESPACE/NAME"):
        gang_ref(text, "team-a")


def every_dialect_api() -> FakeApi:
    """A gang in each dialect Phalanx reads, in namespace team-a."""
    pods = [
        pod_obj("vc-0", 4, namespace="team-a", volcano_group="job", node="gpu-1"),
        pod_obj("vc-1", 4, namespace="team-a", volcano_group="job"),
        pod_obj("up-0", 4, namespace="team-a", scheduling_group="job"),
        pod_obj("wl-0", 4, namespace="team-a", workload_ref={"name": "train", "podGroup": "w"}),
    ]
    waiting = {
        "phase": "Inqueue",
        "conditions": [
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": "no 2 nodes with 4 free GPUs",
                "lastTransitionTime": "2026-01-01T11:59:00Z",
            }
        ],
    }
    volcano_event = event_obj(
        "PodGroup", "job", "Reserved", "volcano gang reserved", namespace="team-a"
    )
    volcano_event["involvedObject"]["apiVersion"] = "scheduling.volcano.sh/v1beta1"
    other_event = event_obj("PodGroup", "job", "Bound", "the upstream gang", namespace="team-a")
    other_event["involvedObject"]["apiVersion"] = "scheduling.k8s.io/v1beta1"
    return FakeApi(
        {
            PODS: [strip(p) for p in pods],
            VOLCANO: [strip(volcano_podgroup_obj("job", 2, namespace="team-a", status=waiting))],
            UPSTREAM: [strip(upstream_podgroup_obj("job", 3, namespace="team-a"))],
            WORKLOADS: [strip(workload_obj("train", {"w": 2}, namespace="team-a"))],
            EVENTS: [volcano_event, other_event],
        }
    )


def test_explain_addresses_a_gang_of_another_dialect_by_its_key(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, every_dialect_api(), "explain", "volcano:job", "-o", "json") == 0
    answer = json.loads(capsys.readouterr().out)
    gang = answer["gang"]
    assert (gang["gang"], gang["dialect"], gang["source"], gang["min_member"]) == (
        "volcano:team-a/job",
        "volcano",
        "PodGroup",
        2,
    )
    assert gang["api_version"] == "scheduling.volcano.sh/v1beta1"
    assert answer["wait"]["reason"] == "no 2 nodes with 4 free GPUs"
    assert [e["message"] for e in answer["events"]] == ["volcano gang reserved"]


def test_explain_text_names_the_dialect_of_the_gang(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, every_dialect_api(), "explain", "upstream:team-a/train/w") == 0
    out = capsys.readouterr().out
    assert out.startswith("Gang upstream:team-a/train/w  (upstream Workload, minMember 2,")


def test_status_lists_the_gangs_of_every_dialect_with_their_dialect(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, every_dialect_api(), "status", "-o", "json") == 0
    gangs = {
        g["gang"]: (g["dialect"], g["source"]) for g in json.loads(capsys.readouterr().out)["gangs"]
    }
    assert gangs == {
        "volcano:team-a/job": ("volcano", "PodGroup"),
        "upstream:team-a/job": ("upstream", "PodGroup"),
        "upstream:team-a/train/w": ("upstream", "Workload"),
    }


def test_an_unknown_gang_of_another_dialect_is_a_no_naming_its_object(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, every_dialect_api(), "explain", "volcano:nope") == 1
    err = capsys.readouterr().err
    assert "gang volcano:team-a/nope not found (context prod): no volcano PodGroup nope" in err


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


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf", "soon"])
def test_a_request_timeout_that_is_no_positive_number_of_seconds_is_a_usage_error(
    kubeconfig: Path, seconds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, cluster_api(), "status", "--request-timeout", seconds) == 2
    err = capsys.readouterr().err
    assert f"argument --request-timeout: {seconds!r} is not a positive number of seconds" in err


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
