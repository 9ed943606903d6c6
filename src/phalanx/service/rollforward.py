"""Rolling gangs forward from their commit records: the side effects of `core.rollforward`.

`RollForward.forever()` runs as one task of the service (started from `Extender.start`).
It sees the model, the planner (for group resolution, holds and the journal), the binder
and the reporter, and nothing else of the service. With a source that is a `CommitLog` it
waits for the first full sync, then every `interval_seconds`, while the source says this
instance holds the duty (its Lease), asks `core.rollforward.decide` about every commit
record and carries it out:

* COMPLETE — clear the record (the copies a gang's bindings carried onto its bound members
  stay there, settled: `CommitLog.clear_commit_record`);
* ROLL_FORWARD — assume every listed member on its recorded node in one step (a
  reservation of the gang pointing elsewhere is released first: the record is the truth
  once written), then bind them concurrently through the service's one bind path
  (`Binder`: retries, metrics, forget on failure); the gang decision is `rolled-forward`;
* RELEASE — release any reservation, clear the record, note `released` with the reason
  (it reaches the PodGroup's, or the first member's, Events and status); the gang re-plans;
* WAIT — nothing this round.

A record is left alone for `grace_seconds` after it was written (by its `at`) or first
seen here (whichever is sooner): a live bind barrier, here or in another replica, may be
issuing those very bindings. Meanwhile the capacity it names is *held*: a gang it would roll
forward now, and that holds no reservation, is reserved on its recorded nodes (`hold`, from
the first full sync on), so that kube-scheduler's cycles of other pods cannot take it during
the grace and leave the gang partial for good. The planner makes that reservation
(`GangPlanner.reserve_recorded`) and journals it as `committed` (reported like any gang
decision: Event `Reserved`); a refusal is only logged. Its pending members are nominated to
their held nodes, or the parked ones requeued, as a fresh reservation's are
(`Reporter.nominate_others`), and the release of a hold withdraws those nominations like any
other's. Only the instance with the duty writes them: a standby holds too (at its first sync
it cannot know who leads), but its nominations would be withdrawn when its hold lapses,
clearing the leader's own. A hold made without the duty is nominated by the first pass that
has it, if it still stands. Their own cycles follow that reservation, and the pass that finds
the record due binds them through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from phalanx.core.cache import ClusterState, ReleaseCause, Reservation, StateError
from phalanx.core.decisions import NotReserved
from phalanx.core.journal import Outcome
from phalanx.core.model import GroupRef, Pod
from phalanx.core.planner import GangPlanner
from phalanx.core.quorum import TaskMinima
from phalanx.core.resolution import Deleting, Resolved
from phalanx.core.rollforward import CommitRecord, Decision, Verdict, decide
from phalanx.service.binder import Binder
from phalanx.service.reporter import Reporter
from phalanx.sources.base import CommitLog

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class RollForwardSettings:
    # Seconds between passes. Cheap: one look at each commit record in the model.
    interval_seconds: float = 2.0
    # Seconds a fresh record is left to the barrier that wrote it (its bindings and their
    # retries take well under a second; kube-scheduler's own bind timeout is 30 s).
    grace_seconds: float = 15.0


class RollForward:
    """One pass at a time over the source's commit records (loop only)."""

    def __init__(
        self,
        state: ClusterState,
        planner: GangPlanner,
        binder: Binder,
        reporter: Reporter,
        *,
        source: CommitLog,
        settings: RollForwardSettings | None = None,
        synced: Callable[[], bool],
        clock: Clock,
        wall_clock: Clock,
    ) -> None:
        self.state = state
        self.planner = planner
        self.binder = binder
        self.reporter = reporter
        self.source = source
        self.settings = settings or RollForwardSettings()
        self.synced = synced
        self.clock = clock
        self.wall_clock = wall_clock
        self._first_seen: dict[str, float] = {}
        # Holds made without the duty, by gang: the serial of the reservation, whose members
        # the first pass with the duty nominates if it still stands.
        self._unnominated: dict[str, int] = {}

    async def forever(self) -> None:
        """Wait for the first full sync, then a pass every `interval_seconds`."""
        while not self.synced():
            await asyncio.sleep(0.1)
        while True:
            try:
                await self.run_once()
            except Exception:  # never let the duty die; the next pass retries
                log.exception("roll-forward pass failed")
            await asyncio.sleep(self.settings.interval_seconds)

    async def run_once(self) -> list[Decision]:
        """Act on every record due now; returns the decisions taken (for tests and logs)."""
        if not self.source.may_roll_forward:
            return []
        self._nominate_holds()
        records = self.source.commit_records()
        now = self.clock()
        self._first_seen = {k: self._first_seen.get(k, now) for k in records}
        taken: list[Decision] = []
        for _, record in sorted(records.items()):
            if not self._due(record):
                self._hold(record)
                continue
            decision = self._decide(record)
            if decision.verdict is Verdict.WAIT:
                continue
            taken.append(decision)
            await self._carry_out(decision)
        return taken

    def hold(self) -> None:
        """Hold the capacity of every record (see the module docstring). Called once the
        model holds the first full list, before any verb plans with it, whether or not this
        instance has the duty yet: the Lease of a holder that died lapses only after 15 s,
        while kube-scheduler's cycles come at once. Each pass with the duty holds again what
        a record still needs."""
        for _, record in sorted(self.source.commit_records().items()):
            self._hold(record)

    def _hold(self, record: CommitRecord) -> None:
        """Reserve the unbound members of `record` on their recorded nodes, if it would be
        rolled forward now and its gang holds no reservation (one of its own, or a hold)."""
        key = record.group_key
        if self.state.reservation(key) is not None:
            return
        decision = self._decide(record)
        if decision.verdict is not Verdict.ROLL_FORWARD:
            return
        # Until the pass after the record is due at the latest; held again if still needed.
        lasts = self.settings.grace_seconds + self.settings.interval_seconds
        held = self.planner.reserve_recorded(
            GroupRef.parse(key), decision.bindings, self.clock(), lasts
        )
        if isinstance(held, NotReserved):  # `decide` found each member room: not expected
            log.warning(
                "cannot hold a commit record's nodes", extra={"group": key, "reason": held.reason}
            )
            return
        log.info(
            "holding the nodes of a commit record until it is due",
            extra={"group": key, "placements": {b.pod.key: b.node for b in decision.bindings}},
        )
        if self.source.may_roll_forward:
            self._nominate(held.reservation)
        else:
            self._unnominated[key] = held.reservation.serial
        self.reporter.report([held.event])

    def _nominate(self, hold: Reservation) -> None:
        """As for a fresh reservation: the members' cycles filter their held node alone, the
        parked ones come back, and kube-scheduler counts the node as theirs for other pods."""
        why = f"gang {hold.group_key} holds the nodes its commit record names"
        self.reporter.nominate_others(hold, None, why)

    def _nominate_holds(self) -> None:
        """Nominate the members of the holds made before this instance had the duty, those
        that still stand (not bound through, lapsed or replaced by a plan of the gang)."""
        for key, serial in self._unnominated.items():
            hold = self.state.reservation(key)
            if hold is not None and hold.serial == serial:
                self._nominate(hold)
        self._unnominated.clear()

    def _decide(self, record: CommitRecord) -> Decision:
        min_member, minima, deleting = self._quorum(record.group_key)
        return decide(
            self.state,
            record,
            min_member=min_member,
            min_task_member=minima,
            deleting=deleting,
        )

    def _due(self, record: CommitRecord) -> bool:
        grace = self.settings.grace_seconds
        seen = self._first_seen.get(record.group_key, self.clock())
        if self.clock() - seen >= grace:
            return True
        written = _parse_time(record.at)
        return written is not None and self.wall_clock() - written >= grace

    def _quorum(self, key: str) -> tuple[int | None, TaskMinima, str]:
        """The gang's `minMember` and Volcano task minima, when its object is known, and
        why that object is being deleted ("" when it is not)."""
        if not self.state.members(key, include_finished=True):
            return None, (), ""
        resolution = self.planner.resolve(GroupRef.parse(key))
        if isinstance(resolution, Deleting):
            return None, (), resolution.reason
        if not isinstance(resolution, Resolved):
            return None, (), ""
        return resolution.group.min_member, resolution.group.min_task_member, ""

    async def _carry_out(self, decision: Decision) -> None:
        key = decision.group_key
        group = GroupRef.parse(key)
        if decision.vanished:
            log.info(
                "commit record members vanished",
                extra={"group": key, "pods": list(decision.vanished)},
            )
        if decision.verdict is Verdict.COMPLETE:
            log.info("gang complete; clearing its commit record", extra={"group": key})
            await self.source.clear_commit_record(key)
            return
        if decision.verdict is Verdict.RELEASE:
            log.warning(
                "rolling forward impossible", extra={"group": key, "reason": decision.reason}
            )
            self.state.release(key, ReleaseCause.ROLL_FORWARD, decision.reason)
            await self.source.clear_commit_record(key)
            self.reporter.report([self.planner.note(group, Outcome.RELEASED, decision.reason)])
            return
        reservation = self.state.reservation(key)
        if reservation is not None and any(
            (m := reservation.member(b.pod.uid)) is not None and m.node != b.node
            for b in decision.bindings
        ):
            # Planned elsewhere since: the record wins.
            self.state.release(key, ReleaseCause.ROLL_FORWARD, "its commit record wins")
        assumed: list[tuple[Pod, str]] = []
        for binding in decision.bindings:  # one step: no await until every member is assumed
            pod = self.state.pod(binding.pod.uid)
            if pod is None:
                continue
            try:
                self.state.assume(pod.uid, binding.node)
            except StateError as exc:
                log.warning(
                    "cannot assume a recorded member",
                    extra={"pod": binding.pod.key, "reason": str(exc)},
                )
                continue
            assumed.append((pod, binding.node))
        log.info(
            "rolling gang forward from its commit record",
            extra={"group": key, "placements": {p.key: n for p, n in assumed}},
        )
        errors = await asyncio.gather(*(self.binder.bind_assumed(p, n) for p, n in assumed))
        failed = [e for e in errors if e]
        if failed:
            reason = (
                f"rolled forward {len(assumed) - len(failed)} of {len(assumed)} member(s); "
                + "; ".join(failed)
            )
        else:
            reason = f"bound {len(assumed)} member(s) to the nodes in the commit record"
        self.reporter.report([self.planner.note(group, Outcome.ROLLED_FORWARD, reason)])


def _parse_time(text: str) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
