"""The event loop's responsiveness: its lag as kube-scheduler's calls would see it, and the
heap frozen once the model is loaded."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator

import pytest

from phalanx.service.loop_health import (
    COLLECTOR_THRESHOLDS,
    freeze_heap_once,
    tune_collector,
    watch_lag,
)

pytestmark = pytest.mark.anyio


async def test_the_lag_is_how_late_a_blocked_loop_ran_what_was_due() -> None:
    seen: list[float] = []
    watcher = asyncio.create_task(watch_lag(seen.append, interval=0.01))
    await asyncio.sleep(0.05)
    time.sleep(0.1)  # a callback holding the loop, as a long collection would
    await asyncio.sleep(0.05)
    watcher.cancel()
    assert seen, "no lag observed"
    assert min(seen) >= 0.0
    # The timer due during the block ran about 0.1 s late; free-running ones nearly on time.
    assert max(seen) >= 0.08, seen
    assert sorted(seen)[len(seen) // 2] < 0.08, seen


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process keeps collecting everything


@pytest.mark.usefixtures("unfrozen")
async def test_the_heap_is_frozen_only_once_the_model_is_synced() -> None:
    synced = False
    freezing = asyncio.create_task(freeze_heap_once(lambda: synced, poll=0.01))
    await asyncio.sleep(0.05)
    assert not freezing.done()
    assert gc.get_freeze_count() == 0

    synced = True
    frozen = await asyncio.wait_for(freezing, timeout=5)
    assert frozen > 0
    assert gc.get_freeze_count() > 0  # (fewer by now: frozen objects are still freed)


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds")
def test_serving_collects_young_objects_far_less_often_than_cpython_does() -> None:
    gc.set_threshold(700, 10, 10)  # CPython's own
    tune_collector()
    assert gc.get_threshold() == COLLECTOR_THRESHOLDS
    young, middle, _ = COLLECTOR_THRESHOLDS
    assert young >= 10_000  # many requests' worth of short-lived objects between collections
    assert middle >= 10
