"""DRA device taints on the real kube-apiserver and kube-scheduler 1.37 (``DRADeviceTaints``
is GA there; the default release's API server drops ``taints`` and ``tolerations``).

kwok nodes publish one NVIDIA-shaped GPU each, some tainted as NVIDIA's health monitor
taints a failed GPU (``gpu.nvidia.com/xid``, ``NoSchedule``). One-member gangs claim a GPU
through a ResourceClaim of their own (no resourceclaim controller is needed). Checked here:

* a gang that does not tolerate the taint is planned on the untainted GPU, and
  kube-scheduler's DynamicResources plugin allocates it there without refusing the node;
* a gang that tolerates it is planned on the tainted GPU when that is the only one, and
  kube-scheduler allocates it;
* a ``DeviceTaintRule`` (``resource.k8s.io/v1``, GA in 1.37) tainting a GPU its slice
  publishes untainted keeps a gang that does not tolerate it off that GPU, as
  kube-scheduler's allocator does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import launcher
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import POD_GROUP_LABEL, Gang, Scenario, pod_body
from test_dra import allocation_node, refused_by_dynamic_resources

from builders import DRA_API, claim_obj, device_request, gpu_slice_obj, nvidia_class_objs
from dra_builders import taint_rule_obj

pytestmark = pytest.mark.e2e

API = f"/apis/{DRA_API}"
GPU_CLASS = "gpu.nvidia.com"
XID = {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> launcher.ControlPlane:
    """Every fixture of this module on 1.37, with NVIDIA's DeviceClasses installed."""
    for obj in nvidia_class_objs():
        status, answer = control_plane_137.request("POST", f"{API}/deviceclasses", obj)
        assert status in (201, 409), answer
    return control_plane_137


@pytest.fixture
def slices(cluster: Scenario) -> Iterator[list[str]]:  # noqa: F811
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            cluster.api.delete(f"{API}/resourceslices/{name}")


@pytest.fixture
def rules(cluster: Scenario) -> Iterator[list[str]]:  # noqa: F811
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            cluster.api.delete(f"{API}/devicetaintrules/{name}")


def gpu_node(sc: Scenario, slices: list[str], suffix: str, *, tainted: bool) -> str:
    """A kwok node without device-plugin GPUs publishing one GPU, tainted or not."""
    name = sc.node(suffix, 0)
    obj = gpu_slice_obj(name, 1)
    if tainted:
        obj["spec"]["devices"][0]["taints"] = [dict(XID)]
    created = sc.api.create(f"{API}/resourceslices", obj)
    slices.append(obj["metadata"]["name"])
    # Our control planes keep them (1.37; 1.35 with DRADeviceTaints): a dropped taint is a
    # broken fixture, never a reason to skip.
    assert not tainted or created["spec"]["devices"][0].get("taints"), (
        "this control plane drops device taints (DRADeviceTaints is off)"
    )
    sc.nodes[name] = 0 if tainted else 1  # a tainted GPU is not counted in phalanx_gpus
    return name


def one_gpu_gang(sc: Scenario, name: str, *, tolerations: list[Obj] | None = None) -> Gang:
    """A one-member gang whose member claims one GPU through a claim of its own."""
    request = device_request("gpu", GPU_CLASS, 1)
    if tolerations is not None:
        request["exactly"]["tolerations"] = tolerations
    claim = claim_obj(f"{name}-gpu", request, namespace=sc.namespace)
    del claim["metadata"]["uid"]
    sc.api.create(f"{API}/namespaces/{sc.namespace}/resourceclaims", claim)
    sc.pod_group(name, 1)
    member = f"{name}-0"
    body = pod_body(
        member, gpus=0, node_selector=sc.selector, labels={POD_GROUP_LABEL: name}, gated=True
    )
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    sc.ungate(member)
    gang = Gang(name, (member,), 1, 0, "podgroup")
    sc.gangs[name] = gang
    return gang


def allocated_on(sc: Scenario, claim: str) -> str:
    return allocation_node(sc.api.get(f"{API}/namespaces/{sc.namespace}/resourceclaims/{claim}"))


def test_a_gang_not_tolerating_the_taint_is_planned_on_the_untainted_gpu(
    cluster: Scenario,  # noqa: F811
    slices: list[str],
) -> None:
    sick = gpu_node(cluster, slices, "sick", tainted=True)
    well = gpu_node(cluster, slices, "well", tainted=False)
    cluster.nodes_ready()
    gang = one_gpu_gang(cluster, "plain")
    where = cluster.wait_gang(gang, timeout=60)
    assert where == {"plain-0": well}, sick
    assert cluster.wait("the claim allocated", lambda: allocated_on(cluster, "plain-gpu")) == well
    assert refused_by_dynamic_resources(cluster, ["plain-0"]) == []


def test_a_gang_tolerating_the_taint_is_planned_on_the_tainted_gpu(
    cluster: Scenario,  # noqa: F811
    slices: list[str],
) -> None:
    sick = gpu_node(cluster, slices, "sick", tainted=True)
    cluster.nodes_ready()
    tolerates = [{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}]
    gang = one_gpu_gang(cluster, "tolerant", tolerations=tolerates)
    where = cluster.wait_gang(gang, timeout=60)
    assert where == {"tolerant-0": sick}
    assert (
        cluster.wait("the claim allocated", lambda: allocated_on(cluster, "tolerant-gpu")) == sick
    )
    assert refused_by_dynamic_resources(cluster, ["tolerant-0"]) == []


def test_a_gang_not_tolerating_a_device_taint_rule_is_planned_off_the_gpu_it_taints(
    control_plane: launcher.ControlPlane,
    cluster: Scenario,  # noqa: F811
    slices: list[str],
    rules: list[str],
) -> None:
    a_rule_keeps_a_plain_gang_off_the_gpu_it_taints(
        control_plane, cluster, slices, rules, version="resource.k8s.io/v1"
    )


def a_rule_keeps_a_plain_gang_off_the_gpu_it_taints(
    control_plane: launcher.ControlPlane,
    cluster: Scenario,  # noqa: F811
    slices: list[str],
    rules: list[str],
    *,
    version: str,
) -> None:
    """A DeviceTaintRule (served in `version`) taints the GPU of one of two nodes: a gang
    that does not tolerate it binds on the other, where kube-scheduler allocates it."""
    drained = gpu_node(cluster, slices, "drained", tainted=False)
    well = gpu_node(cluster, slices, "well", tainted=False)
    # The slice's pool is its node's name (tests/builders.py `slice_obj`).
    rule = taint_rule_obj(
        f"{cluster.namespace}-drain", pool=drained, device="gpu-0", api_version=version
    )
    del rule["metadata"]["uid"]
    status, answer = control_plane.request("POST", f"/apis/{version}/devicetaintrules", rule)
    assert status == 201, f"{version} DeviceTaintRules: {answer}"
    rules.append(rule["metadata"]["name"])
    cluster.nodes[drained] = 0  # a tainted GPU is not counted in phalanx_gpus
    cluster.nodes_ready()
    gang = one_gpu_gang(cluster, "plain")
    where = cluster.wait_gang(gang, timeout=60)
    assert where == {"plain-0": well}
    assert cluster.wait("the claim allocated", lambda: allocated_on(cluster, "plain-gpu")) == well
    assert refused_by_dynamic_resources(cluster, ["plain-0"]) == []
