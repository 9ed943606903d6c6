"""Phalanx's own CPU for one big gang, in-process: what its event loop spends per member.

Drives the real `Extender` over an in-memory cluster (`ClusterFileSource`, no API server)
the way the bench's big-gang workload drives it through kube-scheduler: 1,000 8-GPU nodes,
one PodGroup of `--members` members (8 GPUs each, `minMember` = all); each member is
created, filtered with every node offered, and sent to `/bind`, one after another; the
last `/bind` opens the gate and the gang is bound. Reports the process CPU time of the
arrivals (watch events and slot claims), the filters, the `/bind`s and the gate, per
member, best of `--repeat` runs. On a host whose cores kube-scheduler and the API server
share, every millisecond here is one they do not get, and the `/filter` share of it sits
inside kube-scheduler's serial cycle.

With `--composite`, the gang is a 1.37 CompositePodGroup (gang, `minGroupCount` 2) over a
head PodGroup of one member and a worker PodGroup of the rest, beside `--others` PodGroups
of other workloads in the namespace, as a RayCluster's gang is among a team's jobs: the
cost of resolving the composite's tree is then part of every member's filter and bind.

    python bench/bench_gang_cpu.py [--members 256] [--repeat 5] [--composite [--others 2000]]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from builders import composite_obj, node_obj, pod_obj, podgroup_obj, upstream_podgroup_obj
from phalanx.core.model import Binding
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.sources.clusterfile import ClusterFileSource

NODES = 1000


def gang_objects(members: int, composite: bool, others: int) -> list[dict[str, object]]:
    """The gang's objects: one PodGroup, or a composite over a head and a worker group
    beside `others` unrelated PodGroups."""
    if not composite:
        return [podgroup_obj("big", members)]
    return [
        *(upstream_podgroup_obj(f"other-{i}", 2) for i in range(others)),
        composite_obj("big", 2),
        upstream_podgroup_obj("big-head", 1, parent="big"),
        upstream_podgroup_obj("big-workers", members - 1, parent="big"),
    ]


def member_obj(i: int, composite: bool) -> dict[str, object]:
    if not composite:
        return pod_obj(f"big-{i}", 8, group="big")
    return pod_obj(f"big-{i}", 8, scheduling_group="big-head" if i == 0 else "big-workers")


async def one_gang(members: int, composite: bool = False, others: int = 0) -> dict[str, float]:
    names = [f"node-{i:04d}" for i in range(NODES)]
    source = ClusterFileSource([node_obj(n, 8) for n in names])
    ext = Extender(source, ServiceSettings(barrier_timeout_seconds=60.0))
    await ext.start()
    for obj in gang_objects(members, composite, others):
        source.apply(obj)
    spent = {"arrive": 0.0, "filter": 0.0, "bind": 0.0}
    binds = []
    # A composite gang is planned once its quorum exists (no template: its groups differ),
    # so its members all arrive first; a PodGroup's first member reserves the gang for all.
    arrivals = range(members) if composite else ()
    t = time.process_time()
    for i in arrivals:
        source.apply(member_obj(i, composite))
    spent["arrive"] += time.process_time() - t
    for i in range(members):
        if not composite:
            t = time.process_time()
            source.apply(member_obj(i, composite))
            spent["arrive"] += time.process_time() - t
        pod = ext.state.pod_by_key("default", f"big-{i}")
        assert pod is not None
        t = time.process_time()
        result = ext.filter(pod, names)
        spent["filter"] += time.process_time() - t
        assert len(result.feasible) == 1, next(iter(result.unresolvable.values()), result.error)
        t = time.process_time()
        binds.append(asyncio.ensure_future(ext.bind(Binding(pod.ref, result.feasible[0]))))
        await asyncio.sleep(0)  # the /bind joins the gate
        spent["bind"] += time.process_time() - t
    t = time.process_time()
    answers = await asyncio.gather(*binds)
    spent["gate"] = time.process_time() - t
    assert answers == [""] * members, [a for a in answers if a][:3]
    await ext.stop()
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--composite", action="store_true", help="a CompositePodGroup's gang")
    parser.add_argument("--others", type=int, default=2000, help="with --composite")
    args = parser.parse_args()
    others = args.others if args.composite else 0
    runs = [asyncio.run(one_gang(args.members, args.composite, others)) for _ in range(args.repeat)]
    best = min(runs, key=lambda r: sum(r.values()))
    total = sum(best.values())
    shape = f"a composite gang beside {others} PodGroups" if args.composite else "one gang"
    print(f"{shape} of {args.members} x 8 GPUs on {NODES} nodes, best of {args.repeat}:")
    for step, seconds in (*best.items(), ("total", total)):
        per_member = seconds * 1e6 / args.members
        print(f"  {step:7s} {seconds * 1000:8.1f} ms  {per_member:7.1f} µs/member")
    return 0


if __name__ == "__main__":
    sys.exit(main())
