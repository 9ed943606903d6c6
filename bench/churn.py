"""The NVL72 churn run: jobs arrive over time, run once whole, and are deleted.

One run = one scheduler on the shared control plane (``run.py`` owns it):

    nodes (once) ─▶ namespace ─▶ scheduler started ─▶ pod watch
        └▶ every 0.1 s: create the jobs whose arrival time has come (PodGroup, then pods);
                        a job whose members are all bound runs `duration` seconds from then;
                        a job whose time is up is deleted (its pods and PodGroup)
        until every job is deleted, or the last arrival plus the drain window
    ─▶ scheduler stopped ─▶ namespace emptied

Every time is on the benchmark's monotonic clock, relative to the run's start; bindings come
from the same :class:`observe.PodWatch` for every scheduler. A job never whole (vanilla
kube-scheduler binds members one by one; anything may still wait at the end) keeps its bound
members until the end, as a real job would sit on them. The figures are worked out after the
run by ``report_topology``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py (run.py puts it on sys.path)
import observe
import schedulers
import workloads

TICK_SECONDS = 0.1
THREADS = 16


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class ChurnRecord:
    """What one churn run saw; times are seconds from the run's start."""

    workload: str
    scheduler: str
    namespace: str
    arrived: dict[str, float] = field(default_factory=dict)  # job -> created (PodGroup + pods)
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod -> (t, node)
    whole: dict[str, float] = field(default_factory=dict)  # job -> all members seen bound
    deleted: dict[str, float] = field(default_factory=dict)  # job -> deletion requested
    end: float = 0.0
    end_reason: str = ""
    create_errors: int = 0
    processes: dict[str, Any] = field(default_factory=dict)
    phalanx_metrics: str = ""
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def ensure_nodes(
    cp: launcher.ControlPlane, api: observe.Api, work: workloads.ChurnWorkload
) -> None:
    """The NVL72 nodes of `work` (created once per control plane; kept for every run)."""
    have = {
        n["metadata"]["name"]
        for n in api.must(
            "GET",
            f"/api/v1/nodes?labelSelector={workloads.POOL_LABEL}%3D{workloads.NVL72_POOL}",
        )["items"]
    }
    wanted = [
        (c, n)
        for c in range(work.cliques)
        for n in range(workloads.NVL72_PER_CLIQUE)
        if workloads.nvl72_node_name(c, n) not in have
    ]
    if not wanted:
        return
    log(f"creating {len(wanted)} NVL72 nodes")

    def make(where: tuple[int, int]) -> None:
        clique, node = where
        cp.create_gpu_node(
            workloads.nvl72_node_name(clique, node),
            gpus=workloads.NVL72_GPUS,
            product="NVIDIA-GB200",
            cpu="72",
            memory="480Gi",
            pods=workloads.NODE_MAX_PODS,
            labels=workloads.nvl72_node_labels(clique),
            wait_ready=False,
        )

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(make, wanted))

    def ready() -> bool:
        items = api.must(
            "GET",
            f"/api/v1/nodes?labelSelector={workloads.POOL_LABEL}%3D{workloads.NVL72_POOL}",
        )["items"]
        return (
            sum(
                1
                for n in items
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
            )
            >= work.nodes
        )

    launcher.wait_for(f"{work.nodes} NVL72 nodes Ready", ready, timeout=600, interval=1.0)


def node_domains(work: workloads.ChurnWorkload) -> dict[str, dict[str, str]]:
    """node -> its topology labels (what the report measures placements against)."""
    return {
        workloads.nvl72_node_name(c, n): workloads.nvl72_node_labels(c)
        for c in range(work.cliques)
        for n in range(workloads.NVL72_PER_CLIQUE)
    }


class _Driver:
    """The arrival / completion / deletion loop of one run (see the module docstring)."""

    def __init__(
        self,
        api: observe.Api,
        work: workloads.ChurnWorkload,
        spec: schedulers.SchedulerSpec,
        rec: ChurnRecord,
        watch: observe.PodWatch,
        clock: Callable[[], float],
        check_alive: Callable[[], None],
    ) -> None:
        self.api, self.work, self.spec, self.rec = api, work, spec, rec
        self.watch, self.clock, self.check_alive = watch, clock, check_alive
        self.ns = rec.namespace
        self.t0 = 0.0

    def now(self) -> float:
        return self.clock() - self.t0

    def create(self, job: workloads.Job) -> None:
        dialect = self.spec.dialect
        group = workloads.job_podgroup_body(job, dialect)
        ok = _create(self.api, workloads.group_path(dialect, self.ns), group)
        for member in job.members:
            body = workloads.job_pod_body(job, member, self.spec.scheduler_name, dialect)
            ok = _create(self.api, f"/api/v1/namespaces/{self.ns}/pods", body) and ok
        if not ok:
            self.rec.create_errors += 1
        self.rec.arrived[job.name] = self.now()

    def delete(self, job: workloads.Job) -> None:
        self.rec.deleted[job.name] = self.now()
        selector = f"{workloads.JOB_LABEL}%3D{job.name}"
        self.api.request(
            "DELETE",
            f"/api/v1/namespaces/{self.ns}/pods?labelSelector={selector}&gracePeriodSeconds=0",
        )
        self.api.request("DELETE", f"{workloads.group_path(self.spec.dialect, self.ns)}/{job.name}")

    def run(self) -> str:
        jobs = sorted(self.work.jobs, key=lambda j: j.arrival)
        by_name = {j.name: j for j in jobs}
        deadline = self.work.arrival_window + self.work.drain_seconds
        pending = list(jobs)  # not yet created
        running: dict[str, float] = {}  # job -> when its time is up
        futures: list[concurrent.futures.Future[None]] = []
        self.t0 = self.clock()
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            while True:
                time.sleep(TICK_SECONDS)
                now = self.now()
                while pending and pending[0].arrival <= now:
                    futures.append(pool.submit(self.create, pending.pop(0)))
                bound = self.watch.snapshot()
                for name in list(self.rec.arrived):
                    job = by_name[name]
                    if name in self.rec.whole:
                        continue
                    times = [bound[m][0] for m in job.members if m in bound]
                    if len(times) == len(job.members):
                        whole = max(times) - self.t0
                        self.rec.whole[name] = whole
                        running[name] = whole + job.duration
                for name, until in list(running.items()):
                    if until <= now:
                        del running[name]
                        futures.append(pool.submit(self.delete, by_name[name]))
                for f in [f for f in futures if f.done()]:
                    futures.remove(f)
                    f.result()  # an exception here is the run's error
                if not pending and len(self.rec.deleted) == len(jobs):
                    return "every job ran and was deleted"
                if now > deadline:
                    return (
                        f"drain window over ({self.work.drain_seconds:.0f}s after the last arrival)"
                    )
                self.check_alive()


def _create(api: observe.Api, path: str, body: dict[str, Any]) -> bool:
    for attempt in range(6):
        try:
            status, _ = api.request("POST", path, body)
        except OSError:
            status = 0
        if status in (201, 409):
            return True
        time.sleep(0.05 * 2**attempt)  # 429 / 5xx under load: back off, try again
    return False


def run(
    cp: launcher.ControlPlane,
    api: observe.Api,
    work: workloads.ChurnWorkload,
    spec: schedulers.SchedulerSpec,
    binary: Path,
    workdir: Path,
    *,
    phalanx_port: int,
    source: Path | None = None,
    profile_dir: Path | None = None,
    keep_logs: Path | None = None,
) -> ChurnRecord:
    ns = f"b-{work.key}-{spec.key}-{uuid.uuid4().hex[:6]}"
    rec = ChurnRecord(work.key, spec.key, ns)
    api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": ns}})  # fmt: skip
    clock = time.monotonic
    profile_to = profile_dir / f"phalanx-{work.key}" if profile_dir and spec.uses_phalanx else None
    try:
        with schedulers.started(
            cp,
            spec,
            binary,
            workdir / ns,
            phalanx_port=phalanx_port,
            profile_to=profile_to,
            source=source,
            keep_logs=keep_logs,
        ) as st:
            rec.scheduler_config = st.config
            sampler = observe.ProcSampler(st.sampled_pids(cp), clock=clock, by_thread=("phalanx",))
            watch = observe.PodWatch(api, ns, clock=clock)
            watch.start()
            sampler.start()
            log(f"{work.key} × {spec.key}: {len(work.jobs)} jobs over {work.arrival_window:.0f}s")
            driver = _Driver(api, work, spec, rec, watch, clock, lambda: st.check_alive(cp))
            rec.end_reason = driver.run()
            rec.end = driver.now()
            sampler.stop()
            watch.stop()
            rec.bound = {pod: (t - driver.t0, node) for pod, (t, node) in watch.snapshot().items()}
            rec.processes = sampler.summary(driver.t0, driver.t0 + rec.end)
            if st.phalanx is not None:
                with contextlib.suppress(Exception):
                    rec.phalanx_metrics = st.phalanx.metrics()
    except Exception as exc:  # noqa: BLE001  # one failed run is reported; the others go on
        rec.error = f"{type(exc).__name__}: {exc}"
        log(f"{work.key} × {spec.key} FAILED:\n{traceback.format_exc()}")
        log(cp.log_tails(lines=15))
    finally:
        _cleanup(api, ns, spec.dialect)
    ended = rec.end_reason or "error"
    log(f"{work.key} × {spec.key}: {len(rec.whole)}/{len(work.jobs)} jobs whole ({ended})")
    return rec


def _cleanup(api: observe.Api, namespace: str, dialect: workloads.Dialect) -> None:
    api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
    api.request("DELETE", workloads.group_path(dialect, namespace))

    def empty() -> bool:
        answer = api.must("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        if answer["items"]:
            api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
            return False
        return True

    launcher.wait_for(f"pods of {namespace} deleted", empty, timeout=300, interval=1.0)
    api.request("DELETE", f"/api/v1/namespaces/{namespace}")
