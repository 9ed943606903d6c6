"""Apache YuniKorn's task groups: an application's gang, declared on its pods, no object.

YuniKorn users (Spark, Flink, Ray, plain Jobs) write, on the pods:

* the application id: label `yunikorn.apache.org/app-id`, else annotation
  `yunikorn.apache.org/app-id`, else label `applicationId`, else label `spark-app-selector`
  (the k8shim's order);
* annotation `yunikorn.apache.org/task-group-name: <group>`: the pod's task group. Only pods
  with it are members: YuniKorn schedules the application's other pods normally, outside
  the gang, and so does Phalanx (one by one);
* annotation `yunikorn.apache.org/task-groups`: the application's whole definition, a JSON
  list of `{name, minMember, minResource, nodeSelector, tolerations, affinity,
  topologySpreadConstraints}`. YuniKorn reads it from the application's first pod (or
  every pod); Phalanx from any member carrying it, and members carrying it must agree;
* optionally `yunikorn.apache.org/schedulingPolicyParameters: "placeholderTimeoutInSeconds=60
  gangSchedulingStyle=Hard"` (space-separated).

**The gang** is `GroupRef(namespace, <application id>, Dialect.YUNIKORN)`, key
`yunikorn:ns/<application id>`. Its quorum is each task group's `minMember` of the members
naming that group, as Volcano's `spec.minTaskMember` (`PodGroup.min_task_member`); its
size is their sum. Only `name` and `minMember` are read: `minResource` and the placement
fields describe YuniKorn's placeholder pods, and Phalanx has none (its reservation is their
part); the real pods' own requests and constraints are planned.

`placeholderTimeoutInSeconds` is the gang's schedule timeout (as
`phalanx.io/schedule-timeout-seconds`, which wins when a member sets both);
`gangSchedulingStyle` is checked (Soft or Hard) but changes nothing: Phalanx never falls back
to scheduling a gang's pods one by one.

Malformed declarations never raise: they set the pod's `invalid`, naming the annotation, as
the Kueue dialect does.

Without placeholders a member cannot start before its gang is whole, so a member that
creates the others (Spark's driver, its executors) cannot be in their gang: the docs say to
leave it out (docs/gang-dialects.md, "YuniKorn's task groups").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.groups.annotations import declared_gang
from phalanx.core.groups.common import (
    INT32_MAX,
    PodView,
    annotation_int32,
    group_name_problem,
)
from phalanx.core.model import Claim, Dialect, GroupRef, Pod, PodGroup, TaskGroupMinima

DOMAIN: Final = "yunikorn.apache.org/"
APP_ID_KEY: Final = DOMAIN + "app-id"  # a label, or else an annotation, of this key
LEGACY_APP_ID_LABEL: Final = "applicationId"
SPARK_APP_ID_LABEL: Final = "spark-app-selector"
TASK_GROUP_NAME_ANNOTATION: Final = DOMAIN + "task-group-name"
TASK_GROUPS_ANNOTATION: Final = DOMAIN + "task-groups"
POLICY_ANNOTATION: Final = DOMAIN + "schedulingPolicyParameters"
TIMEOUT_PARAMETER: Final = "placeholderTimeoutInSeconds"
STYLE_PARAMETER: Final = "gangSchedulingStyle"
STYLES: Final = ("Soft", "Hard")

# (name, minMember) of each task group, sorted by name: `PodGroup.min_task_member`'s form.
TaskGroups = tuple[tuple[str, int], ...]


def application_id(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[str, str] | None:
    """(where, id): the pod's application id and the key it was read from, in the k8shim's
    order; None when the pod names none."""
    for where, value in (
        (f"label {APP_ID_KEY}", labels.get(APP_ID_KEY)),
        (f"annotation {APP_ID_KEY}", annotations.get(APP_ID_KEY)),
        (f"label {LEGACY_APP_ID_LABEL}", labels.get(LEGACY_APP_ID_LABEL)),
        (f"label {SPARK_APP_ID_LABEL}", labels.get(SPARK_APP_ID_LABEL)),
    ):
        if value:
            return where, value
    return None


def task_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The task group a pod is in (its `Pod.task`), from its annotation; "" for none."""
    return annotations.get(TASK_GROUP_NAME_ANNOTATION, "")


def claim(pod: PodView) -> Claim | None:
    """The pod's application when it names a task group; None when it names none (YuniKorn
    schedules such a pod outside the gang)."""
    group = pod.annotations.get(TASK_GROUP_NAME_ANNOTATION, "")
    if not group:
        return None
    found = application_id(pod.labels, pod.annotations)
    if found is None:
        problem = (
            f"annotation {TASK_GROUP_NAME_ANNOTATION} needs an application id: label "
            f"{APP_ID_KEY}, annotation {APP_ID_KEY}, label {LEGACY_APP_ID_LABEL} or label "
            f"{SPARK_APP_ID_LABEL}"
        )
        return Claim(Dialect.YUNIKORN, None, (problem,))
    where, app = found
    problem = group_name_problem(where, app, "YuniKorn application")
    if problem:
        return Claim(Dialect.YUNIKORN, None, (problem,))
    problems = []
    groups = task_groups(pod.annotations)
    if isinstance(groups, str):
        problems.append(groups)
    elif groups is not None and group not in (name for name, _ in groups):
        problems.append(_undefined(group, groups))
    policy = policy_problem(pod.annotations)
    if policy:
        problems.append(policy)
    return Claim(Dialect.YUNIKORN, GroupRef(pod.namespace, app, Dialect.YUNIKORN), tuple(problems))


def task_groups(annotations: Mapping[str, str]) -> TaskGroups | str | None:
    """The task groups a pod declares, or what is wrong with them; None when it declares
    none."""
    text = annotations.get(TASK_GROUPS_ANNOTATION)
    if text is None:
        return None
    where = f"annotation {TASK_GROUPS_ANNOTATION}"
    try:
        entries = json.loads(text)
    except ValueError as error:
        return f"{where}: is not JSON ({error})"
    except RecursionError:  # "[[[[..." fits an annotation many times over
        return f"{where}: is not JSON (nested too deeply)"
    if not isinstance(entries, list) or not entries:
        return f"{where}: is not a non-empty JSON list of task groups"
    groups: dict[str, int] = {}
    for index, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            return f"{where}: entry {index} has no name"
        if name in groups:
            return f"{where}: task group {quoted(name)} is defined twice"
        minimum = _min_member(entry.get("minMember"))
        if isinstance(minimum, str):
            return f"{where}: task group {quoted(name)}: minMember {minimum}"
        groups[name] = minimum
    return tuple(sorted(groups.items()))


def _min_member(value: object) -> int | str:
    """A task group's `minMember` (an int32 in YuniKorn's API; 0 or absent is refused, as
    the k8shim refuses it), or what is wrong with it."""
    if value is None:
        return "is missing (a positive integer)"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be a positive integer, not {quoted(value)}"
    if value < 1:
        return f"must be a positive integer, not {value}"
    if value > INT32_MAX:
        return f"must be at most {INT32_MAX} (an int32), not {value}"
    return value


def declared_size(annotations: Mapping[str, str]) -> int | str:
    """The gang's size a member declares (the sum of its task groups' minima), or why it
    declares none (a member may carry no definition: another member's is read)."""
    groups = task_groups(annotations)
    if isinstance(groups, str):
        return groups
    if groups is None:
        return f"no annotation {TASK_GROUPS_ANNOTATION}"
    return sum(minimum for _, minimum in groups)


def declared_task_groups(annotations: Mapping[str, str]) -> TaskGroups | None:
    """The task groups a member declares; None when it declares none or they are malformed
    (its `invalid` says why)."""
    groups = task_groups(annotations)
    return groups if isinstance(groups, tuple) else None


def _parameters(annotations: Mapping[str, str]) -> dict[str, str]:
    text = annotations.get(POLICY_ANNOTATION, "")
    return dict(part.partition("=")[::2] for part in text.split())


def policy_problem(annotations: Mapping[str, str]) -> str:
    """What is wrong with the scheduling policy parameters ("" when nothing). Parameters
    other than the two read are YuniKorn's own and ignored."""
    parameters = _parameters(annotations)
    where = f"annotation {POLICY_ANNOTATION}"
    if TIMEOUT_PARAMETER in parameters:
        read = annotation_int32(parameters[TIMEOUT_PARAMETER])
        if isinstance(read, str):
            return f"{where}: {TIMEOUT_PARAMETER}: {read}"
    style = parameters.get(STYLE_PARAMETER)
    if style is not None and style not in STYLES:
        return f"{where}: {STYLE_PARAMETER}: {quoted(style)} is not Soft or Hard"
    return ""


def placeholder_timeout(annotations: Mapping[str, str]) -> int | None:
    """`placeholderTimeoutInSeconds`, the gang's schedule timeout; None when absent or
    malformed (`policy_problem` says why)."""
    text = _parameters(annotations).get(TIMEOUT_PARAMETER)
    read = annotation_int32(text) if text is not None else None
    return read if isinstance(read, int) else None


def gang_from_members(
    ref: GroupRef, members: Iterable[Pod], *, default_timeout: int
) -> PodGroup | str:
    """The gang the members declare together, or why they cannot: the members carrying a
    definition must agree on it, and every member's task group must be in it. A string
    starting with "waiting" means no member carries the definition yet (YuniKorn reads it
    from the application's first pod, which may come later)."""
    pods = list(members)
    declared = [(p.name, p.task_groups) for p in pods if p.task_groups is not None]
    differing = next((d for d in declared if d[1] != declared[0][1]), None)
    if differing is not None:
        (first, theirs), (other, others) = declared[0], differing
        return (
            f"members of gang {ref.key} disagree on annotation {TASK_GROUPS_ANNOTATION}: pod "
            f"{first} declares {_listed(theirs)}, pod {other} {_listed(others)}"
        )
    gang = declared_gang(ref, pods, TASK_GROUPS_ANNOTATION, default_timeout=default_timeout)
    if isinstance(gang, str):
        return gang
    if gang is None or not declared:
        return (
            f"waiting for a member of gang {ref.key} with annotation {TASK_GROUPS_ANNOTATION} "
            "(the application's task groups)"
        )
    groups = declared[0][1]
    names = {name for name, _ in groups}
    stray = next((p for p in pods if p.task not in names), None)
    if stray is not None:
        return f"gang {ref.key}: pod {stray.name}: {_undefined(stray.task, groups)}"
    return replace(gang, min_task_member=TaskGroupMinima(groups))


def _undefined(group: str, groups: TaskGroups) -> str:
    return (
        f"annotation {TASK_GROUP_NAME_ANNOTATION}: {quoted(group)} is not a task group of "
        f"annotation {TASK_GROUPS_ANNOTATION} ({_listed(groups)})"
    )


def _listed(groups: TaskGroups) -> str:
    return ", ".join(f"{name}: {minimum}" for name, minimum in groups)
