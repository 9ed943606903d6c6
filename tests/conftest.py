"""Shared test setup: make `tests/builders.py` importable as `builders`."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio: the service is built for one asyncio event loop."""
    return "asyncio"
