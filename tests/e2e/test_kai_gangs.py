"""NVIDIA KAI Scheduler's PodGroups on the session's control plane, through the real
kube-scheduler (docs/gang-dialects.md, "KAI Scheduler's PodGroups"): pods marked as KAI's
podgrouper marks them bind whole or not at all, the PodGroup's status says why a gang
waits (``UnschedulableOnNodePool``) and stops saying it once placed, subgroup minima
hold in the quorum (nested subgroups too: every leaf beneath each parent, or
``minSubGroup`` of them, never a partial gang), and a subgroup's required topology level
keeps it in one rack (or, levels differing, prefill in one clique and decode in one leaf
of one spine), a preferred one in one rack where a rack has room, while a parent
subgroup's level keeps its leaves together (prefill's leader and workers in one leaf, each
in one clique). KAI's own scheduler does not run: its CRD is served (written from its
types, ``crds/kai-podgroup.yaml``) before this module's Phalanx starts.
"""

from __future__ import annotations

from collections.abc import Iterator

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from kai import KAI_CRD_NAME, ensure_kai_crd, kai_path, kai_pod_group, kai_sizes
from podgroup_crd import CRDS
from scheduling import (
    A_KAI_GROUP,
    KAI_SUBGROUP_LABEL,
    RACK,
    Obj,
    Scenario,
    domains_of_roles,
    pod_body,
    racks,
)

pytestmark = pytest.mark.e2e

GPUS = 8  # per node, and per member: one member per node
UNSCHEDULABLE = "UnschedulableOnNodePool"


@pytest.fixture(scope="module")
def control_plane(control_plane: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """The session's control plane, with KAI's PodGroup CRD served before this module's
    Phalanx starts; removed afterwards."""
    ensure_kai_crd(control_plane)
    yield control_plane
    control_plane.request("DELETE", f"{CRDS}/{KAI_CRD_NAME}")


def judged(sc: Scenario) -> Scenario:
    """Make the invariant monitor judge KAI gangs too."""
    sc.monitor.gang_sizes.append(kai_sizes)
    return sc


def member(sc: Scenario, name: str, group: str, subgroup: str = "", *, gated: bool = False) -> str:
    """An 8-GPU pod marked as KAI's podgrouper marks it."""
    labels = {KAI_SUBGROUP_LABEL: subgroup} if subgroup else {}
    body = pod_body(
        name,
        gpus=GPUS,
        node_selector=sc.selector,
        labels=labels,
        annotations={A_KAI_GROUP: group},
        gated=gated,
    )
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    return name


def kai_gang(sc: Scenario, name: str, size: int) -> list[str]:
    """A KAI PodGroup of ``size`` and its members, released together."""
    kai_pod_group(sc, name, size)
    names = [member(sc, f"{name}-{i}", name, gated=True) for i in range(size)]
    for each in names:
        sc.ungate(each)
    return names


def unschedulable(sc: Scenario, group: str) -> Obj | None:
    status: Obj = sc.api.get(kai_path(sc, group)).get("status") or {}
    return next(
        (c for c in status.get("schedulingConditions") or [] if c.get("type") == UNSCHEDULABLE),
        None,
    )


def test_a_kai_gang_that_fits_binds_whole(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    for node in ("a", "b", "c"):
        sc.node(node, GPUS)
    sc.nodes_ready()
    names = kai_gang(sc, "train", 3)
    where = sc.wait_bound(names)
    assert len(set(where.values())) == 3, where
    sc.wait_event("train", "bound 3 member(s) together", reason="Bound")


def test_a_kai_gang_one_node_short_waits_whole_says_why_then_binds_whole(
    cluster: Scenario,  # noqa: F811
) -> None:
    sc = judged(cluster)
    sc.node("a", GPUS)
    sc.node("b", GPUS)
    sc.nodes_ready()
    names = kai_gang(sc, "wide", 3)
    sc.wait_unschedulable(names[0], f"cannot place 3 member(s) of gang kai:{sc.namespace}/wide")
    why = f"cannot place 3 member(s) of gang kai:{sc.namespace}/wide"

    def told() -> Obj | None:  # the status follows the decision about a second behind
        condition = unschedulable(sc, "wide")
        return condition if condition and why in str(condition.get("message")) else None

    condition = sc.wait("the PodGroup's UnschedulableOnNodePool, saying why", told)
    assert condition["status"] == "True", condition
    sc.assert_unbound_for(names, 3.0)

    sc.node("c", GPUS)
    sc.nodes_ready()
    sc.wait_bound(names)
    sc.wait("the condition cleared", lambda: unschedulable(sc, "wide") is None or None)


def test_a_kai_gang_waits_for_each_subgroup_s_minimum(cluster: Scenario) -> None:  # noqa: F811
    """minMember 3 with a leader and 2 workers: three workers are three members, but no
    leader, so nobody is placed until the leader comes."""
    sc = judged(cluster)
    for node in ("a", "b", "c", "d"):
        sc.node(node, GPUS)
    sc.nodes_ready()
    kai_pod_group(sc, "serve", 3, sub_groups={"leader": 1, "workers": 2})
    workers = [member(sc, f"serve-worker-{i}", "serve", "workers") for i in range(3)]
    sc.wait_unschedulable(workers[-1], "task leader has 0 of 1 member(s) (spec.subGroups)")
    sc.assert_unbound_for(workers, 2.0)

    leader = member(sc, "serve-leader", "serve", "leader")
    sc.wait_bound([leader, *workers])


def prefill_and_decode_bound(
    sc: Scenario, group: str
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Two members each of subgroups prefill and decode of `group`, created gated and then
    released together (so the gang is planned with all of them): their names by subgroup,
    and where each was bound."""
    names = {
        role: [member(sc, f"{role}-{i}", group, role, gated=True) for i in range(2)]
        for role in ("prefill", "decode")
    }
    for each in (*names["prefill"], *names["decode"]):
        sc.ungate(each)
    return names, sc.wait_bound([*names["prefill"], *names["decode"]])


def test_each_kai_subgroup_required_in_one_rack_binds_inside_one_rack(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Racks of one, two and two nodes (values unique to the test's namespace): prefill
    and decode, two members each, each required in one rack, bind each in a rack of two;
    the gang alone would also fit across the lone node and one of the others."""
    sc = judged(cluster)
    rack_of = racks(sc, 1, 2, 2, gpus=GPUS)
    kai_pod_group(
        sc,
        "disagg",
        4,
        sub_groups={"prefill": 2, "decode": 2},
        sub_group_levels={"prefill": RACK, "decode": RACK},
    )
    names, where = prefill_and_decode_bound(sc, "disagg")
    assert domains_of_roles(names, where, rack_of) == {"r1", "r2"}, where


def test_each_kai_subgroup_preferring_a_rack_binds_inside_one_rack_where_there_is_room(
    cluster: Scenario,  # noqa: F811
) -> None:
    """The racks above, prefill and decode each only preferring one rack: without the
    preference the gang would fill the lone node and split a subgroup; with it each binds in
    a rack of two, and the Reserved Event says each preference held."""
    sc = judged(cluster)
    rack_of = racks(sc, 1, 2, 2, gpus=GPUS)
    kai_pod_group(
        sc,
        "liking",
        4,
        sub_groups={"prefill": 2, "decode": 2},
        sub_group_preferred={"prefill": RACK, "decode": RACK},
    )
    names, where = prefill_and_decode_bound(sc, "liking")
    assert domains_of_roles(names, where, rack_of) == {"r1", "r2"}, where
    sc.wait_event(
        "liking",
        "subgroup decode within one rack as preferred; "
        "subgroup prefill within one rack as preferred",
        reason="Reserved",
    )


SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
CLIQUE = "nvidia.com/gpu.clique"


def test_kai_subgroups_at_levels_of_their_own_bind_prefill_in_a_clique_decode_in_a_leaf(
    cluster: Scenario,  # noqa: F811
) -> None:
    """The default topology's labels (values unique to the test's namespace): spine s0 of
    one node; spine s1 of clique c1 (two nodes, leaf l1) and leaf l2 of cliques c2 and c3.
    The gang in one spine, prefill in one clique, decode in one leaf: only prefill in c1 and
    decode in l2 hold it."""
    sc = judged(cluster)
    shape = {
        "a": ("s0", "l0", "c0"),
        "b1": ("s1", "l1", "c1"),
        "b2": ("s1", "l1", "c1"),
        "b3": ("s1", "l2", "c2"),
        "b4": ("s1", "l2", "c3"),
    }
    placed_in = {}
    for suffix, (spine, leaf, clique) in shape.items():
        values = {SPINE: spine, LEAF: leaf, CLIQUE: clique}
        name = sc.node(suffix, GPUS, labels={k: f"{sc.namespace}-{v}" for k, v in values.items()})
        placed_in[name] = (leaf, clique)
    sc.nodes_ready()
    kai_pod_group(
        sc,
        "multi",
        4,
        sub_groups={"prefill": 2, "decode": 2},
        sub_group_levels={"prefill": CLIQUE, "decode": LEAF},
        topology={"requiredTopologyLevel": SPINE},
    )
    names, where = prefill_and_decode_bound(sc, "multi")
    assert {placed_in[where[p]][1] for p in names["prefill"]} == {"c1"}, where
    assert {placed_in[where[p]][0] for p in names["decode"]} == {"l2"}, where


def leaf(name: str, parent: str, min_member: int) -> dict[str, object]:
    return {"name": name, "parent": parent, "minMember": min_member}


def test_a_nested_kai_gang_waits_for_each_parent_s_leaves_then_binds_whole(
    cluster: Scenario,  # noqa: F811
) -> None:
    """KAI's hierarchical shape: decode and prefill, each a leader and workers beneath, no
    minMember (the subgroups' quorum is 4). Four members, two of them decode workers, are
    as many as the quorum but leave prefill without a worker: nobody is placed until one
    comes, then all five bind."""
    sc = judged(cluster)
    for node in ("a", "b", "c", "d", "e"):
        sc.node(node, GPUS)
    sc.nodes_ready()
    kai_pod_group(
        sc,
        "disagg",
        None,
        nested=[
            {"name": "decode"},
            leaf("decode-leaders", "decode", 1),
            leaf("decode-workers", "decode", 1),
            {"name": "prefill"},
            leaf("prefill-leaders", "prefill", 1),
            leaf("prefill-workers", "prefill", 1),
        ],
    )
    early = [
        member(sc, "decode-leader", "disagg", "decode-leaders"),
        member(sc, "decode-worker-0", "disagg", "decode-workers"),
        member(sc, "decode-worker-1", "disagg", "decode-workers"),
        member(sc, "prefill-leader", "disagg", "prefill-leaders"),
    ]
    sc.wait_unschedulable(early[-1], "subgroup prefill-workers has 0 of 1 member(s)")
    sc.assert_unbound_for(early, 2.0)

    worker = member(sc, "prefill-worker-0", "disagg", "prefill-workers")
    where = sc.wait_bound([*early, worker])
    assert len(set(where.values())) == 5, where


def test_a_kai_parent_subgroup_s_level_binds_its_leaves_together_in_one_domain_of_it(
    cluster: Scenario,  # noqa: F811
) -> None:
    """NVIDIA Dynamo's shape: the gang in one spine; parent prefill (a leader, two
    workers) in one leaf, each leaf in one clique; decode (one member) anywhere. Leaf l0
    has one clique of two nodes (the workers alone), leaf l2 one node: only leaf l1, with
    cliques of one and two nodes, holds prefill whole."""
    sc = judged(cluster)
    shape = {
        "a1": ("l0", "c0"),
        "a2": ("l0", "c0"),
        "b1": ("l1", "c1"),
        "b2": ("l1", "c2"),
        "b3": ("l1", "c2"),
        "d1": ("l2", "c3"),
    }
    placed_in = {}
    for suffix, (leaf_name, clique) in shape.items():
        values = {SPINE: "s0", LEAF: leaf_name, CLIQUE: clique}
        name = sc.node(suffix, GPUS, labels={k: f"{sc.namespace}-{v}" for k, v in values.items()})
        placed_in[name] = (leaf_name, clique)
    sc.nodes_ready()
    in_clique = {"requiredTopologyLevel": CLIQUE}
    kai_pod_group(
        sc,
        "dynamo",
        None,
        topology={"requiredTopologyLevel": SPINE},
        nested=[
            {"name": "prefill", "topologyConstraint": {"requiredTopologyLevel": LEAF}},
            {**leaf("prefill-leader", "prefill", 1), "topologyConstraint": in_clique},
            {**leaf("prefill-workers", "prefill", 2), "topologyConstraint": in_clique},
            {"name": "decode", "minMember": 1},
        ],
    )
    roles = {"prefill-leader": 1, "prefill-workers": 2, "decode": 1}
    names = {
        role: [member(sc, f"{role}-{i}", "dynamo", role, gated=True) for i in range(count)]
        for role, count in roles.items()
    }
    every = [name for pods in names.values() for name in pods]
    for each in every:
        sc.ungate(each)
    where = sc.wait_bound(every)
    assert {placed_in[where[p]] for p in names["prefill-leader"]} == {("l1", "c1")}, where
    assert {placed_in[where[p]] for p in names["prefill-workers"]} == {("l1", "c2")}, where


def test_an_elastic_kai_gang_short_of_its_min_sub_group_binds_nobody_then_whole_replicas(
    cluster: Scenario,  # noqa: F811
) -> None:
    """spec.minSubGroup 2 of three replicas of two: three nodes hold one replica and a
    half, which is no quorum, so nobody binds; a fourth node makes room for two whole
    replicas, and they bind (never a replica's lone member)."""
    sc = judged(cluster)
    for node in ("a", "b", "c"):
        sc.node(node, GPUS)
    sc.nodes_ready()
    kai_pod_group(
        sc,
        "elastic",
        None,
        min_sub_group=2,
        nested=[{"name": f"replica-{r}", "minMember": 2} for r in range(3)],
    )
    names = {
        f"replica-{r}": [
            member(sc, f"elastic-{r}-{i}", "elastic", f"replica-{r}", gated=True) for i in range(2)
        ]
        for r in range(3)
    }
    every = [name for pods in names.values() for name in pods]
    for each in every:
        sc.ungate(each)
    sc.wait_unschedulable(every[0], f"gang kai:{sc.namespace}/elastic")
    sc.assert_unbound_for(every, 3.0)

    sc.node("d", GPUS)
    sc.nodes_ready()
    bound = sc.wait("a quorum of whole replicas bound", lambda: _bound_replicas(sc, names))
    assert len(bound) == 2, bound


def _bound_replicas(sc: Scenario, names: dict[str, list[str]]) -> list[str] | None:
    """The replicas whose members are all bound once four are, else None (still waiting);
    a replica with a lone bound member fails the test."""
    where = sc.placement([p for pods in names.values() for p in pods])
    bound = {p for p, node in where.items() if node}
    if len(bound) < 4:
        return None
    for replica, pods in names.items():
        assert len(bound & set(pods)) in (0, 2), (replica, bound)
    return [r for r, pods in names.items() if set(pods) <= bound]
