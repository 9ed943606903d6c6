"""The extender service: the cluster model, the planner and the bind barrier behind the verbs.

Everything runs on one asyncio event loop: the model has a single writer, so a decision
computed from a snapshot and committed with no `await` in between is atomic. Blocking
client calls live in the sources, off the loop.

Bind barrier, per gang (all together or not at all)::

    first /bind ──▶ OPEN (waiters held, timer started)
        │ arrived + already bound >= minMember
        ▼
    re-check every waiter ─▶ write commit record ─▶ assume all (one step)
        ─▶ bind all concurrently ─▶ answer every waiter
        │ timer fires first
        ▼
    every waiter gets an Error; the reservation is released; the next filter re-plans
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.core.model import Placement, Pod
from phalanx.core.planner import (
    FilterResult,
    GangPlanner,
    GroupRecord,
    Outcome,
    PlannerSettings,
)
from phalanx.core.snapshot import ClusterState, MemberState
from phalanx.service.metrics import Metrics, partial_gangs
from phalanx.service.rollforward import RollForwardSettings, roll_forward_forever
from phalanx.sources.base import BindError, ClusterSource, CommitRecord, GroupStatus, StateUpdate

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    default_placement: Placement = field(default_factory=Placement)
    # Reservation TTL when a group does not set scheduleTimeoutSeconds (seconds).
    default_timeout_seconds: int = 60
    # How long /bind waits for the rest of the gang. Must stay below kube-scheduler's
    # extender httpTimeout (the chart sets 30 s), or kube-scheduler gives up first.
    barrier_timeout_seconds: float = 20.0
    # Retries of a failed binding whose pod still exists (the capacity is ours: retrying
    # is safe); a conflict (bound elsewhere) is never retried.
    bind_retries: int = 3
    bind_retry_backoff_seconds: float = 0.2
    # How often reservations are checked for expiry (seconds).
    expiry_interval_seconds: float = 1.0
    # How commit records are rolled forward after a crash (sources that keep them).
    roll_forward: RollForwardSettings = field(default_factory=RollForwardSettings)


@dataclass(slots=True)
class _Waiter:
    pod: Pod
    node: str
    future: asyncio.Future[str]


@dataclass(slots=True)
class _Gate:
    group_key: str
    min_member: int
    opened_at: float
    waiters: dict[str, _Waiter] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class Extender:
    """One Phalanx instance (see the module docstring): create, `await start()`, `await stop()`."""

    def __init__(
        self,
        source: ClusterSource,
        settings: ServiceSettings | None = None,
        *,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings or ServiceSettings()
        self.source = source
        self.clock = clock
        self.wall_clock = wall_clock
        self.state = ClusterState()
        self.planner = GangPlanner(
            self.state,
            PlannerSettings(
                default_placement=self.settings.default_placement,
                default_timeout_seconds=self.settings.default_timeout_seconds,
            ),
        )
        self.metrics = metrics or Metrics()
        self.metrics.watch(self.state, self.planner, lambda: self.source.synced)
        self._gates: dict[str, _Gate] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # What was last written as each PodGroup's status (phase, counts, reason, message).
        self._shown_status: dict[str, tuple[object, ...]] = {}
        self._expiry: asyncio.Task[None] | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    def apply(self, update: StateUpdate) -> None:
        """The sink sources feed: runs one update on the model (call on the loop)."""
        update(self.state)

    async def start(self) -> None:
        await self.source.start(self.apply)
        self._expiry = asyncio.create_task(self._expire_forever(), name="phalanx-expiry")
        self.spawn(roll_forward_forever(self, self.settings.roll_forward))

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        for gate in list(self._gates.values()):
            self._fail_gate(gate, "Phalanx is shutting down")
        for task in list(self._tasks):
            task.cancel()
        await self.source.stop()

    @property
    def ready(self) -> bool:
        return self.source.synced

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.expiry_interval_seconds)
            self.expire()
            self.refresh_statuses()

    def refresh_statuses(self) -> None:
        """Write the status of every PodGroup whose members moved since the last write
        (they bind, start running, finish or go away long after the gang decision)."""
        for key in self.state.groups():
            self._push_status(self.group_status(key))
        for gone in set(self._shown_status) - set(self.state.groups()):
            del self._shown_status[gone]
        self.planner.forget_gone()

    def _push_status(self, status: GroupStatus) -> None:
        shown = (status.phase, status.scheduled, status.running, status.reason, status.message)
        if self._shown_status.get(status.group_key) != shown:
            self._shown_status[status.group_key] = shown
            self.spawn(self.source.update_group_status(status))

    def expire(self) -> None:
        for reservation in self.planner.expire(self.clock()):
            # Binds held for an expired gang are answered now, not at the barrier timeout.
            gate = self._gates.pop(reservation.group_key, None)
            if gate is not None:
                self._fail_gate(
                    gate,
                    f"gang {gate.group_key}: its reservation expired while {len(gate.waiters)} of "
                    f"{gate.min_member} member(s) waited at bind; the gang will be re-planned",
                )
        self.flush()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` as a task the Extender owns (cancelled on stop)."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def flush(self) -> None:
        """Turn the planner's new events into metrics, Kubernetes Events and status."""
        events, self.planner.events = self.planner.events, []
        for event in events:
            self.metrics.gang_decisions.labels(event.outcome.value).inc()
            log.info(
                "gang decision",
                extra={
                    "group": event.group_key,
                    "result": event.outcome.value,
                    "reason": event.reason,
                },
            )
            namespace, name = event.group_key.split("/", 1)
            warning = event.outcome in (
                Outcome.UNFIT,
                Outcome.INVALID,
                Outcome.EXPIRED,
                Outcome.RELEASED,
            )
            reason = _EVENT_REASONS.get(event.outcome, "Phalanx")
            group = self.state.group(event.group_key)
            if group is not None:
                self.spawn(
                    self.source.emit_event(
                        "PodGroup", namespace, name, reason, event.reason, warning=warning
                    )
                )
            else:
                members = self.state.members(event.group_key)
                if members:
                    self.spawn(
                        self.source.emit_event(
                            "Pod", namespace, members[0].name, reason, event.reason, warning=warning
                        )
                    )
            if group is not None:
                self._push_status(self.group_status(event.group_key, event.outcome))

    def group_status(self, key: str, outcome: Outcome | None = None) -> GroupStatus:
        members = self.state.members(key, include_finished=True)
        scheduled = sum(1 for p in members if self.state.is_bound(p))
        running = sum(1 for p in members if p.node_name and p.phase.value == "Running")
        rec = self.planner.records.get(key) or GroupRecord(key)  # a view: records nothing
        group = self.state.group(key)
        need = group.min_member if group is not None else 0
        if need and scheduled >= need:
            phase = "Running" if running >= need else "Scheduled"
        elif outcome in (Outcome.COMMITTED, Outcome.REPLANNED) or self.state.reservation(key):
            phase = "Scheduling"
        elif need and len(members) < need:
            phase = "Pending"
        else:
            phase = "PreScheduling"
        start = None
        if rec.first_filter_at is not None:
            start = self.wall_clock() - (self.clock() - rec.first_filter_at)
        return GroupStatus(
            group_key=key,
            phase=phase,
            scheduled=scheduled,
            running=running,
            reason=(rec.last_outcome.value if rec.last_outcome else ""),
            message=rec.last_reason,
            schedule_start_time=start,
        )

    # ---- verbs -------------------------------------------------------------------------

    def learn(self, pod: Pod) -> Pod:
        """The pod as the model knows it; a pod first seen in a request is added (it exists
        in the API: kube-scheduler got it from there, our watch may simply lag)."""
        known = self.state.pod(pod.uid)
        if known is not None:
            return known
        if not pod.node_name:
            self.state.upsert_pod(pod)
        return pod

    def filter(self, pod: Pod, offered: Sequence[str]) -> FilterResult:
        pod = self.learn(pod)
        key = pod.group.key if pod.group is not None else None
        before = self.state.reservation(key) if key is not None else None
        result = self.planner.filter(pod, offered, self.clock())
        after = self.state.reservation(key) if key is not None else None
        if before is None and after is not None:
            # A fresh reservation: the other members were told to wait and kube-scheduler
            # parked them; bring them back now rather than at its next flush.
            others: list[tuple[str, str]] = []
            for m in after.members:
                if m.pod_uid != pod.uid and m.state is MemberState.RESERVED:
                    namespace, name = m.pod_key.split("/", 1)
                    others.append((namespace, name))
            self.spawn(self.source.requeue(others, f"gang {key} reserved"))
        self.flush()
        return result

    def prioritize(self, pod: Pod, offered: Sequence[str]) -> dict[str, int]:
        return self.planner.score(self.learn(pod), offered)

    def preempt(self, pod: Pod, victims: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        return self.planner.filter_victims(self.learn(pod), victims)

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind one pod; returns "" on success or the error kube-scheduler should report."""
        pod = self.state.pod_by_key(namespace, name)
        if pod is None:
            return f"pod {namespace}/{name} is unknown to Phalanx"
        if uid and pod.uid != uid:
            return f"pod {namespace}/{name} has UID {pod.uid}, not {uid}: it was recreated"
        if pod.node_name:
            if pod.node_name == node:
                return ""
            return f"pod {pod.key} is already bound to {pod.node_name}"
        if self.state.assumed_node(pod.uid) is not None:
            return f"pod {pod.key} is already being bound"
        if pod.group is None:
            return await self._bind_alone(pod, node)
        key = pod.group.key
        group = self.planner.resolve(pod)
        if isinstance(group, str):
            return group
        bound = sum(1 for p in self.state.members(key) if self.state.is_bound(p))
        reservation = self.state.reservation(key)
        member = reservation.member(pod.uid) if reservation is not None else None
        if bound >= group.min_member:
            # Elastic members beyond a bound quorum join as capacity allows; a reserved one
            # binds into its own reservation.
            if member is None:
                return await self._bind_alone(pod, node)
            if member.node != node:
                return f"gang {key} reserved {member.node} for pod {pod.key}, not {node}"
            self.state.assume(pod.uid, node)
            return await self.bind_assumed(pod, node)
        if member is None or member.state is not MemberState.RESERVED:
            return (
                f"gang {key} holds no reservation for pod {pod.key} (it expired or was released); "
                "the gang will be re-planned"
            )
        if member.node != node:
            return f"gang {key} reserved {member.node} for pod {pod.key}, not {node}"
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate(key, group.min_member, self.clock())
            loop = asyncio.get_running_loop()
            gate.timer = loop.call_later(self.settings.barrier_timeout_seconds, self._time_out, key)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        previous = gate.waiters.get(pod.uid)
        if previous is not None:
            _answer([previous], f"a newer bind request for pod {pod.key} replaced this one")
        gate.waiters[pod.uid] = _Waiter(pod, node, future)
        self.metrics.barrier_waiting.inc()
        try:
            self._maybe_open(gate, bound)
            return await future
        finally:
            self.metrics.barrier_waiting.dec()

    # ---- binding -----------------------------------------------------------------------

    async def _bind_alone(self, pod: Pod, node: str) -> str:
        info = self.state.node(node)
        if info is None:
            return f"node {node} is unknown to Phalanx"
        if not pod.requests.fits_in(info.free):
            short = ", ".join(pod.requests.shortfall(info.free))
            return f"pod {pod.key} no longer fits node {node} (insufficient {short})"
        self.state.assume(pod.uid, node)
        return await self.bind_assumed(pod, node)

    async def bind_assumed(self, pod: Pod, node: str) -> str:
        """Issue one binding for an assumed pod; forget it on failure."""
        attempts = 1 + self.settings.bind_retries
        for attempt in range(attempts):
            try:
                await self.source.bind(pod.namespace, pod.name, pod.uid, node)
            except BindError as exc:
                retry = not (exc.gone or exc.conflict) and attempt + 1 < attempts
                if retry:
                    await asyncio.sleep(self.settings.bind_retry_backoff_seconds * 2**attempt)
                    continue
                self.state.forget(pod.uid)
                result = "gone" if exc.gone else "conflict" if exc.conflict else "failed"
                self.metrics.bindings.labels(result).inc()
                log.warning(
                    "binding failed", extra={"pod": pod.key, "node": node, "reason": str(exc)}
                )
                return f"binding pod {pod.key} to {node} failed: {exc}"
            self.metrics.bindings.labels("bound").inc()
            return ""
        raise AssertionError("unreachable: the last attempt returns")

    def _maybe_open(self, gate: _Gate, bound: int) -> None:
        if len(gate.waiters) + bound < gate.min_member:
            return
        del self._gates[gate.group_key]
        if gate.timer is not None:
            gate.timer.cancel()
        self.spawn(self._bind_gang(gate))

    def _time_out(self, key: str) -> None:
        gate = self._gates.pop(key, None)
        if gate is None:
            return
        waited = self.settings.barrier_timeout_seconds
        reason = (
            f"gang {key}: only {len(gate.waiters)} of {gate.min_member} member(s) reached bind "
            f"within {waited:g}s; reservation released, the gang will be re-planned"
        )
        self._abandon(key, gate.waiters.values(), reason)

    def _abandon(self, key: str, waiters: Iterable[_Waiter], reason: str) -> None:
        """Answer `waiters` with `reason`, release the gang's reservation and say so."""
        _answer(waiters, reason)
        self.state.release(key)
        self.planner.note(key, Outcome.RELEASED, reason, self.clock())
        self.flush()

    @staticmethod
    def _fail_gate(gate: _Gate, reason: str) -> None:
        if gate.timer is not None:
            gate.timer.cancel()
        _answer(gate.waiters.values(), reason)

    async def _bind_gang(self, gate: _Gate) -> None:
        key = gate.group_key
        ready: list[_Waiter] = []
        for waiter in gate.waiters.values():
            problem = self._recheck(key, waiter)
            if problem:
                _answer([waiter], problem)
            else:
                ready.append(waiter)
        bound = sum(1 for p in self.state.members(key) if self.state.is_bound(p))
        if len(ready) + bound < gate.min_member:
            reason = (
                f"gang {key}: only {len(ready) + bound} of {gate.min_member} member(s) still "
                "bindable after re-check; reservation released, the gang will be re-planned"
            )
            self._abandon(key, ready, reason)
            return
        reservation = self.state.reservation(key)
        placements = {}
        uids = {}
        if reservation is not None:
            for m in reservation.members:
                placements[m.pod_key] = m.node
                uids[m.pod_key] = m.pod_uid
        for p in self.state.members(key):
            node = self.state.bound_node(p)
            if node:
                placements[p.key] = node
                uids[p.key] = p.uid
        try:
            await self.source.write_commit_record(CommitRecord(key, placements, uids))
        except Exception as exc:  # noqa: BLE001  # any failure: nothing is bound yet, so back out
            reason = f"gang {key}: could not write the commit record ({exc}); nothing was bound"
            self._abandon(key, ready, reason)
            return
        for waiter in ready:  # one step: the whole quorum is assumed before any binding
            self.state.assume(waiter.pod.uid, waiter.node)
        results = await asyncio.gather(*(self.bind_assumed(w.pod, w.node) for w in ready))
        for waiter, error in zip(ready, results, strict=True):
            _answer([waiter], error)
        rec: GroupRecord = self.planner.record(key)
        now = self.clock()
        if all(not e for e in results):
            if rec.bound_at is None:
                rec.bound_at = now
                if rec.first_filter_at is not None:
                    self.metrics.time_to_bind.observe(now - rec.first_filter_at)
                placed = rec.placed
                if placed is not None and placed.outcome is not None:
                    self.metrics.plan_transfers.observe(len(placed.outcome.transfers))
            self.planner.note(key, Outcome.BOUND, f"bound {len(ready)} member(s) together", now)
        else:
            failed = [w.pod.key for w, e in zip(ready, results, strict=True) if e]
            self.planner.note(key, Outcome.UNFIT, f"binding failed for {', '.join(failed)}", now)
        self.flush()

    def _recheck(self, key: str, waiter: _Waiter) -> str:
        """Why a waiting member must not be bound now, or "" if it may."""
        pod = self.state.pod(waiter.pod.uid)
        if pod is None:
            return f"pod {waiter.pod.key} no longer exists"
        if self.state.bound_node(pod):
            return f"pod {pod.key} is already bound"
        reservation = self.state.reservation(key)
        member = reservation.member(pod.uid) if reservation is not None else None
        if member is None or member.node != waiter.node:
            return f"gang {key} no longer holds {waiter.node} for pod {pod.key}"
        info = self.state.node(waiter.node)
        if info is None or not info.node.schedulable:
            return f"node {waiter.node} is gone, cordoned or not ready"
        return ""

    # ---- views -------------------------------------------------------------------------

    def partial_gangs(self) -> list[str]:
        return partial_gangs(self.state, self.planner)

    def debug_groups(self) -> list[dict[str, object]]:
        """A summary line per known gang, sorted by key."""
        return [
            self._summary(key)
            for key in sorted(self.state.group_keys() | set(self.planner.records))
        ]

    def debug_group(self, namespace: str, name: str) -> dict[str, object] | None:
        """Everything Phalanx knows about one gang: reservation, plan, phases, transfers,
        warnings, last failure reason. None if the gang is unknown."""
        key = f"{namespace}/{name}"
        if key not in self.state.group_keys() and key not in self.planner.records:
            return None
        view = self._summary(key)
        reservation = self.state.reservation(key)
        now = self.clock()
        view["reservation"] = (
            None
            if reservation is None
            else {
                "expires_in_seconds": round(max(0.0, reservation.expires_at - now), 3),
                "members": [
                    {
                        "pod": m.pod_key,
                        "node": m.node,
                        "state": m.state.value,
                        "gpus": m.requests.gpus(),
                    }
                    for m in reservation.members
                ],
            }
        )
        rec = self.planner.records.get(key)
        placed = rec.placed if rec is not None else None
        outcome = placed.outcome if placed is not None else None
        view["plan"] = None
        if placed is not None:
            by_uid = {p.uid: p.key for p in placed.members}
            view["plan"] = {
                "domain": placed.domain,
                "placements": {by_uid[u]: n for u, n in sorted(placed.assignment.items())},
                "phases": [
                    {
                        "index": ph.index,
                        "kind": ph.kind,
                        "members": list(ph.members),
                        "nodes": list(ph.nodes),
                        **(
                            {"trial": f"{ph.trial_index + 1}/{ph.trial_total}"}
                            if ph.trial_index is not None and ph.trial_total
                            else {}
                        ),
                    }
                    for ph in (outcome.phases if outcome else ())
                ],
                "data_transfers": [
                    {
                        "from": t.from_member,
                        "to": t.to_member,
                        "from_node": t.from_node,
                        "to_node": t.to_node,
                    }
                    for t in (outcome.transfers if outcome else ())
                ],
                "warnings": list(placed.warnings),
            }
        return view

    def _summary(self, key: str) -> dict[str, object]:
        group = self.state.group(key)
        members = self.state.members(key, include_finished=True)
        rec = self.planner.records.get(key)
        resolved = self.planner.resolve(members[0]) if members else group
        status = self.group_status(key)
        return {
            "group": key,
            "source": "PodGroup" if group is not None else "annotations",
            "min_member": resolved.min_member
            if resolved is not None and not isinstance(resolved, str)
            else None,
            "placement": str(resolved.placement)
            if resolved is not None and not isinstance(resolved, str)
            else None,
            "members": len(members),
            "bound": status.scheduled,
            "phase": status.phase,
            "last_decision": rec.last_outcome.value
            if rec is not None and rec.last_outcome
            else None,
            "last_reason": rec.last_reason if rec is not None else "",
            "error": resolved if isinstance(resolved, str) else self.state.group_error(key),
        }


def _answer(waiters: Iterable[_Waiter], reason: str) -> None:
    """Answer every still-waiting `/bind` with `reason` ("" is success)."""
    for waiter in waiters:
        if not waiter.future.done():
            waiter.future.set_result(reason)


_EVENT_REASONS = {
    Outcome.COMMITTED: "Reserved",
    Outcome.WAITING: "WaitingForMembers",
    Outcome.UNFIT: "Unschedulable",
    Outcome.INVALID: "InvalidGang",
    Outcome.EXPIRED: "ReservationExpired",
    Outcome.REPLANNED: "Replanned",
    Outcome.RELEASED: "ReservationReleased",
    Outcome.ROLLED_FORWARD: "RolledForward",
    Outcome.BOUND: "Bound",
}
