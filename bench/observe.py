"""What the benchmark sees of the cluster: a small API client, a pod watch, process sampling.

* :class:`Api` — raw JSON over keep-alive HTTPS connections (one per thread) with the admin
  token. The ``kubernetes`` client's generic deserialiser would cost the 2-core machine more
  CPU than the schedulers under test; this costs almost none.
* :class:`PodWatch` — list, then watch, the run's namespace; records when each pod was first
  seen bound (``spec.nodeName``) on the benchmark's monotonic clock. Binding times, time to
  whole gang and partially-bound gang-seconds all come from it: the same observer, at the
  same distance, for every scheduler. It also keeps each pod's ``PodScheduled`` condition
  history (every change of its status, reason or message), for time to unschedulable.
* :class:`GroupPoll` — one gang object's ``status`` history, polled (an impossible gang's
  PodGroup, in whichever dialect the scheduler reads).
* :class:`ProcSampler` — CPU seconds and resident memory of given processes from
  ``/proc/<pid>/stat`` and ``/proc/<pid>/status`` (no psutil), plus the machine's CPU use.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class ApiError(RuntimeError):
    """An API request the benchmark needs failed."""


class Api:
    """JSON requests to kube-apiserver on per-thread keep-alive connections."""

    def __init__(self, server: str, token: str, cafile: Path, timeout: float = 30.0) -> None:
        parts = urlsplit(server)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 443
        self.token = token
        self.timeout = timeout
        self.ssl = ssl.create_default_context(cafile=str(cafile))
        self._local = threading.local()

    def connect(self, timeout: float | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, context=self.ssl, timeout=timeout or self.timeout
        )

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        for attempt in range(2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
                continue  # a keep-alive connection the server closed: once more on a new one
            try:
                return resp.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return resp.status, raw.decode(errors="replace")
        raise AssertionError("unreachable")

    def must(
        self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)
    ) -> Any:
        status, answer = self.request(method, path, body)
        if status not in ok:
            raise ApiError(f"{method} {path}: {status} {str(answer)[:500]}")
        return answer


# ---- the pod watch ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    """A pod's ``PodScheduled`` condition as first seen at ``t`` (the benchmark's clock)."""

    t: float
    status: str
    reason: str
    message: str

    def same_as(self, other: Condition) -> bool:
        return (self.status, self.reason, self.message) == (
            other.status,
            other.reason,
            other.message,
        )

    @property
    def unschedulable(self) -> bool:
        return self.status == "False" and self.reason == "Unschedulable"


def pod_scheduled(pod: Mapping[str, Any], now: float) -> Condition | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled":
            return Condition(
                now,
                str(cond.get("status", "")),
                str(cond.get("reason", "")),
                str(cond.get("message", "")),
            )
    return None


@dataclass
class PodWatch:
    """Binding observations for one namespace, from a list-then-watch on its own thread.

    ``bound[name] = (t, node)``: the first moment (``clock()``) the pod was seen with a
    ``spec.nodeName``. Pods never unbind during a run (nothing evicts them), so that is the
    whole binding history. Watch restarts (a server-side timeout, 410 Gone) relist; a pod
    first seen bound on a relist gets the relist's time, which is late, never early.

    ``conditions[name] = [Condition, ...]``: the pod's ``PodScheduled`` condition each time its
    status, reason or message was seen to change (kube-scheduler rewrites it only then).

    ``seen[name]``: the first moment the pod was seen at all. Against the moment its creation
    was answered, that is how late the API server's watches deliver: every watcher shares
    the delay (a separate process doing nothing but reading, the benchmark's watch and
    Phalanx's informer saw the same pods within milliseconds of each other;
    ``bench/results/2026-12-06-watch-delay/``).
    """

    api: Api
    namespace: str
    clock: Callable[[], float] = time.monotonic
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    conditions: dict[str, list[Condition]] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)
    restarts: int = 0
    error: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _conn: http.client.HTTPSConnection | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _synced: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()
        if not self._synced.wait(30):
            raise ApiError(f"the pod watch of {self.namespace} did not start: {self.error}")

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(10)

    def count(self) -> int:
        with self._lock:
            return len(self.bound)

    def snapshot(self) -> dict[str, tuple[float, str]]:
        with self._lock:
            return dict(self.bound)

    def first_seen(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seen)

    def condition_history(self) -> dict[str, list[Condition]]:
        with self._lock:
            return {name: list(seen) for name, seen in self.conditions.items()}

    def _see(self, pod: Mapping[str, Any], now: float) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        name = (pod.get("metadata") or {}).get("name")
        if not name:
            return
        scheduled = pod_scheduled(pod, now)
        with self._lock:
            self.seen.setdefault(name, now)
            if node:
                self.bound.setdefault(name, (now, node))
            if scheduled is not None:
                seen = self.conditions.setdefault(name, [])
                if not seen or not seen[-1].same_as(scheduled):
                    seen.append(scheduled)

    def _list(self) -> str:
        answer = self.api.must("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        now = self.clock()
        for pod in answer.get("items") or []:
            self._see(pod, now)
        return str(answer["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                    self._synced.set()
                rv = self._watch(rv)
            except Exception as exc:  # noqa: BLE001  # any failure: relist, unless stopping
                if self._stop.is_set():
                    return
                self.error = repr(exc)
                self.restarts += 1
                rv = ""
                time.sleep(0.2)

    def _watch(self, rv: str) -> str:
        """Stream events from ``rv``; return the last resourceVersion, or "" to relist."""
        path = (
            f"/api/v1/namespaces/{self.namespace}/pods?watch=1&allowWatchBookmarks=true"
            f"&resourceVersion={rv}&timeoutSeconds=900"
        )
        conn = self.api.connect(timeout=None)
        self._conn = conn
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.api.token}"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise ApiError(f"watch: {resp.status} {resp.read()[:300]!r}")
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    self.restarts += 1
                    return rv  # the server ended the watch: resume from where it stopped
                now = self.clock()
                event = orjson.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    self.restarts += 1
                    return ""  # 410 Gone (or worse): relist
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._see(obj, now)
            return rv
        finally:
            self._conn = None
            conn.close()


@dataclass
class GroupPoll:
    """``GET path`` every ``interval`` seconds on a thread; keeps each distinct ``status``
    with the time it was first seen (``history``: ``[(t, status), ...]``)."""

    api: Api
    path: str
    interval: float = 0.2
    clock: Callable[[], float] = time.monotonic
    history: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="group-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                code, obj = self.api.request("GET", self.path)
            except OSError:
                continue
            if code != 200 or not isinstance(obj, dict):
                continue
            status = obj.get("status") or {}
            if not self.history or self.history[-1][1] != status:
                self.history.append((self.clock(), status))


# ---- processes ------------------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """utime + stime of each thread of ``pid`` (by thread id), in seconds."""
    out: dict[int, float] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        out[tid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def proc_memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak resident) of ``pid`` in KiB, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [float(v) for v in first[:8]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


@dataclass
class ProcSampler:
    """Samples CPU and memory of named processes every ``interval`` seconds on a thread."""

    pids: Mapping[str, int]
    interval: float = 0.25
    clock: Callable[[], float] = time.monotonic
    #: name -> [(t, cpu_seconds, rss_kib)]
    series: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)
    machine: list[tuple[float, float, float]] = field(default_factory=list)
    peak_kib: dict[str, int] = field(default_factory=dict)
    #: Processes whose CPU is also split by thread: the main thread (for Phalanx, the event
    #: loop that answers every extender call) against all the others (its worker threads).
    by_thread: tuple[str, ...] = ()
    threads_start: dict[str, dict[int, float]] = field(default_factory=dict)
    threads_end: dict[str, dict[int, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._sample()
        for name in self.by_thread:
            if name in self.pids:
                self.threads_start[name] = thread_cpu_seconds(self.pids[name])
        self._thread = threading.Thread(target=self._run, name="proc-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._sample()
        for name in self.by_thread:
            if name in self.pids:
                self.threads_end[name] = thread_cpu_seconds(self.pids[name])

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        now = self.clock()
        for name, pid in self.pids.items():
            cpu = proc_cpu_seconds(pid)
            mem = proc_memory_kib(pid)
            if cpu is None:
                continue
            self.series.setdefault(name, []).append((now, cpu, mem.get("VmRSS", 0)))
            self.peak_kib[name] = max(self.peak_kib.get(name, 0), mem.get("VmHWM", 0))
        busy, total = machine_cpu()
        self.machine.append((now, busy, total))

    def summary(self, start: float, end: float) -> dict[str, Any]:
        """CPU seconds and average cores used between ``start`` and ``end``; peak memory."""
        out: dict[str, Any] = {}
        wall = max(end - start, 1e-9)
        for name, samples in self.series.items():
            inside = [s for s in samples if start - self.interval <= s[0] <= end + self.interval]
            if len(inside) < 2:
                continue
            cpu = inside[-1][1] - inside[0][1]
            out[name] = {
                "cpu_seconds": round(cpu, 2),
                "cores": round(cpu / wall, 2),
                "rss_mib_max": round(max(s[2] for s in inside) / 1024, 1),
                "rss_mib_peak_lifetime": round(self.peak_kib.get(name, 0) / 1024, 1),
            }
            if name in self.threads_end:
                pid = self.pids[name]
                before, after = self.threads_start.get(name, {}), self.threads_end[name]
                used = {tid: t - before.get(tid, 0.0) for tid, t in after.items()}
                main = used.pop(pid, 0.0)
                out[name]["main_thread_cores"] = round(main / wall, 2)
                out[name]["other_threads_cores"] = round(sum(used.values()) / wall, 2)
                out[name]["threads"] = len(after)
        inside_m = [m for m in self.machine if start - self.interval <= m[0] <= end + self.interval]
        if len(inside_m) >= 2:
            busy = inside_m[-1][1] - inside_m[0][1]
            total = inside_m[-1][2] - inside_m[0][2]
            out["machine"] = {"busy_fraction": round(busy / total, 3) if total else None}
        return out
