"""An object the cluster file read before, applied again in a form Phalanx cannot read, is
gone from the model, as it is from the live source's (whose informer keeps no older
version): a dry run plans what production would plan."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from builders import (
    claim_obj,
    claim_template_obj,
    device_class_obj,
    device_request,
    dra_pod_obj,
    gpu_slice_obj,
    node_obj,
    pod_obj,
)
from phalanx.core.cache import ClusterState
from phalanx.core.model import NVIDIA_GPU
from phalanx.sources.clusterfile import ClusterFileSource

GPU_CLASS = device_class_obj("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"')


def loaded(*objects: dict[str, Any]) -> tuple[ClusterFileSource, ClusterState]:
    state = ClusterState()
    source = ClusterFileSource(list(objects))
    asyncio.run(source.start(lambda update: update(state)))
    return source, state


def free_gpus(state: ClusterState, node: str) -> int:
    info = state.node(node)
    assert info is not None
    return info.free.get(NVIDIA_GPU)


def broken(obj: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    """`obj` with the top-level section `field` replaced by `value`."""
    bad = copy.deepcopy(obj)
    bad[field] = value
    return bad


def test_a_node_that_can_no_longer_be_read_is_not_planned_onto() -> None:
    source, state = loaded(node_obj("n1"), node_obj("n2"))
    assert not source.apply(broken(node_obj("n1"), "status", {"allocatable": {"cpu": "lots"}}))
    assert state.node("n1") is None
    assert state.node("n2") is not None
    [reason] = source.rejected
    assert "Node n1" in reason
    assert 'status.allocatable["cpu"]' in reason
    source.apply(node_obj("n1"))  # read again: planned onto again
    assert state.node("n1") is not None


def test_a_pod_that_can_no_longer_be_read_is_forgotten() -> None:
    source, state = loaded(node_obj("n1"), pod_obj("a"), pod_obj("b"))
    assert not source.apply(broken(pod_obj("a"), "spec", {"containers": "none"}))
    assert state.pod_by_key("default", "a") is None
    assert state.pod_by_key("default", "b") is not None
    [reason] = source.rejected
    assert "Pod default/a" in reason
    assert "spec.containers" in reason


def test_a_bound_pod_that_can_no_longer_be_read_no_longer_holds_its_gpus() -> None:
    source, state = loaded(node_obj("n1", gpus=8), pod_obj("a", gpus=8, node="n1"))
    assert free_gpus(state, "n1") == 0
    source.apply(broken(pod_obj("a", gpus=8, node="n1"), "spec", {"containers": "none"}))
    assert free_gpus(state, "n1") == 8


@pytest.mark.parametrize(
    ("kind", "obj", "names"),
    [
        (
            "ResourceClaim",
            claim_obj("team", device_request("gpu", "gpu.nvidia.com", 2)),
            {"claims": {"gpus": "team"}},
        ),
        (
            "ResourceClaimTemplate",
            claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4)),
            {"templates": {"gpus": "four"}},
        ),
    ],
    ids=["claim", "template"],
)
def test_a_pod_naming_a_dra_object_that_can_no_longer_be_read_is_told_why(
    kind: str, obj: dict[str, Any], names: dict[str, Any]
) -> None:
    source, state = loaded(
        GPU_CLASS, gpu_slice_obj("n1"), node_obj("n1", gpus=0), obj, dra_pod_obj("w", **names)
    )
    pod = state.pod_by_key("default", "w")
    assert pod is not None
    assert pod.devices is not None
    assert pod.devices.demand.blocker == ""
    assert not source.apply(broken(obj, "spec", "none"))
    pod = state.pod_by_key("default", "w")
    assert pod is not None
    assert pod.devices is not None
    key = f"default/{obj['metadata']['name']}"
    assert f"{kind} {key} cannot be read" in pod.devices.demand.blocker
    source.apply(obj)  # read again: what the pod is told is forgotten
    pod = state.pod_by_key("default", "w")
    assert pod is not None
    assert pod.devices is not None
    assert pod.devices.demand.blocker == ""


def test_an_object_never_read_changes_nothing_else() -> None:
    source, state = loaded(node_obj("n1"), pod_obj("a"))
    assert not source.apply(broken(pod_obj("b"), "spec", {"containers": "none"}))
    assert not source.apply(broken(node_obj("n2"), "status", {"allocatable": {"cpu": "lots"}}))
    assert state.pod_by_key("default", "a") is not None
    assert state.node("n1") is not None
    assert len(source.rejected) == 2
