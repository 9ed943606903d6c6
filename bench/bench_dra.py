"""DRA costs on 5,000 nodes: inventory, demand, planning, and the memory slices add per node.

Every node publishes what NVIDIA's DRA driver publishes (tests/builders.py): a slice of 8
H100s (one node in ten: A100s in MIG mode instead), and the compute-domain plugin's IMEX
channels (2,048 channels and a daemon, in slices of at most 128 devices, as the API allows).
Every third node has half its GPUs allocated to a claim.

Reported, from one run (this machine is shared: compare ratios, not absolute figures):

* build: parse every slice, merge pools, match classes, free entries per node, bridge nodes;
* demand: 64 members' claims from one template, the gang's shared-claim accounting, and the
  per-node eligibility of a selector that several device shapes satisfy (cold and warm);
* planning: `place_gang` of a 64-member gang (8 GPUs each, `pack`) on the bridged nodes,
  against the same gang on device-plugin nodes (`nvidia.com/gpu`), as bench_core plans it;
* the wired path (the goal of issue #14: under 50 ms p50): the gang's first `/filter`
  through `GangPlanner` on a cluster model fed as the live source feeds it (`DraModel`:
  nodes bridged, members' demand derived, eligibility checking installed devices), the
  reservation made and released each time; against the same on device-plugin nodes;
* memory (tracemalloc, what stays allocated): 5,000 parsed nodes, then the same nodes with
  their slices, inventory and DRA entries. The goal: no more than 2x per node.

    python bench/bench_dra.py [--nodes 5000] [--members 64] [--repeat 30] [--channels 2048]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_informer import node as node_json  # the informer benchmark's realistic nodes

from builders import (
    CD_DRIVER,
    GPU_DRIVER,
    claim_obj,
    claim_template_obj,
    device_request,
    dra_pod_obj,
    gang,
    gpu_device,
    mig_slice_obj,
    nvidia_class_objs,
    pod,
    podgroup,
    slice_obj,
)
from phalanx.core.cache import ClusterState
from phalanx.core.dra import (
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.dra_demand import (
    DeviceNeeds,
    gang_demand,
    ineligibility,
    node_with_devices,
    pod_with_demand,
)
from phalanx.core.dra_model import DraModel
from phalanx.core.dra_state import DraState
from phalanx.core.gang import GangSpec, place_gang
from phalanx.core.inventory import parse_node, parse_placement, parse_pod
from phalanx.core.model import Node, Pod
from phalanx.core.planner import GangPlanner, PlannerSettings

T = TypeVar("T")
SLICE_LIMIT = 128  # devices per ResourceSlice the API allows


def node_name(i: int) -> str:
    return f"gpu-node-{i:05d}"


def gpu_slice(i: int) -> dict[str, Any]:
    name = node_name(i)
    if i % 10 == 9:  # two whole A100s, six in MIG mode
        layout = {m: ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"] for m in range(2, 8)}
        return mig_slice_obj(name, layout, whole=2)
    return slice_obj(name, [gpu_device(name, m) for m in range(8)])


def channel_slices(i: int, channels: int) -> list[dict[str, Any]]:
    """The compute-domain plugin's devices, split as the API's device limit forces."""
    name = node_name(i)
    devices = [
        {"name": f"channel-{c}", "attributes": {"type": {"string": "channel"}, "id": {"int": c}}}
        for c in range(channels)
    ]
    devices.append(
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}
    )
    chunks = [devices[k : k + SLICE_LIMIT] for k in range(0, len(devices), SLICE_LIMIT)]
    return [
        slice_obj(name, chunk, driver=CD_DRIVER, count=len(chunks), name=f"{name}-cd-{k}")
        for k, chunk in enumerate(chunks)
    ]


def parse_slices(nodes: int, channels: int) -> list[ResourceSlice]:
    slices = []
    for i in range(nodes):
        slices.append(parse_resource_slice(gpu_slice(i)))
        slices.extend(parse_resource_slice(o) for o in channel_slices(i, channels))
    return slices


def busy_claims(nodes: int) -> list[ResourceClaim]:
    """Half the GPUs of every third (whole-GPU) node allocated to one claim each."""
    return [
        parse_resource_claim(
            claim_obj(
                f"busy-{i}",
                allocated=[(GPU_DRIVER, node_name(i), f"gpu-{m}") for m in range(4)],
                node=node_name(i),
            )
        )
        for i in range(0, nodes, 3)
        if i % 10 != 9
    ]


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# ---- build and demand ---------------------------------------------------------------------


def load_state(
    nodes: int,
    channels: int,
    slices: list[ResourceSlice] | None = None,
    *,
    with_claims: bool = True,
) -> DraState:
    """Classes, every node's slices and the busy claims, as the informers would feed them."""
    state = DraState()
    for o in nvidia_class_objs():
        state.upsert_class(parse_device_class(o))
    for s in slices if slices is not None else parse_slices(nodes, channels):
        state.upsert_slice(s)
    for claim in busy_claims(nodes) if with_claims else ():
        state.upsert_claim(claim)
    return state


def bridge(state: DraState, base: list[Node]) -> list[Node]:
    return [node_with_devices(n, state.node(n.name), state.catalog, state.allocated) for n in base]


def build(nodes: int, channels: int) -> dict[str, Any]:
    slices, parse_s = timed(lambda: parse_slices(nodes, channels))
    state, load_s = timed(lambda: load_state(nodes, channels, slices))
    base = [parse_node(node_json(i)) for i in range(nodes)]
    bridged, bridge_s = timed(lambda: bridge(state, base))
    # One allocation event: the node it touches is re-bridged, nothing else.
    claim = parse_resource_claim(
        claim_obj("one-more", allocated=[(GPU_DRIVER, node_name(1), "gpu-7")], node=node_name(1))
    )

    def allocation_event() -> None:
        changes = state.upsert_claim(claim)
        for name in changes.nodes:
            node_with_devices(bridged[1], state.node(name), state.catalog, state.allocated)
        state.remove_claim(claim.key)

    _, event_s = timed(allocation_event)
    return {
        "slices": slices,
        "state": state,
        "bridged": bridged,
        "times": {
            "parse slices": parse_s,
            "load DraState (merge pools, classes, claims)": load_s,
            "bridge every node": bridge_s,
            "one allocation event (claim in, node re-bridged, claim out)": event_s,
        },
    }


def demand(built: dict[str, Any], members: int) -> dict[str, Any]:
    state: DraState = built["state"]
    for obj in (
        claim_template_obj(
            "eight",
            device_request("gpu", "gpu.nvidia.com", 8),
            device_request("channel", "compute-domain-default-channel.nvidia.com", 1),
            namespace="bench",
        ),
        claim_template_obj(
            "wide",
            device_request(
                "gpu",
                "gpu.nvidia.com",
                2,
                "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
            ),
            namespace="bench",
        ),
    ):
        state.upsert_template(parse_resource_claim_template(obj))
    pods = [
        parse_pod(dra_pod_obj(f"m{i}", templates={"gpus": "eight"}, namespace="bench", group="g"))
        for i in range(members)
    ]
    demands, demand_s = timed(lambda: [state.demand(p) for p in pods])
    shares, share_s = timed(
        lambda: gang_demand((p.key, d) for p, d in zip(pods, demands, strict=True))
    )
    members_bridged = [
        pod_with_demand(p, shares.requests[p.key], DeviceNeeds(d, state.catalog))
        for p, d in zip(pods, demands, strict=True)
    ]
    # Whole H100s and the MIG nodes' two whole A100s both have at least 40Gi: two shapes.
    wide_demand = state.demand(
        parse_pod(dra_pod_obj("w", templates={"g": "wide"}, namespace="bench"))
    )
    nodes: list[Node] = built["bridged"]

    def eligible() -> int:
        return sum(
            1
            for n in nodes
            if ineligibility(wide_demand, n, state.node(n.name), state.catalog) is None
        )

    count_cold, eligible_cold_s = timed(eligible)
    _, eligible_warm_s = timed(eligible)
    return {
        "members": members_bridged,
        "times": {
            f"demand of {members} members": demand_s,
            "gang shared-claim accounting": share_s,
            f"eligibility on {len(nodes)} nodes (cold)": eligible_cold_s,
            f"eligibility on {len(nodes)} nodes (warm)": eligible_warm_s,
        },
        "eligible nodes": count_cold,
        "exactness": wide_demand.claims[0].requests[0].exactness.value,
    }


# ---- planning -----------------------------------------------------------------------------


def plan_times(state: ClusterState, members: list[Any], repeat: int) -> dict[str, float]:
    spec = GangSpec(key="bench/g", placement=parse_placement("pack"), members=tuple(members))
    times = []
    for _ in range(repeat):
        snap = state.snapshot()
        start = time.perf_counter()
        result = place_gang(snap, spec)
        times.append(time.perf_counter() - start)
    assert hasattr(result, "assignment"), result
    times.sort()
    return {
        "min_ms": ms(times[0]),
        "p50_ms": ms(statistics.median(times)),
        "p99_ms": ms(times[min(len(times) - 1, int(len(times) * 0.99))]),
    }


def planning(built: dict[str, Any], members: list[Any], repeat: int) -> dict[str, Any]:
    dra_state = ClusterState()
    for n in built["bridged"]:
        dra_state.upsert_node(n)
    plugin_state = ClusterState()
    for i in range(len(built["bridged"])):
        plugin_state.upsert_node(parse_node(node_json(i)))
    for i in range(0, len(built["bridged"]), 3):
        if i % 10 != 9:
            plugin_state.upsert_pod(pod(f"busy-{i}", 4, node=node_name(i)))
    plugin_members = gang("g", len(members), 8, namespace="bench")
    return {
        "dra": plan_times(dra_state, members, repeat),
        "device plugin": plan_times(plugin_state, plugin_members, repeat),
    }


# ---- the wired path -----------------------------------------------------------------------

EIGHT_GPUS_AND_A_CHANNEL = claim_template_obj(
    "eight",
    device_request("gpu", "gpu.nvidia.com", 8),
    device_request("channel", "compute-domain-default-channel.nvidia.com", 1),
    namespace="bench",
)


def dra_node_json(i: int) -> dict[str, Any]:
    """The informer benchmark's node, its GPUs published by DRA instead of the device plugin."""
    obj = node_json(i)
    for key in ("capacity", "allocatable"):
        obj["status"][key].pop("nvidia.com/gpu")
    labels = obj["metadata"]["labels"]
    for key in [
        k for k in labels if k.startswith("nvidia.com/gpu.") and k != "nvidia.com/gpu.clique"
    ]:
        del labels[key]
    return obj


def filter_times(state: ClusterState, first: Pod, repeat: int) -> dict[str, float]:
    """The gang's first /filter, every node offered: plan, reserve; then release it."""
    planner = GangPlanner(state, PlannerSettings(template_reservation=False))
    offered = state.snapshot().names
    times = []
    for k in range(repeat):
        start = time.perf_counter()
        decision = planner.filter(first, offered, now=float(k))
        times.append(time.perf_counter() - start)
        assert decision.reserved is not None, decision.result
        state.release("bench/g")
    times.sort()
    return {
        "min_ms": ms(times[0]),
        "p50_ms": ms(statistics.median(times)),
        "p99_ms": ms(times[min(len(times) - 1, int(len(times) * 0.99))]),
    }


def wired(built: dict[str, Any], nodes: int, members: int, repeat: int) -> dict[str, Any]:
    model, state = DraModel(), ClusterState()
    for o in nvidia_class_objs():
        model.upsert_class(parse_device_class(o))
    for s in built["slices"]:
        model.upsert_slice(s)
    for claim in busy_claims(nodes):
        model.upsert_claim(claim)
    model.upsert_template(parse_resource_claim_template(EIGHT_GPUS_AND_A_CHANNEL))
    model.settle(state)
    for i in range(nodes):
        model.upsert_node(state, parse_node(dra_node_json(i)))
    state.upsert_group(podgroup("g", members, namespace="bench"))
    dra_members = [
        model.upsert_pod(
            state,
            parse_pod(
                dra_pod_obj(f"m{i}", templates={"gpus": "eight"}, namespace="bench", group="g")
            ),
        )[0]
        for i in range(members)
    ]
    plugin = ClusterState()
    for i in range(nodes):
        plugin.upsert_node(parse_node(node_json(i)))
    for i in range(0, nodes, 3):
        if i % 10 != 9:
            plugin.upsert_pod(pod(f"busy-{i}", 4, node=node_name(i)))
    plugin.upsert_group(podgroup("g", members, namespace="bench"))
    plugin_members = gang("g", members, 8, namespace="bench")
    for p in plugin_members:
        plugin.upsert_pod(p)
    return {
        "dra": filter_times(state, dra_members[0], repeat),
        "device plugin": filter_times(plugin, plugin_members[0], repeat),
    }


# ---- memory -------------------------------------------------------------------------------


def retained(make: Callable[[], T]) -> tuple[T, int]:
    """What `make` leaves allocated (traced), after garbage is collected."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    value = make()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return value, after - before


def memory(nodes: int, channels: int) -> dict[str, Any]:
    """Retained bytes: the cluster model of the nodes, then with their devices too."""

    def plain() -> ClusterState:
        model = ClusterState()
        for i in range(nodes):
            model.upsert_node(parse_node(node_json(i)))
        return model

    def with_devices() -> tuple[DraState, ClusterState]:
        state = load_state(nodes, channels, with_claims=False)
        model = ClusterState()
        for n in bridge(state, [parse_node(node_json(i)) for i in range(nodes)]):
            model.upsert_node(n)
        return state, model

    claims = busy_claims(nodes)

    def held() -> None:
        for claim in claims:
            kept[0].upsert_claim(claim)

    _, plain_bytes = retained(plain)
    kept, dra_bytes = retained(with_devices)
    _, held_bytes = retained(held)
    return {
        "nodes only, bytes per node": round(plain_bytes / nodes),
        "nodes with DRA, bytes per node": round(dra_bytes / nodes),
        "added per node": round((dra_bytes - plain_bytes) / nodes),
        "ratio": round(dra_bytes / plain_bytes, 2),
        "allocations held, bytes per allocated claim": round(held_bytes / len(claims)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--members", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    built = build(args.nodes, args.channels)
    asked = demand(built, args.members)
    planned = planning(built, asked["members"], args.repeat)
    through_filter = wired(built, args.nodes, args.members, args.repeat)
    mem = memory(args.nodes, args.channels)
    report = {
        "nodes": args.nodes,
        "members": args.members,
        "channels per node": args.channels,
        "slices": len(built["slices"]),
        "times_ms": {k: ms(v) for k, v in {**built["times"], **asked["times"]}.items()},
        "eligible nodes for the wide selector": asked["eligible nodes"],
        "wide selector exactness": asked["exactness"],
        "planning": planned,
        "first /filter of the gang (wired path)": through_filter,
        "memory": mem,
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
