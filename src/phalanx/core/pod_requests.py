"""Pod requests exactly as kube-scheduler counts them.

component-helpers `resource.PodRequests`, called as kube-scheduler calls it, on the pod as
the API server stores it: first `SetDefaults_Pod` on exact values (limits stand in for
missing requests; pod-level resources are defaulted), then every value rounded up to a
milli-unit. The aggregate is rounded to model units once, as kube-scheduler converts it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from phalanx.core.model import CPU, MEMORY, PODS, Resources
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    add_into,
    as_stored,
    max_into,
    read_object,
    read_objects,
    read_quantities,
    read_string,
    to_resources,
)

_SIDECAR_RESTART_POLICY = "Always"
_HUGEPAGES_PREFIX = "hugepages-"
_RESIZE_PENDING = "PodResizePending"
_RESIZE_INFEASIBLE = "Infeasible"


@dataclass(frozen=True, slots=True)
class _Container:
    name: str
    requests: dict[str, Fraction]  # exact, after limits stood in for missing requests
    limits: dict[str, Fraction]  # exact
    runs_with_pod: bool  # a regular container or a sidecar (not a one-off init container)


def _container(src: Source, container: JsonObject, path: str, *, init: bool) -> _Container:
    resources = read_object(src, container.get("resources"), f"{path}.resources")
    requests = read_quantities(src, resources.get("requests"), f"{path}.resources.requests")
    limits = read_quantities(src, resources.get("limits"), f"{path}.resources.limits")
    restart_policy = read_string(src, container.get("restartPolicy"), f"{path}.restartPolicy")
    return _Container(
        name=read_string(src, container.get("name"), f"{path}.name"),
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
        add_into(total, amounts(container))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for container in init_containers:
        if container.runs_with_pod:
            # (Never a peak of its own: the total already holds every sidecar.)
            add_into(total, amounts(container))
            add_into(sidecars, amounts(container))
        else:
            alone = dict(amounts(container))
            add_into(alone, sidecars)
            max_into(init_peak, alone)
    max_into(total, init_peak)
    return total


@dataclass(frozen=True, slots=True)
class _ResizeState:
    """What the kubelet reports for an in-place resized container (status.*ContainerStatuses)."""

    actuated: dict[str, Fraction]
    allocated: dict[str, Fraction]


def _resize_states(src: Source, status: JsonObject) -> dict[str, _ResizeState]:
    states: dict[str, _ResizeState] = {}
    for list_name in ("containerStatuses", "initContainerStatuses"):
        for path, container_status in read_objects(
            src, status.get(list_name), f"status.{list_name}"
        ):
            resources = container_status.get("resources")
            if resources is None:
                continue  # no resize information: the spec stands
            name = read_string(src, container_status.get("name"), f"{path}.name")
            actuated = read_object(src, resources, f"{path}.resources").get("requests")
            allocated = container_status.get("allocatedResources")
            states[name] = _ResizeState(
                actuated=as_stored(read_quantities(src, actuated, f"{path}.resources.requests")),
                allocated=as_stored(read_quantities(src, allocated, f"{path}.allocatedResources")),
            )
    return states


def _resize_infeasible(src: Source, status: JsonObject) -> bool:
    for path, condition in read_objects(src, status.get("conditions"), "status.conditions"):
        if read_string(src, condition.get("type"), f"{path}.type") == _RESIZE_PENDING:
            return read_string(src, condition.get("reason"), f"{path}.reason") == _RESIZE_INFEASIBLE
    return False


def _held_requests(
    container: _Container, states: Mapping[str, _ResizeState], *, infeasible: bool
) -> dict[str, Fraction]:
    """A container's stored requests, or during an in-place resize the most it may hold."""
    requests = as_stored(container.requests)
    state = states.get(container.name) if container.runs_with_pod else None
    if state is None:
        return requests
    held: dict[str, Fraction] = {}
    for amounts in (
        (state.actuated, state.allocated)
        if infeasible
        else (requests, state.actuated, state.allocated)
    ):
        max_into(held, amounts)
    return held


def _is_pod_level_resource(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith(_HUGEPAGES_PREFIX)


def _pod_level_requests(
    src: Source,
    spec: JsonObject,
    containers: Sequence[_Container],
    init_containers: Sequence[_Container],
) -> dict[str, Fraction]:
    """`spec.resources` requests (PodLevelResources, on by default since 1.34), after the
    API defaulting that fills them in from pod-level limits and the containers."""
    if spec.get("resources") is None:
        return {}
    pod_resources = read_object(src, spec.get("resources"), "spec.resources")
    requests = read_quantities(src, pod_resources.get("requests"), "spec.resources.requests")
    limits = read_quantities(src, pod_resources.get("limits"), "spec.resources.limits")
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
        name: amount for name, amount in as_stored(requests).items() if _is_pod_level_resource(name)
    }


def pod_requests(src: Source, spec: JsonObject, status: JsonObject) -> Resources:
    containers = [
        _container(src, container, path, init=False)
        for path, container in read_objects(src, spec.get("containers"), "spec.containers")
    ]
    init_containers = [
        _container(src, container, path, init=True)
        for path, container in read_objects(src, spec.get("initContainers"), "spec.initContainers")
    ]
    states = _resize_states(src, status)
    infeasible = _resize_infeasible(src, status)
    total = _aggregate(
        containers, init_containers, lambda c: _held_requests(c, states, infeasible=infeasible)
    )
    total.update(_pod_level_requests(src, spec, containers, init_containers))
    add_into(total, as_stored(read_quantities(src, spec.get("overhead"), "spec.overhead")))
    # kube-scheduler counts every pod against the node's `pods` capacity, once.
    total[PODS] = Fraction(1)
    return to_resources(total)
