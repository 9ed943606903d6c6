"""Fixtures of the API tests: the anyio backend and a served small cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from api_harness import Phalanx, serve, small_cluster

from phalanx.service.extender import ServiceSettings


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def phalanx() -> AsyncIterator[Phalanx]:
    """Every feasible node in filter answers (single_pod_nodes=0), so the wire tests see the
    protocol whole; the one-best-node default is tested in test_filter_verb.py."""
    async with serve(small_cluster(), settings=ServiceSettings(single_pod_nodes=0)) as served:
        yield served
