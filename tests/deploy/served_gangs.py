"""Drive gangs through a real Phalanx API over an in-memory cluster, as kube-scheduler would.

Used to check that what operators are shown (dashboard, alerts) and given (deploy/examples)
matches what Phalanx really does: every request is shaped like kube-scheduler's (Go field
names, ``nodeCacheCapable: true``), and the members of a gang call /bind concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from phalanx.api import create_app
from phalanx.service.extender import Extender
from phalanx.sources.clusterfile import ClusterFileSource

Obj = dict[str, Any]


@dataclass
class Served:
    client: httpx.AsyncClient
    extender: Extender
    source: ClusterFileSource


@asynccontextmanager
async def serve(objects: Iterable[Mapping[str, Any]]) -> AsyncIterator[Served]:
    """An extender over ``objects`` behind its ASGI app (lifespan included), and a client."""
    source = ClusterFileSource(objects)
    extender = Extender(source)
    app = create_app(extender)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://phalanx") as client,
    ):
        yield Served(client, extender, source)


def as_sent(obj: Mapping[str, Any]) -> Obj:
    """A pod as kube-scheduler sends it (informer objects carry no kind/apiVersion)."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


async def schedule_pods(served: Served, pods: list[Obj], node_names: list[str]) -> dict[str, str]:
    """Filter every pod in turn, then bind them all at once; pod name -> node.

    Fails the calling test with Phalanx's own reason if any pod is refused.
    """
    placements: dict[str, str] = {}
    for pod in pods:
        args = {"Pod": as_sent(pod), "Nodes": None, "NodeNames": node_names}
        answer = (await served.client.post("/filter", json=args)).json()
        assert not answer.get("Error"), f"{pod['metadata']['name']}: {answer['Error']}"
        kept = answer["NodeNames"]
        assert kept, f"{pod['metadata']['name']}: no node kept: {answer.get('FailedNodes')}"
        placements[pod["metadata"]["name"]] = kept[0]

    async def bind(pod: Obj) -> str:
        meta = pod["metadata"]
        body = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": placements[meta["name"]],
        }
        return str((await served.client.post("/bind", json=body)).json()["Error"])

    errors = await asyncio.gather(*(bind(p) for p in pods))
    assert errors == [""] * len(pods), errors
    return placements
