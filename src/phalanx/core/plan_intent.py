"""Placement intent: what a plan asks of the gang engine, and a check of the hard part.

Rules (DESIGN.md §3): a sequence lands on one node (soft); parallel branches land on
distinct nodes, each branch as a unit (soft); connected differentiable members share a
node (hard); trials go round-robin (soft); composite / stream / loop / branch blocks stay
on one node (hard); remote tags restrict nodes (hard). Structure nested inside a sequence
wins over the sequence's own rule: a parallel inside a sequence still spreads its
branches, so a sequence's together set holds only its members outside nested parallels
and trials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from phalanx.core.plan_tree import (
    TAG_LABEL_PREFIX,
    NodeKind,
    PlanError,
    PlanNode,
    edges,
    leaves,
    node_members,
    walk,
)


@dataclass(frozen=True, slots=True)
class TogetherRule:
    """A soft rule: `members` should share one node. `what` names its origin in warnings."""

    what: str  # "sequence" | "parallel branch" | "trial"
    members: tuple[str, ...]  # execution order


_SPREADING = frozenset({NodeKind.PARALLEL, NodeKind.TRIALS})


def _own_members(node: PlanNode) -> tuple[str, ...]:
    """Members of `node` outside any nested parallel or trials (whose rules win)."""
    return tuple(m for n in walk(node, skip=_SPREADING) for m in node_members(n))


def together_rules(plan: PlanNode) -> tuple[TogetherRule, ...]:
    """Every soft together rule with at least two members, pre-order, without repeats.

    A sequence's members outside nested parallels / trials; each parallel branch's and
    each trial's members likewise. A set already named by an earlier rule is skipped.
    """
    found: dict[frozenset[str], TogetherRule] = {}

    def add(what: str, node: PlanNode) -> None:
        members = _own_members(node)
        key = frozenset(members)
        if len(members) > 1 and key not in found:
            found[key] = TogetherRule(what, members)

    for node in walk(plan):
        if node.kind is NodeKind.SEQUENCE:
            add("sequence", node)
        elif node.kind is NodeKind.PARALLEL:
            for branch in node.children:
                add("parallel branch", branch)
        elif node.kind is NodeKind.TRIALS:
            for trial in node.children:
                add("trial", trial)
    return tuple(found.values())


@dataclass(frozen=True, slots=True)
class PlanIntent:
    """What a plan asks of placement. Hard rules must hold; soft ones hold when capacity allows.

    Every set names member ids; order is deterministic (execution order of first members).
    """

    # HARD: each set shares one node; every member is in exactly one unit.
    units: tuple[frozenset[str], ...]
    # SOFT: each set should share one node; only sets spanning more than one unit.
    together: tuple[frozenset[str], ...]
    # SOFT: per parallel with two or more non-empty branches, its branches' member sets,
    # which should use pairwise disjoint sets of nodes.
    apart: tuple[tuple[frozenset[str], ...], ...]
    # SOFT: per trials node, its non-empty trials' member sets in order, to go round-robin
    # across the eligible nodes.
    trials: tuple[tuple[frozenset[str], ...], ...]
    # HARD: member -> tags every node it lands on must carry; absent = no restriction.
    required_tags: Mapping[str, frozenset[str]]

    def unit_of(self) -> dict[str, int]:
        """Member -> index of its unit in `units`."""
        return {m: i for i, unit in enumerate(self.units) for m in unit}


class _Partition:
    """Union-find over member ids."""

    __slots__ = ("parent",)

    def __init__(self, members: tuple[str, ...]) -> None:
        self.parent = {m: m for m in members}

    def find(self, member: str) -> str:
        root = member
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[member] != root:  # path compression
            self.parent[member], member = root, self.parent[member]
        return root

    def join(self, members: tuple[str, ...]) -> None:
        if members:
            root = self.find(members[0])
            for m in members[1:]:
                self.parent[self.find(m)] = root


def derive_intent(plan: PlanNode, differentiable: frozenset[str] = frozenset()) -> PlanIntent:
    """The placement intent of `plan`; `differentiable` ids must all be members of it."""
    order = leaves(plan)
    unknown = differentiable.difference(order)
    if unknown:
        named = ", ".join(json.dumps(m, ensure_ascii=False) for m in sorted(unknown))
        raise PlanError("differentiable", f"names ids the plan does not have: {named}")

    partition = _Partition(order)
    for node in walk(plan):
        if node.kind in (NodeKind.COMPOSITE, NodeKind.STREAM):
            partition.join(node.ids)
        elif node.kind in (NodeKind.LOOP, NodeKind.BRANCH):
            partition.join(leaves(node))
    for a, b in edges(plan):
        if a in differentiable and b in differentiable:
            partition.join((a, b))
    grouped: dict[str, list[str]] = {}
    for m in order:  # dicts keep insertion order: units come out by their first member
        grouped.setdefault(partition.find(m), []).append(m)
    units = tuple(frozenset(ms) for ms in grouped.values())
    unit_of = {m: partition.find(m) for m in order}

    together = tuple(
        frozenset(rule.members)
        for rule in together_rules(plan)
        if len({unit_of[m] for m in rule.members}) > 1
    )
    apart: list[tuple[frozenset[str], ...]] = []
    trials: list[tuple[frozenset[str], ...]] = []
    for node in walk(plan):
        if node.kind in (NodeKind.PARALLEL, NodeKind.TRIALS):
            sets = tuple(frozenset(ms) for c in node.children if (ms := leaves(c)))
            if node.kind is NodeKind.TRIALS and sets:
                trials.append(sets)
            elif len(sets) > 1:
                apart.append(sets)

    return PlanIntent(
        units=units,
        together=together,
        apart=tuple(apart),
        trials=tuple(trials),
        required_tags=MappingProxyType(_required_tags(plan)),
    )


def _required_tags(plan: PlanNode) -> dict[str, frozenset[str]]:
    tags: dict[str, frozenset[str]] = {}

    def visit(node: PlanNode, inherited: frozenset[str]) -> None:
        if node.kind is NodeKind.REMOTE:
            inherited = inherited | {node.tag}
        if inherited:
            for m in node_members(node):
                tags[m] = inherited
        for child in node.children:
            visit(child, inherited)

    visit(plan, frozenset())
    return tags


def tags_from_labels(labels: Mapping[str, str]) -> frozenset[str]:
    """The plan tags a node carries: labels `tag.phalanx.io/<tag>: "true"`."""
    return frozenset(
        key.removeprefix(TAG_LABEL_PREFIX)
        for key, value in labels.items()
        if key.startswith(TAG_LABEL_PREFIX) and value == "true"
    )


def brief(items: tuple[str, ...] | list[str], limit: int = 10) -> str:
    """`a, b, c` for messages, cut after `limit` items."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown}, … {len(items) - limit} more"


def hard_rule_violations(
    intent: PlanIntent, assignment: Mapping[str, str], node_tags: Mapping[str, frozenset[str]]
) -> tuple[str, ...]:
    """Every hard rule `assignment` (member -> node) breaks; unassigned members are skipped.

    `node_tags` maps a node to its plan tags (see `tags_from_labels`); absent nodes carry none.
    """
    problems: list[str] = []
    for unit in intent.units:
        members = sorted(m for m in unit if m in assignment)
        nodes = sorted({assignment[m] for m in members})
        if len(nodes) > 1:
            problems.append(f"unit [{brief(members)}] is split across nodes {brief(nodes)}")
    for unit in intent.units:
        for member in sorted(unit):
            required = intent.required_tags.get(member, frozenset())
            node = assignment.get(member)
            if node is None or not required:
                continue
            missing = sorted(required - node_tags.get(node, frozenset()))
            if missing:
                noun = "tag" if len(missing) == 1 else "tags"
                problems.append(
                    f"member {member} is on node {node}, which lacks {noun} {brief(missing)}"
                )
    return tuple(problems)
