"""Shared test setup: make the helpers in `tests/` importable by bare name (`builders`,
`clocks`, ...), keep logging as found."""

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

# No Hypothesis deadlines: on a shared, loaded machine they make properties timed tests,
# and speed goals live in bench/. Example counts stay as each test sets them.
settings.register_profile("phalanx", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("phalanx")


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio: the service is built for one asyncio event loop."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """The CLI and `logs.configure` set process-wide logging; leave it as it was."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    # uvicorn's access switch is this logger's (`phalanx.api.server.make_server`).
    access = logging.getLogger("uvicorn.access")
    access_state = access.level, list(access.handlers), access.propagate
    yield
    root.setLevel(level)
    root.handlers[:] = handlers
    access.level, access.handlers[:], access.propagate = access_state
