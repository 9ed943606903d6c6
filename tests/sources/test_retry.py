"""`answered`: the discovery loops' retry rule (the gang APIs, the DRA API, DeviceTaintRules)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from phalanx.sources.informer import Backoff
from phalanx.sources.retry import answered

BACKOFF = Backoff(initial_seconds=1.0, cap_seconds=3.0, jitter=0.5)


class RecordingStop(threading.Event):
    """A stop event whose waits return at once, recording how long each would have been;
    set once `stop_after` waits have passed."""

    def __init__(self, stop_after: int = 1_000) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.stop_after = stop_after

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        if len(self.waits) >= self.stop_after:
            self.set()
        return self.is_set()


def failing(times: int, answer: object) -> Callable[[], object]:
    calls = iter(range(times + 1))

    def ask() -> object:
        if next(calls) < times:
            raise ConnectionError("the API server hung up")
        return answer

    return ask


@pytest.mark.parametrize("answer", [None, False, "v1"], ids=["none", "false", "a-value"])
def test_an_answer_comes_as_a_one_tuple_even_when_it_is_falsy(answer: object) -> None:
    assert answered(lambda: answer, "it", stop=RecordingStop(), backoff=BACKOFF) == (answer,)


def test_failures_are_asked_again_after_the_informers_jittered_backoff() -> None:
    stop = RecordingStop()

    found = answered(failing(3, "v1"), "it", stop=stop, backoff=BACKOFF, rand=lambda: 1.0)

    assert found == ("v1",)
    assert stop.waits == [0.5, 1.0, 1.5]  # 1, 2, then capped at 3; each halved by the jitter


def test_stopping_while_it_fails_answers_nothing() -> None:
    stop = RecordingStop(stop_after=2)

    assert answered(failing(5, "v1"), "it", stop=stop, backoff=BACKOFF) == ()
    assert len(stop.waits) == 2


def test_a_stopped_loop_does_not_ask() -> None:
    stop = RecordingStop()
    stop.set()

    assert answered(failing(0, "v1"), "it", stop=stop, backoff=BACKOFF) == ()


def test_each_failure_is_a_warning_naming_what_why_and_when_it_is_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        answered(
            failing(1, "v1"), "the DRA API", stop=RecordingStop(), backoff=BACKOFF, rand=lambda: 0.0
        )

    [record] = caplog.records
    assert record.getMessage() == "cannot discover the DRA API"
    said = record.__dict__
    assert (said["reason"], said["retry_in_seconds"]) == ("the API server hung up", 1.0)
