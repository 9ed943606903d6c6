"""DRA ``allocationMode: All`` through the real kube-scheduler (docs/dra.md, "allocationMode:
All"): Phalanx plans such a request as taking its class's devices on the node whole, so
two members asking for all GPUs are never reserved on one node, and kube-scheduler's
DynamicResources plugin, which gives each every GPU of its node, agrees with the plan.

The DRA side (the resourceclaim controller, NVIDIA's DeviceClasses, the ``Dra`` world) is
test_dra.py's, imported from it.
"""

from __future__ import annotations

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Scenario
from test_dra import (  # noqa: F401  # fixtures
    API,
    GPU_CLASS,
    Dra,
    claim_controller,
    dra,
    dra_replans,
)

from builders import device_request

pytestmark = pytest.mark.e2e

GPUS = 8  # per node


def test_two_members_asking_for_all_gpus_are_reserved_and_bound_on_two_nodes(
    cluster: Scenario,  # noqa: F811
    dra: Dra,  # noqa: F811
) -> None:
    ns = cluster.namespace
    nodes = [dra.gpu_node(f"h{i}") for i in range(2)]
    cluster.nodes_ready()
    replans_before = dra_replans(cluster)
    dra.template("every", device_request("gpus", GPU_CLASS, None, mode="All"))
    gang = dra.gang("whole", 2, {"gpus": "every"}, placement="pack")

    where = cluster.wait_gang(gang, timeout=60)

    assert sorted(where.values()) == nodes, where
    reserved = cluster.events("whole", reason="Reserved")
    assert reserved, cluster.diagnostics()
    for event in reserved:  # every plan of the gang put its members on both nodes
        assert all(node in event["message"] for node in nodes), event["message"]
    assert dra.refused_by_dynamic_resources(gang.members) == []
    assert dra_replans(cluster) == replans_before
    # kube-scheduler's allocation: each claim holds all eight GPUs of its pod's node.
    dra.assert_allocated_where_bound(gang.members)
    claims = cluster.api.items(f"{API}/namespaces/{ns}/resourceclaims")
    assert len(claims) == 2, claims
    for claim in claims:
        results = claim["status"]["allocation"]["devices"]["results"]
        pools = {r["pool"] for r in results}
        assert len(results) == GPUS, results
        assert len(pools) == 1, results
        assert pools <= set(nodes), results
