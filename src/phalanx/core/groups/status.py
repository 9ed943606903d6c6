"""What Phalanx reports about a gang, before any dialect spells it.

`GroupStatus` is the one status value of the core (`phalanx.core.journal` builds it, the
service hands it to the source): the gang's `GroupRef` (so the writer finds the object
back without parsing keys), its `GroupPhase`, and member counts. Each dialect turns it
into the `status` object of its own API (`build_status` in the dialect modules); the
registry says how the source sends it (`registry.status_write`). It lives here, below the
journal, because the dialects (imported by the inventory, which the journal's imports
reach) must read it too.

Phases (scheduler-plugins' names, which the other dialects map from)::

    Pending ──(quorum of members exists)──▶ PreScheduling ──(reserved)──▶ Scheduling
        ──(quorum bound)──▶ Scheduled ──(quorum running)──▶ Running
    any ──▶ Failed
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from phalanx.core.model import GroupRef
from phalanx.core.rawdict import JsonObject

# Messages are cut: they end up in status objects, Events and logs.
MESSAGE_LIMIT: Final = 1024

# Values of `phalanx.core.planner.Outcome` that a dialect spells its own way (not imported:
# the planner imports the inventory, which imports the dialects).
OUTCOME_WAITING: Final = "waiting-for-members"
OUTCOME_UNFIT: Final = "unfit"
OUTCOME_INVALID: Final = "invalid"


class GroupPhase(StrEnum):
    """A gang's phase (scheduler-plugins' names)."""

    PENDING = "Pending"  # fewer than minMember members exist
    PRE_SCHEDULING = "PreScheduling"  # enough exist, nothing reserved
    SCHEDULING = "Scheduling"  # reserved, binding under way
    SCHEDULED = "Scheduled"  # the quorum is bound
    RUNNING = "Running"  # the quorum runs
    FINISHED = "Finished"  # minMember members succeeded
    FAILED = "Failed"  # a member failed, and the failed, running and succeeded make the quorum


# Phases of a gang whose quorum was placed (finished and failed ones ran).
PLACED_PHASES: Final = frozenset(
    {GroupPhase.SCHEDULED, GroupPhase.RUNNING, GroupPhase.FINISHED, GroupPhase.FAILED}
)


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """What Phalanx reports on a gang's object: its phase, counts and last decision."""

    ref: GroupRef
    phase: GroupPhase
    scheduled: int  # members bound (or being bound), finished ones included
    running: int
    reason: str  # Phalanx's last outcome ("waiting-for-members", "unfit", ...); "" if none
    message: str
    schedule_start_time: float | None = None  # wall-clock seconds
    succeeded: int = 0  # members that finished, by how (Volcano reports them)
    failed: int = 0

    @property
    def group_key(self) -> str:
        return self.ref.key

    @property
    def placed(self) -> bool:
        """Whether the gang's quorum has been placed (the upstream "initially scheduled")."""
        return self.phase in PLACED_PHASES


def rfc3339(at: float) -> str:
    """Wall-clock seconds as Kubernetes writes timestamps (whole seconds, UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def camel(reason: str) -> str:
    """`waiting-for-members` -> `WaitingForMembers` (Kubernetes reasons are CamelCase)."""
    return "".join(part[:1].upper() + part[1:] for part in reason.replace("_", "-").split("-"))


def conditions_of(previous: JsonObject | None) -> list[Mapping[str, object]]:
    """The `conditions` of a status object as last known; anything malformed reads as none
    (a status is ours to rewrite, never a reason to fail)."""
    items = (previous or {}).get("conditions")
    if not isinstance(items, Sequence) or isinstance(items, str):
        return []
    return [item for item in items if isinstance(item, Mapping)]


def set_condition(
    conditions: Sequence[Mapping[str, object]], condition: dict[str, object], stamp: str
) -> list[Mapping[str, object]]:
    """`conditions` with `condition` set by type, as apimachinery's `SetStatusCondition`:
    `lastTransitionTime` moves only when the status changes; other types are kept."""
    result: list[Mapping[str, object]] = []
    placed = False
    for existing in conditions:
        if existing.get("type") != condition["type"]:
            result.append(existing)
            continue
        if placed:
            continue  # a duplicate of the type: the first one stands for it
        same = existing.get("status") == condition["status"]
        kept = existing.get("lastTransitionTime")
        condition["lastTransitionTime"] = kept if same and isinstance(kept, str) else stamp
        result.append(condition)
        placed = True
    if not placed:
        condition["lastTransitionTime"] = stamp
        result.append(condition)
    return result
