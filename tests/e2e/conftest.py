"""Fixtures for the real-control-plane tier (DESIGN.md §9, tier 3).

The control plane (etcd + kube-apiserver + kwok, kube-scheduler on demand) is started
once per session from the binaries that ``tests/controlplane/build-tools.sh`` builds.
Without them the e2e tests are skipped, unless ``PHALANX_REQUIRE_E2E=1`` (CI): then
missing binaries are an error, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controlplane"))

import launcher  # tests/controlplane/launcher.py

# The session's running control plane, for failure reports.
_CONTROL_PLANE = pytest.StashKey[launcher.ControlPlane]()
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
    cp = item.config.stash.get(_CONTROL_PLANE, None)
    if report.failed and cp is not None and item.get_closest_marker("e2e"):
        report.sections.append(("control plane logs (tails)", cp.log_tails(lines=30)))


def _require_e2e() -> bool:
    return os.environ.get("PHALANX_REQUIRE_E2E", "") not in ("", "0")


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """The session's control plane.

    Skipped without the binaries, or an error when PHALANX_REQUIRE_E2E=1.
    """
    try:
        launcher.find_tools()
    except launcher.ToolsMissingError as exc:
        if _require_e2e():
            pytest.fail(f"PHALANX_REQUIRE_E2E is set, but {exc}", pytrace=False)
        pytest.skip(f"e2e control plane unavailable: {exc}")
    cp = launcher.ControlPlane()
    cp.start()
    pytestconfig.stash[_CONTROL_PLANE] = cp
    try:
        yield cp
    finally:
        del pytestconfig.stash[_CONTROL_PLANE]
        cp.stop()


@pytest.fixture
def namespace(control_plane: launcher.ControlPlane) -> Iterator[str]:
    """A fresh namespace; its pods are force-deleted afterwards (freeing the nodes' GPUs).

    The namespace itself stays Terminating: no kube-controller-manager finalises it.
    """
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    status, answer = control_plane.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    assert status == 201, answer
    try:
        yield name
    finally:
        core = control_plane.core_v1()
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)


@pytest.fixture
def gpu_nodes(control_plane: launcher.ControlPlane) -> Iterator[Callable[..., dict[str, Any]]]:
    """``gpu_nodes(name, **kwargs)``: ``ControlPlane.create_gpu_node``, deleted after the test."""
    created: list[str] = []

    def make(name: str, **kwargs: Any) -> dict[str, Any]:
        created.append(name)
        return control_plane.create_gpu_node(name, **kwargs)

    yield make
    core = control_plane.core_v1()
    for name in created:
        with contextlib.suppress(Exception):  # best-effort cleanup
            core.delete_node(name)
