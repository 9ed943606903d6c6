"""KAI's `spec.subGroups`, flat or nested, read into a gang's task minima.

KAI's rules (its PodGroup webhook and scheduler, `scheduling.run.ai/v2alpha2`), kept here:

* Subgroups form a tree under the PodGroup: `parent` names another subgroup, none means
  the PodGroup itself. A name appears once; a parent must exist; no cycles.
* Pods belong to leaves only (a subgroup no other names as its parent), by their label
  `kai.scheduler/subgroup-name`. A leaf needs `minMember` members (0 asks for none).
* A subgroup with children is ready when `minSubGroup` of its direct children are, or
  all of them when it has none; the PodGroup likewise with `spec.minSubGroup` over the
  top-level subgroups. `minSubGroup` is at least 1, at most the number of direct children,
  and never on a leaf; a parent's `minMember` is refused (KAI has it use `minSubGroup`).

Flat subgroups without any `minSubGroup` stay Volcano-style task minima, sorted pairs
without the zeros; anything else is a `SubGroupTree`, the quorum shape of a composite
gang (`phalanx.core.quorum`). A parent's `requiredTopologyLevel` keeps all its
descendants' members in one domain together: a task set of its leaves (`TaskSet`), which
nests inside its parent's as the subgroups do. A subgroup's `preferredTopologyLevel` is a
preference (`TaskPreference`): a leaf's for its own members, a parent's for its leaves
together, tried best effort.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.groups.common import INT32_MAX, label_levels, read_positive_int32
from phalanx.core.model import (
    ChildGroups,
    SubGroupTree,
    TaskPreference,
    TaskSet,
    TopologyConstraint,
)
from phalanx.core.quorum import fewest_members
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    read_integer,
    read_object,
    read_objects,
    read_string,
)

# KAI sets no bound; Grove's deepest (set, replica, role, leader/workers) is four. A
# bound keeps a hostile chain of parents from costing a walk per subgroup per level.
MAX_DEPTH: Final = 8


@dataclass(frozen=True, slots=True)
class Subgroups:
    """`spec.subGroups` as read.

    `names`: the leaves, the only subgroups a member may name. `minima`: flat task minima
    (pairs sorted by name, no zeros) or the tree. `fewest`: the fewest members that make
    the subgroups' quorum. `elastic`: some `minSubGroup` lets a quorum leave subgroups out.
    `levels`: each leaf's required level with the leaves (and field) that set it
    (`with_task_levels`); `sets`: each parent with a required level, the set of its leaves
    held in one domain of it (`with_task_sets`); `preferences`: each subgroup with a
    preferred level, a leaf's own or a parent's leaves together (`with_task_preferences`).
    `warnings`: what is read but not used.
    """

    names: frozenset[str] = frozenset()
    minima: tuple[tuple[str, int], ...] | SubGroupTree = ()
    fewest: int = 0
    elastic: bool = False
    levels: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    sets: tuple[TaskSet, ...] = ()
    preferences: tuple[TaskPreference, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str
    name: str
    parent: str
    min_member: int | None
    min_sub_group: int | None
    required: str
    preferred: str


def read_subgroups(src: Source, spec: JsonObject) -> Subgroups:
    """`spec.subGroups` with `spec.minSubGroup` (the PodGroup's own quorum of them)."""
    entries: dict[str, _Entry] = {}
    warnings: list[str] = []
    for path, raw in read_objects(src, spec.get("subGroups"), "spec.subGroups"):
        entry = _entry(src, path, raw, warnings)
        if entry.name in entries:
            raise src.invalid(f"{path}.name", f"{quoted(entry.name)} names a subgroup twice")
        entries[entry.name] = entry
    children = _children(src, entries)
    top = children.get("", [])
    # A `minSubGroup` is a positive int32 when set (KAI's webhook refuses 0).
    root_min = read_positive_int32(src, spec.get("minSubGroup"), "spec.minSubGroup")
    if root_min is not None and root_min > len(top):
        raise src.invalid(
            "spec.minSubGroup",
            f"asks for {root_min} subgroup(s), more than the {len(top)} top-level one(s) "
            "(subgroups without a parent) in spec.subGroups",
        )
    for entry in entries.values():
        _check_minimum(src, entry, children.get(entry.name, []))
    leaves = [e for e in entries.values() if e.name not in children]
    levels: dict[str, list[tuple[str, str]]] = {}
    for leaf in leaves:
        if leaf.required:
            where = f"{leaf.path}.topologyConstraint.requiredTopologyLevel"
            levels.setdefault(leaf.required, []).append((leaf.name, where))
    sets = tuple(
        TaskSet(
            f"subgroup {e.name}",
            _leaves_under(e.name, children),
            e.required,
            f"{e.path}.topologyConstraint.requiredTopologyLevel",
        )
        for e in entries.values()
        if e.name in children and e.required
    )
    preferences = tuple(
        TaskPreference(
            f"subgroup {e.name}",
            _leaves_under(e.name, children) if e.name in children else (e.name,),
            e.preferred,
            f"{e.path}.topologyConstraint.preferredTopologyLevel",
            together=e.name in children,
        )
        for e in entries.values()
        if e.preferred
    )
    elastic = root_min is not None or any(e.min_sub_group is not None for e in entries.values())
    names = frozenset(leaf.name for leaf in leaves)
    if not elastic and len(top) == len(entries):
        minima = tuple(sorted((e.name, e.min_member or 0) for e in leaves if e.min_member))
        fewest = sum(minimum for _, minimum in minima)
        return Subgroups(names, minima, fewest, False, levels, sets, preferences, tuple(warnings))

    def node(name: str) -> tuple[str, int] | SubGroupTree:
        below = children.get(name)
        if below is None:
            return name, entries[name].min_member or 0
        nodes = tuple(node(child) for child in sorted(below))
        wanted = entries[name].min_sub_group if name else root_min
        return SubGroupTree(name, len(nodes) if wanted is None else wanted, nodes)

    tree = node("")
    assert isinstance(tree, SubGroupTree)  # the PodGroup has children: entries exist
    return Subgroups(
        names, tree, fewest_members(tree), elastic, levels, sets, preferences, tuple(warnings)
    )


def _leaves_under(name: str, children: Mapping[str, list[str]]) -> tuple[str, ...]:
    """The leaves beneath subgroup `name`, sorted. Precondition: the tree has no cycle."""
    leaves, stack = [], list(children.get(name, ()))
    while stack:
        child = stack.pop()
        below = children.get(child)
        if below is None:
            leaves.append(child)
        else:
            stack.extend(below)
    return tuple(sorted(leaves))


def _entry(src: Source, path: str, raw: JsonObject, warnings: list[str]) -> _Entry:
    """One subgroup's fields, each checked on its own."""
    name = read_string(src, raw.get("name"), f"{path}.name")
    if not name:
        raise src.invalid(f"{path}.name", "is required (the subgroup's name)")
    parent = read_string(src, raw.get("parent"), f"{path}.parent")
    where = f"{path}.minMember"
    minimum = read_integer(src, raw.get("minMember"), where)
    if minimum is not None and minimum < 0:
        raise src.invalid(where, f"must be a non-negative integer, not {minimum}")
    if minimum is not None and minimum > INT32_MAX:
        raise src.invalid(where, f"must be at most {INT32_MAX} (an int32), not {minimum}")
    min_sub_group = read_positive_int32(src, raw.get("minSubGroup"), f"{path}.minSubGroup")
    where = f"{path}.topologyConstraint"
    constraint = read_object(src, raw.get("topologyConstraint"), where)
    intent = _levels(src, constraint, where)
    if read_string(src, constraint.get("topology"), f"{where}.topology"):
        warnings.append(
            f"{where}.topology is ignored: it names KAI's Topology object, which Phalanx "
            "does not read (its levels are read as node label keys)"
        )
    required = intent.required if intent is not None else ""
    preferred = intent.preferred if intent is not None else ""
    return _Entry(path, name, parent, minimum, min_sub_group, required, preferred)


def _levels(src: Source, constraint: JsonObject, path: str) -> TopologyConstraint | None:
    return label_levels(src, constraint, path, "requiredTopologyLevel", "preferredTopologyLevel")


def _children(src: Source, entries: Mapping[str, _Entry]) -> dict[str, list[str]]:
    """Parent name ("" for the PodGroup) -> its direct children's names. Refused naming
    the `parent` field: a parent that is no subgroup, a cycle, a chain deeper than
    `MAX_DEPTH`."""
    children: dict[str, list[str]] = {}
    for entry in entries.values():
        if entry.parent and entry.parent not in entries:
            raise src.invalid(
                f"{entry.path}.parent",
                f"{quoted(entry.parent)} names no subgroup of spec.subGroups",
            )
        children.setdefault(entry.parent, []).append(entry.name)
    for entry in entries.values():
        chain = [entry.name]
        up = entry.parent
        while up:
            if up in chain:
                loop = " -> ".join([*chain[chain.index(up) :], up])
                raise src.invalid(f"{entry.path}.parent", f"subgroups form a cycle ({loop})")
            if len(chain) == MAX_DEPTH:
                raise src.invalid(
                    f"{entry.path}.parent",
                    f"nests {quoted(entry.name)} more than {MAX_DEPTH} subgroups deep",
                )
            chain.append(up)
            up = entries[up].parent
    return children


def _check_minimum(src: Source, entry: _Entry, children: list[str]) -> None:
    """A leaf's `minMember` and a parent's `minSubGroup`, as KAI's webhook has them."""
    if not children:
        if entry.min_sub_group is not None:
            raise src.invalid(
                f"{entry.path}.minSubGroup",
                "is set on a subgroup without child subgroups (a leaf needs minMember)",
            )
        if entry.min_member is None:
            raise src.invalid(f"{entry.path}.minMember", "is required (a non-negative integer)")
        return
    if entry.min_member:
        raise src.invalid(
            f"{entry.path}.minMember",
            f"must not be set on a subgroup with child subgroups ({', '.join(sorted(children))}): "
            "KAI counts its ready children, by minSubGroup (all of them when unset)",
        )
    if entry.min_sub_group is not None and entry.min_sub_group > len(children):
        raise src.invalid(
            f"{entry.path}.minSubGroup",
            f"asks for {entry.min_sub_group} child subgroup(s), more than the "
            f"{len(children)} it has ({', '.join(sorted(children))})",
        )


def parents(minima: tuple[tuple[str, int], ...] | ChildGroups) -> frozenset[str]:
    """The subgroups of a tree that have children (they hold no pods); none when flat."""
    if not isinstance(minima, ChildGroups):
        return frozenset()
    found: set[str] = set()
    stack: list[ChildGroups] = [minima]
    while stack:
        node = stack.pop()
        if node.name:
            found.add(node.name)
        stack.extend(c for c in node.children if isinstance(c, ChildGroups))
    return frozenset(found)
