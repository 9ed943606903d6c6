"""/healthz, /readyz, /metrics, /debug, and the metrics-only app."""

from __future__ import annotations

import httpx
import pytest
from api_harness import Phalanx, fixture_bytes, small_cluster
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp

from builders import (
    node_obj,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.api import create_app, create_metrics_app
from phalanx.service.extender import NOT_SYNCED, Extender
from phalanx.sources.clusterfile import ClusterFileSource

pytestmark = pytest.mark.anyio


def client_for(app: ASGIApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://phalanx")


async def test_healthz_is_ok_while_the_process_serves(phalanx: Phalanx) -> None:
    response = await phalanx.client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz_is_503_with_a_reason_until_the_extender_has_started() -> None:
    extender = Extender(ClusterFileSource(small_cluster()))
    app = create_app(extender)
    async with client_for(app) as client:
        before = await client.get("/readyz")
        async with app.router.lifespan_context(app):
            started = await client.get("/readyz")
        health = await client.get("/healthz")

    assert before.status_code == 503
    assert before.json()["status"] == "not ready"
    assert "not synced" in before.json()["reason"]
    assert started.status_code == 200
    assert started.json() == {"status": "ready"}
    assert health.status_code == 200


async def test_verbs_before_the_model_is_synced_answer_200_with_the_reason_in_error() -> None:
    # kube-scheduler sends a pod whose extender answered an Error to its backoff queue, and
    # retries it; a failed-node answer would park it.
    extender = Extender(ClusterFileSource(small_cluster()))
    app = create_app(extender)
    async with client_for(app) as client:
        body = fixture_bytes("filter_nodenames.json")
        headers = {"Content-Type": "application/json"}
        before = await client.post("/filter", content=body, headers=headers)
        async with app.router.lifespan_context(app):
            after = await client.post("/filter", content=body, headers=headers)

    assert before.status_code == 200
    assert before.json()["Error"] == NOT_SYNCED
    assert before.json()["NodeNames"] == []
    assert after.json()["Error"] == ""
    assert after.json()["NodeNames"] in (["gpu-a"], ["gpu-b"])  # the best fit


async def test_metrics_are_prometheus_text_with_request_durations(phalanx: Phalanx) -> None:
    await phalanx.post("filter", fixture_bytes("filter_nodenames.json"))

    response = await phalanx.client.get("/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    text = response.text
    assert 'phalanx_request_duration_seconds_count{result="ok",verb="filter"} 1.0' in text
    assert 'phalanx_request_duration_seconds_count{result="bad-request",verb="bind"} 0.0' in text
    assert "phalanx_cache_synced 1.0" in text


async def test_the_metrics_app_serves_metrics_and_probes_but_no_verbs(phalanx: Phalanx) -> None:
    async with client_for(create_metrics_app(phalanx.extender)) as client:
        metrics = await client.get("/metrics")
        healthz = await client.get("/healthz")
        readyz = await client.get("/readyz")
        other = await client.post("/filter", content=fixture_bytes("filter_nodenames.json"))
        wrong_method = await client.post("/metrics")

    assert healthz.json() == {"status": "ok"}
    assert readyz.json() == {"status": "ready"}
    assert metrics.status_code == 200
    assert metrics.headers["content-type"] == CONTENT_TYPE_LATEST
    assert "phalanx_request_duration_seconds" in metrics.text
    assert other.status_code == 404
    assert other.json() == {"error": "no such path: /filter"}
    assert wrong_method.status_code == 405


async def test_debug_lists_known_gangs_and_shows_one(phalanx: Phalanx) -> None:
    phalanx.source.apply(podgroup_obj("train", 2, namespace="team-a"))
    phalanx.source.apply(pod_obj("train-0", namespace="team-a", group="train"))

    listing = await phalanx.client.get("/debug/groups")
    one = await phalanx.client.get("/debug/groups/team-a/train")

    assert listing.status_code == 200
    assert [g["group"] for g in listing.json()["groups"]] == ["team-a/train"]
    assert one.status_code == 200
    assert one.json()["group"] == "team-a/train"
    assert one.json()["min_member"] == 2


async def test_debug_topology_shows_each_level_and_its_whole_domains(phalanx: Phalanx) -> None:
    response = await phalanx.client.get("/debug/topology")

    assert response.status_code == 200
    view = response.json()
    assert view["default"] == "default"
    (topology,) = view["topologies"]
    assert [row["level"] for row in topology["levels"]] == [
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/leaf",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    ]
    assert topology["nodes"] == len(list(phalanx.extender.state.nodes()))


ANNOTATED = {"phalanx.io/pod-group": "notes", "phalanx.io/min-member": "2"}
KUEUE_LABELS = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/pod-group-name": "k"}
KUEUE_COUNT = {"kueue.x-k8s.io/pod-group-total-count": "2"}
LWS_LABELS = {
    "leaderworkerset.sigs.k8s.io/name": "serve",
    "leaderworkerset.sigs.k8s.io/group-index": "0",
    "leaderworkerset.sigs.k8s.io/worker-index": "0",
}
LWS_ANNOTATIONS = {
    "leaderworkerset.sigs.k8s.io/size": "2",
    "phalanx.io/leaderworkerset-gang": "true",
}
YUNIKORN_LABELS = {"applicationId": "spark-pi"}
YUNIKORN_ANNOTATIONS = {
    "yunikorn.apache.org/task-group-name": "executor",
    "yunikorn.apache.org/task-groups": '[{"name": "executor", "minMember": 2}]',
}

# (objects declaring one gang, its key, its dialect, what declares it)
EVERY_DIALECT = [
    (
        [podgroup_obj("job", 2), pod_obj("job-0", group="job")],
        "default/job",
        "scheduler-plugins",
        "PodGroup",
    ),
    ([pod_obj("notes-0", annotations=ANNOTATED)], "default/notes", "annotations", "annotations"),
    (
        [pod_obj("orphan-0", group="orphan")],
        "default/orphan",
        "scheduler-plugins",
        "PodGroup missing",
    ),
    (
        [volcano_podgroup_obj("job", 2), pod_obj("v-0", volcano_group="job")],
        "volcano:default/job",
        "volcano",
        "PodGroup",
    ),
    (
        [upstream_podgroup_obj("job", 2), pod_obj("u-0", scheduling_group="job")],
        "upstream:default/job",
        "upstream",
        "PodGroup",
    ),
    (
        [
            workload_obj("train", {"workers": 2}),
            pod_obj("w-0", workload_ref={"name": "train", "podGroup": "workers"}),
        ],
        "upstream:default/train/workers",
        "upstream",
        "Workload",
    ),
    (
        [pod_obj("ghost-0", volcano_group="ghost")],
        "volcano:default/ghost",
        "volcano",
        "PodGroup missing",
    ),
    (
        [pod_obj("k-0", labels=KUEUE_LABELS, annotations=KUEUE_COUNT)],
        "kueue:default/k",
        "kueue",
        "annotations",
    ),
    (
        [pod_obj("serve-0", labels=LWS_LABELS, annotations=LWS_ANNOTATIONS)],
        "lws:default/serve-0",
        "lws",
        "annotations",
    ),
    (
        [pod_obj("exec-1", labels=YUNIKORN_LABELS, annotations=YUNIKORN_ANNOTATIONS)],
        "yunikorn:default/spark-pi",
        "yunikorn",
        "annotations",
    ),
]


@pytest.mark.parametrize(
    ("objects", "key", "dialect", "source"),
    EVERY_DIALECT,
    ids=[
        "scheduler-plugins",
        "annotations",
        "scheduler-plugins-object-missing",
        "volcano",
        "upstream-pod-group",
        "upstream-workload",
        "volcano-object-missing",
        "kueue",
        "lws",
        "yunikorn",
    ],
)
async def test_debug_addresses_a_gang_of_any_dialect_by_its_key_and_names_its_dialect(
    phalanx: Phalanx, objects: list[dict[str, object]], key: str, dialect: str, source: str
) -> None:
    for obj in objects:
        phalanx.source.apply(obj)

    listing = await phalanx.client.get("/debug/groups")
    one = await phalanx.client.get(f"/debug/groups/{key}")

    [summary] = [g for g in listing.json()["groups"] if g["group"] == key]
    assert (summary["dialect"], summary["source"]) == (dialect, source)
    assert one.status_code == 200
    assert (one.json()["group"], one.json()["dialect"], one.json()["source"]) == (
        key,
        dialect,
        source,
    )


async def test_a_pod_group_of_the_name_an_annotation_gang_uses_makes_it_scheduler_plugins(
    phalanx: Phalanx,
) -> None:
    """Annotation-only gangs share scheduler-plugins' keys: the PodGroup gives the settings."""
    phalanx.source.apply(pod_obj("notes-0", annotations=ANNOTATED))
    phalanx.source.apply(podgroup_obj("notes", 3))

    view = (await phalanx.client.get("/debug/groups/default/notes")).json()

    assert (view["dialect"], view["source"], view["min_member"]) == (
        "scheduler-plugins",
        "PodGroup",
        3,
    )


async def test_the_gang_view_names_members_refused_for_their_own_annotations(
    phalanx: Phalanx,
) -> None:
    """Their filter names the problem; the gang's view, built from the valid members and
    the PodGroup, says which members are refused and why instead of looking healthy."""
    phalanx.source.apply(podgroup_obj("notes", 2))
    labels = {"scheduling.x-k8s.io/pod-group": "notes"}
    phalanx.source.apply(pod_obj("notes-0", labels=labels))
    bogus = {"phalanx.io/placement": "bogus"}
    phalanx.source.apply(pod_obj("notes-1", labels=labels, annotations=bogus))

    view = (await phalanx.client.get("/debug/groups/default/notes")).json()

    assert list(view["invalid_members"]) == ["default/notes-1"]
    assert "phalanx.io/placement" in view["invalid_members"]["default/notes-1"]
    assert "bogus" in view["invalid_members"]["default/notes-1"]


async def test_debug_of_an_unknown_gang_is_404_with_a_reason(phalanx: Phalanx) -> None:
    response = await phalanx.client.get("/debug/groups/team-a/nope")
    other = await phalanx.client.get("/debug/groups/volcano:team-a/nope")

    assert response.status_code == 404
    assert response.json() == {"error": "gang team-a/nope is unknown"}
    assert other.json() == {"error": "gang volcano:team-a/nope is unknown"}


@pytest.mark.parametrize(
    "key",
    ["team-a", "team-a/", "volcano:team-a/job/extra", "Team_A/job", "team-a/job/workers"],
    ids=["no-name", "empty-name", "pod-group-outside-upstream", "bad-namespace", "sp-pod-group"],
)
async def test_debug_of_a_text_that_is_no_gang_key_is_400_naming_the_forms(
    phalanx: Phalanx, key: str
) -> None:
    response = await phalanx.client.get(f"/debug/groups/{key}")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith(f'"{key}" is not a gang key; keys are NAMESPACE/NAME'), error
    assert "volcano:NAMESPACE/NAME" in error


async def test_a_long_text_that_is_no_gang_key_is_cut_short_in_the_answer(
    phalanx: Phalanx,
) -> None:
    response = await phalanx.client.get(f"/debug/groups/{'x' * 5000}")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith(f'"{"x" * 80}…" is not a gang key'), error[:200]
    assert len(error) < 400


async def test_each_app_has_its_own_extender_and_nothing_is_shared() -> None:
    first = Extender(ClusterFileSource([node_obj("n1")]))
    second = Extender(ClusterFileSource([node_obj("n2")]))
    apps = [create_app(first), create_app(second)]
    async with (
        apps[0].router.lifespan_context(apps[0]),
        apps[1].router.lifespan_context(apps[1]),
        client_for(apps[0]) as c1,
    ):
        await c1.post("/filter", content=b"{}")

    assert (
        first.metrics.registry.get_sample_value(
            "phalanx_request_duration_seconds_count", {"verb": "filter", "result": "bad-request"}
        )
        == 1.0
    )
    assert (
        second.metrics.registry.get_sample_value(
            "phalanx_request_duration_seconds_count", {"verb": "filter", "result": "bad-request"}
        )
        == 0.0
    )


class BrokenDebug(Extender):
    def debug_groups(self) -> list[dict[str, object]]:
        raise RuntimeError("debug view broke")


async def test_a_failing_ops_route_is_a_json_500_and_the_server_goes_on() -> None:
    extender = BrokenDebug(ClusterFileSource(small_cluster()))
    app = create_app(extender)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://phalanx") as client,
    ):
        broken = await client.get("/debug/groups")
        health = await client.get("/healthz")

    assert broken.status_code == 500
    assert broken.json() == {"error": "internal error: RuntimeError: debug view broke"}
    assert health.status_code == 200
