"""The values the planner returns: the framework answer for one pod, and what changed.

`FilterResult` is what kube-scheduler gets back (feasible nodes, and why not the others).
`FilterDecision` is the whole decision of one filter call: that answer plus the reservation
it made, if any, and the gang events worth reporting. `Reserved` / `NotReserved` answer
`GangPlanner.reserve_recorded` (a gang held on the nodes its commit record names). Callers
act on the value; nobody compares the model before and after, or drains a list, to learn
what happened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from phalanx.core.cache import Reservation
from phalanx.core.journal import GangEvent


@dataclass(frozen=True, slots=True)
class FilterResult:
    """The framework answer for one pod: feasible nodes and why the others are not."""

    feasible: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)  # preemption might help
    unresolvable: Mapping[str, str] = field(default_factory=dict)  # it would not
    error: str = ""


@dataclass(frozen=True, slots=True)
class FilterDecision:
    """One filter call's answer and its effects on the model."""

    result: FilterResult
    reserved: Reservation | None = None  # published by this call (the gang's first member)
    events: tuple[GangEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class Reserved:
    """A reservation published outside filter, and the journal's note of it."""

    reservation: Reservation
    event: GangEvent | None  # None: it repeats the gang's last decision


@dataclass(frozen=True, slots=True)
class NotReserved:
    """Why nothing was reserved; the model and the journal are unchanged."""

    reason: str


def refuse_all(nodes: Sequence[str], reason: str) -> FilterResult:
    """Every offered node unresolvable for the same reason (preemption would not help)."""
    return FilterResult(unresolvable=dict.fromkeys(nodes, reason))
