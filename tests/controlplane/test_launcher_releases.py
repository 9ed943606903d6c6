"""Which binaries the launcher runs for which Kubernetes release (no processes started)."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path

import launcher  # tests/controlplane/launcher.py (this directory is on sys.path under pytest)
import pytest

VERSIONS = launcher.read_versions()
DEFAULT = VERSIONS["KUBE_VERSION"]
MIDDLE = VERSIONS["KUBE_136_VERSION"]
NEXT = VERSIONS["KUBE_NEXT_VERSION"]


def minor(version: str) -> str:
    return ".".join(version.removeprefix("v").split(".")[:2])


@pytest.mark.parametrize(
    ("asked", "resolved"),
    [
        (None, DEFAULT),
        (minor(DEFAULT), DEFAULT),
        (minor(MIDDLE), MIDDLE),
        (MIDDLE, MIDDLE),
        (minor(NEXT), NEXT),
        (f"v{minor(NEXT)}", NEXT),
        (NEXT, NEXT),
        (NEXT.removeprefix("v"), NEXT),
    ],
    ids=[
        "default",
        "default-minor",
        "1.36-minor",
        "1.36-exact",
        "next-minor",
        "next-v-minor",
        "next-exact",
        "next-no-v",
    ],
)
def test_a_release_is_named_by_its_minor_or_its_exact_pin(asked: str | None, resolved: str) -> None:
    assert launcher.kube_release(asked).version == resolved


@pytest.mark.parametrize(
    "asked",
    ["1.20", f"{NEXT}9", f"{MIDDLE}9", "latest"],
    ids=["unpinned-minor", "other-patch", "other-1.36-patch", "garbage"],
)
def test_a_release_that_is_not_pinned_is_refused_naming_the_pinned_ones(asked: str) -> None:
    pinned = f"{re.escape(DEFAULT)}, {re.escape(MIDDLE)}, {re.escape(NEXT)}"
    with pytest.raises(ValueError, match=f"not built here .*pins {pinned}"):
        launcher.kube_release(asked)


def test_every_pinned_release_has_native_gang_api_settings() -> None:
    assert set(launcher.kube_releases()) <= set(launcher.NATIVE_GANG_API)


def fake_tools(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("release", [MIDDLE, NEXT], ids=["1.36", "next"])
def test_a_newer_release_shares_etcd_and_kwok_with_the_default_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    monkeypatch.setenv("PHALANX_TOOLS_CACHE", str(tmp_path))
    monkeypatch.delenv("PHALANX_TOOLS_BIN", raising=False)
    default_bin = launcher.tools_bin_dir()
    next_bin = launcher.kube_release(release).bin_dir
    fake_tools(default_bin, *launcher.TOOL_NAMES)
    fake_tools(next_bin, *launcher.KUBE_TOOL_NAMES)

    tools = launcher.find_tools(kube_version=release)

    assert {name: path.parent for name, path in tools.items()} == {
        "etcd": default_bin,
        "kwok": default_bin,
        "kube-apiserver": next_bin,
        "kube-scheduler": next_bin,
    }
    assert all(p.parent == default_bin for p in launcher.find_tools().values())


@pytest.mark.parametrize(
    ("release", "family"), [(MIDDLE, "kube-136"), (NEXT, "kube-next")], ids=["1.36", "next"]
)
def test_a_missing_newer_build_names_the_family_that_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str, family: str
) -> None:
    monkeypatch.setenv("PHALANX_TOOLS_CACHE", str(tmp_path))
    monkeypatch.delenv("PHALANX_TOOLS_BIN", raising=False)
    fake_tools(launcher.tools_bin_dir(), *launcher.TOOL_NAMES)

    with pytest.raises(launcher.ToolsMissingError, match=re.escape(f"build-tools.sh {family}`")):
        launcher.find_tools(kube_version=release)


def test_a_ray_operator_build_without_its_crds_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_TOOLS_CACHE", str(tmp_path))
    fake_tools(tmp_path / f"kuberay-{VERSIONS['KUBERAY_VERSION']}" / "bin", "ray-operator")

    with pytest.raises(launcher.ToolsMissingError, match=re.escape("ray.io_rayclusters.yaml")):
        launcher.find_ray_operator()


@pytest.mark.parametrize(
    ("find", "binary", "family"),
    [
        (launcher.find_scheduler_plugins, "kube-scheduler-plugins", "scheduler-plugins"),
        (launcher.find_helm, "helm", "helm"),
    ],
    ids=["scheduler-plugins", "helm"],
)
def test_a_default_entry_tool_is_found_there_or_named_with_its_family(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    find: Callable[[], Path],
    binary: str,
    family: str,
) -> None:
    monkeypatch.setenv("PHALANX_TOOLS_CACHE", str(tmp_path))
    monkeypatch.delenv("PHALANX_TOOLS_BIN", raising=False)
    with pytest.raises(launcher.ToolsMissingError, match=re.escape(f"build-tools.sh {family}`")):
        find()

    fake_tools(launcher.tools_bin_dir(), binary)

    assert find() == launcher.tools_bin_dir() / binary
