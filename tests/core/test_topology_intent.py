"""A gang's topology intent: read from annotations (Phalanx's and Kueue's), then resolved."""

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from builders import CLIQUE, HOSTNAME, LEAF, SPINE, pod, pod_obj, podgroup, podgroup_obj
from phalanx.core.errors import InvalidObjectError
from phalanx.core.inventory import parse_pod, parse_pod_group
from phalanx.core.model import (
    Pod,
    PodGroup,
    SubGroupPolicy,
    TaskPreference,
    TaskSet,
    TopologyConstraint,
)
from phalanx.core.topology import (
    DEFAULT_TOPOLOGIES,
    GangTopology,
    SubGroupLevel,
    TaskPreferenceLevel,
    TaskSetLevel,
    Topologies,
    parse_topologies,
    resolve_topology,
)

K = "kueue.x-k8s.io/"
P = "phalanx.io/"


def layer(level: str, size: object) -> dict[str, object]:
    """One layer of Kueue's multi-layer slices annotation."""
    return {"topology": level, "size": size}


def intent_of(annotations: dict[str, str]) -> tuple[TopologyConstraint | None, str]:
    parsed = parse_pod(pod_obj("m-0", group="g", annotations=annotations))
    return parsed.topology, parsed.invalid


# ---- annotations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({P + "topology-required": LEAF}, TopologyConstraint(required=LEAF)),
        (
            {P + "topology-required": LEAF, P + "topology-preferred": CLIQUE},
            TopologyConstraint(required=LEAF, preferred=CLIQUE),
        ),
        (
            {P + "topology-slice-size": "4", P + "topology-slice-required": CLIQUE},
            TopologyConstraint(slice_size=4, slice_required=CLIQUE),
        ),
        ({P + "topology": "rack"}, TopologyConstraint(topology="rack")),
        ({K + "podset-required-topology": LEAF}, TopologyConstraint(required=LEAF)),
        ({K + "podset-preferred-topology": CLIQUE}, TopologyConstraint(preferred=CLIQUE)),
        ({K + "podset-unconstrained-topology": "true"}, TopologyConstraint()),
        ({K + "podset-unconstrained-topology": "false"}, None),
        (
            {
                K + "podset-required-topology": SPINE,
                K + "podset-slice-required-topology": CLIQUE,
                K + "podset-slice-size": "18",
            },
            TopologyConstraint(required=SPINE, slice_size=18, slice_required=CLIQUE),
        ),
        (
            {P + "topology": "gb", K + "podset-required-topology": LEAF},
            TopologyConstraint(topology="gb", required=LEAF),
        ),
        (
            {P + "topology-required": LEAF, K + "podset-required-topology": LEAF},
            TopologyConstraint(required=LEAF),
        ),
        # Kueue's multi-layer slices: the innermost layer is the slice, the others wrap it.
        (
            {
                K + "podset-required-topology": SPINE,
                K + "podset-slice-required-topology-constraints": (
                    f'[{{"topology": "{LEAF}", "size": 8}}, {{"topology": "{CLIQUE}", "size": 4}}]'
                ),
            },
            TopologyConstraint(
                required=SPINE, slice_size=4, slice_required=CLIQUE, slice_layers=((8, LEAF),)
            ),
        ),
        (
            {K + "podset-slice-required-topology-constraints": json.dumps([layer(CLIQUE, 18)])},
            TopologyConstraint(slice_size=18, slice_required=CLIQUE),
        ),
    ],
    ids=[
        "none",
        "required",
        "required-and-preferred",
        "slices",
        "named-topology-only",
        "kueue-required",
        "kueue-preferred",
        "kueue-unconstrained",
        "kueue-unconstrained-false",
        "kueue-slices",
        "name-with-kueue-levels",
        "both-families-agree",
        "kueue-multi-layer",
        "kueue-one-layer-is-the-two-annotations",
    ],
)
def test_a_pod_declares_its_topology_intent_in_annotations(
    annotations: dict[str, str], expected: TopologyConstraint | None
) -> None:
    intent, invalid = intent_of(annotations)
    assert invalid == ""
    assert intent == expected


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({P + "topology-required": "not a key"}, '"not a key" is not a node label key'),
        ({P + "topology": "Rack!"}, '"Rack!" is not a topology name'),
        ({P + "topology-slice-size": "0", P + "topology-slice-required": CLIQUE}, "positive"),
        ({P + "topology-slice-size": "4"}, "needs annotation phalanx.io/topology-slice-required"),
        (
            {P + "topology-slice-required": CLIQUE},
            "needs annotation phalanx.io/topology-slice-size",
        ),
        (
            {K + "podset-required-topology": LEAF, K + "podset-unconstrained-topology": "true"},
            "only one of kueue.x-k8s.io/podset-required-topology, "
            "kueue.x-k8s.io/podset-unconstrained-topology may be set",
        ),
        (
            {K + "podset-required-topology": LEAF, K + "podset-preferred-topology": CLIQUE},
            "only one of",
        ),
        ({K + "podset-unconstrained-topology": "yes"}, '"yes" is not a boolean'),
        (
            {K + "podset-slice-required-topology-constraints": "[]"},
            "podset-slice-required-topology-constraints: must be a list of 1 to 3 layers",
        ),
        ({K + "podset-slice-required-topology-constraints": "rack=16"}, "is not JSON"),
        ({K + "podset-slice-required-topology-constraints": "[" * 100_000}, "is not JSON"),
        (
            {K + "podset-slice-required-topology-constraints": json.dumps([layer(LEAF, 2**31)])},
            "[0].size 2147483648 is not an integer from 1 to 2147483647",
        ),
        (
            {K + "podset-slice-required-topology-constraints": json.dumps([layer(LEAF, 1)] * 4)},
            "must be a list of 1 to 3 layers",
        ),
        (
            {K + "podset-slice-required-topology-constraints": json.dumps([layer(LEAF, 0)])},
            "[0].size 0 is not an integer from 1 to 2147483647",
        ),
        (
            {K + "podset-slice-required-topology-constraints": json.dumps([layer(LEAF, "16")])},
            '[0].size "16" is not an integer from 1 to 2147483647',
        ),
        (
            {K + "podset-slice-required-topology-constraints": json.dumps([{"size": 16}])},
            "[0].topology missing or not a string is not a node label key",
        ),
        (
            {
                K + "podset-slice-required-topology-constraints": json.dumps(
                    [layer(LEAF, 16), layer(LEAF, 4)]
                )
            },
            f'[1].topology "{LEAF}" is named by two layers',
        ),
        (
            {
                K + "podset-slice-required-topology-constraints": json.dumps(
                    [layer(LEAF, 16), layer(CLIQUE, 5)]
                )
            },
            "[1].size 5 does not divide [0].size 16",
        ),
        (
            {
                K + "podset-slice-required-topology-constraints": json.dumps(
                    [{"topology": CLIQUE, "sizes": [1, 3, 4]}]
                )
            },
            "[0].sizes (slices of uneven sizes) is not supported",
        ),
        (
            {
                K + "podset-slice-required-topology-constraints": json.dumps([layer(CLIQUE, 4)]),
                K + "podset-slice-required-topology": CLIQUE,
                K + "podset-slice-size": "4",
            },
            "cannot be set together with kueue.x-k8s.io/podset-slice-required-topology",
        ),
        (
            {P + "topology-required": LEAF, K + "podset-required-topology": SPINE},
            "disagree",
        ),
    ],
    ids=[
        "bad-level",
        "bad-name",
        "zero-slice",
        "size-without-level",
        "level-without-size",
        "kueue-required-and-unconstrained",
        "kueue-required-and-preferred",
        "kueue-unconstrained-not-boolean",
        "kueue-layers-empty",
        "kueue-layers-not-json",
        "kueue-layers-nested-too-deep",
        "kueue-layer-size-beyond-int32",
        "kueue-layers-four",
        "kueue-layer-size-zero",
        "kueue-layer-size-string",
        "kueue-layer-without-level",
        "kueue-layers-repeat-a-level",
        "kueue-layer-size-does-not-divide",
        "kueue-layer-uneven-sizes",
        "kueue-layers-and-slice-annotations",
        "families-disagree",
    ],
)
def test_a_malformed_topology_annotation_makes_the_pod_invalid_and_says_which(
    annotations: dict[str, str], message: str
) -> None:
    intent, invalid = intent_of(annotations)
    assert intent is None
    assert message in invalid
    assert invalid.startswith("annotation ")


def test_a_podgroup_declares_its_topology_in_phalanx_annotations() -> None:
    obj = podgroup_obj(
        "g",
        8,
        annotations={P + "topology-required": LEAF, P + "topology-preferred": CLIQUE},
    )
    assert parse_pod_group(obj).topology == TopologyConstraint(required=LEAF, preferred=CLIQUE)


def test_kueue_annotations_on_a_podgroup_are_not_read() -> None:
    obj = podgroup_obj("g", 8, annotations={K + "podset-required-topology": LEAF})
    assert parse_pod_group(obj).topology is None


def test_a_malformed_podgroup_annotation_names_the_object_and_field() -> None:
    obj = podgroup_obj("g", 8, annotations={P + "topology-slice-size": "four"})
    with pytest.raises(InvalidObjectError) as error:
        parse_pod_group(obj)
    assert str(error.value).startswith(
        'PodGroup default/g: metadata.annotations["phalanx.io/topology-slice-size"]: "four"'
    )


# ---- resolution ------------------------------------------------------------------------

DEFAULT = DEFAULT_TOPOLOGIES.default


def resolve(
    group: PodGroup | None = None,
    members: Iterable[Pod] = (),
    topologies: Topologies = DEFAULT_TOPOLOGIES,
) -> GangTopology | str:
    return resolve_topology(group or podgroup("g", 8), list(members), topologies)


def layered(*layers: tuple[int, str], required: str = "") -> TopologyConstraint:
    """Multi-layer slices, outermost first, as Kueue's annotation reads."""
    (size, level), outer = layers[-1], layers[:-1]
    return TopologyConstraint(
        required=required, slice_size=size, slice_required=level, slice_layers=outer
    )


def test_multi_layer_slices_resolve_to_their_levels_outermost_first() -> None:
    resolved = resolve(podgroup("g", 16, topology=layered((8, LEAF), (4, CLIQUE), (2, HOSTNAME))))
    assert resolved == GangTopology(
        DEFAULT_TOPOLOGIES.default,
        slice_size=2,
        slice_level=3,
        slice_layers=((8, 1), (4, 2)),
    )
    assert str(resolved) == (
        f"slices of 8 in {LEAF}, slices of 4 in {CLIQUE}, slices of 2 in {HOSTNAME}"
    )


def test_volcano_subgroup_tiers_resolve_to_levels_of_the_gangs_topology() -> None:
    workers = SubGroupPolicy("worker", keys=("volcano.sh/partition-id",), required="tier:1")
    ps = SubGroupPolicy("ps", keys=("volcano.sh/partition-id",), preferred="tier:1")
    group = podgroup(
        "g", 8, topology=TopologyConstraint(required="tier:2", subgroups=(workers, ps))
    )
    resolved = resolve(group)
    assert isinstance(resolved, GangTopology)
    assert resolved.subgroups == (SubGroupLevel(workers, 2, None), SubGroupLevel(ps, None, 2))
    assert str(resolved) == (
        f"required {LEAF}, each subgroup of policy worker in one {CLIQUE}, "
        f"each subgroup of policy ps preferably in one {CLIQUE}"
    )


@pytest.mark.parametrize(
    ("intent", "message"),
    [
        (
            TopologyConstraint(
                required="tier:1",
                subgroups=(SubGroupPolicy("worker", keys=("k",), required="tier:2"),),
            ),
            f"gang default/g: subGroupPolicy worker requires one {LEAF}, wider than the gang's "
            f"required level {CLIQUE}; subgroups must fit inside the gang's domain",
        ),
        (
            TopologyConstraint(
                subgroups=(SubGroupPolicy("worker", keys=("k",), required="tier:9"),)
            ),
            'gang default/g: subGroupPolicy worker required level "tier:9" is not a tier of '
            "topology default",
        ),
    ],
    ids=["wider-than-the-gang", "no-such-tier"],
)
def test_a_subgroup_level_the_gang_cannot_honour_is_a_clear_error(
    intent: TopologyConstraint, message: str
) -> None:
    resolved = resolve(podgroup("g", 8, topology=intent))
    assert isinstance(resolved, str)
    assert resolved.startswith(message)


def test_a_gang_that_declares_nothing_is_unconstrained_on_the_default_topology() -> None:
    resolved = resolve(members=[pod("m-0", group="g")])
    assert resolved == GangTopology(DEFAULT)
    assert not resolved.constrained


def test_the_podgroup_intent_resolves_to_level_positions() -> None:
    group = podgroup("g", 8, topology=TopologyConstraint(required=LEAF, preferred=CLIQUE))
    resolved = resolve(group)
    assert resolved == GangTopology(DEFAULT, required=1, preferred=2)
    assert resolved.walk() == (2, 1)
    assert str(resolved) == f"required {LEAF}, preferred {CLIQUE}"


def test_members_intent_applies_when_the_podgroup_says_nothing() -> None:
    members = [
        pod("m-0", group="g", topology=TopologyConstraint(required=SPINE)),
        pod("m-1", group="g", topology=TopologyConstraint(required=SPINE)),
        pod("m-2", group="g"),
    ]
    assert resolve(members=members) == GangTopology(DEFAULT, required=0)


def test_a_named_topology_is_used() -> None:
    topologies = parse_topologies(f"default={','.join((SPINE, LEAF))};rack=x.io/row,x.io/rack")
    group = podgroup("g", 4, topology=TopologyConstraint(topology="rack", required="x.io/rack"))
    resolved = resolve(group, topologies=topologies)
    assert isinstance(resolved, GangTopology)
    assert resolved.topology.name == "rack"
    assert resolved.required == 1
    assert str(resolved) == "required x.io/rack (topology rack)"


@pytest.mark.parametrize(
    ("walk", "constraint"),
    [
        ((2, 1, 0, -1), TopologyConstraint(preferred=CLIQUE)),
        ((1,), TopologyConstraint(required=LEAF)),
        ((3, 2, 1), TopologyConstraint(required=LEAF, preferred=HOSTNAME)),
        ((-1,), TopologyConstraint(slice_size=2, slice_required=CLIQUE)),
    ],
    ids=["preferred-up-to-the-cluster", "required-only", "preferred-up-to-required", "slices"],
)
def test_the_walk_goes_from_the_preferred_level_one_wider_at_a_time(
    walk: tuple[int, ...], constraint: TopologyConstraint
) -> None:
    resolved = resolve(podgroup("g", 8, topology=constraint))
    assert isinstance(resolved, GangTopology)
    assert resolved.walk() == walk


@pytest.mark.parametrize(
    ("group", "members", "message"),
    [
        (
            podgroup("g", 8, topology=TopologyConstraint(required="example.com/rack")),
            [],
            'gang default/g: required level "example.com/rack" is not a level of topology '
            f"default ({SPINE} > {LEAF} > {CLIQUE} > {HOSTNAME})",
        ),
        (
            podgroup("g", 8, topology=TopologyConstraint(topology="rack")),
            [],
            'gang default/g: unknown topology "rack" (configured: default)',
        ),
        (
            podgroup("g", 8, topology=TopologyConstraint(slice_size=3, slice_required=CLIQUE)),
            [],
            "gang default/g: topology slice size 3 does not divide the gang's minMember 8",
        ),
        (
            podgroup("g", 8, topology=TopologyConstraint(required=CLIQUE, preferred=LEAF)),
            [],
            f"gang default/g: required level {CLIQUE} is narrower than preferred level {LEAF}",
        ),
        (
            podgroup(
                "g",
                8,
                topology=TopologyConstraint(required=CLIQUE, slice_size=4, slice_required=LEAF),
            ),
            [],
            f"slice level {LEAF} is wider than required level {CLIQUE}",
        ),
        (
            podgroup(
                "g", 8, placement="interconnect-local", topology=TopologyConstraint(required=LEAF)
            ),
            [],
            "placement interconnect-local is itself a topology constraint",
        ),
        (
            podgroup("g", 8, topology=layered((6, LEAF), (2, CLIQUE))),
            [],
            "gang default/g: topology slice size 6 does not divide the gang's minMember 8",
        ),
        (
            podgroup("g", 8, topology=layered((4, CLIQUE), (2, LEAF))),
            [],
            f"gang default/g: slices of 2 in {LEAF} must lie inside the slices of 4 in "
            f"{CLIQUE}: list the layers from the widest level to the narrowest",
        ),
        (
            podgroup("g", 8, topology=layered((4, SPINE), (2, CLIQUE), required=LEAF)),
            [],
            f"gang default/g: slice level {SPINE} is wider than required level {LEAF}",
        ),
        (
            podgroup("g", 8, topology=layered((4, "example.com/rack"), (2, CLIQUE))),
            [],
            'gang default/g: slice layer 0 level "example.com/rack" is not a level of topology',
        ),
        (
            podgroup("g", 2),
            [
                pod("m-0", group="g", topology=TopologyConstraint(required=LEAF)),
                pod("m-1", group="g", topology=TopologyConstraint(required=CLIQUE)),
            ],
            f"members of gang default/g disagree on their topology: required {LEAF}; "
            f"required {CLIQUE}",
        ),
        (
            podgroup("g", 1, topology=TopologyConstraint(required=LEAF)),
            [pod("m-0", group="g", topology=TopologyConstraint(preferred=LEAF))],
            f"gang default/g: its PodGroup declares required {LEAF}, "
            f"but its members declare preferred {LEAF}",
        ),
    ],
    ids=[
        "unknown-level",
        "unknown-topology",
        "slice-does-not-divide",
        "required-narrower-than-preferred",
        "slice-wider-than-required",
        "legacy-placement-too",
        "outer-slice-does-not-divide",
        "slice-layers-widen",
        "slice-layer-wider-than-required",
        "slice-layer-unknown-level",
        "members-disagree",
        "group-and-members-disagree",
    ],
)
def test_bad_intent_is_a_clear_error_naming_the_group(
    group: PodGroup, members: list[Pod], message: str
) -> None:
    resolved = resolve(group, members)
    assert isinstance(resolved, str)
    assert message in resolved


@pytest.mark.parametrize(
    ("group", "members"),
    [
        (
            podgroup("g", 2, topology=TopologyConstraint(topology="default", required=CLIQUE)),
            [pod("m-0", group="g", topology=TopologyConstraint(required=CLIQUE))],
        ),
        (
            podgroup("g", 2, topology=TopologyConstraint(required="tier:1")),
            [pod("m-0", group="g", topology=TopologyConstraint(required=CLIQUE))],
        ),
        (
            podgroup("g", 2),
            [
                pod("m-0", group="g", topology=TopologyConstraint(required=CLIQUE)),
                pod("m-1", group="g", topology=TopologyConstraint("default", required=CLIQUE)),
                pod("m-2", group="g", topology=TopologyConstraint(required="tier:1")),
            ],
        ),
    ],
    ids=["default-by-name-or-not", "tier-or-label-key", "members-spell-it-three-ways"],
)
def test_intents_that_mean_the_same_levels_agree_however_they_are_spelled(
    group: PodGroup, members: list[Pod]
) -> None:
    assert resolve(group, members) == GangTopology(DEFAULT, required=2)


def test_the_configured_topologies_must_name_the_level_not_a_short_noun() -> None:
    resolved = resolve(podgroup("g", 8, topology=TopologyConstraint(required="clique")))
    assert isinstance(resolved, str)
    assert "not a level of topology default" in resolved


# ---- Volcano's HyperNode tiers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tier", "level"),
    [
        (f"default={SPINE},{LEAF},{CLIQUE},{HOSTNAME}", "tier:1", 2),
        (f"default={SPINE},{LEAF},{CLIQUE},{HOSTNAME}", "tier:2", 1),
        (f"default={SPINE},{LEAF},{CLIQUE},{HOSTNAME}", "tier:3", 0),
        ("default=x.io/row,x.io/rack", "tier:1", 1),
        ("default=x.io/row,x.io/rack", "tier:2", 0),
    ],
    ids=["tier1-is-the-clique", "tier2-is-the-leaf", "tier3-is-the-spine", "no-host-level",
         "no-host-level-wider"],
)  # fmt: skip
def test_a_volcano_tier_counts_up_from_the_narrowest_level_above_a_node(
    text: str, tier: str, level: int
) -> None:
    topologies = parse_topologies(text)
    group = podgroup("g", 8, topology=TopologyConstraint(required=tier))
    resolved = resolve(group, topologies=topologies)
    assert isinstance(resolved, GangTopology)
    assert resolved.required == level
    assert topologies.default.level(tier) == level


def test_a_soft_volcano_tier_is_preferred_and_climbs_to_the_cluster() -> None:
    resolved = resolve(podgroup("g", 8, topology=TopologyConstraint(preferred="tier:1")))
    assert isinstance(resolved, GangTopology)
    assert resolved.walk() == (2, 1, 0, -1)


@pytest.mark.parametrize(
    ("tier", "message"),
    [
        (
            "tier:4",
            'gang default/g: required level "tier:4" is not a tier of topology default '
            f"(tier:1 = {CLIQUE} … tier:3 = {SPINE})",
        ),
        ("tier:0", 'required level "tier:0" is not a tier of topology default'),
        ("tier:" + "9" * 18, 'required level "tier:999999999999999999" is not a tier of'),
        # Volcano's highestTierAllowed is an int64.
        (f"tier:{2**63 - 1}", f'required level "tier:{2**63 - 1}" is not a tier of'),
        ("tier:" + "9" * 5000, "is not a tier of topology default"),
    ],
    ids=["above-the-widest", "zero", "huge", "int64-max", "longer-than-int-parses"],
)
def test_a_tier_beyond_the_topology_is_a_clear_error(tier: str, message: str) -> None:
    resolved = resolve(podgroup("g", 8, topology=TopologyConstraint(required=tier)))
    assert isinstance(resolved, str)
    assert message in resolved


@pytest.mark.parametrize(
    ("annotations", "level"),
    [
        ({P + "topology-required": "tier:1"}, "required"),
        ({P + "topology-preferred": "tier:2"}, "preferred"),
        ({P + "topology-slice-size": "2", P + "topology-slice-required": "tier:1"}, "slice"),
    ],
    ids=["required", "preferred", "slice"],
)
def test_a_phalanx_annotation_may_name_a_level_by_its_volcano_tier(
    annotations: dict[str, str], level: str
) -> None:
    intent, invalid = intent_of(annotations)
    assert invalid == ""
    resolved = resolve(members=[pod("m-0", group="g", topology=intent)])
    assert isinstance(resolved, GangTopology)
    positions = {"required": resolved.required, "preferred": resolved.preferred}
    positions["slice"] = resolved.slice_level
    assert positions[level] == {"required": 2, "preferred": 1, "slice": 2}[level]


def test_a_podgroup_annotation_may_name_a_level_by_its_volcano_tier() -> None:
    obj = podgroup_obj("g", 8, annotations={P + "topology-required": "tier:2"})
    assert parse_pod_group(obj).topology == TopologyConstraint(required="tier:2")


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({K + "podset-required-topology": "tier:1"}, '"tier:1" is not a node label key such as'),
        ({P + "topology-required": "tier:"}, '"tier:" is not a node label key'),
        ({P + "topology-required": "tier:-1"}, '"tier:-1" is not a node label key'),
        ({P + "topology-required": "tier:" + "9" * 19}, "is not a node label key"),
    ],
    ids=["kueue-takes-label-keys-only", "no-number", "negative", "too-many-digits"],
)
def test_a_malformed_tier_in_an_annotation_makes_the_pod_invalid(
    annotations: dict[str, str], message: str
) -> None:
    intent, invalid = intent_of(annotations)
    assert intent is None
    assert message in invalid


def test_a_topology_of_hosts_only_has_no_tiers() -> None:
    topologies = parse_topologies(HOSTNAME)
    resolved = resolve(
        podgroup("g", 8, topology=TopologyConstraint(required="tier:1")), topologies=topologies
    )
    assert isinstance(resolved, str)
    assert "none: its only level is the node itself" in resolved


def test_a_tier_in_an_ordering_error_names_its_level() -> None:
    group = podgroup("g", 8, topology=TopologyConstraint(required="tier:1", preferred="tier:2"))
    resolved = resolve(group)
    assert isinstance(resolved, str)
    assert f"required level tier:1 ({CLIQUE}) is narrower than preferred level tier:2 ({LEAF})" in (
        resolved
    )


# ---- upstream's PodGroup topology key: any node label -------------------------------------

ZONE = "topology.kubernetes.io/zone"


def upstream_key(key: str) -> TopologyConstraint:
    """What upstream's `spec.schedulingConstraints.topology[0].key` reads as."""
    return TopologyConstraint(required=key, any_label=True)


def test_an_upstream_key_that_is_a_configured_level_resolves_as_the_annotation_would() -> None:
    by_field = resolve(podgroup("g", 8, topology=upstream_key(LEAF)))
    by_annotation = resolve(podgroup("g", 8, topology=TopologyConstraint(required=LEAF)))
    assert by_field == by_annotation == GangTopology(DEFAULT, required=1)


def test_an_upstream_key_of_another_configured_topology_resolves_in_that_topology() -> None:
    topologies = parse_topologies(f"default={SPINE},{LEAF};rack=x.io/row,x.io/rack")
    resolved = resolve(podgroup("g", 4, topology=upstream_key("x.io/rack")), topologies=topologies)
    assert isinstance(resolved, GangTopology)
    assert (resolved.topology.name, resolved.required) == ("rack", 1)


def test_an_upstream_key_no_topology_has_is_a_topology_of_that_label_alone() -> None:
    resolved = resolve(podgroup("g", 4, topology=upstream_key(ZONE)))
    assert isinstance(resolved, GangTopology)
    assert resolved.topology.levels == (ZONE,)
    assert resolved.topology.adhoc
    assert resolved.walk() == (0,)  # one domain of the label, never wider
    assert str(resolved) == f"required {ZONE} (a node label, in no configured topology)"


def test_upstream_hostname_key_without_a_hostname_level_is_a_topology_of_hosts() -> None:
    topologies = parse_topologies(f"{SPINE},{LEAF}")
    resolved = resolve(podgroup("g", 4, topology=upstream_key(HOSTNAME)), topologies=topologies)
    assert isinstance(resolved, GangTopology)
    assert (resolved.topology.levels, resolved.required) == ((HOSTNAME,), 0)


def test_an_upstream_key_with_a_preferred_level_and_slices_resolves_them_in_its_topology() -> None:
    intent = TopologyConstraint(
        required=LEAF, preferred=CLIQUE, slice_size=2, slice_required=CLIQUE, any_label=True
    )
    resolved = resolve(podgroup("g", 4, topology=intent))
    assert resolved == GangTopology(DEFAULT, required=1, preferred=2, slice_size=2, slice_level=2)
    assert resolved.walk() == (2, 1)  # one clique if it can, never wider than one leaf


@pytest.mark.parametrize(
    ("added", "refusal"),
    [
        (
            {"preferred": SPINE},
            f"required level {LEAF} is narrower than preferred level {SPINE}",
        ),
        (
            {"slice_size": 2, "slice_required": SPINE},
            f"slice level {SPINE} is wider than required level {LEAF}",
        ),
        ({"slice_size": 3, "slice_required": CLIQUE}, "slice size 3 does not divide"),
        ({"preferred": "x.io/row"}, 'preferred level "x.io/row" is not a level of topology'),
    ],
    ids=["preferred-wider", "slice-wider", "slice-size", "preferred-unknown"],
)
def test_annotations_added_to_an_upstream_key_are_checked_as_any_intent(
    added: dict[str, Any], refusal: str
) -> None:
    intent = TopologyConstraint(required=LEAF, any_label=True, **added)
    resolved = resolve(podgroup("g", 4, topology=intent))
    assert isinstance(resolved, str)
    assert refusal in resolved


def test_an_upstream_key_of_another_topology_takes_its_preferred_level_from_that_topology() -> None:
    topologies = parse_topologies(f"default={SPINE},{LEAF};rack=x.io/row,x.io/rack")
    intent = TopologyConstraint(required="x.io/row", preferred="x.io/rack", any_label=True)
    resolved = resolve(podgroup("g", 4, topology=intent), topologies=topologies)
    assert isinstance(resolved, GangTopology)
    assert (resolved.topology.name, resolved.required, resolved.preferred) == ("rack", 0, 1)


@pytest.mark.parametrize(
    "added",
    [{"preferred": CLIQUE}, {"slice_size": 2, "slice_required": HOSTNAME}],
    ids=["preferred", "slice"],
)
def test_an_ad_hoc_upstream_key_has_no_other_level_to_prefer_or_slice_in(
    added: dict[str, Any],
) -> None:
    intent = TopologyConstraint(required=ZONE, any_label=True, **added)
    resolved = resolve(podgroup("g", 4, topology=intent))
    assert isinstance(resolved, str)
    assert f"{ZONE} is in no configured topology" in resolved
    assert "its only level" in resolved


@pytest.mark.parametrize(
    ("group", "members"),
    [
        (podgroup("g", 2, topology=TopologyConstraint(required=ZONE)), []),
        (podgroup("g", 2), [pod("m-0", group="g", topology=TopologyConstraint(required=ZONE))]),
        (
            podgroup("g", 2, topology=upstream_key(ZONE)),
            [pod("m-0", group="g", topology=TopologyConstraint(required=ZONE))],
        ),
    ],
    ids=["podgroup-annotation", "member-annotation", "member-annotation-beside-the-field"],
)
def test_an_annotation_naming_an_unknown_level_is_still_refused(
    group: PodGroup, members: list[Pod]
) -> None:
    """Phalanx's and Kueue's annotations name configured levels: a typo there is caught."""
    resolved = resolve(group, members)
    assert isinstance(resolved, str)
    assert f'required level "{ZONE}" is not a level of topology default' in resolved


# ---- KAI's topologyConstraint: node label keys, required and preferred ---------------------


def test_a_kai_preferred_level_alone_picks_the_topology_that_has_it() -> None:
    intent = TopologyConstraint(preferred=CLIQUE, any_label=True)
    assert resolve(podgroup("g", 4, topology=intent)) == GangTopology(DEFAULT, preferred=2)


def test_a_kai_preferred_level_no_topology_has_is_a_topology_of_that_label_alone() -> None:
    resolved = resolve(
        podgroup("g", 4, topology=TopologyConstraint(preferred=ZONE, any_label=True))
    )
    assert isinstance(resolved, GangTopology)
    assert (resolved.topology.levels, resolved.required, resolved.preferred) == ((ZONE,), None, 0)


# ---- KAI's subgroups: each inside one value of their own level -----------------------------


def kai_subgroups(**levels: str) -> TopologyConstraint:
    """What a KAI PodGroup with `levels` (its own) and subgroups decode and prefill each
    required in one `slice` reads as."""
    return TopologyConstraint(
        required=levels.get("required", ""),
        preferred=levels.get("preferred", ""),
        slice_required=levels["slice"],
        any_label=True,
        slice_tasks=("decode", "prefill"),
        slice_noun="subgroup",
    )


def test_kai_subgroups_level_holds_beside_the_pod_groups_required_and_preferred_levels() -> None:
    resolved = resolve(
        podgroup("g", 4, topology=kai_subgroups(required=SPINE, preferred=LEAF, slice=CLIQUE))
    )
    assert resolved == GangTopology(
        DEFAULT,
        required=0,
        preferred=1,
        slice_level=2,
        slice_tasks=frozenset({"decode", "prefill"}),
        slice_noun="subgroup",
    )
    assert str(resolved) == (
        f"required {SPINE}, preferred {LEAF}, subgroup(s) decode, prefill each in one {CLIQUE}"
    )


def test_kai_subgroups_level_holds_beside_the_pod_groups_preferred_level_alone() -> None:
    resolved = resolve(podgroup("g", 4, topology=kai_subgroups(preferred=LEAF, slice=CLIQUE)))
    assert isinstance(resolved, GangTopology)
    assert (resolved.required, resolved.preferred, resolved.slice_level) == (None, 1, 2)


def test_a_kai_preferred_level_outside_the_required_levels_topology_is_refused() -> None:
    resolved = resolve(
        podgroup("g", 4, topology=kai_subgroups(required=LEAF, preferred=ZONE, slice=CLIQUE))
    )
    assert isinstance(resolved, str)
    assert (
        f'preferred level "{ZONE}" is no level of the topology of required level {LEAF}' in resolved
    )


def test_kai_subgroups_level_wider_than_the_pod_groups_is_refused_naming_the_subgroups() -> None:
    resolved = resolve(podgroup("g", 4, topology=kai_subgroups(required=LEAF, slice=SPINE)))
    assert isinstance(resolved, str)
    assert f"subgroup(s) decode, prefill require one {SPINE} each" in resolved
    assert f"at or below {LEAF}" in resolved


# ---- slices by task, each at a level of its own (KAI's multi-level topology) ---------------

KAI_FIELD = "spec.subGroups[].topologyConstraint.requiredTopologyLevel"


def own_levels(required: str = "", topology: str = "", **levels: str) -> TopologyConstraint:
    """What a KAI PodGroup reads as whose subgroups require these levels (`decode=LEAF`)."""
    return TopologyConstraint(
        topology=topology,
        required=required,
        any_label=not topology,
        slice_tasks=tuple(sorted(levels)),
        slice_noun="subgroup",
        task_levels=tuple(sorted(levels.items())),
        declared_by=KAI_FIELD,
    )


def test_subgroups_levels_of_one_topology_resolve_each_inside_the_required_level() -> None:
    resolved = resolve(
        podgroup("g", 4, topology=own_levels(required=SPINE, prefill=CLIQUE, decode=LEAF))
    )
    assert resolved == GangTopology(
        DEFAULT,
        required=0,
        slice_tasks=frozenset({"decode", "prefill"}),
        slice_noun="subgroup",
        task_levels=(("decode", 1), ("prefill", 2)),
    )
    assert isinstance(resolved, GangTopology)
    assert (resolved.task_level("prefill"), resolved.task_level("router")) == (2, None)
    assert str(resolved) == (
        f"required {SPINE}, subgroup(s) decode each in one {LEAF}, prefill in one {CLIQUE}"
    )


def test_subgroups_levels_without_a_required_one_pick_the_topology_that_has_them_all() -> None:
    topologies = parse_topologies(f"default={SPINE},{LEAF};rack=x.io/row,x.io/rack")
    resolved = resolve(
        podgroup("g", 4, topology=own_levels(prefill="x.io/rack", decode="x.io/row")),
        topologies=topologies,
    )
    assert isinstance(resolved, GangTopology)
    assert (resolved.topology.name, resolved.required) == ("rack", None)
    assert resolved.task_levels == (("decode", 0), ("prefill", 1))


def test_levels_spelled_apart_that_are_one_level_resolve_as_one_shared_level() -> None:
    intent = own_levels(topology="default", prefill=CLIQUE, decode="tier:1")
    resolved = resolve(podgroup("g", 4, topology=intent))
    assert isinstance(resolved, GangTopology)
    assert (resolved.slice_level, resolved.task_levels) == (2, ())


@pytest.mark.parametrize(
    ("intent", "refusal"),
    [
        (
            own_levels(required=LEAF, prefill=CLIQUE, decode=SPINE),
            f"gang default/g: its subgroup(s) decode require one {SPINE} each ({KAI_FIELD}), "
            f"which is no level of the gang's topology at or below {LEAF}",
        ),
        (
            own_levels(required=LEAF, prefill=CLIQUE, decode=ZONE),
            f"gang default/g: its subgroup(s) decode require one {ZONE} each ({KAI_FIELD}), "
            f"which is no level of the gang's topology at or below {LEAF}",
        ),
        (
            own_levels(prefill="example.com/rack", decode=ZONE),
            f"gang default/g: its subgroup(s) decode require one {ZONE}, prefill one "
            f"example.com/rack ({KAI_FIELD}), but no configured topology has all these levels",
        ),
        (
            own_levels(prefill=CLIQUE, decode="x.io/row"),
            f"gang default/g: its subgroup(s) decode require one x.io/row, prefill one {CLIQUE} "
            f"({KAI_FIELD}), but no configured topology has all these levels",
        ),
        (
            own_levels(topology="default", required=LEAF, prefill=CLIQUE, decode=SPINE),
            f"gang default/g: subgroup(s) decode level {SPINE} is wider than required level "
            f"{LEAF}; slices must fit inside the required domain",
        ),
        (
            own_levels(topology="default", prefill=CLIQUE, decode=ZONE),
            f'gang default/g: subgroup(s) decode level "{ZONE}" is not a level of topology default',
        ),
    ],
    ids=[
        "wider-than-required",
        "outside-the-required-levels-topology",
        "two-ad-hoc-labels",
        "levels-of-two-topologies",
        "named-topology-wider-than-required",
        "named-topology-unknown-level",
    ],
)
def test_subgroups_levels_that_cannot_nest_are_refused_naming_each_subgroup(
    intent: TopologyConstraint, refusal: str
) -> None:
    topologies = parse_topologies(f"default={SPINE},{LEAF},{CLIQUE};rows=x.io/row,x.io/rack")
    resolved = resolve(podgroup("g", 4, topology=intent), topologies=topologies)
    assert isinstance(resolved, str)
    assert resolved.startswith(refusal), resolved


# ---- sets of tasks held together ---------------------------------------------------------


def task_set(label: str, level: str, *tasks: str) -> TaskSet:
    return TaskSet(label, tasks, level, f"field of {label}")


def with_task_sets(*sets: TaskSet, **kw: Any) -> TopologyConstraint:
    """KAI-like: levels as node label keys, subgroups as tasks."""
    return TopologyConstraint(any_label=True, slice_noun="subgroup", task_sets=sets, **kw)


def test_task_sets_resolve_to_their_levels_positions_inside_the_gangs_topology() -> None:
    intent = with_task_sets(
        task_set("subgroup prefill", LEAF, "leader", "workers"),
        required=SPINE,
        slice_tasks=("leader", "workers"),
        slice_required=CLIQUE,
    )
    resolved = resolve(podgroup("g", 4, topology=intent))
    assert isinstance(resolved, GangTopology)
    assert resolved.task_sets == (
        TaskSetLevel("subgroup prefill", frozenset({"leader", "workers"}), 1),
    )
    assert resolved.required == 0
    assert str(resolved) == (
        f"required {SPINE}, subgroup(s) leader, workers each in one {CLIQUE}, "
        f"subgroup prefill (leader, workers) together in one {LEAF}"
    )


def test_a_task_set_alone_picks_the_topology_its_level_is_in() -> None:
    topologies = parse_topologies(f"default={SPINE},{LEAF};rows=x.io/row,x.io/rack")
    intent = with_task_sets(task_set("subgroup prefill", "x.io/rack", "a", "b"))
    resolved = resolve(podgroup("g", 2, topology=intent), topologies=topologies)
    assert isinstance(resolved, GangTopology)
    assert resolved.topology.name == "rows"
    assert resolved.required is None
    assert resolved.task_sets == (TaskSetLevel("subgroup prefill", frozenset({"a", "b"}), 1),)


@pytest.mark.parametrize(
    ("intent", "refusal"),
    [
        (
            with_task_sets(task_set("subgroup prefill", SPINE, "a", "b"), required=LEAF),
            f"gang default/g: subgroup prefill (field of subgroup prefill) requires one {SPINE}, "
            f"wider than required level {LEAF}; a set of subgroups must fit inside the required "
            "domain",
        ),
        (
            with_task_sets(
                task_set("subgroup prefill", CLIQUE, "a", "b"),
                slice_tasks=("a",),
                slice_required=LEAF,
            ),
            f"gang default/g: subgroup a requires one {LEAF}, wider than the one {CLIQUE} "
            "subgroup prefill (field of subgroup prefill) holds it in; a subgroup's level must "
            "be at or below that of every set holding it",
        ),
        (
            with_task_sets(
                task_set("subgroup x", LEAF, "a", "b"), task_set("subgroup y", LEAF, "b", "c")
            ),
            "gang default/g: subgroup x (field of subgroup x) and subgroup y (field of "
            "subgroup y) share subgroup(s) b but neither holds the other; sets must nest or be "
            "disjoint",
        ),
        (
            with_task_sets(
                task_set("subgroup outer", CLIQUE, "a", "b", "c"),
                task_set("subgroup inner", LEAF, "a", "b"),
            ),
            f"gang default/g: subgroup inner (field of subgroup inner) requires one {LEAF}, "
            f"wider than the one {CLIQUE} subgroup outer (field of subgroup outer) holds it "
            "in; a set inside another must be at or below its level",
        ),
        (
            with_task_sets(task_set("subgroup prefill", "x.io/rack", "a", "b"), required=LEAF),
            "gang default/g: its subgroup prefill requires its subgroup(s) a, b in one "
            f"x.io/rack together (field of subgroup prefill), which is no level of the gang's "
            f"topology at or below {LEAF}",
        ),
    ],
    ids=[
        "set-wider-than-the-gang",
        "task-wider-than-its-set",
        "sets-overlapping-not-nested",
        "inner-set-wider-than-outer",
        "set-level-in-another-topology",
    ],
)
def test_task_sets_that_do_not_nest_are_refused_naming_the_set_and_its_field(
    intent: TopologyConstraint, refusal: str
) -> None:
    topologies = parse_topologies(f"default={SPINE},{LEAF},{CLIQUE};rows=x.io/row,x.io/rack")
    resolved = resolve(podgroup("g", 4, topology=intent), topologies=topologies)
    assert isinstance(resolved, str)
    assert resolved.startswith(refusal), resolved


def test_equal_sets_at_two_levels_nest_either_way() -> None:
    intent = with_task_sets(
        task_set("subgroup outer", LEAF, "a", "b"), task_set("subgroup inner", CLIQUE, "a", "b")
    )
    assert isinstance(resolve(podgroup("g", 2, topology=intent)), GangTopology)


# ---- tasks' and sets' preferred levels -------------------------------------------------------


def prefers(label: str, level: str, *tasks: str, together: bool = False) -> TaskPreference:
    return TaskPreference(label, tasks, level, f"preferred field of {label}", together)


def test_preferences_resolve_with_the_level_their_task_or_set_requires_of_its_own() -> None:
    intent = replace(
        own_levels(required=SPINE, decode=LEAF, prefill=CLIQUE),
        task_sets=(task_set("subgroup pair", LEAF, "decode", "prefill"),),
        preferences=(
            prefers("subgroup decode", CLIQUE, "decode"),
            prefers("subgroup pair", CLIQUE, "decode", "prefill", together=True),
            prefers("subgroup router", LEAF, "router"),
        ),
    )
    resolved = resolve(podgroup("g", 4, topology=intent))
    assert isinstance(resolved, GangTopology)
    assert resolved.preferences == (
        TaskPreferenceLevel("subgroup decode", frozenset({"decode"}), 2, 1, False),
        TaskPreferenceLevel("subgroup pair", frozenset({"decode", "prefill"}), 2, 1, True),
        TaskPreferenceLevel("subgroup router", frozenset({"router"}), 1, None, False),
    )
    assert str(resolved).endswith(
        f"subgroup decode preferably in one {CLIQUE}, subgroup pair preferably in one "
        f"{CLIQUE}, subgroup router preferably in one {LEAF}"
    )


def test_a_preference_at_its_own_required_level_or_the_gangs_asks_nothing_and_is_dropped() -> None:
    intent = replace(
        own_levels(required=LEAF, decode=CLIQUE),
        preferences=(
            prefers("subgroup decode", CLIQUE, "decode"),
            prefers("subgroup router", LEAF, "router"),
        ),
    )
    resolved = resolve(podgroup("g", 4, topology=intent))
    assert isinstance(resolved, GangTopology)
    assert resolved.preferences == ()


@pytest.mark.parametrize(
    ("intent", "refusal"),
    [
        (
            replace(
                own_levels(required=SPINE, decode=CLIQUE),
                preferences=(prefers("subgroup decode", LEAF, "decode"),),
            ),
            "gang default/g: subgroup decode (preferred field of subgroup decode) prefers one "
            f"{LEAF}, wider than the one {CLIQUE} it requires; prefer the required level or a "
            "narrower one",
        ),
        (
            replace(
                own_levels(required=LEAF, decode=CLIQUE),
                preferences=(prefers("subgroup router", SPINE, "router"),),
            ),
            "gang default/g: subgroup router (preferred field of subgroup router) prefers one "
            f"{SPINE}, wider than required level {LEAF}; prefer the required level or a "
            "narrower one",
        ),
        (
            with_task_sets(
                task_set("subgroup pair", CLIQUE, "a", "b"),
                preferences=(prefers("subgroup pair", LEAF, "a", "b", together=True),),
            ),
            "gang default/g: subgroup pair (preferred field of subgroup pair) prefers one "
            f"{LEAF}, wider than the one {CLIQUE} it requires; prefer the required level or a "
            "narrower one",
        ),
        (
            replace(
                own_levels(required=LEAF, decode=CLIQUE),
                preferences=(prefers("subgroup decode", "x.io/rack", "decode"),),
            ),
            "gang default/g: its subgroup decode prefers one x.io/rack (preferred field of "
            "subgroup decode), which is no level of the gang's topology at or below "
            f"{LEAF}",
        ),
    ],
    ids=[
        "task-preferring-wider-than-it-requires",
        "task-preferring-wider-than-the-gang",
        "set-preferring-wider-than-it-requires",
        "preferred-level-in-another-topology",
    ],
)
def test_inconsistent_preferences_are_refused_naming_the_field(
    intent: TopologyConstraint, refusal: str
) -> None:
    topologies = parse_topologies(f"default={SPINE},{LEAF},{CLIQUE};rows=x.io/row,x.io/rack")
    resolved = resolve(podgroup("g", 4, topology=intent), topologies=topologies)
    assert isinstance(resolved, str)
    assert resolved.startswith(refusal), resolved


def test_a_gang_without_preferences_resolves_as_before_and_has_no_preference_steps() -> None:
    resolved = resolve(podgroup("g", 4, topology=own_levels(required=SPINE, decode=CLIQUE)))
    assert isinstance(resolved, GangTopology)
    assert resolved.preferences == ()
    assert resolved.preferring(0) == ()
