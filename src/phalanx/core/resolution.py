"""Which gang a pod belongs to, as a value (coscheduling's `GetPodGroup`).

`resolve_group` answers `Resolved(group)`, `Waiting(reason)` (the PodGroup does not exist
yet: it may still come) or `Invalid(reason)` (it will never schedule as declared). The
group comes from its PodGroup object or, for annotation-only gangs, from its members'
annotations; its placement from the PodGroup, else the members' common annotation, else
the configured default. One function serves filter, bind, roll-forward, metrics and views.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from phalanx.core.cache import ClusterState
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


Resolution = Resolved | Waiting | Invalid


def resolve_group(state: ClusterState, ref: GroupRef, defaults: GroupDefaults) -> Resolution:
    """The gang `ref` names, from its PodGroup or its members' annotations, with its placement."""
    key = ref.key
    error = state.group_error(key)
    if error is not None:
        return Invalid(f"PodGroup {key} is invalid: {error}")
    members = state.members(key)
    group = state.group(key)
    if group is None:
        declared = {p.min_member for p in members if p.min_member is not None}
        if not declared:
            broken = next((p for p in members if p.invalid), None)
            if broken is not None:
                return Invalid(f"gang {key}: pod {broken.name}: {broken.invalid}")
            return Waiting(f"waiting for PodGroup {key} to exist (pods name it with a label)")
        if len(declared) > 1:
            shown = ", ".join(str(n) for n in sorted(declared))
            return Invalid(f"members of gang {key} disagree on phalanx.io/min-member: {shown}")
        timeouts = {p.timeout_seconds for p in members if p.timeout_seconds is not None}
        group = PodGroup(
            namespace=ref.namespace,
            name=ref.name,
            min_member=declared.pop(),
            timeout_seconds=min(timeouts) if timeouts else defaults.timeout_seconds,
            from_crd=False,
        )
    if group.placement is None:
        # The PodGroup does not say: every member must agree, else the default applies.
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
