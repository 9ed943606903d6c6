"""Filtering a pod in no gang: kube-scheduler's hot path (its filter calls are serial).

GPU-aware fit that treats reserved capacity as used, so a single pod never eats into a
gang's reservation. Eligibility (taints, selectors, affinity) is cached per pod shape until
the node topology changes; the fit check is a set lookup and four int comparisons per
offered node; reasons are worked out only for the nodes that do not fit.

With `best` > 0 only that many best-fit feasible nodes are answered (`prioritize.best_fit`):
with one, kube-scheduler has nothing to rank and skips the prioritize round trip. The other
feasible nodes are simply left out (kube-scheduler treats them as filtered, without a reason:
the pod is scheduled anyway); reasons are given only when no node fits.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from phalanx.core import eligibility
from phalanx.core.cache import ClusterState
from phalanx.core.decisions import FilterResult
from phalanx.core.model import NVIDIA_GPU, Pod, Resources
from phalanx.core.prioritize import best_fit
from phalanx.core.snapshot import COMMON_RESOURCES, Snapshot

COMMON_SET = frozenset(COMMON_RESOURCES)
# Distinct pod shapes (tolerations, selectors, affinity) whose eligible nodes are cached;
# past this the cache starts over rather than grow without bound.
ELIGIBILITY_CACHE_SIZE = 1024


class SingleFit:
    """The single-pod filter over a `ClusterState` (read only)."""

    def __init__(
        self,
        state: ClusterState,
        fragmentation: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.state = state
        # How broken each node's topology domains are (the planner's, cached per generation):
        # the best-fit answer prefers broken cliques between equally good nodes.
        self.fragmentation = fragmentation
        self._eligible: dict[tuple[object, ...], tuple[int, frozenset[str]]] = {}

    def eligible_nodes(self, pod: Pod) -> frozenset[str]:
        """Nodes `pod` may use capacity aside; cached per eligibility key until the node
        topology changes (heartbeats do not change it)."""
        key = eligibility.eligibility_key(pod)
        generation = self.state.topology_generation
        cached = self._eligible.get(key)
        if cached is not None and cached[0] == generation:
            return cached[1]
        nodes = frozenset(
            info.name
            for info in self.state.node_infos().values()
            if eligibility.ineligibility(pod, info.node) is None
        )
        if len(self._eligible) > ELIGIBILITY_CACHE_SIZE:
            self._eligible.clear()
        self._eligible[key] = (generation, nodes)
        return nodes

    def filter(
        self,
        pod: Pod,
        offered: Sequence[str],
        *,
        best: int = 0,
        offered_set: AbstractSet[str] | None = None,
    ) -> FilterResult:
        """`offered_set`: the same names as a set, when the caller has one already."""
        eligible = self.eligible_nodes(pod)
        request = pod.requests
        if best and request.get(NVIDIA_GPU) and set(request) <= COMMON_SET:
            tightest = self._tightest(request, offered_set or offered, eligible, best)
            if tightest:
                return FilterResult(tuple(tightest))
        feasible: list[str]
        if set(request) <= COMMON_SET:
            frees = self.state.common_free()
            c, m, p, g = (request.get(k) for k in COMMON_RESOURCES)
            feasible = [
                n
                for n in offered
                if (f := frees.get(n)) is not None
                and f[3] >= g
                and f[0] >= c
                and f[1] >= m
                and f[2] >= p
            ]
        else:
            infos = self.state.node_infos()
            feasible = [
                n for n in offered if (i := infos.get(n)) is not None and request.fits_in(i.free)
            ]
        if len(eligible) < len(self.state.node_infos()):
            feasible = [n for n in feasible if n in eligible]
        if best and feasible:
            return FilterResult(
                tuple(best_fit(self.state, pod, feasible, best, self.fragmentation))
            )
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        if len(feasible) < len(offered):
            snapshot = self.state.snapshot()
            kept = set(feasible)
            for name in offered:
                if name in kept:
                    continue
                verdict = _fit(snapshot, pod, name)
                if verdict is not None:
                    (failed if verdict[0] else unresolvable)[name] = verdict[1]
        return FilterResult(tuple(feasible), failed, unresolvable)

    def _tightest(
        self,
        request: Resources,
        offered: Sequence[str] | AbstractSet[str],
        eligible: frozenset[str],
        count: int,
    ) -> list[str]:
        """The best fit for a GPU pod without a Python pass over every offered node: the
        cache keeps nodes bucketed by free GPUs in name order, so the tightest bucket is
        read first and, in it, nodes are checked (offered, eligible, CPU, memory, pods)
        until `count` fit; usually the first does. Ties on GPUs go by name, or, when some
        topology domain is broken, to the node whose domains are the most broken (the
        whole tightest bucket is then read). [] when no node fits (the caller then works
        out every reason)."""
        c, m, p, g = (request.get(k) for k in COMMON_RESOURCES)
        broken = self.fragmentation() if self.fragmentation is not None else {}
        frees = self.state.common_free()
        by_gpus = self.state.nodes_by_free_gpus()
        wanted = offered if isinstance(offered, AbstractSet) else frozenset(offered)
        if len(eligible) < len(frees):
            wanted = wanted & eligible
        picked: list[str] = []
        for free_gpus in sorted(k for k in by_gpus if k >= g):
            bucket = by_gpus[free_gpus]
            # Few wanted nodes (a narrow selector): walk those rather than the bucket.
            names = (
                sorted(n for n in wanted if frees[n][3] == free_gpus)
                if (len(wanted) * 8 < len(bucket))
                else bucket
            )
            fits = (
                n
                for n in names
                if n in wanted and (f := frees[n])[0] >= c and f[1] >= m and f[2] >= p
            )
            if broken:
                # Names are in order, so a stable sort keeps ties by name.
                picked.extend(sorted(fits, key=lambda n: -broken.get(n, 0))[: count - len(picked)])
            else:
                picked.extend(itertools.islice(fits, count - len(picked)))
            if len(picked) == count:
                return picked
        return picked


def _fit(snapshot: Snapshot, pod: Pod, name: str) -> tuple[bool, str] | None:
    """None if `pod` fits on `name`; else (preemption might help, reason)."""
    info = snapshot.get(name)
    if info is None:
        return (False, "node unknown to Phalanx (not yet in its cache)")
    why = eligibility.ineligibility(pod, info.node)
    if why is not None:
        return (False, f"node {why}")
    if pod.requests.fits_in(info.free):
        return None
    short = pod.requests.shortfall(info.free)
    text = ", ".join(f"Insufficient {k}" for k in short)
    if info.reserved and pod.requests.fits_in(info.free + info.reserved):
        text += f" ({info.reserved.gpus()} GPU(s) here are reserved for gangs)"
        return (False, text)  # preempting running pods would not free a reservation
    return (True, text)
