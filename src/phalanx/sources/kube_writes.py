"""The write side of the Kubernetes API, as the source uses it: bindings, merge patches, POSTs.

`Writer` is the seam: the source never calls the API directly for a write. `PooledWriter`
runs the blocking client (`kubeclient.KubeClient`) on a bounded thread pool, off the event
loop. A binding is one attempt (the service decides about retries: a conflict is never
retried blindly); patches and POSTs are idempotent and retried with backoff while the
failure is transient (no answer, 429, 5xx).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from phalanx.core.model import Binding
from phalanx.sources.informer import ApiError, Transport

T = TypeVar("T")


class KubeApi(Transport, Protocol):
    """What the source needs from the API: `kubeclient.KubeClient`, or a test's fake."""

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]: ...

    def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def bind(self, binding: Binding) -> None: ...

    def close(self) -> None: ...


class Writer(Protocol):
    """Writes to the API from the event loop; raises ApiError (BindError for a binding)."""

    async def bind(self, binding: Binding) -> None: ...

    async def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

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

    async def bind(self, binding: Binding) -> None:
        await self._call(self.api.bind, binding)

    async def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._retried(self.api.patch, path, body)

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._retried(self.api.request, "POST", path, body)

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
