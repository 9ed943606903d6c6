"""Raw Kubernetes objects become model values; what the API server would refuse is an error."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from builders import node_obj, pod_obj, podgroup_obj
from phalanx.core.errors import InvalidObjectError
from phalanx.core.inventory import (
    group_from_pod,
    parse_node,
    parse_object,
    parse_placement,
    parse_pod,
    parse_pod_group,
)
from phalanx.core.model import (
    DEFAULT_TIMEOUT_SECONDS,
    GpuInfo,
    GroupRef,
    Node,
    Placement,
    Pod,
    PodGroup,
    PodPhase,
    PolicyKind,
    Resources,
    SelectorOperator,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    TaintEffect,
    Toleration,
)

GI = 2**30
MI = 2**20


def raw_node(name: str = "n1", **status: Any) -> dict[str, Any]:
    """A bare node: only what a test sets."""
    return {"metadata": {"name": name}, "status": status}


def raw_pod(
    containers: list[dict[str, Any]] | None = None,
    *,
    init: list[dict[str, Any]] | None = None,
    name: str = "p",
    **spec: Any,
) -> dict[str, Any]:
    """A pod with the given containers, each `{"requests": ..., "limits": ...}`-shaped."""
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"containers": [container(f"c{i}", **c) for i, c in enumerate(containers or [])]},
    }
    if init is not None:
        obj["spec"]["initContainers"] = [container(f"i{i}", **c) for i, c in enumerate(init)]
    obj["spec"].update(spec)
    return obj


def container(
    name: str,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    restartPolicy: str | None = None,  # noqa: N803  # the API's spelling
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    result: dict[str, Any] = {"name": name, "image": "img", "resources": resources}
    if restartPolicy is not None:
        result["restartPolicy"] = restartPolicy
    return result


def annotated(annotations: dict[str, str], labels: dict[str, str] | None = None) -> Pod:
    return parse_pod(pod_obj("p", annotations=annotations, labels=labels))


# --- nodes -----------------------------------------------------------------------------


def test_a_gpu_node_reads_capacity_labels_and_gpu_feature_discovery() -> None:
    node = parse_node(node_obj("gpu-1", 8, clique="c1.0"))
    assert node == Node(
        name="gpu-1",
        allocatable=Resources(
            {"cpu": 64_000, "memory": 512 * GI, "pods": 110, "nvidia.com/gpu": 8}
        ),
        labels=node.labels,
        gpu=GpuInfo(
            vendor="nvidia",
            count=8,
            product="NVIDIA-H100-80GB-HBM3",
            memory_mib=81559,
            family="hopper",
            clique="c1.0",
        ),
        uid="node-gpu-1",
    )
    assert node.labels["nvidia.com/gpu.clique"] == "c1.0"
    assert node.schedulable


def test_a_node_without_gpu_resources_has_no_gpu_info() -> None:
    node = parse_node(node_obj("cpu-1", 0, labels={"nvidia.com/gpu.product": "leftover"}))
    assert node.gpu is None
    assert node.allocatable.gpus() == 0


def test_a_node_whose_gpus_are_all_unhealthy_keeps_its_gpu_model() -> None:
    obj = node_obj("gpu-1", 8)
    obj["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    node = parse_node(obj)
    assert node.gpu is not None
    assert (node.gpu.count, node.gpu.product) == (0, "NVIDIA-H100-80GB-HBM3")


def test_a_mig_node_lists_its_mig_resources() -> None:
    obj = raw_node(
        allocatable={"cpu": "32", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
        conditions=[{"type": "Ready", "status": "True"}],
    )
    obj["metadata"]["labels"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    node = parse_node(obj)
    assert node.gpu == GpuInfo(
        vendor="nvidia",
        count=0,
        product="NVIDIA-A100-SXM4-80GB",
        mig={"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2},
    )
    assert node.allocatable.gpus() == 9


def test_time_slicing_labels_give_replicas_and_the_sharing_strategy() -> None:
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    node = parse_node(node_obj("gpu-1", 32, labels=labels))
    assert node.gpu is not None
    assert (node.gpu.count, node.gpu.replicas, node.gpu.sharing_strategy) == (32, 4, "time-slicing")


def test_gpu_sharing_defaults_to_one_replica_and_none() -> None:
    node = parse_node(node_obj("gpu-1", 8))
    assert node.gpu is not None
    assert (node.gpu.replicas, node.gpu.sharing_strategy) == (1, "none")


@pytest.mark.parametrize(
    ("vram", "mib"),
    [
        ("192G", 192 * 1024),  # the AMD labeller's "G" is GiB (bytes / 2^30, rounded)
        ("64Gi", 64 * 1024),
        ("65536", 65536),
        ("16384Mi", 16384),
        ("1T", 1024 * 1024),
    ],
    ids=["labeller-G", "Gi", "plain-MiB", "Mi", "T"],
)
def test_an_amd_node_reads_the_amd_labeller(vram: str, mib: int) -> None:
    obj = raw_node(allocatable={"cpu": "96", "amd.com/gpu": "8"})
    obj["metadata"]["labels"] = {
        "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
        "amd.com/gpu.vram": vram,
        "amd.com/gpu.family": "AI",
    }
    assert parse_node(obj).gpu == GpuInfo(
        vendor="amd", count=8, product="AMD_Instinct_MI300X_OAM", memory_mib=mib, family="AI"
    )


@pytest.mark.parametrize(
    ("label", "value", "expected"),
    [
        ("nvidia.com/gpu.memory", "lots", '"lots" is not a non-negative integer'),
        ("nvidia.com/gpu.memory", "-1", '"-1" is not a non-negative integer'),
        ("nvidia.com/gpu.memory", "80GB", '"80GB" is not a non-negative integer'),
        ("nvidia.com/gpu.replicas", "0", '"0" is not a positive integer'),
        ("nvidia.com/gpu.count", "eight", '"eight" is not a non-negative integer'),
    ],
    ids=["memory-word", "memory-negative", "memory-unit", "replicas-zero", "count-word"],
)
def test_a_malformed_gpu_feature_discovery_label_is_an_error_naming_it(
    label: str, value: str, expected: str
) -> None:
    obj = node_obj("gpu-1", 8)
    obj["metadata"]["labels"][label] = value
    with pytest.raises(InvalidObjectError) as raised:
        parse_node(obj)
    assert str(raised.value) == f'Node gpu-1: metadata.labels["{label}"]: {expected}'


def test_a_malformed_amd_vram_label_is_an_error_naming_it() -> None:
    obj = raw_node(allocatable={"amd.com/gpu": "1"})
    obj["metadata"]["labels"] = {"amd.com/gpu.vram": "lots"}
    with pytest.raises(InvalidObjectError, match=r'metadata.labels\["amd.com/gpu.vram"\]: "lots"'):
        parse_node(obj)


@pytest.mark.parametrize(
    ("taints", "expected"),
    [
        ([], ()),
        (
            [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            (Taint("nvidia.com/gpu", "", TaintEffect.NO_SCHEDULE),),
        ),
        (
            [
                {"key": "team", "value": "a", "effect": "PreferNoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "x"},
            ],
            (
                Taint("team", "a", TaintEffect.PREFER_NO_SCHEDULE),
                Taint("node.kubernetes.io/not-ready", "", TaintEffect.NO_EXECUTE),
            ),
        ),
    ],
    ids=["none", "no-schedule", "prefer-and-execute"],
)
def test_taints_are_read_in_order(
    taints: list[dict[str, str]], expected: tuple[Taint, ...]
) -> None:
    assert parse_node(node_obj("n1", taints=taints)).taints == expected


def test_an_unknown_taint_effect_is_an_error() -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_node(node_obj("n1", taints=[{"key": "k", "effect": "NoScheduleX"}]))
    assert str(raised.value) == (
        'Node n1: spec.taints[0].effect: "NoScheduleX" is not a taint effect '
        "(NoSchedule, PreferNoSchedule or NoExecute)"
    )


def test_a_cordoned_node_is_not_schedulable() -> None:
    node = parse_node(node_obj("n1", unschedulable=True))
    assert node.unschedulable
    assert not node.schedulable


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        (
            [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            True,
        ),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "MemoryPressure", "status": "False"}], False),
        ([], False),
        (None, False),
    ],
    ids=[
        "ready",
        "ready-among-others",
        "not-ready",
        "unknown",
        "no-ready-condition",
        "empty",
        "none",
    ],
)
def test_a_node_is_ready_only_when_its_ready_condition_is_true(
    conditions: list[dict[str, str]] | None, ready: bool
) -> None:
    node = parse_node(raw_node(allocatable={"cpu": "1"}, conditions=conditions))
    assert node.ready is ready
    assert node.schedulable is ready


def test_capacity_stands_in_when_allocatable_is_absent() -> None:
    node = parse_node(raw_node(allocatable=None, capacity={"cpu": "4", "memory": "1Gi"}))
    assert node.allocatable == Resources({"cpu": 4000, "memory": GI})


def test_a_node_tolerates_nulls_where_the_api_omits_fields() -> None:
    obj = {
        "metadata": {"name": "n1", "labels": None, "uid": None},
        "spec": None,
        "status": {"allocatable": {"cpu": "500m"}, "conditions": None},
    }
    node = parse_node(obj)
    assert (node.labels, node.taints, node.unschedulable, node.ready) == ({}, (), False, False)
    assert node.allocatable == Resources({"cpu": 500})


def nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "kind"),
    [(nested(5_000), "an array"), (["1"] * 100_000, "an array"), ({"value": "1"}, "an object")],
    ids=["nested 5,000 deep", "100,000 items long", "an object"],
)
def test_an_array_or_object_where_a_quantity_belongs_is_refused_by_its_type_not_its_text(
    value: object, kind: str
) -> None:
    # Quoted whole, the first made a RecursionError and the second a 500 kB message.
    obj = pod_obj("p")
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = value
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod(obj)
    assert str(raised.value) == (
        f'Pod default/p: spec.containers[0].resources.requests["cpu"]: {kind} is not a '
        "Kubernetes quantity"
    )


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        ({"cpu": "12x"}, 'status.allocatable["cpu"]: "12x" is not a Kubernetes quantity'),
        ({"memory": "1 Gi"}, 'status.allocatable["memory"]: "1 Gi" is not a Kubernetes quantity'),
        ({"cpu": None}, 'status.allocatable["cpu"]: null is not a Kubernetes quantity'),
        ({"cpu": True}, 'status.allocatable["cpu"]: true is not a Kubernetes quantity'),
        ({"cpu": "-1"}, 'status.allocatable["cpu"]: "-1" is negative'),
        (
            {"nvidia.com/gpu": "1.5"},
            'status.allocatable["nvidia.com/gpu"]: "1.5" is not a whole number '
            "(nvidia.com/gpu is counted in units)",
        ),
        (
            {"pods": "110.5"},
            'status.allocatable["pods"]: "110.5" is not a whole number (pods is counted in units)',
        ),
        (["cpu"], "status.allocatable: must be an object, not an array"),
    ],
    ids=[
        "bad-suffix",
        "whitespace",
        "null",
        "boolean",
        "negative",
        "fractional-gpu",
        "fractional-pods",
        "not-a-map",
    ],
)
def test_a_malformed_quantity_is_an_error_naming_the_node_and_field(
    allocatable: object, expected: str
) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_node(raw_node("gpu-1", allocatable=allocatable))
    assert str(raised.value) == f"Node gpu-1: {expected}"
    assert (raised.value.kind, raised.value.name) == ("Node", "gpu-1")


def test_units_follow_kube_scheduler() -> None:
    node = parse_node(
        raw_node(
            allocatable={
                "cpu": "1500m",
                "memory": "1.5Gi",
                "ephemeral-storage": "100G",
                "hugepages-2Mi": "1Gi",
                "example.com/fpga": "2",
            }
        )
    )
    assert node.allocatable == Resources(
        {
            "cpu": 1500,
            "memory": 1536 * MI,
            "ephemeral-storage": 100 * 10**9,
            "hugepages-2Mi": GI,
            "example.com/fpga": 2,
        }
    )


def test_a_node_needs_a_name() -> None:
    with pytest.raises(InvalidObjectError, match=r"^Node: metadata.name: is required$"):
        parse_node({"metadata": {}, "status": {}})


@pytest.mark.parametrize(
    "namespace",
    # "a/b" once decoded as pod "b/p" of namespace "a", a member of gang a/g; "upstream:x"
    # made its gang's key that of an upstream PodGroup in namespace x.
    ["a/b", "upstream:x", "ML", "x" * 64],
    ids=["slash", "dialect-prefix", "upper-case", "too-long"],
)
def test_a_pod_whose_namespace_no_object_could_have_is_refused_naming_the_field(
    namespace: str,
) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod(pod_obj("p", namespace=namespace, group="g"))
    assert raised.value.field == "metadata.namespace"
    assert "is not a valid namespace" in raised.value.reason


@pytest.mark.parametrize(
    "name",
    ["a/b", "Trainer-0", "worker_0", "x" * 254, "-leading", "trailing."],
    ids=["slash", "upper-case", "underscore", "too-long", "leading-dash", "trailing-dot"],
)
def test_a_pod_or_node_whose_name_no_object_could_have_is_refused_naming_the_field(
    name: str,
) -> None:
    # The API server refuses them; a cluster file or a request may still carry one.
    for parse, obj in ((parse_pod, pod_obj(name)), (parse_node, node_obj(name))):
        with pytest.raises(InvalidObjectError) as raised:
            parse(obj)
        assert raised.value.field == "metadata.name"
        assert "is not a valid" in raised.value.reason
        assert '(lower-case letters, digits, "-" and ".")' in raised.value.reason


def test_a_name_of_any_length_is_named_cut_in_the_message() -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod(pod_obj("x" * 100_000, namespace="N" * 100_000))
    assert len(str(raised.value)) < 1_000
    assert raised.value.field == "metadata.namespace"
    namespace, name = raised.value.name.split("/")
    assert namespace.endswith("N…")  # shown cut, and said to be
    assert name.endswith("x…")


def test_a_pod_named_with_dots_as_statefulsets_and_jobs_may_name_them_is_read() -> None:
    assert parse_pod(pod_obj("train.v2-worker-0")).name == "train.v2-worker-0"


# --- pod requests ----------------------------------------------------------------------

REQUESTS = [
    pytest.param(
        [{"requests": {"cpu": "1", "memory": "4Gi"}}],
        {},
        {"cpu": 1000, "memory": 4 * GI},
        id="one-container",
    ),
    pytest.param(
        [{"requests": {"cpu": "500m"}}, {"requests": {"cpu": "250m"}}],
        {},
        {"cpu": 750},
        id="containers-add",
    ),
    # The API server stores every value rounded up to a milli-unit; kube-scheduler rounds
    # the sum of those to whole units once, not each container.
    pytest.param(
        [{"requests": {"cpu": "0.5m"}}, {"requests": {"cpu": "0.5m"}}],
        {},
        {"cpu": 2},
        id="milli-rounded-first",
    ),
    pytest.param(
        [{"requests": {"memory": "1.5"}}, {"requests": {"memory": "1.5"}}],
        {},
        {"memory": 3},
        id="summed-then-rounded",
    ),
    pytest.param(
        [{"limits": {"nvidia.com/gpu": "2"}}], {}, {"nvidia.com/gpu": 2}, id="limit-only-gpu"
    ),
    pytest.param(
        [{"limits": {"cpu": "2", "memory": "1Gi"}}],
        {},
        {"cpu": 2000, "memory": GI},
        id="limit-only-cpu",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}, "limits": {"cpu": "4", "example.com/nic": "1"}}],
        {},
        {"cpu": 1000, "example.com/nic": 1},
        id="request-wins-over-limit",
    ),
    pytest.param([], {}, {}, id="no-containers"),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {"init": [{"requests": {"cpu": "2"}}]},
        {"cpu": 2000},
        id="init-larger",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {"init": [{"requests": {"cpu": "500m"}}]},
        {"cpu": 1000},
        id="init-smaller",
    ),
    pytest.param(
        [{"requests": {"cpu": "1", "memory": "1Gi"}}],
        {"init": [{"requests": {"cpu": "3"}}, {"requests": {"memory": "2Gi"}}]},
        {"cpu": 3000, "memory": 2 * GI},
        id="init-max-per-resource",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {"init": [{"requests": {"cpu": "500m"}, "restartPolicy": "Always"}]},
        {"cpu": 1500},
        id="sidecar-adds",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {
            "init": [
                {"requests": {"cpu": "1"}, "restartPolicy": "Always"},
                {"requests": {"cpu": "2"}},
            ]
        },
        {"cpu": 3000},
        id="init-after-sidecar-runs-beside-it",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {
            "init": [
                {"requests": {"cpu": "2500m"}},
                {"requests": {"cpu": "1"}, "restartPolicy": "Always"},
            ]
        },
        {"cpu": 2500},
        id="init-before-sidecar-runs-alone",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {
            "init": [
                {"requests": {"cpu": "1"}, "restartPolicy": "Always"},
                {"requests": {"cpu": "1"}, "restartPolicy": "Always"},
                {"requests": {"cpu": "1500m"}},
            ]
        },
        {"cpu": 3500},
        id="init-after-two-sidecars",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {"init": [{"requests": {"cpu": "1"}, "restartPolicy": "OnFailure"}]},
        {"cpu": 1000},
        id="only-always-makes-a-sidecar",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {"overhead": {"cpu": "250m", "memory": "120Mi"}},
        {"cpu": 1250, "memory": 120 * MI},
        id="overhead",
    ),
    pytest.param(
        [{"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}, {"requests": {"cpu": "1"}}],
        {"resources": {"requests": {"cpu": "3"}}},
        {"cpu": 3000, "nvidia.com/gpu": 1},
        id="pod-level-request-replaces-sum",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {"resources": {"limits": {"memory": "8Gi"}}},
        {"cpu": 1000, "memory": 8 * GI},
        id="pod-level-limit-defaults-request",
    ),
    pytest.param(
        [{"requests": {"memory": "1Gi"}}],
        {"resources": {"limits": {"memory": "8Gi"}}},
        {"memory": GI},
        id="pod-level-limit-yields-to-container-requests",
    ),
    pytest.param(
        [{"requests": {"cpu": "1"}}],
        {"resources": {"requests": {"cpu": "2"}}, "overhead": {"cpu": "100m"}},
        {"cpu": 2100},
        id="pod-level-plus-overhead",
    ),
    # Pod-level defaulting sums exact container values before anything is rounded.
    pytest.param(
        [{"requests": {"cpu": "0.5m"}}, {"requests": {"cpu": "0.5m"}}],
        {"resources": {"limits": {"memory": "1Gi"}}},
        {"cpu": 1, "memory": GI},
        id="pod-level-default-sums-exact-values",
    ),
    pytest.param(
        [{"requests": {"hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "4Mi"}}],
        {"resources": {"requests": {"cpu": "1"}}},
        {"cpu": 1000, "hugepages-2Mi": 4 * MI},
        id="pod-level-hugepages-default-to-container-limits",
    ),
]


@pytest.mark.parametrize(("containers", "spec", "expected"), REQUESTS)
def test_requests_are_counted_as_kube_scheduler_counts_them(
    containers: list[dict[str, Any]], spec: dict[str, Any], expected: dict[str, int]
) -> None:
    pod = parse_pod(raw_pod(containers, **spec))
    assert pod.requests == Resources({**expected, "pods": 1})


def with_status(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    obj["status"] = status
    return obj


def test_a_resized_container_counts_the_most_it_may_hold() -> None:
    obj = with_status(
        raw_pod([{"requests": {"cpu": "1", "memory": "1Gi"}}]),
        {
            "containerStatuses": [
                {
                    "name": "c0",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                    "allocatedResources": {"cpu": "1500m", "memory": "2Gi"},
                }
            ]
        },
    )
    assert parse_pod(obj).requests == Resources({"cpu": 2000, "memory": 2 * GI, "pods": 1})


def test_an_infeasible_resize_counts_what_the_kubelet_holds_not_the_spec() -> None:
    obj = with_status(
        raw_pod([{"requests": {"cpu": "4"}}]),
        {
            "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
            "containerStatuses": [
                {
                    "name": "c0",
                    "resources": {"requests": {"cpu": "1"}},
                    "allocatedResources": {"cpu": "1"},
                }
            ],
        },
    )
    assert parse_pod(obj).requests == Resources({"cpu": 1000, "pods": 1})


def test_pod_level_defaults_come_from_the_spec_not_the_resize_status() -> None:
    obj = with_status(
        raw_pod([{"requests": {"cpu": "1"}}], resources={"limits": {"memory": "1Gi"}}),
        {"containerStatuses": [{"name": "c0", "resources": {"requests": {"cpu": "3"}}}]},
    )
    assert parse_pod(obj).requests == Resources({"cpu": 1000, "memory": GI, "pods": 1})


def test_a_status_without_resources_leaves_the_spec_alone() -> None:
    obj = with_status(
        raw_pod([{"requests": {"cpu": "1"}}]),
        {"containerStatuses": [{"name": "c0", "allocatedResources": {"cpu": "3"}}]},
    )
    assert parse_pod(obj).requests == Resources({"cpu": 1000, "pods": 1})


@pytest.mark.parametrize(
    ("containers", "spec", "expected"),
    [
        (
            [{"requests": {"cpu": "1x"}}],
            {},
            'spec.containers[0].resources.requests["cpu"]: "1x" is not a Kubernetes quantity',
        ),
        (
            [{"limits": {"nvidia.com/gpu": "0.5"}}],
            {},
            'spec.containers[0].resources.limits["nvidia.com/gpu"]: "0.5" is not a whole number '
            "(nvidia.com/gpu is counted in units)",
        ),
        (
            [],
            {"init": [{"requests": {"memory": "-1Gi"}}]},
            'spec.initContainers[0].resources.requests["memory"]: "-1Gi" is negative',
        ),
        (
            [],
            {"overhead": {"cpu": "lots"}},
            'spec.overhead["cpu"]: "lots" is not a Kubernetes quantity',
        ),
        (
            [],
            {"initContainers": {"name": "c"}},
            "spec.initContainers: must be a list, not an object",
        ),
    ],
    ids=["bad-request", "fractional-gpu", "negative-init", "bad-overhead", "init-not-a-list"],
)
def test_a_malformed_request_is_an_error_naming_the_pod_and_field(
    containers: list[dict[str, Any]], spec: dict[str, Any], expected: str
) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod(raw_pod(containers, **spec))
    assert str(raised.value) == f"Pod ml/p: {expected}"


# --- pod fields ------------------------------------------------------------------------


def test_a_bound_pod_reads_its_node_phase_and_scheduler() -> None:
    pod = parse_pod(pod_obj("trainer-0", 2, node="gpu-1", phase="Running", group="job"))
    assert pod == Pod(
        namespace="default",
        name="trainer-0",
        uid="uid-default-trainer-0",
        requests=Resources({"cpu": 1000, "memory": 4 * GI, "nvidia.com/gpu": 2, "pods": 1}),
        node_name="gpu-1",
        phase=PodPhase.RUNNING,
        scheduler_name="phalanx",
        labels={"scheduling.x-k8s.io/pod-group": "job"},
        group=GroupRef("default", "job"),
    )
    assert pod.node_name
    assert not pod.terminal


def test_missing_optional_fields_take_kubernetes_defaults() -> None:
    pod = parse_pod(
        {
            "metadata": {"name": "p", "annotations": None},
            "spec": {"containers": None},
            "status": None,
        }
    )
    assert (pod.namespace, pod.scheduler_name, pod.phase, pod.priority) == (
        "default",
        "default-scheduler",
        PodPhase.PENDING,
        0,
    )
    assert (pod.node_name, pod.deleting, pod.required_affinity, pod.invalid) == (
        "",
        False,
        None,
        "",
    )
    assert pod.requests == Resources({"pods": 1})


def test_priority_deletion_and_node_selector_are_read() -> None:
    obj = raw_pod(
        [{"requests": {"cpu": "1"}}],
        priority=1000,
        nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    pod = parse_pod(obj)
    assert (pod.priority, pod.deleting) == (1000, True)
    assert pod.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_a_pods_preemption_policy_is_read_and_unset_is_kube_schedulers_default() -> None:
    # An upstream PodGroup's pods must agree on it (`phalanx.core.groups.member_rules`).
    assert parse_pod(pod_obj("p", preemption_policy="Never")).preemption_policy == "Never"
    assert parse_pod(pod_obj("p")).preemption_policy == "PreemptLowerPriority"


def test_a_false_pod_scheduled_condition_is_read_with_its_reason() -> None:
    obj = pod_obj("p", node="gpu-1", phase="Running")
    assert parse_pod(obj).unscheduled == ""
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        {"type": "PodScheduled", "status": "False", "reason": "SchedulerError"},
    ]
    assert parse_pod(obj).unscheduled == "SchedulerError"
    obj["status"]["conditions"][1] = {"type": "PodScheduled", "status": "False"}
    assert parse_pod(obj).unscheduled == "Unknown"
    obj["status"]["conditions"][1] = {"type": "PodScheduled", "status": "True"}
    assert parse_pod(obj).unscheduled == ""


def test_an_unknown_phase_is_an_error() -> None:
    with pytest.raises(
        InvalidObjectError, match=r'^Pod default/p: status.phase: "Sleeping" is not a pod phase$'
    ):
        parse_pod(pod_obj("p", phase="Sleeping"))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"operator": "Exists"}, Toleration(operator="Exists")),
        (
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            Toleration("nvidia.com/gpu", "Exists", "", TaintEffect.NO_SCHEDULE),
        ),
        ({"key": "team", "value": "a"}, Toleration("team", "Equal", "a")),
        (
            {
                "key": "team",
                "operator": "Equal",
                "value": "a",
                "effect": "NoExecute",
                "tolerationSeconds": 30,
            },
            Toleration("team", "Equal", "a", TaintEffect.NO_EXECUTE),
        ),
        ({"key": "team", "effect": ""}, Toleration("team")),
    ],
    ids=[
        "everything",
        "exists-key-effect",
        "equal-by-default",
        "equal-no-execute",
        "empty-effect-is-any",
    ],
)
def test_tolerations_are_read(raw: dict[str, Any], expected: Toleration) -> None:
    assert parse_pod(raw_pod(tolerations=[raw])).tolerations == (expected,)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"operator": "Matches"}, 'spec.tolerations[0].operator: "Matches" is not Equal or Exists'),
        (
            {"key": "k", "effect": "Never"},
            'spec.tolerations[0].effect: "Never" is not a taint effect '
            "(NoSchedule, PreferNoSchedule or NoExecute)",
        ),
    ],
    ids=["operator", "effect"],
)
def test_a_malformed_toleration_is_an_error(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod(raw_pod(tolerations=[raw]))
    assert str(raised.value) == f"Pod ml/p: {expected}"


def affinity(terms: object) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ({}, None),
        ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}, None),
        (affinity([]), ()),
        (
            affinity(
                [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},
                            {"key": "zone", "operator": "In", "values": ["a", "b"]},
                        ]
                    },
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
                        ]
                    },
                    {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]},
                ]
            ),
            (
                SelectorTerm(
                    match_expressions=(
                        SelectorRequirement(
                            "nvidia.com/gpu.memory", SelectorOperator.GT, ("40000",)
                        ),
                        SelectorRequirement("zone", SelectorOperator.IN, ("a", "b")),
                    )
                ),
                SelectorTerm(
                    match_fields=(
                        SelectorRequirement("metadata.name", SelectorOperator.NOT_IN, ("n1",)),
                    )
                ),
                SelectorTerm(
                    match_expressions=(
                        SelectorRequirement("spot", SelectorOperator.DOES_NOT_EXIST),
                    )
                ),
            ),
        ),
    ],
    ids=["no-affinity", "empty-affinity", "only-preferred", "no-terms-match-nothing", "ored-terms"],
)
def test_required_node_affinity_terms_are_read(
    raw: dict[str, Any] | None, expected: object
) -> None:
    obj = raw_pod()
    if raw is not None:
        obj["spec"]["affinity"] = raw
    assert parse_pod(obj).required_affinity == expected


def test_an_unknown_selector_operator_is_an_error() -> None:
    obj = raw_pod(affinity=affinity([{"matchExpressions": [{"key": "k", "operator": "Like"}]}]))
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod(obj)
    assert str(raised.value) == (
        "Pod ml/p: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        '.nodeSelectorTerms[0].matchExpressions[0].operator: "Like" is not In, NotIn, Exists, '
        "DoesNotExist, Gt or Lt"
    )


def test_a_non_string_annotation_is_an_error() -> None:
    with pytest.raises(InvalidObjectError) as raised:
        # an annotation value that is no string, as a malformed object carries it
        parse_pod(pod_obj("p", annotations={"phalanx.io/min-member": 3}))  # type: ignore[dict-item]
    assert str(raised.value) == (
        'Pod default/p: metadata.annotations["phalanx.io/min-member"]: '
        "must be a string, not a number"
    )


# --- group membership and phalanx.io annotations ---------------------------------------


def test_the_scheduler_plugins_label_names_a_crd_group() -> None:
    pod = annotated({}, labels={"scheduling.x-k8s.io/pod-group": "job"})
    assert (pod.group, pod.min_member, pod.invalid) == (GroupRef("default", "job"), None, "")


def test_an_empty_group_label_means_no_group() -> None:
    assert annotated({}, labels={"scheduling.x-k8s.io/pod-group": ""}).group is None


@pytest.mark.parametrize(
    ("annotations", "fields"),
    [
        (
            {"phalanx.io/pod-group": "sweep", "phalanx.io/min-member": "4"},
            {"group": GroupRef("default", "sweep"), "min_member": 4, "timeout_seconds": None},
        ),
        (
            {
                "phalanx.io/pod-group": "sweep",
                "phalanx.io/min-member": "4",
                "phalanx.io/schedule-timeout-seconds": "300",
            },
            {"group": GroupRef("default", "sweep"), "min_member": 4, "timeout_seconds": 300},
        ),
        ({"phalanx.io/placement": "spread"}, {"placement": "spread"}),
        (
            {"phalanx.io/placement": "domain:topology.kubernetes.io/zone"},
            {"placement": "domain:topology.kubernetes.io/zone"},
        ),
        ({"phalanx.io/plan-node": "actor-3"}, {"plan_node": "actor-3"}),
        ({"phalanx.io/gpu-memory-mib": "40000"}, {"gpu_memory_mib": 40000}),
        ({"phalanx.io/gpu-memory-mib": "0"}, {"gpu_memory_mib": 0}),
        ({"phalanx.io/unknown": "x", "example.com/other": "y"}, {}),
    ],
    ids=[
        "group",
        "group-timeout",
        "placement",
        "domain-placement",
        "plan-node",
        "gpu-memory",
        "gpu-memory-zero",
        "unrelated",
    ],
)
def test_valid_phalanx_annotations_fill_the_pod(
    annotations: dict[str, str], fields: dict[str, object]
) -> None:
    pod = annotated(annotations)
    assert pod.invalid == ""
    for name, value in fields.items():
        assert getattr(pod, name) == value, name


BAD_ANNOTATIONS = [
    pytest.param(
        {"phalanx.io/pod-group": "g", "phalanx.io/min-member": "abc"},
        'annotation phalanx.io/min-member: "abc" is not a positive integer',
        {"min_member": None, "group": GroupRef("default", "g")},
        id="min-member-word",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "g", "phalanx.io/min-member": "0"},
        'annotation phalanx.io/min-member: "0" is not a positive integer',
        {"min_member": None},
        id="min-member-zero",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "g", "phalanx.io/min-member": " 3"},
        'annotation phalanx.io/min-member: " 3" is not a positive integer',
        {"min_member": None},
        id="min-member-space",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "g", "phalanx.io/min-member": "+3"},
        'annotation phalanx.io/min-member: "+3" is not a positive integer',
        {"min_member": None},
        id="min-member-sign",
    ),
    pytest.param(
        {
            "phalanx.io/pod-group": "g",
            "phalanx.io/min-member": "2",
            "phalanx.io/schedule-timeout-seconds": "-5",
        },
        'annotation phalanx.io/schedule-timeout-seconds: "-5" is not a positive integer',
        {"timeout_seconds": None, "min_member": 2},
        id="timeout-negative",
    ),
    pytest.param(
        {
            "phalanx.io/pod-group": "g",
            "phalanx.io/min-member": "2",
            "phalanx.io/schedule-timeout-seconds": "100000000000000000",
        },
        'annotation phalanx.io/schedule-timeout-seconds: "100000000000000000" is more than '
        "2147483647, the largest an int32 API field holds",
        {"timeout_seconds": None, "min_member": 2},
        id="timeout-beyond-int32",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "g", "phalanx.io/min-member": "2147483648"},
        'annotation phalanx.io/min-member: "2147483648" is more than 2147483647, the largest '
        "an int32 API field holds",
        {"min_member": None},
        id="min-member-beyond-int32",
    ),
    pytest.param(
        {"phalanx.io/gpu-memory-mib": "80GB"},
        'annotation phalanx.io/gpu-memory-mib: "80GB" is not a non-negative integer',
        {"gpu_memory_mib": 0},
        id="gpu-memory-unit",
    ),
    pytest.param(
        {"phalanx.io/placement": "packed"},
        'annotation phalanx.io/placement: "packed" is not a placement policy; '
        "use pack, same-node, spread, interconnect-local or domain:<node-label-key>",
        {"placement": ""},
        id="placement-unknown",
    ),
    pytest.param(
        {"phalanx.io/placement": "domain:Not A Key"},
        'annotation phalanx.io/placement: "domain:Not A Key" does not name a valid node label key '
        "after domain: (e.g. domain:topology.kubernetes.io/zone)",
        {"placement": ""},
        id="placement-bad-domain",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "sweep"},
        'annotation phalanx.io/pod-group: "sweep" needs annotation phalanx.io/min-member '
        "(there is no PodGroup object to give it)",
        {"group": GroupRef("default", "sweep"), "min_member": None},
        id="group-without-min-member",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "My_Group", "phalanx.io/min-member": "2"},
        'annotation phalanx.io/pod-group: "My_Group" is not a valid PodGroup name '
        '(lower-case letters, digits, "-" and ".")',
        {"group": None, "min_member": 2},
        id="group-bad-name",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "", "phalanx.io/min-member": "2"},
        'annotation phalanx.io/pod-group: "" is not a valid PodGroup name '
        '(lower-case letters, digits, "-" and ".")',
        {"group": None},
        id="group-empty",
    ),
    pytest.param(
        {"phalanx.io/min-member": "2"},
        "annotation phalanx.io/min-member needs annotation phalanx.io/pod-group "
        "or label scheduling.x-k8s.io/pod-group",
        {"group": None, "min_member": 2},
        id="min-member-without-group",
    ),
    pytest.param(
        {"phalanx.io/pod-group": "g", "phalanx.io/min-member": "x", "phalanx.io/placement": "wide"},
        'annotation phalanx.io/min-member: "x" is not a positive integer; '
        'annotation phalanx.io/placement: "wide" is not a placement policy; '
        "use pack, same-node, spread, interconnect-local or domain:<node-label-key>",
        {"min_member": None, "placement": ""},
        id="two-problems",
    ),
]


@pytest.mark.parametrize(("annotations", "sentence", "fields"), BAD_ANNOTATIONS)
def test_a_malformed_phalanx_annotation_marks_the_pod_invalid_without_raising(
    annotations: dict[str, str], sentence: str, fields: dict[str, object]
) -> None:
    pod = annotated(annotations)
    assert pod.invalid == sentence
    for name, value in fields.items():
        assert getattr(pod, name) == value, name


def test_label_and_annotation_naming_different_groups_is_invalid() -> None:
    pod = annotated(
        {"phalanx.io/pod-group": "b", "phalanx.io/min-member": "2"},
        labels={"scheduling.x-k8s.io/pod-group": "a"},
    )
    assert pod.invalid == (
        'annotation phalanx.io/pod-group: "b" names a different group than label '
        'scheduling.x-k8s.io/pod-group: "a"'
    )
    assert pod.group is None


def test_label_and_annotation_naming_the_same_group_agree() -> None:
    pod = annotated({"phalanx.io/pod-group": "a"}, labels={"scheduling.x-k8s.io/pod-group": "a"})
    assert (pod.group, pod.invalid) == (GroupRef("default", "a"), "")


def test_a_bound_pod_with_a_bad_annotation_still_counts_on_its_node() -> None:
    pod = parse_pod(
        pod_obj(
            "p", 4, node="gpu-1", phase="Running", annotations={"phalanx.io/min-member": "many"}
        )
    )
    assert pod.invalid
    assert (pod.node_name, pod.requests.get("nvidia.com/gpu")) == ("gpu-1", 4)


# --- groups from pods ------------------------------------------------------------------


def test_an_annotation_only_pod_declares_its_group() -> None:
    pod = annotated(
        {
            "phalanx.io/pod-group": "sweep",
            "phalanx.io/min-member": "4",
            "phalanx.io/schedule-timeout-seconds": "120",
            "phalanx.io/placement": "same-node",
        }
    )
    assert group_from_pod(pod) == PodGroup(
        namespace="default",
        name="sweep",
        min_member=4,
        timeout_seconds=120,
        placement=Placement(PolicyKind.SAME_NODE),
        from_crd=False,
    )


def test_an_annotation_only_group_has_the_default_timeout_and_no_placement_of_its_own() -> None:
    group = group_from_pod(
        annotated({"phalanx.io/pod-group": "sweep", "phalanx.io/min-member": "2"})
    )
    assert group is not None
    # None: the planner applies the configured default placement.
    assert (group.timeout_seconds, group.placement) == (DEFAULT_TIMEOUT_SECONDS, None)


@pytest.mark.parametrize(
    ("annotations", "labels"),
    [
        ({}, {}),
        ({}, {"scheduling.x-k8s.io/pod-group": "job"}),
        (
            {"phalanx.io/pod-group": "job", "phalanx.io/min-member": "2"},
            {"scheduling.x-k8s.io/pod-group": "job"},
        ),
        ({"phalanx.io/pod-group": "sweep"}, {}),
        ({"phalanx.io/pod-group": "sweep", "phalanx.io/min-member": "zero"}, {}),
    ],
    ids=["no-group", "crd-label", "crd-label-and-annotation", "no-min-member", "bad-min-member"],
)
def test_no_group_is_synthesized_otherwise(
    annotations: dict[str, str], labels: dict[str, str]
) -> None:
    assert group_from_pod(annotated(annotations, labels)) is None


# --- placement -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pack", Placement(PolicyKind.PACK)),
        ("same-node", Placement(PolicyKind.SAME_NODE)),
        ("spread", Placement(PolicyKind.SPREAD)),
        ("interconnect-local", Placement(PolicyKind.INTERCONNECT_LOCAL)),
        (
            "domain:topology.kubernetes.io/zone",
            Placement(PolicyKind.DOMAIN, "topology.kubernetes.io/zone"),
        ),
        ("domain:example.com/rack", Placement(PolicyKind.DOMAIN, "example.com/rack")),
        ("domain:rack", Placement(PolicyKind.DOMAIN, "rack")),
        ("domain:nvidia.com/gpu.clique", Placement(PolicyKind.DOMAIN, "nvidia.com/gpu.clique")),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_placement_policy_is_parsed(text: str, expected: Placement) -> None:
    assert parse_placement(text) == expected
    assert str(parse_placement(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Pack",
        "pack ",
        "packed",
        "domain",
        "domain:",
        "domain:/zone",
        "domain:example.com/",
        "domain:Example_Com/rack",
        "domain:a/b/c",
        "domain:-rack",
        "domain:" + "r" * 64,
        "spread:zone",
        "zone:topology.kubernetes.io/zone",
    ],
    ids=repr,
)
def test_anything_else_is_not_a_placement_policy(text: str) -> None:
    with pytest.raises(ValueError, match="domain:") as raised:
        parse_placement(text)
    assert str(raised.value).startswith(f'"{text}"')


def test_the_error_lists_the_accepted_forms() -> None:
    with pytest.raises(
        ValueError,
        match="use pack, same-node, spread, interconnect-local or domain:<node-label-key>",
    ):
        parse_placement("wide")


# --- PodGroups -------------------------------------------------------------------------


def test_a_pod_group_reads_its_spec_and_phalanx_annotations() -> None:
    obj = podgroup_obj(
        "job",
        8,
        namespace="ml",
        timeout=120,
        annotations={
            "phalanx.io/placement": "interconnect-local",
            "phalanx.io/plan": '{"sequence": [{"execute": "a"}]}',
            "phalanx.io/differentiable": "actor, critic",
        },
    )
    obj["spec"]["minResources"] = {"cpu": "8", "nvidia.com/gpu": "8"}
    assert parse_pod_group(obj) == PodGroup(
        namespace="ml",
        name="job",
        min_member=8,
        timeout_seconds=120,
        placement=Placement(PolicyKind.INTERCONNECT_LOCAL),
        plan_json='{"sequence": [{"execute": "a"}]}',
        differentiable=frozenset({"actor", "critic"}),
        min_resources=Resources({"cpu": 8000, "nvidia.com/gpu": 8}),
        from_crd=True,
        uid="pg-ml-job",
    )


def test_a_pod_group_defaults_timeout_placement_and_plan() -> None:
    group = parse_pod_group(podgroup_obj("job", 2))
    assert (group.timeout_seconds, group.placement, group.plan_json, group.differentiable) == (
        DEFAULT_TIMEOUT_SECONDS,
        None,
        "",
        frozenset(),
    )


def test_the_plan_annotation_is_kept_raw_even_when_it_is_not_json() -> None:
    group = parse_pod_group(podgroup_obj("job", 2, annotations={"phalanx.io/plan": "{not json"}))
    assert group.plan_json == "{not json"


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("", frozenset()),
        ("a", frozenset({"a"})),
        ("a,b,c", frozenset({"a", "b", "c"})),
        (" a , b ,, ,c, ", frozenset({"a", "b", "c"})),
        ("a,a", frozenset({"a"})),
        (",", frozenset()),
    ],
    ids=["empty", "one", "several", "blanks", "repeated", "only-commas"],
)
def test_differentiable_ids_are_comma_separated(text: str, ids: frozenset[str]) -> None:
    group = parse_pod_group(podgroup_obj("job", 2, annotations={"phalanx.io/differentiable": text}))
    assert group.differentiable == ids


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"minMember": 0}, "spec.minMember: must be a positive integer, not 0"),
        ({"minMember": -1}, "spec.minMember: must be a positive integer, not -1"),
        ({}, "spec.minMember: is required (a positive integer)"),
        ({"minMember": "3"}, "spec.minMember: must be an integer, not a string"),
        ({"minMember": True}, "spec.minMember: must be an integer, not a boolean"),
        ({"minMember": 2.5}, "spec.minMember: must be an integer, not a number"),
        (
            {"minMember": 2, "scheduleTimeoutSeconds": 0},
            "spec.scheduleTimeoutSeconds: must be a positive integer, not 0",
        ),
        (
            {"minMember": 2, "scheduleTimeoutSeconds": "60"},
            "spec.scheduleTimeoutSeconds: must be an integer, not a string",
        ),
        (
            {"minMember": 2, "minResources": {"cpu": "x"}},
            'spec.minResources["cpu"]: "x" is not a Kubernetes quantity',
        ),
    ],
    ids=[
        "zero",
        "negative",
        "missing",
        "string",
        "boolean",
        "fraction",
        "timeout-zero",
        "timeout-string",
        "min-resources",
    ],
)
def test_an_invalid_pod_group_is_an_error(spec: dict[str, Any], expected: str) -> None:
    obj = podgroup_obj("job", 1, namespace="ml")
    obj["spec"] = spec
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod_group(obj)
    assert str(raised.value) == f"PodGroup ml/job: {expected}"


def test_a_bad_placement_on_a_pod_group_is_an_error() -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod_group(podgroup_obj("job", 2, annotations={"phalanx.io/placement": "wide"}))
    assert str(raised.value).startswith(
        'PodGroup default/job: metadata.annotations["phalanx.io/placement"]: '
        '"wide" is not a placement policy'
    )


# --- any object ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "kind"),
    [(node_obj("n1"), Node), (pod_obj("p"), Pod), (podgroup_obj("g", 1), PodGroup)],
    ids=["node", "pod", "podgroup"],
)
def test_objects_are_dispatched_by_kind(obj: dict[str, Any], kind: type) -> None:
    assert isinstance(parse_object(obj), kind)


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        ("v1", "Service", 'Service web: unsupported kind "v1 Service"'),
        (
            "scheduling.sigs.k8s.io/v1alpha1",
            "PodGroup",
            'PodGroup web: unsupported kind "scheduling.sigs.k8s.io/v1alpha1 PodGroup"',
        ),
        ("apps/v1", "Pod", 'Pod web: unsupported kind "apps/v1 Pod"'),
        (None, None, 'object web: unsupported kind ""'),
    ],
    ids=["service", "old-podgroup-group", "pod-wrong-group", "no-kind"],
)
def test_an_unknown_kind_is_an_error(
    api_version: str | None, kind: str | None, expected: str
) -> None:
    obj: dict[str, Any] = {"metadata": {"name": "web"}}
    if api_version:
        obj["apiVersion"] = api_version
    if kind:
        obj["kind"] = kind
    with pytest.raises(InvalidObjectError) as raised:
        parse_object(obj)
    assert str(raised.value).startswith(
        expected + ": expected v1 Node, v1 Pod or scheduling.x-k8s.io/v1alpha1 PodGroup"
    )


# --- the error type --------------------------------------------------------------------


def test_an_invalid_object_error_carries_its_parts_and_survives_pickling() -> None:
    error = InvalidObjectError(
        "Node", "gpu-1", 'status.allocatable["cpu"]', '"12x" is not a Kubernetes quantity'
    )
    assert str(error) == 'Node gpu-1: status.allocatable["cpu"]: "12x" is not a Kubernetes quantity'
    assert isinstance(error, ValueError)
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert (clone.kind, clone.name, clone.field, clone.reason) == (
            error.kind,
            error.name,
            error.field,
            error.reason,
        )
        assert str(clone) == str(error)
