"""`bench/attempts.py`: kube-scheduler's serial time per attempt, from hand-written log lines
in the shape kube-scheduler 1.37 prints at --v=3."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import attempts  # bench/attempts.py


def line(at: str, what: str, pod: str, level: str = "I") -> str:
    return f'{level}1204 14:20:{at}   28183 schedule_one.go:117] "{what}" pod="ns/{pod}" x="y"\n'


def queued(at: str, pod: str) -> str:
    return line(at, attempts.QUEUED, pod)


def attempt(at: str, pod: str) -> str:
    return line(at, attempts.ATTEMPT, pod)


def failed(at: str, pod: str) -> str:
    return line(at, attempts.FAILED, pod)


def test_a_failed_attempt_splits_into_the_attempt_and_what_follows_its_condition_write() -> None:
    log = [
        queued("10.000", "a"),
        queued("10.001", "b"),
        queued("10.002", "c"),
        attempt("10.010", "a"),
        failed("10.018", "a"),
        attempt("10.040", "b"),  # 22 ms after a's condition write: kube-scheduler waited on it
        attempt("10.044", "c"),
        attempt("10.050", "d"),  # never queued in this log: b → c counts, c → d does not
    ]
    out = attempts.parse(log)
    assert out.failed_attempt == pytest.approx([0.008])
    assert out.failed_after_write == pytest.approx([0.022])
    assert out.succeeded == pytest.approx([0.004])  # b, up to c's attempt


def test_gaps_without_a_backlog_are_not_counted_as_busy() -> None:
    log = [
        queued("10.000", "a"),
        attempt("10.010", "a"),
        queued("11.000", "b"),  # joined the queue after a's attempt: the loop idled meanwhile
        attempt("11.001", "b"),
        failed("11.005", "b"),
        attempt("12.000", "b"),  # a retry after backoff: idle time too
    ]
    out = attempts.parse(log)
    assert out.succeeded == []
    assert out.failed_attempt == []
    assert out.failed_after_write == []


def test_queue_waits_run_from_joining_the_queue_to_the_first_attempt_longest_first() -> None:
    log = [
        queued("10.000", "a"),
        queued("10.500", "b"),
        attempt("11.000", "a"),
        failed("11.010", "a"),
        attempt("14.500", "b"),
        attempt("15.000", "a"),  # a's retry does not move its first attempt
    ]
    out = attempts.parse(log)
    # pytest.approx compares equal to the floats it stands for
    expected = [(pytest.approx(4.0), "ns/b"), (pytest.approx(1.0), "ns/a")]
    # pytest.approx compares equal to the float it stands for; its type does not say so
    assert out.queue_waits == expected  # type: ignore[comparison-overlap]
    text = attempts.report(out, longest=1)
    assert "4.00 s  ns/b" in text
    assert "ns/a" not in text.split("longest waits")[1]


def test_lines_that_are_not_attempts_are_ignored() -> None:
    log = [
        'I1204 14:20:10.000000   28183 schedule_one.go:483] "Successfully bound pod to node" '
        'pod="ns/a" node="n1"\n',
        'I1204 14:20:10.000000   28183 flags.go:64] FLAG: --v="3"\n',
        "===== 2026-12-04 starting: kube-scheduler\n",
    ]
    out = attempts.parse(log)
    assert out == attempts.Attempts()
    assert "successful attempts, to the next attempt: none" in attempts.report(out)
