"""Topology domains against free capacity: what is left whole, and where a pod breaks least.

`phalanx.core.topology` groups nodes into domains from their labels only; this module reads
those domains against one snapshot's capacity:

* `free_domains`: per level, how many domains are whole (no GPU of theirs in use or
  reserved, and no node of theirs cordoned or not ready): what `phalanx simulate` and the
  benchmark report as fragmentation.
* `fragmentation_scores`: 0..10 per node, higher where the node's domains are already
  broken, so single pods and gangs without a topology fill broken domains before whole
  ones (kube-scheduler's prioritize adds it to its other scores).
* `domain_free`: per level, the free GPUs, CPU and memory of every domain over a set of
  nodes, which the gang transaction ranks domains by; `tightness` orders a level's domains
  from the tightest (least free GPUs, within the tightest wider domains) to the roomiest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from phalanx.core.snapshot import NodeInfo, Snapshot
from phalanx.core.topology import TopologyIndex

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority


@dataclass(frozen=True, slots=True)
class LevelFreedom:
    """At one level: domains with GPUs, and how many of them have every GPU free."""

    level: str
    free: int
    total: int


def free_domains(snapshot: Snapshot, index: TopologyIndex) -> tuple[LevelFreedom, ...]:
    """Per level of the index's topology (widest first), how many domains are entirely free."""
    whole: list[list[bool]] = [[True] * len(d) for d in index.domains]
    has_gpus: list[list[bool]] = [[False] * len(d) for d in index.domains]
    for name, ids in index.of_node.items():
        info = snapshot.nodes.get(name)
        if info is None:
            continue
        capacity = info.node.allocatable.gpus()
        if not capacity:
            continue
        # A cordoned or not-ready node takes no gang: its domains are not whole for one.
        idle = info.free.gpus() >= capacity and info.node.schedulable
        for level, domain in enumerate(ids):
            has_gpus[level][domain] = True
            if not idle:
                whole[level][domain] = False
    return tuple(
        LevelFreedom(
            key,
            sum(1 for w, g in zip(whole[level], has_gpus[level], strict=True) if w and g),
            sum(has_gpus[level]),
        )
        for level, key in enumerate(index.topology.levels)
    )


def fragmentation_scores(
    index: TopologyIndex, infos: Mapping[str, NodeInfo], nodes: Iterable[str]
) -> dict[str, int]:
    """0..10 per node: how broken its multi-node domains already are (GPUs in use or
    reserved), narrower levels weighing more; 0 for a node whose domains are all whole or
    all its own. A domain counts 0 when whole, else 0.5 + half its used fraction.

    `infos` is a snapshot's nodes or the live `ClusterState.node_infos()`. Costs one pass
    over the indexed nodes (a caller scoring many pods per generation can keep the result).
    """
    sizes = [len(d) for d in index.domains]
    narrowest = len(sizes) - 1
    free = [[0] * n for n in sizes]
    total = [[0] * n for n in sizes]
    for name, ids in index.of_node.items():
        info = infos.get(name)
        if info is not None:
            capacity = info.node.allocatable.gpus()
            if capacity:
                free[narrowest][ids[narrowest]] += max(0, info.free.gpus())
                total[narrowest][ids[narrowest]] += capacity
    for level in range(narrowest, 0, -1):
        for d, inner in enumerate(index.domains[level]):
            free[level - 1][inner.parent] += free[level][d]
            total[level - 1][inner.parent] += total[level][d]
    # Levels of single nodes only (the hostname) never count: nodes sharing their domains
    # above those levels score the same.
    shared = 0
    while shared < len(sizes) and sizes[shared] < len(index.of_node):
        shared += 1
    scores: dict[str, int] = {}
    memo: dict[tuple[int, ...], int] = {}
    for name in nodes:
        ids = index.of_node.get(name, ())[:shared]
        score = memo.get(ids)
        if score is None:
            weighted = weights = 0.0
            for level, domain in enumerate(ids):
                capacity = total[level][domain]
                if capacity > 0 and len(index.domains[level][domain].nodes) > 1:
                    weight = level + 1
                    used = (capacity - free[level][domain]) / capacity
                    # Broken at all counts half: a slightly used clique beats a whole one.
                    weighted += weight * (0.5 + 0.5 * used if used > 0 else 0.0)
                    weights += weight
            score = memo[ids] = round(MAX_SCORE * weighted / weights) if weights else 0
        scores[name] = score
    return scores


@dataclass(frozen=True, slots=True)
class DomainFree:
    """Per level, per domain id: free GPUs, CPU (millicores) and memory (bytes) summed over
    the nodes it was built from."""

    gpus: tuple[list[int], ...]
    cpu: tuple[list[int], ...]
    memory: tuple[list[int], ...]


def domain_free(
    index: TopologyIndex, infos: Mapping[str, NodeInfo], nodes: Iterable[str]
) -> DomainFree:
    """Sums over `nodes` (those the index knows) at the narrowest level, rolled up the
    nesting: one addition per node, then one per domain."""
    sizes = [len(d) for d in index.domains]
    gpus = tuple([0] * n for n in sizes)
    cpu = tuple([0] * n for n in sizes)
    memory = tuple([0] * n for n in sizes)
    narrowest = len(sizes) - 1
    g, c, m = gpus[narrowest], cpu[narrowest], memory[narrowest]
    of_node = index.of_node
    for name in nodes:
        ids = of_node.get(name)
        if ids is None:
            continue
        info = infos[name]
        d = ids[narrowest]
        free_gpus = info.free.gpus()
        free_cpu, free_memory, _, _ = info.common_free  # (cpu, memory, pods, nvidia.com/gpu)
        # An overcommitted node (pods bound by others) offers nothing, and takes nothing
        # away from its neighbours.
        if free_gpus > 0:
            g[d] += free_gpus
        if free_cpu > 0:
            c[d] += free_cpu
        if free_memory > 0:
            m[d] += free_memory
    for level in range(narrowest, 0, -1):
        g, c, m = gpus[level], cpu[level], memory[level]
        up_g, up_c, up_m = gpus[level - 1], cpu[level - 1], memory[level - 1]
        for d, domain in enumerate(index.domains[level]):
            parent = domain.parent
            up_g[parent] += g[d]
            up_c[parent] += c[d]
            up_m[parent] += m[d]
    return DomainFree(gpus, cpu, memory)


def shared_levels(index: TopologyIndex) -> int:
    """How many levels, widest first, have a domain of more than one node: 0 on a cluster
    whose nodes carry none of the topology's labels but the hostname."""
    indexed = len(index.of_node)
    levels = 0
    while levels < len(index.domains) and len(index.domains[levels]) < indexed:
        levels += 1
    return levels


def tightness(index: TopologyIndex, free: DomainFree) -> tuple[int, list[int]] | None:
    """(level, rank of every domain of that level): domains ordered widest level first by
    free GPUs (the tightest spine, then the tightest leaf in it, ...), down to the narrowest
    level whose domains are not all single nodes; None when every level is single nodes.

    One int per node then tells equal nodes apart, cheaper than a key per level.
    """
    levels = shared_levels(index)
    if not levels:
        return None
    ranks: list[int] = []
    for level in range(levels):
        domains = index.domains[level]
        gpus = free.gpus[level]
        previous = ranks
        order = sorted(
            range(len(domains)),
            key=lambda d: (previous[domains[d].parent] if level else 0, gpus[d], d),
        )
        ranks = [0] * len(domains)
        for rank, d in enumerate(order):
            ranks[d] = rank
    return levels - 1, ranks
