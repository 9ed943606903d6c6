"""`bench/cpus.py`: the control plane on cores of its own (`bench/run.py
--control-plane-cpus`), read and applied to real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cpus  # bench/cpus.py

THREADED = (
    "import threading, time; "
    "threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", {0}), ("0,2", {0, 2}), ("1-3", {1, 2, 3}), ("0-1, 4", {0, 1, 4})],
)
def test_a_cpu_list_is_read_as_taskset_writes_it(text: str, expected: set[int]) -> None:
    assert cpus.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "'' is not a CPU number"),
        ("a", "'a' is not a CPU number"),
        ("0-", "'0-' is not a CPU number"),
        ("-1", "'-1' is not a CPU number"),
        ("3-1", "the range '3-1' runs backwards"),
    ],
)
def test_a_bad_cpu_list_is_refused_naming_the_bad_part(text: str, says: str) -> None:
    with pytest.raises(cpus.CpuListError, match=says):
        cpus.parse(text)


def test_the_rest_of_the_cores_go_to_everything_else() -> None:
    assert cpus.split(frozenset({0}), {0, 1, 2, 3}) == {1, 2, 3}


def test_cores_this_process_may_not_use_are_refused() -> None:
    with pytest.raises(cpus.CpuListError, match=r"CPU\(s\) 5 are not available .* may use 0,1"):
        cpus.split(frozenset({0, 5}), {0, 1})


def test_a_split_that_leaves_nothing_for_the_schedulers_is_refused() -> None:
    with pytest.raises(cpus.CpuListError, match="none would be left"):
        cpus.split(frozenset({0, 1}), {0, 1})


@pytest.fixture
def threaded_process() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", THREADED])
    try:
        tasks = Path(f"/proc/{proc.pid}/task")
        deadline = time.monotonic() + 10
        while len(list(tasks.iterdir())) < 2:
            assert time.monotonic() < deadline, "the child never started its thread"
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_every_thread_of_a_process_is_pinned(threaded_process: int) -> None:
    one = frozenset({min(os.sched_getaffinity(0))})

    assert cpus.pin(threaded_process, one) == one

    for task in Path(f"/proc/{threaded_process}/task").iterdir():
        assert os.sched_getaffinity(int(task.name)) == one
