"""What a `/metrics` scrape holds Phalanx's event loop for, by how many nodes there are.

Drives the real `Extender` over an in-memory cluster (`ClusterFileSource`, no API server):
`--nodes` 8-GPU nodes, each running two 2-GPU pods. A scrape reads every collector (the
per-node GPU gauges are three samples a node) and formats the text. Phalanx reads them on
the loop and formats on a worker thread (`Metrics.exposition`); until 2026-12-06 the whole
scrape ran on the loop. Reports, min and p50 of `--repeat` scrapes in ms: the whole scrape
on the loop (before), what the loop still does (the collectors), the formatting (now off
the loop), and the text's size.

    python bench/bench_scrape.py [--nodes 500,5000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import bench_core  # bench/bench_core.py
from prometheus_client import generate_latest

from builders import node_obj, pod_obj
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.service.metrics import Collected
from phalanx.sources.clusterfile import ClusterFileSource


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    figures = bench_core.timed(fn, repeat)
    return figures["min_ms"], figures["p50_ms"]


async def scrape_cost(nodes: int, repeat: int) -> dict[str, Any]:
    names = [f"node-{i:05d}" for i in range(nodes)]
    source = ClusterFileSource([node_obj(n, 8) for n in names])
    ext = Extender(source, ServiceSettings())
    await ext.start()
    for i, node in enumerate(names):
        for k in range(2):
            source.apply(pod_obj(f"p{i}-{k}", 2, node=node, phase="Running"))
    registry = ext.metrics.registry
    text = generate_latest(registry)
    assert text.count(b"phalanx_gpus{") == 3 * nodes, "every node's three GPU samples"
    collected = Collected(registry)
    whole = timed(lambda: generate_latest(registry), repeat)
    loop = timed(lambda: Collected(registry), repeat)
    thread = timed(lambda: generate_latest(collected), repeat)
    await ext.stop()
    return {
        "nodes": nodes,
        "before_ms": whole,
        "loop_ms": loop,
        "thread_ms": thread,
        "kib": round(len(text) / 1024),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="500,5000")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print("nodes | whole scrape on the loop (before) | on the loop now | off the loop | KiB")
    for nodes in (int(n) for n in args.nodes.split(",")):
        row = asyncio.run(scrape_cost(nodes, args.repeat))
        print(
            f"{row['nodes']} | {row['before_ms'][0]} / {row['before_ms'][1]} | "
            f"{row['loop_ms'][0]} / {row['loop_ms'][1]} | "
            f"{row['thread_ms'][0]} / {row['thread_ms'][1]} | {row['kib']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
