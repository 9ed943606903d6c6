"""Room for requests awaiting the API server's answer, in two lanes.

Phalanx's writes are not equally urgent. A gang's bindings and its commit record are
awaited by held `/bind` calls: the gang is whole only when they land. Nominations,
requeues, gang status and Events are best effort: a late one costs nothing but freshness.
Under load the best-effort writes are the many (a nomination for most members, a status
per change), and with one queue a gang's bindings waited behind them: on the 100 × 8
benchmark half of all bindings waited for a slot, 117 ms at the median.

So `InFlight` keeps `reserved` of its `limit` slots for the binding lane, and a freed slot
goes to the longest-waiting binding before any report. Within a lane, requests are served
in arrival order. Reports alone can never fill more than `limit - reserved` slots, so a
binding finds room at once unless other bindings hold it.

Loop-only: no locks; nothing awaits between reading the counts and taking a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import deque
from collections.abc import AsyncIterator


class Lane(enum.Enum):
    """Which writes a freed slot goes to first."""

    BIND = "bind"  # bindings and commit records: held /bind calls wait on them
    REPORT = "report"  # nominations, requeues, gang status, Events: best effort


class InFlight:
    """At most `limit` requests in flight; `reserved` of the slots only for `Lane.BIND`."""

    def __init__(self, limit: int, reserved: int) -> None:
        if limit < 1:
            raise ValueError(f"in-flight limit must be >= 1, got {limit}")
        if not 0 <= reserved < limit:
            raise ValueError(f"reserved slots must be in [0, {limit}), got {reserved}")
        self.limit = limit
        self.reserved = reserved
        self._held = dict.fromkeys(Lane, 0)
        self._waiting: dict[Lane, deque[asyncio.Future[None]]] = {lane: deque() for lane in Lane}

    def held(self, lane: Lane) -> int:
        return self._held[lane]

    def waiting(self, lane: Lane) -> int:
        return len(self._waiting[lane])

    @contextlib.asynccontextmanager
    async def slot(self, lane: Lane) -> AsyncIterator[None]:
        """Hold one slot of `lane` for the body of the `async with`."""
        await self._acquire(lane)
        try:
            yield
        finally:
            self._held[lane] -= 1
            self._grant()

    def _room(self, lane: Lane) -> bool:
        """A slot is free for `lane` now (waiters aside)."""
        if sum(self._held.values()) >= self.limit:
            return False
        return lane is Lane.BIND or self._held[Lane.REPORT] < self.limit - self.reserved

    async def _acquire(self, lane: Lane) -> None:
        ahead = self._waiting[lane] or (lane is Lane.REPORT and self._waiting[Lane.BIND])
        if not ahead and self._room(lane):
            self._held[lane] += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[lane].append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._held[lane] -= 1  # granted as the caller was cancelled: give it back
                self._grant()
            else:  # `_grant` may have dropped it already
                with contextlib.suppress(ValueError):
                    self._waiting[lane].remove(granted)
            raise

    def _grant(self) -> None:
        """Hand freed slots to waiters: bindings first, then reports, each in arrival order.
        The slot is counted as held here, before the waiter runs again."""
        for lane in (Lane.BIND, Lane.REPORT):
            queue = self._waiting[lane]
            while queue and self._room(lane):
                granted = queue.popleft()
                if granted.done():  # cancelled while waiting
                    continue
                self._held[lane] += 1
                granted.set_result(None)
            if lane is Lane.BIND and queue:
                return  # bindings still wait: no report may take a slot ahead of them


__all__ = ["InFlight", "Lane"]
