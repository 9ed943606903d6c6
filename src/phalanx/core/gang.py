"""The gang transaction: place every member on an overlay of the snapshot, or nothing.

`place_gang` never mutates the snapshot: it tries members on a copy-on-write `Overlay` and
returns either a `Placed` proposal (member -> node, plan outcome, where it landed) or an
`Unfit` with the closest miss. Committing the proposal is `ClusterState.reserve`, one step.
The texts people read come from `phalanx.core.gang_explain`.

How members are placed:
1. Members are grouped into *units* that must share a node: the plan's hard units
   (composite, stream, loop/branch bodies, connected differentiable members), or every
   member together for `same-node`, or one member per unit otherwise; then units holding
   members of one `together` group (pods sharing an unallocated ResourceClaim, whose
   devices will be on one node) are joined.
2. Candidate *domains* come from the policy: the whole cluster, each NVLink clique (or a
   lone node) for `interconnect-local`, each value of the label for `domain:<key>`.
   Domains are tried best-fit first (least spare GPUs), ties by name.
   A gang with a topology constraint walks its levels instead (`phalanx.core.gang_topology`):
   the domains of the preferred level, tightest fit first, then one level wider at a time
   up to the required level (or the whole cluster), slices inside the slice level; tasks'
   and sets' preferred levels are then tried inside the domain found, best effort.
3. In a domain, units are placed largest-first; if that fails for a gang whose units
   differ, most constrained first (fewest nodes a unit fits on) is tried once more, so a
   unit that could go anywhere does not take the only node another fits. Interchangeable
   units (same requests, same eligible nodes, no plan relations) are placed in bulk with
   per-node fit counts, so a 64-member gang costs O(nodes log nodes), not
   O(nodes × members). Units with plan relations are scored one by one (soft rules as
   preferences) with bounded backtracking. When all of that fails for a gang whose units
   differ, a depth-first search over every node each unit fits, bounded by a budget of
   node visits (`phalanx.core.gang_search`), finds a placement whenever one exists and
   the budget allows (every gang of up to 5 units on up to 4 nodes).
   Given a topology index, equally good nodes are told apart by how tight their domains
   are, so a gang fills broken cliques and leaves whole ones free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from phalanx.core import eligibility
from phalanx.core.gang_explain import LevelMiss, landing_text, miss_reason, unfit_reason
from phalanx.core.gang_search import Budget, search
from phalanx.core.gang_topology import NotFound, TopologySearch
from phalanx.core.gang_trial import HOPELESS_TRIES, Failure, Trial, Unit, requested
from phalanx.core.model import (
    CPU,
    EMPTY,
    MEMORY,
    Placement,
    Pod,
    PolicyKind,
    Resources,
)
from phalanx.core.plan import PlanIntent, PlanNode, PlanOutcome, describe
from phalanx.core.snapshot import Overlay, Snapshot
from phalanx.core.topology import (
    CLIQUE_LABEL,
    CLUSTER,
    GangTopology,
    TaskPreferenceLevel,
    TopologyIndex,
    build_index,
    short_name,
)
from phalanx.core.topology_usage import DomainFree, domain_free, shared_levels, tightness

# Alternatives tried per plan unit, and plan-unit tries in all, before giving up a domain.
BRANCHING = 4
BACKTRACK_BUDGET = 256
# Gangs with more units than this get no matching fallback (it is O(units x edges)).
MATCHING_UNITS = 256


@dataclass(frozen=True, slots=True)
class Placed:
    """A feasible, not yet committed placement of a gang's members."""

    assignment: Mapping[str, str]  # pod uid -> node name
    members: tuple[Pod, ...]
    outcome: PlanOutcome | None = None
    # The domain the gang landed in: the clique / label value for interconnect-local and
    # domain:, the narrowest topology domain holding every member for a topology constraint.
    domain: str = ""
    # The narrowest topology level whose one domain holds every member ("" without a
    # topology index, or when the gang spans the widest level's domains).
    level: str = ""
    explanation: str = ""  # for a topology constraint: where it landed, why not narrower

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.assignment.values())))

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.outcome.warnings if self.outcome is not None else ()


@dataclass(frozen=True, slots=True)
class Unfit:
    """No placement exists on this snapshot; `reason` names what was missing and where."""

    reason: str


@dataclass(frozen=True, slots=True)
class GangSpec:
    """Everything `place_gang` needs to know about one gang."""

    key: str
    placement: Placement
    members: tuple[Pod, ...]  # unbound members to place
    anchors: Mapping[str, str] = field(default_factory=dict)  # bound member uid -> node
    anchor_pods: tuple[Pod, ...] = ()
    plan: PlanNode | None = None
    intent: PlanIntent | None = None
    exclude: frozenset[str] = frozenset()
    # None: no topology (the policy alone decides). Unconstrained: only the tie-breaks.
    topology: GangTopology | None = None
    # The nodes of `topology.topology` grouped into domains; built from the snapshot when
    # None (callers cache it per ClusterState.topology_generation).
    index: TopologyIndex | None = None
    # Member uids that must share one node whatever the policy (they share a ResourceClaim:
    # `phalanx.core.dra_demand.shared_out`).
    together: tuple[frozenset[str], ...] = ()


def _joined(groups: list[list[Pod]], together: Sequence[frozenset[str]]) -> list[list[Pod]]:
    """The groups, with those holding members of one `together` set made one (in order)."""
    for uids in together:
        hit = [i for i, g in enumerate(groups) if any(p.uid in uids for p in g)]
        if len(hit) > 1:
            first = groups[hit[0]]
            for i in hit[1:]:
                first.extend(groups[i])
            groups = [g for i, g in enumerate(groups) if i not in hit[1:]]
    return groups


def _fit_key(free: Resources, request: Resources, count: int) -> tuple[int, int, int]:
    """Best-fit order: what is left after `count` copies, GPUs first (least leftover first)."""
    return (
        free.gpus() - request.gpus() * count,
        free.get(CPU) - request.get(CPU) * count,
        free.get(MEMORY) - request.get(MEMORY) * count,
    )


class _Placer:
    """One gang's trial placement; see module docstring for the algorithm."""

    def __init__(self, snapshot: Snapshot, spec: GangSpec) -> None:
        self.snapshot = snapshot
        self.spec = spec
        self.ineligible: dict[str, int] = {}
        self.unit_ids: dict[int, frozenset[str]] = {}
        # Per eligibility key: the nodes it allows. Computed once, so each node's reason
        # is counted once however many members share the key.
        self._eligible: dict[tuple[object, ...], frozenset[str]] = {}
        self.index = _index_for(snapshot, spec)
        # Free capacity per topology domain over the gang's usable nodes, and the level and
        # ranks that tell equal nodes apart (set by place()).
        self._free: DomainFree | None = None
        self._ranks: tuple[int, list[int]] | None = None
        # What is left of the last-resort search's node visits, for all domains together.
        self._budget = Budget()

    # ---- eligibility -------------------------------------------------------------------

    def eligible_nodes(self, pods: Iterable[Pod], tags: frozenset[str]) -> frozenset[str]:
        """Nodes every pod may use (capacity aside), counting why the others may not."""
        cache = self._eligible
        result: frozenset[str] | None = None
        for pod in pods:
            key = (*eligibility.eligibility_key(pod), tags)
            nodes = cache.get(key)
            if nodes is None:
                nodes = cache[key] = self._eligible_for(pod, tags)
            result = nodes if result is None else result & nodes
        return result if result is not None else frozenset()

    def _eligible_for(self, pod: Pod, tags: frozenset[str]) -> frozenset[str]:
        ok = []
        exclude = self.spec.exclude
        reasons = self.ineligible
        for info in self.snapshot:
            if info.name in exclude:
                reasons["were excluded after kube-scheduler refused them"] = (
                    reasons.get("were excluded after kube-scheduler refused them", 0) + 1
                )
                continue
            why = eligibility.ineligibility(pod, info.node, tags)
            if why is None:
                ok.append(info.name)
            else:
                reasons[why] = reasons.get(why, 0) + 1
        return frozenset(ok)

    # ---- units -------------------------------------------------------------------------

    def build_units(self) -> list[Unit]:
        spec = self.spec
        members = spec.members
        groups: list[list[Pod]]
        if spec.placement.kind is PolicyKind.SAME_NODE:
            groups = [list(members)] if members else []
        elif spec.intent is not None:
            by_id = {p.plan_node: p for p in (*members, *spec.anchor_pods) if p.plan_node}
            groups = []
            seen: set[str] = set()
            for unit_ids in spec.intent.units:
                pods = [by_id[i] for i in sorted(unit_ids) if i in by_id and by_id[i] in members]
                if pods:
                    groups.append(pods)
                    seen.update(p.uid for p in pods)
            groups.extend([p] for p in members if p.uid not in seen)
        else:
            groups = [[p] for p in members]
        if spec.together:
            groups = _joined(groups, spec.together)
        units: list[Unit] = []
        for i, pods in enumerate(groups):
            ids = frozenset(p.plan_node for p in pods if p.plan_node)
            tags: frozenset[str] = frozenset()
            if spec.intent is not None:
                for pid in ids:
                    tags |= spec.intent.required_tags.get(pid, frozenset())
            requests = EMPTY
            for p in pods:
                requests = requests + p.requests
            units.append(
                Unit(
                    index=i,
                    members=tuple(pods),
                    requests=requests,
                    eligible=self.eligible_nodes(pods, tags),
                    ids=ids,
                    relational=self._is_relational(ids),
                )
            )
        self.unit_ids = {u.index: u.ids for u in units}
        classes: dict[tuple[object, ...], int] = {}
        for u in units:
            key: tuple[object, ...] = (u.requests, u.eligible) if not u.relational else (u.index,)
            u.cls = classes.setdefault(key, len(classes))
        return units

    def _is_relational(self, ids: frozenset[str]) -> bool:
        intent = self.spec.intent
        if intent is None or not ids:
            return False
        if any(ids & together and not together <= ids for together in intent.together):
            return True
        return any(any(ids & s for s in sets) for sets in (*intent.apart, *intent.trials))

    def _usable(self, units: Sequence[Unit]) -> frozenset[str]:
        distinct = {u.eligible for u in units}
        if len(distinct) == 1:  # the usual: members share one eligibility, no copy
            return distinct.pop()
        return frozenset().union(*distinct)

    # ---- domains (policies) ------------------------------------------------------------

    def domains(self, units: Sequence[Unit]) -> list[tuple[str, tuple[str, ...], bool]]:
        """(domain name, node names, whether its spare capacity could hold the gang), the
        ones that could first, best fit (least spare GPUs) first, ties by name."""
        policy = self.spec.placement
        usable = self._usable(units)
        anchor_nodes = set(self.spec.anchors.values())
        if policy.kind in (PolicyKind.INTERCONNECT_LOCAL, PolicyKind.DOMAIN):
            label = (
                CLIQUE_LABEL if policy.kind is PolicyKind.INTERCONNECT_LOCAL else policy.domain_key
            )
            by_value: dict[str, list[str]] = {}
            for info in self.snapshot:
                value = info.node.labels.get(label, "")
                if not value:
                    if policy.kind is PolicyKind.DOMAIN:
                        continue
                    value = f"node {info.name}"  # a node outside any clique is its own domain
                else:
                    value = f"{label}={value}"
                by_value.setdefault(value, []).append(info.name)
            candidates = [
                (name, tuple(n for n in nodes if n in usable))
                for name, nodes in by_value.items()
                if not anchor_nodes or anchor_nodes <= set(nodes)
            ]
        elif policy.kind is PolicyKind.SAME_NODE and anchor_nodes:
            candidates = [("", tuple(n for n in sorted(anchor_nodes) if n in usable))]
        else:
            candidates = [("", tuple(n for n in self.snapshot.names if n in usable))]
        if len(candidates) == 1:
            return [(candidates[0][0], candidates[0][1], True)]
        total = requested(units)
        need_gpus = total.gpus()
        ranked = []
        for name, nodes in candidates:
            spare = EMPTY
            for n in nodes:
                spare = spare + self.snapshot.nodes[n].free
            ranked.append((spare.gpus() - need_gpus, total.fits_in(spare), name, nodes))
        # Domains that cannot hold the total are kept last: they still yield a "best" reason.
        ranked.sort(key=lambda t: (not t[1], t[0] if t[1] else -t[0], t[2]))
        return [(name, nodes, fits) for _, fits, name, nodes in ranked]

    # ---- placing -----------------------------------------------------------------------

    def place(self) -> Placed | Unfit:
        spec = self.spec
        if not spec.members:
            return Placed(assignment={}, members=())
        units = self.build_units()
        order = sorted(
            units,
            key=lambda u: (
                -u.requests.gpus(),
                -u.requests.get(CPU),
                -u.requests.get(MEMORY),
                u.cls,
                u.members[0].name,
            ),
        )
        constrained = spec.topology is not None and spec.topology.constrained
        # Free capacity per domain ranks the domains for the tie-breaks and bounds the
        # constrained search; with no domain of several nodes and no constraint, nothing
        # reads it, and summing it is a pass over every node of every plan.
        if self.index is not None and (constrained or shared_levels(self.index)):
            usable = self._usable(units)
            self._free = domain_free(self.index, self.snapshot.nodes, usable)
            self._ranks = tightness(self.index, self._free)
            if spec.topology is not None and spec.topology.constrained:
                found = TopologySearch(
                    self,
                    self.snapshot,
                    spec.topology,
                    self.index,
                    self._free,
                    members=spec.members,
                    anchors=spec.anchors,
                    anchor_pods=spec.anchor_pods,
                ).search(units, order, usable)
                if isinstance(found, NotFound):
                    return self.unfit(
                        units, found.detail, policy=f"{spec.placement}, {spec.topology}"
                    )
                return self.placed(units, found.chosen, misses=found.misses, unmet=found.unmet)
        best: tuple[int, str, str] | None = None  # (units placed, domain, reason)
        domains = self.domains(units)
        hopeless = 0
        for domain, nodes, could_fit in domains:
            if not could_fit:
                # Only a few hopeless domains are tried, for the "best" in the reason.
                if best is not None or hopeless == HOPELESS_TRIES:
                    break
                hopeless += 1
            result = self.place_in(order, nodes)
            if isinstance(result, dict):
                return self.placed(units, result, domain=domain)
            if best is None or result.placed_units > best[0]:
                best = (result.placed_units, domain, result.reason)
        return Unfit(self._unfit_reason(units, domains, best))

    def placed(
        self,
        units: Sequence[Unit],
        chosen: Mapping[int, str],
        *,
        domain: str = "",
        misses: Sequence[LevelMiss] = (),
        unmet: str = "",
    ) -> Placed:
        """The proposal for `chosen` (unit index -> node), with where it landed."""
        spec = self.spec
        assignment = {p.uid: chosen[u.index] for u in units for p in u.members}
        level, explanation = "", ""
        if self.index is not None:
            nodes = {*assignment.values(), *spec.anchors.values()}
            at, landed = _landing(self.index, nodes)
            level = self.index.topology.levels[at] if at != CLUSTER else ""
            if spec.topology is not None and spec.topology.constrained:
                domain = landed
                total = requested(units)
                explanation = landing_text(
                    spec.topology,
                    misses,
                    landed,
                    total,
                    preferences=self._preferred_landings(spec.topology, assignment),
                    unmet=unmet,
                )
        return Placed(
            assignment=assignment,
            members=spec.members,
            outcome=self._outcome(assignment),
            domain=domain,
            level=level,
            explanation=explanation,
        )

    def _preferred_landings(
        self, topology: GangTopology, assignment: Mapping[str, str]
    ) -> tuple[tuple[TaskPreferenceLevel, int], ...]:
        """Each preference with the narrowest level whose one domain holds its members
        (bound ones too); those with no member are left out."""
        if self.index is None or not topology.preferences:
            return ()
        spec = self.spec
        nodes_of = {p.uid: assignment[p.uid] for p in spec.members if p.uid in assignment}
        nodes_of.update(spec.anchors)
        pods = (*spec.members, *spec.anchor_pods)
        found = []
        for pref in topology.preferences:
            nodes = {nodes_of[p.uid] for p in pods if p.task in pref.tasks and p.uid in nodes_of}
            if nodes:
                found.append((pref, _landing(self.index, nodes)[0]))
        return tuple(found)

    def _outcome(self, assignment: Mapping[str, str]) -> PlanOutcome | None:
        spec = self.spec
        if spec.plan is None or spec.intent is None:
            return None
        by_uid = {p.uid: p for p in (*spec.members, *spec.anchor_pods)}
        full = {**spec.anchors, **assignment}
        leaf_nodes = {by_uid[u].plan_node: n for u, n in full.items() if by_uid[u].plan_node}
        eligible: set[str] = set()
        for p in spec.members:
            eligible |= self.eligible_nodes([p], frozenset())
        return describe(spec.plan, spec.intent, leaf_nodes, eligible_nodes=len(eligible))

    def trial(self) -> Trial:
        return Trial(Overlay(self.snapshot), dict.fromkeys(self.spec.anchors.values(), 1))

    def place_in(
        self, order: Sequence[Unit], nodes: Sequence[str], trial: Trial | None = None
    ) -> dict[int, str] | Failure:
        """Place every unit on `nodes` (one domain), or report how far it got. On a shared
        `trial` a success stays recorded in it and a failure leaves it as it was."""
        if trial is None:
            trial = self.trial()
        first = self._solve(order, nodes, trial)
        if not isinstance(first, Failure):
            return first
        # Largest first is greedy across units that differ: one may take the only node
        # another could use. Then most constrained first (fewest nodes it fits on) gets a
        # second try, then a matching, and last the bounded exhaustive search; the first
        # failure still tells why.
        if len({u.cls for u in order}) == 1:
            return first  # alike units: bulk is complete for them
        options = self._options(order, nodes, trial)
        if options is None:
            return first
        if not any(u.relational for u in order):
            constrained = sorted(order, key=lambda u: len(options[u.cls]))  # stable
            if [u.index for u in constrained] != [u.index for u in order]:
                second = self._solve(constrained, nodes, trial)
                if not isinstance(second, Failure):
                    return second
            matched = self._one_node_each(constrained, options)
            if matched is not None:
                for u in order:
                    trial.take(matched[u.index], u)
                return matched
        found = search(
            order,
            nodes,
            trial,
            self._budget,
            candidates=self._candidates,
            preference=self._preference,
            spread=self.spec.placement.kind is PolicyKind.SPREAD,
        )
        return first if found is None else found

    def _preference(
        self, unit: Unit, name: str, free: Resources, in_use: bool
    ) -> tuple[object, ...]:
        """The searched order of nodes for one unit: GPU-less units off GPU nodes, then
        nodes the gang uses, then best fit and the tightest domain, ties by name."""
        return (
            not unit.requests.gpus() and self.snapshot.nodes[name].node.allocatable.gpus() > 0,
            not in_use,
            _fit_key(free, unit.requests, 1),
            self._tightness(name),
            name,
        )

    def _options(
        self, order: Sequence[Unit], nodes: Sequence[str], trial: Trial
    ) -> dict[int, list[str]] | None:
        """Per class of units, the nodes one of them fits on now; None when some class
        plainly cannot fit (fewer copies fit than it has units), so no retry can help."""
        overlay, used = trial.overlay, trial.used
        spread = self.spec.placement.kind is PolicyKind.SPREAD
        counts: dict[int, int] = {}
        first: dict[int, Unit] = {}
        for u in order:
            counts[u.cls] = counts.get(u.cls, 0) + 1
            first.setdefault(u.cls, u)
        options: dict[int, list[str]] = {}
        for cls, unit in first.items():
            need = counts[cls]
            fits, room = [], 0
            for n in self._candidates(unit, nodes):
                if spread and n in used:
                    continue
                k = unit.requests.times_fits_in(overlay.free(n), 1 if spread else need)
                if k:
                    fits.append(n)
                    room += k
            if room < need:
                return None
            options[cls] = fits
        return options

    def _one_node_each(
        self, order: Sequence[Unit], options: Mapping[int, Sequence[str]]
    ) -> dict[int, str] | None:
        """Unit index -> a node of its own among its class's `options`, by augmenting
        paths (complete whenever such a placement exists; for `spread` it is the only
        kind there is); None when there is none."""
        if len(order) > MATCHING_UNITS:
            return None
        holder: dict[str, Unit] = {}  # node -> unit

        def augment(unit: Unit, seen: set[str]) -> bool:
            for node in options[unit.cls]:
                if node not in seen:
                    seen.add(node)
                    if node not in holder or augment(holder[node], seen):
                        holder[node] = unit
                        return True
            return False

        # Fewest options first: most units then match without an augmenting path.
        for u in order:
            if not augment(u, set()):
                return None
        return {unit.index: node for node, unit in holder.items()}

    def _solve(
        self, order: Sequence[Unit], nodes: Sequence[str], trial: Trial
    ) -> dict[int, str] | Failure:
        overlay, used = trial.overlay, trial.used
        domain = tuple(nodes)
        chosen: dict[int, str] = {}
        # Blocks: runs of interchangeable non-relational units, or one relational unit.
        blocks: list[list[Unit]] = []
        for u in order:
            if (
                blocks
                and not u.relational
                and not blocks[-1][0].relational
                and blocks[-1][0].cls == u.cls
            ):
                blocks[-1].append(u)
            else:
                blocks.append([u])
        budget = [BACKTRACK_BUDGET]
        failure = Failure(0, "")

        def undo(units: Sequence[Unit]) -> None:
            for u in units:
                node = chosen.pop(u.index)
                overlay.remove(node, u.requests)
                used[node] -= 1
                if not used[node]:
                    del used[node]

        def assign(u: Unit, node: str) -> None:
            chosen[u.index] = node
            overlay.add(node, u.requests)
            used[node] = used.get(node, 0) + 1

        def solve(i: int) -> bool:
            nonlocal failure
            if i == len(blocks):
                return True
            block = blocks[i]
            if not block[0].relational:
                picks = self._bulk(block, domain, overlay, used)
                if isinstance(picks, str):
                    if len(chosen) >= failure.placed_units:
                        failure = Failure(len(chosen), picks)
                    return False
                for u, node in zip(block, picks, strict=True):
                    assign(u, node)
                if solve(i + 1):
                    return True
                undo(block)
                return False
            unit = block[0]
            ranked = self._rank(unit, domain, overlay, used, chosen)
            if isinstance(ranked, str):
                if len(chosen) >= failure.placed_units:
                    failure = Failure(len(chosen), ranked)
                return False
            for node in ranked[:BRANCHING]:
                if budget[0] <= 0:
                    return False
                budget[0] -= 1
                assign(unit, node)
                if solve(i + 1):
                    return True
                undo([unit])
            return False

        if solve(0):
            return chosen
        return failure

    def _candidates(self, unit: Unit, domain: Sequence[str]) -> list[str]:
        spread = self.spec.placement.kind is PolicyKind.SPREAD
        anchors = set(self.spec.anchors.values()) if spread else set()
        eligible = unit.eligible
        return [n for n in domain if n in eligible and n not in anchors]

    def _tightness(self, name: str) -> int:
        """How tight the node's domains are (smaller is tighter: fill it first). 0 without a
        topology index, so ties then fall to the node name as before."""
        if self._ranks is None or self.index is None:
            return 0
        level, ranks = self._ranks
        ids = self.index.of_node.get(name)
        return ranks[ids[level]] if ids is not None else len(ranks)

    def _bulk(
        self,
        block: Sequence[Unit],
        domain: Sequence[str],
        overlay: Overlay,
        used: Mapping[str, int],
    ) -> list[str] | str:
        """Nodes for `len(block)` interchangeable units, or why they do not fit."""
        unit = block[0]
        need = len(block)
        request = unit.requests
        spread = self.spec.placement.kind is PolicyKind.SPREAD
        cap = 1 if spread else need
        # (name, copies that fit, free GPUs, free CPU, free memory, whether a GPU-less
        # request would sit on a GPU node, domain tightness): plain ints keep the sort and
        # the best-fit scan cheap at 5,000 nodes.
        cpu_only = not request.gpus()
        nodes = self.snapshot.nodes
        tightness = self._tightness
        fits: list[tuple[str, int, int, int, int, bool, int]] = []
        for name in self._candidates(unit, domain):
            if spread and name in used:
                continue
            free = overlay.free(name)
            k = request.times_fits_in(free, cap)
            if k:
                on_gpus = cpu_only and nodes[name].node.allocatable.gpus() > 0
                fits.append(
                    (
                        name,
                        k,
                        free.gpus(),
                        free.get(CPU),
                        free.get(MEMORY),
                        on_gpus,
                        tightness(name),
                    )
                )
        rg, rc, rm = request.gpus(), request.get(CPU), request.get(MEMORY)
        picks: list[str] = []
        # Pack: first fill nodes this gang already uses (fewest nodes), then the rest.
        if not spread:
            for f in sorted((f for f in fits if f[0] in used), key=lambda f: (-f[1], f[0])):
                take = min(f[1], need - len(picks))
                picks.extend([f[0]] * take)
                if len(picks) == need:
                    return picks
            fits = [f for f in fits if f[0] not in used]
        # GPU nodes last for GPU-less members; then most copies first (fewest nodes), then
        # best fit: least left over, GPUs first; then the tightest domains.
        fits.sort(
            key=lambda f: (
                f[5],
                -f[1],
                f[2] - rg * f[1],
                f[3] - rc * f[1],
                f[4] - rm * f[1],
                f[6],
                f[0],
            )
        )
        i = 0
        while len(picks) < need and i < len(fits):
            rest = need - len(picks)
            if fits[i][1] >= rest:
                # Some node takes all the rest: the best fit for `rest` copies among the
                # nodes that can (a prefix of `fits`).
                j = i
                while j < len(fits) and fits[j][1] >= rest and fits[j][5] == fits[i][5]:
                    j += 1
                best = min(fits[i:j], key=lambda f: (f[2], f[3], f[4], f[6], f[0]))
                picks.extend([best[0]] * rest)
                return picks
            picks.extend([fits[i][0]] * fits[i][1])
            i += 1
        if len(picks) == need:
            return picks
        return self._miss(unit, need, picks, domain, overlay, spread=spread)

    def _rank(
        self,
        unit: Unit,
        domain: Sequence[str],
        overlay: Overlay,
        used: Mapping[str, int],
        chosen: Mapping[int, str],
    ) -> list[str] | str:
        """Candidate nodes for one plan unit, best first, or why none fits."""
        spec = self.spec
        intent = spec.intent
        spread = spec.placement.kind is PolicyKind.SPREAD
        # Where the plan ids already placed (this trial or bound anchors) sit.
        at: dict[str, str] = {}
        for u_index, node in chosen.items():
            for pid in self._ids_of(u_index):
                at[pid] = node
        for p in spec.anchor_pods:
            if p.plan_node and p.uid in spec.anchors:
                at[p.plan_node] = spec.anchors[p.uid]
        partners: dict[str, int] = {}
        rivals: dict[str, int] = {}
        trial_load: dict[str, int] = {}
        if intent is not None:
            for together in intent.together:
                if unit.ids & together:
                    for pid in together - unit.ids:
                        if pid in at:
                            partners[at[pid]] = partners.get(at[pid], 0) + 1
            for sets in intent.apart:
                mine = [s for s in sets if unit.ids & s]
                for s in sets:
                    if mine and s not in mine:
                        for pid in s:
                            if pid in at:
                                rivals[at[pid]] = rivals.get(at[pid], 0) + 1
            for sets in intent.trials:
                if any(unit.ids & s for s in sets):
                    for s in sets:
                        for pid in s - unit.ids:
                            if pid in at:
                                trial_load[at[pid]] = trial_load.get(at[pid], 0) + 1
        cpu_only = not unit.requests.gpus()  # GPU-less members keep off GPU nodes if they can
        scored = []
        for name in self._candidates(unit, domain):
            if spread and name in used:
                continue
            free = overlay.free(name)
            if not unit.requests.fits_in(free):
                continue
            scored.append(
                (
                    rivals.get(name, 0),
                    -partners.get(name, 0),
                    trial_load.get(name, 0),
                    cpu_only and self.snapshot.nodes[name].node.allocatable.gpus() > 0,
                    0 if name in used else 1,
                    _fit_key(free, unit.requests, 1),
                    self._tightness(name),
                    name,
                )
            )
        if not scored:
            return self._miss(unit, 1, [], domain, overlay, spread=spread)
        scored.sort()
        return [s[-1] for s in scored]

    def _ids_of(self, unit_index: int) -> frozenset[str]:
        return self.unit_ids.get(unit_index, frozenset())

    # ---- reasons -----------------------------------------------------------------------

    def _miss(
        self,
        unit: Unit,
        need: int,
        picks: Sequence[str],
        domain: Sequence[str],
        overlay: Overlay,
        *,
        spread: bool,
    ) -> str:
        return miss_reason(
            members=len(unit.members),
            plan_ids=unit.ids,
            request=unit.requests,
            need=need,
            picks=picks,
            candidates=[n for n in domain if n in unit.eligible],
            free=overlay.free,
            spread=spread,
        )

    def unfit(self, units: Sequence[Unit], detail: str, policy: str = "") -> Unfit:
        total = requested(units)
        return Unfit(
            unfit_reason(
                gang=self.spec.key,
                members=len(self.spec.members),
                total=total,
                policy=policy or str(self.spec.placement),
                detail=detail,
                ineligible=self.ineligible,
            )
        )

    def _unfit_reason(
        self,
        units: Sequence[Unit],
        domains: Sequence[tuple[str, tuple[str, ...], bool]],
        best: tuple[int, str, str] | None,
    ) -> str:
        policy = self.spec.placement
        detail = ""
        if not domains:
            kind = (
                "NVLink domain"
                if policy.kind is PolicyKind.INTERCONNECT_LOCAL
                else f"value of node label {policy.domain_key}"
            )
            detail = f"no {kind} has eligible nodes"
        elif best is not None:
            if policy.kind in (PolicyKind.INTERCONNECT_LOCAL, PolicyKind.DOMAIN):
                detail = f"no single domain fits; best: {best[1]} ({best[2]})"
            else:
                detail = best[2]
        return self.unfit(units, detail).reason


def _index_for(snapshot: Snapshot, spec: GangSpec) -> TopologyIndex | None:
    if spec.topology is None:
        return None
    index = spec.index
    if index is None or index.topology != spec.topology.topology:
        index = build_index(spec.topology.topology, (info.node for info in snapshot))
    return index


def _landing(index: TopologyIndex, nodes: Iterable[str]) -> tuple[int, str]:
    """The narrowest level whose one domain holds every node, and that domain's name."""
    ids = [index.of_node.get(n) for n in nodes]
    known = [i for i in ids if i is not None]
    if len(known) == len(ids) and known:
        for level in range(len(index.domains) - 1, -1, -1):
            if len({i[level] for i in known}) == 1:
                return level, index.domains[level][known[0][level]].name
    widest = index.topology.levels[0] if index.topology.levels else ""
    spanned = len({i[0] for i in known}) if known and index.domains else 0
    return CLUSTER, f"the cluster, across {spanned} {short_name(widest)} domain(s)"


def place_gang(snapshot: Snapshot, spec: GangSpec) -> Placed | Unfit:
    """Find a placement for every member of `spec` on `snapshot`, or say why none exists."""
    placer = _Placer(snapshot, spec)
    return placer.place()
