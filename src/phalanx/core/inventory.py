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
`phalanx.core.pod_requests`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from phalanx.core.errors import InvalidObjectError, quoted
from phalanx.core.model import (
    AMD_GPU,
    ANNOTATION_PREFIX,
    DEFAULT_TIMEOUT_SECONDS,
    MIG_PREFIX,
    NVIDIA_GPU,
    GpuInfo,
    GroupRef,
    Node,
    Placement,
    Pod,
    PodClaimRef,
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

# --- Names of labels and annotations (DESIGN §3) ----------------------------------------

# Group membership, scheduler-plugins / Kubeflow style: the PodGroup CRD gives the settings.
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
POD_GROUP_API_VERSION: Final = "scheduling.x-k8s.io/v1alpha1"
POD_GROUP_KIND: Final = "PodGroup"

# Annotation-only groups and Phalanx's own settings.
POD_GROUP_ANNOTATION: Final = ANNOTATION_PREFIX + "pod-group"
MIN_MEMBER_ANNOTATION: Final = ANNOTATION_PREFIX + "min-member"
SCHEDULE_TIMEOUT_ANNOTATION: Final = ANNOTATION_PREFIX + "schedule-timeout-seconds"
PLACEMENT_ANNOTATION: Final = ANNOTATION_PREFIX + "placement"
PLAN_ANNOTATION: Final = ANNOTATION_PREFIX + "plan"
PLAN_NODE_ANNOTATION: Final = ANNOTATION_PREFIX + "plan-node"
DIFFERENTIABLE_ANNOTATION: Final = ANNOTATION_PREFIX + "differentiable"
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

_PLACEMENT_FORMS = "pack, same-node, spread, interconnect-local or domain:<node-label-key>"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# Annotation integers: plain ASCII digits (int() would also take " 3", "+3", "1_000", "٣").
_DIGITS = re.compile(r"[0-9]{1,18}")
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
    if _DIGITS.fullmatch(text) is None or int(text) < minimum:
        kind = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise src.invalid(key_path("metadata.labels", key), f"{quoted(text)} is not {kind}")
    return int(text)


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
    settings = _PodSettings.read(namespace, labels, annotations)
    return Pod(
        namespace=namespace,
        name=name,
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        requests=pod_requests(src, spec, status),
        node_name=read_string(src, spec.get("nodeName"), "spec.nodeName"),
        phase=_phase(src, status),
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
        deleting=metadata.get("deletionTimestamp") not in (None, ""),
        min_member=settings.min_member,
        timeout_seconds=settings.timeout_seconds,
        placement=settings.placement,
        invalid="; ".join(settings.problems),
        claims=_pod_claims(src, spec, status),
    )


def _pod_claims(src: Source, spec: JsonObject, status: JsonObject) -> tuple[PodClaimRef, ...]:
    """`spec.resourceClaims`, with the names generated for templates (`resourceclaim.Name`)."""
    generated: dict[str, str | None] = {}
    path = "status.resourceClaimStatuses"
    for item_path, entry in read_objects(src, status.get("resourceClaimStatuses"), path):
        name = read_string(src, entry.get("name"), f"{item_path}.name")
        claim = entry.get("resourceClaimName")
        generated[name] = read_string(src, claim, f"{item_path}.resourceClaimName") or None
    refs = []
    for item_path, entry in read_objects(src, spec.get("resourceClaims"), "spec.resourceClaims"):
        name = read_string(src, entry.get("name"), f"{item_path}.name")
        claim = read_string(src, entry.get("resourceClaimName"), f"{item_path}.resourceClaimName")
        template = read_string(
            src, entry.get("resourceClaimTemplateName"), f"{item_path}.resourceClaimTemplateName"
        )
        if not name:
            raise src.invalid(f"{item_path}.name", "is required")
        if bool(claim) == bool(template):
            raise src.invalid(
                item_path, "must set exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        if template:
            status_name = generated.get(name, "")
            refs.append(
                PodClaimRef(
                    name,
                    claim=status_name or "",
                    template=template,
                    not_needed=name in generated and status_name is None,
                )
            )
        else:
            refs.append(PodClaimRef(name, claim=claim))
    return tuple(refs)


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
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = read_object(src, required, path).get("nodeSelectorTerms")
    return tuple(
        SelectorTerm(
            match_expressions=_requirements(
                src, term.get("matchExpressions"), f"{term_path}.matchExpressions"
            ),
            match_fields=_requirements(src, term.get("matchFields"), f"{term_path}.matchFields"),
        )
        for term_path, term in read_objects(src, terms, f"{path}.nodeSelectorTerms")
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


def _annotation_int(text: str, *, minimum: int) -> int | None:
    if _DIGITS.fullmatch(text) is None or int(text) < minimum:
        return None
    return int(text)


def _is_object_name(text: str) -> bool:
    return len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text) is not None


@dataclass(slots=True)
class _PodSettings:
    """Group membership and `phalanx.io/*` settings of one pod, with what was wrong."""

    group: GroupRef | None = None
    min_member: int | None = None
    timeout_seconds: int | None = None
    placement: str = ""
    plan_node: str = ""
    gpu_memory_mib: int = 0
    problems: list[str] = field(default_factory=list)

    @classmethod
    def read(
        cls, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]
    ) -> _PodSettings:
        settings = cls(plan_node=annotations.get(PLAN_NODE_ANNOTATION, ""))
        settings._read_group(namespace, labels, annotations)
        settings.min_member = settings._number(annotations, MIN_MEMBER_ANNOTATION, minimum=1)
        settings.timeout_seconds = settings._number(
            annotations, SCHEDULE_TIMEOUT_ANNOTATION, minimum=1
        )
        settings.gpu_memory_mib = (
            settings._number(annotations, GPU_MEMORY_ANNOTATION, minimum=0) or 0
        )
        placement = annotations.get(PLACEMENT_ANNOTATION)
        if placement is not None:
            try:
                parse_placement(placement)
            except ValueError as error:
                settings.problems.append(f"annotation {PLACEMENT_ANNOTATION}: {error}")
            else:
                settings.placement = placement
        settings._check_group_settings(labels, annotations)
        return settings

    def _number(self, annotations: Mapping[str, str], key: str, *, minimum: int) -> int | None:
        text = annotations.get(key)
        if text is None:
            return None
        number = _annotation_int(text, minimum=minimum)
        if number is None:
            noun = "a positive integer" if minimum > 0 else "a non-negative integer"
            self.problems.append(f"annotation {key}: {quoted(text)} is not {noun}")
        return number

    def _read_group(
        self, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]
    ) -> None:
        # An empty label means "no group", as scheduler-plugins reads it.
        from_label = labels.get(POD_GROUP_LABEL, "")
        from_annotation = annotations.get(POD_GROUP_ANNOTATION)
        if from_annotation is None or (from_label and from_annotation == from_label):
            self.group = GroupRef(namespace, from_label) if from_label else None
        elif not _is_object_name(from_annotation):
            self.problems.append(
                f"annotation {POD_GROUP_ANNOTATION}: {quoted(from_annotation)} is not a valid "
                'PodGroup name (lower-case letters, digits, "-" and ".")'
            )
        elif from_label:
            self.problems.append(
                f"annotation {POD_GROUP_ANNOTATION}: {quoted(from_annotation)} names a different "
                f"group than label {POD_GROUP_LABEL}: {quoted(from_label)}"
            )
        else:
            self.group = GroupRef(namespace, from_annotation)

    def _check_group_settings(
        self, labels: Mapping[str, str], annotations: Mapping[str, str]
    ) -> None:
        """Settings that make no sense without the declarations that give them meaning."""
        annotation_only = POD_GROUP_ANNOTATION in annotations and not labels.get(POD_GROUP_LABEL)
        if annotation_only and self.group is not None and MIN_MEMBER_ANNOTATION not in annotations:
            self.problems.append(
                f"annotation {POD_GROUP_ANNOTATION}: {quoted(self.group.name)} needs annotation "
                f"{MIN_MEMBER_ANNOTATION} (there is no PodGroup object to give it)"
            )
        if POD_GROUP_ANNOTATION not in annotations and not labels.get(POD_GROUP_LABEL):
            for key in (MIN_MEMBER_ANNOTATION, SCHEDULE_TIMEOUT_ANNOTATION):
                if key in annotations:
                    self.problems.append(
                        f"annotation {key} needs annotation {POD_GROUP_ANNOTATION} "
                        f"or label {POD_GROUP_LABEL}"
                    )


def group_from_pod(pod: Pod) -> PodGroup | None:
    """The gang an annotation-only pod declares (`phalanx.io/pod-group` + `min-member`).

    None for pods in no group, for pods whose group is a PodGroup object (the label), and
    for pods whose declaration is incomplete (their `invalid` says why).
    """
    if pod.group is None or pod.min_member is None or pod.labels.get(POD_GROUP_LABEL):
        return None
    return PodGroup(
        namespace=pod.group.namespace,
        name=pod.group.name,
        min_member=pod.min_member,
        timeout_seconds=pod.timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
        placement=parse_placement(pod.placement) if pod.placement else None,
        from_crd=False,
    )


# --- Placement policies -----------------------------------------------------------------


def is_qualified_name(text: str) -> bool:
    """Kubernetes `IsQualifiedName`: a label key such as `topology.kubernetes.io/zone`."""
    prefix, slash, name = text.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


def parse_placement(text: str) -> Placement:
    """`phalanx.io/placement`: pack | same-node | spread | interconnect-local | domain:<key>."""
    kind, colon, domain_key = text.partition(":")
    if colon and kind == PolicyKind.DOMAIN.value:
        if not is_qualified_name(domain_key):
            raise ValueError(
                f"{quoted(text)} does not name a valid node label key after domain: "
                "(e.g. domain:topology.kubernetes.io/zone)"
            )
        return Placement(PolicyKind.DOMAIN, domain_key)
    if not colon and kind != PolicyKind.DOMAIN.value:
        try:
            return Placement(PolicyKind(kind))
        except ValueError:
            pass
    raise ValueError(f"{quoted(text)} is not a placement policy; use {_PLACEMENT_FORMS}")


# --- PodGroups --------------------------------------------------------------------------


def parse_pod_group(obj: JsonObject) -> PodGroup:
    """A scheduler-plugins `PodGroup` (scheduling.x-k8s.io/v1alpha1) with Phalanx's annotations."""
    src, metadata = read_metadata(POD_GROUP_KIND, obj, namespaced=True)
    namespace, name = namespace_and_name(src)
    spec = read_object(src, obj.get("spec"), "spec")
    min_member = read_integer(src, spec.get("minMember"), "spec.minMember")
    if min_member is None or min_member < 1:
        raise src.invalid("spec.minMember", f"must be a positive integer, not {min_member}")
    timeout = read_integer(src, spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds")
    if timeout is not None and timeout < 1:
        raise src.invalid(
            "spec.scheduleTimeoutSeconds", f"must be a positive integer, not {timeout}"
        )
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    placement: Placement | None = None
    if PLACEMENT_ANNOTATION in annotations:
        try:
            placement = parse_placement(annotations[PLACEMENT_ANNOTATION])
        except ValueError as error:
            raise src.invalid(
                key_path("metadata.annotations", PLACEMENT_ANNOTATION), str(error)
            ) from error
    return PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        timeout_seconds=DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout,
        placement=placement,
        plan_json=annotations.get(PLAN_ANNOTATION, ""),
        differentiable=parse_differentiable(annotations.get(DIFFERENTIABLE_ANNOTATION, "")),
        min_resources=to_resources(
            read_quantities(src, spec.get("minResources"), "spec.minResources")
        ),
        from_crd=True,
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
    )


def parse_differentiable(text: str) -> frozenset[str]:
    """`phalanx.io/differentiable`: comma-separated plan ids; blanks around and between ignored."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


# --- Any object -------------------------------------------------------------------------


def parse_object(obj: JsonObject) -> Node | Pod | PodGroup:
    """A Node, Pod or PodGroup, by its `kind` (and `apiVersion`), e.g. an item of a List."""
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if kind == "Node" and api_version in (None, "v1"):
        return parse_node(obj)
    if kind == "Pod" and api_version in (None, "v1"):
        return parse_pod(obj)
    if kind == POD_GROUP_KIND and api_version == POD_GROUP_API_VERSION:
        return parse_pod_group(obj)
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    found = " ".join(part for part in (api_version, kind) if isinstance(part, str))
    raise InvalidObjectError(
        kind if isinstance(kind, str) and kind else "object",
        name if isinstance(name, str) else "",
        "",
        f"unsupported kind {quoted(found)}: "
        f"expected v1 Node, v1 Pod or {POD_GROUP_API_VERSION} {POD_GROUP_KIND}",
    )
