"""The e2e invariant monitor's grouping (`tests/e2e/scheduling.py`, `gang_counts`), without a
control plane: which pods make a gang, and when its bound ones make its quorum."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "controlplane"))
sys.path.insert(0, str(TESTS / "e2e"))

from scheduling import Obj, Quorum, gang_counts  # noqa: E402  # tests/e2e, put on sys.path above

from phalanx.core.model import ChildGroups  # noqa: E402

# A KubeRay-shaped composite: minGroupCount 2 over a head (minCount 1) and workers (minCount 2).
RAY = ChildGroups("ray", 2, (("ray-head", 1), ("ray-workers", 2)))
# The same, with a second worker group: any two of the three children make it.
RAY3 = ChildGroups("ray", 2, (("ray-head", 1), ("ray-workers", 2), ("ray-extra", 2)))


def member(name: str, group: str, node: str = "") -> Obj:
    spec: Obj = {"schedulingGroup": {"podGroupName": group}}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def quorums(tree: ChildGroups = RAY) -> dict[str, Quorum]:
    """Quorums as a 1.37 spec registers them: each PodGroup's minCount and the composite's."""
    quorums: dict[str, Quorum] = {f"upstream:{name}": need for name, need in tree.pod_groups()}
    quorums["composite:ray"] = tree
    return quorums


PODS = [
    member("head-0", "ray-head", "a"),
    member("worker-0", "ray-workers"),
    member("worker-1", "ray-workers"),
]


def test_a_composites_pods_are_one_gang_not_one_per_podgroup() -> None:
    counts = gang_counts(PODS, quorums())

    assert set(counts) == {"composite:ray"}
    assert counts["composite:ray"].bound == 1


def test_a_composite_with_only_its_head_bound_is_partial_though_its_head_group_is_whole() -> None:
    seen = gang_counts(PODS, quorums())["composite:ray"]

    assert (seen.bound, seen.minimum, seen.whole) == (1, 3, False)


def test_a_composite_is_whole_once_min_group_count_children_each_have_their_min_count() -> None:
    pods = [member("head-0", "ray-head", "a")] + [
        member(f"worker-{i}", "ray-workers", f"n{i}") for i in range(2)
    ]

    assert gang_counts(pods, quorums())["composite:ray"].whole


def test_enough_bound_members_in_too_few_children_do_not_make_a_composite_whole() -> None:
    """Three workers bound make one child group of the two minGroupCount asks."""
    pods = [member("head-0", "ray-head")] + [
        member(f"worker-{i}", "ray-workers", f"n{i}") for i in range(3)
    ]

    seen = gang_counts(pods, quorums(RAY3))["composite:ray"]

    assert (seen.bound, seen.minimum, seen.whole) == (3, 3, False)


@pytest.mark.parametrize(
    ("quorum", "bound", "whole"),
    [(2, 1, False), (2, 2, True)],
    ids=["short-of-min-member", "at-min-member"],
)
def test_a_podgroup_outside_any_composite_is_judged_by_its_own_size(
    quorum: int, bound: int, whole: bool
) -> None:
    pods = [member(f"p-{i}", "solo", "a" if i < bound else "") for i in range(2)]

    seen = gang_counts(pods, {"upstream:solo": quorum})["upstream:solo"]

    assert (seen.bound, seen.minimum, seen.whole) == (bound, quorum, whole)


def test_a_gang_of_unknown_size_is_counted_but_has_no_minimum() -> None:
    seen = gang_counts([member("p-0", "unknown", "a")], {})["upstream:unknown"]

    assert (seen.bound, seen.minimum, seen.whole) == (1, 0, False)


def kueue_member(name: str, node: str = "") -> Obj:
    """A member of Kueue pod group `sweep` of two pods."""
    metadata = {
        "name": name,
        "labels": {"kueue.x-k8s.io/pod-group-name": "sweep"},
        "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
    }
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}}


def test_a_kueue_pod_group_is_judged_by_its_total_count() -> None:
    part = gang_counts([kueue_member("s-0", "a"), kueue_member("s-1")], {})["kueue:sweep"]
    whole = gang_counts([kueue_member("s-0", "a"), kueue_member("s-1", "b")], {})["kueue:sweep"]
    assert (part.bound, part.minimum, part.whole) == (1, 2, False)
    assert (whole.bound, whole.whole) == (2, True)


def lws_member(name: str, node: str = "", *, opt_in: bool = True) -> Obj:
    """A pod of LeaderWorkerSet `serve`'s group 0 of two pods."""
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
    }
    annotations = {"leaderworkerset.sigs.k8s.io/size": "2"}
    if opt_in:
        annotations["phalanx.io/leaderworkerset-gang"] = "true"
    metadata = {"name": name, "labels": labels, "annotations": annotations}
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}}


def test_an_opted_in_leaderworkerset_group_is_judged_by_its_size() -> None:
    part = gang_counts([lws_member("serve-0", "a"), lws_member("serve-0-1")], {})["lws:serve-0"]
    assert (part.bound, part.minimum, part.whole) == (1, 2, False)


def test_a_leaderworkerset_group_without_the_opt_in_is_no_gang_to_judge() -> None:
    pods = [lws_member("serve-0", "a", opt_in=False), lws_member("serve-0-1", opt_in=False)]
    assert gang_counts(pods, {}) == {}


def yunikorn_member(name: str, node: str = "", *, definition: bool = True) -> Obj:
    """A pod of YuniKorn application `spark-pi` whose task groups want 1 driver, 2 executors."""
    annotations = {"yunikorn.apache.org/task-group-name": "executor"}
    if definition:
        annotations["yunikorn.apache.org/task-groups"] = (
            '[{"name": "driver", "minMember": 1}, {"name": "executor", "minMember": 2}]'
        )
    metadata = {"name": name, "labels": {"applicationId": "spark-pi"}, "annotations": annotations}
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}}


def test_a_yunikorn_application_is_judged_by_the_sum_of_its_task_groups_minima() -> None:
    pods = [yunikorn_member("exec-1", "a"), yunikorn_member("exec-2", "b", definition=False)]
    part = gang_counts(pods, {})["yunikorn:spark-pi"]
    assert (part.bound, part.minimum, part.whole) == (2, 3, False)
