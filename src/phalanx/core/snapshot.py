"""Snapshots: a consistent read-only view of the cluster's nodes, and copy-on-write trials.

`NodeInfo` is one node with what is requested on it (bound and assumed pods) and reserved
by gangs; it is immutable, so a `Snapshot` is a shallow copy of the per-node map. The gang
transaction tries members on an `Overlay` (per-node deltas over a snapshot) and drops it to
abort. The cache these are taken from is `phalanx.core.cache.ClusterState`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from phalanx.core.model import (
    CPU,
    EMPTY,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    Node,
    Resources,
)

# The resources NodeInfo.common_free covers, in its order.
COMMON_RESOURCES = (CPU, MEMORY, PODS, NVIDIA_GPU)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node with what is requested on it (bound + assumed pods) and reserved by gangs."""

    node: Node
    requested: Resources = EMPTY
    reserved: Resources = EMPTY
    free: Resources = field(init=False)
    # (cpu, memory, pods, nvidia.com/gpu) free, as plain ints: the single-pod filter checks
    # thousands of nodes per request and this is its hot path.
    common_free: tuple[int, int, int, int] = field(init=False)

    def __post_init__(self) -> None:
        free = self.node.allocatable - self.requested - self.reserved
        object.__setattr__(self, "free", free)
        common = (free.get(CPU), free.get(MEMORY), free.get(PODS), free.get(NVIDIA_GPU))
        object.__setattr__(self, "common_free", common)

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent, read-only view of the nodes at one generation.

    Cheap: a shallow copy of the per-node map (NodeInfo values are immutable).
    """

    nodes: Mapping[str, NodeInfo]
    generation: int
    names: tuple[str, ...]  # sorted: every iteration over nodes is deterministic

    def get(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)

    def __iter__(self) -> Iterator[NodeInfo]:
        nodes = self.nodes
        return (nodes[n] for n in self.names)

    def __len__(self) -> int:
        return len(self.names)


class Overlay:
    """Copy-on-write trial state over a snapshot: per-node deltas, never a cluster clone.

    Dropping an overlay aborts the trial; the snapshot and the state are untouched.
    """

    __slots__ = ("_added", "_free", "snapshot")

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._added: dict[str, Resources] = {}
        self._free: dict[str, Resources] = {}

    def free(self, name: str) -> Resources:
        cached = self._free.get(name)
        if cached is not None:
            return cached
        return self.snapshot.nodes[name].free

    def add(self, name: str, requests: Resources) -> None:
        self._added[name] = self._added.get(name, EMPTY) + requests
        self._free[name] = self.snapshot.nodes[name].free - self._added[name]

    def remove(self, name: str, requests: Resources) -> None:
        self._added[name] = self._added.get(name, EMPTY) - requests
        self._free[name] = self.snapshot.nodes[name].free - self._added[name]

    @property
    def touched(self) -> Mapping[str, Resources]:
        """What the trial added, per node. For tests only: the transaction never reads it."""
        return {k: v for k, v in self._added.items() if v}
