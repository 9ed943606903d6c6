"""Topology domains against free capacity: whole domains left, and fragmentation scores."""

from collections.abc import Iterable
from dataclasses import replace

from builders import CLIQUE, HOSTNAME, LEAF, SPINE, cpu_node, nvl72, pod, present, rack_node
from phalanx.core.cache import ClusterState
from phalanx.core.model import Node
from phalanx.core.snapshot import Snapshot
from phalanx.core.topology import DEFAULT_TOPOLOGIES, TopologyIndex, build_index
from phalanx.core.topology_usage import (
    LevelFreedom,
    domain_free,
    fragmentation_scores,
    free_domains,
    shared_levels,
    tightness,
)


def cluster(
    nodes: Iterable[Node], busy: Iterable[tuple[str, int]] = ()
) -> tuple[Snapshot, TopologyIndex]:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for i, (node, gpus) in enumerate(busy):
        state.upsert_pod(pod(f"busy-{i}", gpus, node=node))
    snapshot = state.snapshot()
    return snapshot, build_index(DEFAULT_TOPOLOGIES.default, (i.node for i in snapshot))


def test_an_idle_nvl72_cluster_has_every_domain_free() -> None:
    snapshot, index = cluster(nvl72())
    assert free_domains(snapshot, index) == (
        LevelFreedom(SPINE, 1, 1),
        LevelFreedom(LEAF, 4, 4),
        LevelFreedom(CLIQUE, 16, 16),
        LevelFreedom(HOSTNAME, 288, 288),
    )


def test_one_gpu_in_use_breaks_its_node_clique_leaf_and_spine() -> None:
    snapshot, index = cluster(nvl72(), busy=[("c05-n03", 1)])
    assert [(f.free, f.total) for f in free_domains(snapshot, index)] == [
        (0, 1),
        (3, 4),
        (15, 16),
        (287, 288),
    ]


def test_a_cordoned_idle_node_breaks_its_domains_for_a_whole_domain_gang() -> None:
    nodes = [replace(n, unschedulable=True) if n.name == "c05-n03" else n for n in nvl72()]
    snapshot, index = cluster(nodes)
    assert [(f.free, f.total) for f in free_domains(snapshot, index)] == [
        (0, 1),
        (3, 4),
        (15, 16),
        (287, 288),
    ]


def test_nodes_without_gpus_are_not_counted_as_domains() -> None:
    snapshot, index = cluster([rack_node("g", leaf="l1"), cpu_node("c")])
    assert free_domains(snapshot, index)[1] == LevelFreedom(LEAF, 1, 1)


def test_nodes_in_broken_domains_score_higher_than_nodes_in_whole_ones() -> None:
    snapshot, index = cluster(nvl72(), busy=[("c05-n00", 4)])
    scores = fragmentation_scores(index, snapshot.nodes, ["c05-n01", "c04-n00", "c00-n00"])
    # Broken clique > whole clique in a broken leaf > whole leaf under a broken spine.
    assert scores["c05-n01"] > scores["c04-n00"] > scores["c00-n00"] > 0


def test_an_idle_cluster_scores_zero_everywhere() -> None:
    snapshot, index = cluster(nvl72(2))
    assert set(fragmentation_scores(index, snapshot.nodes, snapshot.names).values()) == {0}


def test_scores_stay_within_kube_schedulers_range() -> None:
    busy = [(f"c00-n{i:02d}", 4) for i in range(17)]
    snapshot, index = cluster(nvl72(2, per_leaf=1), busy=busy)
    scores = fragmentation_scores(index, snapshot.nodes, snapshot.names)
    assert all(0 <= s <= 10 for s in scores.values())
    assert scores["c00-n17"] == max(scores.values())


def test_a_node_the_index_does_not_know_scores_zero() -> None:
    snapshot, index = cluster(nvl72(1))
    assert fragmentation_scores(index, snapshot.nodes, ["ghost"]) == {"ghost": 0}


def test_an_overcommitted_node_takes_nothing_from_its_domains_free_capacity() -> None:
    # Pods bound by others may overcommit a node: its free GPUs are negative.
    snapshot, index = cluster(nvl72(1, per_clique=2), busy=[("c00-n00", 4), ("c00-n00", 1)])
    free = domain_free(index, snapshot.nodes, snapshot.names)
    assert free.gpus[2][0] == 4


def test_domains_rank_tightest_first_inside_the_tightest_wider_domain() -> None:
    # Leaf l0 (c00, c01) is fuller than l1 (c02, c03); inside l0, c01 is fuller than c00.
    busy = [("c01-n00", 4), ("c01-n01", 2), ("c00-n00", 1), ("c03-n00", 2)]
    snapshot, index = cluster(nvl72(4, per_clique=2, per_leaf=2), busy=busy)
    level, ranks = present(tightness(index, domain_free(index, snapshot.nodes, snapshot.names)))
    assert level == 2  # hostname domains are single nodes: the node's own fit decides there
    order = sorted(range(len(ranks)), key=ranks.__getitem__)
    assert [index.domains[2][d].name.rpartition("=")[2] for d in order] == [
        "c01",
        "c00",
        "c03",
        "c02",
    ]


def test_levels_whose_domains_hold_several_nodes_are_counted_widest_first() -> None:
    _, racks = cluster(nvl72(4, per_clique=2, per_leaf=2))
    assert shared_levels(racks) == 3  # spine, leaf, clique; every host is its own domain
    _, hosts = cluster([rack_node("a"), rack_node("b")])
    assert shared_levels(hosts) == 0  # no labels but the hostname: no tie-break to rank


def test_nothing_to_rank_when_every_domain_is_a_single_node() -> None:
    snapshot, index = cluster([rack_node("a"), rack_node("b")])
    assert tightness(index, domain_free(index, snapshot.nodes, snapshot.names)) is None
