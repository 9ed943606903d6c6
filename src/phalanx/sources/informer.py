"""List-then-watch informers over a pluggable transport: the cache feed of DESIGN §1.

One `Informer` keeps one kind (Nodes, Pods, PodGroups) in step with the API server. It runs
on a thread of its own (the transport blocks) and hands decoded changes to a `Handler`,
which moves them onto the event loop. Every object is decoded once, from raw bytes, by the
kind's own `decode` (only the fields Phalanx needs survive); the client's generic model
deserialisation is never used. Per object the informer keeps only its key, UID and
resourceVersion: memory grows with nodes + pods, not with the size of their JSON. The UID
tells a namesake apart: an object whose name is known under another UID (deleted and
created again while the watch was down, which a relist shows as one object) is handed on
as a `Delete` of the old one, then the new one.

State machine, per kind::

    start ─▶ LISTING ──(pages of `page_size`; the last one also deletes what was not listed,
      ▲         │        and the first complete list marks the kind synced)
      │         ▼
      │      WATCHING from the list's resourceVersion, with bookmarks
      │         │ ADDED / MODIFIED / DELETED ─▶ apply; resourceVersion := the object's
      │         │ BOOKMARK ─▶ resourceVersion := the bookmark's (nothing to apply)
      │         │ stream ends (the server's timeoutSeconds) ─▶ WATCHING again    [closed]
      ├─────────┤ 410 Gone (HTTP status or ERROR event) ─▶ LISTING at once      [gone]
      │         │ any other error ─▶ BACKOFF ─▶ WATCHING from resourceVersion  [error]
      │      BACKOFF (capped exponential, jittered; reset by a good list or event)
      └── a failed list ─▶ BACKOFF ─▶ LISTING                                  [error]
    a 404 on the list (the CRD was removed) ─▶ BACKOFF ─▶ LISTING while it lasts less than
      `gone_after_seconds`, then everything known is deleted, `run` returns MISSING (at once
      when nothing is known)                                                    [missing]
    a 403 on the list (RBAC) ─▶ `on_forbidden` is told once per streak, then BACKOFF as any
      error (granting the rule later is picked up)                              [forbidden]
    `stop` ─▶ the open request is closed, `run` returns STOPPED

Why `410 Gone` means relist: etcd compacts old revisions, and the API server's watch cache
keeps only a window of recent events. A resourceVersion older than that window cannot be
resumed, so events in between are lost for good; only a fresh list (a new consistent
snapshot, diffed against what we hold) makes the cache whole again. Bookmarks keep our
resourceVersion fresh on quiet kinds, which makes 410 rare.

No exception escapes `run`: a failing watch is retried forever, never fatal to the process.
The bracketed names above are the `reason` given to `on_restart` (phalanx_watch_restarts).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

import orjson

log = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


# ---- transport --------------------------------------------------------------------------


class ApiError(Exception):
    """An API call failed. `status` is the HTTP status, 0 when no answer came (connection
    refused, reset or timed out); `reason` is the Status reason (`NotFound`, `Conflict`, ...)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        head = f"HTTP {self.status}" if self.status else "no answer"
        parts = [p for p in (self.reason, self.message) if p]
        return f"{head}: {': '.join(parts)}" if parts else head


class WatchStream(Protocol):
    """An open watch: its lines (one JSON event each) until the server ends it."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None:
        """Abort the stream; callable from another thread."""


class Transport(Protocol):
    """Raw list and watch, answering bytes. Errors are raised as `ApiError`."""

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        """One page of a list (`{"metadata": {"resourceVersion", "continue"}, "items": [...]}`)."""
        ...

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> WatchStream:
        """A watch from `resource_version` with bookmarks allowed."""
        ...


# ---- what an informer hands on ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Upsert(Generic[T_co]):
    key: str  # namespace/name, or name for cluster-scoped kinds
    uid: str
    obj: T_co


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    uid: str


@dataclass(frozen=True, slots=True)
class Invalid:
    """The object exists but its kind's decoder refused it; `reason` says why."""

    key: str
    uid: str
    reason: str


Change = Upsert[T] | Delete | Invalid


class Handler(Protocol[T_contra]):
    def __call__(
        self, changes: Sequence[Upsert[T_contra] | Delete | Invalid], synced: bool
    ) -> None:
        """Apply `changes` in order; `synced` is True once, with the first complete list.

        Called on the informer's thread: hand the work to the event loop, never block.
        """


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    """A resource an informer follows, and how one raw object becomes a model value."""

    name: str  # "Pod"
    path: str  # the collection URL path, e.g. "/api/v1/pods"
    decode: Callable[[dict[str, Any]], T]  # raises (usually InvalidObjectError) for bad input


class Ending(StrEnum):
    STOPPED = "stopped"
    MISSING = "missing"  # the resource does not exist on the server (404)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with jitter (client-go's reflector: 0.8 s doubling to 30 s)."""

    initial_seconds: float = 0.8
    cap_seconds: float = 30.0
    jitter: float = 0.5  # each delay is scaled by a random factor in [1 - jitter, 1]

    def delay(self, attempt: int, rand: float) -> float:
        base = min(self.cap_seconds, self.initial_seconds * 2.0 ** min(attempt, 32))
        return base * (1 - self.jitter * rand)


@dataclass(frozen=True, slots=True)
class InformerSettings:
    page_size: int = 500  # items per list page (client-go's pager default)
    # The server ends each watch after a random 5-10 min, as client-go asks: spreads relists.
    watch_timeout_min_seconds: int = 300
    watch_timeout_max_seconds: int = 600
    backoff: Backoff = field(default_factory=Backoff)
    # A watch that ends cleanly sooner than this without a single event is treated as an
    # error (backoff), or a server that hangs up at once would be asked again in a tight loop.
    min_watch_seconds: float = 1.0
    # How long a kind must answer 404 before what is known of it is forgotten (seconds): an
    # API server that restarts serves its CRDs a moment after it answers, and forgetting a
    # dialect's gang objects for that moment would plan its gangs without them.
    gone_after_seconds: float = 30.0


class _GoneError(Exception):
    """410: our resourceVersion is too old; relist."""


class _MissingError(Exception):
    """404 on the collection: the kind does not exist (its CRD is not installed)."""


def _ignore_restart(kind: str, reason: str) -> None:
    del kind, reason


def _ignore_forbidden(kind: str, message: str) -> None:
    del kind, message


class Informer(Generic[T]):
    """One kind's list-then-watch loop; see the module docstring for the state machine."""

    def __init__(
        self,
        kind: Kind[T],
        transport: Transport,
        handler: Handler[T],
        *,
        settings: InformerSettings | None = None,
        on_restart: Callable[[str, str], None] = _ignore_restart,
        on_forbidden: Callable[[str, str], None] = _ignore_forbidden,
        stop: threading.Event | None = None,
        wait: Callable[[float], bool] | None = None,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kind = kind
        self.transport = transport
        self.handler = handler
        self.settings = settings or InformerSettings()
        self.on_restart = on_restart
        self.on_forbidden = on_forbidden
        self.stop_event = stop or threading.Event()
        # Sleeps `seconds` unless stopped first; returns True when stopped.
        self.wait = wait or self.stop_event.wait
        self.rand = rand
        self.clock = clock
        self.resource_version = ""
        self.synced = False
        self._known: dict[str, tuple[str, str]] = {}  # key -> (uid, resourceVersion)
        self._missing_since: float | None = None  # first 404 of the current streak
        self._stream: WatchStream | None = None
        self._progress = False  # an event arrived during the current attempt
        self._lock = threading.Lock()

    # ---- control ---------------------------------------------------------------------

    def uid_of(self, key: str) -> str:
        """The UID of a listed or watched object ("" if unknown). Safe from any thread."""
        known = self._known.get(key)
        return known[0] if known is not None else ""

    def stop(self) -> None:
        """Make `run` return soon (from any thread): closes the open watch."""
        self.stop_event.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def run(self) -> Ending:
        """List, then watch, until stopped or the kind is missing. Never raises."""
        attempt = 0
        need_list = True
        first = True
        forbidden = False  # told `on_forbidden` since the last good list
        while not self.stop_event.is_set():
            self._progress = False
            refused = False  # this attempt's list was refused by RBAC
            missing = False  # this attempt's list answered 404
            try:
                if need_list:
                    if not first:
                        log.info("relisting", extra={"kind": self.kind.name})
                    self._list()
                    need_list = False
                    attempt = 0
                    forbidden = False
                    self._missing_since = None
                first = False
                if self._watch():
                    attempt = 0
                    self._restart("closed")
                    continue
                failure = "watch ended at once without an event"
            except _GoneError:
                self._restart("gone")
                need_list = True
                continue
            except _MissingError:
                if self._missing_for_good():
                    self._forget_all()
                    return Ending.MISSING
                failure = "the kind is not served (404); what is known of it is kept a while"
                need_list = True
                missing = True
            except ApiError as exc:
                failure = str(exc)
                refused = exc.status == 403 and need_list
                if refused and not forbidden:
                    forbidden = True
                    self.on_forbidden(self.kind.name, str(exc))
            except Exception as exc:  # a bug or garbage must not end the informer
                log.exception("informer failed", extra={"kind": self.kind.name})
                failure = f"{type(exc).__name__}: {exc}"
            if self.stop_event.is_set():
                break
            first = False
            if self._progress:  # it worked for a while: this is a fresh failure, not a streak
                attempt = 0
            delay = self.settings.backoff.delay(attempt, self.rand())
            attempt += 1
            log.warning(
                "watch failed; retrying",
                extra={
                    "kind": self.kind.name,
                    "reason": failure,
                    "retry_in_seconds": round(delay, 2),
                },
            )
            self._restart("forbidden" if refused else "missing" if missing else "error")
            if self.wait(delay):
                break
        return Ending.STOPPED

    def _missing_for_good(self) -> bool:
        """Whether a 404 on the list ends the kind: when nothing of it is known, or it has
        answered 404 since `gone_after_seconds` ago (see InformerSettings)."""
        now = self.clock()
        if self._missing_since is None:
            self._missing_since = now
        return not self._known or now - self._missing_since >= self.settings.gone_after_seconds

    def _restart(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.on_restart(self.kind.name, reason)

    # ---- list ------------------------------------------------------------------------

    def _list(self) -> None:
        listed: set[str] = set()
        token = ""
        while True:
            try:
                body = self.transport.list(
                    self.kind.path, limit=self.settings.page_size, continue_token=token
                )
            except ApiError as exc:
                if exc.status == 404:
                    raise _MissingError from exc
                if exc.status == 410:  # the continue token expired: start the list again
                    raise _GoneError from exc
                raise
            page = orjson.loads(body)
            if not isinstance(page, dict):
                raise ApiError(0, "BadList", f"{self.kind.name} list is not a JSON object")
            meta = page.get("metadata") or {}
            items = page.get("items") or []
            changes: list[Change[T]] = []
            for raw in items:
                changes.extend(self._upsert(raw, listed=True))
                key = _key(raw)
                if key:
                    listed.add(key)
            token = str(meta.get("continue") or "")
            if not token:
                self.resource_version = str(meta.get("resourceVersion") or "")
                for key in [k for k in self._known if k not in listed]:
                    uid, _ = self._known.pop(key)
                    changes.append(Delete(key, uid))
                first_sync = not self.synced
                self.synced = True
                self.handler(changes, first_sync)
                return
            if changes:
                self.handler(changes, False)

    def _forget_all(self) -> None:
        changes: list[Change[T]] = [Delete(k, uid) for k, (uid, _) in self._known.items()]
        self._known.clear()
        self.resource_version = ""
        if changes:
            self.handler(changes, False)

    # ---- watch -----------------------------------------------------------------------

    def _watch(self) -> bool:
        """One watch request; True if it ended cleanly after an event or a decent while."""
        s = self.settings
        timeout = int(
            s.watch_timeout_min_seconds
            + self.rand() * (s.watch_timeout_max_seconds - s.watch_timeout_min_seconds)
        )
        started = self.clock()
        try:
            stream = self.transport.watch(
                self.kind.path, resource_version=self.resource_version, timeout_seconds=timeout
            )
        except ApiError as exc:
            if exc.status == 410:
                raise _GoneError from exc
            raise
        with self._lock:
            self._stream = stream
        if self.stop_event.is_set():  # stop() ran before the stream was published
            stream.close()
        events = 0
        try:
            for line in stream:
                if self.stop_event.is_set():
                    return True
                if line.strip():
                    self._event(line)
                    events += 1
                    self._progress = True
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        return events > 0 or self.clock() - started >= s.min_watch_seconds

    def _event(self, line: bytes) -> None:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ApiError(0, "BadWatchEvent", f"watch event is not JSON: {exc}") from exc
        if not isinstance(event, dict):
            raise ApiError(0, "BadWatchEvent", "watch event is not a JSON object")
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ApiError(0, "BadWatchEvent", f"watch event {kind!r} carries no object")
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _GoneError
            raise ApiError(
                code if isinstance(code, int) else 0,
                str(obj.get("reason") or ""),
                str(obj.get("message") or ""),
            )
        rv = _resource_version(obj)
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        changes: list[Change[T]]
        if kind in ("ADDED", "MODIFIED"):
            changes = self._upsert(obj, listed=False)
        elif kind == "DELETED":
            changes = self._delete(obj)
        else:
            raise ApiError(0, "BadWatchEvent", f"unknown watch event type {kind!r}")
        if rv:
            self.resource_version = rv
        if changes:
            self.handler(changes, False)

    # ---- objects ---------------------------------------------------------------------

    def _upsert(self, raw: Any, *, listed: bool) -> list[Change[T]]:
        """The object's change; after a `Delete` of the object its name held before, when
        the name now holds another (a new UID): deleted and created again while the watch
        was down, which a relist shows as one new object under the old name."""
        key = _key(raw)
        if not key:
            log.warning("skipping an object without metadata.name", extra={"kind": self.kind.name})
            return []
        meta = raw["metadata"]
        uid = str(meta.get("uid") or "")
        rv = str(meta.get("resourceVersion") or "")
        known = self._known.get(key)
        if listed and known is not None and rv and known == (uid, rv):
            return []  # a relist found it unchanged: nothing to decode
        replaced: list[Change[T]] = []
        if known is not None and known[0] and uid and known[0] != uid:
            replaced.append(Delete(key, known[0]))
        self._known[key] = (uid, rv)
        try:
            obj = self.kind.decode(raw)
        except Exception as exc:  # noqa: BLE001  # any decoder failure: this object is skipped
            return [*replaced, Invalid(key, uid, str(exc) or type(exc).__name__)]
        return [*replaced, Upsert(key, uid, obj)]

    def _delete(self, raw: Any) -> list[Change[T]]:
        key = _key(raw)
        if not key:
            return []
        known = self._known.pop(key, None)
        uid = str(raw["metadata"].get("uid") or (known[0] if known else ""))
        return [Delete(key, uid)]


def _key(raw: Any) -> str:
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    if not isinstance(meta, dict):
        return ""
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return ""
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


def _resource_version(raw: dict[str, Any]) -> str:
    meta = raw.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
