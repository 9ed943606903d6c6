"""Gang planning cost: a whole gang planned on a snapshot, as the first /filter does it.

Reports min/p50/p99 of `place_gang` for 64 and 256 members (8 GPUs each, `pack`) on clusters of
1,000 to 5,000 8-GPU nodes, plus the cost per node x member, so the growth is visible as a
ratio within one run (this machine is shared and noisy: compare figures from one run only).

Then the same by topology on NVL72-shaped clusters (four-GPU nodes, cliques of 18 under
leaves of 4 cliques under spines of 8 leaves, every third node half used): 64 members
preferring a clique within a required spine (the walk clique > leaf > spine), a required
leaf, slices of 8 in a clique, and the tie-breaks alone; with the index built once, as the
service caches it, and the index build, free-domain count and fragmentation scores alone.

Then small gangs (3 members of 1 GPU, the upstream scheduler_perf shape) on 8-GPU nodes, as
the planner plans every gang (the default topology's tie-breaks, its index kept): on nodes
with no topology label but the hostname, and in cliques of 16.

Last, a full cluster (7 of every node's 8 GPUs used): the `/filter` of a member whose gang
cannot fit, the first time (the gang is planned) and when it is retried with nothing given
back (`phalanx.core.unfit` answers from the last verdict), as kube-scheduler retries refused
members after every cluster event.

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

from collections.abc import Callable, Iterable
from typing import Any

from builders import gang, gpu_node, pod, podgroup, rack_node
from phalanx.core.cache import ClusterState
from phalanx.core.gang import GangSpec, Placed, place_gang
from phalanx.core.inventory import parse_placement
from phalanx.core.planner import GangPlanner
from phalanx.core.topology import DEFAULT_TOPOLOGIES, GangTopology, build_index
from phalanx.core.topology_usage import fragmentation_scores, free_domains

DEFAULT = DEFAULT_TOPOLOGIES.default


def cluster(nodes: int) -> ClusterState:
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(gpu_node(f"node-{i:05d}", 8, clique=f"clique-{i // 16:04d}"))
    # A busy cluster: every third node half used, so best-fit has real choices to make.
    for i in range(0, nodes, 3):
        state.upsert_pod(pod(f"busy-{i}", 4, node=f"node-{i:05d}"))
    return state


def timed(run: Callable[[], object], repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    times.sort()
    return {
        "min_ms": round(times[0] * 1000, 2),
        "p50_ms": round(statistics.median(times) * 1000, 2),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 2),
    }


def measure(nodes: int, members: int, repeat: int, policy: str = "pack") -> dict[str, Any]:
    state = cluster(nodes)
    spec = GangSpec(
        key="bench/g",
        placement=parse_placement(policy),
        members=tuple(gang("g", members, 8, namespace="bench")),
    )
    figures = timed(lambda: place_gang(state.snapshot(), spec), repeat)
    return {
        "nodes": nodes,
        "members": members,
        "policy": policy,
        **figures,
        "us_per_node_x_member": round(figures["min_ms"] * 1000 / (nodes * members), 4),
    }


def nvl72_cluster(nodes: int) -> ClusterState:
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(
            rack_node(
                f"node-{i:05d}",
                4,
                spine=f"s{i // 576:02d}",
                leaf=f"l{i // 72:03d}",
                clique=f"c{i // 18:04d}",
            )
        )
    for i in range(0, nodes, 3):
        state.upsert_pod(pod(f"busy-{i}", 2, node=f"node-{i:05d}"))
    return state


TOPOLOGY_CASES: dict[str, GangTopology | None] = {
    "no topology (pack, baseline)": None,
    "preferred clique, required spine": GangTopology(DEFAULT, required=0, preferred=2),
    "required leaf": GangTopology(DEFAULT, required=1),
    "slices of 8 in a clique": GangTopology(DEFAULT, required=0, slice_size=8, slice_level=2),
    "tie-breaks only": GangTopology(DEFAULT),
}


def measure_topology(nodes: int, members: int, case: str, repeat: int) -> dict[str, Any]:
    state = nvl72_cluster(nodes)
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    pods = [
        pod(f"w-{i}", 4, group="g", labels={"batch.kubernetes.io/job-completion-index": str(i)})
        for i in range(members)
    ]
    spec = GangSpec(
        key="bench/g",
        placement=parse_placement("pack"),
        members=tuple(pods),
        topology=TOPOLOGY_CASES[case],
        index=index if TOPOLOGY_CASES[case] is not None else None,
    )
    result = place_gang(snapshot, spec)
    landed = (result.level or "-") if isinstance(result, Placed) else "unfit"
    figures = timed(lambda: place_gang(state.snapshot(), spec), repeat)
    return {"nodes": nodes, "members": members, "case": case, **figures, "level": landed}


def measure_index(nodes: int, repeat: int) -> list[dict[str, Any]]:
    state = nvl72_cluster(nodes)
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    return [
        {
            "nodes": nodes,
            "what": what,
            **timed(run, repeat),
        }
        for what, run in (
            ("build_index", lambda: build_index(DEFAULT, (i.node for i in snapshot))),
            ("free_domains", lambda: free_domains(snapshot, index)),
            (
                "fragmentation_scores (every node)",
                lambda: fragmentation_scores(index, snapshot.nodes, snapshot.names),
            ),
        )
    ]


def measure_small(nodes: int, members: int, cliques: bool, repeat: int) -> dict[str, Any]:
    """A small gang of 1-GPU members on 8-GPU nodes (every third half used), planned with
    the default topology's tie-breaks as `GangPlanner` plans any gang."""
    state = ClusterState()
    for i in range(nodes):
        clique = f"clique-{i // 16:04d}" if cliques else ""
        state.upsert_node(gpu_node(f"node-{i:05d}", 8, clique=clique))
    for i in range(0, nodes, 3):
        state.upsert_pod(pod(f"busy-{i}", 4, node=f"node-{i:05d}"))
    index = build_index(DEFAULT, (i.node for i in state.snapshot()))
    spec = GangSpec(
        key="bench/g",
        placement=parse_placement("pack"),
        members=tuple(gang("g", members, 1, namespace="bench")),
        topology=GangTopology(DEFAULT),
        index=index,
    )
    figures = timed(lambda: place_gang(state.snapshot(), spec), repeat)
    labels = "cliques of 16" if cliques else "hostname only"
    return {"nodes": nodes, "gang": f"{members} x 1 GPU", "labels": labels, **figures}


def measure_refusal(nodes: int, members: int, gpus: int, repeat: int) -> dict[str, Any]:
    """A member of a gang that cannot fit on a full cluster, refused first and on retry."""
    state = ClusterState()
    names = [f"node-{i:05d}" for i in range(nodes)]
    for i, name in enumerate(names):
        state.upsert_node(gpu_node(name, 8))
        state.upsert_pod(pod(f"busy-{i}", 7, node=name))
    state.upsert_group(podgroup("g", members, namespace="bench"))
    pods = gang("g", members, gpus, namespace="bench")
    for p in pods:
        state.upsert_pod(p)

    planner = GangPlanner(state)
    planner.filter(pods[0], names, 0)  # warms what the service keeps warm (indexes)

    def first() -> None:
        planner.unfit.keep_only(())  # nothing remembered: the gang is planned
        assert not planner.filter(pods[0], names, 0).result.feasible

    retries = iter(range(10**9))

    def retried() -> None:
        p = pods[next(retries) % members]
        assert not planner.filter(p, names, 1).result.feasible

    first_figures = timed(first, repeat)
    retry_figures = timed(retried, repeat)
    return {
        "nodes": nodes,
        "gang": f"{members} x {gpus} GPUs",
        "first_p50_ms": first_figures["p50_ms"],
        "retry_p50_ms": retry_figures["p50_ms"],
        "retry_p99_ms": retry_figures["p99_ms"],
        "ratio": round(retry_figures["p50_ms"] / first_figures["p50_ms"], 4),
    }


def table(rows: list[dict[str, Any]], columns: tuple[str, ...], widths: tuple[int, ...]) -> None:
    def line(cells: Iterable[Any]) -> str:
        return " ".join(
            f"{v:{'<' if w < 0 else '>'}{abs(w)}}" for v, w in zip(cells, widths, strict=True)
        )

    print(line(columns))
    for r in rows:
        print(line(r[c] for c in columns))


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
    table(
        rows,
        ("nodes", "members", "policy", "min_ms", "p50_ms", "p99_ms", "us_per_node_x_member"),
        (6, 7, -20, 8, 8, 8, 21),
    )
    # The minimum is the least noisy estimate of cost on a shared machine.
    growth = rows[2]["min_ms"] / rows[0]["min_ms"]
    print(f"growth 1,000 -> 5,000 nodes (64 members, min): {growth:.2f}x for 5x the nodes")
    print()
    topology_rows = [
        measure_topology(n, m, case, args.repeat)
        for n, m, case in [
            (1000, 64, "preferred clique, required spine"),
            (2500, 64, "preferred clique, required spine"),
            (5000, 64, "preferred clique, required spine"),
            (5000, 32, "required leaf"),
            (5000, 64, "slices of 8 in a clique"),
            (5000, 64, "tie-breaks only"),
            (5000, 64, "no topology (pack, baseline)"),
        ]
    ]
    table(
        topology_rows,
        ("nodes", "members", "case", "min_ms", "p50_ms", "p99_ms", "level"),
        (6, 7, -33, 8, 8, 8, -34),
    )
    growth = topology_rows[2]["min_ms"] / topology_rows[0]["min_ms"]
    print(f"growth 1,000 -> 5,000 nodes (by topology, min): {growth:.2f}x for 5x the nodes")
    print()
    index_rows = measure_index(5000, args.repeat)
    table(index_rows, ("nodes", "what", "min_ms", "p50_ms", "p99_ms"), (6, -34, 8, 8, 8))
    print()
    small_rows = [
        measure_small(n, m, cliques, args.repeat)
        for n, m, cliques in [(1000, 3, False), (1000, 3, True), (5000, 3, False)]
    ]
    table(
        small_rows,
        ("nodes", "gang", "labels", "min_ms", "p50_ms", "p99_ms"),
        (6, -12, -14, 8, 8, 8),
    )
    print()
    refusal_rows = [
        measure_refusal(n, m, g, args.repeat)
        for n, m, g in [(500, 8, 4), (500, 32, 8), (5000, 16, 2)]
    ]
    table(
        refusal_rows,
        ("nodes", "gang", "first_p50_ms", "retry_p50_ms", "retry_p99_ms", "ratio"),
        (6, -16, 13, 13, 13, 8),
    )
    if args.json:
        results = {
            "pack": rows,
            "topology": topology_rows,
            "index": index_rows,
            "small": small_rows,
            "refusal": refusal_rows,
        }
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
