"""Apache YuniKorn's task groups: an application's gang, declared on its pods."""

from __future__ import annotations

import json
from typing import Any

import pytest

from builders import pod_obj
from phalanx.core.groups import registry, yunikorn
from phalanx.core.groups.registry import Unresolved
from phalanx.core.inventory import parse_pod
from phalanx.core.model import Dialect, GroupRef, Pod, PodGroup

GROUP_NAME = "yunikorn.apache.org/task-group-name"
GROUPS = "yunikorn.apache.org/task-groups"
POLICY = "yunikorn.apache.org/schedulingPolicyParameters"
REF = GroupRef("ml", "spark-pi", Dialect.YUNIKORN)


def definition(**minima: int) -> str:
    """The task-groups JSON a YuniKorn user writes, with the placeholder fields too."""
    return json.dumps(
        [
            {
                "name": name,
                "minMember": minimum,
                "minResource": {"cpu": "1", "memory": "2Gi"},
                "nodeSelector": {},
                "tolerations": [],
                "affinity": {},
                "topologySpreadConstraints": [],
            }
            for name, minimum in minima.items()
        ]
    )


SPARK = definition(driver=1, executor=2)


def yk_pod(
    name: str,
    task_group: str | None = "executor",
    groups: str | None = SPARK,
    *,
    app: str | None = "spark-pi",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **more: Any,
) -> Pod:
    """A pod as a YuniKorn user writes it (label applicationId, queue), parsed as the sources
    do."""
    all_labels = {"queue": "root.sandbox", **(labels or {})}
    all_annotations = dict(annotations or {})
    if app is not None:
        all_labels["applicationId"] = app
    if task_group is not None:
        all_annotations[GROUP_NAME] = task_group
    if groups is not None:
        all_annotations[GROUPS] = groups
    return parse_pod(
        pod_obj(name, namespace="ml", labels=all_labels, annotations=all_annotations, **more)
    )


# --- reading ---------------------------------------------------------------------------


def test_a_pod_naming_a_task_group_of_its_application_is_a_member_of_the_applications_gang() -> (
    None
):
    found = yk_pod("exec-1")
    assert (found.group, found.group_dialect, found.task, found.invalid) == (
        REF,
        Dialect.YUNIKORN,
        "executor",
        "",
    )
    assert (found.min_member, found.task_groups) == (3, (("driver", 1), ("executor", 2)))
    assert found.group is not None
    assert found.group.key == "yunikorn:ml/spark-pi"


def test_the_key_parses_back_into_the_gang() -> None:
    assert registry.parse_key("yunikorn:ml/spark-pi") == REF


@pytest.mark.parametrize(
    ("labels", "annotations", "app"),
    [
        ({"yunikorn.apache.org/app-id": "a", "applicationId": "b"}, {}, "a"),
        ({"applicationId": "b"}, {"yunikorn.apache.org/app-id": "a"}, "a"),
        ({"yunikorn.apache.org/app-id": "a"}, {"yunikorn.apache.org/app-id": "b"}, "a"),
        ({"applicationId": "b", "spark-app-selector": "c"}, {}, "b"),
        ({"spark-app-selector": "c"}, {}, "c"),
    ],
    ids=[
        "canonical-label-first",
        "then-the-annotation",
        "label-over-annotation",
        "then-applicationId",
        "then-spark",
    ],
)
def test_the_application_id_is_read_in_the_k8shims_order(
    labels: dict[str, str], annotations: dict[str, str], app: str
) -> None:
    found = yk_pod("exec-1", app=None, labels=labels, annotations=annotations)
    assert found.group == GroupRef("ml", app, Dialect.YUNIKORN)


def test_a_pod_of_the_application_naming_no_task_group_is_scheduled_outside_the_gang() -> None:
    found = yk_pod("client", task_group=None)
    assert (found.group, found.invalid, found.task_groups) == (None, "", None)


def test_a_member_without_the_definition_is_still_a_member() -> None:
    found = yk_pod("exec-2", groups=None)
    assert (found.group, found.min_member, found.task_groups, found.invalid) == (
        REF,
        None,
        None,
        "",
    )


def test_the_placeholder_timeout_is_the_gangs_schedule_timeout() -> None:
    found = yk_pod("exec-1", annotations={POLICY: "placeholderTimeoutInSeconds=60 x=y"})
    assert (found.timeout_seconds, found.invalid) == (60, "")


def test_phalanxs_own_schedule_timeout_wins_over_yunikorns() -> None:
    found = yk_pod(
        "exec-1",
        annotations={
            POLICY: "placeholderTimeoutInSeconds=60",
            "phalanx.io/schedule-timeout-seconds": "30",
        },
    )
    assert (found.timeout_seconds, found.invalid) == (30, "")


@pytest.mark.parametrize("style", ["Soft", "Hard"])
def test_either_gang_scheduling_style_is_accepted(style: str) -> None:
    found = yk_pod("exec-1", annotations={POLICY: f"gangSchedulingStyle={style}"})
    assert (found.group, found.invalid) == (REF, "")


def test_a_members_own_min_member_is_refused_the_size_is_the_task_groups() -> None:
    found = yk_pod("exec-1", annotations={"phalanx.io/min-member": "2"})
    assert found.invalid == (
        "annotation phalanx.io/min-member needs annotation phalanx.io/pod-group "
        "or label scheduling.x-k8s.io/pod-group"
    )


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("groups", "annotations", "app", "problem"),
    [
        (
            "[{",
            {},
            "spark-pi",
            "annotation yunikorn.apache.org/task-groups: is not JSON (Expecting property name "
            "enclosed in double quotes: line 1 column 3 (char 2))",
        ),
        (
            "[" * 100_000,
            {},
            "spark-pi",
            "annotation yunikorn.apache.org/task-groups: is not JSON (nested too deeply)",
        ),
        (
            '{"name": "executor", "minMember": 2}',
            {},
            "spark-pi",
            "annotation yunikorn.apache.org/task-groups: is not a non-empty JSON list of task "
            "groups",
        ),
        (
            "[]",
            {},
            "spark-pi",
            "annotation yunikorn.apache.org/task-groups: is not a non-empty JSON list of task "
            "groups",
        ),
        (
            '[{"minMember": 2}]',
            {},
            "spark-pi",
            "annotation yunikorn.apache.org/task-groups: entry 0 has no name",
        ),
        (
            '[{"name": "executor"}]',
            {},
            "spark-pi",
            'annotation yunikorn.apache.org/task-groups: task group "executor": minMember is '
            "missing (a positive integer)",
        ),
        (
            '[{"name": "executor", "minMember": 0}]',
            {},
            "spark-pi",
            'annotation yunikorn.apache.org/task-groups: task group "executor": minMember must '
            "be a positive integer, not 0",
        ),
        (
            '[{"name": "executor", "minMember": -1}]',
            {},
            "spark-pi",
            'annotation yunikorn.apache.org/task-groups: task group "executor": minMember must '
            "be a positive integer, not -1",
        ),
        (
            '[{"name": "executor", "minMember": "2"}]',
            {},
            "spark-pi",
            'annotation yunikorn.apache.org/task-groups: task group "executor": minMember must '
            'be a positive integer, not "2"',
        ),
        (
            '[{"name": "executor", "minMember": 2147483648}]',
            {},
            "spark-pi",
            'annotation yunikorn.apache.org/task-groups: task group "executor": minMember must '
            "be at most 2147483647 (an int32), not 2147483648",
        ),
        (
            '[{"name": "executor", "minMember": 1}, {"name": "executor", "minMember": 2}]',
            {},
            "spark-pi",
            'annotation yunikorn.apache.org/task-groups: task group "executor" is defined twice',
        ),
        (
            definition(driver=1),
            {},
            "spark-pi",
            'annotation yunikorn.apache.org/task-group-name: "executor" is not a task group of '
            "annotation yunikorn.apache.org/task-groups (driver: 1)",
        ),
        (
            SPARK,
            {POLICY: "placeholderTimeoutInSeconds=soon"},
            "spark-pi",
            "annotation yunikorn.apache.org/schedulingPolicyParameters: "
            'placeholderTimeoutInSeconds: "soon" is not a positive integer',
        ),
        (
            SPARK,
            {POLICY: "gangSchedulingStyle=hard"},
            "spark-pi",
            "annotation yunikorn.apache.org/schedulingPolicyParameters: gangSchedulingStyle: "
            '"hard" is not Soft or Hard',
        ),
        (
            SPARK,
            {},
            None,
            "annotation yunikorn.apache.org/task-group-name needs an application id: label "
            "yunikorn.apache.org/app-id, annotation yunikorn.apache.org/app-id, label "
            "applicationId or label spark-app-selector",
        ),
        (
            SPARK,
            {},
            "Spark_Pi",
            'label applicationId: "Spark_Pi" is not a valid YuniKorn application name '
            '(lower-case letters, digits, "-" and ".")',
        ),
    ],
    ids=[
        "not-json",
        "nested-too-deeply",
        "not-a-list",
        "empty-list",
        "no-name",
        "no-min-member",
        "zero-min-member",
        "negative-min-member",
        "string-min-member",
        "beyond-int32",
        "duplicate-name",
        "undefined-task-group",
        "malformed-timeout",
        "unknown-style",
        "no-application-id",
        "application-id-no-name",
    ],
)
def test_a_malformed_declaration_makes_the_pod_invalid_naming_the_annotation(
    groups: str, annotations: dict[str, str], app: str | None, problem: str
) -> None:
    assert yk_pod("exec-1", groups=groups, app=app, annotations=annotations).invalid == problem


# --- the gang --------------------------------------------------------------------------


def test_the_gangs_quorum_is_each_task_groups_min_member_and_its_size_their_sum() -> None:
    members = [yk_pod("driver", "driver"), yk_pod("exec-1", groups=None)]
    assert registry.resolve(REF, lambda _: None, members, default_timeout=90) == PodGroup(
        "ml",
        "spark-pi",
        3,
        timeout_seconds=90,
        from_crd=False,
        dialect=Dialect.YUNIKORN,
        min_task_member=(("driver", 1), ("executor", 2)),
    )


def test_the_placeholder_timeout_of_a_member_sets_the_gangs() -> None:
    members = [yk_pod("exec-1", annotations={POLICY: "placeholderTimeoutInSeconds=60"})]
    found = registry.resolve(REF, lambda _: None, members, default_timeout=90)
    assert isinstance(found, PodGroup)
    assert found.timeout_seconds == 60


def test_until_a_member_carries_the_definition_the_gang_waits() -> None:
    members = [yk_pod("exec-1", groups=None)]
    assert registry.resolve(REF, lambda _: None, members) == Unresolved(
        "waiting for a member of gang yunikorn:ml/spark-pi with annotation "
        "yunikorn.apache.org/task-groups (the application's task groups)",
        waiting=True,
    )


def test_members_whose_definitions_disagree_are_invalid_not_waiting() -> None:
    other = definition(driver=1, executor=4)
    members = [yk_pod("driver", "driver"), yk_pod("exec-1", groups=other)]
    assert registry.resolve(REF, lambda _: None, members) == Unresolved(
        "members of gang yunikorn:ml/spark-pi disagree on annotation "
        "yunikorn.apache.org/task-groups: pod driver declares driver: 1, executor: 2, pod "
        "exec-1 driver: 1, executor: 4",
        waiting=False,
    )


def test_the_definitions_order_is_not_a_disagreement() -> None:
    reordered = json.dumps(list(reversed(json.loads(SPARK))))
    members = [yk_pod("driver", "driver"), yk_pod("exec-1", groups=reordered)]
    assert isinstance(registry.resolve(REF, lambda _: None, members), PodGroup)


def test_a_member_naming_a_task_group_another_members_definition_lacks_is_refused() -> None:
    members = [yk_pod("driver", "driver"), yk_pod("exec-1", "executors", groups=None)]
    assert registry.resolve(REF, lambda _: None, members) == Unresolved(
        "gang yunikorn:ml/spark-pi: pod exec-1: annotation yunikorn.apache.org/task-group-name: "
        '"executors" is not a task group of annotation yunikorn.apache.org/task-groups '
        "(driver: 1, executor: 2)",
        waiting=False,
    )


def test_a_broken_member_says_why_the_gang_cannot_form() -> None:
    broken = yk_pod("exec-1", groups="[{")
    assert yunikorn.gang_from_members(REF, [broken], default_timeout=45) == (
        f"gang yunikorn:ml/spark-pi: pod exec-1: {broken.invalid}"
    )


def test_a_yunikorn_gang_has_no_object_to_write_status_or_events_to() -> None:
    assert not registry.has_gang_object(Dialect.YUNIKORN)
    assert registry.gang_source(REF, Dialect.YUNIKORN, has_object=False) == "annotations"


# --- precedence ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "winner", "overruled"),
    [
        (
            {"kueue.x-k8s.io/pod-group-name": "kq"},
            {"kueue.x-k8s.io/pod-group-total-count": "3"},
            {},
            "kueue:ml/kq",
            [Dialect.YUNIKORN],
        ),
        ({}, {"scheduling.k8s.io/group-name": "vc"}, {}, "volcano:ml/vc", [Dialect.YUNIKORN]),
        (
            {
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
            },
            {"phalanx.io/leaderworkerset-gang": "true", "leaderworkerset.sigs.k8s.io/size": "2"},
            {},
            "yunikorn:ml/spark-pi",
            [Dialect.LWS],
        ),
        ({}, {}, {"scheduling_group": "up"}, "yunikorn:ml/spark-pi", [Dialect.UPSTREAM]),
    ],
    ids=["kueue-wins", "volcano-wins", "yunikorn-over-lws", "yunikorn-over-upstream"],
)
def test_yunikorn_comes_after_kueue_and_before_lws(
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
    winner: str,
    overruled: list[Dialect],
) -> None:
    found = yk_pod("exec-1", labels=labels, annotations=annotations, **spec)
    assert found.group is not None
    assert (found.group.key, [c.dialect for c in found.overruled], found.invalid) == (
        winner,
        overruled,
        "",
    )


def test_a_pod_kueue_won_keeps_its_volcano_style_task_not_its_task_group() -> None:
    found = yk_pod(
        "exec-1",
        labels={"kueue.x-k8s.io/pod-group-name": "kq"},
        annotations={"kueue.x-k8s.io/pod-group-total-count": "3"},
    )
    assert (found.task, found.task_groups, found.min_member) == ("", None, 3)


def test_the_contest_event_names_yunikorn_in_the_precedence() -> None:
    found = yk_pod("exec-1", annotations={"scheduling.k8s.io/group-name": "vc"})
    assert registry.contest_message(found) == (
        "pod ml/exec-1 is claimed by more than one gang dialect: volcano group volcano:ml/vc "
        "wins (precedence annotations > scheduler-plugins > volcano > kai > grove > kueue > "
        "yunikorn > lws > upstream) over yunikorn group yunikorn:ml/spark-pi"
    )
