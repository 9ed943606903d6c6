"""Faults through the real kube-scheduler and Phalanx: a reserved node cordoned before the
gang binds, Phalanx SIGKILLed while a bind barrier is half full, a dead instance's commit
record finished by the next one (and the node it names held meanwhile against another pod,
its member nominated to it),
a kube-apiserver restart, and garbage annotations.

A member is kept from reaching kube-scheduler with a scheduling gate: it exists (Phalanx
counts it toward the quorum and reserves for it) while its siblings' ``/bind`` calls wait
at the barrier — the state "the last member has not been scheduled yet", held on purpose.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from conftest_scheduling import Scheduler, cluster, phalanx, scheduler  # noqa: F401  # fixtures
from phalanx_process import PhalanxProcess
from scheduling import A_COMMIT, PG_API, Gang, Scenario, bound_node

from phalanx.core.rollforward import CommitRecord, encode_commit_record

pytestmark = pytest.mark.e2e

# These tests wait out bind barriers on purpose: 8 s (instead of 20 s) keeps them short
# and is still far more than a gang needs to assemble here.
BARRIER_TIMEOUT_SECONDS = 8
PHALANX_ARGS = [f"--barrier-timeout-seconds={BARRIER_TIMEOUT_SECONDS}"]


# ---- expiry and re-planning ------------------------------------------------------------------


def _answered_with_the_true_reason(sc: Scenario, member: str, cordoned: str) -> None:
    """kube-scheduler reported the held bind of ``member`` failing for the cordon of
    ``cordoned`` (or for the expiry, should it come first), never for the barrier timing out."""
    because = (f"node {cordoned} is gone, cordoned or not ready", "its reservation expired while")

    def messages() -> list[str]:
        return [e.get("message", "") for e in sc.events(member, reason="FailedScheduling")]

    sc.wait(
        f"the failed bind of {member} reported with its cause",
        lambda: any(b in m for m in messages() for b in because),
        timeout=10,
    )
    timed_out = [m for m in messages() if "reached bind within" in m]
    assert not timed_out, timed_out


def test_a_reservation_on_a_node_cordoned_before_binding_expires_and_the_gang_replans(
    cluster: Scenario,  # noqa: F811
) -> None:
    a = cluster.node("a", 8)
    b = cluster.node("b", 8)
    cluster.nodes_ready()
    gang = cluster.gang("held", 3, 2, timeout_seconds=4, held=[2])
    cluster.wait_held(2)
    view = cluster.phalanx.debug_group(cluster.namespace, gang.name)
    assert view is not None
    assert view["reservation"] is not None, view
    reserved_on = {m["node"] for m in view["reservation"]["members"]}
    assert len(reserved_on) == 1, view  # pack: 6 GPUs on one 8-GPU node
    first = reserved_on.pop()
    other = b if first == a else a
    assert cluster.phalanx.metric("phalanx_reserved_gpus") == 6
    assert cluster.bound_count(gang) == 0

    cluster.cordon(first)
    # The held binds are answered as soon as Phalanx sees the cordon (or the expiry, should
    # it come first), with that reason: never left to the barrier timeout.
    cluster.phalanx.wait_metric(
        "phalanx_barrier_waiting",
        lambda v: v == 0,
        timeout=BARRIER_TIMEOUT_SECONDS / 2,
        what="the held binds answered well before the barrier timeout",
    )
    for member in gang.members[:2]:
        _answered_with_the_true_reason(cluster, member, first)
    cluster.wait_event(gang.name, "reservation expired after 4s", reason="ReservationExpired")
    # Released exactly: nothing stays reserved once the reservation expired.
    cluster.phalanx.wait_metric("phalanx_reserved_gpus", lambda v: v == 0, timeout=10)
    # kube-scheduler retries the two members; Phalanx re-plans onto the node that is still
    # schedulable and they wait there for the third.
    cluster.wait(
        f"a new reservation on {other}",
        lambda: (
            (v := cluster.phalanx.debug_group(cluster.namespace, gang.name))
            and v["reservation"]
            and {m["node"] for m in v["reservation"]["members"]} == {other}
        ),
        timeout=BARRIER_TIMEOUT_SECONDS + 25,
    )
    cluster.ungate(gang.members[2])
    where = cluster.wait_gang(gang)
    assert set(where.values()) == {other}, where
    cluster.phalanx.wait_metric("phalanx_reserved_gpus", lambda v: v == 0, timeout=10)


def _nominated_node(sc: Scenario, member: str) -> str:
    pod = sc.pods()[member]
    return str((pod.get("status") or {}).get("nominatedNodeName") or "")


def test_an_expired_reservation_withdraws_the_nominations_of_members_not_yet_scheduled(
    cluster: Scenario,  # noqa: F811
) -> None:
    # kube-scheduler clears the nomination of a pod whose binding failed, but not of a pod it
    # has not tried yet (here, one behind a scheduling gate): only Phalanx can withdraw that
    # one, or kube-scheduler would go on counting its GPUs on a node Phalanx handed back.
    a = cluster.node("a", 8)
    cluster.nodes_ready()
    gang = cluster.gang("withdrawn", 3, 2, timeout_seconds=4, held=[2])
    cluster.wait_held(2)
    held = gang.members[2]
    cluster.wait(
        f"{held} nominated to its reserved node",
        lambda: _nominated_node(cluster, held) == a or None,
        timeout=10,
    )

    # The only node: once cordoned, kube-scheduler's retries of the other two find no node
    # and never reach Phalanx, so nothing re-plans the gang after its reservation expires.
    cluster.cordon(a)
    cluster.wait_event(gang.name, "reservation expired after 4s", reason="ReservationExpired")
    cluster.wait(
        f"the nomination of {held} withdrawn",
        lambda: _nominated_node(cluster, held) == "" or None,
        timeout=10,
    )
    cluster.phalanx.wait_metric("phalanx_reserved_gpus", lambda v: v == 0, timeout=10)
    cluster.assert_unbound_for(gang.members, 2.0)
    assert _nominated_node(cluster, held) == ""


# ---- Phalanx crashes -------------------------------------------------------------------------


def test_phalanx_killed_while_a_barrier_is_half_full_leaves_no_partial_gang(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    gang = cluster.gang("crash", 4, 2, held=[3])
    cluster.wait_held(3)
    pid = phalanx.pid

    phalanx.kill()  # SIGKILL: three /bind requests break mid-wait
    time.sleep(1.0)  # kube-scheduler sees the broken binds and filter calls refused
    assert cluster.bound_count(gang) == 0
    phalanx.start()
    assert phalanx.pid != pid

    # The new instance knows nothing of the old reservation: it re-plans when
    # kube-scheduler retries the three members, and they wait at its barrier.
    cluster.wait_held(3, timeout=45)
    assert cluster.bound_count(gang) == 0
    cluster.ungate(gang.members[3])
    where = cluster.wait_gang(gang)
    assert len(where) == 4
    assert cluster.phalanx.metric("phalanx_partial_gangs") == 0
    cluster.phalanx.wait_metric("phalanx_reserved_gpus", lambda v: v == 0, timeout=10)


def _two_nodes(sc: Scenario, gpus_of_b: int) -> tuple[str, str]:
    """Nodes a (8 GPUs) and b, ready, for a gang the test leaves partially bound itself (the
    invariant monitor then sees it partial for up to 40 s, as it would one Phalanx left)."""
    sc.max_partial_seconds = 40.0
    a = sc.node("a", 8)
    b = sc.node("b", gpus_of_b)
    sc.nodes_ready()
    return a, b


@contextlib.contextmanager
def _kube_scheduler_stopped(kube: Scheduler, instance: PhalanxProcess) -> Iterator[None]:
    """kube-scheduler stopped, so that only roll-forward binds; afterwards Phalanx and
    kube-scheduler run again, whatever the test left stopped."""
    kube.stop()
    try:
        yield
    finally:
        if not instance.running:
            instance.start()
        kube.start()


def _left_by_a_crash(
    sc: Scenario,
    gang: Gang,
    recorded: Mapping[str, str],
    bound: Sequence[str],
    *,
    written: datetime,
    carried: bool = True,
) -> dict[str, str]:
    """What a Phalanx killed between two of a gang's bindings leaves: the members ``bound``
    bound to their nodes in ``recorded`` (pod -> node, every member), and the commit record
    of ``recorded`` stamped ``written``, carried by each of those bindings (``carried``) or
    on the PodGroup (a record too long to carry, written first). Returns the record's
    annotation."""
    pods = sc.pods()
    record = CommitRecord(
        f"{sc.namespace}/{gang.name}",
        {f"{sc.namespace}/{p}": n for p, n in recorded.items()},
        {f"{sc.namespace}/{p}": pods[p]["metadata"]["uid"] for p in recorded},
    )
    notes = {A_COMMIT: encode_commit_record(record, written.strftime("%Y-%m-%dT%H:%M:%SZ"))}
    if not carried:
        sc.api.merge_patch(
            f"{PG_API}/namespaces/{sc.namespace}/podgroups/{gang.name}",
            {"metadata": {"annotations": notes}},
        )
    for member in bound:
        meta = {"name": member, "uid": pods[member]["metadata"]["uid"]}
        sc.api.create(
            f"/api/v1/namespaces/{sc.namespace}/pods/{member}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {**meta, "annotations": notes} if carried else meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": recorded[member]},
            },
        )
    return notes


@pytest.mark.parametrize("kept", ["carried by the binding", "on the PodGroup"])
def test_the_next_instance_rolls_a_half_bound_gang_forward_from_its_commit_record(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    kept: str,
) -> None:
    # The state a Phalanx killed between two bindings leaves: one member bound to its
    # recorded node, and the commit record on it (its binding carried the record) or on the
    # PodGroup (a record too long to carry, written first). kube-scheduler is stopped so
    # that only roll-forward can bind the rest.
    a, b = _two_nodes(cluster, 8)
    with _kube_scheduler_stopped(scheduler, phalanx):
        phalanx.kill()
        gang = cluster.gang("half", 3, 2)
        recorded = {gang.members[0]: a, gang.members[1]: a, gang.members[2]: b}
        first = gang.members[0]
        carried = kept == "carried by the binding"
        # Written a minute ago: past the grace a live barrier is given.
        notes = _left_by_a_crash(
            cluster,
            gang,
            recorded,
            [first],
            written=datetime.now(UTC) - timedelta(minutes=1),
            carried=carried,
        )
        assert cluster.bound_count(gang) == 1

        # The next instance takes the roll-forward duty once the dead one's lease lapses
        # (15 s), then binds the rest where the record says.
        phalanx.start()
        where = cluster.wait_gang(gang, timeout=40)
        assert where == recorded
        view = phalanx.debug_group(cluster.namespace, gang.name)
        assert view is not None
        assert view["last_decision"] == "rolled-forward", view
        # The monitor saw the partial gang the test made (it is how it would see one
        # Phalanx made); its last sample may not have seen the gang whole yet.
        verdict = cluster.monitor.verdict()
        seen = [w for w in verdict.windows + verdict.open_windows if w.group == gang.name]
        assert seen, "the invariant monitor missed a gang bound 1/3 for seconds"
        assert seen[0].seconds > 5, seen
        cluster.wait_event(gang.name, "commit record", reason="RolledForward", timeout=10)
        assert phalanx.metric("phalanx_gang_decisions_total", result="rolled-forward") >= 1
        # A finished gang's record is cleared from its PodGroup; the copy a binding carried
        # stays on its pod, settled (it is true, and taking it back costs a write).
        cluster.wait(
            "the commit record cleared",
            lambda: (
                A_COMMIT
                not in (cluster.get_pod_group(gang.name)["metadata"].get("annotations") or {})
            ),
            timeout=15,
        )
        if carried:
            notes_now = cluster.pods()[first]["metadata"]["annotations"]
            assert notes_now[A_COMMIT] == notes[A_COMMIT]


def _two_bound_the_third_recorded(sc: Scenario, gang: Gang, a: str, b: str) -> dict[str, str]:
    """A gang of three left by a crash with its first two members bound to `a` and the
    third recorded for `b`, in a record written now (fresh: within roll-forward's grace)."""
    *bound, member = gang.members
    recorded = {bound[0]: a, bound[1]: a, member: b}
    _left_by_a_crash(sc, gang, recorded, bound, written=datetime.now(UTC))
    assert sc.bound_count(gang) == 2
    return recorded


def _cycle_of(sc: Scenario, name: str) -> str | None:
    """What kube-scheduler's first finished cycle of pod ``name`` did: ``bound to <node>``,
    or the message of the failure it put the pod back in its queue with (None: not yet)."""
    pod = sc.pods()[name]
    if node := bound_node(pod):
        return f"bound to {node}"
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "unschedulable")
    return None


def test_the_next_instance_holds_the_node_a_fresh_commit_record_names_against_another_pod(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
) -> None:
    # The state a Phalanx killed between two bindings leaves: two of three members bound to
    # a, the third recorded for b, the only node with room for it, and the record fresh (the
    # barrier that wrote it may still be binding): roll-forward leaves it alone for its grace
    # (15 s) and holds b for the member meanwhile. kube-scheduler asks about another pod
    # that fits only on b first (the member waits behind its gate): b is refused to it, and
    # the member's own cycle then binds it to b. Without the hold, the other pod took b, and
    # roll-forward released the gang: two of three bound for good.
    a, b = _two_nodes(cluster, 4)
    with _kube_scheduler_stopped(scheduler, phalanx):
        phalanx.kill()
        gang = cluster.gang("kept", 3, 4, held=[2])
        member = gang.members[-1]
        other = "other"
        cluster.pod(other, 4)  # fits on b alone: a is full once the gang's two are bound
        # Written now: the grace counts from here, and the member is let through a few
        # seconds later (a member behind its gate cannot be bound, by roll-forward either).
        recorded = _two_bound_the_third_recorded(cluster, gang, a, b)

        phalanx.start()
        held = cluster.wait(
            f"Phalanx to hold {b} for {member}",
            lambda: (v := phalanx.debug_group(cluster.namespace, gang.name)) and v["reservation"],
            timeout=5,
        )
        assert [(m["pod"], m["node"]) for m in held["members"]] == [
            (f"{cluster.namespace}/{member}", b)
        ], held
        assert phalanx.metric("phalanx_reserved_gpus") == 4

        scheduler.start()
        said = cluster.wait(f"kube-scheduler's cycle of {other}", lambda: _cycle_of(cluster, other))
        assert not bound_node(cluster.pods()[other]), f"{other} took the held node: {said}"
        assert "4 GPU(s) here are reserved for gangs" in said, said

        cluster.ungate(member)
        where = cluster.wait_gang(gang, timeout=40)
        assert where == recorded
        assert phalanx.metric("phalanx_partial_gangs") == 0
        cluster.assert_unbound_for([other], 2.0)  # and no room for it anywhere now
        phalanx.wait_metric("phalanx_reserved_gpus", lambda v: v == 0, timeout=10)


#: The e2e Phalanx's kubeconfig names no namespace, so its roll-forward Lease is in `default`.
ROLL_FORWARD_LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/phalanx-rollforward"


def test_the_next_instance_nominates_a_held_member_to_the_node_its_commit_record_names(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
) -> None:
    # Two of three members bound to a, the third recorded for b, the record fresh: the next
    # instance holds b for the member through the grace (15 s) and, having the roll-forward
    # duty (nobody else holds its Lease), nominates the member to b, so that kube-scheduler
    # (its preemption included) counts b as taken by it. With kube-scheduler stopped, the
    # nomination stays until roll-forward binds the member.
    a, b = _two_nodes(cluster, 4)
    with _kube_scheduler_stopped(scheduler, phalanx):
        phalanx.stop()
        # A test before may have killed the instance holding the Lease: the next one would
        # wait out its duration (15 s) from when it first sees it, as client-go's leader
        # election does, and the record would be due by then. No Phalanx runs: remove it.
        cluster.api.delete(ROLL_FORWARD_LEASE)
        gang = cluster.gang("nominated", 3, 4)
        member = gang.members[-1]
        recorded = _two_bound_the_third_recorded(cluster, gang, a, b)

        phalanx.start()
        cluster.wait(
            f"{member} nominated to {b}",
            lambda: _nominated_node(cluster, member) == b or None,
            timeout=10,
        )
        assert not bound_node(cluster.pods()[member])  # held, not yet rolled forward

        where = cluster.wait_gang(gang, timeout=40)
        assert where == recorded
        assert phalanx.metric("phalanx_partial_gangs") == 0


# ---- the API server restarts ------------------------------------------------------------------


def test_scheduling_resumes_after_a_kube_apiserver_restart(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
) -> None:
    first_node = cluster.node("a", 4)
    cluster.nodes_ready()
    before = cluster.gang("before", 2, 2)
    cluster.wait_gang(before)
    restarts = phalanx.metric("phalanx_watch_restarts_total")

    cluster.cp.restart_apiserver()
    phalanx.wait_ready(timeout=30)
    assert phalanx.running, phalanx.tail()
    # kube-scheduler may lose its lease while the API is down and exit, as it does in a
    # real cluster (where its pod restarts); start it again if so.
    scheduler.ensure_running()
    phalanx.wait_metric(
        "phalanx_watch_restarts_total",
        lambda v: v > restarts,
        timeout=30,
        what="Phalanx's watches to restart",
    )

    # A node, a PodGroup and pods created after the restart: only the recovered watches
    # tell Phalanx about them (the first node is full, so the gang needs the new one).
    second_node = cluster.node("b", 4)
    cluster.nodes_ready([second_node])  # the Node watch is back
    cluster.pod_group("after", 2)
    cluster.wait(
        "Phalanx to see the PodGroup created after the restart",
        lambda: (
            (v := phalanx.debug_group(cluster.namespace, "after")) and v["source"] == "PodGroup"
        ),
    )  # the PodGroup watch is back
    after = cluster.gang("after", 2, 2, create_pod_group=False)
    where = cluster.wait_gang(after, timeout=30)  # the Pod watch and kube-scheduler are back
    assert set(where.values()) == {second_node}, where
    assert set(cluster.placement(before.members).values()) == {first_node}


# ---- garbage -------------------------------------------------------------------------------


def test_garbage_annotations_are_reported_and_other_gangs_still_bind(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.nodes_ready()
    pid = phalanx.pid
    ns = cluster.namespace

    cluster.pod(
        "bad-min",
        1,
        annotations={"phalanx.io/pod-group": "bad-min", "phalanx.io/min-member": "abc"},
    )
    cluster.pod(
        "bad-timeout",
        1,
        annotations={
            "phalanx.io/pod-group": "bad-timeout",
            "phalanx.io/min-member": "1",
            "phalanx.io/schedule-timeout-seconds": "-5",
        },
    )
    bad_plan = cluster.gang("bad-plan", 2, 1, plan='{"sequence": [ not json')
    bad_policy = cluster.gang("bad-policy", 2, 1, placement="sideways")
    good = cluster.gang("good", 2, 2)

    # Each problem is named: on the object (Phalanx's Event) and in kube-scheduler's
    # FailedScheduling for the pods it holds back.
    cluster.wait_event(
        "bad-min", 'phalanx.io/min-member: "abc" is not a positive integer', reason="InvalidObject"
    )
    cluster.wait_event(
        "bad-min",
        'phalanx.io/min-member: "abc" is not a positive integer',
        reason="FailedScheduling",
    )
    cluster.wait_event(
        "bad-timeout",
        'phalanx.io/schedule-timeout-seconds: "-5" is not a positive integer',
        reason="InvalidObject",
    )
    cluster.wait_event(bad_plan.name, "phalanx.io/plan on PodGroup", reason="InvalidGang")
    cluster.wait_event(
        bad_plan.members[0],
        f"phalanx.io/plan on PodGroup {ns}/bad-plan is invalid",
        reason="FailedScheduling",
    )
    cluster.wait_event(bad_policy.name, '"sideways" is not a placement policy')
    cluster.wait_event(
        bad_policy.members[0], f"PodGroup {ns}/bad-policy is invalid", reason="FailedScheduling"
    )

    cluster.wait_gang(good)
    cluster.assert_unbound_for(
        ["bad-min", "bad-timeout", *bad_plan.members, *bad_policy.members], 1.0
    )
    assert phalanx.running, "Phalanx died on garbage"
    assert phalanx.pid == pid, "Phalanx restarted on garbage"
    assert phalanx.ready()
    view = phalanx.debug_group(ns, bad_plan.name)
    assert view is not None
    assert view["last_decision"] == "invalid", view
