"""The one bind path: API bindings with retries, and a gang's commit record (carried by its
bindings, or written before the first).

Used alike by the bind barrier (a gang's quorum), single pods, elastic members beyond a
bound quorum, and roll-forward. A pod is *assumed* (counted on its node) before its binding
is issued; when the binding fails for good it is *forgotten* here, so nothing stays assumed
without a binding in flight.

Retries: a failure whose pod still exists is retried with backoff (the capacity is ours, so
retrying is safe), within `timeout_seconds` of the first attempt; a pod that is gone, or a
conflict (bound elsewhere), is never retried. The live source's writer also retries overload
(429 with Retry-After, 5xx, no answer) itself until that deadline, so one attempt there
already spans it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from phalanx.core.barrier import fits_alone
from phalanx.core.cache import ClusterState
from phalanx.core.model import Binding, Pod
from phalanx.core.rollforward import CommitRecord
from phalanx.service.bindings_first import BindingsFirst
from phalanx.service.metrics import Metrics
from phalanx.sources.base import BindError, ClusterSource, CommitLog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BindSettings:
    # Retries of a failed binding whose pod still exists; a conflict is never retried.
    retries: int = 3
    # First backoff between retries (seconds, doubling each time).
    backoff_seconds: float = 0.2
    # How long one pod's binding may take, retries included (seconds): kube-scheduler's
    # /bind httpTimeout (30 s in the chart) minus the barrier timeout (20 s) leaves 10.
    timeout_seconds: float = 8.0


class Binder:
    """Issues bindings and commit records through the cluster source (loop only)."""

    def __init__(
        self,
        state: ClusterState,
        source: ClusterSource,
        metrics: Metrics,
        settings: BindSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        bindings_first: BindingsFirst | None = None,
    ) -> None:
        self.state = state
        self.source = source
        self.metrics = metrics
        self.settings = settings or BindSettings()
        self.clock = clock
        # Told of every binding in flight: best-effort writes wait for them.
        self.bindings_first = bindings_first or BindingsFirst(0.0)

    async def bind_alone(self, pod: Pod, node: str) -> str:
        """Bind a pod that waits for nobody, if it still fits; "" or the error to report."""
        problem = fits_alone(self.state, pod, node)
        if problem:
            return problem
        self.state.assume(pod.uid, node)
        return await self.bind_assumed(pod, node)

    async def bind_assumed(self, pod: Pod, node: str, *, record: CommitRecord | None = None) -> str:
        """Issue the binding of an assumed pod (carrying its gang's commit record, if given);
        forget it on failure. "" or the error."""
        with self.bindings_first.binding():
            return await self._bind_assumed(pod, node, record)

    async def _bind_assumed(self, pod: Pod, node: str, record: CommitRecord | None) -> str:
        binding = Binding(pod.ref, node)
        attempts = 1 + self.settings.retries
        deadline = self.clock() + self.settings.timeout_seconds
        for attempt in range(attempts):
            try:
                left = max(0.0, deadline - self.clock())
                await self.source.bind(binding, record=record, timeout_seconds=left)
            except BindError as exc:
                pause = self.settings.backoff_seconds * 2**attempt
                retry = not (exc.gone or exc.conflict) and attempt + 1 < attempts
                if retry and self.clock() + pause < deadline:
                    await asyncio.sleep(pause)
                    continue
                result = "gone" if exc.gone else "conflict" if exc.conflict else "failed"
                return self._failed(binding, result, str(exc))
            except Exception as exc:  # a collaborator's bug: still, nothing may stay assumed
                log.exception("binding raised", extra={"pod": pod.key, "node": node})
                return self._failed(binding, "failed", f"{type(exc).__name__}: {exc}")
            self.metrics.bindings.labels("bound").inc()
            return ""
        raise AssertionError("unreachable: the last attempt returns")

    def _failed(self, binding: Binding, result: str, reason: str) -> str:
        self.state.forget(binding.pod.uid)
        self.metrics.bindings.labels(result).inc()
        log.warning(
            "binding failed",
            extra={"pod": binding.pod.key, "node": binding.node, "reason": reason},
        )
        return f"binding pod {binding.pod.key} to {binding.node} failed: {reason}"

    async def commit(self, record: CommitRecord) -> str:
        """Write the gang's commit record before its first binding, for a record too long
        for its bindings to carry; "" or why it failed."""
        try:
            with self.bindings_first.binding():  # the gang's bindings wait on it
                await self.source.write_commit_record(record)
        except Exception as exc:  # noqa: BLE001  # any failure: nothing is bound yet, so back out
            return str(exc) or type(exc).__name__
        return ""

    async def clear_commit(self, group_key: str) -> None:
        """Take back the record of a gang abandoned after it was written (best effort)."""
        if isinstance(self.source, CommitLog):
            await self.source.clear_commit_record(group_key)
