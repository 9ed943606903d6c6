"""Room for requests awaiting an answer: bindings are never held up by best-effort reports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from phalanx.sources.in_flight import InFlight, Lane

pytestmark = pytest.mark.anyio


class Holders:
    """Tasks that each take a slot and keep it until told to let go; `order` says who got
    one, in the order they got it."""

    def __init__(self, room: InFlight) -> None:
        self.room = room
        self.order: list[str] = []
        self._release: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, lane: Lane) -> None:
        release = self._release[name] = asyncio.Event()

        async def hold() -> None:
            async with self.room.slot(lane):
                self.order.append(name)
                await release.wait()

        self.tasks[name] = asyncio.create_task(hold())

    def let_go(self, name: str) -> None:
        self._release[name].set()


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def holders(limit: int, reserved: int) -> AsyncIterator[Holders]:
    held = Holders(InFlight(limit, reserved))
    try:
        yield held
    finally:
        for task in held.tasks.values():
            task.cancel()
        await asyncio.gather(*held.tasks.values(), return_exceptions=True)


async def test_reports_never_fill_the_slots_kept_for_bindings() -> None:
    async with holders(4, 1) as held:
        for i in range(5):
            held.start(f"report-{i}", Lane.REPORT)
        await settle()
        assert held.order == ["report-0", "report-1", "report-2"]
        held.start("bind", Lane.BIND)
        await settle()
        assert held.order[-1] == "bind"  # at once, with three reports in flight and two waiting
        assert held.room.held(Lane.REPORT) == 3
        assert held.room.waiting(Lane.REPORT) == 2


async def test_a_freed_slot_goes_to_a_waiting_binding_before_an_earlier_report() -> None:
    async with holders(2, 1) as held:
        held.start("bind-0", Lane.BIND)
        held.start("report-0", Lane.REPORT)
        await settle()
        held.start("report-1", Lane.REPORT)  # waits first
        held.start("bind-1", Lane.BIND)  # waits second
        await settle()
        held.let_go("report-0")
        await settle()
        assert held.order == ["bind-0", "report-0", "bind-1"]
        held.let_go("bind-1")
        await settle()
        assert held.order[-1] == "report-1"


async def test_each_lane_is_served_in_arrival_order() -> None:
    async with holders(1, 0) as held:
        held.start("first", Lane.REPORT)
        await settle()
        for name in ("a", "b", "c"):
            held.start(name, Lane.REPORT)
        await settle()
        for name in ("first", "a", "b"):
            held.let_go(name)
            await settle()
        assert held.order == ["first", "a", "b", "c"]


async def test_a_caller_cancelled_while_waiting_leaves_no_slot_taken() -> None:
    async with holders(1, 0) as held:
        held.start("holder", Lane.BIND)
        await settle()
        held.start("quitter", Lane.REPORT)
        held.start("next", Lane.REPORT)
        await settle()
        held.tasks["quitter"].cancel()
        await settle()
        held.let_go("holder")
        await settle()
        assert held.order == ["holder", "next"]
        assert held.room.held(Lane.REPORT) == 1
        assert held.room.waiting(Lane.REPORT) == 0


async def test_a_slot_granted_as_its_caller_is_cancelled_is_given_back() -> None:
    room = InFlight(1, 0)
    got: list[str] = []

    async def take(name: str) -> None:
        async with room.slot(Lane.BIND):
            got.append(name)
            await asyncio.Event().wait()

    holder = room.slot(Lane.BIND)
    await holder.__aenter__()
    quitter = asyncio.create_task(take("quitter"))
    after = asyncio.create_task(take("after"))
    await settle()
    await holder.__aexit__(None, None, None)  # grants the slot to "quitter" at once ...
    quitter.cancel()  # ... which is cancelled before it runs again
    await settle()
    assert got == ["after"]
    assert room.held(Lane.BIND) == 1
    after.cancel()
    await asyncio.gather(quitter, after, return_exceptions=True)
    assert room.held(Lane.BIND) == 0


@pytest.mark.parametrize(("limit", "reserved"), [(0, 0), (4, 4), (4, -1)])
def test_room_that_cannot_work_is_refused(limit: int, reserved: int) -> None:
    with pytest.raises(ValueError, match=r"in-flight limit|reserved slots"):
        InFlight(limit, reserved)
