"""What the live source writes to nominate reserved members: one pods/status patch each,
in the order decided per pod, and the plain requeue where RBAC refuses pods/status; and a
gang's status writes, in the order decided per gang object, each after a short window in
which newer statuses of the same object replace it; and Events, one write per object and
reason per interval, a new message held by it written once the interval is up."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from source_fakes import RecordingWriter

from clocks import FakeClock
from phalanx.core.groups import scheduler_plugins
from phalanx.core.groups.discovery import ServedKind
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.inventory import REQUEUE_ANNOTATION
from phalanx.core.model import Dialect, GroupRef, PodRef
from phalanx.sources.base import Nomination
from phalanx.sources.in_flight import Lane
from phalanx.sources.informer import ApiError
from phalanx.sources.kube_reports import Held, Reports
from phalanx.sources.kubeclient import MERGE_PATCH, STRATEGIC_MERGE_PATCH

pytestmark = pytest.mark.anyio

POD = PodRef("team", "worker-0", "uid-0")
STATUS = "/api/v1/namespaces/team/pods/worker-0/status"
PLAIN = "/api/v1/namespaces/team/pods/worker-0"


PODGROUP = ServedKind(
    Dialect.SCHEDULER_PLUGINS,
    scheduler_plugins.GROUP,
    scheduler_plugins.VERSION,
    scheduler_plugins.KIND,
    scheduler_plugins.RESOURCE,
)
GANG = GroupRef("team", "train")


def reports(writer: RecordingWriter, window: Window | None = None) -> Reports:
    return Reports(
        writer,
        identity="phalanx-test",
        event_interval_seconds=1.0,
        uid_of=lambda kind, key: "",
        held=lambda key: Held(PODGROUP, "pg-uid") if key == GANG.object_ref.key else None,
        clock=lambda: 0.0,
        wall_clock=lambda: 1_700_000_000.0,
        status_coalesce_seconds=window.seconds if window is not None else 0.0,
        sleep=window.sleep if window is not None else asyncio.sleep,
    )


class Window:
    """The status coalescing window, closed by the test instead of by the clock."""

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds
        self.waits: list[float] = []  # every sleep asked for
        self._closed = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self._closed.wait()

    def close(self) -> None:
        self._closed.set()


def reasons(writer: RecordingWriter) -> list[str]:
    return [body["status"]["conditions"][0]["reason"] for _, body in writer.patches]


class SlowFirstWriter(RecordingWriter):
    """The first patch takes a while; later ones answer at once (an overtaking write)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = True

    async def patch(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        content_type: str = MERGE_PATCH,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]:
        if self.first:
            self.first = False
            await asyncio.sleep(0.05)
        return await super().patch(path, body, content_type=content_type, lane=lane)


async def test_a_nomination_is_one_status_patch_with_the_node_the_uid_and_the_requeue_touch() -> (
    None
):
    writer = RecordingWriter()
    await reports(writer).nominate([Nomination(POD, "node-a")], "gang team/g reserved")
    [(path, body)] = writer.patches
    assert path == STATUS
    assert body["status"] == {"nominatedNodeName": "node-a"}
    assert body["metadata"]["uid"] == "uid-0"  # a re-created pod of that name is not touched
    assert REQUEUE_ANNOTATION in body["metadata"]["annotations"]
    assert writer.content_types == [MERGE_PATCH]


async def test_a_withdrawal_clears_the_node_without_requeueing() -> None:
    writer = RecordingWriter()
    await reports(writer).nominate([Nomination(POD, "")], "released")
    [(path, body)] = writer.patches
    assert path == STATUS
    assert body == {"metadata": {"uid": "uid-0"}, "status": {"nominatedNodeName": None}}


async def test_writes_for_one_pod_land_in_the_order_they_were_decided() -> None:
    # A release's withdrawal and the next reservation's nomination, the first one slow: the
    # nomination must not be overtaken and then cleared.
    writer = SlowFirstWriter()
    rep = reports(writer)
    await asyncio.gather(
        rep.nominate([Nomination(POD, "node-a")], "reserved"),
        rep.nominate([Nomination(POD, "")], "released"),
        rep.nominate([Nomination(POD, "node-b")], "reserved again"),
    )
    assert [body["status"]["nominatedNodeName"] for _, body in writer.patches] == [
        "node-a",
        None,
        "node-b",
    ]


async def test_a_pod_gone_or_recreated_meanwhile_is_no_error() -> None:
    writer = RecordingWriter()
    writer.failing[STATUS] = ApiError(404, "NotFound", "pods worker-0 not found")
    await reports(writer).nominate([Nomination(POD, "node-a")], "reserved")
    writer.failing[STATUS] = ApiError(409, "Conflict", "Precondition failed: UID")
    await reports(writer).nominate([Nomination(POD, "node-a")], "reserved")
    assert writer.patches == []


async def test_without_rbac_on_pods_status_members_are_still_requeued_and_it_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = RecordingWriter()
    writer.failing[STATUS] = ApiError(403, "Forbidden", "cannot patch resource pods/status")
    rep = reports(writer)
    with caplog.at_level(logging.WARNING):
        await rep.nominate([Nomination(POD, "node-a")], "reserved")
        await rep.nominate([Nomination(POD, "node-b")], "reserved again")
    assert [path for path, _ in writer.patches] == [PLAIN, PLAIN]
    assert all(REQUEUE_ANNOTATION in b["metadata"]["annotations"] for _, b in writer.patches)
    assert sum("pods/status is not granted" in r.getMessage() for r in caplog.records) == 1


async def test_a_bound_pod_s_pod_scheduled_condition_is_set_true_by_one_strategic_patch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = RecordingWriter()
    await reports(writer).mark_scheduled([POD])
    [(path, body)] = writer.patches
    assert path == STATUS
    # Strategic merge: the list's merge key is `type`, so the other conditions stay.
    assert writer.content_types == [STRATEGIC_MERGE_PATCH]
    [condition] = body["status"]["conditions"]
    assert condition["type"] == "PodScheduled"
    assert condition["status"] == "True"
    assert (condition["reason"], condition["message"]) == (None, None)  # removed
    assert body["metadata"] == {"uid": "uid-0"}
    writer.failing[STATUS] = ApiError(404, "NotFound", "pods worker-0 not found")
    with caplog.at_level(logging.WARNING):
        await reports(writer).mark_scheduled([POD])  # gone meanwhile: fine
        assert not caplog.records
        writer.failing[STATUS] = ApiError(403, "Forbidden", "cannot patch resource pods/status")
        await reports(writer).mark_scheduled([POD])
    assert "cannot set a bound pod's PodScheduled condition" in caplog.text


async def test_status_writes_for_one_gang_land_in_the_order_they_were_decided() -> None:
    # The bindings done (all members scheduled, the decision still "committed"), then the
    # gang noted bound; the first write slow. The object must end up saying "bound".
    writer = SlowFirstWriter()
    rep = reports(writer)
    committed = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "committed", "committed")
    bound = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "bound", "bound 3 member(s)")
    await asyncio.gather(rep.update_group_status(committed), rep.update_group_status(bound))
    reasons = [body["status"]["conditions"][0]["reason"] for _, body in writer.patches]
    assert reasons == ["Committed", "Bound"]


async def test_a_status_superseded_while_it_waits_its_turn_is_never_written() -> None:
    # Reserved, committed and bound decided while the first write is slow: the object goes
    # from the first straight to the newest, which says all the one in between would.
    writer = SlowFirstWriter()
    rep = reports(writer)
    reserved = GroupStatus(GANG, GroupPhase.SCHEDULING, 0, 0, "reserved", "reserved")
    committed = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "committed", "committed")
    bound = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "bound", "bound 3 member(s)")
    await asyncio.gather(*(rep.update_group_status(s) for s in (reserved, committed, bound)))
    reasons = [body["status"]["conditions"][0]["reason"] for _, body in writer.patches]
    assert reasons == ["Reserved", "Bound"]
    # Nothing is left behind: a later status is written as usual.
    running = GroupStatus(GANG, GroupPhase.RUNNING, 3, 3, "bound", "bound 3 member(s)")
    await rep.update_group_status(running)
    assert len(writer.patches) == 3
    assert writer.patches[-1][1]["status"]["phase"] == "Running"


async def test_every_report_yields_to_bindings_in_the_clients_report_lane() -> None:
    # Nominations, requeues, gang status and Events are best effort: none may hold up a
    # gang's bindings for an in-flight slot.
    writer = RecordingWriter()
    rep = reports(writer)
    await rep.nominate([Nomination(POD, "node-a")], "gang team/g reserved")
    await rep.requeue([POD], "a node became schedulable")
    await rep.update_group_status(GroupStatus(GANG, GroupPhase.SCHEDULING, 0, 0, "committed", ""))
    await rep.emit_event("Pod", "team", "worker-0", "Reserved", "held", warning=False)
    assert len(writer.lanes) == 4
    assert {lane for _, lane in writer.lanes} == {Lane.REPORT}


async def first_status_sent(rep: Reports, writer: RecordingWriter) -> None:
    """The gang's first status, which goes at once (no window)."""
    waiting = GroupStatus(GANG, GroupPhase.PENDING, 0, 0, "waiting-for-members", "1/3 exist")
    await asyncio.wait_for(rep.update_group_status(waiting), timeout=5)  # no window to close
    assert reasons(writer) == ["WaitingForMembers"]


async def test_an_objects_first_status_is_written_at_once() -> None:
    # Others may wait for it: Volcano's job controller creates a job's pods only once its
    # PodGroup has left Pending.
    writer, window = RecordingWriter(), Window(seconds=1.0)
    await first_status_sent(reports(writer, window), writer)
    assert window.waits == []


async def test_a_later_status_waits_the_coalescing_window_before_it_is_written() -> None:
    writer, window = RecordingWriter(), Window(seconds=1.0)
    rep = reports(writer, window)
    await first_status_sent(rep, writer)
    reserved = GroupStatus(GANG, GroupPhase.SCHEDULING, 0, 0, "reserved", "reserved")
    pending = asyncio.ensure_future(rep.update_group_status(reserved))
    await asyncio.sleep(0)
    assert len(writer.patches) == 1
    assert window.waits == [1.0]
    window.close()
    await pending
    assert reasons(writer) == ["WaitingForMembers", "Reserved"]


async def test_statuses_decided_within_the_window_are_one_write_of_the_newest() -> None:
    # A gang reserved, bound and running in quick succession: the object goes straight to
    # the newest. Only the first decision sleeps; every caller returns once it is written.
    writer, window = RecordingWriter(), Window()
    rep = reports(writer, window)
    await first_status_sent(rep, writer)
    reserved = GroupStatus(GANG, GroupPhase.SCHEDULING, 0, 0, "reserved", "reserved")
    bound = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "bound", "bound 3 member(s)")
    running = GroupStatus(GANG, GroupPhase.RUNNING, 3, 3, "bound", "bound 3 member(s)")
    calls = []
    for status in (reserved, bound, running):
        calls.append(asyncio.ensure_future(rep.update_group_status(status)))
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(writer.patches) == 1
    assert not any(call.done() for call in calls)
    window.close()
    await asyncio.gather(*calls)
    assert len(writer.patches) == 2
    assert writer.patches[-1][1]["status"]["phase"] == "Running"
    assert len(window.waits) == 1


async def test_a_status_decided_while_a_write_is_in_flight_waits_a_window_of_its_own() -> None:
    writer, window = SlowFirstWriter(), Window()
    window.close()  # every window passes at once
    rep = reports(writer, window)
    committed = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "committed", "committed")
    bound = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "bound", "bound 3 member(s)")
    first = asyncio.ensure_future(rep.update_group_status(committed))
    while writer.first:  # the first write is on its way
        await asyncio.sleep(0)
    await asyncio.gather(first, rep.update_group_status(bound))
    assert reasons(writer) == ["Committed", "Bound"]
    assert len(window.waits) == 1  # the first went at once


async def test_a_status_cancelled_in_its_window_leaves_later_ones_to_be_written() -> None:
    # Shutdown cancels the waiting write: a caller whose status it carried is let go, and
    # nothing is left behind that swallows the object's next status.
    writer, window = RecordingWriter(), Window()
    rep = reports(writer, window)
    await first_status_sent(rep, writer)
    reserved = GroupStatus(GANG, GroupPhase.SCHEDULING, 0, 0, "reserved", "reserved")
    committed = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "committed", "committed")
    waiting = asyncio.ensure_future(rep.update_group_status(reserved))
    await asyncio.sleep(0)
    riding = asyncio.ensure_future(rep.update_group_status(committed))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await riding
    window.close()
    bound = GroupStatus(GANG, GroupPhase.SCHEDULED, 3, 0, "bound", "bound 3 member(s)")
    await rep.update_group_status(bound)
    assert reasons(writer) == ["WaitingForMembers", "Bound"]


async def test_a_forgotten_objects_next_status_is_its_first_again() -> None:
    # A gang object deleted and made again under its name: nobody has seen a status of the
    # new one yet.
    writer, window = RecordingWriter(), Window()
    rep = reports(writer, window)
    await first_status_sent(rep, writer)
    rep.forget_group(GANG.object_ref.key)
    reserved = GroupStatus(GANG, GroupPhase.SCHEDULING, 0, 0, "reserved", "reserved")
    await asyncio.wait_for(rep.update_group_status(reserved), timeout=5)
    assert reasons(writer) == ["WaitingForMembers", "Reserved"]
    assert window.waits == []


def test_a_negative_coalescing_window_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="status_coalesce_seconds must be >= 0, got -1"):
        reports(RecordingWriter(), Window(seconds=-1))


# ---- Events: at most one write per object and reason per interval -----------------------


def event_reports(writer: RecordingWriter, clock: FakeClock, window: Window) -> Reports:
    """Events limited to one write per second, on the test's clock; a held message's wait
    ends when the test closes `window`."""
    return Reports(
        writer,
        identity="phalanx-test",
        event_interval_seconds=1.0,
        uid_of=lambda kind, key: "",
        held=lambda key: None,
        clock=clock,
        wall_clock=lambda: 1_700_000_000.0,
        sleep=window.sleep,
    )


async def unfit(rep: Reports, message: str) -> None:
    await rep.emit_event("Pod", "team", "worker-0", "Unfit", message, warning=True)


@dataclass
class HeldSeries:
    """An Event series written at 0 s with `first`, and `second` held from 0.25 s."""

    writer: RecordingWriter
    clock: FakeClock
    window: Window
    rep: Reports
    second: asyncio.Future[None]


async def one_held(first: str, second: str) -> HeldSeries:
    writer, clock, window = RecordingWriter(), FakeClock(0.0), Window()
    rep = event_reports(writer, clock, window)
    await unfit(rep, first)
    clock.now = 0.25
    held = asyncio.ensure_future(unfit(rep, second))
    await asyncio.sleep(0)
    return HeldSeries(writer, clock, window, rep, held)


def written(writer: RecordingWriter) -> list[tuple[str, int]]:
    """Each Event write's message and count, in order (POST first, then PATCHes)."""
    return [(body["message"], body["count"]) for _, body in writer.posts + writer.patches]


async def test_a_repeat_of_the_written_message_within_the_interval_is_counted_not_sent() -> None:
    writer, clock, window = RecordingWriter(), FakeClock(0.0), Window()
    rep = event_reports(writer, clock, window)
    await unfit(rep, "no room")
    clock.now = 0.5
    await asyncio.wait_for(unfit(rep, "no room"), timeout=5)
    assert written(writer) == [("no room", 1)]
    assert window.waits == []


async def test_a_new_message_held_by_the_interval_is_written_once_the_interval_is_up() -> None:
    # A gang refused first by its template's count, then by the plan of all its members:
    # the journal reports the second reason once, so it must not be swallowed.
    h = await one_held("could hold 1 of them", "2 node(s) had no nvidia.com/gpu allocatable")
    assert written(h.writer) == [("could hold 1 of them", 1)]
    assert h.window.waits == [0.75]
    h.clock.now = 1.0
    h.window.close()
    await h.second
    assert written(h.writer) == [
        ("could hold 1 of them", 1),
        ("2 node(s) had no nvidia.com/gpu allocatable", 2),
    ]


async def test_of_several_new_messages_within_the_interval_only_the_newest_is_written() -> None:
    h = await one_held("first", "second")
    h.clock.now = 0.5
    await asyncio.wait_for(unfit(h.rep, "third"), timeout=5)  # rides on the held write
    h.clock.now = 1.0
    h.window.close()
    await h.second
    assert written(h.writer) == [("first", 1), ("third", 3)]
    assert len(h.window.waits) == 1


async def test_a_held_message_followed_by_the_written_one_again_is_dropped() -> None:
    h = await one_held("first", "second")
    await unfit(h.rep, "first")
    h.clock.now = 1.0
    h.window.close()
    await h.second
    assert written(h.writer) == [("first", 1)]


async def test_a_held_message_cancelled_in_its_wait_leaves_later_ones_to_be_written() -> None:
    # Shutdown cancels the waiting write; nothing is left behind that swallows the next.
    h = await one_held("first", "second")
    h.second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await h.second
    h.clock.now = 0.5
    later = asyncio.ensure_future(unfit(h.rep, "third"))
    await asyncio.sleep(0)
    h.clock.now = 1.0
    h.window.close()
    await later
    assert written(h.writer)[-1][0] == "third"
