"""One-line builders: model objects for the core, API dicts (as kubectl prints) for adapters."""

from __future__ import annotations

import itertools
from typing import Any, TypeVar

from phalanx.core.cache import ClusterState
from phalanx.core.groups import registry
from phalanx.core.groups.composite import CompositePodGroup
from phalanx.core.groups.upstream import Workload
from phalanx.core.inventory import parse_pod
from phalanx.core.model import (
    CPU,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    GpuInfo,
    GroupRef,
    Node,
    Placement,
    Pod,
    PodGroup,
    PolicyKind,
    Resources,
    Taint,
    TaintEffect,
    Toleration,
    TopologyConstraint,
)
from phalanx.sources.kubeclient import ClusterAccess

GIB = 1 << 30
_uids = itertools.count(1)

T = TypeVar("T")


def present(value: T | None) -> T:
    """`value`, which the test expects to be there: a look-up (`state.node(...)`,
    `state.reservation(...)`) whose None fails the test here, typed as found."""
    assert value is not None, "expected a value, found None"
    return value


def apply_raw(state: ClusterState, *objects: dict[str, Any]) -> None:
    """Raw pods and gang objects of any dialect into `state`, as the sources apply them."""
    for obj in objects:
        if obj["kind"] == "Pod":
            state.upsert_pod(parse_pod(obj))
            continue
        parsed = registry.parse_group_object(obj)
        assert parsed is not None, f"not a gang object: {obj['kind']}"
        if isinstance(parsed.value, CompositePodGroup):
            state.upsert_composite(parsed.value)
        elif isinstance(parsed.value, Workload):
            state.upsert_workload(parsed.value)
        else:
            state.upsert_group(parsed.value)


def gpu_node(
    name: str,
    gpus: int = 8,
    *,
    cpu: int = 64,
    memory_gib: int = 512,
    pods: int = 110,
    clique: str = "",
    gpu_memory_mib: int = 81559,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    unschedulable: bool = False,
    ready: bool = True,
) -> Node:
    allocatable = {CPU: cpu * 1000, MEMORY: memory_gib * GIB, PODS: pods}
    if gpus:
        allocatable[NVIDIA_GPU] = gpus
    all_labels = dict(labels or {})
    if clique:
        all_labels["nvidia.com/gpu.clique"] = clique
    gpu = (
        GpuInfo(
            count=gpus, product="NVIDIA-H100-80GB-HBM3", memory_mib=gpu_memory_mib, clique=clique
        )
        if gpus
        else None
    )
    return Node(
        name=name,
        allocatable=Resources(allocatable),
        labels=all_labels,
        taints=taints,
        unschedulable=unschedulable,
        ready=ready,
        gpu=gpu,
        uid=f"node-{name}",
    )


def cpu_node(name: str, *, cpu: int = 16, memory_gib: int = 64, **kw: Any) -> Node:
    return gpu_node(name, 0, cpu=cpu, memory_gib=memory_gib, **kw)


def pod(
    name: str,
    gpus: int = 1,
    *,
    namespace: str = "default",
    cpu_milli: int = 1000,
    memory_gib: int = 4,
    group: str | None = None,
    node: str = "",
    min_member: int | None = None,
    plan_node: str = "",
    placement: str = "",
    tolerations: tuple[Toleration, ...] = (),
    node_selector: dict[str, str] | None = None,
    gpu_memory_mib: int = 0,
    uid: str | None = None,
    **kw: Any,
) -> Pod:
    requests = {CPU: cpu_milli, MEMORY: memory_gib * GIB, PODS: 1}
    if gpus:
        requests[NVIDIA_GPU] = gpus
    return Pod(
        namespace=namespace,
        name=name,
        uid=uid or f"uid-{name}-{next(_uids)}",
        requests=Resources(requests),
        node_name=node,
        group=GroupRef(namespace, group) if group else None,
        min_member=min_member,
        plan_node=plan_node,
        placement=placement,
        tolerations=tolerations,
        node_selector=node_selector or {},
        gpu_memory_mib=gpu_memory_mib,
        **kw,
    )


def gang(
    name: str,
    size: int,
    gpus: int = 1,
    *,
    namespace: str = "default",
    **kw: Any,
) -> list[Pod]:
    """`size` pending members named <name>-0.. of group <name>."""
    return [pod(f"{name}-{i}", gpus, namespace=namespace, group=name, **kw) for i in range(size)]


def podgroup(
    name: str,
    min_member: int,
    *,
    namespace: str = "default",
    placement: str | None = None,
    timeout: int = 60,
    plan: str = "",
    differentiable: frozenset[str] = frozenset(),
    topology: TopologyConstraint | None = None,
) -> PodGroup:
    policy: Placement | None = None
    if placement is not None and placement.startswith("domain:"):
        policy = Placement(PolicyKind.DOMAIN, placement.removeprefix("domain:"))
    elif placement is not None:
        policy = Placement(PolicyKind(placement))
    return PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        timeout_seconds=timeout,
        placement=policy,
        plan_json=plan,
        differentiable=differentiable,
        topology=topology,
    )


SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
CLIQUE = "nvidia.com/gpu.clique"
HOSTNAME = "kubernetes.io/hostname"


def rack_node(
    name: str, gpus: int = 4, *, spine: str = "", leaf: str = "", clique: str = "", **kw: Any
) -> Node:
    """A GPU node with Topograph's spine/leaf labels, an NVLink clique and its hostname."""
    labels = {HOSTNAME: name, **kw.pop("labels", {})}
    for key, value in ((SPINE, spine), (LEAF, leaf)):
        if value:
            labels[key] = value
    return gpu_node(name, gpus, clique=clique, labels=labels, **kw)


def nvl72(
    cliques: int = 16, *, per_clique: int = 18, per_leaf: int = 4, spine: str = "s0"
) -> list[Node]:
    """NVL72-shaped nodes: `cliques` cliques of `per_clique` four-GPU nodes, `per_leaf`
    cliques under each leaf, every leaf under one spine. Node `c03-n07` is node 7 of clique 3."""
    return [
        rack_node(
            f"c{c:02d}-n{n:02d}", 4, spine=spine, leaf=f"l{c // per_leaf}", clique=f"c{c:02d}"
        )
        for c in range(cliques)
        for n in range(per_clique)
    ]


def cluster_access(host: str) -> ClusterAccess:
    """How to reach an API server at `host` with no credential and the system's trust."""
    return ClusterAccess(
        host=host,
        ca_file=None,
        cert_file=None,
        key_file=None,
        verify=True,
        tls_server_name=None,
        proxy=None,
        authorization=lambda: "",
    )


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key, value, TaintEffect(effect))


# ---- API objects (plain dicts as kubectl -o json prints them) -----------------------------


def node_obj(
    name: str,
    gpus: int = 8,
    *,
    cpu: str = "64",
    memory: str = "512Gi",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    clique: str = "",
    product: str = "NVIDIA-H100-80GB-HBM3",
    gpu_memory_mib: int = 81559,
) -> dict[str, Any]:
    alloc: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": "110"}
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
        all_labels.update(
            {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(gpu_memory_mib),
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.family": "hopper",
            }
        )
    if clique:
        all_labels["nvidia.com/gpu.clique"] = clique
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"node-{name}", "labels": all_labels},
        "spec": spec,
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod_obj(
    name: str,
    gpus: int = 1,
    *,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "4Gi",
    group: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node: str = "",
    phase: str = "Pending",
    scheduler: str = "phalanx",
    uid: str | None = None,
    volcano_group: str | None = None,
    scheduling_group: str | None = None,
    workload_ref: dict[str, str] | None = None,
    priority: int | None = None,
    preemption_policy: str | None = None,
) -> dict[str, Any]:
    """A pod; `group` labels it for scheduler-plugins, `volcano_group` annotates it as
    Volcano's controllers do, `scheduling_group` (1.36+) / `workload_ref` (1.35) set the
    upstream spec field; `priority` and `preemption_policy` the spec fields (None: unset)."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        limits["nvidia.com/gpu"] = str(gpus)
    all_labels = dict(labels or {})
    if group:
        all_labels["scheduling.x-k8s.io/pod-group"] = group
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "trainer",
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    if scheduling_group is not None:
        spec["schedulingGroup"] = {"podGroupName": scheduling_group}
    if workload_ref is not None:
        spec["workloadRef"] = dict(workload_ref)
    if priority is not None:
        spec["priority"] = priority
    if preemption_policy is not None:
        spec["preemptionPolicy"] = preemption_policy
    all_annotations = dict(annotations or {})
    if volcano_group is not None:
        all_annotations["scheduling.k8s.io/group-name"] = volcano_group
        all_annotations["scheduling.volcano.sh/group-name"] = volcano_group
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "labels": all_labels,
            "annotations": all_annotations,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def podgroup_obj(
    name: str,
    min_member: int,
    *,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    timeout: int | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"pg-{namespace}-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def volcano_podgroup_obj(
    name: str,
    min_member: int,
    *,
    namespace: str = "default",
    queue: str = "default",
    min_resources: dict[str, str] | None = None,
    min_task_member: dict[str, int] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `scheduling.volcano.sh/v1beta1` PodGroup as Volcano's job controller creates it."""
    spec: dict[str, Any] = {"minMember": min_member, "queue": queue, "priorityClassName": ""}
    if min_resources is not None:
        spec["minResources"] = dict(min_resources)
    if min_task_member is not None:
        spec["minTaskMember"] = dict(min_task_member)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"vpg-{namespace}-{name}",
            "annotations": dict(annotations or {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": name,
                    "uid": f"job-{namespace}-{name}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": status if status is not None else {"phase": "Pending"},
    }


def kai_podgroup_obj(
    name: str,
    min_member: int | None,
    *,
    namespace: str = "default",
    sub_groups: dict[str, int] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `scheduling.run.ai/v2alpha2` PodGroup as KAI's podgrouper creates it (queue and
    priority class included); `sub_groups` maps each flat subgroup to its minMember."""
    spec: dict[str, Any] = {"queue": "default-queue", "priorityClassName": "train"}
    if min_member is not None:
        spec["minMember"] = min_member
    if sub_groups is not None:
        spec["subGroups"] = [{"name": n, "minMember": m} for n, m in sub_groups.items()]
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"kai-{namespace}-{name}",
            "annotations": dict(annotations or {}),
            "labels": {"kai.scheduler/queue": "default-queue"},
        },
        "spec": spec,
        "status": dict(status or {}),
    }


def kai_pod_obj(name: str, group: str, subgroup: str = "", **more: Any) -> dict[str, Any]:
    """A pod as KAI's podgrouper marks it: annotation `pod-group-name`, and its subgroup's
    label when it has one."""
    annotations = {"pod-group-name": group, **more.pop("annotations", {})}
    labels = dict(more.pop("labels", {}))
    if subgroup:
        labels["kai.scheduler/subgroup-name"] = subgroup
    return pod_obj(name, annotations=annotations, labels=labels, **more)


def grove_podgang_obj(
    name: str,
    podgroups: dict[str, int],
    *,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `scheduler.grove.io/v1alpha1` PodGang as Grove's operator creates it (priority
    class included); `podgroups` maps each podgroup (a PodClique's name) to its
    minReplicas, each naming that many pods `<podgroup>-<i>` in `podReferences`."""
    return {
        "apiVersion": "scheduler.grove.io/v1alpha1",
        "kind": "PodGang",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"grove-{namespace}-{name}",
            "annotations": dict(annotations or {}),
            "labels": {"app.kubernetes.io/managed-by": "grove-operator"},
        },
        "spec": {
            "priorityClassName": "serve",
            "podgroups": [
                {
                    "name": group,
                    "minReplicas": minimum,
                    "podReferences": [
                        {"namespace": namespace, "name": f"{group}-{i}"} for i in range(minimum)
                    ],
                }
                for group, minimum in podgroups.items()
            ],
        },
        "status": dict(status or {}),
    }


def grove_pod_obj(name: str, gang: str, podgroup: str = "", **more: Any) -> dict[str, Any]:
    """A pod as Grove's operator creates it: label `grove.io/podgang`, and its PodClique's
    label `grove.io/podclique` (its podgroup) when given."""
    labels = {"grove.io/podgang": gang, **more.pop("labels", {})}
    if podgroup:
        labels["grove.io/podclique"] = podgroup
    return pod_obj(name, labels=labels, **more)


#: v1alpha2's `spec.disruptionMode` strings, by the later versions' union member.
V1ALPHA2_DISRUPTION_MODES = {"single": "Pod", "all": "PodGroup"}


def upstream_podgroup_obj(
    name: str,
    min_count: int | None,
    *,
    namespace: str = "default",
    version: str = "v1beta1",
    topology_key: str | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    parent: str | None = None,
    disruption_mode: str | None = "single",
    priority: int | None = None,
    preemption_policy: str | None = None,
) -> dict[str, Any]:
    """A `scheduling.k8s.io` PodGroup (1.36+); `min_count` None is the basic policy;
    `parent` its CompositePodGroup (1.37); `disruption_mode` (`single`, `all`) None leaves the
    field unset, in v1alpha2 it is that version's string (`Pod`, `PodGroup`); `priority`
    and `preemption_policy` the 1.37 spec fields (None: unset)."""
    policy: dict[str, Any] = (
        {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    )
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if disruption_mode is not None and version == "v1alpha2":
        spec["disruptionMode"] = V1ALPHA2_DISRUPTION_MODES[disruption_mode]
    elif disruption_mode is not None:
        spec["disruptionMode"] = {disruption_mode: {}}
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if parent is not None:  # the API server requires the workloadRef with it
        spec["parentCompositePodGroupName"] = parent
        spec["workloadRef"] = {"workloadName": parent, "templateName": name}
    if priority is not None:
        spec["priority"] = priority
    if preemption_policy is not None:
        spec["preemptionPolicy"] = preemption_policy
    obj: dict[str, Any] = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"upg-{namespace}-{name}",
            "generation": 1,
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def composite_obj(
    name: str,
    min_group_count: int | None,
    *,
    namespace: str = "default",
    parent: str | None = None,
    topology_key: str | None = None,
    annotations: dict[str, str] | None = None,
    disruption_mode: str | None = "single",
) -> dict[str, Any]:
    """A `scheduling.k8s.io/v1alpha3` CompositePodGroup (1.37); `min_group_count` None is
    the basic policy; `disruption_mode` None leaves the field unset."""
    policy: dict[str, Any] = (
        {"basic": {}} if min_group_count is None else {"gang": {"minGroupCount": min_group_count}}
    )
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": name, "templateName": name},
        "schedulingPolicy": policy,
    }
    if disruption_mode is not None:
        spec["disruptionMode"] = {disruption_mode: {}}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"cpg-{namespace}-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def workload_obj(
    name: str,
    pod_groups: dict[str, int | None],
    *,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A `scheduling.k8s.io/v1alpha1` Workload (1.35): pod group name -> minCount (None:
    the basic policy)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"wl-{namespace}-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
            "podGroups": [
                {
                    "name": group,
                    "policy": {"basic": {}} if count is None else {"gang": {"minCount": count}},
                }
                for group, count in pod_groups.items()
            ],
        },
    }


def event_obj(
    kind: str,
    name: str,
    reason: str,
    message: str,
    *,
    namespace: str = "default",
    at: str = "2026-01-01T00:00:00Z",
    component: str = "phalanx",
    warning: bool = False,
    count: int = 1,
) -> dict[str, Any]:
    """A core/v1 Event about `kind`/`name`, as Phalanx and kube-scheduler write them."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason}.{at}", "namespace": namespace},
        "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "reportingComponent": component,
        "lastTimestamp": at,
        "count": count,
    }


def lease_obj(
    name: str, holder: str, *, namespace: str = "phalanx-system", renewed: str = ""
) -> dict[str, Any]:
    """A coordination.k8s.io/v1 Lease held by `holder` ("" for nobody)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": renewed or "2026-01-01T00:00:00.000000Z",
        },
    }


# ---- Dynamic Resource Allocation (resource.k8s.io/v1), shaped like NVIDIA's DRA driver -----

DRA_API = "resource.k8s.io/v1"
GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"

# DeviceClasses as k8s-dra-driver-gpu installs them (selectors verbatim).
NVIDIA_CLASSES: dict[str, str] = {
    "gpu.nvidia.com": (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    ),
    "mig.nvidia.com": (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    ),
    "compute-domain-daemon.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
    ),
    "compute-domain-default-channel.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0"
    ),
}

# A100 40GB MIG profiles: (giProfileId, placement size, multiprocessors, memory MiB).
MIG_PROFILES: dict[str, tuple[int, int, int, int]] = {
    "1g.5gb": (19, 1, 14, 4864),
    "2g.10gb": (14, 2, 28, 9856),
    "3g.20gb": (9, 4, 42, 19968),
}


def device_class_obj(name: str, *expressions: str) -> dict[str, Any]:
    return {
        "apiVersion": DRA_API,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def nvidia_class_objs() -> list[dict[str, Any]]:
    return [device_class_obj(name, expression) for name, expression in NVIDIA_CLASSES.items()]


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _gpu_common(
    product: str, driver_version: str, architecture: str, capability: str
) -> dict[str, Any]:
    return {
        "productName": _string(product),
        "brand": _string("Nvidia"),
        "architecture": _string(architecture),
        "cudaComputeCapability": {"version": capability},
        "driverVersion": {"version": driver_version},
        "cudaDriverVersion": {"version": "12.4.0"},
        "addressingMode": _string("None"),
    }


def gpu_device(
    node: str,
    minor: int,
    *,
    product: str = "NVIDIA H100 80GB HBM3",
    memory: str = "81559Mi",
    driver_version: str = "550.54.15",
    architecture: str = "Hopper",
    capability: str = "9.0.0",
) -> dict[str, Any]:
    """A whole GPU as the driver's GpuInfo.GetDevice publishes it (`gpu-<minor>`)."""
    attributes = {
        "type": _string("gpu"),
        "uuid": _string(f"GPU-{node}-{minor:04d}-0000-0000-000000000000"),
        "pcieBusID": _string(f"0000:{0x18 + minor:02x}:00.0"),
        "resource.kubernetes.io/pcieRoot": _string(f"pci0000:{minor // 2:02x}"),
        **_gpu_common(product, driver_version, architecture, capability),
    }
    return {
        "name": f"gpu-{minor}",
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
    }


def mig_device(
    node: str, minor: int, profile: str, start: int, *, product: str = "NVIDIA A100-SXM4-40GB"
) -> dict[str, Any]:
    """A MIG device as the driver publishes it (`gpu-<minor>-mig-<profile id>-<start>-<size>`)."""
    profile_id, size, multiprocessors, memory_mib = MIG_PROFILES[profile]
    attributes = {
        "type": _string("mig"),
        "uuid": _string(f"MIG-{node}-{minor}-{start}"),
        "parentUUID": _string(f"GPU-{node}-{minor:04d}"),
        "profile": _string(profile),
        "pcieBusID": _string(f"0000:{0x18 + minor:02x}:00.0"),
        **_gpu_common(product, "550.54.15", "Ampere", "8.0.0"),
    }
    capacity: dict[str, Any] = {
        "multiprocessors": {"value": str(multiprocessors)},
        "copyEngines": {"value": str(size)},
        "decoders": {"value": "0"},
        "encoders": {"value": "0"},
        "jpegEngines": {"value": "0"},
        "ofaEngines": {"value": "0"},
        "memory": {"value": f"{memory_mib}Mi"},
    }
    for i in range(start, start + size):
        capacity[f"memorySlice{i}"] = {"value": "1"}
    return {
        "name": f"gpu-{minor}-mig-{profile_id}-{start}-{size}",
        "attributes": attributes,
        "capacity": capacity,
    }


def slice_obj(
    node: str,
    devices: list[dict[str, Any]],
    *,
    driver: str = GPU_DRIVER,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    name: str | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}-{generation}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {
                "name": pool or node,
                "generation": generation,
                "resourceSliceCount": count,
            },
            "devices": devices,
        },
    }


def gpu_slice_obj(node: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    """An 8-GPU node's slice (H100 80GB by default)."""
    slice_kw = {k: kw.pop(k) for k in ("generation", "count", "name", "pool") if k in kw}
    return slice_obj(node, [gpu_device(node, i, **kw) for i in range(gpus)], **slice_kw)


def mig_slice_obj(node: str, layout: dict[int, list[str]], *, whole: int = 0) -> dict[str, Any]:
    """A node whose GPUs `layout` keys are in MIG mode with those profiles, plus `whole` GPUs."""
    devices = [
        gpu_device(
            node, i, product="NVIDIA A100-SXM4-40GB", memory="40960Mi", architecture="Ampere"
        )
        for i in range(whole)
    ]
    for minor, profiles in sorted(layout.items()):
        start = 0
        for profile in profiles:
            devices.append(mig_device(node, minor, profile, start))
            start += MIG_PROFILES[profile][1]
    return slice_obj(node, devices)


def compute_domain_slice_obj(node: str, channels: int = 4) -> dict[str, Any]:
    """The compute-domain kubelet plugin's slice: IMEX channels and one daemon device."""
    devices = [
        {"name": f"channel-{i}", "attributes": {"type": _string("channel"), "id": {"int": i}}}
        for i in range(channels)
    ]
    devices.append(
        {"name": "daemon-0", "attributes": {"type": _string("daemon"), "id": {"int": 0}}}
    )
    return slice_obj(node, devices, driver=CD_DRIVER)


def device_request(
    name: str = "gpu",
    device_class: str = "gpu.nvidia.com",
    count: int | None = 1,
    *selectors: str,
    mode: str | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if mode is not None:
        exactly["allocationMode"] = mode
    if count is not None and mode != "All":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


def claim_template_obj(
    name: str, *requests: dict[str, Any], namespace: str = "default"
) -> dict[str, Any]:
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": list(requests or [device_request()])}}},
    }


def claim_obj(
    name: str,
    *requests: dict[str, Any],
    namespace: str = "default",
    allocated: list[tuple[str, str, str]] | None = None,
    node: str = "",
    owner_pod: str = "",
    owner_pod_group: str = "",
    reserved_for: list[str] | None = None,
    reserved_for_group: str = "",
) -> dict[str, Any]:
    """A ResourceClaim; `allocated` lists (driver, pool, device), on `node` when given.
    `owner_pod_group` (1.37 `DRAWorkloadResourceClaims`) makes an upstream PodGroup of that
    name its controller, as for a PodGroup's template; `reserved_for_group` reserves it for
    that PodGroup, as kube-scheduler does for a PodGroup's claim."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"claim-{name}"}
    if owner_pod:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_pod, "controller": True}
        ]
    if owner_pod_group:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "scheduling.k8s.io/v1alpha3",
                "kind": "PodGroup",
                "name": owner_pod_group,
                "uid": f"uid-{namespace}-{owner_pod_group}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    obj: dict[str, Any] = {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": list(requests or [device_request()])}},
        "status": {},
    }
    if allocated is not None:
        allocation: dict[str, Any] = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": d, "pool": p, "device": dev}
                    for d, p, dev in allocated
                ]
            }
        }
        if node:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        obj["status"]["allocation"] = allocation
        obj["status"]["reservedFor"] = [
            {"resource": "pods", "name": "p", "uid": uid} for uid in (reserved_for or [])
        ]
        if reserved_for_group:
            obj["status"]["reservedFor"].append(
                {
                    "apiGroup": "scheduling.k8s.io",
                    "resource": "podgroups",
                    "name": reserved_for_group,
                    "uid": f"uid-{namespace}-{reserved_for_group}",
                }
            )
    return obj


def dra_pod_obj(
    name: str,
    *,
    templates: dict[str, str] | None = None,
    claims: dict[str, str] | None = None,
    generated: dict[str, str | None] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A pod asking for devices: entry -> template name, entry -> claim name; `generated`
    gives status.resourceClaimStatuses (entry -> generated claim name)."""
    obj = pod_obj(name, 0, **kw)
    entries = [
        {"name": entry, "resourceClaimTemplateName": template}
        for entry, template in (templates or {}).items()
    ] + [{"name": entry, "resourceClaimName": claim} for entry, claim in (claims or {}).items()]
    obj["spec"]["resourceClaims"] = entries
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": e["name"]} for e in entries]
    if generated is not None:
        obj["status"]["resourceClaimStatuses"] = [
            {"name": entry, "resourceClaimName": claim} for entry, claim in generated.items()
        ]
    return obj
