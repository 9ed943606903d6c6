"""Topologies: the configuration text, the index of nodes into nested domains, member ranks."""

import pytest

from builders import CLIQUE, HOSTNAME, LEAF, SPINE, gpu_node, nvl72, pod, present, rack_node
from phalanx.core.errors import TopologyConfigError
from phalanx.core.model import Node, Pod
from phalanx.core.topology import (
    CLUSTER,
    DEFAULT_LEVELS,
    DEFAULT_TOPOLOGIES,
    IndexCache,
    Topology,
    TopologyIndex,
    build_index,
    member_order,
    parse_topologies,
    short_name,
)

# ---- configuration ---------------------------------------------------------------------


def test_the_default_topology_is_spine_leaf_clique_host() -> None:
    assert DEFAULT_TOPOLOGIES.default == Topology("default", (SPINE, LEAF, CLIQUE, HOSTNAME))
    assert parse_topologies("") == DEFAULT_TOPOLOGIES
    assert parse_topologies("  \n ") == DEFAULT_TOPOLOGIES


def test_several_named_topologies_parse_and_the_first_is_the_default() -> None:
    text = f"default={','.join(DEFAULT_LEVELS)};rack=example.com/row,example.com/rack"
    topologies = parse_topologies(text)
    assert [t.name for t in topologies.all] == ["default", "rack"]
    assert present(topologies.get("rack")).levels == ("example.com/row", "example.com/rack")
    assert topologies.get("") is topologies.default
    assert topologies.get("nope") is None
    assert parse_topologies(str(topologies)) == topologies


def test_entries_may_be_split_over_lines_with_spaces() -> None:
    text = """
        gb200 = network.topology.nvidia.com/leaf, nvidia.com/gpu.clique
        zones = topology.kubernetes.io/zone
    """
    topologies = parse_topologies(text)
    assert topologies.default.name == "gb200"
    assert topologies.default.levels == (LEAF, CLIQUE)


def test_a_lone_entry_without_a_name_is_the_default_topology() -> None:
    assert parse_topologies("example.com/rack, kubernetes.io/hostname").default == Topology(
        "default", ("example.com/rack", HOSTNAME)
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a=x.io/r;x.io/s", 'entry 2 ("x.io/s") needs a name'),
        ("Rack=x.io/r", '"Rack" is not a topology name'),
        ("a=x.io/r;a=x.io/s", "topology a is configured twice"),
        ("a=", "topology a has no levels"),
        ("a=x.io/r,,x.io/s", 'topology a: "" is not a node label key'),
        ("a=x.io/r,not a key", '"not a key" is not a node label key'),
        ("a=x.io/r,x.io/r", "topology a names level x.io/r twice"),
        (f"a={HOSTNAME},x.io/r", "kubernetes.io/hostname can only be the narrowest level"),
        ("a=" + ",".join(f"x.io/l{i}" for i in range(17)), "17 levels; at most 16"),
    ],
    ids=[
        "unnamed-among-several",
        "bad-name",
        "duplicate-name",
        "no-levels",
        "empty-level",
        "bad-key",
        "repeated-level",
        "hostname-not-last",
        "too-many-levels",
    ],
)
def test_a_malformed_configuration_is_refused_with_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(TopologyConfigError) as error:
        parse_topologies(text)
    assert message in str(error.value)
    assert str(error.value).startswith("topology configuration: ")


@pytest.mark.parametrize(
    ("key", "noun"),
    [(CLIQUE, "clique"), (LEAF, "leaf"), (HOSTNAME, "hostname"), ("example.com/rack", "rack")],
    ids=["clique", "leaf", "hostname", "custom"],
)
def test_a_level_has_a_short_noun_for_messages(key: str, noun: str) -> None:
    assert short_name(key) == noun


# ---- the index -------------------------------------------------------------------------


def index_of(*nodes: Node, topology: Topology = DEFAULT_TOPOLOGIES.default) -> TopologyIndex:
    return build_index(topology, nodes)


def domain_names(index: TopologyIndex, level: int) -> list[str]:
    return [d.name for d in index.domains[level]]


def test_an_nvl72_cluster_has_one_spine_four_leaves_sixteen_cliques() -> None:
    index = index_of(*nvl72())
    assert [len(d) for d in index.domains] == [1, 4, 16, 288]
    assert index.findings == ()
    clique = present(index.domain(2, "c05-n03"))
    assert clique.name == f"{CLIQUE}=c05"
    assert clique.nodes == tuple(f"c05-n{i:02d}" for i in range(18))
    assert present(index.domain(1, "c05-n03")).name == f"{LEAF}=l1"


def test_domains_nest_each_one_inside_one_domain_of_every_wider_level() -> None:
    index = index_of(*nvl72(8, per_clique=3, per_leaf=2))
    for level in range(1, len(index.domains)):
        for domain in index.domains[level]:
            parents = {index.of_node[n][level - 1] for n in domain.nodes}
            assert len(parents) == 1


def test_domain_ids_follow_names_so_ties_break_by_name() -> None:
    index = index_of(*(rack_node(f"n{i}", clique=c) for i, c in enumerate("zab")))
    assert domain_names(index, 2) == [f"{CLIQUE}=a", f"{CLIQUE}=b", f"{CLIQUE}=z"]


def test_a_level_a_node_lacks_is_skipped_for_it() -> None:
    # GB200 nodes without Topograph labels: a clique stands in for the leaf and the spine.
    index = index_of(*(rack_node(f"n{i}", clique="c1") for i in range(3)), rack_node("x"))
    assert domain_names(index, 0) == [f"{HOSTNAME}=x", f"{CLIQUE}=c1"]
    assert domain_names(index, 1) == domain_names(index, 2)
    assert present(index.domain(1, "n0")).nodes == ("n0", "n1", "n2")
    assert index.same_as_narrower(0)
    assert index.same_as_narrower(1)
    assert not index.same_as_narrower(CLUSTER)  # two spines: the x node's and c1's


def test_the_whole_cluster_is_the_same_as_a_widest_level_of_one_domain() -> None:
    index = index_of(*(rack_node(f"n{i}", spine="s0", clique=f"c{i}") for i in range(2)))
    assert index.same_as_narrower(CLUSTER)


def test_a_node_outside_any_clique_is_its_own_nvlink_domain() -> None:
    index = index_of(rack_node("a", leaf="l1"), rack_node("b", leaf="l1"))
    assert present(index.domain(1, "a")).nodes == ("a", "b")
    assert present(index.domain(2, "a")).nodes == ("a",)


def test_a_node_with_no_label_at_all_is_its_own_domain_everywhere() -> None:
    index = index_of(gpu_node("bare"), rack_node("r", leaf="l1"))
    assert [present(index.domain(level, "bare")).name for level in range(4)] == ["node bare"] * 4


def test_an_ad_hoc_topology_holds_only_the_nodes_that_carry_its_label() -> None:
    zone = "topology.kubernetes.io/zone"
    nodes = [
        gpu_node("a1", labels={zone: "a"}),
        gpu_node("a2", labels={zone: "a"}),
        gpu_node("b1", labels={zone: "b"}),
        gpu_node("bare"),
        gpu_node("blank", labels={zone: ""}),
    ]
    index = index_of(*nodes, topology=Topology.of_label(zone))
    assert domain_names(index, 0) == [f"{zone}=a", f"{zone}=b"]
    assert present(index.domain(0, "a1")).nodes == ("a1", "a2")
    # A configured level a node lacks is skipped; an ad-hoc one keeps the node out.
    assert index.domain(0, "bare") is None
    assert index.domain(0, "blank") is None
    assert sorted(index.of_node) == ["a1", "a2", "b1"]


def test_a_clique_under_two_leaves_is_reported_once_and_the_stray_node_is_its_own_domain() -> None:
    nodes = [rack_node(f"n{i}", spine="s", leaf="l1", clique="c7") for i in range(3)]
    stray = rack_node("odd", spine="s", leaf="l2", clique="c7")
    index = index_of(*nodes, stray)
    assert len(index.findings) == 1
    finding = index.findings[0]
    assert (finding.node, finding.level, finding.value) == ("odd", CLIQUE, "c7")
    assert f"{LEAF}=l2" in str(finding)
    assert "3 node(s)" in str(finding)
    assert present(index.domain(2, "odd")).nodes == ("odd",)
    assert present(index.domain(3, "odd")).nodes == ("odd",)
    assert present(index.domain(1, "odd")).name == f"{LEAF}=l2"  # wider levels are kept
    assert present(index.domain(2, "n0")).nodes == ("n0", "n1", "n2")


def test_a_node_missing_a_wider_label_its_peers_have_is_reported() -> None:
    nodes = [rack_node(f"n{i}", spine="s", leaf="l1", clique="c1") for i in range(2)]
    index = index_of(*nodes, rack_node("half", leaf="l1", clique="c1"))
    assert [f.node for f in index.findings] == ["half"]


def test_a_custom_topology_reads_its_own_labels() -> None:
    rack = Topology("rack", ("example.com/row", "example.com/rack"))
    nodes = [
        gpu_node(f"n{i}", labels={"example.com/row": "r1", "example.com/rack": f"k{i // 2}"})
        for i in range(4)
    ]
    index = index_of(*nodes, topology=rack)
    assert domain_names(index, 1) == ["example.com/rack=k0", "example.com/rack=k1"]


# ---- member order ----------------------------------------------------------------------


def ranked(*pods: Pod) -> list[str]:
    return [p.name for p in member_order(pods)]


def test_members_without_index_labels_sort_in_natural_name_order() -> None:
    assert ranked(pod("w-10"), pod("w-2"), pod("w-1")) == ["w-1", "w-2", "w-10"]


@pytest.mark.parametrize(
    ("label", "values"),
    [
        ("batch.kubernetes.io/job-completion-index", ["2", "0", "1"]),
        ("leaderworkerset.sigs.k8s.io/worker-index", ["2", "0", "1"]),
        ("training.kubeflow.org/replica-index", ["2", "0", "1"]),
        ("apps.kubernetes.io/pod-index", ["2", "0", "1"]),
        ("kueue.x-k8s.io/pod-group-pod-index", ["2", "0", "1"]),
    ],
    ids=["indexed-job", "leaderworkerset", "kubeflow", "statefulset", "kueue-pod-group"],
)
def test_an_operators_index_label_gives_the_rank(label: str, values: list[str]) -> None:
    pods = [pod(f"p-{c}", labels={label: v}) for c, v in zip("abc", values, strict=True)]
    assert ranked(*pods) == ["p-b", "p-c", "p-a"]


def test_a_jobset_ranks_by_job_then_completion_index() -> None:
    def member(name: str, job: int, index: int) -> Pod:
        return pod(
            name,
            labels={
                "jobset.sigs.k8s.io/job-global-index": str(job),
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        )

    pods = [member("z", 1, 0), member("y", 0, 1), member("x", 1, 1), member("w", 0, 0)]
    assert ranked(*pods) == ["w", "y", "z", "x"]


def test_kubeflow_roles_are_not_interleaved() -> None:
    def member(name: str, role: str, index: int) -> Pod:
        return pod(
            name,
            labels={
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(index),
            },
        )

    pods = [member("w1", "worker", 1), member("m0", "master", 0), member("w0", "worker", 0)]
    assert ranked(*pods) == ["m0", "w0", "w1"]


def test_members_with_an_index_come_before_members_without() -> None:
    indexed = pod("z", labels={"apps.kubernetes.io/pod-index": "0"})
    assert ranked(pod("a"), indexed, pod("b")) == ["z", "a", "b"]


def test_a_malformed_index_label_is_ignored() -> None:
    bad = pod("b", labels={"apps.kubernetes.io/pod-index": "-1"})
    assert ranked(bad, pod("a")) == ["a", "b"]


# ---- the cache -----------------------------------------------------------------------------


def test_the_index_is_rebuilt_only_when_the_topology_generation_changes() -> None:
    cache = IndexCache()
    builds = []

    def nodes() -> list[Node]:
        builds.append(1)
        return nvl72(2, per_clique=2)

    first = cache.get(DEFAULT_TOPOLOGIES.default, 7, nodes)
    assert cache.get(DEFAULT_TOPOLOGIES.default, 7, nodes) is first
    assert cache.get(DEFAULT_TOPOLOGIES.default, 8, nodes) is not first
    assert len(builds) == 2


def test_an_inconsistent_node_is_reported_once_across_rebuilds() -> None:
    cache = IndexCache()
    good = [rack_node(f"n{i}", spine="s", leaf="l1", clique="c7") for i in range(2)]
    odd = rack_node("odd", spine="s", leaf="l2", clique="c7")
    cache.get(DEFAULT_TOPOLOGIES.default, 1, lambda: [*good, odd])
    assert [f.node for f in cache.unreported()] == ["odd"]
    cache.get(DEFAULT_TOPOLOGIES.default, 2, lambda: [*good, odd])
    assert cache.unreported() == []
    cache.get(DEFAULT_TOPOLOGIES.default, 3, lambda: good)  # fixed
    assert cache.unreported() == []
    cache.get(DEFAULT_TOPOLOGIES.default, 4, lambda: [*good, odd])  # broken again
    assert [f.node for f in cache.unreported()] == ["odd"]


def test_ad_hoc_indexes_are_kept_per_label_and_rebuilt_on_a_new_generation() -> None:
    cache = IndexCache()
    zone, rack = Topology.of_label("x.io/zone"), Topology.of_label("x.io/rack")
    builds = []

    def nodes() -> list[Node]:
        builds.append(1)
        return [gpu_node("n", labels={"x.io/zone": "a", "x.io/rack": "r"})]

    first = cache.get(zone, 1, nodes)
    cache.get(rack, 1, nodes)
    assert cache.get(zone, 1, nodes) is first
    assert cache.get(zone, 2, nodes) is not first
    assert len(builds) == 3


def test_an_ad_hoc_index_named_like_a_configured_topology_is_kept_apart_from_it() -> None:
    cache = IndexCache()
    rack = Topology("rack", ("x.io/row", "x.io/rack"))
    nodes = [gpu_node("n", labels={"x.io/row": "1", "x.io/rack": "r", "rack": "7"})]
    configured = cache.get(rack, 1, lambda: nodes)
    cache.get(Topology.of_label("rack"), 1, lambda: nodes)
    assert cache.get(rack, 1, lambda: nodes) is configured


def test_ad_hoc_indexes_are_bounded_dropping_the_least_recently_used() -> None:
    """Their label keys come from users' objects: without a bound every key ever named
    would keep an index of the whole cluster."""
    cache = IndexCache(adhoc_limit=2)
    nodes = [gpu_node("n", labels={f"x.io/k{i}": "v" for i in range(4)})]
    for i in (0, 1, 0, 2):  # k0 used again after k1: k1 is the one dropped
        cache.get(Topology.of_label(f"x.io/k{i}"), 1, lambda: nodes)
    assert cache.adhoc_keys == ("x.io/k0", "x.io/k2")
    cache.get(DEFAULT_TOPOLOGIES.default, 1, lambda: nodes)  # configured ones do not count
    assert cache.adhoc_keys == ("x.io/k0", "x.io/k2")
