"""Serving a Phalanx API over an in-memory cluster, driven through its lifespan as uvicorn does;
the hand-written request fixtures."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from builders import node_obj, pod_obj
from phalanx.api import create_app
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.sources.clusterfile import ClusterFileSource

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_bytes(name: str) -> bytes:
    """A request body exactly as written by hand from the upstream Go types."""
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> Any:
    return json.loads(fixture_bytes(name))


def as_sent(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as kube-scheduler sends it: informer objects carry no kind/apiVersion."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def small_cluster() -> list[dict[str, Any]]:
    """Two 8-GPU nodes, a CPU node, a pending pod and a running pod on each GPU node;
    the names and UIDs match the request fixtures."""
    return [
        node_obj("gpu-a"),
        node_obj("gpu-b"),
        node_obj("cpu-1", 0, cpu="16", memory="64Gi"),
        pod_obj("solo", namespace="team-a"),
        pod_obj("victim", 4, namespace="team-a", node="gpu-a", phase="Running"),
        pod_obj("other", 4, namespace="team-a", node="gpu-b", phase="Running"),
    ]


@dataclass
class Phalanx:
    client: httpx.AsyncClient
    extender: Extender
    source: ClusterFileSource

    async def post(self, verb: str, body: bytes | dict[str, Any] | list[Any]) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.client.post(
            f"/{verb}", content=content, headers={"Content-Type": "application/json"}
        )

    def count(self, verb: str, result: str) -> float:
        """How many `verb` requests were timed with `result`."""
        value = self.extender.metrics.registry.get_sample_value(
            "phalanx_request_duration_seconds_count", {"verb": verb, "result": result}
        )
        return value or 0.0


@asynccontextmanager
async def serve(
    objects: Iterable[dict[str, Any]],
    *,
    extender_type: type[Extender] = Extender,
    settings: ServiceSettings | None = None,
    max_body_bytes: int | None = None,
) -> AsyncIterator[Phalanx]:
    """Start an extender over `objects` behind the API (lifespan included) and a client."""
    source = ClusterFileSource(objects)
    extender = extender_type(source, settings)
    app = (
        create_app(extender)
        if max_body_bytes is None
        else create_app(extender, max_body_bytes=max_body_bytes)
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://phalanx") as client,
    ):
        yield Phalanx(client, extender, source)
