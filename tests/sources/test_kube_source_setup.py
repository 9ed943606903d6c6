"""Building the live source from a kubeconfig: where its Lease lives, what it exports."""

from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from source_fakes import FakeApi

from phalanx.service.metrics import Metrics
from phalanx.sources.kube import KubeSource
from phalanx.sources.kube_writes import AsyncWriter


def kubeconfig(tmp_path: Path, contexts: dict[str, str | None], current: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})},
            }
            for name, ns in contexts.items()
        ],
        "current-context": current,
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    ("context", "explicit", "expected"),
    [
        (None, None, "team-a"),  # the current context's namespace, as kubectl uses it
        ("other", None, "default"),  # a context without one: "default"
        ("other", "ops", "ops"),  # an explicit namespace wins
    ],
    ids=["current-context", "context-without-namespace", "explicit"],
)
def test_the_lease_lives_in_the_kubeconfig_contexts_namespace(
    tmp_path: Path, context: str | None, explicit: str | None, expected: str
) -> None:
    path = kubeconfig(tmp_path, {"main": "team-a", "other": None}, current="main")
    source = KubeSource.from_kubeconfig(path, context=context, namespace=explicit)
    assert source.namespace == expected


def api_client_series(metrics: Metrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("phalanx_api_client_")]


def test_a_source_writing_through_the_async_client_exports_its_counts(tmp_path: Path) -> None:
    metrics = Metrics()
    source = KubeSource.from_kubeconfig(
        kubeconfig(tmp_path, {"main": None}, current="main"), metrics=metrics
    )
    assert isinstance(source.writer, AsyncWriter)
    # Before its first write the client is not made yet: every count reads 0.
    assert "phalanx_api_client_attempts_total 0.0" in api_client_series(metrics)
    assert 'phalanx_api_client_slot_wait_seconds_total{lane="bind"} 0.0' in (
        api_client_series(metrics)
    )


def test_a_source_writing_through_the_thread_pool_exports_no_client_counts() -> None:
    metrics = Metrics()
    KubeSource(FakeApi({}), metrics=metrics)
    assert api_client_series(metrics) == []
