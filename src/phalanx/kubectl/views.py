"""What the API says about gangs, as frozen views: the part of `kubectl phalanx` without I/O.

A gang is found the way Phalanx finds it: each pod's gang is read by the same dialect
parsers (`phalanx.core.inventory.parse_pod`), each scheduler-plugins PodGroup by
`parse_pod_group`, so the plugin and the extender never disagree about who is in which
gang. Per gang the views hold:

* the **members** and where each is bound (`spec.nodeName`), gated or being deleted;
* the **status** Phalanx writes on a PodGroup: `status.phase` and the `PodGroupScheduled`
  condition (an annotation-only gang has no object to carry them);
* the **commit record** `phalanx.io/commit` (on the PodGroup, or on every member of an
  annotation-only gang): there only while a gang's bindings are in flight, or after a
  crash until roll-forward finishes or releases the gang;
* the **Events** about the gang's object and its members, Phalanx's and kube-scheduler's.

A gang's *state* sums them up for a table::

    whole     at least minMember members bound
    binding   fewer bound, and a commit record: bindings in flight, or roll-forward due
    reserved  nothing bound, the PodGroup's phase is Scheduling: Phalanx holds a
              reservation and its bind barrier waits for the members to reach /bind
    partial   fewer bound, some bound, no record, never reported whole: the invariant
              Phalanx keeps is broken (its phalanx_partial_gangs metric counts the same)
    waiting   nothing bound (or fewer than minMember after the gang ran: members finished
              or were deleted)

Nothing here raises on a malformed object: it is skipped with a line saying why, as the
extender skips it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups.scheduler_plugins import parse_pod_group
from phalanx.core.inventory import parse_pod
from phalanx.core.journal import GroupPhase
from phalanx.core.model import Dialect, GroupRef, Pod
from phalanx.core.rollforward import COMMIT_ANNOTATION, decode_commit_record

Obj = Mapping[str, Any]

# Phalanx's condition on a PodGroup (scheduler-plugins' name for it).
SCHEDULED_CONDITION = "PodGroupScheduled"
# PodGroup phases that mean the quorum was bound at some point (scheduler-plugins' names;
# Phalanx writes the first two).
RAN_PHASES = frozenset({GroupPhase.SCHEDULED, GroupPhase.RUNNING, "Finished"})


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


@dataclass(frozen=True, slots=True)
class ConditionView:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    since: str  # RFC 3339, "" when not given


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
    source: str  # PodGroup | annotations | PodGroup missing | a dialect's name
    min_member: int | None  # None when neither an object nor the pods say
    members: tuple[MemberView, ...]
    phase: str = ""  # the PodGroup's status.phase ("" when none was written)
    condition: ConditionView | None = None
    commit: CommitView | None = None
    placement: str = ""  # phalanx.io/placement as declared, "" for the default
    created: str = ""  # RFC 3339: the PodGroup's, else the oldest member's
    problems: tuple[str, ...] = ()  # why Phalanx cannot schedule it (bad annotations, ...)

    @property
    def bound(self) -> int:
        return sum(1 for m in self.members if m.node)

    @property
    def state(self) -> GangState:
        need = self.min_member
        if need is not None and self.bound >= need:
            return GangState.WHOLE
        if self.commit is not None and self.commit.error == "":
            return GangState.BINDING
        if self.bound and self.phase not in RAN_PHASES:
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


def _condition(raw: Obj) -> ConditionView | None:
    for item in _map(raw.get("status")).get("conditions") or []:
        cond = _map(item)
        if cond.get("type") == SCHEDULED_CONDITION:
            return ConditionView(
                type=SCHEDULED_CONDITION,
                status=_text(cond.get("status")),
                reason=_text(cond.get("reason")),
                message=_text(cond.get("message")),
                since=_text(cond.get("lastTransitionTime")),
            )
    return None


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
    )


@dataclass(slots=True)
class _Draft:
    """A gang being assembled from its object and its pods."""

    ref: GroupRef
    source: str
    min_member: int | None = None
    phase: str = ""
    condition: ConditionView | None = None
    commit: CommitView | None = None
    placement: str = ""
    created: str = ""
    members: list[MemberView] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    member_commits: list[CommitView] = field(default_factory=list)

    def view(self) -> GangView:
        commit = self.commit
        if commit is None and self.member_commits:
            # Every member of an annotation-only gang carries a copy: the newest is the record.
            commit = max(self.member_commits, key=lambda c: c.at)
        return GangView(
            key=self.ref.key,
            namespace=self.ref.namespace,
            name=self.ref.name,
            source=self.source,
            min_member=self.min_member,
            members=tuple(sorted(self.members, key=lambda m: m.name)),
            phase=self.phase,
            condition=self.condition,
            commit=commit,
            placement=self.placement,
            created=self.created,
            problems=tuple(dict.fromkeys(self.problems)),
        )


def _source(dialect: Dialect) -> str:
    if dialect is Dialect.SCHEDULER_PLUGINS:
        return "PodGroup missing"  # a label names it; the object is not (yet) there
    return str(dialect)


def collect_gangs(
    pod_groups: Iterable[Obj], pods: Iterable[Obj]
) -> tuple[list[GangView], list[str]]:
    """Every gang the PodGroups and pods declare, sorted by key; and what was skipped, why."""
    drafts: dict[str, _Draft] = {}
    skipped: list[str] = []
    for raw in pod_groups:
        ns, name = _text(_meta(raw).get("namespace")), _text(_meta(raw).get("name"))
        draft = drafts.setdefault(GroupRef(ns, name).key, _Draft(GroupRef(ns, name), "PodGroup"))
        draft.phase = _text(_map(raw.get("status")).get("phase"))
        draft.condition = _condition(raw)
        draft.commit = _commit(draft.ref.key, _annotations(raw).get(COMMIT_ANNOTATION))
        draft.created = _text(_meta(raw).get("creationTimestamp"))
        try:
            group = parse_pod_group(dict(raw))
        except InvalidObjectError as exc:
            draft.problems.append(str(exc))
            continue
        draft.min_member = group.min_member
        draft.placement = str(group.placement) if group.placement is not None else ""
    for raw in pods:
        try:
            pod = parse_pod(dict(raw))
        except InvalidObjectError as exc:
            skipped.append(str(exc))
            continue
        if pod.group is None:
            continue
        ref = pod.group
        if ref.key not in drafts:
            source = "annotations" if pod.group_dialect is Dialect.ANNOTATIONS else ""
            drafts[ref.key] = _Draft(ref, source or _source(ref.dialect))
        draft = drafts[ref.key]
        draft.members.append(_member(pod, raw))
        if pod.invalid:
            draft.problems.append(f"pod {pod.key}: {pod.invalid}")
        if draft.source != "PodGroup":
            draft.min_member = draft.min_member or pod.min_member
            draft.placement = draft.placement or pod.placement
            created = _text(_meta(raw).get("creationTimestamp"))
            if created and (not draft.created or created < draft.created):
                draft.created = created
            record = _commit(ref.key, _annotations(raw).get(COMMIT_ANNOTATION))
            if record is not None:
                draft.member_commits.append(record)
    return [drafts[k].view() for k in sorted(drafts)], skipped


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
    """Events about the gang's object or one of its members, oldest first."""
    members = {m.name for m in gang.members}
    found = []
    for raw in events:
        involved = _map(raw.get("involvedObject"))
        if _text(involved.get("namespace")) not in ("", gang.namespace):
            continue
        kind, name = involved.get("kind"), involved.get("name")
        if (kind == "PodGroup" and name == gang.name) or (kind == "Pod" and name in members):
            found.append(event_view(raw))
    return sorted(found, key=lambda e: _sort_time(e.at))


def wait_of(gang: GangView, events: Sequence[EventView]) -> WaitView | None:
    """Why `gang` is not whole (None when it is): the condition Phalanx wrote when it says
    something, else the newest Event about the gang or its members."""
    if gang.state is GangState.WHOLE:
        return None
    cond = gang.condition
    if gang.problems:
        return WaitView(gang.key, gang.state, gang.created, "; ".join(gang.problems), "phalanx")
    if cond is not None and cond.status != "True" and cond.message:
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
