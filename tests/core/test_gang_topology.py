"""The gang transaction by topology: required and preferred levels, slices, tightest fit, texts."""

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from builders import CLIQUE, HOSTNAME, LEAF, SPINE, gang, gpu_node, nvl72, pod, present, rack_node
from phalanx.core.cache import ClusterState
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.inventory import parse_placement
from phalanx.core.model import Node, Pod, SubGroupPolicy
from phalanx.core.topology import (
    CLUSTER,
    DEFAULT_TOPOLOGIES,
    GangTopology,
    SubGroupLevel,
    TaskPreferenceLevel,
    TaskSetLevel,
    build_index,
)
from phalanx.core.topology_usage import free_domains

DEFAULT = DEFAULT_TOPOLOGIES.default
SPINE_LEVEL, LEAF_LEVEL = DEFAULT.levels.index(SPINE), DEFAULT.levels.index(LEAF)
CLIQUE_LEVEL = DEFAULT.levels.index(CLIQUE)


def cluster(nodes: Iterable[Node], busy: Iterable[tuple[str, int]] = ()) -> ClusterState:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for i, (node, gpus) in enumerate(busy):
        state.upsert_pod(pod(f"busy-{i}", gpus, node=node))
    return state


def topology(
    required: str | None = None,
    preferred: str | None = None,
    slices: tuple[int, str] | None = None,
    layers: tuple[tuple[int, str], ...] = (),
) -> GangTopology:
    size, level = slices or (0, None)
    return GangTopology(
        DEFAULT,
        required=DEFAULT.level(required) if required else None,
        preferred=DEFAULT.level(preferred) if preferred else None,
        slice_size=size,
        slice_level=DEFAULT.level(level) if level else None,
        slice_layers=tuple((n, DEFAULT.levels.index(lv)) for n, lv in layers),
    )


def place(
    state: ClusterState,
    members: Iterable[Pod],
    policy: str = "pack",
    *,
    index: bool = True,
    **kw: Any,
) -> Placed | Unfit:
    snapshot = state.snapshot()
    spec = GangSpec(
        key="default/g",
        placement=parse_placement(policy),
        members=tuple(members),
        anchors=kw.pop("anchors", {}),
        anchor_pods=kw.pop("anchor_pods", ()),
        topology=topology(**kw),
        index=build_index(DEFAULT, (i.node for i in snapshot)) if index else None,
    )
    return place_gang(snapshot, spec)


def nodes_of(result: Placed | Unfit) -> list[str]:
    assert isinstance(result, Placed), result
    return [result.assignment[p.uid] for p in result.members]


def label_values(state: ClusterState, result: Placed | Unfit, key: str) -> set[str | None]:
    return {present(state.node(n)).node.labels.get(key) for n in nodes_of(result)}


def broken_clique_cluster() -> ClusterState:
    """16 NVL72 cliques; clique c05 (leaf l1) has 6 of its 18 nodes in use (48 GPUs free)."""
    return cluster(nvl72(), busy=[(f"c05-n{i:02d}", 4) for i in range(6)])


# ---- required ------------------------------------------------------------------------------


def test_a_required_level_keeps_the_whole_gang_inside_one_domain_of_it() -> None:
    state = cluster(nvl72(4, per_clique=4, per_leaf=2))  # 2 leaves of 32 GPUs
    result = place(state, gang("g", 6, 4), required=LEAF)
    assert len(label_values(state, result, LEAF)) == 1
    assert isinstance(result, Placed)
    assert result.level == LEAF
    assert result.domain == f"{LEAF}=l0"


def test_a_required_level_that_no_domain_can_hold_reserves_nothing_and_names_the_best() -> None:
    state = cluster(nvl72(4, per_clique=4, per_leaf=2))
    before = state.snapshot().nodes
    result = place(state, gang("g", 9, 4), required=LEAF)
    assert isinstance(result, Unfit)
    assert result.reason.startswith(
        "cannot place 9 member(s) of gang default/g ({cpu: 9, memory: 36Gi, nvidia.com/gpu: 36}"
        f" in all, placement pack, required {LEAF}): no single {LEAF} domain fits; "
        f"best: {LEAF}=l0 (only 8 of 9 member(s)"
    )
    assert state.snapshot().nodes == before


def test_a_required_level_with_no_room_anywhere_names_the_closest_node() -> None:
    nodes = nvl72(2, per_clique=2, per_leaf=1)
    state = cluster(nodes, busy=[(n.name, 4) for n in nodes])
    result = place(state, gang("g", 2, 4), required=CLIQUE)
    assert isinstance(result, Unfit)
    assert result.reason.endswith(
        f"required {CLIQUE}): no single {CLIQUE} domain fits; best: {CLIQUE}=c00 (no node has "
        "room for 2 member(s) needing {cpu: 1, memory: 4Gi, nvidia.com/gpu: 4}; closest: "
        "c00-n00 lacks 4 nvidia.com/gpu)"
    )


def test_a_gang_with_no_eligible_node_says_so_with_the_reasons() -> None:
    nodes = [rack_node(f"n{i}", 4, clique="A", unschedulable=True) for i in range(2)]
    result = place(cluster(nodes), gang("g", 2, 4), preferred=CLIQUE)
    assert isinstance(result, Unfit)
    assert result.reason.endswith(": no node is eligible; 2 node(s) were cordoned (unschedulable)")


def test_a_small_gang_with_a_required_level_lands_in_the_tightest_domain_that_fits() -> None:
    state = broken_clique_cluster()
    result = place(state, gang("g", 4, 4), required=CLIQUE)
    assert label_values(state, result, CLIQUE) == {"c05"}


def test_a_required_clique_with_a_lone_node_treats_it_as_its_own_domain() -> None:
    state = cluster(
        [rack_node("solo", 8), rack_node("a1", 4, clique="A"), rack_node("a2", 4, clique="A")]
    )
    result = place(state, gang("g", 8, 1), required=CLIQUE)
    assert set(nodes_of(result)) == {"solo"}


@pytest.mark.parametrize("required", [CLIQUE, LEAF], ids=["clique", "leaf"])
def test_a_gang_fits_a_required_domain_by_leaving_its_gpu_best_fit_node_to_the_cpu_heavy(
    required: str,
) -> None:
    # Inside c1, largest first and best fit by GPUs puts two-gpu on a (no GPU left); the
    # one-GPU members then need 6 CPUs of b's 4. Only two-gpu -> b places the gang; the
    # lone node c (clique c2, leaf l1) has CPUs for none of it.
    state = cluster(
        [
            rack_node("a", 2, cpu=64, spine="s0", leaf="l0", clique="c1"),
            rack_node("b", 8, cpu=4, spine="s0", leaf="l0", clique="c1"),
            rack_node("c", 8, cpu=1, spine="s0", leaf="l1", clique="c2"),
        ]
    )
    members = [
        pod("cpu-only", 0, cpu_milli=3000, group="g"),
        pod("two-gpu", 2, cpu_milli=1000, group="g"),
        pod("one-gpu-0", 1, cpu_milli=3000, group="g"),
        pod("one-gpu-1", 1, cpu_milli=3000, group="g"),
    ]
    result = place(state, members, required=required)
    on = dict(zip([p.name for p in members], nodes_of(result), strict=True))
    assert on["two-gpu"] == "b"
    assert set(on.values()) == {"a", "b"}
    assert label_values(state, result, CLIQUE) == {"c1"}


# ---- preferred and the fallback order ------------------------------------------------------


def test_a_preferred_level_is_honoured_when_a_domain_of_it_fits() -> None:
    state = broken_clique_cluster()
    result = place(state, gang("g", 12, 4), preferred=CLIQUE)
    assert label_values(state, result, CLIQUE) == {"c05"}  # the broken clique has 12 nodes
    assert isinstance(result, Placed)
    assert result.level == CLIQUE
    assert result.explanation == f"preferred {CLIQUE}: placed within {CLIQUE}=c05"


def test_a_preferred_level_falls_back_one_level_wider_and_says_why() -> None:
    state = broken_clique_cluster()
    result = place(state, gang("g", 20, 4), preferred=CLIQUE)
    assert len(label_values(state, result, LEAF)) == 1
    assert isinstance(result, Placed)
    assert result.level == LEAF
    assert result.explanation == (
        f"preferred {CLIQUE}: no clique has 80 free GPUs; best: {CLIQUE}=c00 with 72 free; "
        f"placed within {LEAF}=l1"
    )


def test_the_fallback_goes_up_every_level_to_the_whole_cluster() -> None:
    # Cliques of 8 GPUs, leaves of 16, one spine of 32 with 4 in use: 7 four-GPU members fit
    # in the spine only.
    state = cluster(nvl72(4, per_clique=2, per_leaf=2), busy=[("c00-n00", 4)])
    result = place(state, gang("g", 7, 4), preferred=HOSTNAME)
    assert isinstance(result, Placed)
    assert result.level == SPINE
    assert result.explanation == (
        f"preferred {HOSTNAME}: no hostname has 28 free GPUs; best: {HOSTNAME}=c00-n01 with "
        f"4 free; no clique either; no leaf either; placed within {SPINE}=s0"
    )


def test_a_preferred_gang_beyond_any_spine_spreads_across_the_cluster() -> None:
    nodes = [*nvl72(1, per_clique=2, spine="s0"), *nvl72(1, per_clique=2, spine="s1")]
    nodes = [
        rack_node(f"{n.name}-{i}", 4, spine=f"s{i}", leaf=f"l{i}", clique=f"c{i}")
        for i, n in enumerate(nodes)
    ]
    state = cluster(nodes)
    result = place(state, gang("g", 4, 4), preferred=CLIQUE)
    assert isinstance(result, Placed)
    assert result.level == ""
    assert "placed within the cluster, across 4 spine domain(s)" in result.explanation


def test_a_preferred_level_never_falls_back_past_the_required_one() -> None:
    state = cluster(nvl72(4, per_clique=2, per_leaf=2))
    result = place(state, gang("g", 3, 4), preferred=CLIQUE, required=LEAF)
    assert isinstance(result, Placed)
    assert result.level == LEAF
    too_big = place(state, gang("g", 5, 4), preferred=CLIQUE, required=LEAF)
    assert isinstance(too_big, Unfit)
    assert f"no single {LEAF} domain fits" in too_big.reason


def test_a_domain_with_the_gpus_in_all_but_not_per_node_is_named_as_the_best_try() -> None:
    # Clique A has 8 free GPUs, 2 on each node; lone clique B has one node with 4 free.
    nodes = [rack_node(f"a{i}", 4, leaf="l", clique="A") for i in range(4)]
    state = cluster(
        [*nodes, rack_node("b0", 4, leaf="l", clique="B")], [(f"a{i}", 2) for i in range(4)]
    )
    members = [pod("g-0", 4, group="g"), pod("g-1", 2, group="g"), pod("g-2", 2, group="g")]
    result = place(state, members, preferred=CLIQUE)
    assert isinstance(result, Placed)
    assert result.level == LEAF
    assert result.explanation == (
        f"preferred {CLIQUE}: no clique could hold every member; best: {CLIQUE}=A (no node has "
        "room for 1 member(s) needing {cpu: 1, memory: 4Gi, nvidia.com/gpu: 4}; closest: a0 "
        f"lacks 2 nvidia.com/gpu); placed within {LEAF}=l"
    )


# ---- tightest fit keeps whole domains free ------------------------------------------------


def test_small_gangs_fill_a_broken_clique_before_breaking_a_whole_one() -> None:
    state = broken_clique_cluster()
    for i in range(3):  # 3 gangs x 4 nodes = the 12 free nodes of c05
        result = place(state, gang(f"g{i}", 4, 4), preferred=CLIQUE)
        assert label_values(state, result, CLIQUE) == {"c05"}
        assert isinstance(result, Placed)
        for p in result.members:
            state.upsert_pod(pod(f"{p.name}-bound", 4, node=result.assignment[p.uid]))
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    assert free_domains(snapshot, index)[2].free == 15  # only c05 was ever broken


def test_an_unconstrained_gang_given_an_index_prefers_nodes_in_broken_cliques() -> None:
    state = cluster(
        [rack_node(name, 4, clique=name[0].upper()) for name in ("a1", "a2", "b1", "b2")],
        busy=[("b1", 4)],
    )
    assert nodes_of(place(state, gang("g", 1, 4))) == ["b2"]
    # Without an index the tie between a1, a2 and b2 falls to the name, as before.
    spec = GangSpec("default/g", parse_placement("pack"), tuple(gang("g", 1, 4)))
    assert nodes_of(place_gang(state.snapshot(), spec)) == ["a1"]


def test_a_legacy_policy_still_reports_the_level_it_achieved_given_an_index() -> None:
    state = cluster(nvl72(2, per_clique=2, per_leaf=1))
    result = place(state, gang("g", 2, 4), "interconnect-local")
    assert isinstance(result, Placed)
    assert result.domain == f"{CLIQUE}=c00"
    assert result.level == CLIQUE
    assert result.explanation == ""


# ---- slices -------------------------------------------------------------------------------


def ranked_gang(size: int, gpus: int = 4) -> list[Pod]:
    return [
        pod(f"w-{i}", gpus, group="g", labels={"batch.kubernetes.io/job-completion-index": str(i)})
        for i in range(size)
    ]


def slices_of(state: ClusterState, result: Placed | Unfit, size: int) -> list[set[str]]:
    assert isinstance(result, Placed), result
    by_rank = sorted(result.members, key=lambda p: int(p.name.split("-")[1]))
    cliques = [present(state.node(result.assignment[p.uid])).node.labels[CLIQUE] for p in by_rank]
    return [set(cliques[i : i + size]) for i in range(0, len(cliques), size)]


def test_every_slice_of_consecutive_members_lands_inside_one_domain_of_the_slice_level() -> None:
    # Cliques of 3 nodes: slices of 2 four-GPU members can never share a clique with a third.
    state = cluster(nvl72(4, per_clique=3, per_leaf=2))
    result = place(state, ranked_gang(6), slices=(2, CLIQUE))
    assert all(len(s) == 1 for s in slices_of(state, result, 2))
    assert isinstance(result, Placed)
    assert result.explanation.endswith("every 2 consecutive members within one clique")


def test_slices_keep_to_the_domains_the_gang_already_uses() -> None:
    state = cluster(nvl72(4, per_clique=2, per_leaf=2))
    result = place(state, ranked_gang(4), slices=(2, CLIQUE))
    assert len(label_values(state, result, LEAF)) == 1


def test_slices_fill_the_tightest_cliques_first() -> None:
    state = cluster(nvl72(3, per_clique=4, per_leaf=3), busy=[("c01-n00", 4), ("c01-n01", 4)])
    result = place(state, ranked_gang(2), slices=(2, CLIQUE))
    assert label_values(state, result, CLIQUE) == {"c01"}


def test_slices_follow_the_operators_ranks_not_the_pod_names() -> None:
    state = cluster(nvl72(2, per_clique=2, per_leaf=2))
    members = [
        pod(name, 4, group="g", labels={"apps.kubernetes.io/pod-index": str(rank)})
        for name, rank in (("a", 0), ("b", 2), ("c", 1), ("d", 3))
    ]
    result = place(state, members, slices=(2, CLIQUE))
    assert isinstance(result, Placed)
    where = {
        p.name: present(state.node(result.assignment[p.uid])).node.labels[CLIQUE] for p in members
    }
    assert where["a"] == where["c"]
    assert where["b"] == where["d"]


# ---- multi-layer slices (Kueue's podset-slice-required-topology-constraints) ----------


def leaf_pair(busy_second_clique: bool = True) -> ClusterState:
    """Leaf l0: clique c00 (two 4-GPU nodes) and c01 (two, busy); leaf l1: cliques c02 and
    c03 of three nodes each. c00 is the tightest clique a slice of two fits in."""
    nodes = [
        rack_node(f"c{c:02d}-n{n:02d}", 4, spine="s0", leaf=f"l{c // 2}", clique=f"c{c:02d}")
        for c, count in ((0, 2), (1, 2), (2, 3), (3, 3))
        for n in range(count)
    ]
    busy = [("c01-n00", 4), ("c01-n01", 4)] if busy_second_clique else []
    return cluster(nodes, busy)


def test_each_outer_slice_lands_inside_one_domain_of_its_layer_around_its_inner_slices() -> None:
    state = leaf_pair()
    # Slices of 2 alone: the first takes the tightest clique, c00; the second then has no
    # room left in leaf l0 and goes to l1.
    alone = place(state, ranked_gang(4), slices=(2, CLIQUE))
    assert label_values(state, alone, LEAF) == {"l0", "l1"}
    # Inside slices of 4 per leaf, both go to l1, each in one clique.
    result = place(state, ranked_gang(4), slices=(2, CLIQUE), layers=((4, LEAF),))
    assert label_values(state, result, LEAF) == {"l1"}
    assert all(len(s) == 1 for s in slices_of(state, result, 2))
    assert isinstance(result, Placed)
    assert result.explanation.endswith(
        "every 4 consecutive members within one leaf; every 2 consecutive members within one clique"
    )


def test_outer_slices_by_rank_may_take_different_domains_of_their_layer() -> None:
    # 8 members, slices of 4 per leaf around slices of 2 per clique: leaf l0 holds 16 GPUs
    # (c00, c01), leaf l1 24; one outer slice in each, every inner one in one clique.
    state = leaf_pair(busy_second_clique=False)
    result = place(state, ranked_gang(8), slices=(2, CLIQUE), layers=((4, LEAF),))
    assert isinstance(result, Placed), result
    by_rank = sorted(result.members, key=lambda p: int(p.name.split("-")[1]))
    leaves = [present(state.node(result.assignment[p.uid])).node.labels[LEAF] for p in by_rank]
    assert len(set(leaves[:4])) == 1
    assert len(set(leaves[4:])) == 1
    assert all(len(s) == 1 for s in slices_of(state, result, 2))


def test_an_outer_slice_that_fits_no_domain_of_its_layer_is_named() -> None:
    state = leaf_pair()
    result = place(state, ranked_gang(8), slices=(2, CLIQUE), layers=((8, LEAF),))
    assert isinstance(result, Unfit)
    assert "leaf slice 1 of 1 (w-0..w-7)" in result.reason
    assert "fits in no leaf" in result.reason


# ---- Volcano's subgroups (spec.subGroupPolicy) ----------------------------------------

TASK_SPEC, PARTITION = "volcano.sh/task-spec", "volcano.sh/partition-id"
PARTITIONS = SubGroupPolicy(
    "worker", match_labels=((TASK_SPEC, "worker"),), keys=(PARTITION,), required="tier:1"
)


def partitioned(count: int, per: int) -> list[Pod]:
    """`count` four-GPU workers, `per` to a partition, as Volcano's Job controller labels them."""
    return [
        pod(f"w-{i}", 4, group="g", labels={TASK_SPEC: "worker", PARTITION: str(i // per)})
        for i in range(count)
    ]


def subgrouped(*levels: SubGroupLevel) -> GangTopology:
    return GangTopology(DEFAULT, subgroups=levels)


def cliques_by_partition(state: ClusterState, result: Placed | Unfit) -> dict[str, set[str]]:
    assert isinstance(result, Placed), result
    found: dict[str, set[str]] = {}
    for p in result.members:
        clique = present(state.node(result.assignment[p.uid])).node.labels[CLIQUE]
        found.setdefault(p.labels[PARTITION], set()).add(clique)
    return found


def test_each_subgroup_lands_inside_one_domain_of_its_policys_level() -> None:
    # Cliques of three nodes: packed, four members would fill one clique and spill the
    # fourth over; partitions of two each keep to one clique.
    state = cluster(nvl72(3, per_clique=3, per_leaf=3))
    members = partitioned(4, 2)
    packed = place(state, members)
    assert len(label_values(state, packed, CLIQUE)) == 2
    result = place_tasks(state, members, subgrouped(SubGroupLevel(PARTITIONS, CLIQUE_LEVEL, None)))
    assert all(len(c) == 1 for c in cliques_by_partition(state, result).values())
    assert isinstance(result, Placed)
    assert result.explanation.endswith("each subgroup of policy worker within one clique")


def test_a_subgroup_that_fits_no_domain_of_its_level_is_named() -> None:
    state = cluster(nvl72(2, per_clique=3, per_leaf=2))
    result = place_tasks(
        state, partitioned(8, 4), subgrouped(SubGroupLevel(PARTITIONS, CLIQUE_LEVEL, None))
    )
    assert isinstance(result, Unfit)
    assert "subgroup worker-0 fits in no clique" in result.reason


def test_a_soft_subgroup_keeps_to_one_domain_when_it_can_and_spreads_when_it_cannot() -> None:
    soft = SubGroupLevel(replace(PARTITIONS, required="", preferred="tier:1"), None, CLIQUE_LEVEL)
    state = cluster(nvl72(3, per_clique=3, per_leaf=3))
    kept = place_tasks(state, partitioned(4, 2), subgrouped(soft))
    assert all(len(c) == 1 for c in cliques_by_partition(state, kept).values())
    # A partition of four in cliques of three: it cannot, and is placed anyway.
    spread = place_tasks(state, partitioned(4, 4), subgrouped(soft))
    assert len(cliques_by_partition(state, spread)["0"]) == 2


def test_members_in_no_subgroup_are_placed_around_the_subgroups() -> None:
    state = cluster(nvl72(3, per_clique=3, per_leaf=3))
    members = [*partitioned(4, 2), pod("ps-0", 4, group="g", labels={TASK_SPEC: "ps"})]
    result = place_tasks(state, members, subgrouped(SubGroupLevel(PARTITIONS, CLIQUE_LEVEL, None)))
    assert isinstance(result, Placed), result
    assert {p.name for p in result.members} == {p.name for p in members}
    by_partition = cliques_by_partition(
        state, replace(result, members=tuple(p for p in result.members if PARTITION in p.labels))
    )
    assert all(len(c) == 1 for c in by_partition.values())


def test_a_slice_that_fits_no_domain_of_its_level_is_named() -> None:
    state = cluster(nvl72(2, per_clique=3, per_leaf=2))
    result = place(state, ranked_gang(8), slices=(4, CLIQUE))
    assert isinstance(result, Unfit)
    assert "slice 1 of 2 (w-0..w-3) fits in no clique" in result.reason


def test_slices_inside_a_required_domain() -> None:
    state = cluster(nvl72(4, per_clique=2, per_leaf=2))
    result = place(state, ranked_gang(4), required=LEAF, slices=(2, CLIQUE))
    assert len(label_values(state, result, LEAF)) == 1
    assert all(len(s) == 1 for s in slices_of(state, result, 2))


def test_a_slice_with_a_bound_member_joins_its_clique() -> None:
    state = cluster(nvl72(2, per_clique=3, per_leaf=2))
    members = ranked_gang(4)
    bound = members[2]
    state.upsert_pod(pod("w-2-bound", 4, node="c01-n02"))
    result = place(
        state,
        [members[0], members[1], members[3]],
        anchors={bound.uid: "c01-n02"},
        anchor_pods=(bound,),
        slices=(2, CLIQUE),
    )
    assert isinstance(result, Placed)
    assert present(state.node(result.assignment[members[3].uid])).node.labels[CLIQUE] == "c01"


# ---- anchors and odd labels -----------------------------------------------------------------


def test_an_extra_member_joins_the_required_domain_of_the_bound_ones() -> None:
    state = cluster(nvl72(2, per_clique=2, per_leaf=1), busy=[("c01-n00", 4)])
    extra = pod("g-2", 4, group="g")
    result = place(state, [extra], anchors={"b0": "c01-n00"}, required=CLIQUE)
    assert nodes_of(result) == ["c01-n01"]


def test_bound_members_spanning_two_domains_of_the_required_level_are_named() -> None:
    state = cluster(nvl72(2, per_clique=2, per_leaf=1))
    result = place(
        state,
        [pod("g-2", 4, group="g")],
        anchors={"b0": "c00-n00", "b1": "c01-n00"},
        required=CLIQUE,
    )
    assert isinstance(result, Unfit)
    assert f"bound members already span more than one {CLIQUE} domain" in result.reason


def test_a_node_with_inconsistent_labels_is_its_own_domain_when_placing() -> None:
    nodes = [rack_node(f"n{i}", 4, spine="s", leaf="l1", clique="c7") for i in range(2)]
    nodes.append(rack_node("odd", 8, spine="s", leaf="l2", clique="c7"))
    state = cluster(nodes)
    result = place(state, gang("g", 3, 4), required=CLIQUE)
    assert isinstance(result, Unfit)  # 12 GPUs: n0+n1 hold 8, "odd" alone is another clique
    result = place(state, gang("g", 2, 4), required=CLIQUE)
    assert set(nodes_of(result)) in ({"odd"}, {"n0", "n1"})


def test_the_index_is_built_from_the_snapshot_when_none_is_given() -> None:
    state = cluster(nvl72(2, per_clique=2, per_leaf=1))
    with_index = place(state, gang("g", 2, 4), required=CLIQUE)
    without = place(state, gang("g", 2, 4), required=CLIQUE, index=False)
    assert nodes_of(with_index) == nodes_of(without)


@pytest.mark.parametrize("policy", ["spread", "same-node"], ids=["spread", "same-node"])
def test_topology_combines_with_spread_and_same_node(policy: str) -> None:
    state = cluster(nvl72(2, per_clique=3, per_leaf=1))
    result = place(state, gang("g", 2, 2), policy, required=CLIQUE)
    nodes = nodes_of(result)
    assert len(label_values(state, result, CLIQUE)) == 1
    assert len(set(nodes)) == (2 if policy == "spread" else 1)


def test_ineligible_nodes_are_counted_in_a_topology_unfit_reason() -> None:
    nodes = [gpu_node("cordoned", 4, clique="A", unschedulable=True), rack_node("a", 4, clique="A")]
    result = place(cluster(nodes), gang("g", 2, 4), required=CLIQUE)
    assert isinstance(result, Unfit)
    assert "1 node(s) were cordoned (unschedulable)" in result.reason


def shaped_gang(*gpus: int) -> list[Pod]:
    """Members w-0.. ranked in order, with these GPU requests."""
    return [
        pod(f"w-{i}", g, group="g", labels={"batch.kubernetes.io/job-completion-index": str(i)})
        for i, g in enumerate(gpus)
    ]


def one_clique(*free: int) -> ClusterState:
    """One clique c00 (leaf l0) of eight-GPU nodes c00-n00.. with these GPUs free."""
    nodes = [
        rack_node(f"c00-n{i:02d}", 8, spine="s0", leaf="l0", clique="c00") for i in range(len(free))
    ]
    busy = [(f"c00-n{i:02d}", 8 - f) for i, f in enumerate(free) if f < 8]
    return cluster(nodes, busy)


def test_slices_that_fit_their_clique_only_packed_together_are_placed() -> None:
    # Slice 1 alone would put its 1-GPU member beside its 4-GPU one on c00-n00, leaving no
    # node for slice 2's 4-GPU member; both slices together fit exactly.
    state = one_clique(8, 2)
    members = shaped_gang(1, 4, 1, 4)
    result = place(state, members, required=LEAF, slices=(2, CLIQUE))
    assert isinstance(result, Placed)
    where = {p.name: result.assignment[p.uid] for p in members}
    assert where == {"w-0": "c00-n01", "w-1": "c00-n00", "w-2": "c00-n01", "w-3": "c00-n00"}


def test_slices_of_one_member_constrain_nothing() -> None:
    state = one_clique(6, 4)
    members = shaped_gang(2, 4, 4)
    sliced = place(state, members, required=LEAF, slices=(1, HOSTNAME))
    assert isinstance(sliced, Placed)
    plain = place(state, members, required=LEAF)
    assert isinstance(plain, Placed)
    assert sliced.assignment == plain.assignment


def test_the_largest_slice_goes_first_so_a_smaller_one_cannot_take_its_only_domain() -> None:
    # Slice 1 alone fits c00-n00 tighter, but slice 2 needs that node's CPUs.
    nodes = [
        rack_node("c00-n00", 4, spine="s0", leaf="l0", clique="c00", cpu=64),
        rack_node("c00-n01", 8, spine="s0", leaf="l0", clique="c00", cpu=4),
    ]
    members = [
        pod(f"w-{i}", 2, cpu_milli=cpu, group="g", labels={"apps.kubernetes.io/pod-index": str(i)})
        for i, cpu in enumerate((1000, 1000, 4000, 4000))
    ]
    result = place(cluster(nodes), members, slices=(2, HOSTNAME))
    assert nodes_of(result) == ["c00-n01", "c00-n01", "c00-n00", "c00-n00"]


# ---- slices by task, each task at a level of its own ----------------------------------------


def by_task(required: str | None = None, **levels: str) -> GangTopology:
    """Tasks (KAI subgroups) each inside one domain of its level: `prefill=CLIQUE`."""
    return GangTopology(
        DEFAULT,
        required=DEFAULT.level(required) if required else None,
        slice_tasks=frozenset(levels),
        slice_noun="subgroup",
        task_levels=tuple(
            sorted((task, present(DEFAULT.level(key))) for task, key in levels.items())
        ),
    )


def place_tasks(
    state: ClusterState, members: Iterable[Pod], topology: GangTopology, **kw: Any
) -> Placed | Unfit:
    snapshot = state.snapshot()
    spec = GangSpec(
        key="default/g",
        placement=parse_placement("pack"),
        members=tuple(members),
        topology=topology,
        index=build_index(DEFAULT, (i.node for i in snapshot)),
        **kw,
    )
    return place_gang(snapshot, spec)


def roles(**sizes: int) -> list[Pod]:
    """Members <task>-0.. of each task, 4 GPUs each (one whole 4-GPU node)."""
    return [
        pod(f"{task}-{i}", 4, group="g", task=task) for task, n in sizes.items() for i in range(n)
    ]


def where_by_task(state: ClusterState, result: Placed | Unfit, key: str) -> dict[str, set[str]]:
    """Per task, the values of label `key` its members landed on."""
    assert isinstance(result, Placed), result
    found: dict[str, set[str]] = {}
    for p in result.members:
        found.setdefault(p.task, set()).add(
            present(state.node(result.assignment[p.uid])).node.labels[key]
        )
    return found


def assert_no_node_over_committed(state: ClusterState, result: Placed | Unfit) -> None:
    assert isinstance(result, Placed), result
    snapshot = state.snapshot()
    used: dict[str, int] = {}
    for p in result.members:
        node = result.assignment[p.uid]
        used[node] = used.get(node, 0) + p.requests.gpus()
    for node, gpus in used.items():
        assert gpus <= snapshot.nodes[node].free.gpus(), node


def test_each_task_lands_inside_one_domain_of_its_own_level_inside_the_required_one() -> None:
    # Spine s0: leaf l0 of cliques c0 (1 node) and c1 (2 nodes), leaf l1 of c2 (3 nodes);
    # spine s1 the same shape. Prefill in one clique, decode in one leaf, all in one spine.
    nodes = [
        rack_node(f"{s}-{c}-n{n}", 4, spine=s, leaf=f"{s}-{leaf}", clique=f"{s}-{c}")
        for s in ("s0", "s1")
        for leaf, c, count in (("l0", "c0", 1), ("l0", "c1", 2), ("l1", "c2", 3))
        for n in range(count)
    ]
    state = cluster(nodes)
    topology = by_task(required=SPINE, prefill=CLIQUE, decode=LEAF)
    result = place_tasks(state, roles(prefill=2, decode=3), topology)
    assert len(label_values(state, result, SPINE)) == 1
    cliques, leaves = where_by_task(state, result, CLIQUE), where_by_task(state, result, LEAF)
    assert len(cliques["prefill"]) == 1
    assert len(leaves["decode"]) == 1
    assert isinstance(result, Placed)
    assert result.explanation.endswith(
        "each of subgroup(s) decode within one leaf, prefill within one clique"
    )


def test_the_narrower_task_is_placed_first_so_a_wider_one_cannot_take_its_only_domain() -> None:
    # One leaf: clique c0 of two 4-GPU nodes, c1 and c2 of one 6-GPU node each. Decode
    # (leaf) fits c0's nodes best; prefill (clique) needs both of them.
    nodes = [
        rack_node(name, gpus, spine="s0", leaf="l0", clique=c)
        for name, gpus, c in (("a0", 4, "c0"), ("a1", 4, "c0"), ("b0", 6, "c1"), ("d0", 6, "c2"))
    ]
    state = cluster(nodes)
    result = place_tasks(state, roles(decode=2, prefill=2), by_task(decode=LEAF, prefill=CLIQUE))
    assert where_by_task(state, result, CLIQUE)["prefill"] == {"c0"}
    assert isinstance(result, Placed)
    assert {result.assignment[p.uid] for p in result.members if p.task == "decode"} == {"b0", "d0"}


def test_failing_narrowest_first_the_wider_task_is_placed_first_for_its_only_domain() -> None:
    # Leaf l0: cliques c0 and c1 of two nodes; leaf l1: clique c2 of two. Prefill (clique)
    # first would take c0, the tightest by name, leaving no leaf three nodes for decode;
    # decode first takes three of l0 and prefill then has c2.
    nodes = [
        rack_node(f"{c}-n{n}", 4, spine="s0", leaf=leaf, clique=c)
        for leaf, c in (("l0", "c0"), ("l0", "c1"), ("l1", "c2"))
        for n in range(2)
    ]
    state = cluster(nodes)
    result = place_tasks(state, roles(decode=3, prefill=2), by_task(decode=LEAF, prefill=CLIQUE))
    assert where_by_task(state, result, LEAF)["decode"] == {"l0"}
    assert where_by_task(state, result, CLIQUE)["prefill"] == {"c2"}


def test_levels_of_different_tasks_share_nodes_without_over_committing_one() -> None:
    # Leaf l0: clique c0 of one 8-GPU node, c1 of one 8-GPU node and one 4-GPU node (20
    # GPUs). Prefill's 8 in a clique and decode's 12 in the leaf fit exactly, and only if
    # decode sees what prefill took.
    nodes = [
        rack_node("big-0", 8, spine="s0", leaf="l0", clique="c0"),
        rack_node("big-1", 8, spine="s0", leaf="l0", clique="c1"),
        rack_node("small", 4, spine="s0", leaf="l0", clique="c1"),
    ]
    state = cluster(nodes)
    topology = by_task(prefill=CLIQUE, decode=LEAF)
    result = place_tasks(state, roles(prefill=2, decode=3), topology)
    assert_no_node_over_committed(state, result)
    assert len(where_by_task(state, result, CLIQUE)["prefill"]) == 1
    assert isinstance(place_tasks(state, roles(prefill=2, decode=4), topology), Unfit)


def test_a_task_that_fits_no_domain_of_its_level_is_named_with_its_level() -> None:
    nodes = [
        rack_node(f"{c}-n{n}", 4, spine="s0", leaf="l0", clique=c)
        for c in ("c0", "c1")
        for n in range(2)
    ]
    state = cluster(nodes)
    result = place_tasks(state, roles(prefill=3, decode=1), by_task(prefill=CLIQUE, decode=LEAF))
    assert isinstance(result, Unfit)
    assert "subgroup prefill fits in no clique" in result.reason
    assert f"subgroup(s) decode each in one {LEAF}, prefill in one {CLIQUE}" in result.reason


def test_a_task_with_a_bound_member_stays_in_the_domain_of_its_level_that_holds_it() -> None:
    # Two leaves of one clique of two nodes each; decode's bound member sits in l1.
    nodes = [
        rack_node(f"{c}-n{n}", 4, spine="s0", leaf=leaf, clique=c)
        for leaf, c in (("l0", "c0"), ("l1", "c1"))
        for n in range(2)
    ]
    state = cluster(nodes)
    bound = pod("decode-bound", 4, group="g", task="decode")
    state.upsert_pod(pod("decode-bound-here", 4, node="c1-n0"))
    result = place_tasks(
        state,
        [pod("decode-0", 4, group="g", task="decode"), *roles(prefill=2)],
        by_task(decode=LEAF, prefill=CLIQUE),
        anchors={bound.uid: "c1-n0"},
        anchor_pods=(bound,),
    )
    assert where_by_task(state, result, LEAF) == {"decode": {"l1"}, "prefill": {"l0"}}


def test_a_task_whose_level_is_no_narrower_than_the_gangs_domain_constrains_nothing_more() -> None:
    # Required leaf: decode's leaf holds it anyway, prefill still needs one clique.
    nodes = [
        rack_node(f"{c}-n{n}", 4, spine="s0", leaf="l0", clique=c)
        for c in ("c0", "c1")
        for n in range(2)
    ]
    state = cluster(nodes)
    topology = by_task(required=LEAF, prefill=CLIQUE, decode=LEAF)
    result = place_tasks(state, roles(prefill=2, decode=2), topology)
    assert len(where_by_task(state, result, CLIQUE)["prefill"]) == 1


# ---- sets of tasks held together, narrower than the gang ------------------------------------


def with_sets(topology: GangTopology, *sets: tuple[str, str, tuple[str, ...]]) -> GangTopology:
    """`topology` with task sets (label, level, tasks): each set's tasks in one domain."""
    held = tuple(
        TaskSetLevel(label, frozenset(tasks), present(DEFAULT.level(level)))
        for label, level, tasks in sets
    )
    return replace(topology, task_sets=held)


PREFILL = ("subgroup prefill", LEAF, ("prefill-leader", "prefill-workers"))


def two_leaves() -> ClusterState:
    """Spine s0: leaf l0 of clique c0 (2 nodes); leaf l1 of c1 (1 node) and c2 (2 nodes)."""
    return cluster(
        rack_node(f"{c}-n{n}", 4, spine="s0", leaf=leaf, clique=c)
        for leaf, c, count in (("l0", "c0", 2), ("l1", "c1", 1), ("l1", "c2", 2))
        for n in range(count)
    )


def test_a_set_of_tasks_is_held_in_one_domain_of_its_level_inside_the_gangs_wider_one() -> None:
    # Each prefill task alone would take clique c0 (workers) and then c1 (leader), two
    # leaves; held together they go where one leaf has both cliques.
    state = two_leaves()
    members = roles(**{"prefill-leader": 1, "prefill-workers": 2, "decode": 1})
    alone = by_task(required=SPINE, **{"prefill-leader": CLIQUE, "prefill-workers": CLIQUE})
    apart = where_by_task(state, place_tasks(state, members, alone), LEAF)
    assert apart["prefill-leader"] != apart["prefill-workers"]
    result = place_tasks(state, members, with_sets(alone, PREFILL))
    leaves, cliques = where_by_task(state, result, LEAF), where_by_task(state, result, CLIQUE)
    assert leaves["prefill-leader"] == leaves["prefill-workers"] == {"l1"}
    assert cliques["prefill-leader"] == {"c1"}
    assert cliques["prefill-workers"] == {"c2"}
    assert_no_node_over_committed(state, result)
    assert isinstance(result, Placed)
    assert result.explanation.endswith("subgroup prefill within one leaf")


def test_a_set_that_no_domain_of_its_level_holds_makes_the_gang_unfit_naming_it() -> None:
    state = two_leaves()
    members = roles(**{"prefill-leader": 1, "prefill-workers": 3})
    topology = with_sets(by_task(required=SPINE), PREFILL)
    result = place_tasks(state, members, topology)
    assert isinstance(result, Unfit)
    assert (
        "subgroup prefill (prefill-leader, prefill-workers together) fits in no leaf"
        in result.reason
    )
    assert (
        f"subgroup prefill (prefill-leader, prefill-workers) together in one {LEAF}"
        in result.reason
    )


def test_tasks_of_a_set_without_levels_of_their_own_are_only_held_together() -> None:
    state = two_leaves()
    members = roles(**{"prefill-leader": 1, "prefill-workers": 2})
    result = place_tasks(state, members, with_sets(GangTopology(DEFAULT), PREFILL))
    leaves = where_by_task(state, result, LEAF)
    assert leaves["prefill-leader"] == leaves["prefill-workers"] == {"l1"}


def test_a_set_inside_a_set_is_held_in_its_narrower_domain_inside_the_wider_one() -> None:
    # Leaf l0: cliques of 1 and 1 node; leaf l1: a clique of 2 and one of 1. The replica
    # (3 nodes) needs one leaf, l1; its prefill pair (2 nodes) one clique inside it.
    state = cluster(
        rack_node(f"{c}-n{n}", 4, spine="s0", leaf=leaf, clique=c)
        for leaf, c, count in (("l0", "c0", 1), ("l0", "c1", 1), ("l1", "c2", 2), ("l1", "c3", 1))
        for n in range(count)
    )
    members = roles(leader=1, workers=1, decode=1)
    topology = with_sets(
        GangTopology(DEFAULT),
        ("subgroup replica", LEAF, ("decode", "leader", "workers")),
        ("subgroup prefill", CLIQUE, ("leader", "workers")),
    )
    result = place_tasks(state, members, topology)
    assert where_by_task(state, result, LEAF) == {
        "leader": {"l1"},
        "workers": {"l1"},
        "decode": {"l1"},
    }
    cliques = where_by_task(state, result, CLIQUE)
    assert cliques["leader"] == cliques["workers"] == {"c2"}


def test_a_set_with_a_bound_member_stays_in_the_domain_that_holds_it() -> None:
    state = two_leaves()
    bound = pod("prefill-leader-bound", 4, group="g", task="prefill-leader")
    state.upsert_pod(pod("bound-here", 4, node="c0-n0"))
    result = place_tasks(
        state,
        roles(**{"prefill-workers": 1, "decode": 2}),
        with_sets(GangTopology(DEFAULT, required=SPINE_LEVEL), PREFILL),
        anchors={bound.uid: "c0-n0"},
        anchor_pods=(bound,),
    )
    assert where_by_task(state, result, LEAF)["prefill-workers"] == {"l0"}


def test_a_set_at_the_gangs_own_level_is_held_by_the_gangs_domain() -> None:
    state = two_leaves()
    members = roles(**{"prefill-leader": 1, "prefill-workers": 2})
    topology = with_sets(GangTopology(DEFAULT, required=LEAF_LEVEL), PREFILL)
    result = place_tasks(state, members, topology)
    assert len(label_values(state, result, LEAF)) == 1


# ---- tasks' and sets' preferred levels, best effort -----------------------------------------


def preferring(
    topology: GangTopology, *prefs: tuple[str, str, tuple[str, ...]], together: bool = False
) -> GangTopology:
    """`topology` with preferences (label, level, tasks), each with its own required level
    as `topology` has it: one task's (`together` False) or a set's of the same label."""
    held = {s.label: s.level for s in topology.task_sets}
    return replace(
        topology,
        preferences=tuple(
            TaskPreferenceLevel(
                label,
                frozenset(tasks),
                present(DEFAULT.level(level)),
                held.get(label) if together else topology.task_level(tasks[0]),
                together,
            )
            for label, level, tasks in prefs
        ),
    )


def three_cliques() -> ClusterState:
    """Spine s0, leaf l0: cliques c0 and c1 of one 4-GPU node each, c2 of two."""
    return cluster(
        rack_node(f"{c}-n{n}", 4, spine="s0", leaf="l0", clique=c)
        for c, count in (("c0", 1), ("c1", 1), ("c2", 2))
        for n in range(count)
    )


DECODE_IN_A_CLIQUE = ("subgroup decode", CLIQUE, ("decode",))


def test_a_tasks_preferred_level_is_held_when_a_domain_of_it_has_room() -> None:
    # Without it, decode fills the two one-node cliques (the tightest) and spans two.
    state = three_cliques()
    plain = place_tasks(state, roles(decode=2), by_task(required=SPINE))
    assert where_by_task(state, plain, CLIQUE) == {"decode": {"c0", "c1"}}
    topology = preferring(by_task(required=SPINE), DECODE_IN_A_CLIQUE)
    result = place_tasks(state, roles(decode=2), topology)
    assert where_by_task(state, result, CLIQUE) == {"decode": {"c2"}}
    assert isinstance(result, Placed)
    assert result.explanation.endswith("subgroup decode within one clique as preferred")


def test_a_tasks_preference_no_domain_holds_is_widened_and_the_gang_still_placed() -> None:
    state = three_cliques()
    topology = preferring(by_task(required=SPINE), DECODE_IN_A_CLIQUE)
    result = place_tasks(state, roles(decode=3), topology)
    assert isinstance(result, Placed)
    assert len(result.assignment) == 3
    assert result.explanation.endswith(
        "subgroup decode preferred one clique: widened to one leaf; not every preference "
        "held (all at once: subgroup decode fits in no clique (none has room for it))"
    )


def test_a_preference_is_widened_one_level_at_a_time() -> None:
    # One node cannot hold decode's two members: the next level, one clique, can.
    state = three_cliques()
    topology = preferring(by_task(required=SPINE), ("subgroup decode", HOSTNAME, ("decode",)))
    result = place_tasks(state, roles(decode=2), topology)
    assert where_by_task(state, result, CLIQUE) == {"decode": {"c2"}}
    assert isinstance(result, Placed)
    assert "subgroup decode preferred one hostname: widened to one clique" in result.explanation


def test_a_preference_never_goes_wider_than_the_tasks_own_required_level() -> None:
    # Decode requires one clique and prefers one node: widened to the clique, never past it.
    state = three_cliques()
    topology = preferring(
        by_task(required=SPINE, decode=CLIQUE), ("subgroup decode", HOSTNAME, ("decode",))
    )
    assert topology.preferring(SPINE_LEVEL)[-1].task_level("decode") == DEFAULT.level(HOSTNAME)
    assert len(topology.preferring(SPINE_LEVEL)) == 1
    assert where_by_task(state, place_tasks(state, roles(decode=2), topology), CLIQUE) == {
        "decode": {"c2"}
    }
    assert isinstance(place_tasks(state, roles(decode=3), topology), Unfit)


def test_preferences_are_relaxed_together_one_level_at_a_time() -> None:
    # Prefill's three members fit in no clique: both preferences go to one leaf together.
    state = three_cliques()
    topology = preferring(
        by_task(required=SPINE), DECODE_IN_A_CLIQUE, ("subgroup prefill", CLIQUE, ("prefill",))
    )
    steps = topology.preferring(SPINE_LEVEL)
    assert [s.levels_of_tasks() for s in steps] == [
        (("decode", 2), ("prefill", 2)),
        (("decode", 1), ("prefill", 1)),
    ]
    result = place_tasks(state, roles(decode=1, prefill=3), topology)
    assert isinstance(result, Placed)
    assert "subgroup prefill preferred one clique: widened to one leaf" in result.explanation
    unmet = "not every preference held (all at once: subgroup prefill fits in no clique"
    assert unmet in result.explanation


def test_a_preference_costs_at_most_one_try_per_level_between_it_and_the_gangs_domain() -> None:
    topology = preferring(GangTopology(DEFAULT), DECODE_IN_A_CLIQUE)
    assert [s.slice_level for s in topology.preferring(CLUSTER)] == [2, 1, 0]
    assert [s.slice_level for s in topology.preferring(SPINE_LEVEL)] == [2, 1]
    assert topology.preferring(present(DEFAULT.level(CLIQUE))) == ()
    # One leaf under the one spine: holding decode in one leaf (or spine) asks what the
    # whole cluster does; only the clique is left to try.
    index = build_index(DEFAULT, (i.node for i in three_cliques().snapshot()))
    assert [s.slice_level for s in topology.preferring(CLUSTER, index.same_as_narrower)] == [2]
    assert [s.slice_level for s in topology.preferring(SPINE_LEVEL, index.same_as_narrower)] == [2]


def test_a_sets_preferred_level_holds_its_tasks_together_when_there_is_room() -> None:
    # Each prefill task in a clique of its own would span two leaves (as in the sets'
    # test above); preferring one leaf together, they go where one leaf has both cliques.
    state = two_leaves()
    members = roles(**{"prefill-leader": 1, "prefill-workers": 2, "decode": 1})
    alone = by_task(required=SPINE, **{"prefill-leader": CLIQUE, "prefill-workers": CLIQUE})
    result = place_tasks(state, members, preferring(alone, PREFILL, together=True))
    leaves = where_by_task(state, result, LEAF)
    assert leaves["prefill-leader"] == leaves["prefill-workers"] == {"l1"}
    assert isinstance(result, Placed)
    assert result.explanation.endswith("subgroup prefill within one leaf as preferred")


def test_a_sets_preference_no_domain_holds_is_widened_and_said() -> None:
    state = two_leaves()
    members = roles(**{"prefill-leader": 1, "prefill-workers": 3})
    result = place_tasks(
        state, members, preferring(by_task(required=SPINE), PREFILL, together=True)
    )
    assert isinstance(result, Placed)
    assert "subgroup prefill preferred one leaf: widened to one spine" in result.explanation


def test_a_set_required_at_one_level_and_preferred_at_a_narrower_one_tries_the_narrower() -> None:
    state = two_leaves()
    members = roles(**{"prefill-leader": 1, "prefill-workers": 1})
    held = with_sets(by_task(), ("subgroup prefill", LEAF, ("prefill-leader", "prefill-workers")))
    topology = preferring(
        held, ("subgroup prefill", CLIQUE, ("prefill-leader", "prefill-workers")), together=True
    )
    assert [s.task_sets for s in topology.preferring(CLUSTER)] == [
        (TaskSetLevel("subgroup prefill", frozenset(PREFILL[2]), DEFAULT.level(CLIQUE) or 0),)
    ]
    result = place_tasks(state, members, topology)
    cliques = where_by_task(state, result, CLIQUE)
    assert cliques["prefill-leader"] == cliques["prefill-workers"]
