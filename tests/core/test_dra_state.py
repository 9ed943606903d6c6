"""DraState: watch events in, the nodes whose free devices changed out."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (
    GPU_DRIVER,
    MIG_PROFILES,
    claim_obj,
    claim_template_obj,
    compute_domain_slice_obj,
    device_class_obj,
    device_request,
    dra_pod_obj,
    gpu_node,
    gpu_slice_obj,
    mig_slice_obj,
    nvidia_class_objs,
)
from dra_builders import MIG_CLASS, partitioned_slices, taint_rule_obj, tainted
from phalanx.core.dra import (
    DeviceTaintRule,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.dra_demand import ineligibility
from phalanx.core.dra_inventory import CLASS_PREFIX, any_entry, class_entry
from phalanx.core.dra_state import Changes, DraState
from phalanx.core.inventory import parse_pod
from phalanx.core.model import DRA_GPU

GPU_CLASS = "gpu.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"


def state_with(*slices: dict[str, Any]) -> DraState:
    state = DraState()
    for o in nvidia_class_objs():
        state.upsert_class(parse_device_class(o))
    for o in slices:
        state.upsert_slice(parse_resource_slice(o))
    return state


def free_gpus(state: DraState, node: str) -> int:
    return state.entries(node).get(class_entry(GPU_CLASS))


def allocate(state: DraState, name: str, node: str, *devices: int) -> Changes:
    obj = claim_obj(name, allocated=[(GPU_DRIVER, node, f"gpu-{d}") for d in devices], node=node)
    return state.upsert_claim(parse_resource_claim(obj))


def test_a_new_slice_changes_its_node_only() -> None:
    state = state_with(gpu_slice_obj("n1"))
    changes = state.upsert_slice(parse_resource_slice(gpu_slice_obj("n2")))
    assert changes == Changes(frozenset({"n2"}))
    assert free_gpus(state, "n1") == free_gpus(state, "n2") == 8
    assert state.node("n1")[0] is not state.node("n2")[0]
    assert state.node("n1")[0].devices is state.node("n2")[0].devices  # one shared copy


def test_a_newer_generation_replaces_the_old_slices_of_a_pool() -> None:
    state = state_with(gpu_slice_obj("n1", 8, generation=1, name="old"))
    changes = state.upsert_slice(parse_resource_slice(gpu_slice_obj("n1", 6, generation=2)))
    assert changes.nodes == {"n1"}
    assert free_gpus(state, "n1") == 6
    state.remove_slice("old")  # the driver cleans up the outdated slice
    assert free_gpus(state, "n1") == 6


def test_a_pool_counts_only_once_every_slice_is_published() -> None:
    first = gpu_slice_obj("n1", 4, count=2, name="a")
    second = gpu_slice_obj("n1", 8, count=2, name="b")
    second["spec"]["devices"] = second["spec"]["devices"][4:]
    state = state_with(first)
    assert state.node("n1") == ()
    assert "1 of 2 slices" in state.problems()[0]
    changes = state.upsert_slice(parse_resource_slice(second))
    assert changes.nodes == {"n1"}
    assert free_gpus(state, "n1") == 8
    assert state.problems() == []
    state.remove_slice("b")
    assert free_gpus(state, "n1") == 0


def test_a_duplicate_device_sets_its_pool_aside_and_a_fix_brings_it_back() -> None:
    broken = gpu_slice_obj("n1", 2)
    broken["spec"]["devices"].append(copy.deepcopy(broken["spec"]["devices"][0]))
    state = state_with(broken, gpu_slice_obj("n2"))
    assert free_gpus(state, "n1") == 0
    assert free_gpus(state, "n2") == 8
    [problem] = state.problems()
    assert "device gpu-0 is listed more than once" in problem
    state.upsert_slice(parse_resource_slice(gpu_slice_obj("n1", 2)))
    assert free_gpus(state, "n1") == 2
    assert state.problems() == []


def test_an_allocation_changes_the_nodes_of_its_pool_and_freeing_restores_them() -> None:
    state = state_with(gpu_slice_obj("n1"), gpu_slice_obj("n2"))
    start = state.entries("n1")
    assert allocate(state, "a", "n1", 0, 1, 2) == Changes(frozenset({"n1"}))
    assert free_gpus(state, "n1") == 5
    assert state.entries("n1")[DRA_GPU] == 5
    assert free_gpus(state, "n2") == 8
    assert state.remove_claim("default/a") == Changes(frozenset({"n1"}))
    assert state.entries("n1") == start


def test_a_class_change_asks_for_everything() -> None:
    state = state_with(gpu_slice_obj("n1"))
    changes = state.upsert_class(
        parse_device_class(
            device_class_obj("h100.example.com", "device.driver == 'gpu.nvidia.com'")
        )
    )
    assert changes.everything
    assert state.entries("n1")[f"{CLASS_PREFIX}h100.example.com"] == 8
    assert (
        state.upsert_class(
            parse_device_class(
                device_class_obj("h100.example.com", "device.driver == 'gpu.nvidia.com'")
            )
        )
        == Changes()
    )


def test_the_first_node_of_a_new_kind_asks_for_everything() -> None:
    state = state_with(gpu_slice_obj("n1"))
    assert [k for k in state.entries("n1") if "~" in k] == []  # one kind: no shape entries
    changes = state.upsert_slice(parse_resource_slice(mig_slice_obj("a1", {}, whole=8)))
    assert changes.everything
    h100_shapes = [k for k in state.entries("n1") if "~" in k]
    assert len(h100_shapes) == 1
    assert state.entries("n1")[h100_shapes[0]] == 8
    assert state.upsert_slice(parse_resource_slice(mig_slice_obj("a2", {}, whole=8))).nodes == {
        "a2"
    }
    assert not state.upsert_slice(parse_resource_slice(mig_slice_obj("a2", {}, whole=8))).everything


def test_removing_the_last_slice_of_a_node_forgets_it() -> None:
    state = state_with(gpu_slice_obj("n1"))
    state.remove_slice("n1-gpu.nvidia.com-1")
    assert state.node("n1") == ()
    assert list(state.nodes()) == []
    assert state.remove_slice("n1-gpu.nvidia.com-1") == Changes()


@settings(max_examples=40, deadline=None)
@given(
    claims=st.lists(
        st.tuples(st.sampled_from(["n1", "n2"]), st.sets(st.integers(0, 7), min_size=1)),
        max_size=6,
    ),
    order=st.randoms(use_true_random=False),
)
def test_allocating_then_freeing_in_any_order_returns_to_the_start(
    claims: list[tuple[str, set[int]]], order: Any
) -> None:
    state = state_with(gpu_slice_obj("n1"), gpu_slice_obj("n2"))
    start = {n: state.entries(n) for n in ("n1", "n2")}
    used: dict[str, set[int]] = {"n1": set(), "n2": set()}
    names = []
    for i, (node, devices) in enumerate(claims):
        fresh = devices - used[node]  # kube-scheduler never allocates a device twice
        if not fresh:
            continue
        used[node] |= fresh
        allocate(state, f"c{i}", node, *sorted(fresh))
        names.append(f"default/c{i}")
        for n in ("n1", "n2"):
            entries = state.entries(n)
            assert all(v >= 0 for v in entries.values())
            assert free_gpus(state, n) == 8 - len(used[n])
    order.shuffle(names)
    for name in names:
        state.remove_claim(name)
    assert {n: state.entries(n) for n in ("n1", "n2")} == start
    assert state.allocated == {}


# ---- partitionable devices (shared counters) ---------------------------------------------


def mig(minor: int, profile: str, start: int) -> str:
    return f"gpu-{minor}-mig-{MIG_PROFILES[profile][0]}-{start}-{MIG_PROFILES[profile][1]}"


def hold(state: DraState, name: str, node: str, *devices: str) -> None:
    obj = claim_obj(name, allocated=[(GPU_DRIVER, node, d) for d in devices], node=node)
    state.upsert_claim(parse_resource_claim(obj))


def free(state: DraState, node: str) -> tuple[int, int, int]:
    """Free whole GPUs, free MIG devices, free GPU-like devices (`DRA_GPU`)."""
    entries = state.entries(node)
    return (
        entries.get(class_entry(GPU_CLASS)),
        entries.get(class_entry(MIG_CLASS)),
        entries.get(DRA_GPU),
    )


MIGS_PER_GPU = 7 + 3 + 2


@pytest.mark.parametrize("apart", [True, False], ids=["counters apart", "counters beside"])
def test_a_gpu_with_a_mig_device_in_use_is_no_longer_free_whole(apart: bool) -> None:
    state = state_with(*partitioned_slices("n1", 2, apart=apart))
    assert free(state, "n1") == (2, 2 * MIGS_PER_GPU, 2)
    hold(state, "job", "n1", mig(0, "1g.5gb", 3))
    # gpu-0 cannot be allocated whole now, and neither can the placements over slice 3.
    whole, migs, gpus = free(state, "n1")
    assert (whole, gpus) == (1, 1)
    assert migs == 2 * MIGS_PER_GPU - 1 - 2  # itself, 2g.10gb at 2, 3g.20gb at 0


def test_a_gpu_allocated_whole_leaves_none_of_its_mig_devices_free() -> None:
    state = state_with(*partitioned_slices("n1", 2))
    hold(state, "job", "n1", "gpu-1")
    assert free(state, "n1") == (1, MIGS_PER_GPU, 1)


def test_freeing_the_last_partition_of_a_gpu_makes_it_whole_again() -> None:
    state = state_with(*partitioned_slices("n1", 1))
    hold(state, "a", "n1", mig(0, "3g.20gb", 0))
    hold(state, "b", "n1", mig(0, "3g.20gb", 4))
    assert free(state, "n1") == (0, 0, 0)
    state.remove_claim("default/a")
    assert free(state, "n1") == (0, 4 + 2 + 1, 0)  # 1g at 0-3, 2g at 0 and 2, 3g at 0
    state.remove_claim("default/b")
    assert free(state, "n1") == (1, MIGS_PER_GPU, 1)


def test_a_claim_for_whole_gpus_counts_only_those_no_mig_device_has_taken() -> None:
    state = state_with(*partitioned_slices("n1", 2))
    hold(state, "job", "n1", mig(0, "1g.5gb", 0))
    two = claim_template_obj("two", device_request("gpu", GPU_CLASS, 2))
    state.upsert_template(parse_resource_claim_template(two))
    demand = state.demand(parse_pod(dra_pod_obj("p", templates={"gpus": "two"})))
    why = ineligibility(demand, gpu_node("n1", 0), state.node("n1"), state.catalog, state.allocated)
    assert why is not None
    assert f"had 1 free {GPU_CLASS} device(s)" in why


# ---- DeviceTaintRules -------------------------------------------------------------------


def xid_rule(name: str = "xid", **selector: str) -> DeviceTaintRule:
    return parse_device_taint_rule(taint_rule_obj(name, None, **selector))


def test_a_rule_tainting_one_gpu_takes_it_from_the_untainted_entries_of_its_node_only() -> None:
    state = state_with(gpu_slice_obj("n1", 2), gpu_slice_obj("n2", 2))
    # The first taint of its kind: every pending pod is derived again, every node bridged.
    assert state.upsert_rule(xid_rule(pool="n1", device="gpu-1")).everything
    assert (free_gpus(state, "n1"), state.entries("n1").get(any_entry(GPU_CLASS))) == (1, 2)
    assert (free_gpus(state, "n2"), state.entries("n2").get(any_entry(GPU_CLASS))) == (2, 2)
    # The same kind of taint on another node's GPU: only that node changes.
    assert state.upsert_rule(xid_rule("xid-n2", pool="n2", device="gpu-0")) == Changes(
        frozenset({"n2"})
    )
    assert free_gpus(state, "n2") == 1


def test_a_rule_selecting_by_driver_only_taints_every_device_of_that_driver() -> None:
    channel_slice = compute_domain_slice_obj("n1")  # pool "n1" as well, of another driver
    state = state_with(gpu_slice_obj("n1", 2), gpu_slice_obj("n2", 2), channel_slice)
    channels = state.entries("n1").get(class_entry(CHANNEL_CLASS))
    state.upsert_rule(xid_rule(driver=GPU_DRIVER))
    assert free_gpus(state, "n1") == free_gpus(state, "n2") == 0
    assert state.entries("n2").get(any_entry(GPU_CLASS)) == 2
    assert state.entries("n1").get(class_entry(CHANNEL_CLASS)) == channels == 1


def test_deleting_a_rule_frees_its_devices_and_asks_for_everything() -> None:
    state = state_with(gpu_slice_obj("n1", 2))
    state.upsert_rule(xid_rule(device="gpu-0"))
    assert free_gpus(state, "n1") == 1
    assert state.remove_rule("xid").everything  # the last taint of its kind is lifted
    assert (free_gpus(state, "n1"), state.entries("n1").get(any_entry(GPU_CLASS))) == (2, 0)
    assert state.remove_rule("xid") == Changes()  # already gone


def test_a_changed_rule_lifts_its_old_taint_and_puts_the_new_one() -> None:
    state = state_with(gpu_slice_obj("n1", 2), gpu_slice_obj("n2", 2))
    state.upsert_rule(xid_rule(pool="n1"))
    changes = state.upsert_rule(xid_rule(pool="n2"))
    assert changes.nodes >= {"n1", "n2"}
    assert (free_gpus(state, "n1"), free_gpus(state, "n2")) == (2, 0)
    assert state.upsert_rule(xid_rule(pool="n2")) == Changes()  # the same rule again


def test_a_rule_taints_the_devices_of_slices_published_after_it() -> None:
    state = state_with()
    state.upsert_rule(xid_rule(device="gpu-0"))
    state.upsert_slice(parse_resource_slice(gpu_slice_obj("n1", 2)))
    assert free_gpus(state, "n1") == 1


def test_a_rule_that_cannot_be_read_is_treated_as_absent() -> None:
    state = state_with(gpu_slice_obj("n1", 2))
    state.upsert_rule(xid_rule(device="gpu-0"))
    reason = "spec.taint.effect: is required (None, NoSchedule or NoExecute)"
    assert state.unreadable("DeviceTaintRule", "xid", reason).everything
    assert free_gpus(state, "n1") == 2
    assert state.rules == {}


def test_the_first_taint_on_a_class_and_its_lifting_each_ask_for_everything() -> None:
    # A class with tainted devices gets an `any` entry every request for it takes from, so
    # every pending pod is derived again, and every node bridged again.
    state = state_with(gpu_slice_obj("n1", 2), gpu_slice_obj("n2", 2))
    generation = state.catalog_generation
    assert state.upsert_slice(parse_resource_slice(tainted(gpu_slice_obj("n1", 2), 1))).everything
    assert state.catalog_generation == generation + 1
    assert (free_gpus(state, "n1"), state.entries("n1").get(any_entry(GPU_CLASS))) == (1, 2)
    assert state.entries("n2").get(any_entry(GPU_CLASS)) == 2
    assert state.upsert_slice(parse_resource_slice(gpu_slice_obj("n1", 2))).everything
    assert (free_gpus(state, "n1"), state.entries("n1").get(any_entry(GPU_CLASS))) == (2, 0)
