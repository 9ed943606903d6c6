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
2. a child group of a composite gang the victims take pods of stays at its own quorum or
   goes entirely: a child PodGroup at its `minCount`, a nested `gang` composite at its
   `minGroupCount` of child groups, a KAI leaf subgroup at its `minMember`, a KAI parent
   subgroup at its `minSubGroup`; one they take nothing of is left as it was, even below
   its own, and a nested `basic` composite, no gang, is held to nothing of its own;
3. every gang (any dialect) stays at its quorum (`minMember`, Volcano's task minima, a
   composite's `minGroupCount` of child groups, KAI's `minSubGroup`) or goes entirely.
   Upstream's `single` would let a gang go below its quorum member by member; Phalanx
   does not, since a gang below its quorum is a partial gang.

A victim being deleted or finished (`Pod.departing`) takes nothing: it is no member of
its gang or unit any more, though kube-scheduler proposes it until it is gone.

A gang that does not resolve now (its object being deleted, a composite waiting for a
child group, members the object refuses) still runs: it is judged by what the cluster
declares of it (`resolution.declared_group`), never by less; the PodGroups beneath a
composite that is gone or refused, as that composite's gang with every child group needed;
one nothing declares a size of (its object gone or refused, its members naming none), as
all its bound members: taking some takes them all.

What was decided per node is a `PreemptVerdict` (kept as proposed, widened, dropped, and
why); the answer to kube-scheduler, `Preemption.kept`, is derived from the verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from phalanx.core.cache import ClusterState
from phalanx.core.groups.composite import KIND, disruption_unit
from phalanx.core.model import ChildGroups, Dialect, GroupRef, Pod, PodGroup
from phalanx.core.quorum import has_quorum, task_shortfall
from phalanx.core.resolution import Resolution, Resolved, declared_group

Resolve = Callable[[GroupRef], Resolution]


class PreemptOutcome(StrEnum):
    """What Phalanx made of one node's proposed victims, as counted by
    phalanx_preemption_nodes_total{outcome}."""

    KEPT = "kept"  # agreed to as proposed
    WIDENED = "widened"  # agreed to with the rest of a gang or unit on that node added
    DROPPED = "dropped"  # refused: the node is no candidate for this preemptor


@dataclass(frozen=True, slots=True)
class Widening:
    """Pods added to a node's victims so that `unit` goes whole (or keeps its quorum)."""

    unit: str  # the gang's key, or the key of the `disruptionMode: all` object
    added: tuple[str, ...]  # pod UIDs


@dataclass(frozen=True, slots=True)
class PreemptVerdict:
    """Phalanx's answer about one node's proposed victims."""

    node: str
    outcome: PreemptOutcome
    victims: tuple[str, ...]  # the pod UIDs agreed to, in order; () when dropped
    # Each widening in the order made (a dropped node may have been widened first).
    widenings: tuple[Widening, ...] = ()
    unit: str = ""  # DROPPED: the gang or unit that would be left partial, if one
    reason: str = ""  # why it was widened or dropped ("" when kept)

    @property
    def added(self) -> tuple[str, ...]:
        """Every pod UID widening added to the proposed victims."""
        return tuple(uid for w in self.widenings for uid in w.added)


@dataclass(frozen=True, slots=True)
class Preemption:
    """The verdicts of one `/preempt`, one per proposed node, in the order proposed."""

    verdicts: tuple[PreemptVerdict, ...]

    @property
    def kept(self) -> dict[str, list[str]]:
        """The victim sets (pod UIDs per node) Phalanx agrees to: kube-scheduler's answer."""
        return {
            v.node: list(v.victims)
            for v in self.verdicts
            if v.outcome is not PreemptOutcome.DROPPED
        }


@dataclass(frozen=True, slots=True)
class _Partial:
    """A unit the victims would leave partly taken, and the rest that must go with them."""

    unit: str  # its key (a gang's, or a `disruptionMode: all` object's)
    what: str  # how it would be left, for people ("the victims would leave gang ...")
    rest: list[Pod]


def preempt(
    state: ClusterState, victims: Mapping[str, Sequence[str]], resolve: Resolve
) -> Preemption:
    """Phalanx's verdict on each node's proposed victims (pod UIDs per node)."""
    units = _Units(state)
    verdicts = []
    for node, uids in victims.items():
        chosen = dict.fromkeys(uids)
        if away := _elsewhere(state, node, chosen):
            verdicts.append(_bound_elsewhere(state, units, node, away))
            continue
        widenings: list[Widening] = []
        whys: list[str] = []
        while (partial := _left_partial(state, units, resolve, chosen)) is not None:
            if away := [p for p in partial.rest if state.bound_node(p) != node]:
                where = ", ".join(sorted({state.bound_node(p) for p in away}))
                why = f"{partial.what}, but {len(away)} of its {len(partial.rest)} other pod(s) "
                why += f"that would have to go too are not on {node} ({where})"
                dropped = PreemptOutcome.DROPPED
                verdicts.append(
                    PreemptVerdict(node, dropped, (), tuple(widenings), partial.unit, why)
                )
                break
            chosen.update(dict.fromkeys(p.uid for p in partial.rest))
            widenings.append(Widening(partial.unit, tuple(p.uid for p in partial.rest)))
            whys.append(f"{partial.what}: its {len(partial.rest)} other pod(s) on {node} go too")
        else:
            outcome = PreemptOutcome.WIDENED if widenings else PreemptOutcome.KEPT
            verdicts.append(
                PreemptVerdict(node, outcome, tuple(chosen), tuple(widenings), "", "; ".join(whys))
            )
    return Preemption(tuple(verdicts))


def _elsewhere(state: ClusterState, node: str, chosen: Iterable[str]) -> list[Pod]:
    """The victims proposed for `node` that are bound to another node. kube-scheduler 1.37
    proposes a `disruptionMode: all` unit spread over nodes as one node's victims, but
    looks up the victims an extender returns on that node alone: one such answer fails
    its whole preemption attempt, every candidate node with it."""
    pods = (p for u in chosen if (p := state.pod(u)) is not None)
    return [p for p in pods if state.bound_node(p) not in ("", node)]


def _bound_elsewhere(
    state: ClusterState, units: _Units, node: str, away: list[Pod]
) -> PreemptVerdict:
    """`node` dropped for proposing `away`, pods bound to other nodes."""
    names = sorted({u for p in away if (u := units.unit_of(p) or _gang_key(p))})
    of = f" of {', '.join(names)}" if names else ""
    where = ", ".join(sorted({state.bound_node(p) for p in away}))
    why = (
        f"{len(away)} proposed victim(s){of} are bound to other node(s) ({where}); "
        f"kube-scheduler takes {node}'s victims from {node} alone"
    )
    unit = names[0] if len(names) == 1 else ""
    return PreemptVerdict(node, PreemptOutcome.DROPPED, (), (), unit, why)


def _gang_key(pod: Pod) -> str:
    return pod.group.key if pod.group is not None else ""


def _left_partial(
    state: ClusterState, units: _Units, resolve: Resolve, chosen: Mapping[str, None]
) -> _Partial | None:
    """The first unit `chosen` takes only part of; None when there is none. A victim
    being deleted or finished takes nothing: it is no member of its gang or unit any more
    (kube-scheduler proposes such pods too, their resources not yet given back)."""
    pods = [p for u in chosen if (p := state.pod(u)) is not None and not p.departing]
    for unit in sorted({u for p in pods if (u := units.unit_of(p))}):
        members = units.members(unit)
        if rest := [p for p in members if p.uid not in chosen]:
            taken = len(members) - len(rest)
            what = f"the victims take {taken} of the {len(members)} bound pod(s) under {unit}"
            return _Partial(unit, f"{what} (disruptionMode all)", rest)
    judged: set[str] = set()
    for key in sorted({p.group.key for p in pods if p.group is not None}):
        gang = _gang(state, resolve, key)
        if gang.key in judged:  # PodGroups beneath one composite that cannot be read
            continue
        judged.add(gang.key)
        remaining = [p for p in gang.bound if p.uid not in chosen]
        if remaining and (partial := _short(gang, remaining)):
            return partial
    return None


@dataclass(frozen=True, slots=True)
class _Gang:
    """A gang as preemption judges it: its key, its quorum and its bound members."""

    key: str
    group: PodGroup
    bound: list[Pod]
    note: str = ""  # for people, after what it would be left with: how it was judged


def _gang(state: ClusterState, resolve: Resolve, key: str) -> _Gang:
    """The gang the members filed under `key` are in. One that does not resolve now (being
    deleted, waiting for a child group, refused) still runs, so it is judged by what
    `state` declares of it (`declared_group`): a composite's tree, not one member; a
    PodGroup beneath a composite that cannot be read, with every sibling. With nothing
    declaring it, by the most any member declares; with no member declaring a size either
    (its object gone or refused), as all its bound members, never as one."""
    ref = GroupRef.parse(key)
    resolution = resolve(ref)
    if isinstance(resolution, Resolved):
        return _Gang(key, resolution.group, state.bound_members(key))
    group = declared_group(state, ref)
    if group is None:
        bound = state.bound_members(key)
        members = state.members(key, include_finished=True)
        sizes = [p.min_member for p in members if p.min_member is not None]
        if sizes:  # declared, though not as one gang (its members disagree): the most
            return _Gang(key, PodGroup(ref.namespace, ref.name, max(sizes)), bound)
        # Its quorum unknown, only none or all of its bound members leave it whole, whatever
        # the quorum was: the strictest reading, as for a composite that cannot be read.
        unknown = PodGroup(ref.namespace, ref.name, max(len(bound), 1))
        note = "no object or member declares its size: every bound member counts"
        return _Gang(key, unknown, bound, note)
    if group.key == key:
        return _Gang(key, group, state.bound_members(key))
    # The composite above cannot be read: the bound pods of every PodGroup beneath it,
    # which the cache leaves filed under their PodGroups, each its PodGroup's as its task.
    tree = group.min_task_member
    names = [name for name, _ in tree.pod_groups()] if isinstance(tree, ChildGroups) else []
    bound = [
        replace(p, task=name)
        for name in names
        for p in state.bound_members(GroupRef(ref.namespace, name, Dialect.UPSTREAM).key)
    ]
    note = f"{KIND} {group.namespace}/{group.name} cannot be read: every child group counts"
    return _Gang(group.key, group, bound, note)


def _short(gang: _Gang, remaining: list[Pod]) -> _Partial | None:
    """Which of a gang's `remaining` bound members must go with the victims: those of a
    child group they take members of left below its own quorum, else all of them when
    the gang is below its own; None when what remains is whole. A child group they take
    nothing of is left as it was, even below its own quorum."""
    group = gang.group
    tree = group.min_task_member
    partial = _child_short(gang, tree, remaining) if isinstance(tree, ChildGroups) else None
    if partial is None and not has_quorum(group, remaining):
        shortfall = task_shortfall(group.min_task_member, remaining)
        what = _gang_left(gang.key, len(gang.bound), remaining, group.min_member, shortfall)
        partial = _Partial(gang.key, what, remaining)
    if partial is not None and gang.note:
        return _Partial(partial.unit, f"{partial.what} ({gang.note})", partial.rest)
    return partial


def _child_short(gang: _Gang, tree: ChildGroups, remaining: list[Pod]) -> _Partial | None:
    """The first child group beneath `tree`, narrowest first, that the victims take
    members of and leave below its own quorum, with what remains of it: a PodGroup (or
    KAI leaf subgroup) below its minimum, a nested composite (or KAI parent subgroup)
    below its own child groups. A nested `basic` composite is no gang: held to nothing."""
    left = {p.uid for p in remaining}
    taken = {p.task for p in gang.bound if p.uid not in left}
    for child in _beneath(tree):
        if isinstance(child, ChildGroups) and child.basic:
            continue
        names = {n for n, _ in child.pod_groups()} if isinstance(child, ChildGroups) else {child[0]}
        rest = [p for p in remaining if p.task in names]
        if not rest or not names & taken:
            continue
        if isinstance(child, ChildGroups):
            if shortfall := task_shortfall(child, rest):
                what = (
                    f"the victims would leave {child.label()} of gang {gang.key} with "
                    f"{len(rest)} bound member(s), below its quorum ({shortfall})"
                )
                return _Partial(gang.key, what, rest)
        elif len(rest) < child[1]:
            what = (
                f"the victims would leave {tree.LEAF} {child[0]} of gang {gang.key} with "
                f"{len(rest)} bound member(s), below its {tree.LEAF_MINIMUM} of {child[1]}"
            )
            return _Partial(gang.key, what, rest)
    return None


def _beneath(tree: ChildGroups) -> Iterator[tuple[str, int] | ChildGroups]:
    """Every child group beneath `tree`, each after those beneath it."""
    for child in tree.children:
        if isinstance(child, ChildGroups):
            yield from _beneath(child)
        yield child


def _gang_left(key: str, bound: int, remaining: list[Pod], need: int, shortfall: str) -> str:
    left = f"the victims would leave gang {key} with {len(remaining)} of its {bound} bound "
    if len(remaining) < need:
        return f"{left}member(s), below its quorum of {need}"
    return f"{left}member(s), below its quorum ({shortfall})"


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
        return (p for p in pods if not p.departing and state.is_bound(p))
