"""A gang's phase, as scheduler-plugins' PodGroup controller names it, from its members."""

from __future__ import annotations

import pytest

from builders import gpu_node, pod, podgroup
from phalanx.core.cache import ClusterState
from phalanx.core.groups.status import PLACED_PHASES, GroupPhase
from phalanx.core.journal import group_phase
from phalanx.core.model import PodPhase

P = PodPhase


def gang_of(*phases: PodPhase | None) -> ClusterState:
    """A gang `g` of minMember 3 with one member per phase; None: still pending."""
    state = ClusterState()
    state.upsert_node(gpu_node("n0", gpus=8))
    state.upsert_group(podgroup("g", 3))
    for i, phase in enumerate(phases):
        if phase is None:
            state.upsert_pod(pod(f"g-{i}", group="g"))
        else:
            state.upsert_pod(pod(f"g-{i}", group="g", node="n0", phase=phase))
    return state


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        ((P.RUNNING, P.RUNNING, P.PENDING), GroupPhase.SCHEDULED),
        ((P.RUNNING, P.RUNNING, P.RUNNING), GroupPhase.RUNNING),
        ((P.SUCCEEDED, P.SUCCEEDED, P.SUCCEEDED), GroupPhase.FINISHED),
        # Finished wins, as in scheduler-plugins: minMember succeeded, whatever else failed.
        ((P.SUCCEEDED, P.SUCCEEDED, P.SUCCEEDED, P.FAILED), GroupPhase.FINISHED),
        ((P.FAILED, P.RUNNING, P.SUCCEEDED), GroupPhase.FAILED),
        # One failed, but the failed, running and succeeded do not make minMember yet.
        ((P.FAILED, P.RUNNING, None), GroupPhase.PRE_SCHEDULING),
    ],
    ids=[
        "bound",
        "running",
        "all-succeeded",
        "succeeded-beside-a-failure",
        "failed-at-quorum",
        "failed-below-quorum",
    ],
)
def test_a_placed_gang_ends_finished_or_failed_as_scheduler_plugins_ends_it(
    phases: tuple[PodPhase | None, ...], expected: GroupPhase
) -> None:
    phase, _counts = group_phase(gang_of(*phases), "default/g", None, 3)
    assert phase is expected


def test_finished_and_failed_gangs_count_as_placed() -> None:
    assert {GroupPhase.FINISHED, GroupPhase.FAILED} <= PLACED_PHASES


def test_a_finished_gang_whose_pods_are_gone_is_pending_again() -> None:
    state = gang_of(P.SUCCEEDED, P.SUCCEEDED, P.SUCCEEDED)
    for member in list(state.members("default/g", include_finished=True)):
        state.remove_pod(member.uid)
    phase, counts = group_phase(state, "default/g", None, 3)
    assert (phase, counts.scheduled, counts.running) == (GroupPhase.PENDING, 0, 0)
