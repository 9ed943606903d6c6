"""End-to-end benchmark: Phalanx against vanilla kube-scheduler, scheduler-plugins'
Coscheduling and kube-scheduler's own (native) gang scheduling, on one real control plane,
same nodes, same workloads, one run.

    python bench/run.py                  # everything (make bench); ~30 min on 2 cores
    python bench/run.py --quick          # 1/10 scale, a few minutes (CI smoke)
    python bench/run.py --only phalanx,native --workloads upstream,unschedulable
    python bench/run.py --profile-phalanx   # Phalanx under pyinstrument (dev-only tool)
    python bench/run.py --workloads topology  # only the NVL72 churn benchmark (~14 min)

Writes ``bench/results/<date>.json`` (every figure, the machine, the versions, each
scheduler's configuration), ``<date>.md`` (tables with ratios against vanilla and
coscheduling from the same run) and ``<date>-*.png`` (time-to-whole-gang distributions,
throughput over time). The ``topology`` workload (NVL72 cliques with churn: jobs arrive,
run, are deleted; ``bench/churn.py``) writes ``<date>-topology.{md,json}`` and a chart of
whole cliques free over time (``bench/report_topology.py``).

The control plane is etcd + kube-apiserver + kwok from
``tests/controlplane`` (``build-tools.sh``); the coscheduling scheduler is
``build-tools.sh scheduler-plugins``, built here on first use when Go is available.

**One control plane version for every contender: Kubernetes KUBE_NEXT_VERSION (1.37).**
Native gang scheduling needs it (``scheduling.k8s.io/v1beta1`` PodGroups, beta in 1.37), and
ratios are only fair when every contender talks to the same kube-apiserver: so the whole run
uses 1.37's kube-apiserver, with the ``GenericWorkload`` and
``TopologyAwareWorkloadScheduling`` gates and the ``scheduling.k8s.io/v1beta1``
runtime-config, and vanilla, floor, Phalanx and native all run the same 1.37 kube-scheduler
binary (native with the gang gates, the others with the release's defaults; see
``schedulers.py``). Coscheduling is scheduler-plugins' own binary, which embeds kube-scheduler
1.34 (the newest the module proxy serves): three minors behind its API server, outside the
one-minor skew upstream supports for kube-scheduler, but it reads only stable APIs and its own
CRD, and schedules every workload here. **phalanx-queuesort** runs Phalanx behind that same
binary with only Coscheduling's QueueSort on (the chart's ``kubeScheduler.queueSort:
Coscheduling``), on issue #11's workloads only. ``--kube-version 1.35`` runs the previous set-up
(KUBE_VERSION, no gates), to compare with older reports; native needs 1.37.

**Phalanx reads its gangs as scheduler-plugins PodGroups, like vanilla and coscheduling;
only native gets upstream v1beta1 PodGroups.** It is the dialect Phalanx's earlier figures
were measured in and that coscheduling reads, so Phalanx ÷ coscheduling stays comparable
across reports; Phalanx reads the upstream dialect through the same resolution step, and on
the upstream dialect kube-scheduler's pod-group cycle (which no profile can turn off) would
run under Phalanx as well, which measures the two together rather than Phalanx.

How a run goes (one workload × one scheduler): a fresh namespace; its PodGroups, in the
scheduler's dialect; the workload's prefill (pods bound to their nodes directly, in a
namespace of their own); the scheduler (and Phalanx) started and ready; a pod watch and
/proc sampling started; the pods created by a thread pool in the workload's arrival order;
then wait until every pod is bound, or nothing has bound for the settle window
(saturation), or the cap; then stop the scheduler and delete the pods, so the next run finds
the same nodes empty. Nodes are created once per node count and reused.

An impossible gang's run (``unschedulable-*``) creates its pods behind a scheduling gate and
then releases them together (``Workload.gated``); it ends once every member is bound or
has been judged unschedulable since the gang's release began, and that has held for
:data:`VERDICT_HOLD_SECONDS`; or at its own cap (``Limits.verdict_cap_seconds``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(HERE))

import audit  # noqa: E402
import churn  # noqa: E402
import cpus  # noqa: E402
import launcher  # noqa: E402  # tests/controlplane/launcher.py
import observe  # noqa: E402
import report  # noqa: E402
import report_topology  # noqa: E402
import schedulers  # noqa: E402
import workloads  # noqa: E402
import yaml  # noqa: E402

WORKLOAD_ORDER = (  # node count grows last
    "singles",
    "gangs",
    "contended",
    "plans",
    "big-gang",
    "upstream-small-gangs",
    "upstream-big-gangs",
    "unschedulable-wide",
    "unschedulable-full",
)
CHURN_ORDER = ("topology",)  # on nodes of their own, after the others
# The churn workloads compare schedulers that place pods; the do-nothing floor has no place.
CHURN_SCHEDULERS = ("vanilla", "phalanx", "coscheduling", "native")
SCHEDULER_ORDER = (
    "vanilla",
    "floor",
    "phalanx",
    "phalanx-prioritize",
    "phalanx-mostallocated",
    "phalanx-each-member",
    "phalanx-queuesort",
    "coscheduling",
    "native",
)
# What `make bench` runs unless --only says otherwise (the other Phalanx variants only on request).
DEFAULT_SCHEDULERS = ("vanilla", "floor", "phalanx", "phalanx-queuesort", "coscheduling", "native")
#: The Kubernetes release of the run's kube-apiserver and kube-scheduler (the module docstring).
KUBE_VERSION = "1.37"
CREATE_THREADS = 16
OWN_CRD = ROOT / "helm" / "phalanx" / "crds" / "scheduling.x-k8s.io_podgroups.yaml"
CRD_NAME = "podgroups.scheduling.x-k8s.io"
PG_API = "/apis/scheduling.x-k8s.io/v1alpha1"
UPSTREAM_PG_API = "/apis/scheduling.k8s.io/v1beta1"
#: An impossible gang's verdict must hold this long (no member bound, none re-judged
#: otherwise) before its run ends.
VERDICT_HOLD_SECONDS = 5.0


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Limits:
    #: Saturation: no pod bound for this long after the last pod was created. Above the
    #: PodGroups' scheduleTimeoutSeconds (30 s), so a coscheduling Permit round that times
    #: out and retries is waited for.
    settle_seconds: float
    #: Hard cap of one run, from its first pod creation.
    cap_seconds: float
    #: Cap of an impossible gang's run, from its first pod creation: a scheduler that has not
    #: said "unschedulable" by then is reported as "not within" it.
    verdict_cap_seconds: float


@dataclass
class RunRecord:
    workload: str
    scheduler: str
    namespace: str
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    #: When the API server answered each pod's binding (`audit.bindings`; empty without it).
    bound_at_apiserver: dict[str, float] = field(default_factory=dict)
    #: When the benchmark's watch first saw each pod (its creation is in `created`).
    seen: dict[str, float] = field(default_factory=dict)
    t_first_create: float = 0.0
    t_last_create: float = 0.0
    t_end: float = 0.0
    end_reason: str = ""
    create_errors: int = 0
    watch_restarts: int = 0
    processes: dict[str, Any] = field(default_factory=dict)
    phalanx_metrics: str = ""
    scheduler_metrics: str = ""
    #: kube-apiserver's /metrics just before the pods are created, and at the run's end.
    apiserver_metrics: tuple[str, str] = ("", "")
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    #: Per pod, its PodScheduled condition changes (impossible-gang runs only).
    conditions: dict[str, list[observe.Condition]] = field(default_factory=dict)
    #: The gang object's status history (impossible-gang runs only): [(t, status), ...].
    group_status: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    error: str = ""


def apiserver_metrics(cp: Any) -> str:
    """kube-apiserver's /metrics ("" when it cannot be read: the figure is then left out)."""
    with contextlib.suppress(Exception):
        status, text = cp.request("GET", "/metrics", timeout=30)
        if status == 200 and isinstance(text, str):
            return text
    return ""


# ---- setup ----------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "note": "everything on this one machine: etcd, kube-apiserver, kwok, the scheduler "
        "under test (and Phalanx), and the benchmark's own pod creation and watch",
    }


def upstream_crd(version: str) -> tuple[dict[str, Any], str] | None:
    """scheduler-plugins' PodGroup CRD from the Go module cache (never copied into the repo)."""
    if shutil.which("go") is None:
        return None
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"sigs.k8s.io/scheduler-plugins@{version}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        directory = json.loads(out.stdout).get("Dir")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    if not directory:
        return None
    path = Path(directory) / "manifests" / "coscheduling" / "crd.yaml"
    if not path.is_file():
        return None
    return yaml.safe_load(path.read_text()), (
        f"sigs.k8s.io/scheduler-plugins@{version} manifests/coscheduling/crd.yaml"
    )


def install_crd(api: observe.Api, versions: dict[str, str]) -> str:
    found = upstream_crd(versions["SCHEDULER_PLUGINS_VERSION"])
    if found is None:
        crd, source = yaml.safe_load(OWN_CRD.read_text()), "helm/phalanx/crds (Phalanx's own)"
    else:
        crd, source = found
    api.must("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))

    def served() -> bool:
        status, _ = api.request("GET", PG_API)
        got = api.must("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
        conds = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions", [])}
        return status == 200 and conds.get("Established") == "True"

    launcher.wait_for("PodGroup CRD established", served, timeout=60)
    for path, obj in schedulers.podgroup_rbac():
        api.must("POST", path, obj, ok=(201, 409))
    return source


def ensure_nodes(cp: launcher.ControlPlane, api: observe.Api, have: int, want: int) -> int:
    if want <= have:
        return have
    log(f"creating nodes {have}..{want - 1}")
    t0 = time.monotonic()

    def make(i: int) -> None:
        cp.create_gpu_node(
            workloads.node_name(i),
            gpus=workloads.NODE_GPUS,
            cpu=workloads.NODE_CPU,
            memory=workloads.NODE_MEMORY,
            pods=workloads.NODE_MAX_PODS,
            labels=workloads.node_labels(i),
            wait_ready=False,
        )

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(have, want)))

    def all_ready() -> bool:
        items = api.must("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
        ready = sum(
            1
            for n in items
            if n["metadata"]["name"].startswith("bench-node-")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        )
        return ready >= want

    launcher.wait_for(f"{want} nodes Ready", all_ready, timeout=600, interval=1.0)
    log(f"{want} nodes Ready ({time.monotonic() - t0:.0f}s)")
    return want


# ---- one run --------------------------------------------------------------------------------


def create_with_retry(api: observe.Api, path: str, body: dict[str, Any]) -> bool:
    for attempt in range(6):
        try:
            status, _ = api.request("POST", path, body)
        except OSError:
            status = 0
        if status in (201, 409):
            return True
        time.sleep(0.05 * 2**attempt)  # 429 / 5xx under load: back off, try again
    return False


def patch_with_retry(api: observe.Api, path: str, patch: dict[str, Any]) -> bool:
    for attempt in range(6):
        try:
            status, _ = api.request(
                "PATCH", path, patch, content_type="application/merge-patch+json"
            )
        except OSError:
            status = 0
        if status == 200:
            return True
        time.sleep(0.05 * 2**attempt)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def group_api(dialect: workloads.Dialect) -> str:
    return UPSTREAM_PG_API if dialect == "upstream" else PG_API


def prefill_namespace(namespace: str) -> str:
    return f"{namespace}-fill"


def cleanup(api: observe.Api, namespace: str) -> None:
    api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
    for groups in (PG_API, UPSTREAM_PG_API):  # a release that does not serve one says 404
        api.request("DELETE", f"{groups}/namespaces/{namespace}/podgroups")

    def empty() -> bool:
        answer = api.must("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        if answer["items"]:
            api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
            return False
        return True

    launcher.wait_for(f"pods of {namespace} deleted", empty, timeout=300, interval=1.0)
    # Without kube-controller-manager the namespace stays Terminating; it is empty, and
    # no later run uses it.
    api.request("DELETE", f"/api/v1/namespaces/{namespace}")


#: Pods the warm-up creates and deletes before the first run: their 3,400 events, inside
#: kube-apiserver's 75 s window, grow its pod watch cache to 6,400 (see `warm_pod_watch_cache`).
WARM_UP_PODS = 1700
WARM_UP_NAMESPACE = "bench-warm-up"


def pod_watch_cache_capacity(cp: launcher.ControlPlane) -> int | None:
    """kube-apiserver's pod watch cache capacity now, from one scrape of its /metrics."""
    return report.pod_watch_cache_now(apiserver_metrics(cp))[1]


def warm_pod_watch_cache(cp: launcher.ControlPlane, api: observe.Api) -> int | None:
    """Grow kube-apiserver's pod watch cache, as a cluster in use has it, before any run, and
    open kwok's watches again on it; the capacity reached (None when /metrics cannot say).

    A watch's channel holds max(10, capacity / 75) events, fixed when it opens
    (k8s.io/apiserver pkg/storage/cacher); the cache starts at 100 and doubles each time it
    fills within 75 s. So on a fresh API server the first run's watches (its scheduler's,
    Phalanx's, this benchmark's, kwok's) held 10 events, and a burst of pod events closed
    them as unresponsive, delaying every pod watcher meanwhile; the runs after it opened
    theirs on a cache the first run had grown. Until 7 December (fifteenth session) the
    first run of a workload was always Phalanx's: in one full run 26 pod watchers were closed
    during Phalanx's 100 × 8 run and 3 during coscheduling's after it."""
    create_namespace(api, WARM_UP_NAMESPACE)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "schedulerName": WARM_UP_NAMESPACE,  # no scheduler: pending, deleted at once
            "containers": [{"name": "main", "image": "fake"}],
        },
    }
    bodies = [{**body, "metadata": {"name": f"warm-{i:04d}"}} for i in range(WARM_UP_PODS)]
    create_all(api, f"/api/v1/namespaces/{WARM_UP_NAMESPACE}/pods", bodies, "the warm-up pods")
    cleanup(api, WARM_UP_NAMESPACE)
    if cp.kwok is not None:  # its watches opened with the control plane, on the cold cache
        cp.kwok.stop()
        cp.kwok.start()
    return pod_watch_cache_capacity(cp)


def create_namespace(api: observe.Api, name: str) -> None:
    api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": name}})  # fmt: skip


def create_all(api: observe.Api, path: str, bodies: Sequence[dict[str, Any]], what: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
        if not all(pool.map(lambda body: create_with_retry(api, path, body), bodies)):
            raise observe.ApiError(f"creating {what} failed")


def run_one(
    cp: launcher.ControlPlane,
    api: observe.Api,
    work: workloads.Workload,
    spec: schedulers.SchedulerSpec,
    limits: Limits,
    binaries: dict[str, Path],
    workdir: Path,
    profile_dir: Path | None,
    source: Path | None = None,
    keep_logs: Path | None = None,
    audit_log: Path | None = None,
) -> RunRecord:
    ns = f"b-{work.key}-{spec.key}-{uuid.uuid4().hex[:6]}"
    rec = RunRecord(work.key, spec.key, ns)
    groups_path = f"{group_api(spec.dialect)}/namespaces/{ns}/podgroups"
    create_namespace(api, ns)
    create_all(
        api,
        groups_path,
        [workloads.podgroup_body(g, spec.dialect) for g in work.groups],
        f"the PodGroups of {ns}",
    )
    if work.prefill:
        # Bound at creation: every scheduler's informers list them as running pods.
        fill = prefill_namespace(ns)
        create_namespace(api, fill)
        create_all(
            api,
            f"/api/v1/namespaces/{fill}/pods",
            [workloads.pod_body(m, spec.scheduler_name) for m in work.prefill],
            f"the prefill of {fill}",
        )
    clock = time.monotonic
    profile_to = profile_dir / f"phalanx-{work.key}" if profile_dir and spec.uses_phalanx else None
    try:
        with schedulers.started(
            cp,
            spec,
            binaries[spec.binary],
            workdir / ns,
            phalanx_port=free_port(),
            profile_to=profile_to,
            source=source,
            keep_logs=keep_logs,
        ) as st:
            rec.scheduler_config = st.config
            sampler = observe.ProcSampler(st.sampled_pids(cp), clock=clock, by_thread=("phalanx",))
            watch = observe.PodWatch(api, ns, clock=clock)
            before = apiserver_metrics(cp)
            audit_from = audit.size(audit_log) if audit_log is not None else 0
            watch.start()
            sampler.start()
            polls = [
                observe.GroupPoll(api, f"{groups_path}/{g.name}", clock=clock)
                for g in (work.groups if work.impossible else ())
            ]
            for poll in polls:
                poll.start()
            log(f"{work.key} × {spec.key}: creating {len(work.pods)} pods in {ns}")
            pods_path = f"/api/v1/namespaces/{ns}/pods"
            created = rec.created

            def create(member: workloads.Member) -> None:
                if create_with_retry(
                    api, pods_path, workloads.pod_body(member, spec.scheduler_name, spec.dialect)
                ):
                    created[member.name] = clock()
                else:
                    rec.create_errors += 1

            def release(member: workloads.Member) -> None:
                path = f"{pods_path}/{member.name}"
                if patch_with_retry(api, path, {"spec": {"schedulingGates": None}}):
                    created[member.name] = clock()
                else:
                    rec.create_errors += 1

            rec.t_first_create = clock()
            with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
                if work.gated:
                    # Created behind the gate first: `created` then records each release.
                    gated = [
                        workloads.pod_body(m, spec.scheduler_name, spec.dialect, gated=True)
                        for m in work.pods
                    ]
                    create_all(api, pods_path, gated, f"the gated pods of {ns}")
                    rec.t_first_create = clock()
                    futures = [pool.submit(release, m) for m in work.pods]
                else:
                    futures = [pool.submit(create, m) for m in work.pods]
                rec.end_reason = wait_for_outcome(rec, work, watch, futures, st, cp, limits, clock)
            rec.t_end = clock()
            rec.t_last_create = max(created.values(), default=rec.t_first_create)
            sampler.stop()
            watch.stop()
            for poll in polls:
                poll.stop()
                rec.group_status.extend(poll.history)
            rec.bound = watch.snapshot()
            rec.seen = watch.first_seen()
            if work.impossible:
                rec.conditions = watch.condition_history()
            rec.watch_restarts = watch.restarts
            if audit_log is not None:
                rec.bound_at_apiserver = audit.bindings(audit_log, audit_from, ns)
            rec.processes = sampler.summary(rec.t_first_create, rec.t_end)
            rec.apiserver_metrics = (before, apiserver_metrics(cp))
            with contextlib.suppress(Exception):
                rec.scheduler_metrics = st.scheduler_metrics(cp)
            if st.phalanx is not None:
                with contextlib.suppress(Exception):
                    rec.phalanx_metrics = st.phalanx.metrics()
    except Exception as exc:  # noqa: BLE001  # one failed run is reported; the others go on
        rec.error = f"{type(exc).__name__}: {exc}"
        log(f"{work.key} × {spec.key} FAILED:\n{traceback.format_exc()}")
        log(cp.log_tails(lines=15))
    finally:
        cleanup(api, ns)
        if work.prefill:
            cleanup(api, prefill_namespace(ns))
    n_bound = len(rec.bound)
    span = (
        max((t for t, _ in rec.bound.values()), default=rec.t_first_create)
    ) - rec.t_first_create
    log(
        f"{work.key} × {spec.key}: {n_bound}/{len(work.pods)} bound in {span:.1f}s "
        f"({rec.end_reason or 'error'})"
    )
    return rec


def wait_for_outcome(
    rec: RunRecord,
    work: workloads.Workload,
    watch: observe.PodWatch,
    futures: Sequence[concurrent.futures.Future[None]],
    st: schedulers.Started,
    cp: launcher.ControlPlane,
    limits: Limits,
    clock: Any,
) -> str:
    """Poll every 0.1 s until all pods are bound, saturation, or the cap; say which.

    An impossible gang's run ends on its verdict instead (:func:`impossible_outcome`), and
    only by saturation once one of its members is bound (a gang held partially, which is
    all a scheduler without gangs can do).
    """
    total = len(work.pods)
    last_count, last_progress = -1, clock()
    while True:
        time.sleep(0.1)
        now = clock()
        count = watch.count()
        creating = not all(f.done() for f in futures)
        if count != last_count or creating:
            last_count, last_progress = count, now
        if count >= total:
            return "all bound"
        if work.impossible:
            if not creating:
                verdict = impossible_outcome(work, rec.created, watch, now)
                if verdict:
                    return verdict
            if now - rec.t_first_create > limits.verdict_cap_seconds:
                return f"cap ({limits.verdict_cap_seconds:.0f}s)"
        if (
            (count or not work.impossible)
            and not creating
            and now - last_progress > limits.settle_seconds
        ):
            return f"saturated (no bind for {limits.settle_seconds:.0f}s)"
        if now - rec.t_first_create > limits.cap_seconds:
            return f"cap ({limits.cap_seconds:.0f}s)"
        st.check_alive(cp)


def impossible_outcome(
    work: workloads.Workload, created: dict[str, float], watch: observe.PodWatch, now: float
) -> str:
    """The end of an impossible gang's run, once every gang's members have each been bound or
    judged unschedulable for VERDICT_HOLD_SECONDS; "" until then."""
    bound, conditions = watch.snapshot(), watch.condition_history()
    members: dict[str, list[str]] = {}
    for m in work.pods:
        if m.group is not None:
            members.setdefault(m.group, []).append(m.name)
    settled = [
        report.gang_settled_at(names, created, bound, conditions) for names in members.values()
    ]
    if any(at is None or now - at < VERDICT_HOLD_SECONDS for at in settled):
        return ""
    held = sum(name in bound for names in members.values() for name in names)
    return "reported unschedulable" if not held else f"settled with {held} member(s) bound"


# ---- main -----------------------------------------------------------------------------------


def ensure_scheduler_plugins(bin_dir: Path) -> None:
    binary = bin_dir / schedulers.SCHEDULER_PLUGINS_BINARY
    if os.access(binary, os.X_OK):
        return
    if shutil.which("go") is None:
        raise launcher.ToolsMissingError(
            f"{schedulers.SCHEDULER_PLUGINS_BINARY} is not built and Go is not installed: run "
            "`bash tests/controlplane/build-tools.sh scheduler-plugins` where Go is, or "
            "leave coscheduling out (--only phalanx,vanilla)"
        )
    log("building scheduler-plugins (build-tools.sh scheduler-plugins; ~3 min cold) ...")
    subprocess.run(
        ["bash", str(ROOT / "tests" / "controlplane" / "build-tools.sh"), "scheduler-plugins"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1/10 scale, short settle window")
    p.add_argument(
        "--only",
        default=",".join(DEFAULT_SCHEDULERS),
        help="schedulers to run, comma-separated (default: %(default)s)",
    )
    p.add_argument(
        "--workloads",
        default=",".join((*WORKLOAD_ORDER, *CHURN_ORDER)),
        help="workloads to run, comma-separated (default: %(default)s)",
    )
    p.add_argument("--scale", type=float, help="override the size factor (1.0 full, 0.1 quick)")
    p.add_argument(
        "--kube-version",
        default=KUBE_VERSION,
        help="Kubernetes release of kube-apiserver and kube-scheduler (default: %(default)s; "
        "1.35 runs the set-up of earlier reports, without native)",
    )
    p.add_argument("--settle", type=float, help="saturation window in seconds")
    p.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    p.add_argument(
        "--name", help="file stem of the outputs (default: the date, plus -quick for --quick)"
    )
    p.add_argument(
        "--profile-phalanx",
        type=Path,
        metavar="DIR",
        help="run Phalanx under pyinstrument (pip install pyinstrument; dev-only) and "
        "write one HTML profile per workload into DIR",
    )
    p.add_argument(
        "--keep-logs",
        type=Path,
        metavar="DIR",
        help="keep each run's logs in DIR: Phalanx's at info (every gang decision) and "
        "kube-scheduler's at --v=3 (every attempt, its verdict, the queue it went to), "
        "one file each per run, named after its namespace; the logging costs the run some time",
    )
    p.add_argument(
        "--control-plane-cpus",
        metavar="LIST",
        help="give kube-apiserver and etcd these cores (a CPU list: 0, 0-1, 0,2) and every "
        "other process the rest, the same for every contender; default: all share every "
        "core, as the goals are measured (bench/cpus.py)",
    )
    p.add_argument(
        "--cold-watch-cache",
        action="store_true",
        help="skip the warm-up of kube-apiserver's pod watch cache: the first run's watches "
        "then open with 10-event channels (as every run did until 7 December)",
    )
    args = p.parse_args(argv)
    # (the control plane's cores, everyone else's), or None: all share every core.
    args.cpu_split = None
    if args.control_plane_cpus is not None:
        try:
            chosen = cpus.parse(args.control_plane_cpus)
            args.cpu_split = (chosen, cpus.split(chosen, os.sched_getaffinity(0)))
        except cpus.CpuListError as exc:
            p.error(str(exc))
    args.only = [s for s in args.only.split(",") if s]
    args.workloads = workloads.expand(w for w in args.workloads.split(",") if w)
    for s in args.only:
        if s not in schedulers.SCHEDULERS:
            p.error(f"unknown scheduler {s!r} (known: {', '.join(schedulers.SCHEDULERS)})")
    try:
        launcher.kube_release(args.kube_version)
    except ValueError as exc:
        p.error(str(exc))
    known = (*workloads.BUILDERS, *workloads.CHURN_BUILDERS)
    for w in args.workloads:
        if w not in known:
            names = ", ".join([*known, *workloads.ALIASES])
            p.error(f"unknown workload {w!r} (known: {names})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started_at = time.monotonic()
    version = _phalanx_version()
    scale = args.scale if args.scale is not None else (0.1 if args.quick else 1.0)
    limits = Limits(
        settle_seconds=args.settle if args.settle is not None else (15.0 if args.quick else 40.0),
        cap_seconds=150.0 if args.quick else 420.0,
        verdict_cap_seconds=60.0 if args.quick else 150.0,
    )
    sched_keys = [s for s in SCHEDULER_ORDER if s in args.only]
    work_keys = [w for w in WORKLOAD_ORDER if w in args.workloads]
    works = workloads.build(work_keys, scale)
    churns = [workloads.CHURN_BUILDERS[k](scale) for k in CHURN_ORDER if k in args.workloads]
    versions = launcher.read_versions()
    release = launcher.kube_release(args.kube_version)
    native = launcher.NATIVE_GANG_API.get(release.minor)
    if "native" in sched_keys and (
        native is None or native.api_version != "scheduling.k8s.io/v1beta1"
    ):
        log(
            f"error: native gang scheduling needs Kubernetes {KUBE_VERSION} (not {release.version})"
        )
        return 2
    try:
        tools = launcher.find_tools(kube_version=release.version)
        # scheduler-plugins' binary lives with the default tool set (build-tools.sh).
        binaries = {
            "kube-scheduler": tools["kube-scheduler"],
            schedulers.SCHEDULER_PLUGINS_BINARY: launcher.tools_bin_dir()
            / schedulers.SCHEDULER_PLUGINS_BINARY,
        }
        if any(
            schedulers.SCHEDULERS[k].binary == schedulers.SCHEDULER_PLUGINS_BINARY
            for k in sched_keys
        ):
            ensure_scheduler_plugins(launcher.tools_bin_dir())
    except launcher.ToolsMissingError as exc:
        log(f"error: {exc}")
        return 2
    if args.profile_phalanx:
        args.profile_phalanx.mkdir(parents=True, exist_ok=True)

    stem = args.name or dt.date.today().isoformat() + ("-quick" if args.quick else "")
    pinned: dict[str, list[int]] = {}
    if args.cpu_split is not None:
        # This process first: every process it starts from now on inherits the rest.
        control_plane, rest = args.cpu_split
        pinned["others"] = sorted(cpus.pin(os.getpid(), rest))
        log(f"control plane on CPU(s) {cpus.show(control_plane)}, "
            f"everything else on {cpus.show(rest)}")  # fmt: skip
    records: list[RunRecord] = []
    churn_records: list[tuple[workloads.ChurnWorkload, list[churn.ChurnRecord]]] = []
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        workdir = Path(tmp)
        # Every Phalanx of the run runs this one copy of the source, whatever happens to the
        # work tree meanwhile (several people edit it at once).
        source = workdir / "phalanx-src"
        shutil.copytree(
            ROOT / "src" / "phalanx",
            source / "phalanx",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        digest = _source_digest(source)
        log(f"Phalanx {version}, source snapshot {digest}")
        audit_flags, audit_log = audit.flags(workdir)
        gang_api: dict[str, Any] = {"apiserver_flags": audit_flags}
        if native is not None and native.api_version == "scheduling.k8s.io/v1beta1":
            gang_api |= {
                "apiserver_feature_gates": schedulers.NATIVE_GATES,
                "runtime_config": native.runtime_config,
            }
        with launcher.ControlPlane(
            workdir=workdir / "cp", kube_version=release.version, **gang_api
        ) as cp:
            if args.cpu_split is not None:
                running = cp.pids()
                for name in cpus.CONTROL_PLANE:
                    pinned[name] = sorted(cpus.pin(running[name], args.cpu_split[0]))
            api = observe.Api(cp.server, cp.admin_token, cp.ca_file)
            if args.cold_watch_cache:
                watch_cache = pod_watch_cache_capacity(cp)
            else:
                watch_cache = warm_pod_watch_cache(cp, api)
                log(f"pod watch cache warmed to {watch_cache} events")
            crd_source = install_crd(api, versions)
            nodes = 0
            for work in works:
                nodes = ensure_nodes(cp, api, nodes, work.nodes)
                for key in sched_keys:
                    spec = schedulers.SCHEDULERS[key]
                    if spec.workloads is not None and work.key not in spec.workloads:
                        continue
                    records.append(
                        run_one(
                            cp,
                            api,
                            work,
                            spec,
                            limits,
                            binaries,
                            workdir,
                            args.profile_phalanx,
                            source,
                            args.keep_logs,
                            audit_log,
                        )
                    )
            for churn_work in churns:
                churn.ensure_nodes(cp, api, churn_work)
                runs = [
                    churn.run(
                        cp,
                        api,
                        churn_work,
                        schedulers.SCHEDULERS[key],
                        binaries[schedulers.SCHEDULERS[key].binary],
                        workdir,
                        phalanx_port=free_port(),
                        source=source,
                        profile_dir=args.profile_phalanx,
                        keep_logs=args.keep_logs,
                    )
                    for key in sched_keys
                    if key in CHURN_SCHEDULERS
                ]
                churn_records.append((churn_work, runs))
    elapsed = time.monotonic() - started_at
    meta = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "scale": scale,
        "settle_seconds": limits.settle_seconds,
        "cap_seconds": limits.cap_seconds,
        "verdict_cap_seconds": limits.verdict_cap_seconds,
        "verdict_hold_seconds": VERDICT_HOLD_SECONDS,
        "runtime_seconds": round(elapsed, 1),
        "machine": machine(),
        "versions": {
            "kubernetes": release.version,
            "etcd": versions["ETCD_VERSION"],
            "kwok": versions["KWOK_VERSION"],
            "scheduler_plugins": versions["SCHEDULER_PLUGINS_VERSION"],
            "phalanx": version,
            "phalanx_source_digest": digest,
        },
        "podgroup_crd": crd_source,
        "client_qps_burst": [schedulers.CLIENT_QPS, schedulers.CLIENT_BURST],
        "phalanx_log_level": schedulers.PhalanxProcess.log_level,
        "coscheduling_args": schedulers.COSCHEDULING_ARGS,
        "phalanx_backoff": schedulers.PHALANX_BACKOFF,
        "apiserver_feature_gates": gang_api.get("apiserver_feature_gates", {}),
        "runtime_config": gang_api.get("runtime_config", {}),
        "native_feature_gates": schedulers.NATIVE_GATES,
        "schedule_timeout_seconds": workloads.SCHEDULE_TIMEOUT_SECONDS,
        # Each process's CPU affinity as read back once set; empty: all share every core.
        "cpu_affinity": pinned,
        # kube-apiserver's pod watch cache before the first run (`warm_pod_watch_cache`).
        "pod_watch_cache": {"warmed": not args.cold_watch_cache, "capacity": watch_cache},
    }
    paths = report.write(args.out, stem, meta, works, records) if works else []
    for churn_work, runs in churn_records:
        paths += report_topology.write(
            args.out, stem, meta, churn_work, runs, churn.node_domains(churn_work)
        )
    for path in paths:
        log(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    failed = [r for r in records if r.error] + [
        r for _, runs in churn_records for r in runs if r.error
    ]
    log(f"done in {elapsed / 60:.1f} min; {len(failed)} run(s) failed")
    return 1 if failed else 0


def _source_digest(tree: Path) -> str:
    """A digest of the Phalanx sources that ran (``tree`` holds the ``phalanx`` package)."""
    digest = hashlib.sha256()
    for path in sorted(tree.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(tree).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _phalanx_version() -> str:
    """The installed package version and the work tree's commit (``+dirty`` when edited)."""
    version = "unknown"
    with contextlib.suppress(Exception):
        version = importlib.metadata.version("phalanx")
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        version += f" ({commit}{'+dirty' if dirty else ''})"
    return version


if __name__ == "__main__":
    sys.exit(main())
