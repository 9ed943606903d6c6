"""KubeRay's ray-operator (the pinned v1.5.0 build) creating gangs on the real control plane
(issue #12 item 4, first half: what the operator writes; scheduling it comes next).

The operator runs as a process with ``--batch-scheduler=scheduler-plugins`` on the admin
kubeconfig, with its three CRDs and the PodGroup CRD installed. No scheduler serves
``scheduler-plugins-scheduler`` here, so its pods stay Pending: these tests pin down the
objects KubeRay creates, which is what Phalanx will be asked to schedule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kuberay
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from podgroup_crd import PG_API

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def ray_operator(
    control_plane: launcher.ControlPlane, ray_operator_tools: launcher.RayOperatorTools
) -> Iterator[kuberay.RayOperator]:
    """The operator for this module (its log stays in the control plane's log dir)."""
    kuberay.install_crds(control_plane, ray_operator_tools)
    operator = kuberay.RayOperator(control_plane, ray_operator_tools)
    operator.start()
    yield operator
    operator.stop()


def create_cluster(cp: launcher.ControlPlane, ns: str, body: Obj) -> None:
    status, answer = cp.request("POST", f"{kuberay.RAY_API}/namespaces/{ns}/rayclusters", body)
    assert status == 201, answer


def cluster_pods(
    cp: launcher.ControlPlane, operator: kuberay.RayOperator, ns: str, name: str, count: int
) -> list[Obj]:
    """The cluster's pods, once the operator has created ``count`` of them."""

    def created() -> list[Obj] | None:
        operator.component.check_alive()
        status, answer = cp.request(
            "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={kuberay.CLUSTER_LABEL}%3D{name}"
        )
        assert status == 200, answer
        pods: list[Obj] = answer["items"]
        return pods if len(pods) == count else None

    return launcher.wait_for(
        f"{count} pods of RayCluster {ns}/{name}", created, timeout=90, on_timeout=operator.tail
    )


def node_types(pods: list[Obj]) -> list[str]:
    return sorted(p["metadata"]["labels"].get(kuberay.NODE_TYPE_LABEL, "") for p in pods)


def test_a_gang_labelled_raycluster_becomes_a_pod_group_of_head_and_workers(
    control_plane: launcher.ControlPlane, ray_operator: kuberay.RayOperator, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    create_cluster(cp, ns, kuberay.ray_cluster("gang", workers=2, worker_gpus=1))

    pods = cluster_pods(cp, ray_operator, ns, "gang", 3)
    assert node_types(pods) == ["head", "worker", "worker"]
    for pod in pods:
        assert pod["spec"]["schedulerName"] == kuberay.SCHEDULER_NAME, pod["metadata"]["name"]
        assert pod["metadata"]["labels"].get(kuberay.POD_GROUP_LABEL) == "gang", pod["metadata"]
    # The PodGroup is created before the first pod, in the same reconcile.
    status, group = cp.request("GET", f"{PG_API}/namespaces/{ns}/podgroups/gang")
    assert status == 200, f"{group}\n{ray_operator.tail()}"
    assert group["spec"]["minMember"] == 3  # 2 workers + the head
    assert group["spec"]["minResources"][launcher.GPU_RESOURCE] == "2"
    (owner,) = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("RayCluster", "gang")


def test_an_unlabelled_raycluster_gets_the_scheduler_name_but_no_gang(
    control_plane: launcher.ControlPlane, ray_operator: kuberay.RayOperator, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    create_cluster(cp, ns, kuberay.ray_cluster("solo", workers=2, worker_gpus=1, gang=False))

    pods = cluster_pods(cp, ray_operator, ns, "solo", 3)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == kuberay.SCHEDULER_NAME, pod["metadata"]["name"]
        assert kuberay.POD_GROUP_LABEL not in pod["metadata"]["labels"], pod["metadata"]
    # Its pods exist, so the reconcile that would have created a PodGroup has run.
    status, answer = cp.request("GET", f"{PG_API}/namespaces/{ns}/podgroups")
    assert status == 200, answer
    assert answer["items"] == []
