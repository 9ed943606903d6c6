"""Roll-forward decisions: what to do with a gang's commit record, given the model now."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from builders import gpu_node, pod, present
from phalanx.core.cache import ClusterState, MemberReservation, Reservation
from phalanx.core.model import Binding, Pod, PodPhase, PodRef
from phalanx.core.rollforward import (
    CARRIED_RECORD_MAX_BYTES,
    CommitRecord,
    Verdict,
    carried_by_bindings,
    decide,
    decode_commit_record,
    encode_commit_record,
)

KEY = "ml/train"


def cluster(*pods: Pod, nodes: tuple[str, ...] = ("n1", "n2"), gpus: int = 8) -> ClusterState:
    state = ClusterState()
    for name in nodes:
        state.upsert_node(gpu_node(name, gpus))
    for p in pods:
        state.upsert_pod(p)
    return state


def member(i: int, gpus: int = 4, **kw: Any) -> Pod:
    return pod(f"train-{i}", gpus, namespace="ml", group="train", uid=f"uid-{i}", **kw)


def record(*placements: tuple[Pod, str]) -> CommitRecord:
    return CommitRecord(
        KEY, {p.key: n for p, n in placements}, {p.key: p.uid for p, n in placements}
    )


def test_a_gang_whose_recorded_members_are_all_bound_is_complete() -> None:
    a, b = member(0, node="n1"), member(1, node="n2")
    decision = decide(cluster(a, b), record((a, "n1"), (b, "n2")))
    assert decision.verdict is Verdict.COMPLETE
    assert decision.bound == 2


def test_unbound_members_roll_forward_to_their_recorded_nodes() -> None:
    a, b, c = member(0, node="n1"), member(1), member(2)
    decision = decide(cluster(a, b, c), record((a, "n1"), (b, "n1"), (c, "n2")), min_member=3)
    assert decision.verdict is Verdict.ROLL_FORWARD
    assert decision.bindings == (
        Binding(PodRef("ml", "train-1", "uid-1"), "n1"),
        Binding(PodRef("ml", "train-2", "uid-2"), "n2"),
    )
    assert decision.bound == 1


def test_a_member_still_being_bound_makes_the_gang_wait() -> None:
    a, b = member(0), member(1)
    state = cluster(a, b)
    state.assume(a.uid, "n1")
    assert decide(state, record((a, "n1"), (b, "n2"))).verdict is Verdict.WAIT


def test_a_member_bound_elsewhere_by_someone_else_still_counts_as_placed() -> None:
    a, b = member(0, node="n2"), member(1, node="n2")
    assert decide(cluster(a, b), record((a, "n1"), (b, "n2"))).verdict is Verdict.COMPLETE


# ---- release ------------------------------------------------------------------------------


def test_a_recorded_node_that_is_gone_releases_the_gang_naming_it() -> None:
    a, b = member(0, node="n1"), member(1)
    decision = decide(cluster(a, b), record((a, "n1"), (b, "n9")))
    assert decision.verdict is Verdict.RELEASE
    assert "recorded node n9 of pod ml/train-1 is gone" in decision.reason
    assert "re-planned" in decision.reason


@pytest.mark.parametrize(
    ("change", "why"),
    [
        pytest.param({"unschedulable": True}, "is cordoned", id="cordoned"),
        pytest.param({"ready": False}, "is not ready", id="not ready"),
    ],
)
def test_a_recorded_node_that_cannot_take_pods_releases_the_gang(
    change: dict[str, Any], why: str
) -> None:
    a, b = member(0, node="n1"), member(1)
    state = cluster(a, b)
    state.upsert_node(replace(gpu_node("n2"), **change))
    decision = decide(state, record((a, "n1"), (b, "n2")))
    assert decision.verdict is Verdict.RELEASE
    assert why in decision.reason


def test_a_node_that_filled_up_releases_the_gang_with_the_shortfall() -> None:
    a, b = member(0, node="n1"), member(1)
    squatter = pod("other", 6, node="n2")
    decision = decide(cluster(a, b, squatter), record((a, "n1"), (b, "n2")))
    assert decision.verdict is Verdict.RELEASE
    assert "recorded node n2 no longer has room (insufficient nvidia.com/gpu)" in decision.reason


def test_members_recorded_on_one_node_must_fit_there_together() -> None:
    a, b = member(0, gpus=4), member(1, gpus=4)
    squatter = pod("other", 2, node="n1")  # 6 free: each member fits alone, not both
    decision = decide(cluster(a, b, squatter), record((a, "n1"), (b, "n1")))
    assert decision.verdict is Verdict.RELEASE


def test_the_gangs_own_reservation_counts_as_free_for_it() -> None:
    a, b = member(0, gpus=4), member(1, gpus=4)
    state = cluster(a, b, nodes=("n1",))
    state.reserve(
        Reservation(
            KEY,
            tuple(MemberReservation(p.uid, p.key, "n1", p.requests) for p in (a, b)),
            reserved_at=0.0,
            expires_at=60.0,
        )
    )
    assert present(state.node("n1")).free.gpus() == 0
    assert decide(state, record((a, "n1"), (b, "n1"))).verdict is Verdict.ROLL_FORWARD


def reserved(state: ClusterState, *members: tuple[Pod, str]) -> None:
    state.reserve(
        Reservation(
            KEY,
            tuple(MemberReservation(p.uid, p.key, n, p.requests) for p, n in members),
            reserved_at=0.0,
            expires_at=60.0,
        )
    )


def test_a_reservation_the_record_overrides_is_free_for_the_gang_in_whole() -> None:
    # Both nodes are full with the gang's own reservation, each member on the other's
    # recorded node: the service releases that reservation first (the record wins).
    a, b = member(0, gpus=8), member(1, gpus=8)
    state = cluster(a, b)
    reserved(state, (a, "n2"), (b, "n1"))
    decision = decide(state, record((a, "n1"), (b, "n2")))
    assert decision.verdict is Verdict.ROLL_FORWARD, decision.reason


def test_a_reservation_that_agrees_with_the_record_keeps_what_it_holds_for_others() -> None:
    # c's share of n1 stays reserved (nothing is released), so b finds no room beside a.
    a, b, c = member(0, gpus=4), member(1, gpus=4), member(2, gpus=4)
    state = cluster(a, b, c, nodes=("n1",))
    reserved(state, (a, "n1"), (c, "n1"))
    decision = decide(state, record((a, "n1"), (b, "n1")))
    assert decision.verdict is Verdict.RELEASE
    assert "recorded node n1 no longer has room" in decision.reason


def test_a_member_that_no_longer_suits_its_node_releases_the_gang() -> None:
    a = member(0, node_selector={"zone": "a"})
    decision = decide(cluster(a), record((a, "n1")))
    assert decision.verdict is Verdict.RELEASE
    assert "no longer suits it: didn't match the pod's node selector" in decision.reason


# ---- members deleted meanwhile ----------------------------------------------------------------


def test_a_deleted_member_has_vanished_and_is_not_a_failure() -> None:
    a, b, c = member(0, node="n1"), member(1), member(2)
    decision = decide(cluster(a, b), record((a, "n1"), (b, "n1"), (c, "n2")), min_member=3)
    assert decision.verdict is Verdict.ROLL_FORWARD
    assert decision.vanished == ("ml/train-2",)
    assert decision.bindings == (Binding(PodRef("ml", "train-1", "uid-1"), "n1"),)


@pytest.mark.parametrize(
    "now",
    [
        pytest.param(lambda p: replace(p, uid="uid-new"), id="recreated under another UID"),
        pytest.param(lambda p: replace(p, deleting=True), id="terminating"),
        pytest.param(lambda p: replace(p, phase=PodPhase.FAILED), id="failed before binding"),
    ],
)
def test_a_member_that_is_not_the_recorded_pod_any_more_has_vanished(
    now: Callable[[Pod], Pod],
) -> None:
    a, b = member(0, node="n1"), member(1)
    later = now(b)
    decision = decide(cluster(a, later), record((a, "n1"), (b, "n2")))
    assert decision.verdict is Verdict.COMPLETE
    assert decision.vanished == ("ml/train-1",)


def test_too_few_survivors_and_none_bound_releases_the_gang() -> None:
    a, b, c = member(0), member(1), member(2)
    decision = decide(cluster(a), record((a, "n1"), (b, "n1"), (c, "n2")), min_member=2)
    assert decision.verdict is Verdict.RELEASE
    assert (
        "only 1 of the 3 recorded member(s) still exist, fewer than minMember 2" in decision.reason
    )


def test_too_few_survivors_with_some_bound_still_rolls_the_rest_forward() -> None:
    a, b, c = member(0, node="n1"), member(1), member(2)
    decision = decide(cluster(a, b), record((a, "n1"), (b, "n1"), (c, "n2")), min_member=3)
    assert decision.verdict is Verdict.ROLL_FORWARD  # closer to whole than releasing


def test_deciding_changes_nothing_in_the_model() -> None:
    a, b = member(0, node="n1"), member(1)
    state = cluster(a, b)
    before = (state.generation, present(state.node("n2")).free)
    decide(state, record((a, "n1"), (b, "n2")))
    assert (state.generation, present(state.node("n2")).free) == before


# ---- the annotation's JSON -----------------------------------------------------------------


def test_a_record_survives_encoding_and_decoding() -> None:
    original = CommitRecord(KEY, {"ml/b": "n2", "ml/a": "n1"}, {"ml/a": "u1", "ml/b": "u2"})
    text = encode_commit_record(original, "2025-01-02T03:04:05Z")
    assert text == (
        '{"placements":{"ml/a":"n1","ml/b":"n2"},"uids":{"ml/a":"u1","ml/b":"u2"},"at":"2025-01-02T03:04:05Z"}'
    )
    assert decode_commit_record(KEY, text) == replace(original, at="2025-01-02T03:04:05Z")


def typical(members: int) -> CommitRecord:
    """A gang's record with the names its operators give: `team-a/train-worker-N` on
    `gpu-node-NNN`, with real-length UIDs."""
    keys = [f"team-a/train-worker-{i}" for i in range(members)]
    return CommitRecord(
        "team-a/train",
        {k: f"gpu-node-{i:03}" for i, k in enumerate(keys)},
        {k: f"{i:08}-1c2d-4e5f-8a9b-0c1d2e3f4a5b" for i, k in enumerate(keys)},
    )


def test_a_record_of_up_to_16_typical_members_rides_on_the_bindings() -> None:
    assert carried_by_bindings(typical(1))
    assert carried_by_bindings(typical(16))
    assert not carried_by_bindings(typical(32))  # copied to every member: written once instead


def test_the_limit_is_on_the_text_the_annotation_holds_with_its_time() -> None:
    record = typical(8)
    size = len(encode_commit_record(record, "2026-12-06T19:00:00Z"))
    assert carried_by_bindings(record, size)
    assert not carried_by_bindings(record, size - 1)
    assert not carried_by_bindings(record, 0)  # 0: every record is written first
    assert size < CARRIED_RECORD_MAX_BYTES


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("{nope", "is not JSON", id="not JSON"),
        pytest.param(
            '{"placements": ' + "[" * 100_000, "is not JSON: nested too deeply", id="too deep"
        ),
        pytest.param("[]", "must be a JSON object", id="not an object"),
        pytest.param('{"placements": {}}', "placements is empty", id="empty"),
        pytest.param(
            '{"placements": {"ml/a": 3}}', "placements must map strings", id="node not a string"
        ),
        pytest.param(
            '{"placements": {"a": "n1"}}', "is not a namespace/name pod key", id="bad pod key"
        ),
        pytest.param(
            '{"placements": {"ml/a": "n1"}, "uids": []}', "uids must map strings", id="bad uids"
        ),
        pytest.param(
            '{"placements": {"ml/a": "n1"}, "at": 5}', "at must be a string", id="bad time"
        ),
    ],
)
def test_a_garbled_record_is_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_commit_record(KEY, text)


def test_survivors_missing_a_task_minimum_and_none_bound_release_the_gang() -> None:
    master, w1, w2 = member(0, task="master"), member(1, task="worker"), member(2, task="worker")
    minima = (("master", 1), ("worker", 2))
    decision = decide(
        cluster(w1, w2),
        record((master, "n1"), (w1, "n1"), (w2, "n2")),
        min_member=2,
        min_task_member=minima,
    )
    assert decision.verdict is Verdict.RELEASE
    assert "miss a task minimum (task master has 0 of 1 member(s)" in decision.reason


def test_a_kai_gang_s_missing_subgroup_minimum_names_kai_s_field() -> None:
    leader, w1 = member(0, task="leader"), member(1, task="workers")
    decision = decide(
        cluster(w1),
        CommitRecord("kai:ml/train", {p.key: "n1" for p in (leader, w1)}, {}),
        min_member=1,
        min_task_member=(("leader", 1), ("workers", 1)),
    )
    assert decision.verdict is Verdict.RELEASE
    assert "(task leader has 0 of 1 member(s), spec.subGroups)" in decision.reason


def test_survivors_holding_every_task_minimum_roll_forward() -> None:
    master, w1, w2 = member(0, task="master"), member(1, task="worker"), member(2, task="worker")
    minima = (("master", 1), ("worker", 1))
    decision = decide(
        cluster(master, w1),
        record((master, "n1"), (w1, "n1"), (w2, "n2")),
        min_member=2,
        min_task_member=minima,
    )
    assert decision.verdict is Verdict.ROLL_FORWARD


DELETING = (
    "PodGroup ml/train is being deleted (gang ml/train): its members are not scheduled any more"
)


def test_a_record_of_a_gang_being_deleted_with_none_bound_binds_nothing() -> None:
    a, b = member(0), member(1)
    decision = decide(cluster(a, b), record((a, "n1"), (b, "n2")), min_member=2, deleting=DELETING)
    assert decision.verdict is Verdict.RELEASE
    assert decision.bindings == ()
    assert decision.reason == f"{DELETING}; nothing of it was bound, so nothing more is"


def test_a_record_of_a_gang_being_deleted_with_some_bound_is_finished_not_left_partial() -> None:
    a, b = member(0, node="n1"), member(1)
    decision = decide(cluster(a, b), record((a, "n1"), (b, "n2")), min_member=2, deleting=DELETING)
    assert decision.verdict is Verdict.ROLL_FORWARD
    assert decision.bindings == (Binding(PodRef("ml", "train-1", "uid-1"), "n2"),)
