"""A cluster file source binds as the API server does: a pod once, to a node that exists."""

from __future__ import annotations

import asyncio

import pytest

from builders import node_obj, pod_obj
from phalanx.core.cache import ClusterState
from phalanx.core.model import Binding
from phalanx.sources.base import BindError
from phalanx.sources.clusterfile import ClusterFileSource


def started() -> tuple[ClusterFileSource, ClusterState]:
    state = ClusterState()
    source = ClusterFileSource([node_obj("n1"), node_obj("n2"), pod_obj("p", uid="u-p")])
    asyncio.run(source.start(lambda update: update(state)))
    return source, state


def bind(source: ClusterFileSource, state: ClusterState, node: str) -> None:
    pod = state.pod_by_key("default", "p")
    assert pod is not None
    asyncio.run(source.bind(Binding(pod.ref, node)))


def test_a_pending_pod_is_bound_and_the_binding_kept() -> None:
    source, state = started()
    bind(source, state, "n1")
    pod = state.pod_by_key("default", "p")
    assert pod is not None
    assert pod.node_name == "n1"
    assert source.bindings == [("default/p", "n1")]


@pytest.mark.parametrize("node", ["n1", "n2"], ids=["its-own-node", "another-node"])
def test_a_bound_pod_bound_again_is_a_conflict_as_the_api_answers_it(node: str) -> None:
    source, state = started()
    bind(source, state, "n1")
    with pytest.raises(BindError) as raised:
        bind(source, state, node)
    assert raised.value.conflict
    assert "already bound to n1" in str(raised.value)
    assert source.bindings == [("default/p", "n1")]


def test_a_binding_to_a_node_that_does_not_exist_is_refused() -> None:
    source, state = started()
    with pytest.raises(BindError, match="node n9 not found"):
        bind(source, state, "n9")
    assert source.bindings == []
