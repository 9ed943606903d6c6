"""What kube-scheduler requires of an upstream PodGroup's pods before it schedules any of
them (its `validatePodGroup`): read from the PodGroup by the release of its API, and the
first pod that breaks it named with its value and the one it should have."""

from __future__ import annotations

from typing import Any

import pytest

from builders import pod, upstream_podgroup_obj
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import upstream
from phalanx.core.groups.member_rules import composite_refusal, refusal
from phalanx.core.model import (
    PREEMPT_LOWER_PRIORITY,
    PREEMPT_NEVER,
    Dialect,
    MemberRules,
    Pod,
    PodGroup,
)

# --- reading ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "fields", "rules"),
    [
        ("v1beta1", {}, MemberRules("1.37")),
        ("v1beta1", {"priority": 500}, MemberRules("1.37", 500)),
        ("v1alpha3", {"priority": -5}, MemberRules("1.37", -5)),
        (
            "v1beta1",
            {"priority": 7, "preemption_policy": PREEMPT_NEVER},
            MemberRules("1.37", 7, PREEMPT_NEVER),
        ),
        ("v1alpha2", {}, MemberRules("1.36")),
    ],
    ids=["unset", "priority", "v1alpha3", "preemption-policy", "v1alpha2"],
)
def test_a_pod_group_carries_the_rules_of_its_apis_release(
    version: str, fields: dict[str, Any], rules: MemberRules
) -> None:
    group = upstream.parse_pod_group(upstream_podgroup_obj("job", 2, version=version, **fields))
    assert group.member_rules == rules


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"priority": "high"}, "spec.priority: must be an integer, not a string"),
        ({"priority": True}, "spec.priority: must be an integer, not a boolean"),
        ({"priority": 2**31}, "spec.priority: 2147483648 is out of the range of an int32"),
        (
            {"preemptionPolicy": "Always"},
            'spec.preemptionPolicy: "Always" is not a preemption policy '
            "(PreemptLowerPriority or Never)",
        ),
        ({"preemptionPolicy": 1}, "spec.preemptionPolicy: must be a string, not a number"),
    ],
    ids=["priority-string", "priority-boolean", "priority-int64", "policy-unknown", "policy-int"],
)
def test_a_malformed_priority_or_preemption_policy_refuses_the_object_naming_the_field(
    spec: dict[str, Any], problem: str
) -> None:
    obj = upstream_podgroup_obj("job", 2)
    obj["spec"].update(spec)
    with pytest.raises(InvalidObjectError) as raised:
        upstream.parse_pod_group(obj)
    assert str(raised.value) == f"PodGroup default/job: {problem}"


# --- judging ----------------------------------------------------------------------------


def group(rules: MemberRules | None, name: str = "job") -> PodGroup:
    return PodGroup("ml", name, 2, dialect=Dialect.UPSTREAM, member_rules=rules)


def member(name: str, **fields: Any) -> Pod:
    return pod(name, namespace="ml", **{"scheduler_name": "phalanx", **fields})


def bound(p: Pod) -> bool:
    return bool(p.node_name)


PRIORITY = (
    "PodGroup ml/job is refused, as kube-scheduler 1.37 refuses it before any cycle of its "
    "pods: pod ml/job-1 has priority 500 but the PodGroup's spec.priority is 0 (give the pods "
    "and the PodGroup one spec.priorityClassName; both are immutable: recreate the one that "
    "differs)"
)
NAME = (
    'pod ml/job-1 has spec.schedulerName "default-scheduler" but pod ml/job-0 "phalanx" '
    "(the pods of a PodGroup must all name one scheduler)"
)


@pytest.mark.parametrize(
    ("rules", "pods", "expected"),
    [
        (MemberRules("1.37", 500), [member("job-0", priority=500)], ""),
        (MemberRules("1.37"), [member("job-0"), member("job-1", priority=500)], PRIORITY),
        # Bound pods are judged too, after the pending ones, but only while one is pending.
        (
            MemberRules("1.37"),
            [member("job-0"), member("job-1", priority=500, node="n1")],
            PRIORITY,
        ),
        (MemberRules("1.37"), [member("job-1", priority=500, node="n1")], ""),
        # A gated pod is judged like any pending one: kube-scheduler 1.37 gates the whole
        # group while any pod of it is gated, and checks it with the rest once ungated.
        (
            MemberRules("1.37"),
            [member("job-0"), member("job-1", priority=500, unjudged="scheduling gates")],
            PRIORITY,
        ),
        (
            MemberRules("1.37"),
            [member("job-0"), member("job-1", scheduler_name="default-scheduler")],
            "PodGroup ml/job is refused, as kube-scheduler 1.37 refuses it before any cycle "
            f"of its pods: {NAME}",
        ),
        (
            MemberRules("1.37", preemption_policy=PREEMPT_NEVER),
            [member("job-0", preemption_policy=PREEMPT_NEVER), member("job-1")],
            "PodGroup ml/job is refused, as kube-scheduler 1.37 refuses it before any cycle "
            "of its pods: pod ml/job-1 has spec.preemptionPolicy PreemptLowerPriority but the "
            "PodGroup's spec.preemptionPolicy is Never (the pods of a PodGroup must all have "
            "its preemption policy: use PriorityClasses of the same preemptionPolicy)",
        ),
        (
            MemberRules("1.37"),
            [member("job-0", preemption_policy=PREEMPT_NEVER), member("job-1")],
            "PodGroup ml/job is refused, as kube-scheduler 1.37 refuses it before any cycle "
            "of its pods: pod ml/job-1 has spec.preemptionPolicy PreemptLowerPriority but pod "
            "ml/job-0's is Never (the pods of a PodGroup must all have its preemption policy: "
            "use PriorityClasses of the same preemptionPolicy)",
        ),
        (
            MemberRules("1.37"),
            [member(f"job-{i}", preemption_policy=PREEMPT_NEVER) for i in range(2)],
            "",
        ),
        # 1.36: the pending pods' scheduler names alone.
        (MemberRules("1.36"), [member("job-0"), member("job-1", priority=500)], ""),
        (
            MemberRules("1.36"),
            [member("job-0"), member("job-1", scheduler_name="default-scheduler")],
            "PodGroup ml/job is refused, as kube-scheduler 1.36 refuses it before any cycle "
            f"of its pods: {NAME}",
        ),
        (
            MemberRules("1.36"),
            [member("job-0"), member("job-1", scheduler_name="default-scheduler", node="n1")],
            "",
        ),
        # Another dialect's scheduler requires none of it.
        (None, [member("job-0"), member("job-1", priority=500)], ""),
    ],
    ids=[
        "priorities-agree",
        "a-pending-pods-priority",
        "a-bound-pods-priority",
        "nothing-pending",
        "a-gated-pods-priority",
        "scheduler-names",
        "the-groups-preemption-policy",
        "preemption-policies-disagree",
        "preemption-policies-agree",
        "1.36-reads-no-priority",
        "1.36-scheduler-names",
        "1.36-bound-pods-unjudged",
        "no-rules",
    ],
)
def test_the_first_pod_breaking_its_pod_groups_rules_is_named_with_both_values(
    rules: MemberRules | None, pods: list[Pod], expected: str
) -> None:
    assert refusal(group(rules), pods, bound) == expected


def test_pending_pods_are_judged_before_bound_ones_and_each_by_name() -> None:
    pods = [
        member("job-0"),
        member("job-1", priority=9, node="n1"),
        member("job-2", preemption_policy=PREEMPT_NEVER),
    ]
    assert "pod ml/job-2 has spec.preemptionPolicy Never" in refusal(
        group(MemberRules("1.37")), pods, bound
    )


def test_a_composite_is_refused_whole_naming_the_first_refused_pod_group_beneath_it() -> None:
    children = [
        (group(MemberRules("1.37"), "head"), [member("head-0")]),
        (group(MemberRules("1.37"), "a"), [member("a-0", priority=500)]),
        (group(MemberRules("1.37"), "b"), [member("b-0", scheduler_name="other")]),
    ]
    why = composite_refusal("ml", "ray", children, bound)
    assert why.startswith(
        "CompositePodGroup ml/ray cannot be scheduled all or nothing: PodGroup ml/a is refused"
    )
    assert "pod ml/a-0 has priority 500" in why
    assert composite_refusal("ml", "ray", children[:1], bound) == ""


def test_an_unset_pod_preemption_policy_is_kube_schedulers_default() -> None:
    assert member("job-0").preemption_policy == PREEMPT_LOWER_PRIORITY
