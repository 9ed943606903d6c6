"""Starting a real control plane for a session or a module, as the e2e fixtures do.

Every plane started here is known by the fixture name it serves, so a failing test's report
carries the tails of its plane's logs (conftest's `pytest_runtest_makereport`). Without the
binaries a plane's tests are skipped, unless PHALANX_REQUIRE_E2E=1 (CI): then the missing
binaries are an error, never a skip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest

import tiers

#: The running control planes by the fixture name they serve, innermost last: a module's
#: plane may shadow the session's of the same name for a while.
RUNNING = pytest.StashKey[dict[str, list[launcher.ControlPlane]]]()
_T = TypeVar("_T")


def skip_without_tools(find: Callable[[], _T]) -> _T:
    """``find()`` (a tool lookup); without the tools, skip, or fail when CI requires them."""
    try:
        return find()
    except launcher.ToolsMissingError as exc:
        if tiers.required():
            pytest.fail(f"PHALANX_REQUIRE_E2E is set, but {exc}", pytrace=False)
        pytest.skip(f"e2e tools unavailable: {exc}")


@contextlib.contextmanager
def started(config: pytest.Config, name: str, **kwargs: Any) -> Iterator[launcher.ControlPlane]:
    """A running ``ControlPlane(**kwargs)``, serving fixture ``name``; stopped on exit."""
    skip_without_tools(lambda: launcher.find_tools(kube_version=kwargs.get("kube_version")))
    cp = launcher.ControlPlane(**kwargs)
    cp.start()
    planes = config.stash.setdefault(RUNNING, {}).setdefault(name, [])
    planes.append(cp)
    try:
        yield cp
    finally:
        planes.remove(cp)
        cp.stop()


def running(config: pytest.Config, name: str) -> launcher.ControlPlane | None:
    """The plane now serving fixture ``name``, if one runs."""
    planes = config.stash.get(RUNNING, {}).get(name, [])
    return planes[-1] if planes else None
