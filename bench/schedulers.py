"""The schedulers under test, each started on the shared control plane for one run.

* ``vanilla`` — kube-scheduler (KUBE_VERSION), profile ``default-scheduler`` with upstream
  defaults: no gang semantics, the throughput ceiling;
* ``floor`` — the same kube-scheduler calling a do-nothing Python extender (``floor_app.py``,
  the same stack as Phalanx: uvicorn + httptools + orjson) for filter only: what the extender
  mechanism itself costs, the floor for Phalanx's single-pod throughput;
* ``phalanx`` — the same kube-scheduler with profile ``phalanx`` and the extender
  configuration the chart renders, plus ``phalanx serve --kubeconfig``; single pods get one
  best-fit node from filter, so kube-scheduler skips prioritize;
* ``phalanx-prioritize`` — the same, with every feasible node from filter and the prioritize
  verb ranking them (the wave-1 setup: two round trips per single pod);
* ``phalanx-mostallocated`` — filter only (no prioritize verb), every feasible node, and
  kube-scheduler's own ``NodeResourcesFit`` scoring set to ``MostAllocated`` on GPUs;
* ``phalanx-each-member`` — ``phalanx`` with ``PHALANX_COMPLETE_MEMBERS=false``: every gang
  member waits for its own kube-scheduler cycle and ``/bind`` (DESIGN.md §6 as written), for
  an A/B of completing a gang at its first ``/bind`` within one run;
* ``coscheduling`` — scheduler-plugins' kube-scheduler (SCHEDULER_PLUGINS_VERSION), profile
  ``default-scheduler`` with Coscheduling configured as its v0.34 docs recommend;
* ``native`` — kube-scheduler's own gang scheduling: the same kube-scheduler binary with the
  feature gates :data:`NATIVE_GATES` (``GenericWorkload``, beta and off by default in 1.37,
  which adds the ``GangScheduling`` plugin and the pod-group scheduling cycle; and
  ``TopologyAwareWorkloadScheduling``, alpha, which adds ``TopologyPlacementGenerator`` and
  ``PodGroupPodsCount``), profile ``default-scheduler`` with upstream defaults otherwise. Its
  gangs are upstream ``scheduling.k8s.io/v1beta1`` PodGroups (``SchedulerSpec.dialect``).

The others run kube-scheduler with its default feature gates: their pods name no upstream
PodGroup, so the gang gates would only add plugins that pass every pod. The Phalanx profile
disables the native gang plugins all the same, as the chart's does.

All of them get the same client rate limits (:data:`CLIENT_QPS` / :data:`CLIENT_BURST`, not the
upstream 50/100, which would be what gets measured) and no leader election (one instance
each; a lease left by the previous run would otherwise delay the next start by up to its
15 s lease duration).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from workloads import Dialect

CLIENT_QPS = 500
CLIENT_BURST = 1000
#: Phalanx's bind barrier default (20 s) must stay below this (DESIGN §2).
EXTENDER_HTTP_TIMEOUT = "30s"
SCHEDULER_PLUGINS_BINARY = "kube-scheduler-plugins"

#: Coscheduling arguments, from the v0.34 plugin docs ("Advanced Configuration"):
#: permitWaitingTimeSeconds is its default (a PodGroup's scheduleTimeoutSeconds, which every
#: benchmark PodGroup sets, wins over it); podGroupBackoffSeconds 10 is the docs'
#: recommendation "for clusters with moderate resource contention" (0, their default, lets a
#: gang that cannot fit retry every cycle); podGroupRejectPercentage is the default.
COSCHEDULING_ARGS = {
    "permitWaitingTimeSeconds": 60,
    "podGroupBackoffSeconds": 10,
    "podGroupRejectPercentage": 10,
}

#: The chart's queue backoff for Phalanx's kube-scheduler (values.yaml `kubeScheduler.
#: podInitialBackoffSeconds` / `podMaxBackoffSeconds`; a test holds them equal): a refused gang
#: member is retried within 5 s instead of upstream's 10 once its gang can be placed. The
#: client rate limits stay the bench's own for every contender, so none is throttled by them.
PHALANX_BACKOFF = {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 5}

#: Coscheduling's queue order in place of PrioritySort: priority, then the PodGroup's creation
#: time (a pod's first attempt without one), then the pod's namespace and name.
COSCHEDULING_QUEUE_SORT = {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]}


#: kube-scheduler's gang scheduling in v1.37.2 (pkg/features/kube_features.go): GenericWorkload
#: (beta, default off) brings the API's pods into the pod-group cycle and enables the
#: GangScheduling plugin; TopologyAwareWorkloadScheduling (alpha, default off) enables the
#: placement plugins. The API server needs the same gates and the v1beta1 runtime-config.
NATIVE_GATES: dict[str, bool] = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}

#: The chart's Phalanx profile: kube-scheduler's own gang plugins off (docs/gang-dialects.md).
NATIVE_GANG_PLUGINS = ("GangScheduling", "TopologyPlacementGenerator", "PodGroupPodsCount")


@dataclass(frozen=True)
class SchedulerSpec:
    key: str
    title: str
    #: ``spec.schedulerName`` of the workload's pods.
    scheduler_name: str
    #: Binary name in the tools bin dir.
    binary: str
    uses_phalanx: bool = False
    #: Runs ``floor_app.py`` as its (filter-only) extender.
    uses_floor: bool = False
    #: Environment of ``phalanx serve`` (its settings).
    phalanx_env: tuple[tuple[str, str], ...] = ()
    #: Whether kube-scheduler calls the extender's prioritize verb.
    prioritize: bool = True
    #: kube-scheduler's own NodeResourcesFit scoring: MostAllocated on GPUs (bin-packing).
    most_allocated: bool = False
    #: How its workloads' gangs are written (workloads.podgroup_body / pod_body).
    dialect: Dialect = "scheduler-plugins"
    #: kube-scheduler's --feature-gates (empty: the release's defaults).
    feature_gates: tuple[tuple[str, bool], ...] = ()
    #: Coscheduling's QueueSort alone (scheduler-plugins' binary): a gang's members stay
    #: together in the queue, ordered by their PodGroup's age, and keep their place on retry.
    coscheduling_queue: bool = False
    #: The workloads it runs (None: every one).
    workloads: tuple[str, ...] | None = None

    def config(self, extender_url: str | None = None) -> dict[str, Any]:
        """The KubeSchedulerConfiguration; the launcher adds ``clientConnection.kubeconfig``."""
        base: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"qps": CLIENT_QPS, "burst": CLIENT_BURST},
        }
        if self.key in ("vanilla", "native"):
            base["profiles"] = [{"schedulerName": self.scheduler_name}]
        elif self.uses_floor:
            assert extender_url is not None
            base["percentageOfNodesToScore"] = 100
            base["profiles"] = [{"schedulerName": self.scheduler_name}]
            base["extenders"] = [
                {
                    "urlPrefix": extender_url,
                    "filterVerb": "filter",
                    "weight": 1,
                    "nodeCacheCapable": True,
                    "httpTimeout": EXTENDER_HTTP_TIMEOUT,
                    "ignorable": False,
                }
            ]
        elif self.uses_phalanx:
            assert extender_url is not None
            base["percentageOfNodesToScore"] = 100
            base.update(PHALANX_BACKOFF)
            # The chart's profile (a kube-scheduler without the native gang plugins, as
            # scheduler-plugins' 1.34 build, ignores the names it does not know).
            plugins: dict[str, Any] = {
                "multiPoint": {"disabled": [{"name": n} for n in NATIVE_GANG_PLUGINS]}
            }
            if self.coscheduling_queue:
                plugins["queueSort"] = COSCHEDULING_QUEUE_SORT
            profile: dict[str, Any] = {"schedulerName": self.scheduler_name, "plugins": plugins}
            if self.most_allocated:
                profile["pluginConfig"] = [{"name": "NodeResourcesFit", "args": MOST_ALLOCATED}]
            base["profiles"] = [profile]
            extender: dict[str, Any] = {
                "urlPrefix": extender_url,
                "filterVerb": "filter",
                "preemptVerb": "preempt",
                "bindVerb": "bind",
                "weight": 10,
                "nodeCacheCapable": True,
                "httpTimeout": EXTENDER_HTTP_TIMEOUT,
                "ignorable": False,
            }
            if self.prioritize:
                extender["prioritizeVerb"] = "prioritize"
            base["extenders"] = [extender]
        elif self.key == "coscheduling":
            base["profiles"] = [
                {
                    "schedulerName": self.scheduler_name,
                    "plugins": {
                        "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                        "queueSort": COSCHEDULING_QUEUE_SORT,
                    },
                    "pluginConfig": [{"name": "Coscheduling", "args": dict(COSCHEDULING_ARGS)}],
                }
            ]
        else:
            raise ValueError(self.key)
        return base


#: kube-scheduler bin-packing GPUs itself: NodeResourcesFit's MostAllocated strategy, GPUs
#: weighted above CPU and memory (the chart's `kubeScheduler.binPackGpus` profile).
MOST_ALLOCATED = {
    "scoringStrategy": {
        "type": "MostAllocated",
        "resources": [
            {"name": "nvidia.com/gpu", "weight": 10},
            {"name": "cpu", "weight": 1},
            {"name": "memory", "weight": 1},
        ],
    }
}

SCHEDULERS: dict[str, SchedulerSpec] = {
    "vanilla": SchedulerSpec(
        "vanilla", "kube-scheduler (no gangs)", "default-scheduler", "kube-scheduler"
    ),
    "floor": SchedulerSpec(
        "floor",
        "kube-scheduler + do-nothing extender (filter only)",
        "default-scheduler",
        "kube-scheduler",
        uses_floor=True,
    ),
    "phalanx": SchedulerSpec(
        "phalanx",
        "kube-scheduler + Phalanx",
        "phalanx",
        "kube-scheduler",
        uses_phalanx=True,
        phalanx_env=(("PHALANX_SINGLE_POD_NODES", "1"),),
        prioritize=True,
    ),
    "phalanx-prioritize": SchedulerSpec(
        "phalanx-prioritize",
        "kube-scheduler + Phalanx (every feasible node, prioritize)",
        "phalanx",
        "kube-scheduler",
        uses_phalanx=True,
        phalanx_env=(("PHALANX_SINGLE_POD_NODES", "0"),),
    ),
    "phalanx-mostallocated": SchedulerSpec(
        "phalanx-mostallocated",
        "kube-scheduler MostAllocated + Phalanx (filter only)",
        "phalanx",
        "kube-scheduler",
        uses_phalanx=True,
        phalanx_env=(("PHALANX_SINGLE_POD_NODES", "0"),),
        prioritize=False,
        most_allocated=True,
    ),
    "phalanx-each-member": SchedulerSpec(
        "phalanx-each-member",
        "kube-scheduler + Phalanx, each member at its own /bind",
        "phalanx",
        "kube-scheduler",
        uses_phalanx=True,
        phalanx_env=(("PHALANX_SINGLE_POD_NODES", "1"), ("PHALANX_COMPLETE_MEMBERS", "false")),
        prioritize=True,
        workloads=("gangs", "contended", "plans", "big-gang"),
    ),
    "phalanx-queuesort": SchedulerSpec(
        "phalanx-queuesort",
        "scheduler-plugins' kube-scheduler, Coscheduling QueueSort only + Phalanx",
        "phalanx",
        SCHEDULER_PLUGINS_BINARY,
        uses_phalanx=True,
        phalanx_env=(("PHALANX_SINGLE_POD_NODES", "1"),),
        coscheduling_queue=True,
        # Issue #11's workloads: its binary predates the upstream gang API and DRA's 1.37 shape.
        workloads=("singles", "gangs", "contended", "plans", "big-gang"),
    ),
    "coscheduling": SchedulerSpec(
        "coscheduling",
        "scheduler-plugins Coscheduling",
        "default-scheduler",
        SCHEDULER_PLUGINS_BINARY,
    ),
    "native": SchedulerSpec(
        "native",
        "kube-scheduler gang scheduling (GenericWorkload)",
        "default-scheduler",
        "kube-scheduler",
        dialect="upstream",
        feature_gates=tuple(NATIVE_GATES.items()),
    ),
}

#: What the coscheduling scheduler needs beyond system:kube-scheduler's bootstrap role:
#: PodGroups (scheduler-plugins' own chart grants the same to its scheduler).
PODGROUP_RBAC_NAME = "phalanx-bench:scheduler-podgroups"


def podgroup_rbac() -> list[tuple[str, dict[str, Any]]]:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": PODGROUP_RBAC_NAME},
        "rules": [
            {
                "apiGroups": ["scheduling.x-k8s.io"],
                "resources": ["podgroups", "podgroups/status", "elasticquotas"],
                "verbs": ["get", "list", "watch", "update", "patch"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": PODGROUP_RBAC_NAME},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": PODGROUP_RBAC_NAME,
        },
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": "system:kube-scheduler",
            }
        ],
    }
    return [
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", role),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
    ]


# ---- Phalanx as a process ---------------------------------------------------------------------


class PhalanxError(RuntimeError):
    """Phalanx did not start, or died during a run."""


@dataclass
class PhalanxProcess:
    """``phalanx serve --kubeconfig`` as a subprocess on 127.0.0.1:``port``.

    ``profile_to``: run it under pyinstrument (a dev-only tool, not a project dependency)
    and write its text and HTML reports there when it stops.
    """

    kubeconfig: Path
    port: int
    log_path: Path
    profile_to: Path | None = None
    #: A frozen copy of the source tree to run instead of the (shared, changing) work tree.
    source: Path | None = None
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: The chart's default, so the figures include what users run: a line per gang
    #: decision (access lines are debug detail, not written at info).
    log_level: str = "info"
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def argv(self) -> list[str]:
        serve = [
            "serve",
            "--kubeconfig", str(self.kubeconfig),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--log-level", self.log_level,
            *self.extra_args,
        ]  # fmt: skip
        if self.profile_to is None:
            return [sys.executable, "-m", "phalanx.cli", *serve]
        if self.source is not None:
            cli = str(self.source / "phalanx" / "cli.py")
        else:
            spec = importlib.util.find_spec("phalanx.cli")
            if spec is None or spec.origin is None:
                raise PhalanxError("phalanx is not installed in this interpreter")
            cli = spec.origin
        return [
            sys.executable, "-m", "pyinstrument",
            "--renderer", "pyisession", "--outfile", str(self.session_file),
            cli, *serve,
        ]  # fmt: skip

    @property
    def session_file(self) -> Path:
        assert self.profile_to is not None
        return self.profile_to.with_suffix(".pyisession")

    def render_profile(self) -> None:
        """Text and HTML views of the saved session (pyinstrument writes it on exit)."""
        if self.profile_to is None or not self.session_file.exists():
            return
        for renderer, suffix in (("text", ".txt"), ("html", ".html")):
            out = self.profile_to.with_suffix(suffix)
            load = ["--load", str(self.session_file), "--outfile", str(out)]
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pyinstrument",
                    *load,
                    "--renderer",
                    renderer,
                    "--no-color",
                    "--unicode",
                ],
                check=False,
                capture_output=True,
                timeout=600,
            )

    def start(self, timeout: float = 120.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **dict(self.env)}
        if self.source is not None:
            # Ahead of the editable install on sys.path: the snapshot is what runs.
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(self.source), env.get("PYTHONPATH")])
            )
        self.process = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise PhalanxError(f"phalanx exited with {self.process.returncode}:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise PhalanxError(f"phalanx not ready after {timeout:.0f}s:\n{self.tail()}")
            time.sleep(0.2)

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise PhalanxError(f"phalanx exited with {self.process.returncode}:\n{self.tail()}")

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def debug_groups(self) -> Any:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return httpx.get(f"{self.url}/debug/groups", timeout=10).json()
        return None

    def stop(self, timeout: float = 30.0) -> None:
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.process = None
        self.render_profile()

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class FloorProcess:
    """``floor_app.py`` on 127.0.0.1:``port``: the do-nothing filter extender."""

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("floor_app.py")), "--port",
                 str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise PhalanxError(f"the floor extender exited with {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise PhalanxError("the floor extender did not start")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(10)
        self.process = None


# ---- one scheduler, started for one run -----------------------------------------------------


@dataclass
class Started:
    spec: SchedulerSpec
    scheduler_pid: int
    phalanx: PhalanxProcess | None
    config: dict[str, Any]

    def pids(self) -> dict[str, int]:
        out = {"kube-scheduler": self.scheduler_pid}
        if self.phalanx is not None:
            out["phalanx"] = self.phalanx.pid
        return out

    def sampled_pids(self, cp: Any) -> dict[str, int]:
        """The processes whose CPU a run reports: the control plane (but its own idle
        kube-scheduler), this contender's, and the benchmark itself."""
        pids = {k: v for k, v in cp.pids().items() if k != "kube-scheduler"}
        pids.update(self.pids())
        pids["bench"] = os.getpid()
        return pids

    def scheduler_metrics(self, cp: Any) -> str:
        """kube-scheduler's own /metrics (its secure port; the admin token is authorised)."""
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; loopback only
        request = urllib.request.Request(
            f"https://127.0.0.1:{cp.scheduler_port}/metrics",
            headers={"Authorization": f"Bearer {cp.admin_token}"},
        )
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)
        )
        with opener.open(request, timeout=10) as resp:
            return str(resp.read().decode())

    def check_alive(self, cp: Any) -> None:
        if cp.scheduler is not None:
            cp.scheduler.check_alive()
        if self.phalanx is not None:
            self.phalanx.check_alive()


@contextlib.contextmanager
def started(
    cp: Any,
    spec: SchedulerSpec,
    binary: Path,
    run_dir: Path,
    *,
    phalanx_port: int,
    profile_to: Path | None = None,
    source: Path | None = None,
    keep_logs: Path | None = None,
) -> Iterator[Started]:
    """Start ``spec`` (its kube-scheduler is ``binary``) on the control plane ``cp`` (a
    launcher.ControlPlane); stop it after.

    ``keep_logs``: a directory that keeps this run's logs, ``<run>-phalanx.log`` (info: every
    gang decision) and ``<run>-kube-scheduler.log`` (``--v=3``: every attempt, its verdict and
    the queue it went to), ``<run>`` being ``run_dir``'s name. Both cost the run some time.
    """
    phalanx = None
    floor = None
    if spec.uses_phalanx:
        phalanx = PhalanxProcess(
            cp.kubeconfig,
            phalanx_port,
            run_dir / "phalanx.log",
            profile_to=profile_to,
            source=source,
            env=spec.phalanx_env,
        )
        phalanx.start()
    if spec.uses_floor:
        floor = FloorProcess(phalanx_port, run_dir / "floor.log")
        floor.start()
    url = phalanx.url if phalanx else floor.url if floor else None
    config = spec.config(url)
    scheduler_log: tuple[Path, int] | None = None
    try:
        cp.start_scheduler(
            yaml.safe_dump(config, sort_keys=False),
            feature_gates=dict(spec.feature_gates),
            binary=binary,
            extra_args=("--v=3",) if keep_logs else (),
        )
        assert cp.scheduler is not None
        assert cp.scheduler.pid is not None
        if keep_logs is not None:
            # The control plane appends every kube-scheduler's log to one file: this run's
            # part starts with this start's banner.
            scheduler_log = (cp.scheduler.log_path, _last_start(cp.scheduler.log_path))
        # The configuration as given (the launcher adds only its own kubeconfig path).
        yield Started(spec, cp.scheduler.pid, phalanx, config)
    finally:
        cp.stop_scheduler()
        if phalanx is not None:
            phalanx.stop()
        if floor is not None:
            floor.stop()
        if keep_logs is not None:
            _keep(keep_logs, run_dir.name, phalanx, scheduler_log)


def _last_start(log_path: Path) -> int:
    """Where the last start's banner begins in a component's appended log (0: none)."""
    data = log_path.read_bytes()
    return max(data.rfind(b"\n===== "), 0)


def _keep(
    into: Path,
    run: str,
    phalanx: PhalanxProcess | None,
    scheduler_log: tuple[Path, int] | None,
) -> None:
    into.mkdir(parents=True, exist_ok=True)
    if phalanx is not None and phalanx.log_path.exists():
        shutil.copyfile(phalanx.log_path, into / f"{run}-phalanx.log")
    if scheduler_log is not None:
        path, offset = scheduler_log
        with path.open("rb") as src, (into / f"{run}-kube-scheduler.log").open("wb") as dst:
            src.seek(offset)
            shutil.copyfileobj(src, dst)
