"""Execution-plan builders for tests: one-line plan nodes and random well-formed plans."""

from __future__ import annotations

import json
from itertools import count

from hypothesis import strategies as st

from phalanx.core.plan import parse_plan


def ex(member: str) -> dict[str, object]:
    return {"execute": member}


def seq(*items: object) -> dict[str, object]:
    return {"sequence": list(items)}


def par(*items: object) -> dict[str, object]:
    return {"parallel": list(items)}


TAGS = ("gpu", "a100", "spot")
PLACEHOLDER = "?"

# ---- random well-formed plans ----------------------------------------------------------

_leaf = st.sampled_from(["execute", "step"]).map(lambda k: {k: PLACEHOLDER})
_block = st.builds(
    lambda kind, n: {kind: [PLACEHOLDER] * n},
    st.sampled_from(["composite", "stream"]),
    st.integers(0, 4),
)


def _compound(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    lists = st.builds(
        lambda kind, items: {kind: items},
        st.sampled_from(["sequence", "parallel", "trials"]),
        st.lists(children, max_size=4),
    )
    loop = children.map(lambda body: {"loop": PLACEHOLDER, "body": body})
    # Arm names never look like member ids, so tests can find ids in the JSON text.
    arm_names = st.sampled_from(["yes", "no", "retry", "else"])
    branch = st.dictionaries(arm_names, children, max_size=3).map(
        lambda arms: {"branch": PLACEHOLDER, "arms": arms}
    )
    remote = st.builds(
        lambda inner, tag: {"remote": inner, "tag": tag}, children, st.sampled_from(TAGS)
    )
    return st.one_of(lists, loop, branch, remote)


def _number(value: object, ids: count[int]) -> object:
    """A copy of `value` with every placeholder id replaced by a fresh one (m0, m1, ...)."""
    if value == PLACEHOLDER:
        return f"m{next(ids)}"
    if isinstance(value, list):
        return [_number(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _number(v, ids) for k, v in value.items()}
    return value


plans_json = st.recursive(st.one_of(_leaf, _block, st.just({})), _compound, max_leaves=30).map(
    lambda tree: _number(tree, count())
)
plans = plans_json.map(lambda tree: parse_plan(json.dumps(tree)))
