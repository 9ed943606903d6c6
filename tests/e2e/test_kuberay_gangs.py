"""KubeRay's ray-operator (v1.5.0) creating gangs that Phalanx schedules through the real
kube-scheduler, set up exactly as docs/gang-dialects.md ("KubeRay") says:

* the operator runs with ``--batch-scheduler=scheduler-plugins``: every pod it creates names
  ``schedulerName: scheduler-plugins-scheduler``, and a RayCluster labelled
  ``ray.io/gang-scheduling-enabled`` gets a ``scheduling.x-k8s.io`` PodGroup of its head and
  workers;
* Phalanx and its kube-scheduler profile serve that scheduler name (the chart's
  ``schedulerName`` value sets both; here ``SCHEDULER_NAME``).

A RayCluster becomes one whole gang; a second that cannot fit holds nothing, not even its
CPU-only head, and becomes whole once the first one leaves.
"""

from __future__ import annotations

from collections.abc import Iterator

import kuberay
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Obj, Scenario

pytestmark = pytest.mark.e2e

SCHEDULER_NAME = kuberay.SCHEDULER_NAME  # the chart installed with schedulerName set to it


@pytest.fixture(scope="module")
def ray_operator(
    control_plane: launcher.ControlPlane, ray_operator_tools: launcher.RayOperatorTools
) -> Iterator[kuberay.RayOperator]:
    kuberay.install_crds(control_plane, ray_operator_tools)
    operator = kuberay.RayOperator(control_plane, ray_operator_tools)
    operator.start()
    yield operator
    operator.stop()


def ray_cluster(sc: Scenario, name: str, *, workers: int, worker_gpus: int) -> Obj:
    """A gang-labelled RayCluster whose pods stay in this test's node pool."""
    body = kuberay.ray_cluster(name, workers=workers, worker_gpus=worker_gpus)
    spec = body["spec"]
    for group in (spec["headGroupSpec"], *spec["workerGroupSpecs"]):
        group["template"]["spec"]["nodeSelector"] = dict(sc.selector)
    return sc.api.create(f"{kuberay.RAY_API}/namespaces/{sc.namespace}/rayclusters", body)


def pods_of(sc: Scenario, name: str, count: int, operator: kuberay.RayOperator) -> list[str]:
    """The names of the cluster's pods, once the operator has created `count` of them."""

    def created() -> list[str] | None:
        operator.component.check_alive()
        pods = [
            p
            for p in sc.pods().values()
            if p["metadata"]["labels"].get(kuberay.CLUSTER_LABEL) == name
        ]
        return sorted(p["metadata"]["name"] for p in pods) if len(pods) == count else None

    return sc.wait(f"{count} pods of RayCluster {name}", created, timeout=90)


def test_a_raycluster_is_one_whole_gang_and_a_second_holds_nothing_until_the_first_leaves(
    cluster: Scenario,  # noqa: F811
    ray_operator: kuberay.RayOperator,
) -> None:
    sc = cluster
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()

    ray_cluster(sc, "first", workers=4, worker_gpus=4)  # head + 16 GPUs: the whole pool
    first = pods_of(sc, "first", 5, ray_operator)
    where = sc.wait_bound(first, timeout=60)
    assert sorted(n for p, n in where.items() if "worker" in p) == sorted(
        [f"{sc.namespace}-a"] * 2 + [f"{sc.namespace}-b"] * 2
    ), where
    assert sc.get_pod_group("first")["spec"]["minMember"] == 5  # KubeRay's: workers + head
    sc.wait(
        "the PodGroup's status says placed",
        lambda: (
            (sc.get_pod_group("first").get("status") or {}).get("phase") in ("Scheduled", "Running")
        ),
    )

    ray_cluster(sc, "second", workers=2, worker_gpus=4)
    second = pods_of(sc, "second", 3, ray_operator)
    sc.wait_event("second", "cannot place 3 member(s)", reason="Unschedulable")
    sc.assert_unbound_for(second, 3.0)  # not even the CPU-only head

    # The first leaves: its RayCluster, then its pods (no garbage collector runs here).
    sc.api.delete(f"{kuberay.RAY_API}/namespaces/{sc.namespace}/rayclusters/first")
    sc.delete_pods(first)
    sc.wait_bound(second, timeout=90)
    sc.wait_event("second", "bound 3 member(s) together", reason="Bound")
