"""Extender latency over real HTTP on loopback, next to a do-nothing floor on the same stack.

Starts `phalanx serve --cluster-file` and a floor app (uvicorn + httptools + orjson, parses
the body and echoes the names) as separate processes, then measures from a third:

* `/filter` of a single 1-GPU pod with 1,000 and 5,000 `NodeNames` (kube-scheduler's
  nodeCacheCapable mode) against the floor: p50, p99 and the p50 ratio;
* the first `/filter` of a 64-member gang on 5,000 nodes (it plans and reserves the gang);
* the bind barrier: 64 concurrent `/bind`s, from the last one sent to all answered;
* the gang's partially-bound window as Phalanx sees it (`phalanx_gang_bind_window_seconds`:
  first to last binding landing; in memory here, so Phalanx's own share of the window; the
  API server's share is bench_binder.py's);
* full-`Nodes` mode at 1,000 nodes (the mode to discourage) against `NodeNames` mode.

    python bench/bench_extender.py [--requests 200] [--json out.json]

Ratios, not absolute figures, are what carry over between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from builders import node_obj, pod_obj, podgroup_obj  # noqa: E402

GANG_SIZE = 64
GANGS = 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(args: list[str], url: str) -> Iterator[None]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"{args[0]} did not become ready: {err[-2000:]}")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def cluster_file(path: Path, nodes: int) -> list[dict[str, Any]]:
    node_objs = [node_obj(f"node-{i:05d}", 8, clique=f"c{i // 16:04d}") for i in range(nodes)]
    items: list[dict[str, Any]] = [*node_objs, pod_obj("single", 1, namespace="bench")]
    for g in range(GANGS):
        items.append(podgroup_obj(f"gang-{g}", GANG_SIZE, namespace="bench"))
        items.extend(
            pod_obj(f"gang-{g}-{i}", 8, namespace="bench", group=f"gang-{g}")
            for i in range(GANG_SIZE)
        )
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return items


def quantiles(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def timed_posts(client: httpx.Client, url: str, body: bytes, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        response = client.post(url, content=body, headers={"Content-Type": "application/json"})
        times.append(time.perf_counter() - start)
        response.raise_for_status()
    return times


async def barrier(
    url: str, items: list[dict[str, Any]], gang: int, names: list[str]
) -> dict[str, float]:
    """First filter of a gang (plans it), every member's filter, then 64 concurrent binds."""
    pods = [
        p for p in items if p["kind"] == "Pod" and p["metadata"]["name"].startswith(f"gang-{gang}-")
    ]
    limits = httpx.Limits(max_connections=GANG_SIZE + 4)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        nodes = {}
        first = 0.0
        for i, p in enumerate(pods):
            start = time.perf_counter()
            r = await client.post("/filter", json={"Pod": p, "Nodes": None, "NodeNames": names})
            if i == 0:
                first = time.perf_counter() - start
            kept = r.json()["NodeNames"]
            assert kept, r.json()
            assert len(kept) == 1, r.json()
            nodes[p["metadata"]["name"]] = kept[0]
        sent: list[float] = []

        async def bind(p: dict[str, Any]) -> float:
            meta = p["metadata"]
            body = {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"],
                "Node": nodes[meta["name"]],
            }
            sent.append(time.perf_counter())
            r = await client.post("/bind", json=body)
            assert r.json() == {"Error": ""}, r.json()
            return time.perf_counter()

        done = await asyncio.gather(*(bind(p) for p in pods))
        return {
            "first_filter_ms": first * 1000,
            "last_bind_to_all_bound_ms": (max(done) - max(sent)) * 1000,
        }


def bind_window(metrics: str) -> dict[str, float | None]:
    """phalanx_gang_bind_window_seconds, from /metrics: the mean, and the upper bound of the
    smallest bucket holding every gang (the longest window, to a bucket)."""
    total = count = 0.0
    buckets: list[tuple[float, float]] = []
    for line in metrics.splitlines():
        if line.startswith("phalanx_gang_bind_window_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("phalanx_gang_bind_window_seconds_count"):
            count = float(line.split()[-1])
        elif line.startswith("phalanx_gang_bind_window_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    longest = next((le for le, n in sorted(buckets) if count and n >= count), None)
    return {
        "gang64_partial_window_mean_ms": round(total / count * 1000, 3) if count else None,
        "gang64_partial_window_max_le_ms": round(longest * 1000, 3) if longest else None,
    }


def run(requests: int) -> dict[str, Any]:
    python = sys.executable
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} cores", "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        floor_port = free_port()
        floor_url = f"http://127.0.0.1:{floor_port}"
        floor_args = [python, str(HERE / "floor_app.py"), "--port", str(floor_port)]
        with process(floor_args, floor_url), httpx.Client(timeout=60) as client:
            for nodes in (1000, 5000):
                path = Path(tmp) / f"cluster-{nodes}.json"
                items = cluster_file(path, nodes)
                names = [f"node-{i:05d}" for i in range(nodes)]
                single = next(p for p in items if p["metadata"]["name"] == "single")
                body = json.dumps({"Pod": single, "Nodes": None, "NodeNames": names}).encode()
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                args = [
                    python,
                    "-m",
                    "phalanx.cli",
                    "serve",
                    "--cluster-file",
                    str(path),
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                ]
                with process(args, url):
                    floor = quantiles(timed_posts(client, f"{floor_url}/filter", body, requests))
                    ours = quantiles(timed_posts(client, f"{url}/filter", body, requests))
                    row: dict[str, Any] = {
                        "nodes": nodes,
                        "mode": "NodeNames",
                        "filter_p50_ms": round(ours[0] * 1000, 2),
                        "filter_p99_ms": round(ours[1] * 1000, 2),
                        "floor_p50_ms": round(floor[0] * 1000, 2),
                        "floor_p99_ms": round(floor[1] * 1000, 2),
                        "p50_vs_floor": round(ours[0] / floor[0], 2),
                    }
                    if nodes == 1000:
                        node_items = [i for i in items if i["kind"] == "Node"]
                        full = json.dumps(
                            {"Pod": single, "Nodes": {"items": node_items}, "NodeNames": None}
                        ).encode()
                        full_ours = quantiles(
                            timed_posts(client, f"{url}/filter", full, max(20, requests // 4))
                        )
                        row["full_nodes_p50_ms"] = round(full_ours[0] * 1000, 2)
                        row["full_nodes_vs_nodenames"] = round(full_ours[0] / ours[0], 2)
                    if nodes == 5000:
                        gangs = [asyncio.run(barrier(url, items, g, names)) for g in range(GANGS)]
                        firsts = quantiles([g["first_filter_ms"] for g in gangs])
                        binds = quantiles([g["last_bind_to_all_bound_ms"] for g in gangs])
                        row["gang64_first_filter_p50_ms"] = round(firsts[0], 2)
                        row["gang64_first_filter_p99_ms"] = round(firsts[1], 2)
                        row["gang64_last_bind_to_all_bound_p50_ms"] = round(binds[0], 2)
                        row["gang64_last_bind_to_all_bound_max_ms"] = round(
                            max(g["last_bind_to_all_bound_ms"] for g in gangs), 2
                        )
                        row.update(bind_window(client.get(f"{url}/metrics").text))
                    results["rows"].append(row)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = run(args.requests)
    for row in results["rows"]:
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
