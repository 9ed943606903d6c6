"""Every gang dialect Phalanx reads, in one precedence order, and what they share.

**Precedence**, for a pod two dialects claim (first wins; the others are kept on the pod
as `Pod.overruled`, so the service can say once, in an Event, which one won):

1. `annotations` (`phalanx.io/pod-group`): addressed to Phalanx by name; the workload's
   author wrote it for this scheduler.
2. `scheduler-plugins` (label `scheduling.x-k8s.io/pod-group`): Phalanx's own first
   dialect; an operator writes it only when configured for it. It and (1) share names:
   the same name is one claim, different names are an error (the pod is invalid), never a
   precedence, as before dialects.
3. `volcano` (annotation `scheduling.k8s.io/group-name`): also written only by operators
   set up for it.
4. `kai` (annotation `pod-group-name`, NVIDIA KAI Scheduler's PodGroups): likewise an
   object written for a gang scheduler, by an operator set up for it (KAI's podgrouper).
5. `grove` (label `grove.io/podgang`, NVIDIA Grove's PodGangs): an object its operator
   writes for a gang scheduler, like KAI's, but after KAI's: KAI's podgrouper turns a
   PodGang into a KAI PodGroup and names it on the pods (`pod-group-name`) when KAI
   schedules Grove's workloads, and then that PodGroup is the gang KAI's users expect.
6. `kueue` (label `kueue.x-k8s.io/pod-group-name`): a group Kueue admits as one unit; its
   gang is Phalanx's reading of it, so a dialect written for a gang scheduler wins. It
   still wins over upstream's, for the reason below.
7. `yunikorn` (annotation `yunikorn.apache.org/task-group-name` with an application id):
   written on purpose for a gang scheduler, but with no object; an application YuniKorn
   users also queue through Kueue is admitted as Kueue's unit, so Kueue's wins.
8. `lws` (LeaderWorkerSet's labels with the opt-in `phalanx.io/leaderworkerset-gang`): the
   user asked for it, but LWS groups are commonly admitted by Kueue too, whose pod group
   (when Kueue writes one) is the unit Kueue admits, so Kueue's wins; a YuniKorn
   application's task groups name every pod of it on purpose, so they win too; written on
   purpose, it wins over upstream's.
9. `upstream` (`spec.schedulingGroup` / `spec.workloadRef`): last, because built-in
   controllers stamp it without the workload author asking (the Job controller, with
   the WorkloadWithJob gate, gives every Job its own PodGroup). A pod also claimed by a
   third-party gang is most likely in a *wider* gang its operator declared on purpose
   (a whole TrainJob, not one of its Jobs).

Adding a dialect: one module (a `claim`, its `KINDS` parsers, a `waiting_reason` and a
`build_status`) and one line in `DIALECTS`; what else differs between dialects (the kind
of a gang's object, a member's task, ...) is a field of that line, not a branch elsewhere.

**Status writes** (`status_write`). Each dialect's `build_status` gives the whole status
object Phalanx wants to see; how it is sent depends on who else writes it:

* scheduler-plugins: Phalanx alone. A JSON merge patch of the whole status, built on what
  Phalanx last wrote (as before dialects, plus the finished members' counts).
* Volcano, KAI, Grove: their controllers write conditions and counts too. A JSON merge patch of the
  whole status (a CRD: no strategic merge), built on the status last observed and sent
  with that object's `resourceVersion` as a precondition: a write in between makes it a
  409 Conflict, and the source reads the object again and rebuilds, never clobbering.
* upstream: kube-scheduler writes `PodGroupInitiallyScheduled` itself, as a strategic
  merge patch of the changed condition (merge key `type`) without a precondition, after
  checking against its cache that it never turns a True back. Phalanx sends the same kind
  of patch (only the conditions it changes, so other types are never touched) with the
  observed `resourceVersion` as a precondition (so its own "never turn a True back" is
  decided on exactly the version it writes over), and rebuilds on a conflict.
* annotations, Kueue, YuniKorn, LWS: no object, so no status (Events go on the first member).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final, Protocol

# Aliased: `annotations` is also the name of the `from __future__` feature above.
from phalanx.core.groups import annotations as annotation_only
from phalanx.core.groups import (
    composite,
    grove,
    kai,
    kueue,
    lws,
    scheduler_plugins,
    upstream,
    volcano,
    yunikorn,
)
from phalanx.core.groups.common import (
    DIFFERENTIABLE_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PLAN_ANNOTATION,
    SCHEDULE_TIMEOUT_ANNOTATION,
    Parsed,
    PodView,
    is_dns_label,
    is_object_name,
)
from phalanx.core.groups.composite import CompositePodGroup
from phalanx.core.groups.discovery import Served, ServedKind
from phalanx.core.groups.status import GroupStatus, conditions_of
from phalanx.core.groups.upstream import Workload
from phalanx.core.model import (
    ANNOTATION_PREFIX,
    DEFAULT_TIMEOUT_SECONDS,
    ChildGroups,
    Claim,
    Dialect,
    GroupRef,
    Pod,
    PodGroup,
    SubGroupTree,
    TaskGroupMinima,
)
from phalanx.core.quorum import TaskMinima
from phalanx.core.rawdict import JsonObject, key_path
from phalanx.core.topology_annotations import (
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    TOPOLOGY_SLICE_REQUIRED_ANNOTATION,
    TOPOLOGY_SLICE_SIZE_ANNOTATION,
)

GroupObject = PodGroup | Workload | CompositePodGroup
Parser = Callable[[JsonObject], Parsed[GroupObject]]
StatusBuilder = Callable[[GroupStatus, JsonObject | None, float, str], dict[str, object] | None]
TaskReader = Callable[[Mapping[str, str], Mapping[str, str]], str]  # (labels, annotations)
# Condition type -> whether its status True means placed (False: waiting), for a version.
PlacingConditions = Callable[[str], Mapping[str, bool]]


def _one_kind(kind: str) -> Callable[[GroupRef], str]:
    """An `object_kind` for a dialect whose gangs are all held by objects of `kind`."""
    return lambda _ref: kind


def _every_version(meanings: Mapping[str, bool]) -> PlacingConditions:
    """`placing_conditions` the same in every version of a dialect's API."""
    return lambda _version: meanings


# The defaults of an object-less dialect: named as annotation-only gangs are (by
# scheduler-plugins' kind), and no condition to read.
_AS_A_POD_GROUP: Final = _one_kind(scheduler_plugins.KIND)
_NO_CONDITIONS: Final = _every_version({})


class StatusPatch(StrEnum):
    """How a gang's status is sent (see the module docstring)."""

    MERGE = "merge"  # JSON merge patch (RFC 7386) of the whole status object
    STRATEGIC = "strategic"  # strategic merge patch of the changed conditions, by `type`


@dataclass(frozen=True, slots=True)
class GroupDialect:
    """One dialect, as the registry uses it."""

    dialect: Dialect
    claim: Callable[[PodView], Claim | None]
    kinds: Mapping[tuple[str, str], Parser]  # (apiVersion, kind) -> parser
    waiting_reason: Callable[[GroupRef], str] | None = None  # None: uses another's objects
    build_status: StatusBuilder | None = None
    status_patch: StatusPatch = StatusPatch.MERGE
    # Others write the status too: built on the observed one, sent under its resourceVersion.
    status_shared: bool = False
    # Why members in no task the gang object names keep it from scheduling ("" when every
    # member is in one); None: the dialect's tasks need no such check.
    stray_members: Callable[[PodGroup, Iterable[Pod]], str] | None = None
    # The kind of the object holding a gang (one of `kinds`' kinds), for Events and messages.
    object_kind: Callable[[GroupRef], str] = _AS_A_POD_GROUP
    # A member's task (`Pod.task`), from its labels and annotations; Volcano's is read for
    # any dialect without its own (counted only where the gang has task minima).
    member_task: TaskReader = volcano.task_of
    # The API field that sets a gang's per-task minima, for messages (Volcano's by default,
    # as `member_task`).
    task_minima_field: str = "spec.minTaskMember"
    # The status conditions that say whether a gang is placed, for the object's version,
    # listed in `status.<conditions_field>` (read by `kubectl phalanx`).
    placing_conditions: PlacingConditions = _NO_CONDITIONS
    conditions_field: str = "conditions"


DIALECTS: Final = (
    GroupDialect(Dialect.ANNOTATIONS, annotation_only.claim, {}),
    GroupDialect(
        Dialect.SCHEDULER_PLUGINS,
        scheduler_plugins.claim,
        scheduler_plugins.KINDS,
        scheduler_plugins.waiting_reason,
        scheduler_plugins.build_status,
        object_kind=_one_kind(scheduler_plugins.KIND),
        placing_conditions=_every_version({scheduler_plugins.CONDITION_TYPE: True}),
    ),
    GroupDialect(
        Dialect.VOLCANO,
        volcano.claim,
        volcano.KINDS,
        volcano.waiting_reason,
        volcano.build_status,
        status_shared=True,
        object_kind=_one_kind(volcano.KIND),
        # `Unschedulable` True: still waiting.
        placing_conditions=_every_version({volcano.UNSCHEDULABLE: False, volcano.SCHEDULED: True}),
    ),
    GroupDialect(
        Dialect.KAI,
        kai.claim,
        kai.KINDS,
        kai.waiting_reason,
        kai.build_status,
        status_shared=True,
        stray_members=kai.stray_members,
        object_kind=_one_kind(kai.KIND),
        member_task=kai.task_of,
        task_minima_field="spec.subGroups",
        # None once placed; KAI keeps its scheduling verdicts apart from other conditions.
        placing_conditions=_every_version({kai.UNSCHEDULABLE_ON_NODE_POOL: False}),
        conditions_field="schedulingConditions",
    ),
    GroupDialect(
        Dialect.GROVE,
        grove.claim,
        grove.KINDS,
        grove.waiting_reason,
        grove.build_status,
        status_shared=True,
        stray_members=grove.stray_members,
        object_kind=_one_kind(grove.KIND),
        member_task=grove.task_of,
        task_minima_field="spec.podgroups",
        placing_conditions=_every_version({grove.SCHEDULED: True}),
    ),
    # No object: the members declare the gang (`kueue.gang_from_members`), like annotations.
    GroupDialect(Dialect.KUEUE, kueue.claim, {}),
    # Members declare these too (`yunikorn.gang_from_members`, `lws.gang_from_members`).
    GroupDialect(
        Dialect.YUNIKORN,
        yunikorn.claim,
        {},
        member_task=yunikorn.task_of,
        task_minima_field=f"annotation {yunikorn.TASK_GROUPS_ANNOTATION}",
    ),
    # An LWS subgroup is a task for its slices only: an LWS gang has no task minima.
    GroupDialect(Dialect.LWS, lws.claim, {}, member_task=lws.task_of),
    GroupDialect(
        Dialect.UPSTREAM,
        upstream.claim,
        upstream.KINDS,
        upstream.waiting_reason,
        upstream.build_status,
        StatusPatch.STRATEGIC,
        status_shared=True,
        object_kind=upstream.object_kind,
        placing_conditions=upstream.placing_conditions,
    ),
    # No pod claims a composite; the cache makes it its PodGroups' gang (`composite`).
    GroupDialect(
        Dialect.COMPOSITE,
        composite.claim,
        composite.KINDS,
        composite.waiting_reason,
        composite.build_status,
        StatusPatch.STRATEGIC,
        status_shared=True,
        object_kind=_one_kind(composite.KIND),
        placing_conditions=_every_version({composite.INITIALLY_SCHEDULED: True}),
        task_minima_field="spec.schedulingPolicy.gang.minGroupCount",
    ),
)
PRECEDENCE: Final = tuple(e.dialect for e in DIALECTS if e.dialect is not Dialect.COMPOSITE)
# By dialect, or by its value as views hold it (a `Dialect` is the string it stands for).
_BY_DIALECT: Final[Mapping[str, GroupDialect]] = {entry.dialect: entry for entry in DIALECTS}
_PARSERS: Final = {kind: parse for entry in DIALECTS for kind, parse in entry.kinds.items()}
_KIND_DIALECTS: Final = {kind: entry.dialect for entry in DIALECTS for kind in entry.kinds}


def dialect(name: Dialect) -> GroupDialect:
    """The registry entry of `name` (annotation-only gangs use scheduler-plugins' objects)."""
    return _BY_DIALECT[Dialect.SCHEDULER_PLUGINS if name is Dialect.ANNOTATIONS else name]


# --- Membership -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Membership:
    """The claim that decides a pod's gang, and the claims that named another one."""

    winner: Claim | None = None
    overruled: tuple[Claim, ...] = ()


def membership(pod: PodView) -> Membership:
    """Every dialect's claim on `pod`, decided by `PRECEDENCE`.

    Raises InvalidObjectError for a malformed spec field the API server validates.
    """
    claims = [found for entry in DIALECTS if (found := entry.claim(pod)) is not None]
    if not claims:
        return Membership()
    winner = claims[0]
    others = tuple(c for c in claims[1:] if c.ref is None or c.ref != winner.ref)
    return Membership(winner, others)


def member_task(winner: Dialect | None, labels: Mapping[str, str], notes: Mapping[str, str]) -> str:
    """The task (`Pod.task`) of a pod whose gang is in dialect `winner`, by its dialect's
    `member_task` (Volcano's for a pod in no gang)."""
    read = dialect(winner).member_task if winner is not None else volcano.task_of
    return read(labels, notes)


def contest_message(pod: Pod) -> str:
    """The Event text for a pod that more than one dialect claims; "" when one does, or
    when the winning claim is malformed (the pod's `invalid` says why, and that is all)."""
    if not pod.overruled or pod.group is None or pod.group_dialect is None:
        return ""
    others = "; ".join(_described(claim) for claim in pod.overruled)
    won = f"{pod.group_dialect.value} group {pod.group.key}"
    order = " > ".join(name.value for name in PRECEDENCE)
    return (
        f"pod {pod.key} is claimed by more than one gang dialect: {won} wins "
        f"(precedence {order}) over {others}"
    )


def _described(claim: Claim) -> str:
    if claim.ref is not None:
        return str(claim)
    return f"{claim.dialect.value} ({'; '.join(claim.problems)})"


# --- Naming a gang ----------------------------------------------------------------------

KEY_FORMS: Final = (
    "NAMESPACE/NAME (scheduler-plugins or annotations), volcano:NAMESPACE/NAME, "
    "kai:NAMESPACE/NAME, grove:NAMESPACE/NAME, kueue:NAMESPACE/NAME, yunikorn:NAMESPACE/NAME, "
    "lws:NAMESPACE/NAME, "
    "upstream:NAMESPACE/NAME, "
    "upstream:NAMESPACE/WORKLOAD/PODGROUP[/REPLICA] or composite:NAMESPACE/NAME"
)


def parse_key(text: str) -> GroupRef | None:
    """The gang a key names (`GroupRef.key`'s form, read by `GroupRef.parse`), or None when
    `text` is not a key of any dialect: a namespace and an object name are required, and
    only an upstream key may name a Workload's pod group."""
    ref = GroupRef.parse(text)
    if ref.key != text or not is_dns_label(ref.namespace) or not is_object_name(ref.name):
        return None
    if ref.pod_group and ref.dialect is not Dialect.UPSTREAM:
        return None
    return ref


def gang_dialect(ref: GroupRef, *, has_object: bool, claims: Iterable[Dialect]) -> Dialect:
    """The dialect a gang is declared in, given whether its object exists and the dialects
    its members' winning claims are in. Annotation-only gangs share scheduler-plugins'
    keys: a `ns/name` gang is annotation-only while no PodGroup of that name exists and a
    member names it by annotation (once one exists, it gives the settings)."""
    if (
        ref.dialect is Dialect.SCHEDULER_PLUGINS
        and not has_object
        and Dialect.ANNOTATIONS in claims
    ):
        return Dialect.ANNOTATIONS
    return ref.dialect


def has_gang_object(dialect: Dialect) -> bool:
    """Whether a gang of `dialect` is held by an API object (for status and Events): its
    registry entry parses some kind. Annotation-only gangs share scheduler-plugins' entry
    but declare theirs on the members alone, as Kueue, YuniKorn and LWS groups do."""
    return dialect is not Dialect.ANNOTATIONS and bool(_BY_DIALECT[dialect].kinds)


def gang_source(ref: GroupRef, dialect: Dialect, *, has_object: bool) -> str:
    """What declares a gang's settings, as the views say it: its object's kind (`PodGroup`,
    or `Workload` for a 1.35 Workload's pod group), `annotations`, or `<kind> missing`
    while members name an object that does not exist."""
    if not has_gang_object(dialect):
        return "annotations"
    kind = object_kind(ref)
    return kind if has_object else f"{kind} missing"


def object_kind(ref: GroupRef) -> str:
    """The kind of the object holding `ref`'s gang: the Workload of a v1alpha1 pod group,
    the CompositePodGroup of a composite gang, Grove's PodGang, else a PodGroup (every
    other dialect has one, or is named as if it had)."""
    return dialect(ref.dialect).object_kind(ref)


def minima_field(minima: TaskMinima, dialect_name: str = "") -> str:
    """The API field that sets `minima` (of a gang in dialect `dialect_name`), for
    messages: a composite's tree (or KAI's nested subgroups) and a YuniKorn application's
    task groups say their own."""
    if isinstance(minima, SubGroupTree):
        return task_minima_field(Dialect.KAI)
    if isinstance(minima, ChildGroups):
        return task_minima_field(Dialect.COMPOSITE)
    if isinstance(minima, TaskGroupMinima):
        return task_minima_field(Dialect.YUNIKORN)
    return task_minima_field(dialect_name)


def task_minima_field(dialect_name: str) -> str:
    """The API field that sets a gang's per-task minima in dialect `dialect_name` (a
    `Dialect` or its value, as views hold it), for messages; Volcano's for no dialect."""
    return _BY_DIALECT.get(dialect_name, _BY_DIALECT[Dialect.VOLCANO]).task_minima_field


# --- Objects ----------------------------------------------------------------------------


def dialect_of_kind(api_version: str, kind: str) -> Dialect | None:
    """The dialect whose gang objects are `kind` in `api_version`; None for other kinds."""
    return _KIND_DIALECTS.get((api_version, kind))


def parse_group_object(obj: JsonObject) -> Parsed[GroupObject] | None:
    """A gang object of any dialect, by `apiVersion` and `kind`; None for other kinds.

    Raises InvalidObjectError naming the object and field when it cannot be used.
    """
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    parse = _PARSERS.get((api_version, kind))
    if parse is None:
        return None
    parsed = parse(obj)
    ignored = _unread_annotations(obj)
    return replace(parsed, warnings=parsed.warnings + ignored) if ignored else parsed


# The `phalanx.io/*` annotations a gang object may carry. Names defined in modules that
# import this one (phalanx.core.rollforward's commit record, phalanx.core.inventory's pod
# annotations) are spelled here.
_OBJECT_ANNOTATIONS: Final = frozenset(
    {
        PLACEMENT_ANNOTATION,
        PLAN_ANNOTATION,
        DIFFERENTIABLE_ANNOTATION,
        SCHEDULE_TIMEOUT_ANNOTATION,
        ANNOTATION_PREFIX + "commit",
        TOPOLOGY_ANNOTATION,
        TOPOLOGY_REQUIRED_ANNOTATION,
        TOPOLOGY_PREFERRED_ANNOTATION,
        TOPOLOGY_SLICE_SIZE_ANNOTATION,
        TOPOLOGY_SLICE_REQUIRED_ANNOTATION,
    }
)
# Read on pods only: on a gang object they are a slip worth naming.
_POD_ANNOTATIONS: Final = frozenset(
    {
        annotation_only.POD_GROUP_ANNOTATION,
        annotation_only.MIN_MEMBER_ANNOTATION,
        lws.OPT_IN_ANNOTATION,
        ANNOTATION_PREFIX + "plan-node",
        ANNOTATION_PREFIX + "gpu-memory-mib",
        ANNOTATION_PREFIX + "requeued-at",
    }
)


def _unread_annotations(obj: JsonObject) -> tuple[str, ...]:
    """A warning for each `phalanx.io/*` annotation Phalanx does not read on a gang object:
    a typo (`phalanx.io/placment`) would otherwise leave the gang placed without it, unsaid.
    Not an error: a newer Phalanx's annotation must not stop an older one."""
    metadata = obj.get("metadata")
    notes = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(notes, Mapping):
        return ()
    warnings = []
    for key in sorted(k for k in notes if isinstance(k, str) and k.startswith(ANNOTATION_PREFIX)):
        if key in _OBJECT_ANNOTATIONS:
            continue
        where = key_path("metadata.annotations", key)
        if key in _POD_ANNOTATIONS:
            warnings.append(f"{where} is ignored: Phalanx reads it on pods, not on a gang object")
            continue
        close = difflib.get_close_matches(key, sorted(_OBJECT_ANNOTATIONS), n=1, cutoff=0.85)
        hint = f" (did you mean {close[0]}?)" if close else ""
        warnings.append(f"{where} is ignored: Phalanx reads no such annotation{hint}")
    return tuple(warnings)


def group_kinds() -> tuple[tuple[str, str], ...]:
    """(apiVersion, kind) of every gang object Phalanx reads."""
    return tuple(_PARSERS)


@dataclass(frozen=True, slots=True)
class Unresolved:
    """Why a pod's gang cannot be planned now: `waiting` for an object that may still
    appear, else the reference is invalid."""

    reason: str
    waiting: bool


class MembersReader(Protocol):
    """A dialect's `gang_from_members`: the gang its members declare, or why they cannot."""

    def __call__(
        self, ref: GroupRef, members: Iterable[Pod], *, default_timeout: int
    ) -> PodGroup | str: ...


# Gangs their members declare when no object holds them (`gang_from_members` of each
# dialect), and whether a "waiting ..." answer is a wait (a member or definition still to
# come) rather than a refusal: annotation-only gangs wait for their object's settings or
# members, YuniKorn's for the member carrying the task groups.
_DECLARED_BY_MEMBERS: Final[Mapping[Dialect, tuple[MembersReader, bool]]] = {
    Dialect.SCHEDULER_PLUGINS: (annotation_only.gang_from_members, True),
    Dialect.KUEUE: (kueue.gang_from_members, False),
    Dialect.YUNIKORN: (yunikorn.gang_from_members, True),
    Dialect.LWS: (lws.gang_from_members, False),
}


def resolve(
    ref: GroupRef,
    find: Callable[[str], GroupObject | None],
    members: Sequence[Pod] = (),
    *,
    default_timeout: int = DEFAULT_TIMEOUT_SECONDS,
    served: Served | None = None,
) -> PodGroup | Unresolved:
    """The gang `ref` names. `find` looks objects up by key (`GroupRef.object_ref.key`);
    `members` declare an annotation-only gang when no scheduler-plugins object exists, and
    a Kueue, YuniKorn or LWS gang (never an object);
    `default_timeout` applies to a gang whose object or members set none; `served`
    (discovery's answer, when known) explains a wait for an API not served.

    A PodGroup with `basic` set is no gang: its members are scheduled one by one.
    """
    found = find(ref.object_ref.key)
    if isinstance(found, CompositePodGroup):
        # Its gang is its tree's (`phalanx.core.resolution`), never read from it alone.
        return Unresolved(f"{composite.KIND} {found.key} is resolved with its tree", waiting=True)
    if isinstance(found, Workload):
        gang = upstream.gang_of(found, ref)
        if not isinstance(gang, PodGroup):
            return Unresolved(gang, waiting=False)
        found = gang
    if found is not None:
        if found.timeout_declared:
            return found
        return replace(found, timeout_seconds=default_timeout)
    declared = _DECLARED_BY_MEMBERS.get(ref.dialect)
    if declared is not None:
        read, may_wait = declared
        gang = read(ref, members, default_timeout=default_timeout)
        if isinstance(gang, PodGroup):
            return gang
        return Unresolved(gang, waiting=may_wait and gang.startswith("waiting"))
    reason = dialect(ref.dialect).waiting_reason
    text = reason(ref) if reason else f"waiting for {ref.key}"
    if served is not None and served_holding(served, ref) is None:
        text += f"; this API server does not serve it yet ({ref.dialect.value} objects)"
    return Unresolved(text, waiting=True)


def deleting_reason(ref: GroupRef) -> str:
    """Why the members of `ref`'s gang are not scheduled while its object is being deleted
    (`PodGroup.deleting`)."""
    target = ref.object_ref
    return (
        f"{object_kind(ref)} {target.namespace}/{target.name} is being deleted "
        f"(gang {ref.key}): its members are not scheduled any more"
    )


# --- Status -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatusWrite:
    """A patch to send: `body` to `path`, as a `patch`. `status` is the whole status it
    leaves (the patch may carry only part of it), to keep as the new "previous" once
    written. `resource_version`: the precondition it carries ("" for none)."""

    path: str
    body: dict[str, object]
    status: dict[str, object]
    patch: StatusPatch = StatusPatch.MERGE
    resource_version: str = ""


def served_holding(served: Served, ref: GroupRef) -> ServedKind | None:
    """The served kind of the object that holds `ref`'s gang; None when it is not served
    (then members wait, and nothing can be written)."""
    kind = object_kind(ref)
    for found in served.kinds:
        if found.dialect is ref.dialect and found.kind == kind:
            return found
    return None


def shares_status(kind: ServedKind) -> bool:
    """Whether others write the status of `kind`'s objects too (see `status_write`)."""
    return dialect(kind.dialect).status_shared


def status_write(
    status: GroupStatus,
    kind: ServedKind,
    previous: JsonObject | None,
    now: float,
    *,
    resource_version: str = "",
) -> StatusWrite | None:
    """The status write for a gang whose object exists and is served as `kind`, or None
    when there is nothing new to say (or the dialect has no status).

    `previous` is the status the write builds on: for a shared status (`shares_status`)
    the one observed at `resource_version`, which the write then carries as its
    precondition.
    """
    entry = dialect(status.ref.dialect)
    build = entry.build_status
    body = build(status, previous, now, kind.version) if build is not None else None
    if body is None:
        return None
    if previous is not None and all(previous.get(k) == v for k, v in body.items()):
        return None
    target = status.ref.object_ref
    sent: dict[str, object] = {"status": body}
    if entry.status_patch is StatusPatch.STRATEGIC:
        sent = {"status": {"conditions": changed_conditions(previous, body)}}
    precondition = resource_version if entry.status_shared else ""
    if precondition:
        sent["metadata"] = {"resourceVersion": precondition}
    return StatusWrite(
        kind.status_path(target.namespace, target.name),
        sent,
        body,
        entry.status_patch,
        precondition,
    )


def changed_conditions(
    previous: JsonObject | None, new: Mapping[str, object]
) -> list[Mapping[str, object]]:
    """The conditions of `new` that `previous` does not hold as they are: what a strategic
    merge patch must carry (the others are kept by the API server, merged by `type`)."""
    before = conditions_of(previous)
    return [c for c in conditions_of(new) if c not in before]


def involved_object(ref: GroupRef, kind: ServedKind, uid: str = "") -> dict[str, str]:
    """An Event's `involvedObject` for a gang: its object (the Workload of a v1alpha1 pod
    group), never parsed back out of the key."""
    target = ref.object_ref
    involved = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "namespace": target.namespace,
        "name": target.name,
    }
    if uid:
        involved["uid"] = uid
    return involved
