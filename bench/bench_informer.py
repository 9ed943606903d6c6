"""Informer cost on a large cluster: list-and-index 5,000 nodes and 50,000 pods, and what
listing every node's DRA ResourceSlices adds.

Realistic JSON list bodies (managedFields, images, env, conditions, owner references ...,
about what a real API server sends) are generated in-process, page by page as the server
would page them (500 items), and served by a fake transport to the very code `phalanx serve
--kubeconfig` runs: `KubeSource`'s informers decode the bytes with orjson, the inventory
keeps the fields Phalanx needs, and the updates are applied to the Extender's
`ClusterState` on its event loop. Page generation is timed apart and subtracted.

Two runs: one for time (no tracing), one under tracemalloc for memory (what stays
allocated once synced, and the peak while listing). For scale, one page of pods is also
decoded by the `kubernetes` client's generic deserialiser, which the informer avoids.

DRA (`--dra`): the same sync with `resource.k8s.io/v1` served and listed too: the four
NVIDIA DeviceClasses, and per node what NVIDIA's DRA driver publishes (tests/builders.py): a
slice of 8 H100s (one node in ten: A100s in MIG mode instead) and the compute-domain
plugin's slice (IMEX channel 0 and its daemon). The goal (issue #14): per node, listing the
slices adds no more than 2x to the informer's memory. Measured on nodes alone (no pods: the
strictest reading) and on the whole cluster.

    python bench/bench_informer.py [--nodes 5000] [--pods 50000] [--groups 2000] [--dra]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from kubernetes.client import ApiClient  # only to compare with its generic deserialiser

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from builders import (  # NVIDIA-shaped DRA objects
    CD_DRIVER,
    gpu_device,
    mig_slice_obj,
    nvidia_class_objs,
    slice_obj,
)
from phalanx.core.model import Binding
from phalanx.service.extender import Extender
from phalanx.sources.informer import ApiError
from phalanx.sources.kube import KubeSource, KubeSourceSettings
from phalanx.sources.kube_commits import decode_pod
from phalanx.sources.kube_dra import DRA_API, RESOURCES
from phalanx.sources.kubeclient import MERGE_PATCH

PAGE = 500
PODGROUP_GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
PODGROUP_API = f"/apis/{PODGROUP_GROUP_VERSION}"
STAMP = "2025-06-01T12:00:00Z"


# ---- realistic objects ----------------------------------------------------------------------


def managed_fields(manager: str) -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": STAMP,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {f"f:label-{i}": {} for i in range(6)}},
                "f:status": {
                    "f:conditions": {
                        f'k:{{"type":"C{i}"}}': {".": {}, "f:status": {}} for i in range(5)
                    }
                },
            },
        }
    ]


def node(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    return {
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": STAMP,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
                "topology.kubernetes.io/region": "region-1",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.family": "hopper",
                "nvidia.com/gpu.clique": f"cluster-a.{i // 18}",
                "nvidia.com/gpu.replicas": "1",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/cuda.driver.major": "550",
                "feature.node.kubernetes.io/pci-10de.present": "true",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "nfd.node.kubernetes.io/feature-labels": "pci-10de.present,cpu-model.vendor_id",
            },
            "managedFields": managed_fields("kubelet"),
        },
        "spec": {
            "podCIDR": f"10.{i // 250}.{i % 250}.0/24",
            "providerID": f"aws:///zone/i-{i:017x}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
            if i % 4 == 0
            else [],
        },
        "status": {
            "capacity": {
                "cpu": "192",
                "memory": "2097152Mi",
                "pods": "110",
                "nvidia.com/gpu": "8",
                "ephemeral-storage": "3Ti",
            },
            "allocatable": {
                "cpu": "191500m",
                "memory": "2000000Mi",
                "pods": "110",
                "nvidia.com/gpu": "8",
                "ephemeral-storage": "2800Gi",
            },
            "conditions": [
                {
                    "type": t,
                    "status": "True" if t == "Ready" else "False",
                    "lastHeartbeatTime": STAMP,
                    "lastTransitionTime": STAMP,
                    "reason": f"Kubelet{t}",
                    "message": f"kubelet reports {t}",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": f"{i:032x}",
                "systemUUID": f"{i:032x}",
                "bootID": f"{i:032x}",
                "kernelVersion": "6.1.0",
                "osImage": "Ubuntu 22.04",
                "containerRuntimeVersion": "containerd://1.7.0",
                "kubeletVersion": "v1.31.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {
                    "names": [
                        f"registry.example.com/ml/image-{k}@sha256:{k:064x}",
                        f"registry.example.com/ml/image-{k}:v{k}",
                    ],
                    "sizeBytes": 1_000_000_000 + k,
                }
                for k in range(20)
            ],
        },
    }


def pod(i: int, nodes: int, groups: int) -> dict[str, Any]:
    ns = f"team-{i % 40}"
    group = i % (groups * 8) // 8 if i % 5 == 0 else None  # a fifth of pods are gang members
    labels = {
        "app": f"job-{i // 8}",
        "job-name": f"job-{i // 8}",
        "controller-uid": f"{i // 8:032x}",
    }
    if group is not None:
        labels["scheduling.x-k8s.io/pod-group"] = f"pg-{group}"
    bound = i % 10 != 0  # 90 % bound, the rest pending for our scheduler
    spec: dict[str, Any] = {
        "schedulerName": "phalanx" if group is not None or not bound else "default-scheduler",
        "restartPolicy": "Never",
        "priority": 0,
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "containers": [
            {
                "name": "trainer",
                "image": "registry.example.com/ml/trainer:v1",
                "command": ["python", "-m", "train"],
                "args": ["--epochs", "10", "--batch-size", "256", "--data", "/data/shard"],
                "env": [{"name": f"ENV_{k}", "value": f"value-{k}"} for k in range(12)],
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                },
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {
                        "name": "kube-api-access",
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "readOnly": True,
                    },
                ],
                "ports": [{"containerPort": 29500, "protocol": "TCP"}],
                "imagePullPolicy": "IfNotPresent",
            },
            {
                "name": "sidecar",
                "image": "registry.example.com/infra/log-shipper:v3",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            },
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i // 8}"}},
            {
                "name": "kube-api-access",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
                    ]
                },
            },
        ],
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if bound:
        spec["nodeName"] = f"gpu-node-{i % nodes:05d}"
        status = {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": f"10.0.{i % nodes // 250}.{i % 250}",
            "podIP": f"10.{i // 65536 % 250}.{i // 256 % 256}.{i % 256}",
            "startTime": STAMP,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": STAMP}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": c,
                    "ready": True,
                    "restartCount": 0,
                    "image": f"registry.example.com/{c}:v1",
                    "imageID": f"registry.example.com/{c}@sha256:{i:064x}",
                    "containerID": f"containerd://{i:064x}",
                    "started": True,
                    "state": {"running": {"startedAt": STAMP}},
                }
                for c in ("trainer", "sidecar")
            ],
        }
    return {
        "metadata": {
            "name": f"job-{i // 8}-worker-{i % 8}",
            "namespace": ns,
            "uid": f"10000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": STAMP,
            "generateName": f"job-{i // 8}-worker-",
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/default-container": "trainer"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"job-{i // 8}",
                    "uid": f"{i // 8:032x}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": managed_fields("kube-controller-manager"),
        },
        "spec": spec,
        "status": status,
    }


def pod_group(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"pg-{i}",
            "namespace": f"team-{i % 40}",
            "uid": f"20000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(200_000 + i),
            "annotations": {"phalanx.io/placement": "interconnect-local"},
        },
        "spec": {
            "minMember": 8,
            "scheduleTimeoutSeconds": 120,
            "minResources": {"nvidia.com/gpu": "8"},
        },
        "status": {"phase": "Running", "running": 8},
    }


def resource_slice(i: int) -> dict[str, Any]:
    """Slice `i`: node i // 2's GPUs (even i) or its compute-domain devices (odd i)."""
    n = i // 2
    name = f"gpu-node-{n:05d}"
    if i % 2:
        devices = [
            {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
            {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
        ]
        obj = slice_obj(name, devices, driver=CD_DRIVER)
    elif n % 10 == 9:  # two whole A100s, six in MIG mode
        layout = {m: ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"] for m in range(2, 8)}
        obj = mig_slice_obj(name, layout, whole=2)
    else:
        obj = slice_obj(name, [gpu_device(name, m) for m in range(8)])
    obj["metadata"] |= {
        "uid": f"30000000-0000-0000-0000-{i:012d}",
        "resourceVersion": str(300_000 + i),
        "creationTimestamp": STAMP,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": f"{n:032x}"}],
        "managedFields": managed_fields("gpu-kubelet-plugin"),
    }
    return obj


def device_class(i: int) -> dict[str, Any]:
    obj = nvidia_class_objs()[i]
    obj["metadata"] |= {"uid": f"40000000-0000-0000-0000-{i:012d}", "resourceVersion": "1"}
    return obj


# ---- a fake API serving those bodies, page by page ------------------------------------------


class FakeApi:
    """Serves generated list pages; watches block until stopped (nothing changes)."""

    def __init__(
        self,
        counts: Mapping[str, int],
        makers: Mapping[str, Callable[[int], dict[str, Any]]],
        *,
        dra: bool = False,
    ) -> None:
        self.counts = counts
        self.makers = makers
        self.dra = dra  # whether resource.k8s.io/v1 is served
        self.generating = 0.0  # seconds spent making page bodies (not the informer's cost)
        self.bytes = dict.fromkeys(counts, 0)
        self.stopped = threading.Event()

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        if path not in self.counts:  # the CRD watch's list: none here
            return orjson.dumps({"metadata": {"resourceVersion": "999999"}, "items": []})
        started = time.perf_counter()
        start = int(continue_token or 0)
        end = min(self.counts[path], start + limit)
        items = [self.makers[path](i) for i in range(start, end)]
        more = str(end) if end < self.counts[path] else ""
        body = orjson.dumps(
            {"metadata": {"resourceVersion": "999999", "continue": more}, "items": items}
        )
        del items
        self.bytes[path] += len(body)
        self.generating += time.perf_counter() - started
        return body

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> _Idle:
        return _Idle(self.stopped)

    def metadata(self) -> FakeApi:
        return self

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        if path == "/apis":  # discovery: scheduler-plugins' PodGroups are served
            version = {"groupVersion": PODGROUP_GROUP_VERSION, "version": "v1alpha1"}
            return {"groups": [{"name": "scheduling.x-k8s.io", "versions": [version]}]}
        if path == PODGROUP_API:
            return {"resources": [{"name": "podgroups", "kind": "PodGroup", "namespaced": True}]}
        if path == DRA_API:
            if not self.dra:
                raise ApiError(404, "NotFound", f"{path} is not served")
            return {"resources": [{"name": name} for name in RESOURCES.values()]}
        if "/leases/" in path and method == "GET":  # another replica holds the duty
            return {"spec": {"holderIdentity": "another-replica", "leaseDurationSeconds": 15}}
        raise ApiError(405, "MethodNotAllowed", f"{method} {path}")

    def patch(
        self, path: str, body: Mapping[str, Any], *, content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        return {}

    def bind(self, binding: Binding, annotations: Mapping[str, str] | None = None) -> None:
        pass

    def close(self) -> None:
        self.stopped.set()


class _Idle:
    def __init__(self, stopped: threading.Event) -> None:
        self.stopped = stopped

    def __iter__(self) -> Iterator[bytes]:
        self.stopped.wait()
        return iter(())

    def close(self) -> None:
        self.stopped.set()


# ---- the measurement -------------------------------------------------------------------------


def sync_once(
    nodes: int, pods: int, groups: int, *, trace: bool, dra: bool = False
) -> dict[str, float]:
    counts = {"/api/v1/nodes": nodes, "/api/v1/pods": pods, f"{PODGROUP_API}/podgroups": groups}
    makers: dict[str, Callable[[int], dict[str, Any]]] = {
        "/api/v1/nodes": node,
        "/api/v1/pods": lambda i: pod(i, nodes, groups),
        f"{PODGROUP_API}/podgroups": pod_group,
    }
    if dra:
        counts |= {
            f"{DRA_API}/resourceslices": 2 * nodes,
            f"{DRA_API}/deviceclasses": len(nvidia_class_objs()),
            f"{DRA_API}/resourceclaims": 0,
            f"{DRA_API}/resourceclaimtemplates": 0,
        }
        makers |= {
            f"{DRA_API}/resourceslices": resource_slice,
            f"{DRA_API}/deviceclasses": device_class,
        }
    api = FakeApi(counts, makers, dra=dra)

    async def run() -> dict[str, float]:
        source = KubeSource(api, settings=KubeSourceSettings())
        extender = Extender(source)
        gc.collect()
        if trace:
            tracemalloc.start()
        started = time.perf_counter()
        await extender.start()
        while not source.synced:
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
        result = {
            "seconds": elapsed - api.generating,
            "nodes_in_model": sum(1 for _ in extender.state.nodes()),
            "pods_in_model": sum(1 for _ in extender.state.pods()),
            "groups_in_model": len(extender.state.groups()),
            "dra_gpus_in_model": sum(
                i.node.devices.gpus for i in extender.state.nodes() if i.node.devices is not None
            ),
            "list_mib": sum(api.bytes.values()) / 2**20,
        }
        if trace:
            gc.collect()
            current, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            result |= {"retained_mib": current / 2**20, "peak_mib": peak / 2**20}
        await extender.stop()
        return result

    return asyncio.run(run())


def generic_deserialise_seconds(nodes: int, groups: int) -> tuple[float, float]:
    """One page of pods: the kubernetes client's model deserialiser vs orjson + inventory."""
    body = orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {},
            "items": [pod(i, nodes, groups) for i in range(PAGE)],
        }
    )
    client: Any = ApiClient()
    started = time.perf_counter()
    client.deserialize(body.decode(), "V1PodList", "application/json")
    generic = time.perf_counter() - started
    started = time.perf_counter()
    for raw in orjson.loads(body)["items"]:
        decode_pod(raw)
    ours = time.perf_counter() - started
    return generic, ours


def measure(what: str, nodes: int, pods: int, groups: int, dra: bool) -> dict[str, float]:
    if what == "page":
        generic, ours = generic_deserialise_seconds(nodes, groups)
        return {"generic": generic, "ours": ours}
    result = sync_once(nodes, pods, groups, trace=what == "traced", dra=dra)
    result["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB
    return result


def in_child(
    what: str, nodes: int, pods: int, groups: int, *, dra: bool = False
) -> dict[str, float]:
    """Each measurement in a fresh interpreter: no heap or GC state carried over."""
    argv = [sys.executable, __file__, "--measure", what]
    argv += ["--nodes", str(nodes), "--pods", str(pods), "--groups", str(groups)]
    argv += ["--dra"] if dra else []
    done = subprocess.run(argv, capture_output=True, check=False, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv[1:])} failed:\n{done.stderr[-3000:]}")
    answer: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def dra_rows(
    args: argparse.Namespace, timed: dict[str, float], traced: dict[str, float]
) -> list[tuple[str, str]]:
    """What listing every node's slices adds, per node: on nodes alone, and on everything."""
    nodes: int = args.nodes
    plain = in_child("traced", nodes, 0, 0)
    with_slices = in_child("traced", nodes, 0, 0, dra=True)
    full = in_child("traced", nodes, args.pods, args.groups, dra=True)
    full_timed = in_child("timed", nodes, args.pods, args.groups, dra=True)

    def per_node(result: dict[str, float]) -> float:
        return result["retained_mib"] * 2**20 / nodes

    return [
        ("DRA: slices listed", f"{2 * nodes:,} (GPUs or MIG devices, and IMEX channel 0)"),
        ("  DRA GPUs in the model", f"{with_slices['dra_gpus_in_model']:,.0f}"),
        ("  nodes alone: retained per node", f"{per_node(plain) / 1024:.2f} KiB"),
        ("  nodes + slices: retained per node", f"{per_node(with_slices) / 1024:.2f} KiB"),
        ("  ratio (goal: at most 2x)", f"{per_node(with_slices) / per_node(plain):.2f}x"),
        ("  whole cluster + slices: retained", f"{full['retained_mib']:,.0f} MiB"),
        (
            "  whole cluster: added per node",
            f"{(full['retained_mib'] - traced['retained_mib']) * 2**20 / nodes / 1024:.2f} KiB "
            f"({full['retained_mib'] / traced['retained_mib']:.2f}x the whole)",
        ),
        (
            "  whole cluster + slices: list + decode + index",
            f"{full_timed['seconds']:.2f} s (without: {timed['seconds']:.2f} s)",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5_000)
    ap.add_argument("--pods", type=int, default=50_000)
    ap.add_argument("--groups", type=int, default=2_000)
    ap.add_argument("--dra", action="store_true", help="also measure listing DRA slices")
    ap.add_argument("--measure", choices=("timed", "traced", "page"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.nodes, args.pods, args.groups, args.dra)))
        return 0

    page = in_child("page", args.nodes, args.pods, args.groups)
    timed = in_child("timed", args.nodes, args.pods, args.groups)
    traced = in_child("traced", args.nodes, args.pods, args.groups)
    generic, ours = page["generic"], page["ours"]
    objects = args.nodes + args.pods + args.groups
    in_model = ("nodes_in_model", "pods_in_model", "groups_in_model")
    rows = [
        (
            "objects listed (nodes + pods + PodGroups)",
            f"{args.nodes:,} + {args.pods:,} + {args.groups:,}",
        ),
        ("in the model", " + ".join(f"{timed[k]:,.0f}" for k in in_model)),
        ("JSON listed", f"{timed['list_mib']:,.0f} MiB in pages of {PAGE}"),
        ("list + decode + index, wall time", f"{timed['seconds']:.2f} s"),
        ("  per object", f"{timed['seconds'] / objects * 1e6:.0f} µs"),
        ("max RSS, untraced run", f"{timed['max_rss_mib']:,.0f} MiB"),
        ("retained once synced (tracemalloc)", f"{traced['retained_mib']:,.0f} MiB"),
        ("  per object", f"{traced['retained_mib'] * 2**20 / objects / 1024:.2f} KiB"),
        ("peak while listing (tracemalloc)", f"{traced['peak_mib']:,.0f} MiB"),
        (f"one page of {PAGE} pods: kubernetes client models", f"{generic * 1000:.0f} ms"),
        (f"one page of {PAGE} pods: orjson + inventory", f"{ours * 1000:.0f} ms"),
    ]
    if args.dra:
        rows += dra_rows(args, timed, traced)
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 30}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
