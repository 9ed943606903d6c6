"""Gangs through the real kube-scheduler and Phalanx: placement policies, both ways of
declaring a gang, unfit gangs, the coscheduling deadlock, quorum, elastic gangs.

Every pod names ``schedulerName: phalanx``; kube-scheduler runs the chart's configuration
and calls Phalanx's filter / prioritize / bind over HTTP; Phalanx binds through the API.
The invariant monitor watches every test (see conftest_scheduling.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import CLIQUE_LABEL, ZONE_LABEL, PodWatch, Scenario

pytestmark = pytest.mark.e2e

FORMS = ["podgroup", "annotations"]


# ---- placement policies ---------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSpec:
    suffix: str
    gpus: int
    clique: str | None = None
    zone: str | None = None


@dataclass(frozen=True)
class PolicyCase:
    placement: str
    nodes: tuple[NodeSpec, ...]
    size: int
    gpus: int  # per member
    # (scenario, member -> node) -> None; asserts the policy held
    check: Callable[[Scenario, Mapping[str, str]], None]


def _packed_on_the_best_fit(sc: Scenario, where: Mapping[str, str]) -> None:
    # 4 × 1 GPU: the 4-GPU node holds it exactly; the two 8-GPU nodes stay whole.
    assert set(where.values()) == {f"{sc.namespace}-small"}, where


def _on_one_node(sc: Scenario, where: Mapping[str, str]) -> None:
    assert set(where.values()) == {f"{sc.namespace}-big"}, where


def _on_distinct_nodes(_: Scenario, where: Mapping[str, str]) -> None:
    assert len(set(where.values())) == len(where), where


def _in_one_clique(sc: Scenario, where: Mapping[str, str]) -> None:
    cliques = {sc.node_labels(n).get(CLIQUE_LABEL) for n in where.values()}
    assert len(cliques) == 1, f"members span NVLink domains {cliques}: {where}"
    assert None not in cliques, where


def _in_zone_b(sc: Scenario, where: Mapping[str, str]) -> None:
    zones = {sc.node_labels(n).get(ZONE_LABEL) for n in where.values()}
    # zone-a's single 4-GPU node cannot hold 6 GPUs; zone-b's two 4-GPU nodes can.
    assert zones == {"zone-b"}, f"members landed in zones {zones}: {where}"


POLICY_CASES = {
    "pack": PolicyCase(
        "pack",
        (NodeSpec("a", 8), NodeSpec("b", 8), NodeSpec("small", 4)),
        size=4,
        gpus=1,
        check=_packed_on_the_best_fit,
    ),
    "same-node": PolicyCase(
        "same-node",
        (NodeSpec("a", 4), NodeSpec("b", 4), NodeSpec("big", 8)),
        size=3,
        gpus=2,
        check=_on_one_node,
    ),
    "spread": PolicyCase(
        "spread",
        (NodeSpec("a", 8), NodeSpec("b", 8), NodeSpec("c", 8)),
        size=3,
        gpus=1,
        check=_on_distinct_nodes,
    ),
    "interconnect-local": PolicyCase(
        "interconnect-local",
        # No node holds 6 GPUs: the gang needs two nodes, and both must share a clique.
        (
            NodeSpec("a", 4, clique="clique-1"),
            NodeSpec("b", 4, clique="clique-2"),
            NodeSpec("c", 2, clique="clique-1"),
            NodeSpec("d", 4, clique="clique-2"),
        ),
        size=3,
        gpus=2,
        check=_in_one_clique,
    ),
    "domain-zone": PolicyCase(
        f"domain:{ZONE_LABEL}",
        (
            NodeSpec("a", 4, zone="zone-a"),
            NodeSpec("b", 4, zone="zone-b"),
            NodeSpec("c", 4, zone="zone-b"),
        ),
        size=3,
        gpus=2,
        check=_in_zone_b,
    ),
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", POLICY_CASES.values(), ids=POLICY_CASES.keys())
def test_a_gang_lands_whole_on_nodes_its_placement_policy_allows(
    cluster: Scenario,  # noqa: F811
    case: PolicyCase,
    form: str,
) -> None:
    for n in case.nodes:
        cluster.node(n.suffix, n.gpus, clique=n.clique, zone=n.zone)
    cluster.nodes_ready()

    gang = cluster.gang("g", case.size, case.gpus, form=form, placement=case.placement)
    where = cluster.wait_gang(gang)

    case.check(cluster, where)
    view = cluster.phalanx.debug_group(cluster.namespace, "g")
    assert view is not None
    assert view["placement"] == case.placement
    assert view["source"] == ("PodGroup" if form == "podgroup" else "annotations")
    assert view["bound"] == case.size
    assert view["plan"]["placements"] == {f"{cluster.namespace}/{p}": n for p, n in where.items()}


# ---- gangs that cannot be placed ------------------------------------------------------------


def test_a_gang_that_cannot_fit_binds_nothing_and_says_why(cluster: Scenario) -> None:  # noqa: F811
    # 8 GPUs free in all, but same-node needs 6 on one node and no node has more than 4.
    cluster.node("a", 4)
    cluster.node("b", 4)
    cluster.nodes_ready()
    gang = cluster.gang("too-wide", 3, 2, placement="same-node")

    event = cluster.wait(
        "a FailedScheduling event with Phalanx's reason",
        lambda: next(
            (
                e
                for m in gang.members
                for e in cluster.events(m, reason="FailedScheduling")
                if "cannot place 3 member(s) of gang" in e.get("message", "")
            ),
            None,
        ),
    )
    cluster.assert_unbound_for(gang.members, 3.0)

    view = cluster.phalanx.debug_group(cluster.namespace, gang.name)
    assert view is not None
    assert view["last_decision"] == "unfit"
    assert view["reservation"] is None
    # kube-scheduler's FailedScheduling carries Phalanx's reason verbatim.
    assert view["last_reason"] in event["message"], (view["last_reason"], event["message"])
    assert f"gang {cluster.namespace}/too-wide" in event["message"]
    assert "placement same-node" in event["message"]
    assert cluster.events(gang.name, kind="PodGroup", reason="Unschedulable"), cluster.event_text(
        gang.name
    )
    condition = cluster.get_pod_group(gang.name)["status"]["conditions"][0]
    assert (condition["type"], condition["status"]) == ("PodGroupScheduled", "False")


def test_two_gangs_that_deadlock_coscheduling_end_one_whole_and_one_waiting(
    cluster: Scenario,  # noqa: F811
) -> None:
    # Each gang needs 3 GPUs on each of the two 4-GPU nodes: either fits alone, never both.
    # Coscheduling without reservations can bind one member of each and wait forever.
    cluster.node("a", 4)
    cluster.node("b", 4)
    cluster.nodes_ready()
    left = cluster.gang("left", 2, 3, create=0)
    right = cluster.gang("right", 2, 3, create=0)
    for i in range(2):
        cluster.add_member(left, i, gated=True)
        cluster.add_member(right, i, gated=True)
    for i in range(2):  # interleaved, as two Jobs' pods reach the scheduler
        cluster.ungate(left.members[i])
        cluster.ungate(right.members[i])

    def one_whole() -> tuple[str, str] | None:
        counts = {g.name: cluster.bound_count(g) for g in (left, right)}
        if sorted(counts.values()) == [0, 2]:
            winner = max(counts, key=lambda k: counts[k])
            return winner, min(counts, key=lambda k: counts[k])
        return None

    winner_name, loser_name = cluster.wait("one gang whole, the other empty", one_whole)
    winner, loser = cluster.gangs[winner_name], cluster.gangs[loser_name]
    cluster.assert_unbound_for(loser.members, 3.0)
    assert cluster.bound_count(winner) == 2
    refused = "\n".join(cluster.event_text(m, reason="FailedScheduling") for m in loser.members)
    assert f"cannot place 2 member(s) of gang {cluster.namespace}/{loser.name}" in refused

    # The waiting gang is waiting, not stuck: once the winner goes, it lands whole.
    cluster.delete_pods(winner.members)
    cluster.wait_gang(loser, timeout=45)


# ---- quorum ---------------------------------------------------------------------------------


# A plan makes the members distinct (each names its leaf), so such a gang keeps quorum first;
# an interchangeable gang is reserved from its first member (template reservation).
SEQUENCE_PLAN = {"sequence": [{"execute": "a"}, {"execute": "b"}, {"execute": "c"}]}


@pytest.mark.parametrize("form", FORMS)
def test_an_interchangeable_gang_is_reserved_by_its_first_member_and_binds_only_whole(
    cluster: Scenario,  # noqa: F811
    form: str,
) -> None:
    cluster.node("a", 8)
    cluster.nodes_ready()
    gang = cluster.gang("late", 3, 2, form=form, create=0)

    cluster.add_member(gang, 0)
    reserved = "reserved 3 member(s) (2 of them for members not created yet)"
    if form == "podgroup":
        cluster.wait_event(gang.name, reserved, reason="Reserved")
    else:
        cluster.wait_event(gang.members[0], reserved, reason="Reserved")
    cluster.add_member(gang, 1)
    # Both have passed filter and wait at the bind barrier: nothing is bound yet.
    cluster.wait(
        "two members held at the barrier",
        lambda: cluster.phalanx.metric("phalanx_barrier_waiting") == 2 or None,
        timeout=30,
    )
    assert cluster.bound_count(gang) == 0
    if form == "podgroup":  # written after the reservation, not with it
        cluster.wait(
            "the PodGroup's status says Scheduling",
            lambda: (
                (cluster.get_pod_group(gang.name).get("status") or {}).get("phase") == "Scheduling"
                or None
            ),
            timeout=15,
        )

    cluster.add_member(gang, 2)
    where = cluster.wait_gang(gang, timeout=30)
    assert len(set(where.values())) == 1  # pack: 6 GPUs fit the one 8-GPU node


def test_a_gang_with_a_plan_waits_for_its_quorum_then_binds_together(
    cluster: Scenario,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.nodes_ready()
    gang = cluster.gang("late", 3, 2, create=0, plan=SEQUENCE_PLAN, plan_nodes=["a", "b", "c"])

    cluster.add_member(gang, 0)
    cluster.wait_event(
        gang.members[0], "waiting for gang members: 1/3 exist", reason="FailedScheduling"
    )
    cluster.wait_unschedulable(gang.members[0], "waiting for gang members: 1/3 exist")
    cluster.add_member(gang, 1)
    cluster.wait_event(
        gang.members[1], "waiting for gang members: 2/3 exist", reason="FailedScheduling"
    )
    assert cluster.bound_count(gang) == 0
    # The status follows the decision within about a second (written once per burst).
    cluster.wait(
        f"{gang.name}: phase Pending",
        lambda: (cluster.get_pod_group(gang.name).get("status") or {}).get("phase") == "Pending",
        timeout=10,
    )
    assert cluster.events(gang.name, kind="PodGroup", reason="WaitingForMembers")
    assert cluster.bound_count(gang) == 0

    cluster.add_member(gang, 2)
    where = cluster.wait_gang(gang)
    assert len(set(where.values())) == 1  # a sequence lands on one node


def test_a_gang_binds_promptly_once_its_last_member_arrives(cluster: Scenario) -> None:  # noqa: F811
    # kube-scheduler parks a pod an extender refused until a cluster event; a new sibling
    # is not one. Phalanx must requeue the parked members when it reserves the gang, or
    # they wait until the bind barrier times out (20 s). (A gang with a plan keeps quorum
    # first, so its early members are refused and parked.)
    cluster.node("a", 8)
    cluster.nodes_ready()
    gang = cluster.gang("prompt", 3, 2, create=0, plan=SEQUENCE_PLAN, plan_nodes=["a", "b", "c"])
    for i in range(2):
        cluster.add_member(gang, i)
        cluster.wait_event(
            gang.members[i], f"waiting for gang members: {i + 1}/3 exist", reason="FailedScheduling"
        )
    for member in gang.members[:2]:  # both rest in kube-scheduler's queue, as a Job's would
        cluster.wait_unschedulable(member, "waiting for gang members")

    started = time.monotonic()
    with PodWatch(cluster.cp, cluster.namespace) as watch:
        cluster.add_member(gang, 2)
        where = cluster.wait_gang(gang, timeout=60)
    took = time.monotonic() - started
    # Reserving, three filter calls and three bindings: well under a second here.
    assert took < 5.0, f"the gang took {took:.1f}s to bind after its last member arrived"
    # The parked members were nominated to their reserved node before they bound (their
    # next kube-scheduler cycle filters that node alone), unless the bind barrier bound them
    # with their gang first (completed): then no cycle of theirs was waited for at all.
    unnominated = []
    for member in gang.members[:2]:
        nominated = [
            p["status"].get("nominatedNodeName")
            for p in watch.versions(member)
            if not p["spec"].get("nodeName")
        ]
        if where[member] not in nominated:
            assert not [n for n in nominated if n], (member, where[member], nominated)
            unnominated.append(member)
    completed = cluster.phalanx.metric("phalanx_members_completed_total")
    assert len(unnominated) <= completed, (unnominated, completed)


@contextlib.contextmanager
def scheduler_stopped(cluster: Scenario) -> Iterator[None]:  # noqa: F811
    """kube-scheduler frozen (SIGSTOP) for the block: only Phalanx can bind meanwhile."""
    component = cluster.cp.scheduler
    assert component is not None
    assert component.pid is not None
    os.kill(component.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(component.pid, signal.SIGCONT)


def test_members_created_while_the_first_waits_at_bind_are_bound_with_it(
    cluster: Scenario,  # noqa: F811
) -> None:
    # Completion (phalanx.completeMembers, on): the first member's /bind waits at the
    # barrier; its siblings claim their slots as they are created and are bound with it,
    # without cycles of their own. kube-scheduler is stopped meanwhile, so nothing but
    # completion can bind them. Nothing else is pending: kube-scheduler would reach the
    # siblings next, and completing them is still sooner.
    cluster.node("a", 8)
    cluster.nodes_ready()
    before = cluster.phalanx.metric("phalanx_members_completed_total")
    gang = cluster.gang("along", 3, 2, create=1)
    cluster.phalanx.wait_metric(
        "phalanx_barrier_waiting", lambda v: v == 1, what="the first member held at bind"
    )
    with scheduler_stopped(cluster):
        cluster.add_member(gang, 1)
        cluster.add_member(gang, 2)
        where = cluster.wait_gang(gang, timeout=30)
        assert cluster.phalanx.metric("phalanx_members_completed_total") - before == 2
        # Phalanx's record of the bindings it made alone, written once kube-scheduler had
        # ANNOUNCE_AFTER_SECONDS to /bind them itself. Still stopped: resumed, it could cycle
        # a member from its watch backlog before it sees the binding, and a /bind of its own
        # that succeeds means it writes that member's Event instead.
        for member in gang.members[1:]:
            cluster.wait_event(
                member,
                f"Successfully assigned {cluster.namespace}/{member} to {where[member]} "
                f"(bound by Phalanx with gang {cluster.namespace}/along",
                reason="Scheduled",
            )
    cluster.wait_event(gang.name, "2 of them before their own cycle", reason="Bound")

    # kube-scheduler's own cycle of a completed member can fail once the binding reached its
    # cache ("is in the cache, so can't be assumed"), and it then writes PodScheduled False
    # on the bound pod, as here. Phalanx sets it True again.
    member = gang.members[1]
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/{member}"
    failed = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulerError",
        "message": f"pod {member} is in the cache, so can't be assumed",
    }
    cluster.api.call(
        "PATCH",
        f"{path}/status",
        {"status": {"conditions": [failed]}},
        content_type="application/strategic-merge-patch+json",
    )

    def scheduled() -> dict[str, str] | None:
        pod = cluster.api.get(path)
        conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
        found = conditions.get("PodScheduled")
        return found if found is not None and found["status"] == "True" else None

    corrected = cluster.wait("PodScheduled True again", scheduled)
    assert "reason" not in corrected, corrected
    assert "message" not in corrected, corrected
    assert cluster.phalanx.metric("phalanx_pod_conditions_corrected_total") >= 1


def test_a_gang_behind_a_backlog_is_planned_and_bound_before_any_member_cycle(
    cluster: Scenario,  # noqa: F811
) -> None:
    # Planning ahead: behind other pending pods, a gang whose members Phalanx may bind
    # itself is planned as its last member is created and bound whole with no /bind at all.
    # kube-scheduler is stopped before any member exists, so it never filters one: nothing
    # but planning ahead can bind them. It asked Phalanx about `warm` a moment before, which
    # is how a Phalanx knows its kube-scheduler leads (`Extender._acts_alone`, 2 s).
    node = cluster.node("a", 8)
    cluster.nodes_ready()
    # The PodGroup first: an API server's first request for a custom resource can take
    # seconds, which would outlast the 2 s.
    gang = cluster.gang("ahead", 2, 2, create=0)
    before = cluster.phalanx.metric("phalanx_members_completed_total")
    cluster.pod("too-big", 16)  # pending throughout: the gang is behind it
    cluster.pod("warm", 1)
    cluster.wait_bound(["warm"])
    with scheduler_stopped(cluster):
        cluster.add_member(gang, 0)
        cluster.add_member(gang, 1)
        where = cluster.wait_gang(gang, timeout=30)

    assert set(where.values()) == {node}
    assert cluster.phalanx.metric("phalanx_members_completed_total") - before == 2
    cluster.wait_event(gang.name, "2 of them before their own cycle", reason="Bound")
    assert not cluster.placement(["too-big"])["too-big"]


def test_a_gang_whose_pods_precede_their_pod_group_binds_once_it_exists(
    cluster: Scenario,  # noqa: F811
) -> None:
    # The same race happens whenever Phalanx's PodGroup watch lags kube-scheduler's pod
    # watch (e.g. right after an API server restart), not only with a slow controller.
    cluster.node("a", 8)
    cluster.nodes_ready()
    gang = cluster.gang("late-group", 2, 2, create_pod_group=False)
    waiting = f"waiting for PodGroup {cluster.namespace}/late-group to exist"
    for member in gang.members:
        cluster.wait_event(member, waiting, reason="FailedScheduling")
        cluster.wait_unschedulable(member, waiting)

    cluster.pod_group("late-group", 2)
    # Nothing else would retry them: no barrier is open to time out.
    cluster.wait_gang(gang, timeout=10)


def test_an_elastic_gang_binds_its_quorum_together_and_the_rest_as_capacity_allows(
    cluster: Scenario,  # noqa: F811
) -> None:
    # minMember 2 of 4 members × 4 GPUs; three 4-GPU nodes hold three members.
    for suffix in ("a", "b", "c"):
        cluster.node(suffix, 4)
    cluster.nodes_ready()
    gang = cluster.gang("elastic", 4, 4, min_member=2)

    def three_bound() -> dict[str, str] | None:
        where = cluster.placement(gang.members)
        return where if sum(1 for n in where.values() if n) == 3 else None

    where = cluster.wait("three of four elastic members bound", three_bound, timeout=45)
    assert len({n for n in where.values() if n}) == 3
    waiting = [p for p, n in where.items() if not n]
    cluster.assert_unbound_for(waiting, 2.0)

    # Capacity arrives: the fourth member joins the running gang.
    cluster.node("d", 4)
    cluster.nodes_ready([f"{cluster.namespace}-d"])
    final = cluster.wait_gang(gang, timeout=45)
    assert final[waiting[0]] == f"{cluster.namespace}-d"
