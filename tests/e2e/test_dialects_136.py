"""The upstream dialect on Kubernetes 1.36 through its real kube-scheduler and Phalanx: 1.36
serves the gang API only as ``scheduling.k8s.io/v1alpha2``, standalone PodGroups named by
pods' ``spec.schedulingGroup``, whose status condition is ``PodGroupScheduled`` (renamed
``PodGroupInitiallyScheduled`` in 1.37), whose ``spec.schedulingPolicy`` is immutable (1.37
lets ``minCount`` change), whose ``spec.disruptionMode`` is a string (``Pod`` or
``PodGroup``, 1.37's is an object) that kube-apiserver sets on every PodGroup it serves, and
whose ``Workload`` is no gang but a set of PodGroup templates that a PodGroup may name in
``spec.podGroupTemplateRef``.

This module runs on ``control_plane_136`` (kube-apiserver and kube-scheduler 1.36.3 with
``GenericWorkload``, ``scheduling.k8s.io/v1alpha2`` served; kube-apiserver also with
``TopologyAwareWorkloadScheduling``, without which it drops ``spec.schedulingConstraints``;
kube-scheduler also with ``GangScheduling``, the plugin's own gate in 1.36). With
``GenericWorkload`` kube-scheduler queues a PodGroup's members as one entity and runs its
pod-group cycle; the chart's profile disables ``GangScheduling``, so Phalanx alone gangs them.
"""

from __future__ import annotations

from pathlib import Path

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import (  # noqa: F401  # fixtures
    Scheduler,
    cluster,
    native_gang_plugin_holds_a_lone_member,
    phalanx,
    phalanx_hears_a_lone_member_and_binds_the_pair,
    scheduler,
)
from scheduling import Api, ApiError, Obj, PodWatch, Scenario, pod_body

pytestmark = pytest.mark.e2e

VERSION = "scheduling.k8s.io/v1alpha2"
API = f"/apis/{VERSION}"
CONDITION = "PodGroupScheduled"
KUBE_SCHEDULER_REFUSAL = "pod group is unschedulable"  # kube-scheduler 1.36's message
ZONE = "topology.kubernetes.io/zone"


@pytest.fixture(scope="module")
def control_plane(control_plane_136: launcher.ControlPlane) -> launcher.ControlPlane:
    """Every fixture of this module (namespace, nodes, Phalanx, kube-scheduler) on 1.36."""
    return control_plane_136


def pod_group(sc: Scenario, name: str, min_count: int, **spec: Obj | list[Obj]) -> Obj:
    created = sc.api.create(
        f"{API}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": VERSION,
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
        },
    )
    for field, value in spec.items():
        assert created["spec"].get(field) == value, created["spec"]  # not dropped by a gate
    return created


def member(sc: Scenario, name: str, group: str, gpus: int, *, gated: bool = False) -> Obj:
    body = pod_body(name, gpus=gpus, node_selector=sc.selector, gated=gated)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    created = sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    assert created["spec"].get("schedulingGroup") == {"podGroupName": group}  # the gate took
    return created


def members(sc: Scenario, group: str, count: int, gpus: int) -> list[str]:
    """``count`` members, created gated and released together (as a controller's batch)."""
    names = [f"{group}-{i}" for i in range(count)]
    for name in names:
        member(sc, name, group, gpus, gated=True)
    for name in names:
        sc.ungate(name)
    return names


def group_path(sc: Scenario, name: str) -> str:
    return f"{API}/namespaces/{sc.namespace}/podgroups/{name}"


def conditions(sc: Scenario, name: str) -> dict[str, Obj]:
    status = sc.api.get(group_path(sc, name)).get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


def scheduled(sc: Scenario, name: str, state: str) -> Obj | None:
    found = conditions(sc, name).get(CONDITION)
    return found if found is not None and found["status"] == state else None


class PodGroupWatch(PodWatch):
    """Every version of the namespace's PodGroups the API showed while open. kube-scheduler
    1.36 rewrites the condition with its own message whenever it differs (each pod-group
    cycle), so Phalanx's write may last only until the next cycle: a poll could miss it."""

    def __init__(self, cp: launcher.ControlPlane, namespace: str) -> None:
        super().__init__(cp, namespace)
        self.path = f"{API}/namespaces/{namespace}/podgroups"


def written_by_phalanx(watch: PodWatch, name: str, state: str, saying: str = "") -> Obj | None:
    """The first condition of PodGroup ``name`` with ``state`` (and a message starting with
    ``saying``) that Phalanx wrote: a version whose status Phalanx manages, with a message
    (kube-scheduler's True has none)."""
    for version in watch.versions(name):
        fields = version["metadata"].get("managedFields") or []
        managers = {f.get("manager") for f in fields if f.get("subresource") == "status"}
        found = {c["type"]: c for c in (version.get("status") or {}).get("conditions") or []}
        condition = found.get(CONDITION) or {}
        message = condition.get("message")
        ours = message and message != KUBE_SCHEDULER_REFUSAL and "phalanx" in managers
        if ours and condition["status"] == state and str(message).startswith(saying):
            return condition
    return None


def upstream_sizes(api: Api, namespace: str) -> dict[str, int]:
    return {
        f"upstream:{g['metadata']['name']}": int(g["spec"]["schedulingPolicy"]["gang"]["minCount"])
        for g in api.items(f"{API}/namespaces/{namespace}/podgroups")
    }


def judged(sc: Scenario) -> Scenario:
    sc.monitor.gang_sizes.append(upstream_sizes)
    return sc


def test_a_pod_group_becomes_whole_and_its_condition_is_pod_group_scheduled(
    cluster: Scenario,  # noqa: F811
) -> None:
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    with PodGroupWatch(sc.cp, sc.namespace) as watch:
        pod_group(sc, "train", 3)
        where = sc.wait_bound(members(sc, "train", 3, 4))
        assert len(set(where.values())) == 2, where
        placed = sc.wait(
            f"{CONDITION} True, written by Phalanx",
            lambda: written_by_phalanx(watch, "train", "True"),
        )
    assert placed["reason"] == "Scheduled", placed
    # Not 1.37's PodGroupInitiallyScheduled: no such type in v1alpha2.
    assert set(conditions(sc, "train")) == {CONDITION}, conditions(sc, "train")
    event = sc.wait_event("train", "bound 3 member(s) together", reason="Bound")
    assert event["involvedObject"]["apiVersion"] == VERSION
    view = sc.phalanx.debug_group(f"upstream:{sc.namespace}", "train") or {}
    assert (view.get("dialect"), view.get("source"), view.get("bound")) == (
        "upstream",
        "PodGroup",
        3,
    ), view


def test_a_gang_short_of_its_quorum_binds_nobody_and_keeps_its_min_count_until_complete(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Two members of a gang of 3 hold a reservation for 3 and wait at /bind. In v1alpha2 the
    scheduling policy is immutable: lowering minCount is refused by the API server (on 1.37 it
    would re-plan the gang at 2), so the gang binds only when its third member comes.
    (kube-scheduler's pod-group cycle, GangScheduling disabled, sets PodGroupScheduled True
    as soon as it has placed the two: the binding Phalanx holds is what waits.)"""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    pod_group(sc, "trio", 3)
    first = members(sc, "trio", 2, 4)
    sc.wait_event("trio", "reserved 3 member(s)", reason="Reserved")
    sc.assert_unbound_for(first, 2.0)
    with pytest.raises(ApiError, match="422"):
        sc.api.merge_patch(
            group_path(sc, "trio"), {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
        )
    sc.assert_unbound_for(first, 1.0)
    member(sc, "trio-2", "trio", 4)
    where = sc.wait_bound([*first, "trio-2"], timeout=60)
    assert len(set(where.values())) == 2, where
    sc.wait(f"{CONDITION} True", lambda: scheduled(sc, "trio", "True"))
    sc.wait_event("trio", "bound 3 member(s) together", reason="Bound")
    assert not sc.events("trio", reason="ReservationReleased")


def test_a_gang_that_cannot_fit_is_unschedulable_in_phalanxs_words_then_binds(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Phalanx writes PodGroupScheduled False with its reason; kube-scheduler's next pod-group
    cycle puts its own message back (it rewrites any that differs), Phalanx's Event stays."""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    with PodGroupWatch(sc.cp, sc.namespace) as watch:
        pod_group(sc, "wide", 3)
        names = members(sc, "wide", 3, 8)
        refused = sc.wait(
            f"{CONDITION} False, written by Phalanx",
            # Its first decision may have been "waiting for gang members" (written at
            # once); the refusal follows within about a second.
            lambda: written_by_phalanx(watch, "wide", "False", "cannot place 3 member(s)"),
        )
    assert refused["reason"] == "Unschedulable", refused
    assert refused["message"].startswith("cannot place 3 member(s)"), refused
    sc.wait_event("wide", "cannot place 3 member(s)", reason="Unschedulable")
    sc.assert_unbound_for(names, 2.0)
    sc.node("c", 8)
    sc.nodes_ready()
    sc.wait_bound(names, timeout=60)
    sc.wait(f"{CONDITION} True", lambda: scheduled(sc, "wide", "True"))
    assert set(conditions(sc, "wide")) == {CONDITION}, conditions(sc, "wide")


def test_a_pod_group_made_from_a_workload_template_is_ganged_by_its_own_policy(
    cluster: Scenario,  # noqa: F811
) -> None:
    """As 1.36's Job controller makes them (WorkloadWithJob): a v1alpha2 Workload holds the
    template, the PodGroup names it in spec.podGroupTemplateRef and carries its own copy of
    the policy. Phalanx reads the PodGroup; the Workload (v1alpha1's gang object in 1.35) is
    no gang here and gets no Event."""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.nodes_ready()
    policy = {"gang": {"minCount": 2}}
    sc.api.create(
        f"{API}/namespaces/{sc.namespace}/workloads",
        {
            "apiVersion": VERSION,
            "kind": "Workload",
            "metadata": {"name": "job"},
            "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy}]},
        },
    )
    ref = {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}}
    pod_group(sc, "job-workers", 2, podGroupTemplateRef=ref)
    member(sc, "job-workers-0", "job-workers", 4)
    sc.wait_event("job-workers", "reserved 2 member(s)", reason="Reserved")
    member(sc, "job-workers-1", "job-workers", 4)
    sc.wait_bound(["job-workers-0", "job-workers-1"], timeout=60)
    sc.wait_event("job-workers", "bound 2 member(s) together", reason="Bound")
    assert sc.events("job", kind="Workload") == []


def test_a_zone_key_binds_the_whole_gang_inside_one_zone(cluster: Scenario) -> None:  # noqa: F811
    """spec.schedulingConstraints is 1.36's too (kept with TopologyAwareWorkloadScheduling on
    kube-apiserver). Zone a has one four-GPU node, zone b two, a node without the label eight:
    zone b is the only zone that holds the gang, the unlabelled node the tightest fit."""
    sc = judged(cluster)
    ns = sc.namespace
    zone_of: dict[str, str] = {}
    for zone, count in (("a", 1), ("b", 2)):
        for i in range(count):
            zone_of[sc.node(f"{zone}{i}", 4, labels={ZONE: f"{ns}-{zone}"})] = zone
    unlabelled = sc.node("x0", 8)
    sc.nodes_ready()
    pod_group(sc, "zoned", 2, schedulingConstraints={"topology": [{"key": ZONE}]})
    where = sc.wait_bound(members(sc, "zoned", 2, 4))
    assert unlabelled not in where.values(), where
    assert {zone_of[node] for node in where.values()} == {"b"}, where
    sc.wait_event("zoned", f"required {ZONE}: placed within {ZONE}={ns}-b", reason="Reserved")


def test_in_the_supported_setup_phalanx_decides_while_the_gang_is_incomplete(
    cluster: Scenario,  # noqa: F811
) -> None:
    """kube-scheduler runs with GangScheduling's gate on and the chart's profile disables the
    plugin: the first member is not held at PreEnqueue, so Phalanx hears of it alone."""
    sc = judged(cluster)
    phalanx_hears_a_lone_member_and_binds_the_pair(sc, pod_group, member)
    sc.wait(f"{CONDITION} True", lambda: scheduled(sc, "pair", "True"))
    assert not sc.events("pair", reason="NativeGangScheduling")


def test_with_the_native_gang_plugin_left_on_phalanx_says_so_and_kube_scheduler_holds_members(
    control_plane: launcher.ControlPlane,
    cluster: Scenario,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The other side of the test above: kube-scheduler's GangScheduling (its own gate in
    1.36, on here) left on in the profile holds the lone member at PreEnqueue, unseen by
    Phalanx, which warned at start and warns on the PodGroup."""
    native_gang_plugin_holds_a_lone_member(
        control_plane, scheduler, judged(cluster), tmp_path, pod_group, member
    )
