"""Where the service's timeouts are scheduled: the event loop, or a test's fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """Schedules a callback `delay` seconds from now on the service's clock."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...


class LoopTimers:
    """The running event loop's own timers (seconds of its monotonic clock)."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)
