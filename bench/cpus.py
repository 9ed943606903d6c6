"""Which cores the control plane runs on (`bench/run.py --control-plane-cpus`).

By default every process of a run shares every core, as the goals are measured: on a small
machine the API server then competes for CPU with the scheduler under test, the load and the
benchmark. With a CPU list, kube-apiserver and etcd get those cores to themselves and every
other process (kwok, each kube-scheduler, Phalanx, the benchmark's load and watch) the rest:
a control plane with CPU of its own, as on a cluster's control-plane nodes. The split is
the same for every contender of the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: The control plane's own processes, by launcher component name.
CONTROL_PLANE = ("etcd", "kube-apiserver")


class CpuListError(ValueError):
    """A CPU list that cannot be used on this machine."""


def parse(text: str) -> frozenset[int]:
    """A CPU list as `taskset` and cgroups write it: `0`, `0,2`, `0-3`, `0-1,4`."""
    cpus: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise CpuListError(f"CPU list {text!r}: {part!r} is not a CPU number or a range")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise CpuListError(f"CPU list {text!r}: the range {part!r} runs backwards")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def split(control_plane: frozenset[int], available: Iterable[int]) -> frozenset[int]:
    """The cores left for everything else; the control plane's must be available, and some
    must be left."""
    usable = frozenset(available)
    missing = control_plane - usable
    if missing:
        raise CpuListError(
            f"CPU(s) {show(missing)} are not available to this process (it may use {show(usable)})"
        )
    rest = usable - control_plane
    if not rest:
        raise CpuListError(
            f"CPU(s) {show(control_plane)} are all this process may use: none would be left "
            "for the schedulers and the load"
        )
    return rest


def pin(pid: int, cpus: frozenset[int]) -> frozenset[int]:
    """Every thread of process `pid` onto `cpus` (threads it starts later inherit it); the
    affinity its main thread then has."""
    tasks = Path(f"/proc/{pid}/task")
    for task in tasks.iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
    return frozenset(os.sched_getaffinity(pid))


def show(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
