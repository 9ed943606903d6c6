"""deploy/examples/1.37 on Kubernetes 1.37's real kube-apiserver and kube-scheduler with
Phalanx as its extender: every example passes a server-side dry run keeping every field
it writes (a field behind a gate that is off would be dropped), and each is applied as a
user applies it and ends whole, placed as its comments promise: an upstream PodGroup in
one zone, a KubeRay-shaped CompositePodGroup, and a gang asking ``nvidia.com/gpu`` on
DRA-only nodes through a DeviceClass's ``extendedResourceName``. The examples' pods are
only given the test's node pool.

This module runs on ``control_plane_137`` (see test_composite_137.py for its gates).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from examples import EXAMPLES_137, apply_example, assert_valid, release_137_examples
from podgroup_crd import ensure_pod_group_crd
from scheduling import ZONE_LABEL, Obj, Scenario
from test_dialects_137 import upstream_sizes
from test_dra import refused_by_dynamic_resources
from test_dra_extended import dra_node, extended_claims

pytestmark = pytest.mark.e2e

GROUPS = "/apis/scheduling.k8s.io/v1beta1"
COMPOSITES = "/apis/scheduling.k8s.io/v1alpha3"
DEVICE_CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
SCHEDULED = "PodGroupInitiallyScheduled"
COMPOSITE_SCHEDULED = "CompositePodGroupInitiallyScheduled"


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> launcher.ControlPlane:
    return control_plane_137


def test_there_are_examples_for_1_37() -> None:
    assert {p.stem for p in release_137_examples()} >= {
        "upstream-podgroup-zone",
        "composite-raycluster",
        "dra-extended-gpu",
    }


@pytest.mark.parametrize("path", release_137_examples(), ids=lambda p: p.stem)
def test_every_1_37_example_passes_server_side_validation_and_keeps_its_fields(
    control_plane: launcher.ControlPlane, namespace: str, path: Path
) -> None:
    ensure_pod_group_crd(control_plane)
    assert_valid(control_plane, path, namespace)


def pod_names(applied: list[Obj]) -> list[str]:
    return [str(o["metadata"]["name"]) for o in applied if o["kind"] == "Pod"]


def condition_true(sc: Scenario, path: str, kind: str) -> Obj | None:
    """The object's condition ``kind`` while it is True."""
    status = sc.api.get(path).get("status") or {}
    return next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == kind and c.get("status") == "True"
        ),
        None,
    )


def test_the_upstream_pod_group_example_starts_whole_in_the_one_zone_that_holds_it(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Zone a has one 8-GPU node, zone b two: only b holds three 4-GPU shards."""
    sc = cluster
    sc.monitor.gang_sizes.append(upstream_sizes)  # judged: never partially bound
    zone_of = {}
    for zone, count in (("a", 1), ("b", 2)):
        for i in range(count):
            node = sc.node(f"{zone}{i}", 8, labels={ZONE_LABEL: f"{sc.namespace}-{zone}"})
            zone_of[node] = zone
    sc.nodes_ready()

    applied = apply_example(
        sc.cp, EXAMPLES_137 / "upstream-podgroup-zone.yaml", sc.namespace, pool=sc.pool
    )

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert {zone_of[n] for n in where.values()} == {"b"}, where
    path = f"{GROUPS}/namespaces/{sc.namespace}/podgroups/vllm-shard"
    sc.wait("PodGroupInitiallyScheduled True", lambda: condition_true(sc, path, SCHEDULED))


def test_the_composite_example_starts_the_head_and_both_workers_together(
    cluster: Scenario,  # noqa: F811
) -> None:
    sc = cluster
    nodes = {sc.node(f"h{i}", 8) for i in range(2)}
    sc.nodes_ready()

    applied = apply_example(
        sc.cp, EXAMPLES_137 / "composite-raycluster.yaml", sc.namespace, pool=sc.pool
    )

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert {where["raycluster-worker-0"], where["raycluster-worker-1"]} == nodes, where
    sc.wait_event("raycluster", "bound 3 member(s) together", reason="Bound")
    for path, kind in (
        (
            f"{COMPOSITES}/namespaces/{sc.namespace}/compositepodgroups/raycluster",
            COMPOSITE_SCHEDULED,
        ),
        (f"{GROUPS}/namespaces/{sc.namespace}/podgroups/raycluster-head", SCHEDULED),
        (f"{GROUPS}/namespaces/{sc.namespace}/podgroups/raycluster-workers", SCHEDULED),
    ):
        sc.wait(
            f"{path} initially scheduled",
            partial(condition_true, sc, path, kind),
        )


@pytest.fixture
def slices(cluster: Scenario) -> Iterator[list[str]]:  # noqa: F811
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            cluster.api.delete(f"/apis/resource.k8s.io/v1/resourceslices/{name}")
        # The example's class, so nvidia.com/gpu is served by DRA in this test only.
        cluster.api.delete(f"{DEVICE_CLASSES}/gpu-extended.example.com")


def test_the_dra_extended_resource_example_binds_whole_onto_dra_only_nodes(
    cluster: Scenario,  # noqa: F811
    slices: list[str],
) -> None:
    sc = cluster
    nodes = {dra_node(sc, slices, f"d{i}") for i in range(2)}  # 4 GPUs each, DRA only
    sc.nodes_ready()

    applied = apply_example(
        sc.cp, EXAMPLES_137 / "dra-extended-gpu.yaml", sc.namespace, pool=sc.pool
    )

    members = pod_names(applied)
    where = sc.wait_bound(members, timeout=45)
    assert set(where.values()) == nodes, where  # 4 GPUs each: a node per member

    def allocated() -> dict[str, str] | None:
        found = extended_claims(sc)
        return found if set(found) == set(members) and all(found.values()) else None

    assert sc.wait("each member's claim allocated", allocated) == where
    assert refused_by_dynamic_resources(sc, members) == []
