"""Every decoder of API objects, handed a valid object with anything in it made wrong,
decodes it or refuses it with an `InvalidObjectError` naming the field: never a TypeError,
KeyError, RecursionError or a bare ValueError a user could not act on.

Malformed `phalanx.io/*` (and other dialects') annotations on a pod are not refusals: the
pod decodes, `Pod.invalid` saying what is wrong, and a pod given any text there must decode.

Each property starts from valid objects made by the builders: a mutation then tests the
one field it hits rather than the first check a random dict fails.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (
    claim_obj,
    claim_template_obj,
    composite_obj,
    device_class_obj,
    device_request,
    dra_pod_obj,
    gpu_device,
    grove_podgang_obj,
    kai_podgroup_obj,
    mig_device,
    node_obj,
    pod_obj,
    podgroup_obj,
    slice_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from dra_builders import network_slice_obj, partitioned_slices, taint_rule_obj
from json_garbage import (
    AWKWARD_STRINGS,
    Mutation,
    check_names_a_field,
    garbled,
    refusal_of,
    related,
)
from phalanx.core.dra import (
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import (
    composite,
    grove,
    kai,
    registry,
    scheduler_plugins,
    upstream,
    volcano,
)
from phalanx.core.inventory import parse_node, parse_object, parse_pod

# Per decoder: about a second each, and enough to hit each field with several kinds of
# garbage (every run draws new ones).
EXAMPLES = 300
fuzz = settings(max_examples=EXAMPLES, deadline=None)

Decoder = Callable[[dict[str, Any]], object]


# ---- valid objects, each reading as many fields as its decoder knows --------------------


def rich_node() -> dict[str, Any]:
    obj = node_obj(
        "n1",
        labels={"nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.clique": "c.1"},
        taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
    )
    obj["status"]["allocatable"]["nvidia.com/mig-1g.5gb"] = "2"
    return obj


def amd_node() -> dict[str, Any]:
    obj = node_obj("n2", 0)
    obj["status"]["allocatable"]["amd.com/gpu"] = "8"
    obj["metadata"]["labels"].update(
        {"amd.com/gpu.vram": "192G", "amd.com/gpu.product-name": "MI300X"}
    )
    return obj


def rich_pod() -> dict[str, Any]:
    """A pod using every field the pod decoder reads."""
    obj = pod_obj(
        "p",
        namespace="ml",
        group="train",
        node="n1",
        annotations={
            "phalanx.io/min-member": "4",
            "phalanx.io/schedule-timeout-seconds": "60",
            "phalanx.io/placement": "pack",
            "phalanx.io/gpu-memory-mib": "40000",
            "phalanx.io/plan-node": "n1",
            "phalanx.io/topology-required": "topology.kubernetes.io/zone",
            "phalanx.io/topology-slice-size": "2",
        },
    )
    spec = obj["spec"]
    spec["priority"] = 100
    spec["initContainers"] = [
        {"name": "setup", "resources": {"requests": {"cpu": "2"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"memory": "1Gi"}}},
    ]
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    spec["overhead"] = {"cpu": "250m"}
    spec["resources"] = {"limits": {"cpu": "8", "hugepages-2Mi": "1Gi"}}
    spec["tolerations"] = [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"operator": "Exists"},
    ]
    spec["nodeSelector"] = {"pool": "a"}
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}
                        ],
                    }
                ]
            }
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    }
    spec["topologySpreadConstraints"] = [{"whenUnsatisfiable": "ScheduleAnyway"}]
    spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    spec["schedulingGroup"] = {"podGroupName": "train"}
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]
    obj["metadata"]["resourceVersion"] = "12"
    obj["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible"},
        ],
        "containerStatuses": [
            {
                "name": "main",
                "resources": {"requests": {"cpu": "2"}},
                "allocatedResources": {"cpu": "1500m"},
            }
        ],
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2"}],
        "extendedResourceClaimStatus": {"resourceClaimName": "p-extended"},
    }
    return obj


def dialect_pods() -> dict[str, dict[str, Any]]:
    """A pod each dialect claims, its group settings in labels and annotations, by dialect."""
    volcano_pod = pod_obj("v", volcano_group="vg", annotations={"volcano.sh/task-spec": "w"})
    kai_pod = pod_obj(
        "k", annotations={"pod-group-name": "kg"}, labels={"kai.scheduler/subgroup-name": "s"}
    )
    grove_pod = pod_obj("g", labels={"grove.io/podgang": "gg", "grove.io/podclique": "w"})
    kueue_pod = pod_obj(
        "q",
        labels={"kueue.x-k8s.io/pod-group-name": "qg"},
        annotations={"kueue.x-k8s.io/pod-group-total-count": "4"},
    )
    yunikorn_pod = pod_obj(
        "y",
        labels={"applicationId": "app-1"},
        annotations={
            "yunikorn.apache.org/task-group-name": "w",
            "yunikorn.apache.org/task-groups": '[{"name": "w", "minMember": 2}]',
            "yunikorn.apache.org/schedulingPolicyParameters": (
                "placeholderTimeoutInSeconds=60 gangSchedulingStyle=Hard"
            ),
        },
    )
    lws_pod = pod_obj(
        "l",
        labels={
            "leaderworkerset.sigs.k8s.io/name": "lw",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
        },
        annotations={
            "phalanx.io/leaderworkerset-gang": "true",
            "leaderworkerset.sigs.k8s.io/size": "4",
            "leaderworkerset.sigs.k8s.io/exclusive-topology": "topology.kubernetes.io/zone",
        },
    )
    upstream_pod = pod_obj("u", workload_ref={"name": "wl", "podGroup": "workers"})
    dra_pod = dra_pod_obj(
        "d", templates={"gpu": "gpu-template"}, claims={"nic": "nic-1"}, generated={"gpu": "d-gpu"}
    )
    return {
        "volcano": volcano_pod,
        "kai": kai_pod,
        "grove": grove_pod,
        "kueue": kueue_pod,
        "yunikorn": yunikorn_pod,
        "lws": lws_pod,
        "upstream": upstream_pod,
        "dra": dra_pod,
    }


def rich_podgroup() -> dict[str, Any]:
    obj = podgroup_obj(
        "train",
        4,
        namespace="ml",
        timeout=120,
        annotations={"phalanx.io/placement": "spread", "phalanx.io/topology": "rack"},
        status={"conditions": [{"type": "Scheduled", "status": "True", "reason": "Placed"}]},
    )
    obj["spec"]["minResources"] = {"cpu": "4"}
    return obj


def rich_volcano() -> dict[str, Any]:
    obj = volcano_podgroup_obj(
        "vg", 4, min_resources={"cpu": "4", "nvidia.com/gpu": "4"}, min_task_member={"w": 3}
    )
    obj["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    return obj


def rich_kai() -> dict[str, Any]:
    obj = kai_podgroup_obj("kg", 4)
    obj["spec"]["topologyConstraint"] = {"requiredTopologyLevel": "rack"}
    obj["spec"]["subGroups"] = [
        {"name": "top", "minSubGroup": 1},
        {"name": "a", "parent": "top", "minMember": 2},
        {"name": "b", "parent": "top", "minMember": 2, "topologyConstraint": {}},
    ]
    return obj


def rich_grove() -> dict[str, Any]:
    obj = grove_podgang_obj("gg", {"w": 2, "x": 1})
    obj["spec"]["topologyConstraint"] = {"packConstraint": {"required": "topology/zone"}}
    obj["spec"]["podgroups"][0]["topologyConstraint"] = {
        "packConstraint": {"preferred": "topology/rack"}
    }
    obj["spec"]["topologyConstraintGroupConfigs"] = [
        {
            "name": "both",
            "podGroupNames": ["w", "x"],
            "topologyConstraint": {"packConstraint": {"required": "topology/block"}},
        }
    ]
    return obj


def rich_upstream() -> dict[str, Any]:
    return upstream_podgroup_obj(
        "workers",
        4,
        version="v1alpha3",
        topology_key="topology.kubernetes.io/zone",
        parent="job",
        status={"conditions": [{"type": "PodGroupScheduled", "status": "False"}]},
    )


def rich_slice() -> dict[str, Any]:
    device = gpu_device("n1", 0)
    device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}]
    mig = mig_device("n1", 1, "1g.5gb", 0)
    mig["consumesCounters"] = [{"counterSet": "gpu-1", "counters": {"memory": {"value": "5Gi"}}}]
    obj = slice_obj("n1", [device, mig])
    obj["spec"]["sharedCounters"] = [{"name": "gpu-1", "counters": {"memory": {"value": "40Gi"}}}]
    return obj


def rich_claim() -> dict[str, Any]:
    request = device_request("gpu", "gpu.nvidia.com", 2, "device.attributes['x'].y == 'z'")
    request["exactly"]["tolerations"] = [
        {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}
    ]
    obj = claim_obj(
        "c1",
        request,
        {"name": "any", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com"}]},
        allocated=[("gpu.nvidia.com", "n1", "gpu-0")],
        node="n1",
        owner_pod="uid-p",
        reserved_for=["uid-p"],
    )
    obj["spec"]["devices"]["constraints"] = [{"requests": ["gpu"], "matchAttribute": "x/y"}]
    return obj


# (decoder, valid objects) for each decoder: what the properties below garble.
DECODERS: dict[str, tuple[Decoder, list[dict[str, Any]]]] = {
    "parse_node": (parse_node, [rich_node(), amd_node()]),
    "parse_pod": (parse_pod, [rich_pod(), *dialect_pods().values()]),
    "parse_object": (
        parse_object,
        [rich_node(), rich_pod(), rich_podgroup(), rich_volcano(), rich_kai(), rich_upstream()],
    ),
    "scheduler_plugins.parse_pod_group": (scheduler_plugins.parse_pod_group, [rich_podgroup()]),
    "volcano.parse_pod_group": (volcano.parse_pod_group, [rich_volcano()]),
    "kai.parse_pod_group": (kai.parse_pod_group, [rich_kai()]),
    "grove.parse_pod_gang": (grove.parse_pod_gang, [rich_grove()]),
    "upstream.parse_pod_group": (
        upstream.parse_pod_group,
        [rich_upstream(), upstream_podgroup_obj("basic", None, version="v1alpha2")],
    ),
    "upstream.parse_workload": (
        upstream.parse_workload,
        [workload_obj("wl", {"workers": 4, "driver": None})],
    ),
    "composite.parse_composite": (
        composite.parse_composite,
        [composite_obj("job", 2, parent="top", topology_key="zone")],
    ),
    "registry.parse_group_object": (
        registry.parse_group_object,
        [
            rich_podgroup(),
            rich_volcano(),
            rich_kai(),
            rich_grove(),
            rich_upstream(),
            workload_obj("wl", {"workers": 4}),
            composite_obj("job", None),
        ],
    ),
    "parse_resource_slice": (
        parse_resource_slice,
        [
            rich_slice(),
            network_slice_obj("nic.example.com", "nic", 2, nodes=["n1"]),
            *partitioned_slices("n2", 1),
        ],
    ),
    "parse_device_taint_rule": (
        parse_device_taint_rule,
        [taint_rule_obj("r", driver="gpu.nvidia.com", pool="n1", device="gpu-0")],
    ),
    "parse_device_class": (
        parse_device_class,
        [device_class_obj("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'")],
    ),
    "parse_resource_claim": (parse_resource_claim, [rich_claim()]),
    "parse_resource_claim_template": (
        parse_resource_claim_template,
        [claim_template_obj("t", device_request("gpu", "gpu.nvidia.com", None, mode="All"))],
    ),
}


def test_every_seed_is_valid_as_it_stands() -> None:
    """Mutations start from objects each decoder accepts, or they test nothing."""
    for decode, seeds in DECODERS.values():
        for seed in seeds:
            decode(seed)


@st.composite
def garbled_objects(
    draw: st.DrawFn, seeds: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[Mutation]]:
    return draw(garbled(draw(st.sampled_from(seeds))))


def refusal(decode: Decoder, obj: dict[str, Any]) -> InvalidObjectError | None:
    """The InvalidObjectError decoding `obj` raised (None when it decoded); any other
    exception fails the test."""
    error = refusal_of(lambda: decode(obj), (InvalidObjectError,))
    return error if isinstance(error, InvalidObjectError) else None


@pytest.mark.parametrize("decoder", DECODERS)
@fuzz
@given(data=st.data())
def test_an_object_with_anything_changed_decodes_or_is_refused_naming_the_field(
    decoder: str, data: st.DataObject
) -> None:
    decode, seeds = DECODERS[decoder]
    obj, mutations = data.draw(garbled_objects(seeds), label="mutations")
    error = refusal(decode, obj)
    if error is None:
        return
    if error.reason.startswith("unsupported kind"):  # parse_object: the object as a whole
        return
    check_names_a_field(error)
    if all(mutation.changes_type for mutation in mutations):
        assert related(error.field, mutations), f"{error} names no field that was changed"


# ---- labels and annotations: text that each dialect parses -------------------------------

# Every label and annotation key a decoder reads a value from.
READ_KEYS = (
    "phalanx.io/pod-group",
    "phalanx.io/min-member",
    "phalanx.io/schedule-timeout-seconds",
    "phalanx.io/placement",
    "phalanx.io/plan",
    "phalanx.io/plan-node",
    "phalanx.io/differentiable",
    "phalanx.io/gpu-memory-mib",
    "phalanx.io/commit",
    "phalanx.io/topology",
    "phalanx.io/topology-required",
    "phalanx.io/topology-preferred",
    "phalanx.io/topology-slice-size",
    "phalanx.io/topology-slice-required",
    "phalanx.io/leaderworkerset-gang",
    "scheduling.x-k8s.io/pod-group",
    "scheduling.k8s.io/group-name",
    "scheduling.volcano.sh/group-name",
    "volcano.sh/task-spec",
    "pod-group-name",
    "kai.scheduler/subgroup-name",
    "grove.io/podgang",
    "grove.io/podclique",
    "kueue.x-k8s.io/pod-group-name",
    "kueue.x-k8s.io/pod-group-total-count",
    "kueue.x-k8s.io/pod-group-serving",
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
    "kueue.x-k8s.io/podset-slice-size",
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-required-topology-constraints",
    "yunikorn.apache.org/app-id",
    "yunikorn.apache.org/task-group-name",
    "yunikorn.apache.org/task-groups",
    "yunikorn.apache.org/schedulingPolicyParameters",
    "applicationId",
    "spark-app-selector",
    "leaderworkerset.sigs.k8s.io/name",
    "leaderworkerset.sigs.k8s.io/group-index",
    "leaderworkerset.sigs.k8s.io/size",
    "leaderworkerset.sigs.k8s.io/exclusive-topology",
    "leaderworkerset.sigs.k8s.io/subgroup-index",
    "leaderworkerset.sigs.k8s.io/subgroup-size",
    "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    "amd.com/gpu.vram",
)

# Any text, but mostly what a number, a name, a list or a JSON document is mistaken for.
label_texts = st.one_of(
    st.sampled_from(AWKWARD_STRINGS),
    st.sampled_from(("[" * 10_000, "{" * 10_000, '[{"name": ' * 5_000, "[1" + "0" * 10_000 + "]")),
    st.text(max_size=30),
    st.from_regex(r"[0-9a-z\[\]{}\":,./=\- ]{0,40}", fullmatch=True),
)


@st.composite
def relabelled(draw: st.DrawFn, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """A seed with some of the labels and annotations decoders read (mostly its own) set to
    any text."""
    obj: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(seeds)))
    metadata = obj["metadata"]
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(("labels", "annotations")))
        own = sorted(metadata.get(where) or {})
        keys = st.sampled_from(own) if own else st.sampled_from(READ_KEYS)
        key = draw(st.one_of(keys, keys, st.sampled_from(READ_KEYS)))
        text = draw(label_texts)
        metadata.setdefault(where, {})[key] = text
    return obj


POD_SEEDS = {"phalanx": rich_pod(), **dialect_pods()}


@pytest.mark.parametrize("seed", POD_SEEDS)
@settings(max_examples=EXAMPLES // 3, deadline=None)  # per dialect: as many in all
@given(data=st.data())
def test_a_pod_with_any_text_in_its_labels_and_annotations_decodes_saying_what_is_wrong(
    seed: str, data: st.DataObject
) -> None:
    """The API server takes any text there, and a bound pod must still count on its node:
    the pod decodes, `invalid` saying what is wrong (never raising)."""
    obj = data.draw(relabelled([POD_SEEDS[seed]]), label="pod")
    parse_pod(obj)


@pytest.mark.parametrize(
    "decoder", ["parse_node", "registry.parse_group_object"], ids=["node", "gang object"]
)
@fuzz
@given(data=st.data())
def test_an_object_with_any_text_in_its_labels_and_annotations_decodes_or_is_refused_naming_it(
    decoder: str, data: st.DataObject
) -> None:
    decode, seeds = DECODERS[decoder]
    obj = data.draw(relabelled(seeds), label="object")
    error = refusal(decode, obj)
    if error is not None:
        check_names_a_field(error)
        # A setting an annotation and the spec both make is refused where the spec sets it.
        on_metadata = error.field.startswith(("metadata.labels", "metadata.annotations"))
        assert on_metadata or "annotation" in error.reason, str(error)
