"""Upstream's gang of gangs: `scheduling.k8s.io/v1alpha3` `CompositePodGroup` (1.37, the
`CompositePodGroup` feature gate).

A CompositePodGroup names its parent (`spec.parentCompositePodGroupName`, "" for a root),
and an upstream PodGroup names its own (`PodGroup.parent`): together they make a tree per
workload (KubeRay: one root over a head PodGroup and one PodGroup per worker group). Its
`spec.schedulingPolicy` is `basic: {}` (the children are scheduled as they are alone) or
`gang: {minGroupCount}` (at least that many children schedulable at once, or none).

What Phalanx makes of it (`gang_above`, `composite_gang`): the topmost `gang` composite
above a PodGroup is one Phalanx gang, key `composite:ns/name`, whose members are the pods
of every PodGroup beneath it (each pod's task is its PodGroup) and whose quorum is the tree
of child groups (`ChildGroups`, `phalanx.core.quorum`). A PodGroup with only `basic`
composites above it is its own gang, as without a parent. A parent that does not exist, a
cycle or a tree deeper than upstream allows makes the gang wait, naming the object.
A child PodGroup's own topology key keeps its members inside one value of it, inside the
composite's (`child_topology`); children may set keys of different levels of one topology.
A nested composite's own key keeps every PodGroup beneath it together in one value of it
(a task set, `TopologyConstraint.task_sets`).
`spec.disruptionMode` (`single` or `all`, `phalanx.core.groups.disruption`) matters to
preemption only (`phalanx.core.preempt`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.groups.common import (
    DIFFERENTIABLE_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PLAN_ANNOTATION,
    SCHEDULE_TIMEOUT_ANNOTATION,
    ObjectSettings,
    Parsed,
    PodView,
    is_deleting,
    read_identity,
)
from phalanx.core.groups.disruption import read_disruption_mode
from phalanx.core.groups.status import GroupStatus
from phalanx.core.groups.upstream import (
    GROUP,
    PARENT_FIELD,
    POD_GROUP_KIND,
    build_condition,
    read_parent,
    read_policy,
    read_topology,
)
from phalanx.core.model import (
    DEFAULT_TIMEOUT_SECONDS,
    ChildGroups,
    Claim,
    Dialect,
    DisruptionMode,
    GroupRef,
    PodGroup,
    TaskSet,
    TopologyConstraint,
)
from phalanx.core.quorum import fewest_members
from phalanx.core.rawdict import (
    JsonObject,
    key_path,
    read_object,
    read_string,
    read_string_map,
)

VERSION: Final = "v1alpha3"
KIND: Final = "CompositePodGroup"
RESOURCE: Final = "compositepodgroups"
INITIALLY_SCHEDULED: Final = "CompositePodGroupInitiallyScheduled"
# Upstream refuses a tree of more composite levels than this (kube-scheduler's "Invalid").
MAX_DEPTH: Final = 4


@dataclass(frozen=True, slots=True)
class CompositePodGroup:
    """A CompositePodGroup: `min_group_count` None is the `basic` policy."""

    namespace: str
    name: str
    min_group_count: int | None
    parent: str = ""
    topology: TopologyConstraint | None = None
    settings: ObjectSettings = field(default_factory=ObjectSettings)
    uid: str = ""
    deleting: bool = False
    # `spec.disruptionMode`: read by preemption only, so outside equality (see `PodGroup`).
    disruption_mode: DisruptionMode = field(default=DisruptionMode.SINGLE, compare=False)

    @property
    def ref(self) -> GroupRef:
        return GroupRef(self.namespace, self.name, Dialect.COMPOSITE)

    @property
    def key(self) -> str:
        return self.ref.key


def parse_composite(obj: JsonObject) -> CompositePodGroup:
    src, metadata, namespace, name = read_identity(KIND, obj)
    spec = read_object(src, obj.get("spec"), "spec")
    path = "spec.schedulingPolicy"
    policy = read_object(src, spec.get("schedulingPolicy"), path)
    count = read_policy(src, policy, path, size="minGroupCount")
    read_object(src, spec.get("workloadRef"), "spec.workloadRef")
    parent = read_parent(src, spec)
    if parent == name:
        raise src.invalid(PARENT_FIELD, f"{quoted(name)} names the object itself")
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = ObjectSettings.read(src, annotations, timeout=True)
    topology = settings.topology_with(
        src, read_topology(src, spec), "spec.schedulingConstraints.topology"
    )
    return CompositePodGroup(
        namespace=namespace,
        name=name,
        min_group_count=count,
        parent=parent,
        topology=topology,
        settings=settings,
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        deleting=is_deleting(metadata),
        disruption_mode=read_disruption_mode(src, spec),
    )


def claim(_: PodView) -> Claim | None:
    """No pod names a composite: its members name their PodGroups."""
    return None


def waiting_reason(ref: GroupRef) -> str:
    return f"waiting for {KIND} {ref.namespace}/{ref.name} ({GROUP}/{VERSION}) to exist"


def build_status(
    status: GroupStatus, previous: JsonObject | None, now: float, _version: str
) -> dict[str, object] | None:
    """The composite's own condition, as kube-scheduler keeps it (never back from True)."""
    return build_condition(status, previous, now, INITIALLY_SCHEDULED)


def _parsed(obj: JsonObject) -> Parsed[CompositePodGroup]:
    return Parsed(parse_composite(obj))


KINDS: Final[Mapping[tuple[str, str], Callable[[JsonObject], Parsed[CompositePodGroup]]]] = {
    (f"{GROUP}/{VERSION}", KIND): _parsed,
}


def composite_key(namespace: str, name: str) -> str:
    return GroupRef(namespace, name, Dialect.COMPOSITE).key


# --- The tree -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Broken:
    """The tree above a PodGroup cannot be read: its members wait (`reason` names why).
    `missing`: the key of the composite not found, when that is why."""

    reason: str
    missing: str = ""


FindComposite = Callable[[str], CompositePodGroup | None]  # by key (`composite_key`)


def gang_above(group: PodGroup, find: FindComposite) -> CompositePodGroup | Broken | None:
    """The topmost `gang` composite above `group` (the unit Phalanx gangs), None when there
    is none (no parent, or only `basic` ones), or why the tree cannot be read."""
    if not group.parent:
        return None
    top: CompositePodGroup | None = None
    seen: list[str] = []
    below = f"{POD_GROUP_KIND} {group.namespace}/{group.name}"
    name = group.parent
    while name:
        if name in seen:
            cycle = " -> ".join([*seen, name])
            return Broken(f"{KIND}s in {group.namespace} form a cycle ({cycle}) above {below}")
        if len(seen) == MAX_DEPTH:
            return Broken(
                f"{below} is under more than {MAX_DEPTH} levels of {KIND} "
                f"({' -> '.join(seen)} -> {name}), more than upstream allows"
            )
        key = composite_key(group.namespace, name)
        found = find(key)
        if found is None:
            return Broken(
                f"waiting for {KIND} {group.namespace}/{name}, which "
                f"{below if not seen else f'{KIND} {seen[-1]}'} names in {PARENT_FIELD}",
                key,
            )
        seen.append(name)
        if found.min_group_count is not None:
            top = found
        name = found.parent
    return top


def disruption_unit(group: PodGroup, find: FindComposite) -> str:
    """The key of the highest object from `group` up its tree whose `spec.disruptionMode`
    is `all` (its pods are disrupted together, as kube-scheduler 1.37 groups its own
    preemption victims), "" when none is. A tree that cannot be read is followed as far as
    it can be (a missing parent ends it, a cycle or excess depth stops the walk)."""
    unit = group.key if group.disruption_mode is DisruptionMode.ALL else ""
    seen: set[str] = set()
    name = group.parent
    while name and name not in seen and len(seen) < MAX_DEPTH:
        seen.add(name)
        found = find(composite_key(group.namespace, name))
        if found is None:
            break
        if found.disruption_mode is DisruptionMode.ALL:
            unit = found.key
        name = found.parent
    return unit


def child_tree(
    root: CompositePodGroup,
    composites: Iterable[CompositePodGroup],
    pod_groups: Iterable[PodGroup],
) -> ChildGroups:
    """The quorum tree beneath `root`, from the composites and PodGroups of its namespace
    (children are those naming it as parent, by name order). A child PodGroup needs its
    `minCount` members, a `basic` one one member (as kube-scheduler counts it); a nested
    `basic` composite one satisfied child (likewise). Precondition: no cycle beneath."""
    by_parent: dict[str, list[tuple[str, int] | ChildGroups]] = {}
    nested = {c.name: c for c in composites if c.namespace == root.namespace and c.parent}
    for group in sorted(pod_groups, key=lambda g: g.name):
        if group.namespace == root.namespace and group.parent:
            need = 1 if group.basic else group.min_member
            by_parent.setdefault(group.parent, []).append((group.name, need))

    def build(composite: CompositePodGroup, depth: int) -> ChildGroups:
        children = list(by_parent.get(composite.name, ()))
        if depth < MAX_DEPTH:
            children += [
                build(child, depth + 1)
                for child in sorted(nested.values(), key=lambda c: c.name)
                if child.parent == composite.name
            ]
        count = composite.min_group_count
        return ChildGroups(composite.name, count or 1, tuple(children), basic=count is None)

    return build(root, 1)


def unread_gang(
    key: str, composites: Iterable[CompositePodGroup], pod_groups: Iterable[PodGroup]
) -> PodGroup:
    """The gang of composite `key` while it cannot be read (gone, or refused) and PodGroups
    or composites still name it as their parent (`gang_above` is `Broken` there): its
    policy is unknown, so every child group they make counts, the strictest reading. For
    preemption's judgement of the pods still running beneath it; never planned."""
    ref = GroupRef.parse(key)
    unread = CompositePodGroup(ref.namespace, ref.name, None)
    tree = child_tree(unread, composites, pod_groups)
    every = len(tree.children)
    tree = replace(tree, min_groups=every, basic=False)
    return composite_gang(replace(unread, min_group_count=every), tree, DEFAULT_TIMEOUT_SECONDS)


def composite_gang(root: CompositePodGroup, tree: ChildGroups, default_timeout: int) -> PodGroup:
    """The one Phalanx gang a `gang` composite is (see the module docstring)."""
    settings = root.settings
    timeout = settings.timeout_seconds
    return PodGroup(
        namespace=root.namespace,
        name=root.name,
        min_member=max(fewest_members(tree), 1),
        timeout_seconds=default_timeout if timeout is None else timeout,
        timeout_declared=timeout is not None,
        placement=settings.placement,
        plan_json=settings.plan_json,
        differentiable=settings.differentiable,
        uid=root.uid,
        dialect=Dialect.COMPOSITE,
        topology=root.topology,
        min_task_member=tree,
        deleting=root.deleting,
    )


def unread_on_child(group: PodGroup, top: CompositePodGroup) -> tuple[str, ...]:
    """A warning for each of Phalanx's gang settings `group` declares (by annotation) while
    part of `top`'s gang: `composite_gang` reads them from the composite alone, so on the
    child they would be dropped unsaid. A child's topology is read (`child_topology`). An
    annotation with an empty value says nothing, so draws nothing."""
    declared = (
        (PLACEMENT_ANNOTATION, group.placement is not None),
        (PLAN_ANNOTATION, bool(group.plan_json)),
        (DIFFERENTIABLE_ANNOTATION, bool(group.differentiable)),
        (SCHEDULE_TIMEOUT_ANNOTATION, group.timeout_declared),
    )
    return tuple(
        f"{key_path('metadata.annotations', name)} is ignored: this {POD_GROUP_KIND} is part "
        f"of {KIND} {top.namespace}/{top.name}'s gang, whose own annotations are read "
        "(put it there)"
        for name, on in declared
        if on
    )


def child_topology(
    root: CompositePodGroup,
    tree: ChildGroups,
    pod_groups: Mapping[str, PodGroup],
    composites: Mapping[str, CompositePodGroup] | None = None,
) -> TopologyConstraint | str | None:
    """The composite gang's topology intent: the composite's own (every member inside one
    value of its key), its child PodGroups' keys (each child's members inside one value
    of its own key, `slice_tasks`) and its nested composites' keys (every PodGroup beneath
    one inside one value of its key together, `task_sets`; `composites` by name, those of
    the tree); or why it cannot be honoured, naming the child and the field (a hard
    constraint is never dropped silently). Children may set different keys (`task_levels`;
    whether they nest in one topology is checked when the gang is resolved,
    `resolve_topology`), and nothing but the key (upstream's field)."""
    sets = _nested_sets(root, tree, composites or {})
    if isinstance(sets, str):
        return sets
    keys: dict[str, list[str]] = {}
    for name, _ in tree.pod_groups():
        group = pod_groups.get(name)
        if group is None or group.topology is None:
            continue
        intent = group.topology
        what = f"{POD_GROUP_KIND} {group.namespace}/{name}"
        if beyond := _beyond_key(what, root, intent, "child PodGroup"):
            return beyond
        keys.setdefault(intent.required, []).append(name)
    own = root.topology or TopologyConstraint(any_label=True)
    if sets:
        if own.slice_size:
            return (
                f"{KIND} {root.namespace}/{root.name} declares slices ({own}) and a nested "
                f"{KIND} a topology key of its own ({sets[0]}); use one or the other"
            )
        own = replace(own, task_sets=sets)
    if not keys:
        return own if sets else root.topology
    pairs = tuple(sorted((name, key) for key, names in keys.items() for name in names))
    if own.slice_size or own.slice_required:
        shown = "; ".join(f"{name}: {key}" for name, key in pairs)
        return (
            f"{KIND} {root.namespace}/{root.name} declares slices ({own}) and its PodGroup(s) "
            f"a topology key of their own ({shown}); use one or the other"
        )
    tasks = tuple(name for name, _ in pairs)
    declared_by = "spec.schedulingConstraints.topology"
    if len(keys) > 1:
        return replace(own, slice_tasks=tasks, task_levels=pairs, declared_by=declared_by)
    return replace(own, slice_required=pairs[0][1], slice_tasks=tasks, declared_by=declared_by)


def _beyond_key(what: str, root: CompositePodGroup, intent: TopologyConstraint, inner: str) -> str:
    """Why `what` (an `inner` beneath composite `root`) cannot be honoured: inside a
    composite its own topology is its key only; "" when it declares no more."""
    if intent == TopologyConstraint(required=intent.required, any_label=intent.any_label):
        return ""
    return (
        f"{what} under {KIND} {root.namespace}/{root.name} declares topology {intent}: "
        f"inside a composite a {inner}'s own topology is its key only "
        "(spec.schedulingConstraints.topology)"
    )


def _nested_sets(
    root: CompositePodGroup, tree: ChildGroups, composites: Mapping[str, CompositePodGroup]
) -> tuple[TaskSet, ...] | str:
    """A task set for each composite nested beneath `root` with a topology key: the
    PodGroups beneath it, together in one value of its key; or why one cannot be honoured
    (a nested composite's topology is its key only, as a child PodGroup's)."""
    sets: list[TaskSet] = []
    stack = [c for c in tree.children if isinstance(c, ChildGroups)]
    while stack:
        node = stack.pop()
        stack.extend(c for c in node.children if isinstance(c, ChildGroups))
        nested = composites.get(node.name)
        if nested is None or nested.topology is None:
            continue
        intent = nested.topology
        what = f"{KIND} {nested.namespace}/{nested.name}"
        if beyond := _beyond_key(what, root, intent, f"nested {KIND}"):
            return beyond
        tasks = tuple(sorted(name for name, _ in node.pod_groups()))
        if tasks:
            where = f"{KIND} {nested.namespace}/{nested.name}: spec.schedulingConstraints.topology"
            sets.append(TaskSet(f"{KIND} {nested.name}", tasks, intent.required, where))
    return tuple(sorted(sets, key=lambda s: s.label))
