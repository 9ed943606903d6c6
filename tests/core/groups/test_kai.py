"""KAI: NVIDIA KAI Scheduler's scheduling.run.ai/v2alpha2 PodGroups named by a pod annotation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import kai_pod_obj, kai_podgroup_obj, pod_obj, present
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import kai, registry
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.inventory import parse_pod
from phalanx.core.model import (
    Dialect,
    GroupRef,
    PodGroup,
    SubGroupTree,
    TaskPreference,
    TaskSet,
    TopologyConstraint,
)
from phalanx.core.quorum import fewest_members
from phalanx.core.topology import parse_topologies, resolve_topology

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NOW = "2026-01-01T00:00:00Z"
EARLIER = "2025-12-31T00:00:00Z"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
BLOCK = "example.com/block"


# --- membership ------------------------------------------------------------------------


def test_a_pod_marked_by_kais_podgrouper_is_a_member_of_its_kai_gang() -> None:
    pod = parse_pod(kai_pod_obj("w-0", "train", namespace="ml"))
    assert (pod.group, pod.group_dialect, pod.invalid) == (
        GroupRef("ml", "train", Dialect.KAI),
        Dialect.KAI,
        "",
    )
    assert present(pod.group).key == "kai:ml/train"


def test_a_malformed_group_name_marks_the_pod_invalid() -> None:
    pod = parse_pod(kai_pod_obj("w-0", "Train_1"))
    assert (pod.group, pod.group_dialect) == (None, Dialect.KAI)
    assert pod.invalid == (
        'annotation pod-group-name: "Train_1" is not a valid PodGroup name '
        '(lower-case letters, digits, "-" and ".")'
    )


def test_a_kai_member_s_task_is_its_subgroup_label_not_volcano_s_task() -> None:
    obj = kai_pod_obj("w-0", "train", "workers", annotations={"volcano.sh/task-spec": "ps"})
    assert parse_pod(obj).task == "workers"


def test_a_pod_of_another_dialect_keeps_its_volcano_task_even_with_kai_s_label() -> None:
    labels = {"kai.scheduler/subgroup-name": "workers"}
    obj = pod_obj("p", volcano_group="mpi", labels=labels, annotations={})
    obj["metadata"]["annotations"]["volcano.sh/task-spec"] = "ps"
    assert parse_pod(obj).task == "ps"


@pytest.mark.parametrize(
    ("annotations", "labels", "winner", "overruled"),
    [
        (
            {"scheduling.k8s.io/group-name": "job", "pod-group-name": "job"},
            {},
            "volcano:default/job",
            Dialect.KAI,
        ),
        (
            {"pod-group-name": "job", "kueue.x-k8s.io/pod-group-total-count": "2"},
            {"kueue.x-k8s.io/pod-group-name": "job"},
            "kai:default/job",
            Dialect.KUEUE,
        ),
    ],
    ids=["volcano-before-kai", "kai-before-kueue"],
)
def test_kai_comes_after_volcano_and_before_kueue(
    annotations: dict[str, str], labels: dict[str, str], winner: str, overruled: Dialect
) -> None:
    pod = parse_pod(pod_obj("p", annotations=annotations, labels=labels))
    assert pod.group is not None
    assert pod.group.key == winner
    assert [c.dialect for c in pod.overruled] == [overruled]
    order = registry.PRECEDENCE
    assert order.index(Dialect.VOLCANO) < order.index(Dialect.KAI) < order.index(Dialect.KUEUE)


# --- the PodGroup ------------------------------------------------------------------------


def test_a_pod_group_as_kai_s_podgrouper_creates_it() -> None:
    parsed = kai.parse_pod_group(kai_podgroup_obj("train", 4, namespace="ml"))
    assert parsed.warnings == ()
    assert parsed.value == PodGroup(
        namespace="ml",
        name="train",
        min_member=4,
        timeout_declared=False,
        uid="kai-ml-train",
        dialect=Dialect.KAI,
    )
    assert parsed.value.key == "kai:ml/train"


def test_registry_reads_kai_pod_groups_by_api_version() -> None:
    parsed = registry.parse_group_object(kai_podgroup_obj("train", 2))
    assert parsed is not None
    assert parsed.value.key == "kai:default/train"
    assert ("scheduling.run.ai/v2alpha2", "PodGroup") in registry.group_kinds()


def test_subgroups_give_the_gang_its_task_minima_sorted_without_zeros() -> None:
    obj = kai_podgroup_obj("train", 4, sub_groups={"workers": 3, "leader": 1, "spare": 0})
    group = kai.parse_pod_group(obj).value
    assert group.min_task_member == (("leader", 1), ("workers", 3))
    assert group.task_names == frozenset({"leader", "workers", "spare"})


def test_an_edited_subgroup_minimum_makes_a_different_gang() -> None:
    before = kai_podgroup_obj("train", 4, sub_groups={"leader": 1, "workers": 3})
    after = kai_podgroup_obj("train", 4, sub_groups={"leader": 1, "workers": 2})
    assert kai.parse_pod_group(before).value != kai.parse_pod_group(after).value


# --- nested subgroups (`parent`) and `minSubGroup` --------------------------------------


def disaggregated(**decode: Any) -> list[dict[str, Any]]:
    """KAI's design example: decode and prefill, each a leader and four workers beneath."""
    return [
        {"name": "decode", **decode},
        {"name": "decode-leaders", "parent": "decode", "minMember": 1},
        {"name": "decode-workers", "parent": "decode", "minMember": 4},
        {"name": "prefill"},
        {"name": "prefill-leaders", "parent": "prefill", "minMember": 1},
        {"name": "prefill-workers", "parent": "prefill", "minMember": 4},
    ]


def with_subgroups(min_member: int | None, subgroups: list[dict[str, Any]], **spec: Any) -> Any:
    obj = kai_podgroup_obj("serve", min_member)
    obj["spec"].update(subGroups=subgroups, **spec)
    return obj


DECODE_TREE = SubGroupTree("decode", 2, (("decode-leaders", 1), ("decode-workers", 4)))
PREFILL_TREE = SubGroupTree("prefill", 2, (("prefill-leaders", 1), ("prefill-workers", 4)))
LEAVES = frozenset({"decode-leaders", "decode-workers", "prefill-leaders", "prefill-workers"})


def test_nested_subgroups_make_a_tree_whose_leaves_are_the_members_tasks() -> None:
    parsed = kai.parse_pod_group(with_subgroups(10, disaggregated()))
    assert parsed.warnings == ()
    group = parsed.value
    assert group.min_member == 10
    assert group.min_task_member == SubGroupTree("", 2, (DECODE_TREE, PREFILL_TREE))
    assert group.task_names == LEAVES


def test_without_min_sub_group_every_parent_needs_all_its_children() -> None:
    tree = kai.parse_pod_group(with_subgroups(10, disaggregated())).value.min_task_member
    assert isinstance(tree, SubGroupTree)
    assert fewest_members(tree) == 10


def test_min_sub_group_on_the_pod_group_needs_that_many_top_level_subgroups() -> None:
    """KAI's elastic example: any 3 of 4 prefill replicas of 8; minMember unset."""
    replicas = [{"name": f"prefill-{i}", "minMember": 8} for i in range(4)]
    parsed = kai.parse_pod_group(with_subgroups(None, replicas, minSubGroup=3))
    assert parsed.warnings == ()
    assert parsed.value.min_member == 24
    assert parsed.value.min_task_member == SubGroupTree(
        "", 3, tuple((f"prefill-{i}", 8) for i in range(4))
    )


def test_min_sub_group_on_a_parent_needs_that_many_of_its_children() -> None:
    group = kai.parse_pod_group(
        with_subgroups(None, disaggregated(minSubGroup=1), minSubGroup=2)
    ).value
    assert group.min_task_member == SubGroupTree(
        "", 2, (replace(DECODE_TREE, min_groups=1), PREFILL_TREE)
    )
    assert group.min_member == 6  # the decode leader alone, and all of prefill


def test_subgroups_without_min_member_make_the_gang_their_quorum_s_size() -> None:
    group = kai.parse_pod_group(with_subgroups(None, disaggregated())).value
    assert group.min_member == 10


def test_min_member_beyond_an_elastic_quorum_is_held_and_said_to_be_kai_s_difference() -> None:
    parsed = kai.parse_pod_group(with_subgroups(10, disaggregated(minSubGroup=1)))
    assert parsed.value.min_member == 10
    assert parsed.warnings == (
        "spec.minMember (10) is more than the fewest members the subgroups' minSubGroup "
        "quorum needs (6): Phalanx holds both, so the gang waits for 10 (KAI's scheduler "
        "counts only the subgroups)",
    )


def test_a_leaf_asking_for_no_members_is_a_child_that_is_always_ready() -> None:
    subgroups = [
        {"name": "decode", "minSubGroup": 1},
        {"name": "spare", "parent": "decode", "minMember": 0},
        {"name": "workers", "parent": "decode", "minMember": 2},
    ]
    group = kai.parse_pod_group(with_subgroups(2, subgroups)).value
    assert group.min_task_member == SubGroupTree(
        "", 1, (SubGroupTree("decode", 1, (("spare", 0), ("workers", 2))),)
    )
    assert group.task_names == frozenset({"spare", "workers"})


def test_flat_subgroups_with_min_sub_group_are_a_tree_of_leaves() -> None:
    group = kai.parse_pod_group(
        with_subgroups(
            None, [{"name": "b", "minMember": 2}, {"name": "a", "minMember": 1}], minSubGroup=1
        )
    ).value
    assert group.min_task_member == SubGroupTree("", 1, (("a", 1), ("b", 2)))
    assert group.min_member == 1


def test_messages_name_spec_sub_groups_as_what_sets_a_nested_quorum() -> None:
    group = kai.parse_pod_group(with_subgroups(10, disaggregated())).value
    assert registry.minima_field(group.min_task_member, group.dialect) == "spec.subGroups"


def test_an_edited_parent_makes_a_different_gang() -> None:
    before = kai.parse_pod_group(with_subgroups(10, disaggregated())).value
    after = kai.parse_pod_group(with_subgroups(None, disaggregated(minSubGroup=1))).value
    assert before != after


def test_leaves_keep_their_levels_beneath_a_parent() -> None:
    subgroups = disaggregated()
    subgroups[2]["topologyConstraint"] = {"requiredTopologyLevel": RACK}
    topology = kai.parse_pod_group(with_subgroups(10, subgroups)).value.topology
    assert topology == TopologyConstraint(
        any_label=True, slice_required=RACK, slice_tasks=("decode-workers",), slice_noun="subgroup"
    )


def test_a_parent_s_level_is_accepted_where_the_gang_s_own_level_already_holds_it() -> None:
    subgroups = disaggregated(topologyConstraint={"requiredTopologyLevel": ZONE})
    obj = with_subgroups(10, subgroups, topologyConstraint={"requiredTopologyLevel": ZONE})
    parsed = kai.parse_pod_group(obj)
    assert parsed.warnings == ()
    assert parsed.value.topology == TopologyConstraint(required=ZONE, any_label=True)


PREFILL_LEVEL = "spec.subGroups[3].topologyConstraint.requiredTopologyLevel"


def test_a_parent_s_level_holds_its_leaves_together_as_a_task_set() -> None:
    # NVIDIA Dynamo's disaggregated serving: the gang in one zone, prefill's leader and
    # workers together in one block, each of them in one rack.
    subgroups = disaggregated()
    subgroups[3]["topologyConstraint"] = {"requiredTopologyLevel": BLOCK}
    for leaf in (4, 5):
        subgroups[leaf]["topologyConstraint"] = {"requiredTopologyLevel": RACK}
    obj = with_subgroups(10, subgroups, topologyConstraint={"requiredTopologyLevel": ZONE})
    parsed = kai.parse_pod_group(obj)
    assert parsed.warnings == ()
    topology = parsed.value.topology
    assert topology is not None
    assert topology.task_sets == (
        TaskSet("subgroup prefill", ("prefill-leaders", "prefill-workers"), BLOCK, PREFILL_LEVEL),
    )
    assert str(topology) == (
        f"required {ZONE}, subgroup(s) prefill-leaders, prefill-workers each in one {RACK}, "
        f"subgroup prefill (prefill-leaders, prefill-workers) together in one {BLOCK}"
    )


def test_a_parent_s_level_without_the_pod_group_s_own_is_a_task_set_alone() -> None:
    subgroups = disaggregated(topologyConstraint={"requiredTopologyLevel": RACK})
    topology = kai.parse_pod_group(with_subgroups(10, subgroups)).value.topology
    assert topology == TopologyConstraint(
        any_label=True,
        slice_noun="subgroup",
        task_sets=(
            TaskSet(
                "subgroup decode",
                ("decode-leaders", "decode-workers"),
                RACK,
                "spec.subGroups[0].topologyConstraint.requiredTopologyLevel",
            ),
        ),
    )


def test_nested_parents_give_nested_task_sets_of_the_leaves_beneath_each() -> None:
    subgroups: list[dict[str, Any]] = [
        {"name": "replica", "topologyConstraint": {"requiredTopologyLevel": ZONE}},
        {
            "name": "prefill",
            "parent": "replica",
            "topologyConstraint": {"requiredTopologyLevel": BLOCK},
        },
        {"name": "leader", "parent": "prefill", "minMember": 1},
        {"name": "workers", "parent": "prefill", "minMember": 2},
        {"name": "decode", "parent": "replica", "minMember": 2},
    ]
    topology = kai.parse_pod_group(with_subgroups(5, subgroups)).value.topology
    assert topology is not None
    assert [(s.label, s.tasks, s.level) for s in topology.task_sets] == [
        ("subgroup prefill", ("leader", "workers"), BLOCK),
        ("subgroup replica", ("decode", "leader", "workers"), ZONE),
    ]


def test_a_parent_s_level_beside_the_annotations_slices_is_refused_naming_it() -> None:
    obj = with_subgroups(10, disaggregated(topologyConstraint={"requiredTopologyLevel": RACK}))
    obj["metadata"]["annotations"] = {
        "phalanx.io/topology-slice-size": "2",
        "phalanx.io/topology-slice-required": RACK,
    }
    with pytest.raises(InvalidObjectError) as raised:
        kai.parse_pod_group(obj)
    assert str(raised.value).endswith(
        "spec.subGroups[0].topologyConstraint.requiredTopologyLevel: cannot be combined with "
        f"the PodGroup's slices (slices of 2 in {RACK}, from the phalanx.io/topology-* "
        "annotations); use one or the other"
    )


@pytest.mark.parametrize(
    ("parent", "leaf", "error"),
    [
        (
            ZONE,
            None,
            f"subgroup prefill ({PREFILL_LEVEL}) requires one {ZONE}, wider than required "
            f"level {BLOCK}; a set of subgroups must fit inside the required domain",
        ),
        (
            RACK,
            BLOCK,
            f"subgroup prefill-workers requires one {BLOCK}, wider than the one {RACK} "
            f"subgroup prefill ({PREFILL_LEVEL}) holds it in; a subgroup's level must be at "
            "or below that of every set holding it",
        ),
    ],
    ids=["parent-wider-than-the-gang", "leaf-wider-than-its-parent"],
)
def test_parent_levels_that_do_not_nest_are_refused_when_resolved_naming_the_field(
    parent: str, leaf: str | None, error: str
) -> None:
    topologies = parse_topologies(f"dynamo={ZONE},{BLOCK},{RACK}")
    subgroups = disaggregated()
    subgroups[3]["topologyConstraint"] = {"requiredTopologyLevel": parent}
    if leaf:
        subgroups[5]["topologyConstraint"] = {"requiredTopologyLevel": leaf}
    obj = with_subgroups(10, subgroups, topologyConstraint={"requiredTopologyLevel": BLOCK})
    group = kai.parse_pod_group(obj).value
    assert resolve_topology(group, [], topologies) == f"gang kai:default/serve: {error}"


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        (
            {"requiredTopologyLevel": ZONE},
            TopologyConstraint(required=ZONE, any_label=True),
        ),
        (
            {"requiredTopologyLevel": ZONE, "preferredTopologyLevel": RACK},
            TopologyConstraint(required=ZONE, preferred=RACK, any_label=True),
        ),
        (
            {"preferredTopologyLevel": RACK},
            TopologyConstraint(preferred=RACK, any_label=True),
        ),
        ({}, None),
    ],
    ids=["required", "required-and-preferred", "preferred-only", "none"],
)
def test_topology_levels_are_node_label_keys_read_as_upstream_s_topology_key(
    constraint: dict[str, str], expected: TopologyConstraint | None
) -> None:
    obj = kai_podgroup_obj("train", 4)
    obj["spec"]["topologyConstraint"] = constraint
    assert kai.parse_pod_group(obj).value.topology == expected


def test_the_name_of_kai_s_topology_object_is_said_to_be_ignored() -> None:
    obj = kai_podgroup_obj("train", 4)
    obj["spec"]["topologyConstraint"] = {"topology": "cluster", "requiredTopologyLevel": ZONE}
    parsed = kai.parse_pod_group(obj)
    assert parsed.value.topology == TopologyConstraint(required=ZONE, any_label=True)
    assert parsed.warnings == (
        "spec.topologyConstraint.topology is ignored: it names KAI's Topology object, which "
        "Phalanx does not read (its levels are read as node label keys)",
    )


def with_subgroup_levels(obj: dict[str, Any], **constraints: dict[str, str]) -> dict[str, Any]:
    for entry in obj["spec"]["subGroups"]:
        if entry["name"] in constraints:
            entry["topologyConstraint"] = constraints[entry["name"]]
    return obj


def test_a_subgroup_s_required_level_keeps_its_members_in_one_value_of_that_label() -> None:
    obj = kai_podgroup_obj("serve", 5, sub_groups={"prefill": 2, "decode": 2, "router": 1})
    rack = {"requiredTopologyLevel": RACK}
    with_subgroup_levels(obj, prefill=rack, decode=rack)
    parsed = kai.parse_pod_group(obj)
    assert parsed.value.topology == TopologyConstraint(
        slice_required=RACK,
        any_label=True,
        slice_tasks=("decode", "prefill"),
        slice_noun="subgroup",
    )
    assert parsed.warnings == ()


def test_the_pod_group_s_constraint_still_holds_for_the_whole_gang_beside_its_subgroups() -> None:
    obj = kai_podgroup_obj("serve", 4, sub_groups={"prefill": 2, "decode": 2})
    obj["spec"]["topologyConstraint"] = {"requiredTopologyLevel": ZONE}
    with_subgroup_levels(obj, decode={"requiredTopologyLevel": RACK})
    assert kai.parse_pod_group(obj).value.topology == TopologyConstraint(
        required=ZONE,
        slice_required=RACK,
        any_label=True,
        slice_tasks=("decode",),
        slice_noun="subgroup",
    )


DECODE_PREFERRED = "spec.subGroups[1].topologyConstraint.preferredTopologyLevel"


def test_a_subgroup_s_preference_is_kept_beside_its_required_level() -> None:
    obj = kai_podgroup_obj("serve", 4, sub_groups={"prefill": 2, "decode": 2})
    with_subgroup_levels(
        obj,
        decode={
            "topology": "cluster",
            "requiredTopologyLevel": ZONE,
            "preferredTopologyLevel": RACK,
        },
    )
    parsed = kai.parse_pod_group(obj)
    assert parsed.value.topology == TopologyConstraint(
        slice_required=ZONE,
        any_label=True,
        slice_tasks=("decode",),
        slice_noun="subgroup",
        preferences=(TaskPreference("subgroup decode", ("decode",), RACK, DECODE_PREFERRED),),
    )
    assert parsed.warnings == (
        "spec.subGroups[1].topologyConstraint.topology is ignored: it names KAI's Topology "
        "object, which Phalanx does not read (its levels are read as node label keys)",
    )


def test_a_subgroup_s_preference_alone_is_a_preference_without_a_required_level() -> None:
    obj = kai_podgroup_obj("serve", 4, sub_groups={"prefill": 2, "decode": 2})
    with_subgroup_levels(obj, decode={"preferredTopologyLevel": RACK})
    parsed = kai.parse_pod_group(obj)
    assert parsed.warnings == ()
    topology = present(parsed.value.topology)
    assert (topology.slice_tasks, topology.preferences) == (
        (),
        (TaskPreference("subgroup decode", ("decode",), RACK, DECODE_PREFERRED),),
    )
    resolved = resolve_topology(parsed.value, [], parse_topologies(f"dc={ZONE},{RACK}"))
    assert str(resolved) == f"subgroup decode preferably in one {RACK} (topology dc)"


def test_a_parent_s_preference_holds_its_leaves_together_best_effort() -> None:
    subgroups = disaggregated()
    subgroups[3]["topologyConstraint"] = {
        "requiredTopologyLevel": BLOCK,
        "preferredTopologyLevel": RACK,
    }
    obj = with_subgroups(10, subgroups, topologyConstraint={"requiredTopologyLevel": ZONE})
    parsed = kai.parse_pod_group(obj)
    assert parsed.warnings == ()
    topology = present(parsed.value.topology)
    assert topology.preferences == (
        TaskPreference(
            "subgroup prefill",
            ("prefill-leaders", "prefill-workers"),
            RACK,
            "spec.subGroups[3].topologyConstraint.preferredTopologyLevel",
            together=True,
        ),
    )
    resolved = resolve_topology(parsed.value, [], parse_topologies(f"dynamo={ZONE},{BLOCK},{RACK}"))
    assert not isinstance(resolved, str)
    assert [(p.label, p.level, p.required, p.together) for p in resolved.preferences] == [
        ("subgroup prefill", 2, 1, True)
    ]


@pytest.mark.parametrize(
    ("subgroup", "constraint", "error"),
    [
        (
            1,
            {"requiredTopologyLevel": RACK, "preferredTopologyLevel": BLOCK},
            f"subgroup decode ({DECODE_PREFERRED}) prefers one {BLOCK}, wider than the one "
            f"{RACK} it requires; prefer the required level or a narrower one",
        ),
        (
            1,
            {"preferredTopologyLevel": ZONE},
            f"subgroup decode ({DECODE_PREFERRED}) prefers one {ZONE}, wider than required "
            f"level {BLOCK}; prefer the required level or a narrower one",
        ),
    ],
    ids=["wider-than-its-own-required-level", "wider-than-the-pod-group-s"],
)
def test_a_subgroup_preferring_wider_than_it_may_be_is_refused_naming_the_field(
    subgroup: int, constraint: dict[str, str], error: str
) -> None:
    obj = kai_podgroup_obj("serve", 4, sub_groups={"prefill": 2, "decode": 2})
    obj["spec"]["topologyConstraint"] = {"requiredTopologyLevel": BLOCK}
    obj["spec"]["subGroups"][subgroup]["topologyConstraint"] = constraint
    group = kai.parse_pod_group(obj).value
    topologies = parse_topologies(f"dynamo={ZONE},{BLOCK},{RACK}")
    assert resolve_topology(group, [], topologies) == f"gang kai:default/serve: {error}"


def test_a_subgroup_s_preference_beside_the_annotations_slices_is_refused_naming_it() -> None:
    obj = kai_podgroup_obj("serve", 4, sub_groups={"prefill": 2, "decode": 2})
    with_subgroup_levels(obj, decode={"preferredTopologyLevel": RACK})
    obj["metadata"]["annotations"] = {
        "phalanx.io/topology-slice-size": "2",
        "phalanx.io/topology-slice-required": RACK,
    }
    with pytest.raises(InvalidObjectError) as raised:
        kai.parse_pod_group(obj)
    assert str(raised.value).endswith(
        f"{DECODE_PREFERRED}: cannot be combined with the PodGroup's slices (slices of 2 in "
        f"{RACK}, from the phalanx.io/topology-* annotations); use one or the other"
    )


def test_a_subgroup_s_level_beside_the_annotations_slices_is_refused_naming_both() -> None:
    obj = kai_podgroup_obj(
        "serve",
        4,
        namespace="ml",
        sub_groups={"prefill": 2, "decode": 2},
        annotations={
            "phalanx.io/topology-slice-size": "2",
            "phalanx.io/topology-slice-required": RACK,
        },
    )
    with_subgroup_levels(obj, decode={"requiredTopologyLevel": RACK})
    with pytest.raises(InvalidObjectError) as raised:
        kai.parse_pod_group(obj)
    assert str(raised.value) == (
        "PodGroup ml/serve: spec.subGroups[1].topologyConstraint.requiredTopologyLevel: "
        f"cannot be combined with the PodGroup's slices (slices of 2 in {RACK}, from the "
        "phalanx.io/topology-* annotations); use one or the other"
    )


def test_subgroups_may_each_require_their_own_level() -> None:
    # Disaggregated serving: prefill in one rack, decode in one zone, the whole gang in one
    # zone; whether the levels nest is for the configured topologies (`resolve_topology`).
    obj = kai_podgroup_obj("serve", 5, sub_groups={"prefill": 2, "decode": 2, "router": 1})
    obj["spec"]["topologyConstraint"] = {"requiredTopologyLevel": ZONE}
    with_subgroup_levels(
        obj, prefill={"requiredTopologyLevel": RACK}, decode={"requiredTopologyLevel": ZONE}
    )
    parsed = kai.parse_pod_group(obj)
    assert parsed.value.topology == TopologyConstraint(
        required=ZONE,
        any_label=True,
        slice_tasks=("decode", "prefill"),
        slice_noun="subgroup",
        task_levels=(("decode", ZONE), ("prefill", RACK)),
        declared_by="spec.subGroups[].topologyConstraint.requiredTopologyLevel",
    )
    assert str(parsed.value.topology) == (
        f"required {ZONE}, subgroup(s) decode each in one {ZONE}, prefill in one {RACK}"
    )
    assert parsed.warnings == ()


def test_subgroups_sharing_a_level_beside_others_with_another_are_listed_by_level() -> None:
    obj = kai_podgroup_obj("serve", 6, sub_groups={"a": 2, "b": 2, "c": 2})
    rack, zone = {"requiredTopologyLevel": RACK}, {"requiredTopologyLevel": ZONE}
    with_subgroup_levels(obj, a=rack, b=zone, c=rack)
    topology = kai.parse_pod_group(obj).value.topology
    assert topology is not None
    assert topology.task_levels == (("a", RACK), ("b", ZONE), ("c", RACK))
    assert str(topology) == f"subgroup(s) a, c each in one {RACK}, b in one {ZONE}"


def test_subgroups_with_their_own_levels_beside_the_annotations_slices_are_refused() -> None:
    obj = kai_podgroup_obj(
        "serve",
        4,
        namespace="ml",
        sub_groups={"prefill": 2, "decode": 2},
        annotations={
            "phalanx.io/topology-slice-size": "2",
            "phalanx.io/topology-slice-required": RACK,
        },
    )
    with_subgroup_levels(
        obj, prefill={"requiredTopologyLevel": RACK}, decode={"requiredTopologyLevel": ZONE}
    )
    with pytest.raises(InvalidObjectError) as raised:
        kai.parse_pod_group(obj)
    assert str(raised.value) == (
        "PodGroup ml/serve: spec.subGroups[0].topologyConstraint.requiredTopologyLevel: "
        f"cannot be combined with the PodGroup's slices (slices of 2 in {RACK}, from the "
        "phalanx.io/topology-* annotations); use one or the other"
    )


def test_kai_s_queue_priority_and_retry_policy_are_not_placement() -> None:
    obj = kai_podgroup_obj("train", 4)
    obj["spec"].update(
        preemptibility="non-preemptible", markUnschedulable=True, schedulingBackoff=1
    )
    parsed = kai.parse_pod_group(obj)
    assert parsed.warnings == ()
    assert parsed.value == kai.parse_pod_group(kai_podgroup_obj("train", 4)).value


LEAF_A = {"name": "a", "minMember": 1}
LEAF_B = {"name": "b", "minMember": 1}
DECODE = {"name": "decode"}
D0 = {"name": "d0", "parent": "decode", "minMember": 2}
D1 = {"name": "d1", "parent": "decode", "minMember": 2}


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"minMember": 0}, "spec.minMember: must be a positive integer, not 0"),
        ({"minMember": -3}, "spec.minMember: must be a positive integer, not -3"),
        ({"minMember": None}, "spec.minMember: is required (a positive integer)"),
        (
            {"minMember": 2**31},
            f"spec.minMember: must be at most {2**31 - 1} (an int32), not {2**31}",
        ),
        (
            {"minSubGroup": 1},
            "spec.minSubGroup: must not be set with spec.minMember (they are mutually exclusive)",
        ),
        (
            {"minMember": None, "minSubGroup": 1},
            "spec.minSubGroup: asks for 1 subgroup(s), more than the 0 top-level one(s) "
            "(subgroups without a parent) in spec.subGroups",
        ),
        (
            {"minMember": None, "minSubGroup": 3, "subGroups": [LEAF_A, LEAF_B]},
            "spec.minSubGroup: asks for 3 subgroup(s), more than the 2 top-level one(s) "
            "(subgroups without a parent) in spec.subGroups",
        ),
        (
            {"minMember": None, "minSubGroup": 0, "subGroups": [LEAF_A]},
            "spec.minSubGroup: must be a positive integer, not 0",
        ),
        (
            {"minMember": None, "minSubGroup": "2", "subGroups": [LEAF_A]},
            "spec.minSubGroup: must be an integer, not a string",
        ),
        ({"subGroups": {"workers": 2}}, "spec.subGroups: must be a list, not an object"),
        (
            {"subGroups": [{"minMember": 1}]},
            "spec.subGroups[0].name: is required (the subgroup's name)",
        ),
        (
            {"subGroups": [{"name": "w", "minMember": 1}, {"name": "w", "minMember": 2}]},
            'spec.subGroups[1].name: "w" names a subgroup twice',
        ),
        (
            {"subGroups": [{"name": "w"}]},
            "spec.subGroups[0].minMember: is required (a non-negative integer)",
        ),
        (
            {"subGroups": [{"name": "w", "minMember": -1}]},
            "spec.subGroups[0].minMember: must be a non-negative integer, not -1",
        ),
        (
            {"subGroups": [{"name": "w", "minMember": "2"}]},
            "spec.subGroups[0].minMember: must be an integer, not a string",
        ),
        (
            {"subGroups": [{"name": "w", "minMember": 2**31}]},
            f"spec.subGroups[0].minMember: must be at most {2**31 - 1} (an int32), not {2**31}",
        ),
        (
            {"subGroups": [{"name": "w", "minMember": 3}, {"name": "l", "minMember": 2}]},
            "spec.subGroups: the subgroups' minMember sum to 5, more than spec.minMember (4): "
            "no gang of spec.minMember members can hold them",
        ),
        (
            {"subGroups": [{"name": "d0", "parent": "decode", "minMember": 2}]},
            'spec.subGroups[0].parent: "decode" names no subgroup of spec.subGroups',
        ),
        (
            {"subGroups": [{"name": "d0", "parent": "Decode", "minMember": 2}, DECODE]},
            'spec.subGroups[0].parent: "Decode" names no subgroup of spec.subGroups',
        ),
        (
            {"subGroups": [{"name": "d0", "parent": 7, "minMember": 2}]},
            "spec.subGroups[0].parent: must be a string, not a number",
        ),
        (
            {
                "subGroups": [
                    {"name": "a", "parent": "b"},
                    {"name": "b", "parent": "a"},
                    {"name": "c", "parent": "a", "minMember": 1},
                ]
            },
            "spec.subGroups[0].parent: subgroups form a cycle (a -> b -> a)",
        ),
        (
            {"subGroups": [{"name": "a", "parent": "a", "minMember": 1}]},
            "spec.subGroups[0].parent: subgroups form a cycle (a -> a)",
        ),
        (
            {
                "subGroups": [
                    {"name": f"s{i}", "parent": f"s{i - 1}" if i else None} for i in range(9)
                ]
            },
            'spec.subGroups[8].parent: nests "s8" more than 8 subgroups deep',
        ),
        (
            {"subGroups": [{**DECODE, "minMember": 2}, D0]},
            "spec.subGroups[0].minMember: must not be set on a subgroup with child subgroups "
            "(d0): KAI counts its ready children, by minSubGroup (all of them when unset)",
        ),
        (
            {"subGroups": [{"name": "w", "minMember": 1, "minSubGroup": 1}]},
            "spec.subGroups[0].minSubGroup: is set on a subgroup without child subgroups (a "
            "leaf needs minMember)",
        ),
        (
            {"subGroups": [{**DECODE, "minSubGroup": 3}, D0, D1]},
            "spec.subGroups[0].minSubGroup: asks for 3 child subgroup(s), more than the 2 it "
            "has (d0, d1)",
        ),
        (
            {"subGroups": [{**DECODE, "minSubGroup": -1}, D0]},
            "spec.subGroups[0].minSubGroup: must be a positive integer, not -1",
        ),
        (
            {"subGroups": [DECODE, {**D0, "minMember": 3}, D1]},
            "spec.subGroups: the subgroups' quorum needs 5 members, more than spec.minMember "
            "(4): no gang of spec.minMember members can hold them",
        ),
        (
            {
                "subGroups": [
                    {
                        "name": "w",
                        "minMember": 2,
                        "topologyConstraint": {"requiredTopologyLevel": "a rack"},
                    }
                ]
            },
            'spec.subGroups[0].topologyConstraint.requiredTopologyLevel: "a rack" is not a '
            "node label key",
        ),
        (
            {"subGroups": [{"name": "w", "minMember": 2, "topologyConstraint": "rack"}]},
            "spec.subGroups[0].topologyConstraint: must be an object, not a string",
        ),
        (
            {"topologyConstraint": {"requiredTopologyLevel": "a rack"}},
            'spec.topologyConstraint.requiredTopologyLevel: "a rack" is not a node label key',
        ),
        (
            {"topologyConstraint": {"preferredTopologyLevel": 7}},
            "spec.topologyConstraint.preferredTopologyLevel: must be a string, not a number",
        ),
    ],
    ids=[
        "zero",
        "negative",
        "missing",
        "beyond-int32",
        "min-sub-group-and-min-member",
        "min-sub-group-without-subgroups",
        "min-sub-group-over-top-level",
        "min-sub-group-zero",
        "min-sub-group-type",
        "subgroups-type",
        "subgroup-name-missing",
        "subgroup-name-twice",
        "subgroup-minimum-missing",
        "subgroup-minimum-negative",
        "subgroup-minimum-type",
        "subgroup-minimum-beyond-int32",
        "subgroup-minima-over-min-member",
        "parent-unknown",
        "parent-differs-in-case",
        "parent-type",
        "parent-cycle",
        "parent-itself",
        "parents-too-deep",
        "parent-min-member",
        "leaf-min-sub-group",
        "min-sub-group-over-children",
        "min-sub-group-negative",
        "tree-quorum-over-min-member",
        "subgroup-level-not-a-label",
        "subgroup-topology-type",
        "topology-level-not-a-label",
        "topology-level-type",
    ],
)
def test_an_invalid_pod_group_is_an_error_naming_the_field(
    spec: dict[str, Any], error: str
) -> None:
    obj = kai_podgroup_obj("train", 4, namespace="ml")
    obj["spec"].update(spec)
    with pytest.raises(InvalidObjectError) as raised:
        kai.parse_pod_group(obj)
    assert str(raised.value) == f"PodGroup ml/train: {error}"


def test_a_member_naming_a_subgroup_the_pod_group_lacks_is_named() -> None:
    group = kai.parse_pod_group(kai_podgroup_obj("train", 3, sub_groups={"workers": 2})).value
    members = [
        parse_pod(kai_pod_obj("w-0", "train", "workers")),
        parse_pod(kai_pod_obj("x-0", "train", "wrokers")),
        parse_pod(kai_pod_obj("n-0", "train")),
    ]
    assert kai.stray_members(group, members) == (
        "gang kai:default/train: member(s) name subgroup(s) wrokers (label "
        "kai.scheduler/subgroup-name) that its PodGroup's spec.subGroups lacks (it has: workers)"
    )
    assert kai.stray_members(group, members[::2]) == ""


def test_a_member_naming_a_parent_subgroup_is_named_as_pods_belong_to_leaves() -> None:
    group = kai.parse_pod_group(with_subgroups(10, disaggregated())).value
    members = [
        parse_pod(kai_pod_obj("l-0", "serve", "decode-leaders")),
        parse_pod(kai_pod_obj("d-0", "serve", "decode")),
        parse_pod(kai_pod_obj("x-0", "serve", "decoder")),
    ]
    assert kai.stray_members(group, members) == (
        "gang kai:default/serve: member(s) name subgroup(s) decoder (label "
        "kai.scheduler/subgroup-name) that its PodGroup's spec.subGroups lacks (it has: "
        "decode-leaders, decode-workers, prefill-leaders, prefill-workers); member(s) name "
        "subgroup(s) decode (label kai.scheduler/subgroup-name) that have child subgroups in "
        "its PodGroup's spec.subGroups: pods belong to the leaves (decode-leaders, "
        "decode-workers, prefill-leaders, prefill-workers)"
    )
    assert kai.stray_members(group, members[:1]) == ""


def test_waiting_for_the_pod_group_names_the_api_and_the_annotation() -> None:
    assert kai.waiting_reason(GroupRef("ml", "train", Dialect.KAI)) == (
        "waiting for KAI PodGroup ml/train (scheduling.run.ai/v2alpha2) to exist "
        "(pods name it with annotation pod-group-name)"
    )


# --- status ----------------------------------------------------------------------------


def gang(phase: GroupPhase, reason: str = "", message: str = "", **counts: int) -> GroupStatus:
    return GroupStatus(
        GroupRef("ml", "train", Dialect.KAI),
        phase,
        counts.get("scheduled", 0),
        counts.get("running", 0),
        reason,
        message,
        succeeded=counts.get("succeeded", 0),
        failed=counts.get("failed", 0),
    )


def unschedulable(reason: str, message: str, at: str) -> dict[str, Any]:
    return {
        "type": "UnschedulableOnNodePool",
        "nodePool": "default",
        "status": "True",
        "reason": "Unschedulable",
        "message": message,
        "reasons": [{"reason": reason, "message": message}],
        "lastTransitionTime": at,
    }


def body(*conditions: dict[str, Any], **counts: int) -> dict[str, Any]:
    return {
        "running": counts.get("running", 0),
        "succeeded": counts.get("succeeded", 0),
        "failed": counts.get("failed", 0),
        "schedulingConditions": list(conditions),
    }


OTHER = {"type": "SomethingKaiWrites", "status": "True", "lastTransitionTime": EARLIER}


@pytest.mark.parametrize(
    ("status", "previous", "expected"),
    [
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "no node has 8 free GPUs"),
            None,
            body(unschedulable("Unfit", "no node has 8 free GPUs", NOW)),
            id="waiting-says-why",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "now 2 nodes short"),
            {"schedulingConditions": [OTHER, unschedulable("Unfit", "1 short", EARLIER)]},
            body(OTHER, unschedulable("Unfit", "now 2 nodes short", EARLIER)),
            id="still-waiting-keeps-time-and-others",
        ),
        pytest.param(
            gang(GroupPhase.PENDING),
            {"schedulingConditions": [unschedulable("Unfit", "x", EARLIER)]},
            body(unschedulable("Unfit", "x", EARLIER)),
            id="nothing-decided-says-nothing-new",
        ),
        pytest.param(
            gang(GroupPhase.SCHEDULED, "bound", "bound", scheduled=4),
            {"schedulingConditions": [OTHER, unschedulable("Unfit", "x", EARLIER)]},
            body(OTHER),
            id="placed-clears-it",
        ),
        pytest.param(
            gang(GroupPhase.RUNNING, running=3, succeeded=1, failed=0, scheduled=4),
            None,
            body(running=3, succeeded=1),
            id="counts",
        ),
    ],
)
def test_status_speaks_kai(
    status: GroupStatus, previous: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    assert kai.build_status(status, previous, T0) == expected
