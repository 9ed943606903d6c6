"""The deployment on a real kube-apiserver: deploy/manifests/phalanx.yaml server-side applied,
its RBAC checked verb by verb, and the chart's pod re-enacted outside a container runtime —
the rendered kube-scheduler configuration run by the real kube-scheduler and Phalanx, both
with the chart's ServiceAccount token — scheduling the deploy/examples gangs. Plus a real
`helm install` (NOTES, --skip-crds) when helm is built.

There is no kube-controller-manager (tests/controlplane/launcher.py): the Deployment is
accepted but starts no pod, which is why the pod is re-enacted here process by process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
import yaml
from chartkit import (
    ACCOUNT,
    MANIFESTS,
    NAMESPACE,
    REPO,
    Obj,
    apply,
    documents,
    helm_env,
    install,
    service_account_kubeconfig,
)
from examples import chart_validated_examples
from kubernetes.dynamic import DynamicClient

from phalanx.api import server as harness
from phalanx.api.app import create_metrics_app
from phalanx.service.extender import Extender
from phalanx.service.metrics import Metrics
from phalanx.sources.kube import KubeSource
from phalanx.sources.kubeclient import KubeClient

pytestmark = pytest.mark.e2e

T = TypeVar("T")
EXAMPLES = REPO / "deploy" / "examples"
ACCOUNT_USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
ACCOUNT_GROUPS = [
    "system:serviceaccounts",
    f"system:serviceaccounts:{NAMESPACE}",
    "system:authenticated",
]


# ---- applying manifests ----------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(control_plane: launcher.ControlPlane) -> Iterator[list[Obj]]:
    """deploy/manifests/phalanx.yaml applied as a user would; the objects as the API holds them."""
    dyn = DynamicClient(control_plane.api_client())
    yield install(control_plane)
    # The Namespace (it would stay Terminating: no controller-manager) and the CRD (other
    # tests' PodGroups live in it) stay; everything else goes.
    for doc in reversed(documents(MANIFESTS)):
        if doc["kind"] in ("Namespace", "CustomResourceDefinition"):
            continue
        with contextlib.suppress(Exception):
            api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            api.delete(name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))


def test_every_manifest_is_accepted_by_the_api_server(installed: list[Obj]) -> None:
    kinds = [d["kind"] for d in installed]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert {"ServiceAccount", "ConfigMap", "ClusterRole", "Deployment", "Service"} <= set(kinds)
    deployment = next(d for d in installed if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == NAMESPACE


# Examples needing Volcano's CRD, or Kubernetes 1.37 (deploy/examples/1.37/), are
# validated by test_examples.py and test_examples_137.py on an API that serves them.
@pytest.mark.parametrize("path", chart_validated_examples(), ids=lambda p: p.stem)
def test_examples_pass_server_side_validation(
    control_plane: launcher.ControlPlane, installed: list[Obj], namespace: str, path: Path
) -> None:
    dyn = DynamicClient(control_plane.api_client())
    for doc in documents(path):
        answer = apply(dyn, doc, namespace=namespace, dry_run=True)
        assert answer["metadata"]["name"] == doc["metadata"]["name"]


# ---- RBAC, verb by verb ----------------------------------------------------------------


# Resources are written `<group>.<plural>[/<subresource>]`; core ones bare.
GRANTED = [
    ("list", "nodes", {}),
    ("watch", "pods", {}),
    ("patch", "pods", {"namespace": "team-a"}),
    ("create", "pods/binding", {"namespace": "team-a"}),
    ("patch", "pods/status", {"namespace": "team-a"}),
    ("create", "events", {"namespace": "team-a"}),
    ("patch", "events", {"namespace": "team-a"}),
    ("create", "events.k8s.io.events", {"namespace": "team-a"}),
    ("watch", "scheduling.x-k8s.io.podgroups", {}),
    ("patch", "scheduling.x-k8s.io.podgroups", {"namespace": "team-a"}),
    ("patch", "scheduling.x-k8s.io.podgroups/status", {"namespace": "team-a"}),
    # Every gang dialect: each verb the chart grants, one by one.
    ("get", "scheduling.volcano.sh.podgroups", {"namespace": "team-a"}),
    ("list", "scheduling.volcano.sh.podgroups", {}),
    ("watch", "scheduling.volcano.sh.podgroups", {}),
    ("patch", "scheduling.volcano.sh.podgroups", {"namespace": "team-a"}),
    ("get", "scheduling.run.ai.podgroups", {"namespace": "team-a"}),
    ("list", "scheduling.run.ai.podgroups", {}),
    ("watch", "scheduling.run.ai.podgroups", {}),
    ("patch", "scheduling.run.ai.podgroups", {"namespace": "team-a"}),
    ("patch", "scheduling.run.ai.podgroups/status", {"namespace": "team-a"}),
    ("get", "scheduler.grove.io.podgangs", {"namespace": "team-a"}),
    ("list", "scheduler.grove.io.podgangs", {}),
    ("watch", "scheduler.grove.io.podgangs", {}),
    ("patch", "scheduler.grove.io.podgangs", {"namespace": "team-a"}),
    ("patch", "scheduler.grove.io.podgangs/status", {"namespace": "team-a"}),
    ("get", "scheduling.k8s.io.podgroups", {"namespace": "team-a"}),
    ("list", "scheduling.k8s.io.podgroups", {}),
    ("watch", "scheduling.k8s.io.podgroups", {}),
    ("patch", "scheduling.k8s.io.podgroups", {"namespace": "team-a"}),
    ("patch", "scheduling.k8s.io.podgroups/status", {"namespace": "team-a"}),
    ("get", "scheduling.k8s.io.workloads", {"namespace": "team-a"}),
    ("list", "scheduling.k8s.io.workloads", {}),
    ("watch", "scheduling.k8s.io.workloads", {}),
    ("get", "scheduling.k8s.io.compositepodgroups", {"namespace": "team-a"}),
    ("list", "scheduling.k8s.io.compositepodgroups", {}),
    ("watch", "scheduling.k8s.io.compositepodgroups", {}),
    ("patch", "scheduling.k8s.io.compositepodgroups", {"namespace": "team-a"}),
    ("patch", "scheduling.k8s.io.compositepodgroups/status", {"namespace": "team-a"}),
    # CRDs, read for their metadata: a gang kind's CRD installed later is discovered at once.
    ("get", "apiextensions.k8s.io.customresourcedefinitions", {}),
    ("list", "apiextensions.k8s.io.customresourcedefinitions", {}),
    ("watch", "apiextensions.k8s.io.customresourcedefinitions", {}),
    # DRA, read only. kube-scheduler's own role (bound too) also reads slices, classes and
    # claims; nothing but Phalanx's role grants the templates.
    ("list", "resource.k8s.io.resourceslices", {}),
    ("watch", "resource.k8s.io.resourceslices", {}),
    ("watch", "resource.k8s.io.deviceclasses", {}),
    ("watch", "resource.k8s.io.resourceclaims", {}),
    ("list", "resource.k8s.io.resourceclaimtemplates", {}),
    ("watch", "resource.k8s.io.resourceclaimtemplates", {}),
    ("get", "resource.k8s.io.resourceclaimtemplates", {"namespace": "team-a"}),
    ("create", "coordination.k8s.io.leases", {"namespace": NAMESPACE}),
    (
        "update",
        "coordination.k8s.io.leases",
        {"namespace": NAMESPACE, "name": "phalanx-rollforward"},
    ),
    ("update", "coordination.k8s.io.leases", {"namespace": NAMESPACE, "name": "phalanx-scheduler"}),
    (
        "watch",
        "configmaps",
        {"namespace": "kube-system", "name": "extension-apiserver-authentication"},
    ),
    ("create", "authentication.k8s.io.tokenreviews", {}),
    ("create", "authorization.k8s.io.subjectaccessreviews", {}),
]
DENIED = [
    ("get", "secrets", {"namespace": NAMESPACE}),
    ("list", "secrets", {}),
    ("create", "pods", {"namespace": "team-a"}),
    ("patch", "nodes", {}),
    ("create", "scheduling.x-k8s.io.podgroups", {"namespace": "team-a"}),
    ("delete", "scheduling.x-k8s.io.podgroups", {"namespace": "team-a"}),
    ("create", "scheduling.volcano.sh.podgroups", {"namespace": "team-a"}),
    ("update", "scheduling.volcano.sh.podgroups", {"namespace": "team-a"}),
    ("delete", "scheduling.volcano.sh.podgroups", {"namespace": "team-a"}),
    ("create", "scheduling.run.ai.podgroups", {"namespace": "team-a"}),
    ("delete", "scheduling.run.ai.podgroups", {"namespace": "team-a"}),
    ("create", "scheduler.grove.io.podgangs", {"namespace": "team-a"}),
    ("delete", "scheduler.grove.io.podgangs", {"namespace": "team-a"}),
    ("create", "scheduling.k8s.io.podgroups", {"namespace": "team-a"}),
    ("delete", "scheduling.k8s.io.podgroups", {"namespace": "team-a"}),
    ("patch", "scheduling.k8s.io.workloads", {"namespace": "team-a"}),
    ("delete", "scheduling.k8s.io.workloads", {"namespace": "team-a"}),
    ("update", "coordination.k8s.io.leases", {"namespace": NAMESPACE, "name": "someone-else"}),
    ("get", "configmaps", {"namespace": "kube-system", "name": "kubeadm-config"}),
    ("bind", "rbac.authorization.k8s.io.clusterroles", {}),
    ("create", "apiextensions.k8s.io.customresourcedefinitions", {}),
    ("delete", "apiextensions.k8s.io.customresourcedefinitions", {}),
    ("create", "resource.k8s.io.resourceslices", {}),
    ("create", "resource.k8s.io.resourceclaimtemplates", {"namespace": "team-a"}),
    ("delete", "resource.k8s.io.deviceclasses", {}),
]


def _split(resource: str) -> tuple[str, str]:
    """("group", "resource[/sub]") from "group.resource[/sub]" or a core "resource[/sub]"."""
    head, slash, sub = resource.partition("/")
    group, _, plural = head.rpartition(".")
    return group, plural + slash + sub


def _review(cp: launcher.ControlPlane, verb: str, resource: str, attrs: dict[str, str]) -> bool:
    group, plural = _split(resource)
    plural, _, subresource = plural.partition("/")
    spec = {"verb": verb, "group": group, "resource": plural, "subresource": subresource, **attrs}
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": ACCOUNT_USER, "groups": ACCOUNT_GROUPS, "resourceAttributes": spec},
    }
    status, answer = cp.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
    assert status == 201, answer
    return bool(answer["status"].get("allowed"))


@pytest.mark.parametrize(
    ("verb", "resource", "attrs"), GRANTED, ids=[f"{v} {r}" for v, r, _ in GRANTED]
)
def test_the_service_account_may(
    control_plane: launcher.ControlPlane,
    installed: list[Obj],
    verb: str,
    resource: str,
    attrs: dict[str, str],
) -> None:
    assert _review(control_plane, verb, resource, attrs)


@pytest.mark.parametrize(
    ("verb", "resource", "attrs"), DENIED, ids=[f"{v} {r}" for v, r, _ in DENIED]
)
def test_the_service_account_may_not(
    control_plane: launcher.ControlPlane,
    installed: list[Obj],
    verb: str,
    resource: str,
    attrs: dict[str, str],
) -> None:
    assert not _review(control_plane, verb, resource, attrs)


# ---- API Priority and Fairness -------------------------------------------------------------


def _service_account_token(cp: launcher.ControlPlane) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token"
    status, answer = cp.request("POST", path, request)
    assert status == 201, answer
    return str(answer["status"]["token"])


def _classified_as(cp: launcher.ControlPlane, token: str) -> tuple[str, str]:
    """The (FlowSchema, priority level) UIDs the API server's APF put a request of `token` in."""
    req = urllib.request.Request(cp.server + "/api/v1/nodes?limit=1")
    req.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    with opener.open(req, timeout=10) as resp:
        headers = resp.headers
    return (
        headers.get("X-Kubernetes-PF-FlowSchema-UID", ""),
        headers.get("X-Kubernetes-PF-PriorityLevel-UID", ""),
    )


def test_the_service_accounts_requests_get_kube_schedulers_priority_level(
    control_plane: launcher.ControlPlane, installed: list[Obj]
) -> None:
    (schema,) = [o for o in installed if o["kind"] == "FlowSchema"]
    status, level = control_plane.request(
        "GET", "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/workload-high"
    )
    assert status == 200, level
    wanted = (schema["metadata"]["uid"], level["metadata"]["uid"])
    token = _service_account_token(control_plane)
    # APF's configuration controller takes a new FlowSchema in within moments, not at once.
    deadline = time.monotonic() + 20
    while (seen := _classified_as(control_plane, token)) != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    assert seen == wanted


# ---- the chart's pod, re-enacted ---------------------------------------------------------


class Sidecar:
    """Phalanx as the chart runs it (extender app + probe/metrics app), on a loop of its own,
    with the ServiceAccount's credentials and the release namespace for its Lease."""

    def __init__(self, kubeconfig: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.metrics = Metrics()
        self.source = KubeSource(
            KubeClient.from_kubeconfig(kubeconfig), namespace=NAMESPACE, metrics=self.metrics
        )
        self.extender = Extender(self.source, metrics=self.metrics)
        self._serving: contextlib.AbstractAsyncContextManager[str] | None = None
        self._probes: tuple[harness.Server, asyncio.Task[None]] | None = None
        self.url = self.probe_url = ""

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> Sidecar:
        async def up() -> None:
            self._serving = harness.serving(self.extender)  # the app's lifespan starts it
            self.url = await self._serving.__aenter__()
            sock = harness.bind("127.0.0.1", 0)
            server = harness.make_server(create_metrics_app(self.extender), access_log=False)
            self._probes = (server, await harness.start(server, sock))
            self.probe_url = harness.url_of(sock)

        self.run(up())
        return self

    def stop(self) -> None:
        async def down() -> None:
            if self._probes is not None:
                await harness.stop(*self._probes)
            if self._serving is not None:
                await self._serving.__aexit__(None, None, None)

        with contextlib.suppress(Exception):
            self.run(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.probe_url + path, timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)


def start_kube_scheduler(
    cp: launcher.ControlPlane, config: Obj, kubeconfig: Path, workdir: Path
) -> launcher.Component:
    """The rendered configuration run by the real kube-scheduler as the ServiceAccount, with
    delegated authentication and authorization (what needs the kube-system reader role)."""
    config_path = workdir / "chart-kube-scheduler.yaml"
    config_path.write_text(yaml.safe_dump(config))
    (port,) = launcher.free_ports(1)
    component = launcher.Component(
        "kube-scheduler (chart)",
        [
            str(cp.tools["kube-scheduler"]),
            f"--config={config_path}",
            f"--bind-address={launcher.LOOPBACK}",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--v=2",
        ],
        cp.log_dir / "kube-scheduler-chart.log",
    )
    component.start()
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # its in-memory self-signed cert; loopback only

    def healthy() -> bool:
        component.check_alive()
        with urllib.request.urlopen(
            f"https://{launcher.LOOPBACK}:{port}/healthz", timeout=2, context=insecure
        ) as resp:
            return bool(resp.status == 200)

    try:
        launcher.wait_for(
            "chart kube-scheduler /healthz", healthy, timeout=60, on_timeout=component.tail
        )
    except BaseException:
        component.stop()
        raise
    return component


def lease_holder(cp: launcher.ControlPlane, name: str) -> str:
    status, lease = cp.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}"
    )
    return str(lease.get("spec", {}).get("holderIdentity") or "") if status == 200 else ""


def forbidden(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"forbidden", line, re.IGNORECASE)]


def test_the_chart_pod_schedules_the_example_gangs_with_its_own_service_account(
    control_plane: launcher.ControlPlane,
    installed: list[Obj],
    namespace: str,
    gpu_nodes: Callable[..., Obj],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    cp = control_plane
    for i in range(4):  # one NVLink clique for the 4 x 8-GPU training gang
        gpu_nodes(f"chart-nvl-{i}", gpus=8, clique="chart-nvl")
    gpu_nodes("chart-spare", gpus=8)  # the annotation-only gang packs here
    kubeconfig = service_account_kubeconfig(cp, tmp_path / "phalanx.kubeconfig")
    caplog.set_level(logging.DEBUG, logger="phalanx")

    sidecar = Sidecar(kubeconfig).start()
    scheduler: launcher.Component | None = None
    try:
        launcher.wait_for("Phalanx /readyz", lambda: sidecar.status("/readyz") == 200, timeout=30)
        assert sidecar.status("/healthz") == 200

        config_map = next(d for d in installed if d["kind"] == "ConfigMap")
        config = yaml.safe_load(config_map["data"]["kube-scheduler.yaml"])
        (extender,) = config["extenders"]
        assert extender["urlPrefix"] == "http://127.0.0.1:8888"
        extender["urlPrefix"] = sidecar.url  # the same loopback extender, on a free port
        config["clientConnection"]["kubeconfig"] = str(kubeconfig)
        scheduler = start_kube_scheduler(cp, config, kubeconfig, tmp_path)
        launcher.wait_for(
            "kube-scheduler leads", lambda: lease_holder(cp, "phalanx-scheduler"), timeout=30
        )

        dyn = DynamicClient(cp.api_client())
        pods: list[str] = []
        for example in ("pytorchjob-gang.yaml", "annotation-gang.yaml"):
            for doc in documents(EXAMPLES / example):
                apply(dyn, doc, namespace=namespace)
                if doc["kind"] == "Pod":
                    pods.append(doc["metadata"]["name"])

        core = cp.core_v1()

        def placements() -> dict[str, str] | None:
            found = {
                # a pod read back from the API server always has a spec
                p: core.read_namespaced_pod(p, namespace).spec.node_name  # type: ignore[union-attr]
                for p in pods
            }
            return cast(dict[str, str], found) if all(found.values()) else None  # all bound

        placed = launcher.wait_for(
            "every example pod bound",
            placements,
            timeout=90,
            on_timeout=lambda: scheduler.tail(30) if scheduler else "",
        )
        training = {n for p, n in placed.items() if p.startswith("llm-pretrain")}
        assert training == {f"chart-nvl-{i}" for i in range(4)}  # one member per clique node
        assert {n for p, n in placed.items() if p.startswith("rl-sim")} == {"chart-spare"}

        group_path = (
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups/llm-pretrain"
        )

        def group_scheduled() -> bool:
            _, group = cp.request("GET", group_path)
            return (group.get("status") or {}).get("phase") in ("Scheduled", "Running")

        launcher.wait_for("PodGroup status written", group_scheduled, timeout=30)
        _, events = cp.request("GET", f"/api/v1/namespaces/{namespace}/events")
        reasons = {e["reason"] for e in events["items"] if e.get("reportingComponent") == "phalanx"}
        assert "Bound" in reasons or "Reserved" in reasons, reasons
        launcher.wait_for(
            "roll-forward lease held", lambda: lease_holder(cp, "phalanx-rollforward"), timeout=30
        )

        registry = sidecar.metrics.registry
        assert registry.get_sample_value("phalanx_bindings_total", {"result": "bound"}) == len(pods)
        assert registry.get_sample_value("phalanx_partial_gangs") == 0
    finally:
        if scheduler is not None:
            scheduler.stop()
        sidecar.stop()

    denied = [r for r in caplog.records if "forbidden" in str(r.__dict__).lower()]
    assert not denied, [r.__dict__ for r in denied]
    assert not forbidden(scheduler.tail(100_000) if scheduler else ""), "kube-scheduler was refused"


# ---- helm install ------------------------------------------------------------------------


def test_helm_installs_next_to_the_crd_and_uninstalls(
    control_plane: launcher.ControlPlane, installed: list[Obj], helm_tool: Path, tmp_path: Path
) -> None:
    env = helm_env(control_plane, tmp_path)
    release, ns = "phalanx-helm", "phalanx-helm"

    def helm_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(helm_tool), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    # The PodGroup CRD is already installed (by the plain manifests, as scheduler-plugins
    # would have): --skip-crds leaves it alone.
    install = helm_run(
        "install", release, str(REPO / "helm" / "phalanx"), "--namespace", ns, "--create-namespace",
        "--skip-crds", "--set", "replicaCount=2",
    )  # fmt: skip
    try:
        assert install.returncode == 0, install.stderr
        assert "STATUS: deployed" in install.stdout
        assert "one leader schedules" in install.stdout  # NOTES.txt
        assert "phalanx explain <ns>/<name> --server http://127.0.0.1:8888" in install.stdout
        status, cm = control_plane.request(
            "GET", f"/api/v1/namespaces/{ns}/configmaps/{release}-scheduler-config"
        )
        assert status == 200, cm
    finally:
        uninstall = helm_run("uninstall", release, "--namespace", ns)
    assert uninstall.returncode == 0, uninstall.stderr
    status, _ = control_plane.request(
        "GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{release}"
    )
    assert status == 404


def test_helm_refuses_a_kube_scheduler_newer_than_the_api_server_it_talks_to(
    control_plane: launcher.ControlPlane, helm_tool: Path, tmp_path: Path
) -> None:
    # helm reads the version from the real kube-apiserver here, not from a flag.
    minor = int(launcher.read_versions()["KUBE_VERSION"].split(".")[1])
    newer = f"v1.{minor + 1}.0"
    done = subprocess.run(
        [
            str(helm_tool), "install", "phalanx-skew", str(REPO / "helm" / "phalanx"),
            "--namespace", "phalanx-skew", "--dry-run=server",
            "--set", f"kubeScheduler.image.tag={newer}",
        ],
        capture_output=True, text=True, env=helm_env(control_plane, tmp_path), timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    assert f"kubeScheduler.image.tag ({newer}) runs kube-scheduler 1.{minor + 1}, newer" in (
        done.stderr
    )
