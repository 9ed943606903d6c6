"""What the periodic status refresh costs Phalanx's event loop, by how many gangs exist.

Drives the real `Extender` over an in-memory cluster (`ClusterFileSource`, no API server):
1,000 8-GPU nodes and `--groups` PodGroups of three running members each, none of them
moving (the steady state of a cluster that keeps its finished jobs' PodGroups). Reports
the process CPU time of one `refresh_statuses` (run every second by the service), min and
p50 of `--repeat` calls after a first one that writes every status.

    python bench/bench_status_refresh.py [--groups 500,5000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from builders import node_obj, pod_obj, podgroup_obj
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.sources.clusterfile import ClusterFileSource

NODES = 1000
MEMBERS = 3


async def refresh_cost(groups: int, repeat: int) -> dict[str, float]:
    names = [f"node-{i:04d}" for i in range(NODES)]
    source = ClusterFileSource([node_obj(n, 8) for n in names])
    ext = Extender(source, ServiceSettings())
    await ext.start()
    for g in range(groups):
        source.apply(podgroup_obj(f"g{g}", MEMBERS))
        for m in range(MEMBERS):
            node = names[(g * MEMBERS + m) % NODES]
            source.apply(pod_obj(f"g{g}-{m}", 1, group=f"g{g}", node=node, phase="Running"))
    ext.refresh_statuses()  # every gang moved: each status is written once
    await asyncio.sleep(0)  # the writes are tasks
    assert len(source.statuses) == groups, len(source.statuses)
    times = []
    for _ in range(repeat):
        start = time.process_time()
        ext.refresh_statuses()
        times.append(time.process_time() - start)
    await ext.stop()
    return {
        "groups": groups,
        "min_ms": round(min(times) * 1000, 2),
        "p50_ms": round(statistics.median(times) * 1000, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="500,5000")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(f"{'groups':>7} {'min_ms':>8} {'p50_ms':>8}")
    for groups in (int(g) for g in args.groups.split(",")):
        row = asyncio.run(refresh_cost(groups, args.repeat))
        print(f"{row['groups']:>7} {row['min_ms']:>8} {row['p50_ms']:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
