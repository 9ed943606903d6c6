"""The ASGI applications: the extender API, and a metrics-only app for a separate port.

Factories only, no module-level state: each call wires routes to the one `Extender` it is
given. The app's lifespan starts and stops that extender.

kube-scheduler's POSTs to the four verbs skip FastAPI (`VerbsFirst`): its middleware
(exception telemetry, body limits, exit stacks) cost about a tenth of Phalanx's CPU per
pod in the singles benchmark, and gives the verbs nothing, since they answer every error
themselves. Everything else, including a verb path with another method, goes through it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Router
from starlette.types import ASGIApp, Receive, Scope, Send

from phalanx.api.responses import error_response
from phalanx.api.routes_extender import ExtenderVerbs
from phalanx.api.routes_ops import ops_router, probe_routes
from phalanx.service.extender import Extender

# Real nodes (status.images, conditions) run to 5-10 KB of JSON each: a full 5,000-node
# NodeList fits with room to spare.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


Endpoint = Callable[[Request], Awaitable[Response]]


class VerbsFirst:
    """An ASGI app answering `POST /<verb>` itself and passing the rest to `app`."""

    def __init__(self, verbs: Mapping[str, Endpoint], app: FastAPI) -> None:
        self._verbs = verbs
        self.app = app

    @property
    def router(self) -> Router:
        """The FastAPI app's router, whose lifespan starts and stops the extender."""
        return self.app.router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self._verbs.get(scope["path"])
            if endpoint is not None:
                response = await endpoint(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(extender: Extender, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> VerbsFirst:
    """The extender API: the four verbs, /healthz, /readyz, /metrics and /debug."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await extender.start()
        try:
            yield
        finally:
            await extender.stop()

    verbs = ExtenderVerbs(extender, max_body_bytes=max_body_bytes)
    app = FastAPI(
        title="Phalanx",
        lifespan=lifespan,
        routes=verbs.routes(),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers=_EXCEPTION_HANDLERS,
    )
    app.include_router(ops_router(extender))
    return VerbsFirst(verbs.endpoints(), app)


def create_metrics_app(extender: Extender) -> ASGIApp:
    """`GET /metrics`, `/healthz` and `/readyz`, for `--metrics-port`. The main app's
    lifespan runs the extender."""
    return Starlette(
        routes=probe_routes(extender),
        exception_handlers=_EXCEPTION_HANDLERS,
    )


async def _http_error(request: Request, exc: HTTPException) -> Response:
    path = request.url.path
    if exc.status_code == 404:
        message = f"no such path: {path}"
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"method {request.method} is not allowed on {path} (allowed: {allowed})"
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, message, headers=exc.headers)


async def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return error_response(400, f"bad request to {request.url.path}: {problems}")


async def _internal_error(_request: Request, exc: Exception) -> Response:
    # Reached only from ops routes (the verbs answer their own failures); Starlette
    # re-raises after sending this, so the server logs the traceback.
    return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


_EXCEPTION_HANDLERS: dict[
    int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]
] = {
    HTTPException: _http_error,
    RequestValidationError: _invalid_request,
    Exception: _internal_error,
}
