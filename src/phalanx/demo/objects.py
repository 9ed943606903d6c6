"""Kubernetes object dicts as `kubectl get -o json` prints them: the demo's building blocks.

Names double as UIDs (`uid-<namespace>-<name>`) so every run is byte-for-byte the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GROUP_ANNOTATION = "phalanx.io/pod-group"
MIN_MEMBER_ANNOTATION = "phalanx.io/min-member"
PLACEMENT_ANNOTATION = "phalanx.io/placement"
PLAN_ANNOTATION = "phalanx.io/plan"
PLAN_NODE_ANNOTATION = "phalanx.io/plan-node"
DIFFERENTIABLE_ANNOTATION = "phalanx.io/differentiable"
TAG_PREFIX = "tag.phalanx.io/"
ZONE_LABEL = "topology.kubernetes.io/zone"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU = "nvidia.com/gpu"

H100 = ("NVIDIA-H100-80GB-HBM3", 81559, "hopper")
A100 = ("NVIDIA-A100-SXM4-40GB", 40960, "ampere")


def node(
    name: str,
    *,
    gpus: int = 0,
    gpu: tuple[str, int, str] = H100,
    zone: str,
    clique: str = "",
    cpu: str = "96",
    memory: str = "1Ti",
    tags: tuple[str, ...] = (),
    taints: tuple[Mapping[str, str], ...] = (),
    cordoned: bool = False,
) -> Obj:
    """A Ready node; GPU nodes carry GPU Feature Discovery labels."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        ZONE_LABEL: zone,
    }
    if gpus:
        product, memory_mib, family = gpu
        allocatable[GPU] = str(gpus)
        labels |= {
            PRODUCT_LABEL: product,
            "nvidia.com/gpu.memory": str(memory_mib),
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.family": family,
        }
    if clique:
        labels[CLIQUE_LABEL] = clique
    for tag in tags:
        labels[TAG_PREFIX + tag] = "true"
    spec: Obj = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if cordoned:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}", "labels": labels},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    namespace: str,
    name: str,
    *,
    gpus: int = 0,
    cpu: str = "4",
    memory: str = "32Gi",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_name: str = "",
    scheduler: str = "phalanx",
    image: str = "ghcr.io/example/trainer:1.0",
) -> Obj:
    """A pod with one container; requests == limits for GPUs, as Kubernetes requires."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = str(gpus)
        limits[GPU] = str(gpus)
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [
            {"name": "main", "image": image, "resources": {"requests": requests, "limits": limits}}
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def podgroup(
    namespace: str,
    name: str,
    min_member: int,
    *,
    annotations: Mapping[str, str] | None = None,
    timeout_seconds: int | None = None,
) -> Obj:
    """A scheduler-plugins PodGroup (`scheduling.x-k8s.io/v1alpha1`)."""
    spec: Obj = {"minMember": min_member}
    if timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = timeout_seconds
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-podgroup-{namespace}-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def as_list(objects: list[Obj]) -> Obj:
    """The `kind: List` kubectl prints around several objects."""
    return {"apiVersion": "v1", "kind": "List", "items": objects, "metadata": {}}
