"""Gang planning cost: a whole gang planned on a snapshot, as the first /filter does it.

Reports min/p50/p99 of `place_gang` for 64 and 256 members (8 GPUs each, `pack`) on clusters of
1,000 to 5,000 8-GPU nodes, plus the cost per node x member, so the growth is visible as a
ratio within one run (this machine is shared and noisy: compare figures from one run only).

    python bench/bench_core.py [--repeat 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from builders import gang, gpu_node, pod
from phalanx.core.cache import ClusterState
from phalanx.core.gang import GangSpec, place_gang
from phalanx.core.inventory import parse_placement


def cluster(nodes: int) -> ClusterState:
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(gpu_node(f"node-{i:05d}", 8, clique=f"clique-{i // 16:04d}"))
    # A busy cluster: every third node half used, so best-fit has real choices to make.
    for i in range(0, nodes, 3):
        state.upsert_pod(pod(f"busy-{i}", 4, node=f"node-{i:05d}"))
    return state


def measure(nodes: int, members: int, repeat: int, policy: str = "pack") -> dict[str, float]:
    state = cluster(nodes)
    spec = GangSpec(
        key="bench/g",
        placement=parse_placement(policy),
        members=tuple(gang("g", members, 8, namespace="bench")),
    )
    times = []
    for _ in range(repeat):
        snap = state.snapshot()
        start = time.perf_counter()
        place_gang(snap, spec)
        times.append(time.perf_counter() - start)
    times.sort()
    p50 = statistics.median(times)
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return {
        "nodes": nodes,
        "members": members,
        "policy": policy,
        "min_ms": round(times[0] * 1000, 2),
        "p50_ms": round(p50 * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "us_per_node_x_member": round(times[0] * 1e6 / (nodes * members), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [
        measure(n, m, args.repeat, policy)
        for n, m, policy in [
            (1000, 64, "pack"),
            (2500, 64, "pack"),
            (5000, 64, "pack"),
            (5000, 256, "pack"),
            (5000, 64, "spread"),
            (5000, 64, "interconnect-local"),
        ]
    ]
    columns = ("nodes", "members", "policy", "min_ms", "p50_ms", "p99_ms", "us_per_node_x_member")
    widths = (6, 7, -20, 8, 8, 8, 21)
    print(
        " ".join(
            f"{c:{'<' if w < 0 else '>'}{abs(w)}}" for c, w in zip(columns, widths, strict=True)
        )
    )
    for r in rows:
        cells = (r[c] for c in columns)
        print(
            " ".join(
                f"{v:{'<' if w < 0 else '>'}{abs(w)}}" for v, w in zip(cells, widths, strict=True)
            )
        )
    # The minimum is the least noisy estimate of cost on a shared machine.
    growth = rows[2]["min_ms"] / rows[0]["min_ms"]
    print(f"growth 1,000 -> 5,000 nodes (64 members, min): {growth:.2f}x for 5x the nodes")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
