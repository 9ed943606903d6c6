"""A `coordination.k8s.io/v1` Lease that gives one Phalanx the roll-forward duty at a time.

Why a Lease of our own (`phalanx-rollforward` in Phalanx's namespace) and not
kube-scheduler's: Phalanx cannot tell whether its kube-scheduler sidecar is the one holding
the scheduler's lease (that holder identity is the scheduler's, not ours), and binding a
gang's remaining members from its commit record needs no kube-scheduler at all. So any
Phalanx replica may hold the duty; the Lease only guarantees that two never act on the
same records at once. (Records written moments ago by another replica's bind barrier are
left alone for a grace period by the roll-forward loop, see `phalanx.service.rollforward`.)

Semantics follow client-go's leader election (`tools/leaderelection`):

* acquire: create the Lease, or take it over once its holder has not renewed it for
  `leaseDurationSeconds` (15 s) as measured on OUR clock from when we last saw it change
  (never trusting the other holder's timestamps: clocks are skewed);
* renew every `retry_period_seconds` (5 s) with an optimistic-concurrency update (a 409
  means someone else wrote it: we are not the holder this round);
* we act as holder only while our last successful renewal is younger than
  `renew_deadline_seconds` (10 s) — less than the lease duration, so we stop before anyone
  else may start;
* on stop, a held Lease is released (holder cleared) so a successor need not wait 15 s.

State machine::

    FOLLOWER ──acquire/take over──▶ HOLDER ──renewed──▶ HOLDER
        ▲                              │ no renewal for renew_deadline, or 409 / lost
        └──────────────────────────────┘
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from phalanx.sources.informer import ApiError

log = logging.getLogger(__name__)

LEASE_NAME = "phalanx-rollforward"


class JsonApi(Protocol):
    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    lease_duration_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 5.0


def default_identity() -> str:
    """Unique per process, readable in `kubectl get lease`: host name plus a random suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(at: float) -> str:
    """A Kubernetes MicroTime (RFC 3339, microseconds, UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseHolder:
    """Acquires and renews one Lease on a thread of its own; `held` says if we may act."""

    def __init__(
        self,
        api: JsonApi,
        namespace: str,
        name: str = LEASE_NAME,
        *,
        identity: str | None = None,
        settings: LeaseSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.settings = settings or LeaseSettings()
        self.clock = clock
        self.wall_clock = wall_clock
        self._renewed_at: float | None = None  # our clock, last successful acquire/renew
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def held(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.settings.renew_deadline_seconds

    # ---- the loop --------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"lease-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop renewing and release the Lease if we hold it. Blocks briefly: call off the loop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.held:
            self.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            was = self.held
            try:
                self.try_acquire_or_renew()
            except Exception:  # never let the duty thread die
                log.exception("lease renewal failed", extra={"lease": self.name})
            now = self.held
            if now != was:
                log.info(
                    "roll-forward duty " + ("acquired" if now else "lost"),
                    extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity},
                )
            self._stop.wait(self.settings.retry_period_seconds)

    # ---- one round -------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One client-go round: True if we hold the Lease afterwards."""
        now = self.clock()
        stamp = micro_time(self.wall_clock())
        try:
            lease = self.api.request("GET", self.path)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot read the lease", extra={"lease": self.name, "reason": str(exc)})
                return False
            return self._write("POST", self._body({}, stamp, transitions=0, acquired=stamp), now)
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        seen = (holder, str(spec.get("renewTime") or ""))
        if seen != self._observed:
            self._observed, self._observed_at = seen, now
        duration = spec.get("leaseDurationSeconds") or self.settings.lease_duration_seconds
        if holder and holder != self.identity and now - self._observed_at < float(duration):
            self._renewed_at = None
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquired = str(spec.get("acquireTime") or stamp)
        if holder != self.identity:
            transitions += 1  # as client-go counts: any change of holder, a released one too
            acquired = stamp
        body = self._body(
            lease.get("metadata") or {}, stamp, transitions=transitions, acquired=acquired
        )
        return self._write("PUT", body, now)

    def release(self) -> None:
        """Clear the holder so another replica takes over at once; best effort."""
        try:
            lease = self.api.request("GET", self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            stamp = micro_time(self.wall_clock())
            body = self._body(
                lease.get("metadata") or {},
                stamp,
                transitions=int(spec.get("leaseTransitions") or 0),
                acquired=str(spec.get("acquireTime") or stamp),
                holder="",
                duration=1,
            )
            self.api.request("PUT", self.path, body)
        except ApiError as exc:
            log.warning("cannot release the lease", extra={"lease": self.name, "reason": str(exc)})
        finally:
            self._renewed_at = None

    def _write(self, method: str, body: dict[str, Any], now: float) -> bool:
        path = self.path if method == "PUT" else self.path.rsplit("/", 1)[0]
        try:
            self.api.request(method, path, body)
        except ApiError as exc:
            if exc.status != 409:  # 409: another replica wrote first; not ours this round
                log.warning(
                    "cannot write the lease", extra={"lease": self.name, "reason": str(exc)}
                )
            return False
        self._renewed_at = now
        return True

    def _body(
        self,
        metadata: Mapping[str, Any],
        stamp: str,
        *,
        transitions: int,
        acquired: str,
        holder: str | None = None,
        duration: int | None = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if metadata.get("resourceVersion"):
            meta["resourceVersion"] = metadata["resourceVersion"]  # optimistic concurrency
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity if holder is None else holder,
                "leaseDurationSeconds": duration or self.settings.lease_duration_seconds,
                "acquireTime": acquired,
                "renewTime": stamp,
                "leaseTransitions": transitions,
            },
        }
