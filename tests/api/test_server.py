"""The HTTP server kube-scheduler calls: real uvicorn on a loopback port, spoken to over a
raw keep-alive connection, as Go's `http.Transport` speaks to it."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal

import pytest
from api_harness import fixture_bytes, small_cluster

from phalanx import logs
from phalanx.api.app import create_app
from phalanx.api.server import make_server, serve, serving
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


async def access_lines_of_one_filter(level: str) -> list[dict[str, object]]:
    """Run `serve` as `phalanx serve` does with a metrics port (the chart's way), at
    `level`, until SIGTERM; the access lines one `/filter` wrote."""
    out = io.StringIO()
    logs.configure(level, out)
    extender = Extender(ClusterFileSource(small_cluster()))
    served = asyncio.create_task(
        serve(extender, host="127.0.0.1", port=0, metrics_address=("127.0.0.1", 0))
    )
    while "listening" not in out.getvalue():
        await asyncio.sleep(0.01)
    url = next(
        line["url"]
        for line in map(json.loads, out.getvalue().splitlines())
        if line["msg"] == "listening"
    )
    host, port = str(url).removeprefix("http://").split(":")
    reader, writer = await connect(host, int(port))
    try:
        assert await post_filter(reader, writer) == b"HTTP/1.1 200 OK"
    finally:
        writer.close()
    # Answered: `serve` is inside its signal handlers, so this stops it, not the test run.
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(served, 10) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "uvicorn.access"]


async def connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection once the server accepts them (it logs its address just before)."""
    for _ in range(500):
        try:
            return await asyncio.open_connection(host, port)
        except ConnectionRefusedError:
            await asyncio.sleep(0.01)
    raise AssertionError(f"nothing accepted connections on {host}:{port}")


async def test_at_debug_each_request_gets_an_access_line_even_beside_a_metrics_server() -> None:
    # The metrics server once turned uvicorn's access logger off for the whole process.
    (line,) = await access_lines_of_one_filter("debug")
    assert (line["method"], line["path"], line["status"]) == ("POST", "/filter", 200)


async def test_at_info_no_access_line_is_made_at_all() -> None:
    assert await access_lines_of_one_filter("info") == []
    app = create_app(Extender(ClusterFileSource(small_cluster())))
    assert make_server(app).config.access_log is False  # its arguments are not formatted either
