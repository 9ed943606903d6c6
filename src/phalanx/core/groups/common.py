"""What every gang dialect reads the same way: names, Phalanx's own settings on a group
object, a pod's membership view, and the values a dialect hands back.

A group object (a PodGroup or Workload of any dialect) may carry Phalanx's annotations:
`phalanx.io/placement`, `phalanx.io/plan`, `phalanx.io/differentiable` and, for APIs
without a timeout field of their own, `phalanx.io/schedule-timeout-seconds`. On an
object they are validated like its spec (the object is refused with the field named);
on a pod they never raise (see `phalanx.core.inventory`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Generic, TypedDict, TypeVar

from phalanx.core.errors import quoted
from phalanx.core.model import (
    ANNOTATION_PREFIX,
    DEFAULT_TIMEOUT_SECONDS,
    Placement,
    PolicyKind,
    SubGroupPolicy,
    TaskPreference,
    TaskSet,
    TopologyConstraint,
    task_names,
)
from phalanx.core.names import (
    DNS_LABEL_FORM,
    OBJECT_NAME_FORM,
    annotation_int,
    is_dns_label,
    is_object_name,
    is_qualified_name,
)
from phalanx.core.rawdict import (
    INT32_MAX,
    JsonObject,
    Source,
    key_path,
    namespace_and_name,
    read_integer,
    read_metadata,
    read_string,
)
from phalanx.core.topology_annotations import group_topology

T_co = TypeVar("T_co", covariant=True)

PLACEMENT_ANNOTATION: Final = ANNOTATION_PREFIX + "placement"
PLAN_ANNOTATION: Final = ANNOTATION_PREFIX + "plan"
DIFFERENTIABLE_ANNOTATION: Final = ANNOTATION_PREFIX + "differentiable"
SCHEDULE_TIMEOUT_ANNOTATION: Final = ANNOTATION_PREFIX + "schedule-timeout-seconds"

_PLACEMENT_FORMS = "pack, same-node, spread, interconnect-local or domain:<node-label-key>"


def group_name_problem(where: str, name: str, kind: str = "PodGroup") -> str:
    """Why `name`, read from `where` (a pod's label, annotation or spec field), can name no
    object of `kind`; "" when it can."""
    if is_object_name(name):
        return ""
    return f"{where}: {quoted(name)} is not a valid {kind} name {OBJECT_NAME_FORM}"


def read_identity(kind: str, obj: JsonObject) -> tuple[Source, JsonObject, str, str]:
    """A gang object's (source, metadata, namespace, name); `read_metadata` refuses a name
    or namespace no object could have."""
    src, metadata = read_metadata(kind, obj, namespaced=True)
    namespace, name = namespace_and_name(src)
    return src, metadata, namespace, name


def is_deleting(metadata: JsonObject) -> bool:
    """Whether a gang object is being deleted: `metadata.deletionTimestamp` is set (the API
    server never clears it; finalizers keep the object until they are removed)."""
    return metadata.get("deletionTimestamp") not in (None, "")


def label_name_problem(where: str, name: str, what: str) -> str:
    """Why `name`, read from `where`, is no DNS label (`what` it names: a Workload's pod
    group, a replica key); "" when it is."""
    if is_dns_label(name):
        return ""
    return f"{where}: {quoted(name)} is not a valid {what} {DNS_LABEL_FORM}"


# --- Phalanx's settings -----------------------------------------------------------------


def parse_placement(text: str) -> Placement:
    """`phalanx.io/placement`: pack | same-node | spread | interconnect-local | domain:<key>."""
    kind, colon, domain_key = text.partition(":")
    if colon and kind == PolicyKind.DOMAIN.value:
        if not is_qualified_name(domain_key):
            raise ValueError(
                f"{quoted(text)} does not name a valid node label key after domain: "
                "(e.g. domain:topology.kubernetes.io/zone)"
            )
        return Placement(PolicyKind.DOMAIN, domain_key)
    if not colon and kind != PolicyKind.DOMAIN.value:
        try:
            return Placement(PolicyKind(kind))
        except ValueError:
            pass
    raise ValueError(f"{quoted(text)} is not a placement policy; use {_PLACEMENT_FORMS}")


def parse_differentiable(text: str) -> frozenset[str]:
    """`phalanx.io/differentiable`: comma-separated plan ids; blanks around and between ignored."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


class GroupFields(TypedDict):
    """The `PodGroup` fields a gang object's Phalanx annotations give, in every dialect
    whose gangs the annotations' timeout stands in for (`ObjectSettings.group_fields`)."""

    timeout_seconds: int
    timeout_declared: bool
    placement: Placement | None
    plan_json: str
    differentiable: frozenset[str]


@dataclass(frozen=True, slots=True)
class ObjectSettings:
    """Phalanx's annotations on a group object (any dialect)."""

    placement: Placement | None = None
    plan_json: str = ""
    differentiable: frozenset[str] = frozenset()
    timeout_seconds: int | None = None  # only read where the API has no timeout field
    topology: TopologyConstraint | None = None  # phalanx.io/topology-* (docs/topology.md)

    @classmethod
    def read(
        cls, src: Source, annotations: Mapping[str, str], *, timeout: bool = False
    ) -> ObjectSettings:
        placement: Placement | None = None
        if PLACEMENT_ANNOTATION in annotations:
            try:
                placement = parse_placement(annotations[PLACEMENT_ANNOTATION])
            except ValueError as error:
                raise src.invalid(
                    key_path("metadata.annotations", PLACEMENT_ANNOTATION), str(error)
                ) from error
        seconds: int | None = None
        if timeout and SCHEDULE_TIMEOUT_ANNOTATION in annotations:
            read = annotation_int32(annotations[SCHEDULE_TIMEOUT_ANNOTATION])
            if isinstance(read, str):
                raise src.invalid(
                    key_path("metadata.annotations", SCHEDULE_TIMEOUT_ANNOTATION), read
                )
            seconds = read
        return cls(
            placement=placement,
            plan_json=annotations.get(PLAN_ANNOTATION, ""),
            differentiable=parse_differentiable(annotations.get(DIFFERENTIABLE_ANNOTATION, "")),
            timeout_seconds=seconds,
            topology=group_topology(src, annotations),
        )

    def topology_with(
        self, src: Source, declared: TopologyConstraint | None, path: str, *, adds: bool = False
    ) -> TopologyConstraint | None:
        """The group's topology intent: its API field (`declared`, at `path`) or Phalanx's
        annotations; both saying different things is refused, naming the field. Saying the
        same, the field's reading (`any_label`) stands. With `adds` (a field that says only
        `required`: upstream's PodGroup) the annotations may also add what it leaves out
        (which topology, `preferred`, the slices) and repeat its `required`; the whole is
        checked as one intent when the gang is resolved (`resolve_topology`)."""
        own = self.topology
        if declared is None or own is None:
            return declared or own
        if adds and own.required in ("", declared.required):
            return replace(own, required=declared.required, any_label=declared.any_label)
        if replace(declared, any_label=False) == replace(own, any_label=False):
            return declared
        raise src.invalid(
            path, f"says {declared} but the phalanx.io/topology-* annotations say {own}"
        )

    @property
    def timeout_or_default(self) -> int:
        return DEFAULT_TIMEOUT_SECONDS if self.timeout_seconds is None else self.timeout_seconds

    def group_fields(self) -> GroupFields:
        """What these annotations set on the object's `PodGroup` (its timeout read from the
        annotation, where the API has no timeout field)."""
        return GroupFields(
            timeout_seconds=self.timeout_or_default,
            timeout_declared=self.timeout_seconds is not None,
            placement=self.placement,
            plan_json=self.plan_json,
            differentiable=self.differentiable,
        )


def label_levels(
    src: Source, holder: JsonObject, path: str, required: str, preferred: str
) -> TopologyConstraint | None:
    """A topology intent of node label keys, as KAI's and Grove's objects write their levels:
    fields `required` and `preferred` of `holder` (at `path`), each read as any node label
    (`any_label`); None when neither is set. A value that is no label key is refused
    naming the field."""
    keys = {}
    for field in (required, preferred):
        where = f"{path}.{field}"
        key = read_string(src, holder.get(field), where)
        if key and not is_qualified_name(key):
            raise src.invalid(where, f"{quoted(key)} is not a node label key")
        keys[field] = key
    if not keys[required] and not keys[preferred]:
        return None
    return TopologyConstraint(required=keys[required], preferred=keys[preferred], any_label=True)


def _unsliced(
    src: Source, own: TopologyConstraint | None, field: str, kind: str, *, by_task: bool = False
) -> TopologyConstraint:
    """`own` (or an intent with no constraint yet) for `field` to add to; refused, naming
    `field`, when the object's annotations cut the gang into slices by rank (`by_task`:
    into slices of any kind, tasks' own levels included)."""
    base = own or TopologyConstraint(any_label=True)
    if base.slice_size or (by_task and base.slice_required):
        raise src.invalid(
            field,
            f"cannot be combined with the {kind}'s slices ({base}, from the "
            "phalanx.io/topology-* annotations); use one or the other",
        )
    return base


def with_task_levels(
    src: Source,
    own: TopologyConstraint | None,
    levels: Mapping[str, list[tuple[str, str]]],
    *,
    kind: str,
    noun: str,
    levels_field: str,
) -> TopologyConstraint | None:
    """A gang's topology intent from its object's own constraint (`own`, for the whole
    gang) and each task's required level (`levels`: level -> (task, the field that set
    it), in the object's order): its members inside one value of it, one level shared or
    each task's own (`task_levels`). Refused, naming the first such field, when the
    object's annotations already cut the gang into slices. Whether different levels nest
    in one topology is known only against the configured topologies (`resolve_topology`).
    `kind` names the object, `noun` its tasks (KAI's subgroups, Grove's podgroups), and
    `levels_field` the field of every task's level, in messages."""
    if not levels:
        return own
    named = [entry for tasks in levels.values() for entry in tasks]
    base = _unsliced(src, own, next(iter(levels.values()))[0][1], kind, by_task=True)
    tasks = tuple(sorted(name for name, _ in named))
    if len(levels) == 1:
        return replace(base, slice_required=next(iter(levels)), slice_tasks=tasks, slice_noun=noun)
    return replace(
        base,
        slice_tasks=tasks,
        slice_noun=noun,
        task_levels=tuple(
            sorted((name, level) for level, entries in levels.items() for name, _ in entries)
        ),
        # Named where levels that do not nest are refused (`resolve_topology`).
        declared_by=levels_field,
    )


def with_subgroups(
    src: Source,
    own: TopologyConstraint | None,
    policies: Sequence[SubGroupPolicy],
    field: str,
    kind: str,
) -> TopologyConstraint:
    """A gang's topology intent (`own`) with Volcano's subgroups each in one domain of its
    policy's level (`TopologyConstraint.subgroups`). Refused, naming `field`, beside the
    object's annotations' slices: a member cannot be both a slice's and a subgroup's."""
    base = _unsliced(src, own, field, kind, by_task=True)
    return replace(base, subgroups=tuple(policies))


def with_task_sets(
    src: Source, own: TopologyConstraint | None, sets: Sequence[TaskSet], *, kind: str, noun: str
) -> TopologyConstraint | None:
    """A gang's topology intent (`own`, with its tasks' levels already) with sets of its
    tasks each held in one domain of a level (`TopologyConstraint.task_sets`: KAI's parent
    subgroups, Grove's constraint groups). Refused, naming a set's field: sets that share
    tasks without one holding the other (they could not be placed one inside the other),
    or sets beside the object's annotations' slices by rank. Whether the levels nest is
    known only against the configured topologies (`resolve_topology`). `kind` names the
    object, `noun` its tasks, in messages."""
    if not sets:
        return own
    base = _unsliced(src, own, sets[0].field, kind)
    for i, a in enumerate(sets):
        for b in sets[:i]:
            common = set(a.tasks) & set(b.tasks)
            if common and not (common == set(a.tasks) or common == set(b.tasks)):
                raise src.invalid(
                    a.field,
                    f"holds {task_names(common)} with {b.label} ({b.field}) but neither set "
                    "holds the other: sets of tasks kept together must nest or be disjoint",
                )
    return replace(base, slice_noun=noun, task_sets=tuple(sorted(sets, key=lambda s: s.label)))


def with_task_preferences(
    src: Source,
    own: TopologyConstraint | None,
    prefs: Sequence[TaskPreference],
    *,
    kind: str,
    noun: str,
) -> TopologyConstraint | None:
    """A gang's topology intent (`own`, with its tasks' levels and sets already) with its
    tasks' and sets' preferred levels (`TopologyConstraint.preferences`: KAI's subgroups'
    `preferredTopologyLevel`, Grove's podgroups' and constraint groups' `preferred`).
    Refused, naming the first preference's field, beside the object's annotations' slices by
    rank. Whether each is narrower than its own required level and the gang's is known only
    against the configured topologies (`resolve_topology`). `kind` names the object, `noun`
    its tasks, in messages."""
    if not prefs:
        return own
    base = _unsliced(src, own, prefs[0].field, kind)
    return replace(base, slice_noun=noun, preferences=tuple(sorted(prefs, key=lambda p: p.label)))


def with_task_topology(
    src: Source,
    own: TopologyConstraint | None,
    *,
    levels: Mapping[str, list[tuple[str, str]]],
    sets: Sequence[TaskSet],
    preferences: Sequence[TaskPreference],
    kind: str,
    noun: str,
    levels_field: str,
) -> TopologyConstraint | None:
    """A gang's topology intent (`own`) with what its tasks declare, as KAI's subgroups and
    Grove's podgroups do: each task's level (`with_task_levels`), sets of tasks held
    together (`with_task_sets`), and preferred levels (`with_task_preferences`)."""
    own = with_task_levels(src, own, levels, kind=kind, noun=noun, levels_field=levels_field)
    own = with_task_sets(src, own, sets, kind=kind, noun=noun)
    return with_task_preferences(src, own, preferences, kind=kind, noun=noun)


def annotation_int32(text: str) -> int | str:
    """A positive int32 from an annotation, or why it is not one: the range of the API
    fields the gang annotations stand in for (a `schedule-timeout-seconds` of 10^17 would
    hold a reservation for ever)."""
    number = annotation_int(text, minimum=1)
    if number is None:
        return f"{quoted(text)} is not a positive integer"
    if number > INT32_MAX:
        return f"{quoted(text)} is more than {INT32_MAX}, the largest an int32 API field holds"
    return number


def declared_size(annotations: Mapping[str, str], key: str, missing: str) -> int | str:
    """A gang's size a member declares in annotation `key` (a positive int32), or what is
    wrong with it: `missing` when the annotation is absent."""
    text = annotations.get(key)
    if text is None:
        return missing
    read = annotation_int32(text)
    return f"annotation {key}: {read}" if isinstance(read, str) else read


def read_positive_int32(src: Source, value: object, path: str) -> int | None:
    """A positive int32 field of a gang object (a size, seconds); None when absent.
    Out of range is refused naming the field: a CRD's `format: int32` is not enforced by
    the API server, and no other scheduler of these APIs could decode the object."""
    number = read_integer(src, value, path)
    if number is None:
        return None
    if number < 1:
        raise src.invalid(path, f"must be a positive integer, not {number}")
    if number > INT32_MAX:
        raise src.invalid(path, f"must be at most {INT32_MAX} (an int32), not {number}")
    return number


def read_min_count(src: Source, value: object, path: str) -> int:
    """A gang size field (`minMember`, `minCount`): a positive int32, else the object is
    refused naming the field (0 would make every pod a gang of its own)."""
    count = read_positive_int32(src, value, path)
    if count is None:
        raise src.invalid(path, "is required (a positive integer)")
    return count


# --- A pod, as the dialects see it ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodView:
    """The parts of a pod that say which gang it is in (already type-checked)."""

    src: Source  # for errors about spec fields, which the API server validates
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    spec: JsonObject


@dataclass(frozen=True, slots=True)
class Parsed(Generic[T_co]):
    """A parsed object and what Phalanx ignores in it, said once per object (not errors:
    the object is used)."""

    value: T_co
    warnings: tuple[str, ...] = ()


__all__ = [
    "DIFFERENTIABLE_ANNOTATION",
    "DNS_LABEL_FORM",
    "INT32_MAX",
    "OBJECT_NAME_FORM",
    "PLACEMENT_ANNOTATION",
    "PLAN_ANNOTATION",
    "SCHEDULE_TIMEOUT_ANNOTATION",
    "ObjectSettings",
    "Parsed",
    "PodView",
    "annotation_int",
    "annotation_int32",
    "declared_size",
    "group_name_problem",
    "is_deleting",
    "is_dns_label",
    "is_object_name",
    "is_qualified_name",
    "label_name_problem",
    "parse_differentiable",
    "parse_placement",
    "read_identity",
    "read_min_count",
    "read_positive_int32",
    "with_task_levels",
    "with_task_preferences",
    "with_task_sets",
    "with_task_topology",
]
