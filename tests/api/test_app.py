"""How the app routes: kube-scheduler's verbs are answered before FastAPI's middleware,
everything else goes through FastAPI."""

from __future__ import annotations

import httpx
import pytest
from api_harness import small_cluster
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response

from phalanx.api import create_app
from phalanx.service.extender import Extender
from phalanx.sources.clusterfile import ClusterFileSource

pytestmark = pytest.mark.anyio


async def test_only_requests_other_than_a_verb_post_pass_through_fastapi() -> None:
    app = create_app(Extender(ClusterFileSource(small_cluster())))
    seen: list[str] = []

    async def record(request: Request, call_next: RequestResponseEndpoint) -> Response:
        seen.append(f"{request.method} {request.url.path}")
        return await call_next(request)

    app.app.add_middleware(BaseHTTPMiddleware, dispatch=record)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app.app),
        httpx.AsyncClient(transport=transport, base_url="http://phalanx") as client,
    ):
        answers = [
            await client.post("/filter", content=b"{}"),
            await client.post("/bind", content=b"{}"),
            await client.get("/filter"),
            await client.get("/healthz"),
        ]

    assert [a.status_code for a in answers] == [400, 400, 405, 200]
    assert seen == ["GET /filter", "GET /healthz"]
