"""`bench/bench_gang_cpu.py`: one gang driven through the real `Extender` in memory, every
member bound, each step's CPU accounted for."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_gang_cpu  # bench/bench_gang_cpu.py


def test_a_small_gang_is_bound_whole_and_every_step_is_timed() -> None:
    spent = asyncio.run(bench_gang_cpu.one_gang(8))  # asserts every member bound

    assert set(spent) == {"arrive", "filter", "bind", "gate"}
    assert all(seconds >= 0 for seconds in spent.values())
    assert sum(spent.values()) > 0


def test_a_small_composite_gang_beside_other_pod_groups_is_bound_whole() -> None:
    spent = asyncio.run(bench_gang_cpu.one_gang(8, composite=True, others=5))

    assert set(spent) == {"arrive", "filter", "bind", "gate"}
    assert sum(spent.values()) > 0
