"""Describing a placement against its plan: ordered phases, data transfers, broken soft rules.

The gang engine places members with real capacity; `describe` then says what that
placement means for the plan. It judges only soft rules (hard ones are the engine's
invariant, checked by `plan.hard_rule_violations`), so its warnings are what an ML
engineer reads to learn why their pipeline moves data between nodes.

Phases follow the plan's execution order. Inside a sequence, consecutive members outside
parallels / trials / composite / stream blocks form one sequential phase (nested
sequences, loops, branches and remotes flatten into it); a composite or stream block is a
sequential phase of its own; a parallel is one parallel phase covering everything inside
its branches; each trial is a trial phase. Every member appears in exactly one phase.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from phalanx.core.plan_intent import PlanIntent, brief, together_rules
from phalanx.core.plan_tree import NodeKind, PlanNode, edges, leaves

SEQUENTIAL = "sequential"
PARALLEL = "parallel"
TRIAL = "trial"


@dataclass(frozen=True, slots=True)
class PlanPhase:
    index: int  # position in execution order, from 0
    kind: str  # SEQUENTIAL | PARALLEL | TRIAL
    members: tuple[str, ...]  # execution order
    # Cluster nodes involved. Sequential / trial: the nodes used, in member order, without
    # repeats. Parallel: one per branch (the node of its first placed member), repeats kept.
    nodes: tuple[str, ...]
    trial_index: int | None = None  # trial phases: position among the study's trials, from 0
    trial_total: int | None = None  # trial phases: how many trials the study has


@dataclass(frozen=True, slots=True)
class DataTransfer:
    """A data-flow edge whose ends landed on different nodes: output must cross the network."""

    from_member: str
    to_member: str
    from_node: str
    to_node: str


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    phases: tuple[PlanPhase, ...]
    transfers: tuple[DataTransfer, ...]  # in edge (execution) order
    warnings: tuple[str, ...]  # one sentence per soft rule the placement breaks


def _distinct(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class _Phases:
    """Builds phases in one execution-order walk; `run` collects the open sequential phase."""

    __slots__ = ("assignment", "phases", "run")

    def __init__(self, assignment: Mapping[str, str]) -> None:
        self.assignment = assignment
        self.phases: list[PlanPhase] = []
        self.run: list[str] = []

    def _nodes(self, members: Iterable[str]) -> tuple[str, ...]:
        return _distinct(self.assignment[m] for m in members if m in self.assignment)

    def _add(
        self,
        kind: str,
        members: tuple[str, ...],
        nodes: tuple[str, ...],
        trial: tuple[int, int] | None = None,  # (index, total) for a trial phase
    ) -> None:
        index, total = trial if trial is not None else (None, None)
        self.phases.append(PlanPhase(len(self.phases), kind, members, nodes, index, total))

    def flush(self) -> None:
        if self.run:
            members = tuple(self.run)
            self.run.clear()
            self._add(SEQUENTIAL, members, self._nodes(members))

    def visit(self, node: PlanNode) -> None:
        kind = node.kind
        if kind in (NodeKind.EXECUTE, NodeKind.STEP):
            self.run.append(node.id)
        elif kind in (NodeKind.LOOP, NodeKind.BRANCH):
            self.run.append(node.id)
            for child in node.children:
                self.visit(child)
        elif kind in (NodeKind.SEQUENCE, NodeKind.REMOTE):
            for child in node.children:
                self.visit(child)
        elif kind in (NodeKind.COMPOSITE, NodeKind.STREAM):
            self.flush()
            if node.ids:
                self._add(SEQUENTIAL, node.ids, self._nodes(node.ids))
        elif kind is NodeKind.PARALLEL:
            self.flush()
            branches = [ms for c in node.children if (ms := leaves(c))]
            if branches:
                firsts = (self._nodes(ms)[:1] for ms in branches)
                nodes = tuple(n for first in firsts for n in first)
                self._add(PARALLEL, tuple(m for ms in branches for m in ms), nodes)
        elif kind is NodeKind.TRIALS:
            self.flush()
            trials = [ms for c in node.children if (ms := leaves(c))]
            for i, members in enumerate(trials):
                nodes = self._nodes(members)
                self._add(TRIAL, members, nodes, (i, len(trials)))


def _together_warnings(
    plan: PlanNode, intent: PlanIntent, assignment: Mapping[str, str]
) -> list[str]:
    unit_of = intent.unit_of()
    warnings: list[str] = []
    for rule in together_rules(plan):
        if len({unit_of.get(m) for m in rule.members}) < 2:
            continue  # one hard unit: splitting it is a hard violation, not this rule's
        nodes = _distinct(assignment[m] for m in rule.members if m in assignment)
        if len(nodes) < 2:
            continue
        tag_sets = {intent.required_tags.get(m, frozenset()) for m in rule.members}
        if len(tag_sets) > 1:
            tags = sorted(frozenset().union(*tag_sets))
            reason = (
                f"no node with enough free capacity carries every tag they need ({brief(tags)})"
            )
        else:
            reason = "not enough free capacity on one node"
        warnings.append(
            f"{rule.what} [{brief(rule.members)}] spans {len(nodes)} nodes "
            f"({brief(nodes)}): {reason}"
        )
    return warnings


def _apart_warnings(
    intent: PlanIntent, assignment: Mapping[str, str], order: Mapping[str, int], eligible: int
) -> list[str]:
    unit_of = intent.unit_of()
    warnings: list[str] = []
    for branches in intent.apart:
        ordered = [sorted(b, key=order.__getitem__) for b in branches]
        sharing: dict[str, list[int]] = {}  # node -> branches using it, first use first
        for i, members in enumerate(ordered):
            for node in _distinct(assignment[m] for m in members if m in assignment):
                sharing.setdefault(node, []).append(i)
        for node, which in sharing.items():
            if len(which) < 2:
                continue
            holder: dict[int | None, int] = {}  # unit -> first of these branches holding it
            bound = False
            for i in which:
                for unit in {unit_of.get(m) for m in ordered[i]}:
                    bound = bound or holder.setdefault(unit, i) != i
            if bound:
                reason = "a hard rule binds them to one node"
            elif len(branches) > eligible:
                reason = f"only {_plural(eligible, 'eligible node')} for {len(branches)} branches"
            else:
                reason = "not enough free capacity on distinct nodes"
            named = [f"[{brief(ordered[i], 5)}]" for i in which]
            shown = (
                f"{', '.join(named[:-1])} and {named[-1]}"
                if len(named) <= 5
                else f"{', '.join(named[:4])} and {len(named) - 4} more"
            )
            warnings.append(f"parallel branches {shown} share node {node}: {reason}")
    return warnings


def _trial_warnings(
    intent: PlanIntent, assignment: Mapping[str, str], order: Mapping[str, int], eligible: int
) -> list[str]:
    warnings: list[str] = []
    for trials in intent.trials:
        ordered = [sorted(t, key=order.__getitem__) for t in trials]
        # A trial counts on the node of its first placed member (its entry, in practice).
        homes = [next((assignment[m] for m in t if m in assignment), None) for t in ordered]
        counts: dict[str, int] = {}
        for home in homes:
            if home is not None:
                counts[home] = counts.get(home, 0) + 1
        placed = sum(counts.values())
        if placed < 2:
            continue
        # A wrong (too small) eligible count must not turn correct spreading into a warning.
        nodes = max(eligible, len(counts))
        label = f"trials [{brief([m for t in ordered for m in t])}] are not round-robin"
        busiest = max(counts, key=counts.__getitem__)
        idlest = min(counts, key=counts.__getitem__)
        if counts[busiest] - counts[idlest] > 1:
            warnings.append(
                f"{label}: {busiest} has {_plural(counts[busiest], 'trial')} "
                f"while {idlest} has {counts[idlest]}"
            )
        elif len(counts) < min(placed, nodes):
            warnings.append(
                f"{label}: {placed} trials use {len(counts)} of {_plural(nodes, 'eligible node')}"
            )
    return warnings


def describe(
    plan: PlanNode, intent: PlanIntent, assignment: Mapping[str, str], *, eligible_nodes: int
) -> PlanOutcome:
    """What `assignment` (member -> node) means for `plan`. Deterministic.

    Precondition: `intent` is `derive_intent(plan, ...)`. `eligible_nodes` is how many
    nodes the group could use (for round-robin and spread reasons). Members missing from
    `assignment` (an elastic gang's unplaced ones) stay in their phases but are left out of
    nodes, transfers and rule checks.
    """
    order = {m: i for i, m in enumerate(leaves(plan))}
    builder = _Phases(assignment)
    builder.visit(plan)
    builder.flush()
    transfers = tuple(
        DataTransfer(a, b, assignment[a], assignment[b])
        for a, b in edges(plan)
        if a in assignment and b in assignment and assignment[a] != assignment[b]
    )
    warnings = (
        _together_warnings(plan, intent, assignment)
        + _apart_warnings(intent, assignment, order, eligible_nodes)
        + _trial_warnings(intent, assignment, order, eligible_nodes)
    )
    return PlanOutcome(tuple(builder.phases), transfers, tuple(warnings))
