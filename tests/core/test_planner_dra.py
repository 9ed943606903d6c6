"""GangPlanner over DRA devices: whole gangs, shared claims, bad claims, re-plan causes."""

from __future__ import annotations

import pytest

from builders import (
    GPU_DRIVER,
    claim_template_obj,
    device_class_obj,
    device_request,
    dra_pod_obj,
    gang,
    gpu_node,
    gpu_slice_obj,
    podgroup,
    present,
)
from dra_builders import (
    GPU_CLASS,
    MIG_CLASS,
    TOLERATES_XID,
    DraWorld,
    network_slice_obj,
    partitioned_slices,
    taint_rule_obj,
    tainted,
)
from phalanx.core.barrier import still_bindable
from phalanx.core.dra import parse_device_class, parse_resource_claim_template
from phalanx.core.dra_demand import Exactness
from phalanx.core.dra_inventory import WHOLE, class_entry, whole_entry
from phalanx.core.inventory import parse_pod
from phalanx.core.journal import Outcome, ReplanCause
from phalanx.core.model import DRA_GPU, NVIDIA_GPU, Pod
from phalanx.core.planner import GangPlanner, PlannerSettings

DRA_NODES = ["d1", "d2", "d3", "d4"]


def dra_cluster(*plugin_nodes: str, nodes: list[str] = DRA_NODES) -> tuple[DraWorld, GangPlanner]:
    world = DraWorld(*nodes)
    for name in plugin_nodes:
        world.state.upsert_node(gpu_node(name, 8))
    world.state.upsert_group(podgroup("g", 1))
    return world, GangPlanner(world.state, PlannerSettings(template_reservation=False))


def members(world: DraWorld, count: int, **claims: dict[str, str]) -> list[Pod]:
    world.state.upsert_group(podgroup("g", count))
    return [world.pod(f"m{i}", group="g", **claims) for i in range(count)]


def test_a_dra_gang_is_reserved_whole_on_nodes_with_enough_free_devices() -> None:
    world, planner = dra_cluster("plugin")
    world.template("four", 4)
    gang_members = members(world, 8, templates={"gpus": "four"})
    offered = [*DRA_NODES, "plugin"]
    decision = planner.filter(gang_members[0], offered, now=0)
    reservation = decision.reserved
    assert reservation is not None
    nodes = sorted(m.node for m in reservation.members)
    assert nodes == sorted(DRA_NODES * 2)  # two 4-GPU members per 8-GPU node
    assert reservation.reserved_gpus == 32  # DRA GPUs count as nvidia.com/gpu does
    # The device-plugin node never serves a DRA member.
    assert "plugin" not in nodes


def test_a_mixed_gang_puts_each_member_where_its_own_request_is_served() -> None:
    world, planner = dra_cluster("plugin", nodes=["d1"])
    world.template("eight", 8)
    [dra_member] = members(world, 1, templates={"gpus": "eight"})
    classic = gang("g", 2, 8)[1]  # asks for nvidia.com/gpu
    world.state.upsert_group(podgroup("g", 2))
    world.model.upsert_pod(world.state, classic)
    reservation = planner.filter(dra_member, ["d1", "plugin"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(dra_member.uid) == "d1"
    assert reservation.node_of(classic.uid) == "plugin"


def test_members_sharing_a_claim_are_reserved_on_one_node_and_charged_once() -> None:
    world, planner = dra_cluster(nodes=["d1", "d2"])
    world.claim("team", 8)
    a, b = members(world, 2, claims={"shared": "team"})
    assert a.requests[DRA_GPU] == b.requests[DRA_GPU] == 8  # each alone would need 8
    reservation = planner.filter(a, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(a.uid) == reservation.node_of(b.uid)
    assert reservation.reserved_gpus == 8


def test_a_member_sharing_a_claim_charged_to_another_follows_its_reservation() -> None:
    # Its own requests name the claim's devices; its reservation holds none of them, since
    # the claim is charged to one member (which one moves as members come and go). That is
    # not a member whose requests grew.
    world, planner = dra_cluster(nodes=["d1", "d2"])
    world.claim("team", 8)
    a, b = members(world, 2, claims={"shared": "team"})
    reservation = present(planner.filter(a, ["d1", "d2"], now=0).reserved)
    result = planner.filter(b, ["d1", "d2"], now=1).result
    assert result.feasible == (reservation.node_of(b.uid),)
    assert Outcome.REPLANNED not in [e.outcome for e in planner.events]
    assert still_bindable(world.state, "default/g", reservation.serial, b, result.feasible[0]) == ""


def test_a_member_whose_claim_names_an_unknown_class_is_refused_everywhere_with_why() -> None:
    world, planner = dra_cluster()
    world.template("odd", 1, device_class="no-such-class.example.com")
    [member] = members(world, 1, templates={"gpus": "odd"})
    result = planner.filter(member, DRA_NODES, now=0).result
    assert result.feasible == ()
    assert set(result.unresolvable) == set(DRA_NODES)
    [reason] = set(result.unresolvable.values())
    assert reason.startswith("pod default/m0: claim default/m0#gpus request gpu: ")
    assert "DeviceClass no-such-class.example.com does not exist" in reason


def test_a_member_whose_claims_the_model_has_not_read_waits() -> None:
    world, planner = dra_cluster()
    world.template("four", 4)
    members(world, 1, templates={"gpus": "four"})
    # A /filter that outran the pod watch: the pod as kube-scheduler sent it.
    wire = parse_pod(dra_pod_obj("late", templates={"gpus": "four"}, group="g"))
    result = planner.filter(wire, DRA_NODES, now=0).result
    assert set(result.unresolvable.values()) == {
        "pod default/late: its ResourceClaims are not known to Phalanx yet"
    }


def test_a_reserved_dra_node_kube_scheduler_did_not_offer_is_re_planned_with_cause_dra() -> None:
    world, planner = dra_cluster()
    world.template("four", 4)
    a, b = members(world, 2, templates={"gpus": "four"})
    reservation = planner.filter(a, DRA_NODES, now=0).reserved
    assert reservation is not None
    refused = reservation.node_of(b.uid)
    result = planner.filter(b, [n for n in DRA_NODES if n != refused], now=1).result
    assert result.feasible
    [replanned] = [e for e in planner.events if e.outcome is Outcome.REPLANNED]
    assert replanned.cause == ReplanCause.DRA


def test_a_re_plan_of_a_gang_without_claims_keeps_the_plain_cause() -> None:
    world, planner = dra_cluster("p1", "p2", nodes=[])
    a, b = gang("g", 2, 8)
    world.state.upsert_group(podgroup("g", 2))
    for p in (a, b):
        world.model.upsert_pod(world.state, p)
    reservation = planner.filter(a, ["p1", "p2"], now=0).reserved
    assert reservation is not None
    refused = reservation.node_of(b.uid)
    planner.filter(b, [n for n in ("p1", "p2") if n != refused], now=1)
    [replanned] = [e for e in planner.events if e.outcome is Outcome.REPLANNED]
    assert replanned.cause == ReplanCause.NOT_OFFERED


def test_a_single_dra_pod_is_filtered_by_its_free_devices() -> None:
    world, planner = dra_cluster(nodes=["d1", "d2"])
    world.template("six", 6)
    world.claim("busy", 4, allocated=[("gpu.nvidia.com", "d1", f"gpu-{i}") for i in range(4)])
    single = world.pod("s", templates={"gpus": "six"})
    result = planner.filter(single, ["d1", "d2"], now=0).result
    assert result.feasible == ("d2",)
    assert f"Insufficient {class_entry('gpu.nvidia.com')}" in result.failed["d1"]
    assert single.requests.get(NVIDIA_GPU) == 0


def test_gpu_slices_make_a_plain_cpu_node_a_gpu_node() -> None:
    world, _ = dra_cluster(nodes=[])
    world.add_node("late")
    world.slice(gpu_slice_obj("late"))
    info = world.state.node("late")
    assert info is not None
    assert info.free.gpus() == 8


@pytest.mark.parametrize("nodes", [None, ["d1", "d2"]], ids=["all nodes", "node selector"])
def test_a_member_asking_for_devices_of_a_shared_pool_is_left_to_kube_scheduler(
    nodes: list[str] | None,
) -> None:
    # Network-attached devices are one capacity for many nodes, which per-node counts cannot
    # hold: Phalanx plans the member without them (and says so) rather than refusing it on
    # every node forever.
    world, planner = dra_cluster(nodes=["d1", "d2"])
    fpga = device_class_obj("fpga.example.com", "device.driver == 'fpga.example.com'")
    world.model.upsert_class(parse_device_class(fpga))
    world.slice(network_slice_obj("fpga.example.com", "fpga", 4, nodes=nodes))
    world.template("fpga", 1, device_class="fpga.example.com")
    [member] = members(world, 1, templates={"fpga": "fpga"})
    assert member.devices is not None
    [claim] = member.devices.demand.claims
    [request] = claim.requests
    assert request.exactness is Exactness.COUNT_ONLY
    assert "reachable from several nodes" in request.note
    assert planner.filter(member, ["d1", "d2"], now=0).reserved is not None


def test_a_member_asking_for_a_device_others_may_share_is_planned_where_one_is_installed() -> None:
    # allowMultipleAllocations (consumable capacity): kube-scheduler gives such a device to
    # several claims, so Phalanx counts it while planning and never as held once shared out.
    world, planner = dra_cluster(nodes=[])
    for name, gpus in (("d1", 0), ("d2", 2)):
        obj = gpu_slice_obj(name, gpus)
        for device in obj["spec"]["devices"]:
            device["allowMultipleAllocations"] = True
        world.slice(obj)
        world.add_node(name)
    world.template("one", 1)
    [member] = members(world, 1, templates={"gpu": "one"})
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d2"


def partitionable_gangs(first: str, second: str) -> tuple[GangPlanner, DraWorld, list[Pod]]:
    """Two one-member gangs on one node with one partitionable GPU, asking `first` and
    `second` ("gpu": the GPU whole, "mig": one 1g.5gb MIG device)."""
    world = DraWorld(classes=True)
    for obj in partitioned_slices("p1", 1):
        world.slice(obj)
    world.add_node("p1")
    device_classes = {"gpu": "gpu.nvidia.com", "mig": MIG_CLASS}
    for kind in {first, second}:
        world.template(kind, 1, device_class=device_classes[kind])
    pods = []
    for group, kind in (("a", first), ("b", second)):
        world.state.upsert_group(podgroup(group, 1))
        pods.append(world.pod(f"{group}0", group=group, templates={"dev": kind}))
    planner = GangPlanner(world.state, PlannerSettings(template_reservation=False))
    return planner, world, pods


@pytest.mark.parametrize(
    ("first", "second"), [("gpu", "mig"), ("mig", "gpu")], ids=["whole first", "mig first"]
)
def test_a_gpu_reserved_whole_or_in_part_is_not_reserved_again_the_other_way(
    first: str, second: str
) -> None:
    planner, _, (a, b) = partitionable_gangs(first, second)
    assert planner.filter(a, ["p1"], now=0).reserved is not None
    assert planner.filter(b, ["p1"], now=0).reserved is None


def test_mig_devices_of_one_gpu_are_reserved_side_by_side() -> None:
    planner, _, (a, b) = partitionable_gangs("mig", "mig")
    assert planner.filter(a, ["p1"], now=0).reserved is not None
    assert planner.filter(b, ["p1"], now=0).reserved is not None


def test_a_gpu_not_partitionable_is_planned_without_counters() -> None:
    # The same GPUs, one node partitionable and one not: a whole GPU is a whole GPU on both.
    world = DraWorld(classes=True)
    for obj in partitioned_slices("p1", 1):
        world.slice(obj)
    world.slice(gpu_slice_obj("s1", 1, product="NVIDIA A100-SXM4-40GB", memory="40Gi"))
    world.add_node("p1")
    world.add_node("s1")
    world.template("gpu", 1)
    world.state.upsert_group(podgroup("g", 2))
    gang_members = [world.pod(f"m{i}", group="g", templates={"dev": "gpu"}) for i in range(2)]
    planner = GangPlanner(world.state, PlannerSettings(template_reservation=False))
    reservation = planner.filter(gang_members[0], ["p1", "s1"], now=0).reserved
    assert reservation is not None
    assert sorted(m.node for m in reservation.members) == ["p1", "s1"]


# ---- allocationMode All: every matching device of the node ------------------------------------


def all_gpus_members(world: DraWorld, count: int, group: str = "g") -> list[Pod]:
    world.template("all", None, mode="All")
    world.state.upsert_group(podgroup(group, count))
    return [world.pod(f"{group}{i}", group=group, templates={"gpus": "all"}) for i in range(count)]


def test_a_gang_of_two_members_each_asking_all_gpus_is_placed_one_member_per_node() -> None:
    world, planner = dra_cluster(nodes=["d1", "d2"])
    first, _ = all_gpus_members(world, 2)
    reservation = planner.filter(first, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert sorted(m.node for m in reservation.members) == ["d1", "d2"]


def test_a_gang_of_two_members_each_asking_all_gpus_does_not_fit_one_node_and_says_why() -> None:
    world, planner = dra_cluster(nodes=["d1"])
    first, _ = all_gpus_members(world, 2)
    decision = planner.filter(first, ["d1"], now=0)
    assert decision.reserved is None
    [reason] = set(decision.result.unresolvable.values())
    assert "cannot place 2 member(s) of gang default/g" in reason
    assert f"closest: d1 lacks {WHOLE} {whole_entry(GPU_CLASS)}" in reason


def test_an_all_gpus_member_is_not_planned_where_another_pod_holds_one_of_the_gpus() -> None:
    world, planner = dra_cluster(nodes=["d1", "d2"])
    [member] = all_gpus_members(world, 1)
    holder = world.pod("holder", claims={"gpu": "busy"})
    world.allocate("busy", "d1", range(1), for_pod=holder)
    world.bind(holder, "d1")
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d2"
    # d2 is reserved whole and d1 has a GPU taken: no node is left for another.
    [other] = all_gpus_members(world, 1, group="h")
    assert planner.filter(other, ["d1", "d2"], now=0).reserved is None


@pytest.mark.parametrize("all_first", [True, False], ids=["all gpus first", "one gpu first"])
def test_an_all_gpus_gang_and_a_gang_asking_one_gpu_are_never_reserved_on_one_node(
    all_first: bool,
) -> None:
    world, planner = dra_cluster(nodes=["d1"])
    [whole] = all_gpus_members(world, 1, group="a")
    world.template("one", 1)
    world.state.upsert_group(podgroup("b", 1))
    one = world.pod("b0", group="b", templates={"gpus": "one"})
    first, second = (whole, one) if all_first else (one, whole)
    assert planner.filter(first, ["d1"], now=0).reserved is not None
    assert planner.filter(second, ["d1"], now=0).reserved is None


def test_a_single_pod_asking_one_gpu_is_not_filtered_onto_a_node_reserved_whole() -> None:
    world, planner = dra_cluster(nodes=["d1", "d2"])
    [whole] = all_gpus_members(world, 1)
    reservation = planner.filter(whole, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    world.template("one", 1)
    single = world.pod("single", templates={"gpus": "one"})
    feasible = planner.filter(single, ["d1", "d2"], now=0).result.feasible
    assert feasible == tuple(n for n in ("d1", "d2") if n != reservation.node_of(whole.uid))


def test_an_all_gpus_member_needs_a_gpu_its_selectors_match() -> None:
    world, planner = dra_cluster(nodes=["d1"])
    obj = claim_template_obj(
        "a100s",
        device_request(
            "gpu",
            GPU_CLASS,
            None,
            f"device.attributes['{GPU_DRIVER}'].productName == 'A100'",
            mode="All",
        ),
    )
    world.model.upsert_template(parse_resource_claim_template(obj))
    world.model.settle(world.state)
    [member] = members(world, 1, templates={"gpus": "a100s"})
    result = planner.filter(member, ["d1"], now=0).result
    assert result.feasible == ()
    [reason] = set(result.unresolvable.values())
    assert "had 0 gpu.nvidia.com device(s) for claim default/m0#gpus request gpu, it needs 1" in (
        reason
    )


def test_an_admin_access_request_for_all_gpus_takes_none_of_them() -> None:
    world, planner = dra_cluster(nodes=["d1"])
    watch = device_request("gpu", GPU_CLASS, None, mode="All")
    watch["exactly"]["adminAccess"] = True
    world.model.upsert_template(parse_resource_claim_template(claim_template_obj("watch", watch)))
    world.model.settle(world.state)
    world.state.upsert_group(podgroup("w", 1))
    monitor = world.pod("w0", group="w", templates={"gpus": "watch"})
    [whole] = all_gpus_members(world, 1)
    assert planner.filter(monitor, ["d1"], now=0).reserved is not None
    assert planner.filter(whole, ["d1"], now=0).reserved is not None


# ---- device taints ------------------------------------------------------------------------


def taint_cluster(*slices: dict[str, object]) -> tuple[DraWorld, GangPlanner]:
    """Nodes d1 and d2 publishing these slices (replacing their 8 H100s)."""
    world, planner = dra_cluster(nodes=["d1", "d2"])
    for obj in slices:
        world.slice(obj)
    return world, planner


def one_member(world: DraWorld, template: str) -> Pod:
    world.state.upsert_group(podgroup("g", 1))
    return world.pod("m0", group="g", templates={"gpus": template})


def test_a_gang_whose_only_free_gpu_on_a_node_is_tainted_is_planned_on_another_node() -> None:
    world, planner = taint_cluster(tainted(gpu_slice_obj("d1", 1), 0), gpu_slice_obj("d2", 1))
    world.template("one", 1)
    member = one_member(world, "one")
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d2"


def test_a_member_tolerating_the_taint_is_planned_on_the_tainted_gpu() -> None:
    world, planner = taint_cluster(tainted(gpu_slice_obj("d1", 1), 0), gpu_slice_obj("d2", 0))
    world.template("tolerant", 1, tolerations=TOLERATES_XID)
    member = one_member(world, "tolerant")
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d1"
    (request,) = present(member.devices).demand.claims[0].requests
    assert request.exactness is Exactness.PER_NODE
    assert "tolerates device taints" in request.note


def test_a_toleration_of_another_taint_does_not_open_a_tainted_gpu() -> None:
    world, planner = taint_cluster(tainted(gpu_slice_obj("d1", 1), 0), gpu_slice_obj("d2", 0))
    world.template(
        "other", 1, tolerations=[{"key": "example.com/maintenance", "operator": "Exists"}]
    )
    member = one_member(world, "other")
    decision = planner.filter(member, ["d1", "d2"], now=0)
    assert decision.reserved is None


def test_a_tolerating_member_may_take_tainted_and_untainted_gpus_together() -> None:
    world, planner = taint_cluster(tainted(gpu_slice_obj("d1", 2), 1), gpu_slice_obj("d2", 0))
    world.template("two", 2, tolerations=TOLERATES_XID)
    member = one_member(world, "two")
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d1"


@pytest.mark.parametrize(
    ("templates", "fits"),
    [(("tolerant", "plain"), True), (("plain", "plain"), False)],
    ids=["one-tolerates", "neither-tolerates"],
)
def test_the_tainted_gpu_goes_only_to_a_member_that_tolerates_it(
    templates: tuple[str, str], fits: bool
) -> None:
    # d1: one clean GPU and one tainted, the only GPUs there are.
    world, planner = taint_cluster(tainted(gpu_slice_obj("d1", 2), 1), gpu_slice_obj("d2", 0))
    world.template("tolerant", 1, tolerations=TOLERATES_XID)
    world.template("plain", 1)
    world.state.upsert_group(podgroup("g", 2))
    a, b = (world.pod(f"m{i}", group="g", templates={"gpus": t}) for i, t in enumerate(templates))
    reservation = planner.filter(a, ["d1", "d2"], now=0).reserved
    assert (reservation is not None) is fits
    if reservation is not None:
        assert {reservation.node_of(a.uid), reservation.node_of(b.uid)} == {"d1"}


def taint_on_d1(by: str) -> tuple[DraWorld, GangPlanner]:
    """Two nodes, d1 with both its GPUs tainted (by its slice or by a DeviceTaintRule) and
    d2 without free GPUs: (world, planner)."""
    if by == "slice":
        return taint_cluster(tainted(gpu_slice_obj("d1", 2), 0, 1), gpu_slice_obj("d2", 0))
    world, planner = taint_cluster(gpu_slice_obj("d1", 2), gpu_slice_obj("d2", 0))
    world.rule(taint_rule_obj("xid-d1", pool="d1"))
    return world, planner


@pytest.mark.parametrize("by", ["slice", "rule"])
def test_first_available_falls_through_to_the_choice_that_tolerates_the_taint(by: str) -> None:
    world, planner = taint_on_d1(by)
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "clean", "deviceClassName": GPU_CLASS},
            {"name": "any", "deviceClassName": GPU_CLASS, "tolerations": TOLERATES_XID},
        ],
    }
    world.template_of(claim_template_obj("choice", request))
    member = one_member(world, "choice")
    (planned,) = present(member.devices).demand.claims[0].requests
    assert planned.request == "gpu/any"
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d1"


def test_an_all_gpus_member_is_planned_on_a_tainted_gpu_only_if_it_tolerates_the_taint() -> None:
    world, planner = taint_cluster(tainted(gpu_slice_obj("d1", 2), 1), gpu_slice_obj("d2", 0))
    world.template("all", None, mode="All")
    world.template("all-tolerant", None, mode="All", tolerations=TOLERATES_XID)
    member = one_member(world, "all")
    decision = planner.filter(member, ["d1", "d2"], now=0)
    assert decision.reserved is None
    assert "had 1 gpu.nvidia.com device(s) with a taint" in decision.result.unresolvable["d1"]
    world.model.remove_pod(world.state, member.uid)
    tolerant = one_member(world, "all-tolerant")
    reservation = planner.filter(tolerant, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(tolerant.uid) == "d1"


# ---- DeviceTaintRules: a rule's taint is a slice's own ------------------------------------


def test_a_gang_not_tolerating_a_rule_tainting_a_gpu_is_planned_on_another_node() -> None:
    world, planner = taint_cluster(gpu_slice_obj("d1", 1), gpu_slice_obj("d2", 1))
    world.rule(taint_rule_obj("xid-d1", pool="d1", device="gpu-0"))
    world.template("one", 1)
    member = one_member(world, "one")
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d2"


def test_a_member_tolerating_a_rule_taint_is_planned_on_the_gpu_it_taints() -> None:
    world, planner = taint_cluster(gpu_slice_obj("d1", 1), gpu_slice_obj("d2", 0))
    world.rule(taint_rule_obj("xid-d1", pool="d1", device="gpu-0"))
    world.template("tolerant", 1, tolerations=TOLERATES_XID)
    member = one_member(world, "tolerant")
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None
    assert reservation.node_of(member.uid) == "d1"


def test_a_rule_tainting_a_drivers_devices_keeps_a_gang_off_every_node_until_it_is_deleted() -> (
    None
):
    world, planner = taint_cluster(gpu_slice_obj("d1", 1), gpu_slice_obj("d2", 1))
    world.template("one", 1)
    member = one_member(world, "one")
    rederived = world.rule(taint_rule_obj("all-gpus", driver=GPU_DRIVER))
    assert member.uid in {p.uid for p in rederived}  # its demand now takes the `any` entry
    member = world.state.pod(member.uid) or member
    assert planner.filter(member, ["d1", "d2"], now=0).reserved is None
    world.remove_rule("all-gpus")
    member = world.state.pod(member.uid) or member
    reservation = planner.filter(member, ["d1", "d2"], now=0).reserved
    assert reservation is not None


def test_an_all_gpus_member_is_refused_a_node_where_a_rule_taints_one_of_them() -> None:
    world, planner = taint_cluster(gpu_slice_obj("d1", 2), gpu_slice_obj("d2", 0))
    world.rule(taint_rule_obj("xid-d1", pool="d1", device="gpu-1"))
    world.template("all", None, mode="All")
    member = one_member(world, "all")
    decision = planner.filter(member, ["d1", "d2"], now=0)
    assert decision.reserved is None
    assert "had 1 gpu.nvidia.com device(s) with a taint" in decision.result.unresolvable["d1"]
