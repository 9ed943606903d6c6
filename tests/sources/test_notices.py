"""Bad input is told once: one log line and one Event per object and reason."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

import pytest

from phalanx.sources.notices import Notices


class Told:
    """The Events written, in order (the spawned coroutines are run at once)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        with pytest.raises(StopIteration):
            coro.send(None)

    def event(self, text: str) -> Any:
        async def write() -> None:
            self.events.append(text)

        return write


@pytest.fixture
def told() -> Told:
    return Told()


@pytest.fixture
def notices(told: Told) -> Notices:
    return Notices(logging.getLogger("phalanx.test.notices"), told.spawn)


def test_an_invalid_object_is_told_once_per_reason(
    notices: Notices, told: Told, caplog: pytest.LogCaptureFixture
) -> None:
    for reason in ("bad minMember", "bad minMember", "no name", "no name"):
        notices.invalid("PodGroup", "ml/job", reason, message="invalid", event=told.event(reason))
    assert told.events == ["bad minMember", "no name"]
    # `reason` is the log call's `extra`, which LogRecord's type does not declare
    assert [r.reason for r in caplog.records] == ["bad minMember", "no name"]  # type: ignore[attr-defined]


def test_an_object_valid_in_between_is_told_again(notices: Notices, told: Told) -> None:
    notices.invalid("Pod", "ml/a", "bad", message="invalid", event=told.event("first"))
    notices.valid_again("Pod", "ml/a")
    notices.invalid("Pod", "ml/a", "bad", message="invalid", event=told.event("second"))
    notices.invalid("Node", "ml/a", "bad", message="invalid", event=told.event("other kind"))
    assert told.events == ["first", "second", "other kind"]


def test_a_notice_is_told_once_while_its_object_lives(notices: Notices, told: Told) -> None:
    for text in ("queue ignored", "queue ignored", "priority ignored"):
        notices.once("ml/job", text, message="ignored", event=told.event(text))
    notices.forget("ml/job")
    notices.once("ml/job", "queue ignored", message="ignored", event=told.event("again"))
    assert told.events == ["queue ignored", "priority ignored", "again"]


def test_a_withdrawn_notice_is_told_again_and_the_others_of_its_object_are_not(
    notices: Notices, told: Told
) -> None:
    for text in ("placement ignored", "queue ignored"):
        notices.once("ml/job", text, message="ignored", event=told.event(text))
    notices.withdraw("ml/job", "placement ignored")
    notices.withdraw("ml/other", "placement ignored")  # never said: nothing to withdraw
    for text in ("placement ignored", "queue ignored"):
        notices.once("ml/job", text, message="ignored", event=told.event(f"{text} again"))
    assert told.events == ["placement ignored", "queue ignored", "placement ignored again"]


def test_a_notice_logs_at_its_level_with_its_fields(
    notices: Notices, told: Told, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    notices.once(
        "uid-1",
        "count only",
        message="pod device claims",
        level=logging.INFO,
        extra={"pod": "ml/a", "detail": "count only"},
        event=told.event("note"),
    )
    [record] = caplog.records
    assert (record.levelno, record.getMessage()) == (logging.INFO, "pod device claims")
    # `pod` and `detail` are the log call's `extra`, which LogRecord's type does not declare
    assert (record.pod, record.detail) == ("ml/a", "count only")  # type: ignore[attr-defined]
