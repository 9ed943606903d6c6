"""The KAI dialect: NVIDIA KAI Scheduler's `scheduling.run.ai/v2alpha2` PodGroups, as KAI's
podgrouper creates them (one per workload) or a platform's tooling writes them.

* A pod names its PodGroup with annotation `pod-group-name` (the key KAI's podgrouper
  writes and its scheduler reads). Key `kai:ns/name`.
* The PodGroup gives `spec.minMember`, the members the gang needs in all. Its
  `spec.subGroups` (`kai_subgroups`) hold the pods by their label
  `kai.scheduler/subgroup-name`, in leaves only (a subgroup no other names as `parent`).
  Flat subgroups give each subgroup's `minMember`, enforced as Volcano's task minima are
  (`PodGroup.min_task_member`, `phalanx.core.quorum`). Nested ones (`parent`), or any
  `minSubGroup`, are a tree quorum as a composite gang's (`SubGroupTree`): a parent is
  ready with `minSubGroup` of its direct children (all of them when unset), the PodGroup
  likewise with `spec.minSubGroup` over the top-level subgroups, a leaf with its
  `minMember` members. With `spec.minSubGroup` (exclusive with `spec.minMember`, as KAI
  has it), or subgroups without `spec.minMember`, the gang's `min_member` is the fewest
  members that tree needs. A `spec.minMember` the subgroups' quorum cannot fit in is
  refused; one above an elastic (`minSubGroup`) quorum is held as well, with a warning:
  KAI's scheduler counts only the subgroups there. A pod naming a subgroup the PodGroup
  lacks, or a parent, makes the gang invalid (`stray_members`).
* A leaf subgroup's `topologyConstraint.requiredTopologyLevel` keeps its members inside
  one value of that label (`TopologyConstraint.slice_tasks`, as a composite's child
  PodGroups), beside the PodGroup's own constraint on the whole gang. Leaves may require
  different levels (`task_levels`: prefill in one rack, decode in one spine), as KAI's
  multi-level topology has it; they must be levels of one topology, no wider than the
  PodGroup's required level, or the gang is refused when it is resolved. A parent's
  required level keeps its leaves together in one domain of it (a task set,
  `TopologyConstraint.task_sets`: Dynamo's prefill leader and workers in one block, each
  in one rack), nested as the subgroups are; it must be no wider than the PodGroup's level
  and no narrower than its leaves' (checked when resolved, naming the field); the
  PodGroup's own level is already held. A subgroup's `preferredTopologyLevel` is tried
  best effort (`TopologyConstraint.preferences`): a leaf's members, or a parent's leaves
  together, in one domain of it if the gang can be placed so, else one level wider at a
  time up to its required level (or the PodGroup's domain); one wider than its own
  required level or the PodGroup's is refused when resolved, naming the field. A
  subgroup's `topology` is not used (a warning).
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
from typing import Final

from phalanx.core.groups.common import (
    ObjectSettings,
    Parsed,
    PodView,
    group_name_problem,
    is_deleting,
    label_levels,
    read_identity,
    read_min_count,
    with_task_topology,
)
from phalanx.core.groups.kai_subgroups import Subgroups, parents, read_subgroups
from phalanx.core.groups.status import MESSAGE_LIMIT, GroupStatus, camel, rfc3339, set_condition
from phalanx.core.model import Claim, Dialect, GroupRef, Pod, PodGroup, TopologyConstraint
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    read_integer,
    read_object,
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
    if spec.get("minSubGroup") is not None and read_integer(
        src, spec.get("minMember"), "spec.minMember"
    ):
        raise src.invalid(
            "spec.minSubGroup",
            "must not be set with spec.minMember (they are mutually exclusive)",
        )
    subgroups = read_subgroups(src, spec)
    min_member = _min_member(src, spec, subgroups)
    warnings = list(subgroups.warnings)
    if subgroups.elastic and min_member > max(subgroups.fewest, 1):
        warnings.append(
            f"spec.minMember ({min_member}) is more than the fewest members the subgroups' "
            f"minSubGroup quorum needs ({subgroups.fewest}): Phalanx holds both, so the gang "
            f"waits for {min_member} (KAI's scheduler counts only the subgroups)"
        )
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
    # A parent at the PodGroup's own level is held by the gang's domain already.
    sets = [s for s in subgroups.sets if topology is None or s.level != topology.required]
    group = PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        **settings.group_fields(),
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        dialect=Dialect.KAI,
        topology=with_task_topology(
            src,
            topology,
            levels=subgroups.levels,
            sets=sets,
            preferences=subgroups.preferences,
            kind=KIND,
            noun="subgroup",
            levels_field=SUBGROUP_LEVELS_FIELD,
        ),
        min_task_member=subgroups.minima,
        task_names=subgroups.names,
        deleting=is_deleting(metadata),
    )
    return Parsed(group, tuple(warnings))


def _min_member(src: Source, spec: JsonObject, subgroups: Subgroups) -> int:
    """The gang's `min_member`: `spec.minMember`, which must leave room for the subgroups'
    quorum; else, with `spec.minSubGroup` (KAI makes the two exclusive) or with subgroups
    alone, the fewest members that quorum needs."""
    if spec.get("minSubGroup") is not None or (spec.get("minMember") is None and subgroups.names):
        return max(subgroups.fewest, 1)
    min_member = read_min_count(src, spec.get("minMember"), "spec.minMember")
    if subgroups.fewest > min_member:
        what = (
            f"the subgroups' minMember sum to {subgroups.fewest}"
            if isinstance(subgroups.minima, tuple)
            else f"the subgroups' quorum needs {subgroups.fewest} members"
        )
        raise src.invalid(
            "spec.subGroups",
            f"{what}, more than spec.minMember ({min_member}): no gang of spec.minMember "
            "members can hold them",
        )
    return min_member


def _topology(src: Source, constraint: JsonObject, path: str) -> TopologyConstraint | None:
    return label_levels(src, constraint, path, "requiredTopologyLevel", "preferredTopologyLevel")


def stray_members(group: PodGroup, members: Iterable[Pod]) -> str:
    """Why members naming a subgroup that holds no pods keep the gang from scheduling: one
    `group` lacks, or a parent of other subgroups; "" when none does (KAI's scheduler
    would never count them toward any subgroup)."""
    stray = sorted({p.task for p in members if p.task and p.task not in group.task_names})
    if not stray:
        return ""
    held = parents(group.min_task_member)
    have = ", ".join(sorted(group.task_names)) or "none"
    why = []
    if lacking := [t for t in stray if t not in held]:
        why.append(
            f"member(s) name subgroup(s) {', '.join(lacking)} (label {SUBGROUP_LABEL}) that "
            f"its PodGroup's spec.subGroups lacks (it has: {have})"
        )
    if parent := [t for t in stray if t in held]:
        why.append(
            f"member(s) name subgroup(s) {', '.join(parent)} (label {SUBGROUP_LABEL}) that "
            f"have child subgroups in its PodGroup's spec.subGroups: pods belong to the "
            f"leaves ({have})"
        )
    return f"gang {group.key}: {'; '.join(why)}"


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
