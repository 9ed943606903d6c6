"""Asking the API server until it answers: the discovery loops' one retry rule.

Discovery (the gang APIs, the DRA API, DeviceTaintRules) must never end its thread on a
failure: it logs, waits the informers' backoff (`Backoff`, jittered so that replicas
restarted together do not ask in step) and asks again, until an answer or `stop`.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from phalanx.sources.informer import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")


def answered(
    ask: Callable[[], T],
    what: str,
    *,
    stop: threading.Event,
    backoff: Backoff,
    rand: Callable[[], float] = random.random,
) -> tuple[T] | tuple[()]:
    """`ask()`'s answer, asked again after a backoff while it fails; () once `stop` is set
    (an answer may itself be None or False, so it comes as a 1-tuple). Each failure is a
    warning "cannot discover <what>" with its `reason` and `retry_in_seconds`."""
    attempt = 0
    while not stop.is_set():
        try:
            return (ask(),)
        except Exception as exc:  # noqa: BLE001  # any failure: live on, ask again
            delay = backoff.delay(attempt, rand())
            attempt += 1
            log.warning(
                f"cannot discover {what}",
                extra={"reason": str(exc), "retry_in_seconds": round(delay, 2)},
            )
            if stop.wait(delay):
                return ()
    return ()
