"""Reporter: /preempt's verdicts as counts and log lines, through the real Extender."""

import asyncio
import logging
from typing import Any

import pytest
from support import pod_of, started

from builders import pod_obj, podgroup_obj
from phalanx.core.journal import Outcome
from phalanx.core.model import GroupRef
from phalanx.service.extender import Extender
from phalanx.service.reporter import SWEEP_REFRESHES

pytestmark = pytest.mark.anyio

REPORTER = "phalanx.service.reporter"


def running(name: str, node: str, group: str | None = None) -> dict[str, Any]:
    return pod_obj(name, 2, node=node, phase="Running", uid=name, group=group)


# Gang `near` whole on n1, gang `far` across n2 and n3, a lone pod on n1; and the preemptor.
OBJECTS = [
    podgroup_obj("near", 2),
    running("near-0", "n1", "near"),
    running("near-1", "n1", "near"),
    podgroup_obj("far", 2),
    running("far-0", "n2", "far"),
    running("far-1", "n3", "far"),
    running("lone", "n1"),
    pod_obj("urgent", 8),
]


def sample(ext: Extender, name: str, labels: dict[str, str] | None = None) -> float | None:
    return ext.metrics.registry.get_sample_value(name, labels or {})


async def test_every_preemption_outcome_is_exported_at_zero_before_any_preemption() -> None:
    ext, _ = await started(OBJECTS)
    for outcome in ("kept", "widened", "dropped"):
        assert sample(ext, "phalanx_preemption_nodes_total", {"outcome": outcome}) == 0
    assert sample(ext, "phalanx_preemption_added_pods_total") == 0
    await ext.stop()


@pytest.mark.parametrize(
    ("victims", "outcome", "added"),
    [
        (["lone"], "kept", 0),
        (["near-0"], "widened", 1),
        (["lone", "near-0"], "widened", 1),
        (["far-0"], "dropped", 0),
    ],
    ids=["kept", "widened", "widened-with-a-lone-pod", "dropped"],
)
async def test_each_node_of_a_preemption_counts_once_under_its_outcome(
    victims: list[str], outcome: str, added: int
) -> None:
    ext, _ = await started(OBJECTS)
    node = "n2" if outcome == "dropped" else "n1"
    ext.preempt(pod_of(ext, "urgent"), {node: victims})
    counts = {
        o: sample(ext, "phalanx_preemption_nodes_total", {"outcome": o})
        for o in ("kept", "widened", "dropped")
    }
    assert counts == {o: (1 if o == outcome else 0) for o in counts}
    assert sample(ext, "phalanx_preemption_added_pods_total") == added
    await ext.stop()


async def test_a_preemption_answers_the_kept_sets_and_counts_every_node() -> None:
    ext, _ = await started(OBJECTS)
    kept = ext.preempt(pod_of(ext, "urgent"), {"n1": ["near-0"], "n2": ["far-0"], "n3": []})
    assert kept == {"n1": ["near-0", "near-1"], "n3": []}
    total = [
        sample(ext, "phalanx_preemption_nodes_total", {"outcome": o})
        for o in ("kept", "widened", "dropped")
    ]
    assert total == [1, 1, 1]
    await ext.stop()


async def test_a_widened_or_dropped_node_is_logged_once_with_the_preemptor_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ext, _ = await started(OBJECTS)
    with caplog.at_level(logging.INFO, logger=REPORTER):
        ext.preempt(pod_of(ext, "urgent"), {"n1": ["near-0"], "n2": ["far-0"], "n3": []})
    lines = [
        {k: getattr(r, k) for k in ("pod", "node", "outcome", "group", "added", "reason")}
        for r in caplog.records
        if r.name == REPORTER and r.getMessage() == "preemption verdict"
    ]
    assert lines == [
        {
            "pod": "default/urgent",
            "node": "n1",
            "outcome": "widened",
            "group": "default/near",
            "added": 1,
            "reason": "the victims would leave gang default/near with 1 of its 2 bound "
            "member(s), below its quorum of 2: its 1 other pod(s) on n1 go too",
        },
        {
            "pod": "default/urgent",
            "node": "n2",
            "outcome": "dropped",
            "group": "default/far",
            "added": 0,
            "reason": "the victims would leave gang default/far with 1 of its 2 bound "
            "member(s), below its quorum of 2, but 1 of its 1 other pod(s) that would have to "
            "go too are not on n2 (n3)",
        },
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == REPORTER)
    await ext.stop()


# ---- the status refresh -----------------------------------------------------------------


async def test_a_refresh_writes_what_moved_at_once_and_every_gang_within_its_sweep() -> None:
    # 60 gangs: each refresh recomputes what moved, and 2 of the others in turn.
    ext, source = await started([podgroup_obj(f"g{i:02d}", 2) for i in range(60)])
    ext.refresh_statuses()
    await asyncio.sleep(0)
    assert len(source.statuses) == 60  # each gang object is new: every one moved
    source.apply(running("g30-0", "n1", "g30"))
    ext.refresh_statuses()
    await asyncio.sleep(0)
    assert source.statuses["default/g30"].scheduled == 1  # a member moved: at once
    # A decision in the journal that was never reported moves nothing in the model.
    ext.planner.note(GroupRef.parse("default/g59"), Outcome.UNFIT, "a decision not reported")
    refreshes = 0
    while source.statuses["default/g59"].message != "a decision not reported":
        assert refreshes < SWEEP_REFRESHES, "the sweep never reached gang g59"
        ext.refresh_statuses()
        await asyncio.sleep(0)
        refreshes += 1
    assert refreshes > 1  # not every gang is recomputed at every refresh
    await ext.stop()
