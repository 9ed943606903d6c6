"""Extended resources served by DRA devices (KEP-5004): a pod asking `nvidia.com/gpu` on
nodes whose GPUs only a DeviceClass with `extendedResourceName` publishes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (
    GPU_DRIVER,
    NVIDIA_CLASSES,
    claim_obj,
    device_class_obj,
    device_request,
    gpu_node,
    gpu_slice_obj,
    pod_obj,
    podgroup,
    present,
)
from dra_builders import GPU_CLASS, MIG_CLASS, DraWorld, partitioned_slices, tainted
from phalanx.core.barrier import Completion, completions
from phalanx.core.dra import parse_device_class, parse_resource_claim
from phalanx.core.dra_inventory import DeviceCatalog, class_entry
from phalanx.core.inventory import parse_pod
from phalanx.core.journal import Outcome, ReplanCause
from phalanx.core.model import NVIDIA_GPU, Pod
from phalanx.core.planner import GangPlanner, PlannerSettings

IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"


def gpu_class_obj(
    name: str = GPU_CLASS, resource: str | None = NVIDIA_GPU, created: str = ""
) -> dict[str, Any]:
    obj = device_class_obj(name, NVIDIA_CLASSES[GPU_CLASS])
    if resource is not None:
        obj["spec"]["extendedResourceName"] = resource
    if created:
        obj["metadata"]["creationTimestamp"] = created
    return obj


def world_of(
    *dra_nodes: str, plugin: tuple[str, ...] = (), mapped: bool = True, bridge: bool = True
) -> DraWorld:
    """DRA-only GPU nodes (8 H100 each, no nvidia.com/gpu allocatable) and device-plugin
    nodes (8 nvidia.com/gpu), with gpu.nvidia.com serving nvidia.com/gpu when `mapped`;
    `bridge`: whether kube-scheduler serves extended resources from DRA devices."""
    world = DraWorld(*dra_nodes, extended_resources=bridge)
    if mapped:
        world.model.upsert_class(parse_device_class(gpu_class_obj()))
        world.model.settle(world.state)
    for name in plugin:
        world.model.upsert_node(world.state, gpu_node(name, 8))
    return world


def planner_of(world: DraWorld) -> GangPlanner:
    return GangPlanner(world.state, PlannerSettings(template_reservation=False))


def asking(
    world: DraWorld,
    name: str,
    gpus: int,
    *,
    group: str = "g",
    resource: str = NVIDIA_GPU,
    node: str = "",
    claim: str = "",
) -> Pod:
    """A pod asking `gpus` of `resource` in its container, as the pod watch reports it;
    `claim`: the claim kube-scheduler made for it (`status.extendedResourceClaimStatus`)."""
    obj = pod_obj(name, 0, group=group, node=node, phase="Running" if node else "Pending")
    obj["spec"]["containers"][0]["resources"]["requests"][resource] = str(gpus)
    if claim:
        obj["status"]["extendedResourceClaimStatus"] = {
            "resourceClaimName": claim,
            "requestMappings": [
                {"containerName": "main", "resourceName": resource, "requestName": "r0"}
            ],
        }
    return world.model.upsert_pod(world.state, parse_pod(obj))[0]


def gang_of(world: DraWorld, size: int, gpus: int, group: str = "g") -> list[Pod]:
    world.state.upsert_group(podgroup(group, size))
    return [asking(world, f"{group}-{i}", gpus, group=group) for i in range(size)]


def claim_gang(world: DraWorld, group: str, gpus: int) -> Pod:
    """A one-member gang asking `gpus` GPUs of gpu.nvidia.com through a claim template."""
    world.template(f"t-{group}", gpus)
    world.state.upsert_group(podgroup(group, 1))
    return world.pod(group, group=group, templates={"gpus": f"t-{group}"})


def allocate_extended(world: DraWorld, name: str, node: str, gpus: range, owner: Pod) -> None:
    """kube-scheduler's PreBind: the claim it makes for the pod, allocated on `node`."""
    held = [(GPU_DRIVER, node, f"gpu-{i}") for i in gpus]
    obj = claim_obj(
        name,
        device_request("container-0-request-0", GPU_CLASS, len(gpus)),
        allocated=held,
        node=node,
        owner_pod=owner.uid,
        reserved_for=[owner.uid],
    )
    world.model.upsert_claim(parse_resource_claim(obj))
    world.model.settle(world.state)


# ---- planned where it is served --------------------------------------------------------


def test_a_gang_asking_nvidia_gpu_is_reserved_whole_on_nodes_a_device_class_serves_it_on() -> None:
    world = world_of("d1", "d2")
    members = gang_of(world, 2, 8)
    reservation = planner_of(world).filter(members[0], ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert sorted(m.node for m in reservation.members) == ["d1", "d2"]
    assert reservation.reserved_gpus == 16


def test_without_a_class_serving_it_a_dra_only_node_never_serves_nvidia_gpu() -> None:
    world = world_of("d1", mapped=False)
    [member] = gang_of(world, 1, 1)
    result = planner_of(world).filter(member, ["d1"], now=0).result
    assert result.feasible == ()
    assert NVIDIA_GPU in " ".join({**result.failed, **result.unresolvable}.values())


def test_every_class_serves_its_implicit_extended_resource_name() -> None:
    world = world_of("d1", mapped=False)
    world.state.upsert_group(podgroup("g", 1))
    member = asking(world, "m", 4, resource=IMPLICIT)
    reservation = planner_of(world).filter(member, ["d1"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d1"


def test_in_a_mixed_cluster_each_kind_of_node_serves_the_resource_its_own_way() -> None:
    world = world_of("d1", plugin=("p1",))
    members = gang_of(world, 2, 8)
    reservation = planner_of(world).filter(members[0], ["d1", "p1"], now=0).reserved
    assert reservation is not None
    assert sorted(m.node for m in reservation.members) == ["d1", "p1"]
    assert reservation.reserved_gpus == 16


@pytest.mark.parametrize(
    ("refused", "cause"),
    [
        # DynamicResources allocates the member's devices there: it is the filter that can
        # disagree with Phalanx.
        pytest.param("d1", ReplanCause.DRA, id="dra-node"),
        # The device plugin serves it there: nothing of DRA's is asked of that node.
        pytest.param("p1", ReplanCause.NOT_OFFERED, id="device-plugin-node"),
    ],
)
def test_a_reserved_node_kube_scheduler_did_not_offer_is_blamed_on_dra_only_where_dra_serves(
    refused: str, cause: ReplanCause
) -> None:
    world = world_of("d1", plugin=("p1",))
    members = gang_of(world, 2, 8)
    planner = planner_of(world)
    reservation = planner.filter(members[0], ["d1", "p1"], now=0).reserved
    assert reservation is not None
    [member] = [m for m in members if reservation.node_of(m.uid) == refused]
    planner.filter(member, [n for n in ("d1", "p1") if n != refused], now=1)
    [replanned] = [e for e in planner.events if e.outcome is Outcome.REPLANNED]
    assert replanned.cause == cause


def test_a_device_plugin_node_serves_no_more_than_its_allocatable() -> None:
    world = world_of(plugin=("p1",))
    members = gang_of(world, 2, 6)
    result = planner_of(world).filter(members[0], ["p1"], now=0).result
    assert result.feasible == ()


def test_a_gang_that_would_over_commit_the_devices_waits_whole() -> None:
    world = world_of("d1", "d2")
    first = gang_of(world, 2, 8, group="a")
    planner = planner_of(world)
    assert planner.filter(first[0], ["d1", "d2"], now=0).reserved is not None
    second = gang_of(world, 2, 4, group="b")
    result = planner.filter(second[0], ["d1", "d2"], now=0).result
    assert result.feasible == ()
    assert world.state.reservation("default/b") is None


# ---- sharing devices with claims -------------------------------------------------------


def test_a_claims_reservation_leaves_extended_resource_pods_only_the_devices_it_did_not_take() -> (
    None
):
    world = world_of("d1")
    planner = planner_of(world)
    claimer = claim_gang(world, "c", 6)
    assert planner.filter(claimer, ["d1"], now=0).reserved is not None
    too_many = gang_of(world, 1, 3, group="e")
    assert planner.filter(too_many[0], ["d1"], now=0).result.feasible == ()
    enough = gang_of(world, 1, 2, group="f")
    assert planner.filter(enough[0], ["d1"], now=0).reserved is not None


def test_an_extended_resource_reservation_leaves_claims_only_the_devices_it_did_not_take() -> None:
    world = world_of("d1")
    planner = planner_of(world)
    [member] = gang_of(world, 1, 5)
    assert planner.filter(member, ["d1"], now=0).reserved is not None
    assert planner.filter(claim_gang(world, "c", 4), ["d1"], now=0).result.feasible == ()
    assert planner.filter(claim_gang(world, "k", 3), ["d1"], now=0).reserved is not None


def test_an_all_devices_claim_and_an_extended_resource_pod_never_share_a_node() -> None:
    world = world_of("d1", "d2")
    planner = planner_of(world)
    world.template("all", None, mode="All")
    world.state.upsert_group(podgroup("c", 1))
    everything = world.pod("c", group="c", templates={"gpus": "all"})
    whole = planner.filter(everything, ["d1", "d2"], now=0).reserved
    assert whole is not None
    taken = whole.node_of(everything.uid)
    [member] = gang_of(world, 1, 1)
    beside = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert beside is not None
    assert beside.node_of(member.uid) != taken


def test_an_extended_resource_pod_is_not_given_tainted_devices() -> None:
    world = world_of("d1")
    world.slice(tainted(gpu_slice_obj("d1", generation=2), 0, 1, 2, 3))
    planner = planner_of(world)
    too_many = gang_of(world, 1, 5, group="a")
    assert planner.filter(too_many[0], ["d1"], now=0).result.feasible == ()
    enough = gang_of(world, 1, 4, group="b")
    assert planner.filter(enough[0], ["d1"], now=0).reserved is not None


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(min_value=1, max_value=8)), min_size=1, max_size=8
    )
)
def test_no_plan_gives_one_device_twice_to_extended_resource_and_claim_pods(
    asks: list[tuple[bool, int]],
) -> None:
    """One-member gangs, each asking GPUs by a claim (DRA nodes only) or by nvidia.com/gpu
    (any node): each is reserved exactly when a node it may use has that many GPUs left."""
    world = world_of("d1", "d2", plugin=("p1",))
    planner = planner_of(world)
    left = {"d1": 8, "d2": 8, "p1": 8}
    for i, (by_claim, gpus) in enumerate(asks):
        group = f"g{i}"
        usable: tuple[str, ...]
        if by_claim:
            member, usable = claim_gang(world, group, gpus), ("d1", "d2")
        else:
            [member], usable = gang_of(world, 1, gpus, group=group), ("d1", "d2", "p1")
        reservation = planner.filter(member, ["d1", "d2", "p1"], now=0).reserved
        assert (reservation is not None) == any(left[n] >= gpus for n in usable)
        if reservation is not None:
            node = present(reservation.node_of(member.uid))
            assert node in usable
            assert left[node] >= gpus
            left[node] -= gpus
    for node, free in left.items():
        info = world.state.node(node)
        assert info is not None
        assert info.free.gpus() == free
        if node != "p1":
            assert info.free.get(class_entry(GPU_CLASS)) == free


# ---- bound pods ------------------------------------------------------------------------


def test_a_pod_bound_on_a_dra_node_is_charged_once_by_the_claim_kube_scheduler_made() -> None:
    world = world_of("d1")
    [member] = gang_of(world, 1, 4)
    allocate_extended(world, "m-extended-resources-x", "d1", range(4), member)
    bound = asking(world, member.name, 4, node="d1", claim="m-extended-resources-x")
    assert bound.requests.get(NVIDIA_GPU) == 0  # its claim holds the devices
    info = world.state.node("d1")
    assert info is not None
    assert info.requested.gpus() == 0
    assert info.node.allocatable.get(class_entry(GPU_CLASS)) == 4
    assert info.free.gpus() == 4
    assert world.taken("d1") == 4
    [other] = gang_of(world, 1, 4, group="h")
    assert planner_of(world).filter(other, ["d1"], now=0).reserved is not None


def test_a_reserved_member_whose_claim_is_allocated_carries_it_until_bound() -> None:
    world = world_of("d1")
    [member] = gang_of(world, 1, 4)
    planner = planner_of(world)
    assert planner.filter(member, ["d1"], now=0).reserved is not None
    allocate_extended(world, "m-extended-resources-x", "d1", range(4), member)
    binding = asking(world, member.name, 4, claim="m-extended-resources-x")
    assert binding.requests.get(NVIDIA_GPU) == 4  # the reservation still holds them
    info = world.state.node("d1")
    assert info is not None
    assert info.node.allocatable.get(class_entry(GPU_CLASS)) == 8
    assert info.free.gpus() == 4


def test_a_pod_bound_on_a_device_plugin_node_is_charged_its_request() -> None:
    world = world_of(plugin=("p1",))
    world.state.upsert_group(podgroup("g", 1))
    asking(world, "m", 3, node="p1")
    info = world.state.node("p1")
    assert info is not None
    assert info.requested.get(NVIDIA_GPU) == 3
    assert info.free.gpus() == 5


def test_gpu_figures_count_a_dra_nodes_served_gpus_once() -> None:
    world = world_of("d1")
    info = world.state.node("d1")
    assert info is not None
    assert info.node.allocatable.get(NVIDIA_GPU) == 8  # served from its devices
    assert info.node.allocatable.gpus() == 8


def test_a_pod_asking_a_gpu_class_s_implicit_name_counts_its_gpus_once() -> None:
    world = world_of("d1", mapped=False)
    world.state.upsert_group(podgroup("g", 1))
    member = asking(world, "m", 4, resource=IMPLICIT)
    assert member.requests.gpus() == 4
    reservation = planner_of(world).filter(member, ["d1"], now=0).reserved
    assert reservation is not None
    assert reservation.reserved_gpus == 4
    info = world.state.node("d1")
    assert info is not None
    assert (info.node.allocatable.gpus(), info.reserved.gpus(), info.free.gpus()) == (8, 4, 4)


def test_a_pod_bound_by_a_gpu_class_s_implicit_name_is_charged_its_gpus_once() -> None:
    world = world_of("d1", mapped=False)
    world.state.upsert_group(podgroup("g", 1))
    member = asking(world, "m", 4, resource=IMPLICIT)
    allocate_extended(world, "m-extended-resources-x", "d1", range(4), member)
    bound = asking(world, "m", 4, resource=IMPLICIT, node="d1", claim="m-extended-resources-x")
    assert bound.requests.gpus() == 0  # its claim holds the devices: the node counts them
    assert world.taken("d1") == 4
    info = world.state.node("d1")
    assert info is not None
    assert info.free.gpus() == 4


def test_a_mig_named_resource_served_by_partitions_counts_their_gpus_once_on_the_node() -> None:
    world = DraWorld()
    mig_class = device_class_obj(MIG_CLASS, NVIDIA_CLASSES[MIG_CLASS])
    mig_class["spec"]["extendedResourceName"] = "nvidia.com/mig-1g.5gb"
    world.model.upsert_class(parse_device_class(mig_class))
    for obj in partitioned_slices("m1", 2):
        world.slice(obj)
    world.add_node("m1")
    info = world.state.node("m1")
    assert info is not None
    assert info.node.allocatable.get("nvidia.com/mig-1g.5gb") > 0  # served by DRA
    assert info.node.allocatable.gpus() == 2  # the two A100s their partitions are made of


def test_a_pod_asking_a_partition_class_s_implicit_name_counts_no_gpus_as_a_claim_for_it() -> None:
    world = DraWorld()
    for obj in partitioned_slices("m1", 1):
        world.slice(obj)
    world.add_node("m1")
    world.state.upsert_group(podgroup("g", 1))
    member = asking(world, "m", 1, resource=f"deviceclass.resource.kubernetes.io/{MIG_CLASS}")
    assert member.requests.gpus() == 0  # which GPU it partitions is kube-scheduler's choice


# ---- bad or odd input ------------------------------------------------------------------


def test_of_two_classes_naming_one_resource_the_newest_serves_it_and_the_other_is_told() -> None:
    older = parse_device_class(gpu_class_obj("a.example.com", created="2026-01-01T00:00:00Z"))
    newer = parse_device_class(gpu_class_obj("b.example.com", created="2026-02-01T00:00:00Z"))
    catalog = DeviceCatalog([newer, older])
    assert catalog.extended[NVIDIA_GPU] == "b.example.com"
    [note] = catalog.class_notes("a.example.com")
    assert "also set by DeviceClass b.example.com" in note
    assert catalog.class_notes("b.example.com") == ()


def test_of_two_classes_created_at_once_the_first_by_name_serves_it() -> None:
    same = "2026-01-01T00:00:00Z"
    a = parse_device_class(gpu_class_obj("a.example.com", created=same))
    b = parse_device_class(gpu_class_obj("b.example.com", created=same))
    assert DeviceCatalog([b, a]).extended[NVIDIA_GPU] == "a.example.com"


def test_a_class_naming_an_invalid_extended_resource_is_told_and_serves_only_its_own_name() -> None:
    odd = parse_device_class(gpu_class_obj("odd.example.com", resource="gpu"))
    catalog = DeviceCatalog([odd])
    assert "gpu" not in catalog.extended
    assert catalog.extended["deviceclass.resource.kubernetes.io/odd.example.com"] == (
        "odd.example.com"
    )
    [note] = catalog.class_notes("odd.example.com")
    assert note.startswith("DeviceClass odd.example.com: spec.extendedResourceName: 'gpu'")


def test_a_pod_waiting_when_its_class_is_deleted_waits_for_the_resource_by_name() -> None:
    world = world_of("d1")
    [member] = gang_of(world, 1, 4)
    assert member.requests.get(class_entry(GPU_CLASS)) == 4  # served by its devices
    world.model.remove_class(GPU_CLASS)
    world.model.settle(world.state)
    waiting = world.state.pod(member.uid)
    assert waiting is not None
    assert waiting.requests.get(NVIDIA_GPU) == 4
    assert class_entry(GPU_CLASS) not in waiting.requests
    result = planner_of(world).filter(waiting, ["d1"], now=0).result
    assert result.feasible == ()
    assert NVIDIA_GPU in " ".join({**result.failed, **result.unresolvable}.values())


def test_why_a_member_does_not_fit_names_the_resource_and_the_class_serving_it() -> None:
    world = world_of("d1")
    planner = planner_of(world)
    assert planner.filter(claim_gang(world, "c", 6), ["d1"], now=0).reserved is not None
    [member] = gang_of(world, 1, 4)
    result = planner.filter(member, ["d1"], now=0).result
    why = " ".join({**result.failed, **result.unresolvable}.values())
    assert NVIDIA_GPU in why
    assert GPU_CLASS in why


def test_a_member_served_by_dra_reaches_bind_itself() -> None:
    world = world_of("d1")
    [member] = gang_of(world, 1, 4)
    assert member.devices is not None
    node = world.state.node("d1")
    assert node is not None
    assert member.devices.allocates_on(node.node)


def reserved(world: DraWorld, members: list[Pod]) -> tuple[int, dict[str, Pod]]:
    """The gang reserved by its first member's filter: its serial, node -> the member there."""
    nodes = sorted(world.state.node_infos())
    reservation = planner_of(world).filter(members[0], nodes, now=0).reserved
    assert reservation is not None
    return reservation.serial, {reservation.node_of(m.uid) or "": m for m in members}


def test_members_on_device_plugin_nodes_are_completed_dra_ones_wait_for_their_cycle() -> None:
    world = world_of("d1", plugin=("p1", "p2"))
    serial, on = reserved(world, gang_of(world, 3, 8))
    assert sorted(on) == ["d1", "p1", "p2"]
    found = completions(world.state, "default/g", serial, held={on["p1"].uid})
    # kube-scheduler's PreBind makes d1's member its claim: only its own /bind may follow.
    assert found == [Completion(on["p2"], "p2")]


def test_members_asking_a_class_s_implicit_name_are_never_completed() -> None:
    world = world_of("d1", "d2", mapped=False)
    world.state.upsert_group(podgroup("g", 2))
    members = [asking(world, f"g-{i}", 4, resource=IMPLICIT) for i in range(2)]
    serial, on = reserved(world, members)
    assert completions(world.state, "default/g", serial, held={on["d1"].uid}) == []


def test_a_node_serving_the_resource_by_device_plugin_allocates_the_member_nothing() -> None:
    world = world_of("d1", plugin=("p1",))
    [member] = gang_of(world, 1, 4)
    assert member.devices is not None
    by_name = {name: world.state.node(name) for name in ("d1", "p1")}
    served = {n: member.devices.served_by_devices(i.node) for n, i in by_name.items() if i}
    assert served == {"d1": (NVIDIA_GPU,), "p1": ()}


# ---- the bridge off: kube-scheduler without DRAExtendedResource ------------------------

BRIDGE_OFF = "the DRA extended-resource bridge is off"


def test_with_the_bridge_off_a_gang_asking_nvidia_gpu_is_planned_on_device_plugin_nodes_only() -> (
    None
):
    world = world_of("d1", "d2", "d3", plugin=("p1", "p2"), bridge=False)
    members = gang_of(world, 2, 8)
    nodes = ["d1", "d2", "d3", "p1", "p2"]
    reservation = planner_of(world).filter(members[0], nodes, now=0).reserved
    assert reservation is not None
    assert sorted(m.node for m in reservation.members) == ["p1", "p2"]
    assert reservation.reserved_gpus == 16


def test_with_the_bridge_off_dra_only_nodes_leave_the_gang_waiting_whole_and_say_why() -> None:
    world = world_of("d1", "d2", plugin=("p1",), bridge=False)
    members = gang_of(world, 2, 8)
    planner = planner_of(world)
    result = planner.filter(members[0], ["d1", "d2", "p1"], now=0).result
    assert result.feasible == ()
    assert world.state.reservation("default/g") is None
    [unfit] = [e for e in planner.events if e.outcome is Outcome.UNFIT]
    assert (
        f"2 node(s) had no {NVIDIA_GPU} allocatable (DeviceClass {GPU_CLASS} maps it, but "
        f"{BRIDGE_OFF}" in unfit.reason
    )


def test_with_the_bridge_off_no_class_serves_its_implicit_name_either() -> None:
    world = world_of("d1", mapped=False, bridge=False)
    world.state.upsert_group(podgroup("g", 1))
    member = asking(world, "m", 4, resource=IMPLICIT)
    result = planner_of(world).filter(member, ["d1"], now=0).result
    assert result.feasible == ()
    assert f"had no {IMPLICIT} allocatable" in " ".join(result.unresolvable.values())
    assert BRIDGE_OFF in " ".join(result.unresolvable.values())


def test_with_the_bridge_off_a_dra_only_node_counts_no_served_gpus() -> None:
    world = world_of("d1", bridge=False)
    info = world.state.node("d1")
    assert info is not None
    assert info.node.allocatable.get(NVIDIA_GPU) == 0
    assert info.node.allocatable.gpus() == 8  # its devices, as claims ask them


def test_with_the_bridge_off_no_member_has_devices_to_allocate_so_all_are_completed() -> None:
    world = world_of("d1", plugin=("p1", "p2", "p3"), bridge=False)
    serial, on = reserved(world, gang_of(world, 3, 8))
    assert sorted(on) == ["p1", "p2", "p3"]
    found = completions(world.state, "default/g", serial, held={on["p1"].uid})
    assert found == [Completion(on["p2"], "p2"), Completion(on["p3"], "p3")]


def test_with_the_bridge_off_the_catalog_maps_no_extended_resource_and_tells_no_rivalry() -> None:
    classes = [
        parse_device_class(gpu_class_obj("a", created="2026-01-01T00:00:00Z")),
        parse_device_class(gpu_class_obj("b", created="2026-02-01T00:00:00Z")),
    ]
    catalog = DeviceCatalog(classes, extended_resources=False)
    assert catalog.extended == {}
    assert catalog.unbridged[NVIDIA_GPU] == "b"
    assert not [n for n in catalog.notes if "extendedResourceName" in n]


# ---- reading the objects ---------------------------------------------------------------


def test_a_device_class_keeps_its_extended_resource_name_and_creation_time() -> None:
    read = parse_device_class(gpu_class_obj(created="2026-03-01T10:00:00Z"))
    assert read.extended_resource_name == NVIDIA_GPU
    assert read.created == "2026-03-01T10:00:00Z"
    assert read.extended_problem == ""


@pytest.mark.parametrize(
    "name",
    ["gpu", "kubernetes.io/gpu", "requests.example.com/gpu", "Example.com/gpu", "example.com/"],
    ids=["unqualified", "kubernetes-domain", "quota-prefix", "upper-case-domain", "empty-name"],
)
def test_a_device_class_naming_no_extended_resource_says_which_field_is_wrong(name: str) -> None:
    read = parse_device_class(gpu_class_obj(resource=name))
    assert read.extended_resource_name == ""
    assert read.extended_problem.startswith(f"spec.extendedResourceName: {name!r} is not")
    assert read.problem == ""  # its claims are still served


def test_a_pod_names_the_claim_kube_scheduler_made_for_its_extended_resources() -> None:
    obj = pod_obj("m", 0)
    obj["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "m-extended-resources-abcde",
        "requestMappings": [],
    }
    [ref] = parse_pod(obj).resource_claims
    assert ref.extended
    assert ref.claim == "m-extended-resources-abcde"


def test_a_claim_left_from_a_cycle_that_did_not_bind_pins_its_pending_pod_nowhere() -> None:
    world = world_of("d1", "d2")
    [member] = gang_of(world, 1, 4)
    allocate_extended(world, "m-extended-resources-x", "d1", range(4), member)
    pending = asking(world, member.name, 4, claim="m-extended-resources-x")
    assert pending.requests.get(NVIDIA_GPU) == 4
    assert pending.devices is not None
    other = world.state.node("d2")
    assert other is not None
    assert pending.devices.ineligibility(other.node) is None
    info = world.state.node("d1")
    assert info is not None
    assert info.node.allocatable.get(class_entry(GPU_CLASS)) == 4  # held until deleted


def test_a_pod_asking_a_resource_served_by_a_broken_class_is_refused_naming_both() -> None:
    world = world_of("d1")
    broken = gpu_class_obj()
    broken["spec"]["selectors"] = [{"cel": {"expression": "device.driver =="}}]
    world.model.upsert_class(parse_device_class(broken))
    world.model.settle(world.state)
    [member] = gang_of(world, 1, 4)
    result = planner_of(world).filter(member, ["d1"], now=0).result
    [why] = set(result.unresolvable.values())
    assert f"{NVIDIA_GPU}: DeviceClass {GPU_CLASS}, which serves it, is invalid" in why
