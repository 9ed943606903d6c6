"""Telling people and kube-scheduler what was decided: metrics, logs, Events, status,
nominations, requeue.

Decisions arrive as values (`GangEvent`s returned by the planner, the barrier and
roll-forward); `report` turns each into a count, a log line, a Kubernetes Event (on the
gang's object in its dialect — a PodGroup, or the Workload holding an upstream v1alpha1
gang — or on the first member of an annotation-only gang) and a status write (the source
spells it in the object's dialect). Status is also refreshed periodically, since members
bind, run and finish long after the gang decision. `/preempt`'s verdicts (`Preemption`)
become counts and log lines only (`report_preemption` says why no Event). Every write is a
background task: nothing here blocks a verb. Status and Events, except an object's first status,
wait while Phalanx has bindings in flight (`service/bindings_first.py`).

Where a gang landed (the topology level its members share, and why not a narrower one) is
counted when its quorum binds and shown in its status message. A node whose topology labels
contradict the others' is said once: a log line and a Warning Event on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial

from phalanx.core.cache import ClusterState, MemberState, Released, Reservation
from phalanx.core.gang import Placed
from phalanx.core.groups.status import GroupStatus
from phalanx.core.journal import GangEvent, Outcome, ReplanCause, group_status
from phalanx.core.model import GroupRef, Pod, PodGroup, PodRef
from phalanx.core.planner import GangPlanner
from phalanx.core.preempt import Preemption, PreemptOutcome
from phalanx.core.resolution import Deleting, Resolved
from phalanx.core.topology import Topologies, TopologyFinding
from phalanx.service.bindings_first import BindingsFirst
from phalanx.service.metrics import Metrics
from phalanx.service.tasks import Tasks
from phalanx.sources.base import ClusterSource, Nomination

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# The achieved level of a gang whose members span the widest level's domains.
CLUSTER_LEVEL = "cluster"
INCONSISTENT_TOPOLOGY = "InconsistentTopologyLabels"  # Event reason on the Node


# What a node holding nominated pods costs each other pod's kube-scheduler cycle, in node
# evaluations: measured, a cycle over nodes that all held nominations took 4.2× as long
# (bench/results/2026-12-01-nominations-everywhere.md, contended: 34.9 ms per attempt, against
# 8.4 ms in bench/results/2026-12-01-after-profiles.md).
NOMINATION_COST = 4


# The phalanx_gang_placements level of a gang placed by an ad-hoc topology (upstream's
# PodGroup topology key naming a label no configured topology has): the key comes from
# users' objects, so as a metric label it would be unbounded.
NODE_LABEL_LEVEL = "node-label"

# The status refresh recomputes the gangs that moved since the last one, and this share of
# all the others in turn, so that each is recomputed about once every this many refreshes
# (seconds, at the service's expiry interval) whatever was missed. Recomputing all of them
# each time held the loop about 140 ms a second with 5,000 PodGroups.
SWEEP_REFRESHES = 30


def achieved_level(proposal: Placed) -> str:
    """The narrowest topology level one of whose domains holds every member."""
    return proposal.level or CLUSTER_LEVEL


def placement_level(proposal: Placed, topologies: Topologies) -> str:
    """`achieved_level` as phalanx_gang_placements counts it: a level no configured
    topology has is `NODE_LABEL_LEVEL`."""
    level = achieved_level(proposal)
    if level == CLUSTER_LEVEL or any(level in t.levels for t in topologies.all):
        return level
    return NODE_LABEL_LEVEL


class Reporter:
    """Reports gang decisions (see module docstring). Loop only."""

    def __init__(
        self,
        state: ClusterState,
        planner: GangPlanner,
        source: ClusterSource,
        metrics: Metrics,
        tasks: Tasks,
        *,
        clock: Clock,
        wall_clock: Clock,
        nominate_members: bool = True,
        bindings_first: BindingsFirst | None = None,
    ) -> None:
        self.state = state
        self.planner = planner
        self.source = source
        self.metrics = metrics
        self.tasks = tasks
        self.clock = clock
        self.wall_clock = wall_clock
        self.nominate_members = nominate_members  # False: members are only ever requeued
        # Gang status and Events wait while bindings are in flight (service/bindings_first).
        self.bindings_first = bindings_first or BindingsFirst(0.0)
        # What was last written as each PodGroup's status (phase, counts, reason, message).
        self._shown: dict[str, tuple[object, ...]] = {}
        # Gangs a decision was reported for since the last refresh, and where the refresh's
        # turn over all the others stands (`refresh_statuses`).
        self._reported: set[str] = set()
        self._sweep = 0
        self._warned: set[tuple[str, str]] = set()  # (group key, reason) said once already
        # Pending members nominated to their reserved node (pod UID -> pod), until released.
        self._nominated: dict[str, PodRef] = {}

    def report(self, events: Iterable[GangEvent | None]) -> None:
        """Count, log, and write an Event and the PodGroup status for each new decision."""
        for event in events:
            if event is None:
                continue  # a repeat of the gang's last decision: said already
            group = event.group
            self.metrics.gang_decisions.labels(event.outcome.value).inc()
            if event.outcome is Outcome.REPLANNED:
                self.metrics.replans.labels(event.cause or ReplanCause.NOT_OFFERED).inc()
            log.info(
                "gang decision",
                extra={"group": group.key, "result": event.outcome.value, "reason": event.reason},
            )
            outcome = event.outcome
            self._event(group, outcome.event_reason, event.reason, warning=outcome.warning)
            self._reported.add(group.key)
            if self.state.group(group.key) is not None:
                self._push_status(self.group_status(group, outcome))
            elif self.state.composite(group.key) is not None:
                self._push_composite_status(group, self.state.pod_groups_under(group.key), outcome)

    def report_preemption(self, preemptor: Pod, preemption: Preemption) -> None:
        """Count every node's verdict, and log each widened or dropped one. No Event: which
        node kube-scheduler evicts on, if any, it decides after this answer and never tells
        Phalanx, so an Event on a widened gang could claim an eviction that never happened
        (its victims get kube-scheduler's own `Preempted` Events when it does)."""
        for verdict in preemption.verdicts:
            outcome = verdict.outcome
            self.metrics.preemption_nodes.labels(outcome.value).inc()
            if outcome is PreemptOutcome.KEPT:
                continue
            # A node dropped after a widening answers no victims: nothing was added.
            added = verdict.added if outcome is PreemptOutcome.WIDENED else ()
            if added:
                self.metrics.preemption_added.inc(len(added))
            units = verdict.unit or ", ".join(dict.fromkeys(w.unit for w in verdict.widenings))
            log.info(
                "preemption verdict",
                extra={
                    "pod": preemptor.key,
                    "node": verdict.node,
                    "outcome": outcome.value,
                    "group": units,
                    "added": len(added),
                    "reason": verdict.reason,
                },
            )

    def _event(self, group: GroupRef, reason: str, message: str, *, warning: bool) -> bool:
        """An Event on the gang's object, else on its first member; False if neither exists."""
        if self.state.group_object(group.object_ref.key) is not None:
            self._after_bindings(
                lambda: self.source.emit_group_event(group, reason, message, warning=warning)
            )
            return True
        members = self.state.members(group.key)
        if not members:
            return False
        first = members[0].name
        self._after_bindings(
            lambda: self.source.emit_event(
                "Pod", group.namespace, first, reason, message, warning=warning
            )
        )
        return True

    def _after_bindings(self, write: Callable[[], Awaitable[None]]) -> None:
        """A best-effort write, in the background once the bindings let it go."""

        async def when_quiet() -> None:
            await self.bindings_first.turn()
            await write()

        self.tasks.spawn(when_quiet())

    def member_completed(self, pod: Pod, node: str, group: GroupRef) -> None:
        """kube-scheduler's own record of a binding (`Scheduled` on the pod), for a member the
        barrier bound before its cycle and whose own `/bind` never succeeded (kube-scheduler
        then writes none for it: `BindBarrier._announce_later`)."""
        message = (
            f"Successfully assigned {pod.key} to {node} "
            f"(bound by Phalanx with gang {group}, before its own scheduling cycle)"
        )
        self._after_bindings(
            lambda: self.source.emit_event("Pod", pod.namespace, pod.name, "Scheduled", message)
        )

    def warn_once(self, group: GroupRef, reason: str, message: str) -> None:
        """A Warning Event on the gang (its object, else its first member) and a log line,
        once per gang and reason for as long as the gang exists."""
        if (group.key, reason) in self._warned:
            return
        self._warned.add((group.key, reason))
        log.warning(message, extra={"group": group.key, "reason": reason})
        self._event(group, reason, message, warning=True)

    def gang_bound(self, group: GroupRef, members: int, now: float, completed: int = 0) -> None:
        """The quorum bound together: the time it took, its plan's transfers, the decision."""
        waited = self.planner.journal.mark_bound(group.key, now)
        if waited is not None:
            self.metrics.time_to_bind.observe(waited)
            rec = self.planner.journal.get(group.key)
            proposal = rec.proposal if rec is not None else None
            if proposal is not None:
                topologies = self.planner.settings.topologies
                self.metrics.gang_placements.labels(placement_level(proposal, topologies)).inc()
            if proposal is not None and proposal.outcome is not None:
                self.metrics.plan_transfers.observe(len(proposal.outcome.transfers))
        reason = f"bound {members} member(s) together"
        if completed:
            reason += f", {completed} of them before their own cycle"
        self.report([self.planner.note(group, Outcome.BOUND, reason)])

    def nominate_others(self, reservation: Reservation, pod: Pod | None, why: str = "") -> None:
        """A fresh reservation: nominate each other pending member to its reserved node (its
        next cycle filters that node alone) and bring back the ones kube-scheduler parked
        after being told to wait, rather than at its next flush. Behind a backlog, where a
        nomination costs more than it saves, only the parked ones are touched. `pod`: the
        member whose filter made it, being placed already; None for a commit record's hold,
        which no member's cycle made."""
        nominations = []
        for m in reservation.members:
            if (pod is None or m.pod_uid != pod.uid) and m.state is MemberState.RESERVED:
                member = self.state.pod(m.pod_uid)
                if member is not None and not self.state.is_bound(member):
                    nominations.append(Nomination(member.ref, m.node))
        why = why or f"gang {reservation.group_key} reserved"
        if self.worth_nominating(reservation.group_key):
            self.nominate(nominations, why)
            return
        parked = self.planner.parked(reservation.group_key, (n.pod for n in nominations))
        if parked:
            self.tasks.spawn(self.source.requeue(parked, why))

    def mark_scheduled(self, pods: Sequence[Pod]) -> None:
        """Pods bound here whose `PodScheduled` condition kube-scheduler then set False (its
        own cycle of a member bound with its gang failed: `ClusterState.take_misreported`):
        set it True again, as the binding had."""
        for pod in pods:
            log.info(
                "bound pod said it was not scheduled: condition set True",
                extra={"pod": pod.key, "node": pod.node_name, "reason": pod.unscheduled},
            )
        self.metrics.conditions_corrected.inc(len(pods))
        self.tasks.spawn(self.source.mark_scheduled([p.ref for p in pods]))

    def nominate(self, nominations: Sequence[Nomination], why: str) -> None:
        """Nominate pending members to their reserved nodes (and requeue them)."""
        for n in nominations:
            self._nominated[n.pod.uid] = n.pod
        self.tasks.spawn(self.source.nominate(nominations, why))

    def worth_nominating(self, group_key: str) -> bool:
        """Whether nominating the gang's pending members saves kube-scheduler more than it
        costs it: a nomination saves that member's cycle all but one node, but every other
        pod's cycle meanwhile pays for the nominated node (a copy of the node and its filters
        run twice, about NOMINATION_COST node evaluations), until kube-scheduler reaches the
        member, which is roughly after the pods pending outside the gang. Never when the
        operator turned nominations off."""
        if not self.nominate_members:
            return False
        others = self.state.pending_count() - self.state.pending_count(group_key)
        return others * NOMINATION_COST < len(self.state.node_infos())

    def withdraw_nominations(self, released: Released) -> None:
        """A released reservation: its pending members' nominations go, or kube-scheduler
        would go on counting them on nodes Phalanx has handed back."""
        withdrawn = []
        for m in released.reservation.members:
            ref = self._nominated.pop(m.pod_uid, None)
            pod = self.state.pod(m.pod_uid)
            if ref is not None and pod is not None and not self.state.is_bound(pod):
                withdrawn.append(Nomination(ref, ""))
        if withdrawn:
            self.tasks.spawn(self.source.nominate(withdrawn, released.why))

    def _forget_nominations(self) -> None:
        """Bound or deleted members keep no entry (their nominations need no withdrawal)."""
        for uid in list(self._nominated):
            pod = self.state.pod(uid)
            if pod is None or self.state.is_bound(pod):
                del self._nominated[uid]

    def requeue_unfit(self) -> None:
        """A node became schedulable: the pending members of gangs Phalanx last found unfit
        get another cycle now. kube-scheduler may have seen the node before Phalanx did and
        been refused on Phalanx's older view; nothing else would retry them soon. Not a gang
        whose object is being deleted: no node lets it schedule until its object is gone."""
        pods = [
            pod.ref
            for key, rec in self.planner.records.items()
            if rec.last_outcome is Outcome.UNFIT
            and not isinstance(self.planner.resolve(GroupRef.parse(key)), Deleting)
            for pod in self.state.members(key)
            if not self.state.is_bound(pod)
        ]
        if pods:
            self.tasks.spawn(self.source.requeue(pods, "a node became schedulable"))

    # ---- gang status -------------------------------------------------------------------

    def group_status(self, group: GroupRef, outcome: Outcome | None = None) -> GroupStatus:
        key = group.key
        # minMember from the gang's object, or (annotation-only) from its members' annotations.
        resolution = self.planner.resolve(group)
        need = resolution.group.min_member if isinstance(resolution, Resolved) else 0
        rec = self.planner.journal.get(key)
        start = None
        if rec is not None and rec.first_filter_at is not None:
            start = self.wall_clock() - (self.clock() - rec.first_filter_at)
        status = group_status(
            self.state,
            group,
            rec,
            outcome=outcome,
            min_member=need,
            start_time=start,
        )
        placed = rec is not None and rec.last_outcome in (Outcome.COMMITTED, Outcome.BOUND)
        proposal = rec.proposal if rec is not None else None
        if placed and proposal is not None and proposal.explanation not in status.message:
            # Once bound, the decision text no longer says where the gang landed.
            return replace(status, message=f"{status.message}; {proposal.explanation}")
        return status

    def refresh_statuses(self) -> None:
        """Write the status of every gang object whose members moved since the last write
        (they bind, start running, finish or go away long after the gang decision): each
        PodGroup's, and a composite gang's on the composite and every PodGroup beneath it.

        Only the PodGroups that moved (`ClusterState.take_moved`) or had a decision reported
        since the last refresh are recomputed, with the next `1/SWEEP_REFRESHES` of the
        others in turn; composites, which are few, every time."""
        due = self.state.take_moved() | self._reported
        self._reported = set()
        groups = self.state.groups()
        keys = list(groups)
        if keys:
            share = -(-len(keys) // SWEEP_REFRESHES)
            start = self._sweep % len(keys)
            due.update(keys[start : start + share])
            due.update(keys[: max(0, start + share - len(keys))])
            self._sweep = start + share
        filed: set[str] = set()
        for root in self.state.composites().values():
            # Only a topmost `gang` composite has PodGroups filed under it.
            children = self.state.pod_groups_under(root.key)
            if children:
                self._push_composite_status(root.ref, children)
                filed.update(child.key for child in children)
        for key, group in groups.items():
            if key in due and key not in filed:  # a filed one's pods are the composite's
                self._push_status(self.group_status(group.ref))
        for gone in set(self._shown) - set(groups) - set(self.state.composites()):
            del self._shown[gone]
        live = self.state.group_keys()
        self._warned = {w for w in self._warned if w[0] in live}
        self._forget_nominations()
        self.report_findings(self.planner.topology_findings())

    def _push_composite_status(
        self, root: GroupRef, children: Iterable[PodGroup], outcome: Outcome | None = None
    ) -> None:
        """A composite gang's status on the composite, and the same on each PodGroup beneath
        it (they are placed together or not at all; their own keys have no members)."""
        status = self.group_status(root, outcome)
        self._push_status(status)
        for child in children:
            self._push_status(replace(status, ref=child.ref))

    def report_findings(self, findings: Iterable[TopologyFinding]) -> None:
        """Nodes whose topology labels contradict the others' (each handed over once)."""
        for finding in findings:
            message = str(finding)
            log.warning(message, extra={"node": finding.node, "reason": INCONSISTENT_TOPOLOGY})
            self._after_bindings(
                partial(
                    self.source.emit_event,
                    "Node",
                    "",
                    finding.node,
                    INCONSISTENT_TOPOLOGY,
                    message,
                    warning=True,
                )
            )

    def _push_status(self, status: GroupStatus) -> None:
        """Write `status` unless it says nothing new. Never to an object being deleted:
        nobody reads it any more, and a write would move its resourceVersion under the
        update that removes its finalizers (a conflict and a retry for that controller)."""
        if self._being_deleted(status.group_key):
            return
        shown = (
            status.phase,
            status.scheduled,
            status.running,
            status.succeeded,
            status.failed,
            status.reason,
            status.message,
        )
        if self._shown.get(status.group_key) != shown:
            first = status.group_key not in self._shown
            self._shown[status.group_key] = shown
            if first:
                # Others may wait on an object's first status (Volcano's job controller
                # creates a job's pods once its PodGroup leaves Pending): never held.
                self.tasks.spawn(self.source.update_group_status(status))
            else:
                self._after_bindings(partial(self._write_status, status))

    async def _write_status(self, status: GroupStatus) -> None:
        """A held status, unless its object is being deleted by its turn. The source writes
        only the newest of an object's statuses waiting for their turn."""
        if not self._being_deleted(status.group_key):
            await self.source.update_group_status(status)

    def _being_deleted(self, key: str) -> bool:
        group = self.state.group(key) or self.state.composite(key)
        return group is not None and group.deleting
