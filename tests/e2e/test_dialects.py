"""Every gang dialect through the real kube-scheduler (1.35) and Phalanx: a gang in each
becomes whole, its status is written in the dialect's own terms (read back from the API),
bad input gets a clear Event and affects nothing else, and kube-scheduler's own gang
scheduling stays out of the way in the supported setup.

This module runs a control plane of its own: kube-apiserver with the ``GenericWorkload``
gate and ``scheduling.k8s.io/v1alpha1`` served (1.35's ``Workload``), kube-scheduler with
``GenericWorkload`` and ``GangScheduling`` on (its native gang plugin exists, and the
chart's profile disables it), the scheduler-plugins and Volcano PodGroup CRDs installed
before Phalanx starts; KAI's PodGroup CRD is installed by the last test, while Phalanx runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import planes
import pytest
from conftest_scheduling import (  # noqa: F401  # fixtures
    Scheduler,
    cluster,
    native_gang_left_on,
    phalanx,
    scheduler,
    scheduler_config,
)
from kai import ensure_kai_crd, kai_pod_group, kai_sizes
from podgroup_crd import ensure_pod_group_crd
from scheduling import (
    A_KAI_GROUP,
    A_VOLCANO_GROUP,
    POD_GROUP_LABEL,
    Api,
    Obj,
    Scenario,
    pod_body,
)
from volcano import VOLCANO_API, ensure_volcano_crd, volcano_pod_group, volcano_sizes

pytestmark = pytest.mark.e2e

# 1.35's upstream gang API: GenericWorkload and scheduling.k8s.io/v1alpha1 on
# kube-apiserver; GenericWorkload and GangScheduling on kube-scheduler.
GANG_API_135 = launcher.NATIVE_GANG_API["1.35"]

WORKLOAD_API = "/apis/scheduling.k8s.io/v1alpha1"


@pytest.fixture(scope="module")
def control_plane(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """This module's control plane (see the module docstring); replaces the session's."""
    with planes.started(
        pytestconfig,
        "control_plane",
        apiserver_feature_gates=GANG_API_135.apiserver_feature_gates,
        runtime_config=GANG_API_135.runtime_config,
        scheduler_feature_gates=GANG_API_135.scheduler_feature_gates,
    ) as cp:
        ensure_volcano_crd(cp)
        ensure_pod_group_crd(cp)
        launcher.wait_for(
            "Workloads served", lambda: cp.request("GET", WORKLOAD_API)[0] == 200, timeout=30
        )
        yield cp


# ---- the other dialects' objects -----------------------------------------------------------


def workload(sc: Scenario, name: str, pod_groups: Mapping[str, int | None]) -> Obj:
    return sc.api.create(
        f"{WORKLOAD_API}/namespaces/{sc.namespace}/workloads",
        workload_body(name, pod_groups),
    )


def workload_body(name: str, pod_groups: Mapping[str, int | None]) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "podGroups": [
                {
                    "name": group,
                    "policy": {"basic": {}} if count is None else {"gang": {"minCount": count}},
                }
                for group, count in pod_groups.items()
            ]
        },
    }


def member(
    sc: Scenario,
    name: str,
    gpus: int,
    *,
    volcano: str | None = None,
    workload_ref: Mapping[str, str] | None = None,
    gated: bool = True,
) -> Obj:
    """A pod of another dialect's gang (behind a scheduling gate unless `gated` is False)."""
    body = pod_body(
        name,
        gpus=gpus,
        node_selector=sc.selector,
        annotations={A_VOLCANO_GROUP: volcano} if volcano else None,
        gated=gated,
    )
    if workload_ref is not None:
        body["spec"]["workloadRef"] = dict(workload_ref)
    return sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)


def workload_sizes(api: Api, namespace: str) -> dict[str, int]:
    return {
        f"upstream:{w['metadata']['name']}/{group['name']}": int(
            (group["policy"].get("gang") or {}).get("minCount") or 0
        )
        for w in api.items(f"{WORKLOAD_API}/namespaces/{namespace}/workloads")
        for group in w["spec"]["podGroups"]
    }


def judged(sc: Scenario) -> Scenario:
    """Make the invariant monitor judge Volcano and Workload gangs too."""
    sc.monitor.gang_sizes.extend([volcano_sizes, workload_sizes])
    return sc


def ungate_all(sc: Scenario, names: list[str]) -> None:
    for name in names:
        sc.ungate(name)


# ---- a gang in each dialect ----------------------------------------------------------------


def test_a_volcano_gang_is_admitted_at_once_then_becomes_whole(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    volcano_pod_group(sc, "train", 3)
    names = [f"train-{i}" for i in range(3)]
    for name in names:
        member(sc, name, 4, volcano="train")
    path = f"{VOLCANO_API}/namespaces/{sc.namespace}/podgroups/train"
    # Volcano's job controller creates a job's pods only once its PodGroup left Pending.
    sc.wait(
        "the PodGroup admitted",
        lambda: (sc.api.get(path).get("status") or {}).get("phase") == "Inqueue",
    )
    ungate_all(sc, names)
    where = sc.wait_bound(names)
    assert len(set(where.values())) == 2, where

    def running() -> Obj | None:
        status = sc.api.get(path).get("status") or {}
        return status if status.get("phase") == "Running" else None

    status = sc.wait("Volcano's own status", running)
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "Scheduled"]
    assert [c["status"] for c in scheduled] == ["True"], status
    assert not [c for c in status["conditions"] if c.get("type") == "Unschedulable"], status
    assert sc.events("train", kind="PodGroup", reason="Bound")


def test_a_workload_gang_becomes_whole_and_is_told_on_its_workload(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    workload(sc, "train", {"workers": 3, "launcher": None})
    workers = [f"worker-{i}" for i in range(3)]
    for name in workers:
        member(sc, name, 4, workload_ref={"name": "train", "podGroup": "workers"})
    member(sc, "launcher", 0, workload_ref={"name": "train", "podGroup": "launcher"})
    ungate_all(sc, [*workers, "launcher"])
    where = sc.wait_bound([*workers, "launcher"])
    assert len({where[n] for n in workers}) == 2, where
    event = sc.wait_event("train", "bound 3 member(s) together", reason="Bound")
    assert event["involvedObject"]["kind"] == "Workload"
    assert event["involvedObject"]["apiVersion"] == "scheduling.k8s.io/v1alpha1"


@pytest.mark.parametrize("form", ["podgroup", "annotations"])
def test_the_first_two_dialects_still_become_whole(cluster: Scenario, form: str) -> None:  # noqa: F811
    cluster.node("a", 8)
    cluster.nodes_ready()
    gang = cluster.gang("g", 2, 4, form=form)
    cluster.wait_gang(gang)
    if form == "podgroup":
        # The status is written after the binds, not with them: wait for it, then judge it.
        def scheduled() -> dict[str, Any] | None:
            status: dict[str, Any] = cluster.get_pod_group("g").get("status") or {}
            return status if status.get("phase") in ("Scheduled", "Running") else None

        status = cluster.wait("the PodGroup's status says Scheduled", scheduled, timeout=15)
        assert status["conditions"][0]["type"] == "PodGroupScheduled"
        assert status["conditions"][0]["status"] == "True", status


# ---- bad input: a clear Event, nothing else affected ---------------------------------------


def test_each_bad_gang_gets_a_clear_event_and_a_good_gang_still_binds(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    ns = sc.namespace
    # A pod naming a Volcano PodGroup that does not exist.
    member(sc, "orphan", 1, volcano="ghost", gated=False)
    # A Workload whose podGroups lack the group its pod names.
    workload(sc, "lacking", {"workers": 1})
    member(sc, "stray", 1, workload_ref={"name": "lacking", "podGroup": "ps"}, gated=False)
    # minMember 0 (Volcano's CRD allows it); minCount 0 the API server refuses itself.
    volcano_pod_group(sc, "zero", 0)
    member(sc, "nobody", 1, volcano="zero", gated=False)
    refused = sc.api.call(
        "POST",
        f"{WORKLOAD_API}/namespaces/{ns}/workloads",
        workload_body("zero", {"w": 0}),
        expect=(422,),
    )
    assert "spec.podGroups[0].policy.gang.minCount" in refused["message"], refused
    # A pod-group label that is a legal label value but no PodGroup's name.
    sc.api.create(
        f"/api/v1/namespaces/{ns}/pods",
        pod_body(
            "mislabelled",
            gpus=1,
            node_selector=sc.selector,
            labels={"scheduling.x-k8s.io/pod-group": "MyJob"},
        ),
    )
    # A Volcano queue Phalanx does not have: ignored, said once, and the gang binds.
    volcano_pod_group(sc, "queued", 2, queue="research")
    queued = ["queued-0", "queued-1"]
    for name in queued:
        member(sc, name, 2, volcano="queued", gated=False)
    # And a good gang next to all of that.
    good = sc.gang("good", 2, 4)

    sc.wait_gang(good)
    sc.wait_bound(queued)
    sc.wait_event(
        "orphan",
        f"waiting for Volcano PodGroup {ns}/ghost (scheduling.volcano.sh/v1beta1) to exist",
    )
    sc.wait_event(
        "lacking",
        f'Workload {ns}/lacking has no pod group "ps" (spec.podGroups has "workers")',
        reason="InvalidGang",
    )
    sc.wait_event(
        "zero", "spec.minMember: must be a positive integer, not 0", reason="InvalidObject"
    )
    sc.wait_event("nobody", f"PodGroup volcano:{ns}/zero is invalid", reason="InvalidGang")
    ignored = sc.wait_event("queued", 'spec.queue: "research" is ignored', reason="FieldIgnored")
    assert ignored["count"] == 1
    sc.wait_event(
        "mislabelled",
        'label scheduling.x-k8s.io/pod-group: "MyJob" is not a valid PodGroup name',
        reason="InvalidObject",
    )
    unbound = ["orphan", "stray", "nobody", "mislabelled"]
    assert sc.placement(unbound) == dict.fromkeys(unbound, "")
    said = [
        r
        for r in sc.phalanx.log_records()
        if r.get("object") == f"volcano:{ns}/queued" and "research" in str(r.get("reason"))
    ]
    assert len(said) == 1, said


def test_a_pod_claimed_by_two_dialects_is_told_which_one_won(cluster: Scenario) -> None:  # noqa: F811
    sc = cluster
    sc.node("a", 8)
    sc.nodes_ready()
    body = pod_body(
        "both",
        gpus=1,
        node_selector=sc.selector,
        labels={POD_GROUP_LABEL: "sp"},
        annotations={A_VOLCANO_GROUP: "vc"},
    )
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    event = sc.wait_event(
        "both", "is claimed by more than one gang dialect", reason="GangDialectConflict"
    )
    assert f"scheduler-plugins group {sc.namespace}/sp wins" in event["message"]
    assert f"over volcano group volcano:{sc.namespace}/vc" in event["message"]


# ---- kube-scheduler's own gang scheduling ----------------------------------------------------


def test_the_supported_setup_keeps_kube_schedulers_gang_plugin_out_of_phalanxs_gangs(
    cluster: Scenario,  # noqa: F811
) -> None:
    """kube-scheduler here runs with GangScheduling's gate on and the chart's profile: a
    Workload gang created one member at a time is gated by Phalanx alone (kube-scheduler
    would hold the first members at PreEnqueue, and Phalanx would never see them), and
    Phalanx says nothing about native gang scheduling."""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.nodes_ready()
    workload(sc, "solo", {"workers": 2})
    member(sc, "w-0", 4, workload_ref={"name": "solo", "podGroup": "workers"}, gated=False)
    # Phalanx decides about the gang (waits, or reserves ahead for the missing member)
    # while one member exists: kube-scheduler did not hold w-0 back at PreEnqueue.
    sc.wait(
        "Phalanx's first decision about the gang",
        lambda: [e for e in sc.events("solo") if e.get("reportingComponent") == "phalanx"],
    )
    member(sc, "w-1", 4, workload_ref={"name": "solo", "podGroup": "workers"}, gated=False)
    sc.wait_bound(["w-0", "w-1"], timeout=60)
    assert not sc.events("solo", reason="NativeGangScheduling")


def test_a_profile_leaving_native_gang_scheduling_on_is_reported_at_start_and_on_each_gang(
    control_plane: launcher.ControlPlane,
    cluster: Scenario,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A misconfigured install: kube-scheduler (gates on) runs a profile without the chart's
    `multiPoint.disabled` list, and Phalanx is given that configuration. Phalanx says so at
    start and on the gang; kube-scheduler's PreEnqueue indeed holds the first member back
    (Phalanx never hears of it) until the whole gang exists."""
    sc = judged(cluster)
    sc.node("a", 8)
    sc.nodes_ready()
    with native_gang_left_on(control_plane, scheduler, sc, tmp_path):
        workload(sc, "late", {"workers": 2})
        member(sc, "w-0", 4, workload_ref={"name": "late", "podGroup": "workers"}, gated=False)
        event = sc.wait_event("late", "does not disable its own GangScheduling")
        assert (event["reason"], event["type"]) == ("NativeGangScheduling", "Warning")
        sc.assert_unbound_for(["w-0"], 3.0)
        decisions = [e for e in sc.events("late") if e["reason"] != "NativeGangScheduling"]
        assert decisions == [], decisions  # held at kube-scheduler's PreEnqueue, unseen
        member(sc, "w-1", 4, workload_ref={"name": "late", "podGroup": "workers"}, gated=False)
        sc.wait_bound(["w-0", "w-1"], timeout=60)


# ---- a gang API installed while Phalanx runs (last: KAI stays served after it) ---------------


def test_a_gang_crd_installed_while_phalanx_runs_is_followed_in_seconds_and_its_gang_binds(
    control_plane: launcher.ControlPlane,
    cluster: Scenario,  # noqa: F811
) -> None:
    """Phalanx runs as deployed: its periodic discovery of the gang APIs comes every 60 s.
    KAI's PodGroup CRD is installed now and a KAI gang submitted at once (KAI installed
    and a job run). The watch on CustomResourceDefinitions has Phalanx discover again
    within about a second, so the gang binds in seconds, not after up to a minute."""
    sc = cluster
    sc.monitor.gang_sizes.append(kai_sizes)
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    kind = "PodGroup (scheduling.run.ai/v2alpha2)"

    def followed() -> bool:
        return any(
            r.get("msg") == "following a gang kind" and r.get("kind") == kind
            for r in sc.phalanx.log_records()
        )

    assert not followed()
    installed = time.monotonic()
    ensure_kai_crd(control_plane)  # returns once it is Established and served
    kai_pod_group(sc, "late", 2)
    names = ["late-0", "late-1"]
    for name in names:
        body = pod_body(name, gpus=8, node_selector=sc.selector, annotations={A_KAI_GROUP: "late"})
        sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    sc.wait("KAI's PodGroups followed", followed, timeout=8.0)
    where = sc.wait_bound(names, timeout=15.0)
    assert len(set(where.values())) == 2, where
    assert time.monotonic() - installed < 20.0, "bound, but not within seconds"
