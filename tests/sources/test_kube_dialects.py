"""The live source and every gang dialect, against a fake API server: discovery, one
informer per served kind, keys by dialect, what is said once (ignored fields, contested
pods, invalid objects), status in each dialect's own terms, commit records, requeues."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import orjson
import pytest
from source_fakes import FakeApi, RecordingWriter, group_list, resource_list, until

from builders import (
    composite_obj,
    grove_pod_obj,
    grove_podgang_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    node_obj,
    pod_obj,
    podgroup_obj,
    present,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.cache import ClusterState
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.model import Dialect, GroupRef
from phalanx.core.rollforward import COMMIT_ANNOTATION, CommitRecord, encode_commit_record
from phalanx.sources.in_flight import Lane
from phalanx.sources.informer import ApiError, Backoff, InformerSettings
from phalanx.sources.kube import KubeSource, KubeSourceSettings
from phalanx.sources.kube_dra import INVALID_OBJECT
from phalanx.sources.kube_reports import CONFLICT_ATTEMPTS

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SP = "/apis/scheduling.x-k8s.io/v1alpha1"
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
UPSTREAM = "/apis/scheduling.k8s.io/v1beta1"
UPSTREAM_ALPHA3 = "/apis/scheduling.k8s.io/v1alpha3"
WORKLOADS = "/apis/scheduling.k8s.io/v1alpha1"
PODS = "/api/v1/pods"

FAST = KubeSourceSettings(
    crd_recheck_seconds=0.05,
    informer=InformerSettings(
        backoff=Backoff(initial_seconds=0.01, cap_seconds=0.05), gone_after_seconds=0.1
    ),
)

# What a 1.37 API server with Volcano and scheduler-plugins installed answers.
SERVED_137 = {
    "/apis": group_list(
        "scheduling.x-k8s.io/v1alpha1",
        "scheduling.volcano.sh/v1beta1",
        "scheduling.k8s.io/v1beta1",
        "scheduling.k8s.io/v1alpha3",
    ),
    SP: resource_list("podgroups", "podgroups/status"),
    VOLCANO: resource_list("podgroups"),
    UPSTREAM: resource_list("podgroups", "podgroups/status", "workloads"),
    UPSTREAM_ALPHA3: resource_list("podgroups", "podgroups/status", "workloads"),
}
# What a 1.35 API server with GenericWorkload answers.
SERVED_135 = {
    "/apis": group_list("scheduling.k8s.io/v1alpha1"),
    WORKLOADS: resource_list("workloads"),
}


def collection(api_path: str, resource: str = "podgroups") -> str:
    return f"{api_path}/{resource}"


class Running:
    """A started KubeSource over a fake API, feeding a ClusterState."""

    def __init__(
        self,
        api: FakeApi,
        scheduler_config: dict[str, Any] | None = None,
        settings: KubeSourceSettings = FAST,
    ) -> None:
        self.api = api
        self.state = ClusterState()
        self.writer = RecordingWriter()
        self.source = KubeSource(
            api,
            settings=settings,
            writer=self.writer,
            wall_clock=lambda: T0,
            scheduler_config=scheduler_config,
        )

    def sink(self, update: Callable[[ClusterState], None]) -> None:
        update(self.state)

    async def settle(self) -> None:
        """Let spawned writes finish."""
        for _ in range(20):
            await asyncio.sleep(0)


@asynccontextmanager
async def running(
    discovery: dict[str, Any],
    scheduler_config: dict[str, Any] | None = None,
    forbidden: frozenset[str] = frozenset(),
    objects: Mapping[str, list[dict[str, Any]]] | None = None,
    settings: KubeSourceSettings = FAST,
) -> AsyncIterator[Running]:
    """A started source; `objects` by collection path (see `collection`), `forbidden`
    collections refused by RBAC."""
    api = FakeApi(discovery)
    api.forbidden.update(forbidden)
    api.add("/api/v1/nodes", node_obj("n1"))
    for path, items in (objects or {}).items():
        api.add(path, *items)
    live = Running(api, scheduler_config, settings)
    await live.source.start(live.sink)
    try:
        await until("synced", lambda: live.source.synced)
        yield live
    finally:
        await live.source.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- discovery and keys ------------------------------------------------------------------


def test_every_served_gang_kind_is_followed_and_keyed_by_its_dialect() -> None:
    async def scenario() -> None:
        async with running(
            SERVED_137,
            objects={
                collection(SP): [podgroup_obj("train", 2, namespace="ml")],
                collection(VOLCANO): [volcano_podgroup_obj("train", 3, namespace="ml")],
                collection(UPSTREAM): [upstream_podgroup_obj("train", 4, namespace="ml")],
            },
        ) as live:
            sizes = {
                key: present(live.state.group(key)).min_member
                for key in ("ml/train", "volcano:ml/train", "upstream:ml/train")
            }
            assert sizes == {"ml/train": 2, "volcano:ml/train": 3, "upstream:ml/train": 4}
            listed = {path for method, path in live.api.requests if method == "GET"}
            assert UPSTREAM in listed
            assert UPSTREAM_ALPHA3 in listed
            # the newest version is followed (its watch opens just after its list synced)
            await until("watched", lambda: collection(UPSTREAM) in live.api.watches)
            assert collection(UPSTREAM_ALPHA3) not in live.api.watches
            assert not live.source.annotation_only

    run(scenario())


# A 1.37 API server with the CompositePodGroup gate: v1alpha3 serves the composites.
SERVED_137_COMPOSITE = {
    **SERVED_137,
    UPSTREAM_ALPHA3: resource_list(
        "podgroups", "podgroups/status", "compositepodgroups", "compositepodgroups/status"
    ),
}
RAY = GroupRef("ml", "ray", Dialect.COMPOSITE)


def test_composite_pod_groups_are_followed_and_their_pod_groups_pods_are_their_members() -> None:
    async def scenario() -> None:
        async with running(
            SERVED_137_COMPOSITE,
            objects={
                collection(UPSTREAM_ALPHA3, "compositepodgroups"): [
                    at_version(composite_obj("ray", 2, namespace="ml"), "7")
                ],
                collection(UPSTREAM): [
                    upstream_podgroup_obj("ray-head", 1, namespace="ml", parent="ray"),
                    upstream_podgroup_obj("ray-workers", 1, namespace="ml", parent="ray"),
                ],
                PODS: [
                    pod_obj("head-0", namespace="ml", scheduling_group="ray-head"),
                    pod_obj("worker-0", namespace="ml", scheduling_group="ray-workers"),
                ],
            },
        ) as live:
            await until(
                "watched",
                lambda: collection(UPSTREAM_ALPHA3, "compositepodgroups") in live.api.watches,
            )
            assert live.state.composite(RAY.key) is not None
            members = [p.name for p in live.state.members(RAY.key)]
            assert members == ["head-0", "worker-0"]
            await live.source.update_group_status(waiting(RAY))
            [(path, body)] = live.writer.patches
            assert path == f"{UPSTREAM_ALPHA3}/namespaces/ml/compositepodgroups/ray/status"
            [condition] = body["status"]["conditions"]
            assert condition["type"] == "CompositePodGroupInitiallyScheduled"

    run(scenario())


def test_an_invalid_composite_deleted_and_created_again_invalid_is_said_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    said = "invalid CompositePodGroup composite:ml/ray: skipped"

    def times() -> int:
        return sum(1 for r in caplog.records if r.getMessage() == said)

    async def scenario() -> None:
        path = collection(UPSTREAM_ALPHA3, "compositepodgroups")
        bad = composite_obj("ray", 2, namespace="ml", parent="Not_A_Name")
        async with running(SERVED_137_COMPOSITE, objects={path: [bad]}) as live:
            await until("said", lambda: times() == 1)
            live.api.remove(path, "ray")
            await until("gone", lambda: live.state.group_error(RAY.key) is None)
            live.api.add(path, bad)
            await until("said again", lambda: times() == 2)

    run(scenario())


def test_a_gang_kind_rbac_refuses_is_said_loudly_the_rest_is_served_and_a_grant_is_seen(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        async with running(
            SERVED_137,
            forbidden=frozenset({collection(VOLCANO)}),
            objects={collection(SP): [podgroup_obj("train", 2, namespace="ml")]},
        ) as live:  # ready: the source synced without the Volcano list
            assert live.state.group("ml/train") is not None
            live.api.forbidden.clear()
            live.api.add(collection(VOLCANO), volcano_podgroup_obj("late", 3, namespace="ml"))
            await until("granted", lambda: live.state.group("volcano:ml/late") is not None)

    run(scenario())
    said = [r.getMessage() for r in caplog.records if "may not list" in r.getMessage()]
    assert said == [
        "may not list PodGroup (scheduling.volcano.sh/v1beta1): its gangs are unknown and "
        "their members wait; grant list and watch on it (the chart's RBAC does)"
    ]


def test_a_1_35_workload_is_followed_and_the_scheduler_plugins_crd_is_missed_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="phalanx.sources.kube")

    async def scenario() -> None:
        workload = workload_obj("train", {"workers": 3}, namespace="ml")
        async with running(
            SERVED_135, objects={collection(WORKLOADS, "workloads"): [workload]}
        ) as live:
            await asyncio.sleep(0.2)  # several re-checks
            found = live.state.workload("upstream:ml/train")
            assert found is not None
            assert found.pod_group("workers") is not None
            assert live.source.annotation_only

    run(scenario())
    missing = [r for r in caplog.records if "is not installed" in r.getMessage()]
    assert len(missing) == 1


def test_a_kind_no_longer_served_is_forgotten_with_its_objects() -> None:
    async def scenario() -> None:
        async with running(
            SERVED_137, objects={collection(VOLCANO): [volcano_podgroup_obj("train", 3)]}
        ) as live:
            assert live.state.group("volcano:default/train") is not None
            live.api.discovery["/apis"] = group_list("scheduling.x-k8s.io/v1alpha1")
            await until(
                "Volcano objects forgotten",
                lambda: live.state.group("volcano:default/train") is None,
            )

    run(scenario())


def test_a_kind_missing_from_discovery_for_a_moment_keeps_its_objects() -> None:
    # An API server that restarts answers discovery, and lists, before it serves its CRDs.
    patient = replace(FAST, informer=replace(FAST.informer, gone_after_seconds=30.0))

    async def scenario() -> None:
        async with running(
            SERVED_137,
            objects={collection(VOLCANO): [volcano_podgroup_obj("train", 3)]},
            settings=patient,
        ) as live:
            served = dict(live.api.discovery)
            live.api.missing.add(collection(VOLCANO))
            live.api.discovery["/apis"] = group_list("scheduling.x-k8s.io/v1alpha1")
            for watch in live.api.watches[collection(VOLCANO)]:  # relist: it answers 404
                watch.send(orjson.dumps({"type": "ERROR", "object": {"code": 410}}))
            await asyncio.sleep(0.3)  # discoveries without it, lists answering 404
            assert live.state.group("volcano:default/train") is not None
            assert live.source.served is not None
            assert live.source.served.of(Dialect.VOLCANO)
            live.api.missing.clear()
            live.api.discovery.update(served)
            await asyncio.sleep(0.2)
            assert live.state.group("volcano:default/train") is not None

    run(scenario())


# --- said once ---------------------------------------------------------------------------


def test_an_unknown_volcano_queue_is_said_once_on_the_pod_group() -> None:
    async def scenario() -> None:
        pg = volcano_podgroup_obj("train", 3, queue="research")
        async with running(SERVED_137, objects={collection(VOLCANO): [pg]}) as live:
            live.api.modify(collection(VOLCANO), {**pg, "status": {"phase": "Inqueue"}})
            statuses = live.source.reports._statuses  # noqa: SLF001  # what the watch showed
            await until(
                "the update seen",
                lambda: (
                    (seen := statuses.get("volcano:default/train")) is not None
                    and (seen.status or {}).get("phase") == "Inqueue"
                ),
            )
            await live.settle()
            [event] = live.writer.events("FieldIgnored")
            assert event["involvedObject"] == {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "namespace": "default",
                "name": "train",
                "uid": "vpg-default-train",
            }
            assert event["message"].startswith('spec.queue: "research" is ignored')
            assert event["type"] == "Warning"

    run(scenario())


def test_a_phalanx_annotation_phalanx_does_not_read_is_said_once_on_the_pod_group() -> None:
    async def scenario() -> None:
        pg = podgroup_obj("train", 2, annotations={"phalanx.io/placment": "spread"})
        async with running(SERVED_137, objects={collection(SP): [pg]}) as live:
            live.api.modify(collection(SP), {**pg, "status": {"phase": "Pending"}})
            await until(
                "the event",
                lambda: bool(live.writer.events("FieldIgnored")),
            )
            await live.settle()
            [event] = live.writer.events("FieldIgnored")
            assert event["involvedObject"]["name"] == "train"
            assert event["message"] == (
                'metadata.annotations["phalanx.io/placment"] is ignored: Phalanx reads no such '
                "annotation (did you mean phalanx.io/placement?)"
            )
            assert event["type"] == "Warning"

    run(scenario())


PACK = {"phalanx.io/placement": "pack"}


async def redelivered(live: Running, pod_group: dict[str, Any]) -> None:
    """The watch hands upstream `pod_group` over again (a status update), and it is seen."""
    status = {"conditions": [{"type": "Seen", "status": str(time.monotonic_ns())}]}
    live.api.modify(collection(UPSTREAM), {**pod_group, "status": status})
    key = f"upstream:{pod_group['metadata']['namespace']}/{pod_group['metadata']['name']}"
    statuses = live.source.reports._statuses  # noqa: SLF001  # what the watch showed
    await until(
        "the update seen",
        lambda: (seen := statuses.get(key)) is not None and seen.status == status,
    )


CHILD_IGNORED = (
    'metadata.annotations["phalanx.io/placement"] is ignored: this PodGroup is part of '
    "CompositePodGroup ml/ray's gang, whose own annotations are read (put it there)"
)


def test_a_gang_composites_child_carrying_phalanx_settings_is_told_once_they_are_not_read() -> None:
    async def scenario() -> None:
        head = upstream_podgroup_obj("ray-head", 1, namespace="ml", parent="ray", annotations=PACK)
        async with running(
            SERVED_137_COMPOSITE,
            objects={
                collection(UPSTREAM_ALPHA3, "compositepodgroups"): [
                    composite_obj("ray", 2, namespace="ml"),
                    composite_obj("solo", None, namespace="ml"),
                ],
                collection(UPSTREAM): [
                    head,
                    upstream_podgroup_obj("ray-w", 1, namespace="ml", parent="ray"),
                    # A `basic` composite's child is a gang of its own: its placement is read.
                    upstream_podgroup_obj(
                        "solo-a", 1, namespace="ml", parent="solo", annotations=PACK
                    ),
                ],
            },
        ) as live:
            await until("the event", lambda: bool(live.writer.events("FieldIgnored")))
            await redelivered(live, head)
            await live.settle()
            [event] = live.writer.events("FieldIgnored")
            assert event["involvedObject"]["kind"] == "PodGroup"
            assert event["involvedObject"]["name"] == "ray-head"
            assert event["message"] == CHILD_IGNORED
            assert event["type"] == "Warning"

    run(scenario())


def test_a_childs_ignored_setting_is_said_again_only_once_the_tree_changed_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def said() -> int:
        return sum(1 for r in caplog.records if getattr(r, "reason", "") == CHILD_IGNORED)

    async def scenario() -> None:
        path = collection(UPSTREAM_ALPHA3, "compositepodgroups")
        head = upstream_podgroup_obj("ray-head", 1, namespace="ml", parent="ray", annotations=PACK)
        async with running(
            SERVED_137_COMPOSITE,
            objects={path: [composite_obj("ray", 2, namespace="ml")], collection(UPSTREAM): [head]},
        ) as live:
            await until("said", lambda: said() == 1)
            live.api.modify(path, composite_obj("ray", None, namespace="ml"))  # basic: read

            def basic() -> bool:
                return present(live.state.composite(RAY.key)).min_group_count is None

            await until("basic", basic)
            await redelivered(live, head)
            assert said() == 1
            live.api.modify(path, composite_obj("ray", 2, namespace="ml"))  # a gang again
            await until("said again", lambda: said() == 2)

    run(scenario())


def test_a_pod_claimed_by_two_dialects_gets_one_event_saying_which_won() -> None:
    async def scenario() -> None:
        pod = pod_obj("w-0", volcano_group="train", scheduling_group="job")
        async with running(SERVED_137, objects={PODS: [pod]}) as live:
            live.api.modify(PODS, {**pod, "metadata": {**pod["metadata"], "labels": {"x": "y"}}})

            def relabelled() -> Mapping[str, str]:
                return present(live.state.pod_by_key("default", "w-0")).labels

            await until("pod updated", relabelled)
            await live.settle()
            [event] = live.writer.events("GangDialectConflict")
            assert event["involvedObject"]["kind"] == "Pod"
            assert event["message"] == (
                "pod default/w-0 is claimed by more than one gang dialect: volcano group "
                "volcano:default/train wins (precedence annotations > scheduler-plugins > "
                "volcano > kai > grove > kueue > yunikorn > lws > upstream) over upstream group "
                "upstream:default/job"
            )

    run(scenario())


def test_a_member_replaced_by_another_schedulers_pod_of_its_name_leaves_its_gang() -> None:
    # Deleted and created again under another scheduler while the watch was down: the
    # relist (or the watch) shows only the new pod, no delete of the old one. Found by
    # the live order property (test_kube_order_independent).
    async def scenario() -> None:
        ours = pod_obj("w-0", group="train", uid="uid-ours")
        async with running(
            SERVED_137,
            objects={collection(SP): [podgroup_obj("train", 2)], PODS: [ours]},
        ) as live:
            assert live.state.members("default/train") != []
            theirs = pod_obj("w-0", group="train", uid="uid-theirs", scheduler="default-scheduler")
            live.api.modify(PODS, theirs)
            live.api.add(PODS, pod_obj("after"))  # on the same watch: handled once it is
            await until("the later pod", lambda: live.state.pod_by_key("default", "after"))
            assert live.state.pod_by_key("default", "w-0") is None
            assert live.state.members("default/train") == []
            assert live.state.pending_count("default/train") == 0

    run(scenario())


def test_a_pod_created_again_under_its_name_with_the_same_problem_is_told_again() -> None:
    # Deleted and created again while the watch was down: the one object the relist shows
    # under the name is a new pod, and no one has told its owner why it waits yet.
    async def scenario() -> None:
        def bad(uid: str) -> dict[str, Any]:
            return pod_obj("w-0", annotations={"phalanx.io/gpu-memory-mib": "lots"}, uid=uid)

        async with running(SERVED_137, objects={PODS: [bad("uid-1")]}) as live:
            await until("told", lambda: live.writer.events(INVALID_OBJECT))
            live.api.modify(PODS, bad("uid-2"))
            live.api.add(PODS, pod_obj("after"))  # on the same watch: handled once it is
            await until("the later pod", lambda: live.state.pod_by_key("default", "after"))
            await live.settle()
            told = [e["involvedObject"]["uid"] for e in live.writer.events(INVALID_OBJECT)]
            assert told == ["uid-1", "uid-2"]

    run(scenario())


def test_an_invalid_gang_object_is_reported_on_itself_and_its_gang_is_invalid() -> None:
    async def scenario() -> None:
        bad = volcano_podgroup_obj("train", 0)
        async with running(SERVED_137, objects={collection(VOLCANO): [bad]}) as live:
            await live.settle()
            error = live.state.group_error("volcano:default/train")
            assert error is not None
            assert "spec.minMember: must be a positive integer" in error
            [event] = live.writer.events("InvalidObject")
            assert event["involvedObject"]["apiVersion"] == "scheduling.volcano.sh/v1beta1"
            assert event["involvedObject"]["name"] == "train"
            assert "spec.minMember" in event["message"]

    run(scenario())


# --- status in each dialect's own terms ---------------------------------------------------


def waiting(ref: GroupRef, message: str = "waiting for gang members: 1/4 exist") -> GroupStatus:
    return GroupStatus(ref, GroupPhase.PENDING, 0, 0, "waiting-for-members", message)


def at_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """`obj` as the API server lists it: with a resourceVersion."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}


UPSTREAM_TRAIN = GroupRef("default", "train", Dialect.UPSTREAM)
UPSTREAM_STATUS = f"{UPSTREAM}/namespaces/default/podgroups/train/status"
UPSTREAM_OBJECT = f"{UPSTREAM}/namespaces/default/podgroups/train"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def initially_scheduled(status: str, message: str = "", reason: str = "") -> dict[str, Any]:
    return {
        "type": "PodGroupInitiallyScheduled",
        "status": status,
        "reason": reason or ("Scheduled" if status == "True" else "Unschedulable"),
        "message": message,
        "lastTransitionTime": "2025-12-31T00:00:00Z",
    }


# kube-scheduler's own condition on a PodGroup of another type, which Phalanx never sends.
DISRUPTION = {
    "type": "DisruptionTarget",
    "status": "False",
    "reason": "",
    "message": "",
    "lastTransitionTime": "2025-12-31T00:00:00Z",
}


def test_status_is_written_in_each_dialects_terms_on_its_own_path() -> None:
    async def scenario() -> None:
        async with running(
            SERVED_137,
            objects={
                collection(VOLCANO): [at_version(volcano_podgroup_obj("train", 4), "11")],
                collection(UPSTREAM): [at_version(upstream_podgroup_obj("train", 4), "12")],
            },
        ) as live:
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN))
            await live.source.update_group_status(
                waiting(GroupRef("default", "train", Dialect.VOLCANO))
            )
            # A gang with no object, and one whose object is not served: nothing to write.
            await live.source.update_group_status(waiting(GroupRef("default", "solo")))
            by_path = dict(live.writer.patches)
            assert set(by_path) == {
                UPSTREAM_STATUS,
                f"{VOLCANO}/namespaces/default/podgroups/train",
            }
            assert by_path[UPSTREAM_STATUS] == {
                "metadata": {"resourceVersion": "12"},
                "status": {
                    "conditions": [
                        {
                            "type": "PodGroupInitiallyScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "waiting for gang members: 1/4 exist",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ]
                },
            }
            volcano = by_path[f"{VOLCANO}/namespaces/default/podgroups/train"]
            assert volcano["status"]["phase"] == "Inqueue"
            assert volcano["metadata"] == {"resourceVersion": "11"}
            assert live.writer.content_types == [STRATEGIC, MERGE]
            assert live.writer.gets == []  # built on what the watch showed

    run(scenario())


KAI = "/apis/scheduling.run.ai/v2alpha2"
# A 1.35 API server with KAI Scheduler's CRD installed (its PodGroups have /status).
SERVED_KAI = {
    "/apis": group_list("scheduling.run.ai/v2alpha2"),
    KAI: resource_list("podgroups", "podgroups/status"),
}


def test_kai_pod_groups_are_followed_their_pods_are_members_and_status_goes_to_status() -> None:
    async def scenario() -> None:
        async with running(
            SERVED_KAI,
            objects={
                collection(KAI): [at_version(kai_podgroup_obj("train", 4), "21")],
                PODS: [kai_pod_obj("train-0", "train")],
            },
        ) as live:
            assert present(live.state.group("kai:default/train")).min_member == 4
            await until("member", lambda: live.state.pod_by_key("default", "train-0"))
            member = live.state.pod_by_key("default", "train-0")
            assert member is not None
            assert member.group == GroupRef("default", "train", Dialect.KAI)
            await live.source.update_group_status(
                replace(waiting(GroupRef("default", "train", Dialect.KAI)), reason="unfit")
            )
            [(path, body)] = live.writer.patches
            assert path == f"{KAI}/namespaces/default/podgroups/train/status"
            assert body["metadata"] == {"resourceVersion": "21"}
            [condition] = body["status"]["schedulingConditions"]
            assert (condition["type"], condition["reasons"]) == (
                "UnschedulableOnNodePool",
                [{"reason": "Unfit", "message": "waiting for gang members: 1/4 exist"}],
            )
            assert live.writer.content_types == [MERGE]

    run(scenario())


GROVE = "/apis/scheduler.grove.io/v1alpha1"
# A 1.35 API server with Grove's PodGang CRD installed (its PodGangs have /status).
SERVED_GROVE = {
    "/apis": group_list("scheduler.grove.io/v1alpha1"),
    GROVE: resource_list("podgangs", "podgangs/status"),
}


def test_grove_pod_gangs_are_followed_their_pods_are_members_and_status_goes_to_status() -> None:
    ready = {"type": "Ready", "status": "False", "reason": "X", "message": ""}
    gang = grove_podgang_obj("serve-0", {"prefill": 1, "decode": 2}, status={"conditions": [ready]})

    async def scenario() -> None:
        async with running(
            SERVED_GROVE,
            objects={
                collection(GROVE, "podgangs"): [at_version(gang, "31")],
                PODS: [grove_pod_obj("prefill-0", "serve-0", "prefill")],
            },
        ) as live:
            assert present(live.state.group("grove:default/serve-0")).min_member == 3
            await until("member", lambda: live.state.pod_by_key("default", "prefill-0"))
            member = live.state.pod_by_key("default", "prefill-0")
            assert member is not None
            assert (member.group, member.task) == (
                GroupRef("default", "serve-0", Dialect.GROVE),
                "prefill",
            )
            await live.source.update_group_status(
                replace(waiting(GroupRef("default", "serve-0", Dialect.GROVE)), reason="unfit")
            )
            [(path, body)] = live.writer.patches
            assert path == f"{GROVE}/namespaces/default/podgangs/serve-0/status"
            assert body["metadata"] == {"resourceVersion": "31"}
            kept, condition = body["status"]["conditions"]
            assert kept == ready
            assert (body["status"]["phase"], condition["type"], condition["status"]) == (
                "Pending",
                "Scheduled",
                "False",
            )
            assert condition["reason"] == "Unfit"
            assert live.writer.content_types == [MERGE]

    run(scenario())


def test_only_phalanxs_condition_is_sent_and_the_others_are_left_to_their_writers() -> None:
    async def scenario() -> None:
        shown = {"conditions": [DISRUPTION, initially_scheduled("False", "earlier words")]}
        pg = at_version(upstream_podgroup_obj("train", 4, status=shown), "30")
        async with running(SERVED_137, objects={collection(UPSTREAM): [pg]}) as live:
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN))
            [(path, body)] = live.writer.patches
            assert path == UPSTREAM_STATUS
            [sent] = body["status"]["conditions"]
            assert (sent["type"], sent["message"]) == (
                "PodGroupInitiallyScheduled",
                "waiting for gang members: 1/4 exist",
            )
            assert sent["lastTransitionTime"] == "2025-12-31T00:00:00Z"  # still False

    run(scenario())


def test_a_condition_kube_scheduler_set_true_is_never_turned_back() -> None:
    async def scenario() -> None:
        placed = {"conditions": [initially_scheduled("True")]}
        pg = at_version(upstream_podgroup_obj("train", 4, status=placed), "5")
        async with running(SERVED_137, objects={collection(UPSTREAM): [pg]}) as live:
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN))
            assert live.writer.patches == []

    run(scenario())


def test_a_write_refused_as_a_conflict_is_rebuilt_on_the_object_read_again() -> None:
    """kube-scheduler set the condition True after the watch showed it False: the write
    built on False fails its precondition, the object is read, and nothing is turned back."""

    async def scenario() -> None:
        shown = {"conditions": [initially_scheduled("False", "earlier words")]}
        pg = at_version(upstream_podgroup_obj("train", 4, status=shown), "7")
        async with running(SERVED_137, objects={collection(UPSTREAM): [pg]}) as live:
            live.writer.conflicts[UPSTREAM_STATUS] = 1
            live.writer.objects[UPSTREAM_OBJECT] = at_version(
                upstream_podgroup_obj(
                    "train", 4, status={"conditions": [initially_scheduled("True")]}
                ),
                "8",
            )
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN))
            assert [body["metadata"] for _, body in live.writer.patches] == [
                {"resourceVersion": "7"}
            ]
            assert live.writer.gets == [UPSTREAM_OBJECT]

    run(scenario())


def test_after_a_conflict_the_write_carries_the_version_read_and_keeps_what_others_wrote() -> None:
    async def scenario() -> None:
        pg = at_version(upstream_podgroup_obj("train", 4), "7")
        async with running(SERVED_137, objects={collection(UPSTREAM): [pg]}) as live:
            live.writer.conflicts[UPSTREAM_STATUS] = 1
            live.writer.objects[UPSTREAM_OBJECT] = at_version(
                upstream_podgroup_obj("train", 4, status={"conditions": [DISRUPTION]}), "9"
            )
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN))
            first, second = (body for _, body in live.writer.patches)
            assert (first["metadata"], second["metadata"]) == (
                {"resourceVersion": "7"},
                {"resourceVersion": "9"},
            )
            assert [c["type"] for c in second["status"]["conditions"]] == [
                "PodGroupInitiallyScheduled"
            ]

    run(scenario())


def test_a_status_others_keep_writing_is_given_up_after_a_few_conflicts_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        pg = at_version(upstream_podgroup_obj("train", 4), "7")
        async with running(SERVED_137, objects={collection(UPSTREAM): [pg]}) as live:
            live.writer.conflicts[UPSTREAM_STATUS] = 100
            live.writer.objects[UPSTREAM_OBJECT] = pg
            with caplog.at_level(logging.WARNING, logger="phalanx.sources.kube_reports"):
                await live.source.update_group_status(waiting(UPSTREAM_TRAIN))
            assert len(live.writer.patches) == CONFLICT_ATTEMPTS
            assert len(live.writer.gets) == CONFLICT_ATTEMPTS - 1
            said = [r for r in caplog.records if "others kept writing it" in r.getMessage()]
            assert len(said) == 1

    run(scenario())


def test_the_next_write_builds_on_the_version_the_last_one_was_answered_with() -> None:
    async def scenario() -> None:
        pg = at_version(upstream_podgroup_obj("train", 4), "7")
        async with running(SERVED_137, objects={collection(UPSTREAM): [pg]}) as live:
            written = {"conditions": [initially_scheduled("False", "1/4")]}
            live.writer.answers[UPSTREAM_STATUS] = at_version(
                upstream_podgroup_obj("train", 4, status=written), "8"
            )
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN, "1/4"))
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN, "2/4"))
            assert [body["metadata"] for _, body in live.writer.patches] == [
                {"resourceVersion": "7"},
                {"resourceVersion": "8"},
            ]
            assert live.writer.gets == []

    run(scenario())


def test_without_a_known_version_the_object_is_read_before_the_write() -> None:
    async def scenario() -> None:
        pg = upstream_podgroup_obj("train", 4)  # listed without a resourceVersion
        async with running(SERVED_137, objects={collection(UPSTREAM): [pg]}) as live:
            live.writer.objects[UPSTREAM_OBJECT] = at_version(pg, "21")
            await live.source.update_group_status(waiting(UPSTREAM_TRAIN))
            assert live.writer.gets == [UPSTREAM_OBJECT]
            [(_, body)] = live.writer.patches
            assert body["metadata"] == {"resourceVersion": "21"}

    run(scenario())


def test_a_scheduler_plugins_status_phalanx_alone_writes_carries_no_precondition() -> None:
    async def scenario() -> None:
        pg = at_version(podgroup_obj("train", 4), "3")
        async with running(SERVED_137, objects={collection(SP): [pg]}) as live:
            await live.source.update_group_status(waiting(GroupRef("default", "train")))
            [(_, body)] = live.writer.patches
            assert set(body) == {"status"}
            assert live.writer.content_types == [MERGE]

    run(scenario())


def test_a_repeated_status_is_not_sent_again_and_a_failed_write_is_tried_again() -> None:
    async def scenario() -> None:
        async with running(
            SERVED_137,
            objects={collection(UPSTREAM): [at_version(upstream_podgroup_obj("t", 4), "4")]},
        ) as live:
            ref = GroupRef("default", "t", Dialect.UPSTREAM)
            path = f"{UPSTREAM}/namespaces/default/podgroups/t/status"
            live.writer.failing[path] = ApiError(500, "InternalError")
            await live.source.update_group_status(waiting(ref))
            del live.writer.failing[path]
            written = {
                "conditions": [initially_scheduled("False", "waiting for gang members: 1/4 exist")]
            }
            live.writer.answers[path] = at_version(
                upstream_podgroup_obj("t", 4, status=written), "5"
            )
            await live.source.update_group_status(waiting(ref))
            await live.source.update_group_status(waiting(ref))
            assert [p for p, _ in live.writer.patches] == [path]

    run(scenario())


# --- commit records, Events on the object, requeue ---------------------------------------


def record(key: str, *pods: str) -> CommitRecord:
    return CommitRecord(key, dict.fromkeys(pods, "n1"), {p: f"uid-{p}" for p in pods})


def test_a_gang_objects_commit_record_goes_on_it_and_a_workloads_on_its_pods() -> None:
    async def scenario() -> None:
        members = [
            pod_obj(f"w-{i}", workload_ref={"name": "train", "podGroup": "workers"})
            for i in range(2)
        ]
        discovery = {
            "/apis": group_list("scheduling.volcano.sh/v1beta1", "scheduling.k8s.io/v1alpha1"),
            VOLCANO: resource_list("podgroups"),
            WORKLOADS: resource_list("workloads"),
        }
        async with running(
            discovery,
            objects={
                collection(VOLCANO): [volcano_podgroup_obj("job", 2)],
                collection(WORKLOADS, "workloads"): [workload_obj("train", {"workers": 2})],
                PODS: members,
            },
        ) as live:
            await live.source.write_commit_record(record("volcano:default/job", "default/j-0"))
            await live.source.write_commit_record(
                record("upstream:default/train/workers", "default/w-0", "default/w-1")
            )
            written = [path for path, body in live.writer.patches if COMMIT_ANNOTATION in str(body)]
            assert written == [
                f"{VOLCANO}/namespaces/default/podgroups/job",
                "/api/v1/namespaces/default/pods/w-0",
                "/api/v1/namespaces/default/pods/w-1",
            ]

    run(scenario())


def test_a_commit_record_is_written_in_the_bind_lane_and_cleared_in_the_report_lane() -> None:
    # The held binds wait on the record; nothing waits on its removal.
    async def scenario() -> None:
        written = record("volcano:default/job", "default/j-0")
        annotations = {COMMIT_ANNOTATION: encode_commit_record(written, "2026-12-02T00:00:00Z")}
        discovery = {
            "/apis": group_list("scheduling.volcano.sh/v1beta1"),
            VOLCANO: resource_list("podgroups"),
        }
        job = volcano_podgroup_obj("job", 2, annotations=annotations)  # as the watch shows it
        async with running(discovery, objects={collection(VOLCANO): [job]}) as live:
            path = f"{VOLCANO}/namespaces/default/podgroups/job"
            await until("the record is seen", lambda: bool(live.source.commits.records()))
            await live.source.write_commit_record(written)
            await live.source.clear_commit_record(written.group_key)
            assert live.writer.lanes_of(path) == [Lane.BIND, Lane.REPORT]

    run(scenario())


def test_an_event_about_a_workloads_gang_goes_to_the_workload() -> None:
    async def scenario() -> None:
        async with running(
            SERVED_135,
            objects={collection(WORKLOADS, "workloads"): [workload_obj("train", {"ps": 1})]},
        ) as live:
            gang = GroupRef("default", "train", Dialect.UPSTREAM, "workers")
            await live.source.emit_group_event(gang, "InvalidGang", "no pod group", warning=True)
            [event] = live.writer.events("InvalidGang")
            assert event["involvedObject"] == {
                "apiVersion": "scheduling.k8s.io/v1alpha1",
                "kind": "Workload",
                "namespace": "default",
                "name": "train",
                "uid": "wl-default-train",
            }

    run(scenario())


def test_waiting_members_are_requeued_when_their_volcano_pod_group_appears() -> None:
    async def scenario() -> None:
        members = [pod_obj(f"j-{i}", volcano_group="job") for i in range(2)]
        async with running(SERVED_137, objects={PODS: members}) as live:
            live.api.add(collection(VOLCANO), volcano_podgroup_obj("job", 2))
            await until("PodGroup seen", lambda: live.state.group("volcano:default/job"))
            await live.settle()
            requeued = sorted(p for p, _ in live.writer.patches if p.startswith("/api/v1/"))
            assert requeued == [
                "/api/v1/namespaces/default/pods/j-0",
                "/api/v1/namespaces/default/pods/j-1",
            ]

    run(scenario())


def test_an_edited_min_count_requeues_the_members_too() -> None:
    async def scenario() -> None:
        members = [pod_obj(f"j-{i}", scheduling_group="job") for i in range(2)]
        async with running(
            SERVED_137,
            objects={PODS: members, collection(UPSTREAM): [upstream_podgroup_obj("job", 3)]},
        ) as live:
            live.api.modify(collection(UPSTREAM), upstream_podgroup_obj("job", 2))
            await until(
                "size seen",
                lambda: present(live.state.group("upstream:default/job")).min_member == 2,
            )
            await live.settle()
            assert len([p for p, _ in live.writer.patches if p.startswith("/api/v1/")]) == 2

    run(scenario())


# --- kube-scheduler's own gang scheduling --------------------------------------------------


def scheduler_config(*plugins_disabled: str) -> dict[str, Any]:
    profile: dict[str, Any] = {"schedulerName": "phalanx"}
    if plugins_disabled:
        disabled = [{"name": name} for name in plugins_disabled]
        profile["plugins"] = {"multiPoint": {"disabled": disabled}}
    return {"kind": "KubeSchedulerConfiguration", "profiles": [profile]}


@pytest.mark.parametrize(
    ("config", "said"),
    [(scheduler_config(), True), (scheduler_config("GangScheduling"), False)],
    ids=["native-gang-left-on", "native-gang-disabled"],
)
def test_a_profile_leaving_native_gang_scheduling_on_is_reported_at_start_and_on_each_gang(
    config: dict[str, Any], said: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="phalanx.sources.kube")

    async def scenario() -> None:
        gangs = [upstream_podgroup_obj("a", 2), upstream_podgroup_obj("b", 2)]
        async with running(SERVED_137, config, objects={collection(UPSTREAM): gangs}) as live:
            await asyncio.sleep(0.2)  # several re-discoveries: the start-up line stays one
            await live.settle()
            events = live.writer.events("NativeGangScheduling")
            assert sorted(e["involvedObject"]["name"] for e in events) == (
                ["a", "b"] if said else []
            )

    run(scenario())
    lines = [
        r for r in caplog.records if "does not disable its own GangScheduling" in r.getMessage()
    ]
    assert len(lines) == (1 if said else 0)


def test_without_kube_schedulers_configuration_phalanx_says_it_cannot_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="phalanx.sources.kube")

    async def scenario() -> None:
        async with running(SERVED_137) as live:
            await live.settle()
            assert live.writer.events("NativeGangScheduling") == []

    run(scenario())
    assert [r for r in caplog.records if "cannot check" in r.getMessage()]
