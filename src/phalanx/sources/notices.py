"""Telling people about bad input once: one log line and one Event per object and reason.

A watch hands an object over again on every change and relist; saying the same thing each
time would flood the logs and the object's Events. An invalid object is said again only
with a new reason, or after it was valid in between; a notice (an ignored field, a
contested pod) once per text while its object lives.

Loop only: the tables are written by updates the sources post to the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

# Writes an Event (a coroutine started by the owner's task set).
EventWrite = Callable[[], Coroutine[Any, Any, None]]


class Notices:
    """What one source has said, and the means to say more."""

    def __init__(
        self, log: logging.Logger, spawn: Callable[[Coroutine[Any, Any, None]], None]
    ) -> None:
        self._log = log
        self._spawn = spawn
        self._invalid: dict[tuple[str, str], str] = {}  # (kind, key) -> reason said
        self._said: dict[str, set[str]] = {}  # key -> texts said

    def invalid(
        self,
        kind: str,
        key: str,
        reason: str,
        *,
        message: str,
        event: EventWrite,
        kind_label: str | None = None,
    ) -> None:
        """Say that `kind` `key` cannot be read (or used) for `reason`, unless that was said
        last; `message` is the log line, `event()` writes the Event."""
        if self._invalid.get((kind, key)) == reason:
            return
        self._invalid[(kind, key)] = reason
        self._log.warning(
            message, extra={"kind": kind_label or kind, "object": key, "reason": reason}
        )
        self._spawn(event())

    def valid_again(self, kind: str, key: str) -> None:
        """`kind` `key` is fine (or gone): a later problem is said again."""
        self._invalid.pop((kind, key), None)

    def once(
        self,
        key: str,
        text: str,
        *,
        message: str,
        event: EventWrite,
        level: int = logging.WARNING,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        """Say `text` about `key` once while `key` lives (see `forget`)."""
        said = self._said.setdefault(key, set())
        if text in said:
            return
        said.add(text)
        self._log.log(level, message, extra=dict(extra or {"object": key, "reason": text}))
        self._spawn(event())

    def withdraw(self, key: str, text: str) -> None:
        """`text` no longer holds for `key` (what it named changed): said again if it does."""
        said = self._said.get(key)
        if said is not None:
            said.discard(text)

    def forget(self, key: str) -> None:
        """`key` is gone: a namesake created later is told afresh."""
        self._said.pop(key, None)
