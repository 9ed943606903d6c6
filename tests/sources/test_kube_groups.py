"""Discovery of the gang APIs and the CRD watch that wakes it: a gang kind's CRD created,
changed or deleted is discovered again within about a second, not at the next periodic
recheck; a burst is one discovery; a CRD served a moment after its event is found by the
quick rechecks that follow; other CRDs wake nothing; RBAC refusing the watch leaves the
periodic recheck, said once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from source_fakes import FakeApi, group_list, resource_list

from phalanx.core.groups.discovery import Served
from phalanx.core.model import Dialect
from phalanx.sources.informer import Backoff, InformerSettings
from phalanx.sources.kube_groups import CRDS, GroupFollower

VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
VOLCANO_CRD = "podgroups.scheduling.volcano.sh"
SERVES_VOLCANO = {
    "/apis": group_list("scheduling.volcano.sh/v1beta1"),
    VOLCANO: resource_list("podgroups"),
}
SERVES_NOTHING = {"/apis": group_list()}
QUICK = InformerSettings(backoff=Backoff(initial_seconds=0.01, cap_seconds=0.05))


def crd(name: str, version: str = "1") -> dict[str, Any]:
    """A CRD as the metadata-only watch shows it: metadata and nothing else."""
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version}}


def eventually(what: str, probe: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {timeout}s: {what}")
        time.sleep(0.005)


class Following:
    """A GroupFollower over a fake API server on a thread of its own, and each discovery's
    answer. The periodic recheck is a minute, as deployed, unless a test says otherwise."""

    def __init__(
        self,
        api: FakeApi,
        *,
        recheck_seconds: float = 60.0,
        debounce_seconds: float = 0.05,
        settle_seconds: float = 0.0,
    ) -> None:
        self.api = api
        self.found: list[Served] = []
        self.stop = threading.Event()
        self.follower = GroupFollower(
            api,
            lambda kind, changes, synced: None,
            on_served=self.found.append,
            on_gone=lambda kind: None,
            recheck_seconds=recheck_seconds,
            informer=QUICK,
            on_restart=lambda kind, reason: None,
            stop=self.stop,
            crd_debounce_seconds=debounce_seconds,
            crd_settle_seconds=settle_seconds,
        )
        self.thread = threading.Thread(target=self.follower.run, daemon=True)

    def discoveries(self) -> int:
        with self.api.lock:
            return self.api.requests.count(("GET", "/apis"))

    def serves_volcano(self) -> bool:
        return bool(self.found) and bool(self.found[-1].of(Dialect.VOLCANO))

    def watching_crds(self) -> bool:
        with self.api.lock:
            return bool(self.api.watches.get(CRDS.path))

    def close(self) -> None:
        self.stop.set()
        self.follower.stop()
        self.thread.join(2.0)
        self.follower.join(2.0)


@contextmanager
def following(api: FakeApi, **settings: float) -> Iterator[Following]:
    """Started: the first discovery has answered and the CRD watch is open."""
    live = Following(api, **settings)
    live.thread.start()
    try:
        eventually("first discovery", lambda: live.found)
        eventually("the CRD watch open", live.watching_crds)
        yield live
    finally:
        live.close()


def test_a_gang_crd_installed_after_start_is_followed_within_a_second_not_a_minute() -> None:
    api = FakeApi(SERVES_NOTHING)
    with following(api) as live:
        assert not live.serves_volcano()
        api.discovery.update(SERVES_VOLCANO)  # the CRD is Established and served
        api.add(CRDS.path, crd(VOLCANO_CRD))
        eventually("Volcano followed", live.serves_volcano, timeout=2.0)


@pytest.mark.parametrize(
    "change",
    [
        lambda api: api.add(CRDS.path, crd(VOLCANO_CRD)),
        lambda api: api.modify(CRDS.path, crd("podgroups.scheduling.x-k8s.io", "2")),
        lambda api: api.remove(CRDS.path, "podgroups.scheduling.x-k8s.io"),
    ],
    ids=["created", "changed", "deleted"],
)
def test_each_change_of_a_gang_crd_wakes_one_discovery(change: Callable[[FakeApi], None]) -> None:
    api = FakeApi(SERVES_NOTHING)
    api.add(CRDS.path, crd("podgroups.scheduling.x-k8s.io"))
    with following(api, debounce_seconds=0.1) as live:
        time.sleep(0.3)  # the first list's discovery, if it came after the first
        before = live.discoveries()
        change(api)
        eventually("discovered again", lambda: live.discoveries() == before + 1, timeout=2.0)
        time.sleep(0.3)
        assert live.discoveries() == before + 1


def test_a_burst_of_gang_crd_changes_is_one_discovery_said_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="phalanx.sources.kube_groups")
    api = FakeApi(SERVES_NOTHING)
    with following(api, debounce_seconds=0.3) as live:
        before = live.discoveries()
        # An install: its CRDs created, then each one's conditions set.
        names = (VOLCANO_CRD, "podgroups.scheduling.run.ai", "podgangs.scheduler.grove.io")
        for name in names:
            api.add(CRDS.path, crd(name))
        for name in names:
            api.modify(CRDS.path, crd(name, "2"))
        time.sleep(0.9)
        assert live.discoveries() == before + 1
    said = [r for r in caplog.records if "CustomResourceDefinitions of" in r.getMessage()]
    assert [r.crds for r in said] == [sorted(names)]  # type: ignore[attr-defined]  # extra


def test_other_crds_changing_wake_no_discovery() -> None:
    api = FakeApi(SERVES_NOTHING)
    with following(api) as live:
        before = live.discoveries()
        api.add(CRDS.path, crd("certificates.cert-manager.io"))
        api.add(CRDS.path, crd("queues.scheduling.volcano.sh"))  # Volcano's, but no gang kind
        time.sleep(0.3)
        assert live.discoveries() == before


def test_a_crd_served_a_moment_after_its_event_is_found_by_the_quick_rechecks() -> None:
    api = FakeApi(SERVES_NOTHING)
    with following(api, debounce_seconds=0.05, settle_seconds=1.0) as live:
        api.add(CRDS.path, crd(VOLCANO_CRD))  # created: not served yet
        eventually("discovered again", lambda: live.discoveries() >= 3)
        assert not live.serves_volcano()
        api.discovery.update(SERVES_VOLCANO)  # served now, with no event of its own
        eventually("Volcano followed", live.serves_volcano, timeout=1.0)
        time.sleep(1.0)  # the settling is over: back to the minute's recheck
        settled = live.discoveries()
        time.sleep(0.3)
        assert live.discoveries() == settled


def test_a_gang_crd_listed_at_start_is_looked_for_again_in_case_it_was_not_served_yet() -> None:
    # The first discovery may answer before the CRD is served, and the watch's first list
    # then shows it with no event to come.
    api = FakeApi(SERVES_NOTHING)
    api.add(CRDS.path, crd(VOLCANO_CRD))
    live = Following(api, debounce_seconds=0.2, settle_seconds=1.0)
    live.thread.start()
    try:
        eventually("first discovery", lambda: live.found)
        api.discovery.update(SERVES_VOLCANO)
        eventually("Volcano followed", live.serves_volcano, timeout=2.0)
    finally:
        live.close()


def test_crds_are_listed_and_watched_as_metadata_only() -> None:
    api = FakeApi(SERVES_NOTHING)
    with following(api):
        pass
    assert set(api.metadata_reads) == {CRDS.path}
    assert len(api.metadata_reads) == 2  # one list, one watch


def test_a_refused_crd_watch_is_said_once_and_the_periodic_recheck_follows_new_kinds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeApi(SERVES_NOTHING)
    api.forbidden.add(CRDS.path)
    live = Following(api, recheck_seconds=0.2)
    live.thread.start()
    try:
        eventually("first discovery", lambda: live.found)
        api.discovery.update(SERVES_VOLCANO)
        eventually("Volcano followed", live.serves_volcano, timeout=2.0)
        time.sleep(0.3)  # the watch is refused again and again meanwhile
    finally:
        live.close()
    said = [r.getMessage() for r in caplog.records if "may not watch" in r.getMessage()]
    assert said == [
        "may not watch CustomResourceDefinitions: a gang CRD installed later is followed at "
        "the next periodic discovery (every 0.2s), not at once; grant get, list and watch on "
        "them (the chart's RBAC does)"
    ]


def test_stopping_ends_discovery_and_the_crd_watch_at_once() -> None:
    api = FakeApi(SERVES_NOTHING)
    live = Following(api)
    live.thread.start()
    eventually("the CRD watch open", live.watching_crds)
    started = time.monotonic()
    live.close()
    assert time.monotonic() - started < 1.0
    assert not live.thread.is_alive()
    assert not any(t.name == "crd-watch" and t.is_alive() for t in threading.enumerate())


def test_a_gang_crd_change_is_said_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="phalanx.sources.kube_groups")
    api = FakeApi(SERVES_NOTHING)
    api.add(CRDS.path, crd("podgroups.scheduling.x-k8s.io"))  # listed: not news
    with following(api) as live:
        before = live.discoveries()
        api.add(CRDS.path, crd(VOLCANO_CRD))
        eventually("discovered again", lambda: live.discoveries() > before)
    said = [
        (r.getMessage(), r.crds)  # type: ignore[attr-defined]  # the line's extra field
        for r in caplog.records
        if "CustomResourceDefinitions" in r.getMessage()
    ]
    assert said == [
        (
            "CustomResourceDefinitions of gang kinds changed: discovering the gang APIs again",
            [VOLCANO_CRD],
        )
    ]
