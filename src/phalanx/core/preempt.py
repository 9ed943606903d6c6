"""Preempt: keep only victim sets that leave every running gang whole or entirely gone.

Per node, a victim set that would take some members of a bound gang but leave it below
minMember, or below a Volcano task's minimum (`spec.minTaskMember`), is widened to the
gang's other members on the same node when that removes the gang entirely; otherwise the
node is dropped (kube-scheduler then looks elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from phalanx.core.cache import ClusterState
from phalanx.core.quorum import task_shortfall


def preempt(state: ClusterState, victims: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The victim sets (pod UIDs per node) Phalanx agrees to, widened where needed."""
    kept: dict[str, list[str]] = {}
    for node, uids in victims.items():
        chosen = list(dict.fromkeys(uids))
        ok = True
        touched = {
            p.group.key for u in chosen if (p := state.pod(u)) is not None and p.group is not None
        }
        for key in sorted(touched):
            group = state.group(key)
            members = state.bound_members(key)
            min_member = (
                group.min_member if group else max((p.min_member or 1 for p in members), default=1)
            )
            remaining = [p for p in members if p.uid not in chosen]
            minima = group.min_task_member if group else ()
            if not remaining or (
                len(remaining) >= min_member and not task_shortfall(minima, remaining)
            ):
                continue
            if all(state.bound_node(p) == node for p in remaining):
                chosen.extend(p.uid for p in remaining)
            else:
                ok = False
                break
        if ok:
            kept[node] = chosen
    return kept
