"""The HTTP server kube-scheduler calls: real uvicorn on a loopback port, spoken to over a
raw keep-alive connection, as Go's `http.Transport` speaks to it."""

from __future__ import annotations

import asyncio

import pytest
from api_harness import fixture_bytes, small_cluster

from phalanx.api.server import serving
from phalanx.service.extender import Extender
from phalanx.sources.clusterfile import ClusterFileSource

pytestmark = pytest.mark.anyio

# Longer than uvicorn's own default (5 s), after which it closed idle connections.
IDLE_SECONDS = 6.0


async def post_filter(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    body = fixture_bytes("filter_nodenames.json")
    writer.write(
        b"POST /filter HTTP/1.1\r\nHost: phalanx\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return head.split(b"\r\n", 1)[0]


async def test_an_idle_kube_scheduler_connection_is_kept_open_for_its_next_request() -> None:
    # Go keeps an idle connection 90 s and never retries a POST the server closed under it:
    # the server must not be the one to close first.
    async with serving(Extender(ClusterFileSource(small_cluster()))) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            assert await post_filter(reader, writer) == b"HTTP/1.1 200 OK"

            await asyncio.sleep(IDLE_SECONDS)

            assert not reader.at_eof()
            assert await post_filter(reader, writer) == b"HTTP/1.1 200 OK"
        finally:
            writer.close()
