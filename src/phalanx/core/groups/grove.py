"""The Grove dialect: NVIDIA Grove's `scheduler.grove.io/v1alpha1` PodGangs, one per
PodCliqueSet replica, as Grove's operator creates them.

* A pod names its PodGang with label `grove.io/podgang` (Grove sets it when it creates the
  pod, and holds the pod behind a scheduling gate until the PodGang exists). Key
  `grove:ns/name`.
* `spec.podgroups` (one per PodClique, named after it) give each podgroup's
  `minReplicas`, enforced as KAI's subgroup minima are (`PodGroup.min_task_member`,
  `phalanx.core.quorum`); the gang's minMember is their sum (Grove has no gang-wide
  minimum), and members beyond a podgroup's minimum are best-effort extras. A pod's
  podgroup is its label `grove.io/podclique`; a member without it takes the podgroup whose
  `podReferences` list it (`PodGroup.task_by_pod`, filed by the cache). A member naming a
  podgroup the PodGang lacks, or in none by either, makes the gang invalid
  (`stray_members`).
* `spec.topologyConstraint.packConstraint`: `required` and `preferred` are node label keys
  (Grove's operator translates its level names to them), read as KAI's levels are
  (`any_label`). A podgroup's `packConstraint.required` keeps its members inside one value
  of that label (`TopologyConstraint.slice_tasks`; podgroups may require different levels
  of one topology, `task_levels`); its `preferred` key is tried best effort
  (`TopologyConstraint.preferences`): its members in one value of it if the gang can be
  placed so, else one level wider at a time, up to its `required` (or the PodGang's
  domain).
* `spec.topologyConstraintGroupConfigs` keep several podgroups together inside one
  domain: an entry's `required` key is a task set of its `podGroupNames`
  (`TopologyConstraint.task_sets`, "constraint group <name>"), inside the PodGang's domain
  and around each podgroup's own. Entries that share podgroups without one holding the
  other are refused naming the field; levels that do not nest (an entry wider than the
  PodGang's `required`, a podgroup's wider than its entry's) are refused when the gang is
  resolved. An entry's `preferred` key holds its podgroups together best effort, as a
  podgroup's does its members; a `preferred` wider than the entry's own `required`, a
  podgroup's, or the PodGang's is refused when resolved, naming the field.
* `spec.priorityClassName` is not placement: not read. `spec.reuseReservationRef` asks to
  reuse an earlier PodGang's reservation: Phalanx places every gang anew (a warning).
* Status, on `/status` (Grove's CRD has the subresource): `phase` and a `Scheduled`
  condition, False with Phalanx's reason while the gang waits and True once its quorum
  is placed; other conditions and `placementScore` are kept. Grove's operator writes
  conditions too, so the write is built on the observed status and sent under its
  `resourceVersion` (`registry.status_write`).
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
    with_task_topology,
)
from phalanx.core.groups.status import (
    MESSAGE_LIMIT,
    GroupPhase,
    GroupStatus,
    camel,
    conditions_of,
    rfc3339,
    set_condition,
)
from phalanx.core.model import (
    Claim,
    Dialect,
    GroupRef,
    Pod,
    PodGroup,
    TaskPreference,
    TaskSet,
    TopologyConstraint,
)
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    read_integer,
    read_object,
    read_objects,
    read_string,
    read_string_map,
)

GROUP: Final = "scheduler.grove.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PodGang"
RESOURCE: Final = "podgangs"
PODGANG_LABEL: Final = "grove.io/podgang"
PODCLIQUE_LABEL: Final = "grove.io/podclique"
PODGROUP_LEVELS_FIELD: Final = "spec.podgroups[].topologyConstraint.packConstraint.required"

# Grove's condition for a placed gang, and the reason Phalanx gives it once placed.
SCHEDULED: Final = "Scheduled"
# Grove's phases: waiting, being bound, placed.
PENDING: Final = "Pending"
STARTING: Final = "Starting"
RUNNING: Final = "Running"
# Grove has no phase after Running: a gang whose members finished or failed ran.
_PHASES: Final = {
    GroupPhase.PENDING: PENDING,
    GroupPhase.PRE_SCHEDULING: PENDING,
    GroupPhase.SCHEDULING: STARTING,
    GroupPhase.SCHEDULED: STARTING,
    GroupPhase.RUNNING: RUNNING,
    GroupPhase.FINISHED: RUNNING,
    GroupPhase.FAILED: RUNNING,
}


def claim(pod: PodView) -> Claim | None:
    name = pod.labels.get(PODGANG_LABEL, "")
    if not name:
        return None
    problem = group_name_problem(f"label {PODGANG_LABEL}", name, KIND)
    if problem:
        return Claim(Dialect.GROVE, None, (problem,))
    return Claim(Dialect.GROVE, GroupRef(pod.namespace, name, Dialect.GROVE))


def task_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The Grove podgroup (PodClique) a pod belongs to (its `Pod.task`), from its label;
    "" for none."""
    return labels.get(PODCLIQUE_LABEL, "")


def parse_pod_gang(obj: JsonObject) -> Parsed[PodGroup]:
    src, metadata, namespace, name = read_identity(KIND, obj)
    spec = read_object(src, obj.get("spec"), "spec")
    podgroups = _podgroups(src, spec, namespace)
    total = sum(minimum for _, minimum in podgroups.minima)
    if total < 1:
        raise src.invalid(
            "spec.podgroups",
            "needs a podgroup with minReplicas of at least 1 (the gang's size is the sum of "
            f"its podgroups' minReplicas, here {total})",
        )
    if total > INT32_MAX:
        raise src.invalid(
            "spec.podgroups",
            f"the podgroups' minReplicas sum to {total}, more than {INT32_MAX} (an int32)",
        )
    sets, preferences = _group_configs(src, spec, podgroups.names)
    warnings = []
    if read_object(src, spec.get("reuseReservationRef"), "spec.reuseReservationRef"):
        warnings.append(
            "spec.reuseReservationRef is ignored: Phalanx keeps no reservation for a later "
            "PodGang to reuse (every gang is placed anew)"
        )
    where = "spec.topologyConstraint"
    constraint = _pack_constraint(src, spec, where)
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = ObjectSettings.read(src, annotations, timeout=True)
    topology = settings.topology_with(
        src, _topology(src, constraint, f"{where}.packConstraint"), where
    )
    group = PodGroup(
        namespace=namespace,
        name=name,
        min_member=total,
        **settings.group_fields(),
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        dialect=Dialect.GROVE,
        topology=with_task_topology(
            src,
            topology,
            levels=podgroups.levels,
            sets=sets,
            preferences=[*podgroups.preferences, *preferences],
            kind=KIND,
            noun="podgroup",
            levels_field=PODGROUP_LEVELS_FIELD,
        ),
        min_task_member=podgroups.minima,
        task_names=podgroups.names,
        task_by_pod=podgroups.by_pod,
        deleting=is_deleting(metadata),
    )
    return Parsed(group, tuple(warnings))


@dataclass(frozen=True, slots=True)
class _PodGroups:
    """`spec.podgroups` as read: every name; (name, minReplicas) pairs sorted by name
    without the zeros (they ask for nothing); each required level with the podgroups (and
    the field) that set it (`with_task_levels`); (pod, podgroup) for the pods of the
    PodGang's namespace the podgroups list; each podgroup's preferred level
    (`with_task_preferences`)."""

    names: frozenset[str]
    minima: tuple[tuple[str, int], ...]
    levels: dict[str, list[tuple[str, str]]]
    by_pod: tuple[tuple[str, str], ...]
    preferences: tuple[TaskPreference, ...]


def _podgroups(src: Source, spec: JsonObject, namespace: str) -> _PodGroups:
    names: set[str] = set()
    by_pod: dict[str, str] = {}
    minima = []
    levels: dict[str, list[tuple[str, str]]] = {}
    preferences = []
    if spec.get("podgroups") is None:
        raise src.invalid("spec.podgroups", "is required (a list of podgroups)")
    for path, entry in read_objects(src, spec.get("podgroups"), "spec.podgroups"):
        name = read_string(src, entry.get("name"), f"{path}.name")
        if not name:
            raise src.invalid(f"{path}.name", "is required (the podgroup's name)")
        if name in names:
            raise src.invalid(f"{path}.name", f"{quoted(name)} names a podgroup twice")
        names.add(name)
        where = f"{path}.minReplicas"
        minimum = read_integer(src, entry.get("minReplicas"), where)
        if minimum is None:
            raise src.invalid(where, "is required (a non-negative integer)")
        if minimum < 0:
            raise src.invalid(where, f"must be a non-negative integer, not {minimum}")
        if minimum > INT32_MAX:
            raise src.invalid(where, f"must be at most {INT32_MAX} (an int32), not {minimum}")
        if minimum:
            minima.append((name, minimum))
        refs = read_objects(src, entry.get("podReferences"), f"{path}.podReferences")
        for ref_path, ref in refs:
            pod = read_string(src, ref.get("name"), f"{ref_path}.name")
            where = read_string(src, ref.get("namespace"), f"{ref_path}.namespace")
            if not pod or where not in ("", namespace):
                continue  # no pod of this gang: its members are in its namespace
            if by_pod.setdefault(pod, name) != name:
                raise src.invalid(
                    f"{ref_path}.name",
                    f"{quoted(pod)} is listed in podgroups {by_pod[pod]} and {name}",
                )
        where = f"{path}.topologyConstraint"
        intent = _topology(src, _pack_constraint(src, entry, where), f"{where}.packConstraint")
        if intent is None:
            continue
        if intent.preferred:
            preferences.append(
                TaskPreference(
                    f"podgroup {name}",
                    (name,),
                    intent.preferred,
                    f"{where}.packConstraint.preferred",
                )
            )
        if intent.required:
            levels.setdefault(intent.required, []).append(
                (name, f"{where}.packConstraint.required")
            )
    return _PodGroups(
        frozenset(names),
        tuple(sorted(minima)),
        levels,
        tuple(sorted(by_pod.items())),
        tuple(preferences),
    )


def _group_configs(
    src: Source, spec: JsonObject, names: frozenset[str]
) -> tuple[list[TaskSet], list[TaskPreference]]:
    """`spec.topologyConstraintGroupConfigs`: a task set for each entry with a `required`
    key (its podgroups together in one domain of it), and a preference for each with a
    `preferred` key (its podgroups together in one domain of it, best effort)."""
    sets: list[TaskSet] = []
    preferences: list[TaskPreference] = []
    configs = spec.get("topologyConstraintGroupConfigs")
    for path, entry in read_objects(src, configs, "spec.topologyConstraintGroupConfigs"):
        listed = entry.get("podGroupNames")
        if listed is not None and not isinstance(listed, list):
            raise src.invalid(f"{path}.podGroupNames", "must be a list of podgroup names")
        tasks = set()
        for index, item in enumerate(listed or ()):
            named = read_string(src, item, f"{path}.podGroupNames[{index}]")
            if named not in names:
                raise src.invalid(
                    f"{path}.podGroupNames[{index}]",
                    f"{quoted(named)} names no podgroup of spec.podgroups",
                )
            tasks.add(named)
        where = f"{path}.topologyConstraint"
        intent = _topology(src, _pack_constraint(src, entry, where), f"{where}.packConstraint")
        if intent is None:
            continue
        label = f"constraint group {read_string(src, entry.get('name'), f'{path}.name') or path}"
        if not tasks:
            continue
        grouped, pack = tuple(sorted(tasks)), f"{where}.packConstraint"
        if intent.required:
            sets.append(TaskSet(label, grouped, intent.required, f"{pack}.required"))
        if intent.preferred:
            preferences.append(
                TaskPreference(label, grouped, intent.preferred, f"{pack}.preferred", together=True)
            )
    return sets, preferences


def _pack_constraint(src: Source, holder: JsonObject, where: str) -> JsonObject:
    """`<where>.packConstraint` of `holder`'s `topologyConstraint` ({} when unset)."""
    constraint = read_object(src, holder.get("topologyConstraint"), where)
    return read_object(src, constraint.get("packConstraint"), f"{where}.packConstraint")


def _topology(src: Source, pack: JsonObject, path: str) -> TopologyConstraint | None:
    return label_levels(src, pack, path, "required", "preferred")


def stray_members(group: PodGroup, members: Iterable[Pod]) -> str:
    """Why members naming no podgroup of `group`, or in none at all (no label, and no
    podgroup's `podReferences` list them), keep the gang from scheduling; "" when every
    member is in one of its podgroups."""
    members = list(members)
    stray = sorted({p.task for p in members if p.task and p.task not in group.task_names})
    unnamed = sorted(p.name for p in members if not p.task)
    problems = []
    if stray:
        have = ", ".join(sorted(group.task_names)) or "none"
        problems.append(
            f"member(s) name podgroup(s) {', '.join(stray)} (label {PODCLIQUE_LABEL}) that "
            f"its PodGang's spec.podgroups lacks (it has: {have})"
        )
    if unnamed:
        more = f" and {len(unnamed) - 5} more" if len(unnamed) > 5 else ""
        shown = ", ".join(unnamed[:5]) + more
        problems.append(
            f"member(s) {shown} have no label {PODCLIQUE_LABEL} and no podgroup's "
            "podReferences list them (Grove labels each pod with its PodClique, the podgroup "
            "it is in)"
        )
    return f"gang {group.key}: {'; '.join(problems)}" if problems else ""


KINDS: Final = {(API_VERSION, KIND): parse_pod_gang}


def waiting_reason(ref: GroupRef) -> str:
    return (
        f"waiting for Grove PodGang {ref.namespace}/{ref.name} ({API_VERSION}) to exist "
        f"(pods name it with label {PODGANG_LABEL})"
    )


def build_status(
    status: GroupStatus, previous: JsonObject | None, now: float, version: str = VERSION
) -> dict[str, object]:
    """The `status` to merge-patch onto the PodGang's `/status` (one shape: `version` is
    moot).

    `previous` is the status as observed; conditions of other types are kept, since the
    patch replaces the list (sent under the observed resourceVersion), and fields not
    written here (`placementScore`) are left as they are by the merge patch. `phase` is
    Grove's name for the gang's phase. While the gang waits and Phalanx has decided about
    it, `Scheduled` is False with its reason; once placed, True.
    """
    before = conditions_of(previous)
    kept = [c for c in before if c.get("type") != SCHEDULED]
    old = [c for c in before if c.get("type") == SCHEDULED][:1]
    if not status.placed and not status.reason:
        ours: list[Mapping[str, object]] = old  # nothing decided yet: say nothing new
    else:
        condition: dict[str, object] = {
            "type": SCHEDULED,
            "status": "True" if status.placed else "False",
            "reason": SCHEDULED if status.placed else camel(status.reason),
            "message": status.message[:MESSAGE_LIMIT],
        }
        ours = set_condition(old, condition, rfc3339(now))
    return {"phase": _PHASES[status.phase], "conditions": [*kept, *ours]}
