"""Fixtures for the deployment artefacts: the Helm chart, deploy/, the alert rules, the image.

Tests that need helm or promtool are skipped without them, unless ``PHALANX_REQUIRE_E2E=1``
(CI): then a missing tool is a failure, never a skip — the convention of
``tests/e2e/conftest.py``. Build both with ``bash tests/controlplane/build-tools.sh helm
promtool`` (or ``--with-deploy-tools``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deploykit import Chart, find_tool, launcher

from tiers import unavailable


def _tool(name: str) -> Path:
    path = find_tool(name)
    if path is None:
        why = (
            f"{name} not found in {launcher.tools_bin_dir()} or on PATH; build it with "
            f"`bash tests/controlplane/build-tools.sh {name}`"
        )
        unavailable(why)
    return path


@pytest.fixture(scope="session")
def helm() -> Path:
    return _tool("helm")


@pytest.fixture(scope="session")
def promtool() -> Path:
    return _tool("promtool")


@pytest.fixture(scope="session")
def chart(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Chart:
    return Chart(helm, tmp_path_factory.mktemp("chart"))
