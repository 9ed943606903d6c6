"""Extended resources served by DRA devices (KEP-5004, GA in Kubernetes 1.37), through the
real kube-apiserver and kube-scheduler 1.37.

A DeviceClass selecting NVIDIA's GPUs sets ``extendedResourceName: nvidia.com/gpu``; kwok
nodes publish four GPUs each in a ResourceSlice and have no ``nvidia.com/gpu`` allocatable.
Gangs whose members ask ``nvidia.com/gpu`` in their containers (no claims) are then served
by kube-scheduler's DynamicResources plugin, which makes an allocated claim for each member
in PreBind. Checked here:

* a gang binds whole onto the DRA-only nodes, and every member's claim (the one
  ``status.extendedResourceClaimStatus`` names) is allocated on the node it was bound to,
  without the plugin refusing a reserved node;
* a second gang that would over-commit the devices (one node has room for one of its two
  members) holds nothing and waits whole: no member bound, no claim made;
* on a DRA node whose devices a claim pod partly holds, beside a device-plugin node, a
  gang asking ``nvidia.com/gpu`` gets the devices the claim left and the device plugin's
  GPUs, one member each, and only the DRA member gets a claim.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import launcher
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import POD_GROUP_LABEL, Gang, Scenario, pod_body
from test_dra import allocation_node, refused_by_dynamic_resources
from test_dra_taints import slices  # noqa: F401  # a fixture: the slices a spec published

from builders import (
    DRA_API,
    NVIDIA_CLASSES,
    claim_obj,
    device_class_obj,
    device_request,
    gpu_slice_obj,
)

pytestmark = pytest.mark.e2e

API = f"/apis/{DRA_API}"
# Its own class (not NVIDIA's gpu.nvidia.com, which other modules install without the
# field): deleted after the module, so nvidia.com/gpu is served by DRA here only.
SERVING_CLASS = "extended-gpu.e2e.phalanx.io"
GPUS = 4  # per node
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """Every fixture of this module on 1.37, with a class serving nvidia.com/gpu."""
    obj = device_class_obj(SERVING_CLASS, NVIDIA_CLASSES["gpu.nvidia.com"])
    obj["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    status, answer = control_plane_137.request("POST", f"{API}/deviceclasses", obj)
    assert status == 201, answer
    try:
        yield control_plane_137
    finally:
        control_plane_137.request("DELETE", f"{API}/deviceclasses/{SERVING_CLASS}")


def dra_node(sc: Scenario, slices: list[str], suffix: str) -> str:  # noqa: F811
    """A kwok node without device-plugin GPUs whose slice publishes four GPUs."""
    name = sc.node(suffix, 0)
    obj = gpu_slice_obj(name, GPUS)
    sc.api.create(f"{API}/resourceslices", obj)
    slices.append(obj["metadata"]["name"])
    sc.nodes[name] = GPUS  # what phalanx_gpus counts once the slice is in
    return name


def claim_gang(sc: Scenario, name: str, gpus: int) -> Gang:
    """A one-member gang whose member claims `gpus` GPUs of the class through a claim of
    its own (no resourceclaim controller needed)."""
    claim = claim_obj(
        f"{name}-gpus", device_request("gpu", SERVING_CLASS, gpus), namespace=sc.namespace
    )
    del claim["metadata"]["uid"]
    sc.api.create(f"{API}/namespaces/{sc.namespace}/resourceclaims", claim)
    sc.pod_group(name, 1)
    member = f"{name}-0"
    body = pod_body(member, gpus=0, node_selector=sc.selector, labels={POD_GROUP_LABEL: name})
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    gang = Gang(name, (member,), 1, 0, "podgroup")
    sc.gangs[name] = gang
    return gang


def extended_claims(sc: Scenario) -> dict[str, str]:
    """pod -> the node the claim kube-scheduler made for its extended resources is
    allocated on ("" while unallocated), for every pod that names one."""
    claims = {
        c["metadata"]["name"]: c
        for c in sc.api.items(f"{API}/namespaces/{sc.namespace}/resourceclaims")
    }
    found = {}
    for name, pod in sc.pods().items():
        made = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
        if made.get("resourceClaimName"):
            found[name] = allocation_node(claims.get(made["resourceClaimName"]))
    return found


def test_a_gang_asking_nvidia_gpu_binds_whole_onto_dra_only_nodes_and_a_second_one_waits(
    cluster: Scenario,  # noqa: F811
    slices: list[str],  # noqa: F811
) -> None:
    nodes = [dra_node(cluster, slices, f"h{i}") for i in range(3)]
    cluster.nodes_ready()
    replans_before = cluster.phalanx.metric("phalanx_replans_total", cause="dra")
    first = cluster.gang("first", 2, GPUS)

    where = cluster.wait_gang(first, timeout=30)

    assert len(set(where.values())) == 2, where  # four GPUs each: one node per member
    assert set(where.values()) <= set(nodes), where

    def allocated() -> dict[str, str] | None:
        found = extended_claims(cluster)
        return found if len(found) == len(first.members) and all(found.values()) else None

    claimed = cluster.wait("each member's extended-resource claim allocated", allocated)
    assert claimed == where, f"{claimed}\n{cluster.diagnostics()}"
    assert refused_by_dynamic_resources(cluster, first.members) == []
    assert cluster.phalanx.metric("phalanx_replans_total", cause="dra") == replans_before

    # One node is left with four free GPUs: kube-scheduler alone would bind one member.
    second = cluster.gang("second", 2, GPUS)
    cluster.wait_event("second", "cannot place 2 member(s)", timeout=20)
    cluster.assert_unbound_for(second.members, 3.0)
    assert set(extended_claims(cluster)) == set(first.members)
    assert cluster.phalanx.metric("phalanx_reserved_gpus") == 0
    for node in nodes:
        used = GPUS if node in where.values() else 0
        assert cluster.phalanx.metric("phalanx_gpus", node=node, state="used") == used


def test_a_gang_asking_nvidia_gpu_shares_a_dra_node_with_a_claim_and_uses_the_device_plugin(
    cluster: Scenario,  # noqa: F811
    slices: list[str],  # noqa: F811
) -> None:
    dra = dra_node(cluster, slices, "dra")
    plugin = cluster.node("plugin", 2)
    cluster.nodes_ready()
    holder = claim_gang(cluster, "holder", 2)
    assert cluster.wait_gang(holder, timeout=30) == {"holder-0": dra}

    gang = cluster.gang("mixed", 2, 2)  # 4 GPUs: the 2 the claim left, and the plugin's 2

    where = cluster.wait_gang(gang, timeout=30)
    assert sorted(where.values()) == sorted([dra, plugin]), where
    served = next(m for m, node in where.items() if node == dra)

    def allocated() -> dict[str, str] | None:
        found = extended_claims(cluster)
        return found if found.get(served) else None

    assert cluster.wait("the DRA member's claim allocated", allocated) == {served: dra}
    assert refused_by_dynamic_resources(cluster, gang.members) == []
