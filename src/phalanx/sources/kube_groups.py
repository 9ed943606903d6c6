"""Following every gang API the API server serves: discovery, then one informer per kind.

`GroupFollower.run` is one thread::

    DISCOVERING ── GET /apis, GET /apis/<group>/<version> (phalanx.core.groups.discovery)
        │ failed ─▶ backoff ─▶ DISCOVERING
        ▼
    RECONCILING ── every served kind without a running informer gets one (its own thread);
        │          a kind no longer served has its informer stopped, and its objects are
        │          forgotten unless another version of the kind took over
        ▼
    WAITING `recheck_seconds` ─▶ DISCOVERING  (a CRD installed later, a gate turned on at
                                               an upgrade, a newer upstream version)

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
from phalanx.core.groups.discovery import Served, ServedKind, probes, served
from phalanx.core.groups.registry import GroupObject
from phalanx.core.groups.upstream import Workload
from phalanx.sources.informer import (
    ApiError,
    Delete,
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
        """The discovery thread: until stopped. Never raises."""
        backoff = self.informer_settings.backoff
        while not self.stop_event.is_set():
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
            wait = self.recheck_seconds
            if self._missing:
                wait = min(wait, MISSING_RECHECK_SECONDS)
            if self.stop_event.wait(wait):
                return

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
        """Stop every informer (from any thread); `run` returns once `stop_event` is set."""
        with self._lock:
            followed = list(self._followed.values())
        for entry in followed:
            entry.stop.set()
            entry.informer.stop()

    def join(self, timeout: float) -> None:
        with self._lock:
            threads = [entry.thread for entry in self._followed.values()]
        for thread in threads:
            thread.join(timeout)

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
