"""The plan language: `phalanx.io/plan` JSON parsed into a `PlanNode` tree; members, data flow.

Parsing is strict and total: any text gives a tree or a `PlanError` naming the JSON path
and the problem, never another exception, and size / depth / edge limits keep a hostile
annotation from costing more than a bounded amount of work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

TAG_LABEL_PREFIX = "tag.phalanx.io/"

# A tag becomes the name part of a label key, so it obeys Kubernetes' label-name syntax.
_TAG_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_MAX_PATH_CHARS = 240
# Deeper plans would exhaust the interpreter's recursion limit in the tree walks below.
_DEPTH_CEILING = 256


class PlanError(ValueError):
    """A plan (or a differentiable list) that cannot be used; the message names where and why."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple[type[PlanError], tuple[str, str]]:
        return (PlanError, (self.path, self.problem))


class NodeKind(StrEnum):
    EXECUTE = "execute"
    STEP = "step"
    SEQUENCE = "sequence"
    PARALLEL = "parallel"
    COMPOSITE = "composite"
    STREAM = "stream"
    LOOP = "loop"
    BRANCH = "branch"
    REMOTE = "remote"
    TRIALS = "trials"
    EMPTY = "empty"  # written `{}` in JSON


_LEAF = frozenset({NodeKind.EXECUTE, NodeKind.STEP})
_BLOCK = frozenset({NodeKind.COMPOSITE, NodeKind.STREAM})
_LISTS = frozenset({NodeKind.SEQUENCE, NodeKind.PARALLEL, NodeKind.TRIALS})
_KINDS = tuple(k for k in NodeKind if k is not NodeKind.EMPTY)
_KIND_BY_KEY = {k.value: k for k in _KINDS}
# The only keys allowed beside a kind key, and the kind each belongs to.
_COMPANION = {"tag": NodeKind.REMOTE, "body": NodeKind.LOOP, "arms": NodeKind.BRANCH}
_SHAPE = {"tag": "a string", "body": "a plan node", "arms": "an object of plan nodes"}


@dataclass(frozen=True, slots=True)
class PlanNode:
    """One node of a parsed plan. Build trees with `parse_plan`, which enforces the shapes below.

    * execute / step: `id` is the member.
    * sequence / parallel / trials: `children` in order.
    * composite / stream: `ids` are the members, in order.
    * loop: `id` is the controller member, `children == (body,)`.
    * branch: `id` is the condition member, `children` the arms named by `arms`.
    * remote: `children == (inner,)`, `tag` the required node tag.
    * empty: nothing.
    """

    kind: NodeKind
    id: str = ""
    ids: tuple[str, ...] = ()
    children: tuple[PlanNode, ...] = ()
    arms: tuple[str, ...] = ()
    tag: str = ""


EMPTY_PLAN = PlanNode(NodeKind.EMPTY)


# --------------------------------------------------------------------------------------
# Parsing


class _JsonObject(dict[str, object]):
    """A decoded JSON object that remembers keys the text repeated (`json` keeps the last)."""

    __slots__ = ("repeated",)

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        super().__init__(pairs)
        self.repeated: str | None = None  # the first key given twice
        if len(self) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    self.repeated = key
                    break
                seen.add(key)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _short(path: str) -> str:
    if len(path) <= _MAX_PATH_CHARS:
        return path
    half = _MAX_PATH_CHARS // 2
    return f"{path[:half]}…{path[-half:]}"


def _key_path(path: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key):
        return f"{path}.{key}"
    return f"{path}[{_quote(key)}]"


def _error(path: str, problem: str) -> PlanError:
    return PlanError(_short(path), problem)


class _Parser:
    __slots__ = ("max_depth", "max_nodes", "nodes", "seen")

    def __init__(self, max_nodes: int, max_depth: int) -> None:
        self.max_nodes = max_nodes
        self.max_depth = max_depth
        self.nodes = 0
        self.seen: dict[str, str] = {}  # member id -> path where it first appeared

    def _count(self, path: str, amount: int) -> None:
        self.nodes += amount
        if self.nodes > self.max_nodes:
            raise _error(path, f"plan has more than {self.max_nodes} nodes")

    def node(self, value: object, path: str, depth: int) -> PlanNode:
        if not isinstance(value, dict):
            raise _error(path, f"expected a plan node (a JSON object), got {_json_type(value)}")
        if depth > self.max_depth:
            raise _error(path, f"plan nests deeper than {self.max_depth} levels")
        self._count(path, 1)
        if isinstance(value, _JsonObject) and value.repeated is not None:
            raise _error(path, f"key {_quote(value.repeated)} appears twice")
        if not value:
            return EMPTY_PLAN
        kind = self._kind(value, path)
        key = kind.value
        here = f"{path}.{key}"
        if kind in _LEAF:
            return PlanNode(kind, id=self.member(value[key], here))
        if kind in _BLOCK:
            return PlanNode(kind, ids=self.members(value[key], here))
        if kind in _LISTS:
            items = value[key]
            if not isinstance(items, list):
                raise _error(here, f"expected an array of plan nodes, got {_json_type(items)}")
            children = tuple(
                self.node(item, f"{here}[{i}]", depth + 1) for i, item in enumerate(items)
            )
            return PlanNode(kind, children=children)
        if kind is NodeKind.LOOP:
            controller = self.member(value[key], here)
            body = self.node(value["body"], f"{path}.body", depth + 1)
            return PlanNode(kind, id=controller, children=(body,))
        if kind is NodeKind.BRANCH:
            condition = self.member(value[key], here)
            names, arms = self.arms(value["arms"], f"{path}.arms", depth)
            return PlanNode(kind, id=condition, children=arms, arms=names)
        # NodeKind.REMOTE, the last kind left.
        tag = value["tag"]
        if not isinstance(tag, str):
            raise _error(f"{path}.tag", f"expected a node tag (a string), got {_json_type(tag)}")
        if not _TAG_RE.fullmatch(tag):
            raise _error(
                f"{path}.tag",
                f"{_quote(tag)} is not a valid tag: it becomes the label "
                f"{TAG_LABEL_PREFIX}<tag>, so it needs 1-63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit",
            )
        inner = self.node(value[key], here, depth + 1)
        return PlanNode(kind, children=(inner,), tag=tag)

    def _kind(self, value: Mapping[str, object], path: str) -> NodeKind:
        kinds = [k for k in value if k in _KIND_BY_KEY]
        if len(kinds) > 1:
            named = ", ".join(_quote(k) for k in kinds)
            raise _error(path, f"one object has {len(kinds)} node kinds ({named}); use one")
        if not kinds:
            unknown = [k for k in value if k not in _COMPANION]
            if unknown:
                expected = ", ".join(k.value for k in _KINDS)
                raise _error(
                    path,
                    f"unknown node kind {_quote(unknown[0])}; expected one of {expected} "
                    "(or {} for an empty node)",
                )
            key = next(iter(value))
            owner = _quote(_COMPANION[key].value)
            raise _error(path, f"key {_quote(key)} without a node kind; it belongs beside {owner}")
        kind = _KIND_BY_KEY[kinds[0]]
        beside = f"beside {_quote(kind.value)}"
        for key in value:
            if key == kind.value:
                continue
            owner_kind = _COMPANION.get(key)
            if owner_kind is None:
                raise _error(path, f"unexpected key {_quote(key)} {beside}")
            if owner_kind is not kind:
                owner = _quote(owner_kind.value)
                raise _error(
                    path, f"unexpected key {_quote(key)} {beside}; it belongs beside {owner}"
                )
        for key, owner_kind in _COMPANION.items():
            if owner_kind is kind and key not in value:
                raise _error(path, f"{_quote(kind.value)} needs {_quote(key)} ({_SHAPE[key]})")
        return kind

    def member(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            raise _error(path, f"expected a member id (a string), got {_json_type(value)}")
        if not value.strip():
            raise _error(path, "empty member id")
        if value != value.strip():
            raise _error(path, f"member id {_quote(value)} has leading or trailing whitespace")
        if "," in value:
            # phalanx.io/differentiable lists ids separated by commas.
            raise _error(path, f"member id {_quote(value)} contains a comma")
        first = self.seen.setdefault(value, path)
        if first != path:
            raise _error(path, f"duplicate member id {_quote(value)} (first at {_short(first)})")
        return value

    def members(self, value: object, path: str) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise _error(path, f"expected an array of member ids, got {_json_type(value)}")
        self._count(path, len(value))
        return tuple(self.member(item, f"{path}[{i}]") for i, item in enumerate(value))

    def arms(
        self, value: object, path: str, depth: int
    ) -> tuple[tuple[str, ...], tuple[PlanNode, ...]]:
        if not isinstance(value, dict):
            raise _error(path, f"expected an object of named plan nodes, got {_json_type(value)}")
        if isinstance(value, _JsonObject) and value.repeated is not None:
            raise _error(path, f"arm {_quote(value.repeated)} appears twice")
        if "" in value:
            raise _error(path, "empty arm name")
        names = tuple(value)
        arms = tuple(self.node(value[n], _key_path(path, n), depth + 1) for n in names)
        return names, arms


def parse_plan(
    text: str, *, max_nodes: int = 10_000, max_depth: int = 64, max_edges: int = 100_000
) -> PlanNode:
    """Parse and validate `phalanx.io/plan` text; every defect raises `PlanError`.

    `max_nodes` counts plan objects and composite / stream ids; `max_depth` counts nested
    plan objects (the root is level 1); `max_edges` bounds `edges()`, which a sequence of
    wide parallels would otherwise blow up quadratically.
    """
    if not 1 <= max_depth <= _DEPTH_CEILING:
        raise ValueError(f"max_depth must be within 1..{_DEPTH_CEILING}, got {max_depth}")
    if max_nodes < 1 or max_edges < 0:
        raise ValueError("max_nodes must be positive and max_edges not negative")
    try:
        value = json.loads(text, object_pairs_hook=_JsonObject)
    except RecursionError as exc:
        raise PlanError("plan", "JSON nests too deeply") from exc
    except ValueError as exc:  # json.JSONDecodeError, or an integer too long to convert
        raise PlanError("plan", f"not valid JSON: {exc}") from exc
    try:
        root = _Parser(max_nodes, max_depth).node(value, "plan", 1)
    except RecursionError as exc:  # pragma: no cover - max_depth ceiling keeps well clear
        raise PlanError("plan", "plan nests too deeply") from exc
    try:
        _Flow(max_edges).run(root)
    except _TooManyEdgesError as exc:
        raise PlanError(
            "plan",
            f"plan has more than {max_edges} data-flow edges (a sequence joins every exit of "
            "one element to every entry of the next; put a step between wide parallels)",
        ) from exc
    return root


def plan_json(plan: PlanNode) -> object:
    """The JSON value `parse_plan` reads back as `plan` (for /debug and round trips)."""
    kind = plan.kind
    if kind is NodeKind.EMPTY:
        return {}
    if kind in _LEAF:
        return {kind.value: plan.id}
    if kind in _BLOCK:
        return {kind.value: list(plan.ids)}
    if kind in _LISTS:
        return {kind.value: [plan_json(c) for c in plan.children]}
    if kind is NodeKind.LOOP:
        return {"loop": plan.id, "body": plan_json(plan.children[0])}
    if kind is NodeKind.BRANCH:
        arms = {n: plan_json(c) for n, c in zip(plan.arms, plan.children, strict=True)}
        return {"branch": plan.id, "arms": arms}
    return {"remote": plan_json(plan.children[0]), "tag": plan.tag}


def dump_plan(plan: PlanNode) -> str:
    """Compact JSON text for `plan`; `parse_plan(dump_plan(p)) == p`."""
    return json.dumps(plan_json(plan), ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------------------
# Members and data flow


def walk(plan: PlanNode, *, skip: frozenset[NodeKind] = frozenset()) -> Iterator[PlanNode]:
    """Every node, pre-order, children in execution order; `skip` kinds and their subtrees not."""
    # A stack, not recursion: `yield from` chains would cost O(depth) per node.
    stack = [plan]
    while stack:
        node = stack.pop()
        if node.kind not in skip:
            yield node
            stack.extend(reversed(node.children))


def node_members(node: PlanNode) -> tuple[str, ...]:
    """The members a node names itself (not its children's)."""
    if node.kind in _BLOCK:
        return node.ids
    return (node.id,) if node.id else ()


def leaves(plan: PlanNode) -> tuple[str, ...]:
    """Every member id in execution order (a controller or condition before its body)."""
    return tuple(m for node in walk(plan) for m in node_members(node))


class _TooManyEdgesError(Exception):
    pass


class _Flow:
    """Collects data-flow edges; `run` returns the edges in execution order."""

    __slots__ = ("count", "edges", "limit")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.count = 0  # edges made so far, including those still in nested lists
        self.edges: list[tuple[str, str]] = []

    def run(self, plan: PlanNode) -> tuple[tuple[str, str], ...]:
        self._flow(plan, self.edges)
        return tuple(self.edges)

    def _join(
        self, out: list[tuple[str, str]], exits: tuple[str, ...], entries: tuple[str, ...]
    ) -> None:
        self.count += len(exits) * len(entries)
        if self.limit is not None and self.count > self.limit:
            raise _TooManyEdgesError
        out.extend((a, b) for a in exits for b in entries)

    def _nested(
        self, node: PlanNode, out: list[tuple[str, str]], before: tuple[str, ...]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        # Edges into `node` come before the edges inside it, so the list reads in execution order.
        inner: list[tuple[str, str]] = []
        entries, exits = self._flow(node, inner)
        self._join(out, before, entries)
        out.extend(inner)
        return entries, exits

    def _flow(
        self, node: PlanNode, out: list[tuple[str, str]]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Append the edges inside `node` to `out`; return its (entry, exit) members."""
        kind = node.kind
        if kind in _LEAF:
            return (node.id,), (node.id,)
        if kind in _BLOCK:
            self.count += max(len(node.ids) - 1, 0)
            out.extend(zip(node.ids, node.ids[1:], strict=False))
            return node.ids[:1], node.ids[-1:]
        if kind is NodeKind.SEQUENCE:
            first: tuple[str, ...] = ()
            last: tuple[str, ...] = ()
            for child in node.children:
                entries, exits = self._nested(child, out, last)
                if entries:  # an element without members does not break the chain
                    first = first or entries
                    last = exits
            return first, last
        if kind in (NodeKind.PARALLEL, NodeKind.TRIALS):
            all_entries: list[str] = []
            all_exits: list[str] = []
            for child in node.children:
                entries, exits = self._flow(child, out)
                all_entries.extend(entries)
                all_exits.extend(exits)
            return tuple(all_entries), tuple(all_exits)
        if kind is NodeKind.LOOP:
            _, exits = self._nested(node.children[0], out, (node.id,))
            return (node.id,), exits or (node.id,)
        if kind is NodeKind.BRANCH:
            # An arm without members passes the condition's output straight on.
            passes = not node.children
            arm_exits: list[str] = []
            for arm in node.children:
                _, exits = self._nested(arm, out, (node.id,))
                passes = passes or not exits
                arm_exits.extend(exits)
            return (node.id,), ((node.id,) if passes else ()) + tuple(arm_exits)
        if kind is NodeKind.REMOTE:
            return self._flow(node.children[0], out)
        return (), ()


def edges(plan: PlanNode) -> tuple[tuple[str, str], ...]:
    """Data-flow edges (from member, to member) in execution order.

    Within a sequence, every exit of element i feeds every entry of the next element with
    members; composite / stream members feed the next one; a loop controller feeds its
    body's entries; a branch condition feeds each arm's entries. Parallel branches and
    trials are independent of each other.
    """
    return _Flow(None).run(plan)
