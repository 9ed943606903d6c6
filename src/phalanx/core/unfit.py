"""Gangs that did not fit, remembered until capacity comes back.

On a full cluster kube-scheduler retries every refused member after each cluster event, and
each retry of a gang that cannot be placed planned it again on the whole snapshot: 6 to 13
ms of the event loop per refusal on 500 nodes, with kube-scheduler waiting on the answer.
Binding, reserving and claiming only take capacity, and a gang that found no placement
finds none on less of it. So a verdict holds while nothing was given back anywhere
(`ClusterState.freed`), no node changed what eligibility reads (`topology_generation`), and
the gang itself is as it was: the same gang object and the same members, compared as values.

The planner's heuristics are not proven monotone: a placement one of them missed on more
capacity might exist on less. Such a gang waits for the next capacity given back, which
on a full cluster is the next pod that ends or reservation that is released.
The refusal then names the shortfall as it was measured; it has only grown since.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

from phalanx.core.cache import ClusterState
from phalanx.core.gang import Unfit
from phalanx.core.model import Pod, PodGroup


@dataclass(frozen=True, slots=True)
class _Verdict:
    group: PodGroup
    members: tuple[Pod, ...]
    template: bool  # planned from the template before every member existed
    unfit: Unfit


class UnfitMemo:
    """The last unfit verdict per gang, valid for one (freed, topology) generation pair."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._verdicts: dict[str, _Verdict] = {}
        self._as_of = (-1, -1)

    def recall(self, group: PodGroup, members: Sequence[Pod], *, template: bool) -> Unfit | None:
        """The verdict of the last plan of this very gang, if nothing since can change it."""
        self._void_if_stale()
        verdict = self._verdicts.get(group.key)
        if (
            verdict is None
            or verdict.template != template
            or verdict.group != group
            or verdict.members != tuple(members)
        ):
            return None
        return verdict.unfit

    def remember(
        self, group: PodGroup, members: Sequence[Pod], unfit: Unfit, *, template: bool
    ) -> None:
        self._void_if_stale()
        self._verdicts[group.key] = _Verdict(group, tuple(members), template, unfit)

    def _void_if_stale(self) -> None:
        """Capacity came back or nodes changed since the verdicts were made: every one is
        void (and none is kept, so gangs that left the model do not accumulate here)."""
        as_of = (self._state.freed, self._state.topology_generation)
        if as_of != self._as_of:
            self._verdicts.clear()
            self._as_of = as_of

    def keep_only(self, live: Container[str]) -> None:
        """Drop the verdicts of gangs that left the model."""
        for key in [k for k in self._verdicts if k not in live]:
            del self._verdicts[key]

    def __len__(self) -> int:
        return len(self._verdicts)
