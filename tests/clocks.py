"""The tests' one fake clock: time that passes only when the test moves it, or when the code
under test sleeps on it. Passed in as a collaborator (`clock=`, `wall_clock=`, `sleep=`),
never patched over the real one. `Clocks`: a monotonic and a wall clock moved together."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime


class FakeClock:
    """Reads `now` when called; `sleep` moves it (and records how long) instead of waiting.

    Starts at 1000 s by default, as the service tests' clock always has: a monotonic reading
    is arbitrary, and one away from 0 cannot pass for an unset time. A test that reads
    absolute times (a wall clock, times counted from 0) says where it starts."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class Clocks:
    """The monotonic clock a service runs on and the wall clock its writes are stamped
    with (commit records' `at`), moved together as time passes."""

    def __init__(self) -> None:
        self.mono = FakeClock()
        self.wall = FakeClock(datetime(2026, 1, 1, tzinfo=UTC).timestamp())

    def advance(self, seconds: float) -> None:
        self.mono.now += seconds
        self.wall.now += seconds

    def rfc3339(self, seconds_ago: float) -> str:
        """A write time `seconds_ago`, as the API source stamps it (`Z`, not `+00:00`)."""
        stamp = datetime.fromtimestamp(self.wall.now - seconds_ago, tz=UTC)
        return stamp.isoformat().replace("+00:00", "Z")
