"""The live cluster as a `ClusterSource`: informers in, bindings and reports out.

Threads and the loop::

    informer threads (Node, Pod, PodGroup) ──decoded changes──▶ loop.call_soon_threadsafe
        ──▶ the service's sink: ClusterState + this source's own tables (one writer: the loop)
    lease thread ──▶ `may_roll_forward`
    async methods (bind, commit records, events, status) ──▶ a bounded thread pool ──▶ API

* **Which pods.** Pods of every scheduler count toward node usage once bound; an unbound
  pod is only kept when it names one of the served `scheduler_names` (kube-scheduler calls
  us for our profile only, so anyone else's pending pods are not our work).
* **PodGroup CRD missing.** Gangs are declared by pod annotations only. That is logged
  once; the CRD is looked for again every `crd_recheck_seconds` and followed from when it
  appears. The source is synced once Nodes and Pods are listed and PodGroups are listed or
  known to be absent.
* **Bad input.** An object the inventory refuses is skipped (a PodGroup's members get
  its reason through `ClusterState.set_group_error`; a pod with a malformed `phalanx.io/*`
  annotation stays for usage with `Pod.invalid`): one log line and one Event per object
  and reason, nothing else stops.
* **Commit records** (annotation `phalanx.io/commit`): on the PodGroup when the gang has
  one, else on every member pod. They are read back from the same watches, so a new
  instance sees them after its first sync, and `phalanx.service.rollforward` finishes the
  gangs they describe while this instance holds the `phalanx-rollforward` Lease.
* **Events** are rate-limited per (object, reason): at most one API write per
  `event_interval_seconds`, later repeats folded into the Event's `count`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from phalanx.core.cache import ClusterState
from phalanx.core.inventory import REQUEUE_ANNOTATION, parse_node, parse_pod, parse_pod_group
from phalanx.core.journal import GroupPhase
from phalanx.core.model import Binding, GroupRef, Node, Pod, PodGroup, PodRef
from phalanx.core.rollforward import (
    COMMIT_ANNOTATION,
    CommitRecord,
    decode_commit_record,
    encode_commit_record,
)
from phalanx.sources.base import GroupStatus, StateSink, StateUpdate
from phalanx.sources.informer import (
    ApiError,
    Delete,
    Ending,
    Informer,
    InformerSettings,
    Invalid,
    Kind,
    Transport,
    Upsert,
)
from phalanx.sources.lease import LeaseHolder, LeaseSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

COMPONENT = "phalanx"
PODGROUP_GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
PODGROUP_API = f"/apis/{PODGROUP_GROUP_VERSION}"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
KINDS = ("Node", "Pod", "PodGroup")


class KubeApi(Transport, Protocol):
    """What the source needs from the API: `kubeclient.KubeClient`, or a test's fake."""

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]: ...

    def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def bind(self, binding: Binding) -> None: ...

    def close(self) -> None: ...


class _Inc(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Labelled(Protocol):
    def labels(self, *values: str) -> _Inc: ...


class WatchMetrics(Protocol):
    """The part of `phalanx.service.metrics.Metrics` a source updates."""

    @property
    def watch_restarts(self) -> _Labelled: ...


@dataclass(frozen=True, slots=True)
class KubeSourceSettings:
    # Threads for blocking API calls from the loop (bindings, patches, events). A gang's
    # bindings are issued together; 16 covers a large gang without opening a flood.
    api_workers: int = 16
    # How often a missing PodGroup CRD is looked for again (seconds).
    crd_recheck_seconds: float = 60.0
    # At most one Event write per (object, reason) in this window (seconds).
    event_interval_seconds: float = 30.0
    # Attempts and first backoff (seconds, doubling) of an idempotent write that failed
    # transiently: commit records, PodGroup status, Events.
    write_attempts: int = 3
    write_backoff_seconds: float = 0.2
    informer: InformerSettings = field(default_factory=InformerSettings)
    lease: LeaseSettings = field(default_factory=LeaseSettings)


# ---- decoding (informer threads) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recorded(Generic[T]):
    """A decoded object and the commit record it carries (or why that record is unreadable)."""

    obj: T
    commit: CommitRecord | None = None
    commit_error: str = ""


def _annotations(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    return notes if isinstance(notes, Mapping) else {}


def _commit_of(group_key: str | None, raw: Mapping[str, Any]) -> tuple[CommitRecord | None, str]:
    text = _annotations(raw).get(COMMIT_ANNOTATION)
    if group_key is None or not isinstance(text, str) or not text:
        return None, ""
    try:
        return decode_commit_record(group_key, text), ""
    except ValueError as exc:
        return None, str(exc)


def decode_pod(raw: dict[str, Any]) -> Recorded[Pod]:
    pod = parse_pod(raw)
    commit, error = _commit_of(pod.group.key if pod.group else None, raw)
    return Recorded(pod, commit, error)


def decode_pod_group(raw: dict[str, Any]) -> Recorded[PodGroup]:
    group = parse_pod_group(raw)
    commit, error = _commit_of(group.key, raw)
    return Recorded(group, commit, error)


NODES: Kind[Node] = Kind("Node", "/api/v1/nodes", parse_node)
PODS: Kind[Recorded[Pod]] = Kind("Pod", "/api/v1/pods", decode_pod)
POD_GROUPS: Kind[Recorded[PodGroup]] = Kind(
    "PodGroup", f"{PODGROUP_API}/podgroups", decode_pod_group
)


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _camel(reason: str) -> str:
    """`waiting-for-members` -> `WaitingForMembers` (Kubernetes reasons are CamelCase)."""
    return "".join(part[:1].upper() + part[1:] for part in reason.replace("_", "-").split("-"))


# ---- Events -----------------------------------------------------------------------------


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


# ---- the source -------------------------------------------------------------------------


class KubeSource:
    """A `ClusterSource` and `CommitLog` over the Kubernetes API (see module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        scheduler_names: Sequence[str] = ("phalanx",),
        namespace: str = "default",
        metrics: WatchMetrics | None = None,
        settings: KubeSourceSettings | None = None,
        identity: str | None = None,
        name: str = "kubernetes",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.scheduler_names = frozenset(scheduler_names)
        self.namespace = namespace
        self.metrics = metrics
        self.settings = settings or KubeSourceSettings()
        self.identity = identity or f"{COMPONENT}-{uuid.uuid4().hex[:8]}"
        self._name = name
        self.clock = clock
        self.wall_clock = wall_clock
        self._stop = threading.Event()
        inf = self.settings.informer
        self.nodes = Informer(
            NODES, api, self._on_nodes, settings=inf, on_restart=self._restarted, stop=self._stop
        )
        self.pods = Informer(
            PODS, api, self._on_pods, settings=inf, on_restart=self._restarted, stop=self._stop
        )
        self.pod_groups = Informer(
            POD_GROUPS,
            api,
            self._on_pod_groups,
            settings=inf,
            on_restart=self._restarted,
            stop=self._stop,
        )
        self.lease = LeaseHolder(
            api, namespace, identity=self.identity, settings=self.settings.lease
        )
        self._pool = ThreadPoolExecutor(self.settings.api_workers, thread_name_prefix="phalanx-api")
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sink: StateSink | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        # Loop-side tables (written only by updates run on the loop).
        self._synced: set[str] = set()
        self._crd_present: bool | None = None
        self._groups: dict[str, str] = {}  # every PodGroup object (valid or not): key -> uid
        self._group_commits: dict[str, CommitRecord] = {}
        self._pod_commits: dict[str, CommitRecord] = {}  # by pod key, annotation-only gangs
        self._reported: dict[tuple[str, str], str] = {}  # (kind, key) -> reason logged
        self._statuses: dict[str, dict[str, Any]] = {}  # group key -> last status written
        self._events = EventLimiter(self.settings.event_interval_seconds, clock)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | Path,
        *,
        context: str | None = None,
        namespace: str | None = None,
        **kwargs: Any,
    ) -> KubeSource:
        """`phalanx serve --kubeconfig PATH`; `kwargs` as for the constructor."""
        from phalanx.sources.kubeclient import KubeClient  # noqa: PLC0415  # the only kubernetes import

        api = KubeClient.from_kubeconfig(path, context=context)
        return cls(api, namespace=namespace or "default", name=f"kubeconfig {path}", **kwargs)

    @classmethod
    def in_cluster(cls, *, namespace: str | None = None, **kwargs: Any) -> KubeSource:
        """`phalanx serve --in-cluster`: the pod's service account and namespace."""
        from phalanx.sources.kubeclient import KubeClient  # noqa: PLC0415

        if namespace is None:
            try:
                namespace = Path(SERVICE_ACCOUNT_NAMESPACE).read_text(encoding="utf-8").strip()
            except OSError:
                namespace = "default"
        return cls(KubeClient.in_cluster(), namespace=namespace, name="in-cluster", **kwargs)

    # ---- ClusterSource: lifecycle ------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def synced(self) -> bool:
        return all(kind in self._synced for kind in KINDS)

    @property
    def annotation_only(self) -> bool:
        """True while the PodGroup CRD is known to be absent."""
        return self._crd_present is False

    async def start(self, sink: StateSink) -> None:
        self._loop = asyncio.get_running_loop()
        self._sink = sink
        for target, label in (
            (self.nodes.run, "Node"),
            (self.pods.run, "Pod"),
            (self._follow_pod_groups, "PodGroup"),
        ):
            thread = threading.Thread(target=target, name=f"informer-{label}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.lease.start()

    async def stop(self) -> None:
        self._stop.set()
        for informer in (self.nodes, self.pods, self.pod_groups):
            informer.stop()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._join)
        for task in list(self._tasks):
            task.cancel()
        self._sink = None
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def _join(self) -> None:
        self.lease.stop()
        for thread in self._threads:
            thread.join(timeout=5.0)

    def _post(self, update: Callable[[ClusterState], None]) -> None:
        """Hand one update to the loop (from any thread); dropped once stopped."""
        loop, sink = self._loop, self._sink
        if loop is None or sink is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between check and call
            loop.call_soon_threadsafe(sink, update)

    def _restarted(self, kind: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.watch_restarts.labels(kind, reason).inc()

    def _mark_synced(self, kind: str) -> StateUpdate:
        def update(_: ClusterState) -> None:
            if kind not in self._synced:
                self._synced.add(kind)
                log.info("informer synced", extra={"kind": kind})

        return update

    # ---- informer handlers (informer threads) ------------------------------------------

    def _on_nodes(self, changes: Sequence[Upsert[Node] | Delete | Invalid], synced: bool) -> None:
        def update(state: ClusterState) -> None:
            for change in changes:
                if isinstance(change, Upsert):
                    state.upsert_node(change.obj)
                    self._valid_again("Node", change.key)
                elif isinstance(change, Delete):
                    state.remove_node(change.key)
                    self._valid_again("Node", change.key)
                else:  # a node we cannot read is not planned onto
                    state.remove_node(change.key)
                    self._report("Node", change.key, change.reason)
            if synced:
                self._mark_synced("Node")(state)

        self._post(update)

    def _on_pods(
        self, changes: Sequence[Upsert[Recorded[Pod]] | Delete | Invalid], synced: bool
    ) -> None:
        names = self.scheduler_names

        def update(state: ClusterState) -> None:
            for change in changes:
                if isinstance(change, Upsert):
                    pod = change.obj.obj
                    if not pod.node_name and pod.scheduler_name not in names:
                        state.remove_pod(pod.uid)  # someone else's pending pod: not our work
                        self._pod_commits.pop(change.key, None)
                        continue
                    state.upsert_pod(pod)
                    self._note_pod_commit(change.key, change.obj)
                    if pod.invalid and not pod.node_name:
                        self._report("Pod", change.key, pod.invalid, done="not scheduled")
                    else:
                        self._valid_again("Pod", change.key)
                else:
                    state.remove_pod(change.uid)
                    self._pod_commits.pop(change.key, None)
                    if isinstance(change, Invalid):
                        self._report("Pod", change.key, change.reason)
                    else:
                        self._valid_again("Pod", change.key)
            if synced:
                self._mark_synced("Pod")(state)

        self._post(update)

    def _on_pod_groups(
        self, changes: Sequence[Upsert[Recorded[PodGroup]] | Delete | Invalid], synced: bool
    ) -> None:
        def update(state: ClusterState) -> None:
            synced_before = "PodGroup" in self._synced
            for change in changes:
                if isinstance(change, Upsert):
                    appeared = change.key not in self._groups or state.group_error(change.key)
                    state.upsert_group(change.obj.obj)
                    self._groups[change.key] = change.uid
                    if appeared and synced_before:
                        # Members told "waiting for PodGroup" wait in kube-scheduler's
                        # unschedulable queue: ask for them back now that it exists.
                        pending = [
                            p.ref for p in state.members(change.key) if not state.is_bound(p)
                        ]
                        self._spawn(self.requeue(pending, f"PodGroup {change.key} appeared"))
                    self._valid_again("PodGroup", change.key)
                    if change.obj.commit is not None:
                        self._group_commits[change.key] = change.obj.commit
                    else:
                        self._group_commits.pop(change.key, None)
                        if change.obj.commit_error:
                            self._report("PodGroup", change.key, change.obj.commit_error)
                elif isinstance(change, Invalid):
                    state.set_group_error(change.key, change.reason)
                    self._groups[change.key] = change.uid
                    self._group_commits.pop(change.key, None)
                    self._report("PodGroup", change.key, change.reason)
                else:  # releases its reservation, if its members were still pending
                    state.remove_group(change.key)
                    self._groups.pop(change.key, None)
                    self._group_commits.pop(change.key, None)
                    self._statuses.pop(change.key, None)
                    self._valid_again("PodGroup", change.key)
            if synced:
                self._mark_synced("PodGroup")(state)

        self._post(update)

    def _note_pod_commit(self, key: str, recorded: Recorded[Pod]) -> None:
        if recorded.commit is not None:
            self._pod_commits[key] = recorded.commit
        else:
            self._pod_commits.pop(key, None)
            if recorded.commit_error:
                self._report("Pod", key, recorded.commit_error)

    def _follow_pod_groups(self) -> None:
        """The PodGroup thread: follow the CRD while it exists, else look for it now and then."""
        said_missing = False
        backoff = self.settings.informer.backoff
        attempt = 0
        while not self._stop.is_set():
            try:
                present = self._has_pod_groups()
            except Exception as exc:  # noqa: BLE001  # any failure: live on to find the CRD
                log.warning("cannot discover the PodGroup API", extra={"reason": str(exc)})
                if self._stop.wait(backoff.delay(attempt, 0.5)):
                    return
                attempt += 1
                continue
            attempt = 0
            self._post(functools.partial(self._set_crd_present, present))
            if not present:
                if not said_missing:
                    log.warning(
                        "PodGroup CRD (scheduling.x-k8s.io/v1alpha1) is not installed: gangs are "
                        "declared by pod annotations only; looking for it again every "
                        f"{self.settings.crd_recheck_seconds:g}s"
                    )
                    said_missing = True
                self._post(self._mark_synced("PodGroup"))
                if self._stop.wait(self.settings.crd_recheck_seconds):
                    return
                continue
            if said_missing:
                log.info("PodGroup CRD found: following PodGroups")
                said_missing = False
            if self.pod_groups.run() is Ending.STOPPED:
                return
            log.warning("the PodGroup API went away; back to annotation-only gangs")

    def _has_pod_groups(self) -> bool:
        try:
            answer = self.api.request("GET", PODGROUP_API)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        resources = answer.get("resources") or []
        return any(isinstance(r, dict) and r.get("name") == "podgroups" for r in resources)

    def _set_crd_present(self, present: bool, _: ClusterState) -> None:
        self._crd_present = present

    # ---- bad input: one log line and one Event per object and reason -------------------

    def _report(self, kind: str, key: str, reason: str, *, done: str = "skipped") -> None:
        """Say once that `kind` `key` is skipped or unschedulable, and why. Loop only."""
        if self._reported.get((kind, key)) == reason:
            return
        self._reported[(kind, key)] = reason
        log.warning(
            f"invalid {kind} {key}: {done}", extra={"kind": kind, "object": key, "reason": reason}
        )
        namespace, _, name = key.rpartition("/")
        self._spawn(self.emit_event(kind, namespace, name, "InvalidObject", reason, warning=True))

    def _valid_again(self, kind: str, key: str) -> None:
        self._reported.pop((kind, key), None)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- blocking calls, off the loop --------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """An idempotent write (a merge patch, an Event), retried with backoff while the
        failure is transient (no answer, 429, 5xx); other refusals are raised at once."""
        attempts = self.settings.write_attempts
        for attempt in range(attempts):
            try:
                return await self._call(fn, *args)
            except ApiError as exc:
                transient = exc.status in (0, 429) or exc.status >= 500
                if not transient or attempt + 1 == attempts:
                    raise
                await asyncio.sleep(self.settings.write_backoff_seconds * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def bind(self, binding: Binding) -> None:
        """One attempt: the service decides about retries (a conflict is never retried)."""
        await self._call(self.api.bind, binding)

    # ---- commit records ----------------------------------------------------------------

    def _group_path(self, key: str, sub: str = "") -> str:
        ref = GroupRef.parse(key)
        return f"{PODGROUP_API}/namespaces/{ref.namespace}/podgroups/{ref.name}{sub}"

    @staticmethod
    def _pod_path(pod: PodRef) -> str:
        return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"

    async def write_commit_record(self, record: CommitRecord) -> None:
        """On the PodGroup if the gang has one, else on every member (concurrently).

        Raises ApiError if the record could not be written whole (nothing is bound yet);
        a partly written annotation-only record is taken back first.
        """
        at = rfc3339(self.wall_clock())
        body = {"metadata": {"annotations": {COMMIT_ANNOTATION: encode_commit_record(record, at)}}}
        if record.group_key in self._groups:
            await self._write(self.api.patch, self._group_path(record.group_key), body)
            return
        pods = sorted(record.placements)
        results = await asyncio.gather(
            *(self._write(self.api.patch, self._pod_path(PodRef.parse(k)), body) for k in pods),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            written = [
                k for k, r in zip(pods, results, strict=True) if not isinstance(r, BaseException)
            ]
            await self._clear_on_pods(written)
            raise failed[0]

    @property
    def may_roll_forward(self) -> bool:
        return self.lease.held

    def commit_records(self) -> Mapping[str, CommitRecord]:
        records: dict[str, CommitRecord] = {}
        for record in self._pod_commits.values():
            if record.group_key in self._groups:
                continue  # a PodGroup's own record wins over copies on pods
            have = records.get(record.group_key)
            if have is None or record.at > have.at:
                records[record.group_key] = record
        records.update(self._group_commits)
        return records

    async def clear_commit_record(self, group_key: str) -> None:
        """Remove the record wherever it is. A copy that could not be removed stays in the
        book (and in the API), so a later pass tries again."""
        paths = {
            k: self._pod_path(PodRef.parse(k))
            for k, r in self._pod_commits.items()
            if r.group_key == group_key
        }
        if group_key in self._group_commits:
            paths[""] = self._group_path(group_key)
        for key in await self._clear(paths):
            if key:
                self._pod_commits.pop(key, None)
            else:
                self._group_commits.pop(group_key, None)

    async def _clear_on_pods(self, pods: Sequence[str]) -> None:
        await self._clear({k: self._pod_path(PodRef.parse(k)) for k in pods})

    async def _clear(self, paths: Mapping[str, str]) -> list[str]:
        """Drop the annotation at each path, concurrently; the keys where it is gone now."""
        body = {"metadata": {"annotations": {COMMIT_ANNOTATION: None}}}
        keys = list(paths)
        results = await asyncio.gather(
            *(self._write(self.api.patch, paths[k], body) for k in keys), return_exceptions=True
        )
        cleared = []
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, ApiError) and result.status != 404:
                log.warning(
                    "cannot clear a commit record",
                    extra={"object": paths[key], "reason": str(result)},
                )
                continue
            if isinstance(result, BaseException) and not isinstance(result, ApiError):
                raise result  # a bug, not an API answer
            cleared.append(key)  # cleared, or gone together with its object (404)
        return cleared

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
        uid = self._uid_of(kind, key)
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
                    await self._write(self.api.patch, f"{path}/{series.name}", body)
                    return
                except ApiError as exc:
                    if exc.status != 404:  # expired (Events live an hour): write it afresh
                        raise
            await self._write(self.api.request, "POST", path, body)
        except ApiError as exc:
            log.debug("event not written", extra={"object": key, "reason": str(exc)})

    def _uid_of(self, kind: str, key: str) -> str:
        if kind == "PodGroup":
            return self._groups.get(key, "")
        informer = self.pods if kind == "Pod" else self.nodes if kind == "Node" else None
        return informer.uid_of(key) if informer is not None else ""

    # ---- requeue ------------------------------------------------------------------------

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        """Touch each pod's `phalanx.io/requeued-at` annotation: an update to a pod in
        kube-scheduler's unschedulable queue moves it back (the extender is among its
        rejectors, which every event may resolve). A pod already gone is fine."""
        if not pods:
            return
        body = {"metadata": {"annotations": {REQUEUE_ANNOTATION: rfc3339(self.wall_clock())}}}
        results = await asyncio.gather(
            *(self._write(self.api.patch, self._pod_path(pod), body) for pod in pods),
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
        if key not in self._groups:
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
            await self._write(self.api.patch, self._group_path(key, "/status"), {"status": body})
        except ApiError as exc:
            self._statuses.pop(key, None)
            if exc.status != 404:
                log.warning(
                    "cannot write PodGroup status", extra={"group": key, "reason": str(exc)}
                )


def _api_version(kind: str) -> str:
    return PODGROUP_GROUP_VERSION if kind == "PodGroup" else "v1"
