"""kube-scheduler ordering its queue with scheduler-plugins' Coscheduling QueueSort: the chart's
``kubeScheduler.queueSort: Coscheduling`` (docs/operations.md "Queue order for gangs").

The chart is rendered with that value (``CHART_VALUES``, see conftest_scheduling.py) and its
KubeSchedulerConfiguration runs on scheduler-plugins' real kube-scheduler, the build of the
image the chart then runs (``build-tools.sh scheduler-plugins``: Kubernetes 1.34, one minor
behind this kube-apiserver), with Phalanx as its extender. kube-scheduler's identity holds the
chart's ClusterRole, as the ServiceAccount both of the chart's containers run as does:
Coscheduling's QueueSort reads every queued member's PodGroup. Gangs of the scheduler-plugins
and of the annotation dialect bind whole, a single pod binds, and a gang that cannot fit binds
nothing and holds up no later gang; the invariant monitor watches every test.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import chartkit
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import Scheduler, cluster, phalanx, scheduler  # noqa: F401  # fixtures
from phalanx_process import PhalanxProcess
from scheduling import Obj, Scenario

pytestmark = pytest.mark.e2e

CHART_VALUES = {"kubeScheduler": {"queueSort": "Coscheduling"}}
QUEUE_SORT = {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]}
FORMS = ["podgroup", "annotations"]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
GRANT = "phalanx-e2e:queue-sort-chart-role"


@pytest.fixture(scope="module", autouse=True)
def kube_scheduler_holds_the_charts_cluster_role(
    control_plane: launcher.ControlPlane, helm_tool: Path
) -> Iterator[Obj]:
    """The rendered chart's ClusterRole, bound to kube-scheduler's identity for this module
    (autouse: set up before kube-scheduler starts). Without PodGroup list/watch nothing binds,
    not even a single pod: kube-scheduler waits for the PodGroup informer Coscheduling asks
    for."""
    (role,) = [d for d in chartkit.render(helm_tool, CHART_VALUES) if d["kind"] == "ClusterRole"]
    grant: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": GRANT},
        "rules": role["rules"],
    }
    binding: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": GRANT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": GRANT},
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": "system:kube-scheduler",
            }
        ],
    }
    for plural, obj in (("clusterroles", grant), ("clusterrolebindings", binding)):
        status, answer = control_plane.request("POST", f"{RBAC}/{plural}", obj)
        assert status == 201, answer
    try:
        yield role
    finally:
        for plural in ("clusterrolebindings", "clusterroles"):
            control_plane.request("DELETE", f"{RBAC}/{plural}/{GRANT}")


def test_the_kube_scheduler_under_test_is_scheduler_plugins_running_the_charts_queue_sort(
    control_plane: launcher.ControlPlane,
    scheduler: Scheduler,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler_plugins_tool: Path,
) -> None:
    assert scheduler.chart is not None
    assert scheduler.origin == f"helm/phalanx rendered with {CHART_VALUES}"
    component = control_plane.scheduler
    assert component is not None
    assert component.argv[0] == str(scheduler_plugins_tool)
    assert 'version="v1.34.' in component.tail(100_000)  # the release the image embeds
    # The chart's configuration; only what must differ in a throw-away cluster was rewritten.
    running, chart = copy.deepcopy(scheduler.config), copy.deepcopy(scheduler.chart.config)
    assert [e["urlPrefix"] for e in running["extenders"]] == [phalanx.url]
    for config in (running, chart):
        for extender in config["extenders"]:
            extender.pop("urlPrefix")
        for key in ("resourceNamespace", "resourceName"):
            config["leaderElection"].pop(key, None)
    running.get("clientConnection", {}).pop("kubeconfig", None)
    assert running == chart
    (profile,) = chart["profiles"]
    assert profile["plugins"]["queueSort"] == QUEUE_SORT
    # What kube-scheduler read (its /configz: the configuration it runs, as Go field names).
    configz = json.loads(control_plane.scheduler_get("/configz"))["componentconfig"]
    (served,) = configz["Profiles"]
    assert served["SchedulerName"] == "phalanx"
    queue_sort = served["Plugins"]["QueueSort"]
    assert [p["Name"] for p in queue_sort["Enabled"]] == ["Coscheduling"]
    assert [p["Name"] for p in queue_sort["Disabled"]] == ["*"]


@pytest.mark.parametrize("form", FORMS)
def test_a_gang_of_either_dialect_binds_whole(cluster: Scenario, form: str) -> None:  # noqa: F811
    # 4 × 2 GPUs on two 4-GPU nodes: the gang needs both. Staggered arrival: the first members
    # are refused while the gang is incomplete and come back through the queue's order.
    cluster.node("a", 4)
    cluster.node("b", 4)
    cluster.nodes_ready()

    gang = cluster.gang("g", 4, 2, form=form, arrival="staggered")
    where = cluster.wait_gang(gang, timeout=60)

    assert sorted(where.values()) == sorted(
        [f"{cluster.namespace}-a"] * 2 + [f"{cluster.namespace}-b"] * 2
    )
    view = cluster.phalanx.debug_group(cluster.namespace, "g")
    assert view is not None
    assert view["source"] == ("PodGroup" if form == "podgroup" else "annotations")
    assert view["bound"] == 4


def test_a_single_pod_binds(cluster: Scenario) -> None:  # noqa: F811
    node = cluster.node("a", 4)
    cluster.nodes_ready()

    cluster.pod("solo", 1)

    assert cluster.wait_bound(["solo"]) == {"solo": node}


def test_a_gang_that_cannot_fit_binds_nothing_and_holds_up_no_later_gang(
    cluster: Scenario,  # noqa: F811
) -> None:
    # 8 GPUs free in all, but same-node needs 6 on one node and no node has more than 4.
    # Coscheduling orders by PodGroup creation time: this older gang's members go first each
    # time they are back in the queue, and the later gang must still be tried and bind.
    cluster.node("a", 4)
    cluster.node("b", 4)
    cluster.nodes_ready()
    impossible = cluster.gang("too-wide", 3, 2, placement="same-node")
    cluster.wait(
        "a FailedScheduling event with Phalanx's reason",
        lambda: any(
            "cannot place 3 member(s) of gang" in e.get("message", "")
            for m in impossible.members
            for e in cluster.events(m, reason="FailedScheduling")
        ),
    )

    later = cluster.gang("fits", 2, 2)
    cluster.wait_gang(later, timeout=60)

    cluster.assert_unbound_for(impossible.members, 3.0)
    view = cluster.phalanx.debug_group(cluster.namespace, impossible.name)
    assert view is not None
    assert view["last_decision"] == "unfit"
    assert view["reservation"] is None


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        pytest.param(["--set", "kubeScheduler.queueSort=Coscheduling"], True, id="coscheduling"),
        pytest.param([], False, id="default"),
    ],
)
def test_the_install_notes_name_the_queue_order_and_its_version_skew_only_when_chosen(
    control_plane: launcher.ControlPlane,
    helm_tool: Path,
    tmp_path: Path,
    flags: list[str],
    says: bool,
) -> None:
    argv = [helm_tool, "install", "phalanx", chartkit.CHART, "-n", chartkit.NAMESPACE]
    done = subprocess.run(
        [*map(str, argv), "--dry-run=server", *flags],
        env=chartkit.helm_env(control_plane, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    version = launcher.read_versions()["SCHEDULER_PLUGINS_VERSION"]
    expected = [
        "Queue order: scheduler-plugins' Coscheduling (kubeScheduler.queueSort)",
        f"registry.k8s.io/scheduler-plugins/kube-scheduler:{version}",
        "Keep the cluster at Kubernetes 1.34 or 1.35",
    ]
    assert [line in notes for line in expected] == [says] * len(expected), notes
