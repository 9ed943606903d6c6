"""Which Volcano subgroup a pod is in (`spec.subGroupPolicy`, Volcano 1.13).

Volcano cuts a PodGroup's pods into subgroups ("SubJobs") by policy: a policy's label
selector picks pods, and the values of its `matchLabelKeys` on each picked pod name the
subgroup (Volcano's Job controller writes one policy per task with a `partitionPolicy`,
keyed by `volcano.sh/partition-id`). A pod is in the first policy, in the object's order,
that picks it and whose every key it carries with a non-empty value; a policy without keys
groups no pod, and a pod in no policy is in no subgroup. Phalanx reads the subgroups for
placement only: each one's members in one domain of its policy's level
(`phalanx.core.gang_topology`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from phalanx.core.model import Pod, SelectorOperator, SelectorRequirement, SubGroupPolicy


def subgroup_of(policies: Iterable[SubGroupPolicy], labels: Mapping[str, str]) -> str:
    """The subgroup a pod of `labels` is in: its policy's name and its key values, joined
    by `-` as Volcano names them (`worker-0`); "" when no policy groups it."""
    for policy in policies:
        if not policy.keys or not picks(policy, labels):
            continue
        values = [labels.get(key, "") for key in policy.keys]
        if all(values):
            return "-".join((policy.name, *values))
    return ""


def picks(policy: SubGroupPolicy, labels: Mapping[str, str]) -> bool:
    """Whether `policy`'s label selector picks a pod of `labels` (no selector: every pod)."""
    if any(labels.get(key) != value for key, value in policy.match_labels):
        return False
    return all(_meets(req, labels) for req in policy.match_expressions)


def _meets(req: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    match req.operator:
        case SelectorOperator.IN:
            return value is not None and value in req.values
        case SelectorOperator.NOT_IN:
            return value is None or value not in req.values
        case SelectorOperator.EXISTS:
            return value is not None
        case _:  # DoesNotExist: parsing admits no other operator for a label selector
            return value is None


def subgroups_of(
    policies: Iterable[SubGroupPolicy], pods: Iterable[Pod]
) -> dict[str, tuple[SubGroupPolicy, str]]:
    """Each pod's subgroup with its policy, by pod uid; pods in none are left out."""
    ordered = tuple(policies)
    found: dict[str, tuple[SubGroupPolicy, str]] = {}
    for pod in pods:
        for policy in ordered:
            name = subgroup_of((policy,), pod.labels)
            if name:
                found[pod.uid] = (policy, name)
                break
    return found
