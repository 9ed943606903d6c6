"""Topology through the service: where a gang landed in Events, status, /debug and metrics;
bad intent as an Event on its group; inconsistent node labels said once, on the Node."""

import asyncio
from typing import Any, cast

import pytest
from support import ScriptedSource, group_view, pod_of, topology_view

from builders import (
    node_obj,
    pod_obj,
    podgroup_obj,
    present,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
)
from clocks import FakeClock
from phalanx.core.inventory import parse_node
from phalanx.core.model import Binding, Dialect, GroupRef
from phalanx.demo.report import render_group_view
from phalanx.service.extender import Extender, ServiceSettings

pytestmark = pytest.mark.anyio

SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
CLIQUE = "nvidia.com/gpu.clique"
REQUIRED = "phalanx.io/topology-required"
PREFERRED = "phalanx.io/topology-preferred"


def rack(cliques: int, per_clique: int = 4, *, stray: bool = False) -> list[dict[str, Any]]:
    """`cliques` cliques of four-GPU nodes, two cliques per leaf, one spine; with `stray`, a
    node claiming clique c0 under another leaf."""
    nodes = [
        node_obj(
            f"c{c}-n{n}",
            4,
            clique=f"c{c}",
            labels={SPINE: "s0", LEAF: f"l{c // 2}"},
        )
        for c in range(cliques)
        for n in range(per_clique)
    ]
    if stray:
        nodes.append(node_obj("stray", 4, clique="c0", labels={SPINE: "s0", LEAF: "l9"}))
    return nodes


def gang(name: str, size: int, annotations: dict[str, str]) -> list[dict[str, Any]]:
    return [
        podgroup_obj(name, size, annotations=annotations),
        *(pod_obj(f"{name}-{i}", 4, group=name) for i in range(size)),
    ]


async def start(objects: list[dict[str, Any]]) -> tuple[Extender, ScriptedSource]:
    source = ScriptedSource(objects)
    ext = Extender(
        source,
        ServiceSettings(barrier_timeout_seconds=5.0, report_hold_seconds=0),
        clock=FakeClock(),
    )
    await ext.start()
    return ext, source


def offered(ext: Extender) -> list[str]:
    return sorted(i.name for i in ext.state.nodes())


async def place(ext: Extender, names: list[str]) -> dict[str, str]:
    """Filter every member, then bind them all (the barrier releases them together)."""
    nodes = {}
    for name in names:
        result = ext.filter(pod_of(ext, name), offered(ext))
        assert len(result.feasible) == 1, result
        nodes[name] = result.feasible[0]
    errors = await asyncio.gather(
        *(ext.bind(Binding(pod_of(ext, n).ref, node)) for n, node in nodes.items())
    )
    assert errors == [""] * len(names)
    await asyncio.sleep(0)
    return nodes


def events(source: ScriptedSource, reason: str) -> list[tuple[str, str, str, str, str, bool]]:
    return [e for e in source.events if e[2] == reason]


async def test_a_placed_gang_says_where_it_landed_in_its_event_status_view_and_metric() -> None:
    ext, source = await start([*rack(4), *gang("g", 6, {PREFERRED: CLIQUE, REQUIRED: LEAF})])
    nodes = await place(ext, [f"g-{i}" for i in range(6)])
    assert {n.split("-")[0] for n in nodes.values()} <= {"c0", "c1"}  # one leaf
    (committed,) = [e for e in source.events if e[3].startswith("reserved 6 member(s)")]
    explanation = f"placed within {LEAF}=l0"
    assert f"preferred {CLIQUE}: no" in committed[3]
    assert explanation in committed[3]
    ext.refresh_statuses()
    await asyncio.sleep(0)
    status = source.statuses["default/g"]
    assert status.message.startswith("bound 6 member(s) together; ")
    assert explanation in status.message
    plan = group_view(ext, "g")["plan"]
    assert plan["level"] == LEAF
    assert explanation in plan["explanation"]
    shown = render_group_view(group_view(ext, "g"))
    assert f"  level:          {LEAF}" in shown
    assert f"  topology:       preferred {CLIQUE}" in shown
    sample = ext.metrics.registry.get_sample_value
    assert sample("phalanx_gang_placements_total", {"level": LEAF}) == 1
    await ext.stop()


async def test_a_gang_placed_by_an_upstream_label_key_is_counted_as_node_label_not_by_its_key() -> (
    None
):
    """The key comes from users' objects: as a metric label it would be unbounded."""
    zone = "topology.kubernetes.io/zone"
    nodes = [node_obj(f"{z}{i}", 4, labels={zone: z}) for z in "ab" for i in range(2)]
    members = [pod_obj(f"g-{i}", 4, scheduling_group="g") for i in range(2)]
    ext, _ = await start([*nodes, upstream_podgroup_obj("g", 2, topology_key=zone), *members])
    placed = await place(ext, ["g-0", "g-1"])
    assert len({node[0] for node in placed.values()}) == 1  # one zone
    sample = ext.metrics.registry.get_sample_value
    assert sample("phalanx_gang_placements_total", {"level": "node-label"}) == 1
    assert sample("phalanx_gang_placements_total", {"level": zone}) is None
    view = cast(dict[str, Any], ext.views.group(GroupRef("default", "g", Dialect.UPSTREAM)))
    assert view is not None
    assert view["plan"]["level"] == zone  # the gang's own view names it
    # Only configured topologies are exported: ad-hoc ones are not in /debug/topology.
    assert [t["name"] for t in topology_view(ext)["topologies"]] == ["default"]
    assert sample("phalanx_topology_domains", {"topology": zone, "level": zone}) is None
    await ext.stop()


async def test_whole_free_domains_are_counted_per_level_in_debug_and_metrics() -> None:
    ext, _ = await start([*rack(4), *gang("g", 4, {REQUIRED: CLIQUE})])
    sample = ext.metrics.registry.get_sample_value
    labels = {"topology": "default", "level": CLIQUE}
    assert sample("phalanx_topology_free_domains", labels) == 4
    await place(ext, [f"g-{i}" for i in range(4)])
    assert sample("phalanx_topology_free_domains", labels) == 3
    assert sample("phalanx_topology_domains", labels) == 4
    assert sample("phalanx_topology_free_domains", {**labels, "level": LEAF}) == 1
    view = topology_view(ext)
    assert view["default"] == "default"
    (topology,) = view["topologies"]
    by_level = {row["level"]: row for row in topology["levels"]}
    assert by_level[CLIQUE] == {
        "level": CLIQUE,
        "domains": 4,
        "domains_with_gpus": 4,
        "whole_free_domains": 3,
    }
    assert by_level[SPINE]["whole_free_domains"] == 0
    assert topology["findings"] == []
    await ext.stop()


@pytest.mark.parametrize(
    ("annotations", "size", "message"),
    [
        ({REQUIRED: "example.com/rack"}, 4, 'required level "example.com/rack" is not a level'),
        (
            {"phalanx.io/topology-slice-size": "3", "phalanx.io/topology-slice-required": CLIQUE},
            4,
            "topology slice size 3 does not divide the gang's minMember 4",
        ),
        (
            {REQUIRED: CLIQUE, PREFERRED: LEAF},
            4,
            f"required level {CLIQUE} is narrower than preferred level {LEAF}",
        ),
    ],
    ids=["unknown-level", "slice-does-not-divide", "required-narrower-than-preferred"],
)
async def test_bad_topology_intent_is_a_warning_event_on_the_group_and_others_still_place(
    annotations: dict[str, str], size: int, message: str
) -> None:
    ext, source = await start(
        [*rack(2), *gang("bad", size, annotations), *gang("good", 2, {REQUIRED: CLIQUE})]
    )
    result = ext.filter(pod_of(ext, "bad-0"), offered(ext))
    assert result.feasible == ()
    assert all(message in r for r in result.unresolvable.values())
    await asyncio.sleep(0)
    (event,) = [e for e in source.events if e[1] == "default/bad"]
    assert event[0] == "PodGroup"
    assert message in event[3]
    assert event[5] is True  # a Warning
    assert message in source.statuses["default/bad"].message
    await place(ext, ["good-0", "good-1"])
    await ext.stop()


async def test_an_inconsistent_node_is_said_once_as_a_warning_event_on_the_node() -> None:
    ext, source = await start([*rack(2, stray=True), *gang("g", 2, {REQUIRED: CLIQUE})])
    ext.filter(pod_of(ext, "g-0"), offered(ext))
    ext.refresh_statuses()
    ext.refresh_statuses()
    await asyncio.sleep(0)
    (event,) = events(source, "InconsistentTopologyLabels")
    assert event[:2] == ("Node", "/stray")
    assert f"{CLIQUE}=c0 is under" in event[3]
    assert event[5] is True
    sample = ext.metrics.registry.get_sample_value
    assert sample("phalanx_topology_inconsistent_nodes", {"topology": "default"}) == 1
    (finding,) = topology_view(ext)["topologies"][0]["findings"]
    assert finding["node"] == "stray"
    await ext.stop()


async def test_kueue_pod_set_annotations_constrain_a_gang_like_phalanx_ones() -> None:
    kueue = {"kueue.x-k8s.io/podset-required-topology": CLIQUE}
    objects = [
        *rack(2, per_clique=3),
        podgroup_obj("k", 4),
        *(pod_obj(f"k-{i}", 4, group="k", annotations=kueue) for i in range(4)),
    ]
    ext, _ = await start(objects)
    result = ext.filter(pod_of(ext, "k-0"), offered(ext))
    assert result.feasible == ()  # no clique of three nodes holds four members
    assert "no single nvidia.com/gpu.clique domain fits" in group_view(ext, "k")["last_reason"]
    await ext.stop()


async def test_an_expired_reservation_no_longer_claims_where_the_gang_landed() -> None:
    clock = FakeClock()
    source = ScriptedSource([*rack(2), *gang("g", 2, {REQUIRED: CLIQUE})])
    ext = Extender(source, ServiceSettings(barrier_timeout_seconds=5.0), clock=clock)
    await ext.start()
    ext.filter(pod_of(ext, "g-0"), offered(ext))
    assert "placed within" in ext.reporter.group_status(GroupRef.parse("default/g")).message
    clock.now += 120
    ext.expire()
    message = ext.reporter.group_status(GroupRef.parse("default/g")).message
    assert "placed within" not in message
    await ext.stop()


async def test_a_volcano_hard_network_topology_keeps_the_gang_in_one_tier_1_domain() -> None:
    group = volcano_podgroup_obj("v", 4)
    group["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 1}
    objects = [
        *rack(2, per_clique=3),
        group,
        *(pod_obj(f"v-{i}", 4, volcano_group="v") for i in range(4)),
    ]
    ext, _ = await start(objects)
    result = ext.filter(pod_of(ext, "v-0"), offered(ext))
    assert result.feasible == ()  # tier 1 is the clique: no clique of three holds four
    (reason,) = set(result.unresolvable.values())
    assert f"required {CLIQUE}" in reason
    assert f"no single {CLIQUE} domain fits" in reason
    await ext.stop()


async def test_a_volcano_hard_network_topology_tries_tier_1_before_its_highest_tier() -> None:
    """Volcano searches HyperNodes from tier 1 up to highestTierAllowed: a gang one clique
    holds stays in it, though the leaf (tier 2) would allow a spread over two cliques."""
    group = volcano_podgroup_obj("v", 3)
    group["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    objects = [
        *rack(2, per_clique=3),  # c0 and c1 under leaf l0
        pod_obj("single", 4, node="c0-n0", phase="Running"),  # c0 broken: 2 nodes free
        group,
        *(pod_obj(f"v-{i}", 4, volcano_group="v") for i in range(3)),
    ]
    ext, _ = await start(objects)
    nodes = await place(ext, [f"v-{i}" for i in range(3)])
    assert {node.split("-")[0] for node in nodes.values()} == {"c1"}
    await ext.stop()


async def test_a_relabel_that_splits_a_reserved_gang_across_cliques_releases_it() -> None:
    """The gang required one clique; a reserved node now says it is in another. Bound as
    reserved it would span two NVLink domains: the reservation goes, the gang is planned
    again inside one clique."""
    ext, _ = await start([*rack(2, per_clique=3), *gang("g", 2, {REQUIRED: CLIQUE})])
    first = ext.filter(pod_of(ext, "g-0"), offered(ext))
    (node,) = first.feasible
    reserved = {m.node for m in present(ext.state.reservation("default/g")).members}
    moved = next(n for n in sorted(reserved) if n != node) if len(reserved) > 1 else node
    clique = moved.split("-")[0]
    other = "c1" if clique == "c0" else "c0"
    relabelled = node_obj(moved, 4, clique=other, labels={SPINE: "s0", LEAF: "l0"})

    ext.apply(lambda state: state.upsert_node(parse_node(relabelled)))

    assert ext.state.reservation("default/g") is None
    assert "now lie in 2" in group_view(ext, "g")["last_reason"]
    nodes = await place(ext, ["g-0", "g-1"])
    cliques = {present(ext.state.node(n)).node.labels[CLIQUE] for n in nodes.values()}
    assert len(cliques) == 1
    await ext.stop()


async def test_a_relabel_that_keeps_a_reserved_gang_in_one_clique_keeps_its_reservation() -> None:
    ext, _ = await start([*rack(2, per_clique=3), *gang("g", 2, {REQUIRED: CLIQUE})])
    ext.filter(pod_of(ext, "g-0"), offered(ext))
    before = present(ext.state.reservation("default/g"))
    spare = next(
        n.name
        for n in ext.state.nodes()
        if n.name not in {m.node for m in before.members} and n.name.startswith("c1")
    )
    ext.apply(
        lambda state: state.upsert_node(
            parse_node(node_obj(spare, 4, clique="c9", labels={SPINE: "s0", LEAF: "l4"}))
        )
    )
    assert ext.state.reservation("default/g") == before
    await ext.stop()
