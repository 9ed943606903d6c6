"""`helm upgrade` from the previous chart with gangs in flight, and what `helm uninstall`
leaves behind, on the real API server with the real helm.

The previous chart is this repository's chart at commit ``PREVIOUS`` (the last one before
this wave's chart changes), taken with ``git archive`` and packaged by ``helm package`` at
test time. There is no kubelet: the release's pods are re-enacted as in
test_chart_apply.py — Phalanx in-process as the sidecar, with the release's ServiceAccount
token and the release namespace for its roll-forward Lease, and the real kube-scheduler
running the release's own ConfigMap (its leader election included) — and a rolling
update is re-enacted as the Deployment controller runs one (maxSurge 1, maxUnavailable 0:
the new pods come up as standbys, then the old pod gets SIGTERM in both containers).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import shutil
import ssl
import subprocess
import tarfile
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import chartkit
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
import yaml
from chartkit import CHART, REPO
from phalanx_process import PhalanxProcess
from podgroup_crd import ensure_pod_group_crd
from scheduling import A_COMMIT, PG_API, Api, Scenario

from phalanx.api import server as harness
from phalanx.api.app import create_metrics_app
from phalanx.core.inventory import REQUEUE_ANNOTATION
from phalanx.service.extender import Extender
from phalanx.service.metrics import Metrics
from phalanx.sources.kube import KubeSource
from phalanx.sources.kubeclient import KubeClient
from phalanx.sources.lease import LEASE_NAME as ROLLFORWARD_LEASE
from tiers import unavailable

pytestmark = pytest.mark.e2e

T = TypeVar("T")
PREVIOUS = "300c18b"  # the chart before this wave (issue #15)
SCHEDULER_LEASE = "phalanx-scheduler"  # the chart's kubeScheduler.leaderElection.resourceName
Obj = dict[str, Any]
# The kinds the chart installs with its default values, and where the API keeps them.
PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "FlowSchema": "flowschemas",
}


# ---- helm and the releases ---------------------------------------------------------------------


class Helm:
    """The built helm, on the control plane's admin kubeconfig, with homes of its own."""

    def __init__(self, binary: Path, cp: launcher.ControlPlane, home: Path) -> None:
        self.binary = binary
        self.env = chartkit.helm_env(cp, home)

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def helm(
    control_plane: launcher.ControlPlane,
    helm_tool: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Helm:
    return Helm(helm_tool, control_plane, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def previous_chart(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart at PREVIOUS, packaged (a .tgz as a chart repository serves it)."""
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        unavailable("the previous chart is read from git history: no git checkout here")
    archive = subprocess.run(
        [str(git), "-C", str(REPO), "archive", "--format=tar", PREVIOUS, "helm/phalanx"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        unavailable(
            f"commit {PREVIOUS} is not in this clone ({archive.stderr.decode().strip()}): "
            "fetch the history (git fetch --unshallow)"
        )
    where = tmp_path_factory.mktemp("previous-chart")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    helm("package", str(where / "helm" / "phalanx"), "--destination", str(where))
    (package,) = where.glob("phalanx-*.tgz")
    return package


class Release:
    """One helm release of the chart; its name is also its namespace and its full name."""

    def __init__(self, cp: launcher.ControlPlane, helm: Helm, name: str) -> None:
        self.cp = cp
        self.helm = helm
        self.name = self.namespace = name

    def install(self, chart: Path, *flags: str) -> None:
        self.helm(
            "install", self.name, str(chart), "--namespace", self.namespace, "--create-namespace",
            "--skip-crds", *flags,
        )  # fmt: skip

    def upgrade(self, chart: Path, *flags: str) -> None:
        self.helm("upgrade", self.name, str(chart), "--namespace", self.namespace, *flags)

    def uninstall(self) -> None:
        self.helm("uninstall", self.name, "--namespace", self.namespace)

    def history(self) -> list[Obj]:
        answer = yaml.safe_load(
            self.helm("history", self.name, "--namespace", self.namespace, "-o", "yaml")
        )
        return list(answer)

    def manifest(self) -> list[Obj]:
        text = self.helm("get", "manifest", self.name, "--namespace", self.namespace)
        return [d for d in yaml.safe_load_all(text) if d]

    def get(self, path: str) -> Obj | None:
        status, answer = self.cp.request("GET", path)
        if status == 404:
            return None
        assert status == 200, answer
        return dict(answer)

    def scheduler_config(self) -> Obj:
        """The KubeSchedulerConfiguration of the release's ConfigMap, as it is now."""
        config_map = self.get(
            f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}-scheduler-config"
        )
        assert config_map is not None
        config: Obj = yaml.safe_load(config_map["data"]["kube-scheduler.yaml"])
        return config

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig with a fresh token of the release's ServiceAccount."""
        status, answer = self.cp.request(
            "POST",
            f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{self.name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        assert status == 201, answer
        ca = base64.b64encode(self.cp.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.cp.server, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": self.name, "user": {"token": answer["status"]["token"]}}],
            "contexts": [{"name": self.name, "context": {"cluster": "e2e", "user": self.name}}],
            "current-context": self.name,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def lease_holder(self, name: str = SCHEDULER_LEASE) -> str:
        lease = self.get(f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{name}")
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


# ---- a pod of the release, re-enacted ----------------------------------------------------------


class Endpoints(PhalanxProcess):
    """`PhalanxProcess`'s readers (/metrics, /debug) pointed at an in-process sidecar, so a
    `Scenario` waits on it as on a `phalanx serve` process; nothing is started here."""

    def __init__(self, url: str, metrics_url: str, workdir: Path, name: str) -> None:
        super().__init__(workdir / "unused.kubeconfig", workdir, name=name)
        self.url, self.metrics_url = url, metrics_url

    def tail(self, lines: int = 60) -> str:
        return f"----- {self.url}: an in-process sidecar, its logs are the test's -----"


class ChartPod:
    """One scheduler pod of a release: Phalanx (in-process) and kube-scheduler (a process)."""

    def __init__(self, release: Release, name: str, workdir: Path) -> None:
        self.release = release
        self.name = name
        self.workdir = workdir / name
        self.workdir.mkdir(parents=True)
        self.kubeconfig = release.kubeconfig(self.workdir / "sa.kubeconfig")
        self.config = release.scheduler_config()  # the ConfigMap as it is when the pod starts
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.metrics = Metrics()
        source = KubeSource(
            KubeClient.from_kubeconfig(self.kubeconfig),
            namespace=release.namespace,
            metrics=self.metrics,
        )
        self.extender = Extender(source, metrics=self.metrics)
        self._serving: contextlib.AbstractAsyncContextManager[str] | None = None
        self._probes: tuple[harness.Server, asyncio.Task[None]] | None = None
        self.scheduler: launcher.Component | None = None
        self.endpoints: Endpoints | None = None

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> ChartPod:
        """Both containers, Phalanx first (kube-scheduler's extender must answer)."""
        self.thread.start()

        async def up() -> tuple[str, str]:
            self._serving = harness.serving(self.extender)
            url = await self._serving.__aenter__()
            sock = harness.bind("127.0.0.1", 0)
            server = harness.make_server(create_metrics_app(self.extender), access_log=False)
            self._probes = (server, await harness.start(server, sock))
            return url, harness.url_of(sock)

        url, probe_url = self._run(up())
        self.endpoints = Endpoints(url, probe_url, self.workdir, f"phalanx-{self.name}")
        launcher.wait_for(f"{self.name}: Phalanx /readyz", self.endpoints.ready, timeout=60)
        config = dict(self.config)
        (extender,) = config["extenders"]
        config["extenders"] = [dict(extender, urlPrefix=url)]  # the same loopback, a free port
        config["clientConnection"] = dict(
            config["clientConnection"], kubeconfig=str(self.kubeconfig)
        )
        self.scheduler = self._start_scheduler(config)
        return self

    def _start_scheduler(self, config: Obj) -> launcher.Component:
        cp = self.release.cp
        path = self.workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        (port,) = launcher.free_ports(1)
        component = launcher.Component(
            f"kube-scheduler ({self.name})",
            [
                str(cp.tools["kube-scheduler"]),
                f"--config={path}",
                f"--bind-address={launcher.LOOPBACK}",
                f"--secure-port={port}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--cert-dir={self.workdir / 'certs'}",
                "--v=2",
            ],
            self.workdir / "kube-scheduler.log",
        )
        component.start()
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; loopback only
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)
        )

        def healthy() -> bool:
            component.check_alive()
            url = f"https://{launcher.LOOPBACK}:{port}/healthz"
            with opener.open(url, timeout=2) as resp:
                return bool(resp.status == 200)

        launcher.wait_for(
            f"{self.name}: kube-scheduler /healthz", healthy, timeout=60, on_timeout=component.tail
        )
        return component

    def served(self) -> float:
        value = 0.0
        for family in self.metrics.registry.collect():
            for sample in family.samples:
                if sample.name == "phalanx_request_duration_seconds_count":
                    value += sample.value
        return value

    def stop(self) -> None:
        """SIGTERM to both containers, as the kubelet stops a pod: graceful, each on its own."""
        if self.scheduler is not None:
            self.scheduler.stop()

        async def down() -> None:
            if self._probes is not None:
                await harness.stop(*self._probes)
            if self._serving is not None:
                await self._serving.__aexit__(None, None, None)

        if self.thread.is_alive():
            with contextlib.suppress(Exception):
                self._run(down())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Callable[[Release, str], ChartPod]]:
    made: list[ChartPod] = []

    def make(release: Release, name: str) -> ChartPod:
        made.append(ChartPod(release, name, tmp_path).start())
        return made[-1]

    yield make
    for pod in made:
        pod.stop()


def _world(cp: launcher.ControlPlane, pod: ChartPod, namespace: str, gpu_nodes: Any) -> Scenario:
    assert pod.endpoints is not None
    return Scenario(cp, Api(cp), pod.endpoints, namespace, gpu_nodes)


def _commit_records(cp: launcher.ControlPlane, namespace: str) -> set[str]:
    """`Kind/name` of every object in `namespace` that carries a commit record."""
    found = set()
    kinds = {
        "Pod": f"/api/v1/namespaces/{namespace}/pods",
        "PodGroup": f"{PG_API}/namespaces/{namespace}/podgroups",
    }
    for kind, path in kinds.items():
        _, answer = cp.request("GET", path)
        for item in answer.get("items") or []:
            if A_COMMIT in (item["metadata"].get("annotations") or {}):
                found.add(f"{kind}/{item['metadata']['name']}")
    return found


# ---- upgrade ---------------------------------------------------------------------------------


def test_helm_upgrade_from_the_previous_chart_loses_no_gang_in_flight(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., Obj],
    helm: Helm,
    previous_chart: Path,
    pods: Callable[[Release, str], ChartPod],
) -> None:
    cp = control_plane
    ensure_pod_group_crd(cp)
    release = Release(cp, helm, "phalanx-upgrade")
    release.install(previous_chart)  # revision 1: the previous chart, one replica
    old = pods(release, "old")
    leader = launcher.wait_for("the old pod leads", release.lease_holder, timeout=30)

    sc = _world(cp, old, namespace, gpu_nodes)
    sc.monitor.start()
    try:
        for suffix in ("a", "b", "c"):
            sc.node(suffix, 8)
        sc.nodes_ready()
        early = sc.gang("early", 2, 4)  # whole before the upgrade: stays where it is
        placed = sc.wait_gang(early)
        held = sc.gang("held", 3, 2, held=[2])  # reserved on the old pod, at its barrier
        old_endpoints = old.endpoints
        assert old_endpoints is not None
        # Both ungated members held at once. A member whose first cycle ran before its
        # PodGroup reached the informer waits out kube-scheduler's backoff first, so this
        # allows more than one barrier timeout; the scenario says where each pod is if not.
        try:
            old_endpoints.wait_metric("phalanx_barrier_waiting", lambda v: v == 2, timeout=60)
        except launcher.ControlPlaneError as exc:
            raise AssertionError(f"{exc}\n{sc.diagnostics()}") from exc
        # Created after that count: its first member, reserved from its shape, may wait at
        # the barrier too (the count would then be 3, or 2 with one held member).
        notes = sc.gang("notes", 2, 1, form="annotations", create=1, arrival="staggered")

        # ---- revision 2: this chart, two replicas
        # As docs/operations.md says to upgrade: the values set, the rest from the new chart.
        release.upgrade(CHART, "--reset-then-reuse-values", "--set", "replicaCount=2")
        history = release.history()
        assert [(r["revision"], r["status"]) for r in history] == [
            (1, "superseded"),
            (2, "deployed"),
        ]
        deployment = release.get(
            f"/apis/apps/v1/namespaces/{release.namespace}/deployments/{release.name}"
        )
        assert deployment is not None
        assert deployment["spec"]["replicas"] == 2
        budget = release.get(
            f"/apis/policy/v1/namespaces/{release.namespace}/poddisruptionbudgets/{release.name}"
        )
        assert budget is not None, "the upgrade did not create the PodDisruptionBudget"
        assert budget["spec"]["maxUnavailable"] == 1

        # ---- the rolling update: the new pods stand by, then the old pod stops
        new = [pods(release, f"new-{i}") for i in range(2)]
        for pod in new:
            assert pod.endpoints is not None
            sc.phalanx = pod.endpoints
            sc.nodes_ready()
        assert [pod.served() for pod in new] == [0, 0]
        assert release.lease_holder() == leader
        stopped = time.monotonic()
        old.stop()
        during = sc.gang("during", 2, 2)  # created while the lease changes hands
        sc.add_member(notes, 1)
        sc.ungate(held.members[2])

        handed = launcher.wait_for(
            "a new pod leads",
            lambda: (h := release.lease_holder()) not in ("", leader) and h,
            timeout=60,
        )
        handover = time.monotonic() - stopped
        for gang in (held, during, notes):
            sc.wait_gang(gang, timeout=60)
        leaders = [pod for pod in new if pod.served() > 0]
        assert len(leaders) == 1, [pod.served() for pod in new]
        assert leaders[0].endpoints is not None
        sc.phalanx = leaders[0].endpoints
        sc.wait_quiet(settle=3.0, timeout=60)
        assert sc.placement(early.members) == placed  # never moved, never unbound
        everyone = [early, notes, held, during]
        assert all(sc.bound_count(g) == len(g.members) for g in everyone), sc.diagnostics()
        print(f"\nupgrade: old pod stopped → {handed} leads after {handover:.1f} s")
        verdict = sc.monitor.stop()
    finally:
        sc.monitor.stop()
        sc.api.close()
    verdict.assert_clean()


# ---- uninstall -------------------------------------------------------------------------------


def test_helm_uninstall_leaves_behind_exactly_what_the_docs_say(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., Obj],
    helm: Helm,
    pods: Callable[[Release, str], ChartPod],
) -> None:
    cp = control_plane
    ensure_pod_group_crd(cp)
    release = Release(cp, helm, "phalanx-uninstall")
    release.install(CHART)
    pod = pods(release, "only")
    launcher.wait_for("the pod leads", release.lease_holder, timeout=30)
    sc = _world(cp, pod, namespace, gpu_nodes)
    try:
        sc.node("a", 8)
        sc.node("b", 8)
        sc.nodes_ready()
        settled = sc.gang("settled", 2, 2, arrival="staggered")
        sc.wait_gang(settled, timeout=60)
        sc.wait(  # its status follows the bound members (the next refresh, then coalesced)
            "the settled gang's status",
            lambda: (
                sc.get_pod_group("settled").get("status", {}).get("phase")
                in ("Scheduled", "Running")
            ),
            timeout=30,
        )
        # A plan makes its members distinct: it waits for its quorum (no template reservation).
        plan = {"sequence": [{"execute": "a"}, {"execute": "b"}, {"execute": "c"}]}
        short = sc.gang(
            "short", 3, 1, create=2, arrival="staggered", plan=plan, plan_nodes=["a", "b", "c"]
        )
        sc.wait_event(short.name, "waiting for gang members", reason="WaitingForMembers")
        recent = sc.gang("recent", 2, 2)
        sc.wait_gang(recent)
        owned = release.manifest()

        release.uninstall()  # helm deletes its objects, RBAC included ...
        pod.stop()  # ... then the kubelet stops the containers
    finally:
        sc.api.close()

    # Every object helm installed is gone (the CRD never was helm's to delete: crds/).
    for doc in owned:
        api = "/api/v1" if doc["apiVersion"] == "v1" else f"/apis/{doc['apiVersion']}"
        plural = PLURALS[doc["kind"]]
        ns = doc["metadata"].get("namespace")
        path = f"{api}/namespaces/{ns}/{plural}" if ns else f"{api}/{plural}"
        assert release.get(f"{path}/{doc['metadata']['name']}") is None, doc["kind"]
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert release.get(f"{crds}/podgroups.scheduling.x-k8s.io") is not None

    # What stays, exactly (docs/operations.md, "Uninstall"):
    # the two Leases, created at run time by kube-scheduler and Phalanx, not by helm;
    _, leases = cp.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{release.namespace}/leases"
    )
    assert {item["metadata"]["name"] for item in leases["items"]} == {
        SCHEDULER_LEASE,
        ROLLFORWARD_LEASE,
    }
    # the commit record each member's binding carried onto it (a short record: no gang
    # object holds one), on every pod Phalanx bound with its gang;
    bound = (*settled.members, *recent.members)
    assert _commit_records(cp, namespace) == {f"Pod/{p}" for p in bound}
    # `phalanx.io/requeued-at` only on pods (a timestamp; it goes with the pod);
    _, groups = cp.request("GET", f"{PG_API}/namespaces/{namespace}/podgroups")
    notes = [(g["metadata"].get("annotations") or {}) for g in groups["items"]]
    assert not [n for n in notes if REQUEUE_ANNOTATION in n]
    # and the PodGroups' status, as any scheduler leaves it.
    settled_group = release.get(f"{PG_API}/namespaces/{namespace}/podgroups/settled")
    assert settled_group is not None
    assert settled_group["status"]["phase"] in ("Scheduled", "Running")
    held = {i["metadata"]["name"]: i["spec"].get("holderIdentity") for i in leases["items"]}
    print(f"\nuninstall: the Leases left and their holders: {held}")
