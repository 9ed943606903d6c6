"""DRA demand and the bridge: claims become requests the gang transaction plans unchanged.

A cluster of 8-H100 nodes, A100 nodes with MIG devices, a ComputeDomain clique, and a
device-plugin node: gangs over DRA devices are reserved whole, reserved devices are
invisible to others, a shared claim counts once, and a DRA member never lands where its
devices are not.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (
    GPU_DRIVER,
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
    pod,
)
from dra_builders import TOLERATES_XID, partitioned_slices, tainted
from phalanx.core.cache import ClusterState, MemberReservation, Reservation
from phalanx.core.dra import (
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.dra_demand import (
    Exactness,
    PodDemand,
    gang_demand,
    ineligibility,
    node_with_devices,
    pod_with_demand,
    shared_out,
)
from phalanx.core.dra_inventory import (
    WHOLE,
    WHOLE_PREFIX,
    DeviceCatalog,
    any_entry,
    class_entry,
    counter_entry,
    whole_entry,
)
from phalanx.core.dra_state import DraState
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.inventory import parse_placement, parse_pod
from phalanx.core.model import DRA_GPU, NVIDIA_GPU, Node, Pod, PodClaimRef, Resources

MI = 2**20
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
A = f"device.attributes['{GPU_DRIVER}']"
C = f"device.capacity['{GPU_DRIVER}']"


class Cluster:
    """Slices, classes, claims and templates in a `DraState`, and the model it bridges to."""

    def __init__(
        self, *slices: dict[str, Any], classes: list[dict[str, Any]] | None = None
    ) -> None:
        self.state = DraState()
        for o in classes if classes is not None else nvidia_class_objs():
            self.state.upsert_class(parse_device_class(o))
        for o in slices:
            self.state.upsert_slice(parse_resource_slice(o))

    @property
    def catalog(self) -> DeviceCatalog:
        return self.state.catalog

    def template(self, name: str, *requests: dict[str, Any]) -> str:
        self.state.upsert_template(
            parse_resource_claim_template(claim_template_obj(name, *requests))
        )
        return name

    def claim(self, name: str, *requests: dict[str, Any], **kw: Any) -> str:
        self.state.upsert_claim(parse_resource_claim(claim_obj(name, *requests, **kw)))
        return name

    def pod(self, name: str, **kw: Any) -> Pod:
        return parse_pod(dra_pod_obj(name, **kw))

    def demand(self, p: Pod) -> PodDemand:
        return self.state.demand(p)

    def node(self, name: str, *, base: Node | None = None) -> Node:
        return node_with_devices(
            base or gpu_node(name, 0), self.state.node(name), self.catalog, self.state.allocated
        )

    def why_not(self, p: Pod, node: str) -> str | None:
        return ineligibility(self.demand(p), self.node(node), self.state.node(node), self.catalog)


def gpus(count: int) -> Resources:
    """What a request for `count` whole GPUs takes: the class, the GPUs, and the class's
    whole (so that an allocationMode All request is never planned beside it)."""
    return Resources({class_entry(GPU_CLASS): count, DRA_GPU: count, whole_entry(GPU_CLASS): count})


def h100_cluster(nodes: int = 2) -> Cluster:
    return Cluster(*(gpu_slice_obj(f"n{i}") for i in range(1, nodes + 1)))


# ---- one pod's demand ---------------------------------------------------------------------------


def test_a_template_asking_for_gpus_by_count_is_exact() -> None:
    cluster = h100_cluster()
    cluster.template("two", device_request("gpu", GPU_CLASS, 2))
    demand = cluster.demand(cluster.pod("w", templates={"gpus": "two"}))
    [claim] = demand.claims
    assert claim.key == "default/w#gpus"  # no claim generated yet: the template speaks
    [request] = claim.requests
    assert request.exactness is Exactness.EXACT
    assert demand.requests() == gpus(2)
    assert demand.requests().gpus() == 2
    assert demand.notes == ()


def test_a_selector_one_device_shape_satisfies_takes_that_shape() -> None:
    cluster = Cluster(
        gpu_slice_obj("h1"),
        mig_slice_obj("a1", {}, whole=8),  # eight A100 40GB
    )
    # An "80GB" H100 reports 81559Mi, a little under 80Gi.
    big = f"{C}.memory.compareTo(quantity('79Gi')) >= 0"
    cluster.template("big", device_request("gpu", GPU_CLASS, 1, big))
    p = cluster.pod("w", templates={"gpus": "big"})
    [request] = cluster.demand(p).claims[0].requests
    assert request.exactness is Exactness.EXACT
    [shape_name] = [k for k in request.takes if "~" in k]
    assert cluster.node("h1").allocatable[shape_name] == 8
    assert shape_name not in cluster.node("a1").allocatable
    assert cluster.why_not(p, "a1") == (
        "had 0 gpu.nvidia.com device(s) for claim default/w#gpus request gpu, it needs 1"
    )
    assert cluster.why_not(p, "h1") is None


def test_a_selector_several_shapes_satisfy_is_checked_per_node() -> None:
    cluster = Cluster(gpu_slice_obj("h1"), mig_slice_obj("a1", {}, whole=2))
    cluster.template(
        "forty", device_request("gpu", GPU_CLASS, 4, f"{C}.memory.compareTo(quantity('40Gi')) >= 0")
    )
    p = cluster.pod("w", templates={"gpus": "forty"})
    demand = cluster.demand(p)
    [request] = demand.claims[0].requests
    assert request.exactness is Exactness.PER_NODE
    assert request.takes == gpus(4)
    assert "selectors match 2 device shapes" in demand.notes[0]
    assert cluster.why_not(p, "a1") is not None  # only two A100s there
    assert cluster.why_not(p, "h1") is None


def test_mig_devices_of_partitionable_gpus_are_not_limited_to_one_per_whole_gpu() -> None:
    # With dynamic MIG a GPU counts once in dra.phalanx.io/gpu, as itself; its MIG devices
    # do not count there, so a request for them must not take from it either.
    cluster = Cluster(*partitioned_slices("p1", 1))
    cluster.template("seven", device_request("mig", MIG_CLASS, 7, f"{A}.profile == '1g.5gb'"))
    [request] = cluster.demand(cluster.pod("w", templates={"mig": "seven"})).claims[0].requests
    assert DRA_GPU not in request.takes
    assert request.takes.fits_in(cluster.node("p1").allocatable)


def test_a_mig_profile_request_takes_that_profile() -> None:
    cluster = Cluster(mig_slice_obj("m1", {0: ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]}))
    cluster.template("small", device_request("mig", MIG_CLASS, 2, f"{A}.profile == '1g.5gb'"))
    p = cluster.pod("w", templates={"mig": "small"})
    [request] = cluster.demand(p).claims[0].requests
    assert request.exactness is Exactness.EXACT
    node = cluster.node("m1")
    assert request.takes.fits_in(node.allocatable)
    assert not request.takes.scaled(2).fits_in(node.allocatable)  # only two 1g.5gb here


UNEVALUATED = [
    (f"{A}.productName.matches('H100')", "matches()"),
    (f"{A}.uuid == 'GPU-1234'", "gpu.nvidia.com/uuid, which Phalanx does not keep"),
]


@pytest.mark.parametrize(("selector", "said"), UNEVALUATED, ids=["unsupported", "uuid"])
def test_a_selector_phalanx_cannot_evaluate_falls_back_to_counting_and_says_so(
    selector: str, said: str
) -> None:
    cluster = h100_cluster()
    cluster.template("odd", device_request("gpu", GPU_CLASS, 2, selector))
    p = cluster.pod("w", templates={"gpus": "odd"})
    demand = cluster.demand(p)
    [request] = demand.claims[0].requests
    assert request.exactness is Exactness.COUNT_ONLY
    assert request.takes == gpus(2)
    assert demand.problems == ()
    [note] = demand.notes
    assert said in note
    assert "planned by device count only" in note
    assert cluster.why_not(p, "n1") is None


def test_a_request_evaluated_in_part_is_still_checked_per_node_on_what_is_evaluated() -> None:
    cluster = Cluster(
        gpu_slice_obj("h"),
        gpu_slice_obj("a", product="NVIDIA A100-SXM4-80GB", memory="81920Mi"),
    )
    h100 = f"{A}.productName == 'NVIDIA H100 80GB HBM3'"
    cluster.template(
        "odd",
        device_request("gpu", GPU_CLASS, 2, f"{A}.productName.matches('H1.*')", h100),
        device_request("more", GPU_CLASS, 2, f"{h100} && {A}.productName.matches('H1.*')"),
    )
    p = cluster.pod("w", templates={"gpus": "odd"})
    requests = cluster.demand(p).claims[0].requests
    assert [r.exactness for r in requests] == [Exactness.COUNT_ONLY] * 2
    assert cluster.why_not(p, "h") is None
    why = cluster.why_not(p, "a")
    assert why is not None
    assert "had 0 gpu.nvidia.com device(s)" in why


BAD_INPUT = [
    (
        "unknown class",
        device_request("gpu", "tpu.example.com", 1),
        "DeviceClass tpu.example.com does not exist",
    ),
    (
        "selector does not parse",
        device_request("gpu", GPU_CLASS, 1, f"{A}.type =="),
        "CEL expression",
    ),
]


@pytest.mark.parametrize(("case", "request_obj", "said"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_in_a_claim_is_a_problem_that_names_it(
    case: str, request_obj: dict[str, Any], said: str
) -> None:
    cluster = h100_cluster()
    cluster.template("bad", request_obj)
    p = cluster.pod("w", templates={"gpus": "bad"})
    demand = cluster.demand(p)
    assert len(demand.problems) == 1
    assert said in demand.problems[0]
    assert "default/w#gpus" in demand.problems[0]
    assert cluster.why_not(p, "n1") == demand.problems[0]


def test_a_claim_for_a_broken_class_is_a_problem() -> None:
    cluster = Cluster(
        gpu_slice_obj("n1"), classes=[device_class_obj(GPU_CLASS, "device.driver ==")]
    )
    cluster.template("t", device_request())
    [problem] = cluster.demand(cluster.pod("w", templates={"g": "t"})).problems
    assert "DeviceClass gpu.nvidia.com is invalid" in problem


def test_missing_claims_and_templates_are_problems() -> None:
    cluster = h100_cluster()
    demand = cluster.demand(cluster.pod("w", templates={"a": "nowhere"}, claims={"b": "nothing"}))
    assert demand.problems == (
        "ResourceClaimTemplate default/nowhere does not exist",
        "ResourceClaim default/nothing does not exist (yet)",
    )


def test_a_generated_claim_made_for_another_pod_is_a_problem() -> None:
    cluster = h100_cluster()
    cluster.template("t", device_request())
    cluster.claim("w-g-abc", owner_pod="someone-else")
    p = cluster.pod("w", templates={"g": "t"}, generated={"g": "w-g-abc"})
    [problem] = cluster.demand(p).problems
    assert problem == (
        "ResourceClaim default/w-g-abc was not created for pod default/w: "
        "controlled by Pod p, not by the pod"
    )


# ---- claims of an upstream PodGroup (1.37 DRAWorkloadResourceClaims) ----------------------


def gang_pod(cluster: Cluster, name: str, **kw: Any) -> Pod:
    """A member of PodGroup `team` whose entry `cd` matches the PodGroup's template entry;
    the resourceclaim controller named the PodGroup's claim `team-cd-x` in its status."""
    return cluster.pod(
        name, templates={"cd": "t"}, generated={"cd": "team-cd-x"}, scheduling_group="team", **kw
    )


def test_a_claim_its_podgroup_controls_serves_the_pod_as_shared() -> None:
    cluster = h100_cluster()
    cluster.template("t", device_request("gpu", GPU_CLASS, 2))
    cluster.claim("team-cd-x", device_request("gpu", GPU_CLASS, 2), owner_pod_group="team")
    demand = cluster.demand(gang_pod(cluster, "m0"))
    assert demand.problems == ()
    [claim] = demand.claims
    assert claim.key == "default/team-cd-x"
    assert claim.shareable
    assert demand.requests() == gpus(2)


REFUSED_OWNERS = [
    (
        "another PodGroup",
        {"owner_pod_group": "other"},
        "team",
        "controlled by PodGroup.scheduling.k8s.io other, not by the pod or its PodGroup team",
    ),
    ("no controller", {}, "team", "controlled by nothing, not by the pod or its PodGroup team"),
    (
        "a PodGroup the pod does not name",
        {"owner_pod_group": "team"},
        None,
        "controlled by PodGroup.scheduling.k8s.io team, not by the pod",
    ),
    (
        "another pod",
        {"owner_pod": "uid-default-m1"},
        "team",
        "controlled by Pod p, not by the pod or its PodGroup team",
    ),
]


@pytest.mark.parametrize(
    ("case", "owner", "group", "said"), REFUSED_OWNERS, ids=[r[0] for r in REFUSED_OWNERS]
)
def test_a_generated_claim_neither_the_pod_nor_its_podgroup_controls_is_refused(
    case: str, owner: dict[str, str], group: str | None, said: str
) -> None:
    cluster = h100_cluster()
    cluster.template("t", device_request())
    cluster.claim("team-cd-x", **owner)
    p = cluster.pod(
        "m0", templates={"cd": "t"}, generated={"cd": "team-cd-x"}, scheduling_group=group
    )
    [problem] = cluster.demand(p).problems
    assert problem == f"ResourceClaim default/team-cd-x was not created for pod default/m0: {said}"
    assert cluster.why_not(p, "n1") == problem


def test_a_podgroup_of_another_api_group_controls_no_claim_of_its_members() -> None:
    cluster = h100_cluster()
    cluster.template("t", device_request())
    obj = claim_obj("team-cd-x", device_request(), owner_pod_group="team")
    obj["metadata"]["ownerReferences"][0]["apiVersion"] = "scheduling.x-k8s.io/v1alpha1"
    cluster.state.upsert_claim(parse_resource_claim(obj))
    [problem] = cluster.demand(gang_pod(cluster, "m0")).problems
    assert "controlled by PodGroup.scheduling.x-k8s.io team" in problem


def test_a_podgroup_claim_is_charged_to_one_member_and_its_members_share_a_node() -> None:
    cluster = h100_cluster(2)
    cluster.template("t", device_request("gpu", GPU_CLASS, 8))
    cluster.claim("team-cd-x", device_request("gpu", GPU_CLASS, 8), owner_pod_group="team")
    members = [gang_pod(cluster, f"m{i}") for i in range(3)]
    gang = gang_demand([(p.key, cluster.demand(p)) for p in members])
    assert gang.requests == {
        "default/m0": gpus(8),
        "default/m1": Resources(),
        "default/m2": Resources(),
    }
    assert gang.together == (frozenset(p.key for p in members),)
    # Charged per member, the gang would ask 24 GPUs of two 8-GPU nodes: unplaceable.
    shared, together = shared_out([cluster.state.bridge_pod(p) for p in members])
    state = ClusterState()
    for n in ("n1", "n2"):
        state.upsert_node(cluster.node(n))
    spec = GangSpec(
        key="default/team", placement=parse_placement("spread"), members=shared, together=together
    )
    placed = place_gang(state.snapshot(), spec)
    assert isinstance(placed, Placed)
    assert set(placed.assignment.values()) in ({"n1"}, {"n2"})


TEAM_TEMPLATE = (PodClaimRef("cd", template="t"),)  # PodGroup team's claim, not made yet


def test_before_its_claim_is_made_a_podgroup_entry_is_counted_once_from_the_template() -> None:
    cluster = h100_cluster(2)
    cluster.template("t", device_request("gpu", GPU_CLASS, 8))
    members = [
        cluster.pod(f"m{i}", templates={"cd": "t"}, scheduling_group="team") for i in range(3)
    ]
    demands = [cluster.state.demand(p, TEAM_TEMPLATE) for p in members]
    assert {(c.key, c.shareable) for d in demands for c in d.claims} == {("default/team#cd", True)}
    gang = gang_demand([(p.key, d) for p, d in zip(members, demands, strict=True)])
    assert gang.requests == {
        "default/m0": gpus(8),
        "default/m1": Resources(),
        "default/m2": Resources(),
    }
    assert gang.together == (frozenset(p.key for p in members),)


def test_an_entry_unlike_the_podgroups_is_the_members_own() -> None:
    cluster = h100_cluster(2)
    cluster.template("t", device_request("gpu", GPU_CLASS, 1))
    cluster.template("other", device_request("gpu", GPU_CLASS, 1))
    p = cluster.pod("m0", templates={"cd": "other"}, scheduling_group="team")
    [claim] = cluster.state.demand(p, TEAM_TEMPLATE).claims
    assert (claim.key, claim.shareable) == ("default/m0#cd", False)
    # Nor is a pod's entry the PodGroup's when the pod names no PodGroup.
    alone = cluster.pod("m1", templates={"cd": "t"})
    [claim] = cluster.state.demand(alone, TEAM_TEMPLATE).claims
    assert (claim.key, claim.shareable) == ("default/m1#cd", False)


def test_the_claim_the_podgroups_status_names_serves_a_member_whose_status_does_not_yet() -> None:
    cluster = h100_cluster(2)
    cluster.template("t", device_request("gpu", GPU_CLASS, 8))
    held = [(GPU_DRIVER, "n1", f"gpu-{i}") for i in range(8)]
    cluster.claim(
        "team-cd-x",
        device_request("gpu", GPU_CLASS, 8),
        allocated=held,
        node="n1",
        owner_pod_group="team",
    )
    p = cluster.pod("m0", templates={"cd": "t"}, scheduling_group="team")
    group_claims = (PodClaimRef("cd", claim="team-cd-x", template="t"),)
    demand = cluster.state.demand(p, group_claims)
    assert [(c.key, c.allocated) for c in demand.claims] == [("default/team-cd-x", True)]
    assert demand.requests() == Resources()
    # No claim was needed for the entry: the member asks nothing for it.
    none = cluster.state.demand(p, (PodClaimRef("cd", template="t", not_needed=True),))
    assert none.claims == ()


def test_an_allocated_podgroup_claim_reserved_for_the_podgroup_holds_its_devices_once() -> None:
    cluster = h100_cluster(2)
    held = [(GPU_DRIVER, "n1", f"gpu-{i}") for i in range(8)]
    cluster.claim(
        "team-cd-x",
        device_request("gpu", GPU_CLASS, 8),
        allocated=held,
        node="n1",
        owner_pod_group="team",
        reserved_for_group="team",
    )
    members = [gang_pod(cluster, f"m{i}") for i in range(3)]
    for p in members:
        demand = cluster.demand(p)
        assert demand.problems == ()
        assert demand.claims[0].allocated
        assert demand.requests() == Resources()
        assert cluster.why_not(p, "n1") is None
        assert cluster.why_not(p, "n2") == (
            "could not reach the devices allocated to claim default/team-cd-x"
        )
    # In use: its devices are not free on its node, and they are counted there only.
    assert cluster.node("n1").allocatable.get(class_entry(GPU_CLASS)) == 0
    assert cluster.node("n2").allocatable[class_entry(GPU_CLASS)] == 8
    assert gang_demand([(p.key, cluster.demand(p)) for p in members]).together == ()


def test_an_allocated_claim_asks_nothing_more_and_pins_the_node() -> None:
    cluster = h100_cluster()
    cluster.claim(
        "w-g-abc", allocated=[(GPU_DRIVER, "n1", "gpu-0")], node="n1", owner_pod="uid-default-w"
    )
    p = cluster.pod("w", templates={"g": "t"}, generated={"g": "w-g-abc"})
    demand = cluster.demand(p)
    assert demand.claims[0].allocated
    assert demand.requests() == Resources()
    assert cluster.node("n1").allocatable[class_entry(GPU_CLASS)] == 7  # the node counts it
    assert cluster.why_not(p, "n1") is None
    assert (
        cluster.why_not(p, "n2") == "could not reach the devices allocated to claim default/w-g-abc"
    )


def test_an_allocated_claim_stays_usable_after_its_class_is_gone() -> None:
    cluster = Cluster(gpu_slice_obj("n1"), classes=[])
    cluster.claim("held", device_request("gpu", "retired.example.com", 1), allocated=[], node="n1")
    demand = cluster.demand(cluster.pod("w", claims={"c": "held"}))
    assert demand.problems == ()
    assert demand.claims[0].allocated


def test_admin_access_takes_no_device_but_needs_one_in_either_mode() -> None:
    cluster = h100_cluster()
    watch_one = device_request("one", GPU_CLASS, 1)
    watch_all = device_request("all", GPU_CLASS, None, mode="All")
    for request in (watch_one, watch_all):
        request["exactly"]["adminAccess"] = True
    cluster.template("t", watch_one, watch_all)
    demand = cluster.demand(cluster.pod("w", templates={"g": "t"}))
    assert demand.requests() == Resources()
    assert [r.count for r in demand.claims[0].requests] == [1, 1]
    assert all(r.exactness is Exactness.COUNT_ONLY for r in demand.claims[0].requests)
    assert cluster.why_not(cluster.pod("w", templates={"g": "t"}), "n1") is None


def test_all_mode_takes_its_classs_devices_whole_and_needs_one_that_matches() -> None:
    cluster = h100_cluster()
    cluster.template("every", device_request("all", GPU_CLASS, None, mode="All"))
    cluster.template(
        "a100s", device_request("all", GPU_CLASS, None, f"{A}.productName == 'A100'", mode="All")
    )
    every = cluster.pod("w", templates={"g": "every"})
    [claim] = cluster.demand(every).claims
    [request] = claim.requests
    assert request.takes == Resources({whole_entry(GPU_CLASS): WHOLE})
    assert request.exactness is Exactness.PER_NODE
    assert "every device of its class" in request.note
    assert cluster.why_not(every, "n1") is None
    assert cluster.why_not(cluster.pod("w", templates={"g": "a100s"}), "n1") == (
        "had 0 gpu.nvidia.com device(s) for claim default/w#g request all, it needs 1"
    )


def test_a_request_by_count_draws_its_count_from_the_wholes_it_could_take_from() -> None:
    # So that an All request never fits beside a request that could get one of its devices
    # (nor it beside one): its own class, and a class sharing a device shape with it.
    h100s = device_class_obj("h100.example.com", f"{A}.productName.startsWith('NVIDIA H100')")
    cluster = Cluster(
        gpu_slice_obj("n1"),
        compute_domain_slice_obj("n1"),
        classes=[*nvidia_class_objs(), h100s],
    )
    cluster.template(
        "t", device_request("gpu", GPU_CLASS, 2), device_request("channel", CHANNEL_CLASS, 1)
    )
    requests = cluster.demand(cluster.pod("w", templates={"g": "t"})).requests()
    assert {k: v for k, v in requests.items() if k.startswith(WHOLE_PREFIX)} == {
        whole_entry(GPU_CLASS): 2,
        whole_entry("h100.example.com"): 2,
        whole_entry(CHANNEL_CLASS): 1,
    }


def test_partitions_and_their_whole_gpu_draw_from_each_others_wholes() -> None:
    # A MIG device of a partitionable GPU shares the GPU's counters: All GPUs must not be
    # planned beside it.
    cluster = Cluster(*partitioned_slices("p1", 1))
    cluster.template("mig", device_request("mig", MIG_CLASS, 1))
    requests = cluster.demand(cluster.pod("w", templates={"g": "mig"})).requests()
    assert requests[whole_entry(GPU_CLASS)] == requests[whole_entry(MIG_CLASS)] == 1


def test_an_admin_access_request_for_one_gpu_by_uuid_is_not_refused_everywhere() -> None:
    # Phalanx does not keep uuids, so it cannot check that selector on any node.
    cluster = h100_cluster()
    admin = device_request("watch", GPU_CLASS, 1, f"{A}.uuid == 'GPU-n1-0000'")
    admin["exactly"]["adminAccess"] = True
    cluster.template("t", admin)
    assert cluster.why_not(cluster.pod("w", templates={"g": "t"}), "n1") is None


def test_first_available_plans_the_first_choice_and_says_so() -> None:
    cluster = h100_cluster()
    cluster.template(
        "t",
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "two", "deviceClassName": GPU_CLASS, "count": 2},
                {"name": "one", "deviceClassName": GPU_CLASS, "count": 1},
            ],
        },
    )
    demand = cluster.demand(cluster.pod("w", templates={"g": "t"}))
    [request] = demand.claims[0].requests
    assert (request.request, request.count) == ("gpu/two", 2)
    assert request.exactness is Exactness.PER_NODE
    assert "firstAvailable" in demand.notes[0]


@pytest.mark.parametrize(
    "first",
    [
        {
            "name": "h100",
            "deviceClassName": GPU_CLASS,
            "selectors": [{"cel": {"expression": f"{A}.productName == 'NVIDIA H100 80GB HBM3'"}}],
        },
        {"name": "mig", "deviceClassName": "mig.nvidia.com"},
    ],
    ids=["a product the cluster lacks", "a class with no devices"],
)
def test_first_available_plans_the_first_choice_the_cluster_has_devices_for(
    first: dict[str, Any],
) -> None:
    cluster = Cluster(gpu_slice_obj("a", product="NVIDIA A100-SXM4-80GB", memory="81920Mi"))
    fallback = {"name": "any", "deviceClassName": GPU_CLASS, "count": 2}
    cluster.template("t", {"name": "gpu", "firstAvailable": [first, fallback]})
    p = cluster.pod("w", templates={"g": "t"})
    [request] = cluster.demand(p).claims[0].requests
    assert (request.request, request.count) == ("gpu/any", 2)
    assert cluster.why_not(p, "a") is None


def test_first_available_with_a_choice_of_an_unknown_class_reports_it() -> None:
    cluster = Cluster(gpu_slice_obj("a", product="NVIDIA A100-SXM4-80GB", memory="81920Mi"))
    choices = [
        {"name": "mig", "deviceClassName": "mig.nvidia.com"},
        {"name": "odd", "deviceClassName": "tpu.example.com"},
        {"name": "any", "deviceClassName": GPU_CLASS},
    ]
    cluster.template("t", {"name": "gpu", "firstAvailable": choices})
    demand = cluster.demand(cluster.pod("w", templates={"g": "t"}))
    assert demand.problems == (
        "claim default/w#g request gpu/odd: DeviceClass tpu.example.com does not exist",
    )


def test_a_compute_domain_channel_is_one_per_node() -> None:
    cluster = Cluster(gpu_slice_obj("n1"), compute_domain_slice_obj("n1", channels=8))
    cluster.template(
        "cd", device_request("channel", CHANNEL_CLASS, 1), device_request("gpu", GPU_CLASS, 4)
    )
    demand = cluster.demand(cluster.pod("w", templates={"cd": "cd"}))
    node = cluster.node("n1")
    assert demand.requests().fits_in(node.allocatable)
    assert not demand.requests().scaled(2).fits_in(node.allocatable)  # channel 0 is one device


# ---- gangs ------------------------------------------------------------------------------------


def plan(nodes: list[Node], members: list[Pod], policy: str = "pack") -> Placed | Unfit:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    spec = GangSpec(key="default/g", placement=parse_placement(policy), members=tuple(members))
    return place_gang(state.snapshot(), spec)


def dra_members(cluster: Cluster, count: int, template: str) -> list[Pod]:
    members = []
    for i in range(count):
        p = cluster.pod(f"m{i}", templates={"gpus": template}, group="g")
        members.append(cluster.state.bridge_pod(p))
    return members


def test_a_dra_gang_is_reserved_whole_and_its_devices_are_invisible_to_others() -> None:
    cluster = h100_cluster(2)
    cluster.template("four", device_request("gpu", GPU_CLASS, 4))
    nodes = [cluster.node("n1"), cluster.node("n2")]
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    members = dra_members(cluster, 4, "four")
    for m in members:
        state.upsert_pod(m)
    spec = GangSpec(key="default/g", placement=parse_placement("pack"), members=tuple(members))
    placed = place_gang(state.snapshot(), spec)
    assert isinstance(placed, Placed)
    assert sorted(placed.assignment.values()) == ["n1", "n1", "n2", "n2"]
    state.reserve(
        Reservation(
            "default/g",
            tuple(
                MemberReservation(m.uid, m.key, placed.assignment[m.uid], m.requests)
                for m in members
            ),
            reserved_at=0,
            expires_at=60,
        )
    )
    assert state.reserved_gpus() == 16
    other = dra_members(cluster, 1, "four")[0]
    other_spec = GangSpec(key="default/h", placement=parse_placement("pack"), members=(other,))
    assert isinstance(place_gang(state.snapshot(), other_spec), Unfit)
    state.release("default/g")
    assert all(not info.reserved for info in state.nodes())
    assert isinstance(place_gang(state.snapshot(), other_spec), Placed)


def test_an_unfit_dra_gang_holds_nothing() -> None:
    cluster = h100_cluster(1)
    cluster.template("four", device_request("gpu", GPU_CLASS, 4))
    result = plan([cluster.node("n1")], dra_members(cluster, 3, "four"))
    assert isinstance(result, Unfit)
    assert "class.dra.phalanx.io/gpu.nvidia.com" in result.reason


def test_a_mixed_gang_lands_each_member_where_its_request_can_be_served() -> None:
    cluster = h100_cluster(1)
    cluster.template("eight", device_request("gpu", GPU_CLASS, 8))
    plugin_node = gpu_node("dp1", 8)
    dra = dra_members(cluster, 1, "eight")
    classic = [pod("c0", 8, group="g")]
    placed = plan([cluster.node("n1"), plugin_node], [*dra, *classic])
    assert isinstance(placed, Placed)
    assert placed.assignment[dra[0].uid] == "n1"
    assert placed.assignment[classic[0].uid] == "dp1"
    # Both kinds of node count their GPUs the same way.
    assert cluster.node("n1").allocatable.gpus() == plugin_node.allocatable.gpus() == 8
    gpu = cluster.node("n1").gpu
    assert gpu is not None
    assert gpu.count == 8


def test_a_compute_domain_gang_takes_one_clique_node_per_member() -> None:
    # Three GB200-like nodes in one NVLink clique publish channel 0; a fourth node is bigger
    # but outside the clique. Each member asks for the channel and 4 GPUs.
    clique = ["c1", "c2", "c3"]
    cluster = Cluster(
        *(gpu_slice_obj(n) for n in [*clique, "big"]),
        *(compute_domain_slice_obj(n, channels=1) for n in [*clique, "big"]),
    )
    cluster.template(
        "cd", device_request("channel", CHANNEL_CLASS, 1), device_request("gpu", GPU_CLASS, 4)
    )
    nodes = [cluster.node(n, base=gpu_node(n, 0, clique="domain-1")) for n in clique]
    nodes.append(cluster.node("big", base=gpu_node("big", 0)))
    members = []
    for i in range(4):
        p = cluster.pod(f"m{i}", templates={"cd": "cd"}, group="g")
        members.append(cluster.state.bridge_pod(p))
    placed = plan(nodes, members[:3], "interconnect-local")
    assert isinstance(placed, Placed)
    assert sorted(placed.assignment.values()) == clique
    # A fourth member would need a second channel 0 in the clique: there is none.
    assert isinstance(plan(nodes, members, "interconnect-local"), Unfit)


def test_a_device_plugin_node_never_serves_a_dra_member() -> None:
    cluster = h100_cluster(0)
    cluster.template("one", device_request("gpu", GPU_CLASS, 1))
    result = plan([gpu_node("dp1", 8)], dra_members(cluster, 1, "one"))
    assert isinstance(result, Unfit)


def test_a_claim_shared_by_members_counts_once_and_binds_them_together() -> None:
    cluster = h100_cluster(2)
    cluster.claim("team", device_request("gpu", GPU_CLASS, 8))
    cluster.template("one", device_request("gpu", GPU_CLASS, 1))
    a = cluster.pod("a", claims={"shared": "team"}, group="g")
    b = cluster.pod("b", claims={"shared": "team"}, group="g")
    c = cluster.pod("c", templates={"own": "one"}, group="g")
    gang = gang_demand([(p.key, cluster.demand(p)) for p in (c, b, a)])
    assert gang.requests["default/a"] == gpus(8)
    assert gang.requests["default/b"] == Resources()
    assert gang.requests["default/c"] == gpus(1)
    assert gang.together == (frozenset({"default/a", "default/b"}),)
    # Counted per pod instead, the claim would ask for 16 GPUs and fit nowhere together.
    assert cluster.demand(a).requests() + cluster.demand(b).requests() == gpus(16)


def test_an_allocated_shared_claim_is_charged_to_nobody() -> None:
    cluster = h100_cluster(1)
    cluster.claim("team", allocated=[(GPU_DRIVER, "n1", "gpu-0")], node="n1")
    a = cluster.pod("a", claims={"shared": "team"})
    b = cluster.pod("b", claims={"shared": "team"})
    gang = gang_demand([(p.key, cluster.demand(p)) for p in (a, b)])
    assert gang.requests == {"default/a": Resources(), "default/b": Resources()}
    assert gang.together == ()


def test_bridging_twice_replaces_rather_than_adds() -> None:
    cluster = h100_cluster(1)
    cluster.template("two", device_request("gpu", GPU_CLASS, 2))
    node = cluster.node("n1")
    assert cluster.node("n1", base=node).allocatable == node.allocatable
    p = cluster.pod("w", templates={"g": "two"})
    once = pod_with_demand(p, cluster.demand(p).requests())
    assert pod_with_demand(once, cluster.demand(p).requests()) == once
    assert pod_with_demand(once, Resources()).requests == p.requests
    assert once.requests.get(NVIDIA_GPU) == 0


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=6),
    allocated=st.sets(st.integers(min_value=0, max_value=7), max_size=8),
)
def test_a_placed_dra_gang_never_takes_more_devices_than_are_free(
    sizes: list[int], allocated: set[int]
) -> None:
    cluster = h100_cluster(2)
    cluster.claim(
        "busy", allocated=[(GPU_DRIVER, "n1", f"gpu-{i}") for i in sorted(allocated)], node="n1"
    )
    members = []
    for i, size in enumerate(sizes):
        cluster.template(f"t{i}", device_request("gpu", GPU_CLASS, size))
        p = cluster.pod(f"m{i}", templates={"gpus": f"t{i}"}, group="g")
        members.append(cluster.state.bridge_pod(p))
    nodes = [cluster.node("n1"), cluster.node("n2")]
    result = plan(nodes, members)
    free = {"n1": 8 - len(allocated), "n2": 8}
    if isinstance(result, Placed):
        used = dict.fromkeys(free, 0)
        for m, size in zip(members, sizes, strict=True):
            used[result.assignment[m.uid]] += size
        assert all(used[n] <= free[n] for n in free)
    if sum(sizes) > sum(free.values()):
        assert isinstance(result, Unfit)


# ---- device taints ------------------------------------------------------------------------------


def tolerating(name: str, device_class: str, count: int, *selectors: str) -> dict[str, Any]:
    request = device_request(name, device_class, count, *selectors)
    request["exactly"]["tolerations"] = TOLERATES_XID
    return request


def test_where_a_class_has_tainted_devices_every_request_for_it_takes_its_count_of_any() -> None:
    cluster = Cluster(tainted(gpu_slice_obj("n1", 2), 1), gpu_slice_obj("n2", 2))
    cluster.template("plain", device_request("gpu", GPU_CLASS, 2))
    cluster.template("tolerant", tolerating("gpu", GPU_CLASS, 2))
    [plain] = cluster.demand(cluster.pod("p", templates={"gpus": "plain"})).claims[0].requests
    [tolerant] = cluster.demand(cluster.pod("t", templates={"gpus": "tolerant"})).claims[0].requests
    assert plain.takes == gpus(2) + Resources({any_entry(GPU_CLASS): 2})
    assert plain.exactness is Exactness.EXACT
    # The untainted entries are for requests that do not tolerate the taints.
    assert tolerant.takes == Resources({any_entry(GPU_CLASS): 2, whole_entry(GPU_CLASS): 2})
    assert tolerant.exactness is Exactness.PER_NODE
    # Both nodes have two GPUs for it; only n2 has two untainted ones.
    assert cluster.node("n1").allocatable[any_entry(GPU_CLASS)] == 2
    assert tolerant.takes.fits_in(cluster.node("n1").allocatable)
    assert not plain.takes.fits_in(cluster.node("n1").allocatable)
    assert plain.takes.fits_in(cluster.node("n2").allocatable)


def test_tolerations_change_nothing_where_the_class_has_no_tainted_device() -> None:
    cluster = h100_cluster()
    cluster.template("tolerant", tolerating("gpu", GPU_CLASS, 2))
    demand = cluster.demand(cluster.pod("t", templates={"gpus": "tolerant"}))
    [request] = demand.claims[0].requests
    assert request.takes == gpus(2)
    assert request.exactness is Exactness.EXACT
    assert request.tolerations == ()
    assert demand.notes == ()


def test_a_tolerating_request_is_refused_a_node_whose_tainted_devices_it_does_not_tolerate() -> (
    None
):
    other = {"key": "example.com/maintenance", "effect": "NoExecute"}
    cluster = Cluster(
        tainted(gpu_slice_obj("n1", 2), 0, 1),
        tainted(gpu_slice_obj("n2", 2), 0, 1, taint=other),
    )
    cluster.template("tolerant", tolerating("gpu", GPU_CLASS, 2))
    p = cluster.pod("t", templates={"gpus": "tolerant"})
    assert cluster.why_not(p, "n1") is None
    assert cluster.why_not(p, "n2") == (
        "had 0 gpu.nvidia.com device(s) for claim default/t#gpus request gpu, it needs 2"
    )


def test_a_tolerating_mig_request_on_partitionable_gpus_takes_its_shared_counters() -> None:
    slices = partitioned_slices("p1", 1)
    devices = slices[1]["spec"]["devices"]
    for device in devices[1:]:  # every MIG placement of the GPU, not the GPU itself
        device["taints"] = [{"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}]
    cluster = Cluster(*slices)
    one_g = f"{A}.profile == '1g.5gb'"
    cluster.template("plain", device_request("mig", MIG_CLASS, 1, one_g))
    cluster.template("tolerant", tolerating("mig", MIG_CLASS, 1, one_g))
    plain = cluster.pod("p", templates={"mig": "plain"})
    tolerant = cluster.pod("t", templates={"mig": "tolerant"})
    assert cluster.why_not(plain, "p1") is not None
    assert cluster.why_not(tolerant, "p1") is None
    [request] = cluster.demand(tolerant).claims[0].requests
    # The least any 1g placement takes of the GPU's memory, and the MIG class's whole (so
    # an allocationMode All request is never planned beside it).
    assert request.takes[counter_entry(GPU_DRIVER, "memory")] == 4864 * MI
    assert request.takes[whole_entry(MIG_CLASS)] == 1
    assert request.takes.fits_in(cluster.node("p1").allocatable)


@settings(max_examples=50, deadline=None)
@given(
    members=st.lists(
        st.tuples(st.integers(min_value=1, max_value=8), st.booleans()), min_size=1, max_size=6
    ),
    taints=st.sets(st.integers(min_value=0, max_value=7), max_size=8),
)
def test_a_placed_gang_never_gives_a_member_a_tainted_gpu_it_does_not_tolerate(
    members: list[tuple[int, bool]], taints: set[int]
) -> None:
    # n1 has `taints` of its 8 GPUs tainted, n2 none; members tolerate the taint or not.
    cluster = Cluster(tainted(gpu_slice_obj("n1"), *sorted(taints)), gpu_slice_obj("n2"))
    placed = []
    for i, (size, tolerates) in enumerate(members):
        request = tolerating if tolerates else device_request
        cluster.template(f"t{i}", request("gpu", GPU_CLASS, size))
        p = cluster.pod(f"m{i}", templates={"gpus": f"t{i}"}, group="g")
        placed.append(cluster.state.bridge_pod(p))
    result = plan([cluster.node("n1"), cluster.node("n2")], placed)
    if isinstance(result, Placed):
        # Hall's condition on each node: what the members that do not tolerate take fits the
        # untainted GPUs, and what all take fits all the GPUs.
        clean = {"n1": 8 - len(taints), "n2": 8}
        for node, untainted in clean.items():
            on_node = [
                (size, tolerates)
                for m, (size, tolerates) in zip(placed, members, strict=True)
                if result.assignment[m.uid] == node
            ]
            assert sum(size for size, tolerates in on_node if not tolerates) <= untainted
            assert sum(size for size, _ in on_node) <= 8
