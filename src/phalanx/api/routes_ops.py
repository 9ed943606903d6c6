"""Operator endpoints: health, readiness, metrics and the /debug views (gangs, topology).

All are `async` so they read the model on the event loop, never from a worker thread
while the loop is writing it.
"""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from phalanx.api.responses import OrjsonResponse, error_response
from phalanx.core.errors import quoted
from phalanx.core.groups import registry
from phalanx.service.extender import NOT_SYNCED, Extender


def ops_router(extender: Extender) -> APIRouter:
    router = APIRouter(default_response_class=OrjsonResponse)

    @router.get("/healthz")
    async def healthz() -> Response:
        return healthz_response()

    @router.get("/readyz")
    async def readyz() -> Response:
        return readyz_response(extender)

    @router.get("/metrics")
    async def metrics() -> Response:
        return await metrics_response(extender)

    @router.get("/debug/groups")
    async def debug_groups() -> Response:
        return OrjsonResponse({"groups": extender.debug_groups()})

    @router.get("/debug/groups/{key:path}")
    async def debug_group(key: str) -> Response:
        # A gang of any dialect, by its key: `ns/name`, `volcano:ns/name`, `upstream:...`.
        ref = registry.parse_key(key)
        if ref is None:
            return error_response(
                400, f"{quoted(key)} is not a gang key; keys are {registry.KEY_FORMS}"
            )
        view = extender.views.group(ref)
        if view is None:
            return error_response(404, f"gang {key} is unknown")
        return OrjsonResponse(view)

    @router.get("/debug/topology")
    async def debug_topology() -> Response:
        return OrjsonResponse(extender.debug_topology())

    return router


def healthz_response() -> Response:
    return OrjsonResponse({"status": "ok"})


def readyz_response(extender: Extender) -> Response:
    if extender.ready:
        return OrjsonResponse({"status": "ready"})
    return OrjsonResponse({"status": "not ready", "reason": NOT_SYNCED}, status_code=503)


async def metrics_response(extender: Extender) -> Response:
    return Response(await extender.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def probe_routes(extender: Extender) -> list[Route]:
    """/metrics, /healthz and /readyz as bare Starlette routes, for the metrics-only app:
    with the extender port on loopback, kubelet probes and Prometheus reach this one."""

    async def metrics(_request: Request) -> Response:
        return await metrics_response(extender)

    async def healthz(_request: Request) -> Response:
        return healthz_response()

    async def readyz(_request: Request) -> Response:
        return readyz_response(extender)

    return [
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
