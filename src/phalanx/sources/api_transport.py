"""How `AsyncKubeClient` sends one request: a narrow `Sender`, over aiohttp or an httpx transport.

The client needs four things from an answer (status, body, `Retry-After`, protocol) and one
fact from a failure: whether the request may have reached the API server. Anything richer
costs CPU per binding on a host whose cores the API server and kube-scheduler share:
wrapping aiohttp in httpx's `Request`/`Response` objects took a third of the client's CPU
(py-spy on the 100 × 8 benchmark), so the default path speaks aiohttp directly.

* `AiohttpSender` (the default): keep-alive HTTP/1.1 connections, parsed in C.
* `HttpxSender`: any httpx transport. httpx's own carries HTTP/2 (`AsyncKubeSettings.http2`);
  `httpx.MockTransport` lets tests script an API server.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import httpx

from phalanx.sources.kubeclient import ClusterAccess

# Idle connections are kept this long (seconds), like Go's http.Transport (client-go).
KEEPALIVE_SECONDS = 90.0
# httpx failures in which the request was certainly never sent.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer, whatever its status."""

    status: int
    content: bytes
    retry_after: str  # the `Retry-After` header as sent, "" when absent
    http_version: str  # "HTTP/1.1" or "HTTP/2"


class SendError(Exception):
    """No answer came. `sent` is False only when the request certainly never left (the
    connection was refused or never opened): only then can a retry not meet its own success."""

    def __init__(self, kind: str, message: str, *, sent: bool) -> None:
        super().__init__(kind, message)
        self.kind = kind
        self.message = message
        self.sent = sent


class Sender(Protocol):
    async def send(
        self,
        method: str,
        url: str,
        content: bytes | None,
        headers: Mapping[str, str],
        *,
        timeout: float,
        server_name: str | None,
    ) -> Reply:
        """Send once, within `timeout` seconds; raises SendError when no answer came.
        `server_name`: the TLS server name to check, when it differs from the URL's host."""
        ...

    async def aclose(self) -> None: ...


class AiohttpSender:
    """Keep-alive HTTP/1.1 connections through aiohttp, at most `connections` open."""

    def __init__(self, ssl_context: ssl.SSLContext, *, connections: int, proxy: str | None) -> None:
        self._ssl = ssl_context
        self._connections = connections
        self._proxy = proxy
        self._session: aiohttp.ClientSession | None = None  # made on the loop, at first use

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            ssl=self._ssl,
            limit=self._connections,
            limit_per_host=self._connections,
            keepalive_timeout=KEEPALIVE_SECONDS,
        )
        self._session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar()
        )
        return self._session

    async def send(
        self,
        method: str,
        url: str,
        content: bytes | None,
        headers: Mapping[str, str],
        *,
        timeout: float,
        server_name: str | None,
    ) -> Reply:
        session = self._session or self._open()
        try:
            async with session.request(
                method,
                url,
                data=content,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=timeout),
                server_hostname=server_name,
                proxy=self._proxy,
                allow_redirects=False,
            ) as answer:
                body = await answer.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise SendError("ConnectTimeout", str(exc), sent=False) from exc
        except aiohttp.ClientConnectorError as exc:
            raise SendError("ConnectError", str(exc), sent=False) from exc
        except TimeoutError as exc:  # the answer did not come in time (sent, maybe applied)
            raise SendError("ReadTimeout", str(exc), sent=True) from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise SendError("RemoteProtocolError", str(exc), sent=True) from exc
        except aiohttp.ClientError as exc:
            raise SendError("ReadError", str(exc) or type(exc).__name__, sent=True) from exc
        spoken = answer.version or aiohttp.HttpVersion11
        return Reply(
            answer.status,
            body,
            answer.headers.get("Retry-After", ""),
            f"HTTP/{spoken.major}.{spoken.minor}",
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class HttpxSender:
    """Any httpx transport: httpx's HTTP/2 stack, or a test's `httpx.MockTransport`."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self._transport = transport

    @classmethod
    def http2(cls, access: ClusterAccess, *, connections: int) -> HttpxSender:
        """One HTTP/2 connection (offered by ALPN) whose streams carry the requests."""
        return cls(
            httpx.AsyncHTTPTransport(
                verify=tls_context(access),
                http2=True,
                limits=httpx.Limits(
                    max_connections=connections,
                    max_keepalive_connections=connections,
                    keepalive_expiry=KEEPALIVE_SECONDS,
                ),
                proxy=access.proxy,
                trust_env=False,  # as the blocking client: the kubeconfig's proxy-url or none
            )
        )

    async def send(
        self,
        method: str,
        url: str,
        content: bytes | None,
        headers: Mapping[str, str],
        *,
        timeout: float,
        server_name: str | None,
    ) -> Reply:
        limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        extensions: dict[str, object] = {"timeout": limits}
        if server_name:
            extensions["sni_hostname"] = server_name
        request = httpx.Request(
            method, url, content=content, headers=headers, extensions=extensions
        )
        try:
            answer = await self._transport.handle_async_request(request)
            try:
                body = await answer.aread()
            finally:
                await answer.aclose()
        except httpx.RequestError as exc:
            sent = not isinstance(exc, _NEVER_SENT)
            raise SendError(type(exc).__name__, str(exc), sent=sent) from exc
        return Reply(
            answer.status_code, body, answer.headers.get("Retry-After", ""), answer.http_version
        )

    async def aclose(self) -> None:
        await self._transport.aclose()


def tls_context(access: ClusterAccess) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=access.ca_file)
    if access.cert_file and access.key_file:
        context.load_cert_chain(access.cert_file, access.key_file)
    if not access.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
