"""LeaderWorkerSet groups through the real kube-scheduler (1.35) and Phalanx: an opted-in
group binds all or none; a group without the opt-in is scheduled pod by pod, as before.

LWS itself is not installed: the test plays its part. It creates a group's leader, then its
workers (LWS's default startup policy), stamped as LWS's controller and pod webhook stamp
them: the set's name, the group index, the worker index, the group key and the size, plus
Phalanx's opt-in ``phalanx.io/leaderworkerset-gang: "true"`` the user puts on both pod
templates. Phalanx and kube-scheduler are real; the invariant monitor judges each opted-in
group by its size.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import (
    A_LWS_GANG,
    A_LWS_SIZE,
    LWS_GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    RACK,
    Obj,
    Scenario,
    pod_body,
    racks,
)

pytestmark = pytest.mark.e2e


SUBGROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/subgroup-key"


def lws_pod(
    sc: Scenario,
    lws: str,
    worker: int,
    size: int,
    gpus: int,
    *,
    opt_in: bool,
    subgroup_size: int = 0,
    subgroup_topology: str = "",
    affinity: bool = True,
) -> Obj:
    """Pod ``worker`` (0: the leader) of LWS ``lws``'s group 0 of ``size`` pods; with
    ``subgroup_size``, in its subgroup as LWS's webhook puts it there (``size`` a multiple
    of it here), and with ``subgroup_topology`` also with the affinity LWS injects (unless
    ``affinity`` is False): its subgroup inside one value of that label, no other subgroup
    there."""
    name = f"{lws}-0" if worker == 0 else f"{lws}-0-{worker}"
    labels = {
        LWS_NAME_LABEL: lws,
        LWS_GROUP_INDEX_LABEL: "0",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/group-key": f"{lws}0key",
    }
    annotations = {A_LWS_SIZE: str(size)}
    if opt_in:
        annotations[A_LWS_GANG] = "true"
    subgroup_key = ""
    if subgroup_size:
        index = str(worker // subgroup_size)
        subgroup_key = f"{lws}0sub{index}"
        labels["leaderworkerset.sigs.k8s.io/subgroup-index"] = index
        labels[SUBGROUP_KEY_LABEL] = subgroup_key
        annotations["leaderworkerset.sigs.k8s.io/subgroup-size"] = str(subgroup_size)
    if subgroup_topology:
        annotations["leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"] = subgroup_topology
    body = pod_body(
        name, gpus=gpus, node_selector=sc.selector, labels=labels, annotations=annotations
    )
    if subgroup_topology and affinity:
        same = {"key": SUBGROUP_KEY_LABEL, "operator": "In", "values": [subgroup_key]}
        others = [
            {"key": SUBGROUP_KEY_LABEL, "operator": "Exists"},
            {"key": SUBGROUP_KEY_LABEL, "operator": "NotIn", "values": [subgroup_key]},
        ]
        term = {"topologyKey": subgroup_topology}
        body["spec"]["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {**term, "labelSelector": {"matchExpressions": [same]}}
                ]
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {**term, "labelSelector": {"matchExpressions": others}}
                ]
            },
        }
    return sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)


def lws_group(
    sc: Scenario, lws: str, size: int, gpus: int, *, opt_in: bool = True, **subgroups: Any
) -> tuple[str, list[str]]:
    """The leader first, then its workers, as LWS creates them; their names."""
    lws_pod(sc, lws, 0, size, gpus, opt_in=opt_in, **subgroups)
    workers = []
    for worker in range(1, size):
        created = lws_pod(sc, lws, worker, size, gpus, opt_in=opt_in, **subgroups)
        workers.append(created["metadata"]["name"])
    return f"{lws}-0", workers


def debug_view(sc: Scenario, gang: str) -> dict[str, Any]:
    answer = sc.phalanx.get(f"/debug/groups/lws:{sc.namespace}/{gang}")
    answer.raise_for_status()
    view: dict[str, Any] = answer.json()
    return view


def test_an_opted_in_group_that_fits_binds_whole(cluster: Scenario) -> None:  # noqa: F811
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    leader, workers = lws_group(cluster, "serve", 3, 4)

    where = cluster.wait_bound([leader, *workers])
    assert len(set(where.values())) == 2, where
    # No gang object: Phalanx tells the gang's first member.
    cluster.wait_event(leader, "bound 3 member(s) together", reason="Bound")
    view = debug_view(cluster, leader)
    assert (view["dialect"], view["source"], view["min_member"], view["bound"]) == (
        "lws",
        "annotations",
        3,
        3,
    )


def test_an_opted_in_group_one_node_short_waits_whole_and_says_why(
    cluster: Scenario,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    leader, workers = lws_group(cluster, "wide", 3, 8)

    cluster.wait_unschedulable(
        leader, f"cannot place 3 member(s) of gang lws:{cluster.namespace}/{leader}"
    )
    cluster.assert_unbound_for([leader, *workers], 3.0)
    view = debug_view(cluster, leader)
    assert (view["last_decision"], view["reservation"], view["bound"]) == ("unfit", None, 0)


def test_a_group_without_the_opt_in_is_scheduled_pod_by_pod(cluster: Scenario) -> None:  # noqa: F811
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    leader, workers = lws_group(cluster, "plain", 3, 8, opt_in=False)

    # Two of the three fit, and two bind: no gang holds them back.
    pods = [leader, *workers]
    cluster.wait("two pods bound", lambda: sum(map(bool, cluster.placement(pods).values())) == 2)
    cluster.assert_unbound_for([n for n, node in cluster.placement(pods).items() if not node], 1.0)
    assert cluster.phalanx.get(f"/debug/groups/lws:{cluster.namespace}/{leader}").status_code == 404


@pytest.mark.parametrize("affinity", [False, True], ids=["phalanx-alone", "with-lws-affinity"])
def test_each_subgroup_of_a_group_binds_inside_one_rack(
    cluster: Scenario,  # noqa: F811
    affinity: bool,
) -> None:
    # Rack r0 holds three whole-node pods, r1 two: filling r0 first would split a subgroup.
    # Without LWS's affinity, where the pods land is Phalanx's plan alone; with it,
    # kube-scheduler agrees with that plan (it would refuse a pod of a split subgroup).
    rack_of = racks(cluster, 3, 2)
    leader, workers = lws_group(
        cluster, "racked", 4, 8, subgroup_size=2, subgroup_topology=RACK, affinity=affinity
    )

    where = cluster.wait_bound([leader, *workers])
    # Subgroup 0: the leader and worker 1; subgroup 1: workers 2 and 3.
    assert rack_of[where[leader]] == rack_of[where[workers[0]]], where
    assert rack_of[where[workers[1]]] == rack_of[where[workers[2]]], where
    view = debug_view(cluster, leader)
    assert view["bound"] == 4
