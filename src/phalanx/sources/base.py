"""The one interface every cluster source implements; the service sees nothing else.

A source fills a `ClusterState` (through a `StateSink` that runs each update on the
service's event loop), reports when its first full load is in, and performs the side
effects of a decision: bindings, commit records, events and gang status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from phalanx.core.cache import ClusterState
from phalanx.core.groups.status import GroupStatus
from phalanx.core.model import Binding, GroupRef, PodRef
from phalanx.core.rollforward import CommitRecord

__all__ = [
    "BindError",
    "ClusterSource",
    "CommitLog",
    "CommitRecord",
    "GroupStatus",
    "Nomination",
    "StateSink",
    "StateUpdate",
]

# Applies one update to the state. Sources on other threads must hand it to the loop.
StateUpdate = Callable[[ClusterState], None]


@dataclass(frozen=True, slots=True)
class Nomination:
    """A pending pod and the node its gang's reservation holds for it ("": none any more)."""

    pod: PodRef
    node: str


class StateSink(Protocol):
    def __call__(self, update: StateUpdate) -> None: ...


class BindError(Exception):
    """A binding was refused or failed; `gone` when the pod no longer exists."""

    def __init__(self, message: str, *, gone: bool = False, conflict: bool = False) -> None:
        super().__init__(message)
        self.gone = gone
        self.conflict = conflict  # already bound (answered 409): never retried blindly


class ClusterSource(Protocol):
    """Where the cluster model comes from and where decisions go."""

    @property
    def name(self) -> str: ...

    @property
    def synced(self) -> bool:
        """True once the first full load/list of every kind is in the state."""
        ...

    async def start(self, sink: StateSink) -> None:
        """Load or begin watching; returns once started (not necessarily synced)."""

    async def stop(self) -> None: ...

    async def bind(
        self,
        binding: Binding,
        *,
        record: CommitRecord | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        """Create the binding; raise BindError on failure. Overload may be retried within
        `timeout_seconds` (None: the source's own default); a conflict never is. `record`,
        the gang's commit record, is persisted with the binding, in the same write: a pod
        bound this way is never bound without it."""

    async def write_commit_record(self, record: CommitRecord) -> None:
        """Persist the gang's placement before any of its bindings is issued (a record too
        long for its bindings to carry)."""

    async def emit_event(
        self,
        kind: str,
        namespace: str,
        name: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
    ) -> None:
        """A Kubernetes Event on a Pod or Node (`kind`); best effort."""

    async def emit_group_event(
        self, group: GroupRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """A Kubernetes Event on the gang's object in its own dialect (its PodGroup, or the
        Workload holding an upstream v1alpha1 gang); best effort, no-op when it has none."""

    async def update_group_status(self, status: GroupStatus) -> None:
        """Write the gang's status in its dialect's terms; best effort, no-op for gangs
        without an object or whose API has no status."""

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        """Make kube-scheduler retry these pending pods now; best effort.

        kube-scheduler parks a pod an extender refused until some cluster event; a new
        sibling pod is not one (without the GangScheduling gate), so gang members told
        "waiting" would sit until the 5-minute flush. An update to the pod is an event.
        """

    async def mark_scheduled(self, pods: Sequence[PodRef]) -> None:
        """Set each bound pod's `PodScheduled` condition back to True; best effort.

        kube-scheduler writes it False when its own cycle of a pod fails, even when the
        pod was bound meanwhile (by Phalanx, with its gang), and never corrects it.
        """

    async def nominate(self, nominations: Sequence[Nomination], reason: str) -> None:
        """Set (or, with node "", clear) each pending pod's `status.nominatedNodeName`, and
        requeue the ones given a node; best effort. Writes for one pod land in call order.

        kube-scheduler tries a pod's nominated node first and alone (its filters and the
        extenders on that one node) and counts nominated pods on their node for pods of
        equal or lower priority, so a reserved member's cycle filters one node, and nothing
        else is placed on its reserved capacity by kube-scheduler.
        """


@runtime_checkable
class CommitLog(Protocol):
    """A source that reads commit records back and may finish the gangs they describe.

    Optional: the service rolls gangs forward (`phalanx.service.rollforward`) only with a
    source that is also a `CommitLog`. Call on the event loop.
    """

    @property
    def may_roll_forward(self) -> bool:
        """True while this instance holds the roll-forward duty (e.g. a Lease)."""
        ...

    def commit_records(self) -> Mapping[str, CommitRecord]:
        """The records the cluster holds now, by group key."""
        ...

    async def clear_commit_record(self, group_key: str) -> None:
        """Remove the record of a gang that is complete or released; best effort. Copies
        its bindings carried onto bound members may stay in the cluster (taking them back
        costs a write per member), but are no longer among `commit_records`."""
