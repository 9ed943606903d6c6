"""The async writer's counts: the ones its client keeps, once the client is made."""

import asyncio

from phalanx.sources.kube_writes import AsyncWriter
from phalanx.sources.kubeclient import ClusterAccess

ACCESS = ClusterAccess(
    host="https://api.test",
    ca_file=None,
    cert_file=None,
    key_file=None,
    verify=True,
    tls_server_name=None,
    proxy=None,
    authorization=lambda: "",
)


def test_the_writer_counts_nothing_before_its_client_is_made() -> None:
    assert AsyncWriter(ACCESS).counts().attempts == 0


def test_the_writer_counts_are_its_clients_own() -> None:
    async def run() -> None:
        writer = AsyncWriter(ACCESS)
        writer.client.counts.throttled += 3  # as a 429 answer would
        try:
            assert writer.counts() is writer.client.counts
            assert writer.counts().throttled == 3
        finally:
            await writer.aclose()

    asyncio.run(run())
