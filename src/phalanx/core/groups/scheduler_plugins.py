"""The scheduler-plugins dialect: `scheduling.x-k8s.io/v1alpha1` PodGroups, as Kubeflow's
operators, KubeRay and the coscheduling plugin use them.

* A pod is a member when its label `scheduling.x-k8s.io/pod-group` names a PodGroup in
  its namespace; an empty label means no group (as scheduler-plugins reads it).
* The PodGroup gives `spec.minMember`, `spec.scheduleTimeoutSeconds` and
  `spec.minResources`, plus Phalanx's own annotations (see `phalanx.core.groups.common`).
* Status is scheduler-plugins' own: `phase`, `scheduled`, `running`, `succeeded`,
  `failed`, `scheduleStartTime` and one `PodGroupScheduled` condition, on the `/status`
  subresource.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from phalanx.core.groups.common import (
    ObjectSettings,
    Parsed,
    PodView,
    group_name_problem,
    is_deleting,
    read_identity,
    read_min_count,
    read_positive_int32,
)
from phalanx.core.groups.status import MESSAGE_LIMIT, GroupStatus, camel, rfc3339
from phalanx.core.model import DEFAULT_TIMEOUT_SECONDS, Claim, Dialect, GroupRef, PodGroup
from phalanx.core.rawdict import (
    JsonObject,
    read_object,
    read_quantities,
    read_string,
    read_string_map,
    to_resources,
)

GROUP: Final = "scheduling.x-k8s.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PodGroup"
RESOURCE: Final = "podgroups"
POD_GROUP_LABEL: Final = f"{GROUP}/pod-group"

CONDITION_TYPE: Final = "PodGroupScheduled"


def claim(pod: PodView) -> Claim | None:
    name = pod.labels.get(POD_GROUP_LABEL, "")
    if not name:
        return None
    # A legal label value may still be no PodGroup's name: say so, rather than wait for it.
    problem = group_name_problem(f"label {POD_GROUP_LABEL}", name)
    if problem:
        return Claim(Dialect.SCHEDULER_PLUGINS, None, (problem,))
    return Claim(Dialect.SCHEDULER_PLUGINS, GroupRef(pod.namespace, name))


def parse_pod_group(obj: JsonObject) -> PodGroup:
    """A `PodGroup` (scheduling.x-k8s.io/v1alpha1) with Phalanx's annotations."""
    src, metadata, namespace, name = read_identity(KIND, obj)
    spec = read_object(src, obj.get("spec"), "spec")
    min_member = read_min_count(src, spec.get("minMember"), "spec.minMember")
    timeout = read_positive_int32(
        src, spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds"
    )
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = ObjectSettings.read(src, annotations)
    return PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        timeout_seconds=DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout,
        timeout_declared=timeout is not None,
        placement=settings.placement,
        plan_json=settings.plan_json,
        differentiable=settings.differentiable,
        min_resources=to_resources(
            read_quantities(src, spec.get("minResources"), "spec.minResources")
        ),
        from_crd=True,
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        topology=settings.topology,
        deleting=is_deleting(metadata),
    )


def parse(obj: JsonObject) -> Parsed[PodGroup]:
    return Parsed(parse_pod_group(obj))


KINDS: Final = {(API_VERSION, KIND): parse}


def waiting_reason(ref: GroupRef) -> str:
    return f"waiting for PodGroup {ref.key} to exist (pods name it with a label)"


def build_status(
    status: GroupStatus, previous: JsonObject | None, now: float, version: str = VERSION
) -> dict[str, object]:
    """The `status` object to merge-patch onto `/status` (one shape: `version` is moot).

    `previous` is the status as last written; the condition's `lastTransitionTime` moves
    only when its status or reason changes.
    """
    scheduled = status.placed
    reason = camel(status.reason) if status.reason else status.phase.value
    old = _first_condition(previous)
    changed = old.get("status") != ("True" if scheduled else "False") or old.get("reason") != reason
    condition = {
        "type": CONDITION_TYPE,
        "status": "True" if scheduled else "False",
        "reason": reason,
        "message": status.message[:MESSAGE_LIMIT],
        "lastTransitionTime": rfc3339(now) if changed else old.get("lastTransitionTime"),
    }
    body: dict[str, object] = {
        "phase": status.phase.value,
        "scheduled": status.scheduled,
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
        "conditions": [condition],
    }
    if status.schedule_start_time is not None:
        body["scheduleStartTime"] = rfc3339(status.schedule_start_time)
    return body


def _first_condition(previous: JsonObject | None) -> Mapping[str, object]:
    conditions = (previous or {}).get("conditions")
    if isinstance(conditions, list) and conditions and isinstance(conditions[0], Mapping):
        return conditions[0]
    return {}
