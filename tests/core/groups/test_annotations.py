"""Annotation-only gangs: declared on the pods, named like scheduler-plugins PodGroups."""

from __future__ import annotations

import pytest

from builders import pod, pod_obj
from phalanx.core.groups import annotations as annotation_only
from phalanx.core.groups.common import PodView
from phalanx.core.inventory import parse_pod
from phalanx.core.model import Claim, Dialect, GroupRef, Pod, PodGroup
from phalanx.core.rawdict import Source


def view(annotations: dict[str, str], labels: dict[str, str] | None = None) -> PodView:
    return PodView(Source("Pod", "ml/p"), "ml", labels or {}, annotations, {})


LABEL = "scheduling.x-k8s.io/pod-group"


@pytest.mark.parametrize(
    ("found", "labels", "claim"),
    [
        (
            {"phalanx.io/pod-group": "sweep"},
            {},
            Claim(Dialect.ANNOTATIONS, GroupRef("ml", "sweep")),
        ),
        ({}, {LABEL: "sweep"}, None),
        ({"phalanx.io/pod-group": "sweep"}, {LABEL: "sweep"}, None),
        (
            {"phalanx.io/pod-group": "b"},
            {LABEL: "a"},
            Claim(
                Dialect.ANNOTATIONS,
                None,
                (
                    'annotation phalanx.io/pod-group: "b" names a different group than label '
                    'scheduling.x-k8s.io/pod-group: "a"',
                ),
            ),
        ),
        (
            {"phalanx.io/pod-group": "Sweep_1"},
            {},
            Claim(
                Dialect.ANNOTATIONS,
                None,
                (
                    'annotation phalanx.io/pod-group: "Sweep_1" is not a valid PodGroup name '
                    '(lower-case letters, digits, "-" and ".")',
                ),
            ),
        ),
    ],
    ids=["annotation", "label-only", "same-as-label", "differs-from-label", "bad-name"],
)
def test_the_annotation_claims_a_pod_unless_the_label_already_says_so(
    found: dict[str, str], labels: dict[str, str], claim: Claim | None
) -> None:
    assert annotation_only.claim(view(found, labels)) == claim


def test_an_annotation_only_gang_shares_scheduler_plugins_names() -> None:
    by_annotation = parse_pod(
        pod_obj("a", annotations={"phalanx.io/pod-group": "g", "phalanx.io/min-member": "2"})
    )
    by_label = parse_pod(pod_obj("b", group="g"))
    assert by_annotation.group == by_label.group == GroupRef("default", "g")
    assert (by_annotation.group_dialect, by_label.group_dialect) == (
        Dialect.ANNOTATIONS,
        Dialect.SCHEDULER_PLUGINS,
    )


# --- a gang declared by its members ----------------------------------------------------

REF = GroupRef("ml", "sweep")


def member(name: str, min_member: int | None, timeout: int | None = None) -> Pod:
    return pod(name, namespace="ml", group="sweep", min_member=min_member, timeout_seconds=timeout)


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        (
            [member("a", 3, 120), member("b", 3, 60), member("c", None)],
            PodGroup("ml", "sweep", 3, timeout_seconds=60, from_crd=False),
        ),
        ([member("a", 2)], PodGroup("ml", "sweep", 2, timeout_seconds=45, from_crd=False)),
        (
            [member("a", 2), member("b", 3)],
            "members of gang ml/sweep disagree on phalanx.io/min-member: 2, 3",
        ),
        (
            [member("a", None)],
            "waiting for PodGroup ml/sweep to exist (pods name it with a label)",
        ),
        ([], "waiting for PodGroup ml/sweep to exist (pods name it with a label)"),
    ],
    ids=["agree-shortest-timeout", "default-timeout", "disagree", "label-only", "no-members"],
)
def test_members_declare_their_gang_together(members: list[Pod], expected: PodGroup | str) -> None:
    assert annotation_only.gang_from_members(REF, members, default_timeout=45) == expected


def test_a_broken_member_says_why_the_gang_cannot_form() -> None:
    broken = parse_pod(pod_obj("p", namespace="ml", annotations={"phalanx.io/pod-group": "sweep"}))
    assert annotation_only.gang_from_members(REF, [broken], default_timeout=60) == (
        'gang ml/sweep: pod p: annotation phalanx.io/pod-group: "sweep" needs annotation '
        "phalanx.io/min-member (there is no PodGroup object to give it)"
    )


def test_a_pod_in_another_dialects_gang_declares_no_annotation_gang() -> None:
    found = parse_pod(pod_obj("p", volcano_group="job", annotations={"phalanx.io/min-member": "2"}))
    assert found.group == GroupRef("default", "job", Dialect.VOLCANO)
    assert annotation_only.group_from_pod(found) is None
