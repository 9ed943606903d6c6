"""Each answer leaves in one write: uvicorn's own protocol, answering through a transport
that joins the writes one loop step makes (kube-scheduler is then woken once per answer)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from api_harness import small_cluster
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from phalanx.api.one_write import OneWriteHttpProtocol, OneWriteTransport
from phalanx.api.server import serving
from phalanx.service.extender import Extender
from phalanx.sources.clusterfile import ClusterFileSource

pytestmark = pytest.mark.anyio

BODY = b'{"nodenames":["n1"]}'


class Socket(asyncio.Transport):
    """The socket under the transport: records each write, as each would be one send."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 10250) if name in ("peername", "sockname") else default

    def get_write_buffer_size(self) -> int:
        return 0


async def answer(request: Request) -> Response:
    await request.body()
    return Response(BODY, media_type="application/json")


async def turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def serve_one_request(protocol: type[HttpToolsProtocol]) -> Socket:
    config = Config(Starlette(routes=[Route("/filter", answer, methods=["POST"])]), log_config=None)
    served = protocol(config=config, server_state=ServerState(), app_state={})
    socket = Socket()
    served.connection_made(socket)
    served.data_received(b"POST /filter HTTP/1.1\r\nHost: phalanx\r\nContent-Length: 2\r\n\r\n{}")
    await turns()
    return socket


async def test_an_answer_is_one_write_of_its_headers_and_body() -> None:
    socket = await serve_one_request(OneWriteHttpProtocol)

    assert len(socket.writes) == 1
    assert socket.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert socket.writes[0].endswith(b"\r\n\r\n" + BODY)


async def test_uvicorns_own_protocol_writes_the_same_answer_twice() -> None:
    # Why the protocol exists: the headers and the body would be two sends.
    socket = await serve_one_request(HttpToolsProtocol)

    assert [w.startswith(b"HTTP/1.1 200 OK") for w in socket.writes] == [True, False]
    assert socket.writes[1] == BODY


async def test_a_lone_write_leaves_on_the_loops_next_turn() -> None:
    socket = Socket()
    transport = OneWriteTransport(socket, asyncio.get_running_loop())

    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert socket.writes == []
    assert transport.get_write_buffer_size() == len(b"HTTP/1.1 100 Continue\r\n\r\n")

    await turns(2)
    assert socket.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_two_writes_in_one_step_leave_as_one_and_the_next_pair_too() -> None:
    socket = Socket()
    transport = OneWriteTransport(socket, asyncio.get_running_loop())

    transport.write(b"head-1|")
    transport.write(b"body-1")
    transport.writelines([b"head-2|"])
    transport.write(b"body-2")
    await turns(2)

    assert socket.writes == [b"head-1|body-1", b"head-2|body-2"]


async def test_closing_sends_what_is_held_first() -> None:
    socket = Socket()
    transport = OneWriteTransport(socket, asyncio.get_running_loop())

    transport.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    transport.close()

    assert socket.writes == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]
    assert socket.closed


async def test_an_abort_drops_what_is_held() -> None:
    socket = Socket()
    transport = OneWriteTransport(socket, asyncio.get_running_loop())

    transport.write(b"partial")
    transport.abort()
    await turns(2)

    assert socket.writes == []
    assert socket.aborted


async def test_what_is_held_for_a_peer_that_left_is_dropped() -> None:
    socket = Socket()
    transport = OneWriteTransport(socket, asyncio.get_running_loop())

    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    socket.closed = True  # the connection was lost before the loop's next turn
    await turns(2)

    assert socket.writes == []


async def test_a_client_that_waits_for_100_continue_is_answered_by_the_real_server() -> None:
    # The interim answer is written alone; it must leave without waiting for another write.
    async with serving(Extender(ClusterFileSource(small_cluster()))) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(
                b"POST /filter HTTP/1.1\r\nHost: phalanx\r\nContent-Type: application/json\r\n"
                b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n"
            )
            await writer.drain()
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"

            writer.write(b"{}")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            assert head.split(b"\r\n", 1)[0] == b"HTTP/1.1 400 Bad Request"
        finally:
            writer.close()
