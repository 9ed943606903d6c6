"""The gang transaction: every member placed on the overlay, or nothing; each policy; reasons."""

from collections.abc import Iterable
from typing import Any

import pytest

from builders import cpu_node, gang, gpu_node, pod, taint
from phalanx.core.cache import ClusterState, MemberReservation, Reservation
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.inventory import parse_placement
from phalanx.core.model import EMPTY, NVIDIA_GPU, Node, Pod, Toleration


def cluster(*nodes: Node, pods: Iterable[Pod] = ()) -> ClusterState:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for p in pods:
        state.upsert_pod(p)
    return state


def place(
    state: ClusterState, members: Iterable[Pod], policy: str = "pack", **kw: Any
) -> Placed | Unfit:
    spec = GangSpec(
        key="default/g", placement=parse_placement(policy), members=tuple(members), **kw
    )
    return place_gang(state.snapshot(), spec)


def nodes_of(result: Placed | Unfit) -> list[str]:
    assert isinstance(result, Placed), result
    return [result.assignment[p.uid] for p in result.members]


# ---- the seed's gang behaviours, restated for Kubernetes nodes -------------------------


def test_a_gang_is_fully_placed_when_one_node_fits_all() -> None:
    state = cluster(gpu_node("n1", 2))
    members = [pod("world", 0, cpu_milli=1000), *gang("agent", 2, 1)]
    assert nodes_of(place(state, members, "same-node")) == ["n1", "n1", "n1"]


def test_a_gang_that_does_not_fit_reserves_nothing() -> None:
    state = cluster(gpu_node("n1", 1))
    before = state.snapshot()
    result = place(state, gang("g", 2, 1), "same-node")
    assert isinstance(result, Unfit)
    assert state.snapshot().nodes == before.nodes


def test_a_same_node_gang_is_never_split_across_two_partial_nodes() -> None:
    state = cluster(gpu_node("n1", 1), gpu_node("n2", 1))
    result = place(state, gang("g", 2, 1), "same-node")
    assert isinstance(result, Unfit)
    assert "no node has room" in result.reason


def test_spread_places_members_on_distinct_nodes() -> None:
    state = cluster(*(cpu_node(f"n{i}") for i in range(3)))
    members = gang("g", 3, 0)
    assert sorted(nodes_of(place(state, members, "spread"))) == ["n0", "n1", "n2"]


def test_spread_fails_when_there_are_too_few_nodes() -> None:
    state = cluster(cpu_node("n1"))
    result = place(state, gang("g", 2, 0), "spread")
    assert isinstance(result, Unfit)
    assert "distinct nodes" in result.reason


def test_an_aborted_spread_leaves_every_gpu_free() -> None:
    state = cluster(gpu_node("n1", 1), gpu_node("n2", 1))
    result = place(state, gang("g", 3, 1), "spread")
    assert isinstance(result, Unfit)
    assert all(i.free.get(NVIDIA_GPU) == 1 for i in state.snapshot())


# ---- pack --------------------------------------------------------------------------


def test_pack_uses_the_fewest_nodes_and_leaves_whole_nodes_free() -> None:
    # n-half already has 4 GPUs used: a 4-GPU gang should fill it, not break a whole node.
    state = cluster(
        gpu_node("n-a"), gpu_node("n-half"), gpu_node("n-z"), pods=[pod("x", 4, node="n-half")]
    )
    assert set(nodes_of(place(state, gang("g", 4, 1)))) == {"n-half"}


def test_pack_spills_over_to_as_few_nodes_as_possible() -> None:
    state = cluster(*(gpu_node(f"n{i}") for i in range(4)))
    placed = nodes_of(place(state, gang("g", 12, 1)))
    assert len(set(placed)) == 2


def test_pack_respects_cpu_and_memory_not_only_gpus() -> None:
    state = cluster(gpu_node("small", 8, cpu=4), gpu_node("big", 8, cpu=64))
    placed = nodes_of(place(state, gang("g", 2, 1, cpu_milli=3000)))
    assert placed.count("big") >= 1
    assert placed.count("small") <= 1


def test_placement_is_deterministic_with_ties_broken_by_node_name() -> None:
    state = cluster(*(gpu_node(f"n{i}") for i in (3, 1, 2)))
    first = nodes_of(place(state, gang("g", 2, 8)))
    assert first == ["n1", "n2"]
    assert nodes_of(place(state, gang("g", 2, 8))) == first


def cpu_bound_pair() -> ClusterState:
    """A: 2 GPUs and 64 CPUs; B: 8 GPUs and 4 CPUs; both in clique c1 and zone z1."""
    labels = {"topology.kubernetes.io/zone": "z1"}
    return cluster(
        gpu_node("a", 2, cpu=64, clique="c1", labels=labels),
        gpu_node("b", 8, cpu=4, clique="c1", labels=labels),
    )


def cpu_bound_gang() -> list[Pod]:
    """Fits only as b: two-gpu + one one-gpu (3 GPUs, 4 CPUs), a: cpu-only + the other."""
    return [
        pod("cpu-only", 0, cpu_milli=3000, group="g"),
        pod("two-gpu", 2, cpu_milli=1000, group="g"),
        pod("one-gpu-0", 1, cpu_milli=3000, group="g"),
        pod("one-gpu-1", 1, cpu_milli=3000, group="g"),
    ]


@pytest.mark.parametrize(
    "policy", ["pack", "interconnect-local", "domain:topology.kubernetes.io/zone"]
)
def test_a_gang_that_fits_only_by_leaving_the_gpu_best_fit_node_to_the_cpu_heavy_is_placed(
    policy: str,
) -> None:
    # Largest first, best fit by GPUs puts two-gpu on a (no GPU left over); then the
    # one-GPU members need 6 CPUs of b's 4. Every placement puts two-gpu on b.
    state = cpu_bound_pair()
    members = cpu_bound_gang()
    placed = place(state, members, policy)
    on = dict(zip([p.name for p in members], nodes_of(placed), strict=True))
    assert on["two-gpu"] == "b"
    for node in ("a", "b"):
        used = [p.requests for p in members if on[p.name] == node]
        info = state.node(node)
        assert info is not None
        assert sum(used, EMPTY).fits_in(info.node.allocatable), (node, on)


# ---- domains -----------------------------------------------------------------------


def test_interconnect_local_keeps_the_gang_inside_one_clique() -> None:
    state = cluster(
        gpu_node("a1", clique="A"),
        gpu_node("a2", clique="A"),
        gpu_node("b1", clique="B"),
        gpu_node("b2", clique="B"),
        gpu_node("b3", clique="B"),
    )
    placed = nodes_of(place(state, gang("g", 3, 8), "interconnect-local"))
    assert set(placed) <= {"b1", "b2", "b3"}


def test_interconnect_local_prefers_the_tightest_clique_that_fits() -> None:
    state = cluster(
        gpu_node("a1", clique="A"),
        gpu_node("a2", clique="A"),
        gpu_node("b1", clique="B"),
        gpu_node("b2", clique="B"),
        gpu_node("b3", clique="B"),
    )
    assert set(nodes_of(place(state, gang("g", 2, 8), "interconnect-local"))) == {"a1", "a2"}


def test_interconnect_local_treats_a_node_outside_any_clique_as_its_own_domain() -> None:
    state = cluster(gpu_node("solo"), gpu_node("c1", 4, clique="C"), gpu_node("c2", 4, clique="C"))
    assert set(nodes_of(place(state, gang("g", 8, 1), "interconnect-local"))) == {"solo"}


def test_interconnect_local_reports_the_best_clique_when_none_fits() -> None:
    state = cluster(
        gpu_node("a1", clique="A"), gpu_node("b1", clique="B"), gpu_node("b2", 6, clique="B")
    )
    result = place(state, gang("g", 2, 8), "interconnect-local")
    assert isinstance(result, Unfit)
    assert "nvidia.com/gpu.clique=B" in result.reason
    assert "lacks 2 nvidia.com/gpu" in result.reason


def test_domain_policy_keeps_members_inside_one_label_value() -> None:
    zone = "topology.kubernetes.io/zone"
    state = cluster(
        gpu_node("z1a", labels={zone: "z1"}),
        gpu_node("z2a", labels={zone: "z2"}),
        gpu_node("z2b", labels={zone: "z2"}),
        gpu_node("nolabel"),
    )
    placed = nodes_of(place(state, gang("g", 2, 8), f"domain:{zone}"))
    assert set(placed) == {"z2a", "z2b"}


# ---- eligibility and reasons -------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_node", "reason"),
    [
        (gpu_node("bad", unschedulable=True), "cordoned"),
        (gpu_node("bad", ready=False), "not ready"),
        (
            gpu_node("bad", taints=(taint("dedicated", "infer"),)),
            "untolerated taint {dedicated=infer:NoSchedule}",
        ),
        (gpu_node("bad", gpu_memory_mib=40960), "40960 MiB"),
    ],
    ids=["cordoned", "not-ready", "tainted", "small-gpus"],
)
def test_ineligible_nodes_are_never_planned_onto_and_are_named_in_the_reason(
    bad_node: Node, reason: str
) -> None:
    state = cluster(bad_node, gpu_node("good", 4))
    members = gang("g", 2, 4, gpu_memory_mib=81000)
    result = place(state, members)
    assert isinstance(result, Unfit)
    assert reason in result.reason
    assert "1 node(s)" in result.reason


def test_a_tolerated_taint_does_not_exclude_the_node() -> None:
    state = cluster(gpu_node("t", taints=(taint("gpu", "yes"),)))
    members = gang("g", 2, 4, tolerations=(Toleration("gpu", "Equal", "yes"),))
    assert nodes_of(place(state, members)) == ["t", "t"]


def test_a_node_selector_restricts_nodes() -> None:
    state = cluster(gpu_node("a", labels={"pool": "x"}), gpu_node("b", labels={"pool": "y"}))
    members = gang("g", 2, 4, node_selector={"pool": "y"})
    assert nodes_of(place(state, members)) == ["b", "b"]


def test_reservations_of_other_gangs_are_invisible_capacity() -> None:
    state = cluster(gpu_node("n1"))
    other = pod("o", 6, group="other")
    state.upsert_pod(other)
    state.reserve(
        Reservation(
            "default/other", (MemberReservation(other.uid, other.key, "n1", other.requests),), 0, 60
        )
    )
    result = place(state, gang("g", 2, 2))
    assert isinstance(result, Unfit)
    assert "only 1 of 2" in result.reason


def test_the_unfit_reason_names_the_closest_node_and_what_it_lacks() -> None:
    state = cluster(gpu_node("n1", 6), gpu_node("n2", 2))
    result = place(state, gang("g", 1, 8))
    assert isinstance(result, Unfit)
    assert "closest: n1 lacks 2 nvidia.com/gpu" in result.reason


def test_excluded_nodes_are_not_used() -> None:
    state = cluster(gpu_node("n1"), gpu_node("n2"))
    spec_members = gang("g", 2, 4)
    placed = nodes_of(place(state, spec_members, exclude=frozenset({"n1"})))
    assert placed == ["n2", "n2"]


def test_anchored_same_node_members_pull_the_rest_to_their_node() -> None:
    state = cluster(
        gpu_node("n1"), gpu_node("n2"), pods=[pod("g-0", 2, node="n2", group="g", uid="b0")]
    )
    bound = state.pod("b0")
    rest = gang("g", 2, 2)
    placed = nodes_of(place(state, rest, "same-node", anchors={"b0": "n2"}, anchor_pods=(bound,)))
    assert placed == ["n2", "n2"]


def test_gpu_less_members_keep_off_gpu_nodes_when_cpu_nodes_have_room() -> None:
    state = cluster(gpu_node("gpu-a"), cpu_node("cpu-a"), cpu_node("cpu-b"))
    members = gang("g", 2, 0, cpu_milli=2000)
    assert set(nodes_of(place(state, members))) <= {"cpu-a", "cpu-b"}


# ---- members that must share a node (a shared ResourceClaim) ---------------------------


def test_members_bound_together_share_a_node_even_under_spread() -> None:
    state = cluster(gpu_node("n1", 8), gpu_node("n2", 8), gpu_node("n3", 8))
    a, b, c = gang("g", 3, 2)
    assert len(set(nodes_of(place(state, [a, b, c], "spread")))) == 3
    result = place(state, [a, b, c], "spread", together=(frozenset({a.uid, c.uid}),))
    assert isinstance(result, Placed)
    assert result.assignment[a.uid] == result.assignment[c.uid] != result.assignment[b.uid]


def test_members_bound_together_that_fit_no_single_node_do_not_fit_at_all() -> None:
    state = cluster(gpu_node("n1", 8), gpu_node("n2", 8))
    a, b = gang("g", 2, 6)
    assert isinstance(place(state, [a, b]), Placed)
    assert isinstance(place(state, [a, b], together=(frozenset({a.uid, b.uid}),)), Unfit)


def test_together_groups_linked_through_a_member_become_one_unit() -> None:
    state = cluster(gpu_node("n1", 8), gpu_node("n2", 8))
    a, b, c = gang("g", 3, 2)
    together = (frozenset({a.uid, b.uid}), frozenset({b.uid, c.uid}))
    result = place(state, [a, b, c], "spread", together=together)
    assert len(set(nodes_of(result))) == 1
