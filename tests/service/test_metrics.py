"""Metrics: what a scrape shows of the asynchronous API client's own counts, and where a
scrape's work runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

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


# ---- where a scrape runs ----------------------------------------------------------------


class ReadWatched(GaugeMetricFamily):
    """A family noting which threads read its samples (its collector is the model's part)."""

    def __init__(self, readers: set[int]) -> None:
        self._readers = readers
        self._samples: list[object] = []
        super().__init__("test_model_gpus", "GPUs, as a model collector reads them.")
        self.add_metric([], 8)

    @property  # type: ignore[override]
    def samples(self) -> list[object]:
        self._readers.add(threading.get_ident())
        return self._samples

    @samples.setter
    def samples(self, value: list[object]) -> None:
        self._samples = value


class ModelCollector(Collector):
    def __init__(self) -> None:
        self.collected_on: set[int] = set()
        self.formatted_on: set[int] = set()

    def collect(self) -> Iterator[Metric]:
        self.collected_on.add(threading.get_ident())
        family = ReadWatched(self.formatted_on)
        self.formatted_on.clear()  # adding the sample read them here; formatting is next
        yield family


def test_a_scrape_reads_collectors_on_the_loop_and_formats_them_on_another_thread() -> None:
    metrics = Metrics()
    model = ModelCollector()
    metrics.registry.register(model)

    async def scrape_on_the_loop() -> tuple[bytes, int]:
        return await metrics.exposition(), threading.get_ident()

    text, loop_thread = asyncio.run(scrape_on_the_loop())
    assert model.collected_on == {loop_thread}  # the model is read by its only reader
    assert model.formatted_on
    assert loop_thread not in model.formatted_on  # the text is made off the loop
    assert "test_model_gpus 8.0" in text.decode()


def test_a_scrape_off_the_loop_shows_what_one_on_it_shows() -> None:
    metrics = watching(BUSY)
    metrics.watch_delay.observe(0.3)
    assert asyncio.run(metrics.exposition()) == generate_latest(metrics.registry)
