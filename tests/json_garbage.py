"""Valid API objects with something wrong in them: strategies for fuzzing the decoders.

A mutation picks any place in a valid object (a key of any object, an index of any list)
and replaces the value there with any JSON value, deletes it, or adds a key beside it.
Starting from valid objects keeps the decoder reading past the first check, so each
mutation tests the one field it hits.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import strategies as st

from phalanx.core.errors import InvalidObjectError

Step = str | int
Path = tuple[Step, ...]

# Text a decoder may take for a number, a quantity or a name, and must refuse clearly.
AWKWARD_STRINGS = (
    "",
    " ",
    "-0",
    "-1",
    "0",
    "1e999",
    "1e-999",
    "1E3",
    "1Ei",
    "999999999999999999999Ei",
    "1.5",
    ".5",
    "5.",
    "+1",
    "0x10",
    "1_000",
    "NaN",
    "Infinity",
    "-inf",
    "١٢٣",  # Arabic-Indic digits: str.isdigit() says yes, Kubernetes says no
    "²",
    "9" * 400,
    "x" * 10_000,
    "a/b/c",
    "ns/name",
    "/",
    "\x00",
    "\u2028",
    "ſ",
    "[" * 5_000,
    "{" * 5_000,
    '{"a":' * 5_000,
    "[]",
    "{}",
    "null",
    '[{"name": "a", "minMember": 1e999}]',
    '[{"name": "a", "minMember": 99999999999999999999}]',
    "a=b c=d",
    "placeholderTimeoutInSeconds=99999999999999999999",
)

AWKWARD_NUMBERS = (
    0,
    -1,
    1,
    2**31,
    2**63,
    -(2**63) - 1,
    10**400,
    -0.0,
    0.5,
    1e308,
    -1e308,
    5e-324,
)

# Field names the decoders read, so an added key is often one that matters.
FIELD_NAMES = (
    "metadata",
    "spec",
    "status",
    "name",
    "namespace",
    "uid",
    "kind",
    "apiVersion",
    "annotations",
    "labels",
    "deletionTimestamp",
    "ownerReferences",
    "resources",
    "requests",
    "limits",
    "overhead",
    "containers",
    "initContainers",
    "minMember",
    "minResources",
    "minTaskMember",
    "subGroups",
    "podgroups",
    "schedulingPolicy",
    "gang",
    "basic",
    "minCount",
    "workloadRef",
    "devices",
    "pool",
    "count",
    "selectors",
    "tolerations",
    "taints",
    "allocation",
    "conditions",
    "topology",
    "nodeSelector",
)


def _deeply_nested(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


def _deeply_nested_object(depth: int) -> object:
    value: object = {}
    for _ in range(depth):
        value = {"a": value}
    return value


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(AWKWARD_NUMBERS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(AWKWARD_STRINGS),
)

# Any JSON value a decoder could be handed (as a JSON decoder makes it: dicts and lists).
json_values: st.SearchStrategy[object] = st.one_of(
    st.recursive(
        _scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(FIELD_NAMES)), inner),
        ),
        max_leaves=12,
    ),
    # Nesting a JSON decoder still accepts (orjson, which reads extender requests, takes
    # 1,024 levels). Built afresh each time: a later mutation may change it in place.
    st.builds(_deeply_nested, st.just(1_020)),
    st.builds(_deeply_nested_object, st.just(1_020)),
    st.builds(lambda n: ["1"] * n, st.sampled_from((1_000, 100_000))),
)


# Places deeper than this, or past this index of a list, are not picked (a deeply nested
# or long value put in by an earlier mutation would otherwise hold most of them).
MAX_DEPTH = 12
MAX_INDEX = 8


def _near_text(before: str) -> st.SearchStrategy[object]:
    """Text like a valid value, but wrong: what a typo or a careless tool writes."""
    return st.one_of(
        st.sampled_from(AWKWARD_STRINGS),
        st.sampled_from(
            (
                before + before,
                before + "x",
                "-" + before,
                before + "e999",
                before + "Ei",
                before + "m",
                before.upper(),
                before[:-1],
                f" {before}",
                before * 1_000,
                before + "²",  # digits to str.isdigit, not to Kubernetes
                "١" + before,
                f'[{{"name": "{before}", "minMember": 1}}]',
            )
        ),
        st.text(max_size=12).map(lambda junk: before + junk),
    )


def replacements(before: object) -> st.SearchStrategy[object]:
    """Any JSON value, half of the time one close to `before` (a wrong one of its kind)."""
    if isinstance(before, str):
        near = _near_text(before)
    elif isinstance(before, int) and not isinstance(before, bool):
        near = st.one_of(
            st.sampled_from(AWKWARD_NUMBERS),
            st.sampled_from((before - 1, -before, before * 2**31, str(before))),
        )
    else:
        return json_values
    return st.one_of(near, json_values)


def places(value: object, path: Path = ()) -> list[Path]:
    """Every place in a JSON value: each key of each object, each index of each list."""
    found: list[Path] = []
    if len(path) >= MAX_DEPTH:
        return found
    for key, item in _items(value):
        found.append((*path, key))
        found.extend(places(item, (*path, key)))
    return found


def objects_in(value: object, path: Path = ()) -> list[Path]:
    """Where the JSON objects are in a value (the root included)."""
    if len(path) >= MAX_DEPTH:
        return []
    found: list[Path] = [path] if isinstance(value, dict) else []
    for key, item in _items(value):
        found.extend(objects_in(item, (*path, key)))
    return found


def _items(value: object) -> list[tuple[Step, object]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return list(enumerate(value[:MAX_INDEX]))
    return []


def at(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


@dataclass(frozen=True)
class Mutation:
    action: Literal["replace", "delete", "add", "rename"]
    path: Path  # the place changed (for "add" and "rename", the new key's)
    value: object = None
    before: object = None  # what "replace" replaced

    @property
    def changes_type(self) -> bool:
        """A value of another JSON type put where one was: the decoder cannot read it as
        the field, so a refusal must be about that field, not about what refers to it.
        (`apiVersion` and `kind` pick the decoder; a decoder called directly may not read
        them at all.)"""
        return (
            self.action == "replace"
            and self.value is not None
            and self.path not in (("apiVersion",), ("kind",))
            and _json_kind(self.value) != _json_kind(self.before)
        )

    def __repr__(self) -> str:
        shown = repr(self.value)
        shown = shown if len(shown) <= 120 else shown[:120] + "…"
        return f"{self.action} {render(self.path)}" + (
            f" = {shown}" if self.action != "delete" else ""
        )


def _json_kind(value: object) -> str:
    if isinstance(value, bool | str | list | dict):
        return type(value).__name__
    if isinstance(value, int):
        return "integer"
    return "float" if isinstance(value, float) else "null"


def render(path: Path) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else f"[{json.dumps(step)}]"
    return text or "(root)"


@st.composite
def garbled(
    draw: st.DrawFn, seed: dict[str, Any], most: int = 3
) -> tuple[dict[str, Any], list[Mutation]]:
    """A copy of `seed` with one to `most` mutations, and the mutations made."""
    obj = copy.deepcopy(seed)
    done: list[Mutation] = []
    for _ in range(draw(st.integers(1, most))):
        action = draw(st.sampled_from(("replace", "replace", "delete", "add", "rename")))
        if action == "add":
            where = _one_of(draw, objects_in(obj))
            key = draw(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8)))
            value = draw(json_values)
            at(obj, where)[key] = value
            done.append(Mutation("add", (*where, key), value))
            continue
        options = places(obj)
        if not options:
            continue
        path = _one_of(draw, options)
        parent = at(obj, path[:-1])
        if action == "delete":
            del parent[path[-1]]
            done.append(Mutation("delete", path))
        elif action == "rename" and isinstance(parent, dict):
            name = draw(st.one_of(_near_text(str(path[-1])), st.text(max_size=8)))
            if isinstance(name, str):
                parent[name] = parent.pop(path[-1])
                done.append(Mutation("rename", (*path[:-1], name)))
        elif action == "replace":
            before = parent[path[-1]]
            value = draw(replacements(before))
            parent[path[-1]] = value
            done.append(Mutation("replace", path, value, before))
    return obj, done


def _one_of(draw: st.DrawFn, options: list[Path]) -> Path:
    # An index rather than `sampled_from`, whose failure reports list every option.
    return options[draw(st.integers(0, len(options) - 1))]


def field_steps(field: str) -> Path:
    """An error's JSON path (`spec.containers[0].resources.requests["cpu"]`) as steps."""
    steps: list[Step] = []
    decoder = json.JSONDecoder()
    i = 0
    while i < len(field):
        if field[i] == ".":
            i += 1
        elif field.startswith('["', i) or field.startswith("['", i):
            key, end = decoder.raw_decode(field, i + 1)
            steps.append(key)
            i = end + 1
        elif field[i] == "[":
            end = field.index("]", i)
            steps.append(int(field[i + 1 : end]))
            i = end + 1
        else:
            end = i
            while end < len(field) and field[end] not in ".[":
                end += 1
            steps.append(field[i:end])
            i = end
    return tuple(steps)


def related(field: str, mutations: list[Mutation]) -> bool:
    """Whether an error's field is on the way to, or inside, a place that was changed.

    Only asked when every mutation changed a value's type: a deleted list item or a
    renamed entry is rightly reported where something refers to it."""
    steps = field_steps(field)
    for mutation in mutations:
        path = mutation.path
        shorter = min(len(steps), len(path))
        if steps[:shorter] == path[:shorter]:
            return True
    return False


def refusal_of(
    decode: Callable[[], object], expected: tuple[type[Exception], ...]
) -> Exception | None:
    """The designated error `decode` raised, or None when it returned; any other exception
    propagates (and fails the test that called this)."""
    try:
        decode()
    except expected as error:
        return error
    return None


# A reason goes into Events, logs and HTTP answers: it quotes values cut short, never whole.
LONGEST_REASON = 1_000


def check_names_a_field(error: InvalidObjectError) -> None:
    assert str(error), "an empty message"
    assert error.kind, f"no kind in {error!s}"
    assert error.field, f"no field in {error!s}"
    assert error.reason, f"no reason in {error!s}"
    assert len(error.reason) <= LONGEST_REASON, f"a reason of {len(error.reason)} characters"
