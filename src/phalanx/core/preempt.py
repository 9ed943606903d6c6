"""Preempt: keep only victim sets that leave every running gang whole or entirely gone.

kube-scheduler proposes victims per node; per node, Phalanx checks each unit the set
touches and, when one would be left partly taken, widens the set to that unit's other
bound pods if they are all on the same node, else drops the node (kube-scheduler then
looks elsewhere). Repeated until nothing is left partial. The units, narrowest first:

1. upstream's `spec.disruptionMode: all`: the highest PodGroup or CompositePodGroup with
   `all` above a victim (`composite.disruption_unit`) goes whole, every bound pod beneath
   it, or not at all; so one spread over nodes is never preempted through Phalanx: a
   node's victims must all be on that node (`_elsewhere`), as kube-scheduler can only
   take back those;
2. a child PodGroup of a composite gang stays at its own `minCount` or goes entirely;
3. every gang (any dialect) stays at its quorum (`minMember`, Volcano's task minima, a
   composite's `minGroupCount` of child groups) or goes entirely. Upstream's `single`
   would let a gang go below its quorum member by member; Phalanx does not, since a gang
   below its quorum is a partial gang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from phalanx.core.cache import ClusterState
from phalanx.core.groups.composite import disruption_unit
from phalanx.core.model import ChildGroups, Dialect, GroupRef, Pod
from phalanx.core.quorum import has_quorum, task_shortfall
from phalanx.core.resolution import Resolution, Resolved

Resolve = Callable[[GroupRef], Resolution]


def preempt(
    state: ClusterState, victims: Mapping[str, Sequence[str]], resolve: Resolve
) -> dict[str, list[str]]:
    """The victim sets (pod UIDs per node) Phalanx agrees to, widened where needed."""
    units = _Units(state)
    kept: dict[str, list[str]] = {}
    for node, uids in victims.items():
        chosen = dict.fromkeys(uids)
        if _elsewhere(state, node, chosen):
            continue
        while (partial := _left_partial(state, units, resolve, chosen)) is not None:
            if any(state.bound_node(p) != node for p in partial):
                break
            chosen.update(dict.fromkeys(p.uid for p in partial))
        else:
            kept[node] = list(chosen)
    return kept


def _elsewhere(state: ClusterState, node: str, chosen: Iterable[str]) -> bool:
    """Whether victims proposed for `node` are bound to another node. kube-scheduler 1.37
    proposes a `disruptionMode: all` unit spread over nodes as one node's victims, but
    looks up the victims an extender returns on that node alone: one such answer fails
    its whole preemption attempt, every candidate node with it."""
    pods = (p for u in chosen if (p := state.pod(u)) is not None)
    return any(state.bound_node(p) not in ("", node) for p in pods)


def _left_partial(
    state: ClusterState, units: _Units, resolve: Resolve, chosen: Mapping[str, None]
) -> list[Pod] | None:
    """The rest of the first unit `chosen` takes only part of; None when there is none."""
    pods = [p for u in chosen if (p := state.pod(u)) is not None]
    for unit in sorted({u for p in pods if (u := units.unit_of(p))}):
        if rest := [p for p in units.members(unit) if p.uid not in chosen]:
            return rest
    for key in sorted({p.group.key for p in pods if p.group is not None}):
        remaining = [p for p in state.bound_members(key) if p.uid not in chosen]
        if remaining and (partial := _short(state, key, remaining, resolve)):
            return partial
    return None


def _short(state: ClusterState, key: str, remaining: list[Pod], resolve: Resolve) -> list[Pod]:
    """Which of a gang's `remaining` bound members must go with the victims: a child
    PodGroup left below its own quorum, else all of them when the gang is below its own;
    none when what remains is whole."""
    resolution = resolve(GroupRef.parse(key))
    if not isinstance(resolution, Resolved):
        # Not resolvable now (its object is gone or invalid): as the members declare it.
        group = state.group(key)
        need = group.min_member if group else max(p.min_member or 1 for p in remaining)
        minima = group.min_task_member if group else ()
        whole = len(remaining) >= need and not task_shortfall(minima, remaining)
        return [] if whole else remaining
    group = resolution.group
    if isinstance(group.min_task_member, ChildGroups):
        for name, need in group.min_task_member.pod_groups():
            child = [p for p in remaining if p.task == name]
            if 0 < len(child) < need:
                return child
    return [] if has_quorum(group, remaining) else remaining


class _Units:
    """The `disruptionMode: all` units one preempt call meets: a pod's unit, and the live
    bound pods beneath a unit (every pod of the cluster scanned once, when first asked)."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._by_group: dict[str, str] = {}  # a PodGroup's key -> its unit's key
        self._members: dict[str, list[Pod]] | None = None

    def unit_of(self, pod: Pod) -> str:
        """The key of `pod`'s `all` unit, "" when it has none."""
        ref = self._state.declared_group(pod)
        if ref is None or ref.dialect is not Dialect.UPSTREAM or ref.pod_group:
            return ""  # only a standalone upstream PodGroup has a disruption mode
        if ref.key not in self._by_group:
            group = self._state.group(ref.key)
            found = disruption_unit(group, self._state.composite) if group else ""
            self._by_group[ref.key] = found
        return self._by_group[ref.key]

    def members(self, unit: str) -> list[Pod]:
        if self._members is None:
            self._members = {}
            for pod in self._live_bound(self._state.pods()):
                if key := self.unit_of(pod):
                    self._members.setdefault(key, []).append(pod)
        return self._members.get(unit, [])

    def _live_bound(self, pods: Iterable[Pod]) -> Iterable[Pod]:
        state = self._state
        return (p for p in pods if not (p.terminal or p.deleting) and state.is_bound(p))
