"""Completeness of the gang transaction (issue #16, item 5): when a placement plainly exists,
`place_gang` finds one.

The properties in tests/core/test_gang_properties.py check that whatever is placed is
sound; these check the converse, against oracles that know nothing of the placer:

* the whole gang fits on one eligible node -> `pack` and `same-node` place it (any gang;
  `same-node` there, and only then);
* every member fits alone on a node of its own -> `spread` and `pack` place it.

Gangs are heterogeneous (members differ in GPUs, CPU, memory and node selector), some
members are already bound (anchors), and kube-scheduler may have refused nodes
(`GangSpec.exclude`).

The transaction places units largest first, greedily. Across units that differ, a greedy
choice can take the only node a later member could use; Hypothesis found such gangs (kept
below as examples), and the transaction now retries most constrained first, then as a
one-node-per-unit matching, which makes the second pair of properties hold for any gang.

The last pair is the converse in full for small gangs: whenever any assignment of members
to nodes fits (an oracle tries them all), the transaction places the gang, under each
policy and inside one domain of a required topology level. Greedy choices across CPU and
GPUs failed it (a 2-GPU member best-fitted onto the only node with CPUs for two others);
the transaction's last-resort search (`phalanx.core.gang_search`) makes it hold.
"""

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from builders import CLIQUE, LEAF, SPINE, gpu_node, pod, rack_node
from phalanx.core import eligibility
from phalanx.core.cache import ClusterState
from phalanx.core.gang import GangSpec, Placed, place_gang
from phalanx.core.inventory import parse_placement
from phalanx.core.model import CPU, EMPTY, MEMORY, Pod, Resources
from phalanx.core.snapshot import Snapshot
from phalanx.core.topology import DEFAULT_TOPOLOGIES, GangTopology

DEFAULT = DEFAULT_TOPOLOGIES.default

ZONE = "topology.kubernetes.io/zone"
GIB = 1 << 30
common = settings(max_examples=int(__import__("os").environ.get("T16_N", "300")))

# A small palette, so members often tie, and often cross (more GPUs, less CPU).
GPUS = [0, 1, 2, 4]
CPU_MILLI = [500, 4000]
MEMORY_GIB = [4, 64]
SELECTORS: list[dict[str, str]] = [{}, {ZONE: "z1"}, {ZONE: "z2"}]


# ---- generated clusters and gangs --------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    state = ClusterState()
    count = draw(st.integers(1, 7))
    for i in range(count):
        state.upsert_node(
            gpu_node(
                f"n{i}",
                draw(st.sampled_from([0, 1, 2, 4, 8])),
                cpu=draw(st.sampled_from([1, 4, 8, 32])),
                memory_gib=draw(st.sampled_from([8, 64, 512])),
                labels={ZONE: draw(st.sampled_from(["z1", "z2"]))},
                unschedulable=draw(st.integers(0, 5)) == 0,
            )
        )
    for j in range(draw(st.integers(0, 4))):
        node = f"n{draw(st.integers(0, count - 1))}"
        state.upsert_pod(pod(f"busy-{j}", draw(st.sampled_from(GPUS)), node=node))
    return state


@st.composite
def members(draw: st.DrawFn, prefix: str, count: int, *, node: str = "") -> list[Pod]:
    """Members that differ from each other in every request and in where they may run."""
    return [
        pod(
            f"{prefix}-{i}",
            draw(st.sampled_from(GPUS)),
            cpu_milli=draw(st.sampled_from(CPU_MILLI)),
            memory_gib=draw(st.sampled_from(MEMORY_GIB)),
            node_selector=draw(st.sampled_from(SELECTORS)),
            group="g",
            node=node,
        )
        for i in range(count)
    ]


@st.composite
def situations(draw: st.DrawFn) -> tuple[ClusterState, GangSpec]:
    """A cluster, and a gang's unbound members, bound anchors and refused nodes (the policy
    is set by each property)."""
    state = draw(clusters())
    names = sorted(info.name for info in state.snapshot())
    size = draw(st.integers(1, 5))
    unbound = draw(members("m", size))
    anchors: dict[str, str] = {}
    anchor_pods: list[Pod] = []
    if draw(st.booleans()):
        on = draw(st.sampled_from(names))
        for p in draw(members("a", draw(st.integers(1, 2)), node=on)):
            state.upsert_pod(p)
            anchors[p.uid] = on
            anchor_pods.append(p)
    exclude = frozenset(draw(st.lists(st.sampled_from(names), max_size=2)))
    for p in unbound:
        state.upsert_pod(p)
    spec = GangSpec(
        key="default/g",
        placement=parse_placement("pack"),
        members=tuple(unbound),
        anchors=anchors,
        anchor_pods=tuple(anchor_pods),
        exclude=exclude,
    )
    note(describe(state.snapshot(), spec))
    return state, spec


def describe(snap: Snapshot, spec: GangSpec) -> str:
    """The situation in a few lines a person can read back from a failing example."""

    def amounts(r: Resources) -> str:
        return f"{r.gpus()} GPU, {r.get(CPU)}m CPU, {r.get(MEMORY) // GIB}Gi"

    lines = [
        f"node {i.name}: free {amounts(i.free)}, {i.node.labels.get(ZONE)}"
        + (", cordoned" if i.node.unschedulable else "")
        for i in snap
    ]
    lines += [f"member {m.name}: {amounts(m.requests)}, {m.node_selector}" for m in spec.members]
    lines += [f"anchor on {n}" for n in sorted(set(spec.anchors.values()))]
    lines += [f"excluded: {sorted(spec.exclude)}"]
    return "\n".join(lines)


# ---- oracles -------------------------------------------------------------------------------


def may_take(snap: Snapshot, spec: GangSpec, member: Pod, node: str) -> bool:
    """Whether `member` may run on `node` at all (capacity aside)."""
    info = snap.get(node)
    return (
        info is not None
        and node not in spec.exclude
        and eligibility.ineligibility(member, info.node) is None
    )


def total(pods: Sequence[Pod]) -> Resources:
    out = EMPTY
    for p in pods:
        out = out + p.requests
    return out


def nodes_holding_all(snap: Snapshot, spec: GangSpec) -> list[str]:
    """Nodes every unbound member may use whose free capacity holds all of them at once."""
    need = total(spec.members)
    return [
        info.name
        for info in snap
        if all(may_take(snap, spec, m, info.name) for m in spec.members) and need.fits_in(info.free)
    ]


def one_node_each(snap: Snapshot, spec: GangSpec, *, avoid: frozenset[str]) -> dict[str, str]:
    """A member -> node matching, each member alone on a node it fits, none in `avoid`
    (Kuhn's augmenting paths); {} when there is none."""
    options: Mapping[str, list[str]] = {
        m.uid: [
            info.name
            for info in snap
            if info.name not in avoid
            and may_take(snap, spec, m, info.name)
            and m.requests.fits_in(info.free)
        ]
        for m in spec.members
    }
    holder: dict[str, str] = {}  # node -> member uid

    def augment(uid: str, seen: set[str]) -> bool:
        for node in options[uid]:
            if node in seen:
                continue
            seen.add(node)
            if node not in holder or augment(holder[node], seen):
                holder[node] = uid
                return True
        return False

    if all(augment(m.uid, set()) for m in spec.members):
        return {uid: node for node, uid in holder.items()}
    return {}


def with_policy(spec: GangSpec, policy: str) -> GangSpec:
    return GangSpec(
        key=spec.key,
        placement=parse_placement(policy),
        members=spec.members,
        anchors=spec.anchors,
        anchor_pods=spec.anchor_pods,
        exclude=spec.exclude,
    )


def assert_placed(result: object, why: str) -> Placed:
    assert isinstance(result, Placed), f"{why}, yet: {getattr(result, 'reason', result)}"
    return result


# ---- one node holds the whole gang --------------------------------------------------------


@common
@given(situations())
def test_a_gang_that_fits_on_one_node_is_placed_by_pack(
    situation: tuple[ClusterState, GangSpec],
) -> None:
    state, spec = situation
    snap = state.snapshot()
    holders = nodes_holding_all(snap, spec)
    result = place_gang(snap, with_policy(spec, "pack"))
    if holders:
        assert_placed(result, f"node {holders[0]} holds the whole gang")


@common
@given(situations())
def test_same_node_places_a_gang_exactly_when_one_node_holds_it_and_there(
    situation: tuple[ClusterState, GangSpec],
) -> None:
    state, spec = situation
    snap = state.snapshot()
    bound_on = set(spec.anchors.values())
    # Bound members pin a same-node gang to their node.
    holders = [n for n in nodes_holding_all(snap, spec) if not bound_on or {n} == bound_on]
    result = place_gang(snap, with_policy(spec, "same-node"))
    if holders:
        placed = assert_placed(result, f"node {holders[0]} holds the whole gang")
        assert len(set(placed.assignment.values())) == 1
        assert set(placed.assignment.values()) <= set(holders)
    else:
        assert not isinstance(result, Placed), result


# ---- a node of its own for every member ---------------------------------------------------


@common
@given(situations())
def test_a_gang_whose_members_each_fit_a_node_of_their_own_is_placed_by_spread(
    situation: tuple[ClusterState, GangSpec],
) -> None:
    state, spec = situation
    snap = state.snapshot()
    # Spread keeps members off each other's nodes, bound members' included.
    matching = one_node_each(snap, spec, avoid=frozenset(spec.anchors.values()))
    result = place_gang(snap, with_policy(spec, "spread"))
    if matching:
        assert_placed(result, f"{matching} puts every member on a node of its own")


@common
@given(situations())
def test_a_gang_whose_members_each_fit_a_node_of_their_own_is_placed_by_pack(
    situation: tuple[ClusterState, GangSpec],
) -> None:
    state, spec = situation
    snap = state.snapshot()
    matching = one_node_each(snap, spec, avoid=frozenset())
    result = place_gang(snap, with_policy(spec, "pack"))
    if matching:
        assert_placed(result, f"{matching} puts every member on a node of its own")


# ---- gangs a greedy transaction refused (found by Hypothesis) -----------------------------


def two_nodes(x: dict[str, Any], y: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    state.upsert_node(gpu_node("x", **x))
    state.upsert_node(gpu_node("y", **y))
    return state


@pytest.mark.parametrize("policy", ["spread", "pack"])
def test_a_member_that_may_use_any_node_does_not_take_the_only_node_another_may_use(
    policy: str,
) -> None:
    # Equal requests; `anywhere` comes first and takes x (best fit, then name), the one
    # node `z1-only` may use. anywhere -> y, z1-only -> x places both.
    state = two_nodes({"gpus": 1, "labels": {ZONE: "z1"}}, {"gpus": 1, "labels": {ZONE: "z2"}})
    anywhere = pod("anywhere", 1, group="g")
    z1_only = pod("z1-only", 1, group="g", node_selector={ZONE: "z1"})
    spec = GangSpec("default/g", parse_placement(policy), (anywhere, z1_only))
    assert_placed(place_gang(state.snapshot(), spec), "anywhere -> y, z1-only -> x")


@pytest.mark.parametrize("policy", ["spread", "pack"])
def test_the_member_with_more_gpus_does_not_take_the_only_node_with_cpu_for_another(
    policy: str,
) -> None:
    # Requests that cross: `gpu-heavy` goes first (more GPUs) and best fit puts it on x,
    # the only node with CPU for `cpu-heavy`. gpu-heavy -> y, cpu-heavy -> x places both.
    state = two_nodes({"gpus": 4, "cpu": 8}, {"gpus": 8, "cpu": 2})
    gpu_heavy = pod("gpu-heavy", 4, cpu_milli=1000, group="g")
    cpu_heavy = pod("cpu-heavy", 2, cpu_milli=8000, group="g")
    spec = GangSpec("default/g", parse_placement(policy), (gpu_heavy, cpu_heavy))
    assert_placed(place_gang(state.snapshot(), spec), "gpu-heavy -> y, cpu-heavy -> x")


def test_a_member_best_fitted_onto_a_node_two_others_could_use_moves_aside() -> None:
    # Spread: largest first puts `big` on z (its best fit), most constrained first ties,
    # and only a matching finds big -> x, small-0 -> y, small-1 -> z.
    state = ClusterState()
    state.upsert_node(gpu_node("x", 0, cpu=1, memory_gib=512, labels={ZONE: "z1"}))
    state.upsert_node(gpu_node("y", 0, cpu=1, memory_gib=8, labels={ZONE: "z2"}))
    state.upsert_node(gpu_node("z", 0, cpu=1, memory_gib=64, labels={ZONE: "z2"}))
    big = pod("big", 0, cpu_milli=500, memory_gib=64, group="g")
    smalls = [
        pod(f"small-{i}", 0, cpu_milli=500, memory_gib=4, group="g", node_selector={ZONE: "z2"})
        for i in range(2)
    ]
    spec = GangSpec("default/g", parse_placement("spread"), (big, *smalls))
    placed = assert_placed(place_gang(state.snapshot(), spec), "big -> x, smalls -> y, z")
    assert placed.assignment[big.uid] == "x"


# ---- whenever any placement exists (an exhaustive oracle) ---------------------------------
#
# Small clusters (up to 4 nodes) and gangs (up to 5 members) with small integer GPU and
# CPU amounts that cross, so capacity in both matters. Nodes are sized around a planted
# placement (what its members need, plus a little), so most gangs fit only just. The
# oracle tries every member -> node assignment; the transaction's last-resort search is
# exhaustive for gangs this size (`phalanx.core.gang_search`), so it must find a
# placement whenever the oracle does.

SMALL_GPUS = [0, 1, 2]
SMALL_CPUS = [1, 2, 3]
SLACK = [0, 0, 1, 2]
# clique -> leaf, so the labels nest as the default topology has them.
CLIQUES = {"c0": "l0", "c1": "l0", "c2": "l1"}
DOMAIN_POLICIES = ["pack", "interconnect-local", f"domain:{ZONE}"]


@st.composite
def small_situations(draw: st.DrawFn) -> tuple[ClusterState, list[Pod]]:
    gang = [
        pod(
            f"m-{i}",
            draw(st.sampled_from(SMALL_GPUS)),
            cpu_milli=1000 * draw(st.sampled_from(SMALL_CPUS)),
            memory_gib=1,
            group="g",
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    count = draw(st.integers(1, 4))
    planted = [draw(st.integers(0, count - 1)) for _ in gang]
    state = ClusterState()
    for i in range(count):
        need = total([p for p, at in zip(gang, planted, strict=True) if at == i])
        clique = draw(st.sampled_from(sorted(CLIQUES)))
        state.upsert_node(
            rack_node(
                f"n{i}",
                need.gpus() + draw(st.sampled_from(SLACK)),
                cpu=max(1, need.get(CPU) // 1000 + draw(st.sampled_from(SLACK))),
                spine="s0",
                leaf=CLIQUES[clique],
                clique=clique,
                labels={ZONE: draw(st.sampled_from(["z1", "z2"]))},
            )
        )
    for p in gang:
        state.upsert_pod(p)
    note(describe(state.snapshot(), GangSpec("default/g", parse_placement("pack"), tuple(gang))))
    return state, gang


def any_placement(
    snap: Snapshot, gang: Sequence[Pod], domain_of: Mapping[str, str]
) -> dict[str, str]:
    """Some member name -> node assignment that fits every node's free capacity and keeps
    the gang inside one value of `domain_of` (every node is in one for no constraint),
    found by trying them all; {} when there is none."""
    names = [info.name for info in snap if info.name in domain_of]
    for nodes in itertools.product(names, repeat=len(gang)):
        if len({domain_of[n] for n in nodes}) > 1:
            continue
        used: dict[str, Resources] = {}
        for p, n in zip(gang, nodes, strict=True):
            used[n] = used.get(n, EMPTY) + p.requests
        if all(
            eligibility.ineligibility(p, snap.nodes[n].node) is None
            for p, n in zip(gang, nodes, strict=True)
        ) and all(u.fits_in(snap.nodes[n].free) for n, u in used.items()):
            return {p.name: n for p, n in zip(gang, nodes, strict=True)}
    return {}


def label_domains(snap: Snapshot, key: str) -> dict[str, str]:
    """Node -> its value of label `key`; nodes without it are left out."""
    return {i.name: i.node.labels[key] for i in snap if key in i.node.labels}


@common
@given(small_situations(), st.sampled_from(DOMAIN_POLICIES))
def test_a_small_gang_is_placed_whenever_any_placement_fits(
    situation: tuple[ClusterState, list[Pod]], policy: str
) -> None:
    state, gang = situation
    snap = state.snapshot()
    key = {"pack": None, "interconnect-local": CLIQUE, f"domain:{ZONE}": ZONE}[policy]
    domain_of = label_domains(snap, key) if key else {i.name: "" for i in snap}
    witness = any_placement(snap, gang, domain_of)
    result = place_gang(snap, GangSpec("default/g", parse_placement(policy), tuple(gang)))
    if witness:
        assert_placed(result, f"{witness} places the gang")


@common
@given(small_situations(), st.sampled_from([CLIQUE, LEAF, SPINE]))
def test_a_small_gang_with_a_required_level_is_placed_whenever_a_domain_of_it_fits(
    situation: tuple[ClusterState, list[Pod]], required: str
) -> None:
    state, gang = situation
    snap = state.snapshot()
    witness = any_placement(snap, gang, label_domains(snap, required))
    topology = GangTopology(DEFAULT, required=DEFAULT.level(required))
    spec = GangSpec("default/g", parse_placement("pack"), tuple(gang), topology=topology)
    result = place_gang(snap, spec)
    if witness:
        placed = assert_placed(result, f"{witness} places the gang inside one {required}")
        assert len({snap.nodes[n].node.labels[required] for n in placed.nodes}) == 1
