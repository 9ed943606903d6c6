"""Kueue's plain pod groups: a gang declared on its pods by Kueue's label and annotation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import pod, pod_obj
from phalanx.core.groups import kueue, registry
from phalanx.core.groups.registry import Unresolved
from phalanx.core.inventory import parse_pod
from phalanx.core.model import Dialect, GroupRef, Pod, PodGroup

NAME = "kueue.x-k8s.io/pod-group-name"
COUNT = "kueue.x-k8s.io/pod-group-total-count"
REF = GroupRef("ml", "sweep", Dialect.KUEUE)


def kueue_pod(
    name: str,
    group: str | None = "sweep",
    count: str | None = "3",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **more: Any,
) -> Pod:
    """A pod as a Kueue user writes it (the queue label too), parsed as the sources do."""
    all_labels = {"kueue.x-k8s.io/queue-name": "user-queue", **(labels or {})}
    all_annotations = dict(annotations or {})
    if group is not None:
        all_labels[NAME] = group
    if count is not None:
        all_annotations[COUNT] = count
    return parse_pod(
        pod_obj(name, namespace="ml", labels=all_labels, annotations=all_annotations, **more)
    )


# --- reading ---------------------------------------------------------------------------


def test_the_label_and_the_total_count_make_a_pod_a_member_of_a_kueue_gang() -> None:
    found = kueue_pod("w-0")
    assert (found.group, found.group_dialect, found.min_member, found.invalid) == (
        REF,
        Dialect.KUEUE,
        3,
        "",
    )
    assert found.group is not None
    assert found.group.key == "kueue:ml/sweep"


def test_a_kueue_gang_is_not_the_scheduler_plugins_gang_of_the_same_name() -> None:
    assert kueue_pod("w-0").group != parse_pod(pod_obj("p", namespace="ml", group="sweep")).group


def test_a_pod_without_the_label_is_in_no_gang() -> None:
    found = kueue_pod("solo", group=None, count=None)
    assert (found.group, found.invalid) == (None, "")


def test_a_members_size_is_the_largest_an_int32_holds() -> None:
    assert kueue_pod("w-0", count="2147483647").min_member == 2147483647


@pytest.mark.parametrize(
    ("group", "count", "problem"),
    [
        (
            "sweep",
            None,
            "label kueue.x-k8s.io/pod-group-name needs annotation "
            "kueue.x-k8s.io/pod-group-total-count (the group's size; Kueue requires both)",
        ),
        (
            "sweep",
            "three",
            'annotation kueue.x-k8s.io/pod-group-total-count: "three" is not a positive integer',
        ),
        (
            "sweep",
            "0",
            'annotation kueue.x-k8s.io/pod-group-total-count: "0" is not a positive integer',
        ),
        (
            "sweep",
            "-2",
            'annotation kueue.x-k8s.io/pod-group-total-count: "-2" is not a positive integer',
        ),
        (
            "sweep",
            "2147483648",
            'annotation kueue.x-k8s.io/pod-group-total-count: "2147483648" is more than '
            "2147483647, the largest an int32 API field holds",
        ),
        (
            "Sweep_1",
            "3",
            'label kueue.x-k8s.io/pod-group-name: "Sweep_1" is not a valid Kueue pod group '
            'name (lower-case letters, digits, "-" and ".")',
        ),
        (
            None,
            "3",
            "annotation kueue.x-k8s.io/pod-group-total-count needs label "
            "kueue.x-k8s.io/pod-group-name",
        ),
    ],
    ids=[
        "count-missing",
        "not-a-number",
        "zero",
        "negative",
        "beyond-int32",
        "bad-name",
        "no-label",
    ],
)
def test_a_malformed_declaration_makes_the_pod_invalid_naming_the_key(
    group: str | None, count: str | None, problem: str
) -> None:
    found = kueue_pod("w-0", group, count)
    assert (found.invalid, found.min_member) == (problem, None)


def test_members_may_set_the_gangs_timeout_as_annotation_only_members_do() -> None:
    timeout = {"phalanx.io/schedule-timeout-seconds": "30"}
    members = [kueue_pod("w-0", annotations=timeout), kueue_pod("w-1")]
    assert [m.invalid for m in members] == ["", ""]
    found = registry.resolve(REF, lambda _: None, members, default_timeout=90)
    assert isinstance(found, PodGroup)
    assert found.timeout_seconds == 30


def test_a_members_own_min_member_is_refused_the_size_is_kueues_total_count() -> None:
    found = kueue_pod("w-0", annotations={"phalanx.io/min-member": "2"})
    assert found.min_member == 3
    assert found.invalid == (
        "annotation phalanx.io/min-member needs annotation phalanx.io/pod-group "
        "or label scheduling.x-k8s.io/pod-group"
    )


# --- the gang its members declare ------------------------------------------------------


def member(name: str, size: int | None) -> Pod:
    return replace(pod(name, namespace="ml", min_member=size), group=REF)


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        (
            [member("a", 3), member("b", 3)],
            PodGroup("ml", "sweep", 3, timeout_seconds=45, from_crd=False, dialect=Dialect.KUEUE),
        ),
        (
            [member("a", 2), member("b", 3)],
            "members of gang kueue:ml/sweep disagree on kueue.x-k8s.io/pod-group-total-count: 2, 3",
        ),
        (
            [member("a", None)],
            "gang kueue:ml/sweep: no member declares kueue.x-k8s.io/pod-group-total-count",
        ),
    ],
    ids=["agree", "disagree", "none-declares"],
)
def test_members_declare_their_gang_together(members: list[Pod], expected: PodGroup | str) -> None:
    assert kueue.gang_from_members(REF, members, default_timeout=45) == expected


def test_a_member_missing_the_count_says_why_the_gang_cannot_form() -> None:
    broken = kueue_pod("w-1", count=None)
    assert kueue.gang_from_members(REF, [broken], default_timeout=45) == (
        f"gang kueue:ml/sweep: pod w-1: {broken.invalid}"
    )


def test_the_registry_resolves_a_kueue_gang_from_its_members_never_an_object() -> None:
    members = [kueue_pod(f"w-{i}") for i in range(2)]
    found = registry.resolve(REF, lambda _: None, members, default_timeout=90)
    assert found == PodGroup(
        "ml", "sweep", 3, timeout_seconds=90, from_crd=False, dialect=Dialect.KUEUE
    )


def test_members_that_disagree_are_invalid_not_waiting() -> None:
    members = [kueue_pod("w-0", count="3"), kueue_pod("w-1", count="4")]
    assert registry.resolve(REF, lambda _: None, members) == Unresolved(
        "members of gang kueue:ml/sweep disagree on kueue.x-k8s.io/pod-group-total-count: 3, 4",
        waiting=False,
    )


def test_a_kueue_gang_has_no_object_to_write_status_or_events_to() -> None:
    assert not registry.has_gang_object(Dialect.KUEUE)
    assert registry.gang_source(REF, Dialect.KUEUE, has_object=False) == "annotations"


# --- precedence ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "winner", "overruled"),
    [
        (
            {},
            {"phalanx.io/pod-group": "ph", "phalanx.io/min-member": "2"},
            {},
            "ml/ph",
            [Dialect.KUEUE],
        ),
        ({"scheduling.x-k8s.io/pod-group": "sp"}, {}, {}, "ml/sp", [Dialect.KUEUE]),
        ({}, {"scheduling.k8s.io/group-name": "vc"}, {}, "volcano:ml/vc", [Dialect.KUEUE]),
        ({}, {}, {"scheduling_group": "up"}, "kueue:ml/sweep", [Dialect.UPSTREAM]),
    ],
    ids=["annotations-win", "scheduler-plugins-wins", "volcano-wins", "kueue-over-upstream"],
)
def test_a_gang_schedulers_own_dialect_wins_over_kueue_and_kueue_over_upstream(
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
    winner: str,
    overruled: list[Dialect],
) -> None:
    found = kueue_pod("w-0", labels=labels, annotations=annotations, **spec)
    assert found.group is not None
    assert (found.group.key, [c.dialect for c in found.overruled], found.invalid) == (
        winner,
        overruled,
        "",
    )


def test_the_contest_event_names_the_kueue_group_that_lost() -> None:
    found = kueue_pod("w-0", labels={"scheduling.x-k8s.io/pod-group": "sp"})
    assert registry.contest_message(found) == (
        "pod ml/w-0 is claimed by more than one gang dialect: scheduler-plugins group ml/sp "
        "wins (precedence annotations > scheduler-plugins > volcano > kai > grove > kueue > "
        "yunikorn > lws > upstream) over kueue group kueue:ml/sweep"
    )


# --- Kueue's topology requests ----------------------------------------------------------


def test_kueues_pod_set_topology_annotations_apply_to_its_pod_groups() -> None:
    found = kueue_pod(
        "w-0",
        annotations={"kueue.x-k8s.io/podset-required-topology": "example.com/rack"},
    )
    assert found.topology is not None
    assert (found.topology.required, found.invalid) == ("example.com/rack", "")
