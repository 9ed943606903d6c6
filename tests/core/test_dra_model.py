"""DraModel: DRA objects, nodes and pods kept consistent in the cluster model.

The central property: whatever order the watches deliver a gang member's reservation, its
claim's allocation, its assumption and its binding in, the member's devices are counted
exactly once on their node (never twice, never not at all).
"""

from __future__ import annotations

from typing import Any

import pytest

from builders import (
    GPU_DRIVER,
    apply_raw,
    composite_obj,
    dra_pod_obj,
    gpu_node,
    gpu_slice_obj,
    grove_pod_obj,
    grove_podgang_obj,
    nvidia_class_objs,
    pod,
    present,
    upstream_podgroup_obj,
)
from dra_builders import GPU_CLASS, DraWorld
from phalanx.core import eligibility
from phalanx.core.cache import MemberReservation, Reservation
from phalanx.core.dra import parse_device_class
from phalanx.core.dra_demand import shared_out
from phalanx.core.dra_inventory import class_entry
from phalanx.core.groups import upstream
from phalanx.core.inventory import parse_pod
from phalanx.core.model import DRA_GPU, NVIDIA_GPU, PodGroup
from phalanx.core.planner import GangPlanner

# ---- nodes ------------------------------------------------------------------------------


def test_a_node_with_a_gpu_slice_offers_its_dra_gpus_and_carries_its_devices() -> None:
    world = DraWorld("n1")
    info = world.state.node("n1")
    assert info is not None
    node = info.node
    assert node.allocatable[DRA_GPU] == 8
    assert node.allocatable[class_entry(GPU_CLASS)] == 8
    assert node.allocatable.get(NVIDIA_GPU) == 0
    assert node.devices is not None
    assert node.devices.gpus == 8
    assert node.gpu is not None
    assert node.gpu.count == 8


def test_a_slice_published_after_its_node_bridges_the_node_in_the_same_step() -> None:
    world = DraWorld()
    world.add_node("n1")
    before = world.state.topology_generation
    world.slice(gpu_slice_obj("n1"))
    info = world.state.node("n1")
    assert info is not None
    assert info.node.allocatable[DRA_GPU] == 8
    # Eligibility caches keyed on the topology see the new devices.
    assert world.state.topology_generation > before


def test_a_heartbeat_keeps_the_devices_and_the_topology_generation() -> None:
    world = DraWorld("n1")
    before = world.state.topology_generation
    world.add_node("n1")  # the informer hands over the node as the API has it, without DRA
    info = world.state.node("n1")
    assert info is not None
    assert info.node.allocatable[DRA_GPU] == 8
    assert world.state.topology_generation == before


def test_a_node_known_only_from_a_bound_pod_is_not_bridged_into_a_real_one() -> None:
    world = DraWorld()
    world.model.upsert_pod(world.state, pod("elsewhere", 0, node="ghost"))
    world.slice(gpu_slice_obj("ghost"))
    info = world.state.node("ghost")
    assert info is not None
    assert not info.node.ready  # still the phantom that only counts usage
    assert info.node.devices is None


# ---- pods -------------------------------------------------------------------------------


def test_a_pod_asks_for_its_claims_devices_and_carries_its_demand() -> None:
    world = DraWorld("n1")
    world.template("four", 4)
    p = world.pod("w", templates={"gpus": "four"})
    assert p.requests[DRA_GPU] == 4
    assert p.devices is not None
    assert not p.devices.demand.blocker
    info = world.state.node("n1")
    assert info is not None
    assert eligibility.ineligibility(p, info.node) is None
    assert eligibility.ineligibility(p, gpu_node("plugin", 8)) is not None


def test_a_claim_a_pod_names_in_two_entries_is_asked_for_once() -> None:
    # One claim is one allocation, however many of the pod's entries name it.
    world = DraWorld("n1")
    world.claim("team", 4)
    p = world.pod("w", claims={"first": "team", "second": "team"})
    assert p.requests[DRA_GPU] == 4
    assert p.devices is not None
    assert [c.key for c in p.devices.demand.claims] == ["default/team"]


def test_a_pod_whose_claims_the_model_has_not_read_is_eligible_nowhere() -> None:
    world = DraWorld("n1")
    raw = parse_pod(dra_pod_obj("w", templates={"gpus": "four"}))  # e.g. first seen in /filter
    info = world.state.node("n1")
    assert info is not None
    assert eligibility.ineligibility(raw, info.node) == eligibility.CLAIMS_UNKNOWN
    assert eligibility.eligibility_key(raw) != eligibility.eligibility_key(pod("plain", 0))


def test_a_template_change_derives_the_pods_using_it_again() -> None:
    world = DraWorld("n1")
    world.template("gpus", 2)
    p = world.pod("w", templates={"gpus": "gpus"})
    assert p.requests[DRA_GPU] == 2
    [again] = world.template("gpus", 6)
    assert again.uid == p.uid
    model_copy = world.state.pod(p.uid)
    assert model_copy is not None
    assert model_copy.requests[DRA_GPU] == 6


def test_classes_arriving_after_the_pods_derive_every_pod_again() -> None:
    world = DraWorld("n1", classes=False)
    world.template("four", 4)
    p = world.pod("w", templates={"gpus": "four"})
    assert p.devices is not None
    assert "DeviceClass gpu.nvidia.com does not exist" in p.devices.demand.blocker
    for obj in nvidia_class_objs():
        world.model.upsert_class(parse_device_class(obj))
    derived = world.model.settle(world.state)
    assert [d.uid for d in derived] == [p.uid]
    assert derived[0].devices is not None
    assert not derived[0].devices.demand.blocker
    assert derived[0].requests[DRA_GPU] == 4


def test_a_generated_claim_not_seen_yet_keeps_the_pod_waiting_until_it_arrives() -> None:
    world = DraWorld("n1")
    world.template("four", 4)
    p = world.pod("w", templates={"gpus": "four"}, generated={"gpus": "w-gpus-x1"})
    assert p.devices is not None
    assert p.devices.demand.problems == ()  # nothing is wrong ...
    assert p.devices.demand.waiting  # ... it is only not known yet
    [again] = world.claim("w-gpus-x1", 4, owner_pod=p.uid)
    assert again.devices is not None
    assert not again.devices.demand.blocker
    assert again.requests[DRA_GPU] == 4


# ---- who counts a claim: never twice, never not at all ------------------------------------

# kube-scheduler allocates (PreBind) before it asks Phalanx to bind; Phalanx assumes before
# it binds; the claim and pod watches may deliver the allocation and the binding either way.
ORDERS = [
    ("allocate", "assume", "bind"),
    ("assume", "allocate", "bind"),
    ("assume", "bind", "allocate"),
    ("allocate", "bind"),  # bound by someone else: nothing assumed here
    ("bind", "allocate"),
]


@pytest.mark.parametrize("order", ORDERS, ids=[" then ".join(o) for o in ORDERS])
def test_a_reserved_member_s_devices_count_once_whatever_the_order_of_events(
    order: tuple[str, ...],
) -> None:
    world = DraWorld("n1")
    world.template("four", 4)
    member = world.pod("m", templates={"gpus": "four"}, generated={"gpus": "m-gpus"}, group="g")
    world.claim("m-gpus", 4, owner_pod=member.uid)
    member = world.state.pod(member.uid) or member
    world.reserve(member, node="n1")
    assert world.taken("n1") == 4
    for step in order:
        if step == "allocate":
            world.allocate("m-gpus", "n1", range(4), for_pod=member)
        elif step == "assume":
            world.state.assume(member.uid, "n1")
        else:
            world.bind(member, "n1")
        assert world.taken("n1") == 4, f"after {step}"
        assert world.state.overcommitted_nodes() == []
    bound = world.state.pod(member.uid)
    assert bound is not None
    assert bound.node_name == "n1"
    assert bound.requests.get(DRA_GPU) == 0  # the node counts the allocated claim now


def test_a_claim_allocated_for_a_pod_in_no_reservation_is_counted_by_its_node_at_once() -> None:
    world = DraWorld("n1")
    world.template("four", 4)
    single = world.pod("s", templates={"gpus": "four"}, generated={"gpus": "s-gpus"})
    world.claim("s-gpus", 4, owner_pod=single.uid)
    [derived] = world.allocate("s-gpus", "n1", range(4), for_pod=single)
    assert derived.requests.get(DRA_GPU) == 0
    info = world.state.node("n1")
    assert info is not None
    assert info.node.allocatable[DRA_GPU] == 4


def test_a_carrying_member_that_goes_away_gives_the_claim_back_to_its_node() -> None:
    world = DraWorld("n1")
    world.template("four", 4)
    member = world.pod("m", templates={"gpus": "four"}, generated={"gpus": "m-gpus"}, group="g")
    world.claim("m-gpus", 4, owner_pod=member.uid)
    world.reserve(world.state.pod(member.uid) or member, node="n1")
    world.allocate("m-gpus", "n1", range(4), for_pod=member)
    assert world.model.dra.carried("default/m-gpus")
    world.model.remove_pod(world.state, member.uid)
    assert not world.model.dra.carried("default/m-gpus")
    info = world.state.node("n1")
    assert info is not None
    assert info.node.allocatable[DRA_GPU] == 4


def test_a_claim_two_reserved_members_share_counts_once_until_both_are_bound() -> None:
    world = DraWorld("n1")
    team = world.claim("team", 8)
    assert team == []
    a = world.pod("a", claims={"shared": "team"}, group="g")
    b = world.pod("b", claims={"shared": "team"}, group="g")
    # The planner charges a shared claim to one member (dra_demand.shared_out).
    world.state.reserve(
        Reservation(
            "default/g",
            (
                MemberReservation(a.uid, a.key, "n1", a.requests),
                MemberReservation(b.uid, b.key, "n1", b.requests - b.requests),
            ),
            reserved_at=0,
            expires_at=60,
        )
    )
    assert world.taken("n1") == 8
    held = [(GPU_DRIVER, "n1", f"gpu-{i}") for i in range(8)]
    world.claim("team", 8, allocated=held, node="n1", reserved_for=[a.uid, b.uid])
    assert world.taken("n1") == 8
    world.bind(a, "n1")
    # b still holds its (empty) place: the claim stays carried, a's requests count it.
    assert world.taken("n1") == 8
    world.bind(b, "n1")
    assert world.taken("n1") == 8
    assert not world.model.dra.carried("default/team")


def test_a_podgroup_claim_its_reserved_members_carry_counts_once_until_all_are_bound() -> None:
    world = DraWorld("n1")
    world.template("t", 8)
    world.claim("team-cd-x", 8, owner_pod_group="team")
    # Members of upstream PodGroup team, whose template entry "cd" the controller turned
    # into one claim for the whole gang (1.37 DRAWorkloadResourceClaims).
    members = [
        world.pod(
            name, templates={"cd": "t"}, generated={"cd": "team-cd-x"}, scheduling_group="team"
        )
        for name in ("a", "b")
    ]
    shared, together = shared_out(members)
    assert together == (frozenset(p.uid for p in members),)
    assert [p.requests.get(DRA_GPU) for p in shared] == [8, 0]
    group = members[0].group
    assert group is not None
    world.state.reserve(
        Reservation(
            group.key,
            tuple(MemberReservation(p.uid, p.key, "n1", p.requests) for p in shared),
            reserved_at=0,
            expires_at=60,
        )
    )
    assert world.taken("n1") == 8
    held = [(GPU_DRIVER, "n1", f"gpu-{i}") for i in range(8)]
    # kube-scheduler allocates it once and reserves it for the PodGroup, not for each pod.
    world.claim(
        "team-cd-x",
        8,
        allocated=held,
        node="n1",
        owner_pod_group="team",
        reserved_for_group="team",
    )
    assert world.model.dra.carried("default/team-cd-x")
    assert world.taken("n1") == 8
    world.bind(members[0], "n1")
    assert world.taken("n1") == 8
    world.bind(members[1], "n1")
    assert world.taken("n1") == 8
    assert not world.model.dra.carried("default/team-cd-x")


def team_pod_group(statuses: list[dict[str, str]] | None = None) -> PodGroup:
    """Upstream PodGroup team, whose entry "cd" asks template t for the whole gang."""
    obj = upstream_podgroup_obj("team", 2)
    obj["spec"]["resourceClaims"] = [{"name": "cd", "resourceClaimTemplateName": "t"}]
    if statuses is not None:
        obj["status"] = {"resourceClaimStatuses": statuses}
    return upstream.parse_pod_group(obj)


def test_a_podgroup_known_after_its_members_makes_their_template_entry_the_gangs() -> None:
    world = DraWorld("n1")
    world.template("t", 8)
    a = world.pod("a", templates={"cd": "t"}, scheduling_group="team")
    world.pod("b", templates={"cd": "t"}, scheduling_group="team")
    assert a.devices is not None
    assert [c.key for c in a.devices.demand.claims] == ["default/a#cd"]  # its own, for now

    derived = world.model.upsert_group(world.state, team_pod_group())
    assert {p.name: [c.key for c in p.devices.demand.claims] for p in derived if p.devices} == {
        "a": ["default/team#cd"],
        "b": ["default/team#cd"],
    }
    # Phalanx writing the PodGroup's condition changes nothing of its claims: nothing derived.
    assert world.model.upsert_group(world.state, team_pod_group()) == []

    # The controller names the gang's claim in the PodGroup's status before the members':
    # the members use it, and follow it (allocated, it pins them to its node).
    world.claim("team-cd-x", 8, owner_pod_group="team")
    world.model.upsert_group(
        world.state, team_pod_group([{"name": "cd", "resourceClaimName": "team-cd-x"}])
    )
    held = [(GPU_DRIVER, "n1", f"gpu-{i}") for i in range(8)]
    derived = world.claim(
        "team-cd-x", 8, allocated=held, node="n1", owner_pod_group="team", reserved_for_group="team"
    )
    assert sorted(p.name for p in derived) == ["a", "b"]
    for p in derived:
        assert p.devices is not None
        [claim] = p.devices.demand.claims
        assert (claim.key, claim.allocated) == ("default/team-cd-x", True)


# ---- pods filed under another gang than the one they name ---------------------------------


def gang_objects(world: DraWorld, *objects: dict[str, Any]) -> None:
    """Gang objects into the world's model, as the sources apply them."""
    apply_raw(world.state, *objects)


def test_a_composite_member_derived_again_still_names_its_own_pod_group() -> None:
    # The model files the member under the composite; deriving its demand again (its
    # template arrived after it) must not make it forget the PodGroup it names, or it
    # stays the composite's when the composite no longer gangs its PodGroups.
    world = DraWorld("n1")
    gang_objects(world, composite_obj("job", 1), upstream_podgroup_obj("head", 1, parent="job"))
    member = world.pod("head-0", templates={"gpu": "one"}, scheduling_group="head")
    world.template("one", 1)
    filed = present(world.state.pod(member.uid))
    assert present(filed.group).key == "composite:default/job"
    assert present(world.state.declared_group(filed)).key == "upstream:default/head"
    assert world.state.gangs_of("upstream:default/head") == ["composite:default/job"]

    gang_objects(world, composite_obj("job", None))  # the basic policy: each PodGroup a gang
    assert present(present(world.state.pod(member.uid)).group).key == "upstream:default/head"


def test_a_grove_member_derived_again_is_still_filed_by_its_pod_gang_s_references() -> None:
    # A member without its podgroup's label takes the podgroup that lists it, and leaves it
    # when the PodGang stops listing it, however often its demand was derived in between.
    world = DraWorld("n1")
    gang_objects(world, grove_podgang_obj("gg", {"gw": 1}))
    obj = grove_pod_obj("gw-0", "gg")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    world.model.upsert_pod(world.state, parse_pod(obj))
    world.template("one", 1)
    uid = obj["metadata"]["uid"]
    assert present(world.state.pod(uid)).task == "gw"

    unlisted = grove_podgang_obj("gg", {"gw": 1})
    unlisted["spec"]["podgroups"][0]["podReferences"] = []
    gang_objects(world, unlisted)
    assert present(world.state.pod(uid)).task == ""


def test_preemption_takes_an_all_pod_group_whole_after_its_members_claims_arrive() -> None:
    # After a restart the claims of running members may be listed after the members: the
    # members, derived again, are still their PodGroup's, and so one of its `disruptionMode:
    # all` unit is never preempted alone.
    world = DraWorld("n1", "n2")
    gang_objects(
        world,
        composite_obj("ray", 1),
        upstream_podgroup_obj("head", 1, parent="ray"),
        upstream_podgroup_obj("workers", 2, parent="ray", disruption_mode="all"),
    )
    members = [("head-0", "n1", "head"), ("w-0", "n1", "workers")]
    members += [("w-1", "n2", "workers"), ("w-2", "n2", "workers")]
    for name, node, group in members:
        world.pod(
            name,
            claims={"gpu": f"{name}-gpu"},
            node=node,
            phase="Running",
            uid=name,
            scheduling_group=group,
        )
    for name, _, _ in members:
        world.claim(f"{name}-gpu", 1)
    planner = GangPlanner(world.state)
    # Two workers would still make minCount 2, but the PodGroup goes only whole.
    assert planner.preempt({"n2": ["w-2"]}).kept == {}
    assert planner.preempt({"n1": ["head-0"]}).kept == {"n1": ["head-0"]}


def test_a_reserved_composite_member_updated_after_its_claim_is_allocated_counts_it_once() -> None:
    # Its reservation is the composite's, while the pod as the API reports it names its
    # PodGroup: looked up under that, the member seemed unreserved, stopped carrying its
    # allocated claim, and its node counted the devices a second time.
    world = DraWorld("n1")
    gang_objects(world, composite_obj("job", 1), upstream_podgroup_obj("head", 1, parent="job"))
    world.template("four", 4)
    as_created: dict[str, Any] = {
        "templates": {"gpus": "four"},
        "generated": {"gpus": "m-gpus"},
        "scheduling_group": "head",
        "uid": "m",
    }
    member = world.pod("m", **as_created)
    world.claim("m-gpus", 4, owner_pod=member.uid)
    filed = present(world.state.pod(member.uid))
    world.state.reserve(
        Reservation(
            "composite:default/job",
            (MemberReservation(filed.uid, filed.key, "n1", filed.requests),),
            reserved_at=0,
            expires_at=60,
        )
    )
    assert world.taken("n1") == 4
    world.allocate("m-gpus", "n1", range(4), for_pod=member)
    assert world.taken("n1") == 4
    world.pod("m", labels={"touched": "yes"}, **as_created)  # any update the pod watch brings
    assert world.taken("n1") == 4
    assert world.state.overcommitted_nodes() == []
