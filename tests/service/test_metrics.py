"""Metrics: what a scrape shows of the asynchronous API client's own counts."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.service.metrics import Metrics
from phalanx.sources.kube_async import AsyncKubeCounts

Series = tuple[str, tuple[tuple[str, str], ...]]  # sample name, sorted labels


def scrape(metrics: Metrics) -> dict[Series, float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def client_families(metrics: Metrics) -> dict[str, str]:
    """Family name (without _total) -> type, of the API client's families in a scrape."""
    text = generate_latest(metrics.registry).decode()
    return {
        f.name: f.type
        for f in text_string_to_metric_families(text)
        if f.name.startswith("phalanx_api_client_")
    }


def watching(counts: AsyncKubeCounts) -> Metrics:
    metrics = Metrics()
    metrics.watch_api_client(lambda: counts)
    return metrics


# Every count different, so a count exported under another's name shows.
BUSY = AsyncKubeCounts(
    attempts=40,
    retries=9,
    throttled=5,
    server_errors=3,
    no_answer=2,
    token_wait_seconds={"bind": 0.5, "report": 1.5},
    slot_wait_seconds={"bind": 0.25, "report": 7.0},
)


@pytest.mark.parametrize(
    ("series", "value"),
    [
        (("phalanx_api_client_attempts_total", ()), 40),
        (("phalanx_api_client_retries_total", ()), 9),
        (("phalanx_api_client_throttled_total", ()), 5),
        (("phalanx_api_client_server_errors_total", ()), 3),
        (("phalanx_api_client_no_answer_total", ()), 2),
        (("phalanx_api_client_token_wait_seconds_total", (("lane", "bind"),)), 0.5),
        (("phalanx_api_client_token_wait_seconds_total", (("lane", "report"),)), 1.5),
        (("phalanx_api_client_slot_wait_seconds_total", (("lane", "bind"),)), 0.25),
        (("phalanx_api_client_slot_wait_seconds_total", (("lane", "report"),)), 7.0),
    ],
    ids=[
        "attempts",
        "retries",
        "throttled-429",
        "server-errors-5xx",
        "no-answer",
        "token-wait-bind",
        "token-wait-report",
        "slot-wait-bind",
        "slot-wait-report",
    ],
)
def test_each_api_client_count_is_exported_under_its_own_name(series: Series, value: float) -> None:
    assert scrape(watching(BUSY))[series] == value


def test_the_api_client_exports_seven_counter_families() -> None:
    assert client_families(watching(AsyncKubeCounts())) == {
        "phalanx_api_client_attempts": "counter",
        "phalanx_api_client_retries": "counter",
        "phalanx_api_client_throttled": "counter",
        "phalanx_api_client_server_errors": "counter",
        "phalanx_api_client_no_answer": "counter",
        "phalanx_api_client_token_wait_seconds": "counter",
        "phalanx_api_client_slot_wait_seconds": "counter",
    }


def test_both_lanes_are_exported_before_anything_waited() -> None:
    scraped = scrape(watching(AsyncKubeCounts()))
    for lane in ("bind", "report"):
        assert scraped[("phalanx_api_client_slot_wait_seconds_total", (("lane", lane),))] == 0
        assert scraped[("phalanx_api_client_token_wait_seconds_total", (("lane", lane),))] == 0


def test_the_counts_are_read_at_every_scrape_not_copied_when_registered() -> None:
    counts = AsyncKubeCounts()
    metrics = watching(counts)
    counts.throttled += 2
    counts.slot_wait_seconds["bind"] += 0.5
    scraped = scrape(metrics)
    assert scraped[("phalanx_api_client_throttled_total", ())] == 2
    assert scraped[("phalanx_api_client_slot_wait_seconds_total", (("lane", "bind"),))] == 0.5


def test_a_client_made_after_registration_is_the_one_exported() -> None:
    clients = [AsyncKubeCounts()]  # the latest last
    metrics = Metrics()
    metrics.watch_api_client(lambda: clients[-1])
    clients.append(AsyncKubeCounts(attempts=7))
    assert scrape(metrics)[("phalanx_api_client_attempts_total", ())] == 7


def test_without_an_api_client_no_api_client_family_is_exported() -> None:
    assert client_families(Metrics()) == {}
