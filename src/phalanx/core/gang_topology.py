"""A gang with a topology constraint: the level walk and the slices.

The walk (`TopologySearch.search`) tries the domains of the preferred level first, then
one level wider at a time up to the required level (or the whole cluster):

    preferred ──no domain holds the gang──▶ one level wider ──▶ … ──▶ required (or cluster)
        │                                        │                        │
        └── first domain that holds it ──────────┴────────────────────────┴──▶ Found
                                                                    nothing ──▶ NotFound

At each level the domains whose free capacity could hold the gang are tried tightest fit
first (least free GPUs, then CPU and memory; ties by name), so small gangs fill broken
domains and whole ones stay free. With slices, each run of consecutive members goes,
one after the other, into the domain of the slice level that shares the most wider
domains with the gang's members so far, then the tightest. A composite gang's child
PodGroups with a topology key of their own are placed the same way, a child's members
being one slice (`GangTopology.slice_tasks`; the members' task is their PodGroup); tasks
at levels of their own (KAI's prefill in one clique, decode in one leaf) one level at a
time, narrowest first, each level's trials starting from what the levels before it took.

Sets of tasks held together (`GangTopology.task_sets`: a KAI parent subgroup's leaves, a
Grove constraint group's podgroups) nest, so they are placed as a tree: inside the gang's
domain, each outermost set goes into one domain of its level (every one with room tried,
nearest the members so far, then tightest), and what it holds (narrower sets, tasks with
levels, loose members) is placed inside that domain the same way; then the members in no
set, or those first when that fails. Without sets nothing of this runs.

Tasks' and sets' preferred levels (`GangTopology.preferences`) stay out of the walk: once a
domain holds the gang, it is placed again there with every preference held as if required,
each at its own level, then all of them one level wider at a time (`_prefer`), the first
placement kept, else the one without them. A gang that does not fit is never tried with
them, so it costs what it did; one that fits costs at most one more try per level.

Placing units inside one domain is the gang transaction's own (`Placer.place_in`); this
module only chooses domains and says what it found, as values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from phalanx.core.gang_explain import LevelMiss, topology_unfit_detail
from phalanx.core.gang_trial import HOPELESS_TRIES, Failure, Trial, Unit, amounts, requested
from phalanx.core.model import Pod, task_names
from phalanx.core.snapshot import Snapshot
from phalanx.core.subgroups import subgroups_of
from phalanx.core.topology import (
    CLUSTER,
    GangTopology,
    TaskPreferenceLevel,
    TaskSetLevel,
    TopologyIndex,
    member_order,
    short_name,
)
from phalanx.core.topology_usage import DomainFree


class Placer(Protocol):
    """What the walk needs of the gang transaction: trials, and units placed in a domain."""

    def trial(self) -> Trial: ...

    def place_in(
        self, order: Sequence[Unit], nodes: Sequence[str], trial: Trial | None = None
    ) -> dict[int, str] | Failure: ...


@dataclass(frozen=True, slots=True)
class Found:
    """Unit index -> node, and why no narrower level held the gang (one miss per level);
    `unmet`: why its tasks' and sets' preferences could not all be held at their own levels
    ("" when they were, or there are none)."""

    chosen: Mapping[int, str]
    misses: tuple[LevelMiss, ...]
    unmet: str = ""


@dataclass(frozen=True, slots=True)
class NotFound:
    """The part of the unfit reason about the last level tried."""

    detail: str


@dataclass(slots=True)
class _SliceGroup:
    """Units that must share one domain of the slice level: one slice's, or several slices'
    when a plan unit joins them."""

    label: str
    units: list[Unit]
    anchors: set[str]  # nodes of the group's bound members
    first: int  # position of its first slice
    level: int | None  # the level one domain of which holds it; None: any (a lone unit)
    task: str = ""  # the task of its units, for slices by task


@dataclass(frozen=True, slots=True)
class _HeldSet:
    """A task set to hold in one domain, with what it holds; sorts bound ones first, then
    the largest (GPUs, CPU, memory), then by label."""

    of: TaskSetLevel
    units: list[Unit]  # in placing order
    anchors: frozenset[str]  # nodes of its bound members
    need: tuple[int, int, int]

    def __lt__(self, other: _HeldSet) -> bool:
        return self._key() < other._key()

    def _key(self) -> tuple[object, ...]:
        return (not self.anchors, *(-x for x in self.need), self.of.label)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A domain of one level, judged by its free capacity over the gang's usable nodes."""

    domain: int  # its id at the level (0 for the whole cluster)
    name: str
    free: tuple[int, int, int]  # GPUs, CPU, memory
    fits: bool


def _largest_first(group: _SliceGroup) -> tuple[object, ...]:
    """Slice groups in placing order: bound ones first, then the largest (GPUs, CPU,
    memory), then the first in the members' order."""
    return (not group.anchors, *(-x for x in amounts(requested(group.units))), group.first)


def _better(best: Failure | None, result: Failure, domain: str) -> Failure:
    """Of two domains' failures, the one that placed more units, named by its domain."""
    if best is None or result.placed_units > best.placed_units:
        return Failure(result.placed_units, f"{domain}: {result.reason}")
    return best


def _fits_nowhere(label: str, noun: str, best: Failure | None, placed: int) -> Failure:
    """`label` (a set, a slice) fits in no domain (`noun`) of its level; `placed` units of
    the gang were placed before it, `best` the domain that came closest."""
    why = f"best: {best.reason}" if best is not None else "none has room for it"
    placed += best.placed_units if best is not None else 0
    return Failure(placed, f"{label} fits in no {noun} ({why})")


class TopologySearch:
    """One gang's level walk over one snapshot (see module docstring)."""

    def __init__(
        self,
        placer: Placer,
        snapshot: Snapshot,
        topology: GangTopology,
        index: TopologyIndex,
        free: DomainFree,
        *,
        members: Sequence[Pod],
        anchors: Mapping[str, str],
        anchor_pods: Sequence[Pod],
    ) -> None:
        self.placer = placer
        self.snapshot = snapshot
        self.topology = topology
        self.index = index
        self.free = free  # per domain, over the gang's usable nodes
        self.members = members
        self.anchors = anchors  # bound member uid -> node
        self.anchor_pods = anchor_pods
        self.anchor_nodes = frozenset(anchors.values())
        self._position: dict[int, int] = {}  # unit index -> its place in the placing order
        # Multi-layer slices by rank (`_layered`) and Volcano's subgroups (`_subgrouped`),
        # placed as tasks: member uid -> the task it is placed as, and each such task's
        # label in messages.
        self._placed_task: dict[str, str] = {}
        self._placed_label: dict[str, str] = {}
        if topology.slice_layers and topology.slice_size and not topology.slice_tasks:
            self.topology = self._layered(topology)
        elif topology.subgroups and not topology.slice_tasks:
            self.topology = self._subgrouped(topology)

    def _task(self, pod: Pod) -> str:
        """The task `pod` is placed as: its innermost slice for multi-layer slices, its
        subgroup for Volcano's ("" when in none), else its own (`Pod.task`)."""
        return self._placed_task.get(pod.uid, pod.task)

    def _subgrouped(self, topology: GangTopology) -> GangTopology:
        """Volcano's subgroups as tasks: each member (anchors included) in the subgroup its
        labels put it in (`subgroups_of`), each subgroup at its policy's required level,
        and its preferred one as a task's preference. Members in no subgroup are placed
        loose, as members of no task are."""
        pods = [p for p in self.anchor_pods if p.uid in self.anchors]
        by_policy = {s.policy: s for s in topology.subgroups}
        found = subgroups_of(by_policy, (*pods, *self.members))
        # A member in no subgroup is placed as one of no task, whatever its Volcano task.
        self._placed_task.update((p.uid, "") for p in (*pods, *self.members))
        required: dict[str, int] = {}
        preferences: list[TaskPreferenceLevel] = []
        for uid, (policy, name) in found.items():
            self._placed_task[uid] = name
            if name in self._placed_label:
                continue
            label = self._placed_label[name] = f"subgroup {name}"
            level = by_policy[policy]
            if level.required is not None:
                required[name] = level.required
            if level.preferred is not None and (
                level.required is None or level.preferred > level.required
            ):
                preferences.append(
                    TaskPreferenceLevel(
                        label, frozenset({name}), level.preferred, level.required, False
                    )
                )
        levels = sorted(required.items())
        shared = {level for _, level in levels}
        return replace(
            topology,
            subgroups=(),
            slice_tasks=frozenset(required),
            slice_noun="subgroup",
            slice_level=shared.pop() if len(shared) == 1 else None,
            task_levels=tuple(levels) if len(shared) > 1 else (),
            preferences=(*topology.preferences, *sorted(preferences, key=lambda p: p.label)),
        )

    def _layered(self, topology: GangTopology) -> GangTopology:
        """Multi-layer slices by rank as the tree of sets they are: each innermost slice
        (runs of `slice_size` members, anchors included, by rank) a task of its own at the
        slice level, and each wider layer's runs a set of the innermost slices it holds, at
        that layer's level. Sizes divide one another, so the runs nest."""
        size = topology.slice_size
        pods = [p for p in self.anchor_pods if p.uid in self.anchors]
        ranked = member_order((*pods, *self.members))
        count = -(-len(ranked) // size)
        names = [str(i + 1) for i in range(count)]
        for i, name in enumerate(names):
            run = ranked[i * size : (i + 1) * size]
            self._placed_task.update((p.uid, name) for p in run)
            self._placed_label[name] = f"slice {name} of {count} ({run[0].name}..{run[-1].name})"
        sets: list[TaskSetLevel] = []
        for outer, level in topology.slice_layers:
            per = outer // size  # innermost slices in one of this layer's
            total = -(-count // per)
            noun = short_name(topology.key(level))
            for m in range(total):
                run = ranked[m * outer : (m + 1) * outer]
                label = f"{noun} slice {m + 1} of {total} ({run[0].name}..{run[-1].name})"
                sets.append(TaskSetLevel(label, frozenset(names[m * per : (m + 1) * per]), level))
        return replace(
            topology,
            slice_size=0,
            slice_layers=(),
            slice_tasks=frozenset(names),
            slice_noun="slice",
            task_sets=(*topology.task_sets, *sets),
        )

    def search(
        self, units: Sequence[Unit], order: Sequence[Unit], usable: frozenset[str]
    ) -> Found | NotFound:
        """Where the units (placed in `order`) go on `usable` nodes, or why nowhere."""
        topology = self.topology
        total = requested(units)
        need = amounts(total)
        self._position = {u.index: i for i, u in enumerate(order)}
        # A slice of one member lies inside one domain of every level: no constraint.
        slices = self._slice_groups(units, order) if topology.slice_size > 1 else None
        if topology.slice_tasks or topology.task_sets:
            slices = self._task_groups(order)
        walk = topology.walk()
        misses: list[LevelMiss] = []
        split = False
        for position, level in enumerate(walk):
            last = position == len(walk) - 1
            # A level no node distinguishes from the narrower one has the same domains.
            if position and not last and self.index.same_as_narrower(level):
                continue
            candidates, split = self._candidates(level, usable, need)
            tried: tuple[int, str, str] | None = None
            hopeless = 0
            for cand in candidates:
                if not cand.fits:
                    # Only on the last level, and only a few: for the "best" in the reason.
                    if not last or tried is not None or hopeless == HOPELESS_TRIES:
                        break
                    hopeless += 1
                result = self._place_in(order, level, cand, usable, slices)
                if isinstance(result, dict):
                    chosen, unmet = self._prefer(order, level, cand, usable, result)
                    return Found(chosen, tuple(misses), unmet)
                if tried is None or result.placed_units > tried[0]:
                    tried = (result.placed_units, cand.name, result.reason)
            largest = max(candidates, key=lambda c: (c.free, -c.domain), default=None)
            misses.append(
                LevelMiss(
                    level,
                    topology.key(level),
                    sum(1 for c in candidates if c.fits),
                    (largest.name, largest.free[0]) if largest is not None else None,
                    tried,
                )
            )
        of_node = self.index.of_node
        indexed = sum(1 for n in usable if n in of_node)
        detail = topology_unfit_detail(
            misses[-1] if misses else None, total, anchors_split=split, no_domain=not indexed
        )
        if self.index.topology.adhoc and indexed < len(usable):
            # An ad-hoc topology's index leaves the nodes without its label out.
            label = self.index.topology.levels[0]
            detail += (
                f"; {len(usable) - indexed} eligible node(s) without label {label} "
                "cannot host a member"
            )
        return NotFound(detail)

    def _candidates(
        self, level: int, usable: frozenset[str], need: tuple[int, int, int]
    ) -> tuple[list[_Candidate], bool]:
        """The domains of `level` that hold every bound member, those whose free capacity
        could hold the gang first, tightest fit first, then the closest; and whether the
        bound members already span several domains."""
        if level == CLUSTER:
            free = self.free
            room = (
                (sum(free.gpus[0]), sum(free.cpu[0]), sum(free.memory[0]))
                if free.gpus
                else (0, 0, 0)
            )
            fits = all(have >= want for have, want in zip(room, need, strict=True))
            return [_Candidate(0, "the cluster", room, fits)], False
        of_node = self.index.of_node
        domains: Iterable[int] = range(len(self.index.domains[level]))
        if self.anchor_nodes:
            ids = {of_node[a][level] if a in of_node else -1 for a in self.anchor_nodes}
            if len(ids) != 1 or -1 in ids:
                return [], True
            domains = ids
        gpus, cpu, memory = self.free.gpus[level], self.free.cpu[level], self.free.memory[level]
        ranked: list[tuple[tuple[int, ...], _Candidate]] = []
        for d in domains:
            room = (gpus[d], cpu[d], memory[d])
            fits = room[0] >= need[0] and room[1] >= need[1] and room[2] >= need[2]
            if not fits and not any(room):
                continue  # no usable node there
            left = tuple(have - want for have, want in zip(room, need, strict=True))
            key = (0, *left, d) if fits else (1, *(-x for x in room), d)
            ranked.append((key, _Candidate(d, self.index.domains[level][d].name, room, fits)))
        ranked.sort(key=lambda kc: kc[0])
        return [c for _, c in ranked], False

    def _prefer(
        self,
        order: Sequence[Unit],
        level: int,
        cand: _Candidate,
        usable: frozenset[str],
        placed: dict[int, str],
    ) -> tuple[dict[int, str], str]:
        """The gang placed in `cand` (a domain of `level` that holds it: `placed`) with its
        tasks' and sets' preferences held as far as they can be: every one at its own level,
        then all of them one level wider at a time (`GangTopology.preferring`), the first
        placement found kept, else `placed`; and why the first try failed ("" if it did
        not). Tried only once a domain holds the gang without them, so a gang they cannot
        help costs no more, and in that domain only: at most one try per level."""
        if not self.topology.preferences:
            return placed, ""
        why = ""
        for held in self.topology.preferring(level, self.index.same_as_narrower):
            search = TopologySearch(
                self.placer,
                self.snapshot,
                held,
                self.index,
                self.free,
                members=self.members,
                anchors=self.anchors,
                anchor_pods=self.anchor_pods,
            )
            search._position = self._position
            search._placed_task, search._placed_label = self._placed_task, self._placed_label
            result = search._place_in(order, level, cand, usable, search._task_groups(order))
            if isinstance(result, dict):
                return result, why
            why = why or result.reason
        return placed, why

    def _nodes(self, level: int, cand: _Candidate, usable: frozenset[str]) -> tuple[str, ...]:
        if level == CLUSTER:
            of_node = self.index.of_node
            return tuple(n for n in self.snapshot.names if n in usable and n in of_node)
        return tuple(n for n in self.index.domains[level][cand.domain].nodes if n in usable)

    def _place_in(
        self,
        order: Sequence[Unit],
        level: int,
        cand: _Candidate,
        usable: frozenset[str],
        slices: list[_SliceGroup] | None,
    ) -> dict[int, str] | Failure:
        nodes = self._nodes(level, cand, usable)
        if slices is None:
            return self.placer.place_in(order, nodes)
        if self.topology.task_sets:
            # A set at the domain's level or wider is held by the domain itself.
            sets = [s for s in self.topology.task_sets if level == CLUSTER or s.level > level]
            if sets:
                return self._place_sets(order, slices, sets, nodes, level, taken=())
        return self._place_within(
            order, slices, nodes, level, taken=(), slice_level=self.topology.slice_level
        )

    def _place_within(
        self,
        order: Sequence[Unit],
        slices: Sequence[_SliceGroup],
        nodes: Sequence[str],
        level: int,
        *,
        taken: Sequence[tuple[Unit, str]],
        slice_level: int | None = None,
    ) -> dict[int, str] | Failure:
        """The units on `nodes`, a domain of `level`, each slice group in one domain of its
        own level; `taken`: units placed already, whose room is not there to take."""
        # A domain at a group's level or narrower lies inside one domain of that level.
        levels = {g.level for g in slices} | {slice_level}
        narrower = sorted(
            (lv for lv in levels if lv is not None and (level == CLUSTER or lv > level)),
            reverse=True,
        )
        if not narrower:
            return self.placer.place_in(order, nodes, self._trial(taken) if taken else None)
        if len(narrower) == 1 and all(g.level in (None, narrower[0]) for g in slices):
            return self._place_slices(slices, narrower[0], nodes, taken)
        return self._place_by_level(order, slices, narrower, nodes, taken)

    def _place_sets(
        self,
        order: Sequence[Unit],
        slices: Sequence[_SliceGroup],
        sets: Sequence[TaskSetLevel],
        nodes: Sequence[str],
        level: int,
        *,
        taken: Sequence[tuple[Unit, str]],
    ) -> dict[int, str] | Failure:
        """The units on `nodes`, a domain of `level`, with `sets` (each narrower than
        `level`) held: the outermost sets first, each in one domain of its level with what
        it holds placed inside that domain the same way (`_hold_sets`), then the units in
        no set around them; failing that, those units first, so that a narrow slice outside
        every set is not left without its only domain. Greedy across sets, as across
        slices; the first order's failure is told."""
        ranked = sorted(sets, key=lambda s: (-len(s.tasks), s.level, s.label))
        outermost: list[TaskSetLevel] = []
        for s in ranked:
            if not any(s.tasks <= t.tasks for t in outermost):
                outermost.append(s)
        held = frozenset().union(*(s.tasks for s in outermost))
        rest = [u for u in order if self._task(u.members[0]) not in held]
        rest_slices = [g for g in slices if g.task not in held]
        first: Failure | None = None
        for sets_first in (True, False) if rest else (True,):
            chosen: dict[int, str] = {}
            done = list(taken)
            result: dict[int, str] | Failure = chosen
            for step in (True, False) if sets_first else (False, True):
                if step:
                    result = self._hold_sets(
                        order, slices, ranked, nodes, outermost=outermost, taken=done
                    )
                else:
                    result = self._place_within(rest, rest_slices, nodes, level, taken=done)
                if isinstance(result, Failure):
                    break
                chosen.update(result)
                done += [(u, result[u.index]) for u in order if u.index in result]
            if isinstance(result, dict):
                return chosen
            result.placed_units += len(chosen)
            first = first or result
        assert first is not None  # at least one order was tried
        return first

    def _hold_sets(
        self,
        order: Sequence[Unit],
        slices: Sequence[_SliceGroup],
        sets: Sequence[TaskSetLevel],
        nodes: Sequence[str],
        *,
        outermost: Sequence[TaskSetLevel],
        taken: Sequence[tuple[Unit, str]],
    ) -> dict[int, str] | Failure:
        """Each of `outermost` (disjoint) in one domain of its level among `nodes`, in turn,
        bound ones first, then the largest: each domain that has room for it is tried, where
        it shares the most wider domains with the members so far first, then the tightest,
        until what the set holds (its units, its narrower sets and slices) is placed inside
        (`_place_sets` again, or `_place_within`)."""
        of_node = self.index.of_node
        done = list(taken)
        chosen: dict[int, str] = {}
        near: set[tuple[int, int]] = set()  # wider domains holding members so far
        for a in (*self.anchor_nodes, *(n for _, n in taken)):
            if a in of_node:
                near |= set(enumerate(of_node[a]))
        for held in sorted(h for h in (self._held(s, order) for s in outermost) if h.units):
            level, noun = held.of.level, short_name(self.topology.key(held.of.level))
            label = f"{held.of.label} ({task_names(held.of.tasks)} together)"
            by_domain, room = self._rooms(nodes, level, done)
            allowed: Iterable[int] = by_domain
            if held.anchors:
                ids = {of_node[a][level] if a in of_node else -1 for a in held.anchors}
                if len(ids) != 1 or -1 in ids:
                    return Failure(
                        len(chosen), f"{label}: its bound members already span more than one {noun}"
                    )
                allowed = [d for d in ids if d in by_domain]
            need = held.need
            around = {d: set(enumerate(of_node[ns[0]][:level])) for d, ns in by_domain.items()}
            ranked = sorted(
                (d for d in allowed if all(h >= w for h, w in zip(room[d], need, strict=True))),
                key=lambda d: (
                    -len(around[d] & near),
                    *(h - w for h, w in zip(room[d], need, strict=True)),
                    d,
                ),
            )
            inner_slices = [g for g in slices if g.task in held.of.tasks]
            inner = [t for t in sets if t.tasks <= held.of.tasks and t.level > level]
            best: Failure | None = None
            for d in ranked:
                result = (
                    self._place_sets(
                        held.units, inner_slices, inner, by_domain[d], level, taken=done
                    )
                    if inner
                    else self._place_within(
                        held.units, inner_slices, by_domain[d], level, taken=done
                    )
                )
                if isinstance(result, dict):
                    chosen.update(result)
                    done += [(u, result[u.index]) for u in held.units]
                    near |= around[d]
                    break
                best = _better(best, result, self.index.domains[level][d].name)
            else:
                return _fits_nowhere(label, noun, best, len(chosen))
        return chosen

    def _held(self, of: TaskSetLevel, order: Sequence[Unit]) -> _HeldSet:
        """What set `of` holds: its units in placing order, its bound members' nodes, and
        their total need."""
        units = [u for u in order if self._task(u.members[0]) in of.tasks]
        anchors = frozenset(
            self.anchors[p.uid]
            for p in self.anchor_pods
            if self._task(p) in of.tasks and p.uid in self.anchors
        )
        return _HeldSet(of, units, anchors, amounts(requested(units)))

    def _place_by_level(
        self,
        order: Sequence[Unit],
        slices: Sequence[_SliceGroup],
        levels: Sequence[int],
        nodes: Sequence[str],
        taken: Sequence[tuple[Unit, str]] = (),
    ) -> dict[int, str] | Failure:
        """Slice groups of several levels (`levels`, narrowest first): one level at a time,
        each over what the levels before it left, then every other unit anywhere in the
        domain. Domains of different levels overlap, so a level's trials start from what
        the levels before it took. Greedy: narrowest first, so a wider group cannot take the
        only domain a narrower one fits in; failing that, widest first, so a narrow group
        cannot take room in the only wider domain that fits another. A gang that fits only
        some other way is not found; the first order's failure is told."""
        first: Failure | None = None
        for ordered in (levels, levels[::-1]) if len(levels) > 1 else (levels,):
            chosen: dict[int, str] = {}
            done = list(taken)
            result: dict[int, str] | Failure = chosen
            for slice_level in ordered:
                groups = [g for g in slices if g.level == slice_level]
                result = self._place_slices(groups, slice_level, nodes, done)
                if isinstance(result, Failure):
                    break
                chosen.update(result)
                done += [(u, result[u.index]) for g in groups for u in g.units]
            if isinstance(result, dict):
                rest = [u for u in order if u.index not in chosen]
                result = self.placer.place_in(rest, nodes, self._trial(done)) if rest else {}
                if isinstance(result, dict):
                    return {**chosen, **result}
            result.placed_units += len(chosen)
            first = first or result
        assert first is not None  # at least one order was tried
        return first

    def _trial(self, taken: Sequence[tuple[Unit, str]]) -> Trial:
        """A fresh trial holding the units already placed on other levels' domains."""
        trial = self.placer.trial()
        for unit, node in taken:
            trial.take(node, unit)
        return trial

    def _place_slices(
        self,
        slices: Sequence[_SliceGroup],
        level: int,
        nodes: Sequence[str],
        taken: Sequence[tuple[Unit, str]] = (),
    ) -> dict[int, str] | Failure:
        """Each slice group inside one domain of the slice level, in turn (greedy: right for
        interchangeable slices, which is the usual). A slice goes where it shares the most
        wider domains with the gang's members so far (a leaf already used before another
        leaf), then to the tightest fit. A slice that does not fit beside the slices already
        in a domain is tried once more with them, all packed together: one at a time, the
        first may have spread over the nodes the next needs whole. `taken`: units already
        placed (by another level's slices), whose room is not there to take."""
        placer, of_node = self.placer, self.index.of_node
        by_domain, room = self._rooms(nodes, level, taken)
        # One trial per domain: domains share no node, and a domain's slices can be packed
        # again together without undoing the others'.
        trials: dict[int, Trial] = {}
        placed: dict[int, list[Unit]] = {}
        position = self._position
        chosen: dict[int, str] = {}
        noun = short_name(self.topology.key(level))

        def wider(node: str) -> set[tuple[int, int]]:
            return {(lv, d) for lv, d in enumerate(of_node[node][:level])}

        near: set[tuple[int, int]] = set()  # wider domains holding members so far
        for a in (*self.anchor_nodes, *(n for _, n in taken)):
            if a in of_node:
                near |= wider(a)
        around = {d: wider(members[0]) for d, members in by_domain.items()}
        for group in slices:
            need = [0, 0, 0]
            for u in group.units:
                for i, amount in enumerate(amounts(u.requests)):
                    need[i] += amount
            allowed: Iterable[int] = by_domain
            if group.anchors:
                ids = {of_node[a][level] if a in of_node else -1 for a in group.anchors}
                if len(ids) != 1 or -1 in ids:
                    return Failure(
                        len(chosen),
                        f"{group.label}: its bound members already span more than one {noun}",
                    )
                allowed = [d for d in ids if d in by_domain]
            ranked = sorted(
                (d for d in allowed if all(h >= w for h, w in zip(room[d], need, strict=True))),
                key=lambda d: (
                    -len(around[d] & near),
                    *(h - w for h, w in zip(room[d], need, strict=True)),
                    d,
                ),
            )
            best: Failure | None = None
            for d in ranked:
                trial = trials.get(d)
                if trial is None:
                    trial = trials[d] = self._trial(taken)
                result = placer.place_in(group.units, by_domain[d], trial)
                if isinstance(result, Failure) and placed.get(d):
                    together = sorted((*placed[d], *group.units), key=lambda u: position[u.index])
                    fresh = self._trial(taken)
                    again = placer.place_in(together, by_domain[d], fresh)
                    if isinstance(again, dict):
                        trials[d], result = fresh, again
                if isinstance(result, dict):
                    chosen.update(result)
                    placed.setdefault(d, []).extend(group.units)
                    for i in range(3):
                        room[d][i] -= need[i]
                    near |= around[d]
                    break
                best = _better(best, result, self.index.domains[level][d].name)
            else:
                return _fits_nowhere(group.label, noun, best, len(chosen))
        return chosen

    def _rooms(
        self, nodes: Sequence[str], level: int, taken: Sequence[tuple[Unit, str]]
    ) -> tuple[dict[int, list[str]], dict[int, list[int]]]:
        """`nodes` by their domain of `level`, and each domain's free GPUs, CPU and memory
        less what `taken` holds there."""
        of_node, infos = self.index.of_node, self.snapshot.nodes
        by_domain: dict[int, list[str]] = {}
        room: dict[int, list[int]] = {}
        for n in nodes:
            d = of_node[n][level]
            by_domain.setdefault(d, []).append(n)
            have = room.setdefault(d, [0, 0, 0])
            for i, amount in enumerate(amounts(infos[n].free)):
                have[i] += max(0, amount)
        for unit, n in taken:
            d = of_node[n][level]
            if d in room:
                for i, amount in enumerate(amounts(unit.requests)):
                    room[d][i] -= amount
        return by_domain, room

    def _task_groups(self, order: Sequence[Unit]) -> list[_SliceGroup]:
        """Slices by task: the units of each task in `slice_tasks` (a composite's child
        PodGroup, an LWS subgroup; by their first member's task), and every other unit
        alone; bound ones first, then the largest, as `_slice_groups`. Precondition: a
        unit's members share one task (a composite has no plan, so its units are single
        members)."""
        tasks = self.topology.slice_tasks
        groups: dict[str, _SliceGroup] = {}
        for position, u in enumerate(order):
            task = self._task(u.members[0])
            name = task if task in tasks else f"/unit {u.index}"
            group = groups.get(name)
            if group is None:
                label = (
                    self._placed_label.get(task, f"{self.topology.slice_noun} {task}")
                    if task in tasks
                    else f"member {u.members[0].name}"
                )
                level = self.topology.task_level(task)
                group = groups[name] = _SliceGroup(label, [], set(), position, level, task)
            group.units.append(u)
        for pod in self.anchor_pods:
            node = self.anchors.get(pod.uid)
            if node is not None and self._task(pod) in groups:
                groups[self._task(pod)].anchors.add(node)

        return sorted(groups.values(), key=_largest_first)

    def _slice_groups(self, units: Sequence[Unit], order: Sequence[Unit]) -> list[_SliceGroup]:
        """Runs of `slice_size` consecutive members (anchors included) by rank, joined where
        a plan unit spans two; the groups to place, bound ones first, then the largest (GPUs,
        CPU, memory) first: a small slice placed first may take the one domain a larger one
        fits in, never the other way round when both fit there."""
        size = self.topology.slice_size
        pods = [p for p in self.anchor_pods if p.uid in self.anchors]
        ranked = member_order((*pods, *self.members))
        slice_of = {p.uid: i // size for i, p in enumerate(ranked)}
        count = -(-len(ranked) // size)
        root = list(range(count))

        def find(i: int) -> int:
            while root[i] != i:
                root[i] = root[root[i]]
                i = root[i]
            return i

        for u in units:
            first = find(slice_of[u.members[0].uid])
            for p in u.members[1:]:
                root[find(slice_of[p.uid])] = first
        groups: dict[int, _SliceGroup] = {}
        for i in range(count):
            r = find(i)
            names = [p.name for p in ranked[i * size : (i + 1) * size]]
            shown = f"slice {i + 1} of {count} ({names[0]}..{names[-1]})"
            group = groups.get(r)
            if group is None:
                groups[r] = _SliceGroup(shown, [], set(), i, self.topology.slice_level)
            else:
                group.label += f" + {shown}"
        for u in order:
            groups[find(slice_of[u.members[0].uid])].units.append(u)
        for uid, node in self.anchors.items():
            if uid in slice_of:
                groups[find(slice_of[uid])].anchors.add(node)

        return sorted((g for g in groups.values() if g.units), key=_largest_first)
