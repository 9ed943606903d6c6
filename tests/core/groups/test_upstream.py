"""Upstream scheduling.k8s.io gangs: Workload v1alpha1 (1.35) and PodGroup (1.36+)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from builders import pod_obj, upstream_podgroup_obj, workload_obj
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import upstream
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.inventory import parse_pod
from phalanx.core.model import (
    Dialect,
    DisruptionMode,
    GroupRef,
    MemberRules,
    Placement,
    PodClaimRef,
    PodGroup,
    PolicyKind,
    TopologyConstraint,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

# --- pods ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "ref", "key"),
    [
        (
            {"scheduling_group": "gang-0"},
            GroupRef("ml", "gang-0", Dialect.UPSTREAM),
            "upstream:ml/gang-0",
        ),
        (
            {"workload_ref": {"name": "training-job", "podGroup": "workers"}},
            GroupRef("ml", "training-job", Dialect.UPSTREAM, "workers"),
            "upstream:ml/training-job/workers",
        ),
        (
            {
                "workload_ref": {
                    "name": "lws",
                    "podGroup": "group",
                    "podGroupReplicaKey": "1",
                }
            },
            GroupRef("ml", "lws", Dialect.UPSTREAM, "group", "1"),
            "upstream:ml/lws/group/1",
        ),
    ],
    ids=["scheduling-group", "workload-ref", "workload-ref-replica"],
)
def test_the_spec_field_names_the_upstream_gang(
    fields: dict[str, Any], ref: GroupRef, key: str
) -> None:
    pod = parse_pod(pod_obj("w-0", namespace="ml", **fields))
    assert (pod.group, pod.group_dialect, pod.invalid) == (ref, Dialect.UPSTREAM, "")
    assert ref.key == key


def test_replicas_of_one_workload_pod_group_are_distinct_gangs() -> None:
    refs = {
        parse_pod(
            pod_obj(
                f"w-{replica}",
                workload_ref={"name": "lws", "podGroup": "group", "podGroupReplicaKey": replica},
            )
        ).group
        for replica in ("0", "1")
    }
    assert len(refs) == 2
    assert {ref.object_ref for ref in refs if ref} == {GroupRef("default", "lws", Dialect.UPSTREAM)}


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"schedulingGroup": {}}, "spec.schedulingGroup.podGroupName: is required"),
        ({"schedulingGroup": "gang-0"}, "spec.schedulingGroup: must be an object, not a string"),
        ({"workloadRef": {"podGroup": "workers"}}, "spec.workloadRef.name: is required"),
        ({"workloadRef": {"name": "job"}}, "spec.workloadRef.podGroup: is required"),
        (
            {"schedulingGroup": {"podGroupName": "a"}, "workloadRef": {"name": "b"}},
            "spec.workloadRef: must not be set together with spec.schedulingGroup",
        ),
    ],
    ids=["no-name", "not-an-object", "ref-no-name", "ref-no-pod-group", "both"],
)
def test_a_malformed_spec_field_is_an_error_naming_it(spec: dict[str, Any], error: str) -> None:
    obj = pod_obj("w-0", namespace="ml")
    obj["spec"].update(spec)
    with pytest.raises(InvalidObjectError) as raised:
        parse_pod(obj)
    assert str(raised.value) == f"Pod ml/w-0: {error}"


NAME_FORM = '(lower-case letters, digits, "-" and ".")'
LABEL_FORM = '(lower-case letters, digits and "-", at most 63)'


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            {"schedulingGroup": {"podGroupName": "a/b"}},
            f'spec.schedulingGroup.podGroupName: "a/b" is not a valid PodGroup name {NAME_FORM}',
        ),
        (
            {"schedulingGroup": {"podGroupName": "Train_0"}},
            'spec.schedulingGroup.podGroupName: "Train_0" is not a valid PodGroup name '
            f"{NAME_FORM}",
        ),
        (
            {"workloadRef": {"name": "job/x", "podGroup": "workers"}},
            f'spec.workloadRef.name: "job/x" is not a valid Workload name {NAME_FORM}',
        ),
        (
            {"workloadRef": {"name": "job", "podGroup": "workers/0"}},
            f'spec.workloadRef.podGroup: "workers/0" is not a valid pod group name {LABEL_FORM}',
        ),
        (
            {"workloadRef": {"name": "job", "podGroup": "workers", "podGroupReplicaKey": "r.1"}},
            f'spec.workloadRef.podGroupReplicaKey: "r.1" is not a valid replica key {LABEL_FORM}',
        ),
    ],
    ids=["slash", "not-lower-case", "workload-slash", "pod-group-slash", "replica-dot"],
)
def test_a_name_no_object_could_have_marks_the_pod_invalid_naming_the_field(
    spec: dict[str, Any], problem: str
) -> None:
    # "a/b" would otherwise be keyed upstream:ml/a/b, the key of Workload a's pod group b.
    obj = pod_obj("w-0", namespace="ml")
    obj["spec"].update(spec)
    pod = parse_pod(obj)
    assert (pod.group, pod.group_dialect, pod.invalid) == (None, Dialect.UPSTREAM, problem)


# --- PodGroup (v1alpha2, v1alpha3, v1beta1) --------------------------------------------


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha3", "v1alpha2"])
def test_a_pod_group_gives_min_count_and_its_key(version: str) -> None:
    group = upstream.parse_pod_group(
        upstream_podgroup_obj("gang-0", 8, namespace="ml", version=version)
    )
    assert group == PodGroup(
        namespace="ml",
        name="gang-0",
        min_member=8,
        timeout_declared=False,
        uid="upg-ml-gang-0",
        dialect=Dialect.UPSTREAM,
        member_rules=MemberRules("1.36" if version == "v1alpha2" else "1.37"),
    )
    assert group.key == "upstream:ml/gang-0"


def test_a_topology_constraint_keeps_every_member_in_one_domain() -> None:
    group = upstream.parse_pod_group(
        upstream_podgroup_obj("gang-0", 4, topology_key="topology.kubernetes.io/rack")
    )
    # Upstream accepts any node label there, not only a configured level.
    assert group.topology == TopologyConstraint(
        required="topology.kubernetes.io/rack", any_label=True
    )
    assert group.placement is None  # the required level is a topology constraint, not a policy


def test_phalanx_annotations_on_the_pod_group_are_read_beside_its_topology() -> None:
    group = upstream.parse_pod_group(
        upstream_podgroup_obj(
            "gang-0",
            4,
            topology_key="topology.kubernetes.io/rack",
            annotations={
                "phalanx.io/placement": "interconnect-local",
                "phalanx.io/schedule-timeout-seconds": "300",
            },
        )
    )
    assert group.placement == Placement(PolicyKind.INTERCONNECT_LOCAL)
    assert group.topology == TopologyConstraint(
        required="topology.kubernetes.io/rack", any_label=True
    )
    assert group.timeout_seconds == 300


def test_a_basic_pod_group_is_no_gang() -> None:
    group = upstream.parse_pod_group(upstream_podgroup_obj("basic-group-0", None))
    assert (group.basic, group.min_member) == (True, 1)


@pytest.mark.parametrize(
    ("mode", "read"),
    [("single", DisruptionMode.SINGLE), ("all", DisruptionMode.ALL), (None, DisruptionMode.SINGLE)],
    ids=["single", "all", "unset-is-single"],
)
def test_a_pod_group_reads_its_disruption_mode(mode: str | None, read: DisruptionMode) -> None:
    obj = upstream_podgroup_obj("gang-0", 4, disruption_mode=mode)
    assert upstream.parse_pod_group(obj).disruption_mode is read


@pytest.mark.parametrize(
    ("union", "error"),
    [
        ({"single": {}, "all": {}}, "spec.disruptionMode: exactly one of single, all is required"),
        ({"sometimes": {}}, 'spec.disruptionMode: "sometimes" is not a disruption mode'),
        ({"all": {}, "x": {}}, 'spec.disruptionMode: "x" is not a disruption mode'),
        ({"all": True}, "spec.disruptionMode.all: must be an object, not a boolean"),
        ("all", "spec.disruptionMode: must be an object, not a string"),
    ],
    ids=["both", "unknown-member", "unknown-beside-all", "member-not-object", "not-an-object"],
)
def test_a_malformed_disruption_mode_refuses_the_pod_group_naming_the_field(
    union: object, error: str
) -> None:
    obj = upstream_podgroup_obj("gang-0", 2, namespace="ml")
    obj["spec"]["disruptionMode"] = union
    with pytest.raises(InvalidObjectError) as raised:
        upstream.parse_pod_group(obj)
    assert str(raised.value).startswith(f"PodGroup ml/gang-0: {error}")


@pytest.mark.parametrize(
    ("mode", "read"),
    [
        ("Pod", DisruptionMode.SINGLE),
        ("PodGroup", DisruptionMode.ALL),
        (None, DisruptionMode.SINGLE),
    ],
    ids=["pod", "pod-group", "unset-is-pod"],
)
def test_a_v1alpha2_pod_group_reads_its_disruption_mode_as_a_string(
    mode: str | None, read: DisruptionMode
) -> None:
    """1.36's API server defaults the field to `Pod` on every PodGroup it serves."""
    obj = upstream_podgroup_obj("gang-0", 4, version="v1alpha2", disruption_mode=None)
    if mode is not None:
        obj["spec"]["disruptionMode"] = mode
    assert upstream.parse_pod_group(obj).disruption_mode is read


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("all", 'spec.disruptionMode: "all" is not a disruption mode (Pod or PodGroup)'),
        ({"all": {}}, "spec.disruptionMode: must be a string, not an object"),
    ],
    ids=["later-versions-word", "later-versions-union"],
)
def test_a_v1alpha2_disruption_mode_in_another_shape_refuses_the_pod_group(
    mode: object, error: str
) -> None:
    obj = upstream_podgroup_obj("gang-0", 2, namespace="ml", version="v1alpha2")
    obj["spec"]["disruptionMode"] = mode
    with pytest.raises(InvalidObjectError) as raised:
        upstream.parse_pod_group(obj)
    assert str(raised.value).startswith(f"PodGroup ml/gang-0: {error}")


def test_the_disruption_mode_is_no_plan_setting() -> None:
    """It matters to preemption only: reading another mode re-plans nothing."""
    single = upstream.parse_pod_group(upstream_podgroup_obj("gang-0", 4))
    every = upstream.parse_pod_group(upstream_podgroup_obj("gang-0", 4, disruption_mode="all"))
    assert single == every


def test_a_changed_min_count_makes_a_different_gang_and_status_does_not() -> None:
    """v1beta1 minCount is mutable: the planner sees the change by equality."""
    before = upstream_podgroup_obj("gang-0", 4)
    scaled = copy.deepcopy(before)
    scaled["spec"]["schedulingPolicy"]["gang"]["minCount"] = 6
    scaled["metadata"]["generation"] = 2
    observed = copy.deepcopy(before)
    observed["metadata"]["resourceVersion"] = "88"
    observed["status"] = {
        "conditions": [
            {
                "type": "PodGroupInitiallyScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "waiting",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    parse = upstream.parse_pod_group
    assert parse(before) != parse(scaled)
    assert parse(scaled).min_member == 6
    assert parse(before) == parse(observed)


@pytest.mark.parametrize(
    ("policy", "constraints", "error"),
    [
        ({"gang": {"minCount": 0}}, None, "spec.schedulingPolicy.gang.minCount: " + "{}"),
        ({"gang": {"minCount": -2}}, None, "spec.schedulingPolicy.gang.minCount: " + "{}"),
        (
            {"gang": {}},
            None,
            "spec.schedulingPolicy.gang.minCount: is required (a positive integer)",
        ),
        (
            {"gang": {"minCount": "4"}},
            None,
            "spec.schedulingPolicy.gang.minCount: must be an integer, not a string",
        ),
        ({}, None, "spec.schedulingPolicy: exactly one of basic, gang is required"),
        (
            {"basic": {}, "gang": {"minCount": 2}},
            None,
            "spec.schedulingPolicy: exactly one of basic, gang is required",
        ),
        (
            {"gang": {"minCount": 2}},
            {"topology": [{"key": "rack"}, {"key": "zone"}]},
            "spec.schedulingConstraints.topology: must have at most 1 item, not 2",
        ),
        (
            {"gang": {"minCount": 2}},
            {"topology": [{"key": "Not A Label"}]},
            'spec.schedulingConstraints.topology[0].key: "Not A Label" is not a node label key',
        ),
        (
            {"gang": {"minCount": 2}},
            {"topology": [{}]},
            "spec.schedulingConstraints.topology[0].key: is required",
        ),
    ],
    ids=[
        "min-count-zero",
        "min-count-negative",
        "min-count-missing",
        "min-count-string",
        "no-policy",
        "two-policies",
        "two-topologies",
        "bad-topology-key",
        "no-topology-key",
    ],
)
def test_an_invalid_pod_group_is_an_error_naming_the_field(
    policy: dict[str, Any], constraints: dict[str, Any] | None, error: str
) -> None:
    obj = upstream_podgroup_obj("gang-0", 2, namespace="ml")
    obj["spec"]["schedulingPolicy"] = policy
    if constraints is not None:
        obj["spec"]["schedulingConstraints"] = constraints
    count = policy.get("gang", {}).get("minCount")
    expected = error.format(f"must be a positive integer, not {count}")
    with pytest.raises(InvalidObjectError) as raised:
        upstream.parse_pod_group(obj)
    assert str(raised.value) == f"PodGroup ml/gang-0: {expected}"


def test_a_pod_group_reads_the_claims_its_members_share() -> None:
    obj = upstream_podgroup_obj("gang-0", 2, namespace="ml", version="v1alpha3")
    obj["spec"]["resourceClaims"] = [
        {"name": "imex", "resourceClaimTemplateName": "channel"},
        {"name": "scratch", "resourceClaimName": "team-scratch"},
        {"name": "spare", "resourceClaimTemplateName": "channel"},
        {"name": "none", "resourceClaimTemplateName": "empty"},
    ]
    obj["status"] = {
        "resourceClaimStatuses": [
            {"name": "imex", "resourceClaimName": "gang-0-imex-7xk2p"},
            {"name": "none"},
        ]
    }
    assert upstream.parse_pod_group(obj).resource_claims == (
        PodClaimRef("imex", claim="gang-0-imex-7xk2p", template="channel"),
        PodClaimRef("scratch", claim="team-scratch"),
        PodClaimRef("spare", template="channel"),  # not generated yet
        PodClaimRef("none", template="empty", not_needed=True),
    )
    assert upstream.parse_pod_group(upstream_podgroup_obj("gang-1", 2)).resource_claims == ()


BAD_CLAIMS = [
    (
        "both",
        [{"name": "a", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}],
        None,
        "spec.resourceClaims[0]: must set exactly one of resourceClaimName and "
        "resourceClaimTemplateName",
    ),
    (
        "neither",
        [{"name": "a"}],
        None,
        "spec.resourceClaims[0]: must set exactly one of resourceClaimName and "
        "resourceClaimTemplateName",
    ),
    (
        "no-name",
        [{"resourceClaimName": "c"}],
        None,
        "spec.resourceClaims[0].name: is required",
    ),
    (
        "not-a-label",
        [{"name": "GPU_0", "resourceClaimName": "c"}],
        None,
        f'spec.resourceClaims[0].name: "GPU_0" is not a valid claim name {LABEL_FORM}',
    ),
    (
        "twice",
        [{"name": "a", "resourceClaimName": "c"}, {"name": "a", "resourceClaimName": "d"}],
        None,
        'spec.resourceClaims[1].name: "a" is listed twice',
    ),
    (
        "five",
        [{"name": f"c{i}", "resourceClaimName": f"c{i}"} for i in range(5)],
        None,
        "spec.resourceClaims: must have at most 4 items, not 5",
    ),
    (
        "not-a-list",
        {"name": "a"},
        None,
        "spec.resourceClaims: must be a list, not an object",
    ),
    (
        "status-name-not-a-string",
        [{"name": "a", "resourceClaimTemplateName": "t"}],
        [{"name": "a", "resourceClaimName": 7}],
        "status.resourceClaimStatuses[0].resourceClaimName: must be a string, not a number",
    ),
]


@pytest.mark.parametrize(
    ("case", "claims", "statuses", "error"), BAD_CLAIMS, ids=[b[0] for b in BAD_CLAIMS]
)
def test_a_malformed_resource_claim_of_a_pod_group_is_an_error_naming_the_field(
    case: str, claims: object, statuses: object, error: str
) -> None:
    obj = upstream_podgroup_obj("gang-0", 2, namespace="ml")
    obj["spec"]["resourceClaims"] = claims
    if statuses is not None:
        obj["status"] = {"resourceClaimStatuses": statuses}
    with pytest.raises(InvalidObjectError) as raised:
        upstream.parse_pod_group(obj)
    assert str(raised.value) == f"PodGroup ml/gang-0: {error}"


# --- Workload (v1alpha1) ---------------------------------------------------------------


def test_a_workload_names_a_gang_per_pod_group_and_replica() -> None:
    workload = upstream.parse_workload(
        workload_obj("training-job", {"driver": None, "workers": 4}, namespace="ml")
    )
    ref = GroupRef("ml", "training-job", Dialect.UPSTREAM, "workers", "2")
    gang = upstream.gang_of(workload, ref)
    assert gang == PodGroup(
        namespace="ml",
        name="training-job",
        min_member=4,
        timeout_declared=False,
        uid="wl-ml-training-job",
        dialect=Dialect.UPSTREAM,
        pod_group="workers",
        replica="2",
    )
    assert isinstance(gang, PodGroup)
    assert gang.key == ref.key == "upstream:ml/training-job/workers/2"
    driver = upstream.gang_of(workload, GroupRef("ml", "training-job", Dialect.UPSTREAM, "driver"))
    assert isinstance(driver, PodGroup)
    assert driver.basic


def test_a_workload_without_the_named_pod_group_is_an_invalid_reference() -> None:
    workload = upstream.parse_workload(workload_obj("job", {"workers": 4, "ps": 2}, namespace="ml"))
    assert upstream.gang_of(workload, GroupRef("ml", "job", Dialect.UPSTREAM, "worker")) == (
        'Workload ml/job has no pod group "worker" (spec.podGroups has "workers", "ps"); '
        "pods name it in spec.workloadRef.podGroup"
    )


@pytest.mark.parametrize(
    ("pod_groups", "error"),
    [
        (
            [{"name": "workers", "policy": {"gang": {"minCount": 0}}}],
            "spec.podGroups[0].policy.gang.minCount: must be a positive integer, not 0",
        ),
        (
            [
                {"name": "ps", "policy": {"basic": {}}},
                {"name": "workers", "policy": {"gang": {"minCount": -1}}},
            ],
            "spec.podGroups[1].policy.gang.minCount: must be a positive integer, not -1",
        ),
        (
            [{"name": "workers", "policy": {}}],
            "spec.podGroups[0].policy: exactly one of basic, gang is required",
        ),
        (
            [
                {"name": "workers", "policy": {"basic": {}}},
                {"name": "workers", "policy": {"basic": {}}},
            ],
            'spec.podGroups[1].name: "workers" is listed twice',
        ),
        ([], "spec.podGroups: must have at least one item"),
        ([{"policy": {"basic": {}}}], "spec.podGroups[0].name: is required"),
    ],
    ids=["zero", "negative", "no-policy", "duplicate", "none", "unnamed"],
)
def test_an_invalid_workload_is_an_error_naming_the_field(
    pod_groups: list[dict[str, Any]], error: str
) -> None:
    obj = workload_obj("job", {}, namespace="ml")
    obj["spec"]["podGroups"] = pod_groups
    with pytest.raises(InvalidObjectError) as raised:
        upstream.parse_workload(obj)
    assert str(raised.value) == f"Workload ml/job: {error}"


# --- status ----------------------------------------------------------------------------

REF = GroupRef("ml", "gang-0", Dialect.UPSTREAM)


def gang(
    phase: GroupPhase, reason: str = "", message: str = "", ref: GroupRef = REF
) -> GroupStatus:
    return GroupStatus(ref, phase, 0, 0, reason, message)


def cond(
    state: str, reason: str, message: str, at: str, kind: str = "PodGroupInitiallyScheduled"
) -> dict[str, str]:
    return {
        "type": kind,
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


EARLIER = "2025-12-31T00:00:00Z"
NOW = "2026-01-01T00:00:00Z"
DISRUPTION = cond("True", "PreemptionByScheduler", "preempted", EARLIER, "DisruptionTarget")


@pytest.mark.parametrize(
    ("status", "previous", "version", "body"),
    [
        pytest.param(
            gang(GroupPhase.PENDING, "waiting-for-members", "waiting for gang members: 1/4 exist"),
            None,
            "v1beta1",
            {
                "conditions": [
                    cond("False", "Unschedulable", "waiting for gang members: 1/4 exist", NOW)
                ]
            },
            id="waits",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "no node has 8 free GPUs"),
            {"conditions": [cond("False", "Unschedulable", "1/4 exist", EARLIER)]},
            "v1beta1",
            {"conditions": [cond("False", "Unschedulable", "no node has 8 free GPUs", EARLIER)]},
            id="still-waits-keeps-time",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "invalid", "phalanx.io/plan is not JSON"),
            None,
            "v1beta1",
            {"conditions": [cond("False", "SchedulerError", "phalanx.io/plan is not JSON", NOW)]},
            id="invalid",
        ),
        pytest.param(
            gang(GroupPhase.SCHEDULED, "bound", "4 members bound"),
            {"conditions": [DISRUPTION, cond("False", "Unschedulable", "1/4", EARLIER)]},
            "v1beta1",
            {"conditions": [DISRUPTION, cond("True", "Scheduled", "4 members bound", NOW)]},
            id="placed-keeps-others",
        ),
        pytest.param(
            gang(GroupPhase.PENDING, "waiting-for-members", "1/4 exist"),
            None,
            "v1alpha2",
            {"conditions": [cond("False", "Unschedulable", "1/4 exist", NOW, "PodGroupScheduled")]},
            id="v1alpha2-type",
        ),
    ],
)
def test_status_is_the_initially_scheduled_condition(
    status: GroupStatus, previous: dict[str, Any] | None, version: str, body: dict[str, Any]
) -> None:
    assert upstream.build_status(status, previous, T0, version) == body


@pytest.mark.parametrize(
    ("status", "previous"),
    [
        (
            gang(GroupPhase.PENDING, "waiting-for-members", "1/4 exist"),
            {"conditions": [cond("True", "Scheduled", "", EARLIER)]},
        ),
        (
            gang(GroupPhase.PENDING, "waiting-for-members", "1/4 exist"),
            {"conditions": [cond("False", "Unschedulable", "1/4 exist", EARLIER)]},
        ),
        (
            gang(
                GroupPhase.PENDING,
                "waiting-for-members",
                ref=GroupRef("ml", "job", Dialect.UPSTREAM, "workers"),
            ),
            None,
        ),
    ],
    ids=["true-is-terminal", "unchanged", "workload-has-no-status"],
)
def test_nothing_is_written_when_there_is_nothing_new(
    status: GroupStatus, previous: dict[str, Any] | None
) -> None:
    assert upstream.build_status(status, previous, T0, "v1beta1") is None


@pytest.mark.parametrize("phase", [GroupPhase.PENDING, GroupPhase.PRE_SCHEDULING])
def test_a_gang_nothing_was_decided_about_yet_is_not_called_unschedulable(
    phase: GroupPhase,
) -> None:
    # A PodGroup just seen (no member filtered yet): kube-scheduler, too, writes the
    # condition only once it has tried; "Unschedulable" with no message would be a false alarm.
    assert upstream.build_status(gang(phase), None, T0, "v1beta1") is None


def test_a_topology_annotation_that_contradicts_the_spec_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidObjectError, match=r"spec\.schedulingConstraints\.topology") as e:
        upstream.parse_pod_group(
            upstream_podgroup_obj(
                "gang-0",
                4,
                topology_key="topology.kubernetes.io/rack",
                annotations={
                    "phalanx.io/topology-required": "nvidia.com/gpu.clique",
                    "phalanx.io/topology-preferred": "kubernetes.io/hostname",
                },
            )
        )
    assert "required topology.kubernetes.io/rack" in str(e.value)
    assert "required nvidia.com/gpu.clique" in str(e.value)


LEAF = "network.topology.nvidia.com/leaf"
CLIQUE = "nvidia.com/gpu.clique"


@pytest.mark.parametrize(
    "annotations",
    [
        {"phalanx.io/topology-preferred": CLIQUE},
        {"phalanx.io/topology-required": LEAF, "phalanx.io/topology-preferred": CLIQUE},
    ],
    ids=["preferred", "preferred-repeating-required"],
)
def test_a_preferred_annotation_adds_a_narrower_level_to_the_spec_s_topology_key(
    annotations: dict[str, str],
) -> None:
    group = upstream.parse_pod_group(
        upstream_podgroup_obj("gang-0", 4, topology_key=LEAF, annotations=annotations)
    )
    assert group.topology == TopologyConstraint(required=LEAF, preferred=CLIQUE, any_label=True)


def test_slice_annotations_add_slices_inside_the_spec_s_topology_key() -> None:
    slices = {"phalanx.io/topology-slice-size": "2", "phalanx.io/topology-slice-required": CLIQUE}
    group = upstream.parse_pod_group(
        upstream_podgroup_obj("gang-0", 4, topology_key=LEAF, annotations=slices)
    )
    assert group.topology == TopologyConstraint(
        required=LEAF, slice_size=2, slice_required=CLIQUE, any_label=True
    )


def test_a_topology_annotation_that_agrees_with_the_spec_keeps_the_fields_reading() -> None:
    group = upstream.parse_pod_group(
        upstream_podgroup_obj(
            "gang-0",
            4,
            topology_key="topology.kubernetes.io/zone",
            annotations={"phalanx.io/topology-required": "topology.kubernetes.io/zone"},
        )
    )
    assert group.topology == TopologyConstraint(
        required="topology.kubernetes.io/zone", any_label=True
    )


def test_a_timeout_annotation_beyond_int32_on_the_pod_group_is_refused_naming_it() -> None:
    """The annotation stands in for an int32 field: 10^17 s would hold a reservation for ever."""
    obj = upstream_podgroup_obj(
        "gang-0", 4, annotations={"phalanx.io/schedule-timeout-seconds": "100000000000000000"}
    )
    with pytest.raises(InvalidObjectError) as refused:
        upstream.parse_pod_group(obj)
    assert (
        'metadata.annotations["phalanx.io/schedule-timeout-seconds"]: "100000000000000000" is '
        "more than 2147483647, the largest an int32 API field holds"
    ) in str(refused.value)
