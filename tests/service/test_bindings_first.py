"""Bindings first: while Phalanx has bindings in flight, and for half a second after the last
one lands, gang status and Events wait (each at most `hold_seconds`). Nominations, requeues
and an object's first status never wait."""

import asyncio
from typing import Any

import pytest
from support import FakeTimers, RecordingSource, bind, gang_objects, pod_of, reserve_all, started

from clocks import FakeClock
from phalanx.core.groups.status import GroupStatus
from phalanx.service.bindings_first import QUIET_SECONDS, BindingsFirst
from phalanx.service.extender import Extender

pytestmark = pytest.mark.anyio


def first(hold: float = 5.0) -> tuple[BindingsFirst, FakeClock, FakeTimers]:
    clock = FakeClock()
    timers = FakeTimers(clock)
    return BindingsFirst(hold, clock=clock, timers=timers), clock, timers


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def later(clock: FakeClock, timers: FakeTimers, seconds: float) -> None:
    clock.now += seconds
    timers.fire_due()


async def test_a_write_with_no_binding_in_flight_goes_at_once() -> None:
    gate, _, _ = first()
    await asyncio.wait_for(gate.turn(), timeout=1)
    assert gate.held == 0


async def test_a_write_waits_until_the_bindings_have_been_quiet_for_half_a_second() -> None:
    gate, clock, timers = first()
    with gate.binding():
        write = asyncio.create_task(gate.turn())
        await settle()
        later(clock, timers, 3.0)  # a long binding: the write still waits
        await settle()
        assert not write.done()
        assert gate.held == 1
    later(clock, timers, QUIET_SECONDS / 2)
    await settle()
    assert not write.done()  # landed, but not yet quiet for long enough
    later(clock, timers, QUIET_SECONDS / 2)
    await settle()
    assert write.done()
    assert gate.held == 0


async def test_a_binding_that_starts_in_the_quiet_spell_restarts_it() -> None:
    gate, clock, timers = first()
    with gate.binding():
        write = asyncio.create_task(gate.turn())
        await settle()
    later(clock, timers, QUIET_SECONDS * 0.8)
    with gate.binding():
        later(clock, timers, QUIET_SECONDS * 0.4)  # the first quiet spell would end here
        await settle()
        assert not write.done()
    later(clock, timers, QUIET_SECONDS * 0.9)
    await settle()
    assert not write.done()
    later(clock, timers, QUIET_SECONDS * 0.1)
    await settle()
    assert write.done()


async def test_a_write_just_after_the_last_binding_landed_waits_out_the_quiet_spell() -> None:
    gate, clock, timers = first()
    with gate.binding():
        pass
    write = asyncio.create_task(gate.turn())
    await settle()
    assert not write.done()
    later(clock, timers, QUIET_SECONDS)
    await settle()
    assert write.done()


async def test_no_write_waits_longer_than_hold_seconds_while_bindings_go_on() -> None:
    gate, clock, timers = first(hold=2.0)
    with gate.binding():
        write = asyncio.create_task(gate.turn())
        await settle()
        later(clock, timers, 1.9)
        await settle()
        assert not write.done()
        later(clock, timers, 0.1)
        await settle()
        assert write.done()
        assert gate.held == 0


async def test_held_writes_go_in_the_order_they_were_held() -> None:
    gate, clock, timers = first()
    went: list[int] = []

    async def write(n: int) -> None:
        await gate.turn()
        went.append(n)

    with gate.binding():
        tasks = [asyncio.create_task(write(n)) for n in range(5)]
        await settle()
    later(clock, timers, QUIET_SECONDS)
    await asyncio.gather(*tasks)
    assert went == [0, 1, 2, 3, 4]


async def test_with_hold_seconds_zero_nothing_is_ever_held() -> None:
    gate, _, _ = first(hold=0.0)
    with gate.binding():
        await asyncio.wait_for(gate.turn(), timeout=1)
    assert gate.held == 0


@pytest.mark.parametrize("hold", [-1.0, float("inf"), float("nan")])
def test_a_hold_that_is_not_a_finite_number_of_seconds_is_refused(hold: float) -> None:
    with pytest.raises(ValueError, match="hold_seconds must be a finite number >= 0"):
        BindingsFirst(hold)


class StatusLog(RecordingSource):
    """Keeps every status write, not only the last per gang."""

    def __init__(self, objects: Any, failures: Any = None, **kw: Any) -> None:
        super().__init__(objects, failures, **kw)
        self.written: list[GroupStatus] = []

    async def update_group_status(self, status: Any) -> None:
        self.written.append(status)
        await super().update_group_status(status)


def held(ext: Extender) -> float:
    return ext.metrics.registry.get_sample_value("phalanx_reports_held") or 0


async def holding(size: int) -> tuple[Extender, StatusLog, FakeClock, FakeTimers]:
    """A gang of `size`, with the hold on and its timers on the test's clock."""
    clock = FakeClock()
    timers = FakeTimers(clock)
    ext, source = await started(
        gang_objects(size=size, gpus=4),
        source_class=StatusLog,
        clock=clock,
        timers=timers,
        report_hold=5.0,
    )
    return ext, source, clock, timers


async def test_a_bound_gang_s_event_and_status_wait_until_the_bindings_are_quiet() -> None:
    ext, source, clock, timers = await holding(4)
    nodes = reserve_all(ext, ["g-0"])
    await settle()
    before = len(source.written)  # the reservation's status: the object's first, at once
    assert before == 1
    assert source.written[0].scheduled == 0

    assert await asyncio.wait_for(bind(ext, "g-0", nodes["g-0"]), timeout=2) == ""
    await settle()
    assert len(source.bindings) == 4
    assert not any("bound 4 member(s) together" in e[3] for e in source.events)
    assert len(source.written) == before
    assert held(ext) >= 2  # at least the gang's Event and its status

    source.delete_pod(pod_of(ext, "g-3").uid)  # the status changes again while it waits
    ext.refresh_statuses()
    await settle()
    assert len(source.written) == before

    later(clock, timers, QUIET_SECONDS)
    await settle()
    assert any("bound 4 member(s) together" in e[3] for e in source.events)
    assert len(source.written) > before
    assert held(ext) == 0
    assert source.written[-1].scheduled == 3
    await ext.stop()


async def test_nominations_and_a_first_status_do_not_wait_for_the_bindings() -> None:
    ext, source, clock, timers = await holding(3)
    with ext.bindings_first.binding():  # another gang's bindings are in flight
        reserve_all(ext, ["g-0"])
        await settle()
        assert sorted(source.nominated) == ["default/g-1", "default/g-2"]
        assert len(source.written) == 1  # the PodGroup's first status
        assert not any(e[2] == "Reserved" for e in source.events)  # its Event waits
    later(clock, timers, QUIET_SECONDS)
    await settle()
    assert any(e[2] == "Reserved" for e in source.events)
    await ext.stop()
