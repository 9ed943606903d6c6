"""Fixtures of the API tests: the anyio backend and a served small cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from api_harness import Phalanx, serve, small_cluster


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def phalanx() -> AsyncIterator[Phalanx]:
    async with serve(small_cluster()) as served:
        yield served
