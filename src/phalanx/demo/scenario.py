"""One driven run: a cluster file served by a real Phalanx on 127.0.0.1, a workload created
in it, the driver scheduling it over HTTP, and the report read back.

Shared by `phalanx demo`, `phalanx simulate` and the tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from phalanx.api import server
from phalanx.api.app import DEFAULT_MAX_BODY_BYTES
from phalanx.demo.driver import (
    HTTP_TIMEOUT_SECONDS,
    DriveResult,
    Progress,
    SchedulerDriver,
    normalize,
)
from phalanx.demo.report import Report, build_report
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.sources.clusterfile import ClusterFileSource


@dataclass(frozen=True, slots=True)
class Driven:
    """A finished run: what the driver saw, and the report read back from Phalanx."""

    result: DriveResult
    report: Report


@dataclass(slots=True)
class Session:
    """A running Phalanx over an in-memory cluster, and an HTTP client pointed at it."""

    url: str
    extender: Extender
    source: ClusterFileSource
    client: httpx.AsyncClient
    objects: list[dict[str, Any]]
    scheduler_names: Sequence[str]

    async def drive(
        self,
        workload: Iterable[Mapping[str, Any]] = (),
        *,
        title: str,
        progress: Progress | None = None,
    ) -> Driven:
        """Create `workload`, schedule every pending pod of the served schedulers, report."""
        driver = SchedulerDriver(
            self.client,
            self.source,
            self.objects,
            scheduler_names=self.scheduler_names,
            progress=progress,
        )
        driver.create(workload)  # what the source refuses it lists, with the reason
        result = await driver.run()
        report = build_report(self.extender, result, title=title, rejected=self.source.rejected)
        return Driven(result, report)


@contextlib.asynccontextmanager
async def session(
    cluster: Iterable[Mapping[str, Any]],
    *,
    settings: ServiceSettings | None = None,
    scheduler_names: Sequence[str] = ("phalanx",),
    host: str = "127.0.0.1",
    port: int = 0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    dra_extended_resources: bool = True,
) -> AsyncIterator[Session]:
    """Serve `cluster` (object dicts) on host:port (0 = a free port) until exit;
    `dra_extended_resources` as the setting of that name."""
    objects = [normalize(o) for o in cluster]
    source = ClusterFileSource(
        objects, name="in-memory cluster", dra_extended_resources=dra_extended_resources
    )
    extender = Extender(source, settings or ServiceSettings())
    async with (
        server.serving(extender, host=host, port=port, max_body_bytes=max_body_bytes) as url,
        httpx.AsyncClient(
            base_url=url,
            timeout=HTTP_TIMEOUT_SECONDS,
            # Every member of a gang holds a connection at the bind barrier: a capped pool
            # would stall the binds that complete the quorum.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,  # loopback only: never through a proxy from the environment
        ) as client,
    ):
        yield Session(url, extender, source, client, objects, scheduler_names)
