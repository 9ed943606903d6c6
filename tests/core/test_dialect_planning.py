"""Gangs of every dialect in the cache and the planner: resolution, upstream's `basic`
policy (one by one), and a gang object that changes size while its reservation is held."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import (
    CLIQUE,
    LEAF,
    SPINE,
    gpu_node,
    grove_pod_obj,
    grove_podgang_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    pod_obj,
    podgroup_obj,
    present,
    rack_node,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.barrier import Answer, BindAlone, Join, admit
from phalanx.core.cache import ClusterState, ReleaseCause, Released
from phalanx.core.groups import registry
from phalanx.core.groups.composite import CompositePodGroup
from phalanx.core.groups.discovery import Served
from phalanx.core.groups.upstream import Workload
from phalanx.core.inventory import parse_pod
from phalanx.core.journal import Outcome
from phalanx.core.model import Binding, Dialect, GroupRef, Node, Pod, PodGroup
from phalanx.core.planner import GangPlanner
from phalanx.core.resolution import (
    Deleting,
    GroupDefaults,
    Invalid,
    Resolved,
    Waiting,
    resolve_group,
)

NODES = ["n1", "n2", "n3"]


def group_object(obj: dict[str, Any]) -> PodGroup | Workload:
    parsed = registry.parse_group_object(obj)
    assert parsed is not None
    assert not isinstance(parsed.value, CompositePodGroup)
    return parsed.value


class Cluster:
    """A cache with three 8-GPU nodes, fed with raw objects as the sources feed it."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.released: list[Released] = []
        self.state = ClusterState(on_release=self.released.append)
        for name in NODES:
            self.state.upsert_node(gpu_node(name))
        self.planner = GangPlanner(self.state)
        for obj in objects:
            self.add(obj)

    def add(self, obj: dict[str, Any]) -> None:
        if obj["kind"] == "Pod":
            self.state.upsert_pod(parse_pod(obj))
            return
        value = group_object(obj)
        if isinstance(value, Workload):
            self.state.upsert_workload(value)
        else:
            self.state.upsert_group(value)

    def pod(self, name: str) -> Pod:
        found = self.state.pod_by_key("default", name)
        assert found is not None
        return found

    def resolve(self, ref: GroupRef) -> Resolved | Waiting | Invalid | Deleting:
        return resolve_group(self.state, ref, GroupDefaults())


VOLCANO = GroupRef("default", "job", Dialect.VOLCANO)
UPSTREAM = GroupRef("default", "job", Dialect.UPSTREAM)
WORKERS = GroupRef("default", "train", Dialect.UPSTREAM, "workers")


# --- resolution ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "ref", "min_member"),
    [
        (podgroup_obj("job", 3), GroupRef("default", "job"), 3),
        (volcano_podgroup_obj("job", 4), VOLCANO, 4),
        (upstream_podgroup_obj("job", 2), UPSTREAM, 2),
        (workload_obj("train", {"workers": 5, "ps": 1}), WORKERS, 5),
    ],
    ids=["scheduler-plugins", "volcano", "upstream-pod-group", "workload-pod-group"],
)
def test_a_gang_resolves_from_its_object_in_any_dialect(
    obj: dict[str, Any], ref: GroupRef, min_member: int
) -> None:
    resolution = Cluster(obj).resolve(ref)
    assert isinstance(resolution, Resolved)
    assert (resolution.group.key, resolution.group.min_member) == (ref.key, min_member)


TIMEOUT = {"phalanx.io/schedule-timeout-seconds": "30"}


@pytest.mark.parametrize(
    ("obj", "ref", "timeout"),
    [
        (podgroup_obj("job", 3), GroupRef("default", "job"), 300),
        (podgroup_obj("job", 3, timeout=30), GroupRef("default", "job"), 30),
        (volcano_podgroup_obj("job", 4), VOLCANO, 300),
        (volcano_podgroup_obj("job", 4, annotations=TIMEOUT), VOLCANO, 30),
        (upstream_podgroup_obj("job", 2), UPSTREAM, 300),
        (upstream_podgroup_obj("job", 2, annotations=TIMEOUT), UPSTREAM, 30),
        (workload_obj("train", {"workers": 5}), WORKERS, 300),
        (workload_obj("train", {"workers": 5}, annotations=TIMEOUT), WORKERS, 30),
    ],
    ids=[
        "scheduler-plugins",
        "scheduler-plugins-own",
        "volcano",
        "volcano-own",
        "upstream",
        "upstream-own",
        "workload",
        "workload-own",
    ],
)
def test_a_gang_object_that_sets_no_timeout_gets_the_configured_one(
    obj: dict[str, Any], ref: GroupRef, timeout: int
) -> None:
    # --reservation-ttl-seconds: "held when its PodGroup sets no scheduleTimeoutSeconds".
    cluster = Cluster(obj)
    resolution = resolve_group(cluster.state, ref, GroupDefaults(timeout_seconds=300))
    assert isinstance(resolution, Resolved)
    assert resolution.group.timeout_seconds == timeout


@pytest.mark.parametrize(
    ("objects", "ref", "expected"),
    [
        (
            (),
            VOLCANO,
            Waiting(
                "waiting for Volcano PodGroup default/job (scheduling.volcano.sh/v1beta1) to "
                "exist (pods name it with annotation scheduling.k8s.io/group-name)"
            ),
        ),
        (
            (),
            GroupRef("default", "job"),
            Waiting("waiting for PodGroup default/job to exist (pods name it with a label)"),
        ),
        (
            (workload_obj("train", {"worker": 2, "ps": 1}),),
            WORKERS,
            Invalid(
                'Workload default/train has no pod group "workers" (spec.podGroups has '
                '"worker", "ps"); pods name it in spec.workloadRef.podGroup'
            ),
        ),
    ],
    ids=["volcano-missing", "scheduler-plugins-missing", "workload-lacks-the-pod-group"],
)
def test_a_gang_without_its_object_waits_and_a_wrong_reference_is_invalid(
    objects: tuple[dict[str, Any], ...], ref: GroupRef, expected: Waiting | Invalid
) -> None:
    assert Cluster(*objects).resolve(ref) == expected


def test_a_wait_for_an_api_the_server_does_not_serve_says_so() -> None:
    cluster = Cluster()
    cluster.state.served = Served(())
    resolution = cluster.resolve(VOLCANO)
    assert isinstance(resolution, Waiting)
    assert resolution.reason.endswith("; this API server does not serve it yet (volcano objects)")


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (VOLCANO, "PodGroup volcano:default/job is invalid: spec.minMember must be positive"),
        (WORKERS, "Workload upstream:default/train is invalid: spec.podGroups[0] is broken"),
    ],
    ids=["pod-group", "workload"],
)
def test_an_invalid_object_makes_every_gang_it_holds_invalid(ref: GroupRef, expected: str) -> None:
    cluster = Cluster()
    cluster.state.set_group_error(ref.object_ref.key, expected.partition("invalid: ")[2])
    assert cluster.resolve(ref) == Invalid(expected)


# --- upstream's basic policy: one by one -------------------------------------------------


def basic_members(count: int) -> list[dict[str, Any]]:
    return [pod_obj(f"solo-{i}", 8, scheduling_group="solo") for i in range(count)]


def test_a_basic_pod_group_places_each_member_alone_without_a_reservation() -> None:
    cluster = Cluster(upstream_podgroup_obj("solo", None), *basic_members(2))
    decision = cluster.planner.filter(cluster.pod("solo-0"), NODES, now=0)
    assert decision.result.feasible == tuple(NODES)
    assert decision.reserved is None
    assert cluster.state.reservations() == {}
    assert decision.events == ()


def test_a_member_of_a_basic_pod_group_binds_alone() -> None:
    cluster = Cluster(upstream_podgroup_obj("solo", None), *basic_members(3))
    member = cluster.pod("solo-1")
    admission = admit(cluster.state, Binding(member.ref, "n2"), GroupDefaults())
    assert admission == BindAlone(member, "n2")


def test_a_basic_pod_group_of_a_workload_is_one_by_one_too() -> None:
    cluster = Cluster(
        workload_obj("train", {"workers": None}),
        pod_obj("w-0", 8, workload_ref={"name": "train", "podGroup": "workers"}),
    )
    decision = cluster.planner.filter(cluster.pod("w-0"), NODES, now=0)
    assert (decision.result.feasible, decision.reserved) == (tuple(NODES), None)


# --- a gang object that changes while its reservation is held ----------------------------


def reserved_gang(cluster: Cluster, first: str) -> None:
    decision = cluster.planner.filter(cluster.pod(first), NODES, now=0)
    assert decision.reserved is not None


@pytest.mark.parametrize(
    ("before", "after", "ref", "members"),
    [
        (
            upstream_podgroup_obj("job", 2),
            upstream_podgroup_obj("job", 3),
            UPSTREAM,
            [pod_obj(f"job-{i}", 8, scheduling_group="job") for i in range(4)],
        ),
        (
            volcano_podgroup_obj("job", 2),
            volcano_podgroup_obj("job", 3),
            VOLCANO,
            [pod_obj(f"job-{i}", 8, volcano_group="job") for i in range(4)],
        ),
        (
            podgroup_obj("job", 2),
            podgroup_obj("job", 3),
            GroupRef("default", "job"),
            [pod_obj(f"job-{i}", 8, group="job") for i in range(4)],
        ),
    ],
    ids=["upstream-min-count", "volcano-min-member", "scheduler-plugins-min-member"],
)
def test_a_gang_whose_size_changes_is_released_with_its_cause_and_re_planned(
    before: dict[str, Any], after: dict[str, Any], ref: GroupRef, members: list[dict[str, Any]]
) -> None:
    cluster = Cluster(before, *members)  # 4 members of 8 GPUs, 3 nodes of 8: the quorum only
    reserved_gang(cluster, "job-0")
    assert len(present(cluster.state.reservation(ref.key)).members) == 2

    cluster.add(after)

    [released] = cluster.released
    assert released.cause is ReleaseCause.GROUP_CHANGED
    assert released.why == f"PodGroup {ref.key} changed (gang size 2 -> 3); re-planning the gang"
    assert cluster.state.reservation(ref.key) is None
    decision = cluster.planner.filter(cluster.pod("job-1"), NODES, now=1)
    assert decision.reserved is not None
    assert len(decision.reserved.members) == 3


def test_a_status_write_by_anyone_leaves_the_reservation_alone() -> None:
    before = upstream_podgroup_obj("job", 2)
    cluster = Cluster(before, *(pod_obj(f"job-{i}", 8, scheduling_group="job") for i in range(2)))
    reserved_gang(cluster, "job-0")
    after = upstream_podgroup_obj(
        "job", 2, status={"conditions": [{"type": "PodGroupInitiallyScheduled"}]}
    )
    after["metadata"]["resourceVersion"] = "42"
    cluster.add(after)
    assert cluster.released == []
    assert cluster.state.reservation(UPSTREAM.key) is not None


def test_an_edited_workload_re_plans_the_gangs_it_holds_and_a_deleted_one_releases_them() -> None:
    members = [
        pod_obj(f"w-{i}", 8, workload_ref={"name": "train", "podGroup": "workers"})
        for i in range(2)
    ]
    cluster = Cluster(workload_obj("train", {"workers": 2}), *members)
    reserved_gang(cluster, "w-0")
    assert cluster.state.gangs_of("upstream:default/train") == [WORKERS.key]

    cluster.add(
        workload_obj("train", {"workers": 2}, annotations={"phalanx.io/placement": "spread"})
    )
    reserved_gang(cluster, "w-1")
    assert cluster.state.remove_group("upstream:default/train")

    causes = [(r.cause, r.group_key) for r in cluster.released]
    assert causes == [
        (ReleaseCause.GROUP_CHANGED, WORKERS.key),
        (ReleaseCause.GROUP_GONE, WORKERS.key),
    ]
    assert isinstance(cluster.resolve(WORKERS), Waiting)


@pytest.mark.parametrize(
    ("gang_object", "member", "key"),
    [
        (volcano_podgroup_obj("job", 2), {"volcano_group": "job"}, VOLCANO.key),
        (upstream_podgroup_obj("job", 2), {"scheduling_group": "job"}, UPSTREAM.key),
        (
            workload_obj("train", {"workers": 2}),
            {"workload_ref": {"name": "train", "podGroup": "workers"}},
            WORKERS.key,
        ),
    ],
)
def test_a_gang_object_that_comes_after_its_members_marks_the_gang_joined(
    gang_object: dict[str, Any], member: dict[str, Any], key: str
) -> None:
    # Pods and gang objects come on separate watches: the gang may be planned ahead either way.
    cluster = Cluster(*(pod_obj(f"m-{i}", 8, **member) for i in range(2)))
    cluster.state.take_joined()
    cluster.add(gang_object)
    assert [g.key for g in cluster.state.take_joined()] == [key]
    cluster.add(gang_object)  # a relist
    assert cluster.state.take_joined() == []


def test_a_held_bind_of_a_changed_gang_is_no_longer_admitted_to_its_old_gate() -> None:
    members = [pod_obj(f"job-{i}", 8, scheduling_group="job") for i in range(2)]
    cluster = Cluster(upstream_podgroup_obj("job", 2), *members)
    reserved_gang(cluster, "job-0")
    member = cluster.pod("job-0")
    node = present(present(cluster.state.reservation(UPSTREAM.key)).node_of(member.uid))
    assert isinstance(admit(cluster.state, Binding(member.ref, node), GroupDefaults()), Join)
    cluster.add(upstream_podgroup_obj("job", 3))
    assert not isinstance(admit(cluster.state, Binding(member.ref, node), GroupDefaults()), Join)
    assert Outcome.COMMITTED in [e.outcome for e in cluster.planner.events]


# --- a member that moves to another gang ------------------------------------------------


def test_a_member_relabelled_into_another_gang_leaves_its_old_reservation_and_joins_the_new() -> (
    None
):
    # Labels are mutable: the pod is gone from gang a as if deleted, and new to gang b.
    cluster = Cluster(
        podgroup_obj("a", 2),
        podgroup_obj("b", 2),
        *(pod_obj(f"a-{i}", 8, group="a") for i in range(2)),
        pod_obj("b-0", 8, group="b"),
    )
    reserved_gang(cluster, "a-0")
    cluster.state.take_joined()

    cluster.add(pod_obj("a-1", 8, group="b"))

    held = cluster.state.reservation("default/a")
    assert held is not None
    assert [m.pod_key for m in held.members] == ["default/a-0"]
    assert [g.key for g in cluster.state.take_joined()] == ["default/b"]
    # The slot a-1 held for gang a is free again: gang b (a-1, b-0) fits beside a-0.
    decision = cluster.planner.filter(cluster.pod("b-0"), NODES, now=1)
    assert decision.reserved is not None
    assert sorted(m.pod_key for m in decision.reserved.members) == ["default/a-1", "default/b-0"]


# --- a gang object edited into an invalid one --------------------------------------------


@pytest.mark.parametrize(
    ("gang_object", "member", "key"),
    [
        (volcano_podgroup_obj("job", 2), {"volcano_group": "job"}, VOLCANO.key),
        (
            workload_obj("train", {"workers": 2}),
            {"workload_ref": {"name": "train", "podGroup": "workers"}},
            WORKERS.key,
        ),
    ],
    ids=["pod-group", "workload"],
)
def test_a_gang_object_edited_into_an_invalid_one_releases_the_reservation_it_held(
    gang_object: dict[str, Any], member: dict[str, Any], key: str
) -> None:
    # Volcano's CRD takes minMember 0; the source records the refusal as the object's error.
    cluster = Cluster(gang_object, *(pod_obj(f"m-{i}", 8, **member) for i in range(2)))
    reserved_gang(cluster, "m-0")
    object_key = GroupRef.parse(key).object_ref.key
    reason = "spec.minMember: must be a positive integer, not 0"

    cluster.state.set_group_error(object_key, reason)

    [released] = cluster.released
    assert (released.cause, released.group_key) == (ReleaseCause.GROUP_CHANGED, key)
    assert reason in released.why
    assert cluster.state.reservation(key) is None
    # No member is steered to a node held for a gang that can no longer bind.
    decision = cluster.planner.filter(cluster.pod("m-1"), NODES, now=1)
    assert decision.result.feasible == ()


# --- a gang object being deleted ----------------------------------------------------------


def being_deleted(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` after `kubectl delete`, held by a finalizer (kube-controller-manager's
    `scheduling.k8s.io/podgroup-protection` on an upstream PodGroup, any operator's)."""
    metadata = {
        **obj["metadata"],
        "deletionTimestamp": "2026-12-05T18:00:00Z",
        "finalizers": ["example.com/hold"],
    }
    return {**obj, "metadata": metadata}


DELETED_GANGS = [
    pytest.param(
        podgroup_obj("job", 2),
        {"group": "job"},
        GroupRef("default", "job"),
        "PodGroup default/job is being deleted (gang default/job)",
        id="scheduler-plugins",
    ),
    pytest.param(
        volcano_podgroup_obj("job", 2),
        {"volcano_group": "job"},
        VOLCANO,
        "PodGroup default/job is being deleted (gang volcano:default/job)",
        id="volcano",
    ),
    pytest.param(
        upstream_podgroup_obj("job", 2),
        {"scheduling_group": "job"},
        UPSTREAM,
        "PodGroup default/job is being deleted (gang upstream:default/job)",
        id="upstream-pod-group",
    ),
    pytest.param(
        workload_obj("train", {"workers": 2}),
        {"workload_ref": {"name": "train", "podGroup": "workers"}},
        WORKERS,
        "Workload default/train is being deleted (gang upstream:default/train/workers)",
        id="workload",
    ),
]


@pytest.mark.parametrize(("gang_object", "member", "ref", "named"), DELETED_GANGS)
def test_a_gang_whose_object_is_being_deleted_releases_its_reservation_and_places_nobody(
    gang_object: dict[str, Any], member: dict[str, Any], ref: GroupRef, named: str
) -> None:
    cluster = Cluster(gang_object, *(pod_obj(f"m-{i}", 8, **member) for i in range(3)))
    reserved_gang(cluster, "m-0")

    cluster.add(being_deleted(gang_object))

    [released] = cluster.released
    assert (released.cause, released.group_key) == (ReleaseCause.GROUP_GONE, ref.key)
    assert released.why.startswith(named)
    assert cluster.state.reservation(ref.key) is None
    decision = cluster.planner.filter(cluster.pod("m-1"), NODES, now=1)
    assert decision.result.feasible == ()
    assert decision.reserved is None
    assert set(decision.result.unresolvable) == set(NODES)  # preemption would not help
    assert all(r.startswith(named) for r in decision.result.unresolvable.values())
    assert [e.outcome for e in decision.events] == [Outcome.UNFIT]


@pytest.mark.parametrize(("gang_object", "member", "ref", "named"), DELETED_GANGS)
def test_a_bind_for_a_member_of_a_gang_being_deleted_is_answered_with_an_error(
    gang_object: dict[str, Any], member: dict[str, Any], ref: GroupRef, named: str
) -> None:
    cluster = Cluster(gang_object, *(pod_obj(f"m-{i}", 8, **member) for i in range(2)))
    reserved_gang(cluster, "m-0")
    pod = cluster.pod("m-0")
    node = present(present(cluster.state.reservation(ref.key)).node_of(pod.uid))

    cluster.add(being_deleted(gang_object))

    admission = admit(cluster.state, Binding(pod.ref, node), GroupDefaults())
    assert isinstance(admission, Answer)
    assert admission.error.startswith(named)


def test_a_gang_being_deleted_is_not_reserved_from_its_template_nor_planned_ahead() -> None:
    cluster = Cluster(being_deleted(upstream_podgroup_obj("job", 2)))
    cluster.add(pod_obj("job-0", 8, scheduling_group="job"))  # template reservation's shape
    assert cluster.planner.filter(cluster.pod("job-0"), NODES, now=0).reserved is None
    cluster.add(pod_obj("job-1", 8, scheduling_group="job"))  # the quorum exists
    assert cluster.planner.plan_ahead(UPSTREAM, now=0) is None
    assert cluster.state.reservations() == {}


def test_a_bound_member_of_a_gang_being_deleted_is_left_where_it_is_and_extras_wait() -> None:
    cluster = Cluster(
        volcano_podgroup_obj("job", 1),
        pod_obj("job-0", 8, volcano_group="job", node="n1", phase="Running"),
        pod_obj("job-1", 8, volcano_group="job"),
    )
    cluster.add(being_deleted(volcano_podgroup_obj("job", 1)))

    bound = cluster.planner.filter(cluster.pod("job-0"), NODES, now=0)
    assert bound.result.feasible == ("n1",)
    extra = cluster.pod("job-1")
    assert cluster.planner.filter(extra, NODES, now=0).result.feasible == ()
    # Beyond a bound quorum it would bind alone; not while its gang is torn down.
    assert isinstance(admit(cluster.state, Binding(extra.ref, "n2"), GroupDefaults()), Answer)
    assert cluster.released == []


def test_a_gang_object_deleted_for_good_after_being_deleted_releases_nothing_twice() -> None:
    members = [pod_obj(f"job-{i}", 8, scheduling_group="job") for i in range(2)]
    cluster = Cluster(upstream_podgroup_obj("job", 2), *members)
    reserved_gang(cluster, "job-0")
    cluster.add(being_deleted(upstream_podgroup_obj("job", 2)))
    cluster.add(being_deleted(upstream_podgroup_obj("job", 2)))  # a relist

    assert not cluster.state.remove_group(UPSTREAM.key)  # the finalizer went: it is gone

    assert [r.cause for r in cluster.released] == [ReleaseCause.GROUP_GONE]
    assert isinstance(cluster.resolve(UPSTREAM), Waiting)


# --- a PodGroup kube-scheduler refuses (its validatePodGroup) ------------------------------


def job_members(*priorities: int, version: str = "v1beta1") -> list[dict[str, Any]]:
    """PodGroup `job` (minCount 2, priority 0 unset) and one 8-GPU member per priority."""
    return [
        upstream_podgroup_obj("job", 2, version=version),
        *(
            pod_obj(f"job-{i}", 8, scheduling_group="job", priority=p)
            for i, p in enumerate(priorities)
        ),
    ]


REFUSED_JOB = (
    "PodGroup default/job is refused, as kube-scheduler 1.37 refuses it before any cycle of "
    "its pods: pod default/job-1 has priority 500 but the PodGroup's spec.priority is 0"
)


def test_a_pod_group_whose_pod_has_another_priority_is_refused_naming_the_pod() -> None:
    cluster = Cluster(*job_members(0, 500))
    found = cluster.resolve(UPSTREAM)
    assert isinstance(found, Invalid)
    assert found.reason.startswith(REFUSED_JOB)

    decision = cluster.planner.filter(cluster.pod("job-0"), NODES, now=0)
    assert decision.result.feasible == ()
    assert decision.reserved is None
    assert all(r.startswith(REFUSED_JOB) for r in decision.result.unresolvable.values())
    assert [(e.outcome, e.reason) for e in decision.events] == [(Outcome.INVALID, found.reason)]
    assert cluster.planner.plan_ahead(UPSTREAM, now=0) is None
    assert cluster.state.reservations() == {}
    answer = admit(cluster.state, Binding(cluster.pod("job-0").ref, "n1"), GroupDefaults())
    assert answer == Answer(found.reason)


def test_a_refused_pod_group_is_planned_once_the_pod_that_broke_it_is_replaced() -> None:
    cluster = Cluster(*job_members(0, 500))
    cluster.state.remove_pod(cluster.pod("job-1").uid)
    cluster.add(pod_obj("job-1", 8, scheduling_group="job", uid="job-1-again"))
    assert isinstance(cluster.resolve(UPSTREAM), Resolved)
    assert cluster.planner.filter(cluster.pod("job-0"), NODES, now=0).reserved is not None


def test_a_1_36_pod_group_is_refused_for_scheduler_names_alone_as_its_kube_scheduler_does() -> None:
    cluster = Cluster(*job_members(0, 500, version="v1alpha2"))
    assert isinstance(cluster.resolve(UPSTREAM), Resolved)
    cluster.add(pod_obj("job-2", 8, scheduling_group="job", scheduler="default-scheduler"))
    found = cluster.resolve(UPSTREAM)
    assert isinstance(found, Invalid)
    assert "kube-scheduler 1.36" in found.reason
    assert 'pod default/job-2 has spec.schedulerName "default-scheduler"' in found.reason


def test_other_dialects_gangs_are_not_held_to_kube_schedulers_pod_group_rules() -> None:
    cluster = Cluster(
        volcano_podgroup_obj("job", 2),
        pod_obj("job-0", 8, volcano_group="job", priority=500),
        pod_obj("job-1", 8, volcano_group="job", scheduler="default-scheduler"),
    )
    assert isinstance(cluster.resolve(VOLCANO), Resolved)


def test_a_member_arriving_that_kube_scheduler_refuses_the_gang_for_releases_its_reservation() -> (
    None
):
    cluster = Cluster(*job_members(0, 0))
    reserved_gang(cluster, "job-0")
    cluster.add(pod_obj("job-2", 8, scheduling_group="job", priority=500))

    event = cluster.planner.release_refused(cluster.pod("job-2"))

    assert event is not None
    assert event.outcome is Outcome.INVALID
    assert "pod default/job-2 has priority 500" in event.reason
    [released] = cluster.released
    assert (released.cause, released.group_key) == (ReleaseCause.GROUP_CHANGED, UPSTREAM.key)
    assert released.why == f"{event.reason}; reservation released"
    assert cluster.state.reservations() == {}


def test_a_member_arriving_that_keeps_the_gang_valid_leaves_its_reservation_alone() -> None:
    cluster = Cluster(*job_members(0, 0))
    reserved_gang(cluster, "job-0")
    cluster.add(pod_obj("job-2", 8, scheduling_group="job"))
    assert cluster.planner.release_refused(cluster.pod("job-2")) is None
    assert cluster.released == []


# --- Kueue's plain pod groups ------------------------------------------------------------


def kueue_member(name: str, count: int, **more: Any) -> dict[str, Any]:
    """A member of Kueue pod group `job` of `count` pods, asking a whole 8-GPU node."""
    labels = {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/pod-group-name": "job"}
    annotations = {
        "kueue.x-k8s.io/pod-group-total-count": str(count),
        "kueue.x-k8s.io/pod-group-serving": "true",
    }
    return pod_obj(name, 8, labels=labels, annotations=annotations, **more)


def test_a_kueue_pod_group_is_reserved_whole_as_one_gang_of_its_total_count() -> None:
    cluster = Cluster(*(kueue_member(f"job-{i}", 3) for i in range(3)))
    decision = cluster.planner.filter(cluster.pod("job-0"), NODES, now=0)
    assert decision.reserved is not None
    assert decision.reserved.group_key == "kueue:default/job"
    assert sorted(m.node for m in decision.reserved.members) == NODES


def test_a_kueue_pod_group_one_node_short_reserves_nobody() -> None:
    cluster = Cluster(*(kueue_member(f"job-{i}", 4) for i in range(4)))
    decision = cluster.planner.filter(cluster.pod("job-0"), NODES, now=0)
    assert (decision.reserved, decision.result.feasible) == (None, ())
    assert cluster.state.reservations() == {}


def test_a_replacement_member_of_a_placed_kueue_serving_group_joins_it_alone() -> None:
    cluster = Cluster(
        kueue_member("job-0", 3, node="n1", phase="Running"),
        kueue_member("job-1", 3, node="n2", phase="Running"),
        kueue_member("job-2", 3, node="n3", phase="Failed"),
        kueue_member("job-2b", 3),
    )
    replacement = cluster.pod("job-2b")
    decision = cluster.planner.filter(replacement, NODES, now=0)
    assert decision.result.feasible == ("n3",)
    assert decision.reserved is not None
    assert [(m.pod_uid, m.node) for m in decision.reserved.members] == [(replacement.uid, "n3")]
    admission = admit(cluster.state, Binding(replacement.ref, "n3"), GroupDefaults())
    assert isinstance(admission, Join)


# --- LeaderWorkerSet groups (opt-in) ---------------------------------------------------


def lws_member(
    name: str,
    size: int,
    *,
    worker: int,
    opt_in: bool = True,
    subgroups: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod of LWS `serve`'s group 0 asking a whole 8-GPU node, as LWS stamps it;
    `subgroups`: the LWS's subgroup annotations (its subgroup-size among them), with which
    LWS labels the pod with its subgroup's index."""
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
    }
    annotations = {"leaderworkerset.sigs.k8s.io/size": str(size), **(subgroups or {})}
    if subgroups:
        each = int(subgroups[SUBGROUP_SIZE])
        index = (worker - 1) // each if size % each and worker else worker // each
        labels["leaderworkerset.sigs.k8s.io/subgroup-index"] = str(index)
    if opt_in:
        annotations["phalanx.io/leaderworkerset-gang"] = "true"
    return pod_obj(name, 8, labels=labels, annotations=annotations)


def lws_group(
    size: int, *, workers_opt_in: bool = True, subgroups: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    return [lws_member("serve-0", size, worker=0, subgroups=subgroups)] + [
        lws_member(f"serve-0-{i}", size, worker=i, opt_in=workers_opt_in, subgroups=subgroups)
        for i in range(1, size)
    ]


def test_an_opted_in_leaderworkerset_group_is_reserved_whole_as_one_gang() -> None:
    cluster = Cluster(*lws_group(3))
    decision = cluster.planner.filter(cluster.pod("serve-0"), NODES, now=0)
    assert decision.reserved is not None
    assert decision.reserved.group_key == "lws:default/serve-0"
    assert sorted(m.node for m in decision.reserved.members) == NODES


def test_a_leaderworkerset_group_one_node_short_reserves_nobody() -> None:
    cluster = Cluster(*lws_group(4))
    decision = cluster.planner.filter(cluster.pod("serve-0-1"), NODES, now=0)
    assert (decision.reserved, decision.result.feasible) == (None, ())
    assert cluster.state.reservations() == {}


def test_a_leaderworkerset_group_opted_in_on_the_leader_only_is_invalid_naming_the_opt_in() -> None:
    cluster = Cluster(*lws_group(3, workers_opt_in=False))
    assert cluster.resolve(GroupRef("default", "serve-0", Dialect.LWS)) == Invalid(
        "gang lws:default/serve-0: pod serve-0-1 has no annotation "
        'phalanx.io/leaderworkerset-gang: "true" while other pods of its LeaderWorkerSet '
        "group do; set it on both leaderTemplate and workerTemplate (or on neither)"
    )
    decision = cluster.planner.filter(cluster.pod("serve-0"), NODES, now=0)
    assert decision.reserved is None


RACK = "example.com/rack"
SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
SUBGROUP_KEY = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
# Two subgroups of two pods: the leader and worker 1, workers 2 and 3.
SUBGROUPS_IN_RACKS = {SUBGROUP_SIZE: "2", SUBGROUP_KEY: RACK}


def racked(cluster: Cluster, racks: dict[str, list[str]]) -> list[str]:
    """Replaces the cluster's nodes with 8-GPU nodes labelled with their rack."""
    for name in NODES:
        cluster.state.remove_node(name)
    names = []
    for rack, nodes in racks.items():
        for name in nodes:
            cluster.state.upsert_node(gpu_node(name, labels={RACK: rack}))
            names.append(name)
    return names


def reserved_nodes(cluster: Cluster) -> dict[str, str]:
    reservation = cluster.state.reservation("lws:default/serve-0")
    assert reservation is not None
    return {m.pod_key.split("/")[1]: m.node for m in reservation.members}


def test_each_leaderworkerset_subgroup_is_reserved_inside_one_rack() -> None:
    cluster = Cluster(*lws_group(4, subgroups=SUBGROUPS_IN_RACKS))
    # Three nodes in rack r1, two in r2: filling r1 first would split a subgroup.
    nodes = racked(cluster, {"r1": ["a1", "a2", "a3"], "r2": ["b1", "b2"]})
    decision = cluster.planner.filter(cluster.pod("serve-0"), nodes, now=0)
    assert decision.reserved is not None
    where = reserved_nodes(cluster)
    rack = {name: name[0] for name in nodes}
    assert rack[where["serve-0"]] == rack[where["serve-0-1"]]
    assert rack[where["serve-0-2"]] == rack[where["serve-0-3"]]


def test_a_leaderworkerset_group_with_subgroups_in_racks_waits_for_all_its_pods() -> None:
    # A slot made from the leader's shape would stand for no subgroup in particular.
    cluster = Cluster(*lws_group(4, subgroups=SUBGROUPS_IN_RACKS)[:2])
    nodes = racked(cluster, {"r1": ["a1", "a2", "a3"], "r2": ["b1", "b2"]})
    decision = cluster.planner.filter(cluster.pod("serve-0"), nodes, now=0)
    assert decision.reserved is None
    assert decision.result.unresolvable["a1"] == "waiting for gang members: 2/4 exist"


def test_a_leaderworkerset_group_with_no_rack_for_a_whole_subgroup_is_refused_naming_it() -> None:
    cluster = Cluster(*lws_group(4, subgroups=SUBGROUPS_IN_RACKS))
    nodes = racked(cluster, {"r1": ["a1", "a2"], "r2": ["b1"], "r3": ["c1"]})
    decision = cluster.planner.filter(cluster.pod("serve-0"), nodes, now=0)
    assert (decision.reserved, decision.result.feasible) == (None, ())
    reason = decision.result.unresolvable["a1"]
    assert "LWS subgroup(s) 0, 1 each in one example.com/rack" in reason
    assert "LWS subgroup 1 fits in no" in reason


def test_the_groups_exclusive_topology_and_its_subgroups_hold_together() -> None:
    # Every pod in one spine, each subgroup in one leaf of it: only spine s1 has two leaves
    # of two nodes.
    subgroups = {SUBGROUP_SIZE: "2", SUBGROUP_KEY: LEAF, GROUP_KEY: SPINE}
    cluster = Cluster(*lws_group(4, subgroups=subgroups))
    for name in NODES:
        cluster.state.remove_node(name)
    nodes = [
        rack_node("a1", 8, spine="s0", leaf="l0"),
        rack_node("a2", 8, spine="s0", leaf="l0"),
        rack_node("a3", 8, spine="s0", leaf="l1"),
        rack_node("a4", 8, spine="s0", leaf="l2"),
        rack_node("b1", 8, spine="s1", leaf="l3"),
        rack_node("b2", 8, spine="s1", leaf="l3"),
        rack_node("b3", 8, spine="s1", leaf="l4"),
        rack_node("b4", 8, spine="s1", leaf="l4"),
    ]
    for node in nodes:
        cluster.state.upsert_node(node)
    names = [n.name for n in nodes]
    decision = cluster.planner.filter(cluster.pod("serve-0"), names, now=0)
    assert decision.reserved is not None
    where = reserved_nodes(cluster)
    assert {where["serve-0"], where["serve-0-1"]} in ({"b1", "b2"}, {"b3", "b4"})
    assert {where["serve-0-2"], where["serve-0-3"]} in ({"b1", "b2"}, {"b3", "b4"})


def test_subgroup_and_group_labels_in_no_topology_together_are_refused_naming_the_annotations() -> (
    None
):
    subgroups = {SUBGROUP_SIZE: "2", SUBGROUP_KEY: RACK, GROUP_KEY: "example.com/row"}
    cluster = Cluster(*lws_group(4, subgroups=subgroups))
    decision = cluster.planner.filter(cluster.pod("serve-0"), NODES, now=0)
    assert decision.reserved is None
    assert (
        "gang lws:default/serve-0: its LWS subgroup(s) 0, 1 require one example.com/rack each "
        "(annotations leaderworkerset.sigs.k8s.io/exclusive-topology, "
        "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology, "
        "leaderworkerset.sigs.k8s.io/subgroup-size, leaderworkerset.sigs.k8s.io/size), which "
        "is no level of the gang's topology at or below example.com/row (example.com/row)"
    ) in decision.result.unresolvable["n1"]


# --- YuniKorn's task groups --------------------------------------------------------------

SPARK_GROUPS = (
    '[{"name": "driver", "minMember": 1, "minResource": {"cpu": "1"}},'
    ' {"name": "executor", "minMember": 2, "minResource": {"cpu": "1"}}]'
)


def yunikorn_member(name: str, task_group: str) -> dict[str, Any]:
    """A pod of YuniKorn application `spark-pi` asking a whole 8-GPU node, as its users
    write it (the definition on every pod)."""
    annotations = {
        "yunikorn.apache.org/task-group-name": task_group,
        "yunikorn.apache.org/task-groups": SPARK_GROUPS,
    }
    return pod_obj(name, 8, labels={"applicationId": "spark-pi"}, annotations=annotations)


def test_a_yunikorn_application_is_reserved_whole_as_one_gang_of_its_task_groups() -> None:
    cluster = Cluster(
        yunikorn_member("driver", "driver"),
        *(yunikorn_member(f"exec-{i}", "executor") for i in (1, 2)),
    )
    decision = cluster.planner.filter(cluster.pod("exec-1"), NODES, now=0)
    assert decision.reserved is not None
    assert decision.reserved.group_key == "yunikorn:default/spark-pi"
    assert sorted(m.node for m in decision.reserved.members) == NODES


def test_executors_without_their_driver_are_not_the_quorum_of_their_task_groups() -> None:
    cluster = Cluster(*(yunikorn_member(f"exec-{i}", "executor") for i in (1, 2, 3)))
    decision = cluster.planner.filter(cluster.pod("exec-1"), NODES, now=0)
    assert (decision.reserved, decision.result.feasible) == (None, ())
    assert set(decision.result.unresolvable.values()) == {
        "waiting for gang members: 3/3 exist, but task driver has 0 of 1 member(s) "
        "(annotation yunikorn.apache.org/task-groups)"
    }
    assert cluster.state.reservations() == {}


def test_a_yunikorn_application_one_node_short_reserves_nobody() -> None:
    cluster = Cluster(
        yunikorn_member("driver", "driver"),
        *(yunikorn_member(f"exec-{i}", "executor") for i in (1, 2)),
        pod_obj("other", 8, node="n3", phase="Running"),
    )
    decision = cluster.planner.filter(cluster.pod("driver"), NODES, now=0)
    assert (decision.reserved, decision.result.feasible) == (None, ())


# --- KAI Scheduler's PodGroups ----------------------------------------------------------

KAI = GroupRef("default", "train", Dialect.KAI)


def kai_gang(size: int, *subgroups: str) -> list[dict[str, Any]]:
    """KAI PodGroup `train` of `size` and its members, each asking a whole 8-GPU node; with
    `subgroups`, member i is in subgroup i (the PodGroup asks 1 of each)."""
    group = kai_podgroup_obj(
        "train", size, sub_groups=dict.fromkeys(subgroups, 1) if subgroups else None
    )
    names = list(subgroups) + [""] * (size - len(subgroups))
    return [group] + [kai_pod_obj(f"train-{i}", "train", names[i], gpus=8) for i in range(size)]


def test_a_kai_pod_group_is_reserved_whole_as_one_gang() -> None:
    cluster = Cluster(*kai_gang(3))
    decision = cluster.planner.filter(cluster.pod("train-0"), NODES, now=0)
    assert decision.reserved is not None
    assert decision.reserved.group_key == "kai:default/train"
    assert sorted(m.node for m in decision.reserved.members) == NODES


def test_a_kai_pod_group_one_node_short_reserves_nobody() -> None:
    cluster = Cluster(*kai_gang(4))
    decision = cluster.planner.filter(cluster.pod("train-0"), NODES, now=0)
    assert (decision.reserved, decision.result.feasible) == (None, ())
    assert cluster.state.reservations() == {}


def test_a_kai_gang_waits_for_a_member_of_each_subgroup() -> None:
    group = kai_podgroup_obj("train", 2, sub_groups={"leader": 1, "workers": 1})
    workers = [kai_pod_obj(f"train-{i}", "train", "workers", gpus=8) for i in range(2)]
    cluster = Cluster(group, *workers)
    # Two members, but neither is the leader: minMember alone would call it a quorum.
    decision = cluster.planner.filter(cluster.pod("train-0"), NODES, now=0)
    assert decision.reserved is None
    assert set(decision.result.unresolvable.values()) == {
        "waiting for gang members: 2/2 exist, but task leader has 0 of 1 member(s) (spec.subGroups)"
    }
    cluster.add(kai_pod_obj("train-leader", "train", "leader", gpus=8))
    decision = cluster.planner.filter(cluster.pod("train-0"), NODES, now=0)
    assert decision.reserved is not None
    assert len(decision.reserved.members) == 3


def test_a_kai_member_naming_a_subgroup_its_pod_group_lacks_makes_the_gang_invalid() -> None:
    cluster = Cluster(*kai_gang(2, "leader", "workers"))
    cluster.add(kai_pod_obj("train-9", "train", "wrokers", gpus=8))
    assert cluster.resolve(KAI) == Invalid(
        "gang kai:default/train: member(s) name subgroup(s) wrokers (label "
        "kai.scheduler/subgroup-name) that its PodGroup's spec.subGroups lacks "
        "(it has: leader, workers)"
    )
    assert cluster.planner.filter(cluster.pod("train-0"), NODES, now=0).reserved is None


def test_a_kai_member_of_another_subgroup_than_the_slots_is_refused_them_naming_kais_field() -> (
    None
):
    group = kai_podgroup_obj("train", 3, sub_groups={"workers": 2, "leader": 0})
    worker = kai_pod_obj("train-0", "train", "workers", gpus=4)
    cluster = Cluster(group, worker)
    reserved = cluster.planner.filter(cluster.pod("train-0"), NODES, now=0).reserved
    assert reserved is not None
    assert reserved.slot_task == "workers"
    cluster.add(kai_pod_obj("train-leader", "train", "leader", gpus=4))
    decision = cluster.planner.filter(cluster.pod("train-leader"), NODES, now=1)
    assert [e.reason for e in decision.events if e and e.outcome is Outcome.REPLANNED] == [
        "pod default/train-leader is not of task workers, whose members gang kai:default/train "
        "reserved its slots for (spec.subGroups); re-planning without it"
    ]


def nested_kai(*members: str, **spec: Any) -> list[dict[str, Any]]:
    """KAI PodGroup `train` of nested subgroups, decode and prefill, each a leader (1) and
    workers (1) beneath; a member of each leaf in `members` (4 GPUs: six fit)."""
    group = kai_podgroup_obj("train", None)
    group["spec"].update(spec)
    group["spec"]["subGroups"] = [{"name": "decode"}, {"name": "prefill"}] + [
        {"name": f"{parent}-{leaf}", "parent": parent, "minMember": 1}
        for parent in ("decode", "prefill")
        for leaf in ("leaders", "workers")
    ]
    return [group] + [kai_pod_obj(f"train-{leaf}", "train", leaf, gpus=4) for leaf in members]


def test_a_nested_kai_gang_waits_for_every_leaf_beneath_each_parent_then_reserves_whole() -> None:
    cluster = Cluster(*nested_kai("decode-leaders", "decode-workers", "prefill-leaders"))
    decision = cluster.planner.filter(cluster.pod("train-decode-leaders"), NODES, now=0)
    assert decision.reserved is None
    assert set(decision.result.unresolvable.values()) == {
        "waiting for gang members: 3/4 exist, but PodGroup has 1 of 2 child group(s) ready: "
        "(subgroup prefill has 1 of 2 child group(s) ready: subgroup prefill-workers has 0 "
        "of 1 member(s)) (spec.subGroups)"
    }
    cluster.add(kai_pod_obj("train-prefill-workers", "train", "prefill-workers", gpus=4))
    decision = cluster.planner.filter(cluster.pod("train-decode-leaders"), NODES, now=0)
    assert decision.reserved is not None
    assert len(decision.reserved.members) == 4


def test_a_nested_kai_gang_with_its_members_but_not_its_subgroups_waits_naming_them() -> None:
    objects = nested_kai("decode-leaders", "decode-workers", "prefill-leaders")
    objects.append(kai_pod_obj("train-decode-workers-2", "train", "decode-workers", gpus=4))
    cluster = Cluster(*objects)
    decision = cluster.planner.filter(cluster.pod("train-decode-leaders"), NODES, now=0)
    assert decision.reserved is None
    assert set(decision.result.unresolvable.values()) == {
        "waiting for gang members: 4/4 exist, but PodGroup has 1 of 2 child group(s) ready: "
        "(subgroup prefill has 1 of 2 child group(s) ready: subgroup prefill-workers has 0 "
        "of 1 member(s)) (spec.subGroups)"
    }


def test_an_elastic_kai_gang_is_reserved_once_min_sub_group_of_its_subgroups_are_ready() -> None:
    cluster = Cluster(
        *nested_kai("decode-leaders", "decode-workers", "prefill-leaders", minSubGroup=1)
    )
    decision = cluster.planner.filter(cluster.pod("train-decode-leaders"), NODES, now=0)
    assert decision.reserved is not None
    assert decision.reserved.group_key == "kai:default/train"


def test_a_kai_member_naming_a_parent_subgroup_makes_the_gang_invalid() -> None:
    cluster = Cluster(
        *nested_kai(
            "decode-leaders", "decode-workers", "prefill-leaders", "prefill-workers", "prefill"
        )
    )
    resolved = cluster.resolve(KAI)
    assert isinstance(resolved, Invalid)
    assert (
        "member(s) name subgroup(s) prefill (label kai.scheduler/subgroup-name) that "
        "have child subgroups" in resolved.reason
    )
    assert (
        cluster.planner.filter(cluster.pod("train-decode-leaders"), NODES, now=0).reserved is None
    )


def test_a_kai_pod_group_waits_for_its_object_and_says_which() -> None:
    cluster = Cluster(*kai_gang(2)[1:])
    assert cluster.resolve(KAI) == Waiting(
        "waiting for KAI PodGroup default/train (scheduling.run.ai/v2alpha2) to exist "
        "(pods name it with annotation pod-group-name)"
    )


# --- KAI subgroups' topology constraints -----------------------------------------------------


def racked_cluster(*racks: tuple[str, ...]) -> Cluster:
    """The three default nodes replaced by 8-GPU nodes in racks (`racks[i]` the nodes of
    rack r{i}), label `example.com/rack`, no configured topology having it."""
    cluster = Cluster()
    for name in NODES:
        cluster.state.remove_node(name)
    for i, names in enumerate(racks):
        for name in names:
            cluster.state.upsert_node(gpu_node(name, labels={RACK: f"r{i}"}))
    return cluster


def serving(**levels: str) -> list[dict[str, Any]]:
    """KAI PodGroup `serve` of prefill×2 and decode×2 (each member a whole 8-GPU node); a
    subgroup named in `levels` has that requiredTopologyLevel."""
    group = kai_podgroup_obj("serve", 4, sub_groups={"prefill": 2, "decode": 2})
    for entry in group["spec"]["subGroups"]:
        if entry["name"] in levels:
            entry["topologyConstraint"] = {"requiredTopologyLevel": levels[entry["name"]]}
    members = [
        kai_pod_obj(f"{role}-{i}", "serve", role, gpus=8)
        for role in ("prefill", "decode")
        for i in range(2)
    ]
    return [group, *members]


def rack_of(cluster: Cluster, node: str) -> str:
    found = cluster.state.node(node)
    assert found is not None
    return found.node.labels[RACK]


def test_each_kai_subgroup_required_in_one_rack_lands_in_one_rack() -> None:
    # Racks of one, two and two nodes: without the subgroups' level the gang spreads over
    # all three (a subgroup split between racks); with it each subgroup takes a rack of two.
    cluster = racked_cluster(("a1",), ("b1", "b2"), ("c1", "c2"))
    for obj in serving(prefill=RACK, decode=RACK):
        cluster.add(obj)
    candidates = ["a1", "b1", "c1", "b2", "c2"]
    decision = cluster.planner.filter(cluster.pod("prefill-0"), candidates, now=0)
    assert decision.reserved is not None
    where = {m.pod_key.split("/")[1]: m.node for m in decision.reserved.members}
    for role in ("prefill", "decode"):
        assert rack_of(cluster, where[f"{role}-0"]) == rack_of(cluster, where[f"{role}-1"])
    assert sorted(where.values()) == ["b1", "b2", "c1", "c2"]
    # What /debug/groups and `phalanx explain` show of the plan.
    record = cluster.planner.journal.get("kai:default/serve")
    assert record is not None
    assert record.proposal is not None
    assert record.proposal.explanation.endswith(
        "each of subgroup(s) decode, prefill within one rack"
    )


def test_a_kai_subgroup_no_rack_can_hold_leaves_the_gang_unfit_naming_the_subgroup() -> None:
    # Four nodes for four members, but only rack r0 holds two: decode has no rack left.
    cluster = racked_cluster(("a1", "a2"), ("b1",), ("c1",))
    for obj in serving(prefill=RACK, decode=RACK):
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("prefill-0"), ["a1", "a2", "b1", "c1"], now=0)
    assert decision.reserved is None
    reason = decision.result.unresolvable["a1"]
    assert f"subgroup(s) decode, prefill each in one {RACK}" in reason
    assert "subgroup decode fits in no" in reason or "subgroup prefill fits in no" in reason


def test_a_kai_subgroup_without_a_level_goes_anywhere_beside_one_with_it() -> None:
    cluster = racked_cluster(("a1",), ("b1",), ("c1", "c2"))
    for obj in serving(decode=RACK):
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("prefill-0"), ["a1", "b1", "c1", "c2"], now=0)
    assert decision.reserved is not None
    where = {m.pod_key.split("/")[1]: m.node for m in decision.reserved.members}
    assert {where["decode-0"], where["decode-1"]} == {"c1", "c2"}


def preferring_racks(*roles: str) -> list[dict[str, Any]]:
    """`serving()` with each subgroup of `roles` preferring one rack (no required level)."""
    objects = serving()
    for entry in objects[0]["spec"]["subGroups"]:
        if entry["name"] in roles:
            entry["topologyConstraint"] = {"preferredTopologyLevel": RACK}
    return objects


def test_a_kai_subgroup_preferring_a_rack_lands_in_one_when_a_rack_has_room() -> None:
    # Racks of one, two and two nodes: without a preference the gang fills the one-node
    # rack first and splits a subgroup; preferring, each subgroup takes a rack of two.
    cluster = racked_cluster(("a1",), ("b1", "b2"), ("c1", "c2"))
    for obj in preferring_racks("prefill", "decode"):
        cluster.add(obj)
    decision = cluster.planner.filter(
        cluster.pod("prefill-0"), ["a1", "b1", "c1", "b2", "c2"], now=0
    )
    assert decision.reserved is not None
    where = {m.pod_key.split("/")[1]: m.node for m in decision.reserved.members}
    for role in ("prefill", "decode"):
        assert rack_of(cluster, where[f"{role}-0"]) == rack_of(cluster, where[f"{role}-1"])
    record = cluster.planner.journal.get("kai:default/serve")
    assert record is not None
    assert record.proposal is not None
    assert record.proposal.explanation.endswith(
        "subgroup decode within one rack as preferred; "
        "subgroup prefill within one rack as preferred"
    )


def test_a_kai_subgroup_preferring_a_rack_none_can_hold_is_still_placed_and_says_so() -> None:
    # Required, this gang is unfit (test above); preferred, it is placed across racks.
    cluster = racked_cluster(("a1", "a2"), ("b1",), ("c1",))
    for obj in preferring_racks("prefill", "decode"):
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("prefill-0"), ["a1", "a2", "b1", "c1"], now=0)
    assert decision.reserved is not None
    record = cluster.planner.journal.get("kai:default/serve")
    assert record is not None
    assert record.proposal is not None
    assert "preferred one rack: widened to the cluster" in record.proposal.explanation
    assert "not every preference held (all at once: subgroup " in record.proposal.explanation


def test_a_kai_subgroup_preferring_wider_than_it_requires_is_invalid_naming_the_field() -> None:
    cluster = racked_cluster(("a1", "a2"), ("b1", "b2"))
    objects = serving()
    objects[0]["spec"]["subGroups"][1]["topologyConstraint"] = {
        "requiredTopologyLevel": CLIQUE,
        "preferredTopologyLevel": LEAF,
    }
    for obj in objects:
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("prefill-0"), ["a1", "a2", "b1", "b2"], now=0)
    assert set(decision.result.unresolvable.values()) == {
        "gang kai:default/serve: subgroup decode "
        "(spec.subGroups[1].topologyConstraint.preferredTopologyLevel) prefers one "
        f"{LEAF}, wider than the one {CLIQUE} it requires; prefer the required level or a "
        "narrower one"
    }


# --- KAI subgroups each at a level of their own (disaggregated serving) ----------------------


def spined_cluster(*nodes: Node) -> Cluster:
    """The three default nodes replaced by `nodes`."""
    cluster = Cluster()
    for name in NODES:
        cluster.state.remove_node(name)
    for node in nodes:
        cluster.state.upsert_node(node)
    return cluster


def two_spines() -> list[Node]:
    """Spine s0: leaf l0 of cliques c0 and c1 (a node each), leaf l1 of c2 (one node).
    Spine s1: leaf l2 of clique c3 (two nodes), leaf l3 of cliques c4 and c5 (a node each).
    Only c3 holds two whole nodes."""
    shape = [
        ("a1", "s0", "l0", "c0"),
        ("a2", "s0", "l0", "c1"),
        ("a3", "s0", "l1", "c2"),
        ("b1", "s1", "l2", "c3"),
        ("b2", "s1", "l2", "c3"),
        ("b3", "s1", "l3", "c4"),
        ("b4", "s1", "l3", "c5"),
    ]
    return [rack_node(n, 8, spine=s, leaf=leaf, clique=c) for n, s, leaf, c in shape]


def disaggregated() -> list[dict[str, Any]]:
    """`serve` in one spine: prefill in one NVLink clique, decode in one leaf."""
    objects = serving(prefill=CLIQUE, decode=LEAF)
    objects[0]["spec"]["topologyConstraint"] = {"requiredTopologyLevel": SPINE}
    return objects


def reserved_where(cluster: Cluster) -> dict[str, str]:
    reservation = cluster.state.reservation("kai:default/serve")
    assert reservation is not None
    return {m.pod_key.split("/")[1]: m.node for m in reservation.members}


def test_kai_prefill_in_one_clique_and_decode_in_one_leaf_of_the_same_spine() -> None:
    cluster = spined_cluster(*two_spines())
    for obj in disaggregated():
        cluster.add(obj)
    names = [n.name for n in two_spines()]
    decision = cluster.planner.filter(cluster.pod("prefill-0"), names, now=0)
    assert decision.reserved is not None
    where = reserved_where(cluster)
    assert {where["prefill-0"], where["prefill-1"]} == {"b1", "b2"}
    assert {where["decode-0"], where["decode-1"]} == {"b3", "b4"}
    record = cluster.planner.journal.get("kai:default/serve")
    assert record is not None
    assert record.proposal is not None
    assert record.proposal.explanation == (
        f"required {SPINE}: placed within {SPINE}=s1; "
        "each of subgroup(s) decode within one leaf, prefill within one clique"
    )


def test_a_kai_subgroup_no_domain_of_its_level_can_hold_is_named_with_its_level() -> None:
    # Without b2 no clique holds prefill's two nodes.
    cluster = spined_cluster(*(n for n in two_spines() if n.name != "b2"))
    for obj in disaggregated():
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("prefill-0"), ["a1", "a2", "a3", "b1"], now=0)
    assert decision.reserved is None
    reason = decision.result.unresolvable["a1"]
    assert f"subgroup(s) decode each in one {LEAF}, prefill in one {CLIQUE}" in reason
    assert "subgroup prefill fits in no clique" in reason


def relabelled(node: Node, **labels: str) -> Node:
    return replace(node, labels={**node.labels, **labels})


def test_a_relabel_that_splits_a_kai_subgroup_across_domains_of_its_level_releases_the_gang() -> (
    None
):
    cluster = spined_cluster(*two_spines())
    for obj in disaggregated():
        cluster.add(obj)
    names = [n.name for n in two_spines()]
    assert cluster.planner.filter(cluster.pod("prefill-0"), names, now=0).reserved is not None
    b4 = next(n for n in two_spines() if n.name == "b4")
    cluster.state.upsert_node(relabelled(b4, **{LEAF: "l4"}))

    cluster.planner.recheck_topology()

    assert cluster.state.reservation("kai:default/serve") is None
    assert cluster.released[-1].cause is ReleaseCause.TOPOLOGY_CHANGED
    assert f"subgroup decode must lie in one {LEAF} domain" in cluster.released[-1].why


def test_a_relabel_within_the_domain_of_a_kai_subgroups_own_level_keeps_the_gang() -> None:
    # Decode already spans cliques c4 and c5: its level is the leaf, not prefill's clique.
    cluster = spined_cluster(*two_spines())
    for obj in disaggregated():
        cluster.add(obj)
    names = [n.name for n in two_spines()]
    assert cluster.planner.filter(cluster.pod("prefill-0"), names, now=0).reserved is not None
    b4 = next(n for n in two_spines() if n.name == "b4")
    cluster.state.upsert_node(relabelled(b4, **{CLIQUE: "c6"}))

    cluster.planner.recheck_topology()

    assert cluster.state.reservation("kai:default/serve") is not None


def dynamo() -> list[dict[str, Any]]:
    """`serve` in one spine; parent subgroup prefill (leader and workers, a member each) in
    one leaf; decode (two members) anywhere in the spine. Each member a whole 8-GPU node."""
    group = kai_podgroup_obj("serve", None)
    group["spec"]["topologyConstraint"] = {"requiredTopologyLevel": SPINE}
    group["spec"]["subGroups"] = [
        {"name": "prefill", "topologyConstraint": {"requiredTopologyLevel": LEAF}},
        {"name": "prefill-leader", "parent": "prefill", "minMember": 1},
        {"name": "prefill-workers", "parent": "prefill", "minMember": 1},
        {"name": "decode", "minMember": 2},
    ]
    roles = {"prefill-leader": 1, "prefill-workers": 1, "decode": 2}
    members = [
        kai_pod_obj(f"{role}-{i}", "serve", role, gpus=8)
        for role, count in roles.items()
        for i in range(count)
    ]
    return [group, *members]


def test_a_kai_parent_subgroup_s_leaves_are_held_in_one_domain_of_its_level() -> None:
    cluster = spined_cluster(*two_spines())
    for obj in dynamo():
        cluster.add(obj)
    names = [n.name for n in two_spines()]
    assert cluster.planner.filter(cluster.pod("decode-0"), names, now=0).reserved is not None
    where = reserved_where(cluster)
    leaf = {n.name: n.labels[LEAF] for n in two_spines()}
    assert leaf[where["prefill-leader-0"]] == leaf[where["prefill-workers-0"]]
    record = cluster.planner.journal.get("kai:default/serve")
    assert record is not None
    assert record.proposal is not None
    assert record.proposal.explanation.endswith("; subgroup prefill within one leaf")

    moved = where["prefill-workers-0"]
    node = next(n for n in two_spines() if n.name == moved)
    cluster.state.upsert_node(relabelled(node, **{LEAF: "elsewhere"}))
    cluster.planner.recheck_topology()

    assert cluster.state.reservation("kai:default/serve") is None
    assert (
        f"subgroup prefill (prefill-leader, prefill-workers) must lie in one {LEAF} domain"
        in cluster.released[-1].why
    )


def test_a_kai_parent_subgroup_no_domain_of_its_level_holds_leaves_the_gang_unfit() -> None:
    # One spine of four leaves of a node each: the spine holds the gang, no leaf prefill.
    nodes = [rack_node(f"n{i}", 8, spine="s0", leaf=f"l{i}", clique=f"c{i}") for i in range(4)]
    cluster = spined_cluster(*nodes)
    for obj in dynamo():
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("decode-0"), [n.name for n in nodes], now=0)
    assert decision.reserved is None
    reason = decision.result.unresolvable[nodes[0].name]
    assert "subgroup prefill (prefill-leader, prefill-workers together) fits in no leaf" in reason


# --- Grove's PodGangs -------------------------------------------------------------------------

GROVE = GroupRef("default", "serve-0", Dialect.GROVE)


def grove_gang(**podgroups: int) -> list[dict[str, Any]]:
    """PodGang `serve-0` whose podgroups each need `podgroups[name]` members, and those
    members (`<podgroup>-<i>`), each asking a whole 8-GPU node."""
    members = [
        grove_pod_obj(f"{name}-{i}", "serve-0", name, gpus=8)
        for name, size in podgroups.items()
        for i in range(size)
    ]
    return [grove_podgang_obj("serve-0", podgroups), *members]


def test_a_podgang_of_two_podgroups_is_reserved_whole_as_one_gang() -> None:
    cluster = Cluster(*grove_gang(prefill=2, decode=1))
    decision = cluster.planner.filter(cluster.pod("prefill-0"), NODES, now=0)
    assert decision.reserved is not None
    assert decision.reserved.group_key == "grove:default/serve-0"
    assert sorted(m.node for m in decision.reserved.members) == NODES


def test_a_podgang_one_node_short_reserves_nobody() -> None:
    cluster = Cluster(*grove_gang(prefill=2, decode=2))
    decision = cluster.planner.filter(cluster.pod("prefill-0"), NODES, now=0)
    assert (decision.reserved, decision.result.feasible) == (None, ())
    assert cluster.state.reservations() == {}


def test_a_podgang_waits_for_each_podgroup_s_minimum() -> None:
    gang = grove_gang(prefill=1, decode=1)
    # Two prefill members, no decode one: the sum of minReplicas alone would be a quorum.
    cluster = Cluster(gang[0], gang[1], grove_pod_obj("prefill-9", "serve-0", "prefill", gpus=8))
    decision = cluster.planner.filter(cluster.pod("prefill-0"), NODES, now=0)
    assert decision.reserved is None
    assert set(decision.result.unresolvable.values()) == {
        "waiting for gang members: 2/2 exist, but task decode has 0 of 1 member(s) (spec.podgroups)"
    }
    cluster.add(gang[2])
    decision = cluster.planner.filter(cluster.pod("prefill-0"), NODES, now=0)
    assert decision.reserved is not None
    assert len(decision.reserved.members) == 3


def test_a_member_beyond_its_podgroup_s_minimum_is_a_best_effort_extra() -> None:
    # minReplicas 1 of prefill, but two prefill pods: both fit, both are reserved.
    cluster = Cluster(*grove_gang(prefill=1, decode=1))
    cluster.add(grove_pod_obj("prefill-1", "serve-0", "prefill", gpus=8))
    decision = cluster.planner.filter(cluster.pod("prefill-0"), NODES, now=0)
    assert decision.reserved is not None
    assert len(decision.reserved.members) == 3


def test_a_grove_member_naming_a_podgroup_its_podgang_lacks_makes_the_gang_invalid() -> None:
    cluster = Cluster(*grove_gang(prefill=1, decode=1))
    cluster.add(grove_pod_obj("router-0", "serve-0", "router", gpus=8))
    assert cluster.resolve(GROVE) == Invalid(
        "gang grove:default/serve-0: member(s) name podgroup(s) router (label "
        "grove.io/podclique) that its PodGang's spec.podgroups lacks (it has: decode, prefill)"
    )
    assert cluster.planner.filter(cluster.pod("prefill-0"), NODES, now=0).reserved is None


def unlabelled(obj: dict[str, Any]) -> dict[str, Any]:
    """A Grove member without its `grove.io/podclique` label."""
    del obj["metadata"]["labels"]["grove.io/podclique"]
    return obj


@pytest.mark.parametrize("gang_first", [True, False], ids=["podgang-first", "pods-first"])
def test_a_member_without_its_podclique_label_is_in_the_podgroup_that_lists_it(
    gang_first: bool,
) -> None:
    gang, prefill, decode = grove_gang(prefill=1, decode=1)
    pods = [prefill, unlabelled(decode)]
    cluster = Cluster(*([gang, *pods] if gang_first else [*pods, gang]))
    assert cluster.pod("decode-0").task == "decode"
    decision = cluster.planner.filter(cluster.pod("prefill-0"), NODES, now=0)
    assert decision.reserved is not None
    assert len(decision.reserved.members) == 2


def test_a_member_the_podgang_stops_listing_is_in_no_podgroup_and_the_gang_is_invalid() -> None:
    gang, prefill, decode = grove_gang(prefill=1, decode=1)
    cluster = Cluster(gang, prefill, unlabelled(decode))
    assert cluster.pod("decode-0").task == "decode"
    gang["spec"]["podgroups"][1]["podReferences"] = []
    cluster.add(gang)
    assert cluster.pod("decode-0").task == ""
    assert cluster.resolve(GROVE) == Invalid(
        "gang grove:default/serve-0: member(s) decode-0 have no label grove.io/podclique and "
        "no podgroup's podReferences list them (Grove labels each pod with its PodClique, the "
        "podgroup it is in)"
    )


def test_a_podgang_waits_for_its_object_and_says_which() -> None:
    cluster = Cluster(*grove_gang(prefill=1, decode=1)[1:])
    assert cluster.resolve(GROVE) == Waiting(
        "waiting for Grove PodGang default/serve-0 (scheduler.grove.io/v1alpha1) to exist "
        "(pods name it with label grove.io/podgang)"
    )


def grove_serving(**keys: str) -> list[dict[str, Any]]:
    """PodGang `serve` of prefill×2 and decode×2 (each member a whole 8-GPU node); a
    podgroup named in `keys` requires that node label key (`packConstraint.required`)."""
    objects = grove_gang(prefill=2, decode=2)
    for entry in objects[0]["spec"]["podgroups"]:
        if entry["name"] in keys:
            entry["topologyConstraint"] = {"packConstraint": {"required": keys[entry["name"]]}}
    return objects


def test_each_grove_podgroup_required_in_one_rack_lands_in_one_rack() -> None:
    cluster = racked_cluster(("a1",), ("b1", "b2"), ("c1", "c2"))
    for obj in grove_serving(prefill=RACK, decode=RACK):
        cluster.add(obj)
    decision = cluster.planner.filter(
        cluster.pod("prefill-0"), ["a1", "b1", "c1", "b2", "c2"], now=0
    )
    assert decision.reserved is not None
    where = {m.pod_key.split("/")[1]: m.node for m in decision.reserved.members}
    for role in ("prefill", "decode"):
        assert rack_of(cluster, where[f"{role}-0"]) == rack_of(cluster, where[f"{role}-1"])
    assert sorted(where.values()) == ["b1", "b2", "c1", "c2"]


def test_a_grove_constraint_group_preferring_a_rack_holds_its_podgroups_in_one_when_it_can() -> (
    None
):
    # Prefill and decode (a node each) preferring one rack together: the rack of two, not
    # the two one-node racks the gang alone would fill first.
    cluster = racked_cluster(("a1",), ("b1",), ("c1", "c2"))
    objects = grove_gang(prefill=1, decode=1)
    objects[0]["spec"]["topologyConstraintGroupConfigs"] = [
        {
            "name": "pair",
            "podGroupNames": ["prefill", "decode"],
            "topologyConstraint": {"packConstraint": {"preferred": RACK}},
        }
    ]
    for obj in objects:
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("prefill-0"), ["a1", "b1", "c1", "c2"], now=0)
    assert decision.reserved is not None
    assert sorted(m.node for m in decision.reserved.members) == ["c1", "c2"]
    record = cluster.planner.journal.get("grove:default/serve-0")
    assert record is not None
    assert record.proposal is not None
    assert record.proposal.explanation.endswith(
        "constraint group pair within one rack as preferred"
    )


def test_grove_prefill_in_one_clique_and_decode_in_one_leaf_of_the_same_spine() -> None:
    cluster = spined_cluster(*two_spines())
    objects = grove_serving(prefill=CLIQUE, decode=LEAF)
    objects[0]["spec"]["topologyConstraint"] = {"packConstraint": {"required": SPINE}}
    for obj in objects:
        cluster.add(obj)
    names = [n.name for n in two_spines()]
    decision = cluster.planner.filter(cluster.pod("prefill-0"), names, now=0)
    assert decision.reserved is not None
    where = {m.pod_key.split("/")[1]: m.node for m in decision.reserved.members}
    assert {where["prefill-0"], where["prefill-1"]} == {"b1", "b2"}
    assert {where["decode-0"], where["decode-1"]} == {"b3", "b4"}
    record = cluster.planner.journal.get("grove:default/serve-0")
    assert record is not None
    assert record.proposal is not None
    assert record.proposal.explanation == (
        f"required {SPINE}: placed within {SPINE}=s1; "
        "each of podgroup(s) decode within one leaf, prefill within one clique"
    )


def test_a_grove_podgroup_no_domain_of_its_level_can_hold_leaves_the_gang_unfit() -> None:
    cluster = spined_cluster(*(n for n in two_spines() if n.name != "b2"))
    objects = grove_serving(prefill=CLIQUE, decode=LEAF)
    for obj in objects:
        cluster.add(obj)
    decision = cluster.planner.filter(cluster.pod("prefill-0"), ["a1", "a2", "a3", "b1"], now=0)
    assert decision.reserved is None
    reason = decision.result.unresolvable["a1"]
    assert f"podgroup(s) decode each in one {LEAF}, prefill in one {CLIQUE}" in reason
    assert "podgroup prefill fits in no clique" in reason
