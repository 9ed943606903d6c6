"""A PodGroup's own ResourceClaim (Kubernetes 1.37, ``DRAWorkloadResourceClaims``) through
the real kube-apiserver and kube-scheduler 1.37 and Phalanx.

This module runs a 1.37 control plane of its own: the upstream gang API as the session's
1.37 plane serves it (``GenericWorkload``, ``scheduling.k8s.io/v1beta1``), with
``DRAWorkloadResourceClaims`` on for kube-apiserver (which otherwise drops a PodGroup's
``spec.resourceClaims``) and kube-scheduler (which otherwise accepts no claim its pod does
not control). There is no 1.37 kube-controller-manager here, so the test does what its
resourceclaim controller does for a PodGroup's template: it makes one claim from the
template, controlled by the PodGroup, and names it in the PodGroup's and each member's
``status.resourceClaimStatuses``.

Checked: a gang of three whose members share the PodGroup's claim of all four GPUs of a
node (the claim's devices are node-local, so every member must be on its node) binds whole
on one node, never in part; the claim is allocated once, there, and reserved for the
PodGroup; kube-scheduler never refuses a member for its claims. Phalanx charged the claim
to one member: charged to each, the gang would ask twelve GPUs of two 4-GPU nodes.
"""

from __future__ import annotations

from collections.abc import Iterator

import launcher
import planes
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Obj, Scenario, pod_body
from test_dialects_137 import upstream_sizes
from test_dra import allocation_node, refused_by_dynamic_resources
from test_dra_taints import slices  # noqa: F401  # fixture

from builders import DRA_API, claim_template_obj, device_request, gpu_slice_obj, nvidia_class_objs

pytestmark = pytest.mark.e2e

GANG_API = launcher.NATIVE_GANG_API["1.37"]
CLAIMS_GATE = {"DRAWorkloadResourceClaims": True}  # beta, off by default in 1.37
GROUP_VERSION = GANG_API.api_version  # scheduling.k8s.io/v1beta1
GROUPS = f"/apis/{GROUP_VERSION}"
DRA = f"/apis/{DRA_API}"
GPU_CLASS = "gpu.nvidia.com"
GPUS_PER_NODE = 4


@pytest.fixture(scope="module")
def control_plane(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """This module's 1.37 control plane (see the module docstring); replaces the session's."""
    with planes.started(
        pytestconfig,
        "control_plane",
        kube_version="1.37",
        apiserver_feature_gates={**GANG_API.apiserver_feature_gates, **CLAIMS_GATE},
        runtime_config=GANG_API.runtime_config,
        scheduler_feature_gates={**GANG_API.scheduler_feature_gates, **CLAIMS_GATE},
    ) as cp:
        for obj in nvidia_class_objs():
            status, answer = cp.request("POST", f"{DRA}/deviceclasses", obj)
            assert status in (201, 409), answer
        yield cp


def gpu_node(sc: Scenario, slices: list[str], suffix: str) -> str:  # noqa: F811
    """A kwok node without device-plugin GPUs publishing four GPUs."""
    name = sc.node(suffix, 0)
    obj = gpu_slice_obj(name, GPUS_PER_NODE)
    sc.api.create(f"{DRA}/resourceslices", obj)
    slices.append(obj["metadata"]["name"])
    sc.nodes[name] = GPUS_PER_NODE
    return name


def pod_group_with_claim(sc: Scenario, name: str, size: int, entry: str, template: str) -> Obj:
    created = sc.api.create(
        f"{GROUPS}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": GROUP_VERSION,
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": size}},
                "resourceClaims": [{"name": entry, "resourceClaimTemplateName": template}],
            },
        },
    )
    # A plane that drops the field (the gate off) is a broken fixture, never a skip.
    assert created["spec"].get("resourceClaims"), "this control plane drops PodGroup claims"
    return created


def play_the_resourceclaim_controller(
    sc: Scenario, group: Obj, entry: str, template: str, members: list[str]
) -> str:
    """What kube-controller-manager's resourceclaim controller does for the PodGroup's
    template entry: one claim from the template, controlled by the PodGroup, named in the
    PodGroup's status and then in each member's."""
    ns, name = sc.namespace, group["metadata"]["name"]
    spec = sc.api.get(f"{DRA}/namespaces/{ns}/resourceclaimtemplates/{template}")["spec"]["spec"]
    claim = sc.api.create(
        f"{DRA}/namespaces/{ns}/resourceclaims",
        {
            "apiVersion": DRA_API,
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{name}-{entry}-",
                "ownerReferences": [
                    {
                        "apiVersion": GROUP_VERSION,
                        "kind": "PodGroup",
                        "name": name,
                        "uid": group["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        },
    )
    claim_name: str = claim["metadata"]["name"]
    statuses = {"resourceClaimStatuses": [{"name": entry, "resourceClaimName": claim_name}]}
    sc.api.merge_patch(f"{GROUPS}/namespaces/{ns}/podgroups/{name}/status", {"status": statuses})
    for member in members:
        sc.api.merge_patch(f"/api/v1/namespaces/{ns}/pods/{member}/status", {"status": statuses})
    return claim_name


def member(sc: Scenario, name: str, group: str, entry: str, template: str) -> None:
    """A gated member of `group` whose claim entry matches the PodGroup's exactly."""
    body = pod_body(name, gpus=0, node_selector=sc.selector, gated=True)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    body["spec"]["resourceClaims"] = [{"name": entry, "resourceClaimTemplateName": template}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": entry}]
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)


def test_a_gang_sharing_its_podgroups_claim_binds_whole_where_the_claim_is_allocated_once(
    cluster: Scenario,  # noqa: F811
    slices: list[str],  # noqa: F811
) -> None:
    sc = cluster
    sc.monitor.gang_sizes.append(upstream_sizes)  # judged: never partially bound
    nodes = {gpu_node(sc, slices, "a"), gpu_node(sc, slices, "b")}
    sc.nodes_ready()
    template = "node-gpus"
    sc.api.create(
        f"{DRA}/namespaces/{sc.namespace}/resourceclaimtemplates",
        claim_template_obj(
            template, device_request("gpu", GPU_CLASS, GPUS_PER_NODE), namespace=sc.namespace
        ),
    )
    group = pod_group_with_claim(sc, "team", 3, "gpus", template)
    members = [f"team-{i}" for i in range(3)]
    for name in members:
        member(sc, name, "team", "gpus", template)
    claim = play_the_resourceclaim_controller(sc, group, "gpus", template, members)
    for name in members:
        sc.ungate(name)

    where = sc.wait_bound(members, timeout=45)
    [node] = set(where.values())
    assert node in nodes, where
    claims = sc.api.items(f"{DRA}/namespaces/{sc.namespace}/resourceclaims")
    assert [c["metadata"]["name"] for c in claims] == [claim]  # one claim for the gang
    status = claims[0]["status"]
    assert allocation_node(claims[0]) == node, status
    assert len(status["allocation"]["devices"]["results"]) == GPUS_PER_NODE, status
    # kube-scheduler reserved it for the PodGroup, not for each member.
    assert [(r.get("resource"), r.get("name")) for r in status["reservedFor"]] == [
        ("podgroups", "team")
    ], status
    assert refused_by_dynamic_resources(sc, members) == []
