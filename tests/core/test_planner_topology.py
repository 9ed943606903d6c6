"""GangPlanner with topologies: constraints resolved per gang, bad intent refused on the group
alone, the index kept per node-topology generation, explanations in the decision."""

from collections.abc import Iterable
from dataclasses import replace

import pytest

from builders import (
    CLIQUE,
    HOSTNAME,
    LEAF,
    SPINE,
    gang,
    gpu_node,
    nvl72,
    pod,
    podgroup,
    present,
    rack_node,
)
from phalanx.core.cache import ClusterState, ReleaseCause, Released
from phalanx.core.journal import Outcome
from phalanx.core.model import Node, Pod, PodGroup, SubGroupPolicy, TopologyConstraint
from phalanx.core.planner import GangPlanner, PlannerSettings
from phalanx.core.topology import parse_topologies


def setup(
    nodes: Iterable[Node],
    *,
    groups: Iterable[PodGroup] = (),
    pods: Iterable[Pod] = (),
    settings: PlannerSettings | None = None,
) -> tuple[ClusterState, GangPlanner]:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for g in groups:
        state.upsert_group(g)
    for p in pods:
        state.upsert_pod(p)
    return state, GangPlanner(state, settings)


def clique_of(node: str) -> str:
    return node.split("-", maxsplit=1)[0]


def reserved_nodes(state: ClusterState, key: str = "default/g") -> set[str]:
    reservation = state.reservation(key)
    assert reservation is not None
    return {m.node for m in reservation.members}


def test_a_required_clique_keeps_the_whole_gang_in_one_clique() -> None:
    nodes = nvl72(4)
    # Clique c00 is half used: a 10-node gang cannot fit there, c01 can.
    members = gang("g", 10, 4)
    busy = [pod(f"busy-{i}", 4, node=f"c00-n{i:02d}") for i in range(9)]
    group = podgroup("g", 10, topology=TopologyConstraint(required=CLIQUE))
    state, planner = setup(nodes, groups=[group], pods=[*busy, *members])
    decision = planner.filter(members[0], [n.name for n in nodes], now=0)
    assert decision.result.feasible
    assert {clique_of(n) for n in reserved_nodes(state)} == {"c01"}
    committed = [e for e in decision.events if e.outcome is Outcome.COMMITTED]
    assert len(committed) == 1
    assert f"placed within {CLIQUE}=c01" in committed[0].reason


def test_the_committed_reason_says_why_not_the_preferred_level() -> None:
    nodes = nvl72(4)
    members = gang("g", 20, 4)  # 80 GPUs: more than one clique's 72
    group = podgroup("g", 20, topology=TopologyConstraint(required=LEAF, preferred=CLIQUE))
    _state, planner = setup(nodes, groups=[group], pods=members)
    decision = planner.filter(members[0], [n.name for n in nodes], now=0)
    (committed,) = [e for e in decision.events if e.outcome is Outcome.COMMITTED]
    assert f"preferred {CLIQUE}" in committed.reason
    assert f"placed within {LEAF}=l0" in committed.reason
    proposal = present(planner.records["default/g"].proposal)
    assert proposal is not None
    assert proposal.level == LEAF
    assert proposal.explanation in committed.reason


@pytest.mark.parametrize(
    ("constraint", "min_member", "message"),
    [
        (
            TopologyConstraint(required="example.com/rack"),
            4,
            'required level "example.com/rack" is not a level of topology default',
        ),
        (
            TopologyConstraint(slice_size=3, slice_required=CLIQUE),
            4,
            "topology slice size 3 does not divide the gang's minMember 4",
        ),
        (
            TopologyConstraint(required=CLIQUE, preferred=LEAF),
            4,
            f"required level {CLIQUE} is narrower than preferred level {LEAF}",
        ),
        (
            TopologyConstraint(required="tier:9"),
            4,
            'required level "tier:9" is not a tier of topology default',
        ),
    ],
    ids=["unknown-level", "slice-does-not-divide", "required-narrower-than-preferred", "bad-tier"],
)
def test_bad_topology_intent_refuses_the_gang_alone_with_a_clear_reason(
    constraint: TopologyConstraint, min_member: int, message: str
) -> None:
    nodes = nvl72(2)
    offered = [n.name for n in nodes]
    bad = gang("bad", min_member, 4)
    good = gang("good", 2, 4)
    groups = [
        podgroup("bad", min_member, topology=constraint),
        podgroup("good", 2, topology=TopologyConstraint(required=CLIQUE)),
    ]
    state, planner = setup(nodes, groups=groups, pods=[*bad, *good])
    decision = planner.filter(bad[0], offered, now=0)
    assert decision.result.feasible == ()
    assert set(decision.result.unresolvable) == set(offered)
    assert all(message in r for r in decision.result.unresolvable.values())
    assert [e.outcome for e in decision.events] == [Outcome.INVALID]
    assert message in decision.events[0].reason
    assert state.reservation("default/bad") is None
    assert planner.filter(good[0], offered, now=0).result.feasible
    assert state.reservation("default/good") is not None


def test_members_that_disagree_on_their_topology_make_the_gang_invalid() -> None:
    nodes = nvl72(1)
    members = [
        replace(p, topology=TopologyConstraint(required=c))
        for p, c in zip(gang("g", 2, 4), (CLIQUE, LEAF), strict=True)
    ]
    _state, planner = setup(nodes, groups=[podgroup("g", 2)], pods=members)
    decision = planner.filter(members[0], [n.name for n in nodes], now=0)
    assert decision.events[0].outcome is Outcome.INVALID
    assert "disagree on their topology" in decision.events[0].reason


def test_a_volcano_tier_names_the_level_counted_up_from_the_node() -> None:
    nodes = nvl72(4)
    members = gang("g", 4, 4)
    group = podgroup("g", 4, topology=TopologyConstraint(required="tier:1"))
    state, planner = setup(nodes, groups=[group], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    assert len({clique_of(n) for n in reserved_nodes(state)}) == 1
    assert present(planner.records["default/g"].proposal).level in (CLIQUE, HOSTNAME)


def test_a_named_topology_from_the_settings_is_used() -> None:
    topologies = parse_topologies("default=x.io/row,x.io/rack;cpu=x.io/zone")
    nodes = [
        rack_node(f"r{r}-n{n}", labels={"x.io/row": "row0", "x.io/rack": f"rack{r}"})
        for r in range(2)
        for n in range(2)
    ]
    members = gang("g", 2, 4)
    group = podgroup("g", 2, topology=TopologyConstraint(required="x.io/rack"))
    state, planner = setup(
        nodes, groups=[group], pods=members, settings=PlannerSettings(topologies=topologies)
    )
    planner.filter(members[0], [n.name for n in nodes], now=0)
    assert len({n.split("-")[0] for n in reserved_nodes(state)}) == 1
    assert present(planner.records["default/g"].proposal).level == "x.io/rack"


def test_the_default_topology_levels_are_unknown_to_a_custom_configuration() -> None:
    topologies = parse_topologies("default=x.io/row,x.io/rack")
    nodes = nvl72(1)
    members = gang("g", 2, 4)
    group = podgroup("g", 2, topology=TopologyConstraint(required=CLIQUE))
    _state, planner = setup(
        nodes, groups=[group], pods=members, settings=PlannerSettings(topologies=topologies)
    )
    decision = planner.filter(members[0], [n.name for n in nodes], now=0)
    assert decision.events[0].outcome is Outcome.INVALID
    assert "not a level of topology default (x.io/row > x.io/rack)" in decision.events[0].reason


def test_a_gang_without_intent_is_placed_unconstrained_but_records_its_level() -> None:
    nodes = nvl72(2)
    members = gang("g", 2, 4)
    _state, planner = setup(nodes, groups=[podgroup("g", 2)], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    proposal = present(planner.records["default/g"].proposal)
    assert proposal.explanation == ""
    assert proposal.level in (CLIQUE, HOSTNAME)


def test_the_topology_index_is_kept_until_a_node_changes_its_labels() -> None:
    nodes = nvl72(2)
    state, planner = setup(nodes)
    topology = planner.settings.topologies.default
    first = planner.index(topology)
    state.upsert_node(nodes[0])  # a heartbeat: nothing eligibility reads changed
    assert planner.index(topology) is first
    state.upsert_node(rack_node(nodes[0].name, spine="s0", leaf="l9", clique="c00"))
    assert planner.index(topology) is not first


def test_an_inconsistent_node_is_a_finding_handed_out_once() -> None:
    nodes = [
        *nvl72(2, per_leaf=1),
        rack_node("stray", spine="s0", leaf="l1", clique="c00"),
    ]
    _state, planner = setup(nodes)
    planner.index(planner.settings.topologies.default)
    (finding,) = planner.topology_findings()
    assert finding.node == "stray"
    assert f"{CLIQUE}=c00 is under" in str(finding)
    planner.index(planner.settings.topologies.default)
    assert planner.topology_findings() == []


def test_an_elastic_gang_with_slices_reserves_whole_slices_of_the_lowest_ranks() -> None:
    nodes = nvl72(2, per_clique=2)
    members = gang("g", 6, 4)  # 6 members, only 4 nodes: the quorum of 4 fits
    group = podgroup("g", 4, topology=TopologyConstraint(slice_size=2, slice_required=CLIQUE))
    state, planner = setup(nodes, groups=[group], pods=members)
    planner.filter(members[5], [n.name for n in nodes], now=0)
    reservation = present(state.reservation("default/g"))
    assert {m.pod_key for m in reservation.members} == {f"default/g-{i}" for i in range(4)}
    clique = {m.pod_key: clique_of(m.node) for m in reservation.members}
    assert clique["default/g-0"] == clique["default/g-1"]
    assert clique["default/g-2"] == clique["default/g-3"]


def test_a_gang_that_must_share_one_node_but_cannot_is_unfit_not_split() -> None:
    nodes = nvl72(1)
    members = gang("g", 2, 4)  # two whole four-GPU nodes' worth: no one node holds both
    group = podgroup("g", 2, topology=TopologyConstraint(required=HOSTNAME, preferred=HOSTNAME))
    state, planner = setup(nodes, groups=[group], pods=members)
    decision = planner.filter(members[0], [n.name for n in nodes], now=0)
    assert decision.result.feasible == ()
    assert decision.events[0].outcome is Outcome.UNFIT
    assert state.reservation("default/g") is None


def test_a_gang_required_under_one_spine_is_placed_there() -> None:
    other = [rack_node(f"x-n{i:02d}", spine="s1", leaf="l9", clique="c99") for i in range(18)]
    nodes = [*nvl72(1, spine="s0"), *other]
    members = gang("g", 2, 4)
    group = podgroup("g", 2, topology=TopologyConstraint(required=SPINE))
    state, planner = setup(nodes, groups=[group], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    assert len({n.startswith("x") for n in reserved_nodes(state)}) == 1


# ---- prioritize: single pods fill broken domains first ----------------------------------------


def test_a_single_gpu_pod_prefers_a_node_of_a_broken_clique_over_a_whole_one() -> None:
    nodes = nvl72(2, per_leaf=1)
    busy = pod("busy", 4, node="c00-n00")
    _state, planner = setup(nodes, pods=[busy])
    offered = ["c00-n01", "c01-n01"]  # both idle nodes: equal best fit
    scores = planner.prioritize(pod("single", 1), offered)
    assert scores["c00-n01"] > scores["c01-n01"]


def test_without_broken_domains_the_best_fit_stands_at_full_resolution() -> None:
    nodes = [rack_node(f"n{i}", 8) for i in range(3)]  # no clique, leaf or spine labels
    busy = [pod("b1", 3, node="n1"), pod("b2", 4, node="n2")]
    _state, planner = setup(nodes, pods=busy)
    scores = planner.prioritize(pod("single", 1), ["n0", "n1", "n2"])
    assert scores == {"n0": 1, "n1": 5, "n2": 6}


def test_a_pod_without_gpus_ignores_the_topology() -> None:
    nodes = nvl72(2, per_leaf=1)
    _state, planner = setup(nodes, pods=[pod("busy", 4, node="c00-n00")])
    scores = planner.prioritize(pod("cpu-only", 0), ["c00-n01", "c01-n01"])
    assert scores == {"c00-n01": 0, "c01-n01": 0}


def test_fragmentation_is_worked_out_once_per_model_generation() -> None:
    nodes = nvl72(2, per_leaf=1)
    state, planner = setup(nodes)
    first = planner.fragmentation()
    assert planner.fragmentation() is first
    state.upsert_pod(pod("busy", 4, node="c00-n00"))
    assert planner.fragmentation() is not first
    assert planner.fragmentation()["c00-n01"] > planner.fragmentation()["c01-n01"]


def test_a_reserved_member_still_scores_only_its_node() -> None:
    nodes = nvl72(2, per_leaf=1)
    members = gang("g", 2, 4)
    state, planner = setup(
        nodes, groups=[podgroup("g", 2)], pods=[*members, pod("b", 4, node="c00-n00")]
    )
    planner.filter(members[0], [n.name for n in nodes], now=0)
    node = present(present(state.reservation("default/g")).node_of(members[0].uid))
    scores = planner.prioritize(members[0], [n.name for n in nodes])
    assert scores[node] == 10
    assert sum(scores.values()) == 10


def test_the_single_best_node_a_filter_answers_is_in_a_broken_clique() -> None:
    nodes = nvl72(2, per_leaf=1)
    busy = pod("busy", 4, node="c01-n00")
    _state, planner = setup(nodes, pods=[busy], settings=PlannerSettings(single_pod_nodes=1))
    # Every idle node leaves as many GPUs over: the clique already in use wins, whatever
    # the names say (c00 sorts first).
    result = planner.filter(pod("single", 1), [n.name for n in nodes], now=0).result
    (node,) = result.feasible
    assert node.startswith("c01-")


def relabelled(state: ClusterState, node: str) -> None:
    """`node` now says it is in the other of the two cliques (same leaf and spine)."""
    old = present(state.node(node)).node
    other = "c01" if clique_of(node) == "c00" else "c00"
    state.upsert_node(replace(old, labels={**old.labels, CLIQUE: other}))


def reserved_pair(topology: TopologyConstraint | None) -> tuple[ClusterState, GangPlanner]:
    """A two-member gang reserved on two cliques of four nodes: (state, planner)."""
    nodes = nvl72(2, per_clique=4)
    members = gang("g", 2, 4)
    group = podgroup("g", 2, topology=topology)
    state, planner = setup(nodes, groups=[group], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    return state, planner


def test_a_reservation_split_across_required_cliques_by_a_relabel_is_released() -> None:
    state, planner = reserved_pair(TopologyConstraint(required=CLIQUE))
    relabelled(state, sorted(reserved_nodes(state))[0])

    planner.recheck_topology()

    assert state.reservation("default/g") is None


def test_a_reservation_being_bound_is_never_released_for_a_relabel() -> None:
    """Once a member is assumed its gate is binding: releasing would leave a partial gang."""
    state, planner = reserved_pair(TopologyConstraint(required=CLIQUE))
    first = present(state.reservation("default/g")).members[0]
    state.assume(first.pod_uid, first.node)
    relabelled(state, first.node)

    planner.recheck_topology()

    assert state.reservation("default/g") is not None


def test_a_gang_that_requires_no_level_keeps_its_reservation_through_a_relabel() -> None:
    state, planner = reserved_pair(None)
    before = state.reservation("default/g")
    relabelled(state, sorted(reserved_nodes(state))[0])

    planner.recheck_topology()

    assert state.reservation("default/g") == before


def reserved_slices() -> tuple[ClusterState, GangPlanner, list[str]]:
    """A four-member gang in slices of two, each slice inside one clique: (state, planner,
    the nodes of its first slice, g-0 and g-1)."""
    nodes = nvl72(2, per_clique=4)
    members = gang("g", 4, 4)
    topology = TopologyConstraint(slice_size=2, slice_required=CLIQUE)
    state, planner = setup(nodes, groups=[podgroup("g", 4, topology=topology)], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    reservation = present(state.reservation("default/g"))
    return state, planner, [present(reservation.node_of(m.uid)) for m in members[:2]]


def test_a_reservation_whose_slice_a_relabel_splits_across_cliques_is_released() -> None:
    state, planner, first_slice = reserved_slices()
    relabelled(state, first_slice[0])

    planner.recheck_topology()

    assert state.reservation("default/g") is None


def test_a_relabel_that_moves_a_whole_slice_keeps_the_reservation() -> None:
    state, planner, first_slice = reserved_slices()
    before = state.reservation("default/g")
    for node in first_slice:
        relabelled(state, node)

    planner.recheck_topology()

    assert state.reservation("default/g") == before


def test_a_reservation_whose_outer_slice_a_relabel_splits_across_leaves_is_released() -> None:
    # Slices of 4 per leaf around slices of 2 per clique; the first inner slice's two nodes
    # move to another leaf together: each inner slice is whole, the outer one is not.
    nodes = nvl72(4, per_clique=2, per_leaf=2)
    members = gang("g", 4, 4)
    topology = TopologyConstraint(slice_size=2, slice_required=CLIQUE, slice_layers=((4, LEAF),))
    state, planner = setup(nodes, groups=[podgroup("g", 4, topology=topology)], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    reservation = present(state.reservation("default/g"))
    for m in members[:2]:
        old = present(state.node(present(reservation.node_of(m.uid)))).node
        state.upsert_node(replace(old, labels={**old.labels, LEAF: "l9"}))

    planner.recheck_topology()

    assert state.reservation("default/g") is None


def test_a_reservation_whose_volcano_subgroup_a_relabel_splits_is_released() -> None:
    # Partitions of two, each in one tier-1 domain (a clique); one node of the first
    # partition moves to the other clique: that subgroup now spans two.
    nodes = nvl72(2, per_clique=4)
    labels = [{"volcano.sh/partition-id": str(i // 2)} for i in range(4)]
    members = [pod(f"g-{i}", 4, group="g", labels=labels[i]) for i in range(4)]
    policy = SubGroupPolicy("worker", keys=("volcano.sh/partition-id",), required="tier:1")
    topology = TopologyConstraint(subgroups=(policy,))
    state, planner = setup(nodes, groups=[podgroup("g", 4, topology=topology)], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    reservation = present(state.reservation("default/g"))
    first = [present(reservation.node_of(m.uid)) for m in members[:2]]
    assert len({clique_of(n) for n in first}) == 1
    relabelled(state, first[0])

    planner.recheck_topology()

    assert state.reservation("default/g") is None


# ---- upstream's PodGroup topology key: any node label ----------------------------------------

ZONE = "topology.kubernetes.io/zone"


def upstream_key(key: str) -> TopologyConstraint:
    """What upstream's `spec.schedulingConstraints.topology[0].key` reads as."""
    return TopologyConstraint(required=key, any_label=True)


def zone_node(name: str, zone: str | None, gpus: int = 4) -> Node:
    labels = {HOSTNAME: name} if zone is None else {HOSTNAME: name, ZONE: zone}
    return gpu_node(name, gpus, labels=labels)


def zoned_cluster() -> tuple[list[Node], list[Pod]]:
    """Zone a: two idle four-GPU nodes. Zone b: three four-GPU nodes with two GPUs in use
    on each. Zone c: three idle four-GPU nodes. An eight-GPU gang fits in a (exactly) and
    in c, or over b's broken nodes and a node of another zone."""
    nodes = [
        *(zone_node(f"a{i}", "a") for i in range(2)),
        *(zone_node(f"b{i}", "b") for i in range(3)),
        *(zone_node(f"c{i}", "c") for i in range(3)),
    ]
    busy = [pod(f"busy-{i}", 2, node=f"b{i}") for i in range(3)]
    return nodes, busy


def test_an_upstream_zone_key_plans_the_gang_inside_the_tightest_zone_that_holds_it() -> None:
    nodes, busy = zoned_cluster()
    members = gang("g", 4, 2)
    group = podgroup("g", 4, topology=upstream_key(ZONE))
    state, planner = setup(nodes, groups=[group], pods=[*busy, *members])
    decision = planner.filter(members[0], [n.name for n in nodes], now=0)
    assert decision.result.feasible
    assert reserved_nodes(state) == {"a0", "a1"}
    (committed,) = [e for e in decision.events if e.outcome is Outcome.COMMITTED]
    assert f"placed within {ZONE}=a" in committed.reason


def test_an_upstream_hostname_key_puts_every_member_on_one_node() -> None:
    nodes = [zone_node("n1", None, 4), zone_node("n2", None, 4), zone_node("n3", None, 8)]
    members = gang("g", 2, 2)
    busy = pod("busy", 2, node="n1")
    settings = PlannerSettings(topologies=parse_topologies(f"{SPINE},{LEAF}"))  # no host level
    group = podgroup("g", 2, topology=upstream_key(HOSTNAME))
    state, planner = setup(nodes, groups=[group], pods=[busy, *members], settings=settings)
    assert planner.filter(members[0], [n.name for n in nodes], now=0).result.feasible
    assert reserved_nodes(state) == {"n2"}


def test_nodes_without_the_label_never_host_a_member() -> None:
    nodes = [zone_node("a0", "a"), zone_node("x0", None, 8), zone_node("x1", None, 8)]
    members = gang("g", 2, 2)
    group = podgroup("g", 2, topology=upstream_key(ZONE))
    state, planner = setup(nodes, groups=[group], pods=members)
    assert planner.filter(members[0], [n.name for n in nodes], now=0).result.feasible
    assert reserved_nodes(state) == {"a0"}


def test_a_gang_no_zone_holds_waits_with_a_reason_naming_the_key_and_the_unlabelled_nodes() -> None:
    nodes = [zone_node("a0", "a"), zone_node("b0", "b"), zone_node("x0", None, 8)]
    members = gang("g", 3, 2)  # six GPUs: four per zone, eight only off any zone
    group = podgroup("g", 3, topology=upstream_key(ZONE))
    state, planner = setup(nodes, groups=[group], pods=members)
    decision = planner.filter(members[0], [n.name for n in nodes], now=0)
    assert decision.result.feasible == ()
    assert state.reservation("default/g") is None
    (unfit,) = [e for e in decision.events if e.outcome is Outcome.UNFIT]
    assert f"required {ZONE}" in unfit.reason
    assert f"no single {ZONE} domain fits" in unfit.reason
    assert f"1 eligible node(s) without label {ZONE} cannot host a member" in unfit.reason


def test_an_upstream_key_that_is_a_configured_level_keeps_todays_placement() -> None:
    """A configured level's domains stand as they are: a node without the leaf label is in
    its clique's domain (skipped level), not kept out as by an ad-hoc label."""
    nodes = [rack_node(f"n{i}", clique="c1") for i in range(2)]  # no leaf labels
    members = gang("g", 2, 4)
    by_field, by_annotation = upstream_key(LEAF), TopologyConstraint(required=LEAF)
    placed = []
    for topology in (by_field, by_annotation):
        state, planner = setup(nodes, groups=[podgroup("g", 2, topology=topology)], pods=members)
        decision = planner.filter(members[0], [n.name for n in nodes], now=0)
        placed.append((reserved_nodes(state), [e.reason for e in decision.events]))
    assert placed[0] == placed[1]
    assert placed[0][0] == {"n0", "n1"}


def reserved_in_zone() -> tuple[ClusterState, GangPlanner]:
    """A two-member gang reserved in zone a, its tightest fit; zone b idle: (state, planner)."""
    nodes = [zone_node("a0", "a"), zone_node("a1", "a"), zone_node("b0", "b", 12)]
    members = gang("g", 2, 4)
    group = podgroup("g", 2, topology=upstream_key(ZONE))
    state, planner = setup(nodes, groups=[group], pods=members)
    planner.filter(members[0], [n.name for n in nodes], now=0)
    assert reserved_nodes(state) == {"a0", "a1"}
    return state, planner


@pytest.mark.parametrize(
    ("labels", "now_in"),
    [
        ({HOSTNAME: "a1", ZONE: "b"}, f"now lie in 2: {ZONE}=a, {ZONE}=b"),
        ({HOSTNAME: "a1"}, f"now lie in 2: {ZONE}=a, node a1 (in none)"),
    ],
    ids=["moved-to-another-zone", "label-removed"],
)
def test_a_relabel_taking_a_reserved_node_out_of_the_zone_releases_the_reservation(
    labels: dict[str, str], now_in: str
) -> None:
    released: list[Released] = []
    state, planner = reserved_in_zone()
    state.on_release = released.append
    old = present(state.node("a1")).node
    state.upsert_node(replace(old, labels=labels))

    planner.recheck_topology()

    assert state.reservation("default/g") is None
    assert [r.cause for r in released] == [ReleaseCause.TOPOLOGY_CHANGED]
    assert f"requires one {ZONE} domain" in released[0].why
    assert f"{now_in}; reservation released" in released[0].why


def test_a_relabel_elsewhere_keeps_the_zone_reservation() -> None:
    state, planner = reserved_in_zone()
    before = state.reservation("default/g")
    old = present(state.node("b0")).node
    state.upsert_node(replace(old, labels={HOSTNAME: "b0", ZONE: "c"}))

    planner.recheck_topology()

    assert state.reservation("default/g") == before
