"""How far the snapshot trails the API server: each binding Phalanx made, from its answer
to the pod watch showing it bound (`phalanx_watch_delay_seconds`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import pytest
from source_fakes import FakeApi, RecordingWriter, group_list, until

from builders import node_obj, pod_obj, present
from clocks import FakeClock
from phalanx.core.cache import ClusterState
from phalanx.core.model import Binding, PodRef
from phalanx.service.metrics import Metrics
from phalanx.sources.base import BindError
from phalanx.sources.informer import Backoff, InformerSettings
from phalanx.sources.kube import KubeSource, KubeSourceSettings
from phalanx.sources.sightings import BindingSightings

PODS = "/api/v1/pods"


def sightings() -> tuple[BindingSightings, list[float], FakeClock]:
    delays: list[float] = []
    clock = FakeClock(100.0)
    return BindingSightings(delays.append, clock), delays, clock


# ---- the bookkeeping ----------------------------------------------------------------------


def test_a_binding_is_timed_from_its_answer_to_the_watch_showing_it_bound() -> None:
    seen, delays, clock = sightings()
    seen.sent("u1")
    clock.now += 0.1  # the round trip is not part of the delay
    seen.answered("u1")
    clock.now += 0.25
    seen.seen_bound("u1")
    assert delays == [pytest.approx(0.25)]
    assert len(seen) == 0


def test_each_binding_is_timed_once_later_events_of_the_bound_pod_are_not() -> None:
    seen, delays, clock = sightings()
    seen.sent("u1")
    seen.answered("u1")
    clock.now += 0.5
    seen.seen_bound("u1")
    clock.now += 3.0
    seen.seen_bound("u1")  # the kubelet's status update of the same pod
    assert delays == [pytest.approx(0.5)]


def test_a_watch_event_that_beats_the_answer_is_no_delay() -> None:
    seen, delays, clock = sightings()
    seen.sent("u1")
    seen.seen_bound("u1")
    clock.now += 0.2
    seen.answered("u1")  # nothing left to time
    assert delays == [0.0]
    assert len(seen) == 0


def test_a_pod_shown_bound_while_a_binding_that_is_then_refused_was_in_flight_is_no_delay() -> None:
    # The pod was bound already (a conflict): the update the watch showed was not this
    # binding's. Found by tests/e2e/test_kube_source.py, where kwok's status update of the
    # bound pod came while its refused second binding was in flight.
    seen, delays, _ = sightings()
    seen.sent("u1")
    seen.seen_bound("u1")
    seen.seen_bound("u1")  # another update meanwhile: still one decision, at the answer
    seen.failed("u1")
    assert delays == []
    assert len(seen) == 0


def test_a_failed_binding_or_a_deleted_pod_leaves_nothing_to_time() -> None:
    seen, delays, _ = sightings()
    seen.sent("refused")
    seen.failed("refused")
    seen.sent("deleted")
    seen.answered("deleted")
    seen.forget("deleted")
    seen.seen_bound("refused")  # bound by someone else
    assert delays == []
    assert len(seen) == 0


def test_pods_bound_by_others_are_not_timed() -> None:
    seen, delays, _ = sightings()
    seen.seen_bound("someone-elses")
    assert delays == []


# ---- through the live source ----------------------------------------------------------------


class Binds(RecordingWriter):
    """Bindings answered at once, or refused for the pods named in `refuse`."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.refuse = refuse

    async def bind(
        self,
        binding: Binding,
        *,
        annotations: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        await asyncio.sleep(0)
        if binding.pod.name in self.refuse:
            raise BindError(f"{binding.pod.name} is already bound", conflict=True)


def delay_samples(metrics: Metrics) -> tuple[float, float]:
    count = metrics.registry.get_sample_value("phalanx_watch_delay_seconds_count")
    total = metrics.registry.get_sample_value("phalanx_watch_delay_seconds_sum")
    return count or 0.0, total or 0.0


async def bind_then_watch(refuse: frozenset[str]) -> tuple[float, float]:
    api = FakeApi({"/apis": group_list()})
    api.add("/api/v1/nodes", node_obj("n1"))
    api.add(PODS, pod_obj("p", uid="u-p"))
    clock, metrics, state = FakeClock(100.0), Metrics(), ClusterState()
    source = KubeSource(
        api,
        settings=KubeSourceSettings(
            informer=InformerSettings(backoff=Backoff(initial_seconds=0.01, cap_seconds=0.05))
        ),
        writer=Binds(refuse),
        metrics=metrics,
        clock=clock,
    )
    await source.start(lambda update: update(state))
    try:
        await until("synced", lambda: source.synced)
        with contextlib.suppress(BindError):  # refused: the pod is someone else's
            await source.bind(Binding(PodRef("default", "p", "u-p"), "n1"))
        clock.now += 0.3
        api.modify(PODS, pod_obj("p", uid="u-p", node="n1"))
        await until("seen bound", lambda: present(state.pod("u-p")).node_name == "n1")
        return delay_samples(metrics)
    finally:
        await source.stop()


def test_the_live_source_exports_each_of_its_bindings_delay_on_the_pod_watch() -> None:
    count, total = asyncio.run(bind_then_watch(refuse=frozenset()))
    assert count == 1
    assert total == pytest.approx(0.3)


def test_a_refused_binding_is_not_timed_when_the_pod_turns_up_bound() -> None:
    assert asyncio.run(bind_then_watch(refuse=frozenset({"p"}))) == (0.0, 0.0)
