"""LeaderWorkerSet groups: a gang declared on its pods by LWS's labels, only on opt-in."""

from __future__ import annotations

from typing import Any

import pytest

from builders import pod_obj
from phalanx.core.groups import lws, registry
from phalanx.core.groups.registry import Unresolved
from phalanx.core.inventory import parse_pod
from phalanx.core.model import Dialect, GroupRef, Pod, PodGroup, TopologyConstraint
from phalanx.core.topology import DEFAULT_TOPOLOGIES, resolve_topology

OPT_IN = "phalanx.io/leaderworkerset-gang"
REF = GroupRef("ml", "vllm-1", Dialect.LWS)


def lws_pod(
    name: str = "vllm-1",
    *,
    worker: int = 0,
    index: str | None = "1",
    size: str | None = "3",
    opt_in: str | None = "true",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **more: Any,
) -> Pod:
    """A pod of LWS `vllm`'s group `index` as LWS stamps it, parsed as the sources do."""
    all_labels = {
        "leaderworkerset.sigs.k8s.io/name": "vllm",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/group-key": "0f1e2d",
        **(labels or {}),
    }
    all_annotations = dict(annotations or {})
    if index is not None:
        all_labels["leaderworkerset.sigs.k8s.io/group-index"] = index
    if size is not None:
        all_annotations["leaderworkerset.sigs.k8s.io/size"] = size
    if opt_in is not None:
        all_annotations[OPT_IN] = opt_in
    return parse_pod(
        pod_obj(name, namespace="ml", labels=all_labels, annotations=all_annotations, **more)
    )


def group(size: int = 3, **more: Any) -> list[Pod]:
    """The leader and workers of group 1, as LWS names them."""
    return [lws_pod("vllm-1", **more)] + [
        lws_pod(f"vllm-1-{i}", worker=i, **more) for i in range(1, size)
    ]


# --- reading ---------------------------------------------------------------------------


def test_an_opted_in_pod_of_a_leaderworkerset_group_is_a_member_of_its_gang() -> None:
    found = lws_pod("vllm-1-2", worker=2)
    assert (found.group, found.group_dialect, found.min_member, found.invalid) == (
        REF,
        Dialect.LWS,
        3,
        "",
    )
    assert found.group is not None
    assert found.group.key == "lws:ml/vllm-1"


@pytest.mark.parametrize("opt_in", [None, "false"], ids=["no-opt-in", "opted-out"])
def test_without_the_opt_in_a_leaderworkerset_pod_is_scheduled_alone(opt_in: str | None) -> None:
    found = lws_pod(opt_in=opt_in)
    assert (found.group, found.min_member, found.invalid) == (None, None, "")


def test_the_leader_and_the_workers_of_one_group_are_one_gang_other_groups_another() -> None:
    leader, worker = lws_pod("vllm-1"), lws_pod("vllm-1-1", worker=1)
    other = lws_pod("vllm-0", index="0")
    assert leader.group == worker.group == REF
    assert other.group == GroupRef("ml", "vllm-0", Dialect.LWS)


def test_the_key_parses_back_into_the_gang() -> None:
    assert registry.parse_key("lws:ml/vllm-1") == REF


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (
            {"opt_in": "yes"},
            'annotation phalanx.io/leaderworkerset-gang: "yes" is not "true" or "false"',
        ),
        (
            {"size": None},
            "annotation phalanx.io/leaderworkerset-gang needs annotation "
            "leaderworkerset.sigs.k8s.io/size (the group's size; LWS sets it on every pod of "
            "a group)",
        ),
        (
            {"size": "two"},
            'annotation leaderworkerset.sigs.k8s.io/size: "two" is not a positive integer',
        ),
        (
            {"size": "0"},
            'annotation leaderworkerset.sigs.k8s.io/size: "0" is not a positive integer',
        ),
        (
            {"size": "2147483648"},
            'annotation leaderworkerset.sigs.k8s.io/size: "2147483648" is more than '
            "2147483647, the largest an int32 API field holds",
        ),
        (
            {"index": None},
            "label leaderworkerset.sigs.k8s.io/name needs label "
            "leaderworkerset.sigs.k8s.io/group-index (LWS's pod webhook sets it on every pod "
            "of a group)",
        ),
        (
            {"index": "-1"},
            'label leaderworkerset.sigs.k8s.io/group-index: "-1" is not a non-negative integer',
        ),
        (
            {"index": "01"},
            'label leaderworkerset.sigs.k8s.io/group-index: "01" is not a non-negative integer',
        ),
        (
            {"labels": {"leaderworkerset.sigs.k8s.io/name": "vLLM"}},
            'label leaderworkerset.sigs.k8s.io/name: "vLLM-1" is not a valid LeaderWorkerSet '
            'group name (lower-case letters, digits, "-" and ".")',
        ),
    ],
    ids=[
        "opt-in-not-a-boolean",
        "size-missing",
        "size-not-a-number",
        "size-zero",
        "size-beyond-int32",
        "index-missing",
        "index-negative",
        "index-not-canonical",
        "bad-name",
    ],
)
def test_a_malformed_member_is_invalid_naming_the_key(
    settings: dict[str, Any], problem: str
) -> None:
    found = lws_pod(**settings)
    assert (found.invalid, found.min_member) == (problem, None)


def test_the_opt_in_on_a_pod_no_leaderworkerset_made_is_refused() -> None:
    found = parse_pod(pod_obj("solo", namespace="ml", annotations={OPT_IN: "true"}))
    assert found.invalid == (
        "annotation phalanx.io/leaderworkerset-gang needs label "
        "leaderworkerset.sigs.k8s.io/name (a LeaderWorkerSet's pod)"
    )


def test_members_may_set_the_gangs_timeout() -> None:
    members = group(annotations={"phalanx.io/schedule-timeout-seconds": "30"})
    assert [m.invalid for m in members] == ["", "", ""]
    found = registry.resolve(REF, lambda _: None, members, default_timeout=90)
    assert isinstance(found, PodGroup)
    assert found.timeout_seconds == 30


# --- the gang its members declare ------------------------------------------------------


def test_the_registry_resolves_an_lws_gang_of_its_size_from_its_members() -> None:
    found = registry.resolve(REF, lambda _: None, group()[:2], default_timeout=90)
    assert found == PodGroup(
        "ml", "vllm-1", 3, timeout_seconds=90, from_crd=False, dialect=Dialect.LWS
    )


def test_members_that_disagree_on_the_size_are_invalid_not_waiting() -> None:
    members = [lws_pod("vllm-1", size="3"), lws_pod("vllm-1-1", worker=1, size="4")]
    assert registry.resolve(REF, lambda _: None, members) == Unresolved(
        "members of gang lws:ml/vllm-1 disagree on leaderworkerset.sigs.k8s.io/size: 3, 4",
        waiting=False,
    )


def test_an_lws_gang_has_no_object_to_write_status_or_events_to() -> None:
    assert not registry.has_gang_object(Dialect.LWS)
    assert registry.gang_source(REF, Dialect.LWS, has_object=False) == "annotations"


# --- opt-in on only some pods of a group ------------------------------------------------


def finder(pods: list[Pod]) -> Any:
    by_key = {(p.namespace, p.name): p for p in pods}
    return lambda namespace, name: by_key.get((namespace, name))


def test_a_group_whose_workers_did_not_opt_in_is_refused_naming_the_annotation() -> None:
    leader = lws_pod("vllm-1")
    workers = [lws_pod(f"vllm-1-{i}", worker=i, opt_in=None) for i in (1, 2)]
    assert lws.opt_in_missing(REF, [leader], 3, finder([leader, *workers])) == (
        "gang lws:ml/vllm-1: pod vllm-1-1 has no annotation phalanx.io/leaderworkerset-gang: "
        '"true" while other pods of its LeaderWorkerSet group do; set it on both '
        "leaderTemplate and workerTemplate (or on neither)"
    )


def test_a_group_whose_workers_are_not_created_yet_is_not_refused() -> None:
    leader = lws_pod("vllm-1")
    assert lws.opt_in_missing(REF, [leader], 3, finder([leader])) == ""


def test_another_leaderworkerset_pod_that_shares_a_workers_name_is_not_the_groups() -> None:
    # LWS "vllm-1"'s leader of group 2 is named like LWS "vllm"'s worker 2 of group 1.
    members = group(2)
    stranger = lws_pod(
        "vllm-1-2", index="2", opt_in=None, labels={"leaderworkerset.sigs.k8s.io/name": "vllm-1"}
    )
    assert lws.opt_in_missing(REF, members, 3, finder([*members, stranger])) == ""


# --- precedence ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "winner", "overruled"),
    [
        (
            {"scheduling.x-k8s.io/pod-group": "sp"},
            {},
            {},
            "ml/sp",
            [Dialect.LWS],
        ),
        (
            {"kueue.x-k8s.io/pod-group-name": "kq"},
            {"kueue.x-k8s.io/pod-group-total-count": "3"},
            {},
            "kueue:ml/kq",
            [Dialect.LWS],
        ),
        ({}, {}, {"scheduling_group": "up"}, "lws:ml/vllm-1", [Dialect.UPSTREAM]),
    ],
    ids=["scheduler-plugins-wins", "kueue-wins", "lws-over-upstream"],
)
def test_kueue_wins_over_lws_and_lws_over_upstream(
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
    winner: str,
    overruled: list[Dialect],
) -> None:
    found = lws_pod(labels=labels, annotations=annotations, **spec)
    assert found.group is not None
    assert (found.group.key, [c.dialect for c in found.overruled], found.invalid) == (
        winner,
        overruled,
        "",
    )


def test_the_contest_event_names_lws_in_the_precedence() -> None:
    found = lws_pod(scheduling_group="up")
    assert registry.contest_message(found) == (
        "pod ml/vllm-1 is claimed by more than one gang dialect: lws group lws:ml/vllm-1 "
        "wins (precedence annotations > scheduler-plugins > volcano > kai > grove > kueue > "
        "yunikorn > lws > upstream) over upstream group upstream:ml/up"
    )


# --- LWS's exclusive placement ---------------------------------------------------------

EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"


def test_exclusive_placement_requires_the_whole_group_inside_one_value_of_its_label() -> None:
    found = lws_pod(annotations={EXCLUSIVE: "example.com/rack"})
    assert (found.topology, found.invalid) == (
        TopologyConstraint(required="example.com/rack", any_label=True),
        "",
    )


def test_phalanxs_own_topology_annotations_take_the_place_of_exclusive_placement() -> None:
    found = lws_pod(
        annotations={
            EXCLUSIVE: "example.com/rack",
            "phalanx.io/topology-required": "nvidia.com/gpu.clique",
        }
    )
    assert found.topology == TopologyConstraint(required="nvidia.com/gpu.clique")


def test_exclusive_placement_is_not_read_without_the_opt_in() -> None:
    assert lws_pod(opt_in=None, annotations={EXCLUSIVE: "example.com/rack"}).topology is None


def test_an_exclusive_topology_that_is_no_label_key_is_refused_naming_it() -> None:
    found = lws_pod(annotations={EXCLUSIVE: "rack!"})
    assert found.invalid == (
        'annotation leaderworkerset.sigs.k8s.io/exclusive-topology: "rack!" is not a node label key'
    )


def test_a_huge_declared_size_costs_no_more_lookups_than_the_pods_that_exist() -> None:
    leader = lws_pod("vllm-1", size="2147483647")
    asked: list[str] = []

    def find(namespace: str, name: str) -> Pod | None:
        asked.append(name)
        return leader if name == "vllm-1" else None

    assert lws.opt_in_missing(REF, [leader], 2147483647, find) == ""
    assert asked == ["vllm-1", "vllm-1-1"]


# --- LWS's subgroups -------------------------------------------------------------------

SUBGROUP_INDEX = "leaderworkerset.sigs.k8s.io/subgroup-index"
SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"


def subgroup_pod(index: str | None = "1", *, size: str = "5", each: str = "2", **notes: str) -> Pod:
    """A worker of a group of `size` pods in subgroups of `each`, in subgroup `index`."""
    labels = {SUBGROUP_INDEX: index} if index is not None else {}
    annotations = {SUBGROUP_SIZE: each, **{k.replace("_", "-"): v for k, v in notes.items()}}
    return lws_pod("vllm-1-3", worker=3, size=size, labels=labels, annotations=annotations)


def test_a_members_subgroup_is_its_task_without_task_minima() -> None:
    found = subgroup_pod("1")
    assert (found.task, found.invalid, found.task_groups) == ("1", "", None)
    gang = registry.resolve(REF, lambda _: None, [subgroup_pod("1")])
    assert isinstance(gang, PodGroup)
    assert (gang.min_member, gang.min_task_member) == (5, ())


def test_many_subgroups_are_read_when_no_topology_pins_them() -> None:
    found = subgroup_pod("4000", size="4096", each="1")
    assert (found.task, found.invalid) == ("4000", "")


def test_the_leader_excluded_from_every_subgroup_has_no_task() -> None:
    assert subgroup_pod(None).task == ""


def test_a_subgroup_exclusive_topology_puts_each_subgroup_inside_one_value_of_its_label() -> None:
    # Five pods in subgroups of two: the leader is the extra pod of subgroup 0.
    found = subgroup_pod(**{SUBGROUP_EXCLUSIVE: "example.com/rack"})
    assert (found.topology, found.invalid) == (
        TopologyConstraint(
            any_label=True,
            slice_required="example.com/rack",
            slice_tasks=("0", "1"),
            slice_noun="LWS subgroup",
            declared_by=(
                f"annotations {SUBGROUP_EXCLUSIVE}, {SUBGROUP_SIZE}, "
                "leaderworkerset.sigs.k8s.io/size"
            ),
        ),
        "",
    )


def test_the_groups_and_its_subgroups_exclusive_topologies_hold_together() -> None:
    found = subgroup_pod(
        size="4", **{SUBGROUP_EXCLUSIVE: "example.com/host", EXCLUSIVE: "example.com/rack"}
    )
    assert found.topology is not None
    assert (found.topology.required, found.topology.slice_required) == (
        "example.com/rack",
        "example.com/host",
    )
    assert found.topology.slice_tasks == ("0", "1")


def test_a_subgroup_exclusive_topology_without_subgroups_is_not_read() -> None:
    # LWS injects nothing for it without subGroupPolicy.
    found = lws_pod(annotations={SUBGROUP_EXCLUSIVE: "example.com/rack"})
    assert (found.topology, found.invalid) == (None, "")


@pytest.mark.parametrize(
    ("pod", "problem"),
    [
        (
            subgroup_pod("-1"),
            f'label {SUBGROUP_INDEX}: "-1" is not a non-negative integer',
        ),
        (
            subgroup_pod("01"),
            f'label {SUBGROUP_INDEX}: "01" is not a non-negative integer',
        ),
        (
            subgroup_pod("2"),
            f"label {SUBGROUP_INDEX}: 2 is past the group's last subgroup (1, by "
            f"{SUBGROUP_SIZE} and leaderworkerset.sigs.k8s.io/size)",
        ),
        (
            subgroup_pod(each="two"),
            f'annotation {SUBGROUP_SIZE}: "two" is not a positive integer',
        ),
        (
            subgroup_pod(size="6", each="4"),
            f"annotation {SUBGROUP_SIZE}: 4 divides neither the group's size 6 "
            "(leaderworkerset.sigs.k8s.io/size) nor 5",
        ),
        (
            subgroup_pod(size="4096", each="1", **{SUBGROUP_EXCLUSIVE: "example.com/rack"}),
            f"annotation {SUBGROUP_EXCLUSIVE} with {SUBGROUP_SIZE} makes 4096 subgroups of "
            "the group's 4096 pods to place each in one domain; Phalanx places at most 1024",
        ),
        (
            subgroup_pod(**{SUBGROUP_EXCLUSIVE: "rack!"}),
            f'annotation {SUBGROUP_EXCLUSIVE}: "rack!" is not a node label key',
        ),
        (
            lws_pod(labels={SUBGROUP_INDEX: "0"}),
            f"label {SUBGROUP_INDEX} needs annotation {SUBGROUP_SIZE} "
            "(LWS sets both from subGroupPolicy.subGroupSize)",
        ),
    ],
    ids=[
        "negative-index",
        "index-not-canonical",
        "index-past-the-last",
        "size-not-a-number",
        "size-dividing-neither",
        "too-many-subgroups",
        "key-not-a-label",
        "index-without-size",
    ],
)
def test_a_malformed_subgroup_is_invalid_naming_the_label_or_annotation(
    pod: Pod, problem: str
) -> None:
    assert pod.invalid == problem


def test_members_that_disagree_on_their_subgroups_are_refused_naming_the_annotations() -> None:
    members = [
        subgroup_pod(**{SUBGROUP_EXCLUSIVE: "example.com/rack"}),
        subgroup_pod("0", each="4", **{SUBGROUP_EXCLUSIVE: "example.com/rack"}),
    ]
    gang = registry.resolve(REF, lambda _: None, members)
    assert isinstance(gang, PodGroup)
    found = resolve_topology(gang, members, DEFAULT_TOPOLOGIES)
    assert isinstance(found, str)
    assert found.startswith(
        f"members of gang lws:ml/vllm-1 disagree on their topology (annotations "
        f"{SUBGROUP_EXCLUSIVE}, {SUBGROUP_SIZE}, leaderworkerset.sigs.k8s.io/size): "
        "LWS subgroup(s) 0 each in one example.com/rack; "
        "LWS subgroup(s) 0, 1 each in one example.com/rack"
    )


def test_many_subgroups_are_named_as_a_range() -> None:
    found = subgroup_pod("3", size="12", each="1", **{SUBGROUP_EXCLUSIVE: "example.com/host"})
    assert str(found.topology) == "LWS subgroup(s) 0..11 each in one example.com/host"
