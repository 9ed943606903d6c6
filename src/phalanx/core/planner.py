"""GangPlanner: the decisions behind filter, prioritize and preempt, on the cluster model.

A gang member's filter reads as DESIGN §4's spine (`_filter_member`):

1. a bound member follows its node;
2. a member holding a reservation follows it, or — when kube-scheduler did not offer the
   reserved node — the gang is re-planned once without that node;
3. the gang is resolved (`phalanx.core.resolution`): waiting for its PodGroup, or invalid;
   a group of upstream's `basic` policy is no gang: its members are placed one by one;
   then the gang's topology constraint (`phalanx.core.topology.resolve_topology`), or
   invalid;
4. quorum first: fewer than minMember members exist, or fewer of a Volcano task than its
   `minTaskMember` (`phalanx.core.quorum`), so everyone waits;
5. the execution plan is parsed (cached per gang);
6. with the quorum already bound or reserved, this member joins as capacity allows;
7. otherwise the whole gang is planned on a snapshot (the gang transaction,
   `phalanx.core.gang`) and reserved in one step (`ClusterState.reserve`).

Topology indexes (nodes grouped into domains per configured topology) are built from
labels only and kept per `ClusterState.topology_generation` (`IndexCache`).

Pods in no gang go through `phalanx.core.singles`. Every call returns its whole decision
(`FilterDecision`: the answer, the reservation it made, the gang events); the journal
(`phalanx.core.journal`) keeps the per-gang records. Expiry is `expire(now)`, called by
the service before each filter and periodically: the only place reservations time out.

A gang a crash cut is reserved here too: `reserve_recorded` holds its unbound members on
the nodes its commit record names (roll-forward's grace, `phalanx.service.rollforward`),
through the same `ClusterState.reserve` and journal note as a planned reservation.

Pure: time comes in as `now` (seconds, any monotonic origin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from phalanx.core.barrier import outgrew
from phalanx.core.cache import (
    SLOT_PREFIX,
    ClusterState,
    MemberReservation,
    MemberState,
    ReleaseCause,
    Reservation,
    StateError,
)
from phalanx.core.decisions import (
    FilterDecision,
    FilterResult,
    NotReserved,
    Reserved,
    refuse_all,
)
from phalanx.core.dra_demand import shared_out
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.gang_explain import describe_request
from phalanx.core.groups.registry import minima_field
from phalanx.core.journal import (
    GangEvent,
    GangJournal,
    GroupRecord,
    Outcome,
    ReplanCause,
    live_keys,
)
from phalanx.core.model import (
    DEFAULT_TIMEOUT_SECONDS,
    Binding,
    GroupRef,
    Placement,
    Pod,
    PodGroup,
    PodRef,
    task_names,
)
from phalanx.core.plan import PlanError, PlanIntent, PlanNode, derive_intent, parse_plan
from phalanx.core.preempt import Preemption, preempt
from phalanx.core.prioritize import prioritize
from phalanx.core.quorum import has_quorum, quorum_of, task_shortfall
from phalanx.core.resolution import (
    Deleting,
    GroupDefaults,
    Invalid,
    Resolution,
    Resolved,
    Waiting,
    refused_by_scheduler,
    resolve_group,
)
from phalanx.core.singles import SingleFit
from phalanx.core.subgroups import subgroups_of
from phalanx.core.template import (
    NoSlot,
    cluster_room,
    pick_slot,
    placeholders,
    slot_requests,
    template_of,
)
from phalanx.core.topology import (
    DEFAULT_TOPOLOGIES,
    GangTopology,
    IndexCache,
    Topologies,
    Topology,
    TopologyFinding,
    TopologyIndex,
    member_order,
    resolve_topology,
)
from phalanx.core.topology_usage import LevelFreedom, fragmentation_scores, free_domains
from phalanx.core.unfit import UnfitMemo

Plan = tuple[PlanNode, PlanIntent]

# The decision a member's filter notes when its gang does not resolve. A gang whose object
# is being deleted is unschedulable (Event `Unschedulable`): nothing is missing or broken.
_UNRESOLVED_OUTCOMES: dict[type[Waiting | Invalid | Deleting], Outcome] = {
    Waiting: Outcome.WAITING,
    Invalid: Outcome.INVALID,
    Deleting: Outcome.UNFIT,
}


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    default_placement: Placement = field(default_factory=Placement)
    default_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    # Re-plans allowed when kube-scheduler does not offer a reserved node, per reservation.
    replan_limit: int = 1
    # Reserve an interchangeable gang from its first member's shape before every member
    # exists (phalanx.core.template); False: always wait for the quorum first.
    template_reservation: bool = True
    # Single pods: answer at most this many best-fit nodes from filter (1: kube-scheduler
    # then skips prioritize, one round trip a pod); 0: every feasible node.
    single_pod_nodes: int = 0
    # The configured topologies (docs/topology.md); the first is the default one.
    topologies: Topologies = DEFAULT_TOPOLOGIES


@dataclass(slots=True)
class _Cycle:
    """One filter call: its inputs and what it did (kube-scheduler's CycleState)."""

    pod: Pod
    group: GroupRef
    offered: Sequence[str]
    now: float
    events: list[GangEvent] = field(default_factory=list)
    reserved: Reservation | None = None

    def decision(self, result: FilterResult) -> FilterDecision:
        return FilterDecision(result, self.reserved, tuple(self.events))


class GangPlanner:
    """Decisions for filter / prioritize / preempt over a `ClusterState` (single writer)."""

    def __init__(self, state: ClusterState, settings: PlannerSettings | None = None) -> None:
        self.state = state
        self.settings = settings or PlannerSettings()
        self.defaults = GroupDefaults(
            self.settings.default_placement, self.settings.default_timeout_seconds
        )
        self.journal = GangJournal()
        self.indexes = IndexCache()
        self._fragmentation: tuple[int, dict[str, int]] | None = None  # (generation, scores)
        self._topology_checked = -1  # the topology generation `recheck_topology` last saw
        self.singles = SingleFit(state, self.fragmentation)
        self._plans: dict[str, tuple[str, PlanNode, PlanIntent]] = {}
        self.unfit = UnfitMemo(state)
        # Gangs pending when this instance synced (`note_synced`): whom it parked is unknown.
        self._inherited: set[str] = set()

    # ---- gangs -------------------------------------------------------------------------

    @property
    def records(self) -> Mapping[str, GroupRecord]:
        return self.journal.records

    @property
    def events(self) -> list[GangEvent]:
        """The most recent gang events, oldest first (a bounded history, for /debug)."""
        return list(self.journal.history)

    def resolve(self, group: GroupRef) -> Resolution:
        return resolve_group(self.state, group, self.defaults)

    def note(self, group: GroupRef, outcome: Outcome, reason: str) -> GangEvent | None:
        """Record a decision taken outside filter (binding, roll-forward); the event, if new."""
        return self.journal.note(group, outcome, reason)

    def forget_gone(self) -> None:
        """Drop what is remembered of gangs that left the model (no PodGroup, no members,
        no reservation), so a long-running instance does not grow with every gang it saw."""
        live = live_keys(self.state)
        self.journal.forget_gone(live)
        self._inherited &= live
        for key in [k for k in self._plans if k not in live]:
            del self._plans[key]
        self.unfit.keep_only(live)

    def note_synced(self) -> None:
        """The model holds its first full list: gangs with pending members now may have
        members a previous instance refused, which kube-scheduler keeps parked."""
        self._inherited = {
            key
            for key in self.state.group_keys()
            if any(not self.state.is_bound(p) for p in self.state.members(key))
        }

    def parked(self, group_key: str, pods: Iterable[PodRef]) -> list[PodRef]:
        """The pods among `pods` that kube-scheduler may hold parked for a refusal of ours:
        refused by their last filter here, or all of a gang that was pending before this
        instance synced. The others are in its active queue or backoff: requeueing them
        is an API write and a watch event everywhere, for nothing."""
        if group_key in self._inherited:
            return list(pods)
        rec = self.journal.get(group_key)
        refused = rec.refused if rec is not None else set()
        return [p for p in pods if p.uid in refused]

    # ---- topology ----------------------------------------------------------------------

    def index(self, topology: Topology) -> TopologyIndex:
        """The nodes grouped into the domains of `topology` (rebuilt when nodes change)."""
        state = self.state
        return self.indexes.get(
            topology, state.topology_generation, lambda: (i.node for i in state.nodes())
        )

    def recheck_topology(self) -> None:
        """Nodes came, went or changed their topology labels: a reservation whose reserved
        nodes no longer share one domain of its gang's required level, or one of whose
        slices no longer lies in one domain of the slice level, is released (the release
        listener reports it; the gang is planned again) rather than bound across what are
        now two domains. Only while nothing of it is being bound: once a member is assumed,
        its gate is binding and a release would leave a partial gang."""
        generation = self.state.topology_generation
        if generation == self._topology_checked:
            return
        self._topology_checked = generation
        for key, reservation in list(self.state.reservations().items()):
            if any(m.state is not MemberState.RESERVED for m in reservation.members):
                continue
            resolution = self.resolve(GroupRef.parse(key))
            if not isinstance(resolution, Resolved):
                continue
            topology = self._topology_of(resolution.group)
            if isinstance(topology, str):
                continue
            split = self._split_by_relabel(key, reservation, topology)
            if split:
                self.state.release(
                    key,
                    ReleaseCause.TOPOLOGY_CHANGED,
                    f"{split}; reservation released, the gang will be re-planned",
                    serial=reservation.serial,
                )

    def _split_by_relabel(self, key: str, reservation: Reservation, topology: GangTopology) -> str:
        """How the reserved nodes break the gang's topology now ("" if they do not): its
        required level first, then each slice (runs of `slice_size` members by rank, as
        they were placed). Slices are checked only while no member of the gang is bound:
        bound members take slice positions the reservation does not show."""
        index = self.index(topology.topology)
        level = topology.required
        if level is not None:
            names = _split(index, level, (m.node for m in reservation.members))
            if names is not None:
                return (
                    f"gang {key} requires one {topology.key(level)} domain, but node labels "
                    f"changed and its reserved nodes now lie in {len(names)}: "
                    f"{', '.join(names)}"
                )
        if any(s.required is not None for s in topology.subgroups):
            return self._subgroup_split(key, reservation, topology)
        if topology.slice_tasks or topology.task_sets:
            return self._task_split(key, reservation, topology)
        # Multi-layer slices: the widest layer first, as they were placed.
        layers = [
            (size, level)
            for size, level in (*topology.slice_layers, (topology.slice_size, topology.slice_level))
            if size > 1 and level is not None
        ]
        if not layers or self.state.bound_count(key):
            return ""
        pods = [self.state.pod(m.pod_uid) for m in reservation.members]
        if any(p is None for p in pods):
            return ""  # slots of a template reservation: such gangs have no slices
        node_of = {m.pod_uid: m.node for m in reservation.members}
        ranked = member_order(p for p in pods if p is not None)
        for size, level in layers:
            count = -(-len(ranked) // size)
            for i in range(count):
                run = ranked[i * size : (i + 1) * size]
                names = _split(index, level, (node_of[p.uid] for p in run))
                if names is not None:
                    what = f"slice {i + 1} of {count} ({run[0].name}..{run[-1].name})"
                    return _moved(key, what, topology.key(level), names)
        return ""

    def _subgroup_split(self, key: str, reservation: Reservation, topology: GangTopology) -> str:
        """`_split_by_relabel` for Volcano's subgroups: the reserved members of each (by
        their labels, `subgroups_of`) must still share one domain of its policy's level."""
        index = self.index(topology.topology)
        pods = [p for m in reservation.members if (p := self.state.pod(m.pod_uid)) is not None]
        node_of = {m.pod_uid: m.node for m in reservation.members}
        levels = {s.policy: s.required for s in topology.subgroups}
        nodes: dict[tuple[str, int], list[str]] = {}
        for uid, (policy, name) in subgroups_of(levels, pods).items():
            level = levels[policy]
            if level is not None:
                nodes.setdefault((name, level), []).append(node_of[uid])
        for (name, level), where in sorted(nodes.items()):
            names = _split(index, level, where)
            if names is not None:
                return _moved(key, f"subgroup {name}", topology.key(level), names)
        return ""

    def _task_split(self, key: str, reservation: Reservation, topology: GangTopology) -> str:
        """`_split_by_relabel` for slices by task (a composite gang's child PodGroups with a
        key of their own, KAI's subgroups with a level): the reserved members of each must
        still share one domain of its level."""
        index = self.index(topology.topology)
        nodes: dict[str, list[str]] = {}
        for m in reservation.members:
            pod = self.state.pod(m.pod_uid)
            if pod is not None and pod.task:
                nodes.setdefault(pod.task, []).append(m.node)
        for task, where in sorted(nodes.items()):
            level = topology.task_level(task)
            if level is None:
                continue
            names = _split(index, level, where)
            if names is not None:
                return _moved(key, f"{topology.slice_noun} {task}", topology.key(level), names)
        for held in topology.task_sets:
            where = [n for task in sorted(held.tasks) for n in nodes.get(task, ())]
            names = _split(index, held.level, where)
            if names is not None:
                what = f"{held.label} ({task_names(held.tasks)})"
                return _moved(key, what, topology.key(held.level), names)
        return ""

    def topology_findings(self) -> list[TopologyFinding]:
        """Inconsistent node labels found since the last call (each said once)."""
        return self.indexes.unreported()

    def topology_usage(self) -> list[tuple[TopologyIndex, tuple[LevelFreedom, ...]]]:
        """Per configured topology: its index, and per level how many domains are whole
        (every GPU free) of those with GPUs."""
        snapshot = self.state.snapshot()
        usage = []
        for topology in self.settings.topologies.all:
            index = self.index(topology)
            usage.append((index, free_domains(snapshot, index)))
        return usage

    def _topology_of(self, group: PodGroup) -> GangTopology | str:
        return resolve_topology(group, self.state.members(group.key), self.settings.topologies)

    def _plan_of(self, group: PodGroup) -> Plan | None:
        if not group.plan_json:
            return None
        cached = self._plans.get(group.key)
        if cached is not None and cached[0] == group.plan_json:
            return cached[1], cached[2]
        plan = parse_plan(group.plan_json)
        intent = derive_intent(plan, group.differentiable)
        self._plans[group.key] = (group.plan_json, plan, intent)
        return plan, intent

    # ---- filter ------------------------------------------------------------------------

    def filter(
        self,
        pod: Pod,
        offered: Sequence[str],
        now: float,
        *,
        offered_set: AbstractSet[str] | None = None,
    ) -> FilterDecision:
        """Decide for `pod`, the model's own copy (the caller looked it up once).
        `offered_set`: the offered names as a set, when the caller has one already."""
        if pod.invalid:
            return FilterDecision(refuse_all(offered, pod.invalid))
        blocked = _devices_blocker(pod)
        if blocked:
            return FilterDecision(refuse_all(offered, f"pod {pod.key}: {blocked}"))
        if pod.group is None:
            best = self.settings.single_pod_nodes
            single = self.singles.filter(pod, offered, best=best, offered_set=offered_set)
            return FilterDecision(single)
        cycle = _Cycle(pod, pod.group, offered, now)
        result = self._filter_member(cycle)
        refused = self.journal.record(pod.group.key).refused
        if result.feasible:
            refused.discard(pod.uid)
        else:
            refused.add(pod.uid)
        return cycle.decision(result)

    def plan_ahead(self, group: GroupRef, now: float) -> FilterDecision | None:
        """Plan a gang whose quorum exists before kube-scheduler has asked about any member,
        as its first member's filter would, with every node offered (the gang transaction
        judges each member's eligibility itself). Only a gang Phalanx may bind whole by
        itself: no reservation, no member bound, every member asking for nothing only
        kube-scheduler judges (`Pod.unjudged`), and pending since after this instance synced
        (a gang pending before may be in a commit record that roll-forward will bind). None
        when it is not one. The decision's filter result answers nobody: no member counts
        as refused (`parked`)."""
        key = group.key
        if key in self._inherited or self.state.reservation(key) is not None:
            return None  # inherited: pending at this instance's start, maybe in a commit record
        resolution = self.resolve(group)
        if not isinstance(resolution, Resolved):
            return None
        resolved = resolution.group
        # Asked at every member's creation: the O(1) count first (finished pods included).
        if resolved.basic or self.state.member_count(key) < resolved.min_member:
            return None
        members = self.state.members(key)
        if not has_quorum(resolved, members) or any(
            p.invalid or p.unjudged or p.deleting or self.state.is_bound(p) for p in members
        ):
            return None
        topology = self._topology_of(resolved)
        if isinstance(topology, str):
            return None
        try:
            plan = self._plan_of(resolved)
        except PlanError:
            return None  # said at the first member's filter, which refuses it
        cycle = _Cycle(members[0], group, tuple(self.state.node_infos()), now)
        result = self._plan_gang(
            cycle, resolved, plan, members, (), topology=topology, exclude=frozenset()
        )
        return cycle.decision(result)

    def _note(self, cycle: _Cycle, outcome: Outcome, reason: str, *, cause: str = "") -> None:
        event = self.journal.note(cycle.group, outcome, reason, cause=cause)
        if event is not None:
            cycle.events.append(event)

    def _filter_member(self, cycle: _Cycle) -> FilterResult:
        pod, key, offered = cycle.pod, cycle.group.key, cycle.offered
        rec = self.journal.record(key)
        if rec.first_filter_at is None:
            rec.first_filter_at = cycle.now
        # 1. A bound member follows its node.
        node = self.state.bound_node(pod)
        if node:
            return _follow(node, offered, f"pod {pod.key} is already bound to {node}")
        # 2. A reserved member follows its reservation (or the gang re-plans once); an
        #    arriving member of a template reservation claims a slot first.
        reservation = self.state.reservation(key)
        member = reservation.member(pod.uid) if reservation is not None else None
        if member is None and reservation is not None and reservation.slots():
            claim = pick_slot(self.state, reservation, pod, offered)
            if isinstance(claim, NoSlot):
                return self._replan_for(cycle, claim.reason)
            member = self.state.claim(key, claim.slot.pod_uid, pod)
            rec.claimed[claim.slot.pod_uid] = pod.key
        first_since_arrival = pod.uid in rec.arrived
        rec.arrived.discard(pod.uid)
        if (
            first_since_arrival
            and member is not None
            and member.node not in offered
            and reservation is not None
        ):
            member = self._swap_slot(key, reservation, member, pod, offered)
        if member is not None:
            if member.state is MemberState.RESERVED and outgrew(pod, member.requests):
                # Its requests grew since the gang was planned (a resize, an edited file):
                # the capacity held for it no longer holds it, and its bind would be refused.
                grew = f"pod {pod.key} now asks for more than gang {key} reserved for it"
                return self._replan_for(cycle, grew, cause=ReplanCause.GREW)
            if member.node in offered:
                return _follow(member.node, offered, _reserved_for(key, member))
            return self._replan(cycle, member)
        # 3. Resolve the gang (a `basic` group is none: its members go one by one).
        resolution = self.resolve(cycle.group)
        if not isinstance(resolution, Resolved):
            outcome = _UNRESOLVED_OUTCOMES[type(resolution)]
            self._note(cycle, outcome, resolution.reason)
            return refuse_all(offered, resolution.reason)
        group = resolution.group
        if group.basic:
            return self.singles.filter(pod, offered)
        topology = self._topology_of(group)
        if isinstance(topology, str):
            self._note(cycle, Outcome.INVALID, topology)
            return refuse_all(offered, topology)
        # 4. Quorum first, unless the gang can be reserved from its template.
        members = self.state.members(key)
        if not has_quorum(group, members):
            return self._before_quorum(cycle, group, members, topology)
        # 5. The execution plan.
        try:
            plan = self._plan_of(group)
        except PlanError as exc:
            reason = f"phalanx.io/plan on PodGroup {key} is invalid: {exc}"
            self._note(cycle, Outcome.INVALID, reason)
            return refuse_all(offered, reason)
        # 6. The quorum is placed (or reserved): this member joins as capacity allows.
        bound = [p for p in members if self.state.is_bound(p)]
        if has_quorum(group, bound) or reservation is not None:
            return self._place_extra(cycle, group, topology, plan)
        # 7. Plan and reserve the whole gang.
        return self._plan_gang(
            cycle, group, plan, members, bound, topology=topology, exclude=frozenset()
        )

    def _spec(
        self,
        group: PodGroup,
        topology: GangTopology,
        plan: Plan | None,
        members: tuple[Pod, ...],
        *,
        anchor_pods: Sequence[Pod],
        anchors: Mapping[str, str],
        exclude: frozenset[str],
    ) -> GangSpec:
        # Claims several members share are charged once, and bind those members together.
        members, together = shared_out(members)
        return GangSpec(
            key=group.key,
            placement=group.placement or self.settings.default_placement,
            members=members,
            together=together,
            anchors=anchors,
            anchor_pods=tuple(anchor_pods),
            plan=plan[0] if plan else None,
            intent=plan[1] if plan else None,
            exclude=exclude,
            topology=topology,
            index=self.index(topology.topology),
        )

    def _plan_gang(
        self,
        cycle: _Cycle,
        group: PodGroup,
        plan: Plan | None,
        members: Sequence[Pod],
        bound: Sequence[Pod],
        *,
        topology: GangTopology,
        exclude: frozenset[str],
    ) -> FilterResult:
        """Place every unbound member on a snapshot and reserve them in one step."""
        if not exclude:
            known = self.unfit.recall(group, members, template=False)
            if known is not None:
                return self._reserve(cycle, group, known)
        unbound = tuple(p for p in members if not self.state.is_bound(p))
        anchors = {p.uid: self.state.bound_node(p) for p in bound}
        snapshot = self.state.snapshot()

        def attempt(to_place: tuple[Pod, ...]) -> Placed | Unfit:
            spec = self._spec(
                group,
                topology,
                plan,
                to_place,
                anchor_pods=bound,
                anchors=anchors,
                exclude=exclude,
            )
            return place_gang(snapshot, spec)

        result = attempt(unbound)
        if isinstance(result, Unfit) and plan is None:
            # Elastic gang: the quorum alone may fit where every member does not. The
            # quorum is the lowest ranks (each task's first, to its minimum), so slices
            # stay whole and rank 0 (the usual coordinator) is in it.
            quorum = quorum_of(group, member_order(unbound), group.min_member - len(bound), bound)
            smaller = attempt(quorum) if 0 < len(quorum) < len(unbound) else result
            if isinstance(smaller, Placed):
                result = smaller
        if isinstance(result, Unfit) and not exclude:
            self.unfit.remember(group, members, result, template=False)
        return self._reserve(cycle, group, result)

    def _before_quorum(
        self, cycle: _Cycle, group: PodGroup, members: Sequence[Pod], topology: GangTopology
    ) -> FilterResult:
        """Fewer than minMember members exist: reserve the gang from its template if it has
        one (phalanx.core.template), else everyone waits. A gang with slices waits: which
        rank (or which subgroup, for slices by task or Volcano's subgroups) will claim which
        slot is not known before the members exist."""
        sliced = (
            topology.slice_size or topology.slice_tasks or topology.task_sets or topology.subgroups
        )
        template = None if sliced else template_of(self.state, group, members)
        if template is None or not self.settings.template_reservation:
            reason = f"waiting for gang members: {len(members)}/{group.min_member} exist"
            short = task_shortfall(group.min_task_member, members)
            if short:
                reason = (
                    f"{reason}, but {short} ({minima_field(group.min_task_member, group.dialect)})"
                )
            self._note(cycle, Outcome.WAITING, reason)
            return refuse_all(cycle.offered, reason)
        known = self.unfit.recall(group, members, template=True)
        if known is not None:
            return self._reserve(cycle, group, known, template=True)
        snapshot = self.state.snapshot()
        missing, shape = group.min_member - len(members), slot_requests(template, group)
        room = cluster_room(snapshot, template.requests, group.min_member)
        if room < group.min_member:
            unfit = Unfit(
                f"cannot place {group.min_member:,} member(s) of gang {group.key}: all "
                f"{len(snapshot.names):,} node(s) together could hold {room:,} of them "
                f"({describe_request(template.requests)} each), even empty"
            )
            self.unfit.remember(group, members, unfit, template=True)
            return self._reserve(cycle, group, unfit, template=True)
        slots = placeholders(template, missing, shape)
        spec = self._spec(
            group,
            topology,
            None,
            (*members, *slots),
            anchor_pods=(),
            anchors={},
            exclude=frozenset(),
        )
        result = place_gang(snapshot, spec)
        if isinstance(result, Unfit):
            self.unfit.remember(group, members, result, template=True)
        # With task minima the slots stand for the template's task (`template_of`).
        slot_task = template.task if group.min_task_member else ""
        return self._reserve(cycle, group, result, template=True, slot_task=slot_task)

    def _reserve(
        self,
        cycle: _Cycle,
        group: PodGroup,
        result: Placed | Unfit,
        *,
        template: bool = False,
        slot_task: str = "",
    ) -> FilterResult:
        """Publish a proposal as the gang's reservation in one step, or say why none fits."""
        pod, key, offered, now = cycle.pod, group.key, cycle.offered, cycle.now
        rec = self.journal.record(key)
        if isinstance(result, Unfit):
            rec.proposal = None
            self._note(cycle, Outcome.UNFIT, result.reason)
            return refuse_all(offered, result.reason)
        reservation = self.state.reserve(
            Reservation(
                group_key=key,
                members=tuple(
                    MemberReservation(
                        p.uid,
                        "" if p.uid.startswith(SLOT_PREFIX) else p.key,
                        result.assignment[p.uid],
                        p.requests,
                    )
                    for p in result.members
                ),
                reserved_at=now,
                expires_at=now + group.timeout_seconds,
                template=template,
                slot_task=slot_task,
            )
        )
        cycle.reserved = reservation
        rec.proposal = result
        rec.claimed = {}
        rec.arrived = set()
        slots = len(reservation.slots())
        waiting = f" ({slots} of them for members not created yet)" if slots else ""
        reason = f"reserved {len(result.members)} member(s){waiting} on {', '.join(result.nodes)}"
        if result.explanation:
            reason = f"{reason}; {result.explanation}"
        self._note(cycle, Outcome.COMMITTED, reason)
        member = reservation.member(pod.uid)
        if member is None:
            reason = f"gang {key} is reserved without this pod; it joins once the quorum is bound"
            return refuse_all(offered, reason)
        if member.node not in offered:
            return self._replan(cycle, member)
        return _follow(member.node, offered, _reserved_for(key, member))

    def release_refused(self, pod: Pod) -> GangEvent | None:
        """A member arrived while its gang holds a reservation: when kube-scheduler now
        refuses every cycle of the gang's pods (`refused_by_scheduler`: the newcomer broke
        its PodGroup's rules), the reservation is released, as nothing of it would be
        bound before it expired, and the refusal noted (the event, if new)."""
        group = pod.group
        if group is None or self.state.reservation(group.key) is None:
            return None
        why = refused_by_scheduler(self.state, group)
        if not why:
            return None
        self.state.release(group.key, ReleaseCause.GROUP_CHANGED, f"{why}; reservation released")
        return self.journal.note(group, Outcome.INVALID, why)

    def claim_arrival(self, pod: Pod) -> MemberReservation | None:
        """A member that arrived while its gang holds a template reservation takes a slot
        now, before its first cycle, so the service can nominate its node (None: no free
        slot fits it, or it holds a place already; its filter decides as before)."""
        if pod.group is None or pod.invalid:
            return None
        key = pod.group.key
        reservation = self.state.reservation(key)
        if reservation is None or reservation.member(pod.uid) is not None:
            return None
        if not reservation.slots():
            return None
        claim = pick_slot(self.state, reservation, pod, ())
        if isinstance(claim, NoSlot):
            return None
        member = self.state.claim(key, claim.slot.pod_uid, pod)
        rec = self.journal.record(key)
        rec.claimed[claim.slot.pod_uid] = pod.key
        rec.arrived.add(pod.uid)
        return member

    def _swap_slot(
        self,
        key: str,
        reservation: Reservation,
        member: MemberReservation,
        pod: Pod,
        offered: Sequence[str],
    ) -> MemberReservation:
        """A slot claimed on arrival, before kube-scheduler had a say, on a node it did not
        offer: take a free slot on an offered node instead, as a claim at filter would.
        Only at the member's first filter: later, its bind may be held on that node."""
        if not reservation.template or member.state is not MemberState.RESERVED:
            return member
        if not reservation.slots():
            return member
        claim = pick_slot(self.state, reservation, pod, offered)
        if isinstance(claim, NoSlot) or not claim.offered:
            return member
        self.state.unclaim(key, pod.uid)
        self.journal.record(key).claimed[claim.slot.pod_uid] = pod.key
        return self.state.claim(key, claim.slot.pod_uid, pod)

    def _replan(self, cycle: _Cycle, member: MemberReservation) -> FilterResult:
        """kube-scheduler's own filters rejected the reserved node: re-plan once without it."""
        refused = (
            f"kube-scheduler did not offer node {member.node} reserved for pod {cycle.pod.key}"
        )
        # Phalanx judges every filter but DynamicResources as kube-scheduler does: with
        # devices to allocate on that node, that plugin is the one that can disagree.
        info = self.state.node(member.node)
        needs = cycle.pod.devices
        on_devices = info is not None and needs is not None and needs.allocates_on(info.node)
        cause = ReplanCause.DRA if on_devices else ReplanCause.NOT_OFFERED
        return self._replan_for(cycle, refused, exclude=frozenset({member.node}), cause=cause)

    def _replan_for(
        self,
        cycle: _Cycle,
        refused: str,
        *,
        exclude: frozenset[str] = frozenset(),
        cause: ReplanCause = ReplanCause.NO_SLOT,
    ) -> FilterResult:
        """The reservation cannot serve this member (`refused` says why): release it and
        re-plan once, without the `exclude`d nodes."""
        key, offered = cycle.group.key, cycle.offered
        rec = self.journal.record(key)
        if rec.replans >= self.settings.replan_limit:
            rec.replans = 0
            reason = f"{refused} again after a re-plan; reservation released"
            self.state.release(key, ReleaseCause.REPLAN, reason)
            self._note(cycle, Outcome.RELEASED, reason)
            return refuse_all(offered, reason)
        rec.replans += 1
        reason = f"{refused}; re-planning without it"
        self.state.release(key, ReleaseCause.REPLAN, reason)
        self._note(cycle, Outcome.REPLANNED, reason, cause=cause)
        resolution = self.resolve(cycle.group)
        if not isinstance(resolution, Resolved):
            return refuse_all(offered, resolution.reason)
        group = resolution.group
        topology = self._topology_of(group)
        if isinstance(topology, str):
            return refuse_all(offered, topology)
        members = self.state.members(key)
        if not has_quorum(group, members):
            return self._before_quorum(cycle, group, members, topology)
        bound = [p for p in members if self.state.is_bound(p)]
        plan = self._plan_of(group)
        return self._plan_gang(
            cycle, group, plan, members, bound, topology=topology, exclude=exclude
        )

    def _place_extra(
        self, cycle: _Cycle, group: PodGroup, topology: GangTopology, plan: Plan | None
    ) -> FilterResult:
        """A member beyond the placed quorum: placed alone, next to the gang per its policy."""
        key, offered = group.key, cycle.offered
        anchors: dict[str, str] = {}
        anchor_pods = []
        reservation = self.state.reservation(key)
        for p in self.state.members(key):
            node = self.state.bound_node(p) or (
                (reservation.node_of(p.uid) or "") if reservation is not None else ""
            )
            if node:
                anchors[p.uid] = node
                anchor_pods.append(p)
        offered_set = set(offered)
        snapshot = self.state.snapshot()
        exclude = frozenset(n for n in snapshot.names if n not in offered_set)
        spec = self._spec(
            group,
            topology,
            plan,
            (cycle.pod,),
            anchor_pods=anchor_pods,
            anchors=anchors,
            exclude=exclude,
        )
        result = place_gang(snapshot, spec)
        if isinstance(result, Unfit):
            self._note(cycle, Outcome.UNFIT, result.reason)
            return refuse_all(offered, result.reason)
        node = result.assignment[cycle.pod.uid]
        return _follow(node, offered, f"gang {key} places this extra member on {node}")

    # ---- expiry ------------------------------------------------------------------------

    def expire(self, now: float) -> list[GangEvent]:
        """Release every reservation past its deadline; the events to report."""
        events = []
        for released in self.state.expire(now):
            event = self.journal.note(
                GroupRef.parse(released.group_key), Outcome.EXPIRED, released.why
            )
            if event is not None:
                events.append(event)
        return events

    # ---- commit records ----------------------------------------------------------------

    def reserve_recorded(
        self, group: GroupRef, placements: Sequence[Binding], now: float, lifetime: float
    ) -> Reserved | NotReserved:
        """Reserve each unbound member on the node its gang's commit record names, for
        `lifetime` seconds (`core.rollforward.decide` chose `placements`: nothing is planned
        here). Refused, changing nothing, when the gang holds a reservation already, a
        member left the model, or a node lacks room."""
        key = group.key
        if self.state.reservation(key) is not None:
            return NotReserved(f"gang {key} already holds a reservation")
        members = []
        for placed in placements:
            pod = self.state.pod(placed.pod.uid)
            if pod is None:
                return NotReserved(f"pod {placed.pod.key} is not in the model")
            members.append(MemberReservation(pod.uid, pod.key, placed.node, pod.requests))
        try:
            reservation = self.state.reserve(
                Reservation(key, tuple(members), reserved_at=now, expires_at=now + lifetime)
            )
        except StateError as exc:
            return NotReserved(str(exc))
        rec = self.journal.record(key)
        if rec.proposal is not None and any(
            rec.proposal.assignment.get(m.pod_uid) != m.node for m in members
        ):
            # Planned elsewhere since the record was written: that plan is not what is held.
            rec.proposal = None
            rec.claimed = {}
        rec.arrived = set()
        nodes = ", ".join(sorted({m.node for m in members}))
        reason = f"reserved {len(members)} member(s) on {nodes}, as its commit record names"
        return Reserved(reservation, self.journal.note(group, Outcome.COMMITTED, reason))

    # ---- prioritize and preempt -----------------------------------------------------------

    def prioritize(self, pod: Pod, offered: Sequence[str]) -> dict[str, int]:
        return prioritize(self.state, pod, offered, self.fragmentation)

    def fragmentation(self) -> Mapping[str, int]:
        """0..10 per node of the default topology: how broken its domains are; empty when
        none is. Worked out once per model generation (kube-scheduler asks for every pod
        it scores)."""
        generation = self.state.generation
        if self._fragmentation is None or self._fragmentation[0] != generation:
            index = self.index(self.settings.topologies.default)
            scores: dict[str, int] = {}
            # The widest level has the fewest domains: as many as nodes means no node
            # shares a domain with another, and there is nothing to break.
            if index.domains and len(index.domains[0]) < len(index.of_node):
                scores = fragmentation_scores(index, self.state.node_infos(), index.of_node)
            self._fragmentation = (generation, scores if any(scores.values()) else {})
        return self._fragmentation[1]

    def preempt(self, victims: Mapping[str, Sequence[str]]) -> Preemption:
        return preempt(self.state, victims, self.resolve)


def _devices_blocker(pod: Pod) -> str:
    """Why the pod's device claims keep it off every node now ("" if nothing does)."""
    if pod.devices is not None:
        return pod.devices.demand.blocker
    return "its ResourceClaims are not known to Phalanx yet" if pod.resource_claims else ""


def _follow(node: str, offered: Sequence[str], why_not_others: str) -> FilterResult:
    """Only `node`. The others' reason is given only when `node` is not offered: kube-scheduler
    reads reasons only when no node is left, and naming every other node costs a walk of the
    offered list here and a decode of 500 entries per member in kube-scheduler."""
    if node in offered:
        return FilterResult((node,))
    return refuse_all(offered, why_not_others)


def _reserved_for(key: str, member: MemberReservation) -> str:
    return f"gang {key} reserved node {member.node} for this pod"


def _moved(key: str, what: str, level_key: str, names: Sequence[str]) -> str:
    """Why gang `key`'s reservation broke: `what` (a slice, a task, a set of tasks) must lie
    in one domain of `level_key`, and relabelled nodes put it in `names`."""
    return (
        f"gang {key}: {what} must lie in one {level_key} domain, but node labels changed and "
        f"its reserved nodes now lie in {len(names)}: {', '.join(names)}"
    )


def _split(index: TopologyIndex, level: int, nodes: Iterable[str]) -> list[str] | None:
    """The domains of `level` that `nodes` lie in, by name, when they are not all in one;
    None when they are. A node in none (gone, or without an ad-hoc topology's label)
    counts as split and is named as `node <name> (in none)`."""
    domains: set[str] = set()
    outside: set[str] = set()
    for node in nodes:
        domain = index.domain(level, node)
        if domain is None:
            outside.add(f"node {node} (in none)")
        else:
            domains.add(domain.name)
    if len(domains) > 1 or outside:
        return [*sorted(domains), *sorted(outside)]
    return None
