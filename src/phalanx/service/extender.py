"""The extender service: one Phalanx instance, composed of its parts.

    verbs (api) ──▶ Extender ──▶ GangPlanner (core: filter, prioritize, preempt)
                        │──────▶ BindBarrier (service.barrier) ──▶ Binder (service.binder)
                        │──────▶ Reporter (metrics, Events, PodGroup status, nominations)
                        │──────▶ GangViews (/debug, explain)
                        └──────▶ RollForward (commit records, after a crash)

Everything runs on one asyncio event loop: the model (`ClusterState`) has a single writer,
so a decision computed from a snapshot and committed with no `await` in between is atomic.

Expiry has one door: `expire()`, run before every filter and every `expiry_interval_seconds`.
Releases have one listener: whatever releases a reservation (expiry, a re-plan, a node or
PodGroup gone, the barrier, roll-forward), `ClusterState.release` tells `_released`, which
fails that reservation's bind gate at once with the cause, and withdraws the nominations of
its pending members.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from phalanx.core.barrier import completable
from phalanx.core.cache import ClusterState, ReleaseCause, Released, Reservation
from phalanx.core.decisions import FilterResult
from phalanx.core.journal import Outcome, partial_gangs
from phalanx.core.model import Binding, GroupRef, Placement, Pod
from phalanx.core.planner import GangPlanner, PlannerSettings
from phalanx.core.rollforward import CARRIED_RECORD_MAX_BYTES
from phalanx.core.topology import DEFAULT_TOPOLOGIES, Topologies
from phalanx.service.barrier import BindBarrier
from phalanx.service.binder import Binder, BindSettings
from phalanx.service.bindings_first import BindingsFirst
from phalanx.service.loop_health import watch_lag
from phalanx.service.metrics import Metrics
from phalanx.service.reporter import Reporter
from phalanx.service.rollforward import RollForward, RollForwardSettings
from phalanx.service.tasks import Tasks
from phalanx.service.timers import Timers
from phalanx.service.views import GangViews
from phalanx.sources.base import ClusterSource, CommitLog, Nomination, StateUpdate

Clock = Callable[[], float]

# How recently kube-scheduler must have asked this instance something for it to plan and
# bind a gang no verb asked about (`Extender._acts_alone`).
ACTS_ALONE_SECONDS = 2.0

# What filter, preempt and bind answer until the model holds its first full list (`ready`).
# A partial model can take a gang member for a pod whose PodGroup does not exist, or count
# a node free whose pods are not listed yet. An error, unlike an unschedulable answer, sends
# the pod to kube-scheduler's backoff, which retries it: a refusal parks it until something
# requeues it, and nothing would.
NOT_SYNCED = (
    "the cluster model is not synced yet: "
    "waiting for the first full list of nodes, pods and gang objects"
)

# Releases whose cause no decision of ours reported: the listener reports them.
_UNREPORTED = (
    ReleaseCause.NODE_GONE,
    ReleaseCause.GROUP_GONE,
    ReleaseCause.GROUP_CHANGED,
    ReleaseCause.TOPOLOGY_CHANGED,
)


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    default_placement: Placement = field(default_factory=Placement)
    # The configured topologies (docs/topology.md); the first is the default one.
    topologies: Topologies = DEFAULT_TOPOLOGIES
    # Reservation TTL when a group does not set scheduleTimeoutSeconds (seconds).
    default_timeout_seconds: int = 60
    # How long /bind waits for the rest of the gang. Must stay below kube-scheduler's
    # extender httpTimeout (the chart sets 30 s), or kube-scheduler gives up first.
    barrier_timeout_seconds: float = 20.0
    # Retries of a failed binding whose pod still exists (the capacity is ours: retrying
    # is safe); a conflict (bound elsewhere) is never retried.
    bind_retries: int = 3
    bind_retry_backoff_seconds: float = 0.2
    # How long one pod's binding may take, overload retries included (seconds); see
    # phalanx.service.binder.BindSettings.
    bind_timeout_seconds: float = 8.0
    # How often reservations are checked for expiry (seconds).
    expiry_interval_seconds: float = 1.0
    # How commit records are rolled forward after a crash (sources that keep them).
    roll_forward: RollForwardSettings = field(default_factory=RollForwardSettings)
    # Reserve interchangeable gangs from their first member's shape before every member
    # exists (phalanx.core.template); False: quorum first for every gang.
    template_reservation: bool = True
    # Single pods: filter answers at most this many best-fit nodes (1: no prioritize round
    # trip); 0: every feasible node.
    single_pod_nodes: int = 1
    # Nominate reserved members to their node (see Reporter.worth_nominating); False: the
    # plain requeue only, as where RBAC refuses pods/status.
    nominate_members: bool = True
    # Once a reserved gang's first member reaches /bind, bind its other reserved members
    # that ask for nothing only kube-scheduler judges, without waiting for their own cycles
    # (phalanx.core.barrier.completions); False: every member waits for its own /bind.
    complete_members: bool = True
    # The longest commit record (its JSON text, bytes) a gang's bindings carry onto their
    # pods; a longer one is written on the gang's object before the first binding. 0: every
    # record is written first (DESIGN §6 to the letter, one more round trip per gang).
    carried_record_bytes: int = CARRIED_RECORD_MAX_BYTES
    # How long a gang status or Event may wait while bindings are in flight (seconds;
    # phalanx.service.bindings_first); 0: written at once.
    report_hold_seconds: float = 5.0


class Extender:
    """One Phalanx instance (see the module docstring): create, `await start()`, `await stop()`."""

    def __init__(
        self,
        source: ClusterSource,
        settings: ServiceSettings | None = None,
        *,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        metrics: Metrics | None = None,
        timers: Timers | None = None,
    ) -> None:
        self.settings = s = settings or ServiceSettings()
        self.source = source
        # Asked once: a runtime Protocol check walks the protocol's members each time, and
        # planning ahead asks at every gang's arrival.
        self._commit_log = source if isinstance(source, CommitLog) else None
        self.clock = clock
        self.state = ClusterState(on_release=self._released)
        self.planner = GangPlanner(
            self.state,
            PlannerSettings(
                default_placement=s.default_placement,
                default_timeout_seconds=s.default_timeout_seconds,
                template_reservation=s.template_reservation,
                single_pod_nodes=s.single_pod_nodes,
                topologies=s.topologies,
            ),
        )
        self.metrics = metrics or Metrics()
        self.metrics.watch(self.state, self.partial_gangs, lambda: self.source.synced)
        self.metrics.watch_topology(self.planner.topology_usage)
        self.tasks = Tasks()
        self._synced = False  # the source's first full list has reached the model
        self.bindings_first = BindingsFirst(s.report_hold_seconds, clock=clock, timers=timers)
        self.metrics.reports_held.set_function(lambda: self.bindings_first.held)
        self.reporter = Reporter(
            self.state,
            self.planner,
            source,
            self.metrics,
            self.tasks,
            clock=clock,
            wall_clock=wall_clock,
            nominate_members=s.nominate_members,
            bindings_first=self.bindings_first,
        )
        self.binder = Binder(
            self.state,
            source,
            self.metrics,
            BindSettings(s.bind_retries, s.bind_retry_backoff_seconds, s.bind_timeout_seconds),
            clock=clock,
            bindings_first=self.bindings_first,
        )
        self.barrier = BindBarrier(
            self.state,
            self.planner,
            self.binder,
            self.reporter,
            metrics=self.metrics,
            tasks=self.tasks,
            timeout_seconds=s.barrier_timeout_seconds,
            clock=clock,
            timers=timers,
            complete_members=s.complete_members,
            acts_alone=self._acts_alone,
            carried_record_bytes=s.carried_record_bytes,
        )
        self.views = GangViews(self.state, self.planner, self.reporter, clock=clock)
        self.roll_forward = (
            RollForward(
                self.state,
                self.planner,
                self.binder,
                self.reporter,
                source=self._commit_log,
                settings=s.roll_forward,
                synced=lambda: self.source.synced,
                clock=clock,
                wall_clock=wall_clock,
            )
            if self._commit_log is not None
            else None
        )
        self._expiry: asyncio.Task[None] | None = None
        self._asked_at = -math.inf  # the last /filter: see `_acts_alone`

    # ---- lifecycle ---------------------------------------------------------------------

    def apply(self, update: StateUpdate) -> None:
        """The sink sources feed: runs one update on the model (call on the loop), then lets
        the barrier answer binds the change made unbindable."""
        opened = self.state.nodes_opened
        update(self.state)
        self._note_synced()
        if self.state.nodes_opened != opened:
            self.reporter.requeue_unfit()
        arrivals = self.state.take_arrivals()
        if arrivals:
            self._claim_arrivals(arrivals)
        misreported = self.state.take_misreported()
        if misreported:
            self.reporter.mark_scheduled(misreported)
        joined = self.state.take_joined()
        if joined and self._synced and self.settings.complete_members:
            self._plan_ahead(joined)
        self.planner.recheck_topology()  # relabelled nodes may split a required domain
        # Last: a claimed slot may complete a gang at its gate, a gang planned ahead is bound.
        self.barrier.sweep()

    def _plan_ahead(self, groups: Sequence[GroupRef]) -> None:
        """Gangs whose quorum now exists, none of whose members kube-scheduler has asked
        about: plan them now rather than when kube-scheduler reaches their first member
        (behind other pods, a whole pass of a long queue). The sweep then binds a
        reserved one whole (`BindBarrier.sweep`). Only the instance that may act alone, and
        never a gang a commit record names (roll-forward's, or another replica's)."""
        if not self._acts_alone():
            return
        records = self._commit_log.commit_records() if self._commit_log is not None else {}
        for group in groups:
            if group.key in records:
                continue
            decision = self.planner.plan_ahead(group, self.clock())
            if decision is not None:
                self.reporter.report(decision.events)

    def _claim_arrivals(self, arrivals: Sequence[Pod]) -> None:
        """Members that arrived while their gang held a reservation: one that makes
        kube-scheduler refuse the gang releases it (`release_refused`); else, of a template
        reservation, each claims a slot now. One the gate cannot complete is nominated to
        its node: its own cycle, which it needs, then filters that node alone. One it can
        complete is not: the gang's first `/bind` binds it, and a nomination would only
        hasten a cycle of it that is not needed, for a write and an update event each
        (bench/results/2026-12-06-claim-nominations.md)."""
        claimed = []
        worth: dict[str, bool] = {}  # by gang: nominating pays only while the backlog is short
        for pod in arrivals:
            # A newcomer kube-scheduler refuses its gang for releases the reservation first.
            self.reporter.report([self.planner.release_refused(pod)])
            member = self.planner.claim_arrival(pod)
            if member is None or pod.group is None or self._completed_anyway(pod, member.node):
                continue
            key = pod.group.key
            if key not in worth:
                worth[key] = self.reporter.worth_nominating(key)
            if worth[key]:
                claimed.append(Nomination(pod.ref, member.node))
        if claimed:
            self.reporter.nominate(claimed, "a slot of the gang's reservation was claimed")

    def _completed_anyway(self, pod: Pod, node: str) -> bool:
        """Whether the gate will bind `pod` on `node` with its gang, whatever its own cycle
        does (`completable`; completion not turned off)."""
        if not self.settings.complete_members:
            return False
        info = self.state.node(node)
        return info is not None and completable(pod, info.node)

    def _acts_alone(self) -> bool:
        """Whether this instance may plan and bind what no verb asked for: its kube-scheduler
        asked it something lately, so that kube-scheduler leads. With several replicas only
        the leader's kube-scheduler calls its Phalanx, and the reservations live in that
        Phalanx's memory: a standby that planned on its own could bind onto capacity the
        leader holds. Behind a backlog (the only time Phalanx plans ahead) the leader's
        kube-scheduler asks many times a second; a leader that lost its Lease stops within
        its renewDeadline, long before a standby may take the Lease."""
        return self.clock() - self._asked_at <= ACTS_ALONE_SECONDS

    def _note_synced(self) -> None:
        """Once, when the source's first full list is in the model (see `planner.parked`).
        Commit records hold their nodes from then on, before any verb plans with the model:
        a gang a crash cut keeps the capacity its record names (`RollForward.hold`)."""
        if not self._synced and self.source.synced:
            self._synced = True
            self.planner.note_synced()
            if self.roll_forward is not None:
                self.roll_forward.hold()

    def _unsynced(self) -> bool:
        """Whether the verbs must wait for the first full list (`NOT_SYNCED`). Once synced,
        always, so the hot path pays one attribute read: a gang object listed later (of a
        kind discovered later too) asks for its waiting members back when it appears."""
        if not self._synced:
            self._note_synced()
        return not self._synced

    async def start(self) -> None:
        await self.source.start(self.apply)
        self._note_synced()  # a source may finish its list outside `apply`
        self._expiry = asyncio.create_task(self._expire_forever(), name="phalanx-expiry")
        self.tasks.spawn(watch_lag(self.metrics.loop_lag.observe), name="phalanx-loop-lag")
        if self.roll_forward is not None:
            self.tasks.spawn(self.roll_forward.forever(), name="phalanx-roll-forward")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self.barrier.close("Phalanx is shutting down")
        self.tasks.cancel_all()
        await self.source.stop()

    @property
    def ready(self) -> bool:
        return self.source.synced

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.expiry_interval_seconds)
            self._note_synced()
            self.expire()
            self.refresh_statuses()

    def expire(self) -> None:
        """Release every reservation past its deadline (the one expiry door)."""
        self.reporter.report(self.planner.expire(self.clock()))

    def refresh_statuses(self) -> None:
        self.reporter.refresh_statuses()
        self.planner.forget_gone()

    def _released(self, released: Released) -> None:
        """Every release of a reservation, whatever its cause (see module docstring)."""
        self.metrics.releases.labels(released.cause.value).inc()
        self.barrier.on_release(released)
        self.reporter.withdraw_nominations(released)
        if released.cause in _UNREPORTED:
            group = GroupRef.parse(released.group_key)
            self.reporter.report([self.planner.note(group, Outcome.RELEASED, released.why)])

    # ---- verbs -------------------------------------------------------------------------

    def known_pod(self, uid: str) -> Pod | None:
        """The model's copy of a pod, by UID ("" or unknown: None)."""
        return self.state.pod(uid) if uid else None

    def learn(self, pod: Pod) -> Pod:
        """The pod as the model knows it; a pod first seen in a request is added (it exists
        in the API: kube-scheduler got it from there, our watch may simply lag)."""
        known = self.state.pod(pod.uid)
        if known is not None:
            return known
        if not pod.node_name:
            self.state.upsert_pod(pod)
            # As filed: a member of a composite gang is the composite's.
            return self.state.pod(pod.uid) or pod
        return pod

    def filter(
        self, pod: Pod, offered: Sequence[str], offered_set: AbstractSet[str] | None = None
    ) -> FilterResult:
        """`offered_set`: the offered names as a set, when the caller has one already."""
        self._asked_at = self.clock()
        if self._unsynced():
            return FilterResult(error=NOT_SYNCED)
        self.expire()
        pod = self.learn(pod)
        decision = self.planner.filter(pod, offered, self.clock(), offered_set=offered_set)
        reserved = decision.reserved
        if reserved is not None:
            self.reporter.nominate_others(reserved, pod)
            self._check_timeout(reserved)
        self.reporter.report(decision.events)
        return decision.result

    def _check_timeout(self, reservation: Reservation) -> None:
        """A reservation that can expire before its bind barrier times out still works (the
        expiry answers the held binds), but its gang may never bind: say so, once."""
        timeout = round(reservation.expires_at - reservation.reserved_at)
        barrier = self.settings.barrier_timeout_seconds
        if timeout < barrier:
            self.reporter.warn_once(
                GroupRef.parse(reservation.group_key),
                "ScheduleTimeoutBelowBarrier",
                f"scheduleTimeoutSeconds {timeout} is below the bind barrier timeout of "
                f"{barrier:g}s: the reservation may expire while members wait at bind; "
                "raise scheduleTimeoutSeconds",
            )

    def prioritize(self, pod: Pod, offered: Sequence[str]) -> dict[str, int]:
        return self.planner.prioritize(self.learn(pod), offered)

    def preempt(self, pod: Pod, victims: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """The victim sets Phalanx agrees to; each node's verdict is reported on the way.
        None until synced: a partial model may not know a victim is a gang's member."""
        if self._unsynced():
            return {}
        preemption = self.planner.preempt(victims)
        self.reporter.report_preemption(self.learn(pod), preemption)
        return preemption.kept

    async def bind(self, binding: Binding) -> str:
        """Bind one pod; returns "" on success or the error kube-scheduler should report."""
        if self._unsynced():
            return NOT_SYNCED
        return await self.barrier.bind(binding)

    # ---- views -------------------------------------------------------------------------

    def partial_gangs(self) -> list[str]:
        return partial_gangs(self.state, self.planner.journal, self.planner.defaults)

    def debug_groups(self) -> list[dict[str, object]]:
        return self.views.groups()

    def debug_group(self, namespace: str, name: str) -> dict[str, object] | None:
        return self.views.group(GroupRef(namespace, name))

    def debug_topology(self) -> dict[str, object]:
        return self.views.topology()
