"""The Volcano dialect: `scheduling.volcano.sh/v1beta1` PodGroups, as Volcano jobs,
Kubeflow's operators in Volcano mode, LeaderWorkerSet and KubeRay create them.

* A pod names its PodGroup with annotation `scheduling.k8s.io/group-name` (the key the
  Volcano scheduler reads); Volcano's controllers also write
  `scheduling.volcano.sh/group-name`, read when the first is absent. The two naming
  different groups is an error. Key `volcano:ns/name`.
* The PodGroup gives `spec.minMember` and `spec.minResources`;
  `spec.networkTopology` becomes a tier constraint, searched from tier 1 upward as
  Volcano searches its HyperNodes: `hard` requires `highestTierAllowed` (default 1) and
  prefers tier 1, `soft` prefers tier 1 and may spread past every tier (Volcano reads
  `highestTierAllowed` in hard mode only). Phalanx has no queues: a `spec.queue` other than
  "default" is ignored and said once (a warning).
* `spec.minTaskMember` (task -> minimum) is enforced as Volcano's gang plugin does: a
  quorum holds at least each task's minimum of its members, else nobody is placed. A pod's
  task is its annotation `volcano.sh/task-spec` (else the label of that key, as Volcano
  reads it); a pod naming none counts toward `minMember` only. A minimum of 0 asks for
  nothing. Minima summing to more than `minMember` are ignored, as Volcano ignores them
  (its task checks are skipped then), and said once (a warning).
* Status, as the Volcano scheduler writes it: `phase`, `running`, `succeeded`, `failed`
  and the conditions `Unschedulable` / `Scheduled`. The phase leaves `Pending` at once
  (`Inqueue`: Phalanx admits every gang), because Volcano's job controller creates a
  job's pods only once its PodGroup has left `Pending`. Volcano's CRD has no status
  subresource: the patch goes to the object itself (see `discovery`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.groups.common import (
    INT32_MAX,
    ObjectSettings,
    Parsed,
    PodView,
    group_name_problem,
    is_deleting,
    read_identity,
    read_min_count,
    with_subgroups,
)
from phalanx.core.groups.status import (
    MESSAGE_LIMIT,
    OUTCOME_UNFIT,
    OUTCOME_WAITING,
    GroupPhase,
    GroupStatus,
    camel,
    conditions_of,
    rfc3339,
    set_condition,
)
from phalanx.core.model import (
    Claim,
    Dialect,
    GroupRef,
    PodGroup,
    SelectorOperator,
    SelectorRequirement,
    SubGroupPolicy,
    TopologyConstraint,
)
from phalanx.core.names import is_qualified_name
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    key_path,
    read_integer,
    read_object,
    read_objects,
    read_quantities,
    read_string,
    read_string_map,
    read_strings,
    to_resources,
)

GROUP: Final = "scheduling.volcano.sh"
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PodGroup"
RESOURCE: Final = "podgroups"
GROUP_NAME_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_GROUP_NAME_ANNOTATION: Final = f"{GROUP}/group-name"
# Which task of its Volcano job a pod is (an annotation; Volcano's job controller also
# writes it as a label, which the scheduler reads when the annotation is absent).
TASK_SPEC_KEY: Final = "volcano.sh/task-spec"
DEFAULT_QUEUE: Final = "default"

# Volcano's phases (scheduling.volcano.sh/v1beta1 PodGroupPhase).
PENDING: Final = "Pending"
INQUEUE: Final = "Inqueue"
RUNNING: Final = "Running"
UNKNOWN: Final = "Unknown"
COMPLETED: Final = "Completed"  # Volcano: all its pods finished; Phalanx: minMember succeeded
# Volcano's condition types and the reasons its gang plugin gives.
UNSCHEDULABLE: Final = "Unschedulable"
SCHEDULED: Final = "Scheduled"
NOT_ENOUGH_TASKS: Final = "NotEnoughTasks"
NOT_ENOUGH_RESOURCES: Final = "NotEnoughResources"

_PHASES: Final = {
    GroupPhase.PENDING: INQUEUE,
    GroupPhase.PRE_SCHEDULING: INQUEUE,
    GroupPhase.SCHEDULING: INQUEUE,
    GroupPhase.SCHEDULED: RUNNING,  # Volcano counts bound members as allocated
    GroupPhase.RUNNING: RUNNING,
    GroupPhase.FINISHED: COMPLETED,
    GroupPhase.FAILED: UNKNOWN,
}


def claim(pod: PodView) -> Claim | None:
    name = pod.annotations.get(GROUP_NAME_ANNOTATION, "")
    other = pod.annotations.get(VOLCANO_GROUP_NAME_ANNOTATION, "")
    key = GROUP_NAME_ANNOTATION if name else VOLCANO_GROUP_NAME_ANNOTATION
    name = name or other
    if not name:
        return None
    if other and other != name:
        problem = (
            f"annotation {VOLCANO_GROUP_NAME_ANNOTATION}: {quoted(other)} names a different "
            f"group than annotation {GROUP_NAME_ANNOTATION}: {quoted(name)}"
        )
        return Claim(Dialect.VOLCANO, None, (problem,))
    problem = group_name_problem(f"annotation {key}", name)
    if problem:
        return Claim(Dialect.VOLCANO, None, (problem,))
    return Claim(Dialect.VOLCANO, GroupRef(pod.namespace, name, Dialect.VOLCANO))


def parse_pod_group(obj: JsonObject) -> Parsed[PodGroup]:
    src, metadata, namespace, name = read_identity(KIND, obj)
    spec = read_object(src, obj.get("spec"), "spec")
    min_member = read_min_count(src, spec.get("minMember"), "spec.minMember")
    warnings = []
    queue = read_string(src, spec.get("queue"), "spec.queue")
    if queue and queue != DEFAULT_QUEUE:
        warnings.append(
            f"spec.queue: {quoted(queue)} is ignored: Phalanx has no queues "
            "(the gang is admitted as soon as it fits)"
        )
    min_task_member = _min_task_member(src, spec)
    total = sum(minimum for _, minimum in min_task_member)
    if total > min_member:
        warnings.append(
            f"spec.minTaskMember is not enforced: its minima sum to {total}, more than "
            f"spec.minMember ({min_member}), and Volcano then skips its task checks too"
        )
        min_task_member = ()
    policies = _sub_group_policies(src, spec, warnings)
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = ObjectSettings.read(src, annotations, timeout=True)
    topology = settings.topology_with(
        src, _network_topology(src, spec, "spec.networkTopology"), "spec.networkTopology"
    )
    # Every policy, in order, even one of no level: a pod is in the first that picks it.
    if any(p.required or p.preferred for p in policies):
        topology = with_subgroups(src, topology, policies, "spec.subGroupPolicy", KIND)
    group = PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        **settings.group_fields(),
        min_resources=to_resources(
            read_quantities(src, spec.get("minResources"), "spec.minResources")
        ),
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        dialect=Dialect.VOLCANO,
        topology=topology,
        min_task_member=min_task_member,
        deleting=is_deleting(metadata),
    )
    return Parsed(group, tuple(warnings))


def _min_task_member(src: Source, spec: JsonObject) -> tuple[tuple[str, int], ...]:
    """`spec.minTaskMember`: (task, minimum) pairs sorted by task, without the zeros (they
    ask for nothing). A `map[string]int32` in Volcano's API: a negative or out-of-range
    minimum, or an empty task name (no pod's task, yet Volcano would count the pods
    naming none against it), is refused naming the entry."""
    path = "spec.minTaskMember"
    minima = []
    for task, value in read_object(src, spec.get("minTaskMember"), path).items():
        where = key_path(path, str(task))
        if not task:
            raise src.invalid(where, "a task name must not be empty")
        minimum = read_integer(src, value, where) or 0
        if minimum < 0:
            raise src.invalid(where, f"must be a non-negative integer, not {minimum}")
        if minimum > INT32_MAX:
            raise src.invalid(where, f"must be at most {INT32_MAX} (an int32), not {minimum}")
        if minimum:
            minima.append((str(task), minimum))
    return tuple(sorted(minima))


def task_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The Volcano task a pod belongs to, as Volcano's scheduler reads it; "" for none."""
    return annotations.get(TASK_SPEC_KEY) or labels.get(TASK_SPEC_KEY, "")


KINDS: Final = {(API_VERSION, KIND): parse_pod_group}


NARROWEST_TIER: Final = "tier:1"


def _sub_group_policies(
    src: Source, spec: JsonObject, warnings: list[str]
) -> tuple[SubGroupPolicy, ...]:
    """`spec.subGroupPolicy` as far as placement goes (`SubGroupPolicy`), validated as
    Volcano's API does; what Phalanx does not enforce (a subgroup's size and
    `minSubGroups`) is added to `warnings`, as is a policy that can group no pod."""
    path = "spec.subGroupPolicy"
    policies: list[SubGroupPolicy] = []
    unenforced: list[str] = []
    for where, policy in read_objects(src, spec.get("subGroupPolicy"), path):
        name = read_string(src, policy.get("name"), f"{where}.name")
        if not name:
            raise src.invalid(f"{where}.name", "a subgroup policy needs a name")
        if any(p.name == name for p in policies):
            raise src.invalid(f"{where}.name", f"{quoted(name)} names two subgroup policies")
        for field, least in (("subGroupSize", 1), ("minSubGroups", 0)):
            value = read_integer(src, policy.get(field), f"{where}.{field}")
            if value is not None and not least <= value <= INT32_MAX:
                raise src.invalid(
                    f"{where}.{field}", f"must be an integer from {least} to {INT32_MAX}"
                )
            if field == "minSubGroups" and value:
                unenforced.append(f"{where}.minSubGroups ({value})")
        keys = read_strings(src, policy.get("matchLabelKeys"), f"{where}.matchLabelKeys")
        for i, key in enumerate(keys):
            if not is_qualified_name(key):
                raise src.invalid(f"{where}.matchLabelKeys[{i}]", f"{quoted(key)} is no label key")
        if not keys:
            warnings.append(
                f"{where} ({quoted(name)}) has no matchLabelKeys: Volcano groups no pod by it, "
                "so neither does Phalanx"
            )
        labels, expressions = _label_selector(src, policy.get("labelSelector"), where)
        topology = _network_topology(src, policy, f"{where}.networkTopology")
        policies.append(
            SubGroupPolicy(
                name,
                match_labels=labels,
                match_expressions=expressions,
                keys=keys,
                required=topology.required if topology else "",
                preferred=topology.preferred if topology else "",
            )
        )
    if unenforced:
        warnings.append(
            f"{', '.join(unenforced)} not enforced: the gang's quorum is spec.minMember and "
            "spec.minTaskMember (each subgroup's network topology is)"
        )
    return tuple(policies)


def _label_selector(
    src: Source, value: object, where: str
) -> tuple[tuple[tuple[str, str], ...], tuple[SelectorRequirement, ...]]:
    """A policy's `labelSelector` (a `metav1.LabelSelector`): its `matchLabels` and its
    `matchExpressions` (In and NotIn with values, Exists and DoesNotExist without)."""
    path = f"{where}.labelSelector"
    selector = read_object(src, value, path)
    labels = read_string_map(src, selector.get("matchLabels"), f"{path}.matchLabels")
    expressions = []
    for at, expression in read_objects(
        src, selector.get("matchExpressions"), f"{path}.matchExpressions"
    ):
        key = read_string(src, expression.get("key"), f"{at}.key")
        if not is_qualified_name(key):
            raise src.invalid(f"{at}.key", f"{quoted(key)} is no label key")
        text = read_string(src, expression.get("operator"), f"{at}.operator")
        if text not in _SELECTOR_OPERATORS:
            raise src.invalid(
                f"{at}.operator", f"{quoted(text)} is not In, NotIn, Exists or DoesNotExist"
            )
        operator = SelectorOperator(text)
        values = read_strings(src, expression.get("values"), f"{at}.values")
        listed = operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if listed != bool(values):
            said = "needs values" if listed else "takes no values"
            raise src.invalid(f"{at}.values", f"operator {text} {said}")
        expressions.append(SelectorRequirement(key, operator, values))
    return tuple(sorted(labels.items())), tuple(expressions)


_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")


def _network_topology(src: Source, holder: JsonObject, path: str) -> TopologyConstraint | None:
    """A `networkTopology` (the PodGroup's, or a subgroup policy's, at `path`)."""
    if holder.get("networkTopology") is None:
        return None
    topology = read_object(src, holder.get("networkTopology"), path)
    mode = read_string(src, topology.get("mode"), f"{path}.mode") or "hard"
    if mode not in ("hard", "soft"):
        raise src.invalid(f"{path}.mode", f"{quoted(mode)} is not hard or soft")
    if read_string(src, topology.get("highestTierName"), f"{path}.highestTierName"):
        # Read as tier 1 it would pin the gang to the narrowest level: refused instead.
        raise src.invalid(
            f"{path}.highestTierName",
            "tier names are not supported: Phalanx counts tiers from its node labels "
            "(use highestTierAllowed)",
        )
    tier_path = f"{path}.highestTierAllowed"
    # A Go int (int64) in Volcano's API, unlike the int32 sizes: no int32 bound here.
    tier = read_integer(src, topology.get("highestTierAllowed"), tier_path)
    if tier is not None and tier < 1:
        raise src.invalid(tier_path, f"must be a positive integer, not {tier}")
    if mode == "soft":
        return TopologyConstraint(preferred=NARROWEST_TIER)
    # Hard: the narrowest tier whose one HyperNode holds the gang, up to the highest allowed
    # (Volcano tries tier 1 first too; required alone would spread over a whole tier-N one).
    highest = f"tier:{tier or 1}"
    if highest == NARROWEST_TIER:
        return TopologyConstraint(required=highest)
    return TopologyConstraint(required=highest, preferred=NARROWEST_TIER)


def waiting_reason(ref: GroupRef) -> str:
    return (
        f"waiting for Volcano PodGroup {ref.namespace}/{ref.name} ({API_VERSION}) to exist "
        f"(pods name it with annotation {GROUP_NAME_ANNOTATION})"
    )


def build_status(
    status: GroupStatus, previous: JsonObject | None, now: float, version: str = VERSION
) -> dict[str, object]:
    """The `status` to merge-patch onto the PodGroup (the object: no status subresource;
    one shape: `version` is moot).

    `previous` is the PodGroup's status as observed; conditions of other types (Volcano's
    controllers write some) are carried over, since the patch replaces the list (it is
    sent under the observed resourceVersion: see `registry.status_write`). A gang that
    waits gets `Unschedulable` once Phalanx has decided about it; a placed gang
    `Scheduled` (and loses `Unschedulable`: Volcano's job controller turns every one into
    a warning Event).
    """
    stamp = rfc3339(now)
    conditions = [
        c for c in conditions_of(previous) if c.get("type") not in (UNSCHEDULABLE, SCHEDULED)
    ]
    kept = {c.get("type"): c for c in conditions_of(previous)}
    return {
        "phase": _PHASES[status.phase],
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
        "conditions": [*conditions, *_placing_condition(status, kept, stamp)],
    }


def _placing_condition(
    status: GroupStatus, kept: Mapping[object, Mapping[str, object]], stamp: str
) -> list[Mapping[str, object]]:
    """`Scheduled` for a placed gang, else `Unschedulable` with Phalanx's reason; nothing
    new while nothing is decided (no member filtered yet): Volcano's job controller would
    turn an Unschedulable condition into a warning Event with no text."""
    if status.placed:
        ours = {"type": SCHEDULED, "status": "True", "reason": SCHEDULED, "message": ""}
        old = kept.get(SCHEDULED)
    elif not status.reason:
        old = kept.get(UNSCHEDULABLE)
        return [old] if old is not None else []
    else:
        if status.reason == OUTCOME_WAITING:
            reason = NOT_ENOUGH_TASKS
        elif status.reason == OUTCOME_UNFIT:
            reason = NOT_ENOUGH_RESOURCES
        else:
            reason = camel(status.reason)
        ours = {
            "type": UNSCHEDULABLE,
            "status": "True",
            "reason": reason,
            "message": status.message[:MESSAGE_LIMIT],
        }
        old = kept.get(UNSCHEDULABLE)
    return set_condition([old] if old is not None else [], dict(ours), stamp)
