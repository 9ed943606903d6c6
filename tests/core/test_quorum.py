"""The quorum: minMember members, and each Volcano task's minimum among them; a composite's
or KAI's tree of groups."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import pod, podgroup
from phalanx.core.model import ChildGroups, Pod, PodGroup, SubGroupTree
from phalanx.core.quorum import (
    fewest_members,
    has_quorum,
    quorum_of,
    task_shortfall,
)

# An MPI job: one master and four elastic workers; 3 members, at least a master and 2 workers.
MPI = replace(podgroup("mpi", 3), min_task_member=(("master", 1), ("worker", 2)))


def member(name: str, task: str = "") -> Pod:
    return pod(name, group="mpi", task=task)


MASTER = member("mpi-master-0", "master")
WORKERS = [member(f"mpi-worker-{i}", "worker") for i in range(4)]


@pytest.mark.parametrize(
    ("pods", "quorum"),
    [
        ([MASTER, *WORKERS[:2]], True),
        ([MASTER, *WORKERS], True),
        (WORKERS[:3], False),
        ([MASTER, WORKERS[0]], False),
        ([MASTER, WORKERS[0], member("sidecar")], False),
        ([MASTER, *WORKERS[:2], member("sidecar")], True),
    ],
    ids=["exactly", "all", "workers-only", "too-few", "untasked-fills-no-task", "untasked-extra"],
)
def test_a_quorum_holds_min_member_pods_and_each_tasks_minimum(
    pods: list[Pod], quorum: bool
) -> None:
    assert has_quorum(MPI, pods) is quorum


def test_without_task_minima_the_count_alone_decides() -> None:
    assert has_quorum(podgroup("g", 3), WORKERS[:3])
    assert not has_quorum(podgroup("g", 3), WORKERS[:2])


def test_the_shortfall_names_every_task_below_its_minimum() -> None:
    assert task_shortfall(MPI.min_task_member, WORKERS[:1]) == (
        "task master has 0 of 1 member(s), task worker has 1 of 2 member(s)"
    )
    assert task_shortfall(MPI.min_task_member, [MASTER, *WORKERS[:2]]) == ""
    assert task_shortfall((), []) == ""


def test_an_elastic_quorum_takes_each_tasks_best_ranks_before_other_members() -> None:
    ranked = [*WORKERS, MASTER]  # the master ranks last: its name sorts after the workers'
    assert quorum_of(MPI, ranked, 3) == (WORKERS[0], WORKERS[1], MASTER)


def test_an_elastic_quorum_fills_up_to_min_member_by_rank() -> None:
    group = replace(MPI, min_member=4)
    assert quorum_of(group, [MASTER, *WORKERS], 4) == (MASTER, *WORKERS[:3])


def test_an_elastic_quorum_counts_the_tasks_of_bound_members() -> None:
    # The master and a worker are bound: one more worker makes the quorum.
    assert quorum_of(MPI, WORKERS[1:], 1, counted=[MASTER, WORKERS[0]]) == (WORKERS[1],)


@pytest.mark.parametrize(
    ("group", "needed", "expected"),
    [(podgroup("g", 2), 2, 2), (podgroup("g", 2), 0, 0), (podgroup("g", 2), -1, 0)],
    ids=["lowest-ranks", "none-needed", "bound-past-quorum"],
)
def test_without_task_minima_an_elastic_quorum_is_the_lowest_ranks(
    group: PodGroup, needed: int, expected: int
) -> None:
    assert quorum_of(group, WORKERS, needed) == tuple(WORKERS[:expected])


# --- a composite gang (upstream CompositePodGroup): minGroupCount of its child groups -----

# A RayCluster: a head PodGroup (1) and two worker PodGroups (2 each), any 2 of the 3.
RAY_TREE = ChildGroups("ray", 2, (("head", 1), ("gpu", 2), ("cpu", 2)))
RAY = replace(podgroup("ray", fewest_members(RAY_TREE)), min_task_member=RAY_TREE)
HEAD = pod("head-0", group="ray", task="head")
GPU = [pod(f"gpu-{i}", group="ray", task="gpu") for i in range(2)]
CPU = [pod(f"cpu-{i}", group="ray", task="cpu") for i in range(2)]


def test_a_composite_needs_its_cheapest_min_group_count_children_at_least() -> None:
    assert fewest_members(RAY_TREE) == 3
    assert RAY.min_member == 3


@pytest.mark.parametrize(
    ("pods", "quorum"),
    [
        ([HEAD, *GPU], True),
        ([*GPU, *CPU], True),
        ([HEAD, GPU[0], CPU[0]], False),
        ([HEAD, *GPU, *CPU], True),
        ([HEAD], False),
    ],
    ids=["head-and-gpu", "two-worker-groups", "three-children-none-whole", "all", "head-only"],
)
def test_a_composite_quorum_is_min_group_count_children_each_with_its_min_count(
    pods: list[Pod], quorum: bool
) -> None:
    assert has_quorum(RAY, pods) is quorum


def test_a_nested_composite_counts_once_when_its_own_quorum_is_met() -> None:
    workers = ChildGroups("workers", 2, (("gpu", 2), ("cpu", 2)))
    tree = ChildGroups("ray", 2, (("head", 1), workers))
    group = replace(podgroup("ray", fewest_members(tree)), min_task_member=tree)
    assert group.min_member == 5
    assert not has_quorum(group, [HEAD, *GPU, CPU[0], member("extra")])
    assert has_quorum(group, [HEAD, *GPU, *CPU])


def test_the_composite_shortfall_names_the_composite_and_each_short_child() -> None:
    assert task_shortfall(RAY_TREE, [HEAD, GPU[0]]) == (
        "CompositePodGroup ray has 1 of 2 child group(s) ready: "
        "PodGroup gpu has 1 of 2 member(s), PodGroup cpu has 0 of 2 member(s)"
    )
    assert task_shortfall(RAY_TREE, [HEAD, *GPU]) == ""


def test_an_elastic_composite_quorum_takes_the_children_that_need_fewest_more() -> None:
    # The head (1 more) and, of two worker groups needing 2 each, the first in the tree.
    assert quorum_of(RAY, [*CPU, *GPU, HEAD], 3) == (GPU[0], GPU[1], HEAD)
    # Two cpu workers already bound: the head alone completes the quorum.
    assert quorum_of(RAY, [*GPU, HEAD], 1, counted=CPU) == (HEAD,)


# --- KAI's nested subgroups: minSubGroup (else all) of each parent's children ---------------

# Disaggregated inference: decode and prefill, each a leader (1) and workers (2); decode
# needs both, prefill either (minSubGroup 1), and the PodGroup both (no minSubGroup).
DECODE = SubGroupTree("decode", 2, (("decode-leaders", 1), ("decode-workers", 2)))
PREFILL = SubGroupTree("prefill", 1, (("prefill-leaders", 1), ("prefill-workers", 2)))
SERVE_TREE = SubGroupTree("", 2, (DECODE, PREFILL))
SERVE = replace(podgroup("serve", fewest_members(SERVE_TREE)), min_task_member=SERVE_TREE)


def kai(name: str, task: str) -> Pod:
    return pod(name, group="serve", task=task)


D_LEAD = kai("d-lead", "decode-leaders")
D_WORK = [kai(f"d-work-{i}", "decode-workers") for i in range(2)]
P_LEAD = kai("p-lead", "prefill-leaders")
P_WORK = [kai(f"p-work-{i}", "prefill-workers") for i in range(2)]


def test_a_kai_tree_needs_the_cheapest_children_of_each_parent_at_least() -> None:
    assert SERVE.min_member == 4  # decode's 3 and prefill's leader


@pytest.mark.parametrize(
    ("pods", "quorum"),
    [
        ([D_LEAD, *D_WORK, P_LEAD], True),
        ([D_LEAD, *D_WORK, *P_WORK], True),
        ([D_LEAD, *D_WORK, P_LEAD, *P_WORK], True),
        ([D_LEAD, D_WORK[0], P_LEAD, *P_WORK], False),
        ([*D_WORK, P_LEAD, *P_WORK], False),
        ([D_LEAD, *D_WORK, P_WORK[0]], False),
    ],
    ids=[
        "decode-and-prefill-leader",
        "decode-and-prefill-workers",
        "all",
        "decode-workers-short",
        "decode-leader-missing",
        "prefill-short-on-both",
    ],
)
def test_a_kai_tree_quorum_is_min_sub_group_children_of_each_parent(
    pods: list[Pod], quorum: bool
) -> None:
    assert has_quorum(SERVE, pods) is quorum


def test_the_kai_shortfall_names_the_pod_group_and_each_short_subgroup() -> None:
    assert task_shortfall(SERVE_TREE, [D_LEAD, D_WORK[0], P_LEAD]) == (
        "PodGroup has 1 of 2 child group(s) ready: (subgroup decode has 1 of 2 child "
        "group(s) ready: subgroup decode-workers has 1 of 2 member(s))"
    )
    assert task_shortfall(SERVE_TREE, [D_LEAD, *D_WORK, P_LEAD]) == ""


def test_an_elastic_kai_quorum_takes_the_subgroups_that_need_fewest_more() -> None:
    ranked = [*P_WORK, P_LEAD, *D_WORK, D_LEAD]
    assert quorum_of(SERVE, ranked, 4) == (P_LEAD, D_WORK[0], D_WORK[1], D_LEAD)
    # The decode subgroups already bound: the prefill leader alone completes it.
    assert quorum_of(SERVE, [*P_WORK, P_LEAD], 1, counted=[D_LEAD, *D_WORK]) == (P_LEAD,)
