"""The bind barrier (DESIGN §6): each gang member's `/bind` is held until the quorum is
there, then the quorum is bound all together, or nothing is.

The decisions are pure (`phalanx.core.barrier`); this module holds the requests, keeps the
timers and does the side effects. One gate per gang, for one reservation (its serial)::

    Join ──▶ OPEN (waiters held; each new member restarts the stall timer and pushes the
       │      reservation's deadline out by the gang's timeout)
       │ arrived + bound (+ completions) >= minMember │ no new member for the timeout
       ▼                                             ▼
    re-check every arrival                           every held bind gets an Error; that
       ─▶ the commit record: short, each binding     reservation (and no newer one) is
          carries it; long, write it (await) and     released; the next filter re-plans
          re-check again: the await let anything
          happen (a pod deleted, a release, ...)
       ─▶ assume the quorum (one step, no await)
       ─▶ bind all concurrently ─▶ answer each waiter as its binding lands

    A big gang takes longer to reach bind than kube-scheduler waits for one `/bind` (its
    extender httpTimeout): while new members keep arriving, a bind held for the timeout is
    answered ("parked": kube-scheduler retries the pod later) but its member stays counted
    at its reserved node and is bound with the quorum, retried or not.

    Completing members (`complete_members`, on by default): the gate also counts the gang's
    other reserved members that Phalanx may bind itself (`phalanx.core.barrier.completions`),
    re-counted at each arrival and after every model change that touches the gang, and binds
    them with the waiters. Their bindings are recorded like any (carrying the commit record,
    or after it; assumed in the same step); a `/bind` kube-scheduler sends for one meanwhile
    waits for its result.
    Behind other pending pods, a reserved gang none of whose members is at `/bind` gets a gate
    with no waiter once its completions alone make the quorum (`_complete_unasked`): a gang
    planned ahead of kube-scheduler (`GangPlanner.plan_ahead`) is bound whole that way.

    A completed member's `Scheduled` Event waits `ANNOUNCE_AFTER_SECONDS` for kube-scheduler's
    own `/bind` of it: a cycle under way when the gang was bound still ends at `/bind`, and
    when that succeeds kube-scheduler writes the Event itself, so Phalanx writes none.

    Any release of the gate's reservation, whatever its cause, answers the waiters at once
    with that cause (`on_release`); any other change to the model that makes a held bind
    unbindable (its pod deleted, its node gone) answers that one (`sweep`); an exception
    inside answers every waiter and leaves nothing assumed. Every waiter is answered once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from phalanx.core.barrier import (
    Answer,
    BindAlone,
    BindReserved,
    Completion,
    Join,
    admit,
    completions,
    quorum_present,
    still_bindable,
    tasks_short,
)
from phalanx.core.cache import ClusterState, ReleaseCause, Released
from phalanx.core.groups.registry import minima_field
from phalanx.core.journal import Outcome
from phalanx.core.model import Binding, GroupRef, Pod
from phalanx.core.planner import GangPlanner
from phalanx.core.quorum import TaskMinima
from phalanx.core.resolution import Resolved
from phalanx.core.rollforward import CARRIED_RECORD_MAX_BYTES, CommitRecord, carried_by_bindings
from phalanx.service.binder import Binder
from phalanx.service.metrics import Metrics
from phalanx.service.reporter import Reporter
from phalanx.service.tasks import Tasks
from phalanx.service.timers import LoopTimers, Timer, Timers

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# How long a completed member's `Scheduled` Event waits for kube-scheduler's own successful
# `/bind` of the pod, after which kube-scheduler writes that Event itself. On the bench's
# gangs that fit, about 300 of 800 members were completed while their cycle was under way:
# without the wait each got two Events.
ANNOUNCE_AFTER_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class HeldGate:
    """A gate as `/debug` and tests see it: which reservation, the binds it holds, and the
    members counted whose bind was answered while the gang assembled (parked)."""

    group_key: str
    serial: int
    min_member: int
    waiting: tuple[Binding, ...]
    parked: tuple[Binding, ...] = ()


@dataclass(slots=True)
class _Waiter:
    """A member that reached bind for the gate's reservation; its request is held until
    `future` is done (answered: bound, refused, or parked)."""

    pod: Pod
    node: str
    future: asyncio.Future[str]
    arrived_at: float


@dataclass(slots=True)
class _Announcement:
    """A completed member's `Scheduled` Event, unless kube-scheduler's /bind of it succeeds
    first. `timer` is set once the gang's fan-out is over."""

    waiter: _Waiter
    group: GroupRef
    timer: Timer | None = None


@dataclass(slots=True)
class _Gate:
    group: GroupRef
    min_member: int
    timeout_seconds: int  # the gang's own (scheduleTimeoutSeconds)
    serial: int  # the reservation this gate was opened for
    waiters: dict[str, _Waiter] = field(default_factory=dict)
    timer: Timer | None = None
    last_arrival: float = 0.0  # when a member first reached bind, latest
    # The quorum is being bound but not yet assumed (its task is starting, or a long commit
    # record is being written): a member reaching bind now joins this gate and is bound
    # with the others.
    opening: bool = False
    # The gang's Volcano task minima: the quorum also holds each task's minimum.
    min_task_member: TaskMinima = ()


class BindBarrier:
    """The gates of every gang being bound (see module docstring). Loop only."""

    def __init__(
        self,
        state: ClusterState,
        planner: GangPlanner,
        binder: Binder,
        reporter: Reporter,
        *,
        metrics: Metrics,
        tasks: Tasks,
        timeout_seconds: float,
        clock: Clock,
        timers: Timers | None = None,
        complete_members: bool = True,
        acts_alone: Callable[[], bool] = lambda: True,
        carried_record_bytes: int = CARRIED_RECORD_MAX_BYTES,
    ) -> None:
        self.state = state
        self.planner = planner
        self.binder = binder
        self.reporter = reporter
        self.metrics = metrics
        self.tasks = tasks
        self.timeout_seconds = timeout_seconds
        self.clock = clock
        self.timers = timers or LoopTimers()
        self.complete_members = complete_members
        # The longest commit record a gang's bindings carry; a longer one is written first.
        self.carried_record_bytes = carried_record_bytes
        # Whether a gate may open with no new /bind (`_complete_unasked`, `sweep`): only while
        # its kube-scheduler asks this instance things, so leads (not on a standby).
        self.acts_alone = acts_alone
        self._gates: dict[str, _Gate] = {}
        # Members being bound (or bound, until the model sees it) without their /bind: a
        # /bind kube-scheduler sends for one meanwhile gets the binding's own answer.
        self._completing: dict[str, _Waiter] = {}
        # Completed members whose `Scheduled` Event is not written yet, by pod UID.
        self._unannounced: dict[str, _Announcement] = {}

    def held(self) -> list[HeldGate]:
        """The gates holding binds now, with the reservation each waits on (a view)."""
        return [
            HeldGate(
                key,
                gate.serial,
                gate.min_member,
                tuple(
                    Binding(w.pod.ref, w.node)
                    for _, w in sorted(gate.waiters.items())
                    if not w.future.done()
                ),
                tuple(
                    Binding(w.pod.ref, w.node)
                    for _, w in sorted(gate.waiters.items())
                    if w.future.done()
                ),
            )
            for key, gate in sorted(self._gates.items())
        ]

    async def bind(self, binding: Binding) -> str:
        """Bind one pod; "" on success or the error kube-scheduler should report."""
        error = await self._bind(binding)
        if not error:  # kube-scheduler writes the pod's `Scheduled` Event itself now
            announcement = self._unannounced.pop(binding.pod.uid, None)
            if announcement is not None and announcement.timer is not None:
                announcement.timer.cancel()
        return error

    async def _bind(self, binding: Binding) -> str:
        completing = self._completing.get(binding.pod.uid)
        if completing is not None and completing.node == binding.node:
            return await asyncio.shield(completing.future)
        admission = admit(self.state, binding, self.planner.defaults)
        if isinstance(admission, Answer):
            return admission.error
        if isinstance(admission, BindAlone):
            return await self.binder.bind_alone(admission.pod, admission.node)
        if isinstance(admission, BindReserved):
            self.state.assume(admission.pod.uid, admission.node)
            return await self.binder.bind_assumed(admission.pod, admission.node)
        return await self._join(admission)

    async def _join(self, join: Join) -> str:
        assert join.pod.group is not None
        key = join.pod.group.key
        gate = self._gates.get(key)
        if gate is not None and gate.serial != join.serial:
            # Its reservation was released (that answered its waiters) and a new one made.
            self._gates.pop(key)
            gate = None
        if gate is None:
            gate = _Gate(
                join.pod.group,
                join.group.min_member,
                join.group.timeout_seconds,
                join.serial,
                min_task_member=join.group.min_task_member,
            )
            self._gates[key] = gate
        now = self.clock()
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        previous = gate.waiters.get(join.pod.uid)
        if previous is not None:
            _answer([previous], f"a newer bind request for pod {join.pod.key} replaced this one")
        elif not gate.opening:
            self._progress(gate, now)
        waiter = _Waiter(join.pod, join.node, future, now)
        gate.waiters[join.pod.uid] = waiter
        self.timers.call_later(self.timeout_seconds, lambda: self._park(gate, waiter))
        self.metrics.barrier_waiting.inc()
        try:
            if not gate.opening and self._quorum(gate, join.bound):
                self._open(gate)
            return await future
        finally:
            self.metrics.barrier_waiting.dec()

    # ---- closing a gate ----------------------------------------------------------------

    def on_release(self, released: Released) -> None:
        """A reservation was released (any cause): answer the binds held for it now."""
        gate = self._gates.get(released.group_key)
        if gate is None or gate.serial != released.reservation.serial:
            return
        del self._gates[released.group_key]
        _cancel(gate)
        held = f"{len(gate.waiters)} of {gate.min_member} member(s) waited at bind"
        if released.cause is ReleaseCause.EXPIRED:
            reason = f"its reservation expired while {held}"
        else:
            reason = f"its reservation was released while {held} ({released.why})"
        _answer(gate.waiters.values(), f"gang {gate.group}: {reason}; the gang will be re-planned")

    def sweep(self) -> None:
        """After a change to the model: answer the held binds it no longer supports (a pod
        deleted, a member dropped, a node gone or cordoned) instead of at the gate's end.
        Only the binds the changes since the last sweep can affect are checked
        (`ClusterState.take_touched`): their pod, their gang's reservation, or any node."""
        touched = self.state.take_touched()
        if not touched:
            return
        for uid in touched.pods & self._completing.keys():
            pod = self.state.pod(uid)
            if self._completing[uid].future.done() and (pod is None or pod.node_name):
                del self._completing[uid]  # the model sees it now: admit answers from there
        groups = set(touched.groups)
        if self.complete_members:  # a member changed: it may be completable now
            groups.update(p.group.key for u in touched.pods if (p := self.state.pod(u)) and p.group)
            if self.acts_alone():
                for key in groups - self._gates.keys():
                    self._complete_unasked(key)
        for key, gate in list(self._gates.items()):
            reservation = self.state.reservation(key)
            replaced = reservation is None or reservation.serial != gate.serial
            if touched.nodes or (key in touched.groups and replaced):
                suspects = list(gate.waiters.items())
            else:
                # Within one reservation a held bind goes stale only with its own pod (gone,
                # bound, dropped from the gang) or a node: a sibling claiming its slot, at
                # each arrival of a big gang, re-checked every held bind (O(members²)).
                # The gate re-checks every one of them before it binds anyway.
                suspects = [(u, w) for u in touched.pods if (w := gate.waiters.get(u)) is not None]
            for uid, waiter in suspects:
                problem = still_bindable(self.state, key, gate.serial, waiter.pod, waiter.node)
                if problem:
                    del gate.waiters[uid]
                    _answer([waiter], problem)
            if gate.opening:
                continue  # its own task re-checks every waiter before assuming any
            if not gate.waiters:
                del self._gates[key]
                _cancel(gate)
            elif (
                self.complete_members
                and (key in groups or touched.nodes)
                # Held binds are no proof that their kube-scheduler still leads: one that died
                # leaves them counted, and a standby's may plan over this gang meanwhile.
                and self.acts_alone()
                and self._quorum(gate, self.state.bound_count(key))
            ):
                self._open(gate)

    def _complete_unasked(self, key: str) -> None:
        """A reserved gang none of whose members is at `/bind`: when the members Phalanx may
        bind itself make its quorum, open a gate for them alone. Only a gang with every
        member placed (no slot left unclaimed) and none bound: a gang left partly bound by a
        failed binding waits for its members' own `/bind`, so a binding that keeps failing is
        not retried from every watch event. And only behind other pending pods (more pods
        pending than the gang has: none of its members is bound): otherwise kube-scheduler
        reaches a member next, and the gate its `/bind` opens completes the others."""
        reservation = self.state.reservation(key)
        if (
            reservation is None
            # O(1) first: asked after every watch event that touches a gang member
            or self.state.pending_count() <= self.state.member_count(key)
            or reservation.slots()
            or self.state.bound_count(key)
        ):
            return
        members = self.state.members(key)
        ref = members[0].group if members else None
        resolution = self.planner.resolve(ref) if ref is not None else None
        if ref is None or not isinstance(resolution, Resolved):
            return
        group = resolution.group
        gate = _Gate(
            ref,
            group.min_member,
            group.timeout_seconds,
            reservation.serial,
            min_task_member=group.min_task_member,
        )
        if self._quorum(gate, 0):
            self._gates[key] = gate
            self._open(gate)

    def close(self, reason: str) -> None:
        """Answer every held bind with `reason` (the service is stopping)."""
        for gate in list(self._gates.values()):
            _cancel(gate)
            _answer(gate.waiters.values(), reason)
        self._gates.clear()
        for announcement in self._unannounced.values():  # the loop stops: Events are best effort
            if announcement.timer is not None:
                announcement.timer.cancel()
        self._unannounced.clear()

    def _progress(self, gate: _Gate, now: float) -> None:
        """A new member reached bind: the gang is assembling, so its stall timer starts
        again and its reservation lives on for the gang's timeout from now."""
        gate.last_arrival = now
        _cancel(gate)
        gate.timer = self.timers.call_later(self.timeout_seconds, lambda: self._time_out(gate))
        self.state.extend(gate.group.key, gate.serial, now + gate.timeout_seconds)

    def _park(self, gate: _Gate, waiter: _Waiter) -> None:
        """`waiter` was held for the timeout. If members arrived since, the gang is still
        assembling: answer the request (kube-scheduler would give up on it soon) and keep
        the member counted. If none did, the stall timer gives the gang up instead."""
        if (
            self._gates.get(gate.group.key) is not gate
            or gate.opening
            or waiter.future.done()
            or gate.last_arrival <= waiter.arrived_at
        ):
            return
        present = len(gate.waiters) + self.state.bound_count(gate.group.key)
        _answer(
            [waiter],
            f"gang {gate.group}: {present} of {gate.min_member} member(s)"
            f"{self._missing_tasks(gate)} have reached bind and more are arriving; pod "
            f"{waiter.pod.key} stays counted on {waiter.node} and is bound with its gang "
            "(kube-scheduler retries it meanwhile)",
        )

    def _missing_tasks(self, gate: _Gate) -> str:
        """ ", but task master has 0 of 1 member(s)" while the held and bound members miss a
        Volcano task minimum (the count alone may look like a quorum); "" otherwise."""
        short = self._tasks_short(gate, [w.pod for w in gate.waiters.values()])
        return (
            f", but {short} ({minima_field(gate.min_task_member, gate.group.dialect)}),"
            if short
            else ""
        )

    def _time_out(self, gate: _Gate) -> None:
        if self._gates.get(gate.group.key) is not gate:
            return
        del self._gates[gate.group.key]
        reason = (
            f"gang {gate.group}: only {len(gate.waiters)} of {gate.min_member} member(s)"
            f"{self._missing_tasks(gate)} reached bind within {self.timeout_seconds:g}s of the "
            "last one; reservation released, the gang will be re-planned"
        )
        self._abandon(gate, gate.waiters.values(), reason)

    def _abandon(self, gate: _Gate, waiters: Iterable[_Waiter], reason: str) -> None:
        """Answer `waiters` with `reason`, release the gate's reservation (and no newer one)."""
        self._closed(gate)
        _answer(waiters, reason)
        self.state.release(gate.group.key, ReleaseCause.BARRIER, reason, serial=gate.serial)
        self.reporter.report([self.planner.note(gate.group, Outcome.RELEASED, reason)])

    # ---- binding the quorum ------------------------------------------------------------

    def _quorum(self, gate: _Gate, bound: int) -> bool:
        """Whether the gate may open: its waiters, the gang's bound members and (when
        completing) the members Phalanx may bind itself make the quorum."""
        present = len(gate.waiters) + bound
        held = [w.pod for w in gate.waiters.values()]
        if quorum_present(present, 0, gate.min_member) and not self._tasks_short(gate, held):
            return True
        if not self.complete_members:
            return False
        # Asked after every change to an assembling gang: the full check (eligibility per
        # member) only once the reserved members could make the quorum, not at each arrival
        # of a 256-member gang (O(members²) on the loop: 68 of 146 ms for its arrivals).
        # Waiters and completions are both among `pods_reserved`.
        reservation = self.state.reservation(gate.group.key)
        if reservation is None or reservation.serial != gate.serial:
            return False
        if not quorum_present(reservation.pods_reserved, bound, gate.min_member):
            return False
        extra = self._completions(gate)
        present += len(extra)
        return quorum_present(present, 0, gate.min_member) and not self._tasks_short(
            gate, [*held, *(c.pod for c in extra)]
        )

    def _tasks_short(self, gate: _Gate, present: Iterable[Pod]) -> str:
        """Which of the gang's task minima the `present` members and its bound ones miss."""
        return tasks_short(self.state, gate.group.key, gate.min_task_member, present)

    def _completions(self, gate: _Gate) -> list[Completion]:
        """The gang's other members Phalanx binds with the gate's waiters (see `completions`)."""
        if not self.complete_members:
            return []
        return completions(self.state, gate.group.key, gate.serial, gate.waiters.keys())

    def _open(self, gate: _Gate) -> None:
        gate.opening = True  # it stays in `_gates` until the quorum is assumed: see `_closed`
        _cancel(gate)
        self.tasks.spawn(self._bind_gang(gate), name=f"bind-gang-{gate.group}")

    def _closed(self, gate: _Gate) -> None:
        """The opening gate assumed its quorum or gave up: later binds no longer join it."""
        if self._gates.get(gate.group.key) is gate:
            del self._gates[gate.group.key]

    def _bindable(self, gate: _Gate) -> list[_Waiter]:
        """The gate's waiters that may still be bound; the others are answered with why not
        and leave the gate."""
        ready = []
        for uid, waiter in list(gate.waiters.items()):
            problem = still_bindable(
                self.state, gate.group.key, gate.serial, waiter.pod, waiter.node
            )
            if problem:
                del gate.waiters[uid]
                _answer([waiter], problem)
            else:
                ready.append(waiter)
        return ready

    def _short(self, gate: _Gate, ready: list[_Waiter], extra: list[Completion]) -> str:
        """Why the `ready` waiters (and `extra` completions) no longer make the quorum, or ""."""
        bound = self.state.bound_count(gate.group.key) + len(extra)
        if quorum_present(len(ready), bound, gate.min_member):
            tasks = self._tasks_short(gate, [*(w.pod for w in ready), *(c.pod for c in extra)])
            if not tasks:
                return ""
            return (
                f"gang {gate.group}: {tasks} still bindable after re-check "
                f"({minima_field(gate.min_task_member, gate.group.dialect)}); "
                "reservation released, the gang will be re-planned"
            )
        return (
            f"gang {gate.group}: only {len(ready) + bound} of {gate.min_member} member(s) still "
            "bindable after re-check; reservation released, the gang will be re-planned"
        )

    async def _bind_gang(self, gate: _Gate) -> None:
        assumed: list[_Waiter] = []
        try:
            ready = self._bindable(gate)
            extra = self._completions(gate)
            short = self._short(gate, ready, extra)
            if short:
                self._abandon(gate, gate.waiters.values(), short)
                return
            record = self._commit_record(gate)
            carried = carried_by_bindings(record, self.carried_record_bytes)
            if not carried:
                written = await self._write_record(gate, record, extra)
                if written is None:
                    return
                ready, extra = written
            now = self.clock()
            loop = asyncio.get_running_loop()
            completing = [_Waiter(c.pod, c.node, loop.create_future(), now) for c in extra]
            for waiter in ready + completing:  # one step: all assumed before any binding
                self.state.assume(waiter.pod.uid, waiter.node)
                assumed.append(waiter)
            for waiter in completing:
                self._completing[waiter.pod.uid] = waiter
                self._unannounced[waiter.pod.uid] = _Announcement(waiter, gate.group)
            self._closed(gate)
            others = {id(w) for w in completing}
            # Completions first, in the order their slots were claimed (kube-scheduler's queue
            # order): each one kube-scheduler pops before its binding lands costs it a whole
            # cycle, while a held waiter costs it nothing to wait.
            ready = completing + ready
            landed: list[float] = []
            completed: list[_Waiter] = []
            carry = record if carried else None  # each binding writes it onto its pod

            async def bind_one(waiter: _Waiter) -> str:
                error = await self.binder.bind_assumed(waiter.pod, waiter.node, record=carry)
                if not error:
                    landed.append(self.clock())
                    if id(waiter) in others:
                        self.metrics.members_completed.inc()
                        completed.append(waiter)
                _answer([waiter], error)  # at once: kube-scheduler's httpTimeout runs on
                if error:  # forgotten: its own /bind, if any comes, takes the normal path
                    self._stop_completing(waiter)
                return error

            results = await asyncio.gather(*(bind_one(w) for w in ready))
            self.metrics.bind_steps.labels(step="bindings").observe(self.clock() - now)
            assumed.clear()  # each binding forgot its own pod if it failed
            for waiter in completed:  # after the fan-out: its bindings go first
                self._announce_later(waiter)
            if len(landed) > 1:
                self.metrics.bind_window.observe(max(landed) - min(landed))
            self._bound(gate, ready, results, completed=len(completing))
        except Exception as exc:  # a bug: answer everyone, leave nothing assumed
            log.exception("bind barrier failed", extra={"group": gate.group.key})
            for waiter in assumed:
                self.state.forget(waiter.pod.uid)
            reason = (
                f"gang {gate.group}: internal error at the bind barrier "
                f"({type(exc).__name__}: {exc}); the gang will be re-planned"
            )
            for waiter in assumed:
                self._stop_completing(waiter)
            _answer(assumed, reason)
            self._abandon(gate, gate.waiters.values(), reason)

    async def _write_record(
        self, gate: _Gate, record: CommitRecord, extra: list[Completion]
    ) -> tuple[list[_Waiter], list[Completion]] | None:
        """Write a record too long for the bindings to carry, then re-check: the waiters and
        completions still to bind, or None when the gate gave up (every waiter answered)."""
        opened = self.clock()
        error = await self.binder.commit(record)
        if error:
            reason = f"gang {gate.group}: could not write the commit record ({error}); "
            self._abandon(gate, gate.waiters.values(), reason + "nothing was bound")
            return None
        # The write yielded to the loop: a member may be gone, the reservation released,
        # another member's bind joined. Only members the record names are bound (a slot
        # claimed since is not in it: that member binds after the quorum, on its own).
        ready = self._bindable(gate)
        for waiter in [w for w in ready if record.pod_uids.get(w.pod.key) != w.pod.uid]:
            del gate.waiters[waiter.pod.uid]
            ready.remove(waiter)
            _answer(
                [waiter],
                f"pod {waiter.pod.key} reached bind after gang {gate.group}'s commit record "
                "was written without it; it binds on its own once the gang is bound",
            )
        # The members chosen before the write, still valid.
        chosen = {c.pod.uid for c in extra}
        extra = [
            c
            for c in completions(self.state, gate.group.key, gate.serial, gate.waiters.keys())
            if c.pod.uid in chosen and record.pod_uids.get(c.pod.key) == c.pod.uid
        ]
        short = self._short(gate, ready, extra)
        if short:
            self._abandon(gate, gate.waiters.values(), short)
            self.tasks.spawn(self.binder.clear_commit(gate.group.key))
            return None
        self.metrics.bind_steps.labels(step="record").observe(self.clock() - opened)
        return ready, extra

    def _stop_completing(self, waiter: _Waiter) -> None:
        if self._completing.get(waiter.pod.uid) is waiter:
            del self._completing[waiter.pod.uid]
        announcement = self._unannounced.get(waiter.pod.uid)
        if announcement is not None and announcement.waiter is waiter:
            del self._unannounced[waiter.pod.uid]

    def _announce_later(self, waiter: _Waiter) -> None:
        """The completed member's `Scheduled` Event, once kube-scheduler had time to send
        its own `/bind` of it (a success there drops the announcement: `bind`)."""
        announcement = self._unannounced.get(waiter.pod.uid)
        if announcement is None or announcement.waiter is not waiter:
            return  # kube-scheduler's /bind succeeded during the fan-out
        announcement.timer = self.timers.call_later(
            ANNOUNCE_AFTER_SECONDS, lambda: self._announce(announcement)
        )

    def _announce(self, announcement: _Announcement) -> None:
        waiter = announcement.waiter
        if self._unannounced.get(waiter.pod.uid) is announcement:
            del self._unannounced[waiter.pod.uid]
            self.reporter.member_completed(waiter.pod, waiter.node, announcement.group)

    def _commit_record(self, gate: _Gate) -> CommitRecord:
        """Every reserved member's node and every bound member's node, by pod key."""
        key = gate.group.key
        placements: dict[str, str] = {}
        uids: dict[str, str] = {}
        reservation = self.state.reservation(key)
        if reservation is not None:
            for m in reservation.members:
                if not m.is_slot:  # a slot no member claimed has no pod to record
                    placements[m.pod_key] = m.node
                    uids[m.pod_key] = m.pod_uid
        for p in self.state.members(key):
            node = self.state.bound_node(p)
            if node:
                placements[p.key] = node
                uids[p.key] = p.uid
        return CommitRecord(key, placements, uids)

    def _bound(self, gate: _Gate, ready: list[_Waiter], results: list[str], completed: int) -> None:
        failed = [w.pod.key for w, e in zip(ready, results, strict=True) if e]
        if failed:
            reason = f"binding failed for {', '.join(failed)}"
            self.reporter.report([self.planner.note(gate.group, Outcome.UNFIT, reason)])
        else:
            self.reporter.gang_bound(gate.group, len(ready), self.clock(), completed)


def _cancel(gate: _Gate) -> None:
    if gate.timer is not None:
        gate.timer.cancel()


def _answer(waiters: Iterable[_Waiter], reason: str) -> None:
    """Answer every still-waiting `/bind` with `reason` ("" is success)."""
    for waiter in waiters:
        if not waiter.future.done():
            waiter.future.set_result(reason)
