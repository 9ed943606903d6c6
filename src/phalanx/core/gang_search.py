"""The gang transaction's last resort in one domain: a depth-first search over nodes.

The fast placement (`phalanx.core.gang`) is greedy across units that differ: largest
first, best fit, and backtracking only over plan units. It can take the one node a later
unit needs, e.g. a 2-GPU member best-fitted onto a node with 2 GPUs and 64 CPUs, leaving
only a node with 4 CPUs for two 3-CPU members. When it fails, `search` tries every unit
on every node it fits, largest first, best fit first, undoing on a dead end, until all
are placed or `Budget` runs out. Three cuts keep it small without losing a placement:

* units of one class (same requests, same eligible nodes, no plan relations) are
  interchangeable, so each takes a node no earlier in the domain than the one before it;
* nodes with the same free capacity and the same eligibility for every unit are
  interchangeable, so only the first of them (in domain order) is tried;
* the search backs out as soon as the GPUs, CPU or memory the units left need exceed
  what is free on the nodes that could still hold the least of them.

Within its budget the search is exhaustive: it finds a placement whenever one exists. For
u units in a domain of m nodes it visits at most 2m(m^u - 1)/(m - 1) nodes (2,728 for 5
units and 4 nodes), so `SEARCH_BUDGET` covers such a gang in one pass over its domains:
every domain of a policy, or of a required level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from phalanx.core.gang_trial import Trial, Unit, amounts
from phalanx.core.model import Resources

# Node visits (one node checked for a unit or for the room) per gang placement, all
# domains together: some 20-40 ms of CPU at worst, spent only on gangs of differing units
# the fast placement refused although every class of them has room.
SEARCH_BUDGET = 4_096
# Gangs with more units are not searched: one unit per level of recursion.
SEARCH_UNITS = 256

# (unit, node, its free capacity now, whether the gang uses it) -> sort key, best first.
Preference = Callable[[Unit, str, Resources, bool], tuple[object, ...]]


@dataclass(slots=True)
class Budget:
    """Node visits the search may still make for this gang."""

    left: int = SEARCH_BUDGET


def search(
    order: Sequence[Unit],
    nodes: Sequence[str],
    trial: Trial,
    budget: Budget,
    *,
    candidates: Callable[[Unit, Sequence[str]], Sequence[str]],
    preference: Preference,
    spread: bool,
) -> dict[int, str] | None:
    """Unit index -> node for every unit of `order` (same-class units adjacent) on
    `nodes`, recorded in `trial`; None, with `trial` as it was, when there is none or
    the budget ran out first.

    `candidates(unit, nodes)` are the nodes of `nodes` the unit may use, in domain order;
    with `spread` a unit also keeps off nodes `trial` already uses.
    """
    # Each unit scans the domain once before the first placement is whole: a search that
    # cannot get that far is not begun (large gangs in large domains).
    if len(order) > SEARCH_UNITS or len(order) * len(nodes) > budget.left:
        return None
    position = {n: i for i, n in enumerate(nodes)}
    eligible_sets = list(dict.fromkeys(u.eligible for u in order))
    # Which units' eligible sets hold the node: with equal free capacity, equal nodes.
    signature = {n: tuple(n in e for e in eligible_sets) for n in nodes}
    allowed = {u.index: candidates(u, nodes) for u in order}
    reachable = sorted({n for names in allowed.values() for n in names}, key=position.__getitem__)
    # What units i.. need in all, and the least of each amount one of them needs.
    need = [(0, 0, 0)] * (len(order) + 1)
    least = [(0, 0, 0)] * (len(order) + 1)
    for i in range(len(order) - 1, -1, -1):
        a, n, m = amounts(order[i].requests), need[i + 1], least[i + 1]
        need[i] = (a[0] + n[0], a[1] + n[1], a[2] + n[2])
        least[i] = a if i == len(order) - 1 else (min(a[0], m[0]), min(a[1], m[1]), min(a[2], m[2]))
    overlay, used = trial.overlay, trial.used
    chosen: dict[int, str] = {}

    def share(name: str, i: int) -> tuple[int, int, int]:
        """What the node's free capacity adds to the room for units i.. (none if it
        cannot hold the least of them, or is used under spread)."""
        if spread and name in used:
            return (0, 0, 0)
        free = amounts(overlay.free(name))
        low = least[i]
        if free[0] < low[0] or free[1] < low[1] or free[2] < low[2]:
            return (0, 0, 0)
        return free

    def room_for(i: int) -> tuple[int, int, int]:
        budget.left -= len(reachable)
        g = c = m = 0
        for name in reachable:
            f = share(name, i)
            g, c, m = g + f[0], c + f[1], m + f[2]
        return (g, c, m)

    def solve(i: int, room: tuple[int, int, int]) -> bool:
        """Place units i..; `room` is the free capacity of the nodes that could still
        hold one of them: the search backs out as soon as it is less than they need."""
        want = need[i]
        if want[0] > room[0] or want[1] > room[1] or want[2] > room[2]:
            return False
        unit = order[i]
        floor = 0
        if i and order[i - 1].cls == unit.cls and not unit.relational:
            floor = position[chosen[order[i - 1].index]]
        seen: set[tuple[Resources, tuple[bool, ...]]] = set()
        options: list[tuple[tuple[object, ...], str]] = []
        for name in allowed[unit.index]:
            if position[name] < floor or (spread and name in used):
                continue
            if budget.left <= 0:
                return False
            budget.left -= 1
            free = overlay.free(name)
            if not unit.requests.fits_in(free):
                continue
            key = (free, signature[name])
            if key in seen:
                continue
            seen.add(key)
            options.append((preference(unit, name, free, name in used), name))
        options.sort()
        for _, name in options:
            before = share(name, i + 1) if i + 1 < len(order) else (0, 0, 0)
            chosen[unit.index] = name
            overlay.add(name, unit.requests)
            used[name] = used.get(name, 0) + 1
            if i + 1 == len(order):
                return True
            if least[i + 1] == least[i]:
                after = share(name, i + 1)
                rest = (
                    room[0] - before[0] + after[0],
                    room[1] - before[1] + after[1],
                    room[2] - before[2] + after[2],
                )
            else:  # the least need grew: nodes drop out of the room
                rest = room_for(i + 1)
            if solve(i + 1, rest):
                return True
            del chosen[unit.index]
            overlay.remove(name, unit.requests)
            used[name] -= 1
            if not used[name]:
                del used[name]
            if budget.left <= 0:
                return False
        return False

    return chosen if solve(0, room_for(0)) else None
