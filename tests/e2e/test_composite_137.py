"""A gang of gangs on Kubernetes 1.37 through its real kube-scheduler and Phalanx: a
KubeRay-shaped ``scheduling.k8s.io/v1alpha3`` CompositePodGroup (``gang``, minGroupCount
2) over a head PodGroup (minCount 1) and a worker PodGroup (minCount 2), each pod asking a
whole node. Where the head fits and the workers do not, nothing binds (alone, the head's
PodGroup would); once there is room, all three bind together. A composite over a PodGroup
whose pod's priority is not the PodGroup's, which kube-scheduler never schedules, binds
nothing until that pod is recreated of the right priority.

This module runs on ``control_plane_137`` (kube-apiserver 1.37.2 with ``GenericWorkload``
and ``CompositePodGroup``, ``scheduling.k8s.io/v1beta1`` and ``v1alpha3`` served);
kube-scheduler runs without ``CompositePodGroup`` and with its ``GangScheduling`` plugin
disabled by the chart's profile, as for every other 1.37 gang: Phalanx alone decides.
"""

from __future__ import annotations

import httpx
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import (  # noqa: F401  # fixtures
    Scheduler,
    cluster,
    native_gang_left_on,
    phalanx,
    scheduler,
    scheduler_config,
)
from scheduling import Obj, Scenario, composite_quorums, pod_body
from test_preemption import priority_class

pytestmark = pytest.mark.e2e

GROUPS = "/apis/scheduling.k8s.io/v1beta1"
COMPOSITES = "/apis/scheduling.k8s.io/v1alpha3"


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> launcher.ControlPlane:
    return control_plane_137


def composite(sc: Scenario, name: str, min_group_count: int | None, *, parent: str = "") -> Obj:
    """A CompositePodGroup: `min_group_count` None is the `basic` policy; `parent` nests it."""
    policy = (
        {"basic": {}} if min_group_count is None else {"gang": {"minGroupCount": min_group_count}}
    )
    spec: Obj = {
        "workloadRef": {"workloadName": parent or name, "templateName": name},
        "schedulingPolicy": policy,
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    created = sc.api.create(
        f"{COMPOSITES}/namespaces/{sc.namespace}/compositepodgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha3",
            "kind": "CompositePodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
    assert created["spec"].get("parentCompositePodGroupName", "") == parent, created
    return created


def child_group(
    sc: Scenario,
    name: str,
    min_count: int,
    parent: str,
    *,
    topology_key: str = "",
    annotations: dict[str, str] | None = None,
    priority_class_name: str = "",
) -> Obj:
    spec: Obj = {
        "parentCompositePodGroupName": parent,
        # Required with a parent: the Workload template it was made from.
        "workloadRef": {"workloadName": parent, "templateName": name},
        "schedulingPolicy": {"gang": {"minCount": min_count}},
    }
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if priority_class_name:
        # kube-scheduler refuses a member whose priority is not its PodGroup's.
        spec["priorityClassName"] = priority_class_name
    created = sc.api.create(
        f"{GROUPS}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec,
        },
    )
    # Without the CompositePodGroup gate the API server drops the field (and without
    # TopologyAwareWorkloadScheduling the topology).
    assert created["spec"].get("parentCompositePodGroupName") == parent, created
    assert created["spec"].get("schedulingConstraints") == spec.get("schedulingConstraints")
    return created


def member(
    sc: Scenario,
    name: str,
    group: str,
    *,
    gpus: int = 8,
    priority_class_name: str = "",
    gated: bool = True,
) -> None:
    """A member of upstream PodGroup `group` (of `priority_class_name`, "" for priority 0)."""
    body = pod_body(name, gpus=gpus, node_selector=sc.selector, gated=gated)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    if priority_class_name:
        body["spec"]["priorityClassName"] = priority_class_name
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)


def ray_cluster(
    sc: Scenario,
    *,
    head_annotations: dict[str, str] | None = None,
    worker_key: str = "",
) -> list[str]:
    """A KubeRay-shaped composite `ray` (both children required): a head PodGroup of one and a
    worker PodGroup of two, 8-GPU members created gated and then released together, as the
    operator's pods are admitted. Returns the members' names."""
    composite(sc, "ray", 2)
    child_group(sc, "ray-head", 1, "ray", annotations=head_annotations)
    child_group(sc, "ray-workers", 2, "ray", topology_key=worker_key)
    names = ["head-0", "worker-0", "worker-1"]
    member(sc, "head-0", "ray-head")
    member(sc, "worker-0", "ray-workers")
    member(sc, "worker-1", "ray-workers")
    for name in names:
        sc.ungate(name)
    return names


def condition(sc: Scenario, path: str, kind: str) -> Obj | None:
    status = sc.api.get(path).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


@pytest.fixture
def judged(cluster: Scenario) -> Scenario:  # noqa: F811
    """The invariant monitor judges each composite as the one gang Phalanx makes of it."""
    cluster.monitor.gang_sizes.append(composite_quorums)
    return cluster


def test_a_composite_whose_workers_do_not_fit_binds_nothing_until_there_is_room(
    judged: Scenario,
) -> None:
    sc = judged
    sc.node("a", 8)
    sc.nodes_ready()
    names = ray_cluster(sc)

    # The head fits node a, the workers fit nowhere: the composite waits whole.
    refused = sc.wait_event("ray", "composite:", reason="Unschedulable")
    assert refused["involvedObject"]["kind"] == "CompositePodGroup", refused
    sc.assert_unbound_for(names, 3.0)

    sc.node("b", 8)
    sc.node("c", 8)
    sc.nodes_ready()
    where = sc.wait_bound(names, timeout=45)
    assert len(set(where.values())) == 3, where
    sc.wait_event("ray", "bound 3 member(s) together", reason="Bound")
    for path, kind in (
        (f"{COMPOSITES}/namespaces/{sc.namespace}/compositepodgroups/ray", "CompositePodGroup"),
        (f"{GROUPS}/namespaces/{sc.namespace}/podgroups/ray-head", "PodGroup"),
        (f"{GROUPS}/namespaces/{sc.namespace}/podgroups/ray-workers", "PodGroup"),
    ):
        placed = sc.wait(
            f"{kind} {path} initially scheduled",
            # mypy cannot infer a lambda's type from its default arguments
            lambda path=path, kind=kind: (  # type: ignore[misc]
                (c := condition(sc, path, f"{kind}InitiallyScheduled")) is not None
                and c["status"] == "True"
                and c
            ),
        )
        assert placed["reason"] == "Scheduled", placed
    # The monitor saw one gang of three become whole; had it judged each PodGroup alone, a
    # head bound before its workers would not have been partial.
    sc.wait("the monitor to judge the composite", lambda: "composite:ray" in sc.monitor.whole)
    assert not {"upstream:ray-head", "upstream:ray-workers"} & sc.monitor.whole


def test_a_childs_own_placement_is_told_ignored_on_the_child_and_the_gang_binds_whole(
    judged: Scenario,
) -> None:
    sc = judged
    for name in ("a", "b", "c"):
        sc.node(name, 8)
    sc.nodes_ready()
    names = ray_cluster(sc, head_annotations={"phalanx.io/placement": "pack"})

    told = sc.wait_event(
        "ray-head",
        f'metadata.annotations["phalanx.io/placement"] is ignored: this PodGroup is part of '
        f"CompositePodGroup {sc.namespace}/ray's gang",
        reason="FieldIgnored",
    )
    assert told["involvedObject"]["kind"] == "PodGroup", told
    assert told["type"] == "Warning", told
    where = sc.wait_bound(names, timeout=45)
    assert len(set(where.values())) == 3, where
    sc.wait_event("ray", "bound 3 member(s) together", reason="Bound")
    assert not sc.events("ray-workers", reason="FieldIgnored")


ZONE = "topology.kubernetes.io/zone"


def test_a_worker_groups_zone_key_keeps_its_workers_in_one_zone(judged: Scenario) -> None:
    """Zone a has one node, zone b two: the workers (their PodGroup's key is the zone) bind
    in zone b, the head (no key) on the node left in zone a."""
    sc = judged
    zone_of = {}
    for zone, count in (("a", 1), ("b", 2)):
        for i in range(count):
            node = sc.node(f"{zone}{i}", 8, labels={ZONE: f"{sc.namespace}-{zone}"})
            zone_of[node] = zone
    sc.nodes_ready()
    names = ray_cluster(sc, worker_key=ZONE)

    where = sc.wait_bound(names, timeout=45)

    assert {zone_of[where["worker-0"]], zone_of[where["worker-1"]]} == {"b"}, where
    assert zone_of[where["head-0"]] == "a", where


def pod_group(sc: Scenario, name: str, min_count: int) -> None:
    """A PodGroup of no composite."""
    sc.api.create(
        f"{GROUPS}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        },
    )


def debug_error(sc: Scenario, key: str) -> str:
    """Why the running Phalanx does not plan gang `key`, as `/debug/groups` says it."""
    answer = httpx.get(f"{sc.phalanx.url}/debug/groups/{key}", timeout=10, trust_env=False)
    assert answer.status_code == 200, answer.text
    return str(answer.json().get("error") or "")


def test_a_composite_over_a_pod_group_kube_scheduler_refuses_binds_nothing_until_it_is_fixed(
    judged: Scenario,
) -> None:
    """Composite `r` (gang of 3) over PodGroups `a`, `x` and `y` (priority 0), one member
    each; `a-0` is of a PriorityClass of 500, so kube-scheduler refuses every cycle of a's
    pods ("all pods in a single pod group should have the same priority as the pod group's
    priority, got 500 and 0") and filters x-0 and y-0 alone. Phalanx refuses the composite
    whole and says why; a PodGroup of its own beside it binds. Once `a-0` is recreated of
    its PodGroup's priority, the three bind together. Before, x-0's `/bind` completed the
    gang: a-0 was bound without any cycle of its own."""
    sc = judged
    for name in ("a", "b", "c", "d", "e"):
        sc.node(name, 8)
    sc.nodes_ready()
    with priority_class(sc, "medium", 500) as medium:
        composite(sc, "r", 3)
        for group in ("a", "x", "y"):
            child_group(sc, group, 1, "r")
        pod_group(sc, "solo", 2)
        member(sc, "a-0", "a", priority_class_name=medium)
        for name, group in (("x-0", "x"), ("y-0", "y"), ("solo-0", "solo"), ("solo-1", "solo")):
            member(sc, name, group)
        for name in ("a-0", "x-0", "y-0", "solo-0", "solo-1"):
            sc.ungate(name)

        sc.wait_bound(["solo-0", "solo-1"], timeout=45)
        told = f"pod {sc.namespace}/a-0 has priority 500 but the PodGroup's spec.priority is 0"
        said = sc.wait_event("r", told, reason="InvalidGang")
        assert said["involvedObject"]["kind"] == "CompositePodGroup", said
        assert said["message"].startswith(
            f"CompositePodGroup {sc.namespace}/r cannot be scheduled all or nothing: "
            f"PodGroup {sc.namespace}/a is refused"
        ), said
        root = f"{COMPOSITES}/namespaces/{sc.namespace}/compositepodgroups/r"

        def says_why() -> Obj | None:
            c = condition(sc, root, "CompositePodGroupInitiallyScheduled")
            return c if c is not None and told in c.get("message", "") else None

        refused = sc.wait("the composite's condition to say why", says_why)
        assert (refused["status"], refused["reason"]) == ("False", "SchedulerError"), refused
        assert told in debug_error(sc, f"composite:{sc.namespace}/r")
        sc.assert_unbound_for(["a-0", "x-0", "y-0"], 5.0)

        # Pods and PodGroups keep their priority: a-0 is recreated, of a's (0).
        sc.delete_pods(["a-0"])
        sc.wait("a-0 to be gone", lambda: "a-0" not in sc.pods())
        member(sc, "a-0", "a", gated=False)
        where = sc.wait_bound(["a-0", "x-0", "y-0"], timeout=60)
    assert len(set(where.values()) | set(sc.placement(["solo-0", "solo-1"]).values())) == 5
    sc.wait_event("r", "bound 3 member(s) together", reason="Bound")
    assert debug_error(sc, f"composite:{sc.namespace}/r") == ""
