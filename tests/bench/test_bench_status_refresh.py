"""`bench/bench_status_refresh.py`: the status refresh timed over gangs that all got their
status, through the real `Extender` in memory."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_status_refresh  # bench/bench_status_refresh.py


def test_every_gang_gets_its_status_and_the_refresh_is_timed() -> None:
    row = asyncio.run(bench_status_refresh.refresh_cost(20, 3))  # asserts every status

    assert row["groups"] == 20
    assert 0 <= row["min_ms"] <= row["p50_ms"]
