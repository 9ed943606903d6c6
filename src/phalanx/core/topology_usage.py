"""Topology domains against free capacity: what is left whole, and where a pod breaks least.

`phalanx.core.topology` groups nodes into domains from their labels only; this module reads
those domains against one snapshot's capacity:

* `free_domains`: per level, how many domains are whole (no GPU of theirs in use or
  reserved): what `phalanx simulate` and the benchmark report as fragmentation.
* `fragmentation_scores`: 0..10 per node, higher where the node's domains are already
  broken, so single pods and gangs without a topology fill broken domains before whole
  ones (kube-scheduler's prioritize adds it to its other scores).
* `domain_free`: per level, the free GPUs, CPU and memory of every domain over a set of
  nodes, which the gang transaction ranks domains by.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from phalanx.core.model import CPU, MEMORY
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
        idle = info.free.gpus() >= capacity
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
    index: TopologyIndex, snapshot: Snapshot, nodes: Iterable[str]
) -> dict[str, int]:
    """0..10 per node: how broken its multi-node domains already are (GPUs in use or
    reserved), narrower levels weighing more; 0 for a node whose domains are all whole or
    all its own. A domain counts 0 when whole, else 0.5 + half its used fraction.

    Costs one pass over the nodes of the domains `nodes` belong to.
    """
    wanted = list(nodes)
    levels = len(index.domains)
    touched: list[set[int]] = [set() for _ in range(levels)]
    for name in wanted:
        ids = index.of_node.get(name)
        if ids is not None:
            for level, domain in enumerate(ids):
                touched[level].add(domain)
    free: list[dict[int, int]] = [dict.fromkeys(t, 0) for t in touched]
    total: list[dict[int, int]] = [dict.fromkeys(t, 0) for t in touched]
    for level, domains in enumerate(touched):
        for domain in domains:
            for name in index.domains[level][domain].nodes:
                info = snapshot.nodes.get(name)
                if info is not None:
                    free[level][domain] += info.free.gpus()
                    total[level][domain] += info.node.allocatable.gpus()
    scores: dict[str, int] = {}
    for name in wanted:
        ids = index.of_node.get(name)
        weighted = weights = 0.0
        for level, domain in enumerate(ids or ()):
            capacity = total[level][domain]
            if capacity > 0 and len(index.domains[level][domain].nodes) > 1:
                weight = level + 1
                used = (capacity - max(0, free[level][domain])) / capacity
                # Broken at all counts half: a slightly used clique beats a whole one.
                weighted += weight * (0.5 + 0.5 * used if used > 0 else 0.0)
                weights += weight
        scores[name] = round(MAX_SCORE * weighted / weights) if weights else 0
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
    sizes = [len(d) for d in index.domains]
    gpus = tuple([0] * n for n in sizes)
    cpu = tuple([0] * n for n in sizes)
    memory = tuple([0] * n for n in sizes)
    of_node = index.of_node
    for name in nodes:
        ids = of_node.get(name)
        if ids is None:
            continue
        free = infos[name].free
        g, c, m = free.gpus(), free.get(CPU), free.get(MEMORY)
        for level, domain in enumerate(ids):
            gpus[level][domain] += g
            cpu[level][domain] += c
            memory[level][domain] += m
    return DomainFree(gpus, cpu, memory)
