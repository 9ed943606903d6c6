"""Which gang a pod belongs to, as a value (coscheduling's `GetPodGroup`).

`resolve_group` answers `Resolved(group)`, `Waiting(reason)` (the gang's object does not
exist yet: it may still come), `Invalid(reason)` (it will never schedule as declared) or
`Deleting(reason)` (its object is being deleted: nothing of it is planned, reserved or
bound any more; its members wait until the object is gone).
The gang comes from its object in any dialect (`phalanx.core.groups.registry.resolve`: a
PodGroup, a Workload's pod group) or, for annotation-only gangs, from its members'
annotations; its placement from the object, else the members' common annotation, else the
configured default. One function serves filter, bind, roll-forward, metrics and views.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from phalanx.core.cache import ClusterState
from phalanx.core.groups import registry
from phalanx.core.inventory import parse_placement
from phalanx.core.model import DEFAULT_TIMEOUT_SECONDS, GroupRef, Placement, PodGroup


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
    found = registry.resolve(
        ref,
        state.group_object,
        members,
        default_timeout=defaults.timeout_seconds,
        served=state.served,
    )
    if isinstance(found, registry.Unresolved):
        return Waiting(found.reason) if found.waiting else Invalid(found.reason)
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
