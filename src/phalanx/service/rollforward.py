"""Rolling gangs forward from their commit records: the side effects of `core.rollforward`.

`roll_forward_forever(extender)` runs as one task of the Extender (started from
`Extender.start`). With a source that is a `CommitLog` it waits for the first full sync,
then every `interval_seconds`, while the source says this instance holds the duty (its
Lease), asks `core.rollforward.decide` about every commit record and carries it out:

* COMPLETE — clear the record;
* ROLL_FORWARD — assume every listed member on its recorded node in one step (a
  reservation of the gang pointing elsewhere is released first: the record is the truth
  once written), then bind them concurrently through the Extender's own bind path
  (retries, metrics, forget on failure); the gang decision is `rolled-forward`;
* RELEASE — release any reservation, clear the record, note `released` with the reason
  (it reaches the PodGroup's, or the first member's, Events and status); the gang re-plans;
* WAIT — nothing this round.

A record is left alone for `grace_seconds` after it was written (by its `at`) or first
seen here (whichever is sooner): a live bind barrier, here or in another replica, may be
issuing those very bindings.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from phalanx.core.model import PodGroup
from phalanx.core.planner import Outcome
from phalanx.core.rollforward import CommitRecord, Decision, Verdict, decide
from phalanx.core.snapshot import StateError
from phalanx.sources.base import CommitLog

if TYPE_CHECKING:  # the Extender imports this module to start the task
    from phalanx.service.extender import Extender

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RollForwardSettings:
    # Seconds between passes. Cheap: one look at each commit record in the model.
    interval_seconds: float = 2.0
    # Seconds a fresh record is left to the barrier that wrote it (its bindings and their
    # retries take well under a second; kube-scheduler's own bind timeout is 30 s).
    grace_seconds: float = 15.0


async def roll_forward_forever(
    extender: Extender, settings: RollForwardSettings | None = None
) -> None:
    """The Extender's roll-forward task; returns at once if the source keeps no records."""
    source = extender.source
    if not isinstance(source, CommitLog):
        return
    roller = RollForward(extender, source, settings or RollForwardSettings())
    while not source.synced:
        await asyncio.sleep(0.1)
    while True:
        try:
            await roller.run_once()
        except Exception:  # never let the duty die; the next pass retries
            log.exception("roll-forward pass failed")
        await asyncio.sleep(roller.settings.interval_seconds)


class RollForward:
    """One pass at a time over the source's commit records (loop only)."""

    def __init__(
        self, extender: Extender, source: CommitLog, settings: RollForwardSettings
    ) -> None:
        self.extender = extender
        self.source = source
        self.settings = settings
        self._first_seen: dict[str, float] = {}

    async def run_once(self) -> list[Decision]:
        """Act on every record due now; returns the decisions taken (for tests and logs)."""
        if not self.source.may_roll_forward:
            return []
        records = self.source.commit_records()
        self._first_seen = {k: self._first_seen.get(k, self.extender.clock()) for k in records}
        taken: list[Decision] = []
        for key, record in sorted(records.items()):
            if not self._due(record):
                continue
            decision = decide(self.extender.state, record, min_member=self._min_member(key))
            if decision.verdict is Verdict.WAIT:
                continue
            taken.append(decision)
            await self._carry_out(decision)
        return taken

    def _due(self, record: CommitRecord) -> bool:
        grace = self.settings.grace_seconds
        seen = self._first_seen.get(record.group_key, self.extender.clock())
        if self.extender.clock() - seen >= grace:
            return True
        written = _parse_time(record.at)
        return written is not None and self.extender.wall_clock() - written >= grace

    def _min_member(self, key: str) -> int | None:
        members = self.extender.state.members(key, include_finished=True)
        if not members:
            return None
        group = self.extender.planner.resolve(members[0])
        return group.min_member if isinstance(group, PodGroup) else None

    async def _carry_out(self, decision: Decision) -> None:
        ext = self.extender
        key = decision.group_key
        now = ext.clock()
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
            ext.state.release(key)
            await self.source.clear_commit_record(key)
            ext.planner.note(key, Outcome.RELEASED, decision.reason, now)
            ext.flush()  # the one path to metrics, Events and status
            return
        state = ext.state
        reservation = state.reservation(key)
        if reservation is not None and any(
            (m := reservation.member(b.pod_uid)) is not None and m.node != b.node
            for b in decision.bindings
        ):
            state.release(key)  # planned elsewhere since: the record wins
        assumed = []
        for binding in decision.bindings:  # one step: no await until every member is assumed
            pod = state.pod(binding.pod_uid)
            if pod is None:
                continue
            try:
                state.assume(binding.pod_uid, binding.node)
            except StateError as exc:
                log.warning(
                    "cannot assume a recorded member",
                    extra={"pod": binding.pod_key, "reason": str(exc)},
                )
                continue
            assumed.append((pod, binding.node))
        log.info(
            "rolling gang forward from its commit record",
            extra={"group": key, "placements": {p.key: n for p, n in assumed}},
        )
        # The Extender's own bind path: retries, metrics, forget() on failure.
        errors = await asyncio.gather(*(ext.bind_assumed(p, n) for p, n in assumed))
        failed = [e for e in errors if e]
        if failed:
            reason = (
                f"rolled forward {len(assumed) - len(failed)} of {len(assumed)} member(s); "
                + "; ".join(failed)
            )
        else:
            reason = f"bound {len(assumed)} member(s) to the nodes in the commit record"
        ext.planner.note(key, Outcome.ROLLED_FORWARD, reason, ext.clock())
        ext.flush()


def _parse_time(text: str) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
