"""Prioritize: a 0..10 score per offered node (kube-scheduler adds score × weight × 10).

A gang member holding a reservation scores 10 on its reserved node and 0 elsewhere. Any
other pod gets a best fit on its scarce resource (GPUs for GPU pods, CPU otherwise), so
whole nodes stay free for big gangs; a pod without GPUs scores 0 on GPU nodes.

A GPU pod also prefers nodes whose topology domains are already broken
(`phalanx.core.topology_usage.fragmentation_scores`, given by the planner): where some
offered node's NVLink clique, leaf or spine is in use, its score is the mean of the best
fit and that fragmentation score, so single pods fill broken cliques before whole ones.
When no offered node's domains are broken the best fit stands alone, at full resolution.

`best_fit` is the same preference, exact rather than in ten steps: the single-pod filter
uses it to answer only the best node(s), so kube-scheduler skips the prioritize round trip.
Between nodes that leave as many GPUs over, the one whose domains are more broken wins.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

from phalanx.core.cache import ClusterState
from phalanx.core.model import CPU, Pod

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority


def prioritize(
    state: ClusterState,
    pod: Pod,
    offered: Sequence[str],
    fragmentation: Callable[[], Mapping[str, int]] | None = None,
) -> dict[str, int]:
    """0..10 per offered node: the reserved node for gang members, best fit for others,
    blended for GPU pods with `fragmentation()` (0..10 per node, higher where domains are
    broken; asked only when needed)."""
    if pod.group is not None:
        r = state.reservation(pod.group.key)
        node = r.node_of(pod.uid) if r is not None else None
        if node is not None:
            return {n: MAX_SCORE if n == node else 0 for n in offered}
    # kube-scheduler asks for every feasible node of every pod: read the live map (no
    # snapshot copy) and work each distinct (capacity, free) pair out once.
    infos = state.node_infos()
    memo: dict[tuple[int, int, bool], int] = {}
    gpus = pod.requests.gpus()
    cpu = pod.requests.get(CPU)
    scores: dict[str, int] = {}
    for n in offered:
        info = infos.get(n)
        if info is None:
            scores[n] = 0
            continue
        total_gpus = info.node.allocatable.gpus()
        if gpus:
            key = (total_gpus, info.free.gpus(), True)
        else:
            key = (info.node.allocatable.get(CPU), info.free.get(CPU), total_gpus > 0)
        score = memo.get(key)
        if score is None:
            score = memo[key] = best_fit_score(key, gpus if gpus else cpu, gpu_pod=bool(gpus))
        scores[n] = score
    broken = fragmentation() if gpus and fragmentation is not None else {}
    if any(broken.get(n, 0) for n in offered):
        # The mean, rounded up: kube-scheduler takes whole scores only.
        return {n: (s + broken.get(n, 0) + 1) // 2 for n, s in scores.items()}
    return scores


def best_fit_score(node: tuple[int, int, bool], request: int, *, gpu_pod: bool) -> int:
    """0..10: how full the node's scarce resource would be with the pod on it (best fit).

    `node` is (capacity, free, has GPUs) of GPUs for a GPU pod, of CPU otherwise; a pod
    without GPUs scores 0 on GPU nodes, to keep them for GPU work.
    """
    total, free, has_gpus = node
    if (not gpu_pod and has_gpus) or total <= 0:
        return 0
    used_after = total - free + request
    return max(0, min(MAX_SCORE, (MAX_SCORE * used_after) // total))


def best_fit(
    state: ClusterState,
    pod: Pod,
    feasible: Sequence[str],
    count: int,
    fragmentation: Callable[[], Mapping[str, int]] | None = None,
) -> list[str]:
    """The `count` feasible nodes `pod` fits best, best first: for a GPU pod the fewest GPUs
    left over, then the most broken domains (`fragmentation()`, 0..10 per node), then CPU;
    for a pod without GPUs nodes without GPUs first, then the least CPU left over. Ties by
    name, so the answer is deterministic. (`singles` has a faster path for GPU pods, with
    the same order.)"""
    frees = state.common_free()
    infos = state.node_infos()
    gpus = pod.requests.gpus()
    cpu = pod.requests.get(CPU)
    broken = fragmentation() if gpus and fragmentation is not None else {}

    def leftover(name: str) -> tuple[int, int, int, str]:
        free = frees[name]
        if gpus:
            return (free[3] - gpus, -broken.get(name, 0), free[0] - cpu, name)
        on_gpus = 1 if infos[name].node.allocatable.gpus() else 0
        return (on_gpus, 0, free[0] - cpu, name)

    return heapq.nsmallest(count, feasible, key=leftover)
