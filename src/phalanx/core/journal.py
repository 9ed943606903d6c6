"""The gang journal: what Phalanx knows about each gang beyond the cluster model.

* **The journal** — per gang a `GroupRecord` (first filter, last decision and reason, the
  proposal it holds, re-plans, when its quorum bound). `note()` returns the `GangEvent` it
  made, or None when nothing changed: callers pass events on as values; nobody drains a list.
  A short history of recent events is kept for `/debug`.
* **Gang facts** — `bound_count` (coscheduling's `CalculateAssignedPods`), `partial_gangs`
  (the invariant: 0 or at least minMember bound), the gang's phase and member counts
  (`GroupStatus`, `GroupPhase`: defined with the dialects that spell them, used from here).

Pure: time comes in as `now` (seconds on the caller's monotonic clock).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from phalanx.core.cache import ClusterState
from phalanx.core.gang import Placed
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.model import GroupRef, PodPhase
from phalanx.core.resolution import GroupDefaults, Resolved, resolve_group

# Recent gang events kept for /debug (all gangs together; older ones fall off).
HISTORY = 256


class Outcome(StrEnum):
    """Gang decisions, as counted by phalanx_gang_decisions_total{result}."""

    # Reserved whole, or held on the nodes a commit record names: the Event reason is `Reserved`
    COMMITTED = "committed"
    WAITING = "waiting-for-members"
    UNFIT = "unfit"
    INVALID = "invalid"
    EXPIRED = "expired"
    REPLANNED = "replanned"
    RELEASED = "released"
    ROLLED_FORWARD = "rolled-forward"
    BOUND = "bound"

    @property
    def warning(self) -> bool:
        """Whether the Kubernetes Event for it is a Warning."""
        return self in (Outcome.UNFIT, Outcome.INVALID, Outcome.EXPIRED, Outcome.RELEASED)

    @property
    def event_reason(self) -> str:
        """The CamelCase reason of its Kubernetes Event."""
        return _EVENT_REASONS[self]


_EVENT_REASONS = {
    Outcome.COMMITTED: "Reserved",
    Outcome.WAITING: "WaitingForMembers",
    Outcome.UNFIT: "Unschedulable",
    Outcome.INVALID: "InvalidGang",
    Outcome.EXPIRED: "ReservationExpired",
    Outcome.REPLANNED: "Replanned",
    Outcome.RELEASED: "ReservationReleased",
    Outcome.ROLLED_FORWARD: "RolledForward",
    Outcome.BOUND: "Bound",
}


class ReplanCause(StrEnum):
    """Why a reservation was re-planned, as counted by phalanx_replans_total{cause}."""

    NOT_OFFERED = "not-offered"  # kube-scheduler's own filters refused a reserved node
    # ... for a member with devices to allocate on that node (claims, or an extended resource
    # the node serves from DRA devices): its DynamicResources plugin refused it
    DRA = "dra"
    NO_SLOT = "no-slot"  # an arriving member fit none of a template reservation's slots
    GREW = "grew"  # a reserved member now asks for more than its reservation holds


@dataclass(frozen=True, slots=True)
class GangEvent:
    """A decision about a gang worth telling people (metrics, Events, logs, status)."""

    outcome: Outcome
    group: GroupRef
    reason: str
    cause: str = ""  # REPLANNED: a ReplanCause

    @property
    def group_key(self) -> str:
        return self.group.key


@dataclass(slots=True)
class GroupRecord:
    """What Phalanx knows about one gang beyond the model: shown in /debug and status."""

    key: str
    first_filter_at: float | None = None
    last_outcome: Outcome | None = None
    last_reason: str = ""
    proposal: Placed | None = None  # what the gang transaction proposed for the reservation
    # The proposal's template slots and the pods that claimed them (slot uid -> pod key).
    claimed: dict[str, str] = field(default_factory=dict)
    # Pods that claimed a slot on arrival and have not been filtered since (pod uids): only
    # they may trade the slot for one on a node kube-scheduler offers.
    arrived: set[str] = field(default_factory=set)
    # Members whose last filter here refused them (pod uids): kube-scheduler parks a pod an
    # extender refused until a cluster event, so these, and only these, need a requeue.
    refused: set[str] = field(default_factory=set)
    replans: int = 0
    bound_at: float | None = None


class GangJournal:
    """The records of every gang Phalanx has decided about (single writer: the loop)."""

    def __init__(self) -> None:
        self.records: dict[str, GroupRecord] = {}
        self.history: deque[GangEvent] = deque(maxlen=HISTORY)

    def get(self, key: str) -> GroupRecord | None:
        """A gang's record if there is one (a view: creates nothing)."""
        return self.records.get(key)

    def record(self, key: str) -> GroupRecord:
        rec = self.records.get(key)
        if rec is None:
            rec = self.records[key] = GroupRecord(key)
        return rec

    def note(
        self, group: GroupRef, outcome: Outcome, reason: str, *, cause: str = ""
    ) -> GangEvent | None:
        """Record a decision; the event to report, or None if it repeats the last one."""
        rec = self.record(group.key)
        # A gang stuck waiting is reported once per change of reason, not once per filter.
        if rec.last_outcome is outcome and rec.last_reason == reason:
            return None
        rec.last_outcome = outcome
        rec.last_reason = reason
        event = GangEvent(outcome, group, reason, cause)
        self.history.append(event)
        return event

    def mark_bound(self, key: str, now: float) -> float | None:
        """The quorum bound now: the time since the first filter, the first time only."""
        rec = self.record(key)
        if rec.bound_at is not None:
            return None
        rec.bound_at = now
        return None if rec.first_filter_at is None else now - rec.first_filter_at

    def forget_gone(self, live: Iterable[str]) -> None:
        """Drop the records of gangs not in `live`, so a long-running instance does not grow
        with every gang it has seen."""
        keep = set(live)
        for key in [k for k in self.records if k not in keep]:
            del self.records[key]


# ---- gang facts ---------------------------------------------------------------------------


def bound_count(state: ClusterState, key: str) -> int:
    """Live members bound per the API or being bound by Phalanx."""
    return state.bound_count(key)


def partial_gangs(state: ClusterState, journal: GangJournal, defaults: GroupDefaults) -> list[str]:
    """Gangs with more than 0 but fewer than minMember members bound (or being bound).

    Finished members still count as placed, and a gang whose quorum Phalanx saw bind is
    whole even if some of its pods were deleted since.
    """
    partial = []
    for key in sorted(state.group_keys()):
        rec = journal.get(key)
        if rec is not None and rec.bound_at is not None:
            continue
        members = state.members(key, include_finished=True)
        if not members:
            continue
        resolution = resolve_group(state, GroupRef.parse(key), defaults)
        if not isinstance(resolution, Resolved):
            continue
        bound = sum(1 for p in members if state.is_bound(p))
        if 0 < bound < resolution.group.min_member:
            partial.append(key)
    return partial


@dataclass(frozen=True, slots=True)
class MemberCounts:
    """A gang's members, finished ones included, counted once for its phase and status."""

    existing: int
    scheduled: int  # bound (or being bound)
    running: int
    succeeded: int
    failed: int


def member_counts(state: ClusterState, key: str) -> MemberCounts:
    members = state.members(key, include_finished=True)
    return MemberCounts(
        existing=len(members),
        scheduled=sum(1 for p in members if state.is_bound(p)),
        running=sum(1 for p in members if p.node_name and p.phase is PodPhase.RUNNING),
        succeeded=sum(1 for p in members if p.phase is PodPhase.SUCCEEDED),
        failed=sum(1 for p in members if p.phase is PodPhase.FAILED),
    )


def group_phase(
    state: ClusterState, key: str, outcome: Outcome | None, min_member: int
) -> tuple[GroupPhase, MemberCounts]:
    """(phase, member counts) of a gang, finished members included.

    A placed gang ends as scheduler-plugins' PodGroup controller ends it: `Finished` once
    minMember members succeeded, else `Failed` once a member failed and the failed,
    running and succeeded members make minMember; phases follow the members Phalanx still
    sees (a finished gang whose pods are deleted is pending again)."""
    n = member_counts(state, key)
    if min_member and n.succeeded >= min_member:
        phase = GroupPhase.FINISHED
    elif min_member and n.failed and n.failed + n.running + n.succeeded >= min_member:
        phase = GroupPhase.FAILED
    elif min_member and n.scheduled >= min_member:
        phase = GroupPhase.RUNNING if n.running >= min_member else GroupPhase.SCHEDULED
    elif outcome in (Outcome.COMMITTED, Outcome.REPLANNED) or state.reservation(key):
        phase = GroupPhase.SCHEDULING
    elif min_member and n.existing < min_member:
        phase = GroupPhase.PENDING
    else:
        phase = GroupPhase.PRE_SCHEDULING
    return phase, n


def group_status(
    state: ClusterState,
    ref: GroupRef,
    record: GroupRecord | None,
    *,
    outcome: Outcome | None,
    min_member: int,
    start_time: float | None,
) -> GroupStatus:
    """A gang's status: its phase and counts, with its last decision (`record`) as reason
    and message; `start_time` is the wall-clock time of its first filter."""
    phase, counts = group_phase(state, ref.key, outcome, min_member)
    return GroupStatus(
        ref=ref,
        phase=phase,
        scheduled=counts.scheduled,
        running=counts.running,
        reason=record.last_outcome.value if record is not None and record.last_outcome else "",
        message=record.last_reason if record is not None else "",
        schedule_start_time=start_time,
        succeeded=counts.succeeded,
        failed=counts.failed,
    )


def live_keys(state: ClusterState) -> set[str]:
    """Gangs still in the model: a PodGroup, members or a reservation."""
    return state.group_keys() | set(state.reservations())


__all__ = [
    "HISTORY",
    "GangEvent",
    "GangJournal",
    "GroupPhase",
    "GroupRecord",
    "GroupStatus",
    "MemberCounts",
    "Outcome",
    "bound_count",
    "group_phase",
    "group_status",
    "live_keys",
    "member_counts",
    "partial_gangs",
]
