"""What the API says about gangs, as frozen views: the part of `kubectl phalanx` without I/O.

A gang is found the way Phalanx finds it: each pod's gang is read by the same dialect
parsers (`phalanx.core.inventory.parse_pod`), each gang object of any dialect by the
registry (`registry.parse_group_object`), so the plugin and the extender never disagree
about who is in which gang, and each gang is named by its key (`GroupRef.key`), its
dialect and what declares it (`registry.gang_dialect`, `registry.gang_source`), as
`/debug/groups` names it. Per gang the views hold:

* the **members** and where each is bound (`spec.nodeName`), gated or being deleted;
* the **status** in the gang's dialect: `status.phase` (scheduler-plugins, Volcano,
  Grove) and the condition that says whether it is placed (`PodGroupScheduled`; upstream's
  `PodGroupInitiallyScheduled`; Volcano's `Unschedulable` / `Scheduled`; KAI's
  `status.schedulingConditions` `UnschedulableOnNodePool`, none once placed; Grove's
  `Scheduled`); an
  annotation-only gang or a Workload's pod group has none;
* the **commit record** `phalanx.io/commit` (on each member its binding carried it to; a
  record too long for that on the gang's object, or on every member of an annotation-only
  or Workload gang): in force only while a member it names is unbound (a gang's bindings
  in flight, or after a crash until roll-forward finishes or releases the gang);
* the **Events** about the gang's object and its members, Phalanx's and kube-scheduler's.

A gang's *state* sums them up for a table::

    whole     at least minMember members bound and, for a Volcano PodGroup with
              spec.minTaskMember, each task's minimum among them (`core/quorum.py`, as
              the scheduler counts it; `tasks_short` says which task is short); for a
              composite gang (every PodGroup's pods under the topmost `gang`
              CompositePodGroup), minGroupCount child groups each with its minCount
    binding   fewer bound, and a commit record: bindings in flight, or roll-forward due
    reserved  nothing bound, the PodGroup's phase is Scheduling (scheduler-plugins: the
              other dialects' status has no such phase; `--server` shows it): Phalanx
              holds a reservation and its bind barrier waits for the members at /bind
    partial   fewer bound, some bound, no record, never reported whole: the invariant
              Phalanx keeps is broken (its phalanx_partial_gangs metric counts the same)
    waiting   nothing bound (or fewer than minMember after the gang ran: members finished
              or were deleted)

Nothing here raises on a malformed object: it is skipped with a line saying why, as the
extender skips it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import registry, upstream
from phalanx.core.groups.composite import CompositePodGroup, child_tree, gang_above
from phalanx.core.groups.member_rules import composite_refusal, refusal
from phalanx.core.groups.upstream import Workload
from phalanx.core.inventory import parse_pod
from phalanx.core.journal import GroupPhase
from phalanx.core.model import Dialect, GroupRef, Pod, PodGroup, TaskGroupMinima
from phalanx.core.quorum import TaskMinima, fewest_members, task_shortfall
from phalanx.core.rollforward import COMMIT_ANNOTATION, decode_commit_record

Obj = Mapping[str, Any]

# Phases that mean the quorum was bound at some point: scheduler-plugins' and Volcano's
# (Running; Completed once its job finished).
RAN_PHASES = frozenset(
    {GroupPhase.SCHEDULED, GroupPhase.RUNNING, GroupPhase.FINISHED, GroupPhase.FAILED, "Completed"}
)


class GangState(StrEnum):
    WHOLE = "whole"
    BINDING = "binding"
    RESERVED = "reserved"
    PARTIAL = "partial"
    WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class MemberView:
    name: str
    node: str  # "" while unbound
    phase: str
    scheduler: str
    gated: bool  # has scheduling gates: kube-scheduler leaves it alone for now
    deleting: bool
    task: str = ""  # Volcano's volcano.sh/task-spec ("" when it names none)


@dataclass(frozen=True, slots=True)
class ConditionView:
    """The condition that says whether a gang is placed, in its dialect's terms."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    since: str  # RFC 3339, "" when not given
    placed: bool = False  # the gang's quorum was placed (the condition's meaning, per type)


@dataclass(frozen=True, slots=True)
class CommitView:
    """A gang's commit record as found in the API (`error` set when it cannot be read)."""

    at: str
    placements: Mapping[str, str]  # pod namespace/name -> node
    error: str = ""


@dataclass(frozen=True, slots=True)
class GangView:
    key: str  # as Phalanx keys gangs: `ns/name`, `volcano:ns/name`, ...
    namespace: str
    name: str
    # What declares it: PodGroup | Workload | annotations | PodGroup missing | Workload missing
    source: str
    min_member: int | None  # None when neither an object nor the pods say
    members: tuple[MemberView, ...]
    dialect: str = Dialect.SCHEDULER_PLUGINS.value  # scheduler-plugins | annotations | ...
    api_version: str = ""  # the gang object's, "" without one
    phase: str = ""  # the PodGroup's status.phase ("" when none was written)
    condition: ConditionView | None = None
    commit: CommitView | None = None
    placement: str = ""  # phalanx.io/placement as declared, "" for the default
    # Its topology intent as declared (`required topology.kubernetes.io/zone`): the gang
    # object's, else its members'; "" for none.
    topology: str = ""
    created: str = ""  # RFC 3339: the PodGroup's, else the oldest member's
    problems: tuple[str, ...] = ()  # why Phalanx cannot schedule it (bad annotations, ...)
    # Volcano's spec.minTaskMember, or a composite's child groups, as Phalanx enforces them.
    min_task_member: TaskMinima = ()
    # Upstream's spec.disruptionMode (`single`, `all`) of its PodGroup or CompositePodGroup;
    # "" where the gang object has no such field.
    disruption_mode: str = ""
    # Its object is being deleted (`metadata.deletionTimestamp`, held by a finalizer): the
    # scheduler binds none of its members any more (`registry.deleting_reason`).
    deleting: str = ""

    @property
    def bound(self) -> int:
        return sum(1 for m in self.members if m.node)

    @property
    def tasks_short(self) -> str:
        """Which task minima the bound members miss ("task master has 0 of 1 member(s)");
        "" when none, or when the gang has none."""
        return task_shortfall(self.min_task_member, (m for m in self.members if m.node))

    @property
    def ran(self) -> bool:
        """Its status says the quorum was placed at some point."""
        placed = self.condition is not None and self.condition.placed
        return placed or self.phase in RAN_PHASES

    @property
    def state(self) -> GangState:
        need = self.min_member
        if need is not None and self.bound >= need and not self.tasks_short:
            return GangState.WHOLE
        if self.commit is not None and self.commit.error == "":
            return GangState.BINDING
        if self.bound and not self.ran:
            return GangState.PARTIAL
        if not self.bound and self.phase == GroupPhase.SCHEDULING:
            return GangState.RESERVED
        return GangState.WAITING


@dataclass(frozen=True, slots=True)
class EventView:
    at: str  # RFC 3339: the last time it happened
    type: str  # Normal | Warning
    reason: str
    message: str
    kind: str  # of the object it is about
    name: str
    source: str  # the component that reported it (phalanx, the scheduler's profile, ...)
    count: int


@dataclass(frozen=True, slots=True)
class WaitView:
    """Why a gang that is not whole waits, in the words of whoever said so last."""

    gang: str
    state: GangState
    since: str
    reason: str
    said_by: str  # "condition" | an Event's reporting component | ""


@dataclass(frozen=True, slots=True)
class LeaseView:
    namespace: str
    name: str
    holder: str = ""  # "" when nobody holds it
    renewed: str = ""  # RFC 3339
    duration_seconds: int | None = None
    error: str = ""  # why it could not be read ("not found" included)

    @property
    def holder_pod(self) -> str:
        """The pod behind a kube-scheduler identity (`<hostname>_<uuid>`; a pod's host name
        is its name); "" when the identity is not of that form."""
        host, sep, _ = self.holder.rpartition("_")
        return host if sep else ""


@dataclass(frozen=True, slots=True)
class PhalanxView:
    """What a running Phalanx said over `/debug` (`error` when it could not be asked)."""

    server: str
    groups: tuple[Mapping[str, Any], ...] = ()  # /debug/groups summaries
    details: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # by gang key
    error: str = ""

    def reservations(self) -> list[tuple[str, Mapping[str, Any]]]:
        """(gang key, reservation) for every gang Phalanx holds a reservation for."""
        found = []
        for key, view in sorted(self.details.items()):
            reservation = view.get("reservation")
            if isinstance(reservation, Mapping):
                found.append((key, reservation))
        return found


@dataclass(frozen=True, slots=True)
class Status:
    context: str
    namespace: str | None  # None: every namespace
    gangs: tuple[GangView, ...]
    waits: tuple[WaitView, ...]
    leases: tuple[LeaseView, ...]
    phalanx: PhalanxView | None
    skipped: tuple[str, ...] = ()  # objects that could not be read, and why


@dataclass(frozen=True, slots=True)
class Explanation:
    context: str
    gang: GangView
    events: tuple[EventView, ...]  # oldest first
    wait: WaitView | None  # None when the gang is whole
    phalanx: PhalanxView | None
    skipped: tuple[str, ...] = ()


# ---- reading raw objects -----------------------------------------------------------------


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _meta(obj: Obj) -> Mapping[str, Any]:
    return _map(obj.get("metadata"))


def _annotations(obj: Obj) -> Mapping[str, Any]:
    return _map(_meta(obj).get("annotations"))


def _condition(raw: Obj, dialect: Dialect) -> ConditionView | None:
    """The gang's placing condition (`GroupDialect.placing_conditions`, by the object's
    version); of two (Volcano's), the one that is True."""
    entry = registry.dialect(dialect)
    meanings = entry.placing_conditions(_text(raw.get("apiVersion")).rpartition("/")[2])
    found: list[ConditionView] = []
    items = _map(raw.get("status")).get(entry.conditions_field)
    for item in items if isinstance(items, list) else []:
        cond = _map(item)
        kind = _text(cond.get("type"))
        if kind not in meanings:
            continue
        status = _text(cond.get("status"))
        found.append(
            ConditionView(
                type=kind,
                status=status,
                reason=_text(cond.get("reason")),
                message=_text(cond.get("message")),
                since=_text(cond.get("lastTransitionTime")),
                placed=status == "True" and meanings[kind],
            )
        )
    return next((c for c in found if c.status == "True"), found[0] if found else None)


def _commit(key: str, text: object) -> CommitView | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        record = decode_commit_record(key, text)
    except ValueError as exc:
        return CommitView(at="", placements={}, error=str(exc))
    return CommitView(at=record.at, placements=dict(record.placements))


def _member(pod: Pod, raw: Obj) -> MemberView:
    gates = _map(raw.get("spec")).get("schedulingGates")
    return MemberView(
        name=pod.name,
        node=pod.node_name,
        phase=str(pod.phase),
        scheduler=pod.scheduler_name,
        gated=bool(gates),
        deleting=pod.deleting,
        task=pod.task,
    )


@dataclass(slots=True)
class _Draft:
    """A gang being assembled from its object and its pods."""

    ref: GroupRef
    has_object: bool = False
    api_version: str = ""
    claims: set[Dialect] = field(default_factory=set)  # the members' winning claims
    min_member: int | None = None
    min_task_member: TaskMinima = ()
    phase: str = ""
    condition: ConditionView | None = None
    commit: CommitView | None = None
    placement: str = ""
    topology: str = ""
    disruption_mode: str = ""
    created: str = ""
    deleting: bool = False
    members: list[MemberView] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    member_commits: list[CommitView] = field(default_factory=list)

    def view(self) -> GangView:
        commit = self.commit
        # Members carry copies: the ones their bindings carried (kept for the pod's life) and,
        # for a gang without an object, the ones written before its bindings. A copy is in
        # force while a member it names is unbound; the newest record is the gang's.
        unbound = {m.name for m in self.members if not m.node}
        for copy in self.member_commits:
            in_force = copy.error or any(k.split("/")[-1] in unbound for k in copy.placements)
            if in_force and (commit is None or copy.at > commit.at):
                commit = copy
        ref, has_object = self.ref, self.has_object
        dialect = registry.gang_dialect(ref, has_object=has_object, claims=self.claims)
        return GangView(
            key=ref.key,
            namespace=ref.namespace,
            name=ref.name,
            source=registry.gang_source(ref, dialect, has_object=has_object),
            min_member=self.min_member,
            dialect=dialect.value,
            api_version=self.api_version,
            members=tuple(sorted(self.members, key=lambda m: m.name)),
            phase=self.phase,
            condition=self.condition,
            commit=commit,
            placement=self.placement,
            topology=self.topology,
            created=self.created,
            problems=tuple(dict.fromkeys(self.problems)),
            min_task_member=self.min_task_member,
            disruption_mode=self.disruption_mode,
            deleting=registry.deleting_reason(ref) if self.deleting else "",
        )


def collect_gangs(
    group_objects: Iterable[Obj], pods: Iterable[Obj]
) -> tuple[list[GangView], list[str]]:
    """Every gang the gang objects (of any dialect: each with its `apiVersion` and `kind`)
    and pods declare, sorted by key; and what was skipped, and why."""
    drafts: dict[str, _Draft] = {}
    workloads: dict[str, tuple[Workload, str]] = {}  # by object key: it, its apiVersion
    object_problems: dict[str, list[str]] = {}  # an unreadable Workload's, by object key
    tree = _Tree()
    skipped: list[str] = []
    for raw in group_objects:
        _add_object(raw, drafts, workloads, object_problems, tree)
    filed = tree.file(drafts)
    for raw in pods:
        try:
            pod = parse_pod(dict(raw))
        except InvalidObjectError as exc:
            skipped.append(str(exc))
            continue
        if pod.group is None:
            continue
        ref = pod.group
        if not pod.departing:
            tree.pods.setdefault(ref.key, []).append(pod)
        above = filed.get(ref.key)
        if above is not None:  # a member of the composite gang above its PodGroup
            ref, pod = above, replace(pod, task=ref.name)
        draft = drafts.setdefault(ref.key, _Draft(ref))
        draft.members.append(_member(pod, raw))
        if pod.group_dialect is not None:
            draft.claims.add(pod.group_dialect)
        if pod.invalid:
            draft.problems.append(f"pod {pod.key}: {pod.invalid}")
        held = workloads.get(ref.object_ref.key) if ref.pod_group else None
        if held is not None:
            _from_workload(draft, *held)
        draft.problems.extend(object_problems.get(ref.object_ref.key, ()))
        if not draft.has_object:
            draft.min_member = draft.min_member or pod.min_member
            draft.placement = draft.placement or pod.placement
            if pod.task_groups is not None and not draft.min_task_member:
                # A YuniKorn application's quorum is per task group, as Phalanx holds it.
                draft.min_task_member = TaskGroupMinima(pod.task_groups)
        if not draft.topology and pod.topology is not None:
            draft.topology = str(pod.topology)
        if not draft.has_object or ref.pod_group:
            created = _text(_meta(raw).get("creationTimestamp"))
            if created and (not draft.created or created < draft.created):
                draft.created = created
        record = _commit(ref.key, _annotations(raw).get(COMMIT_ANNOTATION))
        if record is not None:
            draft.member_commits.append(record)
    tree.refusals(drafts, filed)
    return [drafts[k].view() for k in sorted(drafts)], skipped


@dataclass(slots=True)
class _Tree:
    """The CompositePodGroups and upstream PodGroups read, to file each PodGroup's pods under
    the composite gang above it, as Phalanx does (`phalanx.core.groups.composite`)."""

    composites: dict[str, CompositePodGroup] = field(default_factory=dict)
    pod_groups: list[PodGroup] = field(default_factory=list)
    # Each gang's live pods, by the key of the gang they name themselves.
    pods: dict[str, list[Pod]] = field(default_factory=dict)

    def file(self, drafts: dict[str, _Draft]) -> dict[str, GroupRef]:
        """PodGroup key -> the composite gang its pods are members of; a composite gang's
        draft gets its quorum, and a PodGroup filed under one is no gang of its own."""
        filed: dict[str, GroupRef] = {}
        for group in self.pod_groups:
            top = gang_above(group, self.composites.get) if group.parent else None
            if isinstance(top, CompositePodGroup):
                filed[group.key] = top.ref
                drafts.pop(group.key, None)
        for ref in set(filed.values()):
            root = self.composites[ref.key]
            children = child_tree(root, self.composites.values(), self.pod_groups)
            draft = drafts[ref.key]
            draft.min_member = max(fewest_members(children), 1)
            draft.min_task_member = children
        return filed

    def refusals(self, drafts: dict[str, _Draft], filed: Mapping[str, GroupRef]) -> None:
        """A problem on the gang of each PodGroup whose pods kube-scheduler refuses to
        schedule (`phalanx.core.groups.member_rules`), as Phalanx refuses it: the composite
        gang's when it is filed under one."""
        for group in self.pod_groups:
            members = sorted(self.pods.get(group.key, ()), key=lambda p: p.name)
            above = filed.get(group.key)
            if above is None:
                why, draft = refusal(group, members, _bound), drafts.get(group.key)
            else:
                children = [(group, members)]
                why = composite_refusal(above.namespace, above.name, children, _bound)
                draft = drafts.get(above.key)
            if why and draft is not None:
                draft.problems.append(why)


def _bound(pod: Pod) -> bool:
    return bool(pod.node_name)


def _add_object(
    raw: Obj,
    drafts: dict[str, _Draft],
    workloads: dict[str, tuple[Workload, str]],
    object_problems: dict[str, list[str]],
    tree: _Tree,
) -> None:
    """One gang object: a draft of its own (a PodGroup of any dialect), or the Workload the
    drafts of its pod groups' members read."""
    api_version, kind = _text(raw.get("apiVersion")), _text(raw.get("kind"))
    dialect = registry.dialect_of_kind(api_version, kind)
    if dialect is None:
        return
    ref = GroupRef(_text(_meta(raw).get("namespace")), _text(_meta(raw).get("name")), dialect)
    try:
        parsed, problem = registry.parse_group_object(dict(raw)), ""
    except InvalidObjectError as exc:
        parsed, problem = None, str(exc)
    if dialect is Dialect.COMPOSITE and parsed is not None:
        found = parsed.value
        if isinstance(found, CompositePodGroup):
            tree.composites[ref.key] = found
            if found.min_group_count is None:
                return  # a basic composite is no gang
    if kind == upstream.WORKLOAD_KIND:
        if parsed is None:
            object_problems.setdefault(ref.key, []).append(problem)
        elif isinstance(parsed.value, Workload):
            workloads[ref.key] = (parsed.value, api_version)
        return
    draft = drafts.setdefault(ref.key, _Draft(ref))
    draft.has_object, draft.api_version = True, api_version
    draft.phase = _text(_map(raw.get("status")).get("phase"))
    draft.condition = _condition(raw, dialect)
    draft.commit = _commit(ref.key, _annotations(raw).get(COMMIT_ANNOTATION))
    draft.created = _text(_meta(raw).get("creationTimestamp"))
    if parsed is None:
        draft.problems.append(problem)
        return
    group = parsed.value
    if isinstance(group, PodGroup):
        draft.min_member = None if group.basic else group.min_member
        draft.min_task_member = group.min_task_member
        draft.placement = str(group.placement) if group.placement is not None else ""
        draft.topology = str(group.topology) if group.topology is not None else ""
        draft.deleting = group.deleting
        if group.dialect is Dialect.UPSTREAM:
            draft.disruption_mode = group.disruption_mode.value
            tree.pod_groups.append(group)
    elif isinstance(group, CompositePodGroup):
        draft.placement = str(group.settings.placement or "")
        draft.topology = str(group.topology) if group.topology is not None else ""
        draft.disruption_mode = group.disruption_mode.value
        draft.deleting = group.deleting


def _from_workload(draft: _Draft, workload: Workload, api_version: str) -> None:
    """A Workload's pod group gang: its size from the Workload (a `basic` group has none)."""
    draft.has_object, draft.api_version = True, api_version
    entry = workload.pod_group(draft.ref.pod_group)
    draft.min_member = entry.min_count if entry is not None else None
    placement, topology = workload.settings.placement, workload.settings.topology
    draft.placement = str(placement) if placement is not None else ""
    draft.topology = str(topology) if topology is not None else ""
    draft.deleting = workload.deleting
    if entry is None:
        have = ", ".join(group.name for group in workload.pod_groups)
        draft.problems.append(
            f"Workload {workload.namespace}/{workload.name} has no pod group "
            f"{draft.ref.pod_group!r} (spec.podGroups has {have})"
        )


def event_view(raw: Obj) -> EventView:
    involved = _map(raw.get("involvedObject"))
    source = _text(raw.get("reportingComponent")) or _text(_map(raw.get("source")).get("component"))
    count = raw.get("count")
    return EventView(
        at=_text(raw.get("lastTimestamp"))
        or _text(raw.get("eventTime"))
        or _text(raw.get("firstTimestamp")),
        type=_text(raw.get("type")),
        reason=_text(raw.get("reason")),
        message=_text(raw.get("message")),
        kind=_text(involved.get("kind")),
        name=_text(involved.get("name")),
        source=source,
        count=count if isinstance(count, int) and count > 0 else 1,
    )


def gang_events(gang: GangView, events: Iterable[Obj]) -> list[EventView]:
    """Events about the gang's object (of its dialect's API) or one of its members, oldest
    first."""
    members = {m.name for m in gang.members}
    target = GroupRef.parse(gang.key).object_ref
    kind = registry.object_kind(GroupRef.parse(gang.key))
    group = gang.api_version.rpartition("/")[0]
    found = []
    for raw in events:
        involved = _map(raw.get("involvedObject"))
        if _text(involved.get("namespace")) not in ("", gang.namespace):
            continue
        name = involved.get("name")
        if involved.get("kind") == "Pod" and name in members:
            found.append(event_view(raw))
            continue
        if not registry.has_gang_object(Dialect(gang.dialect)) or involved.get("kind") != kind:
            continue
        other = _text(involved.get("apiVersion")).rpartition("/")[0]
        if name == target.name and (not group or not other or other == group):
            found.append(event_view(raw))
    return sorted(found, key=lambda e: _sort_time(e.at))


def wait_of(gang: GangView, events: Sequence[EventView]) -> WaitView | None:
    """Why `gang` is not whole (None when it is): the condition Phalanx wrote when it says
    something, else the newest Event about the gang or its members."""
    if gang.state is GangState.WHOLE:
        return None
    cond = gang.condition
    if gang.deleting:
        # Whatever its status last said, nothing more of it is scheduled.
        return WaitView(gang.key, gang.state, gang.created, gang.deleting, "phalanx")
    if gang.problems:
        return WaitView(gang.key, gang.state, gang.created, "; ".join(gang.problems), "phalanx")
    need = gang.min_member
    if need is not None and gang.bound >= need and gang.tasks_short:
        # The count alone would read as whole: say which task the scheduler still waits for.
        reason = (
            f"{gang.bound} of {need} member(s) bound, but {gang.tasks_short} "
            f"({registry.minima_field(gang.min_task_member, gang.dialect)})"
        )
        return WaitView(gang.key, gang.state, gang.created, reason, "phalanx")
    if cond is not None and not cond.placed and cond.message:
        return WaitView(gang.key, gang.state, cond.since, cond.message, "condition")
    if events:
        last = events[-1]
        return WaitView(gang.key, gang.state, last.at, last.message, last.source)
    return WaitView(gang.key, gang.state, gang.created, "", "")


def lease_view(namespace: str, name: str, raw: Obj | None, error: str = "") -> LeaseView:
    if raw is None:
        return LeaseView(namespace, name, error=error or "not found")
    spec = _map(raw.get("spec"))
    duration = spec.get("leaseDurationSeconds")
    return LeaseView(
        namespace,
        name,
        holder=_text(spec.get("holderIdentity")),
        renewed=_text(spec.get("renewTime")),
        duration_seconds=duration if isinstance(duration, int) else None,
    )


# ---- time ------------------------------------------------------------------------------------


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time as the API writes it (seconds or micro-seconds, `Z`); None if not."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _sort_time(text: str) -> datetime:
    return parse_time(text) or datetime.min.replace(tzinfo=UTC)


def age(text: str, now: datetime) -> str:
    """How long ago, as kubectl prints it: `42s`, `5m`, `3h`, `2d`; `-` when unknown."""
    at = parse_time(text)
    if at is None:
        return "-"
    seconds = max(0, int((now - at).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
