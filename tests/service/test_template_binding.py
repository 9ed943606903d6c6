"""A gang reserved from its template binds only once its quorum has reached /bind: slots
held for members not created yet never let part of the gang bind."""

import asyncio
from typing import Any

import pytest
from support import NODES, RecordingSource, bind, group_view, pod_of, reserve_all, started

from builders import pod_obj, podgroup_obj, present

pytestmark = pytest.mark.anyio


def first_two_of_three() -> list[dict[str, Any]]:
    return [podgroup_obj("g", 3), *(pod_obj(f"g-{i}", 4, group="g") for i in range(2))]


async def test_members_that_exist_are_held_until_the_last_one_is_created_and_binds() -> None:
    ext, source = await started(first_two_of_three(), source_class=RecordingSource)
    nodes = reserve_all(ext, ["g-0", "g-1"])
    assert len(present(ext.state.reservation("default/g")).slots()) == 1
    held = [asyncio.create_task(bind(ext, n, nodes[n])) for n in nodes]
    await asyncio.sleep(0.05)
    assert not any(t.done() for t in held)
    assert source.bindings == []
    source.apply(pod_obj("g-2", 4, group="g"))
    nodes.update(reserve_all(ext, ["g-2"]))  # claims the slot
    assert await bind(ext, "g-2", nodes["g-2"]) == ""
    assert await asyncio.gather(*held) == ["", ""]
    assert sorted(source.bindings) == sorted((f"default/{n}", nodes[n]) for n in nodes)
    assert set(source.records["default/g"].placements) == {f"default/g-{i}" for i in range(3)}
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


async def test_a_slot_never_claimed_lets_nothing_bind_and_the_barrier_gives_up() -> None:
    ext, source = await started(first_two_of_three(), barrier=0.2)
    nodes = reserve_all(ext, ["g-0", "g-1"])
    errors = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in nodes))
    assert all("only 2 of 3 member(s) reached bind" in e for e in errors)
    assert source.bindings == []
    assert ext.state.reserved_gpus() == 0
    await ext.stop()


async def test_the_debug_view_shows_unclaimed_slots() -> None:
    ext, _ = await started(first_two_of_three())
    ext.filter(pod_of(ext, "g-0"), NODES)
    members = group_view(ext, "g")["reservation"]["members"]
    assert sorted(m["state"] for m in members) == ["reserved", "reserved", "slot"]
    assert [m["pod"] for m in members if m["state"] == "slot"] == [None]
    await ext.stop()


async def test_the_plan_names_the_member_that_claimed_each_slot_once_the_gang_is_bound() -> None:
    ext, source = await started(first_two_of_three(), source_class=RecordingSource)
    nodes = reserve_all(ext, ["g-0", "g-1"])
    held = [asyncio.create_task(bind(ext, n, nodes[n])) for n in nodes]
    source.apply(pod_obj("g-2", 4, group="g"))
    nodes.update(reserve_all(ext, ["g-2"]))
    assert await bind(ext, "g-2", nodes["g-2"]) == ""
    await asyncio.gather(*held)
    placements = group_view(ext, "g")["plan"]["placements"]
    assert placements == {f"default/g-{i}": nodes[f"g-{i}"] for i in range(3)}
    await ext.stop()


async def test_a_member_created_later_claims_its_slot_unnominated_when_the_gate_binds_it() -> None:
    # The gang's first /bind binds it (completion): a nomination would only hasten its own
    # cycle, which is not needed, for a write and an update event.
    ext, source = await started(first_two_of_three(), source_class=RecordingSource)
    reserve_all(ext, ["g-0"])
    slot = present(ext.state.reservation("default/g")).slots()[0]
    source.apply(pod_obj("g-2", 4, group="g"))
    await asyncio.sleep(0)
    assert "default/g-2" not in source.nominated
    assert present(ext.state.reservation("default/g")).node_of(pod_of(ext, "g-2").uid) == slot.node
    assert ext.filter(pod_of(ext, "g-2"), NODES).feasible == (slot.node,)
    await ext.stop()


def with_host_port(obj: dict[str, Any]) -> dict[str, Any]:
    """A member only kube-scheduler may judge (a host port): never completed."""
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    return obj


@pytest.mark.parametrize(
    ("member", "complete_members"),
    [
        (with_host_port(pod_obj("g-2", 4, group="g")), True),
        (pod_obj("g-2", 4, group="g"), False),
    ],
    ids=["it-needs-its-own-cycle", "completion-off"],
)
async def test_a_member_the_gate_cannot_bind_is_nominated_to_its_slot_on_arrival(
    member: dict[str, Any], complete_members: bool
) -> None:
    # kube-scheduler tries a nominated node first and alone: the member's own cycle, which
    # it needs, filters one node, not all of them.
    ext, source = await started(
        first_two_of_three(), source_class=RecordingSource, complete_members=complete_members
    )
    reserve_all(ext, ["g-0"])
    slot = present(ext.state.reservation("default/g")).slots()[0]
    source.apply(member)
    await asyncio.sleep(0)
    assert source.nominated["default/g-2"] == slot.node
    assert present(ext.state.reservation("default/g")).node_of(pod_of(ext, "g-2").uid) == slot.node
    assert ext.filter(pod_of(ext, "g-2"), NODES).feasible == (slot.node,)
    await ext.stop()


async def test_with_nominations_off_a_member_created_later_claims_its_slot_unnominated() -> None:
    ext, source = await started(
        first_two_of_three(), source_class=RecordingSource, nominate_members=False
    )
    reserve_all(ext, ["g-0"])
    slot = present(ext.state.reservation("default/g")).slots()[0]
    source.apply(pod_obj("g-2", 4, group="g"))
    await asyncio.sleep(0)
    assert "default/g-2" not in source.nominated
    assert present(ext.state.reservation("default/g")).node_of(pod_of(ext, "g-2").uid) == slot.node
    await ext.stop()
