"""What the live source tells the cluster: Events, PodGroup status, and requeues.

* **Events** are rate-limited per (object, reason): at most one API write per
  `event_interval_seconds`, later repeats folded into the Event's `count`.
* **PodGroup status** carries phase, counts, `scheduleStartTime` and a `PodGroupScheduled`
  condition; a body equal to the last one written is not sent again.
* **Requeue** touches `phalanx.io/requeued-at` on pending pods: an update moves a pod out of
  kube-scheduler's unschedulable queue.

Every write is best effort: a failure is logged, nothing is raised to the service.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.core.inventory import REQUEUE_ANNOTATION
from phalanx.core.journal import GroupPhase, GroupStatus
from phalanx.core.model import PodRef
from phalanx.sources.informer import ApiError
from phalanx.sources.kube_commits import pod_path, rfc3339
from phalanx.sources.kube_writes import Writer

log = logging.getLogger(__name__)

COMPONENT = "phalanx"
PODGROUP_GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"


def _camel(reason: str) -> str:
    """`waiting-for-members` -> `WaitingForMembers` (Kubernetes reasons are CamelCase)."""
    return "".join(part[:1].upper() + part[1:] for part in reason.replace("_", "-").split("-"))


@dataclass(slots=True)
class _Series:
    """One Event object in the API and the repeats folded into it."""

    name: str
    first: str
    count: int
    sent_at: float
    held: int = 0  # repeats since the last write, added to `count` by the next one


class EventLimiter:
    """At most one write per (object, reason) per `interval`; repeats are counted, not sent.

    `admit` answers what to write now: (series, created) or None to stay quiet.
    Loop-only, no locks.
    """

    MAX_SERIES = 10_000  # past this, series idle for 10 intervals are dropped

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self.interval = interval
        self.clock = clock
        self._series: dict[tuple[str, str, str], _Series] = {}

    def admit(
        self, key: tuple[str, str, str], name: str, stamp: str
    ) -> tuple[_Series, bool] | None:
        now = self.clock()
        series = self._series.get(key)
        if series is None:
            self._prune(now)
            series = self._series[key] = _Series(name, stamp, 1, now)
            return series, True
        if now - series.sent_at < self.interval:
            series.held += 1
            return None
        series.count += series.held + 1
        series.held = 0
        series.sent_at = now
        return series, False

    def _prune(self, now: float) -> None:
        if len(self._series) < self.MAX_SERIES:
            return
        stale = [k for k, s in self._series.items() if now - s.sent_at > 10 * self.interval]
        for k in stale:
            del self._series[k]


class Reports:
    """Events, PodGroup status and requeues, written through `writer` (loop only).

    `uid_of(kind, key)` gives the involved object's UID ("" if unknown); `group_path(key)`
    the API path of a gang's PodGroup, or None for an annotation-only gang.
    """

    def __init__(
        self,
        writer: Writer,
        *,
        identity: str,
        event_interval_seconds: float,
        uid_of: Callable[[str, str], str],
        group_path: Callable[[str], str | None],
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.writer = writer
        self.identity = identity
        self.uid_of = uid_of
        self.group_path = group_path
        self.wall_clock = wall_clock
        self._events = EventLimiter(event_interval_seconds, clock)
        self._statuses: dict[str, dict[str, Any]] = {}  # group key -> last status written

    def forget_group(self, key: str) -> None:
        self._statuses.pop(key, None)

    # ---- Events ------------------------------------------------------------------------

    async def emit_event(
        self,
        kind: str,
        namespace: str,
        name: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
    ) -> None:
        key = f"{namespace}/{name}" if namespace else name
        stamp = rfc3339(self.wall_clock())
        admitted = self._events.admit((kind, key, reason), f"{name}.{time.time_ns():x}", stamp)
        if admitted is None:
            return
        series, created = admitted
        where = namespace or "default"  # Events about cluster-scoped objects live in "default"
        involved: dict[str, Any] = {"kind": kind, "name": name, "apiVersion": _api_version(kind)}
        if namespace:
            involved["namespace"] = namespace
        uid = self.uid_of(kind, key)
        if uid:
            involved["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": series.name, "namespace": where},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": series.first,
            "lastTimestamp": stamp,
            "count": series.count,
        }
        path = f"/api/v1/namespaces/{where}/events"
        try:
            if not created:
                try:
                    await self.writer.patch(f"{path}/{series.name}", body)
                    return
                except ApiError as exc:
                    if exc.status != 404:  # expired (Events live an hour): write it afresh
                        raise
            await self.writer.post(path, body)
        except ApiError as exc:
            log.debug("event not written", extra={"object": key, "reason": str(exc)})

    # ---- requeue ------------------------------------------------------------------------

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        """Touch each pod's `phalanx.io/requeued-at` annotation: an update to a pod in
        kube-scheduler's unschedulable queue moves it back (the extender is among its
        rejectors, which every event may resolve). A pod already gone is fine."""
        if not pods:
            return
        body = {"metadata": {"annotations": {REQUEUE_ANNOTATION: rfc3339(self.wall_clock())}}}
        results = await asyncio.gather(
            *(self.writer.patch(pod_path(pod), body) for pod in pods),
            return_exceptions=True,
        )
        for pod, result in zip(pods, results, strict=True):
            if isinstance(result, ApiError) and result.status != 404:
                log.warning(
                    "cannot requeue a pod", extra={"pod": pod.key, "reason": f"{reason}: {result}"}
                )
            elif isinstance(result, BaseException) and not isinstance(result, ApiError):
                raise result  # a bug, not an API answer

    # ---- PodGroup status ---------------------------------------------------------------

    async def update_group_status(self, status: GroupStatus) -> None:
        key = status.group_key
        path = self.group_path(key)
        if path is None:
            return  # annotation-only gang: no object to write status on
        scheduled = status.phase in (GroupPhase.SCHEDULED, GroupPhase.RUNNING)
        reason = _camel(status.reason) if status.reason else status.phase
        previous = self._statuses.get(key)
        old = (previous or {}).get("conditions", [{}])[0]
        changed = (
            old.get("status") != ("True" if scheduled else "False") or old.get("reason") != reason
        )
        condition = {
            "type": "PodGroupScheduled",
            "status": "True" if scheduled else "False",
            "reason": reason,
            "message": status.message[:1024],
            "lastTransitionTime": rfc3339(self.wall_clock())
            if changed
            else old.get("lastTransitionTime"),
        }
        body: dict[str, Any] = {
            "phase": str(status.phase),
            "scheduled": status.scheduled,
            "running": status.running,
            "conditions": [condition],
        }
        if status.schedule_start_time is not None:
            body["scheduleStartTime"] = rfc3339(status.schedule_start_time)
        if body == previous:
            return
        self._statuses[key] = body
        try:
            await self.writer.patch(f"{path}/status", {"status": body})
        except ApiError as exc:
            self._statuses.pop(key, None)
            if exc.status != 404:
                log.warning(
                    "cannot write PodGroup status", extra={"group": key, "reason": str(exc)}
                )


def _api_version(kind: str) -> str:
    if kind in ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate"):
        return "resource.k8s.io/v1"
    return PODGROUP_GROUP_VERSION if kind == "PodGroup" else "v1"
