"""A gang's end through the real control plane: a scheduler-plugins PodGroup whose members
ran ends ``Finished`` once minMember of them succeeded, and ``Failed`` once one failed and
the failed, running and succeeded make minMember (docs/gang-dialects.md, "Status"), as
scheduler-plugins' PodGroup controller ends it. Phalanx writes it; read back from the API.

kwok's ``pod-complete`` stage (tests/controlplane/stages) is the kubelet here: it completes
a Running pod owned by a Job. The members name a Job that does not exist; no garbage
collector runs in this tier (the DRA modules run kube-controller-manager with only the
resourceclaim controller), so nothing deletes them for it.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import POD_GROUP_LABEL, Obj, Scenario, owned_by_job, pod_body

pytestmark = pytest.mark.e2e


def members(sc: Scenario, gang: str, size: int, *, job: str | None = None) -> list[str]:
    """``size`` one-GPU members of PodGroup ``gang``, released together; ``job``: the Job
    they say they belong to (kwok completes such pods once they run)."""
    names = [f"{gang}-{i}" for i in range(size)]
    for name in names:
        body = pod_body(
            name, gpus=1, node_selector=sc.selector, labels={POD_GROUP_LABEL: gang}, gated=True
        )
        if job is not None:
            owned_by_job(body, job)
        sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    for name in names:
        sc.ungate(name)
    return names


def phases(sc: Scenario, names: list[str]) -> dict[str, str]:
    pods = sc.pods()
    return {n: str((pods.get(n, {}).get("status") or {}).get("phase")) for n in names}


def status_with(sc: Scenario, group: str, **want: object) -> Obj | None:
    status: dict[str, Any] = sc.get_pod_group(group).get("status") or {}
    return status if all(status.get(k) == v for k, v in want.items()) else None


def test_a_gang_whose_members_succeeded_ends_finished(cluster: Scenario) -> None:  # noqa: F811
    sc = cluster
    sc.node("a", 8)
    sc.nodes_ready()
    sc.pod_group("done", 2)
    names = members(sc, "done", 2, job="done")
    sc.wait_bound(names)
    sc.wait(
        "both members Succeeded (kwok's pod-complete stage)",
        lambda: set(phases(sc, names).values()) == {"Succeeded"},
    )
    status = sc.wait(
        "PodGroup status Finished, 2 succeeded",
        lambda: status_with(sc, "done", phase="Finished", succeeded=2),
        timeout=15,
    )
    assert status.get("failed", 0) == 0, status
    assert status.get("running", 0) == 0, status


def test_a_gang_one_of_whose_members_failed_ends_failed(cluster: Scenario) -> None:  # noqa: F811
    """kwok has no stage that fails a pod: the test reports the failure through the pod's
    ``/status``, as a kubelet whose container exited non-zero would."""
    sc = cluster
    sc.node("a", 8)
    sc.nodes_ready()
    sc.pod_group("broken", 2)
    names = members(sc, "broken", 2)
    sc.wait_bound(names)
    sc.wait(
        "PodGroup status Running (kwok's pod-ready stage)",
        lambda: status_with(sc, "broken", phase="Running", running=2),
        timeout=15,
    )
    sc.api.merge_patch(
        f"/api/v1/namespaces/{sc.namespace}/pods/{names[0]}/status",
        {"status": {"phase": "Failed", "reason": "Error", "message": "exit code 1"}},
    )
    status = sc.wait(
        "PodGroup status Failed, 1 failed, 1 running",
        lambda: status_with(sc, "broken", phase="Failed", failed=1, running=1),
        timeout=15,
    )
    assert status.get("succeeded", 0) == 0, status
    assert phases(sc, names) == {names[0]: "Failed", names[1]: "Running"}
