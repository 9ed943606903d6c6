"""DRA inventory: slices, classes and allocated claims become free devices per node.

Slices and classes are shaped like NVIDIA's DRA driver publishes them (tests/builders.py):
8 H100s per node, A100s in MIG mode on some nodes, ComputeDomain IMEX channels.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import (
    CD_DRIVER,
    GPU_DRIVER,
    claim_obj,
    claim_template_obj,
    compute_domain_slice_obj,
    device_class_obj,
    device_request,
    dra_pod_obj,
    gpu_slice_obj,
    mig_slice_obj,
    nvidia_class_objs,
    slice_obj,
)
from dra_builders import taint_rule_obj
from phalanx.core.cel import Selector, Unsupported, Version
from phalanx.core.dra import (
    AllocationMode,
    DeviceFlag,
    DeviceTaint,
    DeviceTaintRule,
    DeviceToleration,
    NodeAccess,
    ResourceSlice,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
    with_rule_taints,
)
from phalanx.core.dra_inventory import (
    ANY_PREFIX,
    CLASS_PREFIX,
    WHOLE,
    DeviceCatalog,
    DraInventory,
    PoolState,
    allocated_devices,
    any_entry,
    build_inventory,
    catalog_for,
    class_entry,
    describe_node,
    gpu_info,
    node_entries,
    whole_entry,
)
from phalanx.core.errors import InvalidObjectError
from phalanx.core.inventory import parse_pod
from phalanx.core.model import DRA_GPU, NVIDIA_GPU, PodClaimRef, Resources

GI = 2**30
MI = 2**20
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"


def catalog(inv: DraInventory | None = None) -> DeviceCatalog:
    classes = [parse_device_class(o) for o in nvidia_class_objs()]
    return catalog_for(classes, inv) if inv is not None else DeviceCatalog(classes)


def inventory(*objs: dict[str, Any]) -> DraInventory:
    return build_inventory(parse_resource_slice(o) for o in objs)


def per_class(entries: Resources) -> dict[str, int]:
    """Class entries only (shape entries have a digest in their name)."""
    return {
        k[len(CLASS_PREFIX) :]: v
        for k, v in entries.items()
        if k.startswith(CLASS_PREFIX) and "~" not in k
    }


# ---- slices ----------------------------------------------------------------------------------


def test_an_nvidia_gpu_slice_becomes_eight_devices_of_one_shape() -> None:
    s = parse_resource_slice(gpu_slice_obj("n1"))
    assert (s.driver, s.pool, s.generation, s.slice_count) == (GPU_DRIVER, "n1", 1, 1)
    assert s.access is NodeAccess.NODE
    assert s.node == "n1"
    devices = s.devices
    assert [d.name for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert len({d.shape for d in devices}) == 1
    gpu = devices[3]
    assert gpu.attribute(f"{GPU_DRIVER}/productName") == "NVIDIA H100 80GB HBM3"
    assert gpu.attribute(f"{GPU_DRIVER}/driverVersion") == Version.parse("550.54.15")
    assert gpu.capacity(f"{GPU_DRIVER}/memory") == Fraction(81559 * MI)
    # Identifying values stay with the device; globally unique ones are not kept.
    assert gpu.attribute(f"{GPU_DRIVER}/pcieBusID") == "0000:1b:00.0"
    assert gpu.attribute("resource.kubernetes.io/pcieRoot") == "pci0000:01"
    assert gpu.attribute(f"{GPU_DRIVER}/uuid") is None
    assert gpu.shape.gpu_like


def test_identical_servers_share_one_copy_of_their_devices() -> None:
    a = parse_resource_slice(gpu_slice_obj("n1"))
    b = parse_resource_slice(gpu_slice_obj("n2"))
    assert a.devices is b.devices
    other = parse_resource_slice(gpu_slice_obj("n3", driver_version="560.35.3"))
    assert other.devices[0].shape is not a.devices[0].shape


def test_mig_devices_share_a_shape_per_profile_and_keep_their_placement() -> None:
    s = parse_resource_slice(mig_slice_obj("m1", {0: ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]}))
    devices = s.devices
    assert [d.name for d in devices] == [
        "gpu-0-mig-9-0-4",
        "gpu-0-mig-14-4-2",
        "gpu-0-mig-19-6-1",
        "gpu-0-mig-19-7-1",
    ]
    assert devices[2].shape is devices[3].shape
    assert devices[2].capacity(f"{GPU_DRIVER}/memorySlice6") == 1
    assert devices[3].capacity(f"{GPU_DRIVER}/memorySlice6") is None
    assert devices[2].capacity(f"{GPU_DRIVER}/memory") == 4864 * MI


def test_compute_domain_channels_keep_their_id() -> None:
    s = parse_resource_slice(compute_domain_slice_obj("n1", channels=3))
    devices = s.devices
    assert [d.name for d in devices] == ["channel-0", "channel-1", "channel-2", "daemon-0"]
    assert [d.attribute(f"{CD_DRIVER}/id") for d in devices] == [0, 1, 2, 0]
    assert not devices[0].shape.gpu_like


def bad_slice(change: str) -> dict[str, Any]:
    obj = gpu_slice_obj("n1", 1)
    spec, device = obj["spec"], obj["spec"]["devices"][0]
    if change == "no driver":
        del spec["driver"]
    elif change == "no slice count":
        spec["pool"]["resourceSliceCount"] = 0
    elif change == "two node selections":
        spec["allNodes"] = True
    elif change == "two attribute values":
        device["attributes"]["type"] = {"string": "gpu", "int": 1}
    elif change == "bad capacity":
        device["capacity"]["memory"] = {"value": "lots"}
    elif change == "bad version":
        device["attributes"]["driverVersion"] = {"version": "550"}
    elif change == "unnamed device":
        del device["name"]
    elif change == "taint without key":
        device["taints"] = [{"value": "48", "effect": "NoSchedule"}]
    elif change == "taint without effect":
        device["taints"] = [{"key": "gpu.nvidia.com/xid"}]
    elif change == "taint value not a string":
        device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": 48, "effect": "NoSchedule"}]
    return obj


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("no driver", "spec.driver"),
        ("no slice count", "spec.pool.resourceSliceCount"),
        ("two node selections", "spec"),
        ("two attribute values", 'spec.devices[0].attributes["type"]'),
        ("bad capacity", 'spec.devices[0].capacity["memory"].value'),
        ("bad version", 'spec.devices[0].attributes["driverVersion"].version'),
        ("unnamed device", "spec.devices[0].name"),
        ("taint without key", "spec.devices[0].taints[0].key"),
        ("taint without effect", "spec.devices[0].taints[0].effect"),
        ("taint value not a string", "spec.devices[0].taints[0].value"),
    ],
    ids=lambda x: x if " " in x else "",
)
def test_a_slice_the_api_server_would_refuse_names_the_field(change: str, field: str) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_resource_slice(bad_slice(change))
    assert raised.value.kind == "ResourceSlice"
    assert raised.value.name == "n1-gpu.nvidia.com-1"
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("shared", 'spec.sharedCounters[0].counters["memory"].value'),
        ("consumed", 'spec.devices[0].consumesCounters[0].counters["memory"].value'),
    ],
)
def test_a_counter_the_api_server_would_refuse_names_the_field(where: str, field: str) -> None:
    obj = gpu_slice_obj("n1", 1)
    counters = {"memory": {"value": "forty gigs"}}
    if where == "shared":
        obj["spec"]["sharedCounters"] = [{"name": "gpu-0-counter-set", "counters": counters}]
    else:
        device = obj["spec"]["devices"][0]
        device["consumesCounters"] = [{"counterSet": "gpu-0-counter-set", "counters": counters}]
    with pytest.raises(InvalidObjectError) as raised:
        parse_resource_slice(obj)
    assert raised.value.field == field


def test_an_array_where_a_capacity_belongs_is_refused_by_its_type_not_its_text() -> None:
    obj = gpu_slice_obj("n1", 1)
    nested: list[object] = []
    for _ in range(5_000):  # quoted whole, it made a RecursionError
        nested = [nested]
    obj["spec"]["devices"][0]["capacity"]["memory"] = {"value": nested}
    with pytest.raises(InvalidObjectError) as raised:
        parse_resource_slice(obj)
    assert raised.value.field == 'spec.devices[0].capacity["memory"].value'
    assert raised.value.reason == "an array is not a Kubernetes quantity"


def test_device_taints_and_partitions_are_flagged() -> None:
    obj = gpu_slice_obj("n1", 3)
    devices = obj["spec"]["devices"]
    devices[0]["taints"] = [{"key": "health", "effect": "NoSchedule"}]
    devices[1]["consumesCounters"] = [{"counterSet": "gpu-1-counter-set", "counters": {}}]
    devices[2]["taints"] = [{"key": "note", "effect": "None"}]
    flags = [d.flags for d in parse_resource_slice(obj).devices]
    assert flags == [DeviceFlag.TAINTED, DeviceFlag.CONSUMES_COUNTERS, DeviceFlag.NONE]


def test_a_device_keeps_the_taints_kube_scheduler_acts_on_and_only_those() -> None:
    # Effect None is informational, and "consumers must treat unknown effects like None".
    obj = gpu_slice_obj("n1", 1)
    obj["spec"]["devices"][0]["taints"] = [
        {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"},
        {"key": "gpu.nvidia.com/unmonitored", "effect": "None"},
        {"key": "example.com/later", "effect": "NoExecuteWithPodDisruptionBudget"},
        {
            "key": "gpu.nvidia.com/gpu-lost",
            "effect": "NoExecute",
            "timeAdded": "2026-01-01T00:00:00Z",
        },
    ]
    (device,) = parse_resource_slice(obj).devices
    assert device.taints == (
        DeviceTaint("gpu.nvidia.com/gpu-lost", "", "NoExecute"),
        DeviceTaint("gpu.nvidia.com/xid", "48", "NoSchedule"),
    )


XID = DeviceTaint("gpu.nvidia.com/xid", "48", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "tolerates"),
    [
        (DeviceToleration(exists=True), True),
        (DeviceToleration("gpu.nvidia.com/xid", exists=True), True),
        (DeviceToleration("gpu.nvidia.com/xid", value="48"), True),
        (DeviceToleration("gpu.nvidia.com/xid", value="63"), False),
        (DeviceToleration("gpu.nvidia.com/xid"), False),
        (DeviceToleration("gpu.nvidia.com/xid", exists=True, effect="NoSchedule"), True),
        (DeviceToleration("gpu.nvidia.com/xid", exists=True, effect="NoExecute"), False),
        (DeviceToleration(exists=True, effect="NoExecute"), False),
        (DeviceToleration("gpu.nvidia.com/gpu-lost", exists=True), False),
    ],
    ids=[
        "empty-key-exists-tolerates-all",
        "exists-any-value",
        "equal-same-value",
        "equal-other-value",
        "equal-empty-value",
        "same-effect",
        "other-effect",
        "empty-key-other-effect",
        "other-key",
    ],
)
def test_a_toleration_matches_a_taint_as_kube_scheduler_matches_it(
    toleration: DeviceToleration, tolerates: bool
) -> None:
    assert toleration.tolerates(XID) is tolerates


# ---- pools ------------------------------------------------------------------------------------


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = gpu_slice_obj("n1", 8, generation=1, name="old")
    new = gpu_slice_obj("n1", 4, generation=2, name="new")
    inv = inventory(old, new)
    assert per_class(node_entries(inv.node("n1"), catalog(), {})) == {GPU_CLASS: 4}


def test_an_incomplete_pool_counts_nothing_until_every_slice_is_there() -> None:
    first = gpu_slice_obj("n1", 4, count=2, name="a")
    inv = inventory(first)
    assert inv.pools[(GPU_DRIVER, "n1")].state is PoolState.INCOMPLETE
    assert inv.node("n1") == ()
    assert inv.problems() == [
        "pool n1 of driver gpu.nvidia.com: 1 of 2 slices of generation 1 are published; its "
        "devices are not used until the driver finishes the update"
    ]
    second = slice_obj("n1", [], count=2, name="b")
    second["spec"]["devices"] = gpu_slice_obj("n1", 8)["spec"]["devices"][4:]
    whole = inventory(first, second)
    assert whole.pools[(GPU_DRIVER, "n1")].state is PoolState.COMPLETE
    assert per_class(node_entries(whole.node("n1"), catalog(), {})) == {GPU_CLASS: 8}


def test_a_duplicate_device_invalidates_its_pool_only_and_is_said_once() -> None:
    broken = gpu_slice_obj("n1", 2)
    broken["spec"]["devices"].append(copy.deepcopy(broken["spec"]["devices"][0]))
    inv = inventory(broken, gpu_slice_obj("n2"))
    assert inv.pools[(GPU_DRIVER, "n1")].state is PoolState.INVALID
    assert inv.node("n1") == ()
    assert per_class(node_entries(inv.node("n2"), catalog(), {})) == {GPU_CLASS: 8}
    assert inv.problems() == [
        "pool n1 of driver gpu.nvidia.com: device gpu-0 is listed more than once (slices "
        "n1-gpu.nvidia.com-1, n1-gpu.nvidia.com-1); no device of it is used"
    ]


def test_a_device_listed_in_two_slices_of_a_pool_invalidates_it() -> None:
    a = gpu_slice_obj("n1", 2, count=2, name="a")
    b = gpu_slice_obj("n1", 1, count=2, name="b")
    inv = inventory(a, b)
    assert inv.pools[(GPU_DRIVER, "n1")].state is PoolState.INVALID
    assert "device gpu-0 is listed more than once (slices a, b)" in inv.problems()[0]


def test_devices_reachable_from_many_nodes_are_not_counted_per_node() -> None:
    shared = slice_obj("any", [{"name": "nic-0"}], driver="net.example.com", pool="fabric")
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    inv = inventory(shared)
    assert inv.by_node == {}
    assert "1 device(s) reachable from several nodes" in inv.problems()[0]


# ---- classes and free devices ----------------------------------------------------------------


def test_each_class_counts_its_devices_per_node() -> None:
    inv = inventory(
        gpu_slice_obj("n1"),
        compute_domain_slice_obj("n1", channels=4),
        mig_slice_obj("m1", {0: ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]}, whole=1),
    )
    cat = catalog()
    n1 = node_entries(inv.node("n1"), cat, {})
    assert per_class(n1) == {GPU_CLASS: 8, CHANNEL_CLASS: 1, "compute-domain-daemon.nvidia.com": 1}
    assert n1[DRA_GPU] == 8
    m1 = node_entries(inv.node("m1"), cat, {})
    assert per_class(m1) == {GPU_CLASS: 1, MIG_CLASS: 4}
    assert m1[DRA_GPU] == 5  # like nvidia.com/gpu + nvidia.com/mig-* on a device-plugin node
    assert m1.gpus() == 5


def test_allocated_claims_reduce_free_devices_and_admin_access_does_not() -> None:
    inv = inventory(gpu_slice_obj("n1"))
    taken = parse_resource_claim(
        claim_obj("a", allocated=[(GPU_DRIVER, "n1", "gpu-0"), (GPU_DRIVER, "n1", "gpu-1")])
    )
    watching = claim_obj("b", allocated=[(GPU_DRIVER, "n1", "gpu-2")])
    watching["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    held = allocated_devices([taken, parse_resource_claim(watching)])
    assert held == {(GPU_DRIVER, "n1"): frozenset({"gpu-0", "gpu-1"})}
    free = node_entries(inv.node("n1"), catalog(), held)
    assert per_class(free) == {GPU_CLASS: 6}
    assert free[DRA_GPU] == 6
    assert describe_node(inv.node("n1"), catalog(), held).free == {GPU_CLASS: 6}


# ---- DeviceTaintRule --------------------------------------------------------------------

XID = DeviceTaint("gpu.nvidia.com/xid", "48", "NoSchedule")


def rule(**selector: str) -> DeviceTaintRule:
    return parse_device_taint_rule(taint_rule_obj("xid", None, **selector))


def taints_by_device(s: ResourceSlice) -> dict[str, tuple[DeviceTaint, ...]]:
    return {d.name: d.taints for d in s.devices}


def test_a_taint_rule_is_read_with_its_selector_and_taint() -> None:
    read = rule(driver=GPU_DRIVER, pool="n1", device="gpu-1")
    assert read == DeviceTaintRule("xid", XID, True, GPU_DRIVER, "n1", "gpu-1")


@pytest.mark.parametrize(
    ("selector", "picked"),
    [
        ({"device": "gpu-1"}, {"gpu-1"}),
        ({"driver": GPU_DRIVER}, {"gpu-0", "gpu-1"}),
        ({}, {"gpu-0", "gpu-1"}),
        ({"pool": "n2"}, set()),
        ({"driver": CD_DRIVER}, set()),
        ({"pool": "n1", "device": "gpu-0"}, {"gpu-0"}),
    ],
    ids=["device", "driver", "empty selector: every device", "other pool", "other driver", "both"],
)
def test_a_taint_rule_taints_the_devices_its_selector_picks(
    selector: dict[str, str], picked: set[str]
) -> None:
    s = parse_resource_slice(gpu_slice_obj("n1", 2))
    tainted = with_rule_taints(s, [rule(**selector)])
    assert {name for name, taints in taints_by_device(tainted).items() if taints} == picked
    assert all(d.flags & DeviceFlag.TAINTED for d in tainted.devices if d.name in picked)
    if not picked:
        assert tainted is s  # nothing picked: no copy


def test_a_taint_rule_without_a_device_selector_taints_nothing() -> None:
    obj = taint_rule_obj("xid")
    del obj["spec"]["deviceSelector"]
    read = parse_device_taint_rule(obj)
    s = parse_resource_slice(gpu_slice_obj("n1", 2))
    assert not read.selects
    assert with_rule_taints(s, [read]) is s


def test_a_taint_rule_whose_effect_keeps_devices_from_nobody_taints_nothing() -> None:
    read = parse_device_taint_rule(taint_rule_obj("note", {"key": "note", "effect": "None"}))
    s = parse_resource_slice(gpu_slice_obj("n1", 2))
    assert read.taint is None
    assert with_rule_taints(s, [read]) is s


def test_a_rule_taint_joins_the_taints_the_slice_publishes_once() -> None:
    obj = gpu_slice_obj("n1", 1)
    obj["spec"]["devices"][0]["taints"] = [{"key": "health", "effect": "NoExecute"}]
    s = parse_resource_slice(obj)
    twice = with_rule_taints(s, [rule(), parse_device_taint_rule(taint_rule_obj("again"))])
    assert taints_by_device(twice) == {"gpu-0": (XID, DeviceTaint("health", "", "NoExecute"))}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda o: o["spec"]["taint"].pop("key"), "spec.taint.key"),
        (lambda o: o["spec"]["taint"].pop("effect"), "spec.taint.effect"),
        (lambda o: o["spec"].pop("taint"), "spec.taint"),
        (lambda o: o["spec"]["deviceSelector"].update(driver=""), "spec.deviceSelector.driver"),
        (lambda o: o["spec"]["deviceSelector"].update(pool=7), "spec.deviceSelector.pool"),
        (lambda o: o["spec"].update(deviceSelector="gpu-0"), "spec.deviceSelector"),
    ],
    ids=["no key", "no effect", "no taint", "empty driver", "pool not a string", "not an object"],
)
def test_a_taint_rule_the_api_server_would_refuse_names_the_field(
    change: Callable[[dict[str, Any]], object], field: str
) -> None:
    obj = taint_rule_obj("xid", driver=GPU_DRIVER)
    change(obj)
    with pytest.raises(InvalidObjectError) as raised:
        parse_device_taint_rule(obj)
    assert (raised.value.kind, raised.value.name, raised.value.field) == (
        "DeviceTaintRule",
        "xid",
        field,
    )


def test_a_v1alpha3_taint_rule_of_kubernetes_1_35_is_read_like_a_v1_rule() -> None:
    alpha = taint_rule_obj("xid", pool="n1", device="gpu-1", api_version="resource.k8s.io/v1alpha3")
    assert parse_device_taint_rule(alpha) == rule(pool="n1", device="gpu-1")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("deviceClassName", "gpu.nvidia.com"),
        ("selectors", [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]),
    ],
    ids=["device class", "CEL selectors"],
)
def test_a_v1alpha3_taint_rule_selecting_by_what_phalanx_cannot_evaluate_is_refused_naming_it(
    field: str, value: object
) -> None:
    # Served by 1.33/1.34 API servers; their kube-scheduler applies them, Phalanx cannot.
    obj = taint_rule_obj("xid", driver=GPU_DRIVER, api_version="resource.k8s.io/v1alpha3")
    obj["spec"]["deviceSelector"][field] = value
    with pytest.raises(InvalidObjectError) as raised:
        parse_device_taint_rule(obj)
    assert raised.value.field == f"spec.deviceSelector.{field}"
    assert "ignores the rule" in str(raised.value)


def test_a_tainted_device_is_not_free() -> None:
    obj = gpu_slice_obj("n1", 2)
    obj["spec"]["devices"][1]["taints"] = [{"key": "xid", "effect": "NoExecute"}]
    assert per_class(node_entries(inventory(obj).node("n1"), catalog(), {})) == {GPU_CLASS: 1}


def test_a_class_with_tainted_devices_counts_its_free_devices_tainted_or_not_as_any() -> None:
    obj = gpu_slice_obj("n1", 2)
    obj["spec"]["devices"][1]["taints"] = [{"key": "xid", "effect": "NoExecute"}]
    inv = inventory(obj, gpu_slice_obj("n2", 2), mig_slice_obj("m1", {0: ["1g.5gb"]}))
    cat = catalog(inv)
    assert set(cat.tainted) == {GPU_CLASS}
    assert per_class(node_entries(inv.node("n1"), cat, {})) == {GPU_CLASS: 1}
    assert node_entries(inv.node("n1"), cat, {})[any_entry(GPU_CLASS)] == 2
    assert node_entries(inv.node("n2"), cat, {})[any_entry(GPU_CLASS)] == 2
    held = allocated_devices(
        [parse_resource_claim(claim_obj("a", allocated=[(GPU_DRIVER, "n1", "gpu-1")]))]
    )
    assert node_entries(inv.node("n1"), cat, held)[any_entry(GPU_CLASS)] == 1
    # A class without tainted devices, sharing no device with one that has them, has none.
    assert not any(k.startswith(ANY_PREFIX) for k in node_entries(inv.node("m1"), cat, {}))


def test_a_tainted_device_matches_only_a_request_that_tolerates_its_taints() -> None:
    obj = gpu_slice_obj("n1", 2)
    obj["spec"]["devices"][1]["taints"] = [{"key": "xid", "value": "48", "effect": "NoSchedule"}]
    inv = inventory(obj)
    devices = inv.node("n1")[0].devices
    cat = catalog(inv)
    assert cat.count_matching(devices, GPU_CLASS, ()) == 1
    assert cat.count_matching(devices, GPU_CLASS, (), (DeviceToleration("xid", value="48"),)) == 2
    assert cat.count_matching(devices, GPU_CLASS, (), (DeviceToleration("xid", value="63"),)) == 1
    assert cat.count_matching(devices, GPU_CLASS, (), (DeviceToleration(exists=True),)) == 2


def test_a_node_offers_each_classs_devices_whole_only_while_every_one_is_free() -> None:
    # An allocationMode All request takes WHOLE of its class's entry; a held device of the
    # class leaves less, so it no longer fits there. A device of another class (the
    # ComputeDomain daemon beside its channels) leaves it whole, and so does a tainted one:
    # whether All may be given it depends on its tolerations, checked per node.
    tainted = gpu_slice_obj("n2", 2)
    tainted["spec"]["devices"][1]["taints"] = [{"key": "xid", "effect": "NoExecute"}]
    inv = inventory(
        gpu_slice_obj("n1", 2), compute_domain_slice_obj("n1"), tainted, gpu_slice_obj("n3", 2)
    )
    held = allocated_devices(
        [
            parse_resource_claim(claim_obj("a", allocated=[(GPU_DRIVER, "n3", "gpu-0")])),
            parse_resource_claim(claim_obj("b", allocated=[(CD_DRIVER, "n1", "daemon-0")])),
        ]
    )

    def whole(node: str) -> dict[str, int]:
        entries = node_entries(inv.node(node), catalog(inv), held)
        return {c: entries[whole_entry(c)] for c in (GPU_CLASS, CHANNEL_CLASS, DAEMON_CLASS)}

    assert whole("n1") == {GPU_CLASS: WHOLE, CHANNEL_CLASS: WHOLE, DAEMON_CLASS: WHOLE - 1}
    # A class without devices on the node is offered whole too (related requests draw on it).
    assert whole("n2") == {GPU_CLASS: WHOLE, CHANNEL_CLASS: WHOLE, DAEMON_CLASS: WHOLE}
    assert whole("n3") == {GPU_CLASS: WHOLE - 1, CHANNEL_CLASS: WHOLE, DAEMON_CLASS: WHOLE}


def test_an_unknown_or_broken_class_selects_nothing_and_an_unsupported_selector_is_said() -> None:
    broken = parse_device_class(device_class_obj("broken", "device.driver =="))
    assert "CEL expression" in broken.problem
    partly = parse_device_class(
        device_class_obj(
            "h100",
            "device.attributes['gpu.nvidia.com'].productName.matches('H100')",
            "device.attributes['gpu.nvidia.com'].type == 'gpu'",
        )
    )
    assert isinstance(partly.selectors[0], Unsupported)
    assert isinstance(partly.selectors[1], Selector)
    cat = DeviceCatalog([broken, partly])
    device = inventory(gpu_slice_obj("n1", 1)).node("n1")[0].devices[0]
    assert not cat.in_class(device, "broken")
    assert not cat.in_class(device, "unknown")
    assert cat.in_class(device, "h100")
    assert len(cat.notes) == 1
    assert "matches()" in cat.notes[0]


def test_a_class_selector_evaluated_in_part_still_keeps_other_drivers_devices_out() -> None:
    h100 = parse_device_class(
        device_class_obj(
            "h100",
            "device.driver == 'gpu.nvidia.com' && "
            "device.attributes['gpu.nvidia.com'].productName.matches('H100')",
        )
    )
    inv = inventory(gpu_slice_obj("n1", 8), compute_domain_slice_obj("n1", channels=4))
    entries = node_entries(inv.node("n1"), DeviceCatalog([h100]), {})
    assert per_class(entries) == {"h100": 8}  # not the 4 channels and the daemon too


def test_gpu_info_describes_a_dra_node_like_its_labels_would() -> None:
    inv = inventory(mig_slice_obj("m1", {0: ["1g.5gb", "1g.5gb"], 1: ["3g.20gb"]}, whole=2))
    info = gpu_info(inv.node("m1"))
    assert info is not None
    assert (info.count, info.product, info.memory_mib, info.family) == (
        2,
        "NVIDIA A100-SXM4-40GB",
        40960,
        "ampere",
    )
    assert info.mig == {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-3g.20gb": 1}
    assert gpu_info(inventory(compute_domain_slice_obj("n1")).node("n1")) is None


@given(taken=st.sets(st.integers(min_value=0, max_value=7)))
def test_free_is_never_negative_and_freeing_returns_to_the_start(taken: set[int]) -> None:
    pools = inventory(gpu_slice_obj("n1")).node("n1")
    cat = catalog()
    start = node_entries(pools, cat, {})
    held = {(GPU_DRIVER, "n1"): frozenset(f"gpu-{i}" for i in taken)}
    during = node_entries(pools, cat, held)
    assert all(v >= 0 for v in during.values())
    assert during.get(class_entry(GPU_CLASS)) == 8 - len(taken)
    assert during + Resources({k: start[k] - during.get(k) for k in start}) == start
    assert node_entries(pools, cat, {}) == start


# ---- claims, templates and pods -----------------------------------------------------------------


def test_a_claim_with_its_allocation_parses() -> None:
    claim = parse_resource_claim(
        claim_obj(
            "shared",
            device_request("gpu", GPU_CLASS, 2),
            namespace="ml",
            allocated=[(GPU_DRIVER, "n1", "gpu-0")],
            node="n1",
            owner_pod="uid-1",
            reserved_for=["uid-1"],
        )
    )
    assert claim.key == "ml/shared"
    assert claim.spec.requests[0].count == 2
    assert claim.allocation is not None
    assert claim.allocation.devices[0].device == "gpu-0"
    assert claim.allocation.node_terms is not None
    assert claim.allocation.node_terms[0].match_fields[0].values == ("n1",)
    assert (claim.owner_pod, claim.reserved_for) == ("uid-1", ("uid-1",))


@pytest.mark.parametrize("version", ["v1alpha3", "v1beta1", "v1"])
def test_a_claim_an_upstream_podgroup_controls_names_it_whatever_the_version(version: str) -> None:
    obj = claim_obj("team-cd-x", owner_pod_group="team")
    obj["metadata"]["ownerReferences"][0]["apiVersion"] = f"scheduling.k8s.io/{version}"
    claim = parse_resource_claim(obj)
    assert (claim.owner_pod_group, claim.owner_pod) == ("team", "")
    assert str(claim.controller) == "PodGroup.scheduling.k8s.io team"


def test_only_the_controlling_owner_reference_owns_a_claim() -> None:
    obj = claim_obj("c")
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-1"},
        {
            "apiVersion": "scheduling.k8s.io/v1alpha3",
            "kind": "PodGroup",
            "name": "team",
            "uid": "u",
        },
    ]
    claim = parse_resource_claim(obj)
    assert (claim.controller, claim.owner_pod, claim.owner_pod_group) == (None, "", "")


def test_request_forms_parse() -> None:
    template = parse_resource_claim_template(
        claim_template_obj(
            "t",
            device_request("all", GPU_CLASS, None, mode="All"),
            {
                "name": "choice",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": GPU_CLASS, "count": 2},
                    {
                        "name": "small",
                        "deviceClassName": MIG_CLASS,
                        "tolerations": [
                            {
                                "key": "gpu.nvidia.com/xid",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                                "tolerationSeconds": 60,
                            },
                            {"key": "example.com/maintenance", "value": "planned"},
                        ],
                    },
                ],
            },
            device_request("broken", GPU_CLASS, 1, "device.driver =="),
        )
    )
    everything, choice, broken = template.spec.requests
    assert (everything.mode, everything.count) == (AllocationMode.ALL, 0)
    assert choice.alternatives[1].tolerations == (
        DeviceToleration("gpu.nvidia.com/xid", exists=True, effect="NoSchedule"),
        DeviceToleration("example.com/maintenance", value="planned"),
    )
    assert [a.name for a in choice.alternatives] == ["big", "small"]
    assert choice.alternatives[1].count == 1
    assert "CEL expression" in broken.problem
    assert "requests[2]" in template.spec.problem


@pytest.mark.parametrize(
    ("request_obj", "field"),
    [
        ({"name": "x"}, "spec.spec.devices.requests[0]"),
        ({"name": "x", "exactly": {}}, "spec.spec.devices.requests[0].exactly.deviceClassName"),
        (
            {"name": "x", "exactly": {"deviceClassName": "c", "count": 0}},
            "spec.spec.devices.requests[0].exactly.count",
        ),
        (
            {"name": "x", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}},
            "spec.spec.devices.requests[0].exactly.allocationMode",
        ),
        (
            {
                "name": "x",
                "exactly": {
                    "deviceClassName": "c",
                    "tolerations": [{"key": "k", "operator": "In"}],
                },
            },
            "spec.spec.devices.requests[0].exactly.tolerations[0].operator",
        ),
        (
            {"name": "x", "exactly": {"deviceClassName": "c", "tolerations": [{"value": "v"}]}},
            "spec.spec.devices.requests[0].exactly.tolerations[0].operator",
        ),
        (
            {
                "name": "x",
                "exactly": {
                    "deviceClassName": "c",
                    "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}],
                },
            },
            "spec.spec.devices.requests[0].exactly.tolerations[0].value",
        ),
        (
            {
                "name": "x",
                "firstAvailable": [
                    {"name": "a", "deviceClassName": "c", "tolerations": [{"key": 7}]}
                ],
            },
            "spec.spec.devices.requests[0].firstAvailable[0].tolerations[0].key",
        ),
        (
            {
                "name": "x",
                "exactly": {
                    "deviceClassName": "c",
                    "tolerations": [{"operator": "Exists", "tolerationSeconds": "300"}],
                },
            },
            "spec.spec.devices.requests[0].exactly.tolerations[0].tolerationSeconds",
        ),
    ],
    ids=[
        "neither-form",
        "no-class",
        "zero-count",
        "unknown-mode",
        "unknown-toleration-operator",
        "equal-without-key",
        "exists-with-value",
        "subrequest-toleration-key-not-a-string",
        "toleration-seconds-not-an-integer",
    ],
)
def test_a_malformed_request_names_the_field(request_obj: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_resource_claim_template(claim_template_obj("t", request_obj))
    assert raised.value.field == field


def test_a_pod_names_its_claims_and_the_claims_generated_for_it() -> None:
    pod = parse_pod(
        dra_pod_obj(
            "w",
            templates={"gpus": "eight-gpus", "channel": "cd-channel", "none": "empty"},
            claims={"shared": "team-claim"},
            generated={"gpus": "w-gpus-x7k2p", "none": None},
        )
    )
    assert pod.resource_claims == (
        PodClaimRef("gpus", claim="w-gpus-x7k2p", template="eight-gpus"),
        PodClaimRef("channel", template="cd-channel"),
        PodClaimRef("none", template="empty", not_needed=True),
        PodClaimRef("shared", claim="team-claim"),
    )
    assert pod.requests.get(NVIDIA_GPU) == 0


def test_a_pod_claim_entry_with_both_sources_is_refused() -> None:
    obj = dra_pod_obj("w", claims={"c": "x"})
    obj["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "t"
    with pytest.raises(InvalidObjectError, match="exactly one of resourceClaimName"):
        parse_pod(obj)


def test_a_pod_keeps_the_podgroup_it_names_whose_claims_it_may_use() -> None:
    named = parse_pod(dra_pod_obj("w", templates={"cd": "t"}, scheduling_group="team"))
    assert named.scheduling_group == "team"
    assert parse_pod(dra_pod_obj("w", templates={"cd": "t"})).scheduling_group == ""
