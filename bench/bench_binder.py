"""Bindings: today's blocking client on a thread pool against the async writer.

One real control plane (etcd + kube-apiserver + kwok from ``tests/controlplane``) and
``--nodes`` kwok nodes. The contenders:

* **pool**: ``KubeClient.bind`` through ``kube_writes.PooledWriter`` (a 16-thread pool),
  exactly as ``KubeSource`` runs it today;
* **async HTTP/1.1**: ``AsyncKubeClient.bind`` at QPS/burst 500/1000 (the bench's
  kube-scheduler client setting), over keep-alive HTTP/1.1 connections (aiohttp), its default;
* **async HTTP/2**: the same over HTTP/2 (httpx + h2), ``http2=True``.

Two scenarios, for each contender on fresh pods:

1. **flood**: ``--pods`` bindings requested at once (a flood of single pods, or a huge
   gang). Binds/s from the first request to the last answer; each bind's latency from
   its request to its answer (p50, p99), so queueing in the pool or the client counts.
2. **gang fan-out**: ``--gangs`` gangs of ``--gang-size`` members, one after the other,
   each gang's bindings requested at once: the window from the first request to the last
   answer, which is how long the gang is partially bound.

Every binding goes as kube-scheduler's identity (not system:masters: the server's flow
control applies). Pods are created beforehand by an untimed admin client; after each
scenario the bench waits until kwok has run every bound pod, so its status writes do not
load the next measurement. CPU: this process during the flood (with ``--rtt-ms``, the
relay's thread too), and kube-apiserver from the flood's start until kwok is done.
``--rounds`` repeats everything, in reverse order every other round, so the cluster's
growth favours no contender.

On one 2-core machine the API server answers in a few milliseconds and its CPU is what
runs out. ``--rtt-ms`` sends the bindings through a relay that holds every chunk half
that long each way, as a remote API server's round trip would: the regime in which a
thread per call in flight is what limits bindings.

    python bench/bench_binder.py [--pods 2000] [--nodes 20] [--rounds 2] [--rtt-ms 100]

Prints markdown. Compare ratios from one run, never absolute figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "controlplane"))

import launcher  # noqa: E402  # tests/controlplane/launcher.py
import uvloop  # noqa: E402
import yaml  # noqa: E402

from phalanx.core.model import Binding, PodRef  # noqa: E402
from phalanx.sources.base import BindError  # noqa: E402
from phalanx.sources.kube import KubeSourceSettings  # noqa: E402
from phalanx.sources.kube_async import (  # noqa: E402
    AsyncKubeClient,
    AsyncKubeCounts,
    AsyncKubeSettings,
)
from phalanx.sources.kube_writes import PooledWriter  # noqa: E402
from phalanx.sources.kubeclient import KubeClient  # noqa: E402

ADMIN = AsyncKubeSettings(qps=5000.0, burst=5000)
BENCH_QPS, BENCH_BURST = 500.0, 1000
Bind = Callable[[str, str, str], Awaitable[None]]  # (name, uid, node)


@dataclass(slots=True)
class Outcome:
    contender: str
    round: int
    pods: int = 0
    seconds: float = 0.0  # flood: first request to last answer
    latencies: list[float] = field(default_factory=list)  # flood: request to answer
    failed: int = 0
    attempts: int = 0  # API requests sent during the flood (async: retries included)
    throttled: int = 0  # 429 answers during the flood
    client_cpu: float = 0.0  # this process's CPU seconds during the flood
    # kube-apiserver's CPU seconds from the flood's start until kwok has run every pod
    # (kwok's status writes after each binding count the same for every contender)
    server_cpu: float = 0.0
    windows: list[float] = field(default_factory=list)  # gang fan-out windows (seconds)

    @property
    def rate(self) -> float:
        return self.pods / self.seconds


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(component: launcher.Component | None) -> float:
    """User + system CPU seconds of a running component (Linux /proc)."""
    assert component is not None
    assert component.pid is not None
    fields = Path(f"/proc/{component.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[bench-binder {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the cluster side ---------------------------------------------------------------------------


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench-binder"}},
        "spec": {"schedulerName": "phalanx", "containers": [{"name": "main", "image": "fake"}]},
    }


async def make_pods(
    admin: AsyncKubeClient, namespace: str, prefix: str, count: int
) -> list[tuple[str, str]]:
    """`count` unbound pods in `namespace`: (name, uid) each."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    names = [f"{prefix}-{i:05d}" for i in range(count)]
    made = await asyncio.gather(*(admin.request("POST", path, pod(n)) for n in names))
    return [(n, str(p["metadata"]["uid"])) for n, p in zip(names, made, strict=True)]


async def settle(admin: AsyncKubeClient, namespace: str) -> int:
    """Wait until kwok has run every bound pod of `namespace`; the number bound."""
    for _ in range(300):
        listed = await admin.request("GET", f"/api/v1/namespaces/{namespace}/pods")
        bound = [p for p in listed["items"] if p["spec"].get("nodeName")]
        if all(p.get("status", {}).get("phase") == "Running" for p in bound):
            return len(bound)
        await asyncio.sleep(1.0)
    raise SystemExit(f"kwok did not run the pods of {namespace} within 300 s")


class DelayProxy:
    """A TCP relay that holds every chunk `delay` seconds each way: a round trip of a
    remote API server. Runs on a loop of its own thread, so it costs the contenders' loop
    nothing; TLS passes through untouched (the certificate names 127.0.0.1)."""

    def __init__(self, delay: float, host: str, port: int) -> None:
        self.delay = delay
        self.target = (host, port)
        self._ready: concurrent.futures.Future[int] = concurrent.futures.Future()

    def start(self) -> int:
        """Start the relay; the port it listens on."""
        threading.Thread(target=self._run, name="delay-proxy", daemon=True).start()
        return self._ready.result(timeout=10)

    def _run(self) -> None:
        loop = uvloop.new_event_loop()
        server = loop.run_until_complete(asyncio.start_server(self._relay, launcher.LOOPBACK, 0))
        self._ready.set_result(server.sockets[0].getsockname()[1])
        loop.run_forever()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(
            self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        # Same delay for every chunk: the timers fire in the order the chunks came.
        while data := await reader.read(65536):
            loop.call_later(self.delay, writer.write, data)
        loop.call_later(self.delay, writer.close)


# ---- the contenders ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def pool_binder(
    kubeconfig: Path, namespace: str
) -> AsyncIterator[tuple[str, Bind, AsyncKubeCounts | None]]:
    client = KubeClient.from_kubeconfig(kubeconfig)
    writer = PooledWriter(client, KubeSourceSettings().writes)

    async def bind(name: str, uid: str, node: str) -> None:
        await writer.bind(Binding(PodRef(namespace, name, uid), node))

    try:
        yield f"pool ({writer.settings.workers} threads)", bind, None
    finally:
        await writer.aclose()
        client.close()


def async_binder(http2: bool, in_flight: int | None) -> Callable[..., Any]:
    @contextlib.asynccontextmanager
    async def binder(
        kubeconfig: Path, namespace: str
    ) -> AsyncIterator[tuple[str, Bind, AsyncKubeCounts | None]]:
        settings = AsyncKubeSettings(
            qps=BENCH_QPS, burst=BENCH_BURST, http2=http2, max_in_flight=in_flight
        )
        async with AsyncKubeClient.from_kubeconfig(kubeconfig, settings=settings) as c:
            version = await c.http_version()

            async def bind(name: str, uid: str, node: str) -> None:
                await c.bind(namespace, name, uid, node, deadline=time.monotonic() + 60.0)

            name = (
                f"async {version} (qps {BENCH_QPS:.0f}, burst {BENCH_BURST}, "
                f"in flight {settings.in_flight_limit})"
            )
            yield name, bind, c.counts

    return binder


# ---- the scenarios -------------------------------------------------------------------------------


async def fan_out(
    pods: Sequence[tuple[str, str]], nodes: Sequence[str], bind: Bind
) -> tuple[float, list[float], int]:
    """Request every binding at once; (seconds to the last answer, latencies, failures)."""
    latencies: list[float] = []
    failed = 0
    start = time.perf_counter()

    async def one(i: int, name: str, uid: str) -> None:
        nonlocal failed
        try:
            await bind(name, uid, nodes[i % len(nodes)])
        except BindError:
            failed += 1
        latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(one(i, n, u) for i, (n, u) in enumerate(pods)))
    return time.perf_counter() - start, latencies, failed


async def contend(
    args: argparse.Namespace,
    cp: launcher.ControlPlane,
    admin: AsyncKubeClient,
    kubeconfig: Path,
    namespace: str,
    binder: Callable[..., Any],
) -> Outcome:
    nodes = [f"bench-binder-{i}" for i in range(args.nodes)]
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    await admin.request("POST", "/api/v1/namespaces", body)
    flood = await make_pods(admin, namespace, "flood", args.pods)
    gangs = [
        await make_pods(admin, namespace, f"gang-{g}", args.gang_size) for g in range(args.gangs)
    ]
    await asyncio.sleep(2.0)  # let the API server settle after the creates
    async with binder(kubeconfig, namespace) as (name, bind, counts):
        before = (time.process_time(), cpu_seconds(cp.apiserver))
        sent = (counts.attempts, counts.throttled) if counts else (0, 0)
        seconds, latencies, failed = await fan_out(flood, nodes, bind)
        client_cpu = time.process_time() - before[0]
        attempts, throttled = (
            (counts.attempts - sent[0], counts.throttled - sent[1]) if counts else (len(flood), 0)
        )
        bound = await settle(admin, namespace)
        server_cpu = cpu_seconds(cp.apiserver) - before[1]
        if bound != len(flood) - failed:
            raise SystemExit(f"{name}: {bound} pods bound, expected {len(flood) - failed}")
        windows = []
        for members in gangs:
            window, _, gang_failed = await fan_out(members, nodes, bind)
            if gang_failed:
                raise SystemExit(f"{name}: {gang_failed} bindings of a gang failed")
            windows.append(window)
            await asyncio.sleep(0.5)
        await settle(admin, namespace)
    return Outcome(name, 0, len(flood), seconds, latencies, failed, attempts, throttled,
                   client_cpu, server_cpu, windows)  # fmt: skip


# ---- the report ----------------------------------------------------------------------------------


def tables(outcomes: Sequence[Outcome], gang_size: int) -> str:
    rows = [
        "| round | contender | binds/s | p50 ms | p99 ms | failed | API requests | 429s |"
        " client CPU ms/bind | apiserver CPU ms/bind |"
        f" gang of {gang_size}: window p50 ms | window max ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        rows.append(
            f"| {o.round} | {o.contender} | {o.rate:.0f} | {1000 * pct(o.latencies, 0.5):.0f} | "
            f"{1000 * pct(o.latencies, 0.99):.0f} | {o.failed} | {o.attempts} | {o.throttled} | "
            f"{1000 * o.client_cpu / o.pods:.2f} | {1000 * o.server_cpu / o.pods:.2f} | "
            f"{1000 * statistics.median(o.windows):.0f} | {1000 * max(o.windows):.0f} |"
        )
    return "\n".join(rows)


def ratios(outcomes: Sequence[Outcome]) -> str:
    by: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by.setdefault(o.contender, []).append(o)
    base_name = next(name for name in by if name.startswith("pool"))
    base = by[base_name]
    figures: dict[str, Callable[[Outcome], float]] = {
        "binds/s": lambda o: o.rate,
        "p50 latency": lambda o: pct(o.latencies, 0.5),
        "p99 latency": lambda o: pct(o.latencies, 0.99),
        "client CPU/bind": lambda o: o.client_cpu,
        "gang window p50": lambda o: statistics.median(o.windows),
    }
    lines = []
    for name, runs in by.items():
        if runs is base:
            continue
        pairs = list(zip(runs, base, strict=True))
        parts = [
            f"{label} {statistics.median(f(r) / f(b) for r, b in pairs):.2f}×"
            for label, f in figures.items()
        ]
        lines.append(f"- {name} ÷ {base_name} (median over {len(runs)} rounds): {', '.join(parts)}")
    return "\n".join(lines)


# ---- main ----------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace, cp: launcher.ControlPlane) -> list[Outcome]:
    contenders: list[tuple[str, Callable[..., Any]]] = [
        ("pool", pool_binder),
        ("async-h1", async_binder(False, args.in_flight)),
        ("async-h2", async_binder(True, args.in_flight)),
    ]
    outcomes: list[Outcome] = []
    kubeconfig = cp.scheduler_kubeconfig
    if args.rtt_ms:
        kubeconfig = cp.workdir / "bench-binder-delayed.kubeconfig"
        port = DelayProxy(args.rtt_ms / 2000.0, launcher.LOOPBACK, cp.apiserver_port).start()
        config = yaml.safe_load(cp.scheduler_kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://{launcher.LOOPBACK}:{port}"
        kubeconfig.write_text(yaml.safe_dump(config))
    async with AsyncKubeClient.from_kubeconfig(cp.kubeconfig, settings=ADMIN) as admin:
        for r in range(1, args.rounds + 1):
            order = contenders if r % 2 else list(reversed(contenders))
            for key, binder in order:
                log(f"round {r}: {key}")
                namespace = f"bench-binder-{r}-{key}"
                outcome = await contend(args, cp, admin, kubeconfig, namespace, binder)
                outcome.round = r
                outcomes.append(outcome)
                log(
                    f"  {outcome.rate:.0f} binds/s, p99 {1000 * pct(outcome.latencies, 0.99):.0f}"
                    f" ms; gang window p50 {1000 * statistics.median(outcome.windows):.0f} ms"
                )
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=2000, help="flood: bindings at once")
    parser.add_argument("--gangs", type=int, default=10, help="gang fan-out: gangs in turn")
    parser.add_argument("--gang-size", type=int, default=64, help="gang fan-out: members")
    parser.add_argument("--nodes", type=int, default=20, help="kwok nodes to bind to")
    parser.add_argument("--rounds", type=int, default=2, help="repeats (order alternates)")
    parser.add_argument("--in-flight", type=int, help="the async client's max_in_flight")
    parser.add_argument(
        "--rtt-ms",
        type=float,
        default=0.0,
        help="bind through a relay that adds this round trip (a remote API server)",
    )
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="event loop (default uvloop: what `phalanx serve` runs on)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    with launcher.ControlPlane() as cp:
        log(f"control plane up; creating {args.nodes} kwok nodes")
        for i in range(args.nodes):
            cp.create_gpu_node(f"bench-binder-{i}", gpus=8, pods=10_000, wait_ready=False)
        for i in range(args.nodes):
            cp.wait_node_ready(f"bench-binder-{i}")
        factory = uvloop.new_event_loop if args.loop == "uvloop" else None
        with asyncio.Runner(loop_factory=factory) as runner:
            outcomes = runner.run(main_async(args, cp))
    versions = launcher.read_versions()
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}, {args.loop}; Kubernetes "
        f"{versions['KUBE_VERSION']}, etcd {versions['ETCD_VERSION']}, kwok "
        f"{versions['KWOK_VERSION']}. Flood of {args.pods} pods and {args.gangs} gangs of "
        f"{args.gang_size} per contender, {args.nodes} kwok nodes, {args.rounds} round(s), "
        f"bindings through a relay adding {args.rtt_ms:.0f} ms of round trip, "
        f"{time.monotonic() - started:.0f} s in all; load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after.\n"
    )
    print(tables(outcomes, args.gang_size))
    print()
    print(ratios(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
