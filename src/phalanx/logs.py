"""Structured logs: one JSON object per line, configured once by the CLI.

Every line has `ts` (UTC, RFC 3339, milliseconds), `level`, `logger` and `msg`; keys passed
with `extra=` (`group`, `pod`, `node`, `reason`, ...) are added as they are, and an
exception adds `exc`. uvicorn's own loggers are routed through the same handler, and its
access lines (logged at level debug only) are split into `client`, `method`, `path` and
`status`.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

import orjson

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "color_message", "taskName"}
)
ACCESS_LOGGER = "uvicorn.access"  # uvicorn's access lines; its level is their switch (api.server)
_UVICORN = ("uvicorn", "uvicorn.error", ACCESS_LOGGER, "uvicorn.asgi")
_HANDLER_NAME = "phalanx-json"


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line (see module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.name == ACCESS_LOGGER and isinstance(record.args, tuple):
            args = record.args
            if len(args) == 5:  # uvicorn's access format: client, method, path, version, status
                line.update(client=args[0], method=args[1], path=args[2], status=args[4])
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class _StderrHandler(logging.StreamHandler[IO[str]]):
    """Writes to whatever `sys.stderr` is when a line is logged (test runners swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(level: str = "info", stream: IO[str] | None = None) -> None:
    """Send every log line (Phalanx's and uvicorn's) to `stream` as JSON at `level`.

    Idempotent: calling it again replaces the handler it installed before.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The informers back off and retry on their own; urllib3's per-attempt retry warnings
    # during an API server restart say nothing the informer's own line does not.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    for name in _UVICORN:
        # uvicorn installs its own handlers when given a log config; the CLI passes none,
        # and these loggers propagate to the root handler instead.
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    # An access line per request (two per pod kube-scheduler places, plus probes and
    # scrapes) is debug detail: at info it was most of the log's volume, and its formatting
    # cost about a third of the HTTP serving CPU per request. Request counts and latencies
    # are in /metrics (`phalanx_request_duration_seconds`).
    if root.level > logging.DEBUG:
        logging.getLogger(ACCESS_LOGGER).setLevel(logging.WARNING)
