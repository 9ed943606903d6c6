"""Upstream composite gangs (1.37 CompositePodGroup) in the cache, resolution, the planner
and the bind barrier: the topmost `gang` composite above a PodGroup is one gang of every
pod beneath it, placed and bound all or nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import (
    LEAF,
    SPINE,
    apply_raw,
    composite_obj,
    gpu_node,
    pod_obj,
    rack_node,
    upstream_podgroup_obj,
)
from phalanx.core.barrier import Answer, BindAlone, Join, admit
from phalanx.core.cache import ClusterState, ReleaseCause, Released
from phalanx.core.model import Binding, ChildGroups, Dialect, GroupRef, Node, Pod
from phalanx.core.planner import GangPlanner
from phalanx.core.resolution import (
    Deleting,
    GroupDefaults,
    Invalid,
    Resolution,
    Resolved,
    Waiting,
    resolve_group,
)

RAY = GroupRef("default", "ray", Dialect.COMPOSITE)
HEAD_GROUP = GroupRef("default", "ray-head", Dialect.UPSTREAM)


class Cluster:
    """A cache fed with raw objects as the sources feed it; `nodes` 8-GPU nodes."""

    def __init__(self, *objects: dict[str, Any], nodes: int = 1) -> None:
        self.released: list[Released] = []
        self.state = ClusterState(on_release=self.released.append)
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        for name in self.nodes:
            self.state.upsert_node(gpu_node(name))
        self.planner = GangPlanner(self.state)
        for obj in objects:
            self.add(obj)

    def add(self, obj: dict[str, Any]) -> None:
        apply_raw(self.state, obj)

    def pod(self, name: str) -> Pod:
        found = self.state.pod_by_key("default", name)
        assert found is not None
        return found

    def resolve(self, ref: GroupRef) -> Resolution:
        return resolve_group(self.state, ref, GroupDefaults())


def member(name: str, group: str, gpus: int = 8) -> dict[str, Any]:
    return pod_obj(name, gpus, scheduling_group=group)


def ray_cluster(workers: int = 2, *, min_group_count: int = 2) -> list[dict[str, Any]]:
    """KubeRay's topology-aware shape: a root composite over a head PodGroup (minCount 1)
    and a worker PodGroup (minCount `workers`); every pod asks a whole 8-GPU node."""
    return [
        composite_obj("ray", min_group_count),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        upstream_podgroup_obj("ray-workers", workers, parent="ray"),
        member("head-0", "ray-head"),
        *(member(f"worker-{i}", "ray-workers") for i in range(workers)),
    ]


# --- the unit ---------------------------------------------------------------------------


def test_the_pods_of_every_pod_group_under_a_gang_composite_are_one_gangs_members() -> None:
    cluster = Cluster(*ray_cluster())
    assert [p.name for p in cluster.state.members(RAY.key)] == ["head-0", "worker-0", "worker-1"]
    assert cluster.state.members(HEAD_GROUP.key) == []
    assert cluster.pod("head-0").task == "ray-head"
    assert cluster.state.declared_group(cluster.pod("head-0")) == HEAD_GROUP


def test_a_member_s_model_copy_as_declared_names_its_pod_group_and_is_filed_again() -> None:
    # What a source upserts when it changes the model's copy of a member (its derived DRA
    # demand, a binding): the pod as the API has it, which the cache files as before.
    cluster = Cluster(*ray_cluster())
    declared = cluster.state.as_declared(cluster.pod("head-0"))
    assert (declared.group, declared.task) == (HEAD_GROUP, "")
    cluster.state.upsert_pod(replace(declared, priority=7))
    assert (cluster.pod("head-0").group, cluster.pod("head-0").priority) == (RAY, 7)
    assert cluster.state.declared_group(cluster.pod("head-0")) == HEAD_GROUP


def test_a_composite_gang_resolves_to_its_tree_of_child_groups() -> None:
    resolved = Cluster(*ray_cluster(3)).resolve(RAY)
    assert isinstance(resolved, Resolved)
    group = resolved.group
    assert (group.key, group.min_member) == ("composite:default/ray", 4)
    assert group.min_task_member == ChildGroups("ray", 2, (("ray-head", 1), ("ray-workers", 3)))


def test_the_head_of_a_composite_whose_workers_cannot_fit_holds_nothing() -> None:
    # One node: the head fits, its two workers never do. Alone, the head PodGroup would be
    # reserved and bound: the partial start the composite exists to prevent.
    cluster = Cluster(*ray_cluster(2), nodes=1)
    decision = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0)
    assert decision.result.feasible == ()
    assert decision.reserved is None
    assert cluster.state.reservations() == {}
    assert "gang composite:default/ray" in decision.result.unresolvable["n1"]


def test_a_composite_that_fits_is_reserved_whole_across_its_child_groups() -> None:
    cluster = Cluster(*ray_cluster(2), nodes=3)
    decision = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0)
    assert decision.reserved is not None
    held = sorted(m.pod_key for m in decision.reserved.members)
    assert held == ["default/head-0", "default/worker-0", "default/worker-1"]


def test_min_group_count_below_the_children_reserves_the_cheapest_children_that_fit() -> None:
    # minGroupCount 1 of {head (1 pod), workers (2 pods)} on one node: the head alone is a
    # quorum, so it is reserved; the workers join when room comes.
    cluster = Cluster(*ray_cluster(2, min_group_count=1), nodes=1)
    decision = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0)
    assert decision.reserved is not None
    assert [m.pod_key for m in decision.reserved.members] == ["default/head-0"]


def test_a_nested_gang_composite_counts_as_one_child_satisfied_by_its_own_quorum() -> None:
    cluster = Cluster(
        composite_obj("ray", 2),
        composite_obj("workers", 2, parent="ray"),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        upstream_podgroup_obj("gpu-a", 1, parent="workers"),
        upstream_podgroup_obj("gpu-b", 1, parent="workers"),
        member("head-0", "ray-head"),
        member("a-0", "gpu-a"),
        member("b-0", "gpu-b"),
        nodes=2,
    )
    assert [p.name for p in cluster.state.members(RAY.key)] == ["a-0", "b-0", "head-0"]
    resolved = cluster.resolve(RAY)
    assert isinstance(resolved, Resolved)
    assert resolved.group.min_member == 3
    decision = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0)
    assert decision.reserved is None  # three whole-node pods, two nodes


def test_a_pod_group_under_only_basic_composites_is_its_own_gang() -> None:
    cluster = Cluster(
        composite_obj("ray", None),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        member("head-0", "ray-head"),
    )
    assert cluster.pod("head-0").group == HEAD_GROUP
    decision = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0)
    assert decision.reserved is not None


def test_the_topmost_gang_composite_is_the_gang_above_a_basic_one() -> None:
    cluster = Cluster(
        composite_obj("top", 1),
        composite_obj("middle", None, parent="top"),
        upstream_podgroup_obj("ray-head", 1, parent="middle"),
        member("head-0", "ray-head"),
    )
    assert cluster.pod("head-0").group == GroupRef("default", "top", Dialect.COMPOSITE)


def test_a_pod_group_without_a_parent_is_unchanged() -> None:
    cluster = Cluster(upstream_podgroup_obj("job", 1), member("job-0", "job"))
    assert cluster.pod("job-0").group == GroupRef("default", "job", Dialect.UPSTREAM)
    assert isinstance(cluster.resolve(GroupRef("default", "job", Dialect.UPSTREAM)), Resolved)


# --- a tree that cannot be read ---------------------------------------------------------


def test_a_missing_parent_makes_the_gang_wait_naming_it() -> None:
    cluster = Cluster(*ray_cluster()[1:])  # no root composite
    found = cluster.resolve(HEAD_GROUP)
    assert found == Waiting(
        "waiting for CompositePodGroup default/ray, which PodGroup default/ray-head names "
        "in spec.parentCompositePodGroupName"
    )


def test_an_invalid_parent_makes_the_gang_invalid_naming_it() -> None:
    cluster = Cluster(*ray_cluster()[1:])
    cluster.state.set_group_error(RAY.key, "spec.schedulingPolicy: exactly one of basic, gang")
    found = cluster.resolve(HEAD_GROUP)
    assert found == Invalid(
        "CompositePodGroup default/ray above PodGroup default/ray-head is invalid: "
        "spec.schedulingPolicy: exactly one of basic, gang"
    )


def test_a_cycle_makes_the_gang_wait_naming_the_composites_in_it() -> None:
    cluster = Cluster(
        composite_obj("a", 1, parent="b"),
        composite_obj("b", 1, parent="a"),
        upstream_podgroup_obj("job", 1, parent="a"),
        member("job-0", "job"),
    )
    found = cluster.resolve(GroupRef("default", "job", Dialect.UPSTREAM))
    assert isinstance(found, Waiting)
    assert "form a cycle (a -> b -> a)" in found.reason
    assert cluster.pod("job-0").group == GroupRef("default", "job", Dialect.UPSTREAM)


def test_a_composite_resolved_before_its_tree_changes_resolves_to_the_new_tree() -> None:
    # The tree is kept between resolutions (every member's filter and bind asks): each
    # change of a gang object must be seen at the next one.
    cluster = Cluster(*ray_cluster(3))
    assert isinstance(cluster.resolve(RAY), Resolved)
    cluster.add(upstream_podgroup_obj("ray-workers", 2, parent="ray"))  # minCount 3 -> 2
    cluster.add(upstream_podgroup_obj("ray-cpu", 1, parent="ray"))  # a third child
    resolved = cluster.resolve(RAY)
    assert isinstance(resolved, Resolved)
    assert resolved.group.min_task_member == ChildGroups(
        "ray", 2, (("ray-cpu", 1), ("ray-head", 1), ("ray-workers", 2))
    )
    cluster.add(composite_obj("ray", 3))  # minGroupCount 2 -> 3
    resolved = cluster.resolve(RAY)
    assert isinstance(resolved, Resolved)
    assert resolved.group.min_member == 4
    cluster.state.remove_group("upstream:default/ray-cpu")
    assert isinstance(cluster.resolve(RAY), Waiting)  # 2 children, minGroupCount 3


def test_a_composite_with_fewer_children_than_its_min_group_count_waits_for_them() -> None:
    cluster = Cluster(*ray_cluster()[:2], member("head-0", "ray-head"))  # no worker group
    found = cluster.resolve(RAY)
    assert isinstance(found, Waiting)
    assert "has 1 child group(s), fewer than its minGroupCount 2" in found.reason


def test_the_root_arriving_after_its_pods_files_them_under_it() -> None:
    objects = ray_cluster()
    cluster = Cluster(*objects[1:])
    assert cluster.pod("head-0").group == HEAD_GROUP
    cluster.add(objects[0])
    assert cluster.pod("head-0").group == RAY
    assert RAY in cluster.state.take_joined()


def test_deleting_the_root_releases_its_reservation_and_returns_the_pods_to_their_groups() -> None:
    cluster = Cluster(*ray_cluster(2), nodes=3)
    assert cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0).reserved
    assert cluster.state.remove_group(RAY.key)
    assert cluster.state.reservations() == {}
    assert cluster.released[0].cause is ReleaseCause.GROUP_GONE
    assert cluster.pod("head-0").group == HEAD_GROUP


def test_a_root_being_deleted_is_not_planned() -> None:
    objects = ray_cluster()
    objects[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert isinstance(Cluster(*objects).resolve(RAY), Deleting)


# --- a PodGroup beneath that kube-scheduler refuses ---------------------------------------


def refused_tree(a_priority: int = 500) -> list[dict[str, Any]]:
    """Composite `r` (gang of 3) over PodGroups `a`, `x` and `y` (minCount 1, priority 0),
    one 8-GPU member each; `a-0` of priority `a_priority`."""
    return [
        composite_obj("r", 3),
        *(upstream_podgroup_obj(name, 1, parent="r") for name in ("a", "x", "y")),
        pod_obj("a-0", 8, scheduling_group="a", priority=a_priority),
        member("x-0", "x"),
        member("y-0", "y"),
    ]


R = GroupRef("default", "r", Dialect.COMPOSITE)
REFUSED_R = (
    "CompositePodGroup default/r cannot be scheduled all or nothing: PodGroup default/a is "
    "refused, as kube-scheduler 1.37 refuses it before any cycle of its pods: pod default/a-0 "
    "has priority 500 but the PodGroup's spec.priority is 0"
)


def test_a_composite_with_a_pod_group_kube_scheduler_refuses_is_refused_whole() -> None:
    # Each PodGroup is judged alone, against its own priority: x and y are fine, but the
    # composite cannot be all or nothing while none of a's pods is ever scheduled.
    cluster = Cluster(*refused_tree(), nodes=3)
    found = cluster.resolve(R)
    assert isinstance(found, Invalid)
    assert found.reason.startswith(REFUSED_R)

    decision = cluster.planner.filter(cluster.pod("x-0"), cluster.nodes, now=0)
    assert decision.reserved is None
    assert all(r == found.reason for r in decision.result.unresolvable.values())
    assert cluster.planner.plan_ahead(R, now=0) is None
    assert cluster.state.reservations() == {}
    x = cluster.pod("x-0")
    assert admit(cluster.state, Binding(x.ref, "n1"), GroupDefaults()) == Answer(found.reason)


def test_a_composite_whose_refused_pod_group_gets_a_valid_pod_is_reserved_whole() -> None:
    cluster = Cluster(*refused_tree(), nodes=3)
    cluster.state.remove_pod(cluster.pod("a-0").uid)
    cluster.add(pod_obj("a-0", 8, scheduling_group="a", uid="a-0-again"))
    reserved = cluster.planner.filter(cluster.pod("x-0"), cluster.nodes, now=0).reserved
    assert reserved is not None
    assert sorted(m.pod_key for m in reserved.members) == [
        "default/a-0",
        "default/x-0",
        "default/y-0",
    ]


def test_a_pod_group_beneath_is_judged_by_its_own_priority_not_the_composites() -> None:
    objects = refused_tree()
    objects[1] = upstream_podgroup_obj("a", 1, parent="r", priority=500)
    assert isinstance(Cluster(*objects, nodes=3).resolve(R), Resolved)


def test_a_pod_arriving_that_its_pod_group_is_refused_for_releases_the_composites_hold() -> None:
    objects = refused_tree()
    objects[0] = composite_obj("r", 2)  # x and y are a quorum without a
    a_0 = objects.pop(4)
    cluster = Cluster(*objects, nodes=3)
    assert cluster.planner.filter(cluster.pod("x-0"), cluster.nodes, now=0).reserved is not None
    cluster.add(a_0)

    event = cluster.planner.release_refused(cluster.pod("a-0"))

    assert event is not None
    assert event.reason.startswith(REFUSED_R)
    assert [(r.cause, r.group_key) for r in cluster.released] == [
        (ReleaseCause.GROUP_CHANGED, R.key)
    ]
    assert cluster.state.reservations() == {}


# --- topology at both levels -------------------------------------------------------------

ZONE = "topology.kubernetes.io/zone"


def zoned(name: str, zone: str) -> Node:
    return gpu_node(name, labels={ZONE: zone})


def placed(cluster: Cluster) -> dict[str, str]:
    reservation = cluster.state.reservation(RAY.key)
    assert reservation is not None
    return {m.pod_key.split("/")[1]: m.node for m in reservation.members}


def with_worker_key(key: str, *, composite_key: str | None = None) -> list[dict[str, Any]]:
    objects = ray_cluster(2)
    objects[0] = composite_obj("ray", 2, topology_key=composite_key)
    objects[2] = upstream_podgroup_obj("ray-workers", 2, parent="ray", topology_key=key)
    return objects


def test_a_child_groups_own_key_keeps_its_members_in_one_value_of_it() -> None:
    # Zone z1 has one node, z2 two: the workers share z2, the head takes what is left.
    cluster = Cluster(*with_worker_key(ZONE), nodes=0)
    for node in (zoned("n1", "z1"), zoned("n2", "z2"), zoned("n3", "z2")):
        cluster.state.upsert_node(node)
    decision = cluster.planner.filter(cluster.pod("head-0"), ["n1", "n2", "n3"], now=0)
    assert decision.reserved is not None
    where = placed(cluster)
    assert {where["worker-0"], where["worker-1"]} == {"n2", "n3"}
    assert where["head-0"] == "n1"


def nested_workers(key: str | None) -> list[dict[str, Any]]:
    """`ray` over a head and a nested composite `workers` (key `key`) of two worker
    PodGroups, a pod each; every pod a whole 8-GPU node."""
    return [
        composite_obj("ray", 2),
        composite_obj("workers", 2, parent="ray", topology_key=key),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        upstream_podgroup_obj("gpu-a", 1, parent="workers"),
        upstream_podgroup_obj("gpu-b", 1, parent="workers"),
        member("head-0", "ray-head"),
        member("a-0", "gpu-a"),
        member("b-0", "gpu-b"),
    ]


@pytest.mark.parametrize("key", [ZONE, None], ids=["nested-key", "no-nested-key"])
def test_a_nested_composites_key_keeps_every_pod_group_beneath_it_in_one_value(
    key: str | None,
) -> None:
    # Zone z1 has two nodes and sorts first, z2 one: the worker groups share z1 only when
    # the nested composite says so; otherwise the first zone takes any two pods.
    cluster = Cluster(*nested_workers(key), nodes=0)
    for node in (zoned("n1", "z1"), zoned("n2", "z2"), zoned("n3", "z1")):
        cluster.state.upsert_node(node)
    decision = cluster.planner.filter(cluster.pod("head-0"), ["n1", "n2", "n3"], now=0)
    assert decision.reserved is not None
    where = placed(cluster)
    together = {where["a-0"], where["b-0"]} == {"n1", "n3"}
    assert together if key else not together, where


def test_a_relabel_that_splits_a_childs_members_across_its_key_releases_the_gang() -> None:
    cluster = Cluster(*with_worker_key(ZONE), nodes=0)
    for node in (zoned("n1", "z1"), zoned("n2", "z2"), zoned("n3", "z2")):
        cluster.state.upsert_node(node)
    assert cluster.planner.filter(cluster.pod("head-0"), ["n1", "n2", "n3"], now=0).reserved
    cluster.state.upsert_node(zoned("n3", "z3"))

    cluster.planner.recheck_topology()

    assert cluster.state.reservation(RAY.key) is None
    assert "PodGroup ray-workers must lie in one" in cluster.released[-1].why


def test_a_child_whose_key_no_value_can_hold_leaves_the_whole_composite_unplaced() -> None:
    cluster = Cluster(*with_worker_key(ZONE), nodes=0)
    for node in (zoned("n1", "z1"), zoned("n2", "z2"), zoned("n3", "z3")):
        cluster.state.upsert_node(node)
    decision = cluster.planner.filter(cluster.pod("head-0"), ["n1", "n2", "n3"], now=0)
    assert decision.reserved is None
    assert "PodGroup ray-workers fits in no" in decision.result.unresolvable["n1"]


def spines() -> list[Node]:
    """Spine s0: three leaves of one node; spine s1: leaf l2 of two nodes and l3 of one."""
    return [
        rack_node("a1", 8, spine="s0", leaf="l0"),
        rack_node("a2", 8, spine="s0", leaf="l1"),
        rack_node("a3", 8, spine="s0", leaf="l5"),
        rack_node("b1", 8, spine="s1", leaf="l2"),
        rack_node("b2", 8, spine="s1", leaf="l2"),
        rack_node("b3", 8, spine="s1", leaf="l3"),
    ]


def test_the_composites_key_and_a_childs_narrower_key_hold_together() -> None:
    # Every member in one spine, the workers in one leaf of it: only spine s1 has such a leaf.
    cluster = Cluster(*with_worker_key(LEAF, composite_key=SPINE), nodes=0)
    for node in spines():
        cluster.state.upsert_node(node)
    names = [n.name for n in spines()]
    decision = cluster.planner.filter(cluster.pod("head-0"), names, now=0)
    assert decision.reserved is not None
    where = placed(cluster)
    assert {where["worker-0"], where["worker-1"]} == {"b1", "b2"}
    assert where["head-0"] == "b3"


def test_without_the_childs_key_the_composite_takes_the_first_spine_that_fits() -> None:
    objects = ray_cluster(2)
    objects[0] = composite_obj("ray", 2, topology_key=SPINE)
    cluster = Cluster(*objects, nodes=0)
    for node in spines():
        cluster.state.upsert_node(node)
    decision = cluster.planner.filter(cluster.pod("head-0"), [n.name for n in spines()], now=0)
    assert decision.reserved is not None
    assert set(placed(cluster).values()) == {"a1", "a2", "a3"}


def test_a_childs_key_wider_than_the_composites_is_refused_naming_both() -> None:
    cluster = Cluster(*with_worker_key(SPINE, composite_key=LEAF))
    decision = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0)
    reason = decision.result.unresolvable["n1"]
    assert "PodGroup(s) ray-workers require one network.topology.nvidia.com/spine" in reason
    assert f"at or below {LEAF}" in reason


def test_children_with_keys_of_one_topology_each_keep_to_their_own() -> None:
    # The head in one spine, the workers in one leaf: only spine s1 has a leaf of two.
    objects = with_worker_key(LEAF)
    objects[1] = upstream_podgroup_obj("ray-head", 1, parent="ray", topology_key=SPINE)
    cluster = Cluster(*objects, nodes=0)
    for node in spines():
        cluster.state.upsert_node(node)
    decision = cluster.planner.filter(cluster.pod("head-0"), [n.name for n in spines()], now=0)
    assert decision.reserved is not None
    where = placed(cluster)
    assert {where["worker-0"], where["worker-1"]} == {"b1", "b2"}
    record = cluster.planner.journal.get(RAY.key)
    assert record is not None
    assert record.proposal is not None
    assert record.proposal.explanation.endswith(
        "each of PodGroup(s) ray-head within one spine, ray-workers within one leaf"
    )


def test_children_with_keys_in_no_one_topology_are_refused_naming_each() -> None:
    objects = with_worker_key(ZONE)
    objects[1] = upstream_podgroup_obj("ray-head", 1, parent="ray", topology_key=LEAF)
    cluster = Cluster(*objects)
    assert isinstance(cluster.resolve(RAY), Resolved)
    decision = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0)
    assert decision.reserved is None
    assert decision.result.unresolvable["n1"].startswith(
        f"gang composite:default/ray: its PodGroup(s) ray-head require one {LEAF}, "
        f"ray-workers one {ZONE} (spec.schedulingConstraints.topology), but no configured "
        "topology has all these levels"
    )


# --- the bind barrier -------------------------------------------------------------------


def test_the_barrier_holds_a_members_bind_until_the_composite_quorum_has_reached_bind() -> None:
    cluster = Cluster(*ray_cluster(2), nodes=3)
    reserved = cluster.planner.filter(cluster.pod("head-0"), cluster.nodes, now=0).reserved
    assert reserved is not None
    where = {m.pod_key: m.node for m in reserved.members}
    head = cluster.pod("head-0")
    admission = admit(cluster.state, Binding(head.ref, where[head.key]), GroupDefaults())
    assert isinstance(admission, Join)
    # (kept as written before the types, which already tell a Join from a BindAlone)
    assert not isinstance(admission, BindAlone)  # type: ignore[unreachable]
    assert admission.group.key == RAY.key
    assert admission.group.min_member == 3


@pytest.mark.parametrize("min_group_count", [1, 2])
def test_a_composite_gang_is_never_bound_alone(min_group_count: int) -> None:
    cluster = Cluster(*ray_cluster(2, min_group_count=min_group_count), nodes=3)
    head = cluster.pod("head-0")
    assert not isinstance(admit(cluster.state, Binding(head.ref, "n1"), GroupDefaults()), BindAlone)
