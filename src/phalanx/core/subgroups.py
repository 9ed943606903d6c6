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

from phalanx.core.eligibility import requirement_matches
from phalanx.core.model import Pod, SubGroupPolicy


def subgroup_of(policies: Iterable[SubGroupPolicy], labels: Mapping[str, str]) -> str:
    """The subgroup a pod of `labels` is in: its policy's name and its key values, joined
    by `-` as Volcano names them (`worker-0`); "" when no policy groups it."""
    grouped = _grouped(policies, labels)
    return grouped[1] if grouped else ""


def subgroups_of(
    policies: Iterable[SubGroupPolicy], pods: Iterable[Pod]
) -> dict[str, tuple[SubGroupPolicy, str]]:
    """Each pod's subgroup with its policy, by pod uid; pods in none are left out."""
    ordered = tuple(policies)
    return {pod.uid: grouped for pod in pods if (grouped := _grouped(ordered, pod.labels))}


def picks(policy: SubGroupPolicy, labels: Mapping[str, str]) -> bool:
    """Whether `policy`'s label selector picks a pod of `labels` (no selector: every pod)."""
    if any(labels.get(key) != value for key, value in policy.match_labels):
        return False
    return all(requirement_matches(r, labels.get(r.key)) for r in policy.match_expressions)


def _grouped(
    policies: Iterable[SubGroupPolicy], labels: Mapping[str, str]
) -> tuple[SubGroupPolicy, str] | None:
    """The first policy that groups a pod of `labels`, with the subgroup's name."""
    for policy in policies:
        if not policy.keys or not picks(policy, labels):
            continue
        values = [labels.get(key, "") for key in policy.keys]
        if all(values):
            return policy, "-".join((policy.name, *values))
    return None
