"""Properties of placement by topology over random NVL72-shaped clusters (Hypothesis).

The oracle for "a domain could hold the gang" is the plain `pack` transaction restricted to
that domain's nodes (every other node excluded), which knows nothing of topologies.
"""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import CLIQUE, HOSTNAME, LEAF, SPINE, pod, rack_node
from phalanx.core.cache import ClusterState, MemberReservation, Reservation
from phalanx.core.gang import GangSpec, Placed, Unfit, place_gang
from phalanx.core.model import Placement, Pod, SubGroupPolicy
from phalanx.core.snapshot import Snapshot
from phalanx.core.topology import (
    CLUSTER,
    DEFAULT_TOPOLOGIES,
    Domain,
    GangTopology,
    SubGroupLevel,
    TaskPreferenceLevel,
    TaskSetLevel,
    TopologyIndex,
    build_index,
)

DEFAULT = DEFAULT_TOPOLOGIES.default
Gang = tuple[GangTopology, tuple[Pod, ...]]  # a topology and the members it constrains
LEVELS = [SPINE, LEAF, CLIQUE, HOSTNAME]


@st.composite
def clusters(draw: st.DrawFn, *, labelled: bool = False) -> ClusterState:
    """Spines of leaves of cliques of 1-4 GPU nodes; a few nodes lack a label (unless
    `labelled`); some GPUs busy."""
    state = ClusterState()
    cliques = draw(st.integers(1, 6))
    per_clique = draw(st.integers(1, 4))
    per_leaf = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([4, 8]))
    names = []
    for c in range(cliques):
        for n in range(per_clique):
            name = f"c{c}-n{n}"
            leaf, spine = f"l{c // per_leaf}", f"s{c // (per_leaf * 2)}"
            unlabelled = (
                "" if labelled else draw(st.sampled_from(["", "", "", "", "clique", "leaf"]))
            )
            state.upsert_node(
                rack_node(
                    name,
                    gpus,
                    spine=spine,
                    leaf="" if unlabelled == "leaf" else leaf,
                    clique="" if unlabelled == "clique" else f"c{c}",
                )
            )
            names.append(name)
    for j in range(draw(st.integers(0, len(names)))):
        node = draw(st.sampled_from(names))
        state.upsert_pod(pod(f"busy-{j}", draw(st.integers(1, gpus // 2)), node=node))
    return state


@st.composite
def constraints(draw: st.DrawFn) -> Gang:
    required = draw(st.sampled_from([None, 0, 1, 2]))
    lowest = 0 if required is None else required
    preferred = draw(st.sampled_from([None, *range(lowest, 4)]))
    members = tuple(
        pod(f"m-{i}", draw(st.sampled_from([1, 2, 4])), group="g", memory_gib=1)
        for i in range(draw(st.integers(1, 8)))
    )
    return GangTopology(DEFAULT, required=required, preferred=preferred), members


def spec(
    members: tuple[Pod, ...],
    topology: GangTopology | None = None,
    index: TopologyIndex | None = None,
    exclude: frozenset[str] = frozenset(),
) -> GangSpec:
    return GangSpec(
        "default/g", Placement(), members, exclude=exclude, topology=topology, index=index
    )


def fits_in_one(
    snapshot: Snapshot, index: TopologyIndex, level: int, members: tuple[Pod, ...]
) -> bool:
    """Whether some domain of `level` holds the gang, by the topology-free transaction."""
    for domain in index.domains[level]:
        outside = frozenset(n for n in snapshot.names if n not in set(domain.nodes))
        if isinstance(place_gang(snapshot, spec(members, exclude=outside)), Placed):
            return True
    return False


def domains_of(index: TopologyIndex, level: int, result: Placed | Unfit) -> set[int]:
    assert isinstance(result, Placed), result
    return {index.of_node[n][level] for n in result.assignment.values()}


def assert_every_level_held(
    result: Placed,
    members: tuple[Pod, ...],
    topology: GangTopology,
    index: TopologyIndex,
    snapshot: Snapshot,
) -> None:
    """Every member placed; every set and every task inside one domain of its own level,
    the gang inside one of its required level; no node given more GPUs than it has free."""
    assert {p.uid for p in result.members} == {p.uid for p in members}
    held = [(s.tasks, s.level) for s in topology.task_sets]
    held += [(frozenset({task}), level) for task, level in topology.task_levels]
    for tasks, level in held:
        nodes = {result.assignment[p.uid] for p in members if p.task in tasks}
        assert len({index.of_node[n][level] for n in nodes}) == 1, (tasks, level)
    if topology.required is not None:
        assert len(domains_of(index, topology.required, result)) == 1
    used: dict[str, int] = {}
    for p in members:
        node = result.assignment[p.uid]
        used[node] = used.get(node, 0) + p.requests.gpus()
    assert all(gpus <= snapshot.nodes[n].free.gpus() for n, gpus in used.items())


common = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(clusters(), constraints())
def test_a_gang_with_a_required_level_is_always_inside_one_domain_of_it(
    state: ClusterState, gang: Gang
) -> None:
    topology, members = gang
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    if isinstance(result, Placed) and topology.required is not None:
        assert len(domains_of(index, topology.required, result)) == 1


@common
@given(clusters(), constraints())
def test_if_a_preferred_domain_could_hold_the_gang_the_placement_is_inside_one(
    state: ClusterState, gang: Gang
) -> None:
    topology, members = gang
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    if topology.preferred is not None and fits_in_one(snapshot, index, topology.preferred, members):
        assert isinstance(result, Placed)
        assert len(domains_of(index, topology.preferred, result)) == 1
        assert result.explanation.startswith(f"preferred {LEVELS[topology.preferred]}: placed")


@common
@given(clusters(), constraints())
def test_a_required_gang_is_unfit_only_when_no_domain_of_the_level_could_hold_it(
    state: ClusterState, gang: Gang
) -> None:
    topology, members = gang
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    level = topology.required if topology.required is not None else CLUSTER
    if isinstance(result, Unfit):
        assert result.reason
        if level != CLUSTER:
            assert not fits_in_one(snapshot, index, level, members)


@common
@given(clusters(), constraints())
def test_planning_by_topology_commits_whole_or_not_at_all_and_is_deterministic(
    state: ClusterState, gang: Gang
) -> None:
    topology, members = gang
    for p in members:
        state.upsert_pod(p)
    snapshot = state.snapshot()
    before = dict(snapshot.nodes)
    first = place_gang(snapshot, spec(members, topology))
    assert first == place_gang(snapshot, spec(members, topology))
    assert dict(state.snapshot().nodes) == before
    if isinstance(first, Placed):
        assert set(first.assignment) == {p.uid for p in members}
        state.reserve(  # raises if anything no longer fits
            Reservation(
                "default/g",
                tuple(
                    MemberReservation(p.uid, p.key, first.assignment[p.uid], p.requests)
                    for p in first.members
                ),
                0,
                60,
            )
        )


@common
@given(clusters(), st.integers(1, 4), st.integers(1, 3), st.sampled_from([1, 2, 3]))
def test_every_slice_lands_inside_one_domain_of_the_slice_level(
    state: ClusterState, slices: int, size: int, level: int
) -> None:
    members = tuple(
        pod(f"w-{i}", 1, group="g", labels={"apps.kubernetes.io/pod-index": str(i)})
        for i in range(slices * size)
    )
    topology = GangTopology(DEFAULT, slice_size=size, slice_level=level)
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    if isinstance(result, Placed):
        for k in range(slices):
            run = members[k * size : (k + 1) * size]
            assert len({index.of_node[result.assignment[p.uid]][level] for p in run}) == 1


def placed_whole(
    state: ClusterState, members: tuple[Pod, ...], topology: GangTopology
) -> tuple[Placed, TopologyIndex] | None:
    """The gang placed by topology, every member of it and no node given more GPUs than it
    has free, with the index it was placed over; None when it is unfit (an answer, never
    an error)."""
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    if not isinstance(result, Placed):
        assert isinstance(result, Unfit)
        return None
    assert {p.uid for p in result.members} == {p.uid for p in members}
    used: dict[str, int] = {}
    for p in members:
        node = result.assignment[p.uid]
        used[node] = used.get(node, 0) + p.requests.gpus()
    assert all(gpus <= snapshot.nodes[n].free.gpus() for n, gpus in used.items())
    return result, index


@st.composite
def layered_gangs(draw: st.DrawFn) -> tuple[tuple[tuple[int, int], ...], tuple[Pod, ...]]:
    """Multi-layer slices by rank: 1-3 layers, widest first, at levels each narrower than
    the one before, each size a multiple (1-3) of the next (the innermost 1-3 members);
    1-3 runs of the widest; members of 1 or 2 GPUs. Returns (layers as (size, level), the
    members)."""
    depth = draw(st.integers(1, 3))
    levels = sorted(draw(st.lists(st.integers(0, 3), min_size=depth, max_size=depth, unique=True)))
    sizes = [draw(st.integers(1, 3))]
    for _ in range(depth - 1):
        sizes.insert(0, sizes[0] * draw(st.integers(1, 3)))
    count = sizes[0] * draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([1, 2]))
    members = tuple(
        pod(
            f"w-{i}", gpus, group="g", memory_gib=1, labels={"apps.kubernetes.io/pod-index": str(i)}
        )
        for i in range(count)
    )
    return tuple(zip(sizes, levels, strict=True)), members


@common
@given(clusters(), layered_gangs())
def test_every_run_of_every_slice_layer_lands_inside_one_domain_of_its_level(
    state: ClusterState, gang: tuple[tuple[tuple[int, int], ...], tuple[Pod, ...]]
) -> None:
    layers, members = gang
    (size, level), outer = layers[-1], layers[:-1]
    topology = GangTopology(DEFAULT, slice_size=size, slice_level=level, slice_layers=outer)
    placed = placed_whole(state, members, topology)
    if placed is None:
        return
    result, index = placed
    for run_size, run_level in layers:
        for k in range(0, len(members), run_size):
            run = members[k : k + run_size]
            where = {index.of_node[result.assignment[p.uid]][run_level] for p in run}
            assert len(where) == 1, (run_size, run_level, k)


@common
@given(
    clusters(),
    st.lists(st.integers(1, 3), min_size=1, max_size=4),
    st.sampled_from([1, 2, 3]),
    st.integers(0, 2),
)
def test_every_volcano_subgroup_lands_inside_one_domain_of_its_level(
    state: ClusterState, partitions: list[int], level: int, loose: int
) -> None:
    """Partitions of 1-3 one-GPU members (and `loose` members in none), each partition a
    subgroup required in one domain of `level`."""
    members = tuple(
        pod(f"p{k}-{i}", 1, group="g", memory_gib=1, labels={"partition": str(k)})
        for k, size in enumerate(partitions)
        for i in range(size)
    ) + tuple(pod(f"loose-{i}", 1, group="g", memory_gib=1) for i in range(loose))
    policy = SubGroupPolicy("p", keys=("partition",), required="tier:1")
    topology = GangTopology(DEFAULT, subgroups=(SubGroupLevel(policy, level, None),))
    placed = placed_whole(state, members, topology)
    if placed is None:
        return
    result, index = placed
    for k in range(len(partitions)):
        nodes = {result.assignment[p.uid] for p in members if p.labels.get("partition") == str(k)}
        assert len({index.of_node[n][level] for n in nodes}) == 1, k


@common
@given(
    clusters(),
    st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2])),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([None, 0, 1]),
)
def test_every_task_lands_inside_one_domain_of_its_own_level_and_no_node_is_over_committed(
    state: ClusterState, tasks: list[tuple[int, int, int]], required: int | None
) -> None:
    """Tasks t0.. of (members, level, GPUs each), levels drawn apart or alike."""
    members = tuple(
        pod(f"t{t}-{i}", gpus, group="g", task=f"t{t}", memory_gib=1)
        for t, (size, _, gpus) in enumerate(tasks)
        for i in range(size)
    )
    levels = tuple((f"t{t}", level) for t, (_, level, _) in enumerate(tasks))
    shared = {level for _, level in levels}
    topology = GangTopology(
        DEFAULT,
        required=required,
        slice_level=next(iter(shared)) if len(shared) == 1 else None,
        slice_tasks=frozenset(task for task, _ in levels),
        task_levels=levels if len(shared) > 1 else (),
    )
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    if not isinstance(result, Placed):
        return
    for task, level in levels:
        nodes = {result.assignment[p.uid] for p in members if p.task == task}
        assert len({index.of_node[n][level] for n in nodes}) == 1, task
    if required is not None:
        assert len(domains_of(index, required, result)) == 1
    used: dict[str, int] = {}
    for p in members:
        node = result.assignment[p.uid]
        used[node] = used.get(node, 0) + p.requests.gpus()
    assert all(gpus <= snapshot.nodes[n].free.gpus() for n, gpus in used.items())


@st.composite
def set_gangs(draw: st.DrawFn) -> Gang:
    """Tasks t0..t3 (1-3 members of 1 or 2 GPUs); an outer set of the first k tasks at one
    level, perhaps an inner set of its first j at the same or a narrower one; each task at
    no level or one at or below every set holding it; the gang required at most as wide."""
    count = draw(st.integers(2, 4))
    outer_size = draw(st.integers(1, count))
    outer = draw(st.sampled_from([0, 1, 2]))
    inner_size = draw(st.integers(0, outer_size))
    inner = draw(st.integers(outer, 2))
    sets = [TaskSetLevel("outer", frozenset(f"t{t}" for t in range(outer_size)), outer)]
    if inner_size:
        sets.append(TaskSetLevel("inner", frozenset(f"t{t}" for t in range(inner_size)), inner))
    members, levels = [], []
    for t in range(count):
        floor = max((s.level for s in sets if f"t{t}" in s.tasks), default=0)
        level = draw(st.sampled_from([None, *range(floor, 4)]))
        if level is not None:
            levels.append((f"t{t}", level))
        gpus = draw(st.sampled_from([1, 2]))
        members += [
            pod(f"t{t}-{i}", gpus, group="g", task=f"t{t}", memory_gib=1)
            for i in range(draw(st.integers(1, 3)))
        ]
    topology = GangTopology(
        DEFAULT,
        required=draw(st.sampled_from([None, *range(outer + 1)])),
        slice_tasks=frozenset(task for task, _ in levels),
        task_levels=tuple(levels),
        task_sets=tuple(sets),
    )
    return topology, tuple(members)


@common
@given(clusters(), set_gangs())
def test_every_set_and_every_task_lands_inside_one_domain_of_its_level(
    state: ClusterState, gang: Gang
) -> None:
    topology, members = gang
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    if not isinstance(result, Placed):
        assert isinstance(result, Unfit)
        return
    assert_every_level_held(result, members, topology, index, snapshot)


@st.composite
def preferring_gangs(draw: st.DrawFn) -> tuple[GangTopology, GangTopology, tuple[Pod, ...]]:
    """A `set_gangs()` gang, and the same with preferences: some tasks and sets preferring a
    level narrower than their own (and the gang's) required one."""
    topology, members = draw(set_gangs())
    floor = topology.required if topology.required is not None else CLUSTER
    preferences = []
    for task in sorted({p.task for p in members}):
        own = topology.task_level(task)
        lowest = max(floor, own if own is not None else CLUSTER) + 1
        if lowest < 4 and draw(st.booleans()):
            level = draw(st.integers(lowest, 3))
            preferences.append(
                TaskPreferenceLevel(f"task {task}", frozenset({task}), level, own, False)
            )
    for held in topology.task_sets:
        if held.level < 3 and draw(st.booleans()):
            level = draw(st.integers(held.level + 1, 3))
            preferences.append(TaskPreferenceLevel(held.label, held.tasks, level, held.level, True))
    return topology, replace(topology, preferences=tuple(preferences)), members


@common
@given(clusters(), preferring_gangs())
def test_a_gang_that_fits_with_preferences_ignored_still_fits_with_them_as_required(
    state: ClusterState, gangs: tuple[GangTopology, GangTopology, tuple[Pod, ...]]
) -> None:
    plain, preferring, members = gangs
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    if not isinstance(place_gang(snapshot, spec(members, plain, index)), Placed):
        return
    result = place_gang(snapshot, spec(members, preferring, index))
    assert isinstance(result, Placed), result
    assert_every_level_held(result, members, plain, index, snapshot)


@common
@given(clusters(labelled=True), st.integers(1, 6), st.sampled_from([1, 2, 4]))
def test_a_gang_that_fits_in_a_broken_clique_never_breaks_a_whole_one(
    state: ClusterState, size: int, gpus: int
) -> None:
    members = tuple(pod(f"m-{i}", gpus, group="g", memory_gib=1) for i in range(size))
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))

    def whole(domain: Domain) -> bool:
        return all(snapshot.nodes[n].requested.gpus() == 0 for n in domain.nodes)

    broken = [d for d in index.domains[2] if not whole(d)]
    fits_broken = any(
        isinstance(
            place_gang(
                snapshot,
                spec(members, exclude=frozenset(snapshot.names) - set(d.nodes)),
            ),
            Placed,
        )
        for d in broken
    )
    result = place_gang(snapshot, spec(members, GangTopology(DEFAULT, preferred=2), index))
    if fits_broken:
        (clique,) = domains_of(index, 2, result)
        assert not whole(index.domains[2][clique])


@common
@given(clusters(), constraints())
def test_a_gang_climbs_no_higher_than_the_narrowest_level_one_of_whose_domains_holds_it(
    state: ClusterState, gang: Gang
) -> None:
    topology, members = gang
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    for level in topology.walk():
        if level == CLUSTER:
            return
        if fits_in_one(snapshot, index, level, members):
            assert isinstance(result, Placed)
            assert len(domains_of(index, level, result)) == 1
            return


@common
@given(clusters(), constraints())
def test_of_the_domains_that_could_hold_a_required_gang_the_tightest_wins(
    state: ClusterState, gang: Gang
) -> None:
    topology, members = gang
    if topology.required is None or topology.preferred not in (None, topology.required):
        return
    snapshot = state.snapshot()
    index = build_index(DEFAULT, (i.node for i in snapshot))
    result = place_gang(snapshot, spec(members, topology, index))
    level = topology.required

    def free(domain: Domain) -> tuple[int, int, int]:
        infos = [snapshot.nodes[n] for n in domain.nodes]
        return (
            sum(max(0, i.free.gpus()) for i in infos),
            sum(max(0, i.free.get("cpu")) for i in infos),
            sum(max(0, i.free.get("memory")) for i in infos),
        )

    holding = [
        d
        for d, domain in enumerate(index.domains[level])
        if isinstance(
            place_gang(
                snapshot, spec(members, exclude=frozenset(snapshot.names) - set(domain.nodes))
            ),
            Placed,
        )
    ]
    if holding:
        (chosen,) = domains_of(index, level, result)
        tightest = min(holding, key=lambda d: (free(index.domains[level][d]), d))
        assert chosen == tightest
