"""Structured logs: one JSON object per line with the keys operators grep for."""

from __future__ import annotations

import io
import json
import logging

import pytest

from phalanx import logs


@pytest.fixture
def stream() -> io.StringIO:
    out = io.StringIO()
    logs.configure("debug", out)
    return out


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_has_ts_level_logger_msg_and_the_extra_keys(stream: io.StringIO) -> None:
    logging.getLogger("phalanx.test").info(
        "gang decision %s",
        "made",
        extra={"group": "ml/llm", "pod": "ml/llm-0", "node": "n1", "reason": "fits"},
    )
    (line,) = lines(stream)
    assert line["level"] == "info"
    assert line["logger"] == "phalanx.test"
    assert line["msg"] == "gang decision made"
    assert str(line["ts"]).endswith("+00:00")
    assert (line["group"], line["pod"], line["node"], line["reason"]) == (
        "ml/llm",
        "ml/llm-0",
        "n1",
        "fits",
    )


def test_exceptions_are_one_line_with_the_traceback_in_exc(stream: io.StringIO) -> None:
    try:
        raise ValueError("bad plan")
    except ValueError:
        logging.getLogger("phalanx.test").exception("planning failed")
    (line,) = lines(stream)
    assert "ValueError: bad plan" in str(line["exc"])


def test_uvicorn_access_lines_are_split_into_fields(stream: io.StringIO) -> None:
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST", "/filter", "1.1", 200
    )
    (line,) = lines(stream)
    assert (line["method"], line["path"], line["status"], line["client"]) == (
        "POST",
        "/filter",
        200,
        "127.0.0.1:5000",
    )


def access_line() -> None:
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST", "/bind", "1.1", 200
    )


def test_access_lines_are_debug_detail_not_written_at_info(stream: io.StringIO) -> None:
    logs.configure("info", stream)
    access_line()
    logging.getLogger("uvicorn.error").info("started")
    assert [line["msg"] for line in lines(stream)] == ["started"]


def test_access_lines_come_back_at_debug_after_a_configure_at_info(stream: io.StringIO) -> None:
    logs.configure("info", stream)
    logs.configure("debug", stream)
    access_line()
    assert [line["path"] for line in lines(stream)] == ["/bind"]


def test_the_level_filters_and_configure_is_idempotent(stream: io.StringIO) -> None:
    logs.configure("warning", stream)
    logs.configure("warning", stream)
    logging.getLogger("phalanx.test").info("hidden")
    logging.getLogger("uvicorn.error").warning("shown once")
    assert [line["msg"] for line in lines(stream)] == ["shown once"]
