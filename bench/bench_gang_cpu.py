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

    python bench/bench_gang_cpu.py [--members 256] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from builders import node_obj, pod_obj, podgroup_obj
from phalanx.core.model import Binding
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.sources.clusterfile import ClusterFileSource

NODES = 1000


async def one_gang(members: int) -> dict[str, float]:
    names = [f"node-{i:04d}" for i in range(NODES)]
    source = ClusterFileSource([node_obj(n, 8) for n in names])
    ext = Extender(source, ServiceSettings(barrier_timeout_seconds=60.0))
    await ext.start()
    source.apply(podgroup_obj("big", members))
    spent = {"arrive": 0.0, "filter": 0.0, "bind": 0.0}
    binds = []
    for i in range(members):
        t = time.process_time()
        source.apply(pod_obj(f"big-{i}", 8, group="big"))
        spent["arrive"] += time.process_time() - t
        pod = ext.state.pod_by_key("default", f"big-{i}")
        assert pod is not None
        t = time.process_time()
        result = ext.filter(pod, names)
        spent["filter"] += time.process_time() - t
        assert len(result.feasible) == 1, result
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
    args = parser.parse_args()
    runs = [asyncio.run(one_gang(args.members)) for _ in range(args.repeat)]
    best = min(runs, key=lambda r: sum(r.values()))
    total = sum(best.values())
    print(f"one gang of {args.members} x 8 GPUs on {NODES} nodes, best of {args.repeat}:")
    for step, seconds in (*best.items(), ("total", total)):
        per_member = seconds * 1e6 / args.members
        print(f"  {step:7s} {seconds * 1000:8.1f} ms  {per_member:7.1f} µs/member")
    return 0


if __name__ == "__main__":
    sys.exit(main())
