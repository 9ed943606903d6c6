"""Grove: NVIDIA Grove's scheduler.grove.io/v1alpha1 PodGangs named by a pod label."""

from __future__ import annotations

from typing import Any

import pytest

from builders import grove_pod_obj, grove_podgang_obj, kai_pod_obj, pod_obj, present
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import grove, registry
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.inventory import parse_pod
from phalanx.core.model import (
    Dialect,
    GroupRef,
    PodGroup,
    TaskPreference,
    TaskSet,
    TopologyConstraint,
)
from phalanx.core.topology import parse_topologies, resolve_topology

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NOW = "2026-01-01T00:00:00Z"
EARLIER = "2025-12-31T00:00:00Z"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
BLOCK = "example.com/block"
LEVELS_FIELD = "spec.podgroups[].topologyConstraint.packConstraint.required"


# --- membership ------------------------------------------------------------------------


def test_a_pod_labelled_by_grove_is_a_member_of_its_podgang() -> None:
    pod = parse_pod(
        grove_pod_obj("serve-0-prefill-0", "serve-0", "serve-0-prefill", namespace="ml")
    )
    assert (pod.group, pod.group_dialect, pod.invalid) == (
        GroupRef("ml", "serve-0", Dialect.GROVE),
        Dialect.GROVE,
        "",
    )
    assert present(pod.group).key == "grove:ml/serve-0"


def test_a_grove_member_s_task_is_its_podclique_label_not_volcano_s_task() -> None:
    obj = grove_pod_obj(
        "p-0", "serve-0", "serve-0-prefill", annotations={"volcano.sh/task-spec": "x"}
    )
    assert parse_pod(obj).task == "serve-0-prefill"


def test_a_pod_of_another_dialect_keeps_its_volcano_task_even_with_grove_s_podclique_label() -> (
    None
):
    obj = pod_obj("p", volcano_group="mpi", labels={"grove.io/podclique": "serve-0-prefill"})
    obj["metadata"]["annotations"]["volcano.sh/task-spec"] = "ps"
    assert parse_pod(obj).task == "ps"


def test_a_malformed_podgang_name_marks_the_pod_invalid() -> None:
    pod = parse_pod(grove_pod_obj("p-0", "Serve_0"))
    assert (pod.group, pod.group_dialect) == (None, Dialect.GROVE)
    assert pod.invalid == (
        'label grove.io/podgang: "Serve_0" is not a valid PodGang name '
        '(lower-case letters, digits, "-" and ".")'
    )


@pytest.mark.parametrize(
    ("obj", "winner", "overruled"),
    [
        pytest.param(
            kai_pod_obj("p", "serve-0", labels={"grove.io/podgang": "serve-0"}),
            "kai:default/serve-0",
            Dialect.GROVE,
            id="kai-before-grove",
        ),
        pytest.param(
            grove_pod_obj(
                "p",
                "serve-0",
                labels={"kueue.x-k8s.io/pod-group-name": "serve-0"},
                annotations={"kueue.x-k8s.io/pod-group-total-count": "2"},
            ),
            "grove:default/serve-0",
            Dialect.KUEUE,
            id="grove-before-kueue",
        ),
        pytest.param(
            grove_pod_obj("p", "serve-0", scheduling_group="serve-0"),
            "grove:default/serve-0",
            Dialect.UPSTREAM,
            id="grove-before-upstream",
        ),
    ],
)
def test_grove_comes_after_kai_and_before_kueue(
    obj: dict[str, Any], winner: str, overruled: Dialect
) -> None:
    pod = parse_pod(obj)
    assert pod.group is not None
    assert pod.group.key == winner
    assert [c.dialect for c in pod.overruled] == [overruled]


# --- the PodGang -----------------------------------------------------------------------


def test_a_podgang_as_grove_creates_it_is_a_gang_of_its_podgroups_minima() -> None:
    obj = grove_podgang_obj("serve-0", {"serve-0-prefill": 2, "serve-0-decode": 3}, namespace="ml")
    parsed = grove.parse_pod_gang(obj)
    assert parsed.warnings == ()
    assert parsed.value == PodGroup(
        namespace="ml",
        name="serve-0",
        min_member=5,
        timeout_declared=False,
        uid="grove-ml-serve-0",
        dialect=Dialect.GROVE,
        min_task_member=(("serve-0-decode", 3), ("serve-0-prefill", 2)),
        task_names=frozenset({"serve-0-prefill", "serve-0-decode"}),
    )
    assert parsed.value.key == "grove:ml/serve-0"


def test_the_pods_each_podgroup_lists_in_the_podgang_s_namespace_are_kept_by_name() -> None:
    obj = grove_podgang_obj("serve-0", {"prefill": 1, "decode": 2}, namespace="ml")
    obj["spec"]["podgroups"][1]["podReferences"].append({"namespace": "other", "name": "x-0"})
    group = grove.parse_pod_gang(obj).value
    assert group.task_by_pod == (
        ("decode-0", "decode"),
        ("decode-1", "decode"),
        ("prefill-0", "prefill"),
    )
    # Grove rewrites the lists as it creates pods: that is no other gang.
    assert (
        group
        == grove.parse_pod_gang(
            grove_podgang_obj("serve-0", {"prefill": 1, "decode": 2}, namespace="ml")
        ).value
    )


def test_a_pod_s_podgroup_is_found_by_its_exact_name_in_the_lists() -> None:
    group = grove.parse_pod_gang(grove_podgang_obj("serve-0", {"prefill": 1, "decode": 2})).value
    found = {name: group.referenced_task(name) for name in ("decode-1", "prefill-0", "decode-")}
    assert found == {"decode-1": "decode", "prefill-0": "prefill", "decode-": ""}
    assert group.referenced_task("x-0") == ""


def test_a_podgroup_of_no_minimum_is_a_name_but_no_task_minimum() -> None:
    obj = grove_podgang_obj("serve-0", {"router": 0, "worker": 2})
    group = grove.parse_pod_gang(obj).value
    assert (group.min_member, group.min_task_member) == (2, (("worker", 2),))
    assert group.task_names == frozenset({"router", "worker"})


def test_registry_reads_podgangs_by_api_version() -> None:
    parsed = registry.parse_group_object(grove_podgang_obj("serve-0", {"w": 2}))
    assert parsed is not None
    assert parsed.value.key == "grove:default/serve-0"
    assert ("scheduler.grove.io/v1alpha1", "PodGang") in registry.group_kinds()
    assert registry.dialect_of_kind("scheduler.grove.io/v1alpha1", "PodGang") is Dialect.GROVE


def test_an_edited_minimum_makes_a_different_gang() -> None:
    before = grove.parse_pod_gang(grove_podgang_obj("s", {"a": 1, "b": 3})).value
    after = grove.parse_pod_gang(grove_podgang_obj("s", {"a": 1, "b": 2})).value
    assert before != after


def test_the_priority_class_is_not_placement_and_a_reused_reservation_is_said_to_be_unused() -> (
    None
):
    obj = grove_podgang_obj("serve-0", {"w": 2})
    obj["spec"]["priorityClassName"] = "urgent"
    obj["spec"]["reuseReservationRef"] = {"namespace": "default", "name": "serve-0-old"}
    parsed = grove.parse_pod_gang(obj)
    assert parsed.value == grove.parse_pod_gang(grove_podgang_obj("serve-0", {"w": 2})).value
    assert parsed.warnings == (
        "spec.reuseReservationRef is ignored: Phalanx keeps no reservation for a later "
        "PodGang to reuse (every gang is placed anew)",
    )


def test_a_podgangs_timeout_comes_from_phalanx_s_annotation() -> None:
    obj = grove_podgang_obj(
        "serve-0", {"w": 2}, annotations={"phalanx.io/schedule-timeout-seconds": "30"}
    )
    group = grove.parse_pod_gang(obj).value
    assert (group.timeout_seconds, group.timeout_declared) == (30, True)


# --- topology --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pack", "expected"),
    [
        ({"required": ZONE}, TopologyConstraint(required=ZONE, any_label=True)),
        (
            {"required": ZONE, "preferred": RACK},
            TopologyConstraint(required=ZONE, preferred=RACK, any_label=True),
        ),
        ({"preferred": RACK}, TopologyConstraint(preferred=RACK, any_label=True)),
        ({}, None),
    ],
    ids=["required", "required-and-preferred", "preferred-only", "none"],
)
def test_the_gang_s_pack_constraint_keys_are_node_label_keys(
    pack: dict[str, str], expected: TopologyConstraint | None
) -> None:
    obj = grove_podgang_obj("serve-0", {"w": 2})
    obj["spec"]["topologyConstraint"] = {"packConstraint": pack}
    assert grove.parse_pod_gang(obj).value.topology == expected


def with_podgroup_packs(obj: dict[str, Any], **packs: dict[str, str]) -> dict[str, Any]:
    for entry in obj["spec"]["podgroups"]:
        if entry["name"] in packs:
            entry["topologyConstraint"] = {"packConstraint": packs[entry["name"]]}
    return obj


def test_podgroups_sharing_a_required_key_each_keep_their_members_in_one_value_of_it() -> None:
    obj = grove_podgang_obj("serve-0", {"prefill": 2, "decode": 2, "router": 1})
    with_podgroup_packs(obj, prefill={"required": RACK}, decode={"required": RACK})
    parsed = grove.parse_pod_gang(obj)
    assert parsed.value.topology == TopologyConstraint(
        slice_required=RACK,
        any_label=True,
        slice_tasks=("decode", "prefill"),
        slice_noun="podgroup",
    )
    assert parsed.warnings == ()


def test_podgroups_may_each_require_their_own_level_beside_the_gang_s() -> None:
    obj = grove_podgang_obj("serve-0", {"prefill": 2, "decode": 2, "router": 1})
    obj["spec"]["topologyConstraint"] = {"packConstraint": {"required": ZONE}}
    with_podgroup_packs(obj, prefill={"required": RACK}, decode={"required": ZONE})
    topology = grove.parse_pod_gang(obj).value.topology
    assert topology == TopologyConstraint(
        required=ZONE,
        any_label=True,
        slice_tasks=("decode", "prefill"),
        slice_noun="podgroup",
        task_levels=(("decode", ZONE), ("prefill", RACK)),
        declared_by=LEVELS_FIELD,
    )
    assert str(topology) == (
        f"required {ZONE}, podgroup(s) decode each in one {ZONE}, prefill in one {RACK}"
    )


DECODE_PREFERRED = "spec.podgroups[1].topologyConstraint.packConstraint.preferred"


def test_a_podgroup_s_preference_is_kept_beside_its_required_key() -> None:
    obj = grove_podgang_obj("serve-0", {"prefill": 2, "decode": 2})
    with_podgroup_packs(obj, decode={"required": ZONE, "preferred": RACK})
    parsed = grove.parse_pod_gang(obj)
    assert parsed.value.topology == TopologyConstraint(
        slice_required=ZONE,
        any_label=True,
        slice_tasks=("decode",),
        slice_noun="podgroup",
        preferences=(TaskPreference("podgroup decode", ("decode",), RACK, DECODE_PREFERRED),),
    )
    assert parsed.warnings == ()


def test_a_podgroup_preferring_wider_than_its_required_key_is_refused_when_resolved() -> None:
    topologies = parse_topologies(f"dynamo={ZONE},{BLOCK},{RACK}")
    obj = grove_podgang_obj("serve-0", {"prefill": 2, "decode": 2}, namespace="ml")
    with_podgroup_packs(obj, decode={"required": RACK, "preferred": BLOCK})
    group = grove.parse_pod_gang(obj).value
    assert resolve_topology(group, [], topologies) == (
        f"gang grove:ml/serve-0: podgroup decode ({DECODE_PREFERRED}) prefers one {BLOCK}, "
        f"wider than the one {RACK} it requires; prefer the required level or a narrower one"
    )


def test_a_podgroup_level_beside_the_annotations_slices_is_refused_naming_both() -> None:
    obj = grove_podgang_obj(
        "serve-0",
        {"prefill": 2, "decode": 2},
        namespace="ml",
        annotations={
            "phalanx.io/topology-slice-size": "2",
            "phalanx.io/topology-slice-required": RACK,
        },
    )
    with_podgroup_packs(obj, decode={"required": RACK})
    with pytest.raises(InvalidObjectError) as raised:
        grove.parse_pod_gang(obj)
    assert str(raised.value) == (
        "PodGang ml/serve-0: spec.podgroups[1].topologyConstraint.packConstraint.required: "
        f"cannot be combined with the PodGang's slices (slices of 2 in {RACK}, from the "
        "phalanx.io/topology-* annotations); use one or the other"
    )


def group_config(names: list[str], pack: dict[str, str] | None) -> dict[str, Any]:
    config: dict[str, Any] = {"name": "sg", "podGroupNames": names}
    if pack is not None:
        config["topologyConstraint"] = {"packConstraint": pack}
    return config


def test_a_group_config_without_a_constraint_says_nothing_and_one_preferring_is_kept() -> None:
    obj = grove_podgang_obj("serve-0", {"prefill": 2, "decode": 2, "router": 1})
    obj["spec"]["topologyConstraintGroupConfigs"] = [
        group_config(["prefill", "decode"], None),
        group_config(["prefill", "decode"], {"preferred": RACK}),
    ]
    parsed = grove.parse_pod_gang(obj)
    assert parsed.warnings == ()
    assert parsed.value.topology == TopologyConstraint(
        any_label=True,
        slice_noun="podgroup",
        preferences=(
            TaskPreference(
                "constraint group sg",
                ("decode", "prefill"),
                RACK,
                f"{configs_field(1)}.preferred",
                together=True,
            ),
        ),
    )


def configs_field(index: int) -> str:
    return f"spec.topologyConstraintGroupConfigs[{index}].topologyConstraint.packConstraint"


def test_a_group_config_requiring_a_level_holds_its_podgroups_together_as_a_task_set() -> None:
    # Dynamo on Grove: the gang in one zone, prefill's leader and workers together in one
    # block (their PodCliqueScalingGroup's constraint group), each in one rack.
    obj = grove_podgang_obj(
        "serve-0", {"prefill-leader": 1, "prefill-workers": 2, "decode": 2}, namespace="ml"
    )
    obj["spec"]["topologyConstraint"] = {"packConstraint": {"required": ZONE}}
    with_podgroup_packs(obj, **{"prefill-leader": {"required": RACK}})
    with_podgroup_packs(obj, **{"prefill-workers": {"required": RACK}})
    obj["spec"]["topologyConstraintGroupConfigs"] = [
        group_config(["prefill-workers", "prefill-leader"], {"required": BLOCK})
    ]
    parsed = grove.parse_pod_gang(obj)
    assert parsed.warnings == ()
    topology = present(parsed.value.topology)
    assert topology.task_sets == (
        TaskSet(
            "constraint group sg",
            ("prefill-leader", "prefill-workers"),
            BLOCK,
            f"{configs_field(0)}.required",
        ),
    )
    assert str(topology) == (
        f"required {ZONE}, podgroup(s) prefill-leader, prefill-workers each in one {RACK}, "
        f"constraint group sg (prefill-leader, prefill-workers) together in one {BLOCK}"
    )


def test_a_group_config_requiring_and_preferring_holds_its_podgroups_and_prefers_narrower() -> None:
    obj = grove_podgang_obj("serve-0", {"prefill": 2, "decode": 2})
    obj["spec"]["topologyConstraintGroupConfigs"] = [
        group_config(["prefill", "decode"], {"required": BLOCK, "preferred": RACK})
    ]
    parsed = grove.parse_pod_gang(obj)
    assert present(parsed.value.topology).task_sets == (
        TaskSet(
            "constraint group sg", ("decode", "prefill"), BLOCK, f"{configs_field(0)}.required"
        ),
    )
    assert parsed.warnings == ()
    preferences = present(parsed.value.topology).preferences
    assert [(p.label, p.level, p.together) for p in preferences] == [
        ("constraint group sg", RACK, True)
    ]
    resolved = resolve_topology(parsed.value, [], parse_topologies(f"dynamo={ZONE},{BLOCK},{RACK}"))
    assert not isinstance(resolved, str)
    assert [(p.level, p.required) for p in resolved.preferences] == [(2, 1)]


def test_group_configs_sharing_podgroups_without_one_holding_the_other_are_refused() -> None:
    obj = grove_podgang_obj("serve-0", {"a": 1, "b": 1, "c": 1}, namespace="ml")
    obj["spec"]["topologyConstraintGroupConfigs"] = [
        group_config(["a", "b"], {"required": BLOCK}),
        group_config(["b", "c"], {"required": RACK}),
    ]
    with pytest.raises(InvalidObjectError) as raised:
        grove.parse_pod_gang(obj)
    assert str(raised.value) == (
        f"PodGang ml/serve-0: {configs_field(1)}.required: holds b with constraint group sg "
        f"({configs_field(0)}.required) but neither set holds the other: sets of tasks kept "
        "together must nest or be disjoint"
    )


def test_nested_group_configs_are_nested_task_sets() -> None:
    obj = grove_podgang_obj("serve-0", {"a": 1, "b": 1, "c": 1})
    obj["spec"]["topologyConstraintGroupConfigs"] = [
        group_config(["a", "b", "c"], {"required": BLOCK}),
        {**group_config(["b", "c"], {"required": RACK}), "name": "inner"},
    ]
    topology = present(grove.parse_pod_gang(obj).value.topology)
    assert [(s.label, s.tasks, s.level) for s in topology.task_sets] == [
        ("constraint group inner", ("b", "c"), RACK),
        ("constraint group sg", ("a", "b", "c"), BLOCK),
    ]


def test_a_group_config_wider_than_the_podgang_s_own_level_is_refused_when_resolved() -> None:
    topologies = parse_topologies(f"dynamo={ZONE},{BLOCK},{RACK}")
    obj = grove_podgang_obj("serve-0", {"prefill": 2, "decode": 2}, namespace="ml")
    obj["spec"]["topologyConstraint"] = {"packConstraint": {"required": BLOCK}}
    obj["spec"]["topologyConstraintGroupConfigs"] = [
        group_config(["prefill", "decode"], {"required": ZONE})
    ]
    group = grove.parse_pod_gang(obj).value
    assert resolve_topology(group, [], topologies) == (
        f"gang grove:ml/serve-0: constraint group sg ({configs_field(0)}.required) requires "
        f"one {ZONE}, wider than required level {BLOCK}; a set of podgroups must fit inside "
        "the required domain"
    )


# --- refusals --------------------------------------------------------------------------

TOO_BIG = 2**31


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"podgroups": None}, "spec.podgroups: is required (a list of podgroups)"),
        ({"podgroups": {"w": 2}}, "spec.podgroups: must be a list, not an object"),
        (
            {"podgroups": []},
            "spec.podgroups: needs a podgroup with minReplicas of at least 1 (the gang's size "
            "is the sum of its podgroups' minReplicas, here 0)",
        ),
        (
            {"podgroups": [{"name": "w", "minReplicas": 0}]},
            "spec.podgroups: needs a podgroup with minReplicas of at least 1 (the gang's size "
            "is the sum of its podgroups' minReplicas, here 0)",
        ),
        (
            {"podgroups": [{"minReplicas": 1}]},
            "spec.podgroups[0].name: is required (the podgroup's name)",
        ),
        (
            {"podgroups": [{"name": "w", "minReplicas": 1}, {"name": "w", "minReplicas": 2}]},
            'spec.podgroups[1].name: "w" names a podgroup twice',
        ),
        (
            {"podgroups": [{"name": "w"}]},
            "spec.podgroups[0].minReplicas: is required (a non-negative integer)",
        ),
        (
            {"podgroups": [{"name": "w", "minReplicas": -1}]},
            "spec.podgroups[0].minReplicas: must be a non-negative integer, not -1",
        ),
        (
            {"podgroups": [{"name": "w", "minReplicas": "2"}]},
            "spec.podgroups[0].minReplicas: must be an integer, not a string",
        ),
        (
            {"podgroups": [{"name": "w", "minReplicas": TOO_BIG}]},
            f"spec.podgroups[0].minReplicas: must be at most {TOO_BIG - 1} (an int32), "
            f"not {TOO_BIG}",
        ),
        (
            {
                "podgroups": [
                    {"name": "a", "minReplicas": TOO_BIG - 1},
                    {"name": "b", "minReplicas": 1},
                ]
            },
            f"spec.podgroups: the podgroups' minReplicas sum to {TOO_BIG}, more than "
            f"{TOO_BIG - 1} (an int32)",
        ),
        (
            {"podgroups": [{"name": "w", "minReplicas": 1, "podReferences": [{"name": 3}]}]},
            "spec.podgroups[0].podReferences[0].name: must be a string, not a number",
        ),
        (
            {
                "podgroups": [
                    {"name": "a", "minReplicas": 1, "podReferences": [{"name": "p-0"}]},
                    {"name": "b", "minReplicas": 1, "podReferences": [{"name": "p-0"}]},
                ]
            },
            'spec.podgroups[1].podReferences[0].name: "p-0" is listed in podgroups a and b',
        ),
        (
            {
                "podgroups": [
                    {
                        "name": "w",
                        "minReplicas": 2,
                        "topologyConstraint": {"packConstraint": {"required": "a rack"}},
                    }
                ]
            },
            'spec.podgroups[0].topologyConstraint.packConstraint.required: "a rack" is not a '
            "node label key",
        ),
        (
            {"podgroups": [{"name": "w", "minReplicas": 2, "topologyConstraint": "rack"}]},
            "spec.podgroups[0].topologyConstraint: must be an object, not a string",
        ),
        (
            {"topologyConstraint": {"packConstraint": {"required": "a rack"}}},
            'spec.topologyConstraint.packConstraint.required: "a rack" is not a node label key',
        ),
        (
            {"topologyConstraint": {"packConstraint": {"preferred": 7}}},
            "spec.topologyConstraint.packConstraint.preferred: must be a string, not a number",
        ),
        (
            {"topologyConstraint": {"packConstraint": "rack"}},
            "spec.topologyConstraint.packConstraint: must be an object, not a string",
        ),
        (
            {"topologyConstraintGroupConfigs": [group_config(["w", "x"], None)]},
            'spec.topologyConstraintGroupConfigs[0].podGroupNames[1]: "x" names no podgroup '
            "of spec.podgroups",
        ),
        (
            {"topologyConstraintGroupConfigs": {"sg": ["w"]}},
            "spec.topologyConstraintGroupConfigs: must be a list, not an object",
        ),
        (
            {"reuseReservationRef": "serve-0-old"},
            "spec.reuseReservationRef: must be an object, not a string",
        ),
    ],
    ids=[
        "podgroups-missing",
        "podgroups-type",
        "podgroups-empty",
        "podgroups-all-zero",
        "name-missing",
        "name-twice",
        "min-replicas-missing",
        "min-replicas-negative",
        "min-replicas-type",
        "min-replicas-beyond-int32",
        "sum-beyond-int32",
        "pod-reference-type",
        "pod-listed-twice",
        "podgroup-key-not-a-label",
        "podgroup-topology-type",
        "gang-key-not-a-label",
        "gang-key-type",
        "pack-constraint-type",
        "group-config-unknown-podgroup",
        "group-configs-type",
        "reuse-reservation-type",
    ],
)
def test_an_invalid_podgang_is_an_error_naming_the_field(spec: dict[str, Any], error: str) -> None:
    obj = grove_podgang_obj("serve-0", {"w": 2}, namespace="ml")
    obj["spec"].update(spec)
    with pytest.raises(InvalidObjectError) as raised:
        grove.parse_pod_gang(obj)
    assert str(raised.value) == f"PodGang ml/serve-0: {error}"


def test_a_member_naming_a_podgroup_the_podgang_lacks_is_named() -> None:
    group = grove.parse_pod_gang(grove_podgang_obj("serve-0", {"worker": 2})).value
    members = [
        parse_pod(grove_pod_obj("w-0", "serve-0", "worker")),
        parse_pod(grove_pod_obj("x-0", "serve-0", "wroker")),
    ]
    assert grove.stray_members(group, members) == (
        "gang grove:default/serve-0: member(s) name podgroup(s) wroker (label "
        "grove.io/podclique) that its PodGang's spec.podgroups lacks (it has: worker)"
    )
    assert grove.stray_members(group, members[:1]) == ""


def test_a_member_naming_no_podgroup_is_named_too() -> None:
    group = grove.parse_pod_gang(grove_podgang_obj("serve-0", {"worker": 2})).value
    members = [parse_pod(grove_pod_obj(f"n-{i}", "serve-0")) for i in range(7)]
    assert grove.stray_members(group, members) == (
        "gang grove:default/serve-0: member(s) n-0, n-1, n-2, n-3, n-4 and 2 more have no "
        "label grove.io/podclique and no podgroup's podReferences list them (Grove labels "
        "each pod with its PodClique, the podgroup it is in)"
    )


def test_waiting_for_the_podgang_names_the_api_and_the_label() -> None:
    assert grove.waiting_reason(GroupRef("ml", "serve-0", Dialect.GROVE)) == (
        "waiting for Grove PodGang ml/serve-0 (scheduler.grove.io/v1alpha1) to exist "
        "(pods name it with label grove.io/podgang)"
    )


# --- status ----------------------------------------------------------------------------


def gang(phase: GroupPhase, reason: str = "", message: str = "") -> GroupStatus:
    return GroupStatus(GroupRef("ml", "serve-0", Dialect.GROVE), phase, 0, 0, reason, message)


def scheduled(state: str, reason: str, message: str, at: str) -> dict[str, Any]:
    return {
        "type": "Scheduled",
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


OTHER = {
    "type": "Ready",
    "status": "False",
    "reason": "X",
    "message": "",
    "lastTransitionTime": EARLIER,
}


@pytest.mark.parametrize(
    ("status", "previous", "expected"),
    [
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "no node has 8 free GPUs"),
            None,
            {
                "phase": "Pending",
                "conditions": [scheduled("False", "Unfit", "no node has 8 free GPUs", NOW)],
            },
            id="waiting-says-why",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "now 2 nodes short"),
            {
                "phase": "Pending",
                "conditions": [OTHER, scheduled("False", "Unfit", "1 short", EARLIER)],
                "placementScore": 0.5,
            },
            {
                "phase": "Pending",
                "conditions": [OTHER, scheduled("False", "Unfit", "now 2 nodes short", EARLIER)],
            },
            id="still-waiting-keeps-time-and-others",
        ),
        pytest.param(
            gang(GroupPhase.PENDING),
            {"conditions": [scheduled("False", "Unfit", "x", EARLIER)]},
            {"phase": "Pending", "conditions": [scheduled("False", "Unfit", "x", EARLIER)]},
            id="nothing-decided-says-nothing-new",
        ),
        pytest.param(
            gang(GroupPhase.SCHEDULING, "reserved", "binding 4 member(s)"),
            None,
            {
                "phase": "Starting",
                "conditions": [scheduled("False", "Reserved", "binding 4 member(s)", NOW)],
            },
            id="binding-is-starting",
        ),
        pytest.param(
            gang(GroupPhase.SCHEDULED, "bound", "4 member(s) bound"),
            {"conditions": [OTHER, scheduled("False", "Unfit", "x", EARLIER)]},
            {
                "phase": "Starting",
                "conditions": [OTHER, scheduled("True", "Scheduled", "4 member(s) bound", NOW)],
            },
            id="placed-turns-it-true",
        ),
        pytest.param(
            gang(GroupPhase.RUNNING, "bound", "4 member(s) bound"),
            {"conditions": [scheduled("True", "Scheduled", "4 member(s) bound", EARLIER)]},
            {
                "phase": "Running",
                "conditions": [scheduled("True", "Scheduled", "4 member(s) bound", EARLIER)],
            },
            id="running",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "x" * 5000),
            None,
            {"phase": "Pending", "conditions": [scheduled("False", "Unfit", "x" * 1024, NOW)]},
            id="message-capped",
        ),
        pytest.param(
            gang(GroupPhase.PRE_SCHEDULING, "unfit", "short"),
            {"conditions": "garbage"},
            {"phase": "Pending", "conditions": [scheduled("False", "Unfit", "short", NOW)]},
            id="malformed-previous-reads-as-none",
        ),
    ],
)
def test_status_speaks_grove(
    status: GroupStatus, previous: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    assert grove.build_status(status, previous, T0) == expected


@pytest.mark.parametrize(
    ("phase", "grove_phase"),
    [
        (GroupPhase.PENDING, "Pending"),
        (GroupPhase.PRE_SCHEDULING, "Pending"),
        (GroupPhase.SCHEDULING, "Starting"),
        (GroupPhase.SCHEDULED, "Starting"),
        (GroupPhase.RUNNING, "Running"),
        (GroupPhase.FINISHED, "Running"),
        (GroupPhase.FAILED, "Running"),
    ],
)
def test_every_phase_has_grove_s_name(phase: GroupPhase, grove_phase: str) -> None:
    assert grove.build_status(gang(phase), None, T0)["phase"] == grove_phase
