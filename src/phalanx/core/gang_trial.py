"""The pieces of one gang's trial placement that its searches share.

`phalanx.core.gang` places units on the domains of a placement policy,
`phalanx.core.gang_topology` walks topology levels and slices; both place units on a
`Trial` (a copy-on-write overlay of the snapshot) and report a `Failure` when a domain
cannot hold them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from phalanx.core.model import CPU, EMPTY, MEMORY, Pod, Resources
from phalanx.core.snapshot import Overlay

# Domains too small for the whole gang are tried only this often, to name the closest.
HOPELESS_TRIES = 3


@dataclass(slots=True)
class Unit:
    """Members that must share a node, placed as one."""

    index: int
    members: tuple[Pod, ...]
    requests: Resources
    eligible: frozenset[str]
    ids: frozenset[str]  # plan ids of its members
    relational: bool
    cls: int = 0  # units with the same class are interchangeable


@dataclass(slots=True)
class Failure:
    """How far a try in one domain got, and why the rest did not fit."""

    placed_units: int
    reason: str


@dataclass(slots=True)
class Trial:
    """One trial's state: capacity used so far, and how many units sit on each node."""

    overlay: Overlay
    used: dict[str, int]

    def take(self, node: str, unit: Unit) -> None:
        """`unit` placed on `node`: its requests used there, one more unit on it."""
        self.overlay.add(node, unit.requests)
        self.used[node] = self.used.get(node, 0) + 1


def requested(units: Iterable[Unit]) -> Resources:
    """What `units` ask for together."""
    total = EMPTY
    for u in units:
        total = total + u.requests
    return total


def amounts(r: Resources) -> tuple[int, int, int]:
    """GPUs, CPU (millicores) and memory (bytes): what domains are ranked by."""
    return (r.gpus(), r.get(CPU), r.get(MEMORY))
