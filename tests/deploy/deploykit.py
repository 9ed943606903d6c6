"""Helpers of the deployment tests: find helm/promtool, render the chart, pick objects.

helm and promtool are built from pinned Go modules by
``tests/controlplane/build-tools.sh --with-deploy-tools`` into the same cache as the
control-plane binaries (a ``helm``/``promtool`` on PATH is the fallback).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controlplane"))

# tests/controlplane/launcher.py; conftest.py takes it from here (`as`: an explicit re-export)
import launcher as launcher  # noqa: PLC0414

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "phalanx"
DEPLOY = REPO / "deploy"
RELEASE = "phalanx"
NAMESPACE = "phalanx-system"
# The release the tests run (tests/controlplane/versions.env), for which deploy/render.sh
# renders deploy/manifests: the chart's kube-scheduler follows the cluster's version.
VERSIONS = dict(
    line.split("=", 1)
    for line in (REPO / "tests/controlplane/versions.env").read_text().splitlines()
    if line and not line.startswith("#")
)
TESTED_KUBE_VERSION = VERSIONS["KUBE_VERSION"]

Doc = dict[str, Any]


def find_tool(name: str) -> Path | None:
    """The pinned build of ``name``, else one on PATH, else None."""
    built = launcher.tools_bin_dir() / name
    if os.access(built, os.X_OK):
        return built
    found = shutil.which(name)
    return Path(found) if found else None


def run(argv: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a tool; never raises on a non-zero exit (the caller asserts on it)."""
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, timeout=120, **kwargs
    )


class Chart:
    """``helm template`` / ``helm lint`` of helm/phalanx with a values override."""

    def __init__(self, helm: Path, tmp: Path) -> None:
        self.helm = helm
        self.tmp = tmp
        self._rendered: dict[str, list[Doc]] = {}
        self._files = 0

    def _values_file(self, values: Mapping[str, Any]) -> Path:
        self._files += 1
        path = self.tmp / f"values-{self._files}.yaml"
        path.write_text(yaml.safe_dump(dict(values)))
        return path

    def template(
        self, values: Mapping[str, Any] | None = None, *extra: str
    ) -> subprocess.CompletedProcess[str]:
        argv: list[str | Path] = [self.helm, "template", RELEASE, CHART, "--namespace", NAMESPACE]
        if values:
            argv += ["--values", self._values_file(values)]
        return run([*argv, *extra])

    def render(self, values: Mapping[str, Any] | None = None) -> list[Doc]:
        """The rendered objects for a cluster of the tested release, as deploy/render.sh
        renders them (fails the test if rendering fails). Cached per values."""
        key = yaml.safe_dump(dict(values or {}))
        if key not in self._rendered:
            proc = self.template(values, "--kube-version", TESTED_KUBE_VERSION)
            assert proc.returncode == 0, proc.stderr
            self._rendered[key] = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return self._rendered[key]

    def lint(self, values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        argv: list[str | Path] = [self.helm, "lint", "--strict", CHART, "--namespace", NAMESPACE]
        if values:
            argv += ["--values", self._values_file(values)]
        return run(argv)


def one(docs: list[Doc], kind: str, name_suffix: str = "") -> Doc:
    """The single object of ``kind`` (whose name ends with ``name_suffix``)."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {len(found)}"
    return found[0]


def scheduler_config(docs: list[Doc]) -> Doc:
    """The KubeSchedulerConfiguration inside the chart's ConfigMap."""
    cm = one(docs, "ConfigMap", "-scheduler-config")
    config = yaml.safe_load(cm["data"]["kube-scheduler.yaml"])
    assert isinstance(config, dict)
    return config


def container(docs: list[Doc], name: str) -> Doc:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    found = [c for c in pod["containers"] if c["name"] == name]
    assert len(found) == 1, f"no container {name}"
    return cast(Doc, found[0])


def env_of(c: Doc) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
