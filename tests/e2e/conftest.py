"""Fixtures for the real-control-plane tier (DESIGN.md §9, tier 3).

The control plane (etcd + kube-apiserver + kwok, kube-scheduler on demand) is started
once per session from the binaries that ``tests/controlplane/build-tools.sh`` builds.
Without them the e2e tests are skipped, unless ``PHALANX_REQUIRE_E2E=1`` (CI): then
missing binaries are an error, never a skip.

* ``control_plane``: the default release (``KUBE_VERSION``), with ``namespace`` and
  ``gpu_nodes`` on it.
* ``control_plane_136``: Kubernetes 1.36 with the upstream gang API on (``GenericWorkload``,
  ``scheduling.k8s.io/v1alpha2`` served; ``GangScheduling`` too on kube-scheduler), started
  for each module that asks for it (one does) and stopped after it. No scheduler runs until
  the test starts one.
* ``control_plane_137``: Kubernetes 1.37 with the upstream gang API on (``GenericWorkload``,
  ``scheduling.k8s.io/v1beta1`` served, the gate on kube-scheduler too), started only when a
  test asks for it; ``namespace_137`` and ``gpu_nodes_137`` on it. No scheduler runs until the
  test starts one.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controlplane"))

import launcher  # tests/controlplane/launcher.py
import planes

_E2E_DIR = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "e2e: runs against a real control plane (etcd, kube-apiserver, kube-scheduler, kwok) "
        "built by tests/controlplane/build-tools.sh",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything under tests/e2e is e2e, marked or not (so `-m "not e2e"` deselects it all).
    for item in items:
        if _E2E_DIR in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed or not item.get_closest_marker("e2e"):
        return
    for name in getattr(item, "fixturenames", ()):
        cp = planes.running(item.config, name)
        if cp is not None:
            report.sections.append((f"{name} logs (tails)", cp.log_tails(lines=30)))


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """The session's control plane.

    Skipped without the binaries, or an error when PHALANX_REQUIRE_E2E=1.
    """
    with planes.started(pytestconfig, "control_plane") as cp:
        yield cp


def serving_gang_api(
    pytestconfig: pytest.Config, name: str, version: str
) -> contextlib.AbstractContextManager[launcher.ControlPlane]:
    """A control plane on Kubernetes `version` with its upstream gang API served
    (`launcher.NATIVE_GANG_API`: 1.36's scheduling.k8s.io/v1alpha2, 1.37's v1beta1), its
    kube-scheduler (when a test starts one) with the same gates."""
    api = launcher.NATIVE_GANG_API[version]
    return planes.started(
        pytestconfig,
        name,
        kube_version=version,
        apiserver_feature_gates=api.apiserver_feature_gates,
        runtime_config=api.runtime_config,
        scheduler_feature_gates=api.scheduler_feature_gates,
    )


@pytest.fixture(scope="module")
def control_plane_136(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """A control plane on Kubernetes 1.36 serving the upstream gang API, for the module:
    one module uses it, so it is not left idle for the rest of the session.

    Its kube-scheduler (when a test starts one) runs with the same gates. Skipped without the
    1.36 binaries (``build-tools.sh kube-136``), or an error when PHALANX_REQUIRE_E2E=1.
    """
    with serving_gang_api(pytestconfig, "control_plane_136", "1.36") as cp:
        yield cp


@pytest.fixture(scope="session")
def control_plane_137(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """A control plane on Kubernetes 1.37 serving the upstream gang API, for the session.

    Its kube-scheduler (when a test starts one) runs with the same gate. Skipped without the
    1.37 binaries (``build-tools.sh kube-next``), or an error when PHALANX_REQUIRE_E2E=1.
    """
    with serving_gang_api(pytestconfig, "control_plane_137", "1.37") as cp:
        yield cp


@pytest.fixture(scope="session")
def controller_manager_tool() -> Path:
    """kube-controller-manager of the default release (``build-tools.sh
    kube-controller-manager``). Skipped without it, or an error when PHALANX_REQUIRE_E2E=1.
    """
    return planes.skip_without_tools(launcher.find_controller_manager)


@pytest.fixture(scope="session")
def scheduler_plugins_tool() -> Path:
    """scheduler-plugins' kube-scheduler (``build-tools.sh scheduler-plugins``), the build of
    the chart's ``kubeScheduler.coschedulingImage``. Skipped without it, or an error when
    PHALANX_REQUIRE_E2E=1.
    """
    return planes.skip_without_tools(launcher.find_scheduler_plugins)


@pytest.fixture(scope="session")
def helm_tool() -> Path:
    """The pinned helm (``build-tools.sh helm``). Skipped without it, or an error when
    PHALANX_REQUIRE_E2E=1.
    """
    return planes.skip_without_tools(launcher.find_helm)


@pytest.fixture(scope="session")
def ray_operator_tools() -> launcher.RayOperatorTools:
    """KubeRay's ray-operator binary and CRDs (``build-tools.sh ray-operator``).

    Skipped without them, or an error when PHALANX_REQUIRE_E2E=1.
    """
    return planes.skip_without_tools(launcher.find_ray_operator)


def _fresh_namespace(cp: launcher.ControlPlane) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    status, answer = cp.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    assert status == 201, answer
    try:
        yield name
    finally:
        core = cp.core_v1()
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)


def _node_maker(cp: launcher.ControlPlane) -> Iterator[Callable[..., dict[str, Any]]]:
    created: list[str] = []

    def make(name: str, **kwargs: Any) -> dict[str, Any]:
        created.append(name)
        return cp.create_gpu_node(name, **kwargs)

    yield make
    core = cp.core_v1()
    for name in created:
        with contextlib.suppress(Exception):  # best-effort cleanup
            core.delete_node(name)


@pytest.fixture
def namespace(control_plane: launcher.ControlPlane) -> Iterator[str]:
    """A fresh namespace; its pods are force-deleted afterwards (freeing the nodes' GPUs).

    The namespace itself stays Terminating: no kube-controller-manager finalises it.
    """
    yield from _fresh_namespace(control_plane)


@pytest.fixture
def gpu_nodes(control_plane: launcher.ControlPlane) -> Iterator[Callable[..., dict[str, Any]]]:
    """``gpu_nodes(name, **kwargs)``: ``ControlPlane.create_gpu_node``, deleted after the test."""
    yield from _node_maker(control_plane)


@pytest.fixture
def namespace_137(control_plane_137: launcher.ControlPlane) -> Iterator[str]:
    """``namespace`` on the 1.37 control plane."""
    yield from _fresh_namespace(control_plane_137)


@pytest.fixture
def gpu_nodes_137(
    control_plane_137: launcher.ControlPlane,
) -> Iterator[Callable[..., dict[str, Any]]]:
    """``gpu_nodes`` on the 1.37 control plane."""
    yield from _node_maker(control_plane_137)
