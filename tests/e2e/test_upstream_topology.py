"""Upstream's PodGroup topology key through the real kube-scheduler on Kubernetes 1.37: a
``spec.schedulingConstraints.topology[0].key`` that is no level of Phalanx's configured
topologies (``topology.kubernetes.io/zone``) still keeps the whole gang inside one value of
that label, and nodes without the label host no member.

This module runs on ``control_plane_137`` (kube-apiserver and kube-scheduler 1.37.2 with
``GenericWorkload``; kube-apiserver also with ``TopologyAwareWorkloadScheduling``, without
which it drops ``spec.schedulingConstraints``). kube-scheduler runs without that gate:
the zone is Phalanx's doing, not kube-scheduler's own placement generation.
"""

from __future__ import annotations

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from phalanx_process import PhalanxProcess
from scheduling import Api, Obj, Scenario, pod_body

pytestmark = pytest.mark.e2e

API = "/apis/scheduling.k8s.io/v1beta1"
ZONE = "topology.kubernetes.io/zone"
GPUS = 4


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> launcher.ControlPlane:
    return control_plane_137


def zoned_pod_group(sc: Scenario, name: str, min_count: int) -> Obj:
    created = sc.api.create(
        f"{API}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": min_count}},
                "schedulingConstraints": {"topology": [{"key": ZONE}]},
            },
        },
    )
    # Without TopologyAwareWorkloadScheduling the API server drops the field silently.
    assert created["spec"].get("schedulingConstraints") == {"topology": [{"key": ZONE}]}
    return created


def upstream_sizes(api: Api, namespace: str) -> dict[str, int]:
    return {
        f"upstream:{g['metadata']['name']}": int(g["spec"]["schedulingPolicy"]["gang"]["minCount"])
        for g in api.items(f"{API}/namespaces/{namespace}/podgroups")
    }


def test_a_zone_key_binds_the_whole_gang_inside_one_zone_not_spread_over_two(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
) -> None:
    """Zone a has two four-GPU nodes and zone b three; a node without the zone label has
    eight. Three four-GPU members fit over zone a and that node, or zone a and a node of
    zone b; zone b alone is the only single zone that holds them."""
    sc = cluster
    sc.monitor.gang_sizes.append(upstream_sizes)
    ns = sc.namespace
    zone_of: dict[str, str] = {}
    for zone, count in (("a", 2), ("b", 3)):
        for i in range(count):
            zone_of[sc.node(f"{zone}{i}", GPUS, labels={ZONE: f"{ns}-{zone}"})] = zone
    unlabelled = sc.node("x0", 2 * GPUS)
    sc.nodes_ready()
    zoned_pod_group(sc, "zoned", 3)
    names = [f"zoned-{i}" for i in range(3)]
    for name in names:
        body = pod_body(name, gpus=GPUS, node_selector=sc.selector, gated=True)
        body["spec"]["schedulingGroup"] = {"podGroupName": "zoned"}
        sc.api.create(f"/api/v1/namespaces/{ns}/pods", body)
    for name in names:
        sc.ungate(name)

    where = sc.wait_bound(names)

    assert unlabelled not in where.values(), where
    assert {zone_of[node] for node in where.values()} == {"b"}, where
    sc.wait_event("zoned", f"required {ZONE}: placed within {ZONE}={ns}-b", reason="Reserved")
    view = phalanx.debug_group(f"upstream:{ns}", "zoned") or {}
    assert (view.get("plan") or {}).get("level") == ZONE, view
