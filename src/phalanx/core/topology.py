"""Multi-level topology: named topologies, the index of nodes into domains, gang intent.

A *topology* is an ordered list of node label keys, widest first (the default: spine >
leaf > NVLink clique > host). A *domain* of level L is a set of nodes that agree on every
level up to L. Several named topologies may be configured (the first is the default); a
gang names one with `phalanx.io/topology`, the way Kueue's ResourceFlavors name a
`Topology`.

How a node's labels become domains (`build_index`):

* A level a node lacks is skipped for that node: its domain at that level is the one of the
  next narrower level it has (a GB200 node with a clique but no leaf label has its clique
  for a leaf), and a node with none of the narrower levels is its own domain (a node outside
  any clique is its own NVLink domain, as `interconnect-local` has it). Domains therefore
  nest: each domain of level L+1 lies inside one domain of level L.
* A label value is expected under one wider domain only (NVIDIA's clique ids and Topograph's
  names are unique). A node whose value sits under another wider domain than most nodes with
  that value (a clique under two leaves) is reported once, as a `TopologyFinding`, and is its
  own domain from that level down.

The index holds labels only, never capacity: it is rebuilt when nodes come, go or change
labels (`ClusterState.topology_generation`), and read against each snapshot's free capacity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from phalanx.core.errors import TopologyConfigError, quoted
from phalanx.core.model import (
    Node,
    Placement,
    Pod,
    PodGroup,
    PolicyKind,
    SubGroupPolicy,
    TaskSet,
    TopologyConstraint,
    task_names,
    tasks_in_levels,
)
from phalanx.core.names import is_qualified_name
from phalanx.core.topology_annotations import is_topology_name

SPINE_LABEL = "network.topology.nvidia.com/spine"
LEAF_LABEL = "network.topology.nvidia.com/leaf"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_TOPOLOGY_NAME = "default"
DEFAULT_LEVELS = (SPINE_LABEL, LEAF_LABEL, CLIQUE_LABEL, HOSTNAME_LABEL)
# Kueue's limit on levels per Topology.
MAX_LEVELS = 16
CLUSTER = -1  # the level index that stands for the whole cluster (one domain)


# --- Configuration ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Topology:
    """Node label keys from the widest level to the narrowest; a level is named by its key.

    `adhoc`: not configured but made for one gang from a node label (`of_label`); a node
    without that label is in none of its domains, so it hosts no member.
    """

    name: str
    levels: tuple[str, ...]
    adhoc: bool = False

    @classmethod
    def of_label(cls, key: str) -> Topology:
        """The one-level topology of node label `key`: a domain per value, as upstream's
        PodGroup topology key has it. Named by the key; `IndexCache` keeps such indexes
        apart from the configured ones, whose names could read the same."""
        return cls(key, (key,), adhoc=True)

    def level(self, key: str) -> int | None:
        """The position of level `key` (0 = widest), or None when it is not a level here.

        `key` is a label key, or `tier:<n>` (a Volcano HyperNode tier): the n-th level
        counted up from the narrowest level above a node, so `tier:1` of the default
        topology is nvidia.com/gpu.clique and `tier:3` the spine.
        """
        tier = _tier(key)
        if tier is not None:
            position = self.tiers - tier
            return position if 0 <= position < self.tiers and tier > 0 else None
        try:
            return self.levels.index(key)
        except ValueError:
            return None

    @property
    def tiers(self) -> int:
        """How many levels lie above a node: every level but the hostname one."""
        return len(self.levels) - (1 if self.levels[-1:] == (HOSTNAME_LABEL,) else 0)

    def tier_names(self) -> str:
        """The tiers for a message: `tier:1 = <narrowest above a node> … tier:n = <widest>`."""
        if not self.tiers:
            return "none: its only level is the node itself"
        first = f"tier:1 = {self.levels[self.tiers - 1]}"
        return first if self.tiers == 1 else f"{first} … tier:{self.tiers} = {self.levels[0]}"

    def __str__(self) -> str:
        return f"{self.name}={','.join(self.levels)}"


@dataclass(frozen=True, slots=True)
class Topologies:
    """The configured topologies; the first is the default one."""

    all: tuple[Topology, ...]

    @property
    def default(self) -> Topology:
        return self.all[0]

    def get(self, name: str) -> Topology | None:
        """The topology called `name` ("" = the default one), or None."""
        if not name:
            return self.default
        return next((t for t in self.all if t.name == name), None)

    def __str__(self) -> str:
        return ";".join(str(t) for t in self.all)


DEFAULT_TOPOLOGIES = Topologies((Topology(DEFAULT_TOPOLOGY_NAME, DEFAULT_LEVELS),))


def parse_topologies(text: str) -> Topologies:
    """The topology configuration: `name=key,key,...` entries separated by `;` or new lines,
    levels widest first; the first entry is the default. A lone entry may omit `name=`
    (it is then "default"); empty text is the default topology.

        default=network.topology.nvidia.com/spine,network.topology.nvidia.com/leaf,
                nvidia.com/gpu.clique,kubernetes.io/hostname;rack=example.com/row,example.com/rack

    Raises `TopologyConfigError` naming the entry and what is wrong with it.
    """
    entries = [e.strip() for e in re.split(r"[;\n]", text) if e.strip()]
    if not entries:
        return DEFAULT_TOPOLOGIES
    topologies: list[Topology] = []
    for position, entry in enumerate(entries, 1):
        name, equals, keys = entry.partition("=")
        if not equals:
            if len(entries) > 1:
                raise TopologyConfigError(
                    f"entry {position} ({quoted(entry)}) needs a name: name=key,key,..."
                )
            name, keys = DEFAULT_TOPOLOGY_NAME, entry
        name = name.strip()
        if not is_topology_name(name):
            raise TopologyConfigError(
                f"{quoted(name)} is not a topology name (lower-case letters, digits and -)"
            )
        if any(t.name == name for t in topologies):
            raise TopologyConfigError(f"topology {name} is configured twice")
        levels = tuple(k.strip() for k in keys.replace("\n", "").split(","))
        topologies.append(Topology(name, _checked_levels(name, levels)))
    return Topologies(tuple(topologies))


def _checked_levels(name: str, levels: tuple[str, ...]) -> tuple[str, ...]:
    if levels == ("",):
        raise TopologyConfigError(f"topology {name} has no levels")
    if len(levels) > MAX_LEVELS:
        raise TopologyConfigError(f"topology {name} has {len(levels)} levels; at most 16")
    for key in levels:
        if not is_qualified_name(key):
            raise TopologyConfigError(
                f"topology {name}: {quoted(key)} is not a node label key "
                "(e.g. nvidia.com/gpu.clique)"
            )
    repeated = sorted({k for k in levels if levels.count(k) > 1})
    if repeated:
        raise TopologyConfigError(f"topology {name} names level {repeated[0]} twice")
    if HOSTNAME_LABEL in levels[:-1]:
        raise TopologyConfigError(
            f"topology {name}: {HOSTNAME_LABEL} can only be the narrowest level"
        )
    return levels


_TIER = re.compile(r"tier:([0-9]+)")
_MAX_TIER_DIGITS = 18  # beyond any topology; Volcano's int64 field can hold 19 digits


def _tier(key: str) -> int | None:
    """n for a `tier:<n>` level name (Volcano's HyperNode tiers), else None. A number too
    long to be any tier stays one (too high), never a long int conversion."""
    found = _TIER.fullmatch(key)
    if found is None:
        return None
    digits = found.group(1)
    return int(digits) if len(digits) <= _MAX_TIER_DIGITS else 10**_MAX_TIER_DIGITS


def short_name(key: str) -> str:
    """The noun people use for a level: "clique" for nvidia.com/gpu.clique, "leaf", "rack"."""
    return key.rpartition("/")[2].rpartition(".")[2] or key


# --- The index ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Domain:
    """One domain of one level: `name` is `key=value` (or `node <name>` for a node that is
    its own domain); `nodes` are sorted; `parent` is the id of the domain of the next wider
    level holding it (-1 at the widest level)."""

    level: int
    name: str
    nodes: tuple[str, ...]
    parent: int = -1


@dataclass(frozen=True, slots=True)
class TopologyFinding:
    """A node whose labels contradict the others' (reported once, per index build)."""

    node: str
    level: str
    value: str
    reason: str

    def __str__(self) -> str:
        return f"node {self.node}: {self.reason}"


@dataclass(frozen=True, slots=True)
class TopologyIndex:
    """The nodes of one topology grouped into domains, level by level.

    A domain's id is its position in `domains[level]`, which is sorted by name, so
    comparing ids breaks ties by name.
    """

    topology: Topology
    domains: tuple[tuple[Domain, ...], ...]  # per level
    of_node: Mapping[str, tuple[int, ...]]  # node -> its domain id at every level
    findings: tuple[TopologyFinding, ...] = ()

    def domain(self, level: int, node: str) -> Domain | None:
        ids = self.of_node.get(node)
        return self.domains[level][ids[level]] if ids is not None else None

    def same_as_narrower(self, level: int) -> bool:
        """Whether no node has this level's label where it differs from the narrower one:
        the two levels then have the same domains (domains nest, so equal counts suffice).
        For `CLUSTER`: whether the widest level has one domain, the cluster's."""
        if level == CLUSTER:
            return len(self.domains) > 0 and len(self.domains[0]) == 1
        return level + 1 < len(self.domains) and len(self.domains[level]) == len(
            self.domains[level + 1]
        )


_Path = tuple[str | None, ...]


def build_index(topology: Topology, nodes: Iterable[Node]) -> TopologyIndex:
    """Group `nodes` into the domains of every level of `topology` (see module docstring);
    an ad-hoc topology's index holds only the nodes that carry its label."""
    keys = topology.levels
    depth = len(keys)
    if topology.adhoc:
        nodes = (n for n in nodes if n.labels.get(keys[0]))
    paths: dict[str, _Path] = {
        n.name: tuple(n.labels.get(k) or None for k in keys)
        for n in sorted(nodes, key=lambda n: n.name)
    }
    # Every distinct path prefix gets an int: prefixes[node][j] stands for the node's values
    # at levels 0..j, so comparing domains never rehashes label tuples.
    interned: dict[tuple[int, str | None], int] = {}
    prefixes: dict[str, list[int]] = {}
    for node, path in paths.items():
        last, mine = -1, []
        for value in path:
            last = interned.setdefault((last, value), len(interned))
            mine.append(last)
        prefixes[node] = mine
    broken, findings = _inconsistencies(keys, paths, prefixes)
    members: list[dict[object, list[str]]] = [{} for _ in keys]
    names: list[dict[object, str]] = [{} for _ in keys]
    idents: dict[str, list[object]] = {}
    for node, path in paths.items():
        stop = broken.get(node, depth)
        mine_ids: list[object] = [None] * depth
        # Narrowest level first: a level the node lacks takes the next narrower one it has.
        narrower: object = None
        shown = ""
        for level in range(depth - 1, -1, -1):
            if level >= stop:
                narrower = None
            elif path[level] is not None:
                narrower, shown = prefixes[node][level], f"{keys[level]}={path[level]}"
            ident = narrower if narrower is not None else ("node", node)
            if ident not in names[level]:
                names[level][ident] = shown if narrower is not None else f"node {node}"
                members[level][ident] = []
            members[level][ident].append(node)
            mine_ids[level] = ident
        idents[node] = mine_ids
    id_of: list[dict[object, int]] = []
    for level in range(depth):
        ordered = sorted(members[level], key=lambda i: (names[level][i], str(i)))
        id_of.append({ident: position for position, ident in enumerate(ordered)})
    of_node = {
        node: tuple(id_of[level][ident] for level, ident in enumerate(mine))
        for node, mine in idents.items()
    }
    domains = tuple(
        tuple(
            Domain(
                level,
                names[level][ident],
                tuple(members[level][ident]),
                of_node[members[level][ident][0]][level - 1] if level else -1,
            )
            for ident in id_of[level]
        )
        for level in range(depth)
    )
    return TopologyIndex(topology, domains, of_node, tuple(findings))


class IndexCache:
    """The index of each topology in use, rebuilt only when the node topology changes.

    Keyed on `ClusterState.topology_generation` (bumped when nodes come, go or change
    labels, not on heartbeats). Assumes one caller at a time, like `ClusterState`.
    Each inconsistent-label finding is handed out once by `unreported`, however often
    the index is rebuilt, until the node is consistent again.

    Ad-hoc topologies (`Topology.of_label`) come from users' objects, so their label keys
    are unbounded: at most `adhoc_limit` of their indexes are kept, the least recently
    used dropped first (rebuilding one costs a pass over the nodes).
    """

    def __init__(self, adhoc_limit: int = 16) -> None:
        self._built: dict[str, tuple[int, TopologyIndex]] = {}
        self._adhoc: dict[str, tuple[int, TopologyIndex]] = {}  # by label key, oldest first
        self._adhoc_limit = adhoc_limit
        self._reported: set[tuple[str, str, str]] = set()

    def get(
        self, topology: Topology, generation: int, nodes: Callable[[], Iterable[Node]]
    ) -> TopologyIndex:
        built = self._adhoc if topology.adhoc else self._built
        # An ad-hoc entry is taken out and put back, so the dict's order is least recently
        # used first.
        cached = built.pop(topology.name, None) if topology.adhoc else built.get(topology.name)
        if cached is None or cached[0] != generation or cached[1].topology != topology:
            cached = (generation, build_index(topology, nodes()))
        built[topology.name] = cached
        while len(self._adhoc) > self._adhoc_limit:
            del self._adhoc[next(iter(self._adhoc))]
        return cached[1]

    @property
    def adhoc_keys(self) -> tuple[str, ...]:
        """The label keys of the ad-hoc indexes kept, least recently used first."""
        return tuple(self._adhoc)

    def unreported(self) -> list[TopologyFinding]:
        """Findings of the current indexes not handed out before."""
        current = {
            (f.node, f.level, f.value): f
            for _, index in self._built.values()
            for f in index.findings
        }
        fresh = [f for key, f in sorted(current.items()) if key not in self._reported]
        self._reported = set(current)
        return fresh


def _inconsistencies(
    keys: Sequence[str], paths: Mapping[str, _Path], prefixes: Mapping[str, Sequence[int]]
) -> tuple[dict[str, int], list[TopologyFinding]]:
    """Per inconsistent node, the first level where its value sits under a wider domain other
    than the one most nodes with that value sit under; and a finding for each such node."""
    broken: dict[str, int] = {}
    findings: list[TopologyFinding] = []
    for level, key in enumerate(keys):
        under: dict[str, dict[int, list[str]]] = {}
        for node, path in paths.items():
            value = path[level]
            if value is not None and node not in broken:
                parent = prefixes[node][level - 1] if level else -1
                under.setdefault(value, {}).setdefault(parent, []).append(node)
        for value, parents in sorted(under.items()):
            if len(parents) < 2:
                continue
            ranked = sorted(
                parents.values(), key=lambda ns: (-len(ns), _sortable(paths[ns[0]][:level]))
            )
            usual = paths[ranked[0][0]][:level]
            for stray in ranked[1:]:
                wider = _describe_path(keys, paths[stray[0]][:level])
                for node in stray:
                    broken[node] = level
                    findings.append(
                        TopologyFinding(
                            node,
                            key,
                            value,
                            f"{key}={value} is under {wider}, but {len(ranked[0])} node(s) "
                            f"with that value are under {_describe_path(keys, usual)}; "
                            "treated as its own domain",
                        )
                    )
    return broken, findings


def _sortable(path: _Path) -> tuple[str, ...]:
    return tuple(v or "" for v in path)


def _describe_path(keys: Sequence[str], path: _Path) -> str:
    shown = [f"{k}={v}" for k, v in zip(keys, path, strict=False) if v is not None]
    return ", ".join(shown) if shown else "no wider level"


# --- A gang's resolved topology -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSetLevel:
    """A `TaskSet` resolved: its tasks share one domain of `level` (a position)."""

    label: str
    tasks: frozenset[str]
    level: int


@dataclass(frozen=True, slots=True)
class TaskPreferenceLevel:
    """A `TaskPreference` resolved: its tasks in one domain of `level` if the gang can be
    placed so. `required`: the level its task or set must keep anyway (None: none of its
    own), always wider than `level`."""

    label: str
    tasks: frozenset[str]
    level: int
    required: int | None
    together: bool  # a set of tasks (a `TaskSetLevel`), else one task's own level


@dataclass(frozen=True, slots=True)
class SubGroupLevel:
    """A Volcano subgroup policy resolved: each subgroup's members in one domain of
    `required` and, best effort, of `preferred` (positions; None: none)."""

    policy: SubGroupPolicy
    required: int | None
    preferred: int | None


@dataclass(frozen=True, slots=True)
class GangTopology:
    """A gang's topology constraint, checked against its topology: levels as positions."""

    topology: Topology
    required: int | None = None
    preferred: int | None = None
    slice_size: int = 0
    # The level of the slices by rank, or the one level the slice tasks share (None when
    # they have levels of their own, `task_levels`).
    slice_level: int | None = None
    # A composite gang's PodGroups (KAI's, an LWS group's subgroups) whose members each
    # share one domain of their level (tasks: `Pod.task`), instead of slices by rank.
    slice_tasks: frozenset[str] = frozenset()
    slice_noun: str = "PodGroup"  # what `slice_tasks` name (`TopologyConstraint.slice_noun`)
    # Wider slices by rank around the `slice_size` ones (Kueue's multi-layer slices),
    # outermost first: (size, level), each level wider than the next, the last one's wider
    # than `slice_level`, each size a multiple of the next (`resolve_topology` checks).
    slice_layers: tuple[tuple[int, int], ...] = ()
    # Slice tasks that do not share one level: (task, level) for each, sorted by task.
    task_levels: tuple[tuple[str, int], ...] = ()
    # Sets of tasks each in one domain of its level, nested or disjoint, each no wider than
    # `required` and no narrower than its tasks' own levels (`resolve_topology` checks).
    task_sets: tuple[TaskSetLevel, ...] = ()
    # Tasks' and sets' preferred levels, each narrower than its own required level and the
    # gang's (`resolve_topology` checks); best effort (`preferring`).
    preferences: tuple[TaskPreferenceLevel, ...] = ()
    # Volcano's subgroup policies with a level: which members share a subgroup is read from
    # their labels when the gang is placed (`TopologySearch`), never before.
    subgroups: tuple[SubGroupLevel, ...] = ()

    @property
    def constrained(self) -> bool:
        return (
            self.required is not None
            or self.preferred is not None
            or bool(self.slice_size)
            or bool(self.slice_tasks)
            or bool(self.task_sets)
            or bool(self.preferences)
            or any(s.required is not None or s.preferred is not None for s in self.subgroups)
        )

    def preferring(
        self, domain: int, same_as_narrower: Callable[[int], bool] = lambda _: False
    ) -> tuple[GangTopology, ...]:
        """This constraint with its preferences held as requirements, in a domain of level
        `domain` (`CLUSTER`: the whole cluster): first every preference at its own level,
        then all of them one level wider at a time, each stopping at its required level or
        the domain's (where the domain, or its requirement, holds it already). Steps that
        would ask what the one before asked (the levels moved onto have the same domains as
        the narrower ones, `same_as_narrower`; asked of `CLUSTER`: the widest level has one
        domain) are left out; the constraint itself, every preference relaxed, is not among
        them. At most one step per level."""

        def narrowest(level: int) -> int:
            while level < len(self.topology.levels) - 1 and same_as_narrower(level):
                level += 1
            return level

        floors = [
            max(domain, p.required if p.required is not None else CLUSTER) for p in self.preferences
        ]
        span = max((p.level - f for p, f in zip(self.preferences, floors, strict=True)), default=0)
        steps: list[GangTopology] = []
        asked: set[tuple[tuple[str, int], ...]] = set()
        for wider in range(span):
            held = [
                (p, p.level - wider)
                for p, f in zip(self.preferences, floors, strict=True)
                if p.level - wider > f and narrowest(f) < p.level - wider
            ]
            said = tuple((p.label, narrowest(level)) for p, level in held)
            if not held or said in asked:
                continue
            asked.add(said)
            steps.append(self._holding(held))
        return tuple(steps)

    def _holding(self, held: Sequence[tuple[TaskPreferenceLevel, int]]) -> GangTopology:
        """This constraint with each of `held` required at its level, and no preferences."""
        levels = dict(self.levels_of_tasks())
        sets = list(self.task_sets)
        for pref, level in held:
            if not pref.together:
                levels.update(dict.fromkeys(pref.tasks, level))
                continue
            same = next((i for i, s in enumerate(sets) if s.label == pref.label), None)
            if same is None:
                sets.append(TaskSetLevel(pref.label, pref.tasks, level))
            else:
                sets[same] = TaskSetLevel(pref.label, pref.tasks, level)
        held_tasks = replace(self, task_sets=tuple(sets), preferences=())
        if all(p.together for p, _ in held):
            return held_tasks
        slice_level, task_levels = _by_task(levels.items())
        return replace(
            held_tasks,
            slice_level=slice_level,
            slice_tasks=frozenset(levels),
            task_levels=task_levels,
        )

    def walk(self) -> tuple[int, ...]:
        """The levels to try, narrowest first: from the preferred level up to the required one,
        or to the whole cluster (`CLUSTER`)."""
        stop = self.required if self.required is not None else CLUSTER
        start = self.preferred if self.preferred is not None else stop
        return tuple(range(start, stop - 1, -1))

    def key(self, level: int) -> str:
        return self.topology.levels[level] if level != CLUSTER else ""

    def task_level(self, task: str) -> int | None:
        """The level one domain of which holds every member of slice task `task` (None:
        `task` is no slice task)."""
        if task not in self.slice_tasks:
            return None
        return next((lv for t, lv in self.task_levels if t == task), self.slice_level)

    def levels_of_tasks(self) -> tuple[tuple[str, int], ...]:
        """(task, level) for each of `slice_tasks`, sorted by task."""
        if self.task_levels:
            return self.task_levels
        level = self.slice_level
        return tuple((t, level) for t in sorted(self.slice_tasks) if level is not None)

    def __str__(self) -> str:
        parts = []
        if self.required is not None:
            parts.append(f"required {self.key(self.required)}")
        if self.preferred is not None:
            parts.append(f"preferred {self.key(self.preferred)}")
        parts.extend(f"slices of {size} in {self.key(lv)}" for size, lv in self.slice_layers)
        if self.slice_size and self.slice_level is not None:
            parts.append(f"slices of {self.slice_size} in {self.key(self.slice_level)}")
        levels = ((task, self.key(level)) for task, level in self.levels_of_tasks())
        tasks = tasks_in_levels(self.slice_noun, levels)
        if tasks:
            parts.append(tasks)
        parts.extend(
            f"{s.label} ({task_names(s.tasks)}) together in one {self.key(s.level)}"
            for s in self.task_sets
        )
        parts.extend(f"{p.label} preferably in one {self.key(p.level)}" for p in self.preferences)
        for sub in self.subgroups:
            if sub.required is None and sub.preferred is None:
                continue
            said = [f"in one {self.key(sub.required)}"] if sub.required is not None else []
            if sub.preferred is not None:
                said.append(f"preferably in one {self.key(sub.preferred)}")
            parts.append(f"each subgroup of policy {sub.policy.name} {' and '.join(said)}")
        shown = ", ".join(parts) or "unconstrained"
        if self.topology.adhoc:
            shown += " (a node label, in no configured topology)"
        elif self.topology.name != DEFAULT_TOPOLOGY_NAME:
            shown += f" (topology {self.topology.name})"
        return shown


def resolve_topology(
    group: PodGroup, members: Sequence[Pod], topologies: Topologies
) -> GangTopology | str:
    """The gang's topology constraint, from its PodGroup or else its members' common intent,
    checked against `topologies`; or a clear error naming the group.

    A gang that declares nothing gets the default topology, unconstrained: its members
    still prefer broken domains over whole ones.
    """
    key = group.key
    # Intents are compared by what they mean: the default topology by name or by "", a
    # level by its label key or its tier.
    declared: dict[GangTopology, TopologyConstraint] = {}
    for intent in sorted({p.topology for p in members if p.topology is not None}, key=str):
        meant = _levels(key, intent, topologies)
        if isinstance(meant, str):
            return meant
        declared.setdefault(meant, intent)
    if len(declared) > 1:
        where = sorted({c.declared_by for c in declared.values() if c.declared_by})
        said = f" ({'; '.join(where)})" if where else ""
        return f"members of gang {key} disagree on their topology{said}: " + "; ".join(
            sorted(str(c) for c in declared.values())
        )
    from_members = next(iter(declared.items()), None)
    if group.topology is not None:
        own = _levels(key, group.topology, topologies)
        if isinstance(own, str):
            return own
        if from_members is not None and from_members[0] != own:
            return (
                f"gang {key}: its PodGroup declares {group.topology}, "
                f"but its members declare {from_members[1]}"
            )
        return _check(key, group, own, group.topology)
    if from_members is not None:
        return _check(key, group, *from_members)
    return _check(key, group, GangTopology(topologies.default), TopologyConstraint())


def _levels(key: str, intent: TopologyConstraint, topologies: Topologies) -> GangTopology | str:
    """The intent's topology and levels as positions, or why it names none of them."""
    if intent.any_label and not intent.topology:
        if intent.slice_tasks or intent.task_sets or intent.preferences:
            found = _child_levels(key, intent, topologies)
            return found if isinstance(found, str) else _with_preferences(found, intent)
        # KAI's constraint may name only a preferred level: its label picks the topology.
        topology = _label_topology(intent.required or intent.preferred, topologies)
    else:
        named = topologies.get(intent.topology)
        if named is None:
            known = ", ".join(t.name for t in topologies.all)
            return f"gang {key}: unknown topology {quoted(intent.topology)} (configured: {known})"
        topology = named
    levels: dict[str, int | None] = {}
    roles = [
        ("required", intent.required),
        ("preferred", intent.preferred),
        ("slice", intent.slice_required),
    ]
    noun = intent.slice_noun
    by_level = _tasks_by_level(intent.task_levels)
    roles += [(f"{noun}(s) {task_names(tasks)}", name) for name, tasks in by_level.items()]
    roles += [(f"slice layer {i}", name) for i, (_, name) in enumerate(intent.slice_layers)]
    for policy in intent.subgroups:
        roles += [
            (f"subGroupPolicy {policy.name} {which}", name)
            for which, name in (("required", policy.required), ("preferred", policy.preferred))
        ]
    roles += [(f"{s.label} ({s.field})" if s.field else s.label, s.level) for s in intent.task_sets]
    roles += [
        (f"{p.label} preferred ({p.field})" if p.field else f"{p.label} preferred", p.level)
        for p in intent.preferences
    ]
    for role, name in roles:
        levels[role] = topology.level(name) if name else None
        if name and levels[role] is None:
            if topology.adhoc:
                # Its one level is the required key: nothing narrower to prefer or slice in.
                return (
                    f"gang {key}: {role} level {quoted(name)} cannot be combined with the "
                    f"PodGroup's topology key {intent.required}: {intent.required} is in no "
                    "configured topology, so it is a topology of that label alone and its "
                    "only level; configure a topology with both levels to combine them"
                )
            if _tier(name) is not None:
                return (
                    f"gang {key}: {role} level {quoted(name)} is not a tier of topology "
                    f"{topology.name} ({topology.tier_names()})"
                )
            return (
                f"gang {key}: {role} level {quoted(name)} is not a level of topology "
                f"{topology.name} ({' > '.join(topology.levels)})"
            )
    slice_level: int | None = levels["slice"]
    task_levels: tuple[tuple[str, int], ...] = ()
    if intent.task_levels:
        slice_level, task_levels = _by_task(
            (task, topology.level(name)) for task, name in intent.task_levels
        )
    resolved = GangTopology(
        topology,
        required=levels["required"],
        preferred=levels["preferred"],
        slice_size=intent.slice_size,
        slice_level=slice_level,
        slice_tasks=frozenset(intent.slice_tasks),
        slice_noun=noun,
        slice_layers=tuple(
            (size, level)
            for i, (size, _) in enumerate(intent.slice_layers)
            if (level := levels[f"slice layer {i}"]) is not None
        ),
        task_levels=task_levels,
        task_sets=_sets(intent.task_sets, topology),
        subgroups=tuple(
            SubGroupLevel(
                policy,
                levels[f"subGroupPolicy {policy.name} required"],
                levels[f"subGroupPolicy {policy.name} preferred"],
            )
            for policy in intent.subgroups
        ),
    )
    return _with_preferences(resolved, intent)


def _with_preferences(resolved: GangTopology, intent: TopologyConstraint) -> GangTopology:
    """`resolved` with the intent's preferences at their levels' positions, each with the
    level its task or set requires of its own (a set's: the set of the same label).
    Precondition: every level is one of `resolved.topology`'s."""
    if not intent.preferences:
        return resolved
    found = []
    for p in intent.preferences:
        level = resolved.topology.level(p.level)
        assert level is not None  # checked where the levels were read
        tasks = frozenset(p.tasks)
        if p.together:
            own = next((s.level for s in resolved.task_sets if s.label == p.label), None)
        else:
            own = resolved.task_level(p.tasks[0]) if p.tasks else None
        found.append(TaskPreferenceLevel(p.label, tasks, level, own, p.together))
    return replace(resolved, preferences=tuple(found))


def _sets(sets: Iterable[TaskSet], topology: Topology) -> tuple[TaskSetLevel, ...]:
    """Declared task sets at their levels' positions. Precondition: every level is one of
    `topology`'s."""
    return tuple(
        TaskSetLevel(s.label, frozenset(s.tasks), topology.levels.index(s.level)) for s in sets
    )


def _tasks_by_level(levels: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Slice tasks by the level they require, levels in the order of their tasks' names."""
    by_level: dict[str, list[str]] = {}
    for task, level in sorted(levels):
        by_level.setdefault(level, []).append(task)
    return by_level


def _by_task(
    levels: Iterable[tuple[str, int | None]],
) -> tuple[int | None, tuple[tuple[str, int], ...]]:
    """`GangTopology.slice_level` and `task_levels` for slice tasks' resolved levels: the one
    level they share, or each task's own. Precondition: every level is resolved."""
    pairs = tuple(sorted((task, level) for task, level in levels if level is not None))
    distinct = {level for _, level in pairs}
    if len(distinct) == 1:
        return distinct.pop(), ()
    return None, pairs


def _child_levels(
    key: str, intent: TopologyConstraint, topologies: Topologies
) -> GangTopology | str:
    """A gang's keys read as any node label (upstream's composite fields, KAI's levels,
    LeaderWorkerSet's annotations): its own `required` and `preferred`, and the keys its
    parts (a composite's child PodGroups, KAI's or an LWS group's subgroups) each lie in
    (`slice_tasks`), which must be levels of the same topology, no wider than the required
    one. Different keys in no configured topology together cannot be ordered: refused."""
    noun = intent.slice_noun
    tasks = frozenset(intent.slice_tasks)
    by_level = _tasks_by_level(intent.levels_of_tasks())
    declared = f" ({intent.declared_by})" if intent.declared_by else ""
    base = intent.required or intent.preferred
    sets = intent.task_sets
    if not base:
        named = [*by_level, *(s.level for s in sets if s.level not in by_level)]
        named += sorted({p.level for p in intent.preferences} - set(named))
        if len(named) == 1:
            found = _label_levels(named[0], topologies)
            return GangTopology(
                found.topology,
                slice_level=found.required if tasks else None,
                slice_tasks=tasks,
                slice_noun=noun,
                task_sets=_sets(sets, found.topology),
            )
        topology = next(
            (
                t
                for t in (topologies.default, *topologies.all)
                if all(level in t.levels for level in named)
            ),
            None,
        )
        if topology is None:
            said = [tasks_in_levels(noun, intent.levels_of_tasks(), each="require one", then="one")]
            said += [f"{s.label} requires one {s.level} ({s.field})" for s in sets]
            said += [f"{p.label} prefers one {p.level} ({p.field})" for p in intent.preferences]
            return (
                f"gang {key}: its {', '.join(w for w in said if w)}{declared}, but no "
                "configured topology has all these levels, so they cannot be ordered one "
                "inside the other; configure a topology with them to combine them"
            )
        slice_level, task_levels = _by_task(
            (task, topology.levels.index(level)) for task, level in intent.levels_of_tasks()
        )
        return GangTopology(
            topology,
            slice_level=slice_level,
            slice_tasks=tasks,
            slice_noun=noun,
            task_levels=task_levels,
            task_sets=_sets(sets, topology),
        )
    topology = _label_topology(base, topologies)
    levels = topology.levels
    required = levels.index(intent.required) if intent.required else None
    if intent.preferred and intent.preferred not in levels:
        return (
            f"gang {key}: preferred level {quoted(intent.preferred)} is no level of the "
            f"topology of required level {intent.required} ({' > '.join(levels)}); "
            "configure a topology with both levels to combine them"
        )
    preferred = levels.index(intent.preferred) if intent.preferred else None
    where = f"at or below {intent.required}" if intent.required else f"with {base}"

    def off_topology(asked: str, must: str = "it must be a level of the same topology") -> str:
        return (
            f"gang {key}: its {asked}, which is no level of the gang's topology {where} "
            f"({' > '.join(levels)}); {must}"
        )

    for child, named in by_level.items():
        if child not in levels or (required is not None and levels.index(child) < required):
            return off_topology(
                f"{noun}(s) {task_names(named)} require one {child} each{declared}",
                "their level must be a narrower level of the same topology",
            )
    for s in sets:
        if s.level not in levels:
            return off_topology(
                f"{s.label} requires its {noun}(s) {task_names(s.tasks)} in one {s.level} "
                f"together ({s.field})"
            )
    for p in intent.preferences:
        if p.level not in levels:
            return off_topology(f"{p.label} prefers one {p.level} ({p.field})")
    slice_level, task_levels = _by_task(
        (task, levels.index(level)) for task, level in intent.levels_of_tasks()
    )
    return GangTopology(
        topology,
        required=required,
        preferred=preferred,
        slice_level=slice_level,
        slice_tasks=tasks,
        slice_noun=noun,
        task_levels=task_levels,
        task_sets=_sets(sets, topology),
    )


def _label_levels(label: str, topologies: Topologies) -> GangTopology:
    """A gang required inside one value of node label `label`, at that level of the
    topology `_label_topology` finds it in."""
    topology = _label_topology(label, topologies)
    return GangTopology(topology, required=topology.levels.index(label))


def _label_topology(label: str, topologies: Topologies) -> Topology:
    """Where a gang required inside one value of node label `label` (upstream's PodGroup
    field) is planned: the default topology when it has that level, as if an annotation
    named it; else the first configured topology that has it; else the ad-hoc topology of
    that label alone. Its other levels (`preferred`, slices) are that topology's."""
    for topology in (topologies.default, *topologies.all):
        if label in topology.levels:
            return topology
    return Topology.of_label(label)


def _check(
    key: str, group: PodGroup, resolved: GangTopology, intent: TopologyConstraint
) -> GangTopology | str:
    required, preferred, sliced = resolved.required, resolved.preferred, resolved.slice_level

    def shown(name: str, level: int) -> str:
        return f"{name} ({resolved.key(level)})" if _tier(name) is not None else name

    if required is not None and preferred is not None and required > preferred:
        return (
            f"gang {key}: required level {shown(intent.required, required)} is narrower than "
            f"preferred level {shown(intent.preferred, preferred)}; prefer the required level "
            "or a narrower one"
        )
    if required is not None and sliced is not None and sliced < required and not intent.task_levels:
        return (
            f"gang {key}: slice level {shown(intent.slice_required, sliced)} is wider than "
            f"required level {shown(intent.required, required)}; slices must fit inside the "
            "required domain"
        )
    for name, tasks in _tasks_by_level(intent.task_levels).items():
        level = resolved.task_level(tasks[0])
        if required is not None and level is not None and level < required:
            return (
                f"gang {key}: {intent.slice_noun}(s) {task_names(tasks)} level "
                f"{shown(name, level)} is wider than required level "
                f"{shown(intent.required, required)}; slices must fit inside the required "
                "domain"
            )
    problem = (
        _layer_problem(resolved, intent)
        or _subgroup_problem(resolved)
        or _set_problem(resolved, intent)
        or _preference_problem(resolved, intent)
    )
    if problem:
        return f"gang {key}: {problem}"
    outermost = intent.slice_layers[0][0] if intent.slice_layers else intent.slice_size
    if outermost and group.min_member % outermost:
        return (
            f"gang {key}: topology slice size {outermost} does not divide the gang's "
            f"minMember {group.min_member}"
        )
    placement = group.placement or Placement()
    if resolved.constrained and placement.kind in (
        PolicyKind.INTERCONNECT_LOCAL,
        PolicyKind.DOMAIN,
    ):
        return (
            f"gang {key}: placement {placement} is itself a topology constraint and cannot be "
            f"combined with {resolved}; use one or the other"
        )
    # A preference at its own required level, or at the gang's, asks for nothing more.
    kept = tuple(
        p
        for p in resolved.preferences
        if p.level != p.required and (required is None or p.level > required)
    )
    return replace(resolved, preferences=kept) if kept != resolved.preferences else resolved


def _layer_problem(resolved: GangTopology, intent: TopologyConstraint) -> str:
    """Why the slice layers cannot be honoured as declared ("" if they can): the outermost
    wider than the required level, or a layer not narrower than the one around it (the
    innermost, `slice_size`, included). Precondition: `resolved.slice_layers` are
    `intent.slice_layers` in order, all resolved."""
    if not resolved.slice_layers or resolved.slice_level is None:
        return ""
    named = [*intent.slice_layers, (intent.slice_size, intent.slice_required)]
    levels = [lv for _, lv in resolved.slice_layers] + [resolved.slice_level]
    required = resolved.required
    if required is not None and levels[0] < required:
        return (
            f"slice level {named[0][1]} is wider than required level {intent.required}; "
            "slices must fit inside the required domain"
        )
    for (size, outer), (inner_size, inner), lv, inner_lv in zip(
        named, named[1:], levels, levels[1:], strict=False
    ):
        if inner_lv <= lv:
            return (
                f"slices of {inner_size} in {inner} must lie inside the slices of {size} in "
                f"{outer}: list the layers from the widest level to the narrowest"
            )
    return ""


def _subgroup_problem(resolved: GangTopology) -> str:
    """Why a subgroup policy's level cannot be honoured ("" if it can): one wider than the
    gang's required level (a subgroup lies inside the gang's domain)."""
    required = resolved.required
    for sub in resolved.subgroups:
        if required is not None and sub.required is not None and sub.required < required:
            return (
                f"subGroupPolicy {sub.policy.name} requires one {resolved.key(sub.required)}, "
                f"wider than the gang's required level {resolved.key(required)}; subgroups "
                "must fit inside the gang's domain"
            )
    return ""


def _preference_problem(resolved: GangTopology, intent: TopologyConstraint) -> str:
    """Why a task's or a set's preferred level cannot be honoured as declared ("" if it
    can): one wider than its own required level, or than the gang's, as a gang's preferred
    level wider than its required one is refused. Precondition: `resolved.preferences` are
    `intent.preferences` in order."""
    required = resolved.required
    for declared, pref in zip(intent.preferences, resolved.preferences, strict=True):
        named = f"{declared.label} ({declared.field})" if declared.field else declared.label
        if pref.required is not None and pref.level < pref.required:
            return (
                f"{named} prefers one {resolved.key(pref.level)}, wider than the one "
                f"{resolved.key(pref.required)} it requires; prefer the required level or a "
                "narrower one"
            )
        if required is not None and pref.level < required:
            return (
                f"{named} prefers one {resolved.key(pref.level)}, wider than required level "
                f"{resolved.key(required)}; prefer the required level or a narrower one"
            )
    return ""


def _set_problem(resolved: GangTopology, intent: TopologyConstraint) -> str:
    """Why the gang's task sets cannot be honoured as declared ("" if they can): a set wider
    than the required level, a task whose own level is wider than a set holding it, sets
    that overlap without one holding the other, or a set inside another at a wider level.
    Precondition: `resolved.task_sets` are `intent.task_sets` in order."""
    sets = list(zip(intent.task_sets, resolved.task_sets, strict=True))
    required, noun = resolved.required, resolved.slice_noun

    def named(declared: TaskSet) -> str:
        return f"{declared.label} ({declared.field})" if declared.field else declared.label

    for declared, held in sets:
        if required is not None and held.level < required:
            return (
                f"{named(declared)} requires one {resolved.key(held.level)}, wider than "
                f"required level {resolved.key(required)}; a set of {noun}s must fit inside "
                "the required domain"
            )
        for task in sorted(held.tasks):
            level = resolved.task_level(task)
            if level is not None and level < held.level:
                return (
                    f"{noun} {task} requires one {resolved.key(level)}, wider than the one "
                    f"{resolved.key(held.level)} {named(declared)} holds it in; a {noun}'s "
                    "level must be at or below that of every set holding it"
                )
    for i, (a, held_a) in enumerate(sets):
        for b, held_b in sets[i + 1 :]:
            common = held_a.tasks & held_b.tasks
            if not common or held_a.tasks == held_b.tasks:
                continue
            if not (held_a.tasks < held_b.tasks or held_b.tasks < held_a.tasks):
                return (
                    f"{named(a)} and {named(b)} share {noun}(s) {task_names(common)} but "
                    "neither holds the other; sets must nest or be disjoint"
                )
            (inner, held_in), (outer, held_out) = (
                ((a, held_a), (b, held_b))
                if held_a.tasks < held_b.tasks
                else ((b, held_b), (a, held_a))
            )
            if held_in.level < held_out.level:
                return (
                    f"{named(inner)} requires one {resolved.key(held_in.level)}, wider than "
                    f"the one {resolved.key(held_out.level)} {named(outer)} holds it in; a set "
                    "inside another must be at or below its level"
                )
    return ""


# --- Member order, for slices ---------------------------------------------------------------

# Where operators write a member's rank (checked against their sources): the Job controller
# (Indexed Jobs, also under JobSet), LeaderWorkerSet, Kubeflow's training operators,
# StatefulSets, and Kueue's plain pod groups.
JOB_COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
JOBSET_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
KUBEFLOW_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
STATEFULSET_POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
KUEUE_POD_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index"
_INDEX_LABELS = (
    JOB_COMPLETION_INDEX_LABEL,
    LWS_WORKER_INDEX_LABEL,
    KUBEFLOW_REPLICA_INDEX_LABEL,
    STATEFULSET_POD_INDEX_LABEL,
    KUEUE_POD_INDEX_LABEL,
)
_DIGITS = re.compile(r"[0-9]{1,9}")


def rank_key(pod: Pod) -> tuple[object, ...]:
    """Sorts a gang's members by rank: the operator's index labels where present (job, then
    pod within the job), else natural name order (`w-2` before `w-10`)."""
    labels = pod.labels
    index = _first_int(labels, _INDEX_LABELS)
    if index is None:
        return (1, "", 0, 0, natural_key(pod.name))
    # JobSet's global job index already orders its replicated jobs; without it, a role
    # (replicated job, Kubeflow replica type) then the job within it.
    job = _int(labels, JOBSET_GLOBAL_INDEX_LABEL)
    role = ""
    if job is None:
        role = labels.get(JOBSET_REPLICATED_JOB_LABEL) or labels.get(
            KUBEFLOW_REPLICA_TYPE_LABEL, ""
        )
        job = _first_int(labels, (JOBSET_JOB_INDEX_LABEL, LWS_GROUP_INDEX_LABEL)) or 0
    return (0, role, job, index, natural_key(pod.name))


def member_order(pods: Iterable[Pod]) -> tuple[Pod, ...]:
    return tuple(sorted(pods, key=rank_key))


def natural_key(text: str) -> tuple[str | int, ...]:
    """Digit runs compare as numbers: text parts sit at even positions, numbers at odd ones."""
    parts = re.split(r"([0-9]+)", text)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def _first_int(labels: Mapping[str, str], keys: Sequence[str]) -> int | None:
    return next((i for i in (_int(labels, k) for k in keys) if i is not None), None)


def _int(labels: Mapping[str, str], key: str) -> int | None:
    text = labels.get(key)
    return int(text) if text is not None and _DIGITS.fullmatch(text) else None
