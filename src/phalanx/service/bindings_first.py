"""Bindings first: gang status and Events wait while Phalanx is binding.

Every write costs the API server about the same, whatever it is for, and a saturated server
delays all of them, its watch events too: a gang's last binding then reaches everyone late
(kube-scheduler, the job's operator, Phalanx's own model). A gang's status and its Events
say what already happened, and nothing waits on them. So while any binding is in flight,
and for `QUIET_SECONDS` after the last one lands, they wait, each at most `hold_seconds`.
Of an object's statuses held meanwhile only the newest is written (the source's coalescing,
`Reports.update_group_status`).

Nominations and requeues do not wait: members' next cycles depend on them. Nor does an
object's first status: others may wait for it (`Reporter._push_status`).

    write ──▶ quiet? ──yes──▶ sent now
                │ no
                ▼
              held ──▶ sent when the bindings have been quiet for QUIET_SECONDS,
                       or after hold_seconds, whichever comes first (in the order held)

Loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterator

from phalanx.service.timers import LoopTimers, Timer, Timers

Clock = Callable[[], float]

# How long the bindings must have been quiet before held writes go. Gangs that arrive one
# after another bind in overlapping fan-outs; a gap shorter than this is one burst.
QUIET_SECONDS = 0.5


class BindingsFirst:
    """Counts the bindings in flight; holds best-effort writes (`turn`) until they are quiet.
    `hold_seconds` 0: nothing is ever held."""

    def __init__(
        self,
        hold_seconds: float,
        *,
        clock: Clock = time.monotonic,
        timers: Timers | None = None,
        quiet_seconds: float = QUIET_SECONDS,
    ) -> None:
        if not math.isfinite(hold_seconds) or hold_seconds < 0:
            raise ValueError(f"hold_seconds must be a finite number >= 0, got {hold_seconds}")
        self.hold_seconds = hold_seconds
        self.quiet_seconds = quiet_seconds
        self.clock = clock
        self.timers = timers or LoopTimers()
        self._in_flight = 0
        self._last_landed = -math.inf
        # Held writes in the order they came (a dict as an ordered set).
        self._held: dict[asyncio.Future[None], None] = {}
        self._check: Timer | None = None

    @property
    def held(self) -> int:
        return len(self._held)

    @contextlib.contextmanager
    def binding(self) -> Iterator[None]:
        """Around one binding's API call, retries included."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._last_landed = self.clock()
                if self._held:
                    self._arm(self.quiet_seconds)

    def quiet(self) -> bool:
        return self._in_flight == 0 and self._quiet_left() <= 0

    def _quiet_left(self) -> float:
        """How long until the bindings have been quiet for `quiet_seconds`, once none is in
        flight (0 or less: they have)."""
        return self.quiet_seconds - (self.clock() - self._last_landed)

    async def turn(self) -> None:
        """Return when a best-effort write may go: at once when the bindings are quiet."""
        if self.hold_seconds == 0 or self.quiet():
            return
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held[held] = None
        if self._in_flight == 0 and self._check is None:
            self._arm(self._quiet_left())
        longest = self.timers.call_later(self.hold_seconds, lambda: _release(held))
        try:
            await held
        finally:
            longest.cancel()
            self._held.pop(held, None)

    def _arm(self, delay: float) -> None:
        if self._check is not None:
            self._check.cancel()
        self._check = self.timers.call_later(max(0.0, delay), self._on_check)

    def _on_check(self) -> None:
        self._check = None
        if self._in_flight:
            return  # the last binding to land arms the next check
        left = self._quiet_left()
        if left > 0:
            self._arm(left)
            return
        held, self._held = self._held, {}
        for waiter in held:
            _release(waiter)


def _release(held: asyncio.Future[None]) -> None:
    if not held.done():
        held.set_result(None)
