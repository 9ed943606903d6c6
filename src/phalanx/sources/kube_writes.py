"""The write side of the Kubernetes API, as the source uses it: bindings, patches, POSTs (and
the GET that re-reads an object before a write built on it is tried again).

`Writer` is the seam: the source never calls the API directly for a write.

* `AsyncWriter` (what `phalanx serve` uses): `kube_async.AsyncKubeClient` on the event loop,
  many requests in flight, limited by the client's QPS/burst; overload (429 with
  Retry-After, 5xx, no answer) is retried with backoff until the caller's deadline.
* `PooledWriter`: the blocking `kubeclient.KubeClient` on a bounded thread pool (a test's
  fake API, or `bench/bench_binder.py`'s baseline); idempotent writes retried while the
  failure is transient.

Every patch and POST names its lane (`in_flight.Lane`): `BIND` (the default) for what a held
`/bind` waits on, `REPORT` for best-effort writes, which yield their turn to bindings.
`PooledWriter` has one pool and ignores it.

A binding is never retried on a conflict (bound elsewhere) or when the pod is gone; what
is left to retry after `timeout_seconds`, the service's binder decides. Its `annotations`
(a gang's commit record) are written onto the pod by the API server with its node.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from phalanx.core.model import Binding
from phalanx.sources.in_flight import Lane
from phalanx.sources.informer import ApiError, Transport
from phalanx.sources.kube_async import AsyncKubeClient, AsyncKubeCounts, AsyncKubeSettings
from phalanx.sources.kubeclient import MERGE_PATCH, ClusterAccess

T = TypeVar("T")


class KubeApi(Transport, Protocol):
    """What the source needs from the API: `kubeclient.KubeClient`, or a test's fake."""

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]: ...

    def patch(
        self, path: str, body: Mapping[str, Any], *, content_type: str = ...
    ) -> dict[str, Any]: ...

    def bind(self, binding: Binding, annotations: Mapping[str, str] | None = None) -> None: ...

    def metadata(self) -> Transport:
        """The same API's lists and watches of each object's metadata only."""
        ...

    def close(self) -> None: ...


class Writer(Protocol):
    """Writes to the API from the event loop; raises ApiError (BindError for a binding)."""

    async def bind(
        self,
        binding: Binding,
        *,
        annotations: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> None: ...

    async def patch(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        content_type: str = MERGE_PATCH,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]: ...

    async def post(
        self, path: str, body: Mapping[str, Any], *, lane: Lane = Lane.BIND
    ) -> dict[str, Any]: ...

    async def get(self, path: str) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class WriteSettings:
    # Threads for blocking API calls from the loop (bindings, patches, events). A gang's
    # bindings are issued together; 16 covers a large gang without opening a flood.
    workers: int = 16
    # Attempts and first backoff (seconds, doubling) of an idempotent write that failed
    # transiently: commit records, PodGroup status, Events, requeues.
    attempts: int = 3
    backoff_seconds: float = 0.2


def transient(exc: ApiError) -> bool:
    """No answer, too many requests, or a server error: worth another try."""
    return exc.status in (0, 429) or exc.status >= 500


class PooledWriter:
    """`Writer` over a blocking `KubeApi`, on a bounded thread pool."""

    def __init__(self, api: KubeApi, settings: WriteSettings | None = None) -> None:
        self.api = api
        self.settings = settings or WriteSettings()
        self._pool = ThreadPoolExecutor(self.settings.workers, thread_name_prefix="phalanx-api")

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    async def _retried(self, fn: Callable[..., T], *args: Any) -> T:
        attempts = self.settings.attempts
        for attempt in range(attempts):
            try:
                return await self._call(fn, *args)
            except ApiError as exc:
                if not transient(exc) or attempt + 1 == attempts:
                    raise
                await asyncio.sleep(self.settings.backoff_seconds * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def bind(
        self,
        binding: Binding,
        *,
        annotations: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        del timeout_seconds  # one attempt, bounded by the client's own request timeout
        await self._call(self.api.bind, binding, annotations)

    async def patch(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        content_type: str = MERGE_PATCH,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]:
        del lane  # one pool: no lanes
        if content_type == MERGE_PATCH:  # KubeApi.patch's own default
            return await self._retried(self.api.patch, path, body)
        patch = functools.partial(self.api.patch, content_type=content_type)
        return await self._retried(patch, path, body)

    async def post(
        self, path: str, body: Mapping[str, Any], *, lane: Lane = Lane.BIND
    ) -> dict[str, Any]:
        del lane  # one pool: no lanes
        return await self._retried(self.api.request, "POST", path, body)

    async def get(self, path: str) -> dict[str, Any]:
        return await self._retried(self.api.request, "GET", path)

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class AsyncWriter:
    """`Writer` over `AsyncKubeClient`. The client is made on first use, inside the running
    event loop that owns it (aiohttp's connections belong to one loop)."""

    def __init__(self, access: ClusterAccess, settings: AsyncKubeSettings | None = None) -> None:
        self.access = access
        self.settings = settings or AsyncKubeSettings()
        self._client: AsyncKubeClient | None = None

    @property
    def client(self) -> AsyncKubeClient:
        if self._client is None:
            self._client = AsyncKubeClient.from_access(self.access, settings=self.settings)
        return self._client

    def counts(self) -> AsyncKubeCounts:
        """What the client did so far; all zero before its first request (it is made then)."""
        return self._client.counts if self._client is not None else AsyncKubeCounts()

    @staticmethod
    def _deadline(timeout_seconds: float | None) -> float | None:
        return None if timeout_seconds is None else time.monotonic() + timeout_seconds

    async def bind(
        self,
        binding: Binding,
        *,
        annotations: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        pod = binding.pod
        await self.client.bind(
            pod.namespace,
            pod.name,
            pod.uid,
            binding.node,
            annotations=annotations,
            deadline=self._deadline(timeout_seconds),
        )

    async def patch(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        content_type: str = MERGE_PATCH,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]:
        return await self.client.patch(path, body, content_type=content_type, lane=lane)

    async def post(
        self, path: str, body: Mapping[str, Any], *, lane: Lane = Lane.BIND
    ) -> dict[str, Any]:
        return await self.client.post(path, body, lane=lane)

    async def get(self, path: str) -> dict[str, Any]:
        return await self.client.request("GET", path, lane=Lane.REPORT)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
