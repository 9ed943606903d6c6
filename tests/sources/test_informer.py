"""The informer state machine against a scripted transport: list, watch, bookmark,
410 → relist, disconnect → backoff, malformed objects skipped. No network, no threads
(except where stopping a blocked watch is the point)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from clocks import FakeClock
from phalanx.sources.informer import (
    ApiError,
    Backoff,
    Delete,
    Ending,
    Informer,
    InformerSettings,
    Invalid,
    Kind,
    Upsert,
)

# ---- builders -----------------------------------------------------------------------------


def obj(
    name: str, rv: str, value: Any = 1, *, uid: str | None = None, namespace: str = "ns"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "resourceVersion": rv,
        },
        "spec": {"value": value},
    }


def page(items: Sequence[dict[str, Any]], rv: str = "100", cont: str = "") -> bytes:
    return orjson.dumps(
        {"metadata": {"resourceVersion": rv, "continue": cont}, "items": list(items)}
    )


def event(kind: str, o: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": o})


def bookmark(rv: str) -> bytes:
    return event("BOOKMARK", {"metadata": {"resourceVersion": rv}})


def expired() -> bytes:
    return event(
        "ERROR",
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"},
    )


def decode(raw: dict[str, Any]) -> int:
    value = raw["spec"]["value"]
    if not isinstance(value, int):
        raise ValueError(f"spec.value must be an integer, not {value!r}")
    return value


KIND: Kind[int] = Kind("Thing", "/apis/example.com/v1/things", decode)
DROPPED = ApiError(0, "ProtocolError", "connection reset by peer")

# ---- a scripted transport -------------------------------------------------------------------


@dataclass
class Watch:
    lines: list[bytes] = field(default_factory=list)
    then: ApiError | None = None  # raised after the lines (the connection broke)


class Script:
    """Answers list/watch calls from a queue; once empty, stops the informer."""

    def __init__(self, stop: threading.Event, *steps: bytes | Watch | ApiError) -> None:
        self.stop = stop
        self.steps: deque[bytes | Watch | ApiError] = deque(steps)
        self.calls: list[tuple[str, str]] = []  # ("list", continue) / ("watch", resourceVersion)

    def _next(self) -> bytes | Watch | ApiError:
        if not self.steps:
            self.stop.set()
            raise ApiError(0, "ScriptDone")
        step = self.steps.popleft()
        if isinstance(step, ApiError):
            raise step
        return step

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        assert path == KIND.path
        self.calls.append(("list", continue_token))
        step = self._next()
        assert isinstance(step, bytes), f"expected a list call, the script has {step!r}"
        return step

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> _Stream:
        assert 300 <= timeout_seconds <= 600
        self.calls.append(("watch", resource_version))
        step = self._next()
        assert isinstance(step, Watch), f"expected a watch call, the script has {step!r}"
        return _Stream(step)


class _Stream:
    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.watch.lines
        if self.watch.then is not None:
            raise self.watch.then

    def close(self) -> None:
        self.closed = True


@dataclass
class Recorder:
    batches: list[tuple[list[Any], bool]] = field(default_factory=list)

    def __call__(self, changes: Sequence[Upsert[int] | Delete | Invalid], synced: bool) -> None:
        self.batches.append((list(changes), synced))

    @property
    def changes(self) -> list[Any]:
        return [c for batch, _ in self.batches for c in batch]


@dataclass
class Harness:
    informer: Informer[int]
    script: Script
    handler: Recorder
    waits: list[float]
    restarts: list[str]
    forbidden: list[str] = field(default_factory=list)


def run(
    *steps: bytes | Watch | ApiError, rand: float = 0.0, min_watch_seconds: float = 0.0
) -> Harness:
    stop = threading.Event()
    script = Script(stop, *steps)
    handler = Recorder()
    waits: list[float] = []
    restarts: list[str] = []
    forbidden: list[str] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return stop.is_set()

    informer = Informer(
        KIND,
        script,
        handler,
        settings=InformerSettings(page_size=2, min_watch_seconds=min_watch_seconds),
        on_restart=lambda kind, reason: restarts.append(f"{kind}:{reason}"),
        on_forbidden=lambda kind, message: forbidden.append(f"{kind}: {message}"),
        stop=stop,
        wait=wait,
        rand=lambda: rand,
    )
    assert informer.run() is Ending.STOPPED
    return Harness(informer, script, handler, waits, restarts, forbidden)


def upserts(changes: list[Any]) -> list[tuple[str, int]]:
    return [(c.key, c.obj) for c in changes if isinstance(c, Upsert)]


# ---- listing ----------------------------------------------------------------------------------


def test_a_paged_list_is_handed_on_page_by_page_and_marks_synced_once_at_the_end() -> None:
    h = run(
        page([obj("a", "1"), obj("b", "2")], rv="50", cont="tok"),
        page([obj("c", "3")], rv="50"),
        Watch(),
    )
    assert h.script.calls[:3] == [("list", ""), ("list", "tok"), ("watch", "50")]
    assert [synced for _, synced in h.handler.batches] == [False, True]
    assert upserts(h.handler.changes) == [("ns/a", 1), ("ns/b", 1), ("ns/c", 1)]
    assert h.informer.synced
    assert h.informer.uid_of("ns/c") == "uid-c"


def test_cluster_scoped_objects_are_keyed_by_name_alone() -> None:
    h = run(page([obj("node-1", "1", namespace="")]), Watch())
    assert upserts(h.handler.changes) == [("node-1", 1)]


def test_a_failed_first_list_backs_off_and_lists_again() -> None:
    h = run(
        ApiError(500, "InternalError"),
        ApiError(0, "ConnectionRefused"),
        page([obj("a", "1")]),
        Watch(),
    )
    assert [c for c, _ in h.script.calls[:3]] == ["list", "list", "list"]
    assert h.waits[:2] == [0.8, 1.6]
    assert h.restarts[:2] == ["Thing:error", "Thing:error"]
    assert [synced for _, synced in h.handler.batches] == [True]


def test_a_list_refused_by_rbac_is_told_once_per_streak_and_listed_again_until_allowed() -> None:
    no = ApiError(403, "Forbidden", 'things is forbidden: User "phalanx" cannot list')
    h = run(no, no, page([obj("a", "1")]), Watch([expired()]), no, page([]))
    calls = [c for c, _ in h.script.calls]
    assert calls == ["list", "list", "list", "watch", "list", "list", "watch"]
    assert h.forbidden == [f"Thing: {no}", f"Thing: {no}"]  # before the grant, after a revoke
    assert h.restarts[:2] == ["Thing:forbidden", "Thing:forbidden"]
    assert upserts(h.handler.changes) == [("ns/a", 1)]


# ---- watching ---------------------------------------------------------------------------------


def test_watch_events_apply_in_order_and_move_the_resource_version() -> None:
    h = run(
        page([obj("a", "1")], rv="10"),
        Watch(
            [
                event("ADDED", obj("b", "11", 2)),
                event("MODIFIED", obj("a", "12", 3)),
                event("DELETED", obj("b", "13")),
            ]
        ),
        Watch(),
    )
    watched = h.handler.batches[1:]
    assert [(c, s) for c, s in watched] == [
        ([Upsert("ns/b", "uid-b", 2)], False),
        ([Upsert("ns/a", "uid-a", 3)], False),
        ([Delete("ns/b", "uid-b")], False),
    ]
    assert h.script.calls[1:3] == [("watch", "10"), ("watch", "13")]  # resumed where it stopped
    assert h.restarts[0] == "Thing:closed"


def test_a_bookmark_only_moves_the_resource_version() -> None:
    h = run(page([obj("a", "1")], rv="10"), Watch([bookmark("77")]), Watch())
    assert len(h.handler.batches) == 1  # the list; the bookmark applied nothing
    assert h.script.calls[2] == ("watch", "77")


def test_a_clean_end_of_a_watch_watches_again_without_backoff() -> None:
    h = run(page([], rv="5"), Watch([bookmark("6")]), Watch([bookmark("7")]), Watch())
    assert h.waits == []  # no backoff at all
    assert h.script.calls[1:4] == [("watch", "5"), ("watch", "6"), ("watch", "7")]


def test_a_watch_that_ends_at_once_without_an_event_counts_as_an_error() -> None:
    h = run(
        page([], rv="5"), Watch(), Watch(), Watch([bookmark("6")]), Watch(), min_watch_seconds=60.0
    )
    assert h.waits[:2] == [0.8, 1.6]
    assert h.restarts[:3] == ["Thing:error", "Thing:error", "Thing:closed"]


# ---- 410 Gone -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gone",
    [
        pytest.param(Watch([expired()]), id="ERROR event with code 410"),
        pytest.param(ApiError(410, "Expired"), id="HTTP 410 on the watch request"),
    ],
)
def test_gone_relists_at_once_and_deletes_what_vanished_meanwhile(gone: Watch | ApiError) -> None:
    h = run(
        page([obj("a", "1"), obj("b", "2")], rv="10"),
        gone,
        page([obj("a", "1"), obj("c", "30", 5)], rv="40"),
        Watch(),
    )
    assert [c for c, _ in h.script.calls[:4]] == ["list", "watch", "list", "watch"]
    assert h.script.calls[3] == ("watch", "40")
    assert h.waits == []  # no backoff before the relist
    assert h.restarts[0] == "Thing:gone"
    relist, synced = h.handler.batches[1]
    assert not synced  # synced is said once, by the first list
    assert relist == [
        Upsert("ns/c", "uid-c", 5),
        Delete("ns/b", "uid-b"),
    ]  # "a" is unchanged: skipped


def test_a_relist_finding_a_name_under_a_new_uid_deletes_the_object_it_held_first() -> None:
    # Deleted and created again while the watch was down: the relist shows one object
    # under the old name; its handlers must still hear that the old one is gone.
    h = run(
        page([obj("a", "1"), obj("b", "2")], rv="10"),
        Watch([expired()]),
        page([obj("a", "31", 5, uid="uid-a2"), obj("b", "2")], rv="40"),
        Watch([event("MODIFIED", obj("a", "41", 6, uid="uid-a2"))]),
        Watch(),
    )
    relist, _ = h.handler.batches[1]
    assert relist == [Delete("ns/a", "uid-a"), Upsert("ns/a", "uid-a2", 5)]
    assert h.handler.batches[2][0] == [Upsert("ns/a", "uid-a2", 6)]  # the same object now
    assert h.informer.uid_of("ns/a") == "uid-a2"


def test_a_watch_event_under_a_new_uid_deletes_the_object_its_name_held_first() -> None:
    h = run(
        page([obj("a", "1", "abc")], rv="10"),
        Watch([event("ADDED", obj("a", "11", 2, uid="uid-a2"))]),
        Watch(),
    )
    assert h.handler.batches[0][0] == [
        Invalid("ns/a", "uid-a", "spec.value must be an integer, not 'abc'")
    ]
    assert h.handler.batches[1][0] == [Delete("ns/a", "uid-a"), Upsert("ns/a", "uid-a2", 2)]


def test_an_expired_continue_token_restarts_the_list() -> None:
    h = run(
        page([obj("a", "1"), obj("b", "2")], rv="10", cont="tok"),
        ApiError(410, "Expired", "continue token expired"),
        page([obj("a", "1"), obj("b", "2")], rv="20"),
        Watch(),
    )
    assert h.script.calls[:3] == [("list", ""), ("list", "tok"), ("list", "")]
    assert h.informer.resource_version == "20"
    assert not [c for c in h.handler.changes if isinstance(c, Delete)]


# ---- errors and backoff --------------------------------------------------------------------


def test_a_dropped_connection_backs_off_exponentially_and_resumes_from_the_last_version() -> None:
    h = run(
        page([obj("a", "1")], rv="10"),
        Watch([event("MODIFIED", obj("a", "11", 2))], then=DROPPED),
        DROPPED,
        DROPPED,
        Watch([bookmark("12")], then=DROPPED),
        Watch(),
        rand=1.0,  # the low end of the jitter: half of each step
    )
    assert [c for c in h.script.calls if c[0] == "list"] == [("list", "")]  # never relisted
    assert [rv for c, rv in h.script.calls if c == "watch"] == ["10", "11", "11", "11", "12", "12"]
    # An event resets the streak: 0.4 after the first drop, then 0.4, 0.8, 1.6 ...
    assert h.waits[:4] == [0.4, 0.8, 1.6, 0.4]
    assert h.restarts[:4] == ["Thing:error"] * 4


def test_backoff_doubles_up_to_its_cap() -> None:
    b = Backoff(initial_seconds=1.0, cap_seconds=30.0, jitter=0.5)
    assert [b.delay(n, 0.0) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert b.delay(1000, 1.0) == 15.0


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"{not json", id="not JSON"),
        pytest.param(b"[1, 2]", id="not an object"),
        pytest.param(orjson.dumps({"type": "ADDED"}), id="no object"),
        pytest.param(
            orjson.dumps({"type": "TELEPORTED", "object": {"metadata": {}}}), id="unknown type"
        ),
        pytest.param(
            event("ERROR", {"code": 500, "reason": "InternalError"}), id="ERROR other than 410"
        ),
    ],
)
def test_a_garbage_watch_line_restarts_the_watch_after_a_backoff(line: bytes) -> None:
    h = run(
        page([obj("a", "1")], rv="10"),
        Watch([line]),
        Watch([event("ADDED", obj("b", "11"))]),
        Watch(),
    )
    assert h.waits[0] == 0.8
    assert h.script.calls[2] == ("watch", "10")
    assert upserts(h.handler.changes) == [("ns/a", 1), ("ns/b", 1)]


def test_a_handler_failure_does_not_end_the_informer() -> None:
    stop = threading.Event()
    script = Script(
        stop,
        page([obj("a", "1")], rv="10"),
        Watch([event("ADDED", obj("b", "11"))]),
        page([], rv="20"),
    )
    seen: list[int] = []

    def flaky(changes: Sequence[Upsert[int] | Delete | Invalid], synced: bool) -> None:
        seen.append(len(changes))
        if len(seen) == 2:
            raise RuntimeError("bug in the handler")

    informer = Informer(
        KIND, script, flaky, stop=stop, wait=lambda s: stop.is_set(), rand=lambda: 0.0
    )
    assert informer.run() is Ending.STOPPED
    assert len(seen) == 2
    assert script.calls[2] == ("watch", "11")


# ---- bad objects --------------------------------------------------------------------------


def test_a_malformed_object_is_reported_invalid_and_the_others_still_apply() -> None:
    h = run(
        page(
            [obj("good", "1"), obj("bad", "2", "abc"), {"metadata": {"namespace": "ns"}}], rv="10"
        ),
        Watch([event("MODIFIED", obj("bad", "11", 7))]),
        Watch(),
    )
    listed, synced = h.handler.batches[0]
    assert synced
    assert listed == [
        Upsert("ns/good", "uid-good", 1),
        Invalid("ns/bad", "uid-bad", "spec.value must be an integer, not 'abc'"),
    ]  # the object with no name cannot even be keyed: it is skipped
    assert h.handler.batches[1][0] == [Upsert("ns/bad", "uid-bad", 7)]  # fixed later: applied


def test_a_deleted_invalid_object_is_deleted_too() -> None:
    h = run(
        page([obj("bad", "2", "abc")], rv="10"),
        Watch([event("DELETED", obj("bad", "11", "abc"))]),
        Watch(),
    )
    assert h.handler.batches[1][0] == [Delete("ns/bad", "uid-bad")]


# ---- the kind disappears; stopping --------------------------------------------------------


def backing_off(clock: FakeClock, stop: threading.Event) -> Callable[[float], bool]:
    """The informer's `wait` (as `stop.wait`): the only time that passes is its backoff."""

    def wait(seconds: float) -> bool:
        clock.now += seconds
        return stop.is_set()

    return wait


@dataclass
class TimedRecorder(Recorder):
    clock: Callable[[], float] = lambda: 0.0
    times: list[float] = field(default_factory=list)

    def __call__(self, changes: Sequence[Upsert[int] | Delete | Invalid], synced: bool) -> None:
        super().__call__(changes, synced)
        self.times.append(self.clock())


def missing_run(
    *steps: bytes | Watch | ApiError,
) -> tuple[Informer[int], TimedRecorder, Ending, FakeClock]:
    stop = threading.Event()
    clock = FakeClock(0.0)
    handler = TimedRecorder(clock=clock)
    informer = Informer(
        KIND,
        Script(stop, *steps),
        handler,
        settings=InformerSettings(gone_after_seconds=30.0),
        stop=stop,
        clock=clock,
        wait=backing_off(clock, stop),
        rand=lambda: 0.0,
    )
    return informer, handler, informer.run(), clock


def test_a_404_list_lasting_gone_after_seconds_forgets_everything_and_ends_with_missing() -> None:
    informer, handler, ending, clock = missing_run(
        page([obj("a", "1")], rv="10"), ApiError(410, "Expired"), *[ApiError(404, "NotFound")] * 12
    )
    assert ending is Ending.MISSING
    assert clock.now >= 30.0
    assert [c for c in handler.changes if isinstance(c, Delete)] == [Delete("ns/a", "uid-a")]
    assert handler.batches[-1] == ([Delete("ns/a", "uid-a")], False)
    assert informer.uid_of("ns/a") == ""


def test_a_404_list_for_a_moment_keeps_what_is_known_and_lists_again() -> None:
    # An API server that restarts answers before it serves its CRDs again.
    informer, handler, ending, _ = missing_run(
        page([obj("a", "1")], rv="10"),
        ApiError(410, "Expired"),
        ApiError(404, "NotFound"),
        ApiError(404, "NotFound"),
        page([obj("a", "1"), obj("b", "2")], rv="20"),
        Watch(),
    )
    assert ending is Ending.STOPPED
    assert not [c for c in handler.changes if isinstance(c, Delete)]
    assert upserts(handler.changes) == [("ns/a", 1), ("ns/b", 1)]
    assert informer.uid_of("ns/a") == "uid-a"


def test_a_404_streak_starts_again_after_a_good_list() -> None:
    _, handler, ending, clock = missing_run(
        page([obj("a", "1")], rv="10"),
        ApiError(410, "Expired"),
        *[ApiError(404, "NotFound")] * 3,
        page([obj("a", "1")], rv="20"),
        ApiError(410, "Expired"),
        *[ApiError(404, "NotFound")] * 12,
    )
    assert ending is Ending.MISSING
    listed_again_at = handler.times[1]
    assert clock.now - listed_again_at >= 30.0
    assert [c for c in handler.changes if isinstance(c, Delete)] == [Delete("ns/a", "uid-a")]


def test_a_404_on_a_list_with_nothing_known_ends_with_missing_at_once() -> None:
    _, handler, ending, clock = missing_run(ApiError(404, "NotFound"))
    assert ending is Ending.MISSING
    assert clock.now == 0.0
    assert handler.batches == []


def test_a_404_list_restarts_with_reason_missing() -> None:
    h = run(page([obj("a", "1")], rv="10"), ApiError(410, "Expired"), ApiError(404, "NotFound"))
    assert h.restarts == ["Thing:gone", "Thing:missing"]


def test_stop_closes_an_open_watch_and_run_returns() -> None:
    opened = threading.Event()
    release = threading.Event()

    class Blocking:
        def __init__(self) -> None:
            self.closed = False

        def __iter__(self) -> Iterator[bytes]:
            opened.set()
            release.wait(10)
            return iter(())

        def close(self) -> None:
            self.closed = True
            release.set()

    stream = Blocking()

    class Transport:
        def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
            return page([], rv="1")

        def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> Blocking:
            return stream

    informer = Informer(KIND, Transport(), Recorder())
    result: list[Ending] = []
    thread = threading.Thread(target=lambda: result.append(informer.run()))
    thread.start()
    assert opened.wait(5)
    informer.stop()
    thread.join(5)
    assert result == [Ending.STOPPED]
    assert stream.closed
