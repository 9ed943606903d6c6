"""What makes a gang's quorum: `minMember` members and, for a Volcano PodGroup with
`spec.minTaskMember`, at least each task's minimum among them (`PodGroup.min_task_member`);
for an upstream composite gang (a CompositePodGroup with `gang` policy), at least
`minGroupCount` of its child groups satisfied, a child PodGroup by its own `minCount`
members and a nested `gang` composite by its own quorum (`ChildGroups`; a member's task is
its PodGroup); KAI's nested subgroups the same way (`SubGroupTree`: `minSubGroup`, else
every child, of each parent; a leaf subgroup's `minMember`; a member's task is its leaf).

A member's task is `Pod.task` (Volcano's `volcano.sh/task-spec`); a member naming no task,
or a task with no minimum, counts toward `minMember` only. Every place that decides whether
a quorum exists (the planner's quorum-first step, plan-ahead, roll-forward, preemption, the
bind barrier) or which members make one (an elastic gang's quorum) asks here about the
tasks, so they cannot disagree. The bind barrier counts its members itself
(`core/barrier.quorum_present`: bound ones are a count there, not a list) and asks
`task_shortfall` for the tasks, as `kubectl phalanx` does of the bound members it reads
from the API (`phalanx.kubectl.views`: a gang is whole only with its task minima).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

from phalanx.core.model import ChildGroups, Pod, PodGroup

TaskMinima = tuple[tuple[str, int], ...] | ChildGroups  # as `PodGroup.min_task_member`


class Tasked(Protocol):
    """A member as far as task minima go: a `Pod`, or a view of one."""

    @property
    def task(self) -> str: ...


def task_shortfall(minima: TaskMinima, pods: Iterable[Tasked]) -> str:
    """Which task minima `pods` miss, for people ("task worker has 1 of 2 member(s)");
    "" when they meet every one."""
    if not minima:
        return ""
    have = Counter(p.task for p in pods)
    if isinstance(minima, ChildGroups):
        return _groups_short(minima, have)
    return ", ".join(
        f"task {task} has {have[task]} of {minimum} member(s)"
        for task, minimum in minima
        if have[task] < minimum
    )


def _satisfied(child: tuple[str, int] | ChildGroups, have: Counter[str]) -> bool:
    if isinstance(child, ChildGroups):
        return sum(_satisfied(c, have) for c in child.children) >= child.min_groups
    return have[child[0]] >= child[1]


def _groups_short(tree: ChildGroups, have: Counter[str]) -> str:
    """Which children keep `tree` from its quorum, for people; "" when it has it."""
    ready = sum(_satisfied(c, have) for c in tree.children)
    if ready >= tree.min_groups:
        return ""
    short = []
    for child in tree.children:
        if isinstance(child, ChildGroups):
            if why := _groups_short(child, have):
                short.append(f"({why})")
        elif have[child[0]] < child[1]:
            short.append(f"{tree.LEAF} {child[0]} has {have[child[0]]} of {child[1]} member(s)")
    return (
        f"{tree.label()} has {ready} of {tree.min_groups} child group(s) ready: {', '.join(short)}"
    )


def fewest_members(tree: ChildGroups) -> int:
    """The fewest members that make `tree`'s quorum: its cheapest `min_groups` children."""
    costs = sorted(fewest_members(c) if isinstance(c, ChildGroups) else c[1] for c in tree.children)
    return sum(costs[: tree.min_groups])


def _lacking(tree: ChildGroups, have: Counter[str], can: Counter[str]) -> dict[str, int]:
    """Per PodGroup, the members still to choose so that `tree` has its quorum: the
    `min_groups` children that need the fewest more of those `can` give (members already
    `have` count); precondition: `can` (with `have`) makes the quorum."""
    options: list[tuple[int, dict[str, int]]] = []
    for child in tree.children:
        if isinstance(child, ChildGroups):
            if not _satisfied(child, can + have):
                continue
            need = _lacking(child, have, can)
        else:
            name, minimum = child
            if have[name] + can[name] < minimum:
                continue
            need = {name: max(minimum - have[name], 0)}
        options.append((sum(need.values()), need))
    options.sort(key=lambda option: option[0])
    lacking: dict[str, int] = {}
    for _, need in options[: tree.min_groups]:
        for name, count in need.items():
            lacking[name] = max(lacking.get(name, 0), count)
    return lacking


def has_quorum(group: PodGroup, pods: Sequence[Pod]) -> bool:
    """Whether `pods` (members of `group`) are enough to make its quorum."""
    return len(pods) >= group.min_member and not task_shortfall(group.min_task_member, pods)


def quorum_of(
    group: PodGroup, ranked: Sequence[Pod], needed: int, counted: Iterable[Pod] = ()
) -> tuple[Pod, ...]:
    """The members of `ranked` (best rank first) that make the quorum with the `counted`
    ones (already bound): per task, its best-ranked members up to what the task still
    lacks, then the best-ranked others up to `needed` in all; in rank order. Precondition:
    `ranked` and `counted` together have a quorum."""
    take = max(needed, 0)
    minima = group.min_task_member
    if not minima:
        return tuple(ranked[:take])
    have = Counter(p.task for p in counted)
    if isinstance(minima, ChildGroups):
        lacking = _lacking(minima, have, Counter(p.task for p in ranked))
    else:
        lacking = {task: minimum - have[task] for task, minimum in minima}
    chosen: set[int] = set()
    for i, pod in enumerate(ranked):
        if lacking.get(pod.task, 0) > 0:
            lacking[pod.task] -= 1
            chosen.add(i)
    for i in range(len(ranked)):
        if len(chosen) >= take:
            break
        chosen.add(i)
    return tuple(ranked[i] for i in sorted(chosen))
