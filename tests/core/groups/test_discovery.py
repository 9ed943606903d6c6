"""Discovery: which gang kinds the API server serves, the newest upstream version first."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups.discovery import (
    Served,
    ServedKind,
    defines_followed_kind,
    probes,
    served,
)
from phalanx.core.groups.registry import served_holding
from phalanx.core.model import Dialect, GroupRef

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def group(name: str, *versions: str) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def apis(*groups: dict[str, Any]) -> dict[str, Any]:
    core = [group("apps", "v1"), group("batch", "v1")]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [*core, *groups]}


def resources(group_version: str, *names: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": name,
                "singularName": "" if "/" in name else name.rstrip("s"),
                "namespaced": True,
                "kind": "PodGroup" if name.startswith("podgroups") else "Workload",
                "verbs": ["get", "patch", "update"] if "/" in name else VERBS,
            }
            for name in names
        ],
    }


SCHEDULER_PLUGINS = group("scheduling.x-k8s.io", "v1alpha1")
SP_RESOURCES = resources("scheduling.x-k8s.io/v1alpha1", "podgroups", "podgroups/status")
VOLCANO = group("scheduling.volcano.sh", "v1beta1")
VOLCANO_RESOURCES = resources("scheduling.volcano.sh/v1beta1", "podgroups")  # no status


def kind(
    dialect: Dialect, api_version: str, kind_: str, resource: str, *, status: bool = True
) -> ServedKind:
    grp, version = api_version.split("/")
    return ServedKind(dialect, grp, version, kind_, resource, status_subresource=status)


SP = kind(Dialect.SCHEDULER_PLUGINS, "scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups")


@pytest.mark.parametrize(
    ("groups", "lists", "expected"),
    [
        pytest.param(
            [group("scheduling.k8s.io", "v1"), SCHEDULER_PLUGINS],
            {"scheduling.x-k8s.io/v1alpha1": SP_RESOURCES},
            [SP],
            id="scheduler-plugins-only",
        ),
        pytest.param(
            [group("scheduling.k8s.io", "v1", "v1alpha1")],
            {"scheduling.k8s.io/v1alpha1": resources("scheduling.k8s.io/v1alpha1", "workloads")},
            [
                kind(
                    Dialect.UPSTREAM,
                    "scheduling.k8s.io/v1alpha1",
                    "Workload",
                    "workloads",
                    status=False,
                )
            ],
            id="1.35-workload",
        ),
        pytest.param(
            [group("scheduling.k8s.io", "v1", "v1alpha2")],
            {
                "scheduling.k8s.io/v1alpha2": resources(
                    "scheduling.k8s.io/v1alpha2", "podgroups", "podgroups/status", "workloads"
                )
            },
            [kind(Dialect.UPSTREAM, "scheduling.k8s.io/v1alpha2", "PodGroup", "podgroups")],
            id="1.36-pod-group",
        ),
        pytest.param(
            [group("scheduling.k8s.io", "v1", "v1beta1", "v1alpha3"), SCHEDULER_PLUGINS, VOLCANO],
            {
                "scheduling.k8s.io/v1beta1": resources(
                    "scheduling.k8s.io/v1beta1", "podgroups", "podgroups/status", "workloads"
                ),
                "scheduling.k8s.io/v1alpha3": resources(
                    "scheduling.k8s.io/v1alpha3", "podgroups", "podgroups/status", "workloads"
                ),
                "scheduling.x-k8s.io/v1alpha1": SP_RESOURCES,
                "scheduling.volcano.sh/v1beta1": VOLCANO_RESOURCES,
            },
            [
                SP,
                ServedKind(
                    Dialect.VOLCANO,
                    "scheduling.volcano.sh",
                    "v1beta1",
                    "PodGroup",
                    "podgroups",
                    status_subresource=False,
                ),
                kind(Dialect.UPSTREAM, "scheduling.k8s.io/v1beta1", "PodGroup", "podgroups"),
            ],
            id="1.37-everything-newest-wins",
        ),
        pytest.param(
            [group("scheduling.k8s.io", "v1", "v1alpha3")],
            {},
            [],
            id="resource-list-missing",
        ),
        pytest.param(
            [SCHEDULER_PLUGINS],
            {"scheduling.x-k8s.io/v1alpha1": resources("scheduling.x-k8s.io/v1alpha1")},
            [],
            id="group-without-podgroups",
        ),
    ],
)
def test_the_served_kinds_are_found(
    groups: list[dict[str, Any]], lists: dict[str, Any], expected: list[ServedKind]
) -> None:
    assert served(apis(*groups), lists).kinds == tuple(expected)


def test_only_group_versions_phalanx_reads_are_probed() -> None:
    answer = apis(group("scheduling.k8s.io", "v1", "v1beta1", "v1alpha3"), VOLCANO)
    assert probes(answer) == (
        "scheduling.volcano.sh/v1beta1",
        "scheduling.k8s.io/v1beta1",
        "scheduling.k8s.io/v1alpha3",
    )


def test_paths_are_cluster_wide_for_watches_and_per_object_for_status() -> None:
    found = served(
        apis(SCHEDULER_PLUGINS, VOLCANO),
        {
            "scheduling.x-k8s.io/v1alpha1": SP_RESOURCES,
            "scheduling.volcano.sh/v1beta1": VOLCANO_RESOURCES,
        },
    )
    (plugins,) = found.of(Dialect.SCHEDULER_PLUGINS)
    (volcano,) = found.of(Dialect.VOLCANO)
    assert plugins.list_path == "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"
    assert plugins.status_path("ml", "job") == (
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups/job/status"
    )
    assert volcano.status_path("ml", "job") == (
        "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups/job"
    )


def test_kai_pod_groups_are_followed_when_served_and_their_status_goes_to_status() -> None:
    found = served(
        apis(group("scheduling.run.ai", "v2alpha2", "v2")),
        {
            "scheduling.run.ai/v2alpha2": resources(
                "scheduling.run.ai/v2alpha2", "podgroups", "podgroups/status"
            )
        },
    )
    assert found.kinds == (
        kind(Dialect.KAI, "scheduling.run.ai/v2alpha2", "PodGroup", "podgroups"),
    )
    (kai,) = found.of(Dialect.KAI)
    assert served_holding(found, GroupRef("ml", "train", Dialect.KAI)) == kai
    assert kai.status_path("ml", "train") == (
        "/apis/scheduling.run.ai/v2alpha2/namespaces/ml/podgroups/train/status"
    )


def test_a_gang_finds_the_kind_that_holds_it() -> None:
    found = served(
        apis(group("scheduling.k8s.io", "v1", "v1alpha1", "v1alpha2"), SCHEDULER_PLUGINS),
        {
            "scheduling.k8s.io/v1alpha1": resources("scheduling.k8s.io/v1alpha1", "workloads"),
            "scheduling.k8s.io/v1alpha2": resources("scheduling.k8s.io/v1alpha2", "podgroups"),
            "scheduling.x-k8s.io/v1alpha1": SP_RESOURCES,
        },
    )
    holding = partial(served_holding, found)
    assert holding(GroupRef("ml", "job")) == SP
    pod_group = holding(GroupRef("ml", "g", Dialect.UPSTREAM))
    assert pod_group is not None
    assert (pod_group.kind, pod_group.version) == ("PodGroup", "v1alpha2")
    workload = holding(GroupRef("ml", "w", Dialect.UPSTREAM, "workers"))
    assert workload is not None
    assert (workload.kind, workload.version) == ("Workload", "v1alpha1")
    assert holding(GroupRef("ml", "job", Dialect.VOLCANO)) is None


def test_served_kinds_compare_equal_while_nothing_changed() -> None:
    def answer() -> Any:
        return served(apis(SCHEDULER_PLUGINS), {"scheduling.x-k8s.io/v1alpha1": SP_RESOURCES})

    assert answer() == answer()
    assert answer() != served(apis(), {})


def test_a_kind_counts_as_served_in_any_version_of_its_group_and_kind() -> None:
    followed = ServedKind(
        Dialect.UPSTREAM, "scheduling.k8s.io", "v1alpha2", "PodGroup", "podgroups"
    )
    newer = ServedKind(Dialect.UPSTREAM, "scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups")
    other = ServedKind(Dialect.UPSTREAM, "scheduling.k8s.io", "v1alpha1", "Workload", "workloads")
    assert Served((newer,)).serves_any_version_of(followed)
    assert not Served((other,)).serves_any_version_of(followed)
    assert not Served().serves_any_version_of(followed)


@pytest.mark.parametrize(
    ("crd", "followed"),
    [
        ("podgroups.scheduling.x-k8s.io", True),
        ("podgroups.scheduling.volcano.sh", True),
        ("podgroups.scheduling.run.ai", True),
        ("podgangs.scheduler.grove.io", True),
        ("queues.scheduling.volcano.sh", False),  # Volcano's, but no gang kind
        ("certificates.cert-manager.io", False),
        ("podgroups.scheduling.x-k8s.io.example.com", False),
    ],
    ids=str,
)
def test_a_crd_defines_a_followed_kind_when_its_name_is_that_kinds_plural_and_group(
    crd: str, followed: bool
) -> None:
    assert defines_followed_kind(crd) is followed


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ({"groups": {"name": "x"}}, "APIGroupList /apis: groups: must be a list, not an object"),
        (
            {"groups": [{"name": "x", "versions": [{"groupVersion": 1}]}]},
            "APIGroupList /apis: groups[0].versions[0].groupVersion: "
            "must be a string, not a number",
        ),
    ],
    ids=["groups-not-a-list", "version-not-a-string"],
)
def test_a_malformed_discovery_answer_is_an_error_naming_the_field(
    answer: dict[str, Any], error: str
) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        probes(answer)
    assert str(raised.value) == error
