"""The Helm chart helm/phalanx: lints, renders, and renders what DESIGN §2 and §8 require."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploykit import (
    CHART,
    NAMESPACE,
    RELEASE,
    REPO,
    VERSIONS,
    Chart,
    Doc,
    container,
    env_of,
    one,
    run,
    scheduler_config,
)

from phalanx.core.groups.coexistence import native_gang_profiles
from phalanx.core.groups.status import GroupPhase
from phalanx.core.topology import parse_topologies
from phalanx.service.binder import BindSettings
from phalanx.settings import Settings

MONITORING_ON = {
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "grafanaDashboard": {"enabled": True},
}
CUSTOM_NAME = {
    "schedulerName": "gpu-gang",
    "kubeScheduler": {"extender": {"httpTimeoutSeconds": 60}},
    "phalanx": {"barrierTimeoutSeconds": 45.5, "reservationTtlSeconds": 120, "port": 18888},
}
COSCHEDULING = {"kubeScheduler": {"queueSort": "Coscheduling"}}
VALUE_SETS = [
    pytest.param({}, id="defaults"),
    pytest.param({"replicaCount": 3}, id="three-replicas"),
    pytest.param(MONITORING_ON, id="monitoring-on"),
    pytest.param(CUSTOM_NAME, id="custom-scheduler-name"),
    pytest.param(COSCHEDULING, id="coscheduling-queue-sort"),
]
# Phalanx's deadline for a member's binding, which a held /bind adds to its barrier wait.
BIND_DEADLINE = BindSettings().timeout_seconds


def duration_seconds(text: str) -> float:
    """A Go duration as kube-scheduler's config holds it ("30s", "1m30s")."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", text)
    assert parts, f"not a duration: {text!r}"
    assert "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


# ---- lint and render -----------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS)
def test_chart_lints_without_warnings(chart: Chart, values: dict[str, Any]) -> None:
    proc = chart.lint(values)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout, proc.stdout
    assert "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("values", VALUE_SETS)
def test_chart_renders_the_scheduler_pod_and_its_permissions(
    chart: Chart, values: dict[str, Any]
) -> None:
    kinds = sorted(d["kind"] for d in chart.render(values))
    for kind in ("ConfigMap", "Deployment", "Service", "ServiceAccount", "ClusterRole"):
        assert kind in kinds
    assert kinds.count("ClusterRoleBinding") == 3  # Phalanx, system:kube-scheduler, volume
    assert kinds.count("RoleBinding") == 2  # leases, kube-system authentication reader


def test_both_containers_get_kube_schedulers_api_priority_level(chart: Chart) -> None:
    docs = chart.render()
    schema = one(docs, "FlowSchema")["spec"]
    account = one(docs, "ServiceAccount")["metadata"]
    assert schema["priorityLevelConfiguration"] == {"name": "workload-high"}
    # Ahead of `service-accounts` (9000) and `kube-system-service-accounts` (900).
    assert schema["matchingPrecedence"] < 900
    (rule,) = schema["rules"]
    assert rule["subjects"] == [
        {
            "kind": "ServiceAccount",
            "serviceAccount": {"name": account["name"], "namespace": account["namespace"]},
        }
    ]
    assert rule["resourceRules"][0]["clusterScope"] is True
    assert rule["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def test_the_flow_schema_follows_its_values_or_is_left_out(chart: Chart) -> None:
    values = {"apiPriority": {"priorityLevel": "scheduler-high", "matchingPrecedence": 500}}
    schema = one(chart.render(values), "FlowSchema")["spec"]
    assert (schema["priorityLevelConfiguration"]["name"], schema["matchingPrecedence"]) == (
        "scheduler-high",
        500,
    )
    assert "FlowSchema" not in {d["kind"] for d in chart.render({"apiPriority": {"create": False}})}


def test_optional_monitoring_objects_render_only_when_enabled(chart: Chart) -> None:
    optional = {"ServiceMonitor", "PrometheusRule"}
    assert not optional & {d["kind"] for d in chart.render()}
    docs = chart.render(MONITORING_ON)
    assert optional <= {d["kind"] for d in docs}
    dashboard = one(docs, "ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_replica_count_is_rendered(chart: Chart) -> None:
    assert one(chart.render({"replicaCount": 3}), "Deployment")["spec"]["replicas"] == 3


def test_scheduler_name_names_the_profile_and_what_phalanx_serves(chart: Chart) -> None:
    docs = chart.render(CUSTOM_NAME)
    assert [p["schedulerName"] for p in scheduler_config(docs)["profiles"]] == ["gpu-gang"]
    assert env_of(container(docs, "phalanx"))["PHALANX_SCHEDULER_NAMES"] == "gpu-gang"


def test_topologies_reach_phalanx_and_parse_as_phalanx_reads_them(chart: Chart) -> None:
    text = "default=x.io/row,x.io/rack,kubernetes.io/hostname\ncpu=x.io/zone\n"
    env = env_of(container(chart.render({"phalanx": {"topologies": text}}), "phalanx"))
    assert env["PHALANX_TOPOLOGIES"] == text
    parsed = parse_topologies(env["PHALANX_TOPOLOGIES"])
    assert [t.name for t in parsed.all] == ["default", "cpu"]


def test_without_topologies_phalanx_uses_its_default_one(chart: Chart) -> None:
    assert "PHALANX_TOPOLOGIES" not in env_of(container(chart.render(), "phalanx"))


@pytest.mark.parametrize(
    ("value", "variable", "field"),
    [
        pytest.param("nominateMembers", "PHALANX_NOMINATE_MEMBERS", "nominate_members", id="nom"),
        pytest.param("completeMembers", "PHALANX_COMPLETE_MEMBERS", "complete_members", id="comp"),
    ],
)
@pytest.mark.parametrize(("off", "expected"), [(False, True), (True, False)], ids=["on", "off"])
def test_a_member_switch_reaches_phalanx_as_the_setting_it_parses(
    chart: Chart, value: str, variable: str, field: str, off: bool, expected: bool
) -> None:
    values = {"phalanx": {value: False}} if off else {}
    env = env_of(container(chart.render(values), "phalanx"))
    assert env[variable] == str(expected).lower()
    parsed: dict[str, Any] = {field: env[variable]}  # the env string, as pydantic parses it
    assert getattr(Settings(**parsed), field) is expected


def gates(*args: str) -> dict[str, Any]:
    return {"kubeScheduler": {"extraArgs": list(args)}}


def scheduler_tag(tag: str, **more: Any) -> dict[str, Any]:
    return {"kubeScheduler": {"image": {"tag": tag}, **more}}


@pytest.mark.parametrize(
    ("values", "cluster", "expected"),
    [
        # The gate is off by default before 1.36; the default kube-scheduler is the cluster's.
        pytest.param({}, "1.35.0", False, id="default-on-1.35"),
        pytest.param({}, "1.36.2", True, id="default-on-1.36"),
        pytest.param(scheduler_tag("v1.35.4"), "1.36.0", False, id="v1.35-on-1.36"),
        pytest.param(
            gates("--v=3", "--feature-gates=SomeGate=true,DRAExtendedResource=true"),
            "1.36.0",
            True,
            id="v1.35-gate-on",
        ),
        pytest.param(
            gates("--feature-gates", "DRAExtendedResource=True"), "1.35.0", True, id="gate-apart"
        ),
        pytest.param(
            gates(
                "--feature-gates=DRAExtendedResource=true",
                "--feature-gates=DRAExtendedResource=false",
            ),
            "1.35.0",
            False,
            id="last-gate-wins",
        ),
        pytest.param(scheduler_tag("v1.36.1"), "1.36.1", True, id="v1.36"),
        pytest.param(scheduler_tag("v1.37.2"), "1.37.2", True, id="v1.37"),
        pytest.param(
            scheduler_tag("v1.36.1", extraArgs=["--feature-gates=DRAExtendedResource=false"]),
            "1.36.1",
            False,
            id="v1.36-gate-off",
        ),
        # scheduler-plugins v0.34.7 embeds kube-scheduler 1.34.
        pytest.param(COSCHEDULING, "1.35.0", False, id="coscheduling-v0.34"),
        # Not a release: nothing to judge it by, so the 1.36+ default.
        pytest.param(scheduler_tag("latest"), "1.37.0", True, id="not-a-release"),
        pytest.param({"phalanx": {"draExtendedResources": True}}, "1.35.0", True, id="said-on"),
        pytest.param(
            {**scheduler_tag("v1.37.2"), "phalanx": {"draExtendedResources": False}},
            "1.37.2",
            False,
            id="said-off",
        ),
    ],
)
def test_phalanx_is_told_whether_the_charts_kube_scheduler_serves_extended_resources_from_dra(
    chart: Chart, values: dict[str, Any], cluster: str, expected: bool
) -> None:
    proc = chart.template(values, "--kube-version", cluster)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    value = env_of(container(docs, "phalanx"))["PHALANX_DRA_EXTENDED_RESOURCES"]
    assert value == str(expected).lower()
    # the env string, as pydantic parses it
    parsed = Settings(dra_extended_resources=value)  # type: ignore[arg-type]
    assert parsed.dra_extended_resources is expected


def test_the_profile_disables_kube_schedulers_gang_plugins_and_phalanx_reads_it(
    chart: Chart,
) -> None:
    docs = chart.render(CUSTOM_NAME)
    config = scheduler_config(docs)
    assert native_gang_profiles(config, {"gpu-gang"}) == ()
    (profile,) = config["profiles"]
    assert [p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]] == [
        "GangScheduling",
        "TopologyPlacementGenerator",
        "PodGroupPodsCount",
    ]
    phalanx = container(docs, "phalanx")
    path = env_of(phalanx)["PHALANX_SCHEDULER_CONFIG"]
    mounts = {m["name"]: m["mountPath"] for m in phalanx["volumeMounts"]}
    assert path == f"{mounts['scheduler-config']}/kube-scheduler.yaml"


# ---- the queue order (kubeScheduler.queueSort) ---------------------------------------


def test_coscheduling_queue_sort_renders_its_queue_sort_alone_and_scheduler_plugins_image(
    chart: Chart,
) -> None:
    values = {"kubeScheduler": {"queueSort": "Coscheduling", "image": {"pullPolicy": "Always"}}}
    docs = chart.render(values)
    config = scheduler_config(docs)
    (profile,) = config["profiles"]
    assert profile["plugins"]["queueSort"] == {
        "enabled": [{"name": "Coscheduling"}],
        "disabled": [{"name": "*"}],
    }
    # Only the QueueSort: no other extension point of Coscheduling, so no arguments for it.
    assert set(profile["plugins"]) == {"queueSort", "multiPoint"}
    assert "pluginConfig" not in profile
    assert native_gang_profiles(config, {"phalanx"}) == ()
    scheduler = container(docs, "kube-scheduler")
    assert scheduler["image"] == (
        f"registry.k8s.io/scheduler-plugins/kube-scheduler:{VERSIONS['SCHEDULER_PLUGINS_VERSION']}"
    )
    assert scheduler["imagePullPolicy"] == "Always"  # kubeScheduler.image's


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="default"),
        pytest.param({"kubeScheduler": {"queueSort": "PrioritySort"}}, id="prioritysort"),
    ],
)
def test_prioritysort_renders_no_queue_sort_and_upstreams_image(
    chart: Chart, values: dict[str, Any]
) -> None:
    docs = chart.render(values)
    (profile,) = scheduler_config(docs)["profiles"]
    assert set(profile["plugins"]) == {"multiPoint"}
    image = container(docs, "kube-scheduler")["image"]
    assert image == f"registry.k8s.io/kube-scheduler:{VERSIONS['KUBE_VERSION']}"
    assert docs == chart.render()


def test_coscheduling_queue_sort_may_read_pod_groups_as_the_shared_service_account(
    chart: Chart,
) -> None:
    docs = chart.render(COSCHEDULING)
    account = one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    bound = {
        b["roleRef"]["name"]
        for b in docs
        if b["kind"] == "ClusterRoleBinding"
        and {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} in b["subjects"]
    }
    verbs = {
        verb
        for role in docs
        if role["kind"] == "ClusterRole" and role["metadata"]["name"] in bound
        for rule in role["rules"]
        if "scheduling.x-k8s.io" in rule["apiGroups"] and "podgroups" in rule["resources"]
        for verb in rule["verbs"]
    }
    assert {"get", "list", "watch"} <= verbs  # Coscheduling's PodGroup informer


# ---- cross-field rules, checked at render ---------------------------------------------


def refusal(chart: Chart, values: dict[str, Any]) -> str:
    """Why rendering `values` fails (the test fails if it renders)."""
    proc = chart.template(values)
    assert proc.returncode != 0, "rendered"
    return proc.stderr


@pytest.mark.parametrize(
    ("barrier", "http_timeout"),
    [
        pytest.param(22, 30, id="within-the-bind-deadline"),
        pytest.param(30 - BIND_DEADLINE, 30, id="exactly-the-bind-deadline"),
        pytest.param(30, 30, id="equal"),
        pytest.param(45, 30, id="above"),
    ],
)
def test_a_barrier_that_leaves_the_bind_no_time_before_the_http_timeout_is_refused_at_render(
    chart: Chart, barrier: float, http_timeout: int
) -> None:
    values = {
        "phalanx": {"barrierTimeoutSeconds": barrier, "reservationTtlSeconds": 600},
        "kubeScheduler": {"extender": {"httpTimeoutSeconds": http_timeout}},
    }
    why = refusal(chart, values)
    assert (
        f"phalanx.barrierTimeoutSeconds ({barrier:g}) plus {BIND_DEADLINE:g} s must be below "
        f"kubeScheduler.extender.httpTimeoutSeconds ({http_timeout})"
    ) in why
    assert "Lower the barrier or raise the httpTimeout" in why


def test_a_barrier_more_than_the_bind_deadline_below_the_http_timeout_renders(
    chart: Chart,
) -> None:
    barrier = 30 - BIND_DEADLINE - 0.5
    values = {
        "phalanx": {"barrierTimeoutSeconds": barrier},
        "kubeScheduler": {"extender": {"httpTimeoutSeconds": 30}},
    }
    env = env_of(container(chart.render(values), "phalanx"))
    assert float(env["PHALANX_BARRIER_TIMEOUT_SECONDS"]) == barrier


def test_barrier_timeout_at_or_above_the_reservation_ttl_fails_rendering(chart: Chart) -> None:
    values = {
        "phalanx": {"barrierTimeoutSeconds": 25, "reservationTtlSeconds": 20},
        "kubeScheduler": {"extender": {"httpTimeoutSeconds": 40}},
    }
    complaint = refusal(chart, values)
    assert "must be below phalanx.reservationTtlSeconds (20)" in complaint


def test_a_backoff_above_its_maximum_is_refused_at_render(chart: Chart) -> None:
    values = {"kubeScheduler": {"podInitialBackoffSeconds": 10, "podMaxBackoffSeconds": 5}}
    why = refusal(chart, values)
    assert (
        "kubeScheduler.podInitialBackoffSeconds (10) must not exceed "
        "kubeScheduler.podMaxBackoffSeconds (5)"
    ) in why


def test_a_backoff_equal_to_its_maximum_renders(chart: Chart) -> None:
    values = {"kubeScheduler": {"podInitialBackoffSeconds": 5, "podMaxBackoffSeconds": 5}}
    config = scheduler_config(chart.render(values))
    assert (config["podInitialBackoffSeconds"], config["podMaxBackoffSeconds"]) == (5, 5)


@pytest.mark.parametrize(
    ("timings", "complaint"),
    [
        pytest.param(
            {"leaseDuration": "10s", "renewDeadline": "10s"},
            "kubeScheduler.leaderElection.leaseDuration (10s) must be greater than "
            "kubeScheduler.leaderElection.renewDeadline (10s)",
            id="lease-equal-to-renew",
        ),
        pytest.param(
            {"leaseDuration": "1m", "renewDeadline": "1m30s"},
            "leaseDuration (1m) must be greater than kubeScheduler.leaderElection.renewDeadline",
            id="lease-below-renew-in-minutes",
        ),
        pytest.param(
            {"renewDeadline": "2400ms", "retryPeriod": "2s"},
            "kubeScheduler.leaderElection.renewDeadline (2400ms) must be greater than 1.2 x "
            "kubeScheduler.leaderElection.retryPeriod (2s)",
            id="renew-within-the-retry-jitter",
        ),
        pytest.param(
            {"retryPeriod": "0s"},
            "kubeScheduler.leaderElection.retryPeriod (0s) must be greater than zero",
            id="no-retry-period",
        ),
    ],
)
def test_leader_election_timings_kube_scheduler_refuses_are_refused_at_render(
    chart: Chart, timings: dict[str, str], complaint: str
) -> None:
    why = refusal(chart, {"kubeScheduler": {"leaderElection": timings}})
    assert complaint in why
    assert "kube-scheduler" in why.split(complaint, 1)[1]  # says who refuses it


@pytest.mark.parametrize(
    "election",
    [
        pytest.param(
            {"leaseDuration": "1m30s", "renewDeadline": "1m", "retryPeriod": "500ms"}, id="on"
        ),
        pytest.param(
            {"leaderElect": False, "leaseDuration": "1s", "renewDeadline": "1s"},
            id="off-ignores-the-timings",
        ),
    ],
)
def test_leader_election_timings_kube_scheduler_accepts_render(
    chart: Chart, election: dict[str, Any]
) -> None:
    rendered = scheduler_config(chart.render({"kubeScheduler": {"leaderElection": election}}))
    assert rendered["leaderElection"].items() >= election.items()


def test_several_replicas_without_leader_election_are_refused_at_render(chart: Chart) -> None:
    values = {"replicaCount": 2, "kubeScheduler": {"leaderElection": {"leaderElect": False}}}
    why = refusal(chart, values)
    assert "replicaCount (2) needs kubeScheduler.leaderElection.leaderElect: true" in why


def test_one_replica_without_leader_election_renders(chart: Chart) -> None:
    values = {"kubeScheduler": {"leaderElection": {"leaderElect": False}}}
    assert scheduler_config(chart.render(values))["leaderElection"]["leaderElect"] is False


@pytest.mark.parametrize(
    ("ports", "shown"),
    [
        pytest.param({"port": 9090}, "(9090), phalanx.metricsPort (9090)", id="extender-metrics"),
        pytest.param({"port": 10259}, "phalanx.port (10259)", id="extender-kube-scheduler"),
        pytest.param(
            {"metricsPort": 10259}, "phalanx.metricsPort (10259)", id="metrics-kube-scheduler"
        ),
    ],
)
def test_two_containers_listening_on_one_port_are_refused_at_render(
    chart: Chart, ports: dict[str, int], shown: str
) -> None:
    why = refusal(chart, {"phalanx": ports})
    assert shown in why
    assert "and kubeScheduler.securePort (10259) must all differ" in why


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        pytest.param({"replicaCount": 0}, "/replicaCount", id="no-replicas"),
        pytest.param({"phalanx": {"logLevel": "loud"}}, "/phalanx/logLevel", id="log-level"),
        pytest.param(
            {"phalanx": {"defaultPlacement": "scatter"}}, "defaultPlacement", id="placement"
        ),
        pytest.param({"replicas": 3}, "replicas", id="unknown-key"),
        pytest.param(
            {"phalanx": {"nominateMembers": "no"}}, "/phalanx/nominateMembers", id="nominate"
        ),
        pytest.param(
            {"phalanx": {"completeMembers": "no"}}, "/phalanx/completeMembers", id="complete"
        ),
        pytest.param(
            {"phalanx": {"topologies": 'default="a"'}}, "/phalanx/topologies", id="topologies"
        ),
        pytest.param(
            {"phalanx": {"draExtendedResources": "on"}},
            "'/phalanx/draExtendedResources': value must be one of 'auto', true, false",
            id="dra-extended-resources",
        ),
        pytest.param(
            {"kubeScheduler": {"queueSort": "Gang"}},
            "'/kubeScheduler/queueSort': value must be one of 'PrioritySort', 'Coscheduling'",
            id="queue-sort",
        ),
        pytest.param(
            {"kubeScheduler": {"coschedulingImage": {"tag": ""}}},
            "/kubeScheduler/coschedulingImage/tag",
            id="coscheduling-image-without-tag",
        ),
        pytest.param(
            {"kubeScheduler": {"leaderElection": {"leaseDuration": "15"}}},
            "leaseDuration",
            id="duration-without-unit",
        ),
        pytest.param(
            {"apiPriority": {"matchingPrecedence": 0}},
            "/apiPriority/matchingPrecedence",
            id="precedence-zero",
        ),
        pytest.param(
            {"apiPriority": {"matchingPrecedence": 10001}},
            "/apiPriority/matchingPrecedence",
            id="precedence-too-high",
        ),
        pytest.param(
            {"apiPriority": {"priorityLevel": ""}},
            "/apiPriority/priorityLevel",
            id="no-priority-level",
        ),
        pytest.param(
            {"phalanx": {"reportHoldSeconds": -1}},
            "/phalanx/reportHoldSeconds",
            id="negative-report-hold",
        ),
    ],
)
def test_values_schema_rejects_mistakes(
    chart: Chart, values: dict[str, Any], complaint: str
) -> None:
    assert complaint in refusal(chart, values)


# ---- the kube-scheduler configuration (DESIGN §2) ------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS)
def test_scheduler_config_is_the_reference_configuration(
    chart: Chart, values: dict[str, Any]
) -> None:
    docs = chart.render(values)
    config = scheduler_config(docs)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["percentageOfNodesToScore"] == 100
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceName"] == "phalanx-scheduler"
    assert election["resourceNamespace"] == NAMESPACE
    assert {"qps", "burst"} <= config["clientConnection"].keys()
    (extender,) = config["extenders"]
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert extender["weight"] == 10
    verbs = {k: v for k, v in extender.items() if k.endswith("Verb")}
    assert verbs == {
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "preemptVerb": "preempt",
        "bindVerb": "bind",
    }
    phalanx = container(docs, "phalanx")
    barrier = float(env_of(phalanx)["PHALANX_BARRIER_TIMEOUT_SECONDS"])
    assert duration_seconds(extender["httpTimeout"]) > barrier + BIND_DEADLINE


@pytest.mark.parametrize("values", VALUE_SETS)
def test_kube_scheduler_calls_the_phalanx_sidecar_on_loopback(
    chart: Chart, values: dict[str, Any]
) -> None:
    docs = chart.render(values)
    (extender,) = scheduler_config(docs)["extenders"]
    phalanx = container(docs, "phalanx")
    assert phalanx["command"] == ["phalanx", "serve"]  # whatever the image's entrypoint
    args = phalanx["args"]
    flags = dict(zip(args[1::2], args[2::2], strict=True))
    assert args[0] == "--in-cluster"
    assert flags["--host"] == "127.0.0.1"
    assert extender["urlPrefix"] == f"http://127.0.0.1:{flags['--port']}"
    assert flags["--metrics-host"] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container(docs, "phalanx")["ports"]}
    assert ports == {"http-metrics": int(flags["--metrics-port"])}


def test_a_config_change_rolls_the_pods(chart: Chart) -> None:
    def checksum(values: dict[str, Any]) -> str:
        pod = one(chart.render(values), "Deployment")["spec"]["template"]
        return str(pod["metadata"]["annotations"]["checksum/scheduler-config"])

    assert checksum({}) != checksum({"kubeScheduler": {"clientConnection": {"qps": 200}}})


MILLIONS = {
    "replicaCount": 1_000_000,
    "podDisruptionBudget": {"maxUnavailable": 1_000_000},
    "kubeScheduler": {
        "clientConnection": {"qps": 1_000_000, "burst": 2_000_000},
        "podInitialBackoffSeconds": 1_000_000,
        "podMaxBackoffSeconds": 2_000_000,
        "extender": {"weight": 1_000_000, "httpTimeoutSeconds": 3_000_000},
    },
    "phalanx": {
        "barrierTimeoutSeconds": 1_000_000,
        "reservationTtlSeconds": 2_000_000,
        "singlePodNodes": 1_000_000,
        "apiQps": 1_000_000,
        "apiBurst": 2_000_000,
        "reportHoldSeconds": 1_000_000,
    },
}


def test_numbers_of_a_million_or_more_render_as_written_and_phalanx_parses_them(
    chart: Chart,
) -> None:
    docs = chart.render(MILLIONS)
    assert one(docs, "Deployment")["spec"]["replicas"] == 1_000_000
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1_000_000
    config = scheduler_config(docs)
    assert config["clientConnection"] == {"qps": 1_000_000, "burst": 2_000_000}
    assert config["podInitialBackoffSeconds"] == 1_000_000
    assert config["podMaxBackoffSeconds"] == 2_000_000
    (extender,) = config["extenders"]
    assert (extender["weight"], extender["httpTimeout"]) == (1_000_000, "3000000s")
    env = env_of(container(docs, "phalanx"))
    settings = {
        "barrier_timeout_seconds": ("PHALANX_BARRIER_TIMEOUT_SECONDS", "1000000"),
        "reservation_ttl_seconds": ("PHALANX_RESERVATION_TTL_SECONDS", "2000000"),
        "single_pod_nodes": ("PHALANX_SINGLE_POD_NODES", "1000000"),
        "api_qps": ("PHALANX_API_QPS", "1000000"),
        "api_burst": ("PHALANX_API_BURST", "2000000"),
        "report_hold_seconds": ("PHALANX_REPORT_HOLD_SECONDS", "1000000"),
    }
    assert {var: env[var] for var, _ in settings.values()} == dict(settings.values())
    from_env: dict[str, Any] = {field: env[var] for field, (var, _) in settings.items()}
    parsed = Settings(**from_env)  # the env strings, as pydantic parses them
    assert parsed.reservation_ttl_seconds == 2_000_000
    assert parsed.api_burst == 2_000_000


def test_fractional_numbers_render_as_written(chart: Chart) -> None:
    values = {
        "kubeScheduler": {"clientConnection": {"qps": 50.5}},
        "phalanx": {"barrierTimeoutSeconds": 20.25, "apiQps": 2.5, "reportHoldSeconds": 0.75},
    }
    docs = chart.render(values)
    assert scheduler_config(docs)["clientConnection"]["qps"] == 50.5
    env = env_of(container(docs, "phalanx"))
    assert (env["PHALANX_BARRIER_TIMEOUT_SECONDS"], env["PHALANX_API_QPS"]) == ("20.25", "2.5")
    assert env["PHALANX_REPORT_HOLD_SECONDS"] == "0.75"


def test_by_default_status_and_events_wait_up_to_five_seconds_for_the_bindings(
    chart: Chart,
) -> None:
    field = "report_hold_seconds"
    env = env_of(container(chart.render(), "phalanx"))
    assert env["PHALANX_REPORT_HOLD_SECONDS"] == "5"
    on: dict[str, Any] = {field: env["PHALANX_REPORT_HOLD_SECONDS"]}  # as pydantic parses it
    assert Settings(**on).report_hold_seconds == 5
    env = env_of(container(chart.render({"phalanx": {"reportHoldSeconds": 0}}), "phalanx"))
    off: dict[str, Any] = {field: env["PHALANX_REPORT_HOLD_SECONDS"]}
    assert Settings(**off).report_hold_seconds == 0


# ---- pod hardening and probes --------------------------------------------------------


def test_pod_runs_non_root_with_a_read_only_root_filesystem(chart: Chart) -> None:
    docs = chart.render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True  # both containers call the API
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"]:
        ctx = c["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True, c["name"]
        assert ctx["allowPrivilegeEscalation"] is False, c["name"]
        assert ctx["capabilities"]["drop"] == ["ALL"], c["name"]
        assert "add" not in ctx["capabilities"], c["name"]
        assert c["resources"]["requests"], c["name"]
        assert c["resources"]["limits"]["memory"], c["name"]


def test_kube_scheduler_image_matches_the_tested_release(chart: Chart) -> None:
    image = container(chart.render(), "kube-scheduler")["image"]
    assert image == f"registry.k8s.io/kube-scheduler:{VERSIONS['KUBE_VERSION']}"


# ---- Kubernetes' version skew: kube-scheduler never newer, at most one minor older -------------

KUBE_SCHEDULER_135 = {"kubeScheduler": {"image": {"tag": "v1.35.4"}}}


@pytest.mark.parametrize(
    ("values", "cluster", "complaint"),
    [
        pytest.param(
            KUBE_SCHEDULER_135,
            "1.34.2",
            "kubeScheduler.image.tag (v1.35.4) runs kube-scheduler 1.35, newer than this "
            "cluster's Kubernetes v1.34.2",
            id="newer-than-the-cluster",
        ),
        pytest.param(
            KUBE_SCHEDULER_135,
            "1.37.2",
            "kubeScheduler.image.tag (v1.35.4) runs kube-scheduler 1.35, more than one minor "
            "older than this cluster's Kubernetes v1.37.2",
            id="two-minors-older",
        ),
        pytest.param(
            COSCHEDULING,
            "1.36.0",
            "kubeScheduler.coschedulingImage.tag (v0.34.7) runs kube-scheduler 1.34, more than "
            "one minor older than this cluster's Kubernetes v1.36.0",
            id="coscheduling-build-too-old",
        ),
        pytest.param({}, "1.33.0", "chart requires kubeVersion: >=1.34.0-0", id="below-1.34"),
    ],
)
def test_a_kube_scheduler_outside_the_clusters_version_skew_is_refused_at_render(
    chart: Chart, values: dict[str, Any], cluster: str, complaint: str
) -> None:
    proc = chart.template(values, "--kube-version", cluster)
    assert proc.returncode != 0, "rendered"
    assert complaint in proc.stderr


@pytest.mark.parametrize(
    ("values", "cluster"),
    [
        pytest.param(KUBE_SCHEDULER_135, "1.35.0", id="same-minor"),
        pytest.param(KUBE_SCHEDULER_135, "1.36.1", id="one-minor-older"),
        pytest.param({"kubeScheduler": {"image": {"tag": "v1.37.2"}}}, "1.37.2", id="on-1.37"),
        pytest.param(COSCHEDULING, "1.35.4", id="coscheduling-one-minor-older"),
        # A tag that is not a release (a mirror's own name, a digest) is not judged.
        pytest.param({"kubeScheduler": {"image": {"tag": "latest"}}}, "1.37.0", id="not-a-release"),
        # Providers append to the minor (GKE, EKS: "37+").
        pytest.param({"kubeScheduler": {"image": {"tag": "v1.37.1"}}}, "1.37.0-gke.1", id="gke"),
    ],
)
def test_a_kube_scheduler_within_the_clusters_version_skew_renders(
    chart: Chart, values: dict[str, Any], cluster: str
) -> None:
    proc = chart.template(values, "--kube-version", cluster)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("cluster", "image"),
    [
        pytest.param("1.34.2", "v1.34.2", id="1.34"),
        pytest.param("1.35.0", "v1.35.0", id="1.35"),
        pytest.param("1.36.1", "v1.36.1", id="1.36"),
        pytest.param("1.37.2", "v1.37.2", id="1.37"),
        # Providers' versions carry a suffix no upstream image has.
        pytest.param("1.37.2-eks-1a2b3c", "v1.37.2", id="eks"),
        pytest.param("1.36.4+k3s1", "v1.36.4", id="k3s"),
    ],
)
def test_the_default_kube_scheduler_is_the_clusters_own_release(
    chart: Chart, cluster: str, image: str
) -> None:
    # README's Install says so: no tag to set on any supported cluster.
    assert (
        "The chart's kube-scheduler is your cluster's own release"
        in (REPO / "README.md").read_text()
    )
    proc = chart.template({}, "--kube-version", cluster)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert container(docs, "kube-scheduler")["image"] == f"registry.k8s.io/kube-scheduler:{image}"


def test_a_kube_scheduler_1_37_told_to_turn_dra_extended_resource_off_is_refused_at_render(
    chart: Chart,
) -> None:
    # 1.37 locks the gate on (GA): such a kube-scheduler exits at start.
    values = gates("--feature-gates=DRAExtendedResource=false")
    proc = chart.template(values, "--kube-version", "1.37.2")
    assert proc.returncode != 0, "rendered"
    assert "has it locked on (GA since 1.37)" in proc.stderr
    assert chart.template(values, "--kube-version", "1.36.1").returncode == 0


def test_probes_watch_each_container_on_its_own_endpoint(chart: Chart) -> None:
    docs = chart.render()
    phalanx = container(docs, "phalanx")
    assert phalanx["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert phalanx["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    scheduler = container(docs, "kube-scheduler")
    assert scheduler["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "https-sched",
        "scheme": "HTTPS",
    }
    assert {p["name"]: p["containerPort"] for p in scheduler["ports"]} == {"https-sched": 10259}
    assert "--secure-port=10259" in scheduler["command"]


def test_metrics_service_and_service_monitor_reach_the_metrics_port(chart: Chart) -> None:
    docs = chart.render(MONITORING_ON)
    service = one(docs, "Service", "-metrics")
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (9090, "http-metrics")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    monitor = one(docs, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "http-metrics"


# ---- RBAC: least privilege -----------------------------------------------------------


def _rules(docs: list[Doc]) -> list[tuple[str, Doc]]:
    return [
        (f"{d['kind']}/{d['metadata']['name']}", rule)
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d.get("rules", [])
    ]


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rbac_has_no_wildcards(chart: Chart, values: dict[str, Any]) -> None:
    for where, rule in _rules(chart.render(values)):
        for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
            assert not any("*" in item for item in rule.get(field, [])), (where, rule)


@pytest.mark.parametrize("values", VALUE_SETS)
def test_nothing_is_bound_to_a_broad_built_in_role(chart: Chart, values: dict[str, Any]) -> None:
    allowed = {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "extension-apiserver-authentication-reader",
    }
    own = {
        d["metadata"]["name"] for d in chart.render(values) if d["kind"] in ("ClusterRole", "Role")
    }
    for binding in (d for d in chart.render(values) if d["kind"].endswith("Binding")):
        assert binding["roleRef"]["name"] in own | allowed, binding["metadata"]["name"]


def test_phalanx_cluster_role_grants_exactly_what_phalanx_calls(chart: Chart) -> None:
    role = one(chart.render(), "ClusterRole")
    granted = {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert granted == {
        ("", "nodes"): ["get", "list", "watch"],
        # patch: annotation-only commit records, and the requeue annotation
        ("", "pods"): ["get", "list", "patch", "watch"],
        ("", "pods/binding"): ["create"],
        ("", "pods/status"): ["patch"],  # nominatedNodeName of reserved members
        # Phalanx writes core/v1 Events only; kube-scheduler's events.k8s.io/v1 Events come
        # from system:kube-scheduler.
        ("", "events"): ["create", "patch"],
        # Coscheduling's QueueSort (kube-scheduler) only reads PodGroups: no update.
        ("scheduling.x-k8s.io", "podgroups"): ["get", "list", "patch", "watch"],
        # update: used by neither container; tests/e2e/test_chart_apply.py still expects it.
        ("scheduling.x-k8s.io", "podgroups/status"): ["patch"],
        ("scheduling.volcano.sh", "podgroups"): ["get", "list", "patch", "watch"],
        # KAI's CRD has a status subresource: the counts and scheduling condition go there.
        ("scheduling.run.ai", "podgroups"): ["get", "list", "patch", "watch"],
        ("scheduling.run.ai", "podgroups/status"): ["patch"],
        # Grove's PodGangs: followed; the commit record; phase and condition on /status.
        ("scheduler.grove.io", "podgangs"): ["get", "list", "patch", "watch"],
        ("scheduler.grove.io", "podgangs/status"): ["patch"],
        ("scheduling.k8s.io", "podgroups"): ["get", "list", "patch", "watch"],
        ("scheduling.k8s.io", "podgroups/status"): ["patch"],
        ("scheduling.k8s.io", "workloads"): ["get", "list", "watch"],
        # 1.37's composites: followed; a composite gang's commit record and condition.
        ("scheduling.k8s.io", "compositepodgroups"): ["get", "list", "patch", "watch"],
        ("scheduling.k8s.io", "compositepodgroups/status"): ["patch"],
        # CRDs, metadata only: a gang kind's CRD installed later is discovered at once.
        ("apiextensions.k8s.io", "customresourcedefinitions"): ["get", "list", "watch"],
        # DRA: read only (kube-scheduler allocates the claims).
        ("resource.k8s.io", "resourceslices"): ["get", "list", "watch"],
        ("resource.k8s.io", "deviceclasses"): ["get", "list", "watch"],
        ("resource.k8s.io", "resourceclaims"): ["get", "list", "watch"],
        ("resource.k8s.io", "resourceclaimtemplates"): ["get", "list", "watch"],
        # The taints they add to devices (served by 1.37, 1.36 with v1beta2 on, 1.35 with v1alpha3).
        ("resource.k8s.io", "devicetaintrules"): ["get", "list", "watch"],
    }


def test_lease_role_covers_only_the_two_named_leases(chart: Chart) -> None:
    role = one(chart.render(), "Role", "-leases")
    assert role["metadata"]["namespace"] == NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    unnamed = [r for r in role["rules"] if not r.get("resourceNames")]
    assert [r["verbs"] for r in unnamed] == [["create"]]  # create cannot name its object
    (rule,) = named
    assert sorted(rule["resourceNames"]) == ["phalanx-rollforward", "phalanx-scheduler"]
    assert sorted(rule["verbs"]) == ["get", "update"]


def test_kube_scheduler_gets_the_built_in_scheduler_roles(chart: Chart) -> None:
    docs = chart.render()
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["roleRef"]["name"])
        for d in docs
        if d["kind"].endswith("Binding")
    }
    assert ("ClusterRoleBinding", None, "system:kube-scheduler") in roles
    assert ("ClusterRoleBinding", None, "system:volume-scheduler") in roles
    assert ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader") in roles


def test_every_binding_names_the_chart_service_account(chart: Chart) -> None:
    docs = chart.render()
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == account
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        ]


# ---- the permissions, as documented --------------------------------------------------


def documented_cluster_role_rules() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """docs/operations.md's table of Phalanx's ClusterRole: (group, resources, verbs) a row."""
    doc = (REPO / "docs" / "operations.md").read_text()
    section = doc.split("### Permissions\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("| API group | resources | verbs | why |\n|---|---|---|---|\n", 1)[1]
    rows = []
    for line in table.split("\n\n", 1)[0].splitlines():
        group, resources, verbs, _ = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append(
            (
                "" if group == "core" else group.strip("`"),
                tuple(sorted(re.findall(r"`([^`]+)`", resources))),
                tuple(sorted(v.strip() for v in verbs.split(","))),
            )
        )
    return sorted(rows)


def test_the_permissions_table_in_the_docs_lists_each_rule_of_phalanx_cluster_role(
    chart: Chart,
) -> None:
    role = one(chart.render(), "ClusterRole")
    granted = sorted(
        (group, tuple(sorted(rule["resources"])), tuple(sorted(rule["verbs"])))
        for rule in role["rules"]
        for group in rule["apiGroups"]
    )
    assert documented_cluster_role_rules() == granted


# ---- NOTES.txt -----------------------------------------------------------------------
# `helm template` skips NOTES.txt and `helm install --dry-run` needs a cluster: a copy of the
# chart renders the same text with `tpl` into a ConfigMap (tests/e2e/test_chart_apply.py
# reads the real one from an install).

NOTES_AS_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: notes
data:
  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}
"""


def render_notes(chart: Chart, tmp_path: Path, *flags: str) -> str:
    copy = tmp_path / "phalanx"
    shutil.copytree(CHART, copy)
    (copy / "templates" / "NOTES.txt").rename(copy / "notes.txt")
    (copy / "templates" / "notes.yaml").write_text(NOTES_AS_CONFIGMAP)
    argv: list[str | Path] = [
        chart.helm,
        "template",
        RELEASE,
        copy,
        "--namespace",
        NAMESPACE,
        *flags,
    ]
    proc = run([*argv, "--show-only", "templates/notes.yaml"])
    assert proc.returncode == 0, proc.stderr
    return str(yaml.safe_load(proc.stdout)["data"]["notes"])


@pytest.mark.parametrize("replicas", [1, 3], ids=["one-replica", "three-replicas"])
def test_the_notes_run_phalanx_explain_in_the_leader_pod(
    chart: Chart, tmp_path: Path, replicas: int
) -> None:
    notes = render_notes(chart, tmp_path, "--set", f"replicaCount={replicas}")
    holder = "get lease phalanx-scheduler -o jsonpath='{.spec.holderIdentity}')"
    assert f"LEADER=$(kubectl -n {NAMESPACE} {holder}" in notes
    assert f'kubectl -n {NAMESPACE} exec "${{LEADER%%_*}}" -c phalanx -- \\' in notes
    assert "exec deploy/" not in notes  # any pod: a standby holds no reservations
    assert "phalanx explain <ns>/<name> --server http://127.0.0.1:8888" in notes


def test_the_notes_exec_into_the_only_pod_without_leader_election(
    chart: Chart, tmp_path: Path
) -> None:
    notes = render_notes(chart, tmp_path, "--set", "kubeScheduler.leaderElection.leaderElect=false")
    assert "get lease" not in notes
    assert f"kubectl -n {NAMESPACE} exec deploy/phalanx -c phalanx -- \\" in notes


@pytest.mark.parametrize(
    ("flags", "scheduler", "dra"),
    [
        pytest.param(
            ("--kube-version", "1.37.2-eks-1a2b3c"),
            "registry.k8s.io/kube-scheduler:v1.37.2 (the cluster's own release)",
            "planned, as kube-scheduler serves them",
            id="the-clusters-release",
        ),
        pytest.param(
            ("--kube-version", "1.36.1", "--set", "kubeScheduler.image.tag=v1.35.4"),
            "registry.k8s.io/kube-scheduler:v1.35.4.",
            "not planned: kube-scheduler serves them from device plugins only",
            id="a-tag-set",
        ),
    ],
)
def test_the_notes_say_which_kube_scheduler_runs_and_whether_dra_serves_gpus(
    chart: Chart, tmp_path: Path, flags: tuple[str, ...], scheduler: str, dra: str
) -> None:
    notes = render_notes(chart, tmp_path, *flags)
    assert f"kube-scheduler: {scheduler}" in notes
    assert f"served by DRA devices: {dra} (phalanx.draExtendedResources)." in notes


@pytest.mark.parametrize(
    "path",
    ["README.md", "docs/operations.md", "helm/phalanx/templates/NOTES.txt"],
)
def test_where_the_docs_offer_skip_crds_they_say_what_scheduler_plugins_crd_prunes(
    path: str,
) -> None:
    text = (REPO / path).read_text()
    lines = text.splitlines()
    offers = [i for i, line in enumerate(lines) if "--skip-crds" in line]
    assert offers
    for i in offers:
        near = "\n".join(lines[max(0, i - 8) : i + 9])
        assert "PodGroupScheduled" in near, f"{path}:{i + 1} does not say the condition is lost"
    for fields in ("status.scheduled", "status.conditions", "superset"):
        assert fields in text, f"{path} does not name {fields}"


# ---- the CRD -------------------------------------------------------------------------


def test_the_podgroup_crd_ships_in_crds_and_is_skippable(chart: Chart) -> None:
    crd_kinds = [d for d in chart.render() if d["kind"] == "CustomResourceDefinition"]
    assert crd_kinds == []  # crds/ is not templated: --skip-crds leaves it out of an install
    proc = chart.template(None, "--include-crds")
    assert proc.returncode == 0, proc.stderr
    crds = [
        d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "CustomResourceDefinition"
    ]
    assert [c["metadata"]["name"] for c in crds] == ["podgroups.scheduling.x-k8s.io"]


def test_the_podgroup_crd_prints_the_counts_and_phases_phalanx_writes() -> None:
    """scheduler-plugins' CRD prints succeeded and failed too; a column whose field the
    schema lacked would always be empty (the API server prunes unknown status fields)."""
    crd = yaml.safe_load((CHART / "crds" / "scheduling.x-k8s.io_podgroups.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    for name in ("Phase", "Scheduled", "Running", "Succeeded", "Failed"):
        field = columns[name].removeprefix(".status.")
        assert field in status, f"column {name} prints {columns[name]}, which the schema prunes"
    assert {p.value for p in GroupPhase} <= set(status["phase"]["enum"])


def test_the_chart_runs_the_image_as_the_user_it_was_built_for(chart: Chart) -> None:
    dockerfile = (CHART.parents[1] / "Dockerfile").read_text()
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, flags=re.MULTILINE)
    context = one(chart.render(), "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert (str(context["runAsUser"]), str(context["runAsGroup"])) == user
