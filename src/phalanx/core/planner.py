"""GangPlanner: the decisions behind filter, prioritize and preempt, on the cluster model.

For a gang member's filter the planner (1) waits for quorum, (2) on the first member plans
and reserves the whole gang at once, (3) later members follow their reservation, (4) if
kube-scheduler did not offer a reserved node it re-plans once without that node.
Reservations expire after the group's timeout (`expire`). Pods in no group get a
GPU-aware fit check that treats reserved capacity as used.

Pure: time comes in as `now` (seconds, any monotonic origin); the caller commits nothing
else. What happened is appended to `events` for the adapters (metrics, Kubernetes Events).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from phalanx.core import eligibility
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.inventory import parse_placement
from phalanx.core.model import (
    CPU,
    DEFAULT_TIMEOUT_SECONDS,
    Placement,
    Pod,
    PodGroup,
)
from phalanx.core.plan import PlanError, PlanIntent, PlanNode, derive_intent, parse_plan
from phalanx.core.snapshot import (
    COMMON_RESOURCES,
    ClusterState,
    MemberReservation,
    Reservation,
    Snapshot,
)

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority
COMMON_SET = frozenset(COMMON_RESOURCES)
# Distinct pod shapes (tolerations, selectors, affinity) whose eligible nodes are cached;
# past this the cache starts over rather than grow without bound.
ELIGIBILITY_CACHE_SIZE = 1024


class Outcome(StrEnum):
    """Gang decisions, as counted by phalanx_gang_decisions_total{result}."""

    COMMITTED = "committed"
    WAITING = "waiting-for-members"
    UNFIT = "unfit"
    INVALID = "invalid"
    EXPIRED = "expired"
    REPLANNED = "replanned"
    RELEASED = "released"
    ROLLED_FORWARD = "rolled-forward"
    BOUND = "bound"


@dataclass(frozen=True, slots=True)
class GangEvent:
    outcome: Outcome
    group_key: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class FilterResult:
    """The framework answer for one pod: feasible nodes and why the others are not."""

    feasible: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)  # preemption might help
    unresolvable: Mapping[str, str] = field(default_factory=dict)  # it would not
    error: str = ""


@dataclass(slots=True)
class GroupRecord:
    """What Phalanx knows about one gang beyond the model: shown in /debug and status."""

    key: str
    first_filter_at: float | None = None
    last_outcome: Outcome | None = None
    last_reason: str = ""
    placed: Placed | None = None
    replans: int = 0
    bound_at: float | None = None


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    default_placement: Placement = field(default_factory=Placement)
    default_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    # Re-plans allowed when kube-scheduler does not offer a reserved node, per reservation.
    replan_limit: int = 1


def _all(nodes: Sequence[str], reason: str) -> dict[str, str]:
    return dict.fromkeys(nodes, reason)


class GangPlanner:
    """Decisions for filter / prioritize / preempt over a `ClusterState` (single writer)."""

    def __init__(self, state: ClusterState, settings: PlannerSettings | None = None) -> None:
        self.state = state
        self.settings = settings or PlannerSettings()
        self.records: dict[str, GroupRecord] = {}
        self.events: list[GangEvent] = []
        self._plans: dict[str, tuple[str, PlanNode, PlanIntent]] = {}
        self._eligible: dict[tuple[object, ...], tuple[int, frozenset[str]]] = {}

    # ---- groups ------------------------------------------------------------------------

    def record(self, key: str) -> GroupRecord:
        rec = self.records.get(key)
        if rec is None:
            rec = self.records[key] = GroupRecord(key)
        return rec

    def note(self, key: str, outcome: Outcome, reason: str, now: float) -> None:
        rec = self.record(key)
        # A gang stuck waiting is reported once per change of reason, not once per filter.
        if rec.last_outcome is not outcome or rec.last_reason != reason:
            self.events.append(GangEvent(outcome, key, reason, now))
        rec.last_outcome = outcome
        rec.last_reason = reason

    def forget_gone(self) -> None:
        """Drop what is remembered of gangs that left the model (no PodGroup, no members,
        no reservation), so a long-running instance does not grow with every gang it saw."""
        live = self.state.group_keys() | set(self.state.reservations())
        for key in [k for k in self.records if k not in live]:
            del self.records[key]
        for key in [k for k in self._plans if k not in live]:
            del self._plans[key]

    def resolve(self, pod: Pod) -> PodGroup | str:
        """The gang `pod` belongs to, or why it cannot be scheduled as one."""
        assert pod.group is not None
        key = pod.group.key
        error = self.state.group_error(key)
        if error is not None:
            return f"PodGroup {key} is invalid: {error}"
        members = self.state.members(key)
        group = self.state.group(key)
        if group is None:
            declared = {p.min_member for p in members if p.min_member is not None}
            if not declared:
                broken = next((p for p in members if p.invalid), None)
                if broken is not None:
                    return f"gang {key}: pod {broken.name}: {broken.invalid}"
                return f"waiting for PodGroup {key} to exist (pods name it with a label)"
            if len(declared) > 1:
                return f"members of gang {key} disagree on phalanx.io/min-member: " + ", ".join(
                    str(n) for n in sorted(declared)
                )
            timeouts = {p.timeout_seconds for p in members if p.timeout_seconds is not None}
            group = PodGroup(
                namespace=pod.group.namespace,
                name=pod.group.name,
                min_member=declared.pop(),
                timeout_seconds=min(timeouts)
                if timeouts
                else self.settings.default_timeout_seconds,
                from_crd=False,
            )
        if group.placement is None:
            # The PodGroup does not say: every member must agree, else the default applies.
            placements = {p.placement for p in members if p.placement}
            if len(placements) > 1:
                return f"members of gang {key} disagree on phalanx.io/placement: " + ", ".join(
                    sorted(placements)
                )
            try:
                placement = (
                    parse_placement(placements.pop())
                    if placements
                    else self.settings.default_placement
                )
            except ValueError as exc:
                return f"gang {key}: {exc}"
            group = replace(group, placement=placement)
        return group

    def _plan_of(self, group: PodGroup) -> tuple[PlanNode, PlanIntent] | None:
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

    def filter(self, pod: Pod, offered: Sequence[str], now: float) -> FilterResult:
        self.expire(now)
        if pod.invalid:
            return FilterResult(unresolvable=_all(offered, pod.invalid))
        known = self.state.pod(pod.uid)
        if known is not None:
            pod = known  # the model's copy carries what informers saw since
        if pod.group is None:
            return self._filter_single(pod, offered)
        return self._filter_member(pod, offered, now)

    def eligible_nodes(self, pod: Pod) -> frozenset[str]:
        """Nodes `pod` may use capacity aside; cached per eligibility key until the node
        topology changes (heartbeats do not change it)."""
        key = eligibility.eligibility_key(pod)
        generation = self.state.topology_generation
        cached = self._eligible.get(key)
        if cached is not None and cached[0] == generation:
            return cached[1]
        nodes = frozenset(
            info.name
            for info in self.state.node_infos().values()
            if eligibility.ineligibility(pod, info.node) is None
        )
        if len(self._eligible) > ELIGIBILITY_CACHE_SIZE:
            self._eligible.clear()
        self._eligible[key] = (generation, nodes)
        return nodes

    def _filter_single(self, pod: Pod, offered: Sequence[str]) -> FilterResult:
        # The hot path of kube-scheduler's serial filter calls: a set lookup and four int
        # comparisons per offered node; reasons are worked out only for the rest.
        eligible = self.eligible_nodes(pod)
        request = pod.requests
        feasible: list[str]
        if set(request) <= COMMON_SET:
            frees = self.state.common_free()
            c, m, p, g = (request.get(k) for k in COMMON_RESOURCES)
            feasible = [
                n
                for n in offered
                if (f := frees.get(n)) is not None
                and f[3] >= g
                and f[0] >= c
                and f[1] >= m
                and f[2] >= p
            ]
        else:
            infos = self.state.node_infos()
            feasible = [
                n for n in offered if (i := infos.get(n)) is not None and request.fits_in(i.free)
            ]
        if len(eligible) < len(self.state.node_infos()):
            feasible = [n for n in feasible if n in eligible]
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        if len(feasible) < len(offered):
            snapshot = self.state.snapshot()
            kept = set(feasible)
            for name in offered:
                if name in kept:
                    continue
                verdict = self._fit_single(snapshot, pod, name)
                if verdict is not None:
                    (failed if verdict[0] else unresolvable)[name] = verdict[1]
        return FilterResult(tuple(feasible), failed, unresolvable)

    def _fit_single(self, snapshot: Snapshot, pod: Pod, name: str) -> tuple[bool, str] | None:
        """None if `pod` fits on `name`; else (preemption might help, reason)."""
        info = snapshot.get(name)
        if info is None:
            return (False, "node unknown to Phalanx (not yet in its cache)")
        why = eligibility.ineligibility(pod, info.node)
        if why is not None:
            return (False, f"node {why}")
        if pod.requests.fits_in(info.free):
            return None
        short = pod.requests.shortfall(info.free)
        text = ", ".join(f"Insufficient {k}" for k in short)
        if info.reserved and pod.requests.fits_in(info.free + info.reserved):
            text += f" ({info.reserved.gpus()} GPU(s) here are reserved for gangs)"
            return (False, text)  # preempting running pods would not free a reservation
        return (True, text)

    def _filter_member(self, pod: Pod, offered: Sequence[str], now: float) -> FilterResult:
        assert pod.group is not None
        key = pod.group.key
        rec = self.record(key)
        if rec.first_filter_at is None:
            rec.first_filter_at = now
        if self.state.is_bound(pod):
            node = self.state.bound_node(pod)
            return self._follow(node, offered, f"pod {pod.key} is already bound to {node}")
        reservation = self.state.reservation(key)
        if reservation is not None:
            member = reservation.member(pod.uid)
            if member is not None:
                if member.node in offered:
                    return self._follow(member.node, offered, _reserved_for(key, member))
                return self._replan(pod, member, offered, now)
        group = self.resolve(pod)
        if isinstance(group, str):
            outcome = Outcome.WAITING if group.startswith("waiting") else Outcome.INVALID
            self.note(key, outcome, group, now)
            return FilterResult(unresolvable=_all(offered, group))
        members = self.state.members(key)
        if len(members) < group.min_member:
            reason = f"waiting for gang members: {len(members)}/{group.min_member} exist"
            self.note(key, Outcome.WAITING, reason, now)
            return FilterResult(unresolvable=_all(offered, reason))
        try:
            plan = self._plan_of(group)
        except PlanError as exc:
            reason = f"phalanx.io/plan on PodGroup {key} is invalid: {exc}"
            self.note(key, Outcome.INVALID, reason, now)
            return FilterResult(unresolvable=_all(offered, reason))
        bound = [p for p in members if self.state.is_bound(p)]
        if len(bound) >= group.min_member or reservation is not None:
            # The quorum is placed (or reserved): this member joins as capacity allows.
            return self._place_extra(pod, group, plan, offered, now)
        return self._plan_gang(
            pod, group, plan, offered, members=members, bound=bound, now=now, exclude=frozenset()
        )

    def _follow(self, node: str, offered: Sequence[str], why_not_others: str) -> FilterResult:
        others = {n: why_not_others for n in offered if n != node}
        return FilterResult((node,) if node in offered else (), {}, others)

    def _plan_gang(
        self,
        pod: Pod,
        group: PodGroup,
        plan: tuple[PlanNode, PlanIntent] | None,
        offered: Sequence[str],
        *,
        members: Sequence[Pod],
        bound: Sequence[Pod],
        now: float,
        exclude: frozenset[str],
    ) -> FilterResult:
        key = group.key
        unbound = tuple(p for p in members if not self.state.is_bound(p))
        anchors = {p.uid: self.state.bound_node(p) for p in bound}
        snapshot = self.state.snapshot()

        def attempt(to_place: tuple[Pod, ...]) -> Placed | Unfit:
            return place_gang(
                snapshot,
                GangSpec(
                    key=key,
                    placement=group.placement or self.settings.default_placement,
                    members=to_place,
                    anchors=anchors,
                    anchor_pods=tuple(bound),
                    plan=plan[0] if plan else None,
                    intent=plan[1] if plan else None,
                    exclude=exclude,
                ),
            )

        result = attempt(unbound)
        needed = group.min_member - len(bound)
        if isinstance(result, Unfit) and plan is None and 0 < needed < len(unbound):
            # Elastic gang: the quorum alone may fit where every member does not.
            others = [p for p in unbound if p.uid != pod.uid][: needed - 1]
            subset = tuple(sorted((pod, *others), key=lambda p: p.name))
            smaller = attempt(subset)
            if isinstance(smaller, Placed):
                result = smaller
        if isinstance(result, Unfit):
            self.record(key).placed = None
            self.note(key, Outcome.UNFIT, result.reason, now)
            return FilterResult(unresolvable=_all(offered, result.reason))
        reservation = Reservation(
            group_key=key,
            members=tuple(
                MemberReservation(p.uid, p.key, result.assignment[p.uid], p.requests)
                for p in result.members
            ),
            reserved_at=now,
            expires_at=now + group.timeout_seconds,
            detail=result,
        )
        self.state.reserve(reservation)
        rec = self.record(key)
        rec.placed = result
        self.note(
            key,
            Outcome.COMMITTED,
            f"reserved {len(result.members)} member(s) on {', '.join(result.nodes)}",
            now,
        )
        member = reservation.member(pod.uid)
        if member is None:
            reason = f"gang {key} is reserved without this pod; it joins once the quorum is bound"
            return FilterResult(unresolvable=_all(offered, reason))
        if member.node not in offered:
            return self._replan(pod, member, offered, now)
        return self._follow(member.node, offered, _reserved_for(key, member))

    def _replan(
        self, pod: Pod, member: MemberReservation, offered: Sequence[str], now: float
    ) -> FilterResult:
        """kube-scheduler's own filters rejected the reserved node: re-plan once without it."""
        assert pod.group is not None
        key = pod.group.key
        rec = self.record(key)
        self.state.release(key)
        refused = f"kube-scheduler did not offer node {member.node} reserved for pod {pod.key}"
        if rec.replans >= self.settings.replan_limit:
            rec.replans = 0
            reason = f"{refused} again after a re-plan; reservation released"
            self.note(key, Outcome.RELEASED, reason, now)
            return FilterResult(unresolvable=_all(offered, reason))
        rec.replans += 1
        self.note(key, Outcome.REPLANNED, f"{refused}; re-planning without it", now)
        group = self.resolve(pod)
        if isinstance(group, str):
            return FilterResult(unresolvable=_all(offered, group))
        members = self.state.members(key)
        bound = [p for p in members if self.state.is_bound(p)]
        plan = self._plan_of(group)
        exclude = frozenset({member.node})
        return self._plan_gang(
            pod, group, plan, offered, members=members, bound=bound, now=now, exclude=exclude
        )

    def _place_extra(
        self,
        pod: Pod,
        group: PodGroup,
        plan: tuple[PlanNode, PlanIntent] | None,
        offered: Sequence[str],
        now: float,
    ) -> FilterResult:
        """A member beyond the placed quorum: placed alone, next to the gang per its policy."""
        key = group.key
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
        result = place_gang(
            snapshot,
            GangSpec(
                key=key,
                placement=group.placement or self.settings.default_placement,
                members=(pod,),
                anchors=anchors,
                anchor_pods=tuple(anchor_pods),
                plan=plan[0] if plan else None,
                intent=plan[1] if plan else None,
                exclude=frozenset(n for n in snapshot.names if n not in offered_set),
            ),
        )
        if isinstance(result, Unfit):
            self.note(key, Outcome.UNFIT, result.reason, now)
            return FilterResult(unresolvable=_all(offered, result.reason))
        node = result.assignment[pod.uid]
        return self._follow(node, offered, f"gang {key} places this extra member on {node}")

    # ---- expiry ------------------------------------------------------------------------

    def expire(self, now: float) -> list[Reservation]:
        released = self.state.expire(now)
        for r in released:
            unbound = [m.pod_key for m in r.members if m.state.value == "reserved"]
            timeout = round(r.expires_at - r.reserved_at)
            self.note(
                r.group_key,
                Outcome.EXPIRED,
                f"reservation expired after {timeout}s with members still unbound: "
                + ", ".join(unbound),
                now,
            )
        return released

    # ---- prioritize --------------------------------------------------------------------

    def score(self, pod: Pod, offered: Sequence[str]) -> dict[str, int]:
        """0..10 per offered node: the reserved node for gang members, best fit for others."""
        known = self.state.pod(pod.uid)
        pod = known or pod
        if pod.group is not None:
            r = self.state.reservation(pod.group.key)
            node = r.node_of(pod.uid) if r is not None else None
            if node is not None:
                return {n: MAX_SCORE if n == node else 0 for n in offered}
        # kube-scheduler asks for every feasible node of every pod: read the live map (no
        # snapshot copy) and work each distinct (capacity, free) pair out once.
        infos = self.state.node_infos()
        memo: dict[tuple[int, int, bool], int] = {}
        gpus = pod.requests.gpus()
        cpu = pod.requests.get(CPU)
        scores: dict[str, int] = {}
        for n in offered:
            info = infos.get(n)
            if info is None:
                scores[n] = 0
                continue
            total_gpus = info.node.allocatable.gpus()
            if gpus:
                key = (total_gpus, info.free.gpus(), True)
            else:
                key = (info.node.allocatable.get(CPU), info.free.get(CPU), total_gpus > 0)
            score = memo.get(key)
            if score is None:
                score = memo[key] = _best_fit_score(key, gpus if gpus else cpu, gpu_pod=bool(gpus))
            scores[n] = score
        return scores

    # ---- preempt -----------------------------------------------------------------------

    def filter_victims(
        self, preemptor: Pod, victims: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]]:
        """Keep only victim sets that leave every running gang whole or entirely gone.

        Per node: a victim set that would take some members of a bound gang but leave it
        below minMember is widened to the gang's other members on the same node when that
        removes the gang entirely, and otherwise the node is dropped.
        """
        kept: dict[str, list[str]] = {}
        for node, uids in victims.items():
            chosen = list(dict.fromkeys(uids))
            ok = True
            touched = {
                p.group.key
                for u in chosen
                if (p := self.state.pod(u)) is not None and p.group is not None
            }
            for key in sorted(touched):
                group = self.state.group(key)
                members = self.state.bound_members(key)
                min_member = (
                    group.min_member
                    if group
                    else max((p.min_member or 1 for p in members), default=1)
                )
                remaining = [p for p in members if p.uid not in chosen]
                if not remaining or len(remaining) >= min_member:
                    continue
                if all(self.state.bound_node(p) == node for p in remaining):
                    chosen.extend(p.uid for p in remaining)
                else:
                    ok = False
                    break
            if ok:
                kept[node] = chosen
        return kept


def _reserved_for(key: str, member: MemberReservation) -> str:
    return f"gang {key} reserved node {member.node} for this pod"


def _best_fit_score(node: tuple[int, int, bool], request: int, *, gpu_pod: bool) -> int:
    """0..10: how full the node's scarce resource would be with the pod on it (best fit).

    `node` is (capacity, free, has GPUs) of GPUs for a GPU pod, of CPU otherwise; a pod
    without GPUs scores 0 on GPU nodes, to keep them for GPU work.
    """
    total, free, has_gpus = node
    if (not gpu_pod and has_gpus) or total <= 0:
        return 0
    used_after = total - free + request
    return max(0, min(MAX_SCORE, (MAX_SCORE * used_after) // total))
