"""The extender over a cluster file with DRA objects: gangs, metrics and /debug alike."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support import ScriptedSource, bind, group_view, pod_of

from builders import (
    GPU_DRIVER,
    claim_obj,
    claim_template_obj,
    device_request,
    dra_pod_obj,
    gpu_slice_obj,
    node_obj,
    nvidia_class_objs,
    pod_obj,
    podgroup_obj,
    present,
)
from clocks import FakeClock
from phalanx.service.extender import Extender, ServiceSettings

pytestmark = pytest.mark.anyio

DRA_NODES = ["d1", "d2"]
PLUGIN_NODES = ["p1"]
EVERY_NODE = [*DRA_NODES, *PLUGIN_NODES]


def cluster(*objects: dict[str, Any]) -> list[dict[str, Any]]:
    """Two DRA nodes (8 GPUs in slices, none in allocatable) and one device-plugin node."""
    return [
        *nvidia_class_objs(),
        *(gpu_slice_obj(n) for n in DRA_NODES),
        *(node_obj(n, 0) for n in DRA_NODES),
        *(node_obj(n, 8) for n in PLUGIN_NODES),
        claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4)),
        *objects,
    ]


def dra_gang(size: int, name: str = "g") -> list[dict[str, Any]]:
    return [
        podgroup_obj(name, size),
        *(dra_pod_obj(f"{name}-{i}", templates={"gpus": "four"}, group=name) for i in range(size)),
    ]


async def started(
    objects: list[dict[str, Any]], *, dra_extended_resources: bool = True
) -> tuple[Extender, ScriptedSource]:
    source = ScriptedSource(objects, dra_extended_resources=dra_extended_resources)
    ext = Extender(source, ServiceSettings(bind_retry_backoff_seconds=0.0), clock=FakeClock())
    await ext.start()
    return ext, source


def reserve_all(ext: Extender, names: list[str]) -> dict[str, str]:
    """Each member's /filter, every node offered: the node its reservation holds."""
    nodes = {}
    for name in names:
        result = ext.filter(pod_of(ext, name), EVERY_NODE)
        assert len(result.feasible) == 1, result
        nodes[name] = result.feasible[0]
    return nodes


def gpus(ext: Extender, node: str, state: str) -> float | None:
    return ext.metrics.registry.get_sample_value("phalanx_gpus", {"node": node, "state": state})


async def test_a_dra_gang_from_a_cluster_file_is_reserved_and_bound_whole() -> None:
    ext, source = await started(cluster(*dra_gang(4)))
    names = [f"g-{i}" for i in range(4)]
    nodes = reserve_all(ext, names)
    assert sorted(nodes.values()) == ["d1", "d1", "d2", "d2"]
    assert gpus(ext, "d1", "reserved") == 8
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in names))
    assert results == ["", "", "", ""]
    assert sorted(node for _, node in source.bindings) == ["d1", "d1", "d2", "d2"]
    assert ext.metrics.registry.get_sample_value("phalanx_partial_gangs") == 0
    await ext.stop()


async def test_gpus_are_counted_alike_on_dra_and_device_plugin_nodes() -> None:
    held = [(GPU_DRIVER, "d1", f"gpu-{i}") for i in range(4)]
    ext, _ = await started(
        cluster(
            # 4 GPUs in use on each kind of node: a bound pod, and an allocated claim.
            pod_obj("classic", 4, node="p1"),
            claim_obj(
                "busy", device_request("gpu", "gpu.nvidia.com", 4), allocated=held, node="d1"
            ),
        )
    )
    for node in ("p1", "d1"):
        assert (gpus(ext, node, "used"), gpus(ext, node, "free")) == (4, 4), node
    assert (gpus(ext, "d2", "used"), gpus(ext, "d2", "free")) == (0, 8)
    cluster_gpus = {
        state: ext.metrics.registry.get_sample_value("phalanx_cluster_gpus", {"state": state})
        for state in ("free", "used")
    }
    assert cluster_gpus == {"free": 16, "used": 8}
    await ext.stop()


async def test_a_bound_pod_whose_claim_is_allocated_elsewhere_is_counted_off_node() -> None:
    held = [(GPU_DRIVER, "d2", f"gpu-{i}") for i in range(4)]
    pod = dra_pod_obj("stray", claims={"gpus": "stray-gpus"}, node="d1")
    ext, _ = await started(
        cluster(
            pod,
            claim_obj(
                "stray-gpus", device_request("gpu", "gpu.nvidia.com", 4), allocated=held, node="d2"
            ),
        )
    )
    assert ext.metrics.registry.get_sample_value("phalanx_dra_claims_off_node") == 1
    await ext.stop()


async def test_a_reserved_dra_node_not_offered_counts_a_dra_re_plan() -> None:
    ext, _ = await started(cluster(*dra_gang(2)))
    nodes = reserve_all(ext, ["g-0"])
    result = ext.filter(pod_of(ext, "g-0"), [n for n in EVERY_NODE if n != nodes["g-0"]])
    assert result.feasible
    replans = ext.metrics.registry.get_sample_value("phalanx_replans_total", {"cause": "dra"})
    assert replans == 1
    await ext.stop()


async def test_the_debug_view_shows_each_member_s_device_claims() -> None:
    selector = "device.attributes['gpu.nvidia.com'].productName.matches('H100')"
    approx = claim_template_obj("approx", device_request("gpu", "gpu.nvidia.com", 2, selector))
    member = dra_pod_obj("g-1", templates={"gpus": "approx"}, group="g")
    ext, _ = await started(
        cluster(
            approx,
            podgroup_obj("g", 2),
            dra_pod_obj("g-0", templates={"gpus": "four"}, group="g"),
            member,
        )
    )
    view = group_view(ext, "g")
    assert view is not None
    exact, approximate = view["devices"]
    assert exact["pod"] == "default/g-0"
    assert exact["gpus"] == 4
    assert exact["claims"][0]["requests"][0]["planned"] == "exact"
    assert exact["notes"] == []
    assert approximate["claims"][0]["requests"][0]["planned"] == "count-only"
    [note] = approximate["notes"]
    assert "is not evaluated by Phalanx" in note
    assert group_view(ext, "g") == view  # a view changes nothing
    await ext.stop()


def extended_cluster(*objects: dict[str, Any]) -> list[dict[str, Any]]:
    """`cluster`, with NVIDIA's gpu.nvidia.com serving nvidia.com/gpu (KEP-5004)."""
    found = cluster(*objects)
    for obj in found:
        if obj["kind"] == "DeviceClass" and obj["metadata"]["name"] == "gpu.nvidia.com":
            obj["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    return found


async def test_a_gang_asking_nvidia_gpu_is_reserved_and_bound_whole_on_the_dra_nodes() -> None:
    ext, source = await started(
        extended_cluster(podgroup_obj("g", 3), *(pod_obj(f"g-{i}", 8, group="g") for i in range(3)))
    )
    names = [f"g-{i}" for i in range(3)]
    nodes = reserve_all(ext, names)
    assert sorted(nodes.values()) == ["d1", "d2", "p1"]  # 24 GPUs: every node, each its way
    assert {n: gpus(ext, n, "reserved") for n in EVERY_NODE} == {"d1": 8, "d2": 8, "p1": 8}
    assert ext.metrics.registry.get_sample_value("phalanx_reserved_gpus") == 24
    results = await asyncio.gather(*(bind(ext, n, nodes[n]) for n in names))
    assert results == ["", "", ""]
    assert sorted(node for _, node in source.bindings) == ["d1", "d2", "p1"]
    view = group_view(ext, "g")
    assert view is not None
    assert [m["extended"] for m in view["devices"]] == [
        [{"resource": "nvidia.com/gpu", "count": 8, "class": "gpu.nvidia.com", "held": False}]
    ] * 3
    await ext.stop()


async def test_with_the_bridge_off_a_gang_asking_nvidia_gpu_waits_for_device_plugin_nodes() -> None:
    ext, _ = await started(
        extended_cluster(
            podgroup_obj("g", 2), *(pod_obj(f"g-{i}", 8, group="g") for i in range(2))
        ),
        dra_extended_resources=False,
    )
    result = ext.filter(pod_of(ext, "g-0"), EVERY_NODE)
    assert result.feasible == ()
    assert ext.metrics.registry.get_sample_value("phalanx_reserved_gpus") == 0
    assert {n: gpus(ext, n, "free") for n in EVERY_NODE} == {"d1": 8, "d2": 8, "p1": 8}
    view = group_view(ext, "g")
    assert view is not None
    assert [(m["extended"], m["unbridged"]) for m in view["devices"]] == [
        ([], [{"resource": "nvidia.com/gpu", "class": "gpu.nvidia.com"}])
    ] * 2
    assert "the DRA extended-resource bridge is off" in str(view)
    await ext.stop()


async def test_a_pod_served_by_a_claim_kube_scheduler_made_is_counted_once() -> None:
    held = [(GPU_DRIVER, "d1", f"gpu-{i}") for i in range(4)]
    served = pod_obj("served", 4, node="d1", uid="uid-served", phase="Running")
    served["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "served-er"}
    claim = claim_obj(
        "served-er",
        device_request("container-0-request-0", "gpu.nvidia.com", 4),
        allocated=held,
        node="d1",
        owner_pod="uid-served",
        reserved_for=["uid-served"],
    )
    ext, _ = await started(extended_cluster(served, claim))
    assert (gpus(ext, "d1", "used"), gpus(ext, "d1", "free")) == (4, 4)
    cluster_gpus = {
        state: ext.metrics.registry.get_sample_value("phalanx_cluster_gpus", {"state": state})
        for state in ("free", "used")
    }
    assert cluster_gpus == {"free": 20, "used": 4}
    await ext.stop()


async def test_a_gang_asking_nvidia_gpu_completes_only_its_members_on_device_plugin_nodes() -> None:
    ext, source = await started(
        extended_cluster(
            podgroup_obj("g", 3),
            *(pod_obj(f"g-{i}", 8, group="g") for i in range(3)),
            pod_obj("queued", 1),  # ahead in kube-scheduler's queue: members would wait
        )
    )
    reserve_all(ext, ["g-0"])
    on = {
        m.node: m.pod_key.split("/")[1] for m in present(ext.state.reservation("default/g")).members
    }
    assert sorted(on) == EVERY_NODE
    first = asyncio.ensure_future(bind(ext, on["d1"], "d1"))
    await asyncio.sleep(0.05)
    # d2's member gets its claim in its own PreBind: the gang waits for that member's /bind.
    assert not first.done()
    assert source.bindings == []
    assert await asyncio.wait_for(bind(ext, on["d2"], "d2"), timeout=2) == ""
    assert await first == ""
    assert sorted(node for _, node in source.bindings) == sorted(EVERY_NODE)
    # p1's member, bound with them without its /bind.
    assert ext.metrics.registry.get_sample_value("phalanx_members_completed_total") == 1
    await ext.stop()
