"""Serving: real uvicorn servers in this process, on this event loop, for `phalanx serve`,
the demo, `simulate` and the tests.

There is always exactly ONE worker process: the reservation table and the bind barrier
are in-process state, so a second worker would plan gangs from a model that cannot see
the first one's reservations.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import resource
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from phalanx.api.app import DEFAULT_MAX_BODY_BYTES, create_app, create_metrics_app
from phalanx.api.one_write import OneWriteHttpProtocol
from phalanx.logs import ACCESS_LOGGER
from phalanx.service.extender import Extender

log = logging.getLogger(__name__)
# How long a server may take to start listening before we call it broken (seconds).
STARTUP_TIMEOUT_SECONDS = 10.0
# How long an idle keep-alive connection is kept open (seconds). Longer than Go's
# http.Transport keeps one idle (90 s, kube-scheduler's extender client and Prometheus's
# scrapes), so the client always closes first: with uvicorn's 5 s, a POST sent just as the
# server closed the connection fails, and Go never retries a POST (kube-scheduler then
# fails that pod's attempt with "EOF" and backs it off).
KEEP_ALIVE_SECONDS = 120


def loop_name() -> str:
    """uvloop when it is installed (faster, same semantics), else asyncio's own loop."""
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


class Server(uvicorn.Server):
    """uvicorn's server minus its own signal handling.

    Several servers share one loop (extender + metrics); uvicorn's handlers would overwrite
    each other, so the caller owns SIGTERM/SIGINT and sets `should_exit` on all of them.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def make_server(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ssl_certfile: Path | None = None,
    ssl_keyfile: Path | None = None,
    access_log: bool | None = None,
) -> Server:
    """A server for `app`. `access_log` None: a line per request only when `uvicorn.access`
    logs at info (`phalanx.logs` lets it at debug). uvicorn's switch is its logger's, for
    every server in the process, and with it on each answer formats the line's arguments
    even when the level then drops it. No proxy headers: kube-scheduler and Prometheus
    call directly, and the middleware was a layer around every verb."""
    if access_log is None:
        access_log = logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop=loop_name(),
        http=OneWriteHttpProtocol,  # httptools, each answer in one send (api/one_write.py)
        workers=1,  # see module docstring: the gang state lives in this process
        lifespan="on",
        log_config=None,  # logs go through phalanx.logs, configured by the CLI
        access_log=access_log,
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        server_header=False,
        proxy_headers=False,
    )
    return Server(config)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit, as Go programs do at
    start (kube-scheduler among them); the (soft, hard) limits then in force.

    kube-scheduler holds one connection per gang member waiting at `/bind`, and runtimes
    commonly start a container with a soft limit of 1,024: a gang of a thousand members
    beside Phalanx's own API connections would run out, and uvicorn cannot accept past it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # a hard limit the kernel refuses (above nr_open)
            log.warning("open files limit not raised", extra={"soft": soft, "reason": str(exc)})
    return soft, hard


class ListenError(RuntimeError):
    """The address cannot be listened on (in use, not local, no permission)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket, so a port-0 server knows its port before it starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio's own loop turns Nagle off only on sockets that say they
    # are TCP; without it every request waits out a 40 ms delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket, *, tls: bool = False) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}"


async def start(server: Server, sock: socket.socket) -> asyncio.Task[None]:
    """Run `server` on `sock` in a task; returns once it accepts connections."""
    task = asyncio.create_task(server.serve(sockets=[sock]), name="phalanx-uvicorn")
    deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT_SECONDS
    while not server.started:
        if task.done():
            task.result()  # re-raises the startup failure
            raise RuntimeError("the HTTP server stopped during startup")
        if asyncio.get_running_loop().time() > deadline:
            server.should_exit = True
            raise RuntimeError("the HTTP server did not start listening in time")
        await asyncio.sleep(0.01)
    return task


async def stop(server: Server, task: asyncio.Task[None]) -> None:
    server.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def serving(
    extender: Extender,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    access_log: bool = False,
) -> AsyncIterator[str]:
    """Serve `extender` through the real HTTP app on host:port (0 = a free port); yields
    the base URL once it accepts connections. The app's lifespan starts and stops the
    extender, so on entry its cluster source is loaded and synced."""
    sock = bind(host, port)
    try:
        app = create_app(extender, max_body_bytes=max_body_bytes)
        server = make_server(app, access_log=access_log)
        task = await start(server, sock)
        try:
            yield url_of(sock)
        finally:
            await stop(server, task)
    finally:
        sock.close()


def _listen(host: str, port: int, what: str) -> socket.socket:
    try:
        return bind(host, port)
    except ListenError as exc:
        raise ListenError(f"{what}: {exc}") from exc


@contextlib.contextmanager
def on_signals(callback: Callable[[], None]) -> Iterator[None]:
    """Call `callback` on SIGTERM / SIGINT while inside (only possible on the main thread)."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, callback)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or no signal support: stop by other means
        installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def serve(
    extender: Extender,
    *,
    host: str,
    port: int,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ssl_certfile: Path | None = None,
    ssl_keyfile: Path | None = None,
    metrics_address: tuple[str, int] | None = None,
) -> int:
    """Serve `extender` until SIGTERM / SIGINT, then shut down gracefully (held binds are
    answered). Raises ListenError when an address cannot be listened on; the exit code."""
    open_files, _ = raise_open_files_limit()
    main_sock = _listen(host, port, "the extender")
    sockets = [main_sock]
    servers = [
        make_server(
            create_app(extender, max_body_bytes=max_body_bytes),
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
        )
    ]
    try:
        if metrics_address is not None:
            sockets.append(_listen(*metrics_address, "metrics"))
            # The metrics app has no lifespan of its own: the extender app runs the extender.
            servers.append(make_server(create_metrics_app(extender)))
    except ListenError:
        main_sock.close()
        raise
    log.info(
        "listening",
        extra={
            "url": url_of(main_sock, tls=ssl_certfile is not None),
            "source": extender.source.name,
            "open_files_limit": open_files,
        },
    )
    if metrics_address is not None:
        log.info("metrics listening", extra={"url": url_of(sockets[1]) + "/metrics"})

    def stop_all() -> None:
        for server in servers:
            server.should_exit = True

    async def run_one(server: Server, sock: socket.socket) -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            stop_all()  # one listener down (e.g. startup failed) takes the process down

    try:
        with on_signals(stop_all):
            await asyncio.gather(*(run_one(s, k) for s, k in zip(servers, sockets, strict=True)))
    except SystemExit as exc:  # uvicorn exits on a startup failure (already logged)
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        for sock in sockets:
            sock.close()
    return 0
