"""The live cluster as a `ClusterSource`: informers in, bindings and reports out.

Threads and the loop::

    informer threads (Node, Pod, one per served gang kind) ──decoded changes──▶
        loop.call_soon_threadsafe ──▶ the service's sink: ClusterState + this source's own
        tables (one writer: the loop)
    discovery thread (kube_groups) ──▶ which gang kinds to follow; starts their informers
    lease thread ──▶ `may_roll_forward`
    async methods (bind, commit records, events, status) ──▶ `Writer` (kube_writes) ──▶ API

The parts: `kube_writes` (the write side of the API), `kube_commits` (commit records),
`kube_reports` (Events, gang status, requeue), `kube_groups` (discovery and the gang
informers); this module wires them and keeps the loop-side tables they share.

* **Which pods.** Pods of every scheduler count toward node usage once bound; an unbound
  pod is only kept when it names one of the served `scheduler_names` (kube-scheduler calls
  us for our profile only, so anyone else's pending pods are not our work).
* **DRA** (`kube_dra`): ResourceSlices, DeviceClasses, ResourceClaims and templates, when
  `resource.k8s.io/v1` is served; every node and pod enters the model through its bridge.
* **Gang dialects.** Every gang API the API server serves is followed (discovery at start,
  about a second after a gang kind's CRD changes, and every `crd_recheck_seconds`:
  scheduler-plugins, Volcano and KAI PodGroups, Grove's PodGangs, upstream
  `scheduling.k8s.io` PodGroups in the newest served version and 1.35's Workloads).
  Without the scheduler-plugins CRD, its gangs are declared by pod annotations only; that
  is logged once. The source is synced once Nodes and Pods are listed, discovery has
  answered, and every gang kind served then is listed (the CRD watch counts for nothing
  there). Objects are found through their `GroupRef` (`object_ref`, the kind they are
  served as): no key is split.
* **Bad input.** An object the inventory refuses is skipped (a gang object's members get
  its reason through `ClusterState.set_group_error`; a pod with a malformed `phalanx.io/*`
  annotation stays for usage with `Pod.invalid`): one log line and one Event per object
  and reason, nothing else stops. What Phalanx ignores in a gang object (a Volcano queue;
  Phalanx's annotations on a composite gang's child PodGroup, known once the tree is) and
  a pod claimed by two dialects (which one won) are said the same way, once.
* **kube-scheduler's own gang scheduling.** Given the KubeSchedulerConfiguration
  kube-scheduler runs (`scheduler_config`), a served profile that leaves `GangScheduling`
  on while the upstream gang API is served is reported when discovery first finds that
  API (a log line) and on every upstream gang object (an Event,
  `NativeGangScheduling`): see `phalanx.core.groups.coexistence`.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from phalanx.core.cache import ClusterState
from phalanx.core.groups import composite, registry
from phalanx.core.groups.coexistence import NativeGang, native_gang_profiles
from phalanx.core.groups.composite import CompositePodGroup
from phalanx.core.groups.discovery import Served, ServedKind
from phalanx.core.groups.upstream import Workload
from phalanx.core.inventory import parse_node
from phalanx.core.model import Binding, Dialect, GroupRef, Node, Pod, PodRef
from phalanx.core.rollforward import (
    CommitRecord,
)
from phalanx.sources.base import GroupStatus, Nomination, StateSink, StateUpdate
from phalanx.sources.informer import (
    Delete,
    Informer,
    InformerSettings,
    Invalid,
    Kind,
    Upsert,
)
from phalanx.sources.kube_async import AsyncKubeCounts, AsyncKubeSettings
from phalanx.sources.kube_commits import CommitBook, Recorded, decode_pod
from phalanx.sources.kube_dra import ALL_DRA_KINDS, INVALID_OBJECT, DraFeed
from phalanx.sources.kube_groups import GroupChanges, GroupFollower, label
from phalanx.sources.kube_reports import Held, Reports
from phalanx.sources.kube_writes import AsyncWriter, KubeApi, PooledWriter, Writer, WriteSettings
from phalanx.sources.kubeclient import (
    KubeClient,
    in_cluster_access,
    kubeconfig_access,
    kubeconfig_namespace,
)
from phalanx.sources.lease import LeaseHolder, LeaseSettings
from phalanx.sources.notices import Notices
from phalanx.sources.sightings import BindingSightings

log = logging.getLogger(__name__)

T = TypeVar("T")

COMPONENT = "phalanx"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
KINDS = ("Node", "Pod")
# Event reasons of what the source itself says about objects (besides gang decisions);
# `INVALID_OBJECT` is the DRA feed's too.
FIELD_IGNORED = "FieldIgnored"
DIALECT_CONFLICT = "GangDialectConflict"
NATIVE_GANG = "NativeGangScheduling"


class _Inc(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Labelled(Protocol):
    def labels(self, *values: str) -> _Inc: ...


class _Observe(Protocol):
    def observe(self, amount: float) -> None: ...


class WatchMetrics(Protocol):
    """The part of `phalanx.service.metrics.Metrics` a source updates or exports through."""

    @property
    def watch_restarts(self) -> _Labelled: ...

    @property
    def watch_delay(self) -> _Observe: ...

    def watch_api_client(self, counts: Callable[[], AsyncKubeCounts]) -> None: ...


def _ignore_delay(seconds: float) -> None:
    del seconds


@dataclass(frozen=True, slots=True)
class KubeSourceSettings:
    # How often the served gang APIs are discovered again (seconds): a feature gate turned on
    # at an upgrade; a CRD installed later where Phalanx may not watch CRDs (else it is
    # followed about a second after it changes, `kube_groups`). Also the DRA API's.
    crd_recheck_seconds: float = 60.0
    # At most one Event write per (object, reason) in this window (seconds).
    event_interval_seconds: float = 30.0
    # How long a gang's status waits before it is written (seconds), after the object's
    # first; every newer status of the same object decided meanwhile replaces it. A third
    # fewer PodGroup status writes in a burst of gangs that fit
    # (bench/results/2026-12-06-status-coalesce.md).
    status_coalesce_seconds: float = 1.0
    writes: WriteSettings = field(default_factory=WriteSettings)
    informer: InformerSettings = field(default_factory=InformerSettings)
    lease: LeaseSettings = field(default_factory=LeaseSettings)


NODES: Kind[Node] = Kind("Node", "/api/v1/nodes", parse_node)
PODS: Kind[Recorded[Pod]] = Kind("Pod", "/api/v1/pods", decode_pod)


def load_scheduler_config(path: Path) -> dict[str, Any]:
    """The KubeSchedulerConfiguration at `path` (YAML or JSON); ValueError naming the file
    when it is not one."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read kube-scheduler's configuration {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise ValueError(
            f"{path} is not UTF-8 text (byte {byte:#04x} at offset {exc.start})"
        ) from exc
    except RecursionError as exc:  # PyYAML composes nested collections recursively
        raise ValueError(f"{path} is nested too deeply to read") from exc
    if not isinstance(config, dict) or config.get("kind") != "KubeSchedulerConfiguration":
        raise ValueError(f"{path} is not a KubeSchedulerConfiguration")
    return config


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
        scheduler_config: Mapping[str, Any] | None = None,
        dra_extended_resources: bool = True,
    ) -> None:
        """`scheduler_config`: the KubeSchedulerConfiguration kube-scheduler runs, when known,
        to check that its own gang scheduling is off in the profiles Phalanx serves.
        `dra_extended_resources`: whether kube-scheduler serves extended resources from DRA
        devices (its DRAExtendedResource gate, which Phalanx cannot read)."""
        self.api = api
        self.scheduler_names = frozenset(scheduler_names)
        # None: kube-scheduler's configuration is unknown, nothing can be checked.
        self.native_gang: tuple[NativeGang, ...] | None = (
            None
            if scheduler_config is None
            else native_gang_profiles(scheduler_config, self.scheduler_names)
        )
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
        self.groups = GroupFollower(
            api,
            self._on_group_objects,
            on_served=lambda served: self._post(functools.partial(self._set_served, served)),
            on_gone=lambda kind: self._post(functools.partial(self._forget_kind, kind)),
            on_forbidden=lambda kind, message: self._post(
                functools.partial(self._group_forbidden, kind, message)
            ),
            recheck_seconds=self.settings.crd_recheck_seconds,
            informer=inf,
            on_restart=self._restarted,
            stop=self._stop,
        )
        # DRA objects, and the bridge every node and pod goes through (sources.kube_dra).
        self.dra = DraFeed(
            api,
            post=self._post,
            spawn=self._spawn,
            sink=self,
            settings=inf,
            recheck_seconds=self.settings.crd_recheck_seconds,
            on_restart=self._restarted,
            extended_resources=dra_extended_resources,
        )
        self.lease = LeaseHolder(
            api, namespace, identity=self.identity, settings=self.settings.lease
        )
        self.writer: Writer = writer or PooledWriter(api, self.settings.writes)
        # Only the asynchronous client counts its requests; the blocking one has nothing to say.
        if metrics is not None and isinstance(self.writer, AsyncWriter):
            metrics.watch_api_client(self.writer.counts)
        # Every gang object the watches show (valid or not), by object key (loop side).
        self._objects: dict[str, Held] = {}
        self.commits = CommitBook(self.writer, self._group_path, wall_clock)
        self.reports = Reports(
            self.writer,
            identity=self.identity,
            event_interval_seconds=self.settings.event_interval_seconds,
            uid_of=self._uid_of,
            dra_version_of=self.dra.api_version,
            held=self._objects.get,
            clock=clock,
            wall_clock=wall_clock,
            status_coalesce_seconds=self.settings.status_coalesce_seconds,
        )
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sink: StateSink | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        # Loop-side tables (written only by updates run on the loop).
        self._synced: set[str] = set()
        self._served: Served | None = None  # the last discovery's answer
        self._unsynced_groups: set[str] = set()  # gang kinds served at start, not yet listed
        self.notices = Notices(log, self._spawn)
        self.sightings = BindingSightings(
            metrics.watch_delay.observe if metrics is not None else _ignore_delay, clock
        )
        # Per child PodGroup of a composite gang, what `_note_children` last found ignored.
        self._child_notes: dict[str, tuple[str, ...]] = {}

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
        # The Lease lives where kubectl would work: the context's namespace, else "default".
        namespace = namespace or kubeconfig_namespace(path, context=context) or "default"
        return cls(
            api,
            namespace=namespace,
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
        return (
            all(kind in self._synced for kind in KINDS)
            and self._served is not None
            and not self._unsynced_groups
            and self.dra.synced
        )

    @property
    def served(self) -> Served | None:
        """The gang kinds the API server serves, as last discovered (None: not yet)."""
        return self._served

    @property
    def annotation_only(self) -> bool:
        """True while the scheduler-plugins PodGroup CRD is known to be absent."""
        return self._served is not None and not self._served.of(Dialect.SCHEDULER_PLUGINS)

    async def start(self, sink: StateSink) -> None:
        self._loop = asyncio.get_running_loop()
        self._sink = sink
        for target, name in (
            (self.nodes.run, "informer-Node"),
            (self.pods.run, "informer-Pod"),
            (self.groups.run, "gang-discovery"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self.dra.start()
        self.lease.start()

    async def stop(self) -> None:
        self._stop.set()
        for informer in (self.nodes, self.pods):
            informer.stop()
        self.groups.stop()
        self.dra.stop()
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
        self.groups.join(timeout=5.0)
        self.dra.join()

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
                    self.dra.upsert_node(state, change.obj)
                    self._valid_again("Node", change.key)
                elif isinstance(change, Delete):
                    self.dra.remove_node(state, change.key)
                    self._valid_again("Node", change.key)
                else:  # a node we cannot read is not planned onto
                    self.dra.remove_node(state, change.key)
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
                        # someone else's pending pod: not our work (a pod of ours it
                        # replaced under its name was deleted first, by the informer)
                        self.dra.remove_pod(state, pod.uid)
                        self.commits.forget_pod(change.key)
                        continue
                    self.dra.upsert_pod(state, pod)
                    if pod.node_name:
                        self.sightings.seen_bound(pod.uid)
                    error = self.commits.saw_pod(change.key, change.obj)
                    if error:
                        self._report("Pod", change.key, error)
                    if pod.invalid and not pod.node_name:
                        self._report("Pod", change.key, pod.invalid, done="not scheduled")
                    else:
                        self._valid_again("Pod", change.key)
                    if pod.overruled and not pod.node_name:
                        self._contested(pod)
                else:
                    self.dra.remove_pod(state, change.uid)
                    self.sightings.forget(change.uid)
                    self.commits.forget_pod(change.key)
                    self.notices.forget(change.key)
                    if isinstance(change, Invalid):
                        self._report("Pod", change.key, change.reason)
                    else:
                        self._valid_again("Pod", change.key)
            if synced:
                self._mark_synced("Pod")(state)

        self._post(update)

    # ---- gang objects (loop side) ----------------------------------------------------

    def _set_served(self, served: Served, state: ClusterState) -> None:
        before = self._served
        if served == before:
            return
        had_crd = before is not None and bool(before.of(Dialect.SCHEDULER_PLUGINS))
        if not served.of(Dialect.SCHEDULER_PLUGINS) and (before is None or had_crd):
            log.warning(
                "PodGroup CRD (scheduling.x-k8s.io/v1alpha1) is not installed: its gangs are "
                "declared by pod annotations only; followed once it is installed (within "
                f"seconds; {self.settings.crd_recheck_seconds:g}s where CRDs may not be watched)"
            )
        log.info(
            "gang APIs served",
            extra={"kinds": [label(kind) for kind in served.kinds] or "none"},
        )
        if served.of(Dialect.UPSTREAM) and (before is None or not before.of(Dialect.UPSTREAM)):
            self._check_native_gang()
        self._served = state.served = served
        if before is None:
            self._unsynced_groups = {label(kind) for kind in served.kinds}

    def _check_native_gang(self) -> None:
        """The upstream gang API is served: say whether kube-scheduler may gate its gangs too."""
        if self.native_gang is None:
            log.info(
                "the upstream gang API (scheduling.k8s.io) is served; without kube-scheduler's "
                "configuration (--scheduler-config) Phalanx cannot check that its own "
                "GangScheduling is disabled in the profiles Phalanx serves (docs/gang-dialects.md)"
            )
        for finding in self.native_gang or ():
            log.warning(finding.message(), extra={"profile": finding.profile})

    def _on_group_objects(self, kind: ServedKind, changes: GroupChanges, synced: bool) -> None:
        def update(state: ClusterState) -> None:
            trees: set[str] = set()  # namespaces whose composite trees may have changed
            for change in changes:
                # The informer keys objects `namespace/name`; the gang key adds the dialect.
                target = replace(GroupRef.parse(change.key), dialect=kind.dialect)
                if kind.dialect in (Dialect.UPSTREAM, Dialect.COMPOSITE) and (
                    not isinstance(change, Upsert)
                    or state.group_object(target.key) != change.obj.obj
                ):
                    trees.add(target.namespace)
                if isinstance(change, Upsert):
                    self._upsert_group_object(state, kind, target, change)
                elif isinstance(change, Invalid):
                    self.dra.set_group_error(state, target.key, change.reason)
                    self._objects[target.key] = Held(kind, change.uid)
                    self.commits.forget_group(target.key)
                    self._report_group(kind, target, change.uid, change.reason)
                else:  # releases the reservations it held, if their members were pending
                    self._forget_object(state, target.key)
            for namespace in sorted(trees):
                self._note_children(state, namespace)
            if synced and label(kind) in self._unsynced_groups:
                self._unsynced_groups.discard(label(kind))
                log.info("informer synced", extra={"kind": label(kind)})

        self._post(update)

    def _upsert_group_object(
        self,
        state: ClusterState,
        kind: ServedKind,
        target: GroupRef,
        change: Upsert[Recorded[registry.GroupObject]],
    ) -> None:
        key, value = target.key, change.obj.obj
        before = state.group_object(key)
        changed = before is None or before != value or state.group_error(key) is not None
        if isinstance(value, Workload):
            state.upsert_workload(value)
        elif isinstance(value, CompositePodGroup):
            state.upsert_composite(value)
        else:
            self.dra.upsert_group(state, value)
        self._objects[key] = Held(kind, change.uid)
        self.reports.saw_status(kind, key, change.obj.status, change.obj.resource_version)
        if changed and label(kind) not in self._unsynced_groups:
            # Members told "waiting for ..." (or planned for the old size) wait in
            # kube-scheduler's unschedulable queue: ask for them back now.
            pending = [
                p.ref
                for gang in state.gangs_of(key)
                for p in state.members(gang)
                if not state.is_bound(p)
            ]
            what = "appeared" if before is None else "changed"
            self._spawn(self.requeue(pending, f"{kind.kind} {key} {what}"))
        self._valid_again(kind.kind, key)
        for text in change.obj.warnings:
            self.notices.once(
                key,
                text,
                message=f"{kind.kind} {key}: ignored",
                event=functools.partial(
                    self.emit_group_event, target, FIELD_IGNORED, text, warning=True
                ),
            )
        if kind.dialect is Dialect.UPSTREAM:
            for finding in self.native_gang or ():
                self.notices.once(
                    key,
                    finding.message(),
                    message=f"{kind.kind} {key}: kube-scheduler may gate it too",
                    event=functools.partial(
                        self.emit_group_event, target, NATIVE_GANG, finding.message(), warning=True
                    ),
                )
        error = self.commits.saw_group(key, change.obj)
        if error:
            self._report_group(kind, target, change.uid, error)

    def _note_children(self, state: ClusterState, namespace: str) -> None:
        """Say once on each child PodGroup of a composite gang in `namespace` which of
        Phalanx's annotations on it the gang does not read (`composite.unread_on_child`): a
        child of a `basic` composite, or of none, is a gang whose own are read, so this is
        known only from the tree. A note that stops holding (the child left the gang, or
        the annotation went) is said again if it comes back."""
        now: dict[str, tuple[str, ...]] = {}
        for group in state.groups().values():
            if group.namespace != namespace or not group.parent:
                continue
            top = composite.gang_above(group, state.composite)
            if isinstance(top, CompositePodGroup):
                now[group.key] = composite.unread_on_child(group, top)
        for key in [k for k in self._child_notes if GroupRef.parse(k).namespace == namespace]:
            for text in set(self._child_notes.pop(key)) - set(now.get(key, ())):
                self.notices.withdraw(key, text)
        for key, texts in now.items():
            if not texts:
                continue
            self._child_notes[key] = texts
            target = GroupRef.parse(key)
            for text in texts:
                self.notices.once(
                    key,
                    text,
                    message=f"PodGroup {key}: ignored",
                    event=functools.partial(
                        self.emit_group_event, target, FIELD_IGNORED, text, warning=True
                    ),
                )

    def _forget_object(self, state: ClusterState, key: str) -> None:
        self.dra.remove_group(state, key)
        self._objects.pop(key, None)
        self.notices.forget(key)
        self.commits.forget_group(key)
        self.reports.forget_group(key)
        for kind in ("PodGroup", "Workload", "CompositePodGroup"):
            self._valid_again(kind, key)

    def _group_forbidden(self, kind: ServedKind, message: str, _: ClusterState) -> None:
        """Phalanx may not list `kind` (RBAC): its gangs stay unknown and their members wait,
        while the rest of the cluster is scheduled. Counted as synced, said loudly; the
        informer keeps trying, so granting the rule later is picked up."""
        log.error(
            f"may not list {label(kind)}: its gangs are unknown and their members wait; "
            "grant list and watch on it (the chart's RBAC does)",
            extra={"kind": label(kind), "reason": message},
        )
        self._unsynced_groups.discard(label(kind))

    def _forget_kind(self, kind: ServedKind, state: ClusterState) -> None:
        """`kind` is no longer served (its CRD was removed): its objects are gone."""
        for key in [k for k, held in self._objects.items() if held.kind == kind]:
            self._forget_object(state, key)

    # ---- bad input: one log line and one Event per object and reason -------------------

    def _report(self, kind: str, key: str, reason: str, *, done: str = "skipped") -> None:
        """Say once that Pod or Node `key` is skipped or unschedulable, and why. Loop only."""
        namespace, _, name = key.rpartition("/")
        self.notices.invalid(
            kind,
            key,
            reason,
            message=f"invalid {kind} {key}: {done}",
            event=functools.partial(
                self.emit_event, kind, namespace, name, INVALID_OBJECT, reason, warning=True
            ),
        )

    def _report_group(self, kind: ServedKind, target: GroupRef, uid: str, reason: str) -> None:
        """Say once that gang object `target` is skipped, and why (on the object itself,
        which the watch knows even when Phalanx cannot read it)."""
        self.notices.invalid(
            kind.kind,
            target.key,
            reason,
            message=f"invalid {kind.kind} {target.key}: skipped",
            kind_label=label(kind),
            event=functools.partial(
                self.reports.emit_involved,
                registry.involved_object(target, kind, uid),
                target.key,
                INVALID_OBJECT,
                reason,
                warning=True,
            ),
        )

    def _valid_again(self, kind: str, key: str) -> None:
        self.notices.valid_again(kind, key)

    def _contested(self, pod: Pod) -> None:
        """A pod claimed by more than one dialect: say once which claim won."""
        message = registry.contest_message(pod)
        if message:
            self.notices.once(
                pod.key,
                message,
                message=f"pod {pod.key}: more than one gang dialect claims it",
                event=functools.partial(
                    self.emit_event,
                    "Pod",
                    pod.namespace,
                    pod.name,
                    DIALECT_CONFLICT,
                    message,
                    warning=True,
                ),
            )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- ClusterSource and CommitLog: the writes -----------------------------------------

    def _group_path(self, key: str) -> str | None:
        """The API path of the object holding gang `key` for its commit record, or None:
        annotation-only gangs, and a Workload's gangs (it holds several), keep theirs on
        the members."""
        ref = GroupRef.parse(key)
        held = self._objects.get(ref.key)
        if held is None or ref.pod_group:
            return None
        return held.kind.object_path(ref.namespace, ref.name)

    def _uid_of(self, kind: str, key: str) -> str:
        if kind in ALL_DRA_KINDS:
            return self.dra.uid_of(kind, key)
        informer = self.pods if kind == "Pod" else self.nodes if kind == "Node" else None
        return informer.uid_of(key) if informer is not None else ""

    async def bind(
        self,
        binding: Binding,
        *,
        record: CommitRecord | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        """Overload is retried within `timeout_seconds` (the writer's); a conflict never is.
        A carried `record` is the binding's annotation: the API server writes it onto the
        pod with its node."""
        annotations = self.commits.carried(record) if record is not None else None
        uid = binding.pod.uid
        self.sightings.sent(uid)
        try:
            await self.writer.bind(
                binding, annotations=annotations, timeout_seconds=timeout_seconds
            )
        except BaseException:
            self.sightings.failed(uid)
            raise
        self.sightings.answered(uid)

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

    async def emit_group_event(
        self, group: GroupRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        await self.reports.emit_group_event(group, reason, message, warning=warning)

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        await self.reports.requeue(pods, reason)

    async def nominate(self, nominations: Sequence[Nomination], reason: str) -> None:
        await self.reports.nominate(nominations, reason)

    async def mark_scheduled(self, pods: Sequence[PodRef]) -> None:
        await self.reports.mark_scheduled(pods)

    async def update_group_status(self, status: GroupStatus) -> None:
        await self.reports.update_group_status(status)
