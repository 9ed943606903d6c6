"""The cluster model ends the same whatever order the objects arrive in.

Nodes, pods, gang objects of every dialect and DRA objects come from informers on
separate threads, so after a start or a relist the model receives one set of objects in
any interleaving: a pod before its node, a member before its PodGroup, a claim before its
class, a Grove member before the PodGang that lists it, a child PodGroup before its
CompositePodGroup. It may also see an object twice, an object updated and then set back,
deleted and added again, or replaced by another of its name (a new UID) and then by the
original. Whatever happened in between, once the last version of every object is in, each
decision must read the same model as if the objects had arrived in the order the cluster
file loads them (`ClusterFileSource.start`: DRA objects first, then the rest as listed).

The summary compared (`observed`) is what decisions read: per node its allocatable (with
its free DRA devices), requested, reserved and free resources and the indexes the
single-pod path reads; per pod where it is bound, the gang it is filed under, what it
requests and its derived DRA demand; per gang its members, counts and resolution (as
the planner resolves it); group errors; and the DRA model's claims (with their
allocations) and problems.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from builders import (
    claim_obj,
    claim_template_obj,
    composite_obj,
    compute_domain_slice_obj,
    device_request,
    dra_pod_obj,
    gpu_slice_obj,
    grove_pod_obj,
    grove_podgang_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    mig_slice_obj,
    node_obj,
    nvidia_class_objs,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from dra_builders import network_slice_obj
from phalanx.core.cache import ClusterState
from phalanx.core.groups import registry
from phalanx.core.model import NVIDIA_GPU, GroupRef, Pod
from phalanx.core.planner import PlannerSettings
from phalanx.core.resolution import (
    Deleting,
    GroupDefaults,
    Invalid,
    Resolution,
    Resolved,
    Waiting,
    resolve_group,
)
from phalanx.sources.clusterfile import ClusterFileSource

# Each example delivers some 90 objects and a few disturbances (about 30 ms): some 2.5 s
# in all, every run drawing new orders. A longer hunt: raise it locally.
EXAMPLES = 80

Obj = dict[str, Any]
DRA_API = "resource.k8s.io/v1"
SP_LABEL = "scheduling.x-k8s.io/pod-group"  # a scheduler-plugins member's gang


def _deleting(obj: Obj) -> Obj:
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def _with_claims(obj: Obj, entries: list[dict[str, str]]) -> Obj:
    obj["spec"]["resourceClaims"] = entries
    return obj


def _asking(obj: Obj, resource: str, count: int) -> Obj:
    """A pod asking an extended resource (which a DeviceClass may serve)."""
    resources = obj["spec"]["containers"][0]["resources"]
    resources["requests"][resource] = resources["limits"][resource] = str(count)
    return obj


def _serving(obj: Obj, resource: str) -> Obj:
    """A DeviceClass that serves an extended resource (KEP-5004)."""
    obj["spec"]["extendedResourceName"] = resource
    return obj


KUEUE_LABELS = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/pod-group-name": "kq"}
KUEUE_COUNT = {"kueue.x-k8s.io/pod-group-total-count": "2"}
LWS_ANNOTATIONS = {
    "leaderworkerset.sigs.k8s.io/size": "2",
    "phalanx.io/leaderworkerset-gang": "true",
}
YUNIKORN_LABELS = {"applicationId": "spark"}
YUNIKORN_ANNOTATIONS = {
    "yunikorn.apache.org/task-group-name": "executor",
    "yunikorn.apache.org/task-groups": '[{"name": "executor", "minMember": 2}]',
}


def lws_labels(worker: int) -> dict[str, str]:
    return {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
    }


def cluster() -> list[Obj]:
    """A cluster in which something depends on nearly every other thing arriving first."""
    allocated = [("gpu.nvidia.com", "dra-a", f"gpu-{i}") for i in range(2)]
    classes = [
        _serving(c, NVIDIA_GPU) if c["metadata"]["name"] == "gpu.nvidia.com" else c
        for c in nvidia_class_objs()
    ]
    return [
        # Nodes: device-plugin GPUs, CPUs only, DRA GPUs; `gone` is never listed, yet a
        # pod is bound to it (its usage is kept on a placeholder).
        node_obj("gpu-a", 8, clique="c0"),
        node_obj("gpu-b", 8, clique="c0"),
        node_obj("cpu-a", 0, cpu="16", memory="64Gi"),
        node_obj("dra-a", 0),
        node_obj("dra-b", 0, labels={"pool": "b"}),
        node_obj("mig-a", 0),
        # Single pods: bound and running, finished, failed, pending, being deleted, invalid.
        pod_obj("run-a", 2, node="gpu-a", phase="Running"),
        pod_obj("run-b", 4, node="gpu-b", phase="Running"),
        pod_obj("done-a", 8, node="gpu-a", phase="Succeeded"),
        pod_obj("failed-b", 2, node="gpu-b", phase="Failed"),
        pod_obj("cpu-run", 0, node="cpu-a", phase="Running", cpu="6"),
        pod_obj("ghost-run", 1, node="gone", phase="Running"),
        _deleting(pod_obj("leaving", 1, node="gpu-b", phase="Running")),
        pod_obj("solo", 1),
        pod_obj("cpu-solo", 0, cpu="2"),
        pod_obj("bad-solo", 1, annotations={"phalanx.io/gpu-memory-mib": "lots"}),
        _asking(pod_obj("ext-solo", 0), "deviceclass.resource.kubernetes.io/mig.nvidia.com", 1),
        pod_obj("solo", 1, namespace="other"),  # the same name in another namespace
        # scheduler-plugins: pending, bound, finished and leaving members.
        podgroup_obj("sp", 3, timeout=30),
        pod_obj("sp-0", 2, group="sp"),
        pod_obj("sp-1", 2, group="sp"),
        pod_obj("sp-2", 2, group="sp", node="gpu-b", phase="Running"),
        pod_obj("sp-3", 2, group="sp", node="gpu-a", phase="Succeeded"),
        _deleting(pod_obj("sp-4", 2, group="sp", node="gpu-a", phase="Running")),
        podgroup_obj("sp", 1, namespace="other"),  # the same gang name in another namespace
        pod_obj("sp-0", 1, group="sp", namespace="other"),
        # A member whose gang object never comes, and one whose object is invalid.
        pod_obj("orphan-0", 1, group="orphan"),
        volcano_podgroup_obj("badv", 0),
        pod_obj("badv-0", 1, volcano_group="badv"),
        # Volcano with task minima, KAI, Grove (one member named by podReferences only).
        volcano_podgroup_obj("vg", 2, min_task_member={"w": 2}),
        pod_obj("vg-0", 1, volcano_group="vg", annotations={"volcano.sh/task-spec": "w"}),
        pod_obj("vg-1", 1, volcano_group="vg", annotations={"volcano.sh/task-spec": "w"}),
        kai_podgroup_obj("kg", 2),
        kai_pod_obj("kg-0", "kg", gpus=1),
        kai_pod_obj("kg-1", "kg", gpus=1, node="gpu-a", phase="Running"),
        grove_podgang_obj("gg", {"gw": 2}),
        grove_pod_obj("gw-0", "gg", "gw", gpus=1),
        grove_pod_obj("gw-1", "gg", gpus=1),
        # Upstream: a PodGroup, a Workload, a composite with two child PodGroups.
        upstream_podgroup_obj("up", 2),
        pod_obj("up-0", 2, scheduling_group="up"),
        pod_obj("up-1", 2, scheduling_group="up"),
        workload_obj("wl", {"workers": 2}),
        pod_obj("wl-0", 1, workload_ref={"name": "wl", "podGroup": "workers"}),
        pod_obj("wl-1", 1, workload_ref={"name": "wl", "podGroup": "workers"}),
        composite_obj("ray", 2),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        upstream_podgroup_obj("ray-workers", 2, parent="ray"),
        pod_obj("ray-0", 1, scheduling_group="ray-head"),
        pod_obj("ray-1", 1, scheduling_group="ray-workers"),
        pod_obj("ray-2", 1, scheduling_group="ray-workers"),
        # A composite under a composite: its pods are the topmost gang's.
        composite_obj("outer", 1),
        composite_obj("inner", 1, parent="outer"),
        upstream_podgroup_obj("inner-pg", 1, parent="inner"),
        pod_obj("nest-0", 1, scheduling_group="inner-pg"),
        # A Workload's pod group with a replica key is a gang of its own.
        pod_obj(
            "wl-r-0",
            1,
            workload_ref={"name": "wl", "podGroup": "workers", "podGroupReplicaKey": "r"},
        ),
        # Gangs declared by their pods alone: Kueue, LeaderWorkerSet, YuniKorn, annotations.
        *(pod_obj(f"kq-{i}", 1, labels=KUEUE_LABELS, annotations=KUEUE_COUNT) for i in range(2)),
        pod_obj("serve-0", 1, labels=lws_labels(0), annotations=LWS_ANNOTATIONS),
        pod_obj("serve-0-1", 1, labels=lws_labels(1), annotations=LWS_ANNOTATIONS),
        *(
            pod_obj(f"yk-{i}", 1, labels=YUNIKORN_LABELS, annotations=YUNIKORN_ANNOTATIONS)
            for i in range(2)
        ),
        *(
            pod_obj(
                f"ann-{i}",
                1,
                annotations={"phalanx.io/pod-group": "ann", "phalanx.io/min-member": "2"},
            )
            for i in range(2)
        ),
        # DRA: classes (one serving an extended resource), slices, templates, claims
        # (unallocated and shared, allocated to a bound pod, generated for a pod), pods
        # naming them, and an upstream PodGroup whose claim serves its members.
        *classes,
        gpu_slice_obj("dra-a", 8),
        gpu_slice_obj("dra-b", 4),
        compute_domain_slice_obj("dra-b"),
        mig_slice_obj("mig-a", {0: ["1g.5gb", "2g.10gb"]}, whole=1),
        network_slice_obj("nic.example.com", "nic", 2, nodes=["dra-a", "dra-b"]),
        claim_template_obj("one", device_request("gpu", "gpu.nvidia.com", 1)),
        claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4)),
        claim_obj("shared", device_request("gpu", "gpu.nvidia.com", 1)),
        dra_pod_obj("shared-0", claims={"gpu": "shared"}),
        dra_pod_obj("shared-1", claims={"gpu": "shared"}),
        claim_obj(
            "held",
            device_request("gpu", "gpu.nvidia.com", 2),
            allocated=allocated,
            node="dra-a",
            owner_pod="uid-default-dra-run",
            reserved_for=["uid-default-dra-run"],
        ),
        dra_pod_obj("dra-run", claims={"gpu": "held"}, node="dra-a", phase="Running"),
        # Allocated by kube-scheduler for a pod it has not bound yet.
        claim_obj(
            "pre",
            allocated=[("gpu.nvidia.com", "dra-b", "gpu-0")],
            node="dra-b",
            owner_pod="uid-default-pre-0",
            reserved_for=["uid-default-pre-0"],
        ),
        dra_pod_obj("pre-0", claims={"gpu": "pre"}),
        dra_pod_obj("tmpl-0", templates={"gpu": "one"}),
        claim_obj("tmpl-1-gpu", owner_pod="uid-default-tmpl-1"),
        dra_pod_obj("tmpl-1", templates={"gpu": "one"}, generated={"gpu": "tmpl-1-gpu"}),
        _with_claims(
            upstream_podgroup_obj("team", 2),
            [{"name": "gpus", "resourceClaimTemplateName": "four"}],
        ),
        *(
            dra_pod_obj(f"team-{i}", templates={"gpus": "four"}, scheduling_group="team")
            for i in range(2)
        ),
    ]


OBJECTS = cluster()


def name_of(obj: Obj) -> str:
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if "namespace" in meta else ""
    return f"{obj['kind']} {where}{meta['name']}"


# ---- disturbances: what an informer may deliver besides the last version ----------------


class Disturbance(Enum):
    AGAIN = "again"  # the same object once more (a relist, a resync)
    CHANGED = "changed"  # another version of it, earlier than the last
    GONE = "gone"  # deleted, earlier than its last version (deleted and created again)
    REPLACED = "replaced"  # an object of the same name with another UID, earlier
    INVALID = "invalid"  # a version Phalanx cannot use, earlier (edited, then fixed)


def changed(obj: Obj) -> Obj:
    """Another version of `obj` that decisions would read differently."""
    other = copy.deepcopy(obj)
    spec, kind = other.get("spec", {}), other["kind"]
    if kind == "Node":
        other["status"]["allocatable"]["cpu"] = "3"
        other["metadata"]["labels"]["changed"] = "yes"
    elif kind == "Pod":
        resources = spec["containers"][0]["resources"]
        resources["requests"]["cpu"] = "3"
        labels = other["metadata"]["labels"]
        labels["changed"] = "yes"
        # A member relabelled into another gang (one whose object never comes).
        if SP_LABEL in labels:
            labels[SP_LABEL] = "moved"
        if "schedulingGroup" in spec:
            spec["schedulingGroup"]["podGroupName"] = "moved"
    elif kind == "PodGroup" and "schedulingPolicy" in spec:
        gang = spec["schedulingPolicy"].get("gang")
        if gang is not None:
            gang["minCount"] += 1
        spec.pop("resourceClaims", None)
    elif kind == "PodGroup":
        spec["minMember"] = max(spec.get("minMember") or 0, 0) + 1
    elif kind == "Workload":
        spec["podGroups"][0]["policy"] = {"gang": {"minCount": 3}}
    elif kind == "CompositePodGroup":
        spec["schedulingPolicy"] = {"gang": {"minGroupCount": 1}}
    elif kind == "PodGang":
        spec["podgroups"][0]["podReferences"] = spec["podgroups"][0]["podReferences"][:1]
    elif kind == "DeviceClass":
        spec["selectors"] = [{"cel": {"expression": "device.driver == 'nobody.example.com'"}}]
        spec.pop("extendedResourceName", None)
    elif kind == "ResourceSlice":
        spec["devices"] = spec["devices"][:1]
    elif kind == "ResourceClaim" and "allocation" in other["status"]:
        other["status"] = {}
    elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
        devices = spec["devices"] if kind == "ResourceClaim" else spec["spec"]["devices"]
        devices["requests"][0]["exactly"]["count"] = 3
    return other


def invalid(obj: Obj) -> Obj:
    """A version of `obj` that Phalanx refuses: a gang object of no possible size, a
    quantity or field that does not read."""
    other = copy.deepcopy(obj)
    spec, kind = other.get("spec", {}), other["kind"]
    if kind == "Node":
        other["status"]["allocatable"]["cpu"] = "lots"
    elif kind == "Pod":
        spec["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    elif kind == "PodGroup" and "schedulingPolicy" in spec:
        spec["schedulingPolicy"] = {"gang": {"minCount": 0}}
    elif kind == "PodGroup":
        spec["minMember"] = 0
    elif kind == "Workload":
        spec["podGroups"][0]["policy"] = {"gang": {"minCount": 0}}
    elif kind == "CompositePodGroup":
        spec["schedulingPolicy"] = {"gang": {"minGroupCount": 0}}
    elif kind == "PodGang":
        spec["podgroups"][0]["minReplicas"] = 0
    elif kind == "DeviceClass":
        spec["selectors"] = [{"cel": {"expression": 5}}]
    elif kind == "ResourceSlice":
        spec["driver"] = 5
    elif kind == "ResourceClaim":
        spec["devices"]["requests"] = "gpu"
    else:
        spec["spec"]["devices"]["requests"] = "gpu"
    return other


def replaced(obj: Obj) -> Obj:
    """An object of `obj`'s name with another UID (deleted and created again, the delete
    missed)."""
    other = copy.deepcopy(obj)
    meta = other["metadata"]
    meta["uid"] = f"{meta.get('uid', meta['name'])}-before"
    return other


def deleter(obj: Obj) -> Callable[[ClusterFileSource], None]:
    """How an informer's delete of `obj` reaches the model."""
    meta, kind = obj["metadata"], obj["kind"]
    if obj["apiVersion"] == DRA_API:
        key = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        return lambda source: source.delete_dra(kind, key)
    if kind == "Node":
        return lambda source: source.delete_node(meta["name"])
    if kind == "Pod":
        return lambda source: source.delete_pod(meta["uid"])
    dialect = registry.dialect_of_kind(obj["apiVersion"], kind)
    assert dialect is not None, name_of(obj)
    key = GroupRef(meta["namespace"], meta["name"], dialect).key  # the object's key
    return lambda source: source.delete_group(key)


@dataclass(frozen=True)
class Step:
    """One delivery: object `index` of OBJECTS as it is, or disturbed."""

    index: int
    how: Disturbance | None = None

    def __str__(self) -> str:
        what = name_of(OBJECTS[self.index])
        return what if self.how is None else f"{what} ({self.how.value})"

    def run(self, source: ClusterFileSource) -> None:
        obj = OBJECTS[self.index]
        if self.how is Disturbance.GONE:
            deleter(obj)(source)
        elif self.how is Disturbance.CHANGED:
            source.apply(changed(obj))
        elif self.how is Disturbance.REPLACED:
            source.apply(replaced(obj))
        elif self.how is Disturbance.INVALID:
            source.apply(invalid(obj))
        else:
            source.apply(copy.deepcopy(obj))


# What was there before: an object is changed, made invalid or deleted after it existed.
AFTER_ITSELF = (Disturbance.CHANGED, Disturbance.INVALID, Disturbance.GONE)


@st.composite
def deliveries(draw: st.DrawFn, *, disturbances: int = 6) -> list[Step]:
    """Every object in some order, with a few disturbances: each ends with its last
    version delivered (a disturbance other than AGAIN comes before that, and a change,
    an invalid version or a delete comes after the object as it is)."""
    steps = [Step(i) for i in draw(st.permutations(range(len(OBJECTS))))]
    for _ in range(draw(st.integers(0, disturbances))):
        index = draw(st.integers(0, len(OBJECTS) - 1))
        how = draw(st.sampled_from(Disturbance))
        if how is Disturbance.AGAIN:
            steps.insert(draw(st.integers(0, len(steps))), Step(index))
            continue
        last = max(at for at, step in enumerate(steps) if step == Step(index))
        at = draw(st.integers(0, last))
        steps.insert(at, Step(index, how))
        if how in AFTER_ITSELF:
            steps.insert(draw(st.integers(0, at)), Step(index))
    return steps


# ---- the models compared ------------------------------------------------------------------


def loaded_in_file_order() -> tuple[ClusterFileSource, ClusterState]:
    """The canonical model: the objects as `ClusterFileSource.start` applies them."""
    state = ClusterState()
    source = ClusterFileSource(copy.deepcopy(OBJECTS))
    asyncio.run(source.start(lambda update: update(state)))
    return source, state


def delivered(steps: list[Step]) -> tuple[ClusterFileSource, ClusterState]:
    """The model fed one delivery at a time, as informer events reach it."""
    state = ClusterState()
    source = ClusterFileSource([])
    asyncio.run(source.start(lambda update: update(state)))
    for step in steps:
        step.run(source)
    return source, state


DEFAULTS = GroupDefaults(
    PlannerSettings().default_placement, PlannerSettings().default_timeout_seconds
)


def resolution(found: Resolution) -> tuple[str, object]:
    """What a decision reads of a gang's resolution: the gang itself, or why it waits."""
    match found:
        case Resolved(group):
            return "resolved", group
        case Waiting(reason) | Invalid(reason) | Deleting(reason):
            return type(found).__name__.lower(), reason


def pod_view(source: ClusterFileSource, state: ClusterState, pod: Pod) -> dict[str, object]:
    dra = source.dra.dra
    devices = pod.devices
    return {
        # The pod as decisions read it, its derived demand compared by value below: the
        # catalog generation it names counts catalogs seen, not what they said.
        "pod": replace(pod, devices=None),
        "demand": devices.demand if devices is not None else None,
        "derived against the current catalog": (
            devices is None or devices.generation == dra.catalog_generation
        ),
        "bound to": state.bound_node(pod),
        # What it names itself, which decides where it is filed after the next change.
        "declared group": state.declared_group(pod),
        "declared task": state.as_declared(pod).task,
    }


def observed(source: ClusterFileSource, state: ClusterState) -> dict[str, object]:
    """What decisions read of the model (see the module docstring)."""
    dra = source.dra.dra
    nodes = {
        info.name: {
            "node": info.node,
            "requested": info.requested,
            "reserved": info.reserved,
            "free": info.free,
            "free devices": dra.entries(info.name),
        }
        for info in state.nodes()
    }
    pods = {pod.key: pod_view(source, state, pod) for pod in state.pods()}
    keys = state.group_keys() | {p.group.key for p in state.pods() if p.group is not None}
    gangs = {
        key: {
            "members": [p.name for p in state.members(key)],
            "with finished": [p.name for p in state.members(key, include_finished=True)],
            "pending": state.pending_count(key),
            "bound": state.bound_count(key),
            "resolution": resolution(resolve_group(state, GroupRef.parse(key), DEFAULTS)),
            "object": state.group_object(GroupRef.parse(key).object_ref.key),
            "error": state.group_error(GroupRef.parse(key).object_ref.key),
            "gangs of its object": state.gangs_of(GroupRef.parse(key).object_ref.key),
        }
        for key in keys
    }
    return {
        "nodes": nodes,
        "node names": state.snapshot().names,
        "free (cpu, memory, pods, gpus)": dict(state.common_free()),
        "nodes by free gpus": {k: list(v) for k, v in state.nodes_by_free_gpus().items()},
        "overcommitted": state.overcommitted_nodes(),
        "pods": pods,
        "pending": state.pending_count(),
        "gangs": gangs,
        "group objects": dict(state.groups()),
        "composites": dict(state.composites()),
        "reservations": dict(state.reservations()),
        "claims": dict(dra.claims),
        "templates": dict(dra.templates),
        "device nodes": sorted(dra.nodes()),
        # As a set: the classes' notes come in the order the classes arrived, which only
        # orders the lines people read (no decision reads them).
        "dra problems": sorted(dra.problems()),
        # Not compared: the source's `rejected` and `warnings`, logs of what was delivered
        # (an invalid version earlier stays in them); the model holds group errors.
    }


def differences(got: dict[str, object], want: dict[str, object]) -> list[str]:
    """Where two summaries differ, down to the node, pod or gang, for a readable failure."""
    found = []
    for part, value in want.items():
        other = got[part]
        if value == other:
            continue
        if isinstance(value, dict) and isinstance(other, dict):
            for key in sorted(set(value) | set(other), key=str):
                if value.get(key) != other.get(key):
                    found.append(f"{part}[{key}]: {other.get(key)!r} != {value.get(key)!r}")
        else:
            found.append(f"{part}: {other!r} != {value!r}")
    return found


IN_FILE_ORDER = observed(*loaded_in_file_order())


def test_the_cluster_in_file_order_is_the_varied_cluster_meant() -> None:
    """The baseline has every kind of thing the property reorders, so a model that dropped
    one would not pass unnoticed."""
    gangs = IN_FILE_ORDER["gangs"]
    assert isinstance(gangs, dict)
    kinds = {key: view["resolution"][0] for key, view in gangs.items()}
    assert kinds["default/sp"] == "resolved"
    assert kinds["volcano:default/badv"] == "invalid"
    assert kinds["default/orphan"] == "waiting"
    assert kinds["composite:default/ray"] == "resolved"
    assert kinds["grove:default/gg"] == "resolved"
    assert gangs["grove:default/gg"]["members"] == ["gw-0", "gw-1"]
    assert gangs["composite:default/ray"]["members"] == ["ray-0", "ray-1", "ray-2"]
    assert kinds["upstream:default/wl/workers"] == "resolved"
    pods = IN_FILE_ORDER["pods"]
    assert isinstance(pods, dict)
    assert pods["default/team-0"]["demand"] is not None
    assert pods["default/bad-solo"]["pod"].invalid
    assert str(pods["default/ray-0"]["declared group"]) == "upstream:default/ray-head"
    assert pods["default/gw-1"]["declared task"] == ""  # filed by the PodGang's references
    nodes = IN_FILE_ORDER["nodes"]
    assert isinstance(nodes, dict)
    assert "gone" in nodes  # a placeholder holds the usage of the pod bound to it


def test_every_invalid_version_is_one_the_source_refuses() -> None:
    # Else INVALID would deliver just another version, and test nothing of its own.
    state = ClusterState()
    source = ClusterFileSource([])
    asyncio.run(source.start(lambda update: update(state)))
    assert [name_of(obj) for obj in OBJECTS if source.apply(invalid(obj))] == []


@settings(max_examples=EXAMPLES)
@given(deliveries())
def test_the_model_ends_the_same_whatever_order_the_objects_arrive_in(steps: list[Step]) -> None:
    note("delivered: " + ", ".join(map(str, steps)))
    assert differences(observed(*delivered(steps)), IN_FILE_ORDER) == []
