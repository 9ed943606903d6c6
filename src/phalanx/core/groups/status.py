"""What Phalanx reports about a gang, before any dialect spells it.

`GangStatus` is the core's own counterpart of `phalanx.sources.base.GroupStatus`: the
same fields, with the gang's `GroupRef` instead of its key (so the writer finds the
object back without parsing keys) and the counts Volcano also reports. Each dialect
turns it into the `status` object of its own API (`build_status` in the dialect
modules); the source sends `{"status": <that>}` as a JSON merge patch.

Phases (scheduler-plugins' names, which the other dialects map from)::

    Pending ──(quorum of members exists)──▶ PreScheduling ──(reserved)──▶ Scheduling
        ──(quorum bound)──▶ Scheduled ──(quorum running)──▶ Running ──▶ Finished
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


class GangPhase(StrEnum):
    PENDING = "Pending"  # fewer members exist than the gang needs
    PRE_SCHEDULING = "PreScheduling"  # enough members exist, no reservation yet
    SCHEDULING = "Scheduling"  # reserved, binding
    SCHEDULED = "Scheduled"  # the quorum is bound
    RUNNING = "Running"  # the quorum runs
    FINISHED = "Finished"  # every member has finished
    FAILED = "Failed"


PLACED_PHASES: Final = frozenset({GangPhase.SCHEDULED, GangPhase.RUNNING, GangPhase.FINISHED})


@dataclass(frozen=True, slots=True)
class GangStatus:
    """One gang's state as Phalanx reports it on the gang's object."""

    ref: GroupRef
    phase: GangPhase
    scheduled: int  # members bound
    running: int
    reason: str  # Phalanx's last outcome ("waiting-for-members", "unfit", ...); "" if none
    message: str
    schedule_start_time: float | None = None  # wall-clock seconds
    succeeded: int = 0
    failed: int = 0

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
