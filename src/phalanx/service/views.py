"""The `/debug/groups` views and `phalanx explain`: everything Phalanx knows about a gang;
`/debug/topology`: the configured topologies, their domains, and which are whole.

Read-only: a view never creates a journal record or changes the model. A gang of any
dialect is addressed by its key (`GroupRef.key`: `ns/name`, `volcano:ns/name`,
`upstream:ns/name`, ...) and named by its dialect (`registry.gang_dialect`) and what
declares it (`registry.gang_source`), as `kubectl phalanx` names it. A topology index
a view builds is the planner's cache, rebuilt only when node labels change.
"""

from __future__ import annotations

from collections.abc import Callable

from phalanx.core.cache import ClusterState
from phalanx.core.groups import registry
from phalanx.core.groups.composite import CompositePodGroup
from phalanx.core.model import Dialect, GroupRef, Pod, PodGroup
from phalanx.core.planner import GangPlanner
from phalanx.core.resolution import Deleting, Resolved
from phalanx.service.reporter import Reporter, achieved_level

Clock = Callable[[], float]

UNKNOWN_CLAIMS = "its ResourceClaims are not known to Phalanx yet"


class GangViews:
    def __init__(
        self, state: ClusterState, planner: GangPlanner, reporter: Reporter, *, clock: Clock
    ) -> None:
        self.state = state
        self.planner = planner
        self.reporter = reporter
        self.clock = clock

    def groups(self) -> list[dict[str, object]]:
        """A summary line per known gang, sorted by key."""
        keys = self.state.group_keys() | set(self.planner.records)
        return [self._summary(GroupRef.parse(key)) for key in sorted(keys)]

    def group(self, ref: GroupRef) -> dict[str, object] | None:
        """Everything Phalanx knows about one gang: reservation, plan, phases, transfers,
        warnings, last failure reason. None if the gang is unknown."""
        key = ref.key
        if key not in self.state.group_keys() and key not in self.planner.records:
            return None
        view = self._summary(ref)
        view["reservation"] = self._reservation(key)
        view["plan"] = self._plan(key)
        view["devices"] = self._devices(key)
        return view

    def _devices(self, key: str) -> list[dict[str, object]] | None:
        """Members with DRA claims, or extended resources a DeviceClass serves (or maps
        while the bridge is off): their GPUs (counted as nvidia.com/gpu is), how each claim
        is planned, which class serves which extended resource, and where Phalanx is less
        than exact or cannot plan them."""
        members = self.state.members(key, include_finished=True)
        shown = [
            _member_devices(p)
            for p in members
            if p.resource_claims
            or (p.devices is not None and (p.devices.demand.extended or p.devices.demand.unbridged))
        ]
        return shown or None

    def _reservation(self, key: str) -> dict[str, object] | None:
        reservation = self.state.reservation(key)
        if reservation is None:
            return None
        return {
            "expires_in_seconds": round(max(0.0, reservation.expires_at - self.clock()), 3),
            "members": [
                {
                    "pod": m.pod_key or None,  # None: a slot for a member not created yet
                    "node": m.node,
                    "state": "slot" if m.is_slot else m.state.value,
                    "gpus": m.requests.gpus(),
                }
                for m in reservation.members
            ],
        }

    def _plan(self, key: str) -> dict[str, object] | None:
        rec = self.planner.journal.get(key)
        if rec is None or rec.proposal is None:
            return None
        proposal = rec.proposal
        outcome = proposal.outcome
        # A template slot is shown as the member that claimed it, once one has.
        by_uid = {p.uid: rec.claimed.get(p.uid, p.key) for p in proposal.members}
        return {
            "domain": proposal.domain,
            "level": achieved_level(proposal),
            "explanation": proposal.explanation,
            "placements": {by_uid[u]: n for u, n in sorted(proposal.assignment.items())},
            "phases": [
                {
                    "index": ph.index,
                    "kind": ph.kind,
                    "members": list(ph.members),
                    "nodes": list(ph.nodes),
                    **(
                        {"trial": f"{ph.trial_index + 1}/{ph.trial_total}"}
                        if ph.trial_index is not None and ph.trial_total
                        else {}
                    ),
                }
                for ph in (outcome.phases if outcome else ())
            ],
            "data_transfers": [
                {
                    "from": t.from_member,
                    "to": t.to_member,
                    "from_node": t.from_node,
                    "to_node": t.to_node,
                }
                for t in (outcome.transfers if outcome else ())
            ],
            "warnings": list(proposal.warnings),
        }

    def topology(self) -> dict[str, object]:
        """Per configured topology (the first is the default): its levels, how many domains
        each level has and how many of those with GPUs are whole, and the nodes whose
        labels contradict the others'."""
        topologies = []
        for index, levels in self.planner.topology_usage():
            topologies.append(
                {
                    "name": index.topology.name,
                    "levels": [
                        {
                            "level": level.level,
                            "domains": len(domains),
                            "domains_with_gpus": level.total,
                            "whole_free_domains": level.free,
                        }
                        for level, domains in zip(levels, index.domains, strict=True)
                    ],
                    "nodes": len(index.of_node),
                    "findings": [
                        {"node": f.node, "level": f.level, "value": f.value, "reason": f.reason}
                        for f in index.findings
                    ],
                }
            )
        return {"default": self.planner.settings.topologies.default.name, "topologies": topologies}

    def _summary(self, ref: GroupRef) -> dict[str, object]:
        key = ref.key
        members = self.state.members(key, include_finished=True)
        rec = self.planner.journal.get(key)
        resolution = self.planner.resolve(ref)
        if isinstance(resolution, Resolved):
            resolved, error = resolution.group, self.state.group_error(key)
        else:
            resolved, error = None, resolution.reason
        status = self.reporter.group_status(ref)
        found = self.state.group_object(ref.object_ref.key)
        has_object = found is not None
        claims = {p.group_dialect for p in members if p.group_dialect is not None}
        dialect = registry.gang_dialect(ref, has_object=has_object, claims=claims)
        served = (
            registry.served_holding(self.state.served, ref)
            if self.state.served is not None
            else None
        )
        return {
            "group": key,
            "dialect": dialect.value,
            "source": registry.gang_source(ref, dialect, has_object=has_object),
            # The object's API, when discovery found it served ("" for annotation-only gangs).
            "api_version": served.api_version
            if served is not None and registry.has_gang_object(dialect)
            else "",
            "min_member": resolved.min_member if resolved is not None else None,
            "placement": str(resolved.placement) if resolved is not None else None,
            # Upstream's spec.disruptionMode (what preemption may take); None: no such field.
            "disruption_mode": _disruption_mode(found),
            "members": len(members),
            "bound": status.scheduled,
            "phase": status.phase.value,
            "last_decision": rec.last_outcome.value
            if rec is not None and rec.last_outcome
            else None,
            "last_reason": rec.last_reason if rec is not None else "",
            "error": error,
            # Its object has a deletionTimestamp: no member is reserved or bound until it is gone.
            "deleting": isinstance(resolution, Deleting),
            # Members refused for their own bad input (a malformed phalanx.io/* annotation):
            # the gang's settings above come from its valid members and its object.
            "invalid_members": {p.key: p.invalid for p in members if p.invalid},
        }


def _disruption_mode(found: object) -> str | None:
    """`single` or `all` for an upstream PodGroup or a CompositePodGroup, else None."""
    if isinstance(found, CompositePodGroup) or (
        isinstance(found, PodGroup) and found.dialect is Dialect.UPSTREAM
    ):
        return found.disruption_mode.value
    return None


def _member_devices(pod: Pod) -> dict[str, object]:
    view: dict[str, object] = {"pod": pod.key, "gpus": pod.requests.gpus()}
    if pod.devices is None:
        return {
            **view,
            "claims": [],
            "extended": [],
            "unbridged": [],
            "problems": [UNKNOWN_CLAIMS],
            "notes": [],
        }
    demand = pod.devices.demand
    claims = [
        {
            "claim": c.key,
            "allocated": c.allocated,
            "requests": [
                {
                    "request": r.request,
                    "class": r.device_class,
                    "count": r.count,
                    "planned": r.exactness.value,
                }
                for r in c.requests
            ],
        }
        for c in demand.claims
    ]
    # Served by device plugin where the node has it allocatable, else by the class's devices
    # (`held`: the claim kube-scheduler made for it is allocated and counts them).
    extended = [
        {"resource": e.resource, "count": e.count, "class": e.device_class, "held": e.held}
        for e in demand.extended
    ]
    # Mapped by a class while kube-scheduler serves none from devices: device plugins only.
    unbridged = [{"resource": r, "class": c} for r, c in demand.unbridged]
    problems = [*demand.problems, *demand.waiting]
    return {
        **view,
        "claims": claims,
        "extended": extended,
        "unbridged": unbridged,
        "problems": problems,
        "notes": list(demand.notes),
    }
