"""The upstream dialect: Kubernetes' own gang API, `scheduling.k8s.io` (GenericWorkload).

Two shapes, by the version the API server serves:

* **1.35, `v1alpha1`**: a `Workload` lists up to 8 `spec.podGroups[]`, each with a
  `policy` of `basic` or `gang: {minCount}`; the list is immutable. A pod names its gang
  with `spec.workloadRef: {name, podGroup, podGroupReplicaKey}`. Each (Workload, pod
  group, replica key) is its own gang: `GroupRef(ns, workload, UPSTREAM, podgroup, key)`,
  key `upstream:ns/workload/podgroup[/replica]`. There is no status to write; Events go
  to the Workload.
* **1.36+, `v1alpha2`, `v1alpha3` and `v1beta1` (1.37)**: a standalone `PodGroup` with
  `spec.schedulingPolicy.{basic | gang: {minCount}}` and optionally
  `spec.schedulingConstraints.topology[0].key` (one node label: every member inside one
  value of it). In `v1beta1` `minCount` is mutable (the gang is re-resolved when it
  changes). A pod names it with `spec.schedulingGroup.podGroupName`; key
  `upstream:ns/name`. Status is the condition `PodGroupInitiallyScheduled`
  (`PodGroupScheduled` in `v1alpha2`), which never goes back from True (as
  kube-scheduler writes it). In 1.37 (`DRAWorkloadResourceClaims`) `spec.resourceClaims`
  names ResourceClaims the members share (`read_resource_claims`).
  `spec.disruptionMode` (`single` or `all`; in `v1alpha2` the string `Pod` or
  `PodGroup`) is read for preemption (`phalanx.core.groups.disruption`). What
  kube-scheduler requires of the pods before it schedules any (one scheduler name; in 1.37
  `spec.priority` and `spec.preemptionPolicy` too) is `phalanx.core.groups.member_rules`:
  a gang whose pods break it is refused.

`basic` means "no gang": the PodGroup has `basic` set and its members are scheduled one
by one. The API server validates these spec fields, so a malformed one raises; a pod's
reference to a name no object could have marks the pod invalid (see `claim`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from phalanx.core.claim_refs import read_claim_refs
from phalanx.core.errors import quoted
from phalanx.core.groups.common import (
    ObjectSettings,
    Parsed,
    PodView,
    group_name_problem,
    is_deleting,
    is_object_name,
    is_qualified_name,
    label_name_problem,
    read_identity,
    read_min_count,
)
from phalanx.core.groups.disruption import read_disruption_mode, read_v1alpha2_disruption_mode
from phalanx.core.groups.member_rules import read_member_rules
from phalanx.core.groups.status import (
    MESSAGE_LIMIT,
    OUTCOME_INVALID,
    GroupStatus,
    conditions_of,
    rfc3339,
    set_condition,
)
from phalanx.core.model import (
    Claim,
    Dialect,
    GroupRef,
    PodClaimRef,
    PodGroup,
    TopologyConstraint,
)
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    read_object,
    read_objects,
    read_string,
    read_string_map,
)

GROUP: Final = "scheduling.k8s.io"
WORKLOAD_VERSION: Final = "v1alpha1"  # the only version whose Workload names the gangs
# Versions with a standalone PodGroup, newest first: the one to use is the first served.
POD_GROUP_VERSIONS: Final = ("v1beta1", "v1alpha3", "v1alpha2")
WORKLOAD_KIND: Final = "Workload"
POD_GROUP_KIND: Final = "PodGroup"
WORKLOAD_RESOURCE: Final = "workloads"
POD_GROUP_RESOURCE: Final = "podgroups"

INITIALLY_SCHEDULED: Final = "PodGroupInitiallyScheduled"  # v1alpha3, v1beta1
SCHEDULED_V1ALPHA2: Final = "PodGroupScheduled"
REASON_SCHEDULED: Final = "Scheduled"  # kube-scheduler's reason when the gang is placed
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_SCHEDULER_ERROR: Final = "SchedulerError"


# --- Pods -------------------------------------------------------------------------------


def claim(pod: PodView) -> Claim | None:
    """`spec.schedulingGroup` (1.36+) or `spec.workloadRef` (1.35); an API server serves
    only one of the two fields.

    A name no object could have marks the pod invalid, as in the other dialects: it would
    wait forever, and a "/" in it would make the key of another gang (`a/b` reads as
    Workload `a`'s pod group `b`).
    """
    src, spec = pod.src, pod.spec
    if spec.get("schedulingGroup") is not None:
        if spec.get("workloadRef") is not None:
            raise src.invalid(
                "spec.workloadRef", "must not be set together with spec.schedulingGroup"
            )
        group = read_object(src, spec.get("schedulingGroup"), "spec.schedulingGroup")
        path = "spec.schedulingGroup.podGroupName"
        name = _required(src, group.get("podGroupName"), path)
        problem = group_name_problem(path, name)
        if problem:
            return Claim(Dialect.UPSTREAM, None, (problem,))
        return Claim(Dialect.UPSTREAM, GroupRef(pod.namespace, name, Dialect.UPSTREAM))
    if spec.get("workloadRef") is not None:
        ref = read_object(src, spec.get("workloadRef"), "spec.workloadRef")
        name = _required(src, ref.get("name"), "spec.workloadRef.name")
        pod_group = _required(src, ref.get("podGroup"), "spec.workloadRef.podGroup")
        replica_path = "spec.workloadRef.podGroupReplicaKey"
        replica = read_string(src, ref.get("podGroupReplicaKey"), replica_path)
        problems = [
            group_name_problem("spec.workloadRef.name", name, WORKLOAD_KIND),
            label_name_problem("spec.workloadRef.podGroup", pod_group, "pod group name"),
            label_name_problem(replica_path, replica, "replica key") if replica else "",
        ]
        if any(problems):
            return Claim(Dialect.UPSTREAM, None, tuple(p for p in problems if p))
        return Claim(
            Dialect.UPSTREAM,
            GroupRef(pod.namespace, name, Dialect.UPSTREAM, pod_group, replica),
        )
    return None


def _required(src: Source, value: object, path: str) -> str:
    text = read_string(src, value, path)
    if not text:
        raise src.invalid(path, "is required")
    return text


# --- Workload (v1alpha1) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadPodGroup:
    """One `spec.podGroups[]` entry: `min_count` None is the `basic` policy."""

    name: str
    min_count: int | None


@dataclass(frozen=True, slots=True)
class Workload:
    """A `scheduling.k8s.io/v1alpha1` Workload: the gangs its pods may name."""

    namespace: str
    name: str
    pod_groups: tuple[WorkloadPodGroup, ...]
    settings: ObjectSettings = field(default_factory=ObjectSettings)
    uid: str = ""
    deleting: bool = False  # `metadata.deletionTimestamp` is set (as `PodGroup.deleting`)

    @property
    def ref(self) -> GroupRef:
        return GroupRef(self.namespace, self.name, Dialect.UPSTREAM)

    @property
    def key(self) -> str:
        return self.ref.key

    def pod_group(self, name: str) -> WorkloadPodGroup | None:
        return next((group for group in self.pod_groups if group.name == name), None)


def parse_workload(obj: JsonObject) -> Workload:
    src, metadata, namespace, name = read_identity(WORKLOAD_KIND, obj)
    spec = read_object(src, obj.get("spec"), "spec")
    groups: list[WorkloadPodGroup] = []
    for path, entry in read_objects(src, spec.get("podGroups"), "spec.podGroups"):
        group_name = _required(src, entry.get("name"), f"{path}.name")
        if any(group.name == group_name for group in groups):
            raise src.invalid(f"{path}.name", f"{quoted(group_name)} is listed twice")
        policy = read_object(src, entry.get("policy"), f"{path}.policy")
        groups.append(WorkloadPodGroup(group_name, read_policy(src, policy, f"{path}.policy")))
    if not groups:
        raise src.invalid("spec.podGroups", "must have at least one item")
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    return Workload(
        namespace=namespace,
        name=name,
        pod_groups=tuple(groups),
        settings=ObjectSettings.read(src, annotations, timeout=True),
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        deleting=is_deleting(metadata),
    )


def read_policy(src: Source, policy: JsonObject, path: str, size: str = "minCount") -> int | None:
    """A policy's gang size (`gang.<size>`: a PodGroup's `minCount`, a CompositePodGroup's
    `minGroupCount`): None for `basic`; exactly one of the two must be set."""
    has_basic, has_gang = policy.get("basic") is not None, policy.get("gang") is not None
    if has_basic == has_gang:
        raise src.invalid(path, "exactly one of basic, gang is required")
    if has_basic:
        read_object(src, policy.get("basic"), f"{path}.basic")
        return None
    gang = read_object(src, policy.get("gang"), f"{path}.gang")
    return read_min_count(src, gang.get(size), f"{path}.gang.{size}")


def gang_of(workload: Workload, ref: GroupRef) -> PodGroup | str:
    """The gang `ref` names in `workload`, or why it names none (an invalid reference:
    the pod groups of a Workload never change)."""
    entry = workload.pod_group(ref.pod_group)
    if entry is None:
        have = ", ".join(quoted(group.name) for group in workload.pod_groups)
        return (
            f"Workload {workload.namespace}/{workload.name} has no pod group "
            f"{quoted(ref.pod_group)} (spec.podGroups has {have}); "
            "pods name it in spec.workloadRef.podGroup"
        )
    settings = workload.settings
    return PodGroup(
        namespace=workload.namespace,
        name=workload.name,
        min_member=entry.min_count or 1,
        **settings.group_fields(),
        topology=settings.topology,
        uid=workload.uid,
        dialect=Dialect.UPSTREAM,
        pod_group=ref.pod_group,
        replica=ref.replica,
        basic=entry.min_count is None,
        deleting=workload.deleting,
    )


# --- PodGroup (v1alpha2, v1alpha3, v1beta1) ---------------------------------------------


def parse_pod_group(obj: JsonObject) -> PodGroup:
    src, metadata, namespace, name = read_identity(POD_GROUP_KIND, obj)
    spec = read_object(src, obj.get("spec"), "spec")
    version = read_string(src, obj.get("apiVersion"), "apiVersion").removeprefix(f"{GROUP}/")
    read_mode = read_v1alpha2_disruption_mode if version == "v1alpha2" else read_disruption_mode
    path = "spec.schedulingPolicy"
    min_count = read_policy(src, read_object(src, spec.get("schedulingPolicy"), path), path)
    annotations = read_string_map(src, metadata.get("annotations"), "metadata.annotations")
    settings = ObjectSettings.read(src, annotations, timeout=True)
    topology = settings.topology_with(
        src, read_topology(src, spec), "spec.schedulingConstraints.topology", adds=True
    )
    return PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_count or 1,
        **settings.group_fields(),
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        dialect=Dialect.UPSTREAM,
        topology=topology,
        basic=min_count is None,
        deleting=is_deleting(metadata),
        parent=read_parent(src, spec),
        resource_claims=read_resource_claims(
            src, spec, read_object(src, obj.get("status"), "status")
        ),
        disruption_mode=read_mode(src, spec),
        member_rules=read_member_rules(src, spec, version),
    )


PARENT_FIELD: Final = "spec.parentCompositePodGroupName"


def read_parent(src: Source, spec: JsonObject) -> str:
    """`spec.parentCompositePodGroupName` (1.37, PodGroup and CompositePodGroup): the
    CompositePodGroup above, "" for none (`phalanx.core.groups.composite`)."""
    parent = read_string(src, spec.get("parentCompositePodGroupName"), PARENT_FIELD)
    if parent and not is_object_name(parent):
        raise src.invalid(PARENT_FIELD, f"{quoted(parent)} is not a valid CompositePodGroup name")
    return parent


CLAIMS_FIELD: Final = "spec.resourceClaims"
MAX_CLAIMS: Final = 4  # the API's MaxPodGroupResourceClaims


def read_resource_claims(
    src: Source, spec: JsonObject, status: JsonObject
) -> tuple[PodClaimRef, ...]:
    """`spec.resourceClaims` (1.37, `DRAWorkloadResourceClaims`): the claims the members
    share, each with the name kube's resourceclaim controller generated for a template
    (`status.resourceClaimStatuses`). A member's entry of the same name, claim and template
    uses it (`phalanx.core.dra_demand`). The API server validates them, so a malformed
    entry raises naming the field."""
    refs = read_claim_refs(src, spec, status)
    if len(refs) > MAX_CLAIMS:
        raise src.invalid(CLAIMS_FIELD, f"must have at most {MAX_CLAIMS} items, not {len(refs)}")
    for i, ref in enumerate(refs):
        path = f"{CLAIMS_FIELD}[{i}].name"
        problem = label_name_problem(path, ref.name, "claim name")
        if problem:
            raise src.invalid(path, problem.removeprefix(f"{path}: "))
        if any(other.name == ref.name for other in refs[:i]):
            raise src.invalid(path, f"{quoted(ref.name)} is listed twice")
    return refs


def read_topology(src: Source, spec: JsonObject) -> TopologyConstraint | None:
    path = "spec.schedulingConstraints"
    constraints = read_object(src, spec.get("schedulingConstraints"), path)
    entries = list(read_objects(src, constraints.get("topology"), f"{path}.topology"))
    if not entries:
        return None
    if len(entries) > 1:
        raise src.invalid(f"{path}.topology", f"must have at most 1 item, not {len(entries)}")
    item_path, entry = entries[0]
    key = _required(src, entry.get("key"), f"{item_path}.key")
    if not is_qualified_name(key):
        raise src.invalid(f"{item_path}.key", f"{quoted(key)} is not a node label key")
    # Upstream accepts any node label here; a key no configured topology has is planned
    # as a topology of that label alone (`phalanx.core.topology.resolve_topology`).
    return TopologyConstraint(required=key, any_label=True)


def _parsed_pod_group(obj: JsonObject) -> Parsed[PodGroup]:
    return Parsed(parse_pod_group(obj))


def _parsed_workload(obj: JsonObject) -> Parsed[Workload]:
    return Parsed(parse_workload(obj))


KINDS: Final[Mapping[tuple[str, str], Callable[[JsonObject], Parsed[PodGroup | Workload]]]] = {
    (f"{GROUP}/{WORKLOAD_VERSION}", WORKLOAD_KIND): _parsed_workload,
    **{(f"{GROUP}/{v}", POD_GROUP_KIND): _parsed_pod_group for v in POD_GROUP_VERSIONS},
}


def object_kind(ref: GroupRef) -> str:
    """The kind of the object holding `ref`'s gang: the Workload of a v1alpha1 pod group,
    else a PodGroup."""
    return WORKLOAD_KIND if ref.pod_group else POD_GROUP_KIND


def waiting_reason(ref: GroupRef) -> str:
    if ref.pod_group:
        return (
            f"waiting for Workload {ref.namespace}/{ref.name} ({GROUP}/{WORKLOAD_VERSION}) "
            "to exist (pods name it in spec.workloadRef)"
        )
    return (
        f"waiting for PodGroup {ref.namespace}/{ref.name} ({GROUP}) to exist "
        "(pods name it in spec.schedulingGroup.podGroupName)"
    )


# --- Status -----------------------------------------------------------------------------


def condition_type(version: str) -> str:
    return SCHEDULED_V1ALPHA2 if version == "v1alpha2" else INITIALLY_SCHEDULED


def placing_conditions(version: str) -> Mapping[str, bool]:
    """The condition that says a PodGroup of `version` is placed (when True)."""
    return {condition_type(version): True}


def build_status(
    status: GroupStatus, previous: JsonObject | None, now: float, version: str
) -> dict[str, object] | None:
    """The PodGroup's `status` as Phalanx would leave it, or None: nothing to say.

    `previous` is the PodGroup's status as observed (kube-scheduler writes the same
    condition); conditions of other types are carried over. A True condition is never
    turned back. Only the changed condition is sent (`registry.status_write`: a strategic
    merge patch under the observed resourceVersion, as kube-scheduler patches it).
    """
    if status.ref.pod_group:
        return None  # a v1alpha1 Workload has no status
    return build_condition(status, previous, now, condition_type(version))


def build_condition(
    status: GroupStatus, previous: JsonObject | None, now: float, kind: str
) -> dict[str, object] | None:
    """`build_status` for the condition `kind` (a CompositePodGroup's has its own type)."""
    if not status.placed and not status.reason:
        # Nothing decided yet (no member filtered): kube-scheduler too writes the condition
        # only after an attempt, and "Unschedulable" would be a false alarm.
        return None
    conditions = conditions_of(previous)
    old = next((c for c in conditions if c.get("type") == kind), None)
    if old is not None and old.get("status") == "True" and not status.placed:
        return None
    if status.placed:
        state, reason = "True", REASON_SCHEDULED
    else:
        state = "False"
        invalid = status.reason == OUTCOME_INVALID
        reason = REASON_SCHEDULER_ERROR if invalid else REASON_UNSCHEDULABLE
    condition: dict[str, object] = {
        "type": kind,
        "status": state,
        "reason": reason,
        "message": status.message[:MESSAGE_LIMIT],
    }
    updated = set_condition(conditions, condition, rfc3339(now))
    if old is not None and _same(old, condition):
        return None
    return {"conditions": updated}


def _same(old: Mapping[str, object], new: Mapping[str, object]) -> bool:
    return all(old.get(field) == new[field] for field in ("status", "reason", "message"))
