"""The live cluster as a `ClusterSource`: informers in, bindings and reports out.

Threads and the loop::

    informer threads (Node, Pod, PodGroup) ──decoded changes──▶ loop.call_soon_threadsafe
        ──▶ the service's sink: ClusterState + this source's own tables (one writer: the loop)
    lease thread ──▶ `may_roll_forward`
    async methods (bind, commit records, events, status) ──▶ `Writer` (kube_writes) ──▶ API

The parts: `kube_writes` (the write side of the API), `kube_commits` (commit records),
`kube_reports` (Events, PodGroup status, requeue); this module wires the informers, finds
the PodGroup CRD, and keeps the loop-side tables they share.

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
* **Commit records** (`kube_commits`) are read back from the same watches, so a new
  instance sees them after its first sync, and `phalanx.service.rollforward` finishes the
  gangs they describe while this instance holds the `phalanx-rollforward` Lease.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from phalanx.core.cache import ClusterState
from phalanx.core.inventory import parse_node
from phalanx.core.model import Binding, GroupRef, Node, Pod, PodGroup, PodRef
from phalanx.core.rollforward import (
    CommitRecord,
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
    Upsert,
)
from phalanx.sources.kube_async import AsyncKubeSettings
from phalanx.sources.kube_commits import CommitBook, Recorded, decode_pod, decode_pod_group
from phalanx.sources.kube_reports import Reports
from phalanx.sources.kube_writes import AsyncWriter, KubeApi, PooledWriter, Writer, WriteSettings
from phalanx.sources.kubeclient import KubeClient, in_cluster_access, kubeconfig_access
from phalanx.sources.lease import LeaseHolder, LeaseSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

COMPONENT = "phalanx"
PODGROUP_GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
PODGROUP_API = f"/apis/{PODGROUP_GROUP_VERSION}"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
KINDS = ("Node", "Pod", "PodGroup")


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
    # How often a missing PodGroup CRD is looked for again (seconds).
    crd_recheck_seconds: float = 60.0
    # At most one Event write per (object, reason) in this window (seconds).
    event_interval_seconds: float = 30.0
    writes: WriteSettings = field(default_factory=WriteSettings)
    informer: InformerSettings = field(default_factory=InformerSettings)
    lease: LeaseSettings = field(default_factory=LeaseSettings)


NODES: Kind[Node] = Kind("Node", "/api/v1/nodes", parse_node)
PODS: Kind[Recorded[Pod]] = Kind("Pod", "/api/v1/pods", decode_pod)
POD_GROUPS: Kind[Recorded[PodGroup]] = Kind(
    "PodGroup", f"{PODGROUP_API}/podgroups", decode_pod_group
)


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
        writer: Writer | None = None,
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
        self.writer: Writer = writer or PooledWriter(api, self.settings.writes)
        self.commits = CommitBook(self.writer, self._group_path, wall_clock)
        self.reports = Reports(
            self.writer,
            identity=self.identity,
            event_interval_seconds=self.settings.event_interval_seconds,
            uid_of=self._uid_of,
            group_path=self._group_path,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sink: StateSink | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        # Loop-side tables (written only by updates run on the loop).
        self._synced: set[str] = set()
        self._crd_present: bool | None = None
        self._groups: dict[str, str] = {}  # every PodGroup object (valid or not): key -> uid
        self._reported: dict[tuple[str, str], str] = {}  # (kind, key) -> reason logged

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | Path,
        *,
        context: str | None = None,
        namespace: str | None = None,
        api_settings: AsyncKubeSettings | None = None,
        **kwargs: Any,
    ) -> KubeSource:
        """`phalanx serve --kubeconfig PATH`; `kwargs` as for the constructor. Watches and the
        lease use the blocking client on their threads; writes go through `AsyncWriter`."""
        api = KubeClient.from_kubeconfig(path, context=context)
        writer = AsyncWriter(kubeconfig_access(path, context=context), api_settings)
        return cls(
            api,
            namespace=namespace or "default",
            name=f"kubeconfig {path}",
            writer=writer,
            **kwargs,
        )

    @classmethod
    def in_cluster(
        cls,
        *,
        namespace: str | None = None,
        api_settings: AsyncKubeSettings | None = None,
        **kwargs: Any,
    ) -> KubeSource:
        """`phalanx serve --in-cluster`: the pod's service account and namespace."""
        if namespace is None:
            try:
                namespace = Path(SERVICE_ACCOUNT_NAMESPACE).read_text(encoding="utf-8").strip()
            except OSError:
                namespace = "default"
        writer = AsyncWriter(in_cluster_access(), api_settings)
        return cls(
            KubeClient.in_cluster(), namespace=namespace, name="in-cluster", writer=writer, **kwargs
        )

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
        await self.writer.aclose()
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
                        self.commits.forget_pod(change.key)
                        continue
                    state.upsert_pod(pod)
                    error = self.commits.saw_pod(change.key, change.obj)
                    if error:
                        self._report("Pod", change.key, error)
                    if pod.invalid and not pod.node_name:
                        self._report("Pod", change.key, pod.invalid, done="not scheduled")
                    else:
                        self._valid_again("Pod", change.key)
                else:
                    state.remove_pod(change.uid)
                    self.commits.forget_pod(change.key)
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
                    error = self.commits.saw_group(change.key, change.obj)
                    if error:
                        self._report("PodGroup", change.key, error)
                elif isinstance(change, Invalid):
                    state.set_group_error(change.key, change.reason)
                    self._groups[change.key] = change.uid
                    self.commits.forget_group(change.key)
                    self._report("PodGroup", change.key, change.reason)
                else:  # releases its reservation, if its members were still pending
                    state.remove_group(change.key)
                    self._groups.pop(change.key, None)
                    self.commits.forget_group(change.key)
                    self.reports.forget_group(change.key)
                    self._valid_again("PodGroup", change.key)
            if synced:
                self._mark_synced("PodGroup")(state)

        self._post(update)

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

    # ---- ClusterSource and CommitLog: the writes -----------------------------------------

    def _group_path(self, key: str) -> str | None:
        """The API path of the gang's PodGroup object, or None when it has none."""
        if key not in self._groups:
            return None
        ref = GroupRef.parse(key)
        return f"{PODGROUP_API}/namespaces/{ref.namespace}/podgroups/{ref.name}"

    def _uid_of(self, kind: str, key: str) -> str:
        if kind == "PodGroup":
            return self._groups.get(key, "")
        informer = self.pods if kind == "Pod" else self.nodes if kind == "Node" else None
        return informer.uid_of(key) if informer is not None else ""

    async def bind(self, binding: Binding, *, timeout_seconds: float | None = None) -> None:
        """Overload is retried within `timeout_seconds` (the writer's); a conflict never is."""
        await self.writer.bind(binding, timeout_seconds=timeout_seconds)

    async def write_commit_record(self, record: CommitRecord) -> None:
        await self.commits.write(record)

    @property
    def may_roll_forward(self) -> bool:
        return self.lease.held

    def commit_records(self) -> Mapping[str, CommitRecord]:
        return self.commits.records()

    async def clear_commit_record(self, group_key: str) -> None:
        await self.commits.clear(group_key)

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
        await self.reports.emit_event(kind, namespace, name, reason, message, warning=warning)

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        await self.reports.requeue(pods, reason)

    async def update_group_status(self, status: GroupStatus) -> None:
        await self.reports.update_group_status(status)
