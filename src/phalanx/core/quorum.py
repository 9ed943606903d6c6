"""What makes a gang's quorum: `minMember` members and, for a Volcano PodGroup with
`spec.minTaskMember`, at least each task's minimum among them (`PodGroup.min_task_member`).

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

from phalanx.core.model import Pod, PodGroup

TaskMinima = tuple[tuple[str, int], ...]  # as `PodGroup.min_task_member`


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
    return ", ".join(
        f"task {task} has {have[task]} of {minimum} member(s)"
        for task, minimum in minima
        if have[task] < minimum
    )


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
    if not group.min_task_member:
        return tuple(ranked[:take])
    have = Counter(p.task for p in counted)
    lacking = {task: minimum - have[task] for task, minimum in group.min_task_member}
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
