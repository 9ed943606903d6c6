"""More gang demand than GPUs, through kube-scheduler and Phalanx, with single pods mixed
in: at every sampled moment no gang is partially bound (beyond the short window while its
bindings land) and no node's GPUs are over-committed; at the end every gang is whole or
has nothing bound. Then capacity is freed and the waiting gangs land, still whole."""

from __future__ import annotations

import itertools

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Gang, Scenario

pytestmark = pytest.mark.e2e

NODES = {"a": 8, "b": 8, "c": 8, "d": 8}  # 32 GPUs
# name: (members, GPUs per member, form)   — 56 GPUs of gangs, plus 6 single GPUs
GANGS = {
    "four-by-two": (4, 2, "podgroup"),
    "two-by-four": (2, 4, "podgroup"),
    "eight-by-one": (8, 1, "podgroup"),
    "three-by-four": (3, 4, "annotations"),
    "two-by-eight": (2, 8, "podgroup"),
    "four-by-one": (4, 1, "annotations"),
}
SINGLES = 6


def _judge(sc: Scenario, gangs: list[Gang]) -> tuple[list[Gang], list[Gang]]:
    """(whole gangs, empty gangs); fails on a gang with some but not all members bound."""
    where = sc.placement()
    whole: list[Gang] = []
    empty: list[Gang] = []
    for gang in gangs:
        bound = sum(1 for m in gang.members if where.get(m))
        assert bound in (0, len(gang.members)), (
            f"gang {gang.name} ended with {bound}/{len(gang.members)} bound\n{sc.diagnostics()}"
        )
        (whole if bound else empty).append(gang)
    return whole, empty


def _free_gpus(sc: Scenario) -> dict[str, int]:
    where = sc.placement()
    pods = sc.pods()
    used = dict.fromkeys(sc.nodes, 0)
    for name, node in where.items():
        if node:
            gpus = pods[name]["spec"]["containers"][0]["resources"]["requests"].get(
                "nvidia.com/gpu", "0"
            )
            used[node] += int(gpus)
    return {n: sc.nodes[n] - used[n] for n in sc.nodes}


def _fits(gang: Gang, free: dict[str, int]) -> bool:
    """Would `gang` (pack) fit the free GPUs? Members are whole-node-local requests."""
    return sum(f // gang.gpus for f in free.values()) >= len(gang.members)


def test_gangs_competing_for_too_few_gpus_end_whole_or_empty(cluster: Scenario) -> None:  # noqa: F811
    for suffix, gpus in NODES.items():
        cluster.node(suffix, gpus)
    cluster.nodes_ready()
    gangs = [
        cluster.gang(name, size, gpus, form=form, create=0)
        for name, (size, gpus, form) in GANGS.items()
    ]
    # Every gang's members and the single pods reach kube-scheduler interleaved, as from
    # many controllers at once (created gated, then released in that order).
    queues: list[list[tuple[Gang | None, int]]] = [
        [(g, i) for i in range(len(g.members))] for g in gangs
    ]
    queues.append([(None, i) for i in range(SINGLES)])
    order = [x for x in itertools.chain.from_iterable(itertools.zip_longest(*queues)) if x]
    for gang, i in order:
        if gang is None:
            cluster.pod(f"single-{i}", 1, gated=True)
        else:
            cluster.add_member(gang, i, gated=True)
    for gang, i in order:
        cluster.ungate(f"single-{i}" if gang is None else gang.members[i])

    placed = cluster.wait_quiet(settle=4.0, timeout=120)
    whole, empty = _judge(cluster, gangs)
    singles = [f"single-{i}" for i in range(SINGLES)]
    free = _free_gpus(cluster)
    assert all(f >= 0 for f in free.values()), free
    assert whole, f"no gang was placed at all: {placed}"
    assert empty, "every gang fit: the test no longer creates contention"
    bound_singles = [s for s in singles if placed.get(s)]
    # Work-conserving: a gang still waiting at rest does not fit what is free.
    for gang in empty:
        assert not _fits(gang, free), (
            f"gang {gang.name} waits although {free} would hold it\n{cluster.diagnostics()}"
        )
    assert cluster.phalanx.metric("phalanx_partial_gangs") == 0
    assert cluster.phalanx.metric("phalanx_overcommitted_nodes") == 0
    assert cluster.phalanx.metric("phalanx_reserved_gpus") == 0

    # Free the capacity the winners and the single pods hold: the waiting gangs land,
    # still all or nothing, as far as 32 GPUs go.
    cluster.delete_pods([m for g in whole for m in g.members] + bound_singles)
    cluster.wait(
        "a previously waiting gang to be placed",
        lambda: any(cluster.bound_count(g) for g in empty),
        timeout=60,
    )
    cluster.wait_quiet(settle=4.0, timeout=120)
    whole_after, empty_after = _judge(cluster, empty)
    assert whole_after, "no waiting gang was placed after capacity was freed"
    free = _free_gpus(cluster)
    for gang in empty_after:
        assert not _fits(gang, free), (
            f"gang {gang.name} waits although {free} would hold it\n{cluster.diagnostics()}"
        )
    assert cluster.phalanx.metric("phalanx_partial_gangs") == 0
    assert cluster.phalanx.metric("phalanx_reserved_gpus") == 0
    verdict = cluster.monitor.stop()
    verdict.assert_clean()
    assert verdict.samples >= 20, verdict.describe()  # it watched the whole contest
