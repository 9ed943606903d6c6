"""deploy/examples for the default release, on its real kube-apiserver and kube-scheduler
with Phalanx as its extender: every example passes a server-side dry run keeping every
field it writes, and each gang dialect's example (Volcano's task minima, DRA claims from a
template, an NVL72 clique in slices) is applied as a user applies it and ends whole, placed
as its comments promise. The examples' pods are only given the test's node pool.

Volcano's and KAI Scheduler's PodGroup CRDs and Grove's PodGang CRD are served for this
module (as where they are installed), and for
the DRA example the resourceclaim controller runs with NVIDIA's DeviceClasses installed
(tests/e2e/test_dra.py). The 1.37 examples: test_examples_137.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from examples import EXAMPLES, Obj, apply_example, assert_valid, default_release_examples
from grove import GROVE_CRD_NAME, ensure_grove_crd, grove_path, grove_sizes
from kai import KAI_CRD_NAME, ensure_kai_crd, kai_path, kai_sizes
from podgroup_crd import CRDS, ensure_pod_group_crd
from scheduling import CLIQUE_LABEL, Scenario
from test_dra import Dra, claim_controller  # noqa: F401  # claim_controller: a fixture
from volcano import VOLCANO_CRD_NAME, ensure_volcano_crd, volcano_path, volcano_sizes

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def control_plane(control_plane: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """The session's control plane with Volcano's and KAI's PodGroup CRDs and Grove's
    PodGang CRD served before this module's Phalanx starts; removed afterwards."""
    ensure_volcano_crd(control_plane)
    ensure_kai_crd(control_plane)
    ensure_grove_crd(control_plane)
    yield control_plane
    control_plane.request("DELETE", f"{CRDS}/{VOLCANO_CRD_NAME}")
    control_plane.request("DELETE", f"{CRDS}/{KAI_CRD_NAME}")
    control_plane.request("DELETE", f"{CRDS}/{GROVE_CRD_NAME}")


@pytest.mark.parametrize("path", default_release_examples(), ids=lambda p: p.stem)
def test_every_example_passes_server_side_validation_and_keeps_its_fields(
    control_plane: launcher.ControlPlane, namespace: str, path: Path
) -> None:
    ensure_pod_group_crd(control_plane)
    assert_valid(control_plane, path, namespace)


def pod_names(applied: list[Obj]) -> list[str]:
    return [str(o["metadata"]["name"]) for o in applied if o["kind"] == "Pod"]


def test_the_volcano_example_starts_master_and_workers_together(
    cluster: Scenario,  # noqa: F811
) -> None:
    sc = cluster
    sc.monitor.gang_sizes.append(volcano_sizes)
    nodes = {sc.node(f"h{i}", 8) for i in range(2)}
    sc.nodes_ready()

    applied = apply_example(sc.cp, EXAMPLES / "volcano-mpi-gang.yaml", sc.namespace, pool=sc.pool)

    where = sc.wait_bound(pod_names(applied), timeout=45)
    workers = {where["mpi-allreduce-worker-0"], where["mpi-allreduce-worker-1"]}
    assert workers == nodes, where  # 8 GPUs each: a node per worker
    running = sc.wait(
        "the Volcano PodGroup Running",
        lambda: (
            (sc.api.get(volcano_path(sc, "mpi-allreduce")).get("status") or {}).get("phase")
            == "Running"
        ),
    )
    assert running


def test_the_dra_example_binds_every_member_where_its_claim_is_allocated(
    cluster: Scenario,  # noqa: F811
    claim_controller: None,  # noqa: F811
) -> None:
    sc = cluster
    dra = Dra(sc)
    try:
        nodes = {dra.gpu_node(f"h{i}") for i in range(2)}  # 8 GPUs each, DRA only
        sc.nodes_ready()

        applied = apply_example(sc.cp, EXAMPLES / "dra-gpu-gang.yaml", sc.namespace, pool=sc.pool)

        members = pod_names(applied)
        where = sc.wait_bound(members, timeout=60)
        # 4 GPUs each: two members per node
        assert sorted(where.values()) == sorted([*nodes, *nodes]), where

        def allocated() -> bool:
            claimed = dra.claim_nodes(members)
            return all(claimed.get(m) and all(claimed[m]) for m in members)

        sc.wait("every member's claim allocated", allocated)
        dra.assert_allocated_where_bound(members)
        assert dra.refused_by_dynamic_resources(members) == []
    finally:
        dra.close()


def test_the_nvl72_example_lands_in_one_clique_a_replica_per_node(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Clique x has one 4-GPU node, clique y two: only y holds the gang's 8 GPUs."""
    sc = cluster
    clique_of = {}
    for clique, count in (("x", 1), ("y", 2)):
        for i in range(count):
            node = sc.node(f"{clique}{i}", 4, clique=f"{sc.namespace}-{clique}")
            clique_of[node] = clique
    sc.nodes_ready()

    applied = apply_example(
        sc.cp, EXAMPLES / "nvl72-topology-gang.yaml", sc.namespace, pool=sc.pool
    )

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert {clique_of[n] for n in where.values()} == {"y"}, where
    assert where["moe-train-0"] == where["moe-train-1"], where
    assert where["moe-train-2"] == where["moe-train-3"], where
    assert where["moe-train-0"] != where["moe-train-2"], where
    assert sc.node_labels(where["moe-train-0"])[CLIQUE_LABEL] == f"{sc.namespace}-y"


def test_the_kai_example_starts_prefill_and_decode_together_a_node_each(
    cluster: Scenario,  # noqa: F811
) -> None:
    """KAI's scheduler is not installed: the example's PodGroup and pods are as its
    podgrouper writes them. Three 8-GPU nodes of one NVLink clique (the decode subgroup
    requires one): each member takes a whole one."""
    sc = cluster
    sc.monitor.gang_sizes.append(kai_sizes)
    nodes = {sc.node(f"h{i}", 8, clique=f"{sc.namespace}-c0") for i in range(3)}
    sc.nodes_ready()

    applied = apply_example(sc.cp, EXAMPLES / "kai-podgroup.yaml", sc.namespace, pool=sc.pool)

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert set(where.values()) == nodes, where
    view = sc.phalanx.get(f"/debug/groups/kai:{sc.namespace}/disagg-serve").json()
    assert (view["dialect"], view["min_member"], view["bound"]) == ("kai", 3, 3)

    def counted() -> Obj | None:
        status: Obj = sc.api.get(kai_path(sc, "disagg-serve")).get("status") or {}
        return status if status.get("running") == 3 else None

    status = sc.wait("the PodGroup's running count", counted, timeout=15)
    assert not status.get("schedulingConditions"), status


def test_the_grove_example_starts_prefill_and_decode_together_a_node_each(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Grove's operator is not installed: the example's PodGang and pods are as it writes
    them. Three 8-GPU nodes of one NVLink clique (the decode podgroup requires one): each
    member takes a whole one."""
    sc = cluster
    sc.monitor.gang_sizes.append(grove_sizes)
    nodes = {sc.node(f"h{i}", 8, clique=f"{sc.namespace}-c0") for i in range(3)}
    sc.nodes_ready()

    applied = apply_example(sc.cp, EXAMPLES / "grove-podgang.yaml", sc.namespace, pool=sc.pool)

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert set(where.values()) == nodes, where
    view = sc.phalanx.get(f"/debug/groups/grove:{sc.namespace}/serve-0").json()
    assert (view["dialect"], view["min_member"], view["bound"]) == ("grove", 3, 3)

    def scheduled() -> Obj | None:
        status: Obj = sc.api.get(grove_path(sc, "serve-0")).get("status") or {}
        found = [c for c in status.get("conditions") or [] if c.get("type") == "Scheduled"]
        return status if found and found[0].get("status") == "True" else None

    status = sc.wait("the PodGang's Scheduled condition", scheduled, timeout=15)
    assert status["phase"] in ("Starting", "Running"), status


def test_the_kueue_example_binds_its_pod_group_whole_a_worker_per_node(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Kueue is not installed, so no admission gate holds the pods (its webhook adds it):
    they reach kube-scheduler at once, as they do once Kueue admits the group. Three
    4-GPU nodes: each worker takes a whole one, the driver the third."""
    sc = cluster  # the monitor judges the group by its total count
    nodes = {sc.node(f"h{i}", 4) for i in range(3)}
    sc.nodes_ready()

    applied = apply_example(sc.cp, EXAMPLES / "kueue-pod-group.yaml", sc.namespace, pool=sc.pool)

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert set(where.values()) == nodes, where
    view = sc.phalanx.get(f"/debug/groups/kueue:{sc.namespace}/sweep").json()
    assert (view["dialect"], view["min_member"], view["bound"]) == ("kueue", 3, 3)


def test_the_lws_example_binds_its_leader_and_worker_whole_a_node_each(
    cluster: Scenario,  # noqa: F811
) -> None:
    """LWS is not installed: the example holds the pods it makes of one group, opted in.
    Two 8-GPU nodes: the leader and its worker take one each."""
    sc = cluster  # the monitor judges the group by its size
    nodes = {sc.node(f"h{i}", 8) for i in range(2)}
    sc.nodes_ready()

    applied = apply_example(
        sc.cp, EXAMPLES / "lws-multinode-inference.yaml", sc.namespace, pool=sc.pool
    )

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert set(where.values()) == nodes, where
    view = sc.phalanx.get(f"/debug/groups/lws:{sc.namespace}/vllm-0").json()
    assert (view["dialect"], view["min_member"], view["bound"]) == ("lws", 2, 2)


def test_the_yunikorn_example_binds_its_head_and_workers_whole_a_worker_per_node(
    cluster: Scenario,  # noqa: F811
) -> None:
    """YuniKorn is not installed: the example holds the pods of one application, as
    KubeRay's YuniKorn integration writes them. Two 8-GPU nodes: each GPU worker takes a
    whole one, the head (no GPU) goes beside one of them."""
    sc = cluster  # the monitor judges the application by its task groups' minima
    nodes = {sc.node(f"h{i}", 8) for i in range(2)}
    sc.nodes_ready()

    applied = apply_example(
        sc.cp, EXAMPLES / "yunikorn-task-groups.yaml", sc.namespace, pool=sc.pool
    )

    where = sc.wait_bound(pod_names(applied), timeout=45)
    assert {where["ray-demo-worker-1"], where["ray-demo-worker-2"]} == nodes, where
    view = sc.phalanx.get(f"/debug/groups/yunikorn:{sc.namespace}/ray-demo").json()
    assert (view["dialect"], view["min_member"], view["bound"]) == ("yunikorn", 3, 3)
