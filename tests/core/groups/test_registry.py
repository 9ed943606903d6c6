"""The registry: one precedence between dialects, any gang object, resolving a GroupRef."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (
    composite_obj,
    pod,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import registry, status
from phalanx.core.groups.discovery import Served, ServedKind
from phalanx.core.groups.registry import GroupObject, Unresolved
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.groups.upstream import Workload
from phalanx.core.inventory import parse_object, parse_pod
from phalanx.core.journal import Outcome
from phalanx.core.model import ChildGroups, Dialect, GroupRef, PodGroup, TaskGroupMinima

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

# --- identity --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "key", "object_key"),
    [
        (GroupRef("ml", "job"), "ml/job", "ml/job"),
        (GroupRef("ml", "job", Dialect.VOLCANO), "volcano:ml/job", "volcano:ml/job"),
        (GroupRef("ml", "gang-0", Dialect.UPSTREAM), "upstream:ml/gang-0", "upstream:ml/gang-0"),
        (
            GroupRef("ml", "train", Dialect.UPSTREAM, "workers"),
            "upstream:ml/train/workers",
            "upstream:ml/train",
        ),
        (
            GroupRef("ml", "lws", Dialect.UPSTREAM, "group", "3"),
            "upstream:ml/lws/group/3",
            "upstream:ml/lws",
        ),
    ],
    ids=["scheduler-plugins", "volcano", "upstream-pod-group", "workload", "workload-replica"],
)
def test_every_gang_has_a_unique_readable_key_and_finds_its_object(
    ref: GroupRef, key: str, object_key: str
) -> None:
    assert (ref.key, ref.object_ref.key, str(ref)) == (key, object_key, key)


def test_a_gang_reference_keeps_its_key_through_every_copy() -> None:
    # The key is made once, at construction (`GroupRef._key`): every way the code copies a
    # reference must make or carry the right one, and it takes no part in equality.
    ref = GroupRef("ml", "train", Dialect.UPSTREAM, "workers", "2")
    renamed = dataclasses.replace(ref, name="serve", replica="")
    assert renamed.key == "upstream:ml/serve/workers"
    assert copy.copy(ref).key == pickle.loads(pickle.dumps(ref)).key == ref.key
    assert ref == GroupRef.parse(ref.key)
    assert hash(ref) == hash(GroupRef.parse(ref.key))
    assert ref != renamed
    assert "_key" not in repr(ref)


@pytest.mark.parametrize(
    "key",
    [
        "ml/job",
        "volcano:ml/job",
        "upstream:ml/gang-0",
        "upstream:ml/train/workers",
        "upstream:ml/lws/group/3",
        "kueue:ml/job",
        "kai:ml/job",
        "grove:ml/serve-0",
    ],
    ids=[
        "scheduler-plugins",
        "volcano",
        "upstream-pod-group",
        "workload",
        "workload-replica",
        "kueue",
        "kai",
        "grove",
    ],
)
def test_a_key_of_every_dialect_reads_back_as_the_gang_it_names(key: str) -> None:
    ref = registry.parse_key(key)
    assert ref is not None
    assert ref.key == key


@pytest.mark.parametrize(
    "text",
    [
        "ml",
        "ml/",
        "/job",
        "volcano:ml/job/workers",
        "ml/job/workers",
        "ML/job",
        "ml/Job_1",
        "slurm:ml/job",
        "",
    ],
    ids=[
        "no-name",
        "empty-name",
        "empty-namespace",
        "pod-group-in-volcano",
        "pod-group-in-scheduler-plugins",
        "namespace-not-a-label",
        "name-not-an-object-name",
        "unknown-dialect",
        "empty",
    ],
)
def test_a_text_that_names_no_gang_is_no_key(text: str) -> None:
    assert registry.parse_key(text) is None


@pytest.mark.parametrize(
    ("ref", "has_object", "claims", "dialect", "source"),
    [
        (GroupRef("ml", "job"), True, {Dialect.SCHEDULER_PLUGINS}, "scheduler-plugins", "PodGroup"),
        (
            GroupRef("ml", "job"),
            False,
            {Dialect.SCHEDULER_PLUGINS},
            "scheduler-plugins",
            "PodGroup missing",
        ),
        (GroupRef("ml", "job"), False, {Dialect.ANNOTATIONS}, "annotations", "annotations"),
        (GroupRef("ml", "job"), True, {Dialect.ANNOTATIONS}, "scheduler-plugins", "PodGroup"),
        (GroupRef("ml", "job", Dialect.VOLCANO), True, {Dialect.VOLCANO}, "volcano", "PodGroup"),
        (GroupRef("ml", "job", Dialect.VOLCANO), False, set(), "volcano", "PodGroup missing"),
        (GroupRef("ml", "job", Dialect.UPSTREAM), True, set(), "upstream", "PodGroup"),
        (
            GroupRef("ml", "t", Dialect.UPSTREAM, "w"),
            True,
            {Dialect.UPSTREAM},
            "upstream",
            "Workload",
        ),
        (GroupRef("ml", "t", Dialect.UPSTREAM, "w"), False, set(), "upstream", "Workload missing"),
        (GroupRef("ml", "job", Dialect.KUEUE), False, {Dialect.KUEUE}, "kueue", "annotations"),
        (GroupRef("ml", "s-0", Dialect.GROVE), True, {Dialect.GROVE}, "grove", "PodGang"),
        (GroupRef("ml", "s-0", Dialect.GROVE), False, set(), "grove", "PodGang missing"),
    ],
    ids=[
        "pod-group",
        "pod-group-missing",
        "annotations",
        "annotations-given-a-pod-group",
        "volcano",
        "volcano-missing",
        "upstream-pod-group",
        "workload",
        "workload-missing",
        "kueue",
        "grove",
        "grove-missing",
    ],
)
def test_a_gang_is_named_by_its_dialect_and_what_declares_it(
    ref: GroupRef, has_object: bool, claims: set[Dialect], dialect: str, source: str
) -> None:
    named = registry.gang_dialect(ref, has_object=has_object, claims=claims)
    assert (named.value, registry.gang_source(ref, named, has_object=has_object)) == (
        dialect,
        source,
    )


def test_every_gang_kind_knows_its_dialect() -> None:
    assert {registry.dialect_of_kind(*kind) for kind in registry.group_kinds()} == {
        Dialect.SCHEDULER_PLUGINS,
        Dialect.VOLCANO,
        Dialect.KAI,
        Dialect.GROVE,
        Dialect.UPSTREAM,
        Dialect.COMPOSITE,
    }
    assert registry.dialect_of_kind("v1", "Pod") is None


def test_a_gang_has_an_object_exactly_when_its_dialect_has_a_kind() -> None:
    with_kinds = {registry.dialect_of_kind(*kind) for kind in registry.group_kinds()}
    assert {d for d in Dialect if registry.has_gang_object(d)} == with_kinds


# --- what each dialect's entry says ------------------------------------------------------

ENTRIES = pytest.mark.parametrize(
    "entry", registry.DIALECTS, ids=[entry.dialect.value for entry in registry.DIALECTS]
)


@ENTRIES
def test_a_gangs_object_is_named_by_the_kinds_its_dialect_reads(
    entry: registry.GroupDialect,
) -> None:
    refs = [GroupRef("ml", "g", entry.dialect)]
    if entry.dialect is Dialect.UPSTREAM:
        refs.append(GroupRef("ml", "train", Dialect.UPSTREAM, "workers"))
    # A dialect without objects is named as annotation-only gangs are: scheduler-plugins'.
    kinds = {kind for _, kind in entry.kinds} or {"PodGroup"}
    assert {registry.object_kind(ref) for ref in refs} == kinds


# One pod carrying every dialect's task label and annotation, each naming another task.
TASK_LABELS = {
    "kai.scheduler/subgroup-name": "kai-subgroup",
    "grove.io/podclique": "grove-podclique",
    "leaderworkerset.sigs.k8s.io/subgroup-index": "2",
    "volcano.sh/task-spec": "volcano-label",
}
TASK_NOTES = {
    "yunikorn.apache.org/task-group-name": "yunikorn-task-group",
    "volcano.sh/task-spec": "volcano-annotation",  # read before Volcano's label
}
VOLCANO_TASK = "volcano-annotation"
MEMBER_TASKS = {
    Dialect.ANNOTATIONS: VOLCANO_TASK,
    Dialect.SCHEDULER_PLUGINS: VOLCANO_TASK,
    Dialect.VOLCANO: VOLCANO_TASK,
    Dialect.KAI: "kai-subgroup",
    Dialect.GROVE: "grove-podclique",
    Dialect.KUEUE: VOLCANO_TASK,
    Dialect.YUNIKORN: "yunikorn-task-group",
    Dialect.LWS: "2",
    Dialect.UPSTREAM: VOLCANO_TASK,
    Dialect.COMPOSITE: VOLCANO_TASK,
}


@ENTRIES
def test_a_members_task_is_read_from_its_dialects_label_or_annotation(
    entry: registry.GroupDialect,
) -> None:
    assert (
        registry.member_task(entry.dialect, TASK_LABELS, TASK_NOTES)
        == (MEMBER_TASKS[entry.dialect])
    )


@ENTRIES
def test_a_member_without_its_dialects_own_task_key_is_in_no_task_whatever_volcano_says(
    entry: registry.GroupDialect,
) -> None:
    volcano_only = {"volcano.sh/task-spec": VOLCANO_TASK}
    expected = VOLCANO_TASK if MEMBER_TASKS[entry.dialect] == VOLCANO_TASK else ""
    assert registry.member_task(entry.dialect, {}, volcano_only) == expected


def test_a_pod_in_no_gang_reads_volcanos_task() -> None:
    assert registry.member_task(None, TASK_LABELS, TASK_NOTES) == VOLCANO_TASK


TASK_MINIMA_FIELDS = {
    Dialect.VOLCANO: "spec.minTaskMember",
    Dialect.KAI: "spec.subGroups",
    Dialect.GROVE: "spec.podgroups",
    Dialect.YUNIKORN: "annotation yunikorn.apache.org/task-groups",
    # A composite's tasks are its PodGroups: a member arriving for another PodGroup's
    # template slot is told of the composite's own field (`template.pick_slot`).
    Dialect.COMPOSITE: "spec.schedulingPolicy.gang.minGroupCount",
}


@ENTRIES
def test_per_task_minima_are_named_by_the_field_their_dialect_sets_them_in(
    entry: registry.GroupDialect,
) -> None:
    # The other dialects set no per-task minima; messages name Volcano's field, as their
    # members' tasks are Volcano's.
    expected = TASK_MINIMA_FIELDS.get(entry.dialect, "spec.minTaskMember")
    assert registry.task_minima_field(entry.dialect) == expected
    assert registry.task_minima_field(entry.dialect.value) == expected  # as views hold it
    assert registry.minima_field((("worker", 2),), entry.dialect) == expected


@ENTRIES
def test_a_composite_tree_and_yunikorn_task_groups_name_their_own_field_in_any_dialect(
    entry: registry.GroupDialect,
) -> None:
    tree = ChildGroups("serve", 1, (("prefill", 1), ("decode", 2)))
    groups = TaskGroupMinima((("worker", 2),))
    assert registry.minima_field(tree, entry.dialect) == "spec.schedulingPolicy.gang.minGroupCount"
    assert registry.minima_field(groups, entry.dialect) == (
        "annotation yunikorn.apache.org/task-groups"
    )


def test_minima_of_no_known_dialect_are_named_by_volcanos_field() -> None:
    assert registry.task_minima_field("") == "spec.minTaskMember"
    assert registry.minima_field((("worker", 2),)) == "spec.minTaskMember"


# (dialect, version) -> the status field and condition types (True: placed) saying whether
# a gang is placed; Volcano's `Unschedulable` True says it waits.
PLACING_CONDITIONS = {
    (Dialect.SCHEDULER_PLUGINS, "v1alpha1"): ("conditions", {"PodGroupScheduled": True}),
    (Dialect.VOLCANO, "v1beta1"): ("conditions", {"Unschedulable": False, "Scheduled": True}),
    (Dialect.KAI, "v2alpha2"): ("schedulingConditions", {"UnschedulableOnNodePool": False}),
    (Dialect.GROVE, "v1alpha1"): ("conditions", {"Scheduled": True}),
    (Dialect.UPSTREAM, "v1beta1"): ("conditions", {"PodGroupInitiallyScheduled": True}),
    (Dialect.UPSTREAM, "v1alpha3"): ("conditions", {"PodGroupInitiallyScheduled": True}),
    (Dialect.UPSTREAM, "v1alpha2"): ("conditions", {"PodGroupScheduled": True}),
    (Dialect.COMPOSITE, "v1alpha3"): (
        "conditions",
        {"CompositePodGroupInitiallyScheduled": True},
    ),
}


@pytest.mark.parametrize(
    ("dialect", "version"), PLACING_CONDITIONS, ids=[f"{d}-{v}" for d, v in PLACING_CONDITIONS]
)
def test_each_dialects_status_says_whether_its_gang_is_placed_in_its_own_conditions(
    dialect: Dialect, version: str
) -> None:
    entry = registry.dialect(dialect)
    assert (entry.conditions_field, entry.placing_conditions(version)) == (
        PLACING_CONDITIONS[dialect, version]
    )


@ENTRIES
def test_every_version_of_a_gang_object_has_conditions_saying_whether_it_is_placed(
    entry: registry.GroupDialect,
) -> None:
    versions = {
        api_version.rpartition("/")[2]
        for api_version, kind in entry.kinds
        if kind != "Workload"  # a v1alpha1 Workload has no status
    }
    assert all(entry.placing_conditions(version) for version in versions)
    if not entry.kinds:
        assert not entry.placing_conditions("v1")  # no object, no status


# --- precedence ------------------------------------------------------------------------

SP_LABEL = {"scheduling.x-k8s.io/pod-group": "sp"}
PHALANX = {"phalanx.io/pod-group": "ph", "phalanx.io/min-member": "2"}
VOLCANO = {"scheduling.k8s.io/group-name": "vc"}


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "winner", "overruled"),
    [
        ({}, {}, {}, None, []),
        ({}, PHALANX, {"scheduling_group": "up"}, "ph", [Dialect.UPSTREAM]),
        (SP_LABEL, VOLCANO, {}, "sp", [Dialect.VOLCANO]),
        ({}, VOLCANO, {"scheduling_group": "up"}, "volcano:default/vc", [Dialect.UPSTREAM]),
        (
            SP_LABEL,
            VOLCANO,
            {"workload_ref": {"name": "w", "podGroup": "g"}},
            "sp",
            [Dialect.VOLCANO, Dialect.UPSTREAM],
        ),
        ({}, {**PHALANX, **VOLCANO}, {}, "ph", [Dialect.VOLCANO]),
        ({}, {}, {"scheduling_group": "up"}, "upstream:default/up", []),
    ],
    ids=[
        "none",
        "phalanx-over-upstream",
        "scheduler-plugins-over-volcano",
        "volcano-over-upstream",
        "three-claims",
        "phalanx-over-volcano",
        "upstream-alone",
    ],
)
def test_one_precedence_decides_a_pod_claimed_twice(
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
    winner: str | None,
    overruled: list[Dialect],
) -> None:
    found = parse_pod(pod_obj("p", labels=labels, annotations=annotations, **spec))
    key = None if found.group is None else found.group.key
    assert key == (f"default/{winner}" if winner in ("sp", "ph") else winner)
    assert [claim.dialect for claim in found.overruled] == overruled
    assert found.invalid == ""


def test_the_precedence_is_the_documented_one() -> None:
    assert registry.PRECEDENCE == (
        Dialect.ANNOTATIONS,
        Dialect.SCHEDULER_PLUGINS,
        Dialect.VOLCANO,
        Dialect.KAI,
        Dialect.GROVE,
        Dialect.KUEUE,
        Dialect.YUNIKORN,
        Dialect.LWS,
        Dialect.UPSTREAM,
    )


GROVE_LABEL = {"grove.io/podgang": "gr"}
KAI_NOTE = {"pod-group-name": "kai"}
KUEUE_LABEL = {"kueue.x-k8s.io/pod-group-name": "kq"}
KUEUE_COUNT = {"kueue.x-k8s.io/pod-group-total-count": "2"}


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "winner", "overruled"),
    [
        # KAI's podgrouper, scheduling Grove's workloads, names its own PodGroup on the pods.
        (GROVE_LABEL, KAI_NOTE, {}, "kai:default/kai", [Dialect.GROVE]),
        (GROVE_LABEL, VOLCANO, {}, "volcano:default/vc", [Dialect.GROVE]),
        (
            {**GROVE_LABEL, **KUEUE_LABEL},
            KUEUE_COUNT,
            {},
            "grove:default/gr",
            [Dialect.KUEUE],
        ),
        (GROVE_LABEL, {}, {"scheduling_group": "up"}, "grove:default/gr", [Dialect.UPSTREAM]),
        (GROVE_LABEL, {}, {}, "grove:default/gr", []),
    ],
    ids=[
        "kai-over-grove",
        "volcano-over-grove",
        "grove-over-kueue",
        "grove-over-upstream",
        "grove-alone",
    ],
)
def test_grove_s_podgang_wins_after_kai_s_and_before_kueue_s(
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
    winner: str,
    overruled: list[Dialect],
) -> None:
    found = parse_pod(pod_obj("p", labels=labels, annotations=annotations, **spec))
    assert found.group is not None
    assert found.group.key == winner
    assert [claim.dialect for claim in found.overruled] == overruled


def test_claims_that_agree_are_not_a_contest() -> None:
    found = parse_pod(pod_obj("p", group="job", annotations={"phalanx.io/pod-group": "job"}))
    assert (found.group, found.overruled, registry.contest_message(found)) == (
        GroupRef("default", "job"),
        (),
        "",
    )


def test_a_contest_is_said_in_one_sentence() -> None:
    found = parse_pod(pod_obj("trainer-0", namespace="ml", group="job", volcano_group="job"))
    assert registry.contest_message(found) == (
        "pod ml/trainer-0 is claimed by more than one gang dialect: scheduler-plugins group "
        "ml/job wins (precedence annotations > scheduler-plugins > volcano > kai > grove > kueue > "
        "yunikorn > lws > upstream) over volcano group volcano:ml/job"
    )


def test_a_malformed_winning_claim_is_said_by_invalid_alone() -> None:
    found = parse_pod(pod_obj("p", group="a", annotations={"phalanx.io/pod-group": "b"}))
    assert found.invalid.startswith("annotation phalanx.io/pod-group")
    assert registry.contest_message(found) == ""


def test_a_malformed_losing_claim_is_named_with_its_problem() -> None:
    found = parse_pod(pod_obj("p", group="job", annotations={"scheduling.k8s.io/group-name": "X"}))
    assert found.invalid == ""
    assert registry.contest_message(found).endswith(
        'over volcano (annotation scheduling.k8s.io/group-name: "X" is not a valid PodGroup '
        'name (lower-case letters, digits, "-" and "."))'
    )


# --- objects ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        (podgroup_obj("job", 2, namespace="ml"), "ml/job"),
        (volcano_podgroup_obj("job", 2, namespace="ml"), "volcano:ml/job"),
        (upstream_podgroup_obj("job", 2, namespace="ml"), "upstream:ml/job"),
        (upstream_podgroup_obj("job", 2, namespace="ml", version="v1alpha2"), "upstream:ml/job"),
        (workload_obj("job", {"workers": 2}, namespace="ml"), "upstream:ml/job"),
    ],
    ids=["scheduler-plugins", "volcano", "upstream-v1beta1", "upstream-v1alpha2", "workload"],
)
def test_any_gang_object_is_parsed_by_its_dialect(obj: dict[str, Any], key: str) -> None:
    parsed = registry.parse_group_object(obj)
    assert parsed is not None
    assert parsed.value.key == key


ANNOTATED_OBJECTS = {
    "scheduler-plugins": lambda notes: podgroup_obj("job", 2, annotations=notes),
    "volcano": lambda notes: volcano_podgroup_obj("job", 2, annotations=notes),
    "upstream": lambda notes: upstream_podgroup_obj("job", 2, annotations=notes),
    "workload": lambda notes: workload_obj("job", {"workers": 2}, annotations=notes),
    "composite": lambda notes: composite_obj("job", 2, annotations=notes),
}


@pytest.mark.parametrize("make", ANNOTATED_OBJECTS.values(), ids=ANNOTATED_OBJECTS)
@pytest.mark.parametrize(
    ("key", "warning"),
    [
        (
            "phalanx.io/placment",
            'metadata.annotations["phalanx.io/placment"] is ignored: Phalanx reads no such '
            "annotation (did you mean phalanx.io/placement?)",
        ),
        (
            "phalanx.io/topology-requried",
            'metadata.annotations["phalanx.io/topology-requried"] is ignored: Phalanx reads no '
            "such annotation (did you mean phalanx.io/topology-required?)",
        ),
        (
            "phalanx.io/min-member",
            'metadata.annotations["phalanx.io/min-member"] is ignored: Phalanx reads it on '
            "pods, not on a gang object",
        ),
        (
            "phalanx.io/leaderworkerset-gang",
            'metadata.annotations["phalanx.io/leaderworkerset-gang"] is ignored: Phalanx reads '
            "it on pods, not on a gang object",
        ),
        (
            "phalanx.io/x",
            'metadata.annotations["phalanx.io/x"] is ignored: Phalanx reads no such annotation',
        ),
    ],
    ids=["typo", "typo-of-a-topology-key", "meant-for-a-pod", "lws-opt-in", "unknown"],
)
def test_an_annotation_under_phalanx_io_that_phalanx_does_not_read_is_ignored_with_a_warning(
    make: Any, key: str, warning: str
) -> None:
    parsed = registry.parse_group_object(make({key: "pack"}))
    assert parsed is not None
    assert warning in parsed.warnings


@pytest.mark.parametrize("make", ANNOTATED_OBJECTS.values(), ids=ANNOTATED_OBJECTS)
def test_the_phalanx_io_annotations_a_gang_object_may_carry_draw_no_warning(make: Any) -> None:
    notes = {
        "phalanx.io/placement": "pack",
        "phalanx.io/plan": "",
        "phalanx.io/differentiable": "",
        "phalanx.io/schedule-timeout-seconds": "30",
        "phalanx.io/topology": "default",
        "phalanx.io/topology-preferred": "nvidia.com/gpu.clique",
        "phalanx.io/commit": "",
        "example.com/placment": "pack",  # not Phalanx's
    }
    parsed = registry.parse_group_object(make(notes))
    assert parsed is not None
    assert not [w for w in parsed.warnings if "annotations" in w]


def _without_size(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if "minMember" in spec:
        del spec["minMember"]
    elif "schedulingPolicy" in spec:
        del spec["schedulingPolicy"]["gang"]["minCount"]
    else:
        del spec["podGroups"][0]["policy"]["gang"]["minCount"]
    return obj


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        (
            podgroup_obj("job", 2, namespace="ml"),
            "PodGroup ml/job: spec.minMember: is required (a positive integer)",
        ),
        (
            volcano_podgroup_obj("job", 2, namespace="ml"),
            "PodGroup ml/job: spec.minMember: is required (a positive integer)",
        ),
        (
            upstream_podgroup_obj("job", 2, namespace="ml"),
            "PodGroup ml/job: spec.schedulingPolicy.gang.minCount: is required "
            "(a positive integer)",
        ),
        (
            workload_obj("job", {"workers": 2}, namespace="ml"),
            "Workload ml/job: spec.podGroups[0].policy.gang.minCount: is required "
            "(a positive integer)",
        ),
    ],
    ids=["scheduler-plugins", "volcano", "upstream", "workload"],
)
def test_a_gang_object_without_its_size_is_refused_as_missing_it(
    obj: dict[str, Any], error: str
) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        registry.parse_group_object(_without_size(obj))
    assert str(raised.value) == error


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        (
            podgroup_obj("job", 2**31, namespace="ml"),
            "spec.minMember: must be at most 2147483647 (an int32), not 2147483648",
        ),
        (
            podgroup_obj("job", 2, namespace="ml", timeout=10**12),
            "spec.scheduleTimeoutSeconds: must be at most 2147483647 (an int32), not 1000000000000",
        ),
        (
            volcano_podgroup_obj("job", 10**10, namespace="ml"),
            "spec.minMember: must be at most 2147483647 (an int32), not 10000000000",
        ),
    ],
    ids=["min-member", "timeout", "volcano-min-member"],
)
def test_a_number_beyond_the_apis_int32_is_refused_naming_the_field(
    obj: dict[str, Any], error: str
) -> None:
    # A CRD's "format: int32" is not enforced by the API server; the other schedulers of
    # these APIs could not even decode such an object.
    with pytest.raises(InvalidObjectError) as raised:
        registry.parse_group_object(obj)
    assert str(raised.value) == f"PodGroup ml/job: {error}"


def _named(obj: dict[str, Any], name: str, namespace: str = "ml") -> dict[str, Any]:
    obj["metadata"] |= {"name": name, "namespace": namespace}
    return obj


NAME_FORM = '(lower-case letters, digits, "-" and ".")'


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        (
            _named(podgroup_obj("job", 2), "Job_1"),
            f'PodGroup ml/Job_1: metadata.name: "Job_1" is not a valid PodGroup name {NAME_FORM}',
        ),
        (
            _named(volcano_podgroup_obj("job", 2), "a/b"),
            f'PodGroup ml/a/b: metadata.name: "a/b" is not a valid PodGroup name {NAME_FORM}',
        ),
        (
            _named(upstream_podgroup_obj("job", 2), "train/workers"),
            'PodGroup ml/train/workers: metadata.name: "train/workers" is not a valid '
            f"PodGroup name {NAME_FORM}",
        ),
        (
            _named(workload_obj("job", {"workers": 2}), "job", "ML"),
            'Workload ML/job: metadata.namespace: "ML" is not a valid namespace '
            '(lower-case letters, digits and "-", at most 63)',
        ),
    ],
    ids=["not-lower-case", "slash", "upstream-slash-is-a-workload-key", "namespace"],
)
def test_a_gang_object_whose_name_no_object_could_have_is_refused_naming_the_field(
    obj: dict[str, Any], error: str
) -> None:
    # From a cluster file; "upstream:ml/train/workers" is also Workload train's gang key.
    with pytest.raises(InvalidObjectError) as raised:
        registry.parse_group_object(obj)
    assert str(raised.value) == error


def test_other_kinds_are_not_gang_objects() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    old = podgroup_obj("job", 2)
    old["apiVersion"] = "scheduling.sigs.k8s.io/v1alpha1"
    assert registry.parse_group_object(node) is None
    assert registry.parse_group_object(old) is None


def test_parse_object_reads_the_pod_group_of_every_dialect() -> None:
    assert isinstance(parse_object(volcano_podgroup_obj("job", 2)), PodGroup)
    assert isinstance(parse_object(upstream_podgroup_obj("job", 2)), PodGroup)
    with pytest.raises(InvalidObjectError, match="unsupported kind"):
        parse_object(workload_obj("job", {"workers": 2}))


# --- resolving -------------------------------------------------------------------------


def book(*objects: dict[str, Any]) -> dict[str, GroupObject]:
    found: dict[str, GroupObject] = {}
    for obj in objects:
        parsed = registry.parse_group_object(obj)
        assert parsed is not None
        found[parsed.value.key] = parsed.value
    return found


OBJECTS = book(
    podgroup_obj("job", 4, namespace="ml"),
    volcano_podgroup_obj("job", 3, namespace="ml"),
    upstream_podgroup_obj("gang-0", 8, namespace="ml"),
    workload_obj("train", {"workers": 2, "driver": None}, namespace="ml"),
)


@pytest.mark.parametrize(
    ("ref", "min_member"),
    [
        (GroupRef("ml", "job"), 4),
        (GroupRef("ml", "job", Dialect.VOLCANO), 3),
        (GroupRef("ml", "gang-0", Dialect.UPSTREAM), 8),
        (GroupRef("ml", "train", Dialect.UPSTREAM, "workers", "1"), 2),
    ],
    ids=["scheduler-plugins", "volcano", "upstream", "workload-replica"],
)
def test_a_ref_resolves_to_its_own_dialects_gang(ref: GroupRef, min_member: int) -> None:
    gang = registry.resolve(ref, OBJECTS.get)
    assert isinstance(gang, PodGroup)
    assert (gang.key, gang.min_member) == (ref.key, min_member)


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        (
            GroupRef("ml", "other"),
            "waiting for PodGroup ml/other to exist (pods name it with a label)",
        ),
        (
            GroupRef("ml", "other", Dialect.VOLCANO),
            "waiting for Volcano PodGroup ml/other (scheduling.volcano.sh/v1beta1) to exist "
            "(pods name it with annotation scheduling.k8s.io/group-name)",
        ),
        (
            GroupRef("ml", "other", Dialect.UPSTREAM),
            "waiting for PodGroup ml/other (scheduling.k8s.io) to exist "
            "(pods name it in spec.schedulingGroup.podGroupName)",
        ),
        (
            GroupRef("ml", "other", Dialect.UPSTREAM, "workers"),
            "waiting for Workload ml/other (scheduling.k8s.io/v1alpha1) to exist "
            "(pods name it in spec.workloadRef)",
        ),
    ],
    ids=["scheduler-plugins", "volcano", "upstream", "workload"],
)
def test_a_missing_object_is_a_wait_not_an_error(ref: GroupRef, reason: str) -> None:
    assert registry.resolve(ref, OBJECTS.get) == Unresolved(reason, waiting=True)


def test_a_wait_for_an_api_the_server_does_not_serve_says_so() -> None:
    ref = GroupRef("ml", "job-9", Dialect.VOLCANO)
    found = registry.resolve(ref, OBJECTS.get, served=Served((SP_KIND,)))
    assert isinstance(found, Unresolved)
    assert found.waiting
    assert found.reason.endswith("; this API server does not serve it yet (volcano objects)")
    still = registry.resolve(ref, OBJECTS.get, served=Served((SP_KIND, VOLCANO_KIND)))
    assert isinstance(still, Unresolved)
    assert "does not serve" not in still.reason


def test_a_workload_without_the_named_pod_group_is_invalid() -> None:
    found = registry.resolve(GroupRef("ml", "train", Dialect.UPSTREAM, "ps"), OBJECTS.get)
    assert isinstance(found, Unresolved)
    assert not found.waiting
    assert found.reason.startswith('Workload ml/train has no pod group "ps"')


def test_a_basic_pod_group_resolves_as_no_gang() -> None:
    found = registry.resolve(GroupRef("ml", "train", Dialect.UPSTREAM, "driver"), OBJECTS.get)
    assert isinstance(found, PodGroup)
    assert found.basic


def test_annotation_only_members_declare_the_gang_when_no_object_exists() -> None:
    members = [pod(f"s-{i}", namespace="ml", group="sweep", min_member=3) for i in range(3)]
    found = registry.resolve(GroupRef("ml", "sweep"), OBJECTS.get, members, default_timeout=90)
    assert found == PodGroup("ml", "sweep", 3, timeout_seconds=90, from_crd=False)


def test_a_scheduler_plugins_object_wins_over_member_declarations() -> None:
    members = [pod("s-0", namespace="ml", group="job", min_member=9)]
    found = registry.resolve(GroupRef("ml", "job"), OBJECTS.get, members)
    assert isinstance(found, PodGroup)
    assert found.min_member == 4


def test_members_that_disagree_are_invalid_not_waiting() -> None:
    members = [pod(f"s-{i}", namespace="ml", group="sweep", min_member=2 + i) for i in range(2)]
    found = registry.resolve(GroupRef("ml", "sweep"), OBJECTS.get, members)
    assert found == Unresolved(
        "members of gang ml/sweep disagree on phalanx.io/min-member: 2, 3", waiting=False
    )


# --- status writes and Events ----------------------------------------------------------

SP_KIND = ServedKind(
    Dialect.SCHEDULER_PLUGINS, "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"
)
VOLCANO_KIND = ServedKind(
    Dialect.VOLCANO, "scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups", False
)
UPSTREAM_KIND = ServedKind(
    Dialect.UPSTREAM, "scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups"
)
KAI_KIND = ServedKind(Dialect.KAI, "scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups")
WORKLOAD_KIND = ServedKind(
    Dialect.UPSTREAM, "scheduling.k8s.io", "v1alpha1", "Workload", "workloads", False
)


def waiting(ref: GroupRef) -> GroupStatus:
    return GroupStatus(ref, GroupPhase.PENDING, 0, 0, "waiting-for-members", "1/4 exist")


@pytest.mark.parametrize(
    ("ref", "kind", "path", "fields"),
    [
        (
            GroupRef("ml", "job"),
            SP_KIND,
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups/job/status",
            {"phase", "scheduled", "running", "succeeded", "failed", "conditions"},
        ),
        (
            GroupRef("ml", "job", Dialect.VOLCANO),
            VOLCANO_KIND,
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups/job",
            {"phase", "running", "succeeded", "failed", "conditions"},
        ),
        (
            GroupRef("ml", "gang-0", Dialect.UPSTREAM),
            UPSTREAM_KIND,
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/gang-0/status",
            {"conditions"},
        ),
        (
            GroupRef("ml", "train", Dialect.KAI),
            KAI_KIND,
            "/apis/scheduling.run.ai/v2alpha2/namespaces/ml/podgroups/train/status",
            {"running", "succeeded", "failed", "schedulingConditions"},
        ),
    ],
    ids=["scheduler-plugins", "volcano", "upstream", "kai"],
)
def test_each_dialect_writes_status_where_its_api_keeps_it(
    ref: GroupRef, kind: ServedKind, path: str, fields: set[str]
) -> None:
    write = registry.status_write(waiting(ref), kind, None, T0)
    assert write is not None
    assert write.path == path
    assert write.body == {"status": write.status}
    assert set(write.status) == fields


def test_a_status_already_shown_is_not_written_again() -> None:
    ref = GroupRef("ml", "job", Dialect.VOLCANO)
    first = registry.status_write(waiting(ref), VOLCANO_KIND, None, T0)
    assert first is not None
    shown = {**first.status, "minMember": 4}  # the object's status may hold more
    assert registry.status_write(waiting(ref), VOLCANO_KIND, shown, T0 + 60) is None


def condition(kind: str, state: str, message: str = "") -> dict[str, str]:
    reason = "Scheduled" if state == "True" else "Unschedulable"
    at = "2025-12-31T00:00:00Z"
    return {
        "type": kind,
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def test_an_upstream_status_is_a_strategic_patch_of_phalanxs_condition_under_a_precondition() -> (
    None
):
    ref = GroupRef("ml", "gang-0", Dialect.UPSTREAM)
    theirs = condition("DisruptionTarget", "False")
    previous = {"conditions": [theirs, condition("PodGroupInitiallyScheduled", "False", "old")]}
    write = registry.status_write(waiting(ref), UPSTREAM_KIND, previous, T0, resource_version="41")
    assert write is not None
    ours = condition("PodGroupInitiallyScheduled", "False", "1/4 exist")
    assert (write.patch, write.resource_version) == (registry.StatusPatch.STRATEGIC, "41")
    assert write.body == {"metadata": {"resourceVersion": "41"}, "status": {"conditions": [ours]}}
    assert write.status == {"conditions": [theirs, ours]}  # what the object then holds


@pytest.mark.parametrize(
    ("ref", "kind", "precondition"),
    [
        (GroupRef("ml", "job"), SP_KIND, ""),
        (GroupRef("ml", "job", Dialect.VOLCANO), VOLCANO_KIND, "41"),
        (GroupRef("ml", "train", Dialect.KAI), KAI_KIND, "41"),
    ],
    ids=["scheduler-plugins-alone", "volcano-shared", "kai-shared"],
)
def test_a_whole_status_is_a_merge_patch_under_a_precondition_when_others_write_it(
    ref: GroupRef, kind: ServedKind, precondition: str
) -> None:
    write = registry.status_write(waiting(ref), kind, None, T0, resource_version="41")
    assert write is not None
    assert (write.patch, write.resource_version) == (registry.StatusPatch.MERGE, precondition)
    expected: dict[str, object] = {"status": write.status}
    if precondition:
        expected["metadata"] = {"resourceVersion": precondition}
    assert write.body == expected
    assert registry.shares_status(kind) is bool(precondition)


def test_a_workload_gang_has_no_status_to_write() -> None:
    ref = GroupRef("ml", "train", Dialect.UPSTREAM, "workers")
    assert registry.status_write(waiting(ref), WORKLOAD_KIND, None, T0) is None


def test_events_name_the_object_that_holds_the_gang() -> None:
    ref = GroupRef("ml", "train", Dialect.UPSTREAM, "workers", "2")
    assert registry.involved_object(ref, WORKLOAD_KIND, "wl-uid") == {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "namespace": "ml",
        "name": "train",
        "uid": "wl-uid",
    }


def test_the_outcomes_dialects_spell_are_the_planners() -> None:
    assert {status.OUTCOME_WAITING, status.OUTCOME_UNFIT, status.OUTCOME_INVALID} <= {
        outcome.value for outcome in Outcome
    }


def test_every_dialect_that_owns_objects_can_say_why_members_wait() -> None:
    for entry in registry.DIALECTS:
        if entry.kinds:
            assert entry.waiting_reason is not None, entry.dialect
            assert entry.build_status is not None, entry.dialect
    assert isinstance(OBJECTS["upstream:ml/train"], Workload)


# --- an object being deleted -------------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [
        podgroup_obj("job", 2),
        volcano_podgroup_obj("job", 2),
        upstream_podgroup_obj("job", 2),
        upstream_podgroup_obj("job", 2, version="v1alpha2"),
        workload_obj("train", {"workers": 2}),
    ],
    ids=["scheduler-plugins", "volcano", "upstream", "upstream-v1alpha2", "workload"],
)
def test_every_dialect_reads_whether_its_gang_object_is_being_deleted(obj: dict[str, Any]) -> None:
    held = {**obj["metadata"], "deletionTimestamp": "2026-12-05T18:00:00Z", "finalizers": ["x/y"]}
    live = registry.parse_group_object(obj)
    deleting = registry.parse_group_object({**obj, "metadata": held})
    assert live is not None
    assert deleting is not None
    assert (live.value.deleting, deleting.value.deleting) == (False, True)
    assert live.value != deleting.value


def test_a_workloads_gangs_are_being_deleted_with_it() -> None:
    obj = workload_obj("train", {"workers": 2})
    parsed = registry.parse_group_object(
        {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-12-05T18:00:00Z"}}
    )
    assert parsed is not None
    ref = GroupRef("default", "train", Dialect.UPSTREAM, "workers")
    gang = registry.resolve(ref, lambda _key: parsed.value)
    assert isinstance(gang, PodGroup)
    assert gang.deleting
    assert registry.deleting_reason(ref) == (
        "Workload default/train is being deleted (gang upstream:default/train/workers): "
        "its members are not scheduled any more"
    )


# --- bad input ---------------------------------------------------------------------------

# Field names every dialect reads, so that garbage reaches the parsers' inner fields.
_FIELDS = (
    "minMember",
    "minReplicas",
    "minCount",
    "minTaskMember",
    "minSubGroup",
    "minResources",
    "scheduleTimeoutSeconds",
    "podgroups",
    "podGroups",
    "subGroups",
    "podReferences",
    "podGroupNames",
    "topologyConstraintGroupConfigs",
    "topologyConstraint",
    "packConstraint",
    "requiredTopologyLevel",
    "preferredTopologyLevel",
    "required",
    "preferred",
    "topology",
    "networkTopology",
    "highestTierAllowed",
    "schedulingPolicy",
    "schedulingConstraints",
    "gang",
    "basic",
    "policy",
    "disruptionMode",
    "single",
    "all",
    "key",
    "name",
    "namespace",
    "parent",
    "queue",
    "priorityClassName",
    "reuseReservationRef",
    "podGroupTemplates",
    "templateRef",
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**40),
    st.floats(allow_nan=True),
    st.sampled_from(["", "a", "-1", "3", "x/y", "topology.kubernetes.io/zone", "prefill"]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(_FIELDS), inner, max_size=4)
    ),
    max_leaves=20,
)


# A spec is an object of those fields, as every dialect's is, with garbage below them.
_SPEC = st.dictionaries(st.sampled_from(_FIELDS), _JSON, min_size=2, max_size=8)


@pytest.mark.parametrize("kind", registry.group_kinds(), ids="/".join)
@settings(max_examples=150)
@given(spec=st.one_of(_SPEC, _JSON), status=_JSON)
def test_every_gang_object_parser_answers_garbage_with_a_parse_or_an_error_naming_it(
    kind: tuple[str, str], spec: object, status: object
) -> None:
    obj = {
        "apiVersion": kind[0],
        "kind": kind[1],
        "metadata": {"name": "g", "namespace": "ml", "uid": "u1", "resourceVersion": "1"},
        "spec": spec,
        "status": status,
    }
    try:
        registry.parse_group_object(obj)
    except InvalidObjectError as exc:
        told = str(exc)
    else:
        told = "parsed"
    assert told  # a refusal says what was wrong; anything but InvalidObjectError fails here
