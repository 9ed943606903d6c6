"""Upstream's CompositePodGroup (1.37): reading it, refusing it naming the field, and the
tree above a PodGroup (`gang_above`, `child_tree`)."""

from __future__ import annotations

from typing import Any

import pytest

from builders import composite_obj, upstream_podgroup_obj
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import registry
from phalanx.core.groups.composite import (
    Broken,
    CompositePodGroup,
    child_topology,
    child_tree,
    gang_above,
    parse_composite,
    unread_on_child,
)
from phalanx.core.groups.upstream import parse_pod_group
from phalanx.core.model import (
    ChildGroups,
    Dialect,
    DisruptionMode,
    GroupRef,
    TaskSet,
    TopologyConstraint,
)

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"


def test_a_gang_composite_reads_its_policy_parent_and_topology() -> None:
    found = parse_composite(composite_obj("ray", 2, parent="job", topology_key=ZONE))
    assert found == CompositePodGroup(
        "default",
        "ray",
        2,
        parent="job",
        topology=TopologyConstraint(required=ZONE, any_label=True),
        settings=found.settings,
        uid="cpg-default-ray",
    )
    assert found.ref == GroupRef("default", "ray", Dialect.COMPOSITE)
    assert found.key == "composite:default/ray"


def test_a_basic_composite_has_no_min_group_count() -> None:
    assert parse_composite(composite_obj("ray", None)).min_group_count is None


@pytest.mark.parametrize(
    ("mode", "read"),
    [("single", DisruptionMode.SINGLE), ("all", DisruptionMode.ALL), (None, DisruptionMode.SINGLE)],
    ids=["single", "all", "unset-is-single"],
)
def test_a_composite_reads_its_disruption_mode(mode: str | None, read: DisruptionMode) -> None:
    obj = composite_obj("ray", 2, disruption_mode=mode)
    assert parse_composite(obj).disruption_mode is read


def test_the_registry_reads_a_composite_by_its_api_version_and_kind() -> None:
    parsed = registry.parse_group_object(composite_obj("ray", 1))
    assert parsed is not None
    assert isinstance(parsed.value, CompositePodGroup)
    assert registry.dialect_of_kind("scheduling.k8s.io/v1alpha3", "CompositePodGroup") is (
        Dialect.COMPOSITE
    )


def test_a_pod_group_reads_its_parent() -> None:
    assert parse_pod_group(upstream_podgroup_obj("head", 1, parent="ray")).parent == "ray"
    assert parse_pod_group(upstream_podgroup_obj("head", 1)).parent == ""


def broken(edit: dict[str, Any]) -> dict[str, Any]:
    obj = composite_obj("ray", 2)
    obj["spec"] = {**obj["spec"], **edit}
    return obj


@pytest.mark.parametrize(
    ("obj", "field", "reason"),
    [
        (broken({"schedulingPolicy": {}}), "spec.schedulingPolicy", "exactly one of basic, gang"),
        (
            broken({"schedulingPolicy": {"basic": {}, "gang": {"minGroupCount": 1}}}),
            "spec.schedulingPolicy",
            "exactly one of basic, gang",
        ),
        (
            broken({"schedulingPolicy": {"gang": {"minGroupCount": 0}}}),
            "spec.schedulingPolicy.gang.minGroupCount",
            "must be a positive integer, not 0",
        ),
        (
            broken({"schedulingPolicy": {"gang": {}}}),
            "spec.schedulingPolicy.gang.minGroupCount",
            "is required",
        ),
        (
            broken({"parentCompositePodGroupName": "Not_A_Name"}),
            "spec.parentCompositePodGroupName",
            "is not a valid CompositePodGroup name",
        ),
        (
            broken({"parentCompositePodGroupName": "ray"}),
            "spec.parentCompositePodGroupName",
            "names the object itself",
        ),
        (
            broken({"schedulingConstraints": {"topology": [{"key": ZONE}, {"key": ZONE}]}}),
            "spec.schedulingConstraints.topology",
            "must have at most 1 item",
        ),
        (
            broken({"schedulingConstraints": {"topology": [{"key": "no key!"}]}}),
            "spec.schedulingConstraints.topology[0].key",
            "is not a node label key",
        ),
        (
            broken({"disruptionMode": {"single": {}, "all": {}}}),
            "spec.disruptionMode",
            "exactly one of single, all is required",
        ),
        (
            broken({"disruptionMode": {"together": {}}}),
            "spec.disruptionMode",
            '"together" is not a disruption mode',
        ),
        (
            broken({"disruptionMode": {"all": []}}),
            "spec.disruptionMode.all",
            "must be an object, not an array",
        ),
    ],
    ids=[
        "no-policy",
        "two-policies",
        "zero-groups",
        "no-min-group-count",
        "bad-parent",
        "own-parent",
        "two-topologies",
        "bad-topology-key",
        "two-disruption-modes",
        "unknown-disruption-mode",
        "disruption-mode-not-object",
    ],
)
def test_a_malformed_composite_is_refused_naming_the_field(
    obj: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        parse_composite(obj)
    assert f"{field}: " in str(raised.value)
    assert reason in str(raised.value)
    assert "CompositePodGroup default/ray" in str(raised.value)


def test_a_pod_group_naming_a_malformed_parent_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidObjectError, match=r"spec\.parentCompositePodGroupName"):
        parse_pod_group(upstream_podgroup_obj("head", 1, parent="Bad/Name"))


# --- the tree ---------------------------------------------------------------------------


def composites(*objs: dict[str, Any]) -> dict[str, CompositePodGroup]:
    parsed = [parse_composite(obj) for obj in objs]
    return {c.key: c for c in parsed}


HEAD = parse_pod_group(upstream_podgroup_obj("head", 1, parent="ray"))


def test_the_gang_above_a_pod_group_is_the_topmost_gang_composite() -> None:
    tree = composites(
        composite_obj("job", 1), composite_obj("ray", None, parent="job"), composite_obj("x", 1)
    )
    top = gang_above(HEAD, tree.get)
    assert isinstance(top, CompositePodGroup)
    assert top.name == "job"


def test_no_gang_is_above_a_pod_group_under_basic_composites_only() -> None:
    assert gang_above(HEAD, composites(composite_obj("ray", None)).get) is None
    assert gang_above(parse_pod_group(upstream_podgroup_obj("solo", 1)), lambda _: None) is None


def test_a_missing_parent_up_the_tree_is_named_with_who_names_it() -> None:
    found = gang_above(HEAD, composites(composite_obj("ray", 1, parent="job")).get)
    assert found == Broken(
        "waiting for CompositePodGroup default/job, which CompositePodGroup ray names in "
        "spec.parentCompositePodGroupName",
        "composite:default/job",
    )


def test_a_tree_deeper_than_upstream_allows_is_broken() -> None:
    chain = composites(*(composite_obj(f"c{i}", 1, parent=f"c{i + 1}") for i in range(5)))
    group = parse_pod_group(upstream_podgroup_obj("head", 1, parent="c0"))
    found = gang_above(group, chain.get)
    assert isinstance(found, Broken)
    assert "more than 4 levels" in found.reason


def test_the_child_tree_counts_basic_pod_groups_as_one_member_and_nests_composites() -> None:
    root = parse_composite(composite_obj("ray", 2))
    nested = parse_composite(composite_obj("workers", None, parent="ray"))
    groups = [
        HEAD,
        parse_pod_group(upstream_podgroup_obj("side", None, parent="ray")),
        parse_pod_group(upstream_podgroup_obj("gpu-a", 4, parent="workers")),
        parse_pod_group(upstream_podgroup_obj("elsewhere", 3)),
    ]
    assert child_tree(root, [root, nested], groups) == ChildGroups(
        "ray",
        2,
        (("head", 1), ("side", 1), ChildGroups("workers", 1, (("gpu-a", 4),), basic=True)),
    )


# --- topology ---------------------------------------------------------------------------


def test_a_childs_key_becomes_the_composites_slices_by_pod_group() -> None:
    root = parse_composite(composite_obj("ray", 2, topology_key=ZONE))
    workers = parse_pod_group(upstream_podgroup_obj("w", 2, parent="ray", topology_key=RACK))
    tree = child_tree(root, [root], [HEAD, workers])
    assert child_topology(root, tree, {"head": HEAD, "w": workers}) == TopologyConstraint(
        required=ZONE,
        slice_required=RACK,
        any_label=True,
        slice_tasks=("w",),
        declared_by="spec.schedulingConstraints.topology",
    )


def test_children_may_each_have_a_key_of_their_own() -> None:
    # Whether the keys nest in one topology is for the configured topologies
    # (`resolve_topology`).
    root = parse_composite(composite_obj("ray", 2, topology_key=ZONE))
    head = parse_pod_group(upstream_podgroup_obj("head", 1, parent="ray", topology_key=ZONE))
    workers = parse_pod_group(upstream_podgroup_obj("w", 2, parent="ray", topology_key=RACK))
    tree = child_tree(root, [root], [head, workers])
    assert child_topology(root, tree, {"head": head, "w": workers}) == TopologyConstraint(
        required=ZONE,
        any_label=True,
        slice_tasks=("head", "w"),
        task_levels=(("head", ZONE), ("w", RACK)),
        declared_by="spec.schedulingConstraints.topology",
    )


def test_children_keys_beside_the_composites_slices_are_refused_naming_each() -> None:
    slices = {
        "phalanx.io/topology-slice-size": "1",
        "phalanx.io/topology-slice-required": RACK,
    }
    root = parse_composite(composite_obj("ray", 2, annotations=slices))
    head = parse_pod_group(upstream_podgroup_obj("head", 1, parent="ray", topology_key=ZONE))
    workers = parse_pod_group(upstream_podgroup_obj("w", 2, parent="ray", topology_key=RACK))
    tree = child_tree(root, [root], [head, workers])
    problem = child_topology(root, tree, {"head": head, "w": workers})
    assert isinstance(problem, str)
    assert f"a topology key of their own (head: {ZONE}; w: {RACK}); use one or the other" in (
        problem
    )


def test_a_child_declaring_more_than_a_key_is_refused_naming_it() -> None:
    root = parse_composite(composite_obj("ray", 2))
    annotated = upstream_podgroup_obj(
        "w", 2, parent="ray", annotations={"phalanx.io/topology-preferred": RACK}
    )
    workers = parse_pod_group(annotated)
    problem = child_topology(root, child_tree(root, [root], [workers]), {"w": workers})
    assert isinstance(problem, str)
    assert "PodGroup default/w under CompositePodGroup default/ray declares topology" in problem
    assert "spec.schedulingConstraints.topology" in problem


def test_a_nested_composite_s_key_holds_every_pod_group_beneath_it_together() -> None:
    # A RayCluster in one zone whose GPU worker groups (one composite) share one rack.
    root = parse_composite(composite_obj("ray", 2, topology_key=ZONE))
    nested = parse_composite(composite_obj("workers", 2, parent="ray", topology_key=RACK))
    groups = [
        HEAD,
        parse_pod_group(upstream_podgroup_obj("gpu-a", 2, parent="workers")),
        parse_pod_group(upstream_podgroup_obj("gpu-b", 2, parent="workers")),
    ]
    tree = child_tree(root, [root, nested], groups)
    topology = child_topology(
        root, tree, {g.name: g for g in groups}, {"ray": root, "workers": nested}
    )
    assert topology == TopologyConstraint(
        required=ZONE,
        any_label=True,
        task_sets=(
            TaskSet(
                "CompositePodGroup workers",
                ("gpu-a", "gpu-b"),
                RACK,
                "CompositePodGroup default/workers: spec.schedulingConstraints.topology",
            ),
        ),
    )


def test_a_nested_composite_declaring_more_than_a_key_is_refused_naming_it() -> None:
    root = parse_composite(composite_obj("ray", 2))
    nested = parse_composite(
        composite_obj(
            "workers", 1, parent="ray", annotations={"phalanx.io/topology-preferred": RACK}
        )
    )
    workers = parse_pod_group(upstream_podgroup_obj("gpu-a", 2, parent="workers"))
    tree = child_tree(root, [root, nested], [workers])
    problem = child_topology(root, tree, {"gpu-a": workers}, {"workers": nested})
    assert isinstance(problem, str)
    assert problem.startswith(
        "CompositePodGroup default/workers under CompositePodGroup default/ray declares topology"
    )
    assert "a nested CompositePodGroup's own topology is its key only" in problem


# --- what a child's annotations are told --------------------------------------------------


def ignored(name: str) -> str:
    return (
        f'metadata.annotations["{name}"] is ignored: this PodGroup is part of '
        "CompositePodGroup default/ray's gang, whose own annotations are read (put it there)"
    )


def test_each_gang_setting_a_child_declares_is_said_to_be_ignored_in_favour_of_the_composite() -> (
    None
):
    notes = {
        "phalanx.io/placement": "pack",
        "phalanx.io/plan": '{"version": 1}',
        "phalanx.io/differentiable": "step",
        "phalanx.io/schedule-timeout-seconds": "30",
    }
    child = parse_pod_group(upstream_podgroup_obj("head", 1, parent="ray", annotations=notes))
    assert unread_on_child(child, parse_composite(composite_obj("ray", 1))) == (
        ignored("phalanx.io/placement"),
        ignored("phalanx.io/plan"),
        ignored("phalanx.io/differentiable"),
        ignored("phalanx.io/schedule-timeout-seconds"),
    )


def test_a_child_without_gang_settings_or_with_only_its_topology_key_draws_no_note() -> None:
    root = parse_composite(composite_obj("ray", 1))
    keyed = upstream_podgroup_obj("w", 2, parent="ray", topology_key=RACK)
    assert unread_on_child(HEAD, root) == ()
    assert unread_on_child(parse_pod_group(keyed), root) == ()
