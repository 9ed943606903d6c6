"""What the live source tells the cluster: Events, gang status, and requeues.

* **Events** are rate-limited per (object, reason): at most one API write per
  `event_interval_seconds`, later repeats folded into the Event's `count`. A gang's
  Events go to its object in its own dialect (`registry.involved_object`).
* **Gang status** is spelled by the gang's dialect (`registry.status_write`): the
  scheduler-plugins status as before (phase, counts, `scheduleStartTime`, a
  `PodGroupScheduled` condition), upstream's `PodGroupInitiallyScheduled` condition,
  Volcano's phase, counts and conditions (on the object: no status subresource), KAI's
  counts and `UnschedulableOnNodePool` scheduling condition (on `/status`), Grove's phase
  and `Scheduled` condition (on `/status`). Each is built on the previous status: for
  scheduler-plugins the body last written (as before; Phalanx alone writes it). The others'
  status is shared (kube-scheduler, Volcano's controllers, KAI's scheduler and Grove's
  operator write theirs too): each write builds on the status observed at a known
  `resourceVersion` (the watch's, or the answer to Phalanx's own last write) and carries it
  as a precondition. A 409 Conflict means someone wrote in between: the object is read again
  (GET) and the write rebuilt on it, up to `CONFLICT_ATTEMPTS` times; rebuilt, it may have
  nothing left to say (a True condition kube-scheduler wrote meanwhile is never turned
  back). Nothing new: nothing sent. Writes to one object go one at a time, in the order
  decided. After an object's first status, which goes at once, a status waits
  `status_coalesce_seconds` (1 s in `KubeSourceSettings`) before it is written, and one
  decided while it waits replaces it (only the newest is written): a gang's decisions and
  member counts come in bursts, a write of a custom resource's status is among the API
  server's dearer requests.
* **Requeue** touches `phalanx.io/requeued-at` on pending pods: an update moves a pod out of
  kube-scheduler's unschedulable queue.
* **Nominations** set a reserved member's `status.nominatedNodeName` and touch the same
  annotation in one write (pods/status accepts metadata changes), so nominating costs what
  the requeue cost before. Writes for one pod are serialised: a release's clear and the next
  reservation's nomination land in the order they were decided. A cluster whose RBAC does
  not grant `pods/status` gets the plain requeue instead (said once in the log).

Every write is best effort: a failure is logged, nothing is raised to the service. So every
write takes the client's report lane (`in_flight.Lane.REPORT`): a gang's bindings go first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from phalanx.core.groups import registry
from phalanx.core.groups.discovery import ServedKind
from phalanx.core.groups.registry import StatusPatch, StatusWrite
from phalanx.core.groups.status import GroupStatus
from phalanx.core.inventory import REQUEUE_ANNOTATION
from phalanx.core.model import GroupRef, PodRef
from phalanx.sources.base import Nomination
from phalanx.sources.in_flight import Lane
from phalanx.sources.informer import ApiError
from phalanx.sources.kube_commits import pod_path, rfc3339
from phalanx.sources.kube_dra import ALL_DRA_KINDS, DRA_GROUP_VERSION
from phalanx.sources.kube_groups import resource_version
from phalanx.sources.kube_writes import Writer
from phalanx.sources.kubeclient import MERGE_PATCH, STRATEGIC_MERGE_PATCH

log = logging.getLogger(__name__)

COMPONENT = "phalanx"
MESSAGE_LIMIT = 1024
# Writes of a shared status refused as conflicts before giving up until the next change:
# each conflict means another writer moved on, so a few rebuilds settle it.
CONFLICT_ATTEMPTS = 4
CONTENT_TYPES = {StatusPatch.MERGE: MERGE_PATCH, StatusPatch.STRATEGIC: STRATEGIC_MERGE_PATCH}

T = TypeVar("T")


async def _each(
    items: Sequence[T],
    write: Callable[[T], Awaitable[object]],
    refused: Callable[[T, ApiError], None],
) -> None:
    """`write` for every item at once; then each API refusal goes to `refused`, in order.
    Anything else an item raised is a bug, not an API answer, and is raised."""
    results = await asyncio.gather(*(write(item) for item in items), return_exceptions=True)
    for item, result in zip(items, results, strict=True):
        if isinstance(result, ApiError):
            refused(item, result)
        elif isinstance(result, BaseException):
            raise result


@dataclass(frozen=True, slots=True)
class Held:
    """A gang object the watches show: the kind it is served as, and its UID."""

    kind: ServedKind
    uid: str


@dataclass(frozen=True, slots=True)
class Observed:
    """A gang object's status as known, and the `resourceVersion` it was known at ("" when
    not known: the status Phalanx last wrote to an unshared status)."""

    status: Mapping[str, Any] | None
    resource_version: str = ""


@dataclass(slots=True)
class _Series:
    """One Event object in the API and the repeats folded into it."""

    name: str
    first: str
    count: int
    sent_at: float
    held: int = 0  # repeats since the last write, added to `count` by the next one
    message: str = ""  # as last written


class EventLimiter:
    """At most one write per (kind, object and UID, reason) per `interval`; repeats are
    counted, not sent.

    `admit` answers what to write now: (series, created) or None to stay quiet. A held
    message unlike the one last written is not a repeat: `changed` says so, and `wait` how
    long until the series may be written again.
    Loop-only, no locks.
    """

    MAX_SERIES = 10_000  # past this, series idle for 10 intervals are dropped

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self.interval = interval
        self.clock = clock
        self._series: dict[tuple[str, str, str], _Series] = {}

    def admit(
        self, key: tuple[str, str, str], name: str, stamp: str, message: str = ""
    ) -> tuple[_Series, bool] | None:
        now = self.clock()
        series = self._series.get(key)
        if series is None:
            self._prune(now)
            series = self._series[key] = _Series(name, stamp, 1, now, message=message)
            return series, True
        if now - series.sent_at < self.interval:
            series.held += 1
            return None
        series.count += series.held + 1
        series.held = 0
        series.sent_at = now
        series.message = message
        return series, False

    def unhold(self, key: tuple[str, str, str]) -> None:
        """One held message is about to be written after all: it is not a repeat to count."""
        series = self._series.get(key)
        if series is not None and series.held:
            series.held -= 1

    def changed(self, key: tuple[str, str, str], message: str) -> bool:
        series = self._series.get(key)
        return series is not None and series.message != message

    def wait(self, key: tuple[str, str, str]) -> float:
        series = self._series.get(key)
        return 0.0 if series is None else max(0.0, series.sent_at + self.interval - self.clock())

    def _prune(self, now: float) -> None:
        if len(self._series) < self.MAX_SERIES:
            return
        stale = [k for k, s in self._series.items() if now - s.sent_at > 10 * self.interval]
        for k in stale:
            del self._series[k]


class _InOrder:
    """Writes to one object, one at a time, in the order they were decided (asyncio's locks
    are FIFO): an earlier write cannot land after a later one. A key's lock lives only while
    a write holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # key -> (lock, writers)

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            _, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class Reports:
    """Events, gang status and requeues, written through `writer` (loop only).

    `uid_of(kind, key)` gives a Pod's or Node's UID ("" if unknown); `held(key)` the gang
    object whose object key (`GroupRef.object_ref.key`) is `key`, or None;
    `dra_version_of(kind)` the group version a DRA kind is read in.
    """

    def __init__(
        self,
        writer: Writer,
        *,
        identity: str,
        event_interval_seconds: float,
        uid_of: Callable[[str, str], str],
        held: Callable[[str], Held | None],
        dra_version_of: Callable[[str], str] = lambda kind: DRA_GROUP_VERSION,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        status_coalesce_seconds: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if status_coalesce_seconds < 0:
            raise ValueError(
                f"status_coalesce_seconds must be >= 0, got {status_coalesce_seconds!r}"
            )
        self.writer = writer
        self.status_coalesce_seconds = status_coalesce_seconds
        self._sleep = sleep
        self.identity = identity
        self.uid_of = uid_of
        self.dra_version_of = dra_version_of
        self.held = held
        self.wall_clock = wall_clock
        self._events = EventLimiter(event_interval_seconds, clock)
        # Object key -> its status as last written or (shared statuses) observed.
        self._statuses: dict[str, Observed] = {}
        # One pod's nominations, and one gang object's status writes, in the order decided.
        self._pod_writes = _InOrder()
        self._status_writes = _InOrder()
        # Gang object key -> the newest status decided and not yet being written, and what
        # every caller whose status it replaced waits on (done once it is written or dropped).
        self._newest_status: dict[str, tuple[GroupStatus, asyncio.Future[None]]] = {}
        # (kind, object key, reason) -> the newest Event message held by the limiter that
        # differs from the one written, to be written when the series may be again.
        self._trailing: dict[tuple[str, str, str], tuple[Mapping[str, str], str, bool]] = {}
        # Gang objects this process has sent (or found nothing new to send) a status for:
        # the first goes at once (Volcano's job controller creates a job's pods only once
        # its PodGroup has left Pending), later ones wait the coalescing window.
        self._status_sent: set[str] = set()
        self._may_nominate = True  # False once the API refused pods/status (RBAC)

    def forget_group(self, key: str) -> None:
        self._statuses.pop(key, None)
        self._status_sent.discard(key)

    def saw_status(
        self,
        kind: ServedKind,
        key: str,
        status: Mapping[str, Any] | None,
        resource_version: str = "",
    ) -> None:
        """The status the watch shows on gang object `key` at `resource_version`. Kept
        for shared statuses only: Phalanx alone writes scheduler-plugins' (built on what it
        wrote)."""
        if registry.shares_status(kind):
            self._statuses[key] = Observed(status, resource_version)

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
        """An Event on a core/v1 object (a Pod, a Node) or a `resource.k8s.io/v1` one (DRA)."""
        key = f"{namespace}/{name}" if namespace else name
        version = self.dra_version_of(kind) if kind in ALL_DRA_KINDS else "v1"
        involved: dict[str, str] = {"kind": kind, "name": name, "apiVersion": version}
        if namespace:
            involved["namespace"] = namespace
        uid = self.uid_of(kind, key)
        if uid:
            involved["uid"] = uid
        await self.emit_involved(involved, key, reason, message, warning=warning)

    async def emit_group_event(
        self, group: GroupRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """An Event on the gang's object, as its dialect's API names it; none without one."""
        target = group.object_ref
        held = self.held(target.key)
        if held is None:
            return
        involved = registry.involved_object(group, held.kind, held.uid)
        await self.emit_involved(involved, target.key, reason, message, warning=warning)

    async def emit_involved(
        self,
        involved: Mapping[str, str],
        key: str,
        reason: str,
        message: str,
        *,
        warning: bool,
    ) -> None:
        """An Event on `involved` (an `involvedObject`), rate-limited per `key` and reason.

        A message held back that differs from the one last written is written once the
        interval is up (the newest such, with the count of all held): a gang's reason that
        changed within it would otherwise never reach its object, since the journal reports
        a reason only when it changes."""
        stamp = rfc3339(self.wall_clock())
        name = involved["name"]
        # By UID too: a namesake created again within the interval is another object, and
        # `kubectl describe` finds its Events by its UID.
        series_key = (involved["kind"], f"{key} {involved.get('uid', '')}", reason)
        text = message[:MESSAGE_LIMIT]
        admitted = self._events.admit(series_key, f"{name}.{time.time_ns():x}", stamp, text)
        if admitted is None:
            if self._events.changed(series_key, text):
                await self._trail(series_key, involved, key, message, warning)
            else:
                self._trailing.pop(series_key, None)  # the written message is the newest again
            return
        series, created = admitted
        namespace = involved.get("namespace", "")
        where = namespace or "default"  # Events about cluster-scoped objects live in "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": series.name, "namespace": where},
            "involvedObject": dict(involved),
            "reason": reason,
            "message": text,
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
                    await self.writer.patch(f"{path}/{series.name}", body, lane=Lane.REPORT)
                    return
                except ApiError as exc:
                    if exc.status != 404:  # expired (Events live an hour): write it afresh
                        raise
            await self.writer.post(path, body, lane=Lane.REPORT)
        except ApiError as exc:
            log.debug("event not written", extra={"object": key, "reason": str(exc)})

    async def _trail(
        self,
        series_key: tuple[str, str, str],
        involved: Mapping[str, str],
        key: str,
        message: str,
        warning: bool,
    ) -> None:
        """Hold `message` as the series' newest; the first caller to hold one waits out the
        interval and writes whatever is newest then, later callers return at once."""
        waiting = series_key in self._trailing
        self._trailing[series_key] = (involved, message, warning)
        if waiting:
            return
        try:
            await self._sleep(self._events.wait(series_key))
        finally:
            newest = self._trailing.pop(series_key, None)  # cancelled: nothing left to swallow
        if newest is not None:
            held_involved, held_message, held_warning = newest
            self._events.unhold(series_key)
            await self.emit_involved(
                held_involved, key, series_key[2], held_message, warning=held_warning
            )

    # ---- requeue ------------------------------------------------------------------------

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        """Touch each pod's `phalanx.io/requeued-at` annotation: an update to a pod in
        kube-scheduler's unschedulable queue moves it back (the extender is among its
        rejectors, which every event may resolve). A pod already gone is fine."""
        if not pods:
            return
        body = {"metadata": {"annotations": {REQUEUE_ANNOTATION: rfc3339(self.wall_clock())}}}

        def write(pod: PodRef) -> Awaitable[object]:
            return self.writer.patch(pod_path(pod), body, lane=Lane.REPORT)

        def refused(pod: PodRef, exc: ApiError) -> None:
            if exc.status != 404:
                log.warning(
                    "cannot requeue a pod", extra={"pod": pod.key, "reason": f"{reason}: {exc}"}
                )

        await _each(pods, write, refused)

    # ---- nominations --------------------------------------------------------------------

    async def nominate(self, nominations: Sequence[Nomination], reason: str) -> None:
        """One pods/status merge patch per pod: `nominatedNodeName` (null clears it) and,
        with a node, the requeue annotation. The pod's UID goes in as a precondition: a pod
        deleted and re-created under the same name is not nominated. Gone pods are fine."""
        if not nominations:
            return
        if not self._may_nominate:
            await self.requeue([n.pod for n in nominations if n.node], reason)
            return
        refused: list[PodRef] = []

        def refusal(nomination: Nomination, exc: ApiError) -> None:
            if exc.status == 403:
                refused.append(nomination.pod)
            elif exc.status not in (404, 409, 422):
                log.warning(
                    "cannot nominate a pod's node",
                    extra={"pod": nomination.pod.key, "reason": f"{reason}: {exc}"},
                )

        await _each(nominations, self._nominate_one, refusal)
        if refused and self._may_nominate:
            self._may_nominate = False
            log.warning(
                "pods/status is not granted: reserved members are requeued without a "
                "nominated node (grant patch on pods/status to let kube-scheduler try the "
                "reserved node first)",
                extra={"reason": reason},
            )
        if refused:
            await self.requeue(refused, reason)

    async def _nominate_one(self, nomination: Nomination) -> None:
        pod = nomination.pod
        metadata: dict[str, Any] = {"uid": pod.uid} if pod.uid else {}
        if nomination.node:
            metadata["annotations"] = {REQUEUE_ANNOTATION: rfc3339(self.wall_clock())}
        body = {"metadata": metadata, "status": {"nominatedNodeName": nomination.node or None}}
        async with self._pod_writes.turn(pod.uid or pod.key):
            await self.writer.patch(pod_path(pod) + "/status", body, lane=Lane.REPORT)

    # ---- PodScheduled ------------------------------------------------------------------

    async def mark_scheduled(self, pods: Sequence[PodRef]) -> None:
        """One pods/status strategic merge patch per pod: its `PodScheduled` condition (the
        list's merge key is `type`, so no other condition is touched) True, as a binding
        sets it, its reason and message removed. The UID goes in as a precondition; gone
        pods are fine."""
        if not pods:
            return
        stamp = rfc3339(self.wall_clock())

        def refused(pod: PodRef, exc: ApiError) -> None:
            if exc.status not in (404, 409, 422):
                log.warning(
                    "cannot set a bound pod's PodScheduled condition",
                    extra={"pod": pod.key, "reason": str(exc)},
                )

        await _each(pods, lambda pod: self._mark_one(pod, stamp), refused)

    async def _mark_one(self, pod: PodRef, stamp: str) -> None:
        condition = {
            "type": "PodScheduled",
            "status": "True",
            "lastTransitionTime": stamp,
            "reason": None,
            "message": None,
        }
        body: dict[str, Any] = {"status": {"conditions": [condition]}}
        if pod.uid:
            body["metadata"] = {"uid": pod.uid}
        async with self._pod_writes.turn(pod.uid or pod.key):
            await self.writer.patch(
                pod_path(pod) + "/status",
                body,
                content_type=STRATEGIC_MERGE_PATCH,
                lane=Lane.REPORT,
            )

    # ---- gang status -------------------------------------------------------------------

    async def update_group_status(self, status: GroupStatus) -> None:
        """The gang's status in its dialect's terms, on its object; nothing without one.
        Writes for one object land in the order decided, each built on the one before.

        A status waits `status_coalesce_seconds` before its turn, and one decided while it
        waits (or while the write before it is in flight) replaces it: each status is
        whole, so the newest says all the ones before it would. A gang bound and then
        running within the window costs one write, not two; a slow API server, when
        decisions pile up, gets fewer writes still. An object's first status goes at once:
        others may be waiting for it (Volcano's job controller, to create the job's pods).
        Every caller returns once the status that replaced its own has been written (or
        found to say nothing new)."""
        key = status.ref.object_ref.key
        waiting = self._newest_status.get(key)
        if waiting is not None:  # a write of this object not yet sent: it takes this status
            self._newest_status[key] = (status, waiting[1])
            await asyncio.shield(waiting[1])
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._newest_status[key] = (status, done)
        taken = False
        try:
            if self.status_coalesce_seconds > 0 and key in self._status_sent:
                await self._sleep(self.status_coalesce_seconds)
            async with self._status_writes.turn(key):
                (newest, _), taken = self._newest_status.pop(key), True
                self._status_sent.add(key)
                await self._write_group_status(key, newest)
        finally:
            if not taken:  # cancelled while waiting: later statuses must not wait on it
                self._newest_status.pop(key, None)
            done.set_result(None)

    async def _write_group_status(self, key: str, status: GroupStatus) -> None:
        held = self.held(key)
        if held is None:
            return  # annotation-only gang, or its object is not (yet) seen
        shared = registry.shares_status(held.kind)
        for _ in range(CONFLICT_ATTEMPTS):
            known = self._statuses.get(key)
            if shared and (known is None or not known.resource_version):
                known = await self._read(held.kind, status)
                if known is None:
                    return
            write = registry.status_write(
                status,
                held.kind,
                known.status if known is not None else None,
                self.wall_clock(),
                resource_version=known.resource_version if known is not None else "",
            )
            if write is None:
                return
            try:
                answer = await self.writer.patch(
                    write.path,
                    write.body,
                    content_type=CONTENT_TYPES[write.patch],
                    lane=Lane.REPORT,
                )
            except ApiError as exc:
                if exc.status == 409 and write.resource_version:
                    self._statuses.pop(key, None)  # written in between: read it again
                    continue
                # Not written: the next write builds on what the object still holds.
                if exc.status != 404:
                    log.warning(
                        "cannot write a gang's status",
                        extra={"group": status.group_key, "path": write.path, "reason": str(exc)},
                    )
                return
            self._statuses[key] = _after(write, answer)
            return
        log.warning(
            "cannot write a gang's status: others kept writing it",
            extra={"group": status.group_key, "attempts": CONFLICT_ATTEMPTS},
        )

    async def _read(self, kind: ServedKind, status: GroupStatus) -> Observed | None:
        """The gang object's status and resourceVersion as the API holds them now; None
        when it cannot be read (gone, or the API refuses: logged)."""
        target = status.ref.object_ref
        try:
            raw = await self.writer.get(kind.object_path(target.namespace, target.name))
        except ApiError as exc:
            if exc.status != 404:
                log.warning(
                    "cannot read a gang's object to write its status",
                    extra={"group": status.group_key, "reason": str(exc)},
                )
            return None
        found = raw.get("status")
        return Observed(found if isinstance(found, Mapping) else None, resource_version(raw))


def _after(write: StatusWrite, answer: Mapping[str, Any]) -> Observed:
    """What a status write left: for a shared status, the object's status and version as
    the API answered (other writers' conditions included; if the answer has none, the
    version is unknown and the next write reads the object first); else the status
    Phalanx meant to leave."""
    if not write.resource_version:
        return Observed(write.status)
    status = answer.get("status")
    if isinstance(status, Mapping):
        return Observed(status, resource_version(answer))
    return Observed(write.status)
