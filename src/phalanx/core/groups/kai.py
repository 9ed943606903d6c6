"""The KAI dialect: NVIDIA KAI Scheduler's `scheduling.run.ai/v2alpha2` PodGroups, as KAI's
podgrouper creates them (one per workload) or a platform's tooling writes them.

* A pod names its PodGroup with annotation `pod-group-name` (the key KAI's podgrouper
  writes and its scheduler reads). Key `kai:ns/name`.
* The PodGroup gives `spec.minMember`. `spec.subGroups` (flat: no `parent`) give each
  subgroup's `minMember`, enforced as Volcano's task minima are (`PodGroup.min_task_member`,
  `phalanx.core.quorum`); a pod's subgroup is its label `kai.scheduler/subgroup-name`. A
  pod naming a subgroup the PodGroup lacks makes the gang invalid (`stray_members`).
  What has no counterpart in Phalanx is refused naming the field, never skipped:
  `spec.minSubGroup` (any N of the subgroups) and nested subgroups (`parent`).
* A subgroup's `topologyConstraint.requiredTopologyLevel` keeps its members inside one
  value of that label (`TopologyConstraint.slice_tasks`, as a composite's child
  PodGroups), beside the PodGroup's own constraint on the whole gang. Subgroups may
  require different levels (`task_levels`: prefill in one rack, decode in one spine),
  as KAI's multi-level topology has it; they must be levels of one topology, no wider
  than the PodGroup's required level, or the gang is refused when it is resolved. A
  subgroup's `preferredTopologyLevel` and `topology` are not used (a warning each):
  Phalanx has no per-subgroup preference.
* `spec.topologyConstraint`: `requiredTopologyLevel` and `preferredTopologyLevel` are node
  label keys, read as upstream's PodGroup topology key is (`any_label`: a level of a
  configured topology is that level, any other label a topology of that label alone).
  `topology` names KAI's Topology object, which Phalanx does not read (a warning).
* `spec.queue`, `priorityClassName`, `preemptibility`, `markUnschedulable` and
  `schedulingBackoff` are KAI's quota and retry policy, not placement: not read.
* Status, on `/status` (KAI's CRD has the subresource): the counts `running`,
  `succeeded`, `failed`, and a `schedulingConditions` entry `UnschedulableOnNodePool`
  with Phalanx's reason while the gang waits, removed once it is placed. KAI's
  scheduler writes these too, so the write is built on the observed status and sent
  under its `resourceVersion` (`registry.status_write`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.groups.common import (
    INT32_MAX,
    ObjectSettings,
    Parsed,
    PodView,
    group_name_problem,
    is_deleting,
    label_levels,
    read_identity,
    read_min_count,
    with_task_levels,
)
from phalanx.core.groups.status import MESSAGE_LIMIT, GroupStatus, camel, rfc3339, set_condition
from phalanx.core.model import Claim, Dialect, GroupRef, Pod, PodGroup, TopologyConstraint
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    read_integer,
    read_object,
    read_objects,
    read_string,
    read_string_map,
)

GROUP: Final = "scheduling.run.ai"
VERSION: Final = "v2alpha2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PodGroup"
RESOURCE: Final = "podgroups"
GROUP_NAME_ANNOTATION: Final = "pod-group-name"
SUBGROUP_LABEL: Final = "kai.scheduler/subgroup-name"
SUBGROUP_LEVELS_FIELD: Final = "spec.subGroups[].topologyConstraint.requiredTopologyLevel"

# KAI's scheduling condition for a gang it cannot place, and the reason it gives it.
UNSCHEDULABLE_ON_NODE_POOL: Final = "UnschedulableOnNodePool"
UNSCHEDULABLE: Final = "Unschedulable"
# Phalanx has no node pools: its condition names KAI's default one.
NODE_POOL: Final = "default"


def claim(pod: PodView) -> Claim | None:
    name = pod.annotations.get(GROUP_NAME_ANNOTATION, "")
    if not name:
        return None
    problem = group_name_problem(f"annotation {GROUP_NAME_ANNOTATION}", name)
    if problem:
        return Claim(Dialect.KAI, None, (problem,))
    return Claim(Dialect.KAI, GroupRef(pod.namespace, name, Dialect.KAI))


def task_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The KAI subgroup a pod belongs to (its `Pod.task`), from its label; "" for none."""
    return labels.get(SUBGROUP_LABEL, "")


def parse_pod_group(obj: JsonObject) -> Parsed[PodGroup]:
    src, metadata, namespace, name = read_identity(KIND, obj)
    spec = read_object(src, obj.get("spec"), "spec")
    if spec.get("minSubGroup") is not None:
        if spec.get("minMember") is not None:
            raise src.invalid(
                "spec.minSubGroup",
                "must not be set with spec.minMember (they are mutually exclusive)",
            )
        raise src.invalid(
            "spec.minSubGroup",
            "is not supported: Phalanx gangs need spec.minMember members (with each "
            "subgroup's minMember), not any N of the subgroups",
        )
    min_member = read_min_count(src, spec.get("minMember"), "spec.minMember")
    subgroups = _subgroups(src, spec)
    names, minima = subgroups.names, subgroups.minima
    total = sum(minimum for _, minimum in minima)
    if total > min_member:
        raise src.invalid(
            "spec.subGroups",
            f"the subgroups' minMember sum to {total}, more than spec.minMember "
            f"({min_member}): no gang of spec.minMember members can hold them",
        )
    warnings = list(subgroups.warnings)
    constraint = read_object(src, spec.get("topologyConstraint"), "spec.topologyConstraint")
    if read_string(src, constraint.get("topology"), "spec.topologyConstraint.topology"):
        warnings.append(
            "spec.topologyConstraint.topology is ignored: it names KAI's Topology object, "
            "which Phalanx does not read (its levels are read as node label keys)"
        )
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = ObjectSettings.read(src, annotations, timeout=True)
    topology = settings.topology_with(
        src, _topology(src, constraint, "spec.topologyConstraint"), "spec.topologyConstraint"
    )
    group = PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        **settings.group_fields(),
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        dialect=Dialect.KAI,
        topology=with_task_levels(
            src,
            topology,
            subgroups.levels,
            kind=KIND,
            noun="subgroup",
            levels_field=SUBGROUP_LEVELS_FIELD,
        ),
        min_task_member=minima,
        task_names=names,
        deleting=is_deleting(metadata),
    )
    return Parsed(group, tuple(warnings))


@dataclass(frozen=True, slots=True)
class _Subgroups:
    """`spec.subGroups` as read: every name; (name, minMember) pairs sorted by name without
    the zeros (they ask for nothing); each required topology level with the subgroups
    (and the field) that set it (`with_task_levels`); warnings for what is read but not
    used."""

    names: frozenset[str]
    minima: tuple[tuple[str, int], ...]
    levels: dict[str, list[tuple[str, str]]]
    warnings: tuple[str, ...]


def _subgroups(src: Source, spec: JsonObject) -> _Subgroups:
    """`spec.subGroups`. KAI's webhook rules are kept (a name, once; a leaf's minMember)
    and what Phalanx cannot enforce is refused naming the entry."""
    names: set[str] = set()
    minima = []
    levels: dict[str, list[tuple[str, str]]] = {}
    warnings = []
    for path, entry in read_objects(src, spec.get("subGroups"), "spec.subGroups"):
        name = read_string(src, entry.get("name"), f"{path}.name")
        if not name:
            raise src.invalid(f"{path}.name", "is required (the subgroup's name)")
        if name in names:
            raise src.invalid(f"{path}.name", f"{quoted(name)} names a subgroup twice")
        names.add(name)
        for field, why in (
            ("parent", "nested subgroups are not supported: Phalanx enforces flat ones"),
            ("minSubGroup", "is not supported: a subgroup needs its minMember members"),
        ):
            if entry.get(field) not in (None, "", {}):
                raise src.invalid(f"{path}.{field}", why)
        where = f"{path}.minMember"
        minimum = read_integer(src, entry.get("minMember"), where)
        if minimum is None:
            raise src.invalid(where, "is required (a non-negative integer)")
        if minimum < 0:
            raise src.invalid(where, f"must be a non-negative integer, not {minimum}")
        if minimum > INT32_MAX:
            raise src.invalid(where, f"must be at most {INT32_MAX} (an int32), not {minimum}")
        if minimum:
            minima.append((name, minimum))
        where = f"{path}.topologyConstraint"
        constraint = read_object(src, entry.get("topologyConstraint"), where)
        intent = _topology(src, constraint, where)
        if read_string(src, constraint.get("topology"), f"{where}.topology"):
            warnings.append(
                f"{where}.topology is ignored: it names KAI's Topology object, which Phalanx "
                "does not read (its levels are read as node label keys)"
            )
        if intent is None:
            continue
        if intent.preferred:
            warnings.append(
                f"{where}.preferredTopologyLevel is ignored: Phalanx has no per-subgroup "
                "preference (the PodGroup's spec.topologyConstraint.preferredTopologyLevel "
                "is honoured for the whole gang)"
            )
        if intent.required:
            levels.setdefault(intent.required, []).append((name, f"{where}.requiredTopologyLevel"))
    return _Subgroups(frozenset(names), tuple(sorted(minima)), levels, tuple(warnings))


def _topology(src: Source, constraint: JsonObject, path: str) -> TopologyConstraint | None:
    return label_levels(src, constraint, path, "requiredTopologyLevel", "preferredTopologyLevel")


def stray_members(group: PodGroup, members: Iterable[Pod]) -> str:
    """Why members naming a subgroup `group` lacks keep the gang from scheduling; ""
    when none does (KAI's scheduler would never count them toward any subgroup)."""
    stray = sorted({p.task for p in members if p.task and p.task not in group.task_names})
    if not stray:
        return ""
    have = ", ".join(sorted(group.task_names)) or "none"
    return (
        f"gang {group.key}: member(s) name subgroup(s) {', '.join(stray)} (label "
        f"{SUBGROUP_LABEL}) that its PodGroup's spec.subGroups lacks (it has: {have})"
    )


KINDS: Final = {(API_VERSION, KIND): parse_pod_group}


def waiting_reason(ref: GroupRef) -> str:
    return (
        f"waiting for KAI PodGroup {ref.namespace}/{ref.name} ({API_VERSION}) to exist "
        f"(pods name it with annotation {GROUP_NAME_ANNOTATION})"
    )


def build_status(
    status: GroupStatus, previous: JsonObject | None, now: float, version: str = VERSION
) -> dict[str, object]:
    """The `status` to merge-patch onto the PodGroup's `/status` (one shape: `version` is
    moot).

    `previous` is the status as observed; scheduling conditions of other types are kept,
    since the patch replaces the list (sent under the observed resourceVersion). While
    the gang waits and Phalanx has decided about it, `UnschedulableOnNodePool` carries
    its reason; once placed, no such condition is left (nor one KAI left behind).
    """
    before = _scheduling_conditions(previous)
    kept = [c for c in before if c.get("type") != UNSCHEDULABLE_ON_NODE_POOL]
    old = [c for c in before if c.get("type") == UNSCHEDULABLE_ON_NODE_POOL][:1]
    if status.placed:
        ours: list[Mapping[str, object]] = []
    elif not status.reason:
        ours = old  # nothing decided yet: say nothing new
    else:
        message = status.message[:MESSAGE_LIMIT]
        condition: dict[str, object] = {
            "type": UNSCHEDULABLE_ON_NODE_POOL,
            "nodePool": NODE_POOL,
            "status": "True",
            "reason": UNSCHEDULABLE,
            "message": message,
            "reasons": [{"reason": camel(status.reason), "message": message}],
        }
        ours = set_condition(old, condition, rfc3339(now))
    return {
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
        "schedulingConditions": [*kept, *ours],
    }


def _scheduling_conditions(previous: JsonObject | None) -> list[Mapping[str, object]]:
    """`schedulingConditions` as last known; anything malformed reads as none."""
    items = (previous or {}).get("schedulingConditions")
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, Mapping)]
