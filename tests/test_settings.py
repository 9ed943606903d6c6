"""Settings: PHALANX_* environment, flags over environment, clear errors for bad combinations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from builders import node_obj, pod_obj
from phalanx.cli import build_parser, settings_from_args
from phalanx.core.model import Placement, PolicyKind
from phalanx.settings import Settings, describe_error, flag


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PHALANX_* variable of the surrounding shell leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("PHALANX_"):
            monkeypatch.delenv(name)


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    return path


def serve_settings(*flags: str) -> Settings:
    return settings_from_args(build_parser().parse_args(["serve", *flags]))


def error_text(**values: Any) -> str:
    with pytest.raises(ValidationError) as info:
        Settings(**values)
    return describe_error(info.value)


def test_defaults_are_the_documented_ones() -> None:
    s = Settings()
    assert (s.host, s.port, s.scheduler_names, s.default_placement) == (
        "127.0.0.1",
        8888,
        ["phalanx"],
        "pack",
    )
    assert (s.reservation_ttl_seconds, s.barrier_timeout_seconds, s.log_level) == (60, 20.0, "info")
    assert s.max_body_bytes == 64 << 20
    assert s.metrics_address is None
    assert s.cluster_sources() == []


def test_environment_variables_are_read(
    monkeypatch: pytest.MonkeyPatch, cluster_file: Path
) -> None:
    monkeypatch.setenv("PHALANX_CLUSTER_FILE", str(cluster_file))
    monkeypatch.setenv("PHALANX_PORT", "9001")
    monkeypatch.setenv("PHALANX_METRICS_PORT", "9090")
    monkeypatch.setenv("PHALANX_SCHEDULER_NAMES", "phalanx, gpu-scheduler")
    monkeypatch.setenv("PHALANX_DEFAULT_PLACEMENT", "domain:topology.kubernetes.io/zone")
    monkeypatch.setenv("PHALANX_BARRIER_TIMEOUT_SECONDS", "7.5")
    monkeypatch.setenv("PHALANX_LOG_LEVEL", "DEBUG")
    s = Settings()
    assert s.cluster_file == cluster_file
    assert s.port == 9001
    assert s.metrics_address == ("127.0.0.1", 9090)
    assert s.scheduler_names == ["phalanx", "gpu-scheduler"]
    assert s.placement == Placement(PolicyKind.DOMAIN, "topology.kubernetes.io/zone")
    assert s.barrier_timeout_seconds == 7.5
    assert s.log_level == "debug"


def test_flags_override_the_environment(
    monkeypatch: pytest.MonkeyPatch, cluster_file: Path
) -> None:
    monkeypatch.setenv("PHALANX_PORT", "9001")
    monkeypatch.setenv("PHALANX_SCHEDULER_NAMES", "from-env")
    monkeypatch.setenv("PHALANX_RESERVATION_TTL_SECONDS", "120")
    monkeypatch.setenv("PHALANX_NOMINATE_MEMBERS", "true")
    s = serve_settings(
        "--cluster-file",
        str(cluster_file),
        "--port",
        "9002",
        "--scheduler-name",
        "a",
        "--scheduler-name",
        "b",
        "--no-nominate-members",
    )
    assert s.port == 9002
    assert s.scheduler_names == ["a", "b"]
    assert s.nominate_members is False
    assert s.reservation_ttl_seconds == 120  # no flag given: the environment still applies


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_a_serve_flag(name: str) -> None:
    value = [] if Settings.model_fields[name].annotation is bool else ["x"]
    args = build_parser().parse_args(["serve", flag(name), *value])
    assert hasattr(args, name)


@pytest.mark.parametrize(
    "name", sorted(n for n, f in Settings.model_fields.items() if f.annotation is bool)
)
def test_every_true_false_setting_has_a_flag_for_each_value(name: str) -> None:
    # A setting that defaults to true must be turnable off by flag too.
    no_flag = "--no-" + flag(name).removeprefix("--")
    assert getattr(serve_settings(flag(name)), name) is True
    assert getattr(serve_settings(no_flag), name) is False


def test_service_settings_carry_the_tuning() -> None:
    s = Settings(default_placement="spread", reservation_ttl_seconds=90, barrier_timeout_seconds=15)
    svc = s.service_settings()
    assert svc.default_placement == Placement(PolicyKind.SPREAD)
    assert (svc.default_timeout_seconds, svc.barrier_timeout_seconds) == (90, 15)


def test_status_and_events_wait_up_to_five_seconds_for_the_bindings_by_default() -> None:
    assert Settings().service_settings().report_hold_seconds == 5.0
    assert Settings(report_hold_seconds=0).service_settings().report_hold_seconds == 0.0


@pytest.mark.parametrize("hold", ["-1", "nan", "inf", "soon"])
def test_a_report_hold_that_is_not_a_finite_number_of_seconds_is_refused(hold: str) -> None:
    parsed: dict[str, Any] = {"report_hold_seconds": hold}  # as from the environment
    with pytest.raises(ValidationError, match="report_hold_seconds"):
        Settings(**parsed)


@pytest.mark.parametrize(
    ("variable", "field"),
    [
        ("PHALANX_NOMINATE_MEMBERS", "nominate_members"),
        ("PHALANX_COMPLETE_MEMBERS", "complete_members"),
    ],
)
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(None, True, id="default"),
        pytest.param("true", True, id="true"),
        pytest.param("false", False, id="false"),
    ],
)
def test_a_member_switch_comes_from_the_environment_and_reaches_the_service(
    monkeypatch: pytest.MonkeyPatch, variable: str, field: str, env: str | None, expected: bool
) -> None:
    if env is not None:
        monkeypatch.setenv(variable, env)
    s = Settings()
    assert getattr(s, field) is expected
    assert getattr(s.service_settings(), field) is expected


@pytest.mark.parametrize(
    ("env", "flags", "expected"),
    [
        # kube-scheduler 1.36+ serves extended resources from DRA devices by default.
        pytest.param(None, (), True, id="default"),
        pytest.param("false", (), False, id="env-off"),
        pytest.param("false", ("--dra-extended-resources",), True, id="flag-over-env"),
        pytest.param(None, ("--no-dra-extended-resources",), False, id="flag-off"),
    ],
)
def test_whether_kube_scheduler_serves_extended_resources_from_dra_is_a_setting(
    monkeypatch: pytest.MonkeyPatch, env: str | None, flags: tuple[str, ...], expected: bool
) -> None:
    if env is not None:
        monkeypatch.setenv("PHALANX_DRA_EXTENDED_RESOURCES", env)
    assert serve_settings(*flags).dra_extended_resources is expected


def test_a_bad_dra_extended_resources_value_names_the_flag_and_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PHALANX_DRA_EXTENDED_RESOURCES", "auto")
    with pytest.raises(ValidationError) as info:
        Settings()
    assert (
        "--dra-extended-resources / PHALANX_DRA_EXTENDED_RESOURCES: Input should be a valid "
        "boolean" in describe_error(info.value)
    )


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"kubeconfig": "kc", "in_cluster": True},
            "choose one cluster source, not --kubeconfig and --in-cluster",
        ),
        (
            {"cluster_file": "does-not-exist.yaml"},
            "--cluster-file: does-not-exist.yaml is not a readable file",
        ),
        (
            {"barrier_timeout_seconds": 0},
            "--barrier-timeout-seconds / PHALANX_BARRIER_TIMEOUT_SECONDS: must be > 0",
        ),
        ({"barrier_timeout_seconds": 60}, "must be below --reservation-ttl-seconds (60)"),
        (
            {"reservation_ttl_seconds": 0},
            "--reservation-ttl-seconds / PHALANX_RESERVATION_TTL_SECONDS",
        ),
        ({"default_placement": "nearby"}, "--default-placement / PHALANX_DEFAULT_PLACEMENT"),
        ({"port": 70000}, "--port / PHALANX_PORT: Input should be less than or equal to 65535"),
        ({"metrics_host": "0.0.0.0"}, "--metrics-host needs --metrics-port"),
        ({"metrics_port": 8888}, "--metrics-port 8888 is the extender's own address"),
        ({"log_level": "loud"}, "--log-level / PHALANX_LOG_LEVEL"),
        (
            {"scheduler_names": " , "},
            "--scheduler-name / PHALANX_SCHEDULER_NAMES: name at least one",
        ),
        (
            {"topologies": "rack=kubernetes.io/hostname,example.com/rack"},
            "--topologies / PHALANX_TOPOLOGIES: topology configuration: topology rack: "
            "kubernetes.io/hostname can only be the narrowest level",
        ),
        (
            {"topologies": "a=x.io/row;x.io/rack"},
            '--topologies / PHALANX_TOPOLOGIES: topology configuration: entry 2 ("x.io/rack") '
            "needs a name",
        ),
        ({"api_qps": "inf"}, "--api-qps / PHALANX_API_QPS: Input should be a finite number"),
        (
            {"barrier_timeout_seconds": "inf"},
            "--barrier-timeout-seconds / PHALANX_BARRIER_TIMEOUT_SECONDS: Input should be a "
            "finite number",
        ),
    ],
    ids=[
        "two-sources",
        "missing-cluster-file",
        "zero-barrier",
        "barrier-outlives-ttl",
        "zero-ttl",
        "unknown-placement",
        "port-range",
        "metrics-host-alone",
        "metrics-on-extender-port",
        "log-level",
        "no-scheduler-name",
        "hostname-not-narrowest",
        "unnamed-second-topology",
        "infinite-api-qps",
        "infinite-barrier",
    ],
)
def test_invalid_settings_name_the_flag_and_the_problem(
    values: dict[str, Any], expected: str
) -> None:
    assert expected in error_text(**values)


def test_topologies_come_from_the_environment_one_entry_per_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "PHALANX_TOPOLOGIES", "default=x.io/row,x.io/rack\ncpu=x.io/zone,kubernetes.io/hostname\n"
    )
    topologies = Settings().service_settings().topologies
    assert [t.name for t in topologies.all] == ["default", "cpu"]
    assert topologies.default.levels == ("x.io/row", "x.io/rack")


def test_without_topologies_the_default_one_is_spine_leaf_clique_host() -> None:
    assert Settings().service_settings().topologies.default.levels == (
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/leaf",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    )


def test_simulate_takes_the_topologies_too(cluster_file: Path) -> None:
    args = build_parser().parse_args(
        ["simulate", str(cluster_file), "--topologies", "default=x.io/rack"]
    )
    assert settings_from_args(args).topology_config.default.levels == ("x.io/rack",)


def test_tls_needs_both_files(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    assert "TLS needs both --tls-cert-file and --tls-key-file" in error_text(tls_cert_file=cert)
    assert "--tls-key-file: " in error_text(
        tls_cert_file=cert, tls_key_file=tmp_path / "missing.key"
    )


def test_an_invalid_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_PORT", "eighty")
    with pytest.raises(ValidationError) as info:
        Settings()
    assert "--port / PHALANX_PORT" in describe_error(info.value)


def test_the_default_body_limit_admits_a_5000_node_nodelist() -> None:
    """kube-scheduler with nodeCacheCapable: false sends every node in full."""
    node = node_obj("gpu-node-0000", labels={f"example.com/label-{i}": "value" for i in range(20)})
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}] * 4
    # kubelet reports at most 50 images per node (nodeStatusMaxImages): the realistic worst case.
    node["status"]["images"] = [
        {"names": [f"registry.example.com/team/image-{i}@sha256:{'0' * 64}"], "sizeBytes": 1 << 30}
        for i in range(50)
    ]
    body = {"Pod": pod_obj("p"), "Nodes": {"items": [node] * 5000}, "NodeNames": None}
    size = len(orjson.dumps(body))
    assert size > 32 << 20, "the sample node is unrealistically small"
    assert size < Settings().max_body_bytes
