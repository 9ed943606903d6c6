"""The gang transaction's last-resort search: exhaustive within its budget, cut by symmetry."""

from collections.abc import Sequence

from builders import cpu_node, gpu_node, pod
from phalanx.core.cache import ClusterState
from phalanx.core.gang_search import Budget, search
from phalanx.core.gang_trial import Trial, Unit
from phalanx.core.model import EMPTY, Node, Pod
from phalanx.core.snapshot import Overlay, Snapshot


def snapshot(*nodes: Node) -> Snapshot:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    return state.snapshot()


def units(snap: Snapshot, *members: Pod, classes: Sequence[int] | None = None) -> list[Unit]:
    everywhere = frozenset(snap.names)
    return [
        Unit(
            index=i,
            members=(p,),
            requests=p.requests,
            eligible=everywhere,
            ids=frozenset(),
            relational=False,
            cls=classes[i] if classes else i,
        )
        for i, p in enumerate(members)
    ]


def run(
    snap: Snapshot, order: Sequence[Unit], budget: Budget, *, spread: bool = False
) -> tuple[dict[int, str] | None, Trial]:
    trial = Trial(Overlay(snap), {})
    found = search(
        order,
        snap.names,
        trial,
        budget,
        candidates=lambda unit, nodes: [n for n in nodes if n in unit.eligible],
        preference=lambda unit, name, free, in_use: (free.gpus(), name),
        spread=spread,
    )
    return found, trial


def cpu_bound_case() -> tuple[Snapshot, list[Unit]]:
    """a: 2 GPUs, 64 CPUs; b: 8 GPUs, 4 CPUs. Only two-gpu -> b places all four."""
    snap = snapshot(gpu_node("a", 2, cpu=64), gpu_node("b", 8, cpu=4))
    order = units(
        snap,
        pod("two-gpu", 2, cpu_milli=1000),
        pod("one-gpu-0", 1, cpu_milli=3000),
        pod("one-gpu-1", 1, cpu_milli=3000),
        pod("cpu-only", 0, cpu_milli=3000),
        classes=[0, 1, 1, 2],
    )
    return snap, order


def test_the_search_backs_out_of_a_best_fit_that_leaves_later_units_no_room() -> None:
    snap, order = cpu_bound_case()
    found, trial = run(snap, order, Budget())
    assert found is not None
    assert found[0] == "b"
    for node in ("a", "b"):
        placed = [u.requests for u in order if found[u.index] == node]
        assert sum(placed, EMPTY).fits_in(snap.nodes[node].node.allocatable)
    # A success stays recorded in the trial.
    assert sum(trial.used.values()) == len(order)
    assert trial.overlay.free("b").gpus() == 8 - sum(
        u.requests.gpus() for u in order if found[u.index] == "b"
    )


def test_a_search_that_finds_nothing_leaves_the_trial_as_it_was() -> None:
    # Four nodes of 4 CPUs hold one 3-CPU unit each; the fifth fits nowhere.
    snap = snapshot(*(cpu_node(f"n{i}", cpu=4) for i in range(4)))
    order = units(snap, *(pod(f"m-{i}", 0, cpu_milli=3000) for i in range(5)))
    found, trial = run(snap, order, Budget())
    assert found is None
    assert trial.overlay.touched == {}
    assert trial.used == {}


def test_nodes_with_equal_free_capacity_and_eligibility_are_tried_once() -> None:
    # Five units of different classes, four equal nodes that take one pod each: each level
    # tries one node (the first that fits), so one pass for the room and five for the
    # options, not 4 + 4*4 + 4*3*4 + ... visits.
    snap = snapshot(*(cpu_node(f"n{i}", pods=1) for i in range(4)))
    order = units(snap, *(pod(f"m-{i}", 0) for i in range(5)))
    budget = Budget(1000)
    found, _ = run(snap, order, budget)
    assert found is None
    assert 1000 - budget.left == 4 + 5 * 4


def test_the_search_backs_out_as_soon_as_what_is_left_cannot_hold_the_rest() -> None:
    # After the first 3-CPU unit each node is left 1 CPU, too little for any unit after
    # it, so the 9 CPUs the rest need do not fit in the 8 CPUs of the nodes that could
    # still hold one: no second level is scanned.
    snap = snapshot(*(cpu_node(f"n{i}", cpu=4) for i in range(3)))
    order = units(snap, *(pod(f"m-{i}", 0, cpu_milli=3000) for i in range(4)))
    budget = Budget(1000)
    found, _ = run(snap, order, budget)
    assert found is None
    assert 1000 - budget.left == 3 + 3


def test_units_of_one_class_take_nodes_in_domain_order() -> None:
    # Three interchangeable units on three equal nodes: one placement is tried, no
    # permutation of it.
    snap = snapshot(*(cpu_node(f"n{i}", cpu=4) for i in range(3)))
    order = units(snap, *(pod(f"m-{i}", 0, cpu_milli=3000) for i in range(3)), classes=[0] * 3)
    found, _ = run(snap, order, Budget())
    assert found == {0: "n0", 1: "n1", 2: "n2"}


def test_the_search_gives_up_within_its_budget() -> None:
    snap, order = cpu_bound_case()
    budget = Budget(len(order) * 2)  # enough to begin, not to back out of a onto b
    found, trial = run(snap, order, budget)
    assert found is None
    assert budget.left == 0
    assert trial.used == {}


def test_a_search_too_large_for_its_budget_is_not_begun() -> None:
    snap, order = cpu_bound_case()
    budget = Budget(len(order) * 2 - 1)
    found, _ = run(snap, order, budget)
    assert found is None
    assert budget.left == len(order) * 2 - 1


def test_spread_keeps_each_unit_off_the_nodes_already_used() -> None:
    snap = snapshot(cpu_node("x", cpu=8), cpu_node("y", cpu=8))
    order = units(snap, pod("m-0", 0, cpu_milli=1000), pod("m-1", 0, cpu_milli=1000))
    found, _ = run(snap, order, Budget(), spread=True)
    assert found == {0: "x", 1: "y"}
