"""What kube-scheduler requires of an upstream PodGroup's pods before it schedules any of
them (`validatePodGroup`, k8s.io/kubernetes pkg/scheduler/schedule_one_podgroup.go), so
that Phalanx never plans, reserves or binds a gang kube-scheduler refuses.

kube-scheduler runs a pod-group cycle for the pods of a PodGroup, whatever its profile's
plugins; it first checks the group, and a group that fails fails every cycle of its pods
(kube-scheduler writes the error to the PodGroup's condition, reason `SchedulerError`),
so none of them is ever filtered or bound. By the release whose API the PodGroup is read
in (`MemberRules`):

* **1.36** (`v1alpha2`): the pending pods all name one `spec.schedulerName`;
* **1.37** (`v1beta1`, `v1alpha3`): the pending pods and then the bound ones all name the
  first pending pod's `spec.schedulerName`; each one's `spec.priority` (unset: 0) is the
  PodGroup's `spec.priority` (unset: 0); and each one's `spec.preemptionPolicy` (unset:
  `PreemptLowerPriority`) is the PodGroup's `spec.preemptionPolicy` when that is set (only
  with the `PodGroupPreemptionPolicy` gate, whose API server then defaults it), else the
  first pending pod's.

The first pod to break a rule, in that order (pending pods by name, then bound ones), is
the one named, with its value and the one it should have. A group with no pending pod is
not checked: kube-scheduler runs no cycle for it. A pod behind scheduling gates is pending
like any other: kube-scheduler gates the whole group while any pod of it is gated
(`runPreEnqueuePlugins`), then judges the gated pod with the rest once its gates lift.

Each PodGroup is judged on its own, against its own priority, also beneath a
CompositePodGroup: the chart runs kube-scheduler without its `CompositePodGroup` gate, so
its cycles are the PodGroups' (a composite's own `spec.priority` is not read). A composite
gang with one refused PodGroup beneath it is refused whole (`composite_refusal`): it
cannot be placed all or nothing while kube-scheduler schedules none of that PodGroup's
pods. Other dialects' schedulers check none of this, so their gangs carry no rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.model import (
    PREEMPT_LOWER_PRIORITY,
    PREEMPT_NEVER,
    MemberRules,
    Pod,
    PodGroup,
)
from phalanx.core.rawdict import (
    INT32_MAX,
    INT32_MIN,
    JsonObject,
    Source,
    read_integer,
    read_string,
)

PRIORITY_FIELD: Final = "spec.priority"
POLICY_FIELD: Final = "spec.preemptionPolicy"
POLICIES: Final = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)

IsBound = Callable[[Pod], bool]


def read_member_rules(src: Source, spec: JsonObject, version: str) -> MemberRules:
    """The rules for a PodGroup of `scheduling.k8s.io/<version>`. The API server validates
    `spec.priority` (an int32, set by admission from `spec.priorityClassName`) and
    `spec.preemptionPolicy`, so a malformed one raises naming the field."""
    if version == "v1alpha2":
        return MemberRules("1.36")
    priority = read_integer(src, spec.get("priority"), PRIORITY_FIELD)
    if priority is not None and not INT32_MIN <= priority <= INT32_MAX:
        raise src.invalid(PRIORITY_FIELD, f"{priority} is out of the range of an int32")
    policy = read_string(src, spec.get("preemptionPolicy"), POLICY_FIELD)
    if policy and policy not in POLICIES:
        allowed = " or ".join(POLICIES)
        raise src.invalid(POLICY_FIELD, f"{quoted(policy)} is not a preemption policy ({allowed})")
    return MemberRules("1.37", priority or 0, policy)


def refusal(group: PodGroup, members: Iterable[Pod], is_bound: IsBound) -> str:
    """Why kube-scheduler refuses every cycle of `group`'s pods (`members`: its live pods),
    naming the PodGroup, the pod, its value and the one it should have; "" when it does
    not, or when `group` carries no rules (see the module docstring)."""
    rules = group.member_rules
    if rules is None:
        return ""
    pending: list[Pod] = []
    bound: list[Pod] = []
    for pod in members:
        (bound if is_bound(pod) else pending).append(pod)
    if not pending:
        return ""  # no cycle runs: nothing is refused
    judged = pending if rules.names_only else [*pending, *bound]
    problem = _first_broken(rules, judged)
    if not problem:
        return ""
    return (
        f"PodGroup {group.namespace}/{group.name} is refused, as kube-scheduler "
        f"{rules.release} refuses it before any cycle of its pods: {problem}"
    )


def composite_refusal(
    namespace: str, name: str, children: Iterable[tuple[PodGroup, Sequence[Pod]]], is_bound: IsBound
) -> str:
    """Why composite gang `namespace/name` is refused: the first of its PodGroups
    (`children`, each with its live pods) that kube-scheduler refuses; "" when none is."""
    for group, members in children:
        why = refusal(group, members, is_bound)
        if why:
            whole = f"CompositePodGroup {namespace}/{name} cannot be scheduled all or nothing"
            return f"{whole}: {why}"
    return ""


def _first_broken(rules: MemberRules, pods: Sequence[Pod]) -> str:
    """The first rule the first pod of `pods` to break one breaks, said for people; "" when
    none does. Precondition: `pods` starts with a pending one (the reference)."""
    first = pods[0]
    for pod in pods:
        if pod.scheduler_name != first.scheduler_name:
            return (
                f"pod {pod.key} has spec.schedulerName {quoted(pod.scheduler_name)} but pod "
                f"{first.key} {quoted(first.scheduler_name)} (the pods of a PodGroup must "
                "all name one scheduler)"
            )
        if rules.names_only:
            continue
        if pod.priority != rules.priority:
            return (
                f"pod {pod.key} has priority {pod.priority} but the PodGroup's "
                f"{PRIORITY_FIELD} is {rules.priority} (give the pods and the PodGroup one "
                "spec.priorityClassName; both are immutable: recreate the one that differs)"
            )
        policy, of = rules.preemption_policy, f"the PodGroup's {POLICY_FIELD}"
        if not policy:
            policy, of = first.preemption_policy, f"pod {first.key}'s"
        if pod.preemption_policy != policy:
            return (
                f"pod {pod.key} has spec.preemptionPolicy {pod.preemption_policy} but "
                f"{of} is {policy} (the pods of a PodGroup must all have its preemption "
                "policy: use PriorityClasses of the same preemptionPolicy)"
            )
    return ""
