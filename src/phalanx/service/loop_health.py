"""The event loop's responsiveness: how late it runs what is due, and a heap the garbage
collector need not walk.

Every extender call is answered on one loop (see `extender`), so whatever keeps the loop
busy (a burst of informer updates, a gang's bind fan-out, a collection of the garbage
collector's oldest generation) is added to the call kube-scheduler is waiting for, inside
its serial scheduling cycle. `watch_lag` measures that wait; `freeze_heap_once` removes the
largest single pause it found: full collections walking the model loaded at start;
`tune_collector` makes the collector run less often while requests come and go.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# Often enough for a distribution per minute of traffic, rarely enough to cost nothing.
LAG_INTERVAL_SECONDS = 0.05
SYNC_POLL_SECONDS = 0.5
# The collector's thresholds while serving: a young collection after 20,000 net allocations
# of tracked objects instead of CPython's 700, and a middle one after 20 of those. Each
# request's parsed body and answer live for milliseconds; at 700, a young collection ran
# every few requests, promoted whatever was in flight, and the promoted garbage fed the
# older generations' collections. Measured on 100 × 8 (bench/run.py, Phalanx alone, GC
# pauses timed with gc.callbacks): about 480 collections (42 middle, 3 full, 0.78 s in
# all) became 13 young ones (0.31 s, none older), start-up included.
COLLECTOR_THRESHOLDS = (20_000, 20, 10)


async def watch_lag(
    observe: Callable[[float], None],
    *,
    interval: float = LAG_INTERVAL_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Forever: sleep `interval`, then `observe` how late the loop woke us (seconds). A
    request arriving at a random moment waits about as long before it is read."""
    while True:
        due = clock() + interval
        await asyncio.sleep(interval)
        observe(max(0.0, clock() - due))


async def freeze_heap_once(synced: Callable[[], bool], *, poll: float = SYNC_POLL_SECONDS) -> int:
    """Once `synced()` (the model holds the initial lists), move every object alive to the
    collector's permanent generation (`gc.freeze`) and return how many.

    The model loaded at start is long-lived and mostly acyclic, yet every full collection
    walked it again: on a 500-node cluster, pauses of 50 to 140 ms of the whole loop. Frozen
    objects are still freed by reference counting; only a cycle among them would outlive
    its use, once. Call it in the serving process only: it freezes the whole interpreter.
    """
    while not synced():
        await asyncio.sleep(poll)
    gc.freeze()
    count = gc.get_freeze_count()
    log.info("heap frozen after the initial sync", extra={"objects": count})
    return count


def tune_collector(thresholds: tuple[int, int, int] = COLLECTOR_THRESHOLDS) -> None:
    """Set the collector's thresholds for serving (`COLLECTOR_THRESHOLDS`). Call it in the
    serving process only: like `gc.freeze`, it is process-wide."""
    gc.set_threshold(*thresholds)
    log.info("garbage collector tuned for serving", extra={"thresholds": list(thresholds)})
