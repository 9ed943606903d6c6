"""`bench/bench_scrape.py`: a scrape timed whole, and in its loop and worker-thread parts,
through the real `Extender` in memory."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_scrape  # bench/bench_scrape.py


def test_every_nodes_gpus_are_scraped_and_each_part_is_timed() -> None:
    row = asyncio.run(bench_scrape.scrape_cost(20, 3))  # asserts three samples per node

    assert row["nodes"] == 20
    for part in ("before_ms", "loop_ms", "thread_ms"):
        low, median = row[part]
        assert 0 <= low <= median
    assert row["kib"] > 0
