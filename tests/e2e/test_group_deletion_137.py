"""An upstream PodGroup being deleted on Kubernetes 1.37, through its real kube-scheduler
(with its pod-group cycle) and Phalanx: as `test_group_deletion.py` shows for a
scheduler-plugins PodGroup, its gang's reservation is released, the bind held at the
barrier is answered, no member binds, and Phalanx writes no status to it any more.

Runs on ``control_plane_137`` (kube-apiserver and kube-scheduler 1.37.2, ``GenericWorkload``,
``scheduling.k8s.io/v1beta1``). kube-apiserver stamps ``scheduling.k8s.io/podgroup-protection``
on the PodGroup at creation, and still admits pods naming it once it is being deleted; no
kube-controller-manager runs, so the test removes the finalizers itself, as its
podgroup-protection controller would once no member is active.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Obj, Scenario, pod_body
from test_group_deletion import FINALIZER, exists

pytestmark = pytest.mark.e2e

API = "/apis/scheduling.k8s.io/v1beta1"
PROTECTION = "scheduling.k8s.io/podgroup-protection"


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> launcher.ControlPlane:
    return control_plane_137


@contextlib.contextmanager
def held_pod_group(sc: Scenario, name: str, min_count: int) -> Iterator[str]:
    """A `scheduling.k8s.io/v1beta1` PodGroup carrying a finalizer of the test's own (with
    any the API server adds), which is removed at the end whatever happens."""
    path = f"{API}/namespaces/{sc.namespace}/podgroups/{name}"
    sc.api.create(
        f"{API}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "finalizers": [FINALIZER]},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        },
    )
    try:
        yield path
    finally:
        if exists(sc, path):
            sc.api.merge_patch(path, {"metadata": {"finalizers": None}})


def member(sc: Scenario, name: str, group: str, gpus: int) -> Obj:
    body = pod_body(name, gpus=gpus, node_selector=sc.selector)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)


def phalanx_status_writes(sc: Scenario, path: str) -> list[str]:
    """When Phalanx last wrote the PodGroup's status (its managedFields entry's time)."""
    fields = sc.api.get(path)["metadata"].get("managedFields") or []
    return [
        f.get("time", "")
        for f in fields
        if f.get("subresource") == "status" and f.get("manager") == "phalanx"
    ]


def test_an_upstream_pod_group_being_deleted_releases_its_gang_and_binds_no_member(
    cluster: Scenario,  # noqa: F811
) -> None:
    sc = cluster
    sc.node("a", 8)
    sc.nodes_ready()
    with held_pod_group(sc, "doomed", 3) as path:
        member(sc, "doomed-0", "doomed", 2)
        sc.wait_event("doomed", "reserved 3 member(s)", reason="Reserved")
        sc.phalanx.wait_metric(
            "phalanx_barrier_waiting", lambda v: v == 1, what="the first member held at bind"
        )
        finalizers = sc.api.get(path)["metadata"].get("finalizers") or []
        assert PROTECTION in finalizers  # stamped at creation by kube-apiserver's admission

        sc.api.delete(path)

        named = f"PodGroup {sc.namespace}/doomed is being deleted"
        sc.phalanx.wait_metric(
            "phalanx_reserved_gpus", lambda v: v == 0, what="the reservation released"
        )
        sc.wait_event("doomed", named, reason="ReservationReleased")
        sc.wait_unschedulable("doomed-0", named)
        written = phalanx_status_writes(sc, path)
        # 1.37.2 admits members of a PodGroup being deleted: Phalanx refuses to place them.
        refused = [member(sc, f"doomed-{i}", "doomed", 2) for i in (1, 2)]
        for pod in refused:
            sc.wait_unschedulable(pod["metadata"]["name"], named)
        sc.assert_unbound_for([f"doomed-{i}" for i in range(3)], 1.0)
        assert phalanx_status_writes(sc, path) == written

        sc.api.merge_patch(path, {"metadata": {"finalizers": None}})

        sc.wait("the PodGroup gone", lambda: not exists(sc, path) or None)
        assert sc.phalanx.metric("phalanx_reserved_gpus") == 0
        assert sc.phalanx.metric("phalanx_barrier_waiting") == 0
        assert all(not node for node in sc.placement().values())
