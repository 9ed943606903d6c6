"""A cluster model fed through a `DraModel`, as a source feeds it: DRA test worlds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from builders import (
    GPU_DRIVER,
    MIG_PROFILES,
    claim_obj,
    claim_template_obj,
    device_request,
    dra_pod_obj,
    gpu_device,
    gpu_node,
    gpu_slice_obj,
    mig_device,
    nvidia_class_objs,
    slice_obj,
)
from phalanx.core.cache import ClusterState, MemberReservation, Reservation
from phalanx.core.dra import (
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.dra_model import DraModel
from phalanx.core.inventory import parse_pod
from phalanx.core.model import DRA_GPU, Pod

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
# Where each MIG profile may start on an A100 (its memory slices), as dynamic MIG offers them.
MIG_PLACEMENTS = {"1g.5gb": range(7), "2g.10gb": (0, 2, 4), "3g.20gb": (0, 4)}


def network_slice_obj(
    driver: str, kind: str, count: int, *, nodes: list[str] | None = None
) -> dict[str, Any]:
    """A pool of `count` network-attached devices: reachable from every node, or through a
    node selector from `nodes`."""
    devices = [
        {"name": f"{kind}-{i}", "attributes": {"type": {"string": kind}}} for i in range(count)
    ]
    obj = slice_obj("", devices, driver=driver, pool=f"{kind}-pool", name=f"{kind}-pool")
    del obj["spec"]["nodeName"]
    if nodes is None:
        obj["spec"]["allNodes"] = True
    else:
        selector = {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
        obj["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [selector]}]}
    return obj


# NVIDIA's driver taints a GPU that reported a critical XID error (its health monitor).
XID_TAINT = {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}
TOLERATES_XID = [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}]


def tainted(
    obj: dict[str, Any], *devices: int, taint: dict[str, str] = XID_TAINT
) -> dict[str, Any]:
    """The slice with these devices (by index) tainted."""
    for i in devices:
        obj["spec"]["devices"][i]["taints"] = [dict(taint)]
    return obj


def taint_rule_obj(
    name: str,
    taint: dict[str, str] | None = None,
    *,
    api_version: str = "resource.k8s.io/v1",
    **selector: str,
) -> dict[str, Any]:
    """A DeviceTaintRule putting `taint` (NVIDIA's XID taint by default) on the devices the
    selector picks (`driver`, `pool`, `device`; none: every device)."""
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"deviceSelector": dict(selector), "taint": dict(taint or XID_TAINT)},
    }


def partitioned_slices(node: str, gpus: int = 2, *, apart: bool = True) -> list[dict[str, Any]]:
    """A node whose A100s are partitionable (dynamic MIG, DRAPartitionableDevices): per GPU a
    counter set of its 8 memory slices and its memory; the whole GPU consumes all of them,
    each MIG placement the slices it covers. `apart`: counter sets in a slice of their own
    (Kubernetes 1.35), else beside the devices (1.34)."""
    counter_sets, devices = [], []
    for minor in range(gpus):
        counter_set = f"gpu-{minor}-counter-set"
        slices = {f"memorySlice{i}": {"value": "1"} for i in range(8)}
        counter_sets.append(
            {"name": counter_set, "counters": {"memory": {"value": "40Gi"}, **slices}}
        )
        whole = gpu_device(node, minor, product="NVIDIA A100-SXM4-40GB", memory="40Gi")
        whole["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"memory": {"value": "40Gi"}, **slices}}
        ]
        devices.append(whole)
        for profile, starts in MIG_PLACEMENTS.items():
            size, memory_mib = MIG_PROFILES[profile][1], MIG_PROFILES[profile][3]
            for start in starts:
                mig = mig_device(node, minor, profile, start)
                taken = {f"memorySlice{i}": {"value": "1"} for i in range(start, start + size)}
                mig["consumesCounters"] = [
                    {
                        "counterSet": counter_set,
                        "counters": {"memory": {"value": f"{memory_mib}Mi"}, **taken},
                    }
                ]
                devices.append(mig)
    if not apart:
        obj = slice_obj(node, devices)
        obj["spec"]["sharedCounters"] = counter_sets
        return [obj]
    counters = slice_obj(node, [], count=2, name=f"{node}-counters")
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = counter_sets
    return [counters, slice_obj(node, devices, count=2, name=f"{node}-devices")]


class DraWorld:
    """A ClusterState fed through a DraModel, as a source feeds it."""

    def __init__(self, *nodes: str, classes: bool = True, extended_resources: bool = True) -> None:
        self.state = ClusterState()
        self.model = DraModel(extended_resources=extended_resources)
        if classes:
            for obj in nvidia_class_objs():
                self.model.upsert_class(parse_device_class(obj))
        for name in nodes:
            self.model.upsert_slice(parse_resource_slice(gpu_slice_obj(name)))
        self.model.settle(self.state)
        for name in nodes:
            self.add_node(name)

    def add_node(self, name: str) -> None:
        self.model.upsert_node(self.state, gpu_node(name, 0))

    def slice(self, obj: dict[str, Any]) -> list[Pod]:
        self.model.upsert_slice(parse_resource_slice(obj))
        return self.model.settle(self.state)

    def rule(self, obj: dict[str, Any]) -> list[Pod]:
        self.model.upsert_rule(parse_device_taint_rule(obj))
        return self.model.settle(self.state)

    def remove_rule(self, name: str) -> list[Pod]:
        self.model.remove_rule(name)
        return self.model.settle(self.state)

    def template(
        self,
        name: str,
        count: int | None,
        device_class: str = GPU_CLASS,
        *,
        mode: str | None = None,
        tolerations: list[dict[str, str]] | None = None,
    ) -> list[Pod]:
        """A template asking `count` devices of the class (`mode="All"`: every one of the node)."""
        request = device_request("gpu", device_class, count, mode=mode)
        if tolerations is not None:
            request["exactly"]["tolerations"] = tolerations
        return self.template_of(claim_template_obj(name, request))

    def template_of(self, obj: dict[str, Any]) -> list[Pod]:
        self.model.upsert_template(parse_resource_claim_template(obj))
        return self.model.settle(self.state)

    def claim(self, name: str, count: int = 4, **kw: Any) -> list[Pod]:
        obj = claim_obj(name, device_request("gpu", GPU_CLASS, count), **kw)
        self.model.upsert_claim(parse_resource_claim(obj))
        return self.model.settle(self.state)

    def allocate(self, name: str, node: str, devices: range, *, for_pod: Pod) -> list[Pod]:
        held = [(GPU_DRIVER, node, f"gpu-{i}") for i in devices]
        return self.claim(
            name,
            len(devices),
            allocated=held,
            node=node,
            owner_pod=for_pod.uid,
            reserved_for=[for_pod.uid],
        )

    def pod(self, name: str, **kw: Any) -> Pod:
        return self.model.upsert_pod(self.state, parse_pod(dra_pod_obj(name, **kw)))[0]

    def reserve(self, *members: Pod, node: str) -> None:
        self.state.reserve(
            Reservation(
                "default/g",
                tuple(MemberReservation(p.uid, p.key, node, p.requests) for p in members),
                reserved_at=0,
                expires_at=60,
            )
        )

    def bind(self, p: Pod, node: str) -> None:
        """The pod watch reports the pod bound (the API's copy: no derived demand)."""
        model_copy = self.state.pod(p.uid)
        assert model_copy is not None
        self.model.upsert_pod(self.state, replace(model_copy, node_name=node, devices=None))

    def taken(self, node: str) -> int:
        """GPU-like DRA devices counted as taken on the node, by any means."""
        info = self.state.node(node)
        assert info is not None
        assert info.node.devices is not None
        by_node = info.node.devices.gpus - info.node.allocatable.get(DRA_GPU)
        return by_node + info.requested.get(DRA_GPU) + info.reserved.get(DRA_GPU)
