"""Which Volcano subgroup a pod is in: the first policy, in the object's order, whose label
selector picks it and whose every key it carries with a value, named by those values."""

from __future__ import annotations

import pytest

from builders import pod
from phalanx.core.model import SelectorOperator, SelectorRequirement, SubGroupPolicy
from phalanx.core.subgroups import subgroup_of, subgroups_of

TASK, PARTITION = "volcano.sh/task-spec", "volcano.sh/partition-id"
WORKER = SubGroupPolicy("worker", match_labels=((TASK, "worker"),), keys=(PARTITION,))
ANY = SubGroupPolicy("any", keys=(PARTITION,))


@pytest.mark.parametrize(
    ("policies", "labels", "subgroup"),
    [
        ((WORKER,), {TASK: "worker", PARTITION: "3"}, "worker-3"),
        # Not picked by the selector, or a key without a value: in no subgroup.
        ((WORKER,), {TASK: "ps", PARTITION: "3"}, ""),
        ((WORKER,), {TASK: "worker"}, ""),
        ((WORKER,), {TASK: "worker", PARTITION: ""}, ""),
        # The first policy that groups the pod wins; one it lacks a key of is passed over.
        ((WORKER, ANY), {TASK: "worker", PARTITION: "1"}, "worker-1"),
        ((ANY, WORKER), {TASK: "worker", PARTITION: "1"}, "any-1"),
        (
            (SubGroupPolicy("rack", keys=("rack",)), ANY),
            {TASK: "worker", PARTITION: "1"},
            "any-1",
        ),
        # A policy of no keys groups no pod (Volcano's rule), several keys join their values.
        ((SubGroupPolicy("none"),), {TASK: "worker"}, ""),
        (
            (SubGroupPolicy("pair", keys=(TASK, PARTITION)),),
            {TASK: "worker", PARTITION: "2"},
            "pair-worker-2",
        ),
    ],
    ids=[
        "picked",
        "not-picked",
        "key-missing",
        "key-empty",
        "first-policy",
        "order-matters",
        "passed-over-for-a-key",
        "no-keys",
        "two-keys",
    ],
)
def test_a_pod_is_in_the_first_policy_that_groups_it(
    policies: tuple[SubGroupPolicy, ...], labels: dict[str, str], subgroup: str
) -> None:
    assert subgroup_of(policies, labels) == subgroup


@pytest.mark.parametrize(
    ("operator", "values", "labels", "picked"),
    [
        (SelectorOperator.IN, ("a", "b"), {"role": "b"}, True),
        (SelectorOperator.IN, ("a",), {"role": "b"}, False),
        (SelectorOperator.IN, ("a",), {}, False),
        (SelectorOperator.NOT_IN, ("a",), {"role": "b"}, True),
        (SelectorOperator.NOT_IN, ("a",), {}, True),
        (SelectorOperator.NOT_IN, ("a",), {"role": "a"}, False),
        (SelectorOperator.EXISTS, (), {"role": ""}, True),
        (SelectorOperator.EXISTS, (), {}, False),
        (SelectorOperator.DOES_NOT_EXIST, (), {}, True),
        (SelectorOperator.DOES_NOT_EXIST, (), {"role": "a"}, False),
    ],
)
def test_match_expressions_pick_pods_as_a_label_selector_does(
    operator: SelectorOperator, values: tuple[str, ...], labels: dict[str, str], picked: bool
) -> None:
    policy = SubGroupPolicy(
        "p", match_expressions=(SelectorRequirement("role", operator, values),), keys=("k",)
    )
    assert bool(subgroup_of((policy,), {**labels, "k": "0"})) is picked


def test_every_pods_subgroup_with_its_policy_by_uid() -> None:
    pods = [
        pod("w-0", labels={TASK: "worker", PARTITION: "0"}),
        pod("w-1", labels={TASK: "worker", PARTITION: "1"}),
        pod("ps-0", labels={TASK: "ps"}),
    ]
    assert subgroups_of((WORKER,), pods) == {
        pods[0].uid: (WORKER, "worker-0"),
        pods[1].uid: (WORKER, "worker-1"),
    }
