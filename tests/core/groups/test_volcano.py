"""Volcano: scheduling.volcano.sh/v1beta1 PodGroups named by a pod annotation."""

from __future__ import annotations

from typing import Any

import pytest

from builders import pod_obj, volcano_podgroup_obj
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import volcano
from phalanx.core.groups.common import PodView
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.inventory import parse_pod
from phalanx.core.model import (
    Claim,
    Dialect,
    GroupRef,
    PodGroup,
    Resources,
    SelectorOperator,
    SelectorRequirement,
    SubGroupPolicy,
    TopologyConstraint,
)
from phalanx.core.rawdict import Source

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
KUBE = "scheduling.k8s.io/group-name"
VOLCANO = "scheduling.volcano.sh/group-name"


PARTITION = "volcano.sh/partition-id"


def partition_policy(**fields: Any) -> dict[str, Any]:
    """A subgroup policy as Volcano's Job controller writes one for a task with a
    `partitionPolicy`: the task's pods, by partition, each partition in one tier-1 HyperNode."""
    policy = {
        "name": "worker",
        "labelSelector": {"matchLabels": {"volcano.sh/task-spec": "worker"}},
        "matchLabelKeys": [PARTITION],
        "subGroupSize": 4,
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
        **fields,
    }
    return {k: v for k, v in policy.items() if v is not None}


def view(annotations: dict[str, str]) -> PodView:
    return PodView(Source("Pod", "ml/p"), "ml", {}, annotations, {})


@pytest.mark.parametrize(
    ("annotations", "claim"),
    [
        ({KUBE: "job-1", VOLCANO: "job-1"}, GroupRef("ml", "job-1", Dialect.VOLCANO)),
        ({KUBE: "job-1"}, GroupRef("ml", "job-1", Dialect.VOLCANO)),
        ({VOLCANO: "job-1"}, GroupRef("ml", "job-1", Dialect.VOLCANO)),
        ({KUBE: "", VOLCANO: ""}, None),
        ({"volcano.sh/job-name": "job-1"}, None),
    ],
    ids=["both-as-volcano-writes", "kube-key", "volcano-key", "empty", "job-name-only"],
)
def test_the_group_name_annotation_claims_a_pod(
    annotations: dict[str, str], claim: GroupRef | None
) -> None:
    found = volcano.claim(view(annotations))
    assert found == (Claim(Dialect.VOLCANO, claim) if claim else None)


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        (
            {KUBE: "a", VOLCANO: "b"},
            f'annotation {VOLCANO}: "b" names a different group than annotation {KUBE}: "a"',
        ),
        (
            {KUBE: "Job_1"},
            f'annotation {KUBE}: "Job_1" is not a valid PodGroup name '
            '(lower-case letters, digits, "-" and ".")',
        ),
    ],
    ids=["disagree", "bad-name"],
)
def test_a_malformed_group_name_marks_the_pod_invalid(
    annotations: dict[str, str], problem: str
) -> None:
    pod = parse_pod(pod_obj("p", annotations=annotations))
    assert (pod.group, pod.group_dialect, pod.invalid) == (None, Dialect.VOLCANO, problem)


def test_a_pod_group_as_the_volcano_job_controller_creates_it() -> None:
    parsed = volcano.parse_pod_group(
        volcano_podgroup_obj(
            "mnist",
            4,
            namespace="ml",
            min_resources={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"},
        )
    )
    assert parsed.warnings == ()
    assert parsed.value == PodGroup(
        namespace="ml",
        name="mnist",
        min_member=4,
        timeout_declared=False,
        min_resources=Resources({"cpu": 16_000, "memory": 64 * 2**30, "nvidia.com/gpu": 8}),
        uid="vpg-ml-mnist",
        dialect=Dialect.VOLCANO,
    )
    assert parsed.value.key == "volcano:ml/mnist"


def test_a_volcano_and_a_scheduler_plugins_group_of_one_name_are_two_gangs() -> None:
    by_volcano = parse_pod(pod_obj("a", volcano_group="job")).group
    by_label = parse_pod(pod_obj("b", group="job")).group
    assert by_volcano is not None
    assert by_label is not None
    assert by_volcano.key != by_label.key


@pytest.mark.parametrize(
    ("spec", "warnings"),
    [
        ({"queue": "research"}, ['spec.queue: "research" is ignored: Phalanx has no queues']),
        ({"queue": "default"}, []),
        ({"queue": ""}, []),
        # Volcano skips its task checks when the minima ask for more than minMember.
        (
            {"minTaskMember": {"worker": 4, "ps": 1}},
            [
                "spec.minTaskMember is not enforced: its minima sum to 5, more than "
                "spec.minMember (4), and Volcano then skips its task checks too"
            ],
        ),
        ({"minTaskMember": {"worker": 3, "ps": 1}}, []),
        # Volcano's subgroups: their levels are placed, their gang minima are said not to be.
        (
            {"subGroupPolicy": [partition_policy(minSubGroups=2)]},
            [
                "spec.subGroupPolicy[0].minSubGroups (2) not enforced: the gang's quorum is "
                "spec.minMember and spec.minTaskMember (each subgroup's network topology is)"
            ],
        ),
        (
            {"subGroupPolicy": [partition_policy(matchLabelKeys=None)]},
            [
                'spec.subGroupPolicy[0] ("worker") has no matchLabelKeys: Volcano groups no pod '
                "by it, so neither does Phalanx"
            ],
        ),
        ({"subGroupPolicy": [partition_policy(minSubGroups=0)]}, []),
        ({"subGroupPolicy": []}, []),
    ],
    ids=[
        "queue",
        "default-queue",
        "no-queue",
        "task-minima-over-min-member",
        "task-minima",
        "sub-group-minimum",
        "sub-group-policy-without-keys",
        "sub-group-policy",
        "no-sub-group-policy",
    ],
)
def test_what_phalanx_cannot_honour_is_a_warning_not_an_error(
    spec: dict[str, Any], warnings: list[str]
) -> None:
    obj = volcano_podgroup_obj("job", 4)
    obj["spec"].update(spec)
    parsed = volcano.parse_pod_group(obj)
    assert parsed.value.min_member == 4
    assert len(parsed.warnings) == len(warnings)
    for said, expected in zip(parsed.warnings, warnings, strict=True):
        assert said.startswith(expected)


def test_min_task_member_gives_the_gang_its_task_minima_sorted_without_zeros() -> None:
    obj = volcano_podgroup_obj("mpi", 3, min_task_member={"worker": 2, "master": 1, "ps": 0})
    parsed = volcano.parse_pod_group(obj)
    assert parsed.warnings == ()
    assert parsed.value.min_task_member == (("master", 1), ("worker", 2))


def test_minima_summing_past_min_member_are_not_enforced() -> None:
    obj = volcano_podgroup_obj("mpi", 2, min_task_member={"worker": 2, "master": 1})
    assert volcano.parse_pod_group(obj).value.min_task_member == ()


def test_an_edited_min_task_member_makes_a_different_gang() -> None:
    before = volcano_podgroup_obj("mpi", 3, min_task_member={"master": 1, "worker": 2})
    after = volcano_podgroup_obj("mpi", 3, min_task_member={"master": 1, "worker": 1})
    assert volcano.parse_pod_group(before).value != volcano.parse_pod_group(after).value


@pytest.mark.parametrize(
    ("annotations", "labels", "task"),
    [
        ({"volcano.sh/task-spec": "worker"}, {}, "worker"),
        ({}, {"volcano.sh/task-spec": "worker"}, "worker"),
        ({"volcano.sh/task-spec": "master"}, {"volcano.sh/task-spec": "worker"}, "master"),
        ({}, {}, ""),
    ],
    ids=["annotation", "label", "annotation-first", "none"],
)
def test_a_pods_task_is_its_task_spec_annotation_else_its_label(
    annotations: dict[str, str], labels: dict[str, str], task: str
) -> None:
    obj = pod_obj("p", volcano_group="mpi", annotations=annotations, labels=labels)
    assert parse_pod(obj).task == task


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        (
            {"mode": "hard", "highestTierAllowed": 2},
            TopologyConstraint(required="tier:2", preferred="tier:1"),
        ),
        ({"mode": "hard", "highestTierAllowed": 1}, TopologyConstraint(required="tier:1")),
        ({"mode": "soft"}, TopologyConstraint(preferred="tier:1")),
        # Volcano reads highestTierAllowed in hard mode only: soft still starts at tier 1.
        ({"mode": "soft", "highestTierAllowed": 3}, TopologyConstraint(preferred="tier:1")),
        ({}, TopologyConstraint(required="tier:1")),
        # A Go int in Volcano's API: read, then found to be no tier of the topology.
        (
            {"highestTierAllowed": 2**40},
            TopologyConstraint(required=f"tier:{2**40}", preferred="tier:1"),
        ),
    ],
    ids=["hard", "hard-tier-1", "soft", "soft-ignores-highest-tier", "defaults", "beyond-int32"],
)
def test_network_topology_becomes_a_tier_constraint(
    topology: dict[str, Any], expected: TopologyConstraint
) -> None:
    obj = volcano_podgroup_obj("job", 4)
    obj["spec"]["networkTopology"] = topology
    assert volcano.parse_pod_group(obj).value.topology == expected


def test_sub_group_policies_place_each_subgroup_at_its_tier_every_policy_in_order() -> None:
    obj = volcano_podgroup_obj("job", 8)
    obj["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    obj["spec"]["subGroupPolicy"] = [
        partition_policy(),
        partition_policy(
            name="ps",
            labelSelector={
                "matchExpressions": [{"key": "role", "operator": "In", "values": ["ps"]}]
            },
            networkTopology={"mode": "soft"},
        ),
        partition_policy(name="rest", labelSelector=None, networkTopology=None),
    ]
    topology = volcano.parse_pod_group(obj).value.topology
    assert topology is not None
    assert (topology.required, topology.preferred) == ("tier:2", "tier:1")
    assert topology.subgroups == (
        SubGroupPolicy(
            "worker",
            match_labels=(("volcano.sh/task-spec", "worker"),),
            keys=(PARTITION,),
            required="tier:1",
        ),
        SubGroupPolicy(
            "ps",
            match_expressions=(SelectorRequirement("role", SelectorOperator.IN, ("ps",)),),
            keys=(PARTITION,),
            preferred="tier:1",
        ),
        SubGroupPolicy("rest", keys=(PARTITION,)),
    )
    assert str(topology) == (
        "required tier:2, preferred tier:1, each subgroup of policy worker in one tier:1, "
        "each subgroup of policy ps preferably in one tier:1"
    )


def test_sub_group_policies_of_no_network_topology_constrain_nothing() -> None:
    obj = volcano_podgroup_obj("job", 8)
    obj["spec"]["subGroupPolicy"] = [partition_policy(networkTopology=None)]
    assert volcano.parse_pod_group(obj).value.topology is None


def test_sub_group_policies_beside_the_slice_annotations_are_refused() -> None:
    obj = volcano_podgroup_obj("job", 8, namespace="ml")
    obj["metadata"]["annotations"] = {
        "phalanx.io/topology-slice-size": "2",
        "phalanx.io/topology-slice-required": "nvidia.com/gpu.clique",
    }
    obj["spec"]["subGroupPolicy"] = [partition_policy()]
    with pytest.raises(InvalidObjectError) as raised:
        volcano.parse_pod_group(obj)
    assert str(raised.value).startswith(
        "PodGroup ml/job: spec.subGroupPolicy: cannot be combined with the PodGroup's slices"
    )


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"minMember": 0}, "spec.minMember: must be a positive integer, not 0"),
        ({"minMember": -3}, "spec.minMember: must be a positive integer, not -3"),
        ({"minMember": None}, "spec.minMember: is required (a positive integer)"),
        ({"queue": 7}, "spec.queue: must be a string, not a number"),
        (
            {"networkTopology": {"mode": "strict"}},
            'spec.networkTopology.mode: "strict" is not hard or soft',
        ),
        (
            {"networkTopology": {"highestTierAllowed": 0}},
            "spec.networkTopology.highestTierAllowed: must be a positive integer, not 0",
        ),
        (
            {"networkTopology": {"mode": "hard", "highestTierName": "leaf-switch"}},
            "spec.networkTopology.highestTierName: tier names are not supported: Phalanx "
            "counts tiers from its node labels (use highestTierAllowed)",
        ),
        (
            {"minResources": {"nvidia.com/gpu": "half"}},
            'spec.minResources["nvidia.com/gpu"]: "half" is not a Kubernetes quantity',
        ),
        ({"minTaskMember": ["worker"]}, "spec.minTaskMember: must be an object, not an array"),
        (
            {"minTaskMember": {"worker": -1}},
            'spec.minTaskMember["worker"]: must be a non-negative integer, not -1',
        ),
        (
            {"minTaskMember": {"worker": "2"}},
            'spec.minTaskMember["worker"]: must be an integer, not a string',
        ),
        (
            {"minTaskMember": {"worker": 2**31}},
            f'spec.minTaskMember["worker"]: must be at most {2**31 - 1} (an int32), not {2**31}',
        ),
        ({"minTaskMember": {"": 1}}, 'spec.minTaskMember[""]: a task name must not be empty'),
        (
            {"subGroupPolicy": [partition_policy(name="")]},
            "spec.subGroupPolicy[0].name: a subgroup policy needs a name",
        ),
        (
            {"subGroupPolicy": [partition_policy(), partition_policy()]},
            'spec.subGroupPolicy[1].name: "worker" names two subgroup policies',
        ),
        (
            {"subGroupPolicy": [partition_policy(subGroupSize=0)]},
            f"spec.subGroupPolicy[0].subGroupSize: must be an integer from 1 to {2**31 - 1}",
        ),
        (
            {"subGroupPolicy": [partition_policy(minSubGroups=-1)]},
            f"spec.subGroupPolicy[0].minSubGroups: must be an integer from 0 to {2**31 - 1}",
        ),
        (
            {"subGroupPolicy": [partition_policy(matchLabelKeys=["not a key"])]},
            'spec.subGroupPolicy[0].matchLabelKeys[0]: "not a key" is no label key',
        ),
        (
            {
                "subGroupPolicy": [
                    partition_policy(
                        labelSelector={"matchExpressions": [{"key": "role", "operator": "Gt"}]}
                    )
                ]
            },
            "spec.subGroupPolicy[0].labelSelector.matchExpressions[0].operator: "
            '"Gt" is not In, NotIn, Exists or DoesNotExist',
        ),
        (
            {
                "subGroupPolicy": [
                    partition_policy(
                        labelSelector={"matchExpressions": [{"key": "role", "operator": "In"}]}
                    )
                ]
            },
            "spec.subGroupPolicy[0].labelSelector.matchExpressions[0].values: "
            "operator In needs values",
        ),
        (
            {
                "subGroupPolicy": [
                    partition_policy(networkTopology={"mode": "hard", "highestTierName": "rack"})
                ]
            },
            "spec.subGroupPolicy[0].networkTopology.highestTierName: tier names are not "
            "supported: Phalanx counts tiers from its node labels (use highestTierAllowed)",
        ),
        ({"subGroupPolicy": {"name": "worker"}}, "spec.subGroupPolicy: must be a list, not"),
    ],
    ids=[
        "zero",
        "negative",
        "missing",
        "queue-type",
        "mode",
        "tier",
        "tier-name",
        "min-resources",
        "task-minima-type",
        "task-minimum-negative",
        "task-minimum-type",
        "task-minimum-beyond-int32",
        "task-name-empty",
        "sub-group-policy-unnamed",
        "sub-group-policies-of-one-name",
        "sub-group-size-zero",
        "min-sub-groups-negative",
        "match-label-key",
        "selector-operator",
        "selector-values",
        "sub-group-tier-name",
        "sub-group-policy-type",
    ],
)
def test_an_invalid_pod_group_is_an_error_naming_the_field(
    spec: dict[str, Any], error: str
) -> None:
    obj = volcano_podgroup_obj("job", 4, namespace="ml")
    obj["spec"].update(spec)
    with pytest.raises(InvalidObjectError) as raised:
        volcano.parse_pod_group(obj)
    assert str(raised.value).startswith(f"PodGroup ml/job: {error}")


def test_an_edited_min_member_makes_a_different_gang() -> None:
    before = volcano.parse_pod_group(volcano_podgroup_obj("job", 4)).value
    after = volcano.parse_pod_group(volcano_podgroup_obj("job", 3)).value
    running = volcano.parse_pod_group(
        volcano_podgroup_obj("job", 4, status={"phase": "Running", "running": 4})
    ).value
    assert before != after
    assert before == running


# --- status ----------------------------------------------------------------------------

NOW = "2026-01-01T00:00:00Z"
EARLIER = "2025-12-31T00:00:00Z"


def gang(phase: GroupPhase, reason: str = "", message: str = "", **counts: int) -> GroupStatus:
    return GroupStatus(
        GroupRef("ml", "job", Dialect.VOLCANO),
        phase,
        counts.get("scheduled", 0),
        counts.get("running", 0),
        reason,
        message,
        succeeded=counts.get("succeeded", 0),
        failed=counts.get("failed", 0),
    )


def cond(kind: str, reason: str, message: str, at: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def body(phase: str, *conditions: dict[str, str], **counts: int) -> dict[str, Any]:
    return {
        "phase": phase,
        "running": counts.get("running", 0),
        "succeeded": counts.get("succeeded", 0),
        "failed": counts.get("failed", 0),
        "conditions": list(conditions),
    }


@pytest.mark.parametrize(
    ("status", "previous", "expected"),
    [
        pytest.param(
            gang(GroupPhase.PENDING, "waiting-for-members", "waiting for gang members: 0/4 exist"),
            {"phase": "Pending"},
            body(
                "Inqueue",
                cond("Unschedulable", "NotEnoughTasks", "waiting for gang members: 0/4 exist", NOW),
            ),
            id="admitted-at-once",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "no node has 8 free GPUs"),
            {"conditions": [cond("Unschedulable", "NotEnoughTasks", "3/4", EARLIER)]},
            body(
                "Inqueue",
                cond("Unschedulable", "NotEnoughResources", "no node has 8 free GPUs", EARLIER),
            ),
            id="unfit-keeps-time",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "invalid", "phalanx.io/plan is not JSON"),
            None,
            body("Inqueue", cond("Unschedulable", "Invalid", "phalanx.io/plan is not JSON", NOW)),
            id="invalid",
        ),
        pytest.param(
            gang(GroupPhase.SCHEDULED, "bound", "bound", scheduled=4),
            {
                "conditions": [
                    cond("Unschedulable", "NotEnoughResources", "x", EARLIER),
                    cond("Evicted", "PodFailed", "y", EARLIER),
                ]
            },
            body(
                "Running",
                cond("Evicted", "PodFailed", "y", EARLIER),
                cond("Scheduled", "Scheduled", "", NOW),
            ),
            id="placed-drops-unschedulable",
        ),
        pytest.param(
            gang(GroupPhase.RUNNING, running=3, succeeded=1, scheduled=4),
            {"conditions": [cond("Scheduled", "Scheduled", "", EARLIER)]},
            body("Running", cond("Scheduled", "Scheduled", "", EARLIER), running=3, succeeded=1),
            id="running-counts",
        ),
        pytest.param(
            gang(GroupPhase.FINISHED, succeeded=4, scheduled=4),
            {"conditions": [cond("Scheduled", "Scheduled", "", EARLIER)]},
            body("Completed", cond("Scheduled", "Scheduled", "", EARLIER), succeeded=4),
            id="finished-is-completed",
        ),
    ],
)
def test_status_speaks_volcano(
    status: GroupStatus, previous: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    assert volcano.build_status(status, previous, T0) == expected


@pytest.mark.parametrize("phase", [GroupPhase.PENDING, GroupPhase.PRE_SCHEDULING])
def test_a_gang_nothing_was_decided_about_yet_is_admitted_without_an_unschedulable_condition(
    phase: GroupPhase,
) -> None:
    # Volcano's job controller turns every Unschedulable condition into a warning Event:
    # a job just created must get Inqueue (to create its pods), not a warning with no text.
    kept = cond("Evicted", "PodFailed", "y", EARLIER)
    built = volcano.build_status(gang(phase), {"conditions": [kept]}, T0)
    assert built == body("Inqueue", kept)


def test_no_phase_leaves_a_volcano_job_without_pods() -> None:
    """Volcano's job controller creates pods only once the PodGroup has left Pending."""
    phases = {volcano.build_status(gang(phase), None, T0)["phase"] for phase in GroupPhase}
    assert "Pending" not in phases
    assert phases <= {"Inqueue", "Running", "Unknown", "Completed"}
