"""A real, throw-away Kubernetes control plane for Phalanx's e2e tier (DESIGN.md §9).

Runs the upstream binaries built by ``tests/controlplane/build-tools.sh`` (versions pinned
in ``tests/controlplane/versions.env``) on 127.0.0.1 and free ports, in a temp dir:

* **etcd** (one member, ``--unsafe-no-fsync``: test data only);
* **kube-apiserver**: TLS with a CA made here by ``openssl``, static-token authentication,
  ``--authorization-mode=Node,RBAC``, a service-account signing key (so TokenRequest works),
  the ``ServiceAccount`` and ``TaintNodesByCondition`` admission plugins disabled (there is no
  kube-controller-manager to create ``default`` ServiceAccounts or to lift the not-ready taint
  from new nodes: pods get no service-account token volume), ``--endpoint-reconciler-type=none``;
* **kwok** managing the fake nodes annotated ``kwok.x-k8s.io/node=fake`` with the Stage
  configs in ``tests/controlplane/stages/`` (nodes turn Ready, bound pods turn Running);
* optionally **kube-scheduler** (:meth:`ControlPlane.start_scheduler`) with a caller-given
  ``KubeSchedulerConfiguration``, the release's own or another build of it (scheduler-plugins':
  :func:`find_scheduler_plugins`);
* optionally **kube-controller-manager** (:meth:`ControlPlane.start_controller_manager`) with
  only the controllers a test names: by default the resourceclaim controller, which turns a
  pod's ResourceClaimTemplates into ResourceClaims (DRA). Built by the
  ``kube-controller-manager`` family, for the default release only.

Identities (static tokens): ``admin`` in ``system:masters`` (the admin kubeconfig, for tests,
kubectl and kwok); ``system:kube-scheduler`` for kube-scheduler, i.e. its bootstrap RBAC role,
plus leases of any name (so a profile may use its own ``leaderElection.resourceName``).

Without :meth:`ControlPlane.start_controller_manager` no controller runs at all: no garbage
collection, no namespace finalisation (a deleted namespace stays Terminating), no
Deployment/Job controllers, and nothing marks a node NotReady. Tests create pods directly and
use fresh namespaces.

Every component runs in its own process group and gets SIGKILL if the Python process that
started it dies (``PR_SET_PDEATHSIG``; Linux ties that to the starting *thread*, so start the
control plane from a thread that lives as long as it). :meth:`ControlPlane.stop` terminates the
groups (SIGTERM, then SIGKILL) and is also registered with ``atexit``.

Three Kubernetes releases are built (versions.env): ``KUBE_VERSION`` (the default),
``KUBE_136_VERSION`` and ``KUBE_NEXT_VERSION``; ``ControlPlane(kube_version="1.36")`` or
``"1.37"`` runs that release's kube-apiserver and kube-scheduler with the same etcd and kwok.
:data:`NATIVE_GANG_API` holds, per release, the feature gates and ``--runtime-config`` that
turn on the upstream gang API.

Library use::

    with ControlPlane() as cp:
        cp.create_gpu_node("gpu-0", gpus=8)
        cp.start_scheduler()            # vanilla kube-scheduler
        core = cp.core_v1()             # kubernetes.client.CoreV1Api on the admin kubeconfig

    gang = NATIVE_GANG_API["1.37"]
    with ControlPlane(
        kube_version="1.37",
        apiserver_feature_gates=gang.apiserver_feature_gates,
        runtime_config=gang.runtime_config,
        scheduler_feature_gates=gang.scheduler_feature_gates,
        apiserver_flags=["--max-requests-inflight=5"],   # last: overrides the launcher's own
    ) as cp: ...

CLI (developers, ``bench/``)::

    python tests/controlplane/launcher.py up --nodes 4   # prints the kubeconfig; Ctrl-C stops
    python tests/controlplane/launcher.py up --kube-version 1.37 --native-gang-api

Environment:

* ``PHALANX_TOOLS_BIN``   — use binaries from this directory instead of the build cache
  (etcd, kwok and the default release; a newer release always comes from the cache);
* ``PHALANX_TOOLS_CACHE`` — the build cache root (default ``$HOME/.cache/phalanx-tools``);
* ``PHALANX_E2E_KEEP``    — ``1`` keeps the temp dir (logs, certs, kubeconfigs) after stop.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import importlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import yaml

if TYPE_CHECKING:  # the kubernetes client is imported lazily: starting a cluster needs none
    from kubernetes.client import ApiClient, CoreV1Api

HERE = Path(__file__).resolve().parent
VERSIONS_FILE = HERE / "versions.env"
STAGES_DIR = HERE / "stages"
BUILD_SCRIPT = "tests/controlplane/build-tools.sh"

LOOPBACK = "127.0.0.1"
#: Only written into API objects (Service ClusterIPs, kwok's fake pod IPs); never dialled.
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

#: kwok manages only the nodes carrying this annotation (create_gpu_node sets it).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"

#: kube-scheduler's client rate limits (upstream defaults are qps 50 / burst 100, which
#: throttle binding and event writes when a benchmark floods the cluster with pods).
SCHEDULER_CLIENT_QPS = 500
SCHEDULER_CLIENT_BURST = 1000

GPU_RESOURCE = "nvidia.com/gpu"

_T = TypeVar("_T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or did something unexpected."""


class ToolsMissingError(ControlPlaneError):
    """The upstream binaries have not been built."""


# ------------------------------------------------------------------------------ versions


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse ``versions.env`` (``KEY=value`` lines, ``#`` comments)."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: not a KEY=value line: {raw!r}")
        versions[key.strip()] = value.strip()
    return versions


def tools_cache_root() -> Path:
    """build-tools.sh's cache: ``PHALANX_TOOLS_CACHE``, else ``~/.cache/phalanx-tools``."""
    root = os.environ.get("PHALANX_TOOLS_CACHE") or Path.home() / ".cache" / "phalanx-tools"
    return Path(root).expanduser()


def tools_bin_dir() -> Path:
    """Where build-tools.sh puts the default tool set (the versions pinned in versions.env).

    ``PHALANX_TOOLS_BIN`` overrides it: etcd, kwok and the default release's kube-apiserver
    and kube-scheduler, plus helm and promtool when the deploy tests run and
    kube-scheduler-plugins when the queue-order test runs.
    """
    override = os.environ.get("PHALANX_TOOLS_BIN")
    if override:
        return Path(override).expanduser()
    v = read_versions()
    entry = f"{v['KUBE_VERSION']}-{v['KWOK_VERSION']}-{v['ETCD_VERSION']}"
    return tools_cache_root() / entry / "bin"


@dataclass(frozen=True, slots=True)
class KubeRelease:
    """A Kubernetes release build-tools.sh pins: its kube-apiserver and kube-scheduler."""

    version: str  # "v1.37.2"
    family: str  # the build-tools.sh family that builds it
    bin_dir: Path  # where that family's kube-apiserver and kube-scheduler are

    @property
    def minor(self) -> str:
        """``"1.37"`` for ``v1.37.2``."""
        major, minor, _ = self.version.removeprefix("v").split(".", 2)
        return f"{major}.{minor}"


def kube_releases() -> dict[str, KubeRelease]:
    """The pinned releases by minor (``"1.35"``, ``"1.36"``, ``"1.37"``), the default one
    first."""
    v = read_versions()
    default = KubeRelease(v["KUBE_VERSION"], "kube", tools_bin_dir())
    others = (
        KubeRelease(v[key], family, tools_cache_root() / f"kube-{v[key]}" / "bin")
        for key, family in (("KUBE_136_VERSION", "kube-136"), ("KUBE_NEXT_VERSION", "kube-next"))
    )
    return {r.minor: r for r in (default, *others)}


def kube_release(kube_version: str | None = None) -> KubeRelease:
    """The pinned release ``kube_version`` names: ``"1.37"``, ``"v1.37"`` or ``"v1.37.2"``.

    ``None`` is the default release (``KUBE_VERSION``). A version that is not pinned raises
    ``ValueError`` naming the pinned ones.
    """
    releases = kube_releases()
    if kube_version is None:
        return next(iter(releases.values()))
    wanted = kube_version.strip().removeprefix("v")
    minor = ".".join(wanted.split(".")[:2])
    release = releases.get(minor)
    if release is None or wanted not in (minor, release.version.removeprefix("v")):
        pinned = ", ".join(r.version for r in releases.values())
        raise ValueError(
            f"Kubernetes {kube_version!r} is not built here (versions.env pins {pinned})"
        )
    return release


TOOL_NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")
KUBE_TOOL_NAMES = ("kube-apiserver", "kube-scheduler")
CONTROLLER_MANAGER = "kube-controller-manager"
#: scheduler-plugins' kube-scheduler (family scheduler-plugins), in the default entry.
SCHEDULER_PLUGINS = "kube-scheduler-plugins"


def find_tools(bin_dir: Path | None = None, *, kube_version: str | None = None) -> dict[str, Path]:
    """Map each tool name to its binary, or raise :class:`ToolsMissingError`.

    ``bin_dir`` holds all four tools. Otherwise etcd and kwok come from :func:`tools_bin_dir`
    and kube-apiserver and kube-scheduler from ``kube_version``'s build (the default release:
    the same directory).
    """
    release = kube_release(kube_version)
    base = bin_dir or tools_bin_dir()
    kube_dir = base if bin_dir is not None or release.family == "kube" else release.bin_dir
    tools = {name: (kube_dir if name in KUBE_TOOL_NAMES else base) / name for name in TOOL_NAMES}
    missing = [str(path) for path in tools.values() if not os.access(path, os.X_OK)]
    if missing:
        families = "" if release.family == "kube" else f" {release.family}"
        raise ToolsMissingError(
            f"control-plane binaries missing: {', '.join(missing)}. "
            f"Build them with `bash {BUILD_SCRIPT}{families}` (cold: minutes on 2 cores; "
            "README.md has the measured times; cached afterwards), or point PHALANX_TOOLS_BIN "
            f"at a directory holding {', '.join(TOOL_NAMES)}."
        )
    if shutil.which("openssl") is None:
        raise ToolsMissingError("`openssl` is needed to make the control plane's certificates")
    return tools


def find_controller_manager(kube_version: str | None = None) -> Path:
    """kube-controller-manager of the default release (``build-tools.sh
    kube-controller-manager``), or :class:`ToolsMissingError`."""
    release = kube_release(kube_version)
    if release.family != "kube":
        raise ToolsMissingError(
            f"kube-controller-manager is built for {kube_release().version} only, "
            f"not {release.version}"
        )
    return _default_entry_tool(
        CONTROLLER_MANAGER,
        "kube-controller-manager",
        "about two minutes on 2 cores with warm Go caches; `make tools` builds it too",
    )


def find_scheduler_plugins() -> Path:
    """scheduler-plugins' kube-scheduler (``build-tools.sh scheduler-plugins``), for
    :meth:`ControlPlane.start_scheduler`'s ``binary``; or :class:`ToolsMissingError`. It embeds
    the kube-scheduler of ``SCHEDULER_PLUGINS_VERSION``'s release (versions.env), one minor
    behind the default release."""
    return _default_entry_tool(SCHEDULER_PLUGINS, "scheduler-plugins")


def find_helm() -> Path:
    """The pinned helm (``build-tools.sh helm``), or :class:`ToolsMissingError`."""
    return _default_entry_tool("helm", "helm")


def _default_entry_tool(
    name: str, family: str, hint: str = "`make tools-e2e` builds it too"
) -> Path:
    path = tools_bin_dir() / name
    if not os.access(path, os.X_OK):
        raise ToolsMissingError(
            f"{path} is missing. Build it with `bash {BUILD_SCRIPT} {family}` ({hint})."
        )
    return path


@dataclass(frozen=True, slots=True)
class RayOperatorTools:
    """KubeRay's ray-operator as build-tools.sh caches it: the binary and its CRDs."""

    version: str
    binary: Path
    crds: tuple[Path, ...]  # RayCluster, RayJob, RayService (config/crd/bases of the module)


RAY_CRD_FILES = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")


def find_ray_operator() -> RayOperatorTools:
    """The cached ray-operator build (``build-tools.sh ray-operator``), or ToolsMissingError."""
    version = read_versions()["KUBERAY_VERSION"]
    entry = tools_cache_root() / f"kuberay-{version}"
    tools = RayOperatorTools(
        version,
        entry / "bin" / "ray-operator",
        tuple(entry / "crds" / name for name in RAY_CRD_FILES),
    )
    missing = [str(p) for p in (tools.binary, *tools.crds) if not p.exists()]
    if missing:
        raise ToolsMissingError(
            f"KubeRay {version} is not built: {', '.join(missing)} missing. "
            f"Build it with `bash {BUILD_SCRIPT} ray-operator`."
        )
    return tools


@dataclass(frozen=True, slots=True)
class NativeGangApi:
    """What one release needs switched on to serve and schedule the upstream gang API
    (``scheduling.k8s.io`` Workload/PodGroup) with kube-scheduler's own gang plugin."""

    api_version: str  # the scheduling.k8s.io version that carries it
    apiserver_feature_gates: Mapping[str, bool]
    scheduler_feature_gates: Mapping[str, bool]
    # Other versions to serve (1.37: v1alpha3, the only one with CompositePodGroup).
    also_served: tuple[str, ...] = ()

    @property
    def runtime_config(self) -> dict[str, bool]:
        """kube-apiserver's ``--runtime-config``: alpha and beta versions are off by default."""
        return {self.api_version: True, **dict.fromkeys(self.also_served, True)}


#: Per minor, from k8s.io/kubernetes pkg/features/kube_features.go (gates) and
#: pkg/controlplane/instance.go (served versions) of that release.
NATIVE_GANG_API: Mapping[str, NativeGangApi] = {
    # 1.35: Workload (spec.podGroups[].policy.gang.minCount) + pod spec.workloadRef; the
    # scheduler's GangScheduling plugin has a gate of its own.
    "1.35": NativeGangApi(
        "scheduling.k8s.io/v1alpha1",
        {"GenericWorkload": True},
        {"GenericWorkload": True, "GangScheduling": True},
    ),
    # 1.37: standalone PodGroup (spec.schedulingPolicy.gang.minCount) + pod
    # spec.schedulingGroup.podGroupName; GenericWorkload (beta, off by default) alone turns on
    # the API, the RBAC for it and the GangScheduling plugin. The API server drops a
    # PodGroup's spec.schedulingConstraints (its topology key) unless
    # TopologyAwareWorkloadScheduling (alpha) is on too; kube-scheduler is left without it,
    # so it generates no topology placements of its own: Phalanx places by that key.
    # CompositePodGroup (alpha) serves scheduling.k8s.io/v1alpha3 CompositePodGroups and
    # PodGroups' spec.parentCompositePodGroupName (dropped without it); kube-scheduler is
    # left without it too, so its own gang plugin never gates a composite.
    # 1.36: standalone PodGroup (spec.schedulingPolicy.gang.minCount, immutable) + pod
    # spec.schedulingGroup.podGroupName, served as scheduling.k8s.io/v1alpha2 only (its
    # Workload there is a set of PodGroup templates); the status condition is
    # PodGroupScheduled. GenericWorkload (alpha) turns on the API and the pod-group cycle,
    # the GangScheduling plugin still has a gate of its own (as in 1.35). As in 1.37,
    # TopologyAwareWorkloadScheduling (alpha) on kube-apiserver only keeps a PodGroup's
    # spec.schedulingConstraints without kube-scheduler generating placements of its own.
    "1.36": NativeGangApi(
        "scheduling.k8s.io/v1alpha2",
        {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True},
        {"GenericWorkload": True, "GangScheduling": True},
    ),
    "1.37": NativeGangApi(
        "scheduling.k8s.io/v1beta1",
        {
            "GenericWorkload": True,
            "TopologyAwareWorkloadScheduling": True,
            "CompositePodGroup": True,
        },
        {"GenericWorkload": True},
        also_served=("scheduling.k8s.io/v1alpha3",),
    ),
}


# ------------------------------------------------------------------------------ helpers


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together, then released)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(
    what: str,
    probe: Callable[[], _T | None],
    *,
    timeout: float,
    interval: float = 0.2,
    on_timeout: Callable[[], str] | None = None,
) -> _T:
    """Call ``probe`` until it returns something truthy; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001  # any probe failure means "not yet": retry
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            extra = f"\n{on_timeout()}" if on_timeout else ""
            raise ControlPlaneError(
                f"timed out after {timeout:.0f}s waiting for {what}{detail}{extra}"
            )
        time.sleep(interval)


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Child-side: get SIGKILL when the parent dies (Linux), so a killed test leaves no orphans."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _switches(flag: str, values: Mapping[str, bool]) -> list[str]:
    """``--flag=a=true,b=false`` for a non-empty mapping (sorted: stable logs), else nothing."""
    if not values:
        return []
    pairs = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(values.items()))
    return [f"{flag}={pairs}"]


# ------------------------------------------------------------------------------ processes


@dataclass
class Component:
    """One upstream process, in its own process group, logging to ``log_path``."""

    name: str
    argv: list[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log: IO[bytes] | None = field(default=None, init=False, repr=False)

    def start(self) -> None:
        if self.running:
            raise ControlPlaneError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        self._log.write(f"\n===== {stamp} starting: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(self.env) if self.env is not None else None,
            start_new_session=True,  # own process group: stop() kills it and its children
            # prctl(PDEATHSIG) only; async-signal-safe enough, and components start from
            # one thread.
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            code = self.process.returncode
            raise ControlPlaneError(
                f"{self.name} exited with code {code}; last log lines:\n{self.tail()}"
            )

    def stop(self, timeout: float = 15.0, *, kill: bool = False) -> None:
        """SIGTERM the process group, then SIGKILL it if it is still there after ``timeout``.

        ``kill=True`` sends SIGKILL at once (a crash, no graceful shutdown).
        """
        proc = self.process
        if proc is not None:
            pgid = proc.pid  # start_new_session: the group id is the leader's pid
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL if kill else signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pgid, signal.SIGKILL)
                    proc.wait(10)
            # Members of the group that outlived the leader (none expected) go too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 40) -> str:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


# ------------------------------------------------------------------------------ control plane


class ControlPlane:
    """etcd + kube-apiserver + kwok (+ kube-scheduler on demand) on 127.0.0.1.

    Use as a context manager, or call :meth:`start` / :meth:`stop` (``stop`` is idempotent and
    also registered with ``atexit``).
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        workdir: Path | None = None,
        keep_workdir: bool | None = None,
        start_kwok: bool = True,
        startup_timeout: float = 90.0,
        apiserver_extra_args: Sequence[str] = (),
        kube_version: str | None = None,
        apiserver_flags: Sequence[str] = (),
        apiserver_feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Mapping[str, bool] | None = None,
        scheduler_feature_gates: Mapping[str, bool] | None = None,
    ) -> None:
        """``kube_version``: the pinned release to run (:func:`kube_release`; default
        ``KUBE_VERSION``). ``apiserver_flags`` come last on kube-apiserver's command line, so
        they override this launcher's own (``apiserver_extra_args`` is their older name, kept
        for existing callers). ``apiserver_feature_gates`` and ``runtime_config`` become
        ``--feature-gates`` and ``--runtime-config``; ``scheduler_feature_gates`` are
        kube-scheduler's ``--feature-gates`` for every :meth:`start_scheduler`.
        """
        self.release = kube_release(kube_version)
        self.tools = find_tools(bin_dir, kube_version=self.release.version)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="phalanx-cp-"))
        if keep_workdir is None:
            keep_workdir = os.environ.get("PHALANX_E2E_KEEP", "") not in ("", "0")
        self.keep_workdir = keep_workdir
        self.start_kwok = start_kwok
        self.startup_timeout = startup_timeout
        self.apiserver_extra_args = [*apiserver_extra_args, *apiserver_flags]
        self.apiserver_feature_gates = dict(apiserver_feature_gates or {})
        self.runtime_config = dict(runtime_config or {})
        self.scheduler_feature_gates = dict(scheduler_feature_gates or {})

        self.pki_dir = self.workdir / "pki"
        self.log_dir = self.workdir / "logs"
        ports = free_ports(4)
        self.etcd_port, self.etcd_peer_port, self.apiserver_port, self.scheduler_port = ports
        self.server = f"https://{LOOPBACK}:{self.apiserver_port}"
        self.admin_token = base64.b32encode(os.urandom(20)).decode().lower()
        self.scheduler_token = base64.b32encode(os.urandom(20)).decode().lower()

        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.scheduler_kubeconfig = self.workdir / "kube-scheduler.kubeconfig"
        self.scheduler_config_path = self.workdir / "kube-scheduler.yaml"
        self.ca_file = self.pki_dir / "ca.crt"
        self.sa_public_key = self.pki_dir / "sa.pub"

        self.etcd: Component | None = None
        self.apiserver: Component | None = None
        self.kwok: Component | None = None
        self.scheduler: Component | None = None
        self.controller_manager: Component | None = None
        self._started = False
        self._stopped = False
        self._api_client: ApiClient | None = None
        self._ssl = ssl.create_default_context()  # trusts only our CA, once it exists
        self._http = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -------------------------------------------------------------- lifecycle

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        if self._started:
            return self
        self._started = True
        atexit.register(self.stop)
        try:
            self._write_pki()
            self._write_auth_files()
            self._start_etcd()
            self._start_apiserver()
            self._bootstrap_rbac()
            if self.start_kwok:
                self._start_kwok()
        except BaseException:
            sys.stderr.write(self.log_tails())
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop everything (scheduler, kwok, apiserver, etcd); remove the temp dir unless kept."""
        if self._stopped:
            return
        self._stopped = True
        for comp in (self.controller_manager, self.scheduler, self.kwok, self.apiserver, self.etcd):
            if comp is not None:
                comp.stop()
        if self._api_client is not None:
            api_client: Any = self._api_client  # ApiClient.close is untyped
            with contextlib.suppress(Exception):
                api_client.close()
            self._api_client = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def components(self) -> list[Component]:
        every = (self.etcd, self.apiserver, self.kwok, self.scheduler, self.controller_manager)
        return [c for c in every if c is not None]

    def pids(self) -> dict[str, int]:
        """Process ids of the running components (their process-group ids too)."""
        return {c.name: c.pid for c in self.components if c.running and c.pid is not None}

    def log_tails(self, lines: int = 40) -> str:
        """The last ``lines`` lines of every component's log, for failure reports."""
        parts = [f"----- control plane in {self.workdir} -----"]
        for comp in self.components:
            state = "running" if comp.running else "stopped"
            parts.append(f"----- {comp.name} ({state}) {comp.log_path} -----\n{comp.tail(lines)}")
        return "\n".join(parts) + "\n"

    # -------------------------------------------------------------- pki and auth

    def _write_pki(self) -> None:
        d = self.pki_dir
        d.mkdir(parents=True, exist_ok=True)
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        _openssl(
            "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
            "-subj", "/CN=phalanx-e2e-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-addext", "subjectKeyIdentifier=hash",
            cwd=d,
        )  # fmt: skip
        (d / "apiserver.ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1\n"
        )
        _openssl("req", "-new", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr",
                 "-subj", "/CN=kube-apiserver", cwd=d)  # fmt: skip
        _openssl(
            "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "apiserver.crt", "-days", "3650",
            "-extfile", "apiserver.ext",
            cwd=d,
        )  # fmt: skip
        # Service-account token signing key pair (RS256), so TokenRequest works.
        _openssl(
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "sa.key",
            cwd=d,
        )
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))

    def _write_auth_files(self) -> None:
        # token,user,uid,"group1,group2"
        (self.pki_dir / "tokens.csv").write_text(
            f'{self.admin_token},admin,phalanx-e2e-admin,"system:masters"\n'
            f"{self.scheduler_token},system:kube-scheduler,phalanx-e2e-kube-scheduler\n"
        )
        self._write_kubeconfig(self.kubeconfig, "admin", self.admin_token)
        self._write_kubeconfig(self.scheduler_kubeconfig, "kube-scheduler", self.scheduler_token)

    def _write_kubeconfig(self, path: Path, user: str, token: str) -> None:
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "phalanx-e2e",
                    "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {"name": f"{user}@phalanx-e2e", "context": {"cluster": "phalanx-e2e", "user": user}}
            ],
            "current-context": f"{user}@phalanx-e2e",
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    # -------------------------------------------------------------- etcd

    def _start_etcd(self) -> None:
        client_url = f"http://{LOOPBACK}:{self.etcd_port}"
        peer_url = f"http://{LOOPBACK}:{self.etcd_peer_port}"
        self.etcd = Component(
            "etcd",
            [
                str(self.tools["etcd"]),
                "--name=phalanx-e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=phalanx-e2e={peer_url}",
                "--unsafe-no-fsync=true",  # throw-away data: don't pay for fsync
                "--log-level=warn",
            ],
            self.log_dir / "etcd.log",
        )
        self.etcd.start()

        def healthy() -> bool:
            assert self.etcd is not None
            self.etcd.check_alive()
            with self._http.open(f"{client_url}/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")

        wait_for("etcd /health", healthy, timeout=self.startup_timeout, on_timeout=self.etcd.tail)

    # -------------------------------------------------------------- apiserver

    def _apiserver_argv(self) -> list[str]:
        pki = self.pki_dir
        return [
            str(self.tools["kube-apiserver"]),
            f"--etcd-servers=http://{LOOPBACK}:{self.etcd_port}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",  # client certs signed by ca.key also work
            f"--token-auth-file={pki / 'tokens.csv'}",
            # Publishes a request-header CA in kube-system/extension-apiserver-authentication,
            # which kube-scheduler's delegated authentication insists on.
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # No kube-controller-manager runs: nothing would create the `default` ServiceAccount
            # that the ServiceAccount plugin requires of every pod, nor remove the not-ready
            # taint that TaintNodesByCondition puts on every new node.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            # The `kubernetes` Service's Endpoints may not point at a loopback address.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            # On SIGTERM close open watches (after at most 2s) instead of letting them hold
            # the HTTP/2 server's graceful shutdown open for its full 60s.
            "--shutdown-watch-termination-grace-period=2s",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            *_switches("--feature-gates", self.apiserver_feature_gates),
            *_switches("--runtime-config", self.runtime_config),
            *self.apiserver_extra_args,
        ]

    def _start_apiserver(self) -> None:
        self.apiserver = Component(
            "kube-apiserver", self._apiserver_argv(), self.log_dir / "kube-apiserver.log"
        )
        self.apiserver.start()
        self._wait_apiserver_ready()

    def _wait_apiserver_ready(self) -> None:
        assert self.apiserver is not None
        apiserver = self.apiserver

        def ready() -> bool:
            apiserver.check_alive()
            status, _ = self.request("GET", "/readyz")
            if status != 200:
                return False
            status, _ = self.request("GET", "/api/v1/namespaces/default")
            return status == 200

        wait_for(
            "kube-apiserver /readyz", ready, timeout=self.startup_timeout, on_timeout=apiserver.tail
        )

    def restart_apiserver(self, *, graceful: bool = True) -> None:
        """Stop kube-apiserver and start it again on the same port (etcd keeps the data).

        ``graceful``: SIGTERM (open watches are closed, clients see their streams end);
        otherwise SIGKILL (a crash: connections just break). Returns once it is ready again.
        """
        if self.apiserver is None:
            raise ControlPlaneError("the control plane is not started")
        self.apiserver.stop(kill=not graceful)
        self.apiserver.start()
        self._wait_apiserver_ready()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        """A raw admin request to the apiserver (stdlib only): ``(status, JSON or text)``."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        https = urllib.request.HTTPSHandler(context=self._ssl)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), https)
        try:
            with opener.open(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        text = raw.decode(errors="replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def _bootstrap_rbac(self) -> None:
        """Let kube-scheduler's identity hold leader-election leases of any name."""
        name = "phalanx-e2e:kube-scheduler-leases"
        role: dict[str, Any] = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        }
        binding: dict[str, Any] = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "system:kube-scheduler",
                }
            ],
        }
        for path, obj in (
            ("/apis/rbac.authorization.k8s.io/v1/clusterroles", role),
            ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
        ):
            status, answer = self.request("POST", path, obj)
            if status not in (201, 409):
                raise ControlPlaneError(f"creating {obj['kind']} failed: {status} {answer}")

    # -------------------------------------------------------------- kwok

    def _start_kwok(self) -> None:
        stages = sorted(STAGES_DIR.glob("*.yaml"))
        if not stages:
            raise ControlPlaneError(f"no kwok Stage configs in {STAGES_DIR}")
        argv = [
            str(self.tools["kwok"]),
            f"--kubeconfig={self.kubeconfig}",
            *(f"--config={s}" for s in stages),
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            f"--cidr={POD_CIDR}",
        ]
        # kwok also reads ~/.kwok/kwok.yaml when present: give it a HOME of its own.
        env = {**os.environ, "HOME": str(self.workdir / "kwok-home")}
        env.pop("KUBECONFIG", None)
        self.kwok = Component("kwok", argv, self.log_dir / "kwok.log", env=env)
        self.kwok.start()
        # kwok has no health endpoint without --server-address; give it a moment to fail fast.
        time.sleep(0.5)
        self.kwok.check_alive()

    # -------------------------------------------------------------- kube-scheduler

    DEFAULT_SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
"""

    def render_scheduler_config(self, config_yaml: str | None = None) -> dict[str, Any]:
        """The caller's KubeSchedulerConfiguration with ``clientConnection`` filled in.

        ``clientConnection.kubeconfig`` always points at kube-scheduler's own kubeconfig;
        ``qps``/``burst`` default to :data:`SCHEDULER_CLIENT_QPS` / :data:`SCHEDULER_CLIENT_BURST`
        unless the caller set them. ``leaderElection`` and everything else is left as given.
        """
        config = yaml.safe_load(config_yaml or self.DEFAULT_SCHEDULER_CONFIG) or {}
        if not isinstance(config, dict):
            raise ValueError("the scheduler configuration must be a YAML mapping")
        config.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        config.setdefault("kind", "KubeSchedulerConfiguration")
        conn = config.setdefault("clientConnection", {})
        conn["kubeconfig"] = str(self.scheduler_kubeconfig)
        conn.setdefault("qps", SCHEDULER_CLIENT_QPS)
        conn.setdefault("burst", SCHEDULER_CLIENT_BURST)
        return config

    def start_scheduler(
        self,
        config_yaml: str | None = None,
        *,
        extra_args: Sequence[str] = (),
        feature_gates: Mapping[str, bool] | None = None,
        binary: Path | None = None,
    ) -> None:
        """Run kube-scheduler with ``config_yaml`` (a KubeSchedulerConfiguration; vanilla if None).

        ``feature_gates`` (default: the control plane's ``scheduler_feature_gates``) become its
        ``--feature-gates``; ``extra_args`` come last. ``binary`` runs instead of the release's
        kube-scheduler (e.g. :func:`find_scheduler_plugins`), with the same flags. Waits until
        its ``/healthz`` answers. Any running scheduler is stopped first.
        """
        if self.apiserver is None:
            raise ControlPlaneError("start the control plane before the scheduler")
        self.stop_scheduler()
        config = self.render_scheduler_config(config_yaml)
        self.scheduler_config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [
            str(binary or self.tools["kube-scheduler"]),
            f"--config={self.scheduler_config_path}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.scheduler_port}",
            f"--authentication-kubeconfig={self.scheduler_kubeconfig}",
            f"--authorization-kubeconfig={self.scheduler_kubeconfig}",
            f"--cert-dir={self.workdir / 'kube-scheduler-certs'}",
            "--v=2",
            *_switches(
                "--feature-gates",
                self.scheduler_feature_gates if feature_gates is None else feature_gates,
            ),
            *extra_args,
        ]
        self.scheduler = Component("kube-scheduler", argv, self.log_dir / "kube-scheduler.log")
        self.scheduler.start()
        scheduler = self.scheduler
        opener = self._scheduler_opener()

        def healthy() -> bool:
            scheduler.check_alive()
            with opener.open(
                f"https://{LOOPBACK}:{self.scheduler_port}/healthz", timeout=2
            ) as resp:
                return bool(resp.status == 200)

        try:
            wait_for(
                "kube-scheduler /healthz",
                healthy,
                timeout=self.startup_timeout,
                on_timeout=scheduler.tail,
            )
        except BaseException:
            self.stop_scheduler()
            raise

    def stop_scheduler(self, *, kill: bool = False) -> None:
        """SIGTERM kube-scheduler (``kill``: SIGKILL, a crash); nothing if none runs."""
        if self.scheduler is not None:
            self.scheduler.stop(kill=kill)

    @staticmethod
    def _scheduler_opener() -> urllib.request.OpenerDirector:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; loopback only
        return urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)
        )

    def scheduler_metrics(self) -> str:
        """kube-scheduler's ``/metrics`` (Prometheus text), read with the admin token."""
        return self.scheduler_get("/metrics")

    def scheduler_get(self, path: str) -> str:
        """GET ``path`` from kube-scheduler's secure port (``/metrics``; ``/configz``, the
        configuration it runs with its defaults filled in), with the admin token."""
        if self.scheduler is None or not self.scheduler.running:
            raise ControlPlaneError("kube-scheduler is not running")
        opener = self._scheduler_opener()
        req = urllib.request.Request(f"https://{LOOPBACK}:{self.scheduler_port}{path}")
        req.add_header("Authorization", f"Bearer {self.admin_token}")
        with opener.open(req, timeout=10) as resp:
            return str(resp.read().decode())

    # -------------------------------------------------------------- kube-controller-manager

    def start_controller_manager(
        self, controllers: Sequence[str] = ("resourceclaim-controller",)
    ) -> None:
        """Run kube-controller-manager with only ``controllers`` (its ``--controllers``).

        It acts with the admin kubeconfig (``--use-service-account-credentials=false``: no
        token controller runs to mint per-controller credentials), without leader election,
        and serves ``/healthz`` on a free port; returns once that answers. Any running one is
        stopped first.
        """
        if self.apiserver is None:
            raise ControlPlaneError("start the control plane before kube-controller-manager")
        self.stop_controller_manager()
        binary = find_controller_manager(self.release.version)
        (port,) = free_ports(1)
        argv = [
            str(binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(controllers)}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'kube-controller-manager-certs'}",
            "--v=2",
        ]
        self.controller_manager = Component(
            CONTROLLER_MANAGER, argv, self.log_dir / f"{CONTROLLER_MANAGER}.log"
        )
        self.controller_manager.start()
        manager = self.controller_manager
        opener = self._scheduler_opener()

        def healthy() -> bool:
            manager.check_alive()
            with opener.open(f"https://{LOOPBACK}:{port}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)

        try:
            wait_for(
                f"{CONTROLLER_MANAGER} /healthz",
                healthy,
                timeout=self.startup_timeout,
                on_timeout=manager.tail,
            )
        except BaseException:
            self.stop_controller_manager()
            raise

    def stop_controller_manager(self) -> None:
        if self.controller_manager is not None:
            self.controller_manager.stop()

    # -------------------------------------------------------------- kubernetes client

    def api_client(self) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` on the admin kubeconfig (created once, reused)."""
        if self._api_client is None:
            # Imported here: starting a cluster (the CLI, bench/) does not need the client.
            k8s_config: Any = importlib.import_module("kubernetes.config")
            self._api_client = k8s_config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api_client

    def core_v1(self) -> CoreV1Api:
        from kubernetes.client import CoreV1Api  # noqa: PLC0415

        return CoreV1Api(self.api_client())

    # -------------------------------------------------------------- nodes

    def create_gpu_node(
        self,
        name: str,
        gpus: int = 8,
        product: str = "NVIDIA-H100-80GB-HBM3",
        memory_mib: int = 81559,
        clique: str | None = None,
        zone: str | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        unschedulable: bool = False,
        cpu: str = "64",
        memory: str = "512Gi",
        *,
        pods: int = 110,
        family: str | None = None,
        annotations: Mapping[str, str] | None = None,
        wait_ready: bool = True,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Create a kwok-managed fake node with ``gpus`` × ``nvidia.com/gpu`` and GFD labels.

        ``gpus=0`` makes a CPU-only node (no ``nvidia.com/*`` labels or resources). ``taints``
        are ``{"key", "value", "effect"}`` mappings. The node is created with its capacity and
        allocatable in ``status`` (the create call keeps a node's status, as when a kubelet
        registers), kwok's node-initialize stage keeps them, and if they are missing anyway
        they are written through the ``status`` subresource. With ``wait_ready`` this returns
        once the node is Ready with the GPUs allocatable; it returns the node as a dict.
        """
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
        if gpus > 0:
            node_labels.update(
                gfd_labels(gpus=gpus, product=product, memory_mib=memory_mib, family=family)
            )
            if clique is not None:
                node_labels["nvidia.com/gpu.clique"] = clique
            resources[GPU_RESOURCE] = str(gpus)
        if zone is not None:
            node_labels["topology.kubernetes.io/zone"] = zone
        node_labels.update(labels or {})
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": node_labels,
                "annotations": {
                    KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                    "node.alpha.kubernetes.io/ttl": "0",
                    **(annotations or {}),
                },
            },
            "spec": {"taints": [dict(t) for t in taints], "unschedulable": unschedulable},
            "status": {"capacity": dict(resources), "allocatable": dict(resources)},
        }
        status, answer = self.request("POST", "/api/v1/nodes", body)
        if status != 201:
            raise ControlPlaneError(f"creating node {name} failed: {status} {answer}")

        def has_resources(node: Mapping[str, Any]) -> bool:
            alloc = node.get("status", {}).get("allocatable", {})
            return all(
                alloc.get(k) == v
                for k, v in resources.items()
                if k in (GPU_RESOURCE, "cpu", "pods")
            )

        if not has_resources(answer):
            patch = {"status": {"capacity": resources, "allocatable": resources}}
            status, answer = self.request(
                "PATCH",
                f"/api/v1/nodes/{name}/status",
                patch,
                content_type="application/merge-patch+json",
            )
            if status != 200:
                raise ControlPlaneError(
                    f"patching the status of node {name} failed: {status} {answer}"
                )
        if not wait_ready:
            return self.get_node(name)
        return self.wait_node_ready(name, timeout=timeout, check=has_resources)

    def get_node(self, name: str) -> dict[str, Any]:
        status, answer = self.request("GET", f"/api/v1/nodes/{name}")
        if status != 200:
            raise ControlPlaneError(f"getting node {name} failed: {status} {answer}")
        assert isinstance(answer, dict)
        return answer

    def wait_node_ready(
        self,
        name: str,
        *,
        timeout: float = 30.0,
        check: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Wait until node ``name`` is Ready (and ``check(node)`` holds); return it."""

        def ready() -> dict[str, Any] | None:
            if self.kwok is not None:
                self.kwok.check_alive()
            node = self.get_node(name)
            conditions = node.get("status", {}).get("conditions") or []
            is_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
            )
            return node if is_ready and (check is None or check(node)) else None

        return wait_for(f"node {name} Ready", ready, timeout=timeout, on_timeout=self.log_tails)


# ------------------------------------------------------------------------------ GFD labels

#: NVIDIA GPU Feature Discovery's `nvidia.com/gpu.family` for product name fragments.
_GPU_FAMILIES = (
    ("GB200", "blackwell"),
    ("B200", "blackwell"),
    ("B100", "blackwell"),
    ("H200", "hopper"),
    ("H100", "hopper"),
    ("H800", "hopper"),
    ("GH200", "hopper"),
    ("L40", "ada-lovelace"),
    ("L4", "ada-lovelace"),
    ("A100", "ampere"),
    ("A800", "ampere"),
    ("A40", "ampere"),
    ("A30", "ampere"),
    ("A10", "ampere"),
    ("T4", "turing"),
    ("V100", "volta"),
)


def gpu_family(product: str) -> str:
    """GFD's ``nvidia.com/gpu.family`` for a ``nvidia.com/gpu.product`` value (best effort)."""
    upper = product.upper()
    for fragment, family in _GPU_FAMILIES:
        if fragment in upper:
            return family
    return "undefined"


def gfd_labels(
    *, gpus: int, product: str, memory_mib: int, family: str | None = None
) -> dict[str, str]:
    """The GPU Feature Discovery labels Phalanx reads (DESIGN.md §3, GPU inventory)."""
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.family": family or gpu_family(product),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }


# ------------------------------------------------------------------------------ CLI


def _cli_up(args: argparse.Namespace) -> int:
    bin_dir = Path(args.bin_dir) if args.bin_dir else None
    stop_requested = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    release = kube_release(args.kube_version)
    gang = NATIVE_GANG_API[release.minor] if args.native_gang_api else None
    with ControlPlane(
        bin_dir=bin_dir,
        keep_workdir=args.keep,
        kube_version=release.version,
        apiserver_feature_gates=gang.apiserver_feature_gates if gang else None,
        runtime_config=gang.runtime_config if gang else None,
        scheduler_feature_gates=gang.scheduler_feature_gates if gang else None,
    ) as cp:
        for i in range(args.nodes):
            cp.create_gpu_node(f"{args.node_prefix}{i}", gpus=args.gpus, wait_ready=False)
        for i in range(args.nodes):
            cp.wait_node_ready(f"{args.node_prefix}{i}")
        if not args.no_scheduler:
            config = Path(args.scheduler_config).read_text() if args.scheduler_config else None
            cp.start_scheduler(config)
        sys.stderr.write(
            f"control plane up: apiserver {cp.server}, {args.nodes} GPU node(s), "
            f"scheduler {'off' if args.no_scheduler else 'on'}; logs in {cp.log_dir}\n"
            f"  export KUBECONFIG={cp.kubeconfig}\n"
            "Ctrl-C stops it.\n"
        )
        print(cp.kubeconfig, flush=True)
        while not stop_requested:
            for comp in cp.components:
                if comp is not cp.scheduler or not args.no_scheduler:
                    comp.check_alive()
            time.sleep(0.5)
        sys.stderr.write("stopping the control plane\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a cluster, print the kubeconfig path, run until Ctrl-C")
    up.add_argument("--nodes", type=int, default=0, help="kwok GPU nodes to create (default 0)")
    up.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node (default 8)")
    up.add_argument(
        "--node-prefix", default="gpu-node-", help="node name prefix (default gpu-node-)"
    )
    up.add_argument(
        "--kube-version", help="a pinned Kubernetes release, e.g. 1.37 (default KUBE_VERSION)"
    )
    up.add_argument(
        "--native-gang-api",
        action="store_true",
        help="serve the upstream gang API (scheduling.k8s.io Workload/PodGroup) and turn on "
        "kube-scheduler's gang plugin (the release's feature gates and runtime-config)",
    )
    up.add_argument("--no-scheduler", action="store_true", help="do not start kube-scheduler")
    up.add_argument(
        "--scheduler-config", help="a KubeSchedulerConfiguration YAML file (default vanilla)"
    )
    up.add_argument(
        "--bin-dir", help="directory with the binaries (default: the build-tools.sh cache)"
    )
    up.add_argument(
        "--keep", action="store_true", default=None, help="keep the temp dir after stopping"
    )
    sub.add_parser("bin-dir", help="print where the binaries are expected")
    args = parser.parse_args(argv)
    if args.command == "bin-dir":
        print(tools_bin_dir())
        return 0
    try:
        return _cli_up(args)
    except (ToolsMissingError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


@contextlib.contextmanager
def control_plane(**kwargs: Any) -> Iterator[ControlPlane]:
    """``with control_plane() as cp:`` — a function-style alias of ``ControlPlane``."""
    with ControlPlane(**kwargs) as cp:
        yield cp


if __name__ == "__main__":
    sys.exit(main())
