"""Properties of the gang transaction over random clusters and gangs (Hypothesis)."""

from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from builders import gpu_node, pod, present
from phalanx.core.cache import ClusterState, MemberReservation, Reservation
from phalanx.core.gang import GangSpec, Placed, place_gang
from phalanx.core.inventory import parse_placement
from phalanx.core.model import CPU, MEMORY, Pod

ZONE = "topology.kubernetes.io/zone"
POLICIES = ["pack", "same-node", "spread", "interconnect-local", f"domain:{ZONE}"]


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    state = ClusterState()
    count = draw(st.integers(1, 12))
    for i in range(count):
        state.upsert_node(
            gpu_node(
                f"n{i:02d}",
                draw(st.sampled_from([0, 1, 2, 4, 8])),
                cpu=draw(st.sampled_from([4, 16, 64])),
                clique=draw(st.sampled_from(["", "A", "B"])),
                labels={ZONE: draw(st.sampled_from(["z1", "z2"]))} if draw(st.booleans()) else {},
                unschedulable=draw(st.booleans()) and draw(st.booleans()),
            )
        )
    for j in range(draw(st.integers(0, 6))):
        node = f"n{draw(st.integers(0, count - 1)):02d}"
        state.upsert_pod(pod(f"busy-{j}", draw(st.integers(0, 3)), node=node, cpu_milli=500))
    return state


@st.composite
def gangs(draw: st.DrawFn) -> tuple[str, tuple[Pod, ...]]:
    size = draw(st.integers(1, 8))
    gpus = draw(st.integers(0, 4))
    cpu = draw(st.sampled_from([100, 1000, 4000]))
    members = tuple(
        pod(f"m-{i}", gpus, cpu_milli=cpu, memory_gib=1, group="g") for i in range(size)
    )
    return draw(st.sampled_from(POLICIES)), members


def spec_for(policy: str, members: tuple[Pod, ...]) -> GangSpec:
    return GangSpec(key="default/g", placement=parse_placement(policy), members=members)


def reserve(state: ClusterState, result: Placed) -> None:
    state.reserve(
        Reservation(
            "default/g",
            tuple(
                MemberReservation(p.uid, p.key, result.assignment[p.uid], p.requests)
                for p in result.members
            ),
            0,
            60,
        )
    )


common = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(clusters(), gangs())
def test_a_gang_commits_whole_or_leaves_the_model_untouched(
    state: ClusterState, gang: tuple[str, tuple[Pod, ...]]
) -> None:
    policy, members = gang
    for p in members:
        state.upsert_pod(p)
    before = dict(state.snapshot().nodes)
    overcommitted_by_others = set(state.overcommitted_nodes())  # pods bound without us
    result = place_gang(state.snapshot(), spec_for(policy, members))
    assert dict(state.snapshot().nodes) == before  # planning never mutates
    if isinstance(result, Placed):
        assert set(result.assignment) == {p.uid for p in members}
        reserve(state, result)  # raises if anything no longer fits
        assert set(state.overcommitted_nodes()) <= overcommitted_by_others
    else:
        assert result.reason


@common
@given(clusters(), gangs())
def test_release_returns_exactly_what_was_reserved(
    state: ClusterState, gang: tuple[str, tuple[Pod, ...]]
) -> None:
    policy, members = gang
    for p in members:
        state.upsert_pod(p)
    before = dict(state.snapshot().nodes)
    result = place_gang(state.snapshot(), spec_for(policy, members))
    if isinstance(result, Placed):
        reserve(state, result)
        state.release("default/g")
    assert dict(state.snapshot().nodes) == before
    assert state.reserved_gpus() == 0


@common
@given(clusters(), gangs())
def test_the_same_snapshot_and_gang_give_the_same_placement(
    state: ClusterState, gang: tuple[str, tuple[Pod, ...]]
) -> None:
    policy, members = gang
    snap = state.snapshot()
    first = place_gang(snap, spec_for(policy, members))
    second = place_gang(snap, spec_for(policy, members))
    assert first == second


@common
@given(clusters(), gangs())
def test_every_committed_placement_satisfies_its_policy_and_eligibility(
    state: ClusterState, gang: tuple[str, tuple[Pod, ...]]
) -> None:
    policy, members = gang
    snap = state.snapshot()
    result = place_gang(snap, spec_for(policy, members))
    if not isinstance(result, Placed):
        return
    nodes = [result.assignment[p.uid] for p in members]
    for name in nodes:
        assert present(snap.get(name)).node.schedulable
    if policy == "same-node":
        assert len(set(nodes)) == 1
    elif policy == "spread":
        assert len(set(nodes)) == len(nodes)
    elif policy == "interconnect-local":
        cliques = {present(snap.get(n)).node.labels.get("nvidia.com/gpu.clique", "") for n in nodes}
        assert len(cliques) == 1
        assert cliques != {""} or len(set(nodes)) == 1
    elif policy.startswith("domain:"):
        assert len({present(snap.get(n)).node.labels[ZONE] for n in nodes}) == 1


@common
@given(clusters(), gangs())
def test_a_pack_gang_that_fits_still_fits_without_one_member(
    state: ClusterState, gang: tuple[str, tuple[Pod, ...]]
) -> None:
    _, members = gang
    result = place_gang(state.snapshot(), spec_for("pack", members))
    if isinstance(result, Placed) and len(members) > 1:
        smaller = place_gang(state.snapshot(), spec_for("pack", members[:-1]))
        assert isinstance(smaller, Placed)


@common
@given(clusters(), st.integers(1, 4), st.integers(1, 4), st.sampled_from([100, 1000, 4000]))
def test_alike_members_one_node_can_hold_land_together_on_the_best_fitting_such_node(
    state: ClusterState, size: int, gpus: int, cpu: int
) -> None:
    members = tuple(
        pod(f"m-{i}", gpus, cpu_milli=cpu, memory_gib=1, group="g") for i in range(size)
    )
    snapshot = state.snapshot()
    together = members[0].requests.scaled(size)
    holders = [
        info for info in snapshot if not info.node.unschedulable and together.fits_in(info.free)
    ]
    assume(holders)
    # Best fit: the least free GPUs, then CPU, then memory; ties by name.
    best = min(holders, key=lambda i: (i.free.gpus(), i.free.get(CPU), i.free.get(MEMORY), i.name))
    result = place_gang(snapshot, spec_for("pack", members))
    assert isinstance(result, Placed)
    assert set(result.assignment.values()) == {best.name}


def test_a_pending_copy_of_a_bound_pod_is_not_double_counted() -> None:
    state = ClusterState()
    state.upsert_node(gpu_node("n1"))
    p = pod("a", 4, group="g")
    state.upsert_pod(p)
    state.upsert_pod(replace(p, node_name="n1"))
    state.upsert_pod(replace(p, node_name="n1"))
    assert present(state.node("n1")).free.gpus() == 4
