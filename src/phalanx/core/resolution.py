"""Which gang a pod belongs to, as a value (coscheduling's `GetPodGroup`).

`resolve_group` answers `Resolved(group)`, `Waiting(reason)` (the gang's object does not
exist yet: it may still come), `Invalid(reason)` (it will never schedule as declared) or
`Deleting(reason)` (its object is being deleted: nothing of it is planned, reserved or
bound any more; its members wait until the object is gone).
An upstream gang whose pods kube-scheduler refuses to schedule at all (one scheduler name;
in 1.37 the PodGroup's priority and preemption policy: `phalanx.core.groups.member_rules`)
is `Invalid` too, a composite gang with such a PodGroup beneath it as a whole: nothing of
it is planned, reserved, completed or bound while kube-scheduler would schedule none of it.
The gang comes from its object in any dialect (`phalanx.core.groups.registry.resolve`: a
PodGroup, a Workload's pod group) or, for annotation-only gangs, from its members'
annotations; its placement from the object, else the members' common annotation, else the
configured default. One function serves filter, bind, roll-forward, metrics and views.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from phalanx.core.cache import ClusterState
from phalanx.core.groups import composite, lws, member_rules, registry
from phalanx.core.inventory import parse_placement
from phalanx.core.model import (
    DEFAULT_TIMEOUT_SECONDS,
    ChildGroups,
    Dialect,
    GroupRef,
    Placement,
    Pod,
    PodGroup,
    TopologyConstraint,
)


@dataclass(frozen=True, slots=True)
class GroupDefaults:
    """What applies when neither the PodGroup nor its members say."""

    placement: Placement = field(default_factory=Placement)
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS


@dataclass(frozen=True, slots=True)
class Resolved:
    group: PodGroup


@dataclass(frozen=True, slots=True)
class Waiting:
    """The gang may yet schedule: its PodGroup object does not exist yet."""

    reason: str


@dataclass(frozen=True, slots=True)
class Invalid:
    """The gang cannot schedule as declared; `reason` says what to fix."""

    reason: str


@dataclass(frozen=True, slots=True)
class Deleting:
    """The gang's object is being deleted (`metadata.deletionTimestamp`): its workload is
    being torn down, so no member is reserved or bound any more."""

    reason: str


Resolution = Resolved | Waiting | Invalid | Deleting


def resolve_group(state: ClusterState, ref: GroupRef, defaults: GroupDefaults) -> Resolution:
    """The gang `ref` names, from its object or its members' annotations, with its placement.

    A resolved group with `basic` set is no gang (upstream's basic policy): its members
    are scheduled one by one.
    """
    key, holder = ref.key, ref.object_ref
    error = state.group_error(holder.key)
    if error is not None:
        kind = "Workload" if ref.pod_group else "PodGroup"
        return Invalid(f"{kind} {holder.key} is invalid: {error}")
    members = state.members(key)
    if ref.dialect is Dialect.COMPOSITE or ref.dialect is Dialect.UPSTREAM:
        tree = _tree_of(state, ref, defaults)
        if tree is not None:
            return tree
    found = registry.resolve(
        ref,
        state.group_object,
        members,
        default_timeout=defaults.timeout_seconds,
        served=state.served,
    )
    if isinstance(found, registry.Unresolved):
        return Waiting(found.reason) if found.waiting else Invalid(found.reason)
    if ref.dialect is Dialect.LWS:
        missing = lws.opt_in_missing(ref, members, found.min_member, state.pod_by_key)
        if missing:
            return Invalid(missing)
    stray_members = registry.dialect(ref.dialect).stray_members
    if stray_members is not None and (stray := stray_members(found, members)):
        return Invalid(stray)
    if not found.deleting and (refused := member_rules.refusal(found, members, state.is_bound)):
        return Invalid(refused)
    return _with_placement(ref, found, members, defaults)


def refused_by_scheduler(state: ClusterState, ref: GroupRef) -> str:
    """Why kube-scheduler refuses every cycle of gang `ref`'s pods as they are now (an
    upstream PodGroup whose pods break its `MemberRules`, or a composite gang with such a
    PodGroup beneath: `phalanx.core.groups.member_rules`); "" when it does not."""
    if ref.dialect is Dialect.UPSTREAM:
        group = state.group(ref.key)
        if group is None:
            return ""
        return member_rules.refusal(group, state.members(ref.key), state.is_bound)
    root = state.composite(ref.key) if ref.dialect is Dialect.COMPOSITE else None
    if root is None:
        return ""
    tree, _ = state.tree_memo(ref.key, lambda: _composite_tree(state, root))
    return _composite_refusal(state, ref, tree)


def _composite_refusal(state: ClusterState, ref: GroupRef, tree: ChildGroups) -> str:
    """`refused_by_scheduler` of composite gang `ref`, whose tree is `tree`: each PodGroup
    beneath is judged with its own pods (the members whose task it is)."""
    by_task: dict[str, list[Pod]] = {}
    for pod in state.members(ref.key):
        by_task.setdefault(pod.task, []).append(pod)
    children = [
        (group, by_task.get(name, []))
        for name, _ in tree.pod_groups()
        if (group := state.group(GroupRef(ref.namespace, name, Dialect.UPSTREAM).key)) is not None
    ]
    return member_rules.composite_refusal(ref.namespace, ref.name, children, state.is_bound)


def declared_group(state: ClusterState, ref: GroupRef) -> PodGroup | None:
    """The quorum of `ref`'s gang as `state` declares it, whatever keeps the gang from
    resolving now (its object being deleted, members disagreeing on placement or straying
    from its tasks, a topology refused, a composite waiting for a child group): for
    preemption, which must judge running members of a gang that does not resolve; never
    planned. From its object (a composite's tree as its objects make it) or, for a gang of
    no object, its live members, as resolution reads them; when they make none together
    (none declares it, or they disagree), its finished members and those being deleted
    too (a YuniKorn application's definition does not end with the pod carrying it, but a
    finished pod's size is no live member's: the name may have had an earlier group). A
    PodGroup beneath a composite that cannot be read (gone, or refused) is part of that
    composite's gang, whose key this gang then has (`composite.unread_gang`). None when
    nothing declares it."""
    if ref.dialect is Dialect.COMPOSITE:
        root = state.composite(ref.key)
        if root is None:
            return None
        same = [c for c in state.composites().values() if c.namespace == root.namespace]
        tree = composite.child_tree(root, same, state.groups().values())
        return composite.composite_gang(root, tree, DEFAULT_TIMEOUT_SECONDS)
    group = state.group(ref.key)
    if ref.dialect is Dialect.UPSTREAM and group is not None and group.parent:
        top = composite.gang_above(group, state.composite)
        if isinstance(top, composite.Broken) and top.missing:
            composites = state.composites().values()
            return composite.unread_gang(top.missing, composites, state.groups().values())
    found = registry.resolve(ref, state.group_object, state.members(ref.key))
    if not isinstance(found, PodGroup):
        everyone = state.members(ref.key, include_finished=True)
        found = registry.resolve(ref, state.group_object, everyone)
    return found if isinstance(found, PodGroup) else None


def _with_placement(
    ref: GroupRef, found: PodGroup, members: list[Pod], defaults: GroupDefaults
) -> Resolution:
    key = ref.key
    if found.deleting:
        return Deleting(registry.deleting_reason(ref))
    group = found
    if group.placement is None:
        # The object does not say: every member must agree, else the default applies.
        placements = {p.placement for p in members if p.placement}
        if len(placements) > 1:
            shown = ", ".join(sorted(placements))
            return Invalid(f"members of gang {key} disagree on phalanx.io/placement: {shown}")
        try:
            placement = parse_placement(placements.pop()) if placements else defaults.placement
        except ValueError as exc:
            return Invalid(f"gang {key}: {exc}")
        group = replace(group, placement=placement)
    return Resolved(group)


def _tree_of(state: ClusterState, ref: GroupRef, defaults: GroupDefaults) -> Resolution | None:
    """A composite gang (its tree, when whole), or why an upstream PodGroup's tree keeps
    its members waiting; None for a PodGroup no composite gang is above (see
    `phalanx.core.groups.composite`)."""
    if ref.dialect is Dialect.UPSTREAM:
        group = state.group(ref.key)
        if group is None or not group.parent:
            return None
        top = composite.gang_above(group, state.composite)
        if isinstance(top, composite.Broken):
            error = state.group_error(top.missing) if top.missing else None
            if error is not None:
                parent = GroupRef.parse(top.missing)
                return Invalid(
                    f"{composite.KIND} {parent.namespace}/{parent.name} above PodGroup "
                    f"{ref.namespace}/{ref.name} is invalid: {error}"
                )
            return Waiting(top.reason)
        if top is None:
            return None
        # Its pods are filed under `top` (the cache re-files them on every change).
        return Waiting(f"PodGroup {ref.namespace}/{ref.name} is part of gang {top.key}")
    root = state.composite(ref.key)
    if root is None:
        return Waiting(composite.waiting_reason(ref))
    if root.deleting:
        return Deleting(registry.deleting_reason(ref))
    if root.min_group_count is None:
        return Invalid(f"CompositePodGroup {ref.namespace}/{ref.name} has the basic policy")
    if root.parent:
        above = composite.gang_above(
            PodGroup(root.namespace, root.name, 1, parent=root.parent), state.composite
        )
        if isinstance(above, composite.Broken):
            return Waiting(above.reason)
    tree, topology = state.tree_memo(ref.key, lambda: _composite_tree(state, root))
    if isinstance(topology, str):
        return Invalid(topology)
    if len(tree.children) < tree.min_groups:
        return Waiting(
            f"CompositePodGroup {ref.namespace}/{ref.name} has {len(tree.children)} child "
            f"group(s), fewer than its minGroupCount {tree.min_groups}; waiting for the rest"
        )
    refused = _composite_refusal(state, ref, tree)
    if refused:
        return Invalid(refused)
    gang = replace(
        composite.composite_gang(root, tree, defaults.timeout_seconds), topology=topology
    )
    return _with_placement(ref, gang, state.members(ref.key), defaults)


def _composite_tree(
    state: ClusterState, root: composite.CompositePodGroup
) -> tuple[ChildGroups, TopologyConstraint | str | None]:
    """A composite's tree and the topology its keys make (or why they make none): read from
    every gang object of its namespace, so kept until one changes (`tree_memo`)."""
    groups = state.groups()
    namespace = [c for c in state.composites().values() if c.namespace == root.namespace]
    tree = composite.child_tree(root, namespace, groups.values())
    children = {g.name: g for g in groups.values() if g.namespace == root.namespace}
    nested = {c.name: c for c in namespace}
    return tree, composite.child_topology(root, tree, children, nested)
