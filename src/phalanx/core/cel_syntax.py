"""CEL expression syntax: tokens and the syntax tree, for the whole expression grammar.

The grammar is CEL's (cel-spec `langdef.md`): conditional `? :`, `||`, `&&`, relations
(including `in`), `+ - * / %`, unary `! -`, member selection, indexing, calls, list and map
literals, message construction and every literal form (ints, uints, doubles, strings with
escapes, raw, triple-quoted and bytes). Reading all of it means a valid expression is never
reported as malformed; `phalanx.core.cel` decides which parts Phalanx evaluates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

from phalanx.core.errors import quoted


class CelSyntaxError(ValueError):
    """Text that is not a CEL expression (or a literal Kubernetes would reject)."""

    def __init__(self, expression: str, position: int, reason: str) -> None:
        super().__init__(expression, position, reason)
        self.expression = expression
        self.position = position
        self.reason = reason

    def __str__(self) -> str:
        return f"CEL expression {quoted(self.expression)}: {self.reason} at offset {self.position}"


class CelNestingError(Exception):
    """Valid CEL nested deeper than Phalanx reads (`MAX_NESTING`): not bad input, just more
    than a selector needs, and more than Python's call stack would take."""

    def __init__(self, expression: str) -> None:
        super().__init__(expression)
        self.expression = expression

    def __str__(self) -> str:
        return f"CEL expression {quoted(self.expression)} is nested more than {MAX_NESTING} deep"


# How deep Phalanx reads an expression: parentheses, calls, lists and indexes inside each
# other, and levels of the syntax tree. Selectors need a handful; CEL's parser allows 200
# per kind of nesting, which would exhaust Python's stack here and in the evaluator.
MAX_NESTING = 40


# ---- tokens ------------------------------------------------------------------------------

_RESERVED = frozenset(
    [
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)
# Longest first, so "<=" is never read as "<" then "=".
_PUNCTUATION = (
    "==",
    "!=",
    "<=",
    ">=",
    "&&",
    "||",
    "<",
    ">",
    "!",
    "?",
    ":",
    ".",
    ",",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "+",
    "-",
    "*",
    "/",
    "%",
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(
    r"0[xX][0-9a-fA-F]+[uU]?|[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
    r"|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[uU]?"
)
_DIGITS = frozenset("0123456789")
_SPACE = re.compile(r"(?:[ \t\n\r\f]+|//[^\n]*)+")
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "ident", "int", "uint", "float", "string", "bytes", "punct", "end"
    text: str
    position: int
    value: object = None


class _Lexer:
    def __init__(self, expression: str) -> None:
        self.text = expression
        self.position = 0

    def error(self, reason: str, position: int | None = None) -> CelSyntaxError:
        where = self.position if position is None else position
        return CelSyntaxError(self.text, where, reason)

    def tokens(self) -> list[_Token]:
        result = []
        while True:
            token = self._next()
            result.append(token)
            if token.kind == "end":
                return result

    def _next(self) -> _Token:
        text = self.text
        space = _SPACE.match(text, self.position)
        if space is not None:
            self.position = space.end()
        start = self.position
        if start >= len(text):
            return _Token("end", "", start)
        char = text[start]
        if char in "rRbB" and start + 1 < len(text):
            prefix = text[start : start + 2].lower()
            if prefix in ("rb", "br") and start + 2 < len(text) and text[start + 2] in "'\"":
                self.position = start + 2
                return self._string(start, raw=True, is_bytes=True)
            if text[start + 1] in "'\"":
                self.position = start + 1
                return self._string(start, raw=char in "rR", is_bytes=char in "bB")
        if char in "'\"":
            return self._string(start, raw=False, is_bytes=False)
        # ASCII digits only, as CEL's grammar has them (str.isdigit also takes "²" and "١").
        if char in _DIGITS or (char == "." and text[start + 1 : start + 2] in _DIGITS):
            return self._number(start)
        ident = _IDENT.match(text, start)
        if ident is not None:
            self.position = ident.end()
            return _Token("ident", ident.group(), start)
        for punct in _PUNCTUATION:
            if text.startswith(punct, start):
                self.position = start + len(punct)
                return _Token("punct", punct, start)
        raise self.error(f"unexpected character {quoted(char)}")

    def _number(self, start: int) -> _Token:
        match = _NUMBER.match(self.text, start)
        assert match is not None  # the caller saw a digit
        self.position = match.end()
        raw = match.group()
        follows = self.text[self.position : self.position + 1]
        if follows and (follows.isalnum() or follows == "_"):
            raise self.error(f"malformed number {quoted(raw + follows)}", start)
        # Digits are decimal even with leading zeros (`007` is 7); only 0x is hexadecimal.
        base = 16 if raw[:2].lower() == "0x" else 10
        if raw[-1] in "uU":
            return _Token("uint", raw, start, int(raw[:-1], base))
        if any(c in raw for c in ".eE") and base == 10:
            return _Token("float", raw, start, float(raw))
        value = int(raw, base)
        if value > 2**63:  # 2^63 itself is allowed only as the operand of unary minus
            raise self.error(f"integer {raw} is out of range", start)
        return _Token("int", raw, start, value)

    def _string(self, start: int, *, raw: bool, is_bytes: bool) -> _Token:
        text = self.text
        quote = text[self.position]
        triple = text.startswith(quote * 3, self.position)
        delimiter = quote * 3 if triple else quote
        i = self.position + len(delimiter)
        out: list[str] = []
        while True:
            if i >= len(text):
                raise self.error("unterminated string", start)
            if text.startswith(delimiter, i):
                i += len(delimiter)
                break
            char = text[i]
            if char == "\n" and not triple:
                raise self.error("newline in a single-quoted string", i)
            if char == "\\" and not raw:
                decoded, i = self._escape(i)
                out.append(decoded)
                continue
            if char == "\\" and raw and i + 1 < len(text) and text[i + 1] == quote and not triple:
                out.append(text[i : i + 2])  # a raw string still cannot end on an escaped quote
                i += 2
                continue
            out.append(char)
            i += 1
        self.position = i
        value = "".join(out)
        return _Token("bytes" if is_bytes else "string", text[start:i], start, value)

    def _escape(self, i: int) -> tuple[str, int]:
        text = self.text
        if i + 1 >= len(text):
            raise self.error("unterminated escape sequence", i)
        char = text[i + 1]
        if char in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[char], i + 2
        digits = {"x": 2, "X": 2, "u": 4, "U": 8}.get(char)
        if digits is not None:
            chunk = text[i + 2 : i + 2 + digits]
            if len(chunk) != digits or not all(c in "0123456789abcdefABCDEF" for c in chunk):
                raise self.error(f"malformed \\{char} escape", i)
            code = int(chunk, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise self.error(f"\\{char}{chunk} is not a Unicode scalar value", i)
            return chr(code), i + 2 + digits
        if char in "0123":
            chunk = text[i + 1 : i + 4]
            if len(chunk) != 3 or not all(c in "01234567" for c in chunk):
                raise self.error("malformed octal escape", i)
            return chr(int(chunk, 8)), i + 4
        raise self.error(f"unknown escape sequence \\{char}", i)


# ---- syntax tree -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    value: object  # bool | int | str | None, or _Unrepresented for float / uint / bytes
    kind: str  # "bool", "int", "string", "null", "float", "uint", "bytes"


@dataclass(frozen=True, slots=True)
class Ident:
    name: str


@dataclass(frozen=True, slots=True)
class Select:
    operand: Expr
    field: str
    test_only: bool = False  # inside has(...)


@dataclass(frozen=True, slots=True)
class Index:
    operand: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Call:
    target: Expr | None  # None for a global function: quantity("1Gi")
    function: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # "!" or "-"
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Conditional:
    condition: Expr
    then: Expr
    otherwise: Expr


@dataclass(frozen=True, slots=True)
class ListExpr:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Construct:
    """A map literal or message construction: valid CEL, never needed by a selector."""

    what: str


Expr: TypeAlias = (
    Literal | Ident | Select | Index | Call | Unary | Binary | Conditional | ListExpr | Construct
)

_RELATIONS = ("<", "<=", ">=", ">", "==", "!=", "in")
_LOGICAL = ("||", "&&")


class _Parser:
    def __init__(self, expression: str) -> None:
        self.lexer = _Lexer(expression)
        self.tokens = self.lexer.tokens()
        self.index = 0
        self.depth = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def error(self, reason: str) -> CelSyntaxError:
        return self.lexer.error(reason, self.token.position)

    def accept(self, punct: str) -> bool:
        if self.token.kind == "punct" and self.token.text == punct:
            self.index += 1
            return True
        return False

    def expect(self, punct: str) -> None:
        if not self.accept(punct):
            found = self.token.text or "the end"
            raise self.error(f"expected {quoted(punct)}, found {quoted(found)}")

    def parse(self) -> Expr:
        if self.token.kind == "end":
            raise self.error("empty expression")
        expr = self.expr()
        if self.token.kind != "end":
            raise self.error(f"unexpected {quoted(self.token.text)}")
        return expr

    def expr(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise CelNestingError(self.lexer.text)
        condition = self.binary(0)
        if self.accept("?"):
            then = self.binary(0)
            self.expect(":")
            result: Expr = Conditional(condition, then, self.expr())
        else:
            result = condition
        self.depth -= 1
        return result

    # Precedence climbing: ||, &&, relations, additive, multiplicative.
    _LEVELS: tuple[tuple[str, ...], ...] = (
        ("||",),
        ("&&",),
        _RELATIONS,
        ("+", "-"),
        ("*", "/", "%"),
    )

    def binary(self, level: int) -> Expr:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        ops = self._LEVELS[level]
        terms = [left]  # of a chain of `&&` or `||`
        while True:
            token = self.token
            is_op = (token.kind == "punct" and token.text in ops) or (
                token.kind == "ident" and token.text == "in" and "in" in ops
            )
            if not is_op:
                return _balanced(ops[0], terms) if ops[0] in _LOGICAL else left
            self.index += 1
            right = self.binary(level + 1)
            terms.append(right)
            left = Binary(token.text, left, right)

    def unary(self) -> Expr:
        # A run of one operator, as CEL reads it: an even number of `!` or `-` cancels out.
        op = self.token.text if self.token.kind == "punct" else ""
        if op not in ("!", "-"):
            return self.member(self.primary())
        runs = 0
        while self.token.kind == "punct" and self.token.text == op:
            self.index += 1
            runs += 1
        if runs % 2 == 0:
            return self.member(self.primary())
        if op == "-" and self.token.kind == "int":
            value = self.token.value
            assert isinstance(value, int)
            self.index += 1
            return self.member(Literal(-value, "int"))
        return Unary(op, self.member(self.primary()))

    def member(self, expr: Expr) -> Expr:
        while True:
            if self.accept("."):
                name = self.ident()
                if self.accept("("):
                    expr = Call(expr, name, self.arguments(")"))
                elif self.accept("{"):
                    self.skip_braces()
                    return Construct(f"message construction ({name})")
                else:
                    expr = Select(expr, name)
            elif self.accept("["):
                index = self.expr()
                self.expect("]")
                expr = Index(expr, index)
            else:
                return expr

    def ident(self) -> str:
        token = self.token
        if token.kind != "ident":
            raise self.error(f"expected a name, found {quoted(token.text or 'the end')}")
        if token.text in _RESERVED or token.text in ("in", "true", "false", "null"):
            raise self.error(f"{quoted(token.text)} is a reserved word")
        self.index += 1
        return token.text

    def arguments(self, closing: str) -> tuple[Expr, ...]:
        args: list[Expr] = []
        if self.accept(closing):
            return ()
        while True:
            args.append(self.expr())
            if self.accept(closing):
                return tuple(args)
            self.expect(",")
            if closing == "]" and self.accept(closing):  # a trailing comma in a list
                return tuple(args)

    def primary(self) -> Expr:
        token = self.token
        if token.kind in ("int", "uint", "float", "string", "bytes"):
            self.index += 1
            if token.kind == "int" and isinstance(token.value, int) and token.value >= 2**63:
                raise self.error(f"integer {token.text} is out of range")
            return Literal(token.value, token.kind)
        if token.kind == "ident" and token.text in ("true", "false"):
            self.index += 1
            return Literal(token.text == "true", "bool")
        if token.kind == "ident" and token.text == "null":
            self.index += 1
            return Literal(None, "null")
        if self.accept("("):
            inner = self.expr()
            self.expect(")")
            return inner
        if self.accept("["):
            return ListExpr(self.arguments("]"))
        if self.accept("{"):
            self.skip_braces()
            return Construct("a map literal")
        self.accept(".")  # a leading dot names the root scope: `.device` is `device`
        name = self.ident()
        if self.accept("("):
            args = self.arguments(")")
            if name == "has":
                return self.has(args)
            return Call(None, name, args)
        if self.accept("{"):
            self.skip_braces()
            return Construct(f"message {name}")
        return Ident(name)

    def has(self, args: tuple[Expr, ...]) -> Expr:
        if len(args) != 1 or not isinstance(args[0], Select):
            raise self.error("has() takes one field selection, like has(a.b)")
        select = args[0]
        return Select(select.operand, select.field, test_only=True)

    def skip_braces(self) -> None:
        """Map literals and message construction are read only to be refused as unsupported."""
        depth = 1
        while depth:
            token = self.token
            if token.kind == "end":
                raise self.error("unterminated {")
            if token.kind == "punct" and token.text == "{":
                depth += 1
            elif token.kind == "punct" and token.text == "}":
                depth -= 1
            self.index += 1


def _balanced(op: str, terms: list[Expr]) -> Expr:
    """A chain of `&&` or `||` as a balanced tree, as CEL's parser builds it: its depth
    grows with the log of its length (`&&` and `||` are associative, errors included)."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return Binary(op, _balanced(op, terms[:middle]), _balanced(op, terms[middle:]))


def _children(expr: Expr) -> tuple[Expr, ...]:
    match expr:
        case Select(operand=operand) | Unary(operand=operand):
            return (operand,)
        case Index(operand=operand, index=index):
            return (operand, index)
        case Call(target=target, args=args):
            return args if target is None else (target, *args)
        case Binary(left=left, right=right):
            return (left, right)
        case Conditional(condition=condition, then=then, otherwise=otherwise):
            return (condition, then, otherwise)
        case ListExpr(items=items):
            return items
    return ()


def _depth(root: Expr) -> int:
    """Levels of the tree, counted without recursion (the tree may be deep)."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        expr, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in _children(expr))
    return deepest


def parse(expression: str) -> Expr:
    """The syntax tree of a CEL expression; CelSyntaxError if it is not one,
    CelNestingError if it is nested deeper than `MAX_NESTING`."""
    root = _Parser(expression).parse()
    if _depth(root) > MAX_NESTING:
        raise CelNestingError(expression)
    return root
