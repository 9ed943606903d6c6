"""A gang object being deleted, through the real kube-scheduler and Phalanx: a PodGroup held
by a finalizer after `kubectl delete` releases its gang's reservation, answers the bind held
at the barrier, and binds no member; once the finalizer goes, nothing is left behind.

The e2e control plane runs no kube-controller-manager, so nobody adds or removes finalizers
but the test: it plays the part of the operator (or of 1.37's podgroup-protection
controller) that holds the object while its workload is torn down.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import PG_API, Scenario

pytestmark = pytest.mark.e2e

FINALIZER = "phalanx.test/hold"


@contextlib.contextmanager
def held_pod_group(sc: Scenario, name: str, min_member: int) -> Iterator[str]:
    """A scheduler-plugins PodGroup carrying a finalizer of the test's own; the finalizer is
    removed at the end whatever happens (a held object would keep its namespace alive)."""
    path = f"{PG_API}/namespaces/{sc.namespace}/podgroups/{name}"
    sc.api.create(
        f"{PG_API}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "finalizers": [FINALIZER]},
            "spec": {"minMember": min_member},
        },
    )
    try:
        yield path
    finally:
        if exists(sc, path):
            sc.api.merge_patch(path, {"metadata": {"finalizers": None}})


def exists(sc: Scenario, path: str) -> bool:
    return sc.api.call("GET", path, expect=(200, 404)).get("kind") == "PodGroup"


def resource_version(sc: Scenario, path: str) -> str:
    version: str = sc.api.get(path)["metadata"]["resourceVersion"]
    return version


def test_a_pod_group_being_deleted_releases_its_reservation_and_binds_no_member(
    cluster: Scenario,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.nodes_ready()
    with held_pod_group(cluster, "doomed", 3) as path:
        # Part of the gang exists: its first member reserves the gang from its shape and
        # waits at the bind barrier for the others.
        gang = cluster.gang("doomed", 3, 2, create=1, create_pod_group=False)
        cluster.wait_event("doomed", "reserved 3 member(s)", reason="Reserved")
        cluster.phalanx.wait_metric(
            "phalanx_barrier_waiting", lambda v: v == 1, what="the first member held at bind"
        )
        gone_before = cluster.phalanx.metric("phalanx_releases_total", cause="group-gone")

        cluster.api.delete(path)  # the finalizer holds it: deletionTimestamp is set

        named = f"PodGroup {cluster.namespace}/doomed is being deleted"
        cluster.phalanx.wait_metric(
            "phalanx_reserved_gpus", lambda v: v == 0, what="the reservation released"
        )
        assert cluster.phalanx.metric("phalanx_barrier_waiting") == 0
        assert (
            cluster.phalanx.metric("phalanx_releases_total", cause="group-gone") - gone_before == 1
        )
        cluster.wait_event("doomed", named, reason="ReservationReleased")
        # The held bind failed; kube-scheduler's next attempt is refused naming the object.
        cluster.wait_unschedulable(gang.members[0], named)
        written = resource_version(cluster, path)
        cluster.add_member(gang, 1)
        cluster.add_member(gang, 2)  # the quorum exists now: still nobody is placed
        for member in gang.members[1:]:
            cluster.wait_unschedulable(member, named)
        cluster.assert_unbound_for(gang.members, 1.0)
        assert cluster.phalanx.metric("phalanx_reserved_gpus") == 0
        # Nothing was written to the object being deleted (no status, no commit record).
        assert resource_version(cluster, path) == written

        cluster.api.merge_patch(path, {"metadata": {"finalizers": None}})

        cluster.wait("the PodGroup gone", lambda: not exists(cluster, path) or None)
        # Gone for good: the members wait for a PodGroup of that name, as before one existed.
        view = cluster.wait(
            "Phalanx to forget the PodGroup",
            lambda: (
                v
                if (v := cluster.phalanx.debug_group(cluster.namespace, "doomed"))
                and v["source"] == "PodGroup missing"
                else None
            ),
        )
        assert view["error"].startswith(f"waiting for PodGroup {cluster.namespace}/doomed")
        assert cluster.phalanx.metric("phalanx_reserved_gpus") == 0
        assert cluster.phalanx.metric("phalanx_barrier_waiting") == 0
        assert cluster.bound_count(gang) == 0
