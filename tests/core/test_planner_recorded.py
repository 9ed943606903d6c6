"""GangPlanner.reserve_recorded: a gang held on the nodes its commit record names."""

from builders import gang, gpu_node, pod, podgroup, present
from phalanx.core.cache import ClusterState, MemberState, ReleaseCause
from phalanx.core.decisions import NotReserved, Reserved
from phalanx.core.journal import Outcome
from phalanx.core.model import Binding, GroupRef, Pod
from phalanx.core.planner import GangPlanner

KEY = "default/g"
GROUP = GroupRef.parse(KEY)
NODES = ["n1", "n2", "n3"]


def setup(*pods: Pod) -> tuple[ClusterState, GangPlanner]:
    state = ClusterState()
    for name in NODES:
        state.upsert_node(gpu_node(name))
    state.upsert_group(podgroup("g", 3))
    for p in pods:
        state.upsert_pod(p)
    return state, GangPlanner(state)


def cut_gang() -> list[Pod]:
    """Gang g of 3 × 4 GPUs a crash cut: g-0 bound to n1, g-1 and g-2 not yet."""
    members = gang("g", 3, 4)
    return [pod("g-0", 4, group="g", node="n1"), *members[1:]]


def to(*placements: tuple[Pod, str]) -> list[Binding]:
    return [Binding(p.ref, node) for p, node in placements]


def test_the_unbound_members_are_reserved_on_exactly_the_recorded_nodes() -> None:
    _, g1, g2 = members = cut_gang()
    state, planner = setup(*members)

    held = planner.reserve_recorded(GROUP, to((g1, "n3"), (g2, "n3")), now=100, lifetime=17)

    assert isinstance(held, Reserved)
    reservation = present(state.reservation(KEY))
    assert held.reservation == reservation
    assert {(m.pod_key, m.node, m.state) for m in reservation.members} == {
        ("default/g-1", "n3", MemberState.RESERVED),
        ("default/g-2", "n3", MemberState.RESERVED),
    }
    assert (reservation.reserved_at, reservation.expires_at) == (100, 117)
    assert present(state.node("n3")).reserved.gpus() == 8
    assert state.reserved_gpus() == 8


def test_the_reservation_is_journaled_and_its_event_returned_like_a_planned_one() -> None:
    _, g1, g2 = members = cut_gang()
    _, planner = setup(*members)

    held = present_reserved(planner.reserve_recorded(GROUP, to((g1, "n2"), (g2, "n3")), 0, 17))

    record = present(planner.journal.get(KEY))
    assert record.last_outcome is Outcome.COMMITTED
    assert record.last_reason == "reserved 2 member(s) on n2, n3, as its commit record names"
    assert held.event is not None
    assert planner.events == [held.event]
    assert held.event.outcome.event_reason == "Reserved"


def test_a_recorded_node_without_room_is_refused_as_a_value_and_changes_nothing() -> None:
    _, g1, g2 = members = cut_gang()
    state, planner = setup(*members, pod("other-job", 6, node="n2"))

    held = planner.reserve_recorded(GROUP, to((g1, "n2"), (g2, "n3")), now=0, lifetime=17)

    assert held == NotReserved("reservation for default/g no longer fits n2")
    assert state.reservations() == {}
    assert state.reserved_gpus() == 0
    assert planner.journal.get(KEY) is None
    assert planner.events == []


def test_a_member_gone_from_the_model_is_refused_as_a_value() -> None:
    _, g1, g2 = members = cut_gang()
    state, planner = setup(*members)
    state.remove_pod(g2.uid)

    held = planner.reserve_recorded(GROUP, to((g1, "n2"), (g2, "n3")), now=0, lifetime=17)

    assert held == NotReserved("pod default/g-2 is not in the model")
    assert state.reservations() == {}


def test_a_gang_that_holds_a_reservation_keeps_it_untouched() -> None:
    members = gang("g", 3, 4)
    state, planner = setup(*members)
    planner.filter(members[0], NODES, now=0)
    planned = present(state.reservation(KEY))
    events = planner.events

    held = planner.reserve_recorded(GROUP, to(*((p, "n3") for p in members)), now=1, lifetime=17)

    assert held == NotReserved("gang default/g already holds a reservation")
    assert state.reservation(KEY) is planned
    assert planner.events == events
    assert state.reserved_gpus() == 12


def test_the_gangs_plan_stays_shown_only_while_it_sends_members_where_the_record_does() -> None:
    members = gang("g", 3, 4)
    state, planner = setup(*members)
    planner.filter(members[0], NODES, now=0)
    planned = present(state.reservation(KEY))
    proposal = present(planner.journal.get(KEY)).proposal
    as_planned = [(p, present(planned.node_of(p.uid))) for p in members]

    state.release(KEY, ReleaseCause.RELEASED, "its binding failed")
    present_reserved(planner.reserve_recorded(GROUP, to(*as_planned), now=1, lifetime=17))
    assert present(planner.journal.get(KEY)).proposal is proposal

    state.release(KEY, ReleaseCause.RELEASED, "expired")
    # Each member one node on: every node holds as many as planned, so the hold fits.
    elsewhere = [(p, NODES[(NODES.index(n) + 1) % len(NODES)]) for p, n in as_planned]
    present_reserved(planner.reserve_recorded(GROUP, to(*elsewhere), now=2, lifetime=17))
    assert present(planner.journal.get(KEY)).proposal is None


def present_reserved(held: Reserved | NotReserved) -> Reserved:
    assert isinstance(held, Reserved), held
    return held
