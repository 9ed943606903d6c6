"""`phalanx` commands: simulate over cluster dumps, explain against a running server, serve."""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import os
import queue
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from builders import (
    GPU_DRIVER,
    NVIDIA_CLASSES,
    device_class_obj,
    gpu_slice_obj,
    node_obj,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
)
from phalanx.cli import UsageError, build_parser, build_source, check_tls, explain, main
from phalanx.demo import cluster, scenario, workload
from phalanx.demo.report import BAR_CELLS
from phalanx.service.loop_health import COLLECTOR_THRESHOLDS
from phalanx.service.metrics import Metrics
from phalanx.settings import Settings
from tiers import unavailable


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": objects,
        "metadata": {"resourceVersion": ""},
    }


def kubectl_shaped(obj: dict[str, Any]) -> dict[str, Any]:
    """What a live API server adds that Phalanx must ignore."""
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    meta.update(resourceVersion="4711", creationTimestamp="2025-01-01T00:00:00Z", generation=1)
    meta["managedFields"] = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}]
    if obj["kind"] == "Node":
        obj["spec"]["providerID"] = "kind://docker/gpu"
        obj["status"]["nodeInfo"] = {"kubeletVersion": "v1.31.0", "architecture": "amd64"}
        obj["status"]["images"] = [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}]
    return obj


CLUSTER = [
    node_obj("gpu-1", 8),
    node_obj("gpu-2", 8),
    pod_obj("busy", 4, node="gpu-1", phase="Running", scheduler="default-scheduler"),
    podgroup_obj("pair", 2),
    pod_obj("pair-0", 4, group="pair"),
    pod_obj("pair-1", 4, group="pair"),
    pod_obj("theirs", 1, scheduler="default-scheduler"),
]

WORKLOAD = [
    podgroup_obj("wide", 3, annotations={"phalanx.io/placement": "same-node"}),
    *(pod_obj(f"wide-{i}", 8, group="wide") for i in range(3)),
    {  # a manifest as a user writes it: no uid, no namespace, no status
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "notebook"},
        "spec": {
            "schedulerName": "phalanx",
            "containers": [
                {"name": "nb", "image": "jupyter", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    },
]


@pytest.fixture
def json_dump(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(as_list(CLUSTER)))
    return path


@pytest.fixture
def yaml_dump(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(as_list([kubectl_shaped(o) for o in CLUSTER]), sort_keys=True))
    return path


@pytest.fixture
def workload_file(tmp_path: Path) -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump_all(WORKLOAD))
    return path


def simulate_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["simulate", *args, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert isinstance(answer, dict)
    return answer


def group(report: dict[str, Any], key: str) -> dict[str, Any]:
    return next(g for g in report["groups"] if g["group"] == key)


# ---- simulate ---------------------------------------------------------------------------


@pytest.mark.parametrize("dump", ["json_dump", "yaml_dump"])
def test_simulate_schedules_the_dumps_own_pending_pods(
    dump: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    report = simulate_json(capsys, str(request.getfixturevalue(dump)))
    pair = group(report, "default/pair")
    assert (pair["status"], pair["bound"], pair["members"]) == ("placed", 2, 2)
    assert report["ignored"] == ["default/theirs"]
    assert report["summary"]["partial_gangs"] == 0
    assert report["summary"]["reserved_gpus"] == 0


def test_simulate_with_a_workload_says_where_it_fits_and_why_not(
    yaml_dump: Path, workload_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = simulate_json(capsys, str(yaml_dump), "--workload", str(workload_file))
    wide = group(report, "default/wide")
    assert (wide["status"], wide["bound"]) == ("waiting", 0)
    assert wide["reason"]
    assert group(report, "default/pair")["status"] == "placed"
    notebook = next(s for s in report["singles"] if s["pod"] == "default/notebook")
    assert notebook["node"] in {"gpu-1", "gpu-2"}


def test_simulate_prints_a_readable_table(
    json_dump: Path, workload_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(json_dump), "--workload", str(workload_file)]) == 0
    out = capsys.readouterr().out
    for text in ("GANG", "default/pair", "default/wide"):
        assert text in out
    assert "why:" in out
    assert "partial gangs: 0" in out


def test_simulate_says_how_many_whole_domains_of_each_level_remain_free(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clique, rack = "nvidia.com/gpu.clique", "example.com/rack"
    nodes = [
        node_obj(f"r{r}-n{n}", 4, clique=f"c{r}", labels={rack: f"rack{r}"})
        for r in range(3)
        for n in range(2)
    ]
    work = [
        podgroup_obj("g", 2, annotations={"phalanx.io/topology-required": rack}),
        *(pod_obj(f"g-{i}", 4, group="g") for i in range(2)),
    ]
    dump, workload = tmp_path / "dump.json", tmp_path / "work.json"
    dump.write_text(json.dumps(as_list(nodes)))
    workload.write_text(json.dumps(as_list(work)))
    topologies = f"racks={rack},{clique},kubernetes.io/hostname"
    args = [str(dump), "--workload", str(workload), "--topologies", topologies]
    report = simulate_json(capsys, *args)
    assert group(report, "default/g")["status"] == "placed"
    free = {(d["topology"], d["level"]): (d["free"], d["total"]) for d in report["free_domains"]}
    assert free[("racks", rack)] == (2, 3)  # the gang took one whole rack
    assert free[("racks", "kubernetes.io/hostname")] == (4, 6)
    assert main(["simulate", *args]) == 0
    assert "domains left whole (every GPU free), per topology level:" in capsys.readouterr().out


def test_simulate_honours_the_served_scheduler_names(
    json_dump: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = simulate_json(capsys, str(json_dump), "--scheduler-name", "default-scheduler")
    assert [s["pod"] for s in report["singles"]] == ["default/theirs"]


@pytest.mark.parametrize(
    ("flags", "status"),
    [
        pytest.param((), "placed", id="bridge-on"),
        pytest.param(("--no-dra-extended-resources",), "waiting", id="bridge-off"),
    ],
)
def test_simulate_serves_extended_resources_from_dra_devices_only_with_the_bridge_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], status: str
) -> None:
    gpus = device_class_obj(GPU_DRIVER, NVIDIA_CLASSES[GPU_DRIVER])
    gpus["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    path = tmp_path / "dra.json"
    dump = [
        node_obj("dra-1", 0),
        gpu_slice_obj("dra-1"),
        gpus,
        podgroup_obj("pair", 2),
        *(pod_obj(f"pair-{i}", 4, group="pair") for i in range(2)),
    ]
    path.write_text(json.dumps(as_list(dump)))
    pair = group(simulate_json(capsys, str(path), *flags), "default/pair")
    assert pair["status"] == status
    assert ("the DRA extended-resource bridge is off" in pair["reason"]) is bool(flags)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read cluster file"),
        (b'{"kind": "List", "items": [', "neither JSON nor YAML"),
        (b"just some words\n", "expected a Kubernetes object or List"),
        (json.dumps(as_list([pod_obj("p")])).encode(), "holds no Node objects"),
        (b'{"kind": 5}', "'kind' must be a string, not a number"),
        (b"\xff\xfe\x00bad", "not UTF-8 text (byte 0xff at offset 0)"),
    ],
    ids=["missing", "broken-json", "not-an-object", "no-nodes", "kind-a-number", "not-utf-8"],
)
def test_simulate_rejects_a_bad_cluster_file_with_exit_2(
    tmp_path: Path, content: bytes | None, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dump.yaml"
    if content is not None:
        path.write_bytes(content)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("phalanx simulate: ")
    assert message in err


BAD_FILES = {
    "broken-yaml": (b"- [unclosed\n", "neither JSON nor YAML"),
    "kind-a-number": (b'{"kind": 5}', "'kind' must be a string, not a number"),
    "not-utf-8": (b"\xff\xfe\x00bad", "not UTF-8 text"),
}


@pytest.mark.parametrize(("content", "message"), BAD_FILES.values(), ids=BAD_FILES)
def test_simulate_rejects_a_bad_workload_file_with_exit_2(
    json_dump: Path,
    tmp_path: Path,
    content: bytes,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "workload.yaml"
    bad.write_bytes(content)
    assert main(["simulate", str(json_dump), "--workload", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("phalanx simulate: workload: ")
    assert message in err


INVALID_GANGS = {
    "scheduler-plugins": (
        podgroup_obj("x", 2, timeout=-5),
        [pod_obj(f"x-{i}", group="x") for i in range(2)],
        "spec.scheduleTimeoutSeconds",
    ),
    "volcano": (
        volcano_podgroup_obj("x", -2),
        [pod_obj(f"x-{i}", volcano_group="x") for i in range(2)],
        "spec.minMember",
    ),
    "upstream": (
        upstream_podgroup_obj("x", 0),
        [pod_obj(f"x-{i}", scheduling_group="x") for i in range(2)],
        "spec.schedulingPolicy.gang.minCount",
    ),
}


@pytest.mark.parametrize(("group", "members", "field"), INVALID_GANGS.values(), ids=INVALID_GANGS)
def test_simulate_says_which_field_of_an_invalid_gang_object_holds_its_members(
    tmp_path: Path,
    group: dict[str, Any],
    members: list[dict[str, Any]],
    field: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(as_list([node_obj("n1"), group, *members])))
    report = simulate_json(capsys, str(dump))
    # The driver groups scheduler-plugins gangs only; other dialects' members are singles.
    [reason] = {line["reason"] for line in report["groups"] + report["singles"]}
    assert "is invalid" in reason
    assert field in reason
    assert "to exist" not in reason


def test_simulate_draws_a_node_with_an_absurd_gpu_count_in_a_bar_of_fixed_width(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absurd = node_obj("absurd")
    for amounts in (absurd["status"]["capacity"], absurd["status"]["allocatable"]):
        amounts["nvidia.com/gpu"] = "1e400"
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(as_list([node_obj("n1"), absurd])))
    assert main(["simulate", str(dump)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("absurd"))
    assert "[" + "." * BAR_CELLS + "]" in row


def test_simulate_lists_a_rejected_workload_object_once_with_its_reason(
    json_dump: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = pod_obj("w")
    bad["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "-1"
    work = tmp_path / "work.json"
    work.write_text(json.dumps(bad))
    report = simulate_json(capsys, str(json_dump), "--workload", str(work))
    [rejected] = report["rejected"]
    assert rejected.startswith("Pod default/w: spec.containers[0]")


def misshapen_pod(path: str, value: Any) -> dict[str, Any]:
    """Pod `odd` with the value at the dotted `path` replaced (a hand-written file's slip)."""
    obj = pod_obj("odd", 1, group="pair")
    *parents, last = path.split(".")
    at: Any = obj
    for part in parents:
        at = at[int(part)] if isinstance(at, list) else at[part]
    if isinstance(at, list):
        at[int(last)] = value
    else:
        at[last] = value
    return obj


MISSHAPEN = {  # id: (path, value, the field the refusal names)
    "metadata-a-string": ("metadata", "odd", "metadata"),
    "labels-a-string": ("metadata.labels", "pair", "metadata.labels"),
    "annotations-a-list": ("metadata.annotations", ["x"], "metadata.annotations"),
    "spec-a-number": ("spec", 7, "spec"),
    "status-a-string": ("status", "Pending", "status"),
    "scheduler-name-a-list": ("spec.schedulerName", ["phalanx"], "spec.schedulerName"),
    "containers-a-number": ("spec.containers", 1, "spec.containers"),
    "container-a-string": ("spec.containers.0", "main", "spec.containers[0]"),
    "resources-a-list": ("spec.containers.0.resources", [], "spec.containers[0].resources"),
    "requests-a-list": (
        "spec.containers.0.resources.requests",
        ["cpu"],
        "spec.containers[0].resources.requests",
    ),
}


@pytest.mark.parametrize("where", ["cluster", "workload"])
@pytest.mark.parametrize(("path", "value", "field"), MISSHAPEN.values(), ids=MISSHAPEN)
def test_simulate_refuses_a_misshapen_pod_naming_its_field_and_schedules_the_rest(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: str,
    path: str,
    value: Any,
    field: str,
) -> None:
    odd = misshapen_pod(path, value)
    dump, work = tmp_path / "cluster.json", tmp_path / "work.json"
    dump.write_text(json.dumps(as_list(CLUSTER + ([odd] if where == "cluster" else []))))
    work.write_text(json.dumps(as_list([odd] if where == "workload" else [])))
    report = simulate_json(capsys, str(dump), "--workload", str(work))
    [rejected] = report["rejected"]
    assert rejected.startswith("Pod")
    assert f": {field}: " in rejected
    pair = group(report, "default/pair")
    assert (pair["status"], pair["bound"]) == ("placed", 2)


# ---- explain ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_server() -> Iterator[str]:
    """The demo, driven once, served from a background thread until the module ends."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        async with scenario.session(cluster.objects()) as session:
            await session.drive(workload.objects(), title="explain fixture")
            box["loop"], box["stop"], box["url"] = (
                asyncio.get_running_loop(),
                asyncio.Event(),
                session.url,
            )
            ready.set()
            await box["stop"].wait()

    def run() -> None:
        try:
            asyncio.run(serve())
        except BaseException as exc:  # noqa: BLE001  # re-raised in the test thread below
            box["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="demo-server", daemon=True)
    thread.start()
    assert ready.wait(60), "the demo server did not start"
    assert "error" not in box, box.get("error")
    yield box["url"]
    box["loop"].call_soon_threadsafe(box["stop"].set)
    thread.join(15)
    assert not thread.is_alive()


def test_explain_prints_the_plan_of_a_gang(
    demo_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "training/data-pipeline", "--server", demo_server]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gang training/data-pipeline")
    for section in (
        "placements:",
        "phases:",
        "data transfers:",
        "warnings:",
        "training/data-pipeline-train",
    ):
        assert section in out


def test_explain_shows_why_a_gang_waits(
    demo_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "research/too-big", "--server", demo_server]) == 0
    out = capsys.readouterr().out
    reason = next(line for line in out.splitlines() if "last reason:" in line)
    assert reason.split("last reason:")[1].strip() not in ("", "-")


def test_explain_json_is_the_raw_view(demo_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "training/llm-pretrain", "--server", demo_server, "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["group"] == "training/llm-pretrain"
    assert view["bound"] == 4


def test_explain_an_unknown_gang_exits_1_with_the_servers_message(
    demo_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "research/no-such-gang", "--server", demo_server]) == 1
    assert "research/no-such-gang is unknown" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_explain_an_unreachable_server_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "a/b", "--server", f"http://127.0.0.1:{free_port()}"]) == 2
    assert "cannot reach Phalanx at http://127.0.0.1:" in capsys.readouterr().err


SERVER_URLS = {
    "bad-ipv4": ("http://256.1.1.1:80", "is not a URL"),
    "unclosed-ipv6": ("http://[::1", "is not a URL"),
    "no-scheme": ("localhost:8888", "is not an http(s)://HOST[:PORT] URL"),
    "other-scheme": ("ftp://phalanx", "is not an http(s)://HOST[:PORT] URL"),
    "no-host": ("http://", "is not an http(s)://HOST[:PORT] URL"),
    "query": ("http://127.0.0.1:8888?x=", "has a query or fragment"),
    "fragment": ("http://127.0.0.1:8888/#top", "has a query or fragment"),
}


@pytest.mark.parametrize(("server", "message"), SERVER_URLS.values(), ids=SERVER_URLS)
def test_explain_refuses_a_server_url_it_cannot_use_with_exit_2(
    server: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "a/b", "--server", server]) == 2
    assert f"phalanx explain: --server: {server!r} {message}" in capsys.readouterr().err


def test_explain_at_an_address_without_phalanx_behind_it_exits_2(
    demo_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"{demo_server}/metrics"
    assert main(["explain", "training/llm-pretrain", "--server", server]) == 2
    assert f"--server: no Phalanx API at {server} (" in capsys.readouterr().err


def proxied(prefix: str, views: dict[str, dict[str, Any]]) -> httpx.MockTransport:
    """A proxy that serves a Phalanx's /debug/groups views under `prefix` only."""

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == f"{prefix}/debug/groups":
            return httpx.Response(200, json={"groups": list(views.values())})
        key = path.removeprefix(f"{prefix}/debug/groups/")
        if not path.startswith(prefix) or key == path:
            return httpx.Response(404, json={"error": f"no such path: {path}"})
        if key not in views:
            return httpx.Response(404, json={"error": f"gang {key} is unknown"})
        return httpx.Response(200, json=views[key])

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(("key", "code"), [("default/pair", 0), ("default/nope", 1)], ids=str)
def test_explain_keeps_the_path_of_a_server_url_as_a_prefix(
    key: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = "/api/v1/namespaces/phalanx/services/phalanx:8888/proxy"
    transport = proxied(prefix, {"default/pair": {"group": "default/pair", "bound": 2}})
    server = f"http://127.0.0.1:8001{prefix}/"
    assert explain(key, server, as_json=True, transport=transport) == code
    out, err = capsys.readouterr()
    if code == 0:
        assert json.loads(out)["group"] == "default/pair"
    else:
        assert "gang default/nope is unknown" in err


@pytest.mark.parametrize("text", ["just-a-name", "a/b/c", "volcano:a"], ids=str)
def test_explain_needs_a_gang_key(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", text]) == 2
    assert f"{text!r} is not a gang key; keys are NAMESPACE/NAME" in capsys.readouterr().err


def test_explain_asks_for_a_gang_of_another_dialect_by_its_key(
    demo_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "volcano:research/too-big", "--server", demo_server]) == 1
    assert "gang volcano:research/too-big is unknown" in capsys.readouterr().err


# ---- serve ------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}


def test_serve_with_an_unusable_kubeconfig_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "kubeconfig"
    assert main(["serve", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    if importlib.util.find_spec("phalanx.sources.kube") is None:
        assert "live-cluster source is not part of this build" in err
    else:
        assert f"cannot load the kubeconfig {missing}" in err


def test_serve_without_a_cluster_source_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("PHALANX_"):
            monkeypatch.delenv(name)
    assert main(["serve"]) == 2
    assert "choose exactly one cluster source" in capsys.readouterr().err


def test_serve_with_invalid_settings_exits_2(
    json_dump: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--cluster-file", str(json_dump), "--barrier-timeout-seconds", "-1"]) == 2
    assert "--barrier-timeout-seconds / PHALANX_BARRIER_TIMEOUT_SECONDS" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "70000"], "argument --port: '70000' is not a port (0-65535)"),
        (["--port", "-1"], "argument --port: '-1' is not a port (0-65535)"),
        (["--port", "http"], "argument --port: 'http' is not a port (0-65535)"),
        (["--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
    ],
    ids=["port-too-high", "port-negative", "port-not-a-number", "unknown-log-level"],
)
def test_demo_with_a_bad_flag_exits_2_naming_it_before_starting(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--exit", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_demo_still_takes_a_log_level_in_upper_case() -> None:
    assert build_parser().parse_args(["demo", "--log-level", "DEBUG"]).log_level == "debug"


def test_serve_with_a_broken_cluster_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{")
    assert main(["serve", "--cluster-file", str(path)]) == 2
    assert "neither JSON nor YAML" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "message"), BAD_FILES.values(), ids=BAD_FILES)
def test_serve_with_an_unreadable_cluster_file_exits_2_naming_the_problem(
    tmp_path: Path, content: bytes, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    assert main(["serve", "--cluster-file", str(path), "--port", "0"]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_scheduler_config_is_refused_with_a_cluster_file_too(
    json_dump: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.yaml"
    settings = Settings(cluster_file=json_dump, scheduler_config=missing)
    expected = f"--scheduler-config: cannot read .* {re.escape(str(missing))}"
    with pytest.raises(UsageError, match=expected):
        build_source(settings, Metrics())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 50_000, "is nested too deeply to read"),
        (b"\xff\xfekind: x", "is not UTF-8 text (byte 0xff at offset 0)"),
        (b"kind: Pod\n", "is not a KubeSchedulerConfiguration"),
    ],
    ids=["nested-too-deeply", "not-utf-8", "another-kind"],
)
def test_an_unreadable_scheduler_config_is_refused_naming_the_flag_and_the_problem(
    json_dump: Path, tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_bytes(content)
    settings = Settings(cluster_file=json_dump, scheduler_config=path)
    with pytest.raises(UsageError, match=re.escape(f"--scheduler-config: {path}")) as refused:
        build_source(settings, Metrics())
    assert message in str(refused.value)


def self_signed(where: Path, cert: str, key: str) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    command = ["openssl", "req", "-x509", "-days", "1", "-subj", "/CN=localhost", *ec]
    subprocess.run(
        [*command, "-keyout", key, "-out", cert], cwd=where, check=True, capture_output=True
    )


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cert.pem and its key.pem, another certificate's other-key.pem, and not-pem.json."""
    if shutil.which("openssl") is None:
        unavailable("openssl is needed to make a certificate")
    where = tmp_path_factory.mktemp("tls")
    self_signed(where, "cert.pem", "key.pem")
    self_signed(where, "other-cert.pem", "other-key.pem")
    (where / "not-pem.json").write_text(json.dumps(as_list(CLUSTER)))
    return where


@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        ("not-pem.json", "not-pem.json", "--tls-cert-file: {cert} holds no PEM certificate"),
        ("key.pem", "key.pem", "--tls-cert-file: {cert} holds no PEM certificate"),
        ("cert.pem", "not-pem.json", "--tls-key-file: {key} holds no unencrypted PEM private"),
        ("cert.pem", "other-key.pem", "--tls-key-file: {key} does not match the certificate in"),
    ],
    ids=["cert-not-pem", "cert-is-a-key", "key-not-pem", "key-of-another-cert"],
)
def test_serve_with_unusable_tls_files_exits_2_naming_the_flag_and_file(
    tls_files: Path,
    json_dump: Path,
    cert: str,
    key: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cert_file, key_file = tls_files / cert, tls_files / key
    args = ["--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file), "--port", "0"]
    assert main(["serve", "--cluster-file", str(json_dump), *args]) == 2
    assert message.format(cert=cert_file, key=key_file) in capsys.readouterr().err


def test_a_pem_certificate_and_its_key_pass_the_tls_check(tls_files: Path) -> None:
    check_tls(Settings(tls_cert_file=tls_files / "cert.pem", tls_key_file=tls_files / "key.pem"))


def _read_lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def test_serve_answers_kube_scheduler_logs_json_and_stops_on_sigterm(json_dump: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "phalanx.cli",
        "serve",
        "--cluster-file",
        str(json_dump),
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--log-level",
        "info",
    ]
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=clean_env()
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True).start()
    try:
        urls: dict[str, str] = {}
        logged: list[dict[str, Any]] = []
        while len(urls) < 2:
            record = json.loads(lines.get(timeout=20))
            logged.append(record)
            if record["msg"] in ("listening", "metrics listening"):
                urls[record["msg"]] = record["url"]
        assert {"ts", "level", "logger", "msg"} <= set(logged[0])
        base = urls["listening"]
        with httpx.Client(base_url=base, timeout=10, trust_env=False) as client:
            assert client.get("/readyz").json()["status"] == "ready"
            pod = pod_obj("pair-0", 4, group="pair")
            answer = client.post(
                "/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["gpu-1", "gpu-2"]}
            ).json()
            assert answer["NodeNames"], answer
        metrics = httpx.get(urls["metrics listening"], timeout=10, trust_env=False)
        assert "phalanx_reserved_gpus" in metrics.text
        assert "phalanx_event_loop_lag_seconds_count" in metrics.text
        # The model loaded at start leaves the collector's generations once synced.
        while not any(r["msg"] == "heap frozen after the initial sync" for r in logged):
            logged.append(json.loads(lines.get(timeout=20)))
        frozen = next(r for r in logged if r["msg"] == "heap frozen after the initial sync")
        assert frozen["objects"] > 0, frozen
        # ... and the collector runs rarely while serving (set before the first request).
        tuned = next(r for r in logged if r["msg"] == "garbage collector tuned for serving")
        assert tuned["thresholds"] == list(COLLECTOR_THRESHOLDS)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"phalanx {importlib.metadata.version('phalanx')}"


LOW_OPEN_FILES = 256
# `phalanx serve` started as a runtime would start it: with a low soft limit of open files.
LOW_LIMIT_LAUNCH = (
    "import resource, runpy, sys; "
    "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW_OPEN_FILES}, hard)); "
    "sys.argv[0] = 'phalanx'; "
    "runpy.run_module('phalanx.cli', run_name='__main__')"
)


def test_serve_raises_its_open_files_limit_to_the_hard_limit_for_held_binds(
    json_dump: Path,
) -> None:
    # kube-scheduler holds a connection per gang member waiting at /bind: a soft limit of
    # 1,024 (what runtimes commonly start containers with) would cap a gang near that.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard > LOW_OPEN_FILES, "this test needs a hard limit above its low soft limit"
    cmd = [sys.executable, "-c", LOW_LIMIT_LAUNCH, "serve", "--cluster-file", str(json_dump)]
    proc = subprocess.Popen(
        [*cmd, "--port", "0", "--log-level", "info"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True).start()
    try:
        record = json.loads(lines.get(timeout=20))
        while record["msg"] != "listening":
            record = json.loads(lines.get(timeout=20))
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        soft_now = next(ln for ln in limits.splitlines() if ln.startswith("Max open files"))
        assert soft_now.split()[3:5] == [str(hard), str(hard)], soft_now
        assert record["open_files_limit"] == hard
    finally:
        proc.kill()
        proc.wait()
