"""Kubernetes 1.37's own gang scheduling, on the toolchain's 1.37 build (issue #12 item 5).

The vanilla 1.37 kube-scheduler (no extender, default profile) runs with ``GenericWorkload``
on, against a 1.37 kube-apiserver serving ``scheduling.k8s.io/v1beta1``. A gang is a
standalone ``PodGroup`` (``spec.schedulingPolicy.gang.minCount``) and pods that name it in
``spec.schedulingGroup.podGroupName``. The assertions are on what kube-scheduler itself did:
its bindings, its ``scheduler_unschedulable_pods`` gauge for the ``GangScheduling`` plugin
(which holds members at PreEnqueue until ``minCount`` exist), and the
``PodGroupInitiallyScheduled`` condition its pod-group cycle writes on the PodGroup.

Pods and PodGroups go through raw REST: the ``kubernetes`` client's models predate these
fields and would drop them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest

PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
GANG_PLUGIN = "GangScheduling"
GPUS_PER_NODE = 8

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def native_scheduler(control_plane_137: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """The vanilla 1.37 kube-scheduler (the control plane's gang gates on) for this module."""
    control_plane_137.start_scheduler()
    yield control_plane_137
    control_plane_137.stop_scheduler()


def pod_group(cp: launcher.ControlPlane, ns: str, name: str, *, min_count: int) -> Obj:
    body = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
    status, answer = cp.request("POST", PODGROUPS.format(ns=ns), body)
    assert status == 201, answer
    assert isinstance(answer, dict)
    return answer


def member(cp: launcher.ControlPlane, ns: str, name: str, *, group: str, gpus: int) -> None:
    """A pod of gang ``group`` asking for ``gpus`` GPUs, for the default scheduler."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulingGroup": {"podGroupName": group},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/trainer:1",  # kwok runs nothing
                    "resources": {
                        "requests": {launcher.GPU_RESOURCE: str(gpus)},
                        "limits": {launcher.GPU_RESOURCE: str(gpus)},
                    },
                }
            ],
        },
    }
    status, answer = cp.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
    assert status == 201, answer
    # The apiserver keeps the field only with GenericWorkload on: proof the gate took.
    assert answer["spec"].get("schedulingGroup") == {"podGroupName": group}, answer["spec"]


def bindings(cp: launcher.ControlPlane, ns: str) -> dict[str, str]:
    """Pod name -> the node it is bound to ('' while unbound)."""
    status, answer = cp.request("GET", f"/api/v1/namespaces/{ns}/pods")
    assert status == 200, answer
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in answer["items"]}


def initially_scheduled(cp: launcher.ControlPlane, ns: str, group: str) -> Obj | None:
    """The PodGroup's ``PodGroupInitiallyScheduled`` condition, once kube-scheduler wrote it."""
    status, answer = cp.request("GET", f"{PODGROUPS.format(ns=ns)}/{group}")
    assert status == 200, answer
    for condition in (answer.get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodGroupInitiallyScheduled":
            return dict(condition)
    return None


def held_by_gang_plugin(cp: launcher.ControlPlane) -> int:
    """``scheduler_unschedulable_pods{plugin="GangScheduling"}``: members it holds back."""
    for line in cp.scheduler_metrics().splitlines():
        if line.startswith("scheduler_unschedulable_pods{") and f'plugin="{GANG_PLUGIN}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def wait_condition(cp: launcher.ControlPlane, ns: str, group: str, status: str) -> Obj:
    def written() -> Obj | None:
        condition = initially_scheduled(cp, ns, group)
        return condition if condition and condition["status"] == status else None

    return launcher.wait_for(
        f"PodGroup {ns}/{group} PodGroupInitiallyScheduled={status}",
        written,
        timeout=60,
        on_timeout=cp.log_tails,
    )


def wait_all_bound(cp: launcher.ControlPlane, ns: str, count: int) -> dict[str, str]:
    def bound() -> dict[str, str] | None:
        now = bindings(cp, ns)
        return now if len(now) == count and all(now.values()) else None

    return launcher.wait_for(
        f"{count} pods of {ns} bound", bound, timeout=60, on_timeout=cp.log_tails
    )


def test_the_137_control_plane_serves_the_gang_api_at_v1beta1(
    control_plane_137: launcher.ControlPlane,
) -> None:
    status, version = control_plane_137.request("GET", "/version")
    assert status == 200, version
    assert version["gitVersion"] == control_plane_137.release.version
    status, resources = control_plane_137.request("GET", "/apis/scheduling.k8s.io/v1beta1")
    assert status == 200, resources
    served = {r["name"] for r in resources["resources"]}
    assert {"podgroups", "podgroups/status", "workloads"} <= served


def test_a_gang_is_held_until_min_count_members_exist_then_bound_whole(
    native_scheduler: launcher.ControlPlane,
    namespace_137: str,
    gpu_nodes_137: Callable[..., Obj],
) -> None:
    cp, ns = native_scheduler, namespace_137
    for i in range(3):
        gpu_nodes_137(f"{ns}-gpu-{i}", gpus=GPUS_PER_NODE)
    pod_group(cp, ns, "trainers", min_count=3)
    held_before = held_by_gang_plugin(cp)

    member(cp, ns, "trainer-0", group="trainers", gpus=GPUS_PER_NODE)
    member(cp, ns, "trainer-1", group="trainers", gpus=GPUS_PER_NODE)
    launcher.wait_for(
        "GangScheduling to hold the first two members",
        lambda: held_by_gang_plugin(cp) == held_before + 2,
        timeout=60,
        on_timeout=cp.log_tails,
    )
    assert bindings(cp, ns) == {"trainer-0": "", "trainer-1": ""}

    member(cp, ns, "trainer-2", group="trainers", gpus=GPUS_PER_NODE)
    bound = wait_all_bound(cp, ns, 3)
    assert len(set(bound.values())) == 3  # 8 GPUs each: one member per node
    condition = wait_condition(cp, ns, "trainers", "True")
    assert condition["reason"] == "Scheduled", condition
    assert held_by_gang_plugin(cp) == held_before


def test_a_gang_of_three_where_two_fit_stays_wholly_unbound_until_the_third_node_comes(
    native_scheduler: launcher.ControlPlane,
    namespace_137: str,
    gpu_nodes_137: Callable[..., Obj],
) -> None:
    cp, ns = native_scheduler, namespace_137
    for i in range(2):
        gpu_nodes_137(f"{ns}-gpu-{i}", gpus=GPUS_PER_NODE)
    pod_group(cp, ns, "trainers", min_count=3)
    for i in range(3):
        member(cp, ns, f"trainer-{i}", group="trainers", gpus=GPUS_PER_NODE)

    condition = wait_condition(cp, ns, "trainers", "False")
    assert condition["reason"] == "Unschedulable", condition
    # The pod-group cycle found two places and bound neither of them.
    assert bindings(cp, ns) == {f"trainer-{i}": "" for i in range(3)}

    gpu_nodes_137(f"{ns}-gpu-2", gpus=GPUS_PER_NODE)
    bound = wait_all_bound(cp, ns, 3)
    assert len(set(bound.values())) == 3
    assert wait_condition(cp, ns, "trainers", "True")["reason"] == "Scheduled"
