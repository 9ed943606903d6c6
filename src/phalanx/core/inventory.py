"""Raw Kubernetes objects -> the model: the one place plain dicts are read.

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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final, cast

from phalanx.core.errors import InvalidObjectError, QuantityError, quoted
from phalanx.core.model import (
    AMD_GPU,
    ANNOTATION_PREFIX,
    CPU,
    DEFAULT_TIMEOUT_SECONDS,
    MEMORY,
    MIG_PREFIX,
    NVIDIA_GPU,
    PODS,
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
    is_gpu_resource,
)
from phalanx.core.quantity import int_value, milli_value, parse_quantity

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

DEFAULT_NAMESPACE: Final = "default"
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

_SIDECAR_RESTART_POLICY = "Always"
_HUGEPAGES_PREFIX = "hugepages-"
_RESIZE_PENDING = "PodResizePending"
_RESIZE_INFEASIBLE = "Infeasible"

JsonObject = Mapping[str, object]
_EMPTY: JsonObject = {}


# --- Reading plain dicts ----------------------------------------------------------------
# Typed accessors over untrusted input: each checks the JSON type at a path and raises
# InvalidObjectError naming that path. (TypedDicts would only promise what must be checked.)


@dataclass(frozen=True, slots=True)
class _Source:
    """The object being read, for error messages."""

    kind: str
    name: str

    def invalid(self, path: str, reason: str) -> InvalidObjectError:
        return InvalidObjectError(self.kind, self.name, path, reason)


def _key(path: str, key: str) -> str:
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _object(src: _Source, value: object, path: str) -> JsonObject:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise src.invalid(path, f"must be an object, not {_json_type(value)}")
    return cast("JsonObject", value)


def _objects(src: _Source, value: object, path: str) -> Iterable[tuple[str, JsonObject]]:
    """The entries of a list of objects, each with its own path."""
    if value is None:
        return
    if not isinstance(value, list | tuple):
        raise src.invalid(path, f"must be a list, not {_json_type(value)}")
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        yield item_path, _object(src, item, item_path)


def _string(src: _Source, value: object, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise src.invalid(path, f"must be a string, not {_json_type(value)}")
    return value


def _strings(src: _Source, value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise src.invalid(path, f"must be a list, not {_json_type(value)}")
    return tuple(_string(src, item, f"{path}[{i}]") for i, item in enumerate(value))


def _integer(src: _Source, value: object, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise src.invalid(path, f"must be an integer, not {_json_type(value)}")
    return value


def _boolean(src: _Source, value: object, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise src.invalid(path, f"must be a boolean, not {_json_type(value)}")
    return value


def _string_map(src: _Source, value: object, path: str) -> dict[str, str]:
    entries = _object(src, value, path)
    result: dict[str, str] = {}
    for key, item in entries.items():
        if not isinstance(key, str):
            raise src.invalid(path, f"key {quoted(key)} must be a string")
        result[key] = _string(src, item, _key(path, key))
    return result


def _metadata(kind: str, obj: JsonObject, *, namespaced: bool) -> tuple[_Source, JsonObject]:
    """The object's identity (for messages) and its `metadata`."""
    unnamed = _Source(kind, "")
    metadata = _object(unnamed, obj.get("metadata"), "metadata")
    name = _string(unnamed, metadata.get("name"), "metadata.name")
    if not name:
        raise unnamed.invalid("metadata.name", "is required")
    if namespaced:
        namespace = _string(unnamed, metadata.get("namespace"), "metadata.namespace")
        name = f"{namespace or DEFAULT_NAMESPACE}/{name}"
    return _Source(kind, name), metadata


def _namespace_and_name(src: _Source) -> tuple[str, str]:
    namespace, _, name = src.name.partition("/")
    return namespace, name


# --- Resources --------------------------------------------------------------------------


def _is_extended_resource(name: str) -> bool:
    """Kubernetes `IsExtendedResourceName`: a vendor-qualified name outside kubernetes.io."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _quantities(src: _Source, value: object, path: str) -> dict[str, Fraction]:
    """A `ResourceList` with exact values; negative or fractional-where-integer is an error."""
    result: dict[str, Fraction] = {}
    for name, raw in _object(src, value, path).items():
        where = _key(path, name)
        if not isinstance(raw, str | int | float):
            raise src.invalid(where, str(QuantityError(raw)))
        try:
            amount = parse_quantity(raw)
        except QuantityError as error:
            raise src.invalid(where, str(error)) from error
        if amount < 0:
            raise src.invalid(where, f"{quoted(raw)} is negative")
        if (_is_extended_resource(name) or name == PODS) and amount.denominator != 1:
            raise src.invalid(
                where, f"{quoted(raw)} is not a whole number ({name} is counted in units)"
            )
        result[name] = amount
    return result


def _as_stored(amounts: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """Values as the API server stores them: rounded up to a milli-unit.

    (`SetDefaults_ResourceList`: two containers asking "0.5m" CPU hold 1m each.)
    """
    return {name: Fraction(milli_value(amount), 1000) for name, amount in amounts.items()}


def _to_resources(amounts: Mapping[str, Fraction]) -> Resources:
    """Model units: CPU in millicores, everything else in whole units (bytes for memory)."""
    return Resources(
        {
            name: milli_value(amount) if name == CPU else int_value(amount)
            for name, amount in amounts.items()
        }
    )


def _add_into(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, Fraction(0)) + amount


def _max_into(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        if name not in total or amount > total[name]:
            total[name] = amount


# --- Nodes ------------------------------------------------------------------------------


def parse_node(obj: JsonObject) -> Node:
    """A `v1 Node` as the planner sees it: allocatable capacity, labels, taints, GPUs."""
    src, metadata = _metadata("Node", obj, namespaced=False)
    spec = _object(src, obj.get("spec"), "spec")
    status = _object(src, obj.get("status"), "status")
    if status.get("allocatable") is not None:
        amounts = _quantities(src, status.get("allocatable"), "status.allocatable")
    else:
        amounts = _quantities(src, status.get("capacity"), "status.capacity")
    allocatable = _to_resources(amounts)
    labels = _string_map(src, metadata.get("labels"), "metadata.labels")
    return Node(
        name=src.name,
        allocatable=allocatable,
        labels=labels,
        taints=tuple(
            _taint(src, taint, path)
            for path, taint in _objects(src, spec.get("taints"), "spec.taints")
        ),
        unschedulable=_boolean(src, spec.get("unschedulable"), "spec.unschedulable"),
        ready=_node_ready(src, status),
        gpu=_gpu_info(src, amounts.keys(), allocatable, labels),
        uid=_string(src, metadata.get("uid"), "metadata.uid"),
    )


def _taint_effect(src: _Source, value: object, path: str) -> TaintEffect:
    text = _string(src, value, path)
    try:
        return TaintEffect(text)
    except ValueError:
        raise src.invalid(
            path,
            f"{quoted(text)} is not a taint effect (NoSchedule, PreferNoSchedule or NoExecute)",
        ) from None


def _taint(src: _Source, taint: JsonObject, path: str) -> Taint:
    key = _string(src, taint.get("key"), f"{path}.key")
    if not key:
        raise src.invalid(f"{path}.key", "is required")
    return Taint(
        key=key,
        value=_string(src, taint.get("value"), f"{path}.value"),
        effect=_taint_effect(src, taint.get("effect"), f"{path}.effect"),
    )


def _node_ready(src: _Source, status: JsonObject) -> bool:
    for path, condition in _objects(src, status.get("conditions"), "status.conditions"):
        if _string(src, condition.get("type"), f"{path}.type") == "Ready":
            return _string(src, condition.get("status"), f"{path}.status") == "True"
    return False


def _label_int(
    src: _Source, labels: Mapping[str, str], key: str, *, minimum: int, default: int
) -> int:
    text = labels.get(key)
    if text is None:
        return default
    if _DIGITS.fullmatch(text) is None or int(text) < minimum:
        kind = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise src.invalid(_key("metadata.labels", key), f"{quoted(text)} is not {kind}")
    return int(text)


def _amd_vram_mib(src: _Source, labels: Mapping[str, str]) -> int:
    text = labels.get(AMD_VRAM_LABEL)
    if text is None:
        return 0
    match = _VRAM.fullmatch(text)
    if match is None:
        raise src.invalid(
            _key("metadata.labels", AMD_VRAM_LABEL),
            f'{quoted(text)} is not a memory size like "192G" '
            "(GiB, as the AMD node labeller writes it) or a number of MiB",
        )
    return int(match["amount"]) * _VRAM_UNIT_MIB[match["unit"]]


def _gpu_info(
    src: _Source, names: Iterable[str], allocatable: Resources, labels: Mapping[str, str]
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
    src, metadata = _metadata("Pod", obj, namespaced=True)
    namespace, name = _namespace_and_name(src)
    spec = _object(src, obj.get("spec"), "spec")
    status = _object(src, obj.get("status"), "status")
    labels = _string_map(src, metadata.get("labels"), "metadata.labels")
    annotations = _string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = _PodSettings.read(namespace, labels, annotations)
    return Pod(
        namespace=namespace,
        name=name,
        uid=_string(src, metadata.get("uid"), "metadata.uid"),
        requests=_pod_requests(src, spec, status),
        node_name=_string(src, spec.get("nodeName"), "spec.nodeName"),
        phase=_phase(src, status),
        scheduler_name=_string(src, spec.get("schedulerName"), "spec.schedulerName")
        or DEFAULT_SCHEDULER_NAME,
        labels=labels,
        tolerations=tuple(
            _toleration(src, toleration, path)
            for path, toleration in _objects(src, spec.get("tolerations"), "spec.tolerations")
        ),
        node_selector=_string_map(src, spec.get("nodeSelector"), "spec.nodeSelector"),
        required_affinity=_required_affinity(src, spec),
        group=settings.group,
        plan_node=settings.plan_node,
        gpu_memory_mib=settings.gpu_memory_mib,
        priority=_integer(src, spec.get("priority"), "spec.priority") or 0,
        deleting=metadata.get("deletionTimestamp") not in (None, ""),
        min_member=settings.min_member,
        timeout_seconds=settings.timeout_seconds,
        placement=settings.placement,
        invalid="; ".join(settings.problems),
    )


def _phase(src: _Source, status: JsonObject) -> PodPhase:
    text = _string(src, status.get("phase"), "status.phase")
    if not text:
        return PodPhase.PENDING
    try:
        return PodPhase(text)
    except ValueError:
        raise src.invalid("status.phase", f"{quoted(text)} is not a pod phase") from None


def _toleration(src: _Source, toleration: JsonObject, path: str) -> Toleration:
    operator = _string(src, toleration.get("operator"), f"{path}.operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise src.invalid(f"{path}.operator", f"{quoted(operator)} is not Equal or Exists")
    effect = toleration.get("effect")
    return Toleration(
        key=_string(src, toleration.get("key"), f"{path}.key"),
        operator=operator,
        value=_string(src, toleration.get("value"), f"{path}.value"),
        effect=_taint_effect(src, effect, f"{path}.effect") if effect not in (None, "") else None,
    )


def _required_affinity(src: _Source, spec: JsonObject) -> tuple[SelectorTerm, ...] | None:
    path = "spec.affinity"
    affinity = _object(src, spec.get("affinity"), path)
    path += ".nodeAffinity"
    node_affinity = _object(src, affinity.get("nodeAffinity"), path)
    path += ".requiredDuringSchedulingIgnoredDuringExecution"
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = _object(src, required, path).get("nodeSelectorTerms")
    return tuple(
        SelectorTerm(
            match_expressions=_requirements(
                src, term.get("matchExpressions"), f"{term_path}.matchExpressions"
            ),
            match_fields=_requirements(src, term.get("matchFields"), f"{term_path}.matchFields"),
        )
        for term_path, term in _objects(src, terms, f"{path}.nodeSelectorTerms")
    )


def _requirements(src: _Source, value: object, path: str) -> tuple[SelectorRequirement, ...]:
    result = []
    for item_path, requirement in _objects(src, value, path):
        operator = _string(src, requirement.get("operator"), f"{item_path}.operator")
        try:
            selector_operator = SelectorOperator(operator)
        except ValueError:
            raise src.invalid(
                f"{item_path}.operator",
                f"{quoted(operator)} is not In, NotIn, Exists, DoesNotExist, Gt or Lt",
            ) from None
        result.append(
            SelectorRequirement(
                key=_string(src, requirement.get("key"), f"{item_path}.key"),
                operator=selector_operator,
                values=_strings(src, requirement.get("values"), f"{item_path}.values"),
            )
        )
    return tuple(result)


# --- Pod requests, exactly as kube-scheduler counts them ---------------------------------
# component-helpers `resource.PodRequests`, called as kube-scheduler calls it, on the pod as
# the API server stores it: first `SetDefaults_Pod` on exact values (limits stand in for
# missing requests; pod-level resources are defaulted), then every value rounded up to a
# milli-unit. The aggregate is rounded to model units once, as kube-scheduler converts it.


@dataclass(frozen=True, slots=True)
class _Container:
    name: str
    requests: dict[str, Fraction]  # exact, after limits stood in for missing requests
    limits: dict[str, Fraction]  # exact
    runs_with_pod: bool  # a regular container or a sidecar (not a one-off init container)


def _container(src: _Source, container: JsonObject, path: str, *, init: bool) -> _Container:
    resources = _object(src, container.get("resources"), f"{path}.resources")
    requests = _quantities(src, resources.get("requests"), f"{path}.resources.requests")
    limits = _quantities(src, resources.get("limits"), f"{path}.resources.limits")
    restart_policy = _string(src, container.get("restartPolicy"), f"{path}.restartPolicy")
    return _Container(
        name=_string(src, container.get("name"), f"{path}.name"),
        requests={**limits, **requests},
        limits=limits,
        runs_with_pod=not init or restart_policy == _SIDECAR_RESTART_POLICY,
    )


def _aggregate(
    containers: Sequence[_Container],
    init_containers: Sequence[_Container],
    amounts: Callable[[_Container], Mapping[str, Fraction]],
) -> dict[str, Fraction]:
    """What the pod needs at its peak: regular containers and sidecars run together; each
    init container runs alone next to the sidecars started before it (KEP-753)."""
    total: dict[str, Fraction] = {}
    for container in containers:
        _add_into(total, amounts(container))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for container in init_containers:
        if container.runs_with_pod:
            # (Never a peak of its own: the total already holds every sidecar.)
            _add_into(total, amounts(container))
            _add_into(sidecars, amounts(container))
        else:
            alone = dict(amounts(container))
            _add_into(alone, sidecars)
            _max_into(init_peak, alone)
    _max_into(total, init_peak)
    return total


@dataclass(frozen=True, slots=True)
class _ResizeState:
    """What the kubelet reports for an in-place resized container (status.*ContainerStatuses)."""

    actuated: dict[str, Fraction]
    allocated: dict[str, Fraction]


def _resize_states(src: _Source, status: JsonObject) -> dict[str, _ResizeState]:
    states: dict[str, _ResizeState] = {}
    for list_name in ("containerStatuses", "initContainerStatuses"):
        for path, container_status in _objects(src, status.get(list_name), f"status.{list_name}"):
            resources = container_status.get("resources")
            if resources is None:
                continue  # no resize information: the spec stands
            name = _string(src, container_status.get("name"), f"{path}.name")
            actuated = _object(src, resources, f"{path}.resources").get("requests")
            allocated = container_status.get("allocatedResources")
            states[name] = _ResizeState(
                actuated=_as_stored(_quantities(src, actuated, f"{path}.resources.requests")),
                allocated=_as_stored(_quantities(src, allocated, f"{path}.allocatedResources")),
            )
    return states


def _resize_infeasible(src: _Source, status: JsonObject) -> bool:
    for path, condition in _objects(src, status.get("conditions"), "status.conditions"):
        if _string(src, condition.get("type"), f"{path}.type") == _RESIZE_PENDING:
            return _string(src, condition.get("reason"), f"{path}.reason") == _RESIZE_INFEASIBLE
    return False


def _held_requests(
    container: _Container, states: Mapping[str, _ResizeState], *, infeasible: bool
) -> dict[str, Fraction]:
    """A container's stored requests, or during an in-place resize the most it may hold."""
    requests = _as_stored(container.requests)
    state = states.get(container.name) if container.runs_with_pod else None
    if state is None:
        return requests
    held: dict[str, Fraction] = {}
    for amounts in (
        (state.actuated, state.allocated)
        if infeasible
        else (requests, state.actuated, state.allocated)
    ):
        _max_into(held, amounts)
    return held


def _is_pod_level_resource(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith(_HUGEPAGES_PREFIX)


def _pod_level_requests(
    src: _Source,
    spec: JsonObject,
    containers: Sequence[_Container],
    init_containers: Sequence[_Container],
) -> dict[str, Fraction]:
    """`spec.resources` requests (PodLevelResources, on by default since 1.34), after the
    API defaulting that fills them in from pod-level limits and the containers."""
    if spec.get("resources") is None:
        return {}
    pod_resources = _object(src, spec.get("resources"), "spec.resources")
    requests = _quantities(src, pod_resources.get("requests"), "spec.resources.requests")
    limits = _quantities(src, pod_resources.get("limits"), "spec.resources.limits")
    if requests or limits:  # defaultHugePagePodLimits
        for name, amount in _aggregate(containers, init_containers, lambda c: c.limits).items():
            if name.startswith(_HUGEPAGES_PREFIX) and name not in requests:
                limits.setdefault(name, amount)
    if limits:  # defaultPodRequests: overcommittable ones from the containers, else the limit
        for name, amount in _aggregate(containers, init_containers, lambda c: c.requests).items():
            if name in (CPU, MEMORY):
                requests.setdefault(name, amount)
        for name, amount in limits.items():
            if _is_pod_level_resource(name):
                requests.setdefault(name, amount)
    return {
        name: amount
        for name, amount in _as_stored(requests).items()
        if _is_pod_level_resource(name)
    }


def _pod_requests(src: _Source, spec: JsonObject, status: JsonObject) -> Resources:
    containers = [
        _container(src, container, path, init=False)
        for path, container in _objects(src, spec.get("containers"), "spec.containers")
    ]
    init_containers = [
        _container(src, container, path, init=True)
        for path, container in _objects(src, spec.get("initContainers"), "spec.initContainers")
    ]
    states = _resize_states(src, status)
    infeasible = _resize_infeasible(src, status)
    total = _aggregate(
        containers, init_containers, lambda c: _held_requests(c, states, infeasible=infeasible)
    )
    total.update(_pod_level_requests(src, spec, containers, init_containers))
    _add_into(total, _as_stored(_quantities(src, spec.get("overhead"), "spec.overhead")))
    # kube-scheduler counts every pod against the node's `pods` capacity, once.
    total[PODS] = Fraction(1)
    return _to_resources(total)


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
    src, metadata = _metadata(POD_GROUP_KIND, obj, namespaced=True)
    namespace, name = _namespace_and_name(src)
    spec = _object(src, obj.get("spec"), "spec")
    min_member = _integer(src, spec.get("minMember"), "spec.minMember")
    if min_member is None or min_member < 1:
        raise src.invalid("spec.minMember", f"must be a positive integer, not {min_member}")
    timeout = _integer(src, spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds")
    if timeout is not None and timeout < 1:
        raise src.invalid(
            "spec.scheduleTimeoutSeconds", f"must be a positive integer, not {timeout}"
        )
    annotations = _string_map(src, metadata.get("annotations"), "metadata.annotations")
    placement: Placement | None = None
    if PLACEMENT_ANNOTATION in annotations:
        try:
            placement = parse_placement(annotations[PLACEMENT_ANNOTATION])
        except ValueError as error:
            raise src.invalid(
                _key("metadata.annotations", PLACEMENT_ANNOTATION), str(error)
            ) from error
    return PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        timeout_seconds=DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout,
        placement=placement,
        plan_json=annotations.get(PLAN_ANNOTATION, ""),
        differentiable=parse_differentiable(annotations.get(DIFFERENTIABLE_ANNOTATION, "")),
        min_resources=_to_resources(
            _quantities(src, spec.get("minResources"), "spec.minResources")
        ),
        from_crd=True,
        uid=_string(src, metadata.get("uid"), "metadata.uid"),
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
