"""Following every gang API the API server serves: discovery, then one informer per kind.

`GroupFollower.run` is one thread::

    DISCOVERING ── GET /apis, GET /apis/<group>/<version> (phalanx.core.groups.discovery)
        │ failed ─▶ backoff ─▶ DISCOVERING
        ▼
    RECONCILING ── every served kind without a running informer gets one (its own thread);
        │          a kind no longer served has its informer stopped, and its objects are
        │          forgotten unless another version of the kind took over
        ▼
    WAITING `recheck_seconds` ─▶ DISCOVERING  (a gate turned on at an upgrade, a newer
        │                                      upstream version; a CRD, where not watched)
        │ a followed kind's CRD changed ─▶ `crd_debounce_seconds` more ─▶ DISCOVERING

**The CRD watch.** Another thread runs an informer on `apiextensions.k8s.io/v1`
CustomResourceDefinitions, metadata only (`KubeApi.metadata()`: a CRD's schema can run to
hundreds of KB, and its name, `<plural>.<group>`, says what it defines). Each add, change or
delete of a CRD defining a kind Phalanx can follow (`discovery.defines_followed_kind`) wakes
the discovery thread, which waits `crd_debounce_seconds` (so that a burst, an install making
several CRDs that are then each Established, is one discovery), discovers, and asks again
every `crd_debounce_seconds` until `crd_settle_seconds` after the last such change: a CRD is
served a moment after it is Established, and each API server of an HA control plane catches
up on its own. The watch's first list counts as a change (a CRD made between the first
discovery and that list is not left to the periodic recheck). RBAC that refuses the watch is
said once; built-in kinds are no CRDs: for both, the periodic recheck remains.

A followed kind that discovery no longer shows counts as served until it has been missing
for the informers' `gone_after_seconds` (discovery asks again every `MISSING_RECHECK_SECONDS`
meanwhile): an API server that restarts answers before it serves its CRDs again, and
forgetting a dialect's gang objects for that moment would plan its gangs without them (its
members read as annotation-only gangs, or as waiting for their object). An informer whose
list answers 404 keeps what it knows for as long, then forgets its objects and ends; the
next discovery decides whether the kind is still served. `/apis` is readable by every
authenticated user (system:discovery): no RBAC. Aggregated discovery is not asked for
(plain JSON).

Objects are decoded once, on the informer's thread, by `decode_group_object`: the model
value (a PodGroup of any dialect, or an upstream Workload), the commit record it carries,
its raw `status` and `resourceVersion` (what a shared status write builds on, and its
precondition: `registry.status_write`) and what Phalanx ignores in it (warnings, said
once by the source).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.core.groups import registry
from phalanx.core.groups.discovery import Served, ServedKind, defines_followed_kind, probes, served
from phalanx.core.groups.registry import GroupObject
from phalanx.core.groups.upstream import Workload
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
from phalanx.sources.kube_commits import Recorded, commit_of
from phalanx.sources.kube_writes import KubeApi
from phalanx.sources.retry import answered

log = logging.getLogger(__name__)

# Seconds between discoveries while a followed kind is missing from them (see above).
MISSING_RECHECK_SECONDS = 5.0
# The CRD watch (see above): from a followed kind's CRD changing to the discovery it wakes,
# and between the discoveries that follow (seconds); how long after its last change those
# go on. A CRD is Established within a second or so of its creation (5 s on an HA control
# plane, which is itself a change), and served a moment after that.
CRD_DEBOUNCE_SECONDS = 1.0
CRD_SETTLE_SECONDS = 5.0


def _name_only(raw: dict[str, Any]) -> None:
    """Nothing of a CRD is decoded: its name (the informer's key) says what it defines."""
    del raw


CRDS: Kind[None] = Kind(
    "CustomResourceDefinition",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    _name_only,
)

GroupChanges = Sequence[Upsert[Recorded[GroupObject]] | Delete | Invalid]
# (the kind, its changes, whether this is the informer's first complete list)
GroupHandler = Callable[[ServedKind, GroupChanges, bool], None]


def label(kind: ServedKind) -> str:
    """How logs, metrics and sync state name a kind: `PodGroup (scheduling.volcano.sh/v1beta1)`."""
    return f"{kind.kind} ({kind.api_version})"


def decode_group_object(kind: ServedKind, raw: dict[str, Any]) -> Recorded[GroupObject]:
    """One object of `kind` as its dialect reads it. Raises (InvalidObjectError naming the
    object and field) when it cannot be used.

    Items of a list of built-in kinds carry no `apiVersion`/`kind`: the kind followed says.
    """
    obj = {**raw, "apiVersion": kind.api_version, "kind": kind.kind}
    parsed = registry.parse_group_object(obj)
    if parsed is None:  # only if the registry stopped reading a kind discovery offers
        raise ValueError(f"{label(kind)} is not a gang kind Phalanx reads")
    value = parsed.value
    # A Workload holds several gangs: their commit records live on the member pods.
    commit, error = (None, "") if isinstance(value, Workload) else commit_of(value.key, raw)
    status = raw.get("status")
    return Recorded(
        value,
        commit,
        error,
        status=status if isinstance(status, Mapping) else None,
        resource_version=resource_version(raw),
        warnings=parsed.warnings,
    )


def resource_version(raw: Mapping[str, Any]) -> str:
    """`metadata.resourceVersion` of an API answer ("" when it has none)."""
    meta = raw.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return version if isinstance(version, str) else ""


@dataclass(slots=True)
class _Followed:
    informer: Informer[Recorded[GroupObject]]
    thread: threading.Thread
    stop: threading.Event = field(default_factory=threading.Event)


class GroupFollower:
    """Discovery and the per-kind informers (see the module docstring).

    `on_served(served)` is told the result of every discovery (from this thread: hand it
    to the loop); `on_gone(kind)` that a kind is no longer served and no other version
    replaced it (its objects must be forgotten); `on_forbidden(kind, message)` that RBAC
    refuses its list (from its informer's thread); `handler` gets each informer's changes.
    `crd_debounce_seconds` and `crd_settle_seconds`: the CRD watch's timings (see the
    module docstring).
    """

    def __init__(
        self,
        api: KubeApi,
        handler: GroupHandler,
        *,
        on_served: Callable[[Served], None],
        on_gone: Callable[[ServedKind], None],
        recheck_seconds: float,
        informer: InformerSettings,
        on_restart: Callable[[str, str], None],
        stop: threading.Event,
        on_forbidden: Callable[[ServedKind, str], None] | None = None,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        crd_debounce_seconds: float = CRD_DEBOUNCE_SECONDS,
        crd_settle_seconds: float = CRD_SETTLE_SECONDS,
    ) -> None:
        self.api = api
        self.handler = handler
        self.on_served = on_served
        self.on_gone = on_gone
        self.recheck_seconds = recheck_seconds
        self.informer_settings = informer
        self.on_restart = on_restart
        self.on_forbidden = on_forbidden
        self.stop_event = stop
        self.rand = rand
        self.clock = clock
        self._followed: dict[ServedKind, _Followed] = {}
        # Followed kinds the last discoveries lacked, since when (this thread only).
        self._missing: dict[ServedKind, float] = {}
        self._lock = threading.Lock()
        self.crd_debounce_seconds = crd_debounce_seconds
        self.crd_settle_seconds = crd_settle_seconds
        self._crd_watch: tuple[Informer[None], threading.Thread] | None = None
        self._crds_listed = False  # the CRD watch's first complete list is in (its thread)
        self._woken = threading.Event()  # a followed kind's CRD changed, or `stop`
        self._changed_crds: set[str] = set()  # their names, since the last discovery said them
        self._settle_until = 0.0  # `clock()` until which discovery asks again quickly

    # ---- discovery -----------------------------------------------------------------------

    def discover(self) -> Served:
        """What the API server serves now (raises ApiError when it cannot say)."""
        apis = self.api.request("GET", "/apis")
        lists = {}
        for group_version in probes(apis):
            try:
                lists[group_version] = self.api.request("GET", f"/apis/{group_version}")
            except ApiError as exc:
                if exc.status != 404:  # gone between the two answers: not served
                    raise
        return served(apis, lists)

    def run(self) -> None:
        """The discovery thread (and the CRD watch's, started here): until stopped. Never
        raises."""
        self._watch_crds()
        backoff = self.informer_settings.backoff
        while not self.stop_event.is_set():
            self._woken.clear()  # a CRD change from now on is seen by the next discovery
            with self._lock:
                changed, self._changed_crds = sorted(self._changed_crds), set()
            if changed:  # one line for a burst
                log.info(
                    "CustomResourceDefinitions of gang kinds changed: discovering the gang "
                    "APIs again",
                    extra={"crds": changed},
                )
            answer = answered(
                self.discover,
                "the gang APIs",
                stop=self.stop_event,
                backoff=backoff,
                rand=self.rand,
            )
            if not answer:
                return
            (found,) = answer
            found = self._confirmed(found)
            self.on_served(found)
            self._reconcile(found)
            if self._rest():
                return

    def _rest(self) -> bool:
        """Wait until the next discovery is due; True once stopped. A followed kind's CRD
        changing ends the wait, and then `crd_debounce_seconds` gather the rest of its burst."""
        wait = self.recheck_seconds
        if self._missing:
            wait = min(wait, MISSING_RECHECK_SECONDS)
        with self._lock:
            settling = self.clock() < self._settle_until
        if settling:
            wait = min(wait, self.crd_debounce_seconds)
        if self._woken.wait(wait) and not self.stop_event.is_set():
            return self.stop_event.wait(self.crd_debounce_seconds)
        return self.stop_event.is_set()

    def _confirmed(self, found: Served) -> Served:
        """`found`, and each followed kind it lacks that has been missing for less than
        `gone_after_seconds` and that no other version of its kind replaced."""
        now = self.clock()
        with self._lock:
            followed = list(self._followed)
        gone_after = self.informer_settings.gone_after_seconds
        kept: list[ServedKind] = []
        for kind in followed:
            if found.serves_any_version_of(kind):
                self._missing.pop(kind, None)
                continue
            since = self._missing.setdefault(kind, now)
            if now - since < gone_after:
                if since == now:
                    log.warning(
                        "a followed gang kind is missing from discovery; still followed "
                        "unless it stays missing",
                        extra={"kind": label(kind), "gone_after_seconds": gone_after},
                    )
                kept.append(kind)
        self._missing = {k: t for k, t in self._missing.items() if k in kept}
        return Served((*found.kinds, *kept)) if kept else found

    def stop(self) -> None:
        """Stop every informer, the CRD watch's too (from any thread); `run` returns once
        `stop_event` is set."""
        with self._lock:
            followed = list(self._followed.values())
            crd_watch = self._crd_watch
        self._woken.set()  # ends the discovery thread's wait
        for entry in followed:
            entry.stop.set()
            entry.informer.stop()
        if crd_watch is not None:
            crd_watch[0].stop()

    def join(self, timeout: float) -> None:
        with self._lock:
            threads = [entry.thread for entry in self._followed.values()]
            if self._crd_watch is not None:
                threads.append(self._crd_watch[1])
        for thread in threads:
            thread.join(timeout)

    # ---- the CRD watch -------------------------------------------------------------------

    def _watch_crds(self) -> None:
        informer = Informer(
            CRDS,
            self.api.metadata(),
            self._crds_changed,
            settings=self.informer_settings,
            on_restart=self.on_restart,
            on_forbidden=self._crds_forbidden,
            rand=self.rand,
        )
        thread = threading.Thread(
            target=self._follow_crds, args=(informer,), name="crd-watch", daemon=True
        )
        with self._lock:
            if self.stop_event.is_set():
                return
            self._crd_watch = (informer, thread)
        thread.start()

    def _follow_crds(self, informer: Informer[None]) -> None:
        if informer.run() is Ending.MISSING:
            log.warning(
                "CustomResourceDefinitions are not served: a gang CRD installed later is "
                f"followed at the next periodic discovery (every {self.recheck_seconds:g}s)"
            )

    def _crds_changed(
        self, changes: Sequence[Upsert[None] | Delete | Invalid], synced: bool
    ) -> None:
        """From the CRD watch's thread: wake discovery when a followed kind's CRD changed."""
        names = {change.key for change in changes if defines_followed_kind(change.key)}
        listed = self._crds_listed
        self._crds_listed = self._crds_listed or synced
        if not names:
            return
        with self._lock:
            self._settle_until = self.clock() + self.crd_settle_seconds
            if listed:  # the first list is no news to say
                self._changed_crds |= names
        self._woken.set()

    def _crds_forbidden(self, _kind: str, message: str) -> None:
        log.warning(
            "may not watch CustomResourceDefinitions: a gang CRD installed later is followed "
            f"at the next periodic discovery (every {self.recheck_seconds:g}s), not at once; "
            "grant get, list and watch on them (the chart's RBAC does)",
            extra={"reason": message},
        )

    # ---- informers -----------------------------------------------------------------------

    def _reconcile(self, found: Served) -> None:
        with self._lock:
            current = dict(self._followed)
        for kind, entry in current.items():
            if kind in found.kinds:
                continue
            entry.stop.set()
            entry.informer.stop()
            with self._lock:
                del self._followed[kind]
            log.info("no longer following a gang kind", extra={"kind": label(kind)})
            if not found.serves_any_version_of(kind):
                self.on_gone(kind)
        for kind in found.kinds:
            running = current.get(kind)
            if running is not None and (running.thread.is_alive() or kind in self._missing):
                continue  # a missing kind's informer ended on a 404: not again until it is back
            if self.stop_event.is_set():
                return
            self._start(kind)

    def _forbidden(self, kind: ServedKind, message: str) -> None:
        if self.on_forbidden is not None:
            self.on_forbidden(kind, message)

    def _start(self, kind: ServedKind) -> None:
        stop = threading.Event()
        informer = Informer(
            Kind(label(kind), kind.list_path, functools.partial(decode_group_object, kind)),
            self.api,
            functools.partial(self.handler, kind),
            settings=self.informer_settings,
            on_restart=self.on_restart,
            on_forbidden=lambda _name, message: self._forbidden(kind, message),
            stop=stop,
        )
        thread = threading.Thread(
            target=informer.run, name=f"informer-{kind.kind}-{kind.group}", daemon=True
        )
        with self._lock:
            self._followed[kind] = _Followed(informer, thread, stop)
        log.info("following a gang kind", extra={"kind": label(kind)})
        thread.start()
