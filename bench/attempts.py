"""Where kube-scheduler's serial time went, from a log kept by `run.py --keep-logs`.

kube-scheduler schedules one pod at a time: a pod waits in its active queue until every
attempt before it has finished. At ``--v=3`` its log has a line when an attempt starts
("Attempting to schedule pod"), when a failed attempt writes the pod's PodScheduled
condition ("Updating pod condition"), and when a pod first joins the queue ("Add event for
unscheduled pod"). From them::

    python bench/attempts.py RUN-kube-scheduler.log

prints what each attempt held the loop for, split for failed attempts into the attempt
itself (filters, extenders, preemption) and what followed its condition write (kube-scheduler
1.37 writes it before the next attempt unless `SchedulerAsyncAPICalls` is on), and the pods
that waited longest between joining the queue and their first attempt.

Only gaps with a backlog count: an attempt's time runs to the next attempt only when that next
attempt is a pod's first and the pod had joined the queue before this attempt started (a
retry may have waited out its backoff: the loop may have been idle, not busy).
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_LINE = re.compile(r"^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+)\s.*?\] \"([^\"]+)\" pod=\"([^\"]+)\"")
ATTEMPT = "Attempting to schedule pod"
FAILED = "Updating pod condition and nominated node name"
QUEUED = "Add event for unscheduled pod"


@dataclass
class Attempts:
    """The serial time of a kube-scheduler run, by kind of attempt (seconds)."""

    succeeded: list[float] = field(default_factory=list)
    failed_attempt: list[float] = field(default_factory=list)
    failed_after_write: list[float] = field(default_factory=list)
    #: (seconds from joining the queue to the first attempt, pod), longest first.
    queue_waits: list[tuple[float, str]] = field(default_factory=list)


def parse(lines: Iterable[str]) -> Attempts:
    """Read kube-scheduler ``--v=3`` log lines (one run: times of day must not wrap)."""
    events: list[tuple[float, str, str]] = []
    for line in lines:
        m = _LINE.match(line)
        if m and m[4] in (ATTEMPT, FAILED, QUEUED):
            events.append((int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3]), m[4], m[5]))
    out = Attempts()
    queued: dict[str, float] = {}
    first_attempt: dict[str, float] = {}
    attempts = [(t, pod) for t, what, pod in events if what == ATTEMPT]
    failed_at: dict[tuple[float, str], float] = {}
    current: tuple[float, str] | None = None
    for t, what, pod in events:
        if what == QUEUED:
            queued.setdefault(pod, t)
        elif what == ATTEMPT:
            first_attempt.setdefault(pod, t)
            current = (t, pod)
        elif current is not None and pod == current[1]:
            failed_at[current] = t
    for (start, pod), (nxt, next_pod) in itertools.pairwise(attempts):
        if first_attempt[next_pod] != nxt or queued.get(next_pod, nxt) > start:
            continue  # a retry from backoff, or a pod not yet queued: the loop may have idled
        written = failed_at.get((start, pod))
        if written is None:
            out.succeeded.append(nxt - start)
        else:
            out.failed_attempt.append(written - start)
            out.failed_after_write.append(nxt - written)
    out.queue_waits = sorted(
        ((first_attempt[p] - t, p) for p, t in queued.items() if p in first_attempt),
        reverse=True,
    )
    return out


def _summary(name: str, xs: Sequence[float]) -> str:
    if not xs:
        return f"{name}: none"
    s = sorted(xs)
    p50, p90 = (1000 * s[min(len(s) - 1, int(q * len(s)))] for q in (0.5, 0.9))
    return (
        f"{name}: {len(s)}, mean {1000 * sum(s) / len(s):.1f} ms, p50 {p50:.1f} ms, "
        f"p90 {p90:.1f} ms, in all {sum(s):.1f} s"
    )


def report(attempts: Attempts, longest: int = 5) -> str:
    lines = [
        _summary("successful attempts, to the next attempt", attempts.succeeded),
        _summary("failed attempts, to the condition write", attempts.failed_attempt),
        _summary("failed attempts, write to the next attempt", attempts.failed_after_write),
        "longest waits from joining the queue to the first attempt:",
        *(f"  {wait:.2f} s  {pod}" for wait, pod in attempts.queue_waits[:longest]),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", type=Path, help="a kube-scheduler log kept by run.py --keep-logs")
    p.add_argument("--longest", type=int, default=5, help="how many queue waits to list")
    args = p.parse_args(argv)
    with args.log.open(errors="replace") as f:
        print(report(parse(f), args.longest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
