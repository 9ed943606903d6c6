"""The benchmark's workloads and contenders as data: upstream's gang shapes, the impossible
gangs, the two gang dialects, and the kube-scheduler configuration of each contender."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import schedulers  # bench/schedulers.py
import workloads  # bench/workloads.py
from workloads import Group, Member

from builders import present

CHART_VALUES = Path(__file__).resolve().parents[2] / "helm" / "phalanx" / "values.yaml"


@pytest.mark.parametrize(
    ("builder", "scale", "gangs", "size", "nodes"),
    [
        (workloads.upstream_small_gangs, 1.0, 500, 3, 1000),
        (workloads.upstream_small_gangs, 0.1, 50, 3, 100),
        (workloads.upstream_big_gangs, 1.0, 2, 1000, 1000),
        (workloads.upstream_big_gangs, 0.1, 2, 100, 100),
    ],
    ids=["small-full", "small-quick", "big-full", "big-quick"],
)
def test_upstream_gang_shapes_keep_their_gang_counts_and_sizes_at_scale(
    builder: workloads.Builder, scale: float, gangs: int, size: int, nodes: int
) -> None:
    work = builder(scale)
    assert (len(work.groups), work.nodes) == (gangs, nodes)
    assert {g.min_member for g in work.groups} == {size}
    assert len(work.pods) == gangs * size
    assert {(m.gpus, m.cpu_millis, m.memory_mib) for m in work.pods} == {(1, 100, 100)}
    assert work.all_fit
    assert work.feasible_gangs == gangs


def test_upstream_gang_members_arrive_gang_after_gang() -> None:
    work = workloads.upstream_small_gangs(0.01)
    groups = [present(m.group) for m in work.pods]  # every member is in a gang
    assert groups == sorted(groups)


@pytest.mark.parametrize(
    ("builder", "confined", "prefilled"),
    [(workloads.unschedulable_wide, True, 0), (workloads.unschedulable_full, False, 100 - 9)],
    ids=["wide", "full"],
)
def test_an_impossible_gang_fits_member_by_member_but_never_whole(
    builder: workloads.Builder, confined: bool, prefilled: int
) -> None:
    work = builder(0.1)
    reach = {workloads.node_name(i) for i in range(workloads.IMPOSSIBLE_REACH)}
    (group,) = work.groups
    assert group.min_member == len(work.pods) == 10
    assert sum(m.gpus for m in work.pods) == 80
    assert all(m.gpus == workloads.NODE_GPUS for m in work.pods)
    assert all(set(m.hosts) == (reach if confined else set()) for m in work.pods)
    assert len(work.prefill) == prefilled
    assert not {m.node for m in work.prefill} & reach  # the free nodes stay free
    assert work.impossible
    assert work.gated


def test_aliases_expand_in_order_without_repeats() -> None:
    assert workloads.expand(["unschedulable", "singles", "unschedulable-wide"]) == [
        "unschedulable-wide",
        "unschedulable-full",
        "singles",
    ]


# ---- the two dialects ---------------------------------------------------------------------------


def test_an_upstream_gang_is_a_v1beta1_podgroup_with_a_gang_policy() -> None:
    body = workloads.podgroup_body(Group("g", 3), "upstream")
    assert body["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}


def test_a_scheduler_plugins_gang_keeps_its_timeout() -> None:
    body = workloads.podgroup_body(Group("g", 3))
    assert body["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert body["spec"] == {
        "minMember": 3,
        "scheduleTimeoutSeconds": workloads.SCHEDULE_TIMEOUT_SECONDS,
    }


@pytest.mark.parametrize(
    ("dialect", "label", "scheduling_group"),
    [
        ("scheduler-plugins", "g", None),
        ("upstream", None, {"podGroupName": "g"}),
    ],
    ids=["scheduler-plugins-label", "upstream-scheduling-group"],
)
def test_a_member_names_its_gang_in_exactly_one_dialect(
    dialect: workloads.Dialect, label: str | None, scheduling_group: dict[str, str] | None
) -> None:
    body = workloads.pod_body(Member("g-0", 1, group="g"), "default-scheduler", dialect)
    assert body["metadata"]["labels"].get(workloads.GROUP_LABEL) == label
    assert body["spec"].get("schedulingGroup") == scheduling_group


def test_a_member_may_be_confined_gated_or_bound_at_creation() -> None:
    member = Member("x", 8, hosts=("n-0", "n-1"), node="n-0")
    spec = workloads.pod_body(member, "phalanx", gated=True)["spec"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {
        "matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n-0", "n-1"]}
        ]
    }
    assert spec["schedulingGates"] == [{"name": workloads.ARRIVAL_GATE}]
    assert spec["nodeName"] == "n-0"


# ---- the contenders ---------------------------------------------------------------------------


def test_native_runs_upstream_defaults_with_the_gang_gates_on_upstream_podgroups() -> None:
    native = schedulers.SCHEDULERS["native"]
    config = native.config()
    assert config["profiles"] == [{"schedulerName": "default-scheduler"}]
    assert "extenders" not in config
    assert dict(native.feature_gates) == {
        "GenericWorkload": True,
        "TopologyAwareWorkloadScheduling": True,
    }
    assert native.dialect == "upstream"
    assert native.binary == "kube-scheduler"


@pytest.mark.parametrize(
    "key", ["vanilla", "floor", "phalanx", "phalanx-queuesort", "coscheduling"]
)
def test_every_other_contender_reads_scheduler_plugins_gangs_with_default_gates(key: str) -> None:
    spec = schedulers.SCHEDULERS[key]
    assert spec.dialect == "scheduler-plugins"
    assert spec.feature_gates == ()


def test_the_phalanx_profile_disables_kube_schedulers_own_gang_plugins_as_the_chart_does() -> None:
    config = schedulers.SCHEDULERS["phalanx"].config("http://127.0.0.1:1")
    (profile,) = config["profiles"]
    disabled = {p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]}
    assert disabled == {"GangScheduling", "TopologyPlacementGenerator", "PodGroupPodsCount"}


def test_phalanx_with_the_coscheduling_queue_runs_that_queue_sort_alone_in_front_of_phalanx() -> (
    None
):
    spec = schedulers.SCHEDULERS["phalanx-queuesort"]
    config = spec.config("http://127.0.0.1:1")
    (profile,) = config["profiles"]
    # The chart's profile with the queue sort: the native gang plugins stay disabled too.
    (default,) = schedulers.SCHEDULERS["phalanx"].config("http://127.0.0.1:1")["profiles"]
    assert profile["plugins"] == {
        "multiPoint": default["plugins"]["multiPoint"],
        "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
    }
    assert "pluginConfig" not in profile
    assert spec.binary == schedulers.SCHEDULER_PLUGINS_BINARY
    (extender,) = config["extenders"]
    assert extender["bindVerb"] == "bind"
    assert config["percentageOfNodesToScore"] == 100
    # Coscheduling itself sorts its queue the same way, and its other points stay its own.
    (cosched,) = schedulers.SCHEDULERS["coscheduling"].config()["profiles"]
    assert cosched["plugins"]["queueSort"] == profile["plugins"]["queueSort"]


def test_the_coscheduling_queue_variant_runs_only_the_fast_path_workloads() -> None:
    spec = schedulers.SCHEDULERS["phalanx-queuesort"]
    assert spec.workloads is not None
    assert set(spec.workloads) == {"singles", "gangs", "contended", "plans", "big-gang"}
    assert set(spec.workloads) <= set(workloads.BUILDERS)
    assert schedulers.SCHEDULERS["phalanx"].workloads is None


@pytest.mark.parametrize(
    ("shape", "constraints"),
    [
        ("72gpu", {"topology": [{"key": workloads.CLIQUE_LABEL}]}),
        ("32gpu", {"topology": [{"key": workloads.LEAF_LABEL}]}),
        ("16gpu", None),  # a preferred level only: upstream has no way to say it
    ],
    ids=["required-clique", "required-leaf-preferred-clique", "preferred-only"],
)
def test_a_churn_job_for_native_states_its_required_level_as_the_pod_groups_topology(
    shape: str, constraints: dict[str, object] | None
) -> None:
    [kind] = [s for s in workloads.JOB_SHAPES if s.key == shape]
    job = workloads.Job("job-1", kind, arrival=0.0, duration=10.0)
    group = workloads.job_podgroup_body(job, "upstream")
    assert group["apiVersion"] == workloads.UPSTREAM_PODGROUP_API
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": kind.members}}
    assert group["spec"].get("schedulingConstraints") == constraints
    assert group["metadata"]["labels"] == {workloads.JOB_LABEL: "job-1"}
    pod = workloads.job_pod_body(job, job.members[0], "native", "upstream")
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "job-1"}
    assert pod["spec"]["nodeSelector"] == {workloads.POOL_LABEL: workloads.NVL72_POOL}
    assert workloads.group_path("upstream", "ns") == (
        "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups"
    )


@pytest.mark.parametrize("key", ["phalanx", "phalanx-queuesort"])
def test_phalanx_runs_with_the_charts_queue_backoff_and_the_others_with_upstreams(key: str) -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())["kubeScheduler"]
    config = schedulers.SCHEDULERS[key].config("http://127.0.0.1:1")
    assert config["podInitialBackoffSeconds"] == values["podInitialBackoffSeconds"]
    assert config["podMaxBackoffSeconds"] == values["podMaxBackoffSeconds"]
    for other in ("vanilla", "coscheduling"):
        assert "podMaxBackoffSeconds" not in schedulers.SCHEDULERS[other].config()
    assert "podMaxBackoffSeconds" not in schedulers.SCHEDULERS["floor"].config("http://127.0.0.1:1")
