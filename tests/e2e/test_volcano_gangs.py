"""Volcano gangs on the session's control plane, through the real kube-scheduler: a hard
``networkTopology`` is searched from tier 1 upward (docs/topology.md: hard is required
``tier:<highestTierAllowed>`` and preferred ``tier:1``), a gang whose members
succeeded ends ``Completed`` (docs/gang-dialects.md, "Status"), and ``spec.minTaskMember``
holds each task's minimum in the quorum (docs/gang-dialects.md, "Volcano task minima").

Tiers count from the default topology's labels: tier 1 is ``nvidia.com/gpu.clique``, tier 2
the leaf, tier 3 the spine. The rack set, two cliques of three four-GPU nodes under one
leaf, has label values unique to the test's namespace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from podgroup_crd import CRDS
from scheduling import A_VOLCANO_GROUP, CLIQUE_LABEL, Obj, Scenario, owned_by_job, pod_body
from volcano import (
    VOLCANO_CRD_NAME,
    ensure_volcano_crd,
    volcano_path,
    volcano_pod_group,
    volcano_sizes,
)

pytestmark = pytest.mark.e2e

SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
HOSTNAME = "kubernetes.io/hostname"
GPUS = 4  # per node, and per member
TASK_SPEC = "volcano.sh/task-spec"  # a member's task, as Volcano's job controller writes it
PARTITION = "volcano.sh/partition-id"  # a member's partition (its subgroup), the same way


@pytest.fixture(scope="module")
def control_plane(control_plane: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """The session's control plane, with Volcano's PodGroup CRD served before this module's
    Phalanx starts; removed afterwards."""
    ensure_volcano_crd(control_plane)
    yield control_plane
    control_plane.request("DELETE", f"{CRDS}/{VOLCANO_CRD_NAME}")


def volcano_gang(
    sc: Scenario,
    name: str,
    size: int,
    *,
    network_topology: Mapping[str, Any] | None = None,
    job: str | None = None,
) -> list[str]:
    """A Volcano PodGroup and ``size`` four-GPU members, released together; ``job``: the
    Job the members say they belong to (kwok completes them once they run)."""
    volcano_pod_group(sc, name, size, network_topology=network_topology)
    names = [f"{name}-{i}" for i in range(size)]
    for member in names:
        body = pod_body(
            member,
            gpus=GPUS,
            node_selector=sc.selector,
            annotations={A_VOLCANO_GROUP: name},
            gated=True,
        )
        if job is not None:
            owned_by_job(body, job)
        sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    for member in names:
        sc.ungate(member)
    return names


def task_member(sc: Scenario, name: str, group: str, task: str, *, gated: bool = False) -> str:
    """A four-GPU member of Volcano PodGroup ``group`` in task ``task``, annotated as
    Volcano's job controller annotates it; ungated (as the controller creates it) unless
    ``gated``."""
    body = pod_body(
        name,
        gpus=GPUS,
        node_selector=sc.selector,
        annotations={A_VOLCANO_GROUP: group, TASK_SPEC: task},
        gated=gated,
    )
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    return name


def task_of(sc: Scenario, name: str) -> str:
    pod = sc.api.get(f"/api/v1/namespaces/{sc.namespace}/pods/{name}")
    return str(pod["metadata"]["annotations"][TASK_SPEC])


def judged(sc: Scenario) -> Scenario:
    """Make the invariant monitor judge Volcano gangs too."""
    sc.monitor.gang_sizes.append(volcano_sizes)
    return sc


def racks_one_node_busy(cluster: Scenario) -> Scenario:  # noqa: F811
    """The module's rack set (two cliques of three four-GPU nodes under one leaf), node 0
    of clique 0 busy; Volcano gangs judged."""
    sc = judged(cluster)
    ns = sc.namespace
    for c in range(2):
        for n in range(3):
            labels = {SPINE: f"{ns}-s0", LEAF: f"{ns}-l0"}
            sc.node(f"c{c}-n{n}", GPUS, clique=f"{ns}-c{c}", labels=labels)
    sc.nodes_ready()
    sc.pod("busy", GPUS, node_selector={HOSTNAME: f"{ns}-c0-n0"})
    sc.wait_bound(["busy"])
    return sc


def test_a_hard_network_topology_keeps_a_gang_one_clique_holds_in_that_clique(
    cluster: Scenario,  # noqa: F811
) -> None:
    """highestTierAllowed 2 would allow the leaf; clique 0, one node busy, still has two free
    nodes that a spread over the leaf would fill first (the most broken clique), but clique
    1 holds the gang whole, and tier 1 is tried first."""
    sc = racks_one_node_busy(cluster)
    ns = sc.namespace
    names = volcano_gang(sc, "ring", 3, network_topology={"mode": "hard", "highestTierAllowed": 2})
    where = sc.wait_bound(names)
    cliques = {sc.node_labels(node)[CLIQUE_LABEL] for node in where.values()}
    assert cliques == {f"{ns}-c1"}, where
    assert len(set(where.values())) == 3, where


def test_a_volcano_gang_whose_members_succeeded_ends_completed(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    sc.node("a", 8)
    sc.nodes_ready()
    names = volcano_gang(sc, "batch", 2, job="batch")
    sc.wait_bound(names)

    def completed() -> Obj | None:
        status: Obj = sc.api.get(volcano_path(sc, "batch")).get("status") or {}
        return status if status.get("phase") == "Completed" else None

    status = sc.wait("Volcano PodGroup status Completed", completed, timeout=15)
    assert status.get("succeeded") == 2, status
    assert status.get("running", 0) == 0, status


# ---- spec.minTaskMember ---------------------------------------------------------------------


def test_an_mpi_job_s_workers_wait_for_their_master_then_the_whole_job_binds(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Volcano's MPI example: minMember 3 and at least the master and 2 workers. Three
    workers alone are minMember members, but no master: nobody is placed, and the PodGroup
    says which task is short."""
    sc = judged(cluster)
    sc.node("a", 2 * GPUS)
    sc.node("b", 2 * GPUS)
    sc.nodes_ready()
    volcano_pod_group(sc, "mpi", 3, min_task_member={"master": 1, "worker": 2})
    workers = [task_member(sc, f"mpi-worker-{i}", "mpi", "worker") for i in range(3)]
    short = "task master has 0 of 1 member(s) (spec.minTaskMember)"
    sc.wait_unschedulable(workers[-1], short)

    def told() -> Obj | None:
        # The status follows the decisions about a second behind (written once per burst):
        # wait for the one made once all three workers existed.
        status: Obj = sc.api.get(volcano_path(sc, "mpi")).get("status") or {}
        condition: Obj
        for condition in status.get("conditions") or []:
            if condition.get("type") == "Unschedulable" and "3/3 exist" in str(
                condition.get("message")
            ):
                return condition
        return None

    condition = sc.wait("the PodGroup's Unschedulable condition, all workers there", told)
    assert condition["reason"] == "NotEnoughTasks", condition
    assert condition["message"] == f"waiting for gang members: 3/3 exist, but {short}", condition
    sc.assert_unbound_for(workers, 3.0)

    master = task_member(sc, "mpi-master-0", "mpi", "master")
    sc.wait_bound([master, *workers])


def test_an_elastic_gang_that_fits_only_its_quorum_binds_one_member_of_each_task(
    cluster: Scenario,  # noqa: F811
) -> None:
    """A TensorFlow-shaped job, 2 parameter servers and 3 workers, minMember 2 and at least
    one of each, on room for two members. The ps pods rank first (their names sort first):
    rank order alone would bind both ps pods, a quorum without a worker."""
    sc = judged(cluster)
    sc.node("a", 2 * GPUS)
    sc.nodes_ready()
    volcano_pod_group(sc, "tf", 2, min_task_member={"ps": 1, "worker": 1})
    names = [
        *(task_member(sc, f"tf-ps-{i}", "tf", "ps", gated=True) for i in range(2)),
        *(task_member(sc, f"tf-worker-{i}", "tf", "worker", gated=True) for i in range(3)),
    ]
    for name in names:  # released together: the gang is planned with every member known
        sc.ungate(name)

    def two_bound() -> list[str] | None:
        bound = [name for name, node in sc.placement(names).items() if node]
        return bound if len(bound) == 2 else None

    sc.wait("two members bound", two_bound)
    bound = [name for name, node in sc.wait_quiet().items() if node]
    assert sorted(task_of(sc, name) for name in bound) == ["ps", "worker"], bound


def test_bad_task_minima_are_refused_naming_the_entry_or_ignored_once(
    cluster: Scenario,  # noqa: F811
) -> None:
    """A negative minimum makes the PodGroup invalid (its members wait, told why); minima
    summing past minMember are not enforced, as Volcano skips them, and said once."""
    sc = judged(cluster)
    ns = sc.namespace
    sc.node("a", 3 * GPUS)  # room for all three: only the invalid gang keeps a pod out
    sc.nodes_ready()
    volcano_pod_group(sc, "negative", 1, min_task_member={"worker": -1})
    stray = task_member(sc, "negative-worker-0", "negative", "worker")
    volcano_pod_group(sc, "over", 2, min_task_member={"master": 1, "worker": 2})
    workers = [task_member(sc, f"over-worker-{i}", "over", "worker") for i in range(2)]

    sc.wait_bound(workers)  # no master, yet bound: the minima are not enforced
    sc.wait_event(
        "negative",
        'spec.minTaskMember["worker"]: must be a non-negative integer, not -1',
        reason="InvalidObject",
    )
    sc.wait_event(stray, f"PodGroup volcano:{ns}/negative is invalid", reason="InvalidGang")
    ignored = sc.wait_event(
        "over",
        "spec.minTaskMember is not enforced: its minima sum to 3, more than spec.minMember (2)",
        reason="FieldIgnored",
    )
    assert ignored["count"] == 1, ignored
    assert sc.placement([stray]) == {stray: ""}


def test_each_volcano_subgroup_is_kept_within_its_own_tier(
    cluster: Scenario,  # noqa: F811
) -> None:
    """A Volcano Job's partitions (``spec.subGroupPolicy``, as its controller writes one for
    a task with a ``partitionPolicy``): the gang may spread over the leaf (tier 2), each
    partition only over one clique (tier 1). Clique 0 has two free nodes, clique 1 three;
    the partitions interleave by name, so packing the gang by name alone would split both."""
    sc = racks_one_node_busy(cluster)
    ns = sc.namespace
    sc.api.create(
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "tp"},
            "spec": {
                "minMember": 4,
                "networkTopology": {"mode": "hard", "highestTierAllowed": 2},
                "subGroupPolicy": [
                    {
                        "name": "worker",
                        "labelSelector": {"matchLabels": {TASK_SPEC: "worker"}},
                        "matchLabelKeys": [PARTITION],
                        "subGroupSize": 2,
                        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
                    }
                ],
            },
        },
    )
    names = [f"tp-{i}" for i in range(4)]
    for i, member in enumerate(names):
        body = pod_body(
            member,
            gpus=GPUS,
            node_selector=sc.selector,
            labels={TASK_SPEC: "worker", PARTITION: str(i % 2)},
            annotations={A_VOLCANO_GROUP: "tp", TASK_SPEC: "worker"},
            gated=True,
        )
        sc.api.create(f"/api/v1/namespaces/{ns}/pods", body)
    for member in names:
        sc.ungate(member)
    where = sc.wait_bound(names)
    for partition in (names[0::2], names[1::2]):
        cliques = {sc.node_labels(where[m])[CLIQUE_LABEL] for m in partition}
        assert len(cliques) == 1, where
    sc.wait_event("tp", "each subgroup of policy worker within one clique", reason="Reserved")
