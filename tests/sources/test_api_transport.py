"""Sending one request: aiohttp against a loopback HTTP server, httpx against a scripted one.

What the client above relies on: an answer's status, body, `Retry-After` and protocol, and,
when no answer came, whether the request may have reached the server.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from aiohttp import web

from phalanx.sources.api_transport import AiohttpSender, HttpxSender, SendError

pytestmark = pytest.mark.anyio

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def aiohttp_sender() -> AiohttpSender:
    return AiohttpSender(ssl.create_default_context(), connections=4, proxy=None)


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# ---- aiohttp: the default ----------------------------------------------------------------------


async def test_aiohttp_sends_the_request_as_given_and_answers_status_body_and_retry_after() -> None:
    seen: list[tuple[str, str, bytes, str, str]] = []

    async def api(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append(
            (
                request.method,
                request.path,
                body,
                request.headers["Content-Type"],
                request.headers["Authorization"],
            )
        )
        return web.Response(status=429, body=b'{"kind":"Status"}', headers={"Retry-After": "2"})

    async for url in serve(api):
        sender = aiohttp_sender()
        try:
            reply = await sender.send(
                "POST",
                url + "/api/v1/namespaces/team/pods/w-0/binding",
                b'{"kind":"Binding"}',
                {"Content-Type": "application/json", "Authorization": "Bearer t"},
                timeout=5.0,
                server_name=None,
            )
        finally:
            await sender.aclose()

    assert seen == [
        (
            "POST",
            "/api/v1/namespaces/team/pods/w-0/binding",
            b'{"kind":"Binding"}',
            "application/json",
            "Bearer t",
        )
    ]
    assert (reply.status, reply.content, reply.retry_after) == (429, b'{"kind":"Status"}', "2")
    assert reply.http_version == "HTTP/1.1"


async def test_aiohttp_keeps_one_connection_alive_for_calls_one_after_another() -> None:
    peers: set[object] = set()

    async def api(request: web.Request) -> web.Response:
        peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        return web.Response(status=201)

    async for url in serve(api):
        sender = aiohttp_sender()
        try:
            for _ in range(5):
                reply = await sender.send(
                    "GET", url + "/version", None, {}, timeout=5.0, server_name=None
                )
                assert reply.status == 201
                assert reply.retry_after == ""
        finally:
            await sender.aclose()

    assert len(peers) == 1


async def test_aiohttp_a_refused_connection_was_never_sent() -> None:
    sender = aiohttp_sender()
    try:
        with pytest.raises(SendError) as refused:
            await sender.send(
                "POST",
                f"http://127.0.0.1:{unused_port()}/x",
                b"{}",
                {},
                timeout=5.0,
                server_name=None,
            )
    finally:
        await sender.aclose()

    assert (refused.value.kind, refused.value.sent) == ("ConnectError", False)


async def test_aiohttp_an_answer_that_never_comes_may_have_been_applied() -> None:
    answer = asyncio.Event()

    async def silent(request: web.Request) -> web.Response:
        await answer.wait()
        return web.Response(status=201)

    async for url in serve(silent):
        sender = aiohttp_sender()
        try:
            with pytest.raises(SendError) as late:
                await sender.send("POST", url + "/x", b"{}", {}, timeout=0.2, server_name=None)
        finally:
            answer.set()
            await sender.aclose()

    assert (late.value.kind, late.value.sent) == ("ReadTimeout", True)


async def test_aiohttp_a_connection_dropped_after_the_request_may_have_been_applied() -> None:
    async def hang_up(request: web.Request) -> web.Response:
        await request.read()
        assert request.transport is not None
        request.transport.close()
        return web.Response(status=201)

    async for url in serve(hang_up):
        sender = aiohttp_sender()
        try:
            with pytest.raises(SendError) as dropped:
                await sender.send("POST", url + "/x", b"{}", {}, timeout=5.0, server_name=None)
        finally:
            await sender.aclose()

    assert dropped.value.sent is True


# ---- httpx: HTTP/2 and scripted servers --------------------------------------------------------


async def test_httpx_answers_the_same_fields_and_passes_the_tls_server_name() -> None:
    seen: list[httpx.Request] = []

    def api(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, content=b"busy", headers={"Retry-After": "1"})

    sender = HttpxSender(httpx.MockTransport(api))
    reply = await sender.send(
        "PATCH",
        "https://api.test/api/v1/nodes/n1",
        b"{}",
        {"Content-Type": "application/merge-patch+json"},
        timeout=3.0,
        server_name="kubernetes.default",
    )

    assert (reply.status, reply.content, reply.retry_after) == (503, b"busy", "1")
    assert reply.http_version == "HTTP/1.1"
    [request] = seen
    assert (request.method, request.url.path, request.content) == (
        "PATCH",
        "/api/v1/nodes/n1",
        b"{}",
    )
    assert request.extensions["sni_hostname"] == "kubernetes.default"
    assert request.extensions["timeout"]["read"] == 3.0


@pytest.mark.parametrize(
    ("failure", "sent"),
    [
        (httpx.ConnectError("refused"), False),
        (httpx.ConnectTimeout("no route"), False),
        (httpx.PoolTimeout("pool full"), False),
        (httpx.ReadTimeout("late"), True),
        (httpx.RemoteProtocolError("dropped"), True),
    ],
)
async def test_httpx_failures_say_whether_the_request_may_have_been_sent(
    failure: httpx.TransportError, sent: bool
) -> None:
    def api(request: httpx.Request) -> httpx.Response:
        raise failure

    sender = HttpxSender(httpx.MockTransport(api))
    with pytest.raises(SendError) as failed:
        await sender.send("POST", "https://api.test/x", b"{}", {}, timeout=1.0, server_name=None)

    assert (failed.value.kind, failed.value.sent) == (type(failure).__name__, sent)
