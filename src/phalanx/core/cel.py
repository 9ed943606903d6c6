"""DRA device selectors in CEL: the part Phalanx evaluates exactly, and the rest said, not guessed.

A `DeviceSelector.cel.expression` (in a DeviceClass or a claim's request) is a CEL program
over one variable, `device`, with `driver`, `attributes[<domain>]` and `capacity[<domain>]`
(Kubernetes `resource.k8s.io/v1`). `parse_selector` reads the full CEL expression grammar
(so a valid expression is never called malformed) and then decides whether Phalanx can
evaluate it:

* supported: `&&`, `||`, `!`, `? :`, parentheses; `==`/`!=` on strings, bools, ints,
  quantities and versions; `<`, `<=`, `>`, `>=` on bools, ints and strings; `x in [literals]`;
  `"name" in device.attributes["domain"]` and `has(device.attributes["domain"].name)`;
  `device.driver`; `quantity("40Gi")` with `compareTo`, `isGreaterThan`, `isLessThan`,
  `isInteger`, `asInteger`, `sign`; `semver("1.2.3")` with `compareTo`, `isGreaterThan`,
  `isLessThan`, `major`, `minor`, `patch`; `startsWith`, `endsWith`, `contains` on strings.
* anything else (arithmetic, macros such as `all`/`exists`, `cel.bind`, `matches`, floats,
  unsigned or bytes literals, maps, other variables or functions, nesting deeper than
  `MAX_NESTING`) parses to `Unsupported` with the reason.
* text that is not a CEL expression raises `CelSyntaxError` (bad input).

Evaluation follows CEL's rules: an attribute missing from a domain is an error, a domain
nobody defines is an empty map, and `&&` / `||` absorb an error when the other side decides
(`false && error` is false). A result that is an error or not a boolean is `Verdict.ERROR`:
kube-scheduler aborts the allocation then, so callers count such a device as not matching.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from typing import Protocol, TypeAlias

from phalanx.core.cel_syntax import (
    MAX_NESTING,
    Binary,
    Call,
    CelNestingError,
    CelSyntaxError,
    Conditional,
    Construct,
    Expr,
    Ident,
    Index,
    ListExpr,
    Literal,
    Select,
    Unary,
    parse,
)
from phalanx.core.errors import QuantityError, quoted
from phalanx.core.quantity import int_value, parse_quantity

__all__ = [
    "AttributeValue",
    "CelSyntaxError",
    "DeviceView",
    "Quantity",
    "Read",
    "Selector",
    "Unsupported",
    "Verdict",
    "Version",
    "parse_selector",
]

# ---- values ------------------------------------------------------------------------------

_SEMVER = re.compile(
    r"(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic version (semver.org 2.0.0), as DRA `version` attributes hold them."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _SEMVER.fullmatch(text)
        if match is None:
            raise ValueError(f"{quoted(text)} is not a semantic version (like 1.2.3)")
        pre = match["pre"]
        parts: tuple[int | str, ...] = ()
        if pre:
            parts = tuple(int(p) if p.isdigit() else p for p in pre.split("."))
            if any(
                isinstance(p, int) and str(p) != q
                for p, q in zip(parts, pre.split("."), strict=True)
            ):
                raise ValueError(f"{quoted(text)} has a pre-release number with a leading zero")
        return cls(int(match["major"]), int(match["minor"]), int(match["patch"]), parts)

    def _order(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release sorts after its pre-releases; numeric identifiers before alphanumeric ones.
        pre = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def compare(self, other: Version) -> int:
        a, b = self._order(), other._order()
        return (a > b) - (a < b)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        return text + ("-" + ".".join(str(p) for p in self.prerelease) if self.prerelease else "")


@dataclass(frozen=True, slots=True)
class Quantity:
    """A capacity or `quantity(...)` value: exact, compared by value like Kubernetes' Cmp."""

    value: Fraction


AttributeValue: TypeAlias = bool | int | str | Version


class DeviceView(Protocol):
    """What a selector may read of a device. Names are fully qualified (`domain/id`)."""

    @property
    def driver(self) -> str: ...

    def attribute(self, name: str) -> AttributeValue | None: ...

    def capacity(self, name: str) -> Fraction | None: ...


class Verdict(Enum):
    TRUE = "true"
    FALSE = "false"
    ERROR = "error"  # a CEL runtime error: kube-scheduler aborts the allocation


# ---- what Phalanx can evaluate -----------------------------------------------------------


class _Unsupported(Exception):  # noqa: N818  # internal control flow, never escapes
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A valid selector Phalanx does not evaluate (`reason` says which part).

    `necessary` are the conjuncts of a top-level `a && b && ...` Phalanx does evaluate: the
    whole is true only where each of them is, so a device failing one is not selected.
    """

    expression: str
    reason: str
    necessary: tuple[Selector, ...] = ()


# What a supported expression reads of a device: ("driver", ""), ("attribute", "d/id"),
# ("capacity", "d/id"). A DRA inventory uses it to know whether a selector depends only
# on attributes shared by identical devices.
Read: TypeAlias = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Selector:
    """A selector Phalanx evaluates exactly."""

    expression: str
    root: Expr = field(repr=False, compare=False)
    reads: frozenset[Read] = frozenset()

    def evaluate(self, device: DeviceView) -> Verdict:
        try:
            value = _Evaluator(device).eval(self.root)
        except _CelError:
            return Verdict.ERROR
        if value is True:
            return Verdict.TRUE
        if value is False:
            return Verdict.FALSE
        return Verdict.ERROR

    def matches(self, device: DeviceView) -> bool:
        return self.evaluate(device) is Verdict.TRUE


def parse_selector(expression: str) -> Selector | Unsupported:
    """A selector to evaluate, or `Unsupported` with the reason. CelSyntaxError if not CEL.

    Literal arguments of `quantity()` and `semver()` are checked here: an invalid one is a
    syntax error, as the API server's CEL compiler rejects it.
    """
    try:
        root = parse(expression)
    except CelNestingError:
        return Unsupported(expression, f"the expression is nested more than {MAX_NESTING} deep")
    checked = _check(expression, root)
    if isinstance(checked, Selector):
        return checked
    conjuncts = _conjuncts(root)
    if len(conjuncts) == 1:
        return Unsupported(expression, checked)
    # Each part is named by the whole and its place: selectors are equal by name and reads.
    parts = (_check(f"{expression} [&& part {i}]", part) for i, part in enumerate(conjuncts, 1))
    necessary = tuple(part for part in parts if isinstance(part, Selector))
    return Unsupported(expression, checked, necessary)


def _check(expression: str, root: Expr) -> Selector | str:
    """A selector for the tree, or why Phalanx does not evaluate it."""
    checker = _Checker(expression)
    try:
        kind = checker.check(root)
    except _Unsupported as unsupported:
        return unsupported.reason
    if kind not in (_T.BOOL, _T.DYN):
        return f"the expression yields {kind.value}, not a boolean"
    return Selector(expression, root, frozenset(checker.reads))


def _conjuncts(root: Expr) -> list[Expr]:
    """The operands of a top-level chain of `&&` (the expression itself when it is none)."""
    if isinstance(root, Binary) and root.op == "&&":
        return [*_conjuncts(root.left), *_conjuncts(root.right)]
    return [root]


class _T(Enum):
    """Static kinds the checker tracks (attribute values are dynamic, as in Kubernetes)."""

    BOOL = "a boolean"
    INT = "an integer"
    STRING = "a string"
    QUANTITY = "a quantity"
    VERSION = "a version"
    DYN = "an attribute value"
    DEVICE = "the device"
    DOMAINS = "an attribute or capacity map"
    DOMAIN = "one domain's attributes"
    CAPACITY_DOMAIN = "one domain's capacities"
    LIST = "a list"


_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_STRING_METHODS = frozenset({"startsWith", "endsWith", "contains"})
_COMPARABLE_METHODS = frozenset({"compareTo", "isGreaterThan", "isLessThan"})


class _Checker:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.reads: set[Read] = set()

    def check(self, expr: Expr) -> _T:
        method = getattr(self, f"_{type(expr).__name__.lower()}")
        result: _T = method(expr)
        return result

    def _literal(self, expr: Literal) -> _T:
        kinds = {"bool": _T.BOOL, "int": _T.INT, "string": _T.STRING}
        if expr.kind not in kinds:
            raise _Unsupported(f"{expr.kind} literals")
        return kinds[expr.kind]

    def _ident(self, expr: Ident) -> _T:
        if expr.name != "device":
            raise _Unsupported(f"the name {quoted(expr.name)} (only `device` is known)")
        return _T.DEVICE

    def _select(self, expr: Select) -> _T:
        operand = self.check(expr.operand)
        if operand is _T.DEVICE and not expr.test_only:
            if expr.field == "driver":
                self.reads.add(("driver", ""))
                return _T.STRING
            if expr.field in ("attributes", "capacity"):
                return _T.DOMAINS
            raise _Unsupported(f"device.{expr.field}")
        if operand in (_T.DOMAIN, _T.CAPACITY_DOMAIN):
            self._read(expr.operand, expr.field)
            if expr.test_only:
                return _T.BOOL
            return _T.QUANTITY if operand is _T.CAPACITY_DOMAIN else _T.DYN
        raise _Unsupported(f"selecting .{expr.field} from {operand.value}")

    def _domain_of(self, expr: Expr) -> tuple[str, str]:
        """("attribute" | "capacity", domain) of `device.attributes["domain"]`."""
        assert isinstance(expr, Index)
        assert isinstance(expr.operand, Select)
        assert isinstance(expr.index, Literal)
        assert isinstance(expr.index.value, str)
        kind = "attribute" if expr.operand.field == "attributes" else "capacity"
        return kind, expr.index.value

    def _read(self, domain_expr: Expr, name: str) -> None:
        kind, domain = self._domain_of(domain_expr)
        self.reads.add((kind, f"{domain}/{name}"))

    def _index(self, expr: Index) -> _T:
        operand = self.check(expr.operand)
        if operand is _T.DOMAINS:
            if not (isinstance(expr.index, Literal) and expr.index.kind == "string"):
                raise _Unsupported("a computed domain name in device.attributes[...]")
            assert isinstance(expr.operand, Select)
            return _T.DOMAIN if expr.operand.field == "attributes" else _T.CAPACITY_DOMAIN
        if operand in (_T.DOMAIN, _T.CAPACITY_DOMAIN):
            if not (isinstance(expr.index, Literal) and isinstance(expr.index.value, str)):
                raise _Unsupported("a computed attribute name")
            self._read(expr.operand, expr.index.value)
            return _T.QUANTITY if operand is _T.CAPACITY_DOMAIN else _T.DYN
        raise _Unsupported(f"indexing {operand.value}")

    def _call(self, expr: Call) -> _T:
        if expr.target is None:
            return self._global_call(expr)
        if expr.function in _MACROS:
            raise _Unsupported(f"the macro {expr.function}()")
        if isinstance(expr.target, Ident) and expr.target.name != "device":
            raise _Unsupported(f"the function {expr.target.name}.{expr.function}()")
        target = self.check(expr.target)
        args = [self.check(a) for a in expr.args]
        name = expr.function
        if target in (_T.STRING, _T.DYN) and name in _STRING_METHODS:
            if len(args) != 1 or args[0] not in (_T.STRING, _T.DYN):
                raise _Unsupported(f"{name}() with these arguments")
            return _T.BOOL
        if target in (_T.QUANTITY, _T.VERSION, _T.DYN) and name in _COMPARABLE_METHODS:
            if len(args) != 1 or args[0] not in (_T.QUANTITY, _T.VERSION, _T.DYN):
                raise _Unsupported(f"{name}() with these arguments")
            return _T.INT if name == "compareTo" else _T.BOOL
        if target in (_T.QUANTITY, _T.DYN) and name in ("isInteger", "asInteger", "sign"):
            if args:
                raise _Unsupported(f"{name}() with arguments")
            return _T.BOOL if name == "isInteger" else _T.INT
        if target in (_T.VERSION, _T.DYN) and name in ("major", "minor", "patch"):
            if args:
                raise _Unsupported(f"{name}() with arguments")
            return _T.INT
        raise _Unsupported(f"the function {name}()")

    def _global_call(self, expr: Call) -> _T:
        if expr.function not in ("quantity", "semver"):
            raise _Unsupported(f"the function {expr.function}()")
        if len(expr.args) != 1:
            raise _Unsupported(f"{expr.function}() with {len(expr.args)} arguments")
        arg = expr.args[0]
        if not (isinstance(arg, Literal) and isinstance(arg.value, str) and arg.kind == "string"):
            raise _Unsupported(f"{expr.function}() of a computed value")
        try:
            _literal_value(expr)
        except ValueError as error:
            raise CelSyntaxError(self.expression, 0, str(error)) from error
        return _T.QUANTITY if expr.function == "quantity" else _T.VERSION

    def _unary(self, expr: Unary) -> _T:
        operand = self.check(expr.operand)
        if expr.op == "!" and operand in (_T.BOOL, _T.DYN):
            return _T.BOOL
        if expr.op == "-" and operand in (_T.INT, _T.DYN):
            return _T.INT
        raise _Unsupported(f"{expr.op} on {operand.value}")

    def _binary(self, expr: Binary) -> _T:
        op = expr.op
        if op in ("+", "-", "*", "/", "%"):
            raise _Unsupported("arithmetic")
        left = self.check(expr.left)
        if op == "in":
            return self._membership(expr, left)
        right = self.check(expr.right)
        plain = (_T.BOOL, _T.INT, _T.STRING, _T.QUANTITY, _T.VERSION, _T.DYN)
        if left not in plain or right not in plain:
            raise _Unsupported(f"{op} between {left.value} and {right.value}")
        if op in ("&&", "||") and not (left in (_T.BOOL, _T.DYN) and right in (_T.BOOL, _T.DYN)):
            raise _Unsupported(f"{op} between {left.value} and {right.value}")
        if op in ("<", "<=", ">", ">="):
            ordered = (_T.BOOL, _T.INT, _T.STRING, _T.DYN)
            if left not in ordered or right not in ordered:
                raise _Unsupported(f"{op} between {left.value} and {right.value} (use compareTo)")
        return _T.BOOL

    def _membership(self, expr: Binary, left: _T) -> _T:
        right = expr.right
        if isinstance(right, ListExpr):
            for item in right.items:
                if not (isinstance(item, Literal) and item.kind in ("bool", "int", "string")):
                    raise _Unsupported("`in` on a list that is not all literals")
            if left not in (_T.BOOL, _T.INT, _T.STRING, _T.DYN):
                raise _Unsupported(f"`in` with {left.value} on the left")
            return _T.BOOL
        domain = self.check(right)
        if domain in (_T.DOMAIN, _T.CAPACITY_DOMAIN):
            if not (isinstance(expr.left, Literal) and expr.left.kind == "string"):
                raise _Unsupported("`in` on a domain with a computed name")
            assert isinstance(expr.left.value, str)
            self._read(right, expr.left.value)
            return _T.BOOL
        raise _Unsupported(f"`in` on {domain.value}")

    def _conditional(self, expr: Conditional) -> _T:
        condition = self.check(expr.condition)
        if condition not in (_T.BOOL, _T.DYN):
            raise _Unsupported(f"a condition that is {condition.value}")
        then, otherwise = self.check(expr.then), self.check(expr.otherwise)
        if then is otherwise:
            return then
        return _T.DYN

    def _listexpr(self, expr: ListExpr) -> _T:
        raise _Unsupported("a list outside `in`")

    def _construct(self, expr: Construct) -> _T:
        raise _Unsupported(expr.what)


def _literal_value(call: Call) -> Quantity | Version:
    arg = call.args[0]
    assert isinstance(arg, Literal)
    assert isinstance(arg.value, str)
    if call.function == "quantity":
        try:
            return Quantity(parse_quantity(arg.value))
        except QuantityError as error:
            raise ValueError(str(error)) from error
    return Version.parse(arg.value)


# ---- evaluation --------------------------------------------------------------------------


class _CelError(Exception):
    """A CEL runtime error (no such key, no matching overload, overflow)."""


@dataclass(frozen=True, slots=True)
class _Domain:
    kind: str  # "attribute" or "capacity"
    name: str


_MIN_INT, _MAX_INT = -(2**63), 2**63 - 1


def _same_kind(a: object, b: object) -> bool:
    # bool is an int in Python, never in CEL.
    return type(a) is type(b) or (
        isinstance(a, int) and isinstance(b, int) and (type(a) is bool) == (type(b) is bool)
    )


def _equal(a: object, b: object) -> bool:
    """CEL heterogeneous equality: values of different kinds are simply unequal."""
    if not _same_kind(a, b):
        return False
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.value == b.value
    if isinstance(a, Version) and isinstance(b, Version):
        return a.compare(b) == 0
    return a == b


def _compare(a: object, b: object) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Version) and isinstance(b, Version):
        return a.compare(b)
    if isinstance(a, str) and isinstance(b, str):
        return (a > b) - (a < b)
    if (
        isinstance(a, int)
        and isinstance(b, int)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return (a > b) - (a < b)
    raise _CelError("no matching overload")


def _order(a: object, b: object) -> int:
    """`<` and friends: CEL orders bools, ints and strings; versions and quantities have
    no such overload (they compare through compareTo)."""
    if type(a) is type(b) and isinstance(a, bool | int | str):
        return (a > b) - (a < b)  # type: ignore[operator]  # same type, checked above
    raise _CelError("no matching overload")


class _Evaluator:
    __slots__ = ("device",)

    def __init__(self, device: DeviceView) -> None:
        self.device = device

    def eval(self, expr: Expr) -> object:
        handler: Callable[[Expr], object] = getattr(self, f"_{type(expr).__name__.lower()}")
        return handler(expr)

    def _literal(self, expr: Literal) -> object:
        return expr.value

    def _ident(self, expr: Ident) -> object:
        return self.device

    def _select(self, expr: Select) -> object:
        operand = self.eval(expr.operand)
        if isinstance(operand, _Domain):
            return self._lookup(operand, expr.field, test_only=expr.test_only)
        if expr.field == "driver":
            return self.device.driver
        return expr.field  # "attributes" / "capacity": the index picks the domain

    def _index(self, expr: Index) -> object:
        operand = self.eval(expr.operand)
        index = self.eval(expr.index)
        assert isinstance(index, str)
        if isinstance(operand, _Domain):
            return self._lookup(operand, index, test_only=False)
        return _Domain("attribute" if operand == "attributes" else "capacity", index)

    def _lookup(self, domain: _Domain, name: str, *, test_only: bool) -> object:
        qualified = f"{domain.name}/{name}"
        if domain.kind == "attribute":
            value: object = self.device.attribute(qualified)
        else:
            amount = self.device.capacity(qualified)
            value = None if amount is None else Quantity(amount)
        if test_only:
            return value is not None
        if value is None:
            raise _CelError(f"no such key: {name}")
        return value

    def _call(self, expr: Call) -> object:
        if expr.target is None:
            return _literal_value(expr)
        target = self.eval(expr.target)
        args = [self.eval(a) for a in expr.args]
        name = expr.function
        if name in _STRING_METHODS:
            if not (isinstance(target, str) and isinstance(args[0], str)):
                raise _CelError("no matching overload")
            if name == "startsWith":
                return target.startswith(args[0])
            if name == "endsWith":
                return target.endswith(args[0])
            return args[0] in target
        if name in _COMPARABLE_METHODS:
            if not (isinstance(target, Quantity | Version) and type(args[0]) is type(target)):
                raise _CelError("no matching overload")
            order = _compare(target, args[0])
            if name == "compareTo":
                return order
            return order > 0 if name == "isGreaterThan" else order < 0
        if isinstance(target, Quantity) and name in ("isInteger", "asInteger", "sign"):
            amount = target.value
            if name == "sign":
                return (amount > 0) - (amount < 0)
            whole = amount.denominator == 1 and _MIN_INT <= amount <= _MAX_INT
            if name == "isInteger":
                return whole
            if not whole:
                raise _CelError("quantity is not an integer")
            return int_value(amount)
        if isinstance(target, Version) and name in ("major", "minor", "patch"):
            number: int = getattr(target, name)
            return number
        raise _CelError("no matching overload")

    def _unary(self, expr: Unary) -> object:
        operand = self.eval(expr.operand)
        if expr.op == "!":
            if not isinstance(operand, bool):
                raise _CelError("no matching overload")
            return not operand
        if isinstance(operand, bool) or not isinstance(operand, int):
            raise _CelError("no matching overload")
        if -operand > _MAX_INT:
            raise _CelError("integer overflow")
        return -operand

    def _binary(self, expr: Binary) -> object:
        op = expr.op
        if op in ("&&", "||"):
            return self._logical(expr)
        left = self.eval(expr.left)
        if op == "in":
            return self._membership(left, expr.right)
        right = self.eval(expr.right)
        if op == "==":
            return _equal(left, right)
        if op == "!=":
            return not _equal(left, right)
        order = _order(left, right)
        return {"<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0}[op]

    def _logical(self, expr: Binary) -> object:
        # Commutative short-circuit: an error on one side loses to a decisive other side.
        decisive = expr.op == "||"
        results: list[object] = []
        for side in (expr.left, expr.right):
            try:
                value = self.eval(side)
            except _CelError:
                value = _CelError
            if value is decisive:
                return decisive
            results.append(value)
        if all(isinstance(v, bool) for v in results):
            return not decisive
        raise _CelError("no matching overload")

    def _membership(self, left: object, right: Expr) -> object:
        if isinstance(right, ListExpr):
            return any(_equal(left, self.eval(item)) for item in right.items)
        domain = self.eval(right)
        assert isinstance(domain, _Domain)
        assert isinstance(left, str)
        return self._lookup(domain, left, test_only=True)

    def _conditional(self, expr: Conditional) -> object:
        condition = self.eval(expr.condition)
        if not isinstance(condition, bool):
            raise _CelError("no matching overload")
        return self.eval(expr.then if condition else expr.otherwise)
