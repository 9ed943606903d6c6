"""The plugin's views: gangs found as Phalanx finds them, their state, why they wait."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from builders import (
    composite_obj,
    event_obj,
    grove_pod_obj,
    grove_podgang_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    lease_obj,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.rollforward import COMMIT_ANNOTATION, CommitRecord, encode_commit_record
from phalanx.kubectl.views import (
    GangState,
    GangView,
    collect_gangs,
    gang_events,
    lease_view,
    wait_of,
)
from phalanx.kubectl.views import age as age_of

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def record(group: str, placements: dict[str, str], at: str = "2026-01-01T11:59:00Z") -> str:
    uids = {pod: f"uid-{pod.replace('/', '-')}" for pod in placements}
    return encode_commit_record(CommitRecord(group, placements, uids), at)


def members(group: str, bound: int, total: int, **kw: Any) -> list[dict[str, Any]]:
    return [
        pod_obj(f"{group}-{i}", group=group, node=f"n{i}" if i < bound else "", **kw)
        for i in range(total)
    ]


def one_gang(pod_groups: list[dict[str, Any]], pods: list[dict[str, Any]]) -> GangView:
    gangs, skipped = collect_gangs(pod_groups, pods)
    assert not skipped
    (gang,) = gangs
    return gang


# ---- state -------------------------------------------------------------------------------------

COMMIT = {COMMIT_ANNOTATION: record("default/g", {"default/g-0": "n0", "default/g-1": "n1"})}
STATES = [
    ("nothing-bound", {}, None, 0, GangState.WAITING),
    ("quorum-bound", {}, None, 2, GangState.WHOLE),
    ("bindings-in-flight", COMMIT, None, 1, GangState.BINDING),
    ("bound-short-of-quorum-without-a-record", {}, None, 1, GangState.PARTIAL),
    ("members-finished-after-it-ran", {}, {"phase": "Running"}, 1, GangState.WAITING),
    ("a-member-failed-after-it-ran", {}, {"phase": "Failed"}, 1, GangState.WAITING),
    ("finished-and-partly-cleaned-up", {}, {"phase": "Finished"}, 1, GangState.WAITING),
    ("reserved-at-the-barrier", {}, {"phase": "Scheduling"}, 0, GangState.RESERVED),
    (
        "unreadable-record-is-no-record",
        {COMMIT_ANNOTATION: "{"},
        None,
        1,
        GangState.PARTIAL,
    ),
]


@pytest.mark.parametrize(
    ("annotations", "status", "bound", "state"),
    [s[1:] for s in STATES],
    ids=[s[0] for s in STATES],
)
def test_a_gangs_state_follows_its_bindings_its_record_and_its_past(
    annotations: dict[str, str], status: dict[str, Any] | None, bound: int, state: GangState
) -> None:
    group = podgroup_obj("g", 2, annotations=annotations, status=status)
    gang = one_gang([group], members("g", bound, 2))
    assert (gang.bound, gang.state) == (bound, state)


def test_an_annotation_only_gang_takes_its_quorum_and_newest_record_from_its_pods() -> None:
    notes = {"phalanx.io/pod-group": "a", "phalanx.io/min-member": "2"}
    old = record("default/a", {"default/a-0": "n1", "default/a-1": "n1"}, "2026-01-01T10:00:00Z")
    new = record("default/a", {"default/a-0": "n2", "default/a-1": "n2"}, "2026-01-01T11:00:00Z")
    pods = [
        pod_obj("a-0", annotations={**notes, COMMIT_ANNOTATION: old}),
        pod_obj("a-1", annotations={**notes, COMMIT_ANNOTATION: new}),
    ]
    gang = one_gang([], pods)
    assert (gang.key, gang.source, gang.min_member) == ("default/a", "annotations", 2)
    assert gang.commit is not None
    assert set(gang.commit.placements.values()) == {"n2"}
    assert gang.state is GangState.BINDING


def test_a_record_its_bindings_carried_is_in_force_only_while_a_member_it_names_is_unbound() -> (
    None
):
    text = record("default/g", {"default/g-0": "n0", "default/g-1": "n1"})
    binding = [
        pod_obj("g-0", group="g", node="n0", annotations={COMMIT_ANNOTATION: text}),
        pod_obj("g-1", group="g"),
    ]
    gang = one_gang([podgroup_obj("g", 2)], binding)
    assert gang.commit is not None
    assert gang.state is GangState.BINDING  # g-1's binding in flight, or roll-forward due

    # The gang ran whole, then g-1 finished and was deleted: g-0's copy is settled.
    ran = podgroup_obj("g", 2, status={"phase": "Running"})
    gang = one_gang([ran], binding[:1])
    assert gang.commit is None
    assert gang.state is GangState.WAITING


def test_pods_labelled_for_a_pod_group_that_does_not_exist_say_so() -> None:
    gang = one_gang([], [pod_obj("x-0", group="x")])
    assert (gang.source, gang.min_member) == ("PodGroup missing", None)
    assert gang.state is GangState.WAITING


NOTES = {"phalanx.io/pod-group": "a", "phalanx.io/min-member": "2"}
WORKERS = {"name": "w", "podGroup": "workers"}
KUEUE_LABELS = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/pod-group-name": "k"}
KUEUE_COUNT = {"kueue.x-k8s.io/pod-group-total-count": "3"}
KUEUE_GANG = ("kueue:default/k", "kueue", "annotations", 3)
LWS_LABELS = {
    "leaderworkerset.sigs.k8s.io/name": "serve",
    "leaderworkerset.sigs.k8s.io/group-index": "0",
    "leaderworkerset.sigs.k8s.io/worker-index": "0",
}
LWS_ANNOTATIONS = {
    "leaderworkerset.sigs.k8s.io/size": "2",
    "phalanx.io/leaderworkerset-gang": "true",
}
LWS_GANG = ("lws:default/serve-0", "lws", "annotations", 2)
YUNIKORN_LABELS = {"applicationId": "spark-pi"}
YUNIKORN_ANNOTATIONS = {
    "yunikorn.apache.org/task-group-name": "executor",
    "yunikorn.apache.org/task-groups": '[{"name": "executor", "minMember": 2}]',
}
YUNIKORN_GANG = ("yunikorn:default/spark-pi", "yunikorn", "annotations", 2)

# (gang objects, pods, key, dialect, source, minMember)
DIALECTS = [
    (
        [podgroup_obj("g", 2)],
        [pod_obj("g-0", group="g")],
        "default/g",
        "scheduler-plugins",
        "PodGroup",
        2,
    ),
    ([], [pod_obj("a-0", annotations=NOTES)], "default/a", "annotations", "annotations", 2),
    ([], [pod_obj("x-0", group="x")], "default/x", "scheduler-plugins", "PodGroup missing", None),
    (
        [volcano_podgroup_obj("v", 3)],
        [pod_obj("v-0", volcano_group="v")],
        "volcano:default/v",
        "volcano",
        "PodGroup",
        3,
    ),
    (
        [],
        [pod_obj("v-0", volcano_group="v")],
        "volcano:default/v",
        "volcano",
        "PodGroup missing",
        None,
    ),
    (
        [upstream_podgroup_obj("u", 4)],
        [pod_obj("u-0", scheduling_group="u")],
        "upstream:default/u",
        "upstream",
        "PodGroup",
        4,
    ),
    (
        [upstream_podgroup_obj("b", None)],
        [pod_obj("b-0", scheduling_group="b")],
        "upstream:default/b",
        "upstream",
        "PodGroup",
        None,
    ),
    (
        [workload_obj("w", {"workers": 2, "launcher": None})],
        [pod_obj("w-0", workload_ref=WORKERS)],
        "upstream:default/w/workers",
        "upstream",
        "Workload",
        2,
    ),
    (
        [],
        [pod_obj("w-0", workload_ref=WORKERS)],
        "upstream:default/w/workers",
        "upstream",
        "Workload missing",
        None,
    ),
    ([kai_podgroup_obj("t", 3)], [kai_pod_obj("t-0", "t")], "kai:default/t", "kai", "PodGroup", 3),
    (
        [grove_podgang_obj("s-0", {"prefill": 1, "decode": 2})],
        [grove_pod_obj("prefill-0", "s-0", "prefill")],
        "grove:default/s-0",
        "grove",
        "PodGang",
        3,
    ),
    ([], [pod_obj("k-0", labels=KUEUE_LABELS, annotations=KUEUE_COUNT)], *KUEUE_GANG),
    ([], [pod_obj("serve-0", labels=LWS_LABELS, annotations=LWS_ANNOTATIONS)], *LWS_GANG),
    (
        [],
        [pod_obj("exec-1", labels=YUNIKORN_LABELS, annotations=YUNIKORN_ANNOTATIONS)],
        *YUNIKORN_GANG,
    ),
]


@pytest.mark.parametrize(
    ("objects", "pods", "key", "dialect", "source", "min_member"),
    DIALECTS,
    ids=[
        "scheduler-plugins",
        "annotations",
        "scheduler-plugins-missing",
        "volcano",
        "volcano-missing",
        "upstream-pod-group",
        "upstream-basic",
        "workload",
        "workload-missing",
        "kai",
        "grove",
        "kueue",
        "lws",
        "yunikorn",
    ],
)
def test_every_dialect_keys_and_names_its_gangs_as_phalanx_does(
    objects: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    key: str,
    dialect: str,
    source: str,
    min_member: int | None,
) -> None:
    gang = one_gang(objects, pods)
    assert (gang.key, gang.dialect, gang.source, gang.min_member) == (
        key,
        dialect,
        source,
        min_member,
    )
    assert len(gang.members) == 1


def kai_serving_in_racks() -> dict[str, Any]:
    """A KAI PodGroup in one zone whose subgroups prefill and decode each need one rack."""
    group = kai_podgroup_obj("serve", 4, sub_groups={"prefill": 2, "decode": 2})
    group["spec"]["topologyConstraint"] = {"requiredTopologyLevel": "topology.kubernetes.io/zone"}
    for entry in group["spec"]["subGroups"]:
        entry["topologyConstraint"] = {"requiredTopologyLevel": "example.com/rack"}
    return group


@pytest.mark.parametrize(
    ("objects", "pods", "topology"),
    [
        (
            [upstream_podgroup_obj("job", 2, topology_key="topology.kubernetes.io/zone")],
            [pod_obj("m-0", scheduling_group="job")],
            "required topology.kubernetes.io/zone",
        ),
        (
            [podgroup_obj("job", 2)],
            [
                pod_obj(
                    "m-0",
                    group="job",
                    annotations={"phalanx.io/topology-required": "nvidia.com/gpu.clique"},
                )
            ],
            "required nvidia.com/gpu.clique",
        ),
        ([podgroup_obj("job", 2)], [pod_obj("m-0", group="job")], ""),
        (
            [kai_serving_in_racks()],
            [kai_pod_obj("serve-0", "serve", "decode")],
            "required topology.kubernetes.io/zone, subgroup(s) decode, prefill each in one "
            "example.com/rack",
        ),
    ],
    ids=["upstream-field", "member-annotations", "none", "kai-subgroups"],
)
def test_a_gangs_declared_topology_is_shown(
    objects: list[dict[str, Any]], pods: list[dict[str, Any]], topology: str
) -> None:
    assert one_gang(objects, pods).topology == topology


@pytest.mark.parametrize(
    ("objects", "pods", "mode"),
    [
        (
            [upstream_podgroup_obj("job", 2, disruption_mode="all")],
            [pod_obj("m-0", scheduling_group="job")],
            "all",
        ),
        (
            [upstream_podgroup_obj("job", 2, disruption_mode=None)],
            [pod_obj("m-0", scheduling_group="job")],
            "single",
        ),
        (
            [
                composite_obj("ray", 1, disruption_mode="all"),
                upstream_podgroup_obj("head", 1, parent="ray"),
            ],
            [pod_obj("h-0", scheduling_group="head")],
            "all",
        ),
        ([podgroup_obj("job", 2)], [pod_obj("m-0", group="job")], ""),
    ],
    ids=["upstream-all", "upstream-unset", "composite-all", "scheduler-plugins-has-none"],
)
def test_a_gangs_disruption_mode_is_shown_where_its_object_has_the_field(
    objects: list[dict[str, Any]], pods: list[dict[str, Any]], mode: str
) -> None:
    assert one_gang(objects, pods).disruption_mode == mode


def test_a_pod_group_and_a_volcano_pod_group_of_one_name_are_two_gangs() -> None:
    gangs, _ = collect_gangs(
        [podgroup_obj("job", 2), volcano_podgroup_obj("job", 3)],
        [pod_obj("sp-0", group="job"), pod_obj("vc-0", volcano_group="job")],
    )
    assert [(g.key, g.min_member, [m.name for m in g.members]) for g in gangs] == [
        ("default/job", 2, ["sp-0"]),
        ("volcano:default/job", 3, ["vc-0"]),
    ]
    assert [g.api_version for g in gangs] == [
        "scheduling.x-k8s.io/v1alpha1",
        "scheduling.volcano.sh/v1beta1",
    ]


def condition(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    at = "2026-01-01T11:59:30Z"
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


WAITING = "waiting for gang members: 1/2 exist"
# (the gang's object with a status, its members, placed, why it waits ("" when whole))
STATUSES = [
    (
        podgroup_obj(
            "g",
            2,
            status={
                "phase": "Pending",
                "conditions": [
                    condition("PodGroupScheduled", "False", "WaitingForMembers", WAITING)
                ],
            },
        ),
        [pod_obj("g-0", group="g")],
        False,
        WAITING,
    ),
    (
        volcano_podgroup_obj(
            "g",
            2,
            status={
                "phase": "Inqueue",
                "conditions": [condition("Unschedulable", "True", "NotEnoughTasks", WAITING)],
            },
        ),
        [pod_obj("g-0", volcano_group="g")],
        False,
        WAITING,
    ),
    (
        volcano_podgroup_obj(
            "g",
            2,
            status={
                "phase": "Running",
                "conditions": [
                    condition("Unschedulable", "False"),
                    condition("Scheduled", "True", "Scheduled"),
                ],
            },
        ),
        [pod_obj(f"g-{i}", volcano_group="g", node="n1") for i in range(2)],
        True,
        "",
    ),
    (
        upstream_podgroup_obj(
            "g",
            2,
            status={
                "conditions": [
                    condition("PodGroupInitiallyScheduled", "False", "Unschedulable", WAITING)
                ]
            },
        ),
        [pod_obj("g-0", scheduling_group="g")],
        False,
        WAITING,
    ),
    (
        upstream_podgroup_obj(
            "g",
            2,
            version="v1alpha2",
            status={"conditions": [condition("PodGroupScheduled", "True", "Scheduled")]},
        ),
        [pod_obj(f"g-{i}", scheduling_group="g", node="n1") for i in range(2)],
        True,
        "",
    ),
    (
        kai_podgroup_obj(
            "g",
            2,
            status={
                "schedulingConditions": [
                    {**condition("UnschedulableOnNodePool", "True", "Unschedulable", WAITING)}
                ]
            },
        ),
        [kai_pod_obj("g-0", "g")],
        False,
        WAITING,
    ),
    (
        grove_podgang_obj(
            "g",
            {"w": 2},
            status={"conditions": [condition("Scheduled", "False", "Unfit", WAITING)]},
        ),
        [grove_pod_obj("w-0", "g", "w")],
        False,
        WAITING,
    ),
    (
        grove_podgang_obj(
            "g", {"w": 2}, status={"conditions": [condition("Scheduled", "True", "Scheduled")]}
        ),
        [grove_pod_obj(f"w-{i}", "g", "w", node="n1") for i in range(2)],
        True,
        "",
    ),
]


@pytest.mark.parametrize(
    ("obj", "pods", "placed", "waiting"),
    STATUSES,
    ids=[
        "scheduler-plugins-waiting",
        "volcano-unschedulable",
        "volcano-scheduled",
        "upstream-unschedulable",
        "upstream-v1alpha2-scheduled",
        "kai-unschedulable-on-node-pool",
        "grove-not-scheduled",
        "grove-scheduled",
    ],
)
def test_the_condition_that_says_placed_is_read_in_each_dialects_terms(
    obj: dict[str, Any], pods: list[dict[str, Any]], placed: bool, waiting: str
) -> None:
    gang = one_gang([obj], pods)
    assert gang.condition is not None
    assert gang.condition.placed is placed
    wait = wait_of(gang, [])
    assert (wait.reason if wait is not None else "") == waiting
    if waiting:
        assert wait is not None
        assert wait.said_by == "condition"


def test_an_upstream_gang_whose_members_finished_after_it_ran_is_not_partial() -> None:
    """An upstream PodGroup has no phase: its condition says the quorum was placed."""
    placed = {"conditions": [condition("PodGroupInitiallyScheduled", "True", "Scheduled")]}
    pods = [
        pod_obj("g-0", scheduling_group="g", node="n1", phase="Succeeded"),
        pod_obj("g-1", scheduling_group="g"),
    ]
    gang = one_gang([upstream_podgroup_obj("g", 2, status=placed)], pods)
    assert (gang.bound, gang.state) == (1, GangState.WAITING)


def test_a_workload_gangs_commit_record_is_read_from_its_members() -> None:
    text = record("upstream:default/w/workers", {"default/w-0": "n1"})
    pod = pod_obj("w-0", workload_ref=WORKERS, annotations={COMMIT_ANNOTATION: text})
    gang = one_gang([workload_obj("w", {"workers": 2})], [pod])
    assert gang.commit is not None
    assert gang.commit.placements == {"default/w-0": "n1"}


def test_a_workload_lacking_the_pod_group_its_members_name_says_so() -> None:
    gang = one_gang([workload_obj("w", {"ps": 1})], [pod_obj("w-0", workload_ref=WORKERS)])
    assert gang.min_member is None
    assert gang.problems == (
        "Workload default/w has no pod group 'workers' (spec.podGroups has ps)",
    )


def test_an_unreadable_workload_is_a_problem_of_its_gangs() -> None:
    bad = workload_obj("w", {"workers": 2})
    bad["spec"]["podGroups"][0]["policy"] = {}
    gang = one_gang([bad], [pod_obj("w-0", workload_ref=WORKERS)])
    assert (gang.source, gang.min_member) == ("Workload missing", None)
    assert any("spec.podGroups[0].policy" in p for p in gang.problems), gang.problems


def test_a_pod_group_with_no_members_yet_is_listed() -> None:
    gang = one_gang([podgroup_obj("empty", 4)], [])
    assert (gang.min_member, gang.members, gang.state) == (4, (), GangState.WAITING)


def test_pods_outside_any_gang_are_not_gangs() -> None:
    assert collect_gangs([], [pod_obj("single")]) == ([], [])


def test_a_malformed_pod_is_skipped_with_its_name_and_field() -> None:
    bad = pod_obj("broken", group="g")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    gangs, skipped = collect_gangs([podgroup_obj("g", 1)], [bad, *members("g", 1, 1)])
    assert [m.name for m in gangs[0].members] == ["g-0"]
    (why,) = skipped
    assert "Pod default/broken" in why
    assert "cpu" in why


def test_a_malformed_pod_group_is_shown_with_its_problem() -> None:
    group = podgroup_obj("g", 2)
    group["spec"]["minMember"] = "two"
    gang = one_gang([group], members("g", 0, 2))
    assert gang.min_member is None
    assert any("spec.minMember" in p for p in gang.problems), gang.problems


@pytest.mark.parametrize(
    "conditions", [5, True, "PodGroupScheduled", {"type": "PodGroupScheduled"}]
)
def test_a_pod_group_whose_conditions_are_no_list_reads_as_having_none(conditions: Any) -> None:
    # As Phalanx reads a status it rewrites (phalanx.core.groups.status.conditions_of).
    group = podgroup_obj("g", 2, status={"phase": "Pending", "conditions": conditions})
    gang = one_gang([group], members("g", 0, 2))
    assert gang.condition is None


def test_a_pod_with_a_bad_phalanx_annotation_is_a_member_with_a_problem() -> None:
    pods = members("g", 0, 2)
    pods[1]["metadata"]["annotations"]["phalanx.io/gpu-memory-mib"] = "plenty"
    gang = one_gang([podgroup_obj("g", 2)], pods)
    assert len(gang.members) == 2
    assert any("default/g-1" in p and "gpu-memory-mib" in p for p in gang.problems)


def test_members_say_whether_they_are_gated_or_being_deleted() -> None:
    pods = members("g", 0, 2)
    pods[0]["spec"]["schedulingGates"] = [{"name": "wait"}]
    pods[1]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    gang = one_gang([podgroup_obj("g", 2)], pods)
    assert [(m.gated, m.deleting) for m in gang.members] == [(True, False), (False, True)]


# ---- Events and waits ----------------------------------------------------------------------------


def test_events_about_the_gang_and_its_members_only_oldest_first() -> None:
    gang = one_gang([podgroup_obj("g", 2)], members("g", 0, 2))
    events = [
        event_obj("Pod", "g-1", "FailedScheduling", "later", at="2026-01-01T11:00:00Z"),
        event_obj("PodGroup", "g", "Reserved", "first", at="2026-01-01T10:00:00Z"),
        event_obj("Pod", "other", "Scheduled", "not ours"),
        event_obj("PodGroup", "g", "Reserved", "other namespace", namespace="team-b"),
        event_obj("Node", "g", "Ready", "a node named like the gang"),
    ]
    assert [e.message for e in gang_events(gang, events)] == ["first", "later"]


def test_a_kueue_gang_has_no_object_so_only_its_members_events_are_its() -> None:
    gang = one_gang([], [pod_obj("k-0", labels=KUEUE_LABELS, annotations=KUEUE_COUNT)])
    events = [
        event_obj("Pod", "k-0", "FailedScheduling", "ours"),
        event_obj("PodGroup", "k", "Reserved", "a scheduler-plugins PodGroup named like it"),
    ]
    assert [e.message for e in gang_events(gang, events)] == ["ours"]


CONDITION = {
    "phase": "Pending",
    "conditions": [
        {
            "type": "PodGroupScheduled",
            "status": "False",
            "reason": "WaitingForMembers",
            "message": "waiting for gang members: 1/2 exist",
            "lastTransitionTime": "2026-01-01T11:58:00Z",
        }
    ],
}


def test_a_waiting_gang_waits_for_what_its_condition_says() -> None:
    gang = one_gang([podgroup_obj("g", 2, status=CONDITION)], members("g", 0, 1))
    events = gang_events(gang, [event_obj("Pod", "g-0", "FailedScheduling", "older news")])
    wait = wait_of(gang, events)
    assert wait is not None
    assert (wait.reason, wait.said_by, wait.since) == (
        "waiting for gang members: 1/2 exist",
        "condition",
        "2026-01-01T11:58:00Z",
    )


def test_without_a_condition_the_newest_event_says_why() -> None:
    gang = one_gang(
        [],
        [pod_obj("a-0", annotations={"phalanx.io/pod-group": "a", "phalanx.io/min-member": "2"})],
    )
    raw = [
        event_obj("Pod", "a-0", "WaitingForMembers", "old", at="2026-01-01T10:00:00Z"),
        event_obj(
            "Pod", "a-0", "FailedScheduling", "newest", at="2026-01-01T11:00:00Z", component="sched"
        ),
    ]
    wait = wait_of(gang, gang_events(gang, raw))
    assert wait is not None
    assert (wait.reason, wait.said_by) == ("newest", "sched")


def test_a_gang_phalanx_cannot_read_waits_for_its_problem() -> None:
    pods = members("g", 0, 2)
    pods[0]["metadata"]["annotations"]["phalanx.io/placement"] = "sideways"
    gang = one_gang([podgroup_obj("g", 2, status=CONDITION)], pods)
    wait = wait_of(gang, [])
    assert wait is not None
    assert "phalanx.io/placement" in wait.reason


def test_a_whole_gang_does_not_wait() -> None:
    gang = one_gang([podgroup_obj("g", 2)], members("g", 2, 2))
    assert wait_of(gang, []) is None


# ---- Volcano task minima -----------------------------------------------------------------------


def mpi(bound: dict[str, str]) -> list[dict[str, Any]]:
    """Volcano's MPI job: a master and 3 workers; `bound` maps the bound ones to nodes."""
    names = {"mpi-master-0": "master", **{f"mpi-worker-{i}": "worker" for i in range(3)}}
    return [
        pod_obj(
            name,
            volcano_group="mpi",
            annotations={"volcano.sh/task-spec": task},
            node=bound.get(name, ""),
        )
        for name, task in names.items()
    ]


MPI_GROUP = volcano_podgroup_obj("mpi", 3, min_task_member={"master": 1, "worker": 2})


def test_a_kai_gang_short_of_a_subgroup_says_so_naming_kai_s_field() -> None:
    group = kai_podgroup_obj("serve", 3, sub_groups={"leader": 1, "workers": 2})
    pods = [kai_pod_obj(f"serve-worker-{i}", "serve", "workers", node=f"n{i}") for i in range(3)]
    short = one_gang([group], pods)
    assert (short.bound, short.state) == (3, GangState.PARTIAL)
    wait = wait_of(short, [])
    assert wait is not None
    assert wait.reason == (
        "3 of 3 member(s) bound, but task leader has 0 of 1 member(s) (spec.subGroups)"
    )


def test_a_yunikorn_application_bound_without_a_task_groups_minimum_is_partial() -> None:
    groups = '[{"name": "driver", "minMember": 1}, {"name": "executor", "minMember": 2}]'

    def member(name: str, task_group: str, node: str) -> dict[str, Any]:
        notes = {
            "yunikorn.apache.org/task-group-name": task_group,
            "yunikorn.apache.org/task-groups": groups,
        }
        return pod_obj(name, labels=YUNIKORN_LABELS, annotations=notes, node=node)

    executors = [member(f"exec-{i}", "executor", f"n{i}") for i in range(3)]
    short = one_gang([], executors)
    assert (short.bound, short.min_member) == (3, 3)  # the count alone would say whole
    assert short.state is GangState.PARTIAL
    wait = wait_of(short, [])
    assert wait is not None
    assert wait.reason == (
        "3 of 3 member(s) bound, but task driver has 0 of 1 member(s) "
        "(annotation yunikorn.apache.org/task-groups)"
    )
    whole = one_gang([], [*executors, member("driver", "driver", "n3")])
    assert whole.state is GangState.WHOLE


def test_a_volcano_gang_is_whole_only_once_each_task_has_its_minimum_bound() -> None:
    workers = {f"mpi-worker-{i}": f"n{i}" for i in range(3)}
    short = one_gang([MPI_GROUP], mpi(workers))
    assert (short.bound, short.min_member) == (3, 3)  # the count alone would say whole
    assert short.state is GangState.PARTIAL  # three workers bound without their master
    assert short.tasks_short == "task master has 0 of 1 member(s)"
    wait = wait_of(short, [])
    assert wait is not None
    assert wait.reason == (
        "3 of 3 member(s) bound, but task master has 0 of 1 member(s) (spec.minTaskMember)"
    )

    whole = one_gang([MPI_GROUP], mpi({**workers, "mpi-master-0": "n3"}))
    assert (whole.state, whole.tasks_short) == (GangState.WHOLE, "")
    assert wait_of(whole, []) is None


def test_minima_summing_past_min_member_are_not_held_against_the_gang() -> None:
    # Phalanx does not enforce them (Volcano skips its task checks then too).
    group = volcano_podgroup_obj("mpi", 2, min_task_member={"master": 1, "worker": 2})
    gang = one_gang([group], mpi({"mpi-worker-0": "n0", "mpi-worker-1": "n1"}))
    assert (gang.state, gang.tasks_short) == (GangState.WHOLE, "")


def test_a_gang_whose_object_is_being_deleted_waits_because_of_it_whatever_else_it_says() -> None:
    group = podgroup_obj("g", 2)
    group["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    group["metadata"]["finalizers"] = ["example.com/hold"]
    gang = one_gang([group], [pod_obj("g-0", group="g", node="n0"), pod_obj("g-1", group="g")])
    assert gang.deleting == (
        "PodGroup default/g is being deleted (gang default/g): its members are not scheduled "
        "any more"
    )
    wait = wait_of(gang, [])
    assert wait is not None
    assert (wait.reason, wait.said_by) == (gang.deleting, "phalanx")


def test_a_whole_gang_being_deleted_is_still_whole() -> None:
    group = podgroup_obj("g", 1)
    group["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    gang = one_gang([group], [pod_obj("g-0", group="g", node="n0")])
    assert gang.state is GangState.WHOLE
    assert gang.deleting
    assert wait_of(gang, []) is None


# ---- Leases and ages ---------------------------------------------------------------------------


HOLDERS = [
    ("kube-scheduler", "phalanx-7d9c-x2x4_1b2c3d4e-aaaa", "phalanx-7d9c-x2x4"),
    ("phalanx-rollforward", "phalanx-1a2b3c4d", ""),
    ("nobody", "", ""),
]


@pytest.mark.parametrize(("holder", "pod"), [h[1:] for h in HOLDERS], ids=[h[0] for h in HOLDERS])
def test_a_kube_scheduler_lease_names_the_pod_holding_it(holder: str, pod: str) -> None:
    view = lease_view("phalanx-system", "l", lease_obj("l", holder))
    assert (view.holder, view.holder_pod) == (holder, pod)


def test_a_lease_that_cannot_be_read_says_why() -> None:
    view = lease_view("phalanx-system", "l", None, "forbidden")
    assert (view.holder, view.error) == ("", "forbidden")


AGES = [
    ("seconds", "2026-01-01T11:59:18Z", "42s"),
    ("micro-seconds", "2026-01-01T11:59:18.250000Z", "41s"),
    ("minutes", "2026-01-01T11:55:00Z", "5m"),
    ("hours", "2026-01-01T09:00:00Z", "3h"),
    ("days", "2025-12-29T12:00:00Z", "3d"),
    ("in-the-future", "2026-01-01T12:00:05Z", "0s"),
    ("missing", "", "-"),
    ("garbage", "yesterday", "-"),
]


@pytest.mark.parametrize(("at", "shown"), [a[1:] for a in AGES], ids=[a[0] for a in AGES])
def test_ages_read_as_kubectl_prints_them(at: str, shown: str) -> None:
    assert age_of(at, NOW) == shown


# ---- a composite gang (1.37 CompositePodGroup) ---------------------------------------------


def ray_objects() -> list[dict[str, Any]]:
    return [
        composite_obj("ray", 2),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        upstream_podgroup_obj("ray-workers", 2, parent="ray"),
    ]


def ray_pods(bound: dict[str, str]) -> list[dict[str, Any]]:
    groups = {"head-0": "ray-head", "worker-0": "ray-workers", "worker-1": "ray-workers"}
    return [
        pod_obj(name, scheduling_group=group, node=bound.get(name, ""))
        for name, group in groups.items()
    ]


def test_a_composites_pod_groups_are_one_gang_as_phalanx_schedules_them() -> None:
    gang = one_gang(ray_objects(), ray_pods({}))
    assert (gang.key, gang.dialect, gang.source, gang.min_member) == (
        "composite:default/ray",
        "composite",
        "CompositePodGroup",
        3,
    )
    assert [m.name for m in gang.members] == ["head-0", "worker-0", "worker-1"]
    assert gang.state is GangState.WAITING


def test_a_composite_bound_short_of_its_child_groups_is_partial_naming_the_short_child() -> None:
    gang = one_gang(ray_objects(), ray_pods({"head-0": "n0", "worker-0": "n1"}))
    assert gang.state is GangState.PARTIAL
    assert gang.tasks_short == (
        "CompositePodGroup ray has 1 of 2 child group(s) ready: "
        "PodGroup ray-workers has 1 of 2 member(s)"
    )
    whole = one_gang(ray_objects(), ray_pods({"head-0": "n0", "worker-0": "n1", "worker-1": "n2"}))
    assert (whole.state, whole.tasks_short) == (GangState.WHOLE, "")


def test_a_composite_whose_count_is_bound_but_not_its_children_says_which_is_short() -> None:
    objects = [*ray_objects(), upstream_podgroup_obj("ray-cpu", 2, parent="ray")]
    pods = [
        *ray_pods({"head-0": "n0", "worker-0": "n1"}),
        pod_obj("cpu-0", scheduling_group="ray-cpu", node="n2"),
        pod_obj("cpu-1", scheduling_group="ray-cpu"),
    ]
    gang = one_gang(objects, pods)
    wait = wait_of(gang, [])
    assert wait is not None
    assert wait.reason == (
        "3 of 3 member(s) bound, but CompositePodGroup ray has 1 of 2 child group(s) ready: "
        "PodGroup ray-cpu has 1 of 2 member(s), PodGroup ray-workers has 1 of 2 member(s) "
        "(spec.schedulingPolicy.gang.minGroupCount)"
    )


def test_pod_groups_under_a_basic_composite_stay_gangs_of_their_own() -> None:
    objects = [composite_obj("ray", None), *ray_objects()[1:]]
    gangs, _ = collect_gangs(objects, ray_pods({}))
    assert [g.key for g in gangs] == ["upstream:default/ray-head", "upstream:default/ray-workers"]


def test_a_composite_being_deleted_waits_naming_the_composite() -> None:
    root, *children = ray_objects()
    root["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    gang = one_gang([root, *children], ray_pods({}))
    assert gang.deleting.startswith(
        "CompositePodGroup default/ray is being deleted (gang composite:default/ray)"
    )
    wait = wait_of(gang, [])
    assert wait is not None
    assert wait.reason == gang.deleting


# ---- a PodGroup kube-scheduler refuses (1.37's pod-group checks) ---------------------------


def test_a_pod_group_whose_pod_has_another_priority_waits_for_that_naming_the_pod() -> None:
    pods = [pod_obj("job-0", scheduling_group="job"), pod_obj("job-1", scheduling_group="job")]
    pods[1]["spec"]["priority"] = 500
    gang = one_gang([upstream_podgroup_obj("job", 2)], pods)
    wait = wait_of(gang, [])
    assert wait is not None
    assert wait.said_by == "phalanx"
    assert wait.reason.startswith(
        "PodGroup default/job is refused, as kube-scheduler 1.37 refuses it before any cycle of "
        "its pods: pod default/job-1 has priority 500 but the PodGroup's spec.priority is 0"
    )


def test_a_composite_over_a_refused_pod_group_waits_for_it_naming_the_pod() -> None:
    pods = ray_pods({})
    pods[0]["spec"]["priority"] = 500
    gang = one_gang(ray_objects(), pods)
    assert gang.problems[0].startswith(
        "CompositePodGroup default/ray cannot be scheduled all or nothing: PodGroup "
        "default/ray-head is refused"
    )
    assert "pod default/head-0 has priority 500" in gang.problems[0]
    assert one_gang(ray_objects(), ray_pods({})).problems == ()
