"""The async writer's counts: the ones its client keeps, once the client is made."""

import pytest

from builders import cluster_access
from phalanx.sources.kube_writes import AsyncWriter

pytestmark = pytest.mark.anyio

ACCESS = cluster_access("https://api.test")


def test_the_writer_counts_nothing_before_its_client_is_made() -> None:
    assert AsyncWriter(ACCESS).counts().attempts == 0


async def test_the_writer_counts_are_its_clients_own() -> None:
    writer = AsyncWriter(ACCESS)
    writer.client.counts.throttled += 3  # as a 429 answer would
    try:
        assert writer.counts() is writer.client.counts
        assert writer.counts().throttled == 3
    finally:
        await writer.aclose()
