"""Raw Kubernetes objects -> the model: the one place plain dicts become model types.

Input is what the API or `kubectl get -o json` gives (or a hand-written cluster file): plain
dicts, where optional fields may be missing or `null`. Anything the API server would have
refused raises `InvalidObjectError` naming the object and the JSON path of the field.
One exception: a malformed `phalanx.io/*` annotation on a pod does not raise. The API
server accepts any annotation text, and a bound pod must still count toward its node's
usage, so the pod is returned with `Pod.invalid` saying what is wrong.

Decisions an operator may look for:
* A node is Ready only if its `Ready` condition says "True"; a node with no conditions at
  all is NOT ready (kubelets and kwok always report them; a bare node is one nobody runs).
* `status.allocatable` falls back to `status.capacity` when absent.
* Pod requests are what kube-scheduler computes (`resource.PodRequests` on the pod as the
  API server's defaulting leaves it: sidecars, pod-level resources, in-place resize status,
  overhead, plus one pod slot).
* A missing `metadata.namespace` is "default", as `kubectl apply` would make it.

Typed reads of the dicts live in `phalanx.core.rawdict`, the request arithmetic in
`phalanx.core.pod_requests`. Which gang a pod is in, and every gang object, is read by
the dialects in `phalanx.core.groups` (their registry decides between two claims).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from phalanx.core.claim_refs import read_claim_refs
from phalanx.core.errors import InvalidObjectError, quoted
from phalanx.core.groups import kueue, lws, registry, yunikorn
from phalanx.core.groups.annotations import (
    MIN_MEMBER_ANNOTATION,
    POD_GROUP_ANNOTATION,
    PodDeclaration,
    consistency_problems,
    group_from_pod,
)
from phalanx.core.groups.common import (
    DIFFERENTIABLE_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PLAN_ANNOTATION,
    SCHEDULE_TIMEOUT_ANNOTATION,
    PodView,
    annotation_int,
    is_qualified_name,
    parse_differentiable,
    parse_placement,
)
from phalanx.core.groups.scheduler_plugins import API_VERSION as POD_GROUP_API_VERSION
from phalanx.core.groups.scheduler_plugins import KIND as POD_GROUP_KIND
from phalanx.core.groups.scheduler_plugins import POD_GROUP_LABEL, parse_pod_group
from phalanx.core.model import (
    AMD_GPU,
    ANNOTATION_PREFIX,
    EXTENDED_CLAIM_ENTRY,
    MIG_PREFIX,
    NVIDIA_GPU,
    PREEMPT_LOWER_PRIORITY,
    Dialect,
    GpuInfo,
    GroupRef,
    Node,
    Pod,
    PodClaimRef,
    PodGroup,
    PodPhase,
    Resources,
    SelectorOperator,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    TaintEffect,
    Toleration,
    TopologyConstraint,
    is_gpu_resource,
)
from phalanx.core.pod_requests import pod_requests
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    key_path,
    namespace_and_name,
    read_boolean,
    read_integer,
    read_metadata,
    read_object,
    read_objects,
    read_quantities,
    read_string,
    read_string_map,
    read_strings,
    to_resources,
)
from phalanx.core.topology_annotations import pod_topology
from phalanx.core.unjudged import unjudged

__all__ = [
    "AMD_FAMILY_LABEL",
    "AMD_PRODUCT_LABEL",
    "AMD_VRAM_LABEL",
    "DEFAULT_SCHEDULER_NAME",
    "DIFFERENTIABLE_ANNOTATION",
    "GFD_CLIQUE_LABEL",
    "GFD_COUNT_LABEL",
    "GFD_FAMILY_LABEL",
    "GFD_MEMORY_LABEL",
    "GFD_PRODUCT_LABEL",
    "GFD_REPLICAS_LABEL",
    "GFD_SHARING_STRATEGY_LABEL",
    "GPU_MEMORY_ANNOTATION",
    "MIN_MEMBER_ANNOTATION",
    "PLACEMENT_ANNOTATION",
    "PLAN_ANNOTATION",
    "PLAN_NODE_ANNOTATION",
    "POD_GROUP_ANNOTATION",
    "POD_GROUP_API_VERSION",
    "POD_GROUP_KIND",
    "POD_GROUP_LABEL",
    "REQUEUE_ANNOTATION",
    "SCHEDULE_TIMEOUT_ANNOTATION",
    "group_from_pod",
    "is_qualified_name",
    "parse_differentiable",
    "parse_node",
    "parse_object",
    "parse_placement",
    "parse_pod",
    "parse_pod_group",
]

# --- Names of labels and annotations (DESIGN §3) ----------------------------------------

# Group membership and group settings live in `phalanx.core.groups` (re-exported here).
# Phalanx's own settings on a pod.
PLAN_NODE_ANNOTATION: Final = ANNOTATION_PREFIX + "plan-node"
GPU_MEMORY_ANNOTATION: Final = ANNOTATION_PREFIX + "gpu-memory-mib"
# Written by Phalanx on a pending pod to make kube-scheduler retry it now (its value: when).
REQUEUE_ANNOTATION: Final = ANNOTATION_PREFIX + "requeued-at"

# NVIDIA GPU Feature Discovery.
GFD_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GFD_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"  # MiB per GPU
GFD_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GFD_FAMILY_LABEL: Final = "nvidia.com/gpu.family"
GFD_CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
GFD_REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
GFD_SHARING_STRATEGY_LABEL: Final = "nvidia.com/gpu.sharing-strategy"

# AMD node labeller.
AMD_PRODUCT_LABEL: Final = "amd.com/gpu.product-name"
AMD_VRAM_LABEL: Final = "amd.com/gpu.vram"
AMD_FAMILY_LABEL: Final = "amd.com/gpu.family"

DEFAULT_SCHEDULER_NAME: Final = "default-scheduler"

# AMD labeller writes VRAM as whole GiB with a bare "G" ("192G"); plain numbers are MiB.
_VRAM = re.compile(r"(?P<amount>[0-9]{1,12})(?P<unit>|M|Mi|G|Gi|T|Ti)")
_VRAM_UNIT_MIB = {"": 1, "M": 1, "Mi": 1, "G": 1024, "Gi": 1024, "T": 1024**2, "Ti": 1024**2}


# --- Nodes ------------------------------------------------------------------------------


def parse_node(obj: JsonObject) -> Node:
    """A `v1 Node` as the planner sees it: allocatable capacity, labels, taints, GPUs."""
    src, metadata = read_metadata("Node", obj, namespaced=False)
    spec = read_object(src, obj.get("spec"), "spec")
    status = read_object(src, obj.get("status"), "status")
    if status.get("allocatable") is not None:
        amounts = read_quantities(src, status.get("allocatable"), "status.allocatable")
    else:
        amounts = read_quantities(src, status.get("capacity"), "status.capacity")
    allocatable = to_resources(amounts)
    labels = read_string_map(src, metadata.get("labels"), "metadata.labels")
    return Node(
        # Interned: DRA slices and pools name the node too, and share this one string.
        name=sys.intern(src.name),
        allocatable=allocatable,
        labels=labels,
        taints=tuple(
            _taint(src, taint, path)
            for path, taint in read_objects(src, spec.get("taints"), "spec.taints")
        ),
        unschedulable=read_boolean(src, spec.get("unschedulable"), "spec.unschedulable"),
        ready=_node_ready(src, status),
        gpu=_gpu_info(src, amounts.keys(), allocatable, labels),
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
    )


def _taint_effect(src: Source, value: object, path: str) -> TaintEffect:
    text = read_string(src, value, path)
    try:
        return TaintEffect(text)
    except ValueError:
        raise src.invalid(
            path,
            f"{quoted(text)} is not a taint effect (NoSchedule, PreferNoSchedule or NoExecute)",
        ) from None


def _taint(src: Source, taint: JsonObject, path: str) -> Taint:
    key = read_string(src, taint.get("key"), f"{path}.key")
    if not key:
        raise src.invalid(f"{path}.key", "is required")
    return Taint(
        key=key,
        value=read_string(src, taint.get("value"), f"{path}.value"),
        effect=_taint_effect(src, taint.get("effect"), f"{path}.effect"),
    )


def _node_ready(src: Source, status: JsonObject) -> bool:
    for path, condition in read_objects(src, status.get("conditions"), "status.conditions"):
        if read_string(src, condition.get("type"), f"{path}.type") == "Ready":
            return read_string(src, condition.get("status"), f"{path}.status") == "True"
    return False


def _label_int(
    src: Source, labels: Mapping[str, str], key: str, *, minimum: int, default: int
) -> int:
    text = labels.get(key)
    if text is None:
        return default
    number = annotation_int(text, minimum=minimum)  # label values: the same plain digits
    if number is None:
        kind = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise src.invalid(key_path("metadata.labels", key), f"{quoted(text)} is not {kind}")
    return number


def _amd_vram_mib(src: Source, labels: Mapping[str, str]) -> int:
    text = labels.get(AMD_VRAM_LABEL)
    if text is None:
        return 0
    match = _VRAM.fullmatch(text)
    if match is None:
        raise src.invalid(
            key_path("metadata.labels", AMD_VRAM_LABEL),
            f'{quoted(text)} is not a memory size like "192G" '
            "(GiB, as the AMD node labeller writes it) or a number of MiB",
        )
    return int(match["amount"]) * _VRAM_UNIT_MIB[match["unit"]]


def _gpu_info(
    src: Source, names: Iterable[str], allocatable: Resources, labels: Mapping[str, str]
) -> GpuInfo | None:
    """GPUs from allocatable resource names (even at 0: unhealthy GPUs still have a model)."""
    gpu_names = sorted(name for name in names if is_gpu_resource(name))
    if not gpu_names:
        return None
    if gpu_names == [AMD_GPU]:
        return GpuInfo(
            vendor="amd",
            count=allocatable.get(AMD_GPU),
            product=labels.get(AMD_PRODUCT_LABEL, ""),
            memory_mib=_amd_vram_mib(src, labels),
            family=labels.get(AMD_FAMILY_LABEL, ""),
        )
    # A node with NVIDIA and AMD devices is described by its NVIDIA ones (GFD labels).
    _label_int(src, labels, GFD_COUNT_LABEL, minimum=0, default=0)  # physical count: checked only
    return GpuInfo(
        vendor="nvidia",
        count=allocatable.get(NVIDIA_GPU),
        product=labels.get(GFD_PRODUCT_LABEL, ""),
        memory_mib=_label_int(src, labels, GFD_MEMORY_LABEL, minimum=0, default=0),
        family=labels.get(GFD_FAMILY_LABEL, ""),
        clique=labels.get(GFD_CLIQUE_LABEL, ""),
        replicas=_label_int(src, labels, GFD_REPLICAS_LABEL, minimum=1, default=1),
        sharing_strategy=labels.get(GFD_SHARING_STRATEGY_LABEL) or "none",
        mig={
            name: allocatable.get(name)
            for name in gpu_names
            if name.startswith(MIG_PREFIX) and allocatable.get(name)
        },
    )


# --- Pods -------------------------------------------------------------------------------


def parse_pod(obj: JsonObject) -> Pod:
    """A `v1 Pod`: its requests as kube-scheduler counts them, constraints and gang settings.

    Malformed quantities raise; malformed `phalanx.io/*` annotations set `Pod.invalid`.
    """
    src, metadata = read_metadata("Pod", obj, namespaced=True)
    namespace, name = namespace_and_name(src)
    spec = read_object(src, obj.get("spec"), "spec")
    status = read_object(src, obj.get("status"), "status")
    labels = read_string_map(src, metadata.get("labels"), "metadata.labels")
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = _PodSettings.read(PodView(src, namespace, labels, annotations, spec))
    return Pod(
        namespace=namespace,
        name=name,
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        requests=pod_requests(src, spec, status),
        node_name=read_string(src, spec.get("nodeName"), "spec.nodeName"),
        phase=_phase(src, status),
        unscheduled=_unscheduled(status),
        scheduler_name=read_string(src, spec.get("schedulerName"), "spec.schedulerName")
        or DEFAULT_SCHEDULER_NAME,
        labels=labels,
        tolerations=tuple(
            _toleration(src, toleration, path)
            for path, toleration in read_objects(src, spec.get("tolerations"), "spec.tolerations")
        ),
        node_selector=read_string_map(src, spec.get("nodeSelector"), "spec.nodeSelector"),
        required_affinity=_required_affinity(src, spec),
        group=settings.group,
        plan_node=settings.plan_node,
        gpu_memory_mib=settings.gpu_memory_mib,
        priority=read_integer(src, spec.get("priority"), "spec.priority") or 0,
        preemption_policy=read_string(src, spec.get("preemptionPolicy"), "spec.preemptionPolicy")
        or PREEMPT_LOWER_PRIORITY,
        deleting=metadata.get("deletionTimestamp") not in (None, ""),
        resource_version=read_string(
            src, metadata.get("resourceVersion"), "metadata.resourceVersion"
        ),
        min_member=settings.min_member,
        timeout_seconds=settings.timeout_seconds,
        placement=settings.placement,
        topology=_topology(annotations, settings),
        invalid="; ".join(settings.problems),
        group_dialect=settings.membership.winner.dialect if settings.membership.winner else None,
        overruled=settings.membership.overruled,
        resource_claims=_pod_claims(src, spec, status),
        scheduling_group=_scheduling_group(src, spec),
        unjudged=unjudged(src, spec),
        task=registry.member_task(
            settings.membership.winner.dialect if settings.membership.winner else None,
            labels,
            annotations,
        ),
        task_groups=(
            yunikorn.declared_task_groups(annotations)
            if settings.won_by(Dialect.YUNIKORN)
            else None
        ),
    )


def _pod_claims(src: Source, spec: JsonObject, status: JsonObject) -> tuple[PodClaimRef, ...]:
    """`spec.resourceClaims`, with the names generated for templates (`resourceclaim.Name`)."""
    refs = list(read_claim_refs(src, spec, status))
    # The claim kube-scheduler made for extended resources served by DRA (KEP-5004).
    path = "status.extendedResourceClaimStatus"
    made = read_object(src, status.get("extendedResourceClaimStatus"), path)
    claim = read_string(src, made.get("resourceClaimName"), f"{path}.resourceClaimName")
    if claim:
        refs.append(PodClaimRef(EXTENDED_CLAIM_ENTRY, claim=claim, extended=True))
    return tuple(refs)


def _scheduling_group(src: Source, spec: JsonObject) -> str:
    """`spec.schedulingGroup.podGroupName`, read as kube-scheduler reads it for claims (the
    gang the pod joins is decided with the other dialects, `registry.membership`)."""
    group = read_object(src, spec.get("schedulingGroup"), "spec.schedulingGroup")
    return read_string(src, group.get("podGroupName"), "spec.schedulingGroup.podGroupName")


def _topology(annotations: Mapping[str, str], settings: _PodSettings) -> TopologyConstraint | None:
    """The pod's topology intent; an LWS member declaring none of Phalanx's or Kueue's gets
    LWS's exclusive placement's label as its required level (`lws.member_topology`)."""
    own = pod_topology(annotations, settings.problems)
    winner = settings.membership.winner
    if own is not None or winner is None or winner.dialect is not Dialect.LWS:
        return own
    return lws.member_topology(annotations, settings.problems)


def _unscheduled(status: JsonObject) -> str:
    """The reason of the pod's `PodScheduled` condition when it is False, else "". Read
    leniently: conditions are the system's writing, and only this one is used."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return ""
    for condition in conditions:
        if not isinstance(condition, dict) or condition.get("type") != "PodScheduled":
            continue
        if condition.get("status") != "False":
            return ""
        reason = condition.get("reason")
        return reason if isinstance(reason, str) and reason else "Unknown"
    return ""


def _phase(src: Source, status: JsonObject) -> PodPhase:
    text = read_string(src, status.get("phase"), "status.phase")
    if not text:
        return PodPhase.PENDING
    try:
        return PodPhase(text)
    except ValueError:
        raise src.invalid("status.phase", f"{quoted(text)} is not a pod phase") from None


def _toleration(src: Source, toleration: JsonObject, path: str) -> Toleration:
    operator = read_string(src, toleration.get("operator"), f"{path}.operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise src.invalid(f"{path}.operator", f"{quoted(operator)} is not Equal or Exists")
    effect = toleration.get("effect")
    return Toleration(
        key=read_string(src, toleration.get("key"), f"{path}.key"),
        operator=operator,
        value=read_string(src, toleration.get("value"), f"{path}.value"),
        effect=_taint_effect(src, effect, f"{path}.effect") if effect not in (None, "") else None,
    )


def _required_affinity(src: Source, spec: JsonObject) -> tuple[SelectorTerm, ...] | None:
    path = "spec.affinity"
    affinity = read_object(src, spec.get("affinity"), path)
    path += ".nodeAffinity"
    node_affinity = read_object(src, affinity.get("nodeAffinity"), path)
    path += ".requiredDuringSchedulingIgnoredDuringExecution"
    return parse_node_selector(
        src, node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), path
    )


def parse_node_selector(src: Source, value: object, path: str) -> tuple[SelectorTerm, ...] | None:
    """A `v1 NodeSelector` (its ORed `nodeSelectorTerms`); None when the field is absent."""
    if value is None:
        return None
    terms = read_object(src, value, path).get("nodeSelectorTerms")
    return tuple(
        SelectorTerm(
            match_expressions=_requirements(
                src, term.get("matchExpressions"), f"{term_path}.matchExpressions"
            ),
            match_fields=_requirements(src, term.get("matchFields"), f"{term_path}.matchFields"),
        )
        for term_path, term in read_objects(src, terms, f"{path}.nodeSelectorTerms")
    )


def _requirements(src: Source, value: object, path: str) -> tuple[SelectorRequirement, ...]:
    result = []
    for item_path, requirement in read_objects(src, value, path):
        operator = read_string(src, requirement.get("operator"), f"{item_path}.operator")
        try:
            selector_operator = SelectorOperator(operator)
        except ValueError:
            raise src.invalid(
                f"{item_path}.operator",
                f"{quoted(operator)} is not In, NotIn, Exists, DoesNotExist, Gt or Lt",
            ) from None
        result.append(
            SelectorRequirement(
                key=read_string(src, requirement.get("key"), f"{item_path}.key"),
                operator=selector_operator,
                values=read_strings(src, requirement.get("values"), f"{item_path}.values"),
            )
        )
    return tuple(result)


# --- Phalanx settings on a pod (annotations never raise) ---------------------------------


@dataclass(slots=True)
class _PodSettings:
    """Group membership and `phalanx.io/*` settings of one pod, with what was wrong."""

    membership: registry.Membership = field(default_factory=registry.Membership)
    min_member: int | None = None
    timeout_seconds: int | None = None
    placement: str = ""
    plan_node: str = ""
    gpu_memory_mib: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def group(self) -> GroupRef | None:
        winner = self.membership.winner
        return winner.ref if winner is not None else None

    def won_by(self, dialect: Dialect) -> bool:
        """Whether `dialect`'s readable claim decides the pod's gang."""
        winner = self.membership.winner
        return winner is not None and winner.ref is not None and winner.dialect is dialect

    @classmethod
    def read(cls, pod: PodView) -> _PodSettings:
        """Raises InvalidObjectError only for a malformed spec field (the API validates it)."""
        labels, annotations = pod.labels, pod.annotations
        membership = registry.membership(pod)
        settings = cls(membership, plan_node=annotations.get(PLAN_NODE_ANNOTATION, ""))
        if membership.winner is not None:
            settings.problems.extend(membership.winner.problems)
        declaration = PodDeclaration.read(annotations)
        settings.min_member = declaration.min_member
        winner = membership.winner
        size_of = _MEMBER_SIZES.get(winner.dialect) if winner is not None else None
        if winner is not None and winner.ref is not None and size_of is not None:
            # Its problems, if any, are the claim's (already added above).
            count = size_of(annotations)
            settings.min_member = count if isinstance(count, int) else None
        settings.timeout_seconds = declaration.timeout_seconds
        if settings.timeout_seconds is None and settings.won_by(Dialect.YUNIKORN):
            # Phalanx's own annotation, addressed to it by name, wins over YuniKorn's.
            settings.timeout_seconds = yunikorn.placeholder_timeout(annotations)
        settings.problems.extend(declaration.problems)
        memory = annotations.get(GPU_MEMORY_ANNOTATION)
        if memory is not None:
            mib = annotation_int(memory, minimum=0)
            if mib is None:
                settings.problems.append(
                    f"annotation {GPU_MEMORY_ANNOTATION}: {quoted(memory)} is not a "
                    "non-negative integer"
                )
            settings.gpu_memory_mib = mib or 0
        placement = annotations.get(PLACEMENT_ANNOTATION)
        if placement is not None:
            try:
                parse_placement(placement)
            except ValueError as error:
                settings.problems.append(f"annotation {PLACEMENT_ANNOTATION}: {error}")
            else:
                settings.placement = placement
        settings.problems.extend(consistency_problems(labels, annotations, settings.group))
        for stray in (
            kueue.stray_count_problem(labels, annotations),
            lws.stray_opt_in_problem(labels, annotations),
        ):
            if stray:
                settings.problems.append(stray)
        return settings


# The dialects whose members declare their gang's size, and how each reads it.
_MEMBER_SIZES: Final = {
    Dialect.KUEUE: kueue.total_count,
    Dialect.LWS: lws.group_size,
    Dialect.YUNIKORN: yunikorn.declared_size,
}


# --- Any object -------------------------------------------------------------------------


def parse_object(obj: JsonObject) -> Node | Pod | PodGroup:
    """A Node, Pod or PodGroup (of any dialect), by its `kind` and `apiVersion`, e.g. an
    item of a List. A Workload, or a dialect's warnings, need `registry.parse_group_object`.
    """
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if kind == "Node" and api_version in (None, "v1"):
        return parse_node(obj)
    if kind == "Pod" and api_version in (None, "v1"):
        return parse_pod(obj)
    if kind == POD_GROUP_KIND:
        parsed = registry.parse_group_object(obj)
        if parsed is not None and isinstance(parsed.value, PodGroup):
            return parsed.value
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    found = " ".join(part for part in (api_version, kind) if isinstance(part, str))
    raise InvalidObjectError(
        kind if isinstance(kind, str) and kind else "object",
        name if isinstance(name, str) else "",
        "",
        f"unsupported kind {quoted(found)}: "
        f"expected v1 Node, v1 Pod or {POD_GROUP_API_VERSION} {POD_GROUP_KIND} "
        f"(or the PodGroup of another dialect: {_OTHER_POD_GROUPS})",
    )


_OTHER_POD_GROUPS: Final = ", ".join(
    api_version
    for api_version, kind in registry.group_kinds()
    if kind == POD_GROUP_KIND and api_version != POD_GROUP_API_VERSION
)
