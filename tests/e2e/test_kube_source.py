"""The live-cluster source against a real kube-apiserver: sync and readiness, watches,
annotation-only mode, pods/binding, commit records, Events, PodGroup status, an apiserver
restart, a relist after 410 Gone, garbage objects, the roll-forward Lease and roll-forward
itself."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import orjson
import pytest
from podgroup_crd import CRD_NAME, CRDS, PG_API, ensure_pod_group_crd, remove_pod_group_crd

from builders import present
from phalanx.core.cache import ClusterState
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.journal import Outcome
from phalanx.core.model import Binding, GroupRef, Pod, PodRef
from phalanx.core.rollforward import COMMIT_ANNOTATION, CommitRecord, Verdict
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.service.metrics import Metrics
from phalanx.service.rollforward import RollForward, RollForwardSettings
from phalanx.sources.base import BindError
from phalanx.sources.informer import (
    Backoff,
    Delete,
    Informer,
    InformerSettings,
    Invalid,
    Transport,
    Upsert,
    WatchStream,
)
from phalanx.sources.kube import KubeSource, KubeSourceSettings
from phalanx.sources.kube_commits import Recorded
from phalanx.sources.kubeclient import KubeClient
from phalanx.sources.lease import LeaseHolder, LeaseSettings

pytestmark = pytest.mark.e2e

T = TypeVar("T")


def roll_forward(live: Any, settings: RollForwardSettings) -> RollForward:
    """A roll-forward of the live extender's own parts, with test settings."""
    ext = live.extender
    return RollForward(
        ext.state,
        ext.planner,
        ext.binder,
        ext.reporter,
        source=live.source,
        settings=settings,
        synced=lambda: live.source.synced,
        clock=ext.clock,
        wall_clock=ext.reporter.wall_clock,
    )


FAST = KubeSourceSettings(
    crd_recheck_seconds=0.5,
    event_interval_seconds=30.0,
    # These specs pin what one status write says; with a window the Reporter's own status
    # of the same gang, decided in that second, would replace the one a spec hands in. The
    # window is specified in tests/sources/test_kube_reports.py, runs at its default in
    # every deployed Phalanx of the e2e tier, and its writes are counted by the API server
    # in the bench (bench/results/2026-12-06-status-coalesce.md).
    status_coalesce_seconds=0.0,
    informer=InformerSettings(backoff=Backoff(initial_seconds=0.1, cap_seconds=1.0)),
    lease=LeaseSettings(retry_period_seconds=0.5),
)


# ---- the cluster side ---------------------------------------------------------------------


@pytest.fixture
def crd(control_plane: launcher.ControlPlane) -> None:
    ensure_pod_group_crd(control_plane)


def create(cp: launcher.ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = cp.request("POST", path, body)
    assert status == 201, answer
    assert isinstance(answer, dict)
    return answer


def make_pod(
    cp: launcher.ControlPlane,
    namespace: str,
    name: str,
    *,
    gpus: int = 1,
    scheduler: str = "phalanx",
    node: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "1"} if gpus else {"cpu": "1"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "fake",
                "resources": {"requests": resources, "limits": resources},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }
    return create(cp, f"/api/v1/namespaces/{namespace}/pods", body)


def make_pod_group(
    cp: launcher.ControlPlane,
    namespace: str,
    name: str,
    min_member: int,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    body = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"minMember": min_member},
    }
    return create(cp, f"{PG_API}/namespaces/{namespace}/podgroups", body)


def get(cp: launcher.ControlPlane, path: str) -> dict[str, Any]:
    status, answer = cp.request("GET", path)
    assert status == 200, answer
    assert isinstance(answer, dict)
    return answer


def events_about(cp: launcher.ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    items = get(cp, f"/api/v1/namespaces/{namespace}/events")["items"]
    return [
        e
        for e in items
        if e["involvedObject"]["name"] == name and e.get("reportingComponent") == "phalanx"
    ]


# ---- Phalanx, running on a loop of its own -------------------------------------------------


class Live:
    """An Extender over a KubeSource, its event loop on a background thread."""

    def __init__(
        self,
        cp: launcher.ControlPlane,
        namespace: str,
        settings: KubeSourceSettings = FAST,
        service: ServiceSettings | None = None,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.metrics = Metrics()
        self.source = KubeSource(
            KubeClient.from_kubeconfig(cp.kubeconfig),
            namespace=namespace,
            metrics=self.metrics,
            settings=settings,
        )
        self.extender = Extender(self.source, service, metrics=self.metrics)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def look(self, fn: Callable[[ClusterState], T]) -> T:
        """`fn(state)` evaluated on the loop (the model's only writer)."""

        async def call() -> T:
            return fn(self.extender.state)

        return self.run(call())

    def wait(self, what: str, fn: Callable[[ClusterState], Any], timeout: float = 20) -> Any:
        return launcher.wait_for(what, lambda: self.look(fn), timeout=timeout)

    def start(self) -> Live:
        self.run(self.extender.start())
        launcher.wait_for("source synced", lambda: self.source.synced, timeout=30)
        return self

    def stop(self) -> None:
        self.run(self.extender.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def live(control_plane: launcher.ControlPlane, namespace: str, crd: None) -> Iterator[Live]:
    phalanx = Live(control_plane, namespace).start()
    yield phalanx
    phalanx.stop()


def restarts(metrics: Metrics) -> float:
    return sum(
        s.value
        for m in metrics.registry.collect()
        if m.name == "phalanx_watch_restarts"
        for s in m.samples
        if s.name.endswith("_total")
    )


def watch_delays(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("phalanx_watch_delay_seconds_count") or 0.0


class HeldWatches:
    """An informer's transport whose watch the test takes down: `hold` closes the open watch
    and keeps the informer's next one waiting until `release`. Lists pass through, counted."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.lists = 0
        self.waiting = 0  # watch requests held back now
        self.held_from: list[str] = []  # the resourceVersion each held watch asked for
        self._released = threading.Event()
        self._released.set()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None

    @classmethod
    def around(cls, informer: Informer[Any]) -> HeldWatches:
        held = cls(informer.transport)
        informer.transport = held
        return held

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        with self._lock:
            self.lists += 1
        return self.inner.list(path, limit=limit, continue_token=continue_token)

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> WatchStream:
        while True:
            if not self._released.is_set():
                with self._lock:
                    self.waiting += 1
                    self.held_from.append(resource_version)
                self._released.wait()
                with self._lock:
                    self.waiting -= 1
            stream = self.inner.watch(
                path, resource_version=resource_version, timeout_seconds=timeout_seconds
            )
            with self._lock:
                if self._released.is_set():  # not held while it was being opened
                    self._stream = stream
                    return stream
            stream.close()

    def hold(self) -> None:
        with self._lock:
            self._released.clear()
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def release(self) -> None:
        self._released.set()


def too_old(cp: launcher.ControlPlane, path: str, resource_version: str) -> bool:
    """Whether the API server refuses to watch `path` from `resource_version` with 410 Gone
    (as the answer's status, or as the stream's ERROR event)."""
    status, answer = cp.request(
        "GET", f"{path}?watch=true&resourceVersion={resource_version}&timeoutSeconds=1"
    )
    if status == 410:
        return True
    # One event is answered parsed; several, as the text of their lines.
    first = answer if isinstance(answer, dict) else {}
    return first.get("type") == "ERROR" and first["object"].get("code") == 410


# ---- tests --------------------------------------------------------------------------------


def test_without_the_crd_gangs_are_annotation_only_until_it_appears(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cp = control_plane
    remove_pod_group_crd(cp)
    gpu_nodes("kube-src-crd-0", gpus=4)
    caplog.set_level(logging.INFO, logger="phalanx.sources.kube")
    phalanx = Live(cp, namespace).start()
    try:
        assert phalanx.source.annotation_only
        assert phalanx.extender.ready  # ready without PodGroups: annotation-only mode
        time.sleep(1.5)  # several re-checks: still said only once
        said = [
            r
            for r in caplog.records
            if "CRD" in r.getMessage() and "not installed" in r.getMessage()
        ]
        assert len(said) == 1
        make_pod(
            cp,
            namespace,
            "solo-0",
            annotations={"phalanx.io/pod-group": "solo", "phalanx.io/min-member": "1"},
        )
        phalanx.wait("annotation-only member", lambda st: st.pod_by_key(namespace, "solo-0"))

        ensure_pod_group_crd(cp)
        make_pod_group(cp, namespace, "train", 2)
        group = phalanx.wait(
            "PodGroup followed", lambda st: st.group(f"{namespace}/train"), timeout=30
        )
        assert group.min_member == 2
        assert not phalanx.source.annotation_only
    finally:
        phalanx.stop()
        ensure_pod_group_crd(cp)


def test_the_crd_watch_reads_each_crd_as_its_metadata_only(
    control_plane: launcher.ControlPlane, crd: None
) -> None:
    """What the source's watch on CustomResourceDefinitions asks for: no schemas, on the list
    and on the watch (whose first events, from no resourceVersion, are the CRDs there)."""
    api = KubeClient.from_kubeconfig(control_plane.kubeconfig)
    try:
        client = api.metadata()
        page = orjson.loads(client.list(CRDS, limit=500, continue_token=""))
        stream = client.watch(CRDS, resource_version="", timeout_seconds=1)
        try:
            first = orjson.loads(next(line for line in stream if line.strip()))
        finally:
            stream.close()
    finally:
        api.close()
    assert page["kind"] == "PartialObjectMetadataList"
    assert CRD_NAME in {item["metadata"]["name"] for item in page["items"]}
    assert all(set(item) <= {"kind", "apiVersion", "metadata"} for item in page["items"])
    assert first["type"] == "ADDED"
    assert first["object"]["kind"] == "PartialObjectMetadata"
    assert "spec" not in first["object"]


def test_the_source_syncs_then_follows_nodes_pods_and_pod_groups(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    crd: None,
) -> None:
    cp = control_plane
    gpu_nodes("kube-src-sync-0", gpus=8)
    make_pod(cp, namespace, "early", gpus=1)
    phalanx = Live(cp, namespace)
    assert not phalanx.extender.ready
    phalanx.start()
    try:
        assert phalanx.look(lambda st: st.node("kube-src-sync-0") is not None)
        assert phalanx.look(lambda st: st.pod_by_key(namespace, "early") is not None)

        gpu_nodes("kube-src-sync-1", gpus=4, wait_ready=False)
        phalanx.wait("new node", lambda st: st.node("kube-src-sync-1"))
        make_pod_group(cp, namespace, "g", 3)
        make_pod(cp, namespace, "member", labels={"scheduling.x-k8s.io/pod-group": "g"})
        phalanx.wait(
            "member", lambda st: [p.name for p in st.members(f"{namespace}/g")] == ["member"]
        )
        cp.core_v1().delete_namespaced_pod("member", namespace, grace_period_seconds=0)
        phalanx.wait("member deleted", lambda st: st.pod_by_key(namespace, "member") is None)
        cp.request("DELETE", f"{PG_API}/namespaces/{namespace}/podgroups/g")
        phalanx.wait("group deleted", lambda st: st.group(f"{namespace}/g") is None)
    finally:
        phalanx.stop()


def test_other_schedulers_pods_count_when_bound_and_are_never_pending_work(
    control_plane: launcher.ControlPlane,
    live: Live,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
) -> None:
    cp = control_plane
    gpu_nodes("kube-src-usage-0", gpus=8)
    make_pod(
        cp,
        namespace,
        "theirs-bound",
        gpus=3,
        scheduler="default-scheduler",
        node="kube-src-usage-0",
    )
    make_pod(cp, namespace, "theirs-pending", gpus=2, scheduler="default-scheduler")
    make_pod(cp, namespace, "ours-pending", gpus=2)
    live.wait("ours", lambda st: st.pod_by_key(namespace, "ours-pending"))
    live.wait(
        "their bound pod counted",
        lambda st: present(st.node("kube-src-usage-0")).requested.gpus() == 3,
    )
    assert live.look(lambda st: st.pod_by_key(namespace, "theirs-pending")) is None


def test_bind_creates_a_real_binding_and_maps_refusals(
    control_plane: launcher.ControlPlane,
    live: Live,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
) -> None:
    cp = control_plane
    gpu_nodes("kube-src-bind-0", gpus=8)
    gpu_nodes("kube-src-bind-1", gpus=8)
    uid = make_pod(cp, namespace, "p")["metadata"]["uid"]
    live.run(live.source.bind(Binding(PodRef(namespace, "p", uid), "kube-src-bind-0")))
    assert (
        get(cp, f"/api/v1/namespaces/{namespace}/pods/p")["spec"]["nodeName"] == "kube-src-bind-0"
    )
    live.wait(
        "binding seen",
        lambda st: present(st.pod_by_key(namespace, "p")).node_name == "kube-src-bind-0",
    )
    # Timed once, from the API server's answer to the pod watch showing it bound.
    assert watch_delays(live.metrics) == 1

    with pytest.raises(BindError) as conflict:
        live.run(live.source.bind(Binding(PodRef(namespace, "p", uid), "kube-src-bind-1")))
    assert conflict.value.conflict
    assert not conflict.value.gone

    with pytest.raises(BindError) as missing:
        live.run(live.source.bind(Binding(PodRef(namespace, "nobody", ""), "kube-src-bind-0")))
    assert missing.value.gone

    make_pod(cp, namespace, "q")
    with pytest.raises(BindError) as recreated:
        live.run(
            live.source.bind(
                Binding(PodRef(namespace, "q", "uid-of-an-older-q"), "kube-src-bind-0")
            )
        )
    assert recreated.value.gone  # the UID precondition failed: the pod we meant is gone
    assert watch_delays(live.metrics) == 1  # refused bindings are not timed


def test_commit_records_are_written_read_back_and_cleared(
    control_plane: launcher.ControlPlane, live: Live, namespace: str
) -> None:
    cp = control_plane
    make_pod_group(cp, namespace, "crd-gang", 1)
    live.wait("group", lambda st: st.group(f"{namespace}/crd-gang"))
    pods = {
        name: make_pod(cp, namespace, name)["metadata"]["uid"] for name in ("a-0", "a-1", "c-0")
    }
    key = f"{namespace}/crd-gang"
    record = CommitRecord(key, {f"{namespace}/c-0": "n1"}, {f"{namespace}/c-0": pods["c-0"]})
    live.run(live.extender.source.write_commit_record(record))
    notes = get(cp, f"{PG_API}/namespaces/{namespace}/podgroups/crd-gang")["metadata"][
        "annotations"
    ]
    assert '"placements":{"' + f"{namespace}/c-0" + '":"n1"}' in notes[COMMIT_ANNOTATION]
    assert '"at":"' in notes[COMMIT_ANNOTATION]

    for name in ("a-0", "a-1"):  # annotation-only gang members: the record goes on each
        cp.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {
                "metadata": {
                    "annotations": {"phalanx.io/pod-group": "ann", "phalanx.io/min-member": "2"}
                }
            },
            content_type="application/merge-patch+json",
        )
    ann = f"{namespace}/ann"
    live.wait("annotation gang", lambda st: len(st.members(ann)) == 2)
    placements = {f"{namespace}/a-0": "n1", f"{namespace}/a-1": "n2"}
    live.run(live.source.write_commit_record(CommitRecord(ann, placements, {})))
    for name in ("a-0", "a-1"):
        assert (
            COMMIT_ANNOTATION
            in get(cp, f"/api/v1/namespaces/{namespace}/pods/{name}")["metadata"]["annotations"]
        )

    def read_back() -> dict[str, CommitRecord] | None:
        found = live.look(lambda _: dict(live.source.commit_records()))
        return found if len(found) == 2 else None

    records = launcher.wait_for("records read back", read_back, timeout=20)
    assert records[key].placements == record.placements
    assert records[ann].placements == placements

    live.run(live.source.clear_commit_record(ann))
    live.run(live.source.clear_commit_record(key))
    for path in (
        f"/api/v1/namespaces/{namespace}/pods/a-0",
        f"/api/v1/namespaces/{namespace}/pods/a-1",
        f"{PG_API}/namespaces/{namespace}/podgroups/crd-gang",
    ):
        assert COMMIT_ANNOTATION not in (get(cp, path)["metadata"].get("annotations") or {})


def test_a_partly_written_annotation_record_is_taken_back(
    control_plane: launcher.ControlPlane, live: Live, namespace: str
) -> None:
    cp = control_plane
    make_pod(cp, namespace, "here-0")
    live.wait("pod", lambda st: st.pod_by_key(namespace, "here-0"))
    record = CommitRecord(
        f"{namespace}/half", {f"{namespace}/here-0": "n1", f"{namespace}/gone-1": "n1"}, {}
    )
    with pytest.raises(Exception, match="404"):
        live.run(live.source.write_commit_record(record))
    assert COMMIT_ANNOTATION not in get(cp, f"/api/v1/namespaces/{namespace}/pods/here-0")[
        "metadata"
    ].get("annotations", {})


def test_events_are_posted_and_rate_limited_per_object_and_reason(
    control_plane: launcher.ControlPlane, namespace: str, crd: None
) -> None:
    cp = control_plane
    settings = KubeSourceSettings(event_interval_seconds=1.0, crd_recheck_seconds=0.5)
    phalanx = Live(cp, namespace, settings).start()
    try:
        uid = make_pod(cp, namespace, "stuck")["metadata"]["uid"]
        phalanx.wait("pod", lambda st: st.pod_by_key(namespace, "stuck"))
        for _ in range(4):
            phalanx.run(
                phalanx.source.emit_event(
                    "Pod", namespace, "stuck", "WaitingForMembers", "1/4 exist"
                )
            )
        phalanx.run(
            phalanx.source.emit_event(
                "Pod", namespace, "stuck", "Unschedulable", "no room", warning=True
            )
        )
        events = {e["reason"]: e for e in events_about(cp, namespace, "stuck")}
        assert set(events) == {"WaitingForMembers", "Unschedulable"}
        waiting = events["WaitingForMembers"]
        assert waiting["count"] == 1
        assert waiting["type"] == "Normal"
        assert waiting["source"]["component"] == "phalanx"
        assert waiting["involvedObject"]["uid"] == uid
        assert events["Unschedulable"]["type"] == "Warning"

        time.sleep(1.1)
        phalanx.run(
            phalanx.source.emit_event("Pod", namespace, "stuck", "WaitingForMembers", "2/4 exist")
        )
        again = [
            e for e in events_about(cp, namespace, "stuck") if e["reason"] == "WaitingForMembers"
        ]
        assert len(again) == 1  # the same Event, its count aggregating the held repeats
        assert again[0]["count"] == 5
        assert again[0]["message"] == "2/4 exist"
    finally:
        phalanx.stop()


def test_pod_group_status_is_patched_with_phase_counts_and_condition(
    control_plane: launcher.ControlPlane, live: Live, namespace: str
) -> None:
    cp = control_plane
    make_pod_group(cp, namespace, "st", 2)
    key = f"{namespace}/st"
    live.wait("group", lambda st: st.group(key))
    path = f"{PG_API}/namespaces/{namespace}/podgroups/st"
    ref = GroupRef(namespace, "st")
    waiting = GroupStatus(
        ref,
        GroupPhase.PENDING,
        0,
        0,
        "waiting-for-members",
        "1/2 exist",
        schedule_start_time=1.7e9,
    )
    live.run(live.source.update_group_status(waiting))
    status = get(cp, path)["status"]
    assert status["phase"] == "Pending"
    assert status["scheduled"] == 0
    assert status["scheduleStartTime"] == "2023-11-14T22:13:20Z"
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodGroupScheduled",
        "False",
        "WaitingForMembers",
        "1/2 exist",
    )
    version = get(cp, path)["metadata"]["resourceVersion"]
    live.run(live.source.update_group_status(waiting))
    assert get(cp, path)["metadata"]["resourceVersion"] == version  # unchanged: not written again

    live.run(
        live.source.update_group_status(
            GroupStatus(ref, GroupPhase.SCHEDULED, 2, 0, "bound", "bound 2 together")
        )
    )
    status = get(cp, path)["status"]
    assert status["phase"] == "Scheduled"
    assert status["scheduled"] == 2
    assert status["conditions"][0]["status"] == "True"
    assert status["conditions"][0]["reason"] == "Bound"

    # An annotation-only gang has no object: nothing to write, and no error.
    live.run(
        live.source.update_group_status(
            GroupStatus(GroupRef(namespace, "nope"), GroupPhase.PENDING, 0, 0, "", "")
        )
    )


@pytest.mark.parametrize("graceful", [True, False], ids=["SIGTERM", "SIGKILL"])
def test_watches_recover_after_an_apiserver_restart(
    control_plane: launcher.ControlPlane,
    live: Live,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    graceful: bool,
) -> None:
    cp = control_plane
    group = f"{namespace}/held-{'term' if graceful else 'kill'}"
    make_pod_group(cp, namespace, group.split("/")[1], 2)
    live.wait("the PodGroup", lambda st: st.group(group))
    before = restarts(live.metrics)
    # The model is sampled all through the restart: the API server answers before it serves
    # its CRDs again, and the PodGroup must not be forgotten meanwhile.
    seen: list[bool] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            seen.append(live.look(lambda st: st.group(group) is not None))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        cp.restart_apiserver(graceful=graceful)
        name = f"kube-src-restart-{'term' if graceful else 'kill'}"
        gpu_nodes(name, gpus=2, wait_ready=False)
        make_pod(cp, namespace, "after-restart")
        live.wait("node after restart", lambda st: st.node(name), timeout=30)
        live.wait(
            "pod after restart", lambda st: st.pod_by_key(namespace, "after-restart"), timeout=30
        )
    finally:
        done.set()
        sampler.join(5)
    assert restarts(live.metrics) > before
    assert live.source.synced
    assert seen
    assert all(seen), f"the PodGroup was forgotten in {seen.count(False)} samples"


def test_a_watch_answered_410_gone_relists_and_hands_on_what_changed_while_it_was_down(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    crd: None,
) -> None:
    # The Node and Pod informers' watches are taken down (`HeldWatches`), a pod deleted, one
    # deleted and created again, one added and the node cordoned meanwhile, and the API
    # server restarted: its watch cache then starts from the present, and answers 410 Gone
    # to a watch from any older resourceVersion, as it does to a watch that fell out of its
    # window. Let go, the informers resume from where they were, are told 410 and relist.
    cp = control_plane
    node = "kube-src-gone-0"
    gpu_nodes(node, gpus=8)
    uids = {name: make_pod(cp, namespace, name)["metadata"]["uid"] for name in ("gone", "again")}
    phalanx = Live(cp, namespace)
    nodes = HeldWatches.around(phalanx.source.nodes)
    pods = HeldWatches.around(phalanx.source.pods)
    handed: list[Upsert[Recorded[Pod]] | Delete | Invalid] = []
    apply = phalanx.source.pods.handler

    def recorded(changes: Sequence[Upsert[Recorded[Pod]] | Delete | Invalid], synced: bool) -> None:
        handed.extend(changes)
        apply(changes, synced)

    phalanx.source.pods.handler = recorded

    def world(st: ClusterState) -> tuple[str, str, str, bool]:
        """The UIDs the model holds for pods `gone`, `again` and `added` ("": none), and
        whether it holds the node cordoned."""
        uid = {
            n: p.uid if (p := st.pod_by_key(namespace, n)) else ""
            for n in ("gone", "again", "added")
        }
        return uid["gone"], uid["again"], uid["added"], present(st.node(node)).node.unschedulable

    phalanx.start()
    try:
        # The Node and Pod watches go down; what changes meanwhile they do not see.
        for held in (nodes, pods):
            held.hold()
        launcher.wait_for(
            "both watches held", lambda: nodes.waiting == pods.waiting == 1, timeout=10
        )
        cp.core_v1().delete_namespaced_pod("gone", namespace, grace_period_seconds=0)
        cp.core_v1().delete_namespaced_pod("again", namespace, grace_period_seconds=0)
        again = make_pod(cp, namespace, "again")["metadata"]["uid"]  # a namesake, a new UID
        added = make_pod(cp, namespace, "added")["metadata"]["uid"]
        cp.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"spec": {"unschedulable": True}},
            content_type="application/merge-patch+json",
        )
        cp.restart_apiserver()
        # The versions the informers would resume from are too old now (once its watch cache
        # is initialised again).
        for path, held in (("/api/v1/nodes", nodes), ("/api/v1/pods", pods)):
            launcher.wait_for(
                f"410 Gone for a watch of {path} from {held.held_from[-1]}",
                partial(too_old, cp, path, held.held_from[-1]),
                timeout=30,
            )
        assert phalanx.look(world) == (uids["gone"], uids["again"], "", False)
        lists = (nodes.lists, pods.lists)
        since = len(handed)

        for held in (nodes, pods):
            held.release()
        phalanx.wait(
            "the model to hold what changed", lambda st: world(st) == ("", again, added, True)
        )
        for kind in ("Node", "Pod"):
            gone = phalanx.metrics.registry.get_sample_value(
                "phalanx_watch_restarts_total", {"kind": kind, "reason": "gone"}
            )
            assert (gone or 0) >= 1, kind  # the informer was told 410, and relisted
        assert nodes.lists > lists[0]
        assert pods.lists > lists[1]  # listed again: the relist
        # What the watches missed is handed on as it happened: the deleted pod as a delete,
        # the namesake as a delete of the old object, then the new one.
        after = handed[since:]
        assert Delete(f"{namespace}/gone", uids["gone"]) in after
        old = after.index(Delete(f"{namespace}/again", uids["again"]))
        new = next(
            i
            for i, c in enumerate(after)
            if isinstance(c, Upsert) and c.key == f"{namespace}/again" and c.uid == again
        )
        assert old < new
    finally:
        for held in (nodes, pods):
            held.release()
        phalanx.stop()


def test_garbage_objects_are_skipped_once_and_others_keep_flowing(
    control_plane: launcher.ControlPlane,
    live: Live,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cp = control_plane
    caplog.set_level(logging.WARNING, logger="phalanx.sources.kube")
    gpu_nodes(
        "kube-src-bad-node", gpus=8, labels={"nvidia.com/gpu.memory": "lots"}, wait_ready=False
    )
    make_pod(
        cp,
        namespace,
        "bad-pod",
        annotations={"phalanx.io/pod-group": "x", "phalanx.io/min-member": "abc"},
    )
    make_pod_group(cp, namespace, "bad-group", 2, annotations={"phalanx.io/placement": "diagonal"})
    gpu_nodes("kube-src-good-node", gpus=8, wait_ready=False)
    make_pod(cp, namespace, "good-pod")
    make_pod_group(cp, namespace, "good-group", 1)

    live.wait("good node", lambda st: st.node("kube-src-good-node"))
    live.wait("good pod", lambda st: st.pod_by_key(namespace, "good-pod"))
    live.wait("good group", lambda st: st.group(f"{namespace}/good-group"))
    assert live.look(lambda st: st.node("kube-src-bad-node")) is None
    bad_pod = live.wait("bad pod kept", lambda st: st.pod_by_key(namespace, "bad-pod"))
    assert "min-member" in bad_pod.invalid
    error = live.wait("group error", lambda st: st.group_error(f"{namespace}/bad-group"))
    assert "diagonal" in error

    # Touching the bad objects again says nothing new.
    cp.request(
        "PATCH",
        "/api/v1/nodes/kube-src-bad-node",
        {"metadata": {"labels": {"touched": "1"}}},
        content_type="application/merge-patch+json",
    )
    cp.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/bad-pod",
        {"metadata": {"labels": {"touched": "1"}}},
        content_type="application/merge-patch+json",
    )
    live.wait(
        "patched pod seen",
        lambda st: present(st.pod_by_key(namespace, "bad-pod")).labels.get("touched") == "1",
    )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invalid ")]
    for what in (
        "Node kube-src-bad-node",
        f"Pod {namespace}/bad-pod",
        f"PodGroup {namespace}/bad-group",
    ):
        assert sum(what in line for line in lines) == 1, lines
    for ns, name in (
        (namespace, "bad-pod"),
        (namespace, "bad-group"),
        ("default", "kube-src-bad-node"),
    ):
        found = launcher.wait_for(
            f"event on {name}", partial(events_about, cp, ns, name), timeout=20
        )
        assert [e["reason"] for e in found] == ["InvalidObject"]
        assert found[0]["type"] == "Warning"


def test_one_holder_of_the_roll_forward_lease_at_a_time(
    control_plane: launcher.ControlPlane, namespace: str
) -> None:
    settings = LeaseSettings(
        lease_duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=0.3
    )
    api = KubeClient.from_kubeconfig(control_plane.kubeconfig)
    first = LeaseHolder(api, namespace, identity="first", settings=settings)
    second = LeaseHolder(api, namespace, identity="second", settings=settings)
    first.start()
    try:
        launcher.wait_for("first holds", lambda: first.held, timeout=10)
        second.start()
        time.sleep(1.0)
        assert not second.held
        lease = get(control_plane, first.path)["spec"]
        assert lease["holderIdentity"] == "first"
        assert lease["leaseDurationSeconds"] == 15
        first.stop()  # releases: the successor need not wait out the lease
        launcher.wait_for("second takes over", lambda: second.held, timeout=5)
        assert get(control_plane, first.path)["spec"]["leaseTransitions"] == 1
    finally:
        first.stop()
        second.stop()


def two_node_gang(
    cp: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    name: str,
    size: int,
) -> dict[str, str]:
    """Nodes `kube-src-<name>-0` and `-1` (8 GPUs each), a PodGroup `name` of `size`, and its
    members `<name>-<i>` (2 GPUs each), pending; their UIDs by pod name."""
    gpu_nodes(f"kube-src-{name}-0", gpus=8)
    gpu_nodes(f"kube-src-{name}-1", gpus=8)
    make_pod_group(cp, namespace, name, size)
    label = {"scheduling.x-k8s.io/pod-group": name}
    return {
        n: make_pod(cp, namespace, n, gpus=2, labels=label)["metadata"]["uid"]
        for n in (f"{name}-{i}" for i in range(size))
    }


@pytest.mark.parametrize("carried", [True, False], ids=["carried-by-its-binding", "written-first"])
def test_roll_forward_binds_the_rest_of_a_gang_from_its_commit_record(
    control_plane: launcher.ControlPlane,
    live: Live,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    carried: bool,
) -> None:
    cp = control_plane
    name = "rf-carried" if carried else "rf"
    uids = two_node_gang(cp, namespace, gpu_nodes, name, 3)
    nodes = (f"kube-src-{name}-0", f"kube-src-{name}-0", f"kube-src-{name}-1")
    placements = {f"{namespace}/{name}-{i}": node for i, node in enumerate(nodes)}
    key = f"{namespace}/{name}"
    record = CommitRecord(key, placements, {f"{namespace}/{n}": u for n, u in uids.items()})
    first = f"{name}-0"
    group_path = f"{PG_API}/namespaces/{namespace}/podgroups/{name}"
    # What a Phalanx that died mid-gang leaves behind: one member bound, and the record on
    # it (its binding carried the record) or on the PodGroup (a record too long to carry).
    if not carried:
        live.run(live.source.write_commit_record(record))
    binding = Binding(PodRef(namespace, first, uids[first]), nodes[0])
    live.run(live.source.bind(binding, record=record if carried else None))
    pod = get(cp, f"/api/v1/namespaces/{namespace}/pods/{first}")
    assert pod["spec"]["nodeName"] == nodes[0]
    on_pod = (pod["metadata"].get("annotations") or {}).get(COMMIT_ANNOTATION, "")
    on_group = (get(cp, group_path)["metadata"].get("annotations") or {}).get(COMMIT_ANNOTATION)
    if carried:  # in the same write as the pod's node, and nothing written apart
        assert '"placements":{' in on_pod
        assert on_group is None
    else:
        assert on_pod == ""
        assert on_group is not None
    live.wait(
        "record and binding seen",
        lambda st: (
            key in live.source.commit_records()
            and present(st.pod_by_key(namespace, first)).node_name
        ),
    )
    assert live.look(lambda _: live.source.commit_records()[key].placements) == placements
    launcher.wait_for("lease", lambda: live.source.may_roll_forward, timeout=10)

    roller = roll_forward(live, RollForwardSettings(grace_seconds=0.0))
    (decision,) = live.run(roller.run_once())
    assert decision.verdict is Verdict.ROLL_FORWARD
    for i in (1, 2):
        assert (
            get(cp, f"/api/v1/namespaces/{namespace}/pods/{name}-{i}")["spec"]["nodeName"]
            == nodes[i]
        )
    assert (
        live.look(lambda _: live.extender.planner.journal.record(key).last_outcome)
        is Outcome.ROLLED_FORWARD
    )

    live.wait("bindings seen", lambda st: all(p.node_name for p in st.members(key)))
    (done,) = live.run(roller.run_once())
    assert done.verdict is Verdict.COMPLETE
    # Cleared from the PodGroup; a copy its binding carried stays on the pod, settled.
    assert COMMIT_ANNOTATION not in (get(cp, group_path)["metadata"].get("annotations") or {})
    pod = get(cp, f"/api/v1/namespaces/{namespace}/pods/{first}")
    assert (COMMIT_ANNOTATION in (pod["metadata"].get("annotations") or {})) is carried
    launcher.wait_for(
        "record gone",
        lambda: not live.look(lambda _: key in live.source.commit_records()),
        timeout=20,
    )
    assert live.run(roller.run_once()) == []


def test_roll_forward_releases_a_gang_whose_recorded_node_is_gone(
    control_plane: launcher.ControlPlane,
    live: Live,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
) -> None:
    cp = control_plane
    gpu_nodes("kube-src-rel-0", gpus=8)
    make_pod_group(cp, namespace, "rel", 2)
    label = {"scheduling.x-k8s.io/pod-group": "rel"}
    for n in ("rel-0", "rel-1"):
        make_pod(cp, namespace, n, labels=label)
    key = f"{namespace}/rel"
    record = CommitRecord(
        key, {f"{namespace}/rel-0": "kube-src-rel-0", f"{namespace}/rel-1": "kube-src-vanished"}, {}
    )
    live.run(live.source.write_commit_record(record))
    live.wait(
        "record seen", lambda st: key in live.source.commit_records() and len(st.members(key)) == 2
    )
    launcher.wait_for("lease", lambda: live.source.may_roll_forward, timeout=10)

    (decision,) = live.run(roll_forward(live, RollForwardSettings(grace_seconds=0.0)).run_once())
    assert decision.verdict is Verdict.RELEASE
    assert (
        get(cp, f"/api/v1/namespaces/{namespace}/pods/rel-0")["spec"].get("nodeName") is None
    )  # nothing bound
    found = launcher.wait_for(
        "release event", lambda: events_about(cp, namespace, "rel"), timeout=20
    )
    assert found[0]["reason"] == "ReservationReleased"
    assert "recorded node kube-src-vanished of pod" in found[0]["message"]
    assert COMMIT_ANNOTATION not in get(cp, f"{PG_API}/namespaces/{namespace}/podgroups/rel")[
        "metadata"
    ].get("annotations", {})


def test_a_new_instance_finishes_the_gang_a_dead_one_left_half_bound(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    crd: None,
) -> None:
    cp = control_plane
    gpu_nodes("kube-src-crash-0", gpus=8)
    names = ("ann-0", "ann-1")
    notes = {"phalanx.io/pod-group": "ann", "phalanx.io/min-member": "2"}
    uids = {n: make_pod(cp, namespace, n, annotations=notes)["metadata"]["uid"] for n in names}
    key = f"{namespace}/ann"
    placements = {f"{namespace}/{n}": "kube-src-crash-0" for n in names}
    first = Live(cp, namespace).start()
    try:  # the first instance writes the record on both members, binds one, and dies
        first.wait("members", lambda st: len(st.members(key)) == 2)
        first.run(first.source.write_commit_record(CommitRecord(key, placements, {})))
        first.run(
            first.source.bind(
                Binding(PodRef(namespace, "ann-0", uids["ann-0"]), "kube-src-crash-0")
            )
        )
    finally:
        first.stop()

    # The record is fresh: the new instance first leaves it to a barrier for the grace.
    fast = RollForwardSettings(interval_seconds=0.2, grace_seconds=2.0)
    second = Live(cp, namespace, service=ServiceSettings(roll_forward=fast)).start()
    try:
        bound = launcher.wait_for(
            "ann-1 bound by the new instance",
            lambda: get(cp, f"/api/v1/namespaces/{namespace}/pods/ann-1")["spec"].get("nodeName"),
            timeout=fast.grace_seconds + 20,
        )
        assert bound == "kube-src-crash-0"
        # Complete: settled, not taken back. The copies stay on the bound members (taking
        # them back costs a write each) and are no longer in force.
        launcher.wait_for(
            "record settled",
            lambda: not second.look(lambda _: key in second.source.commit_records()),
            timeout=20,
        )
        for n in names:
            notes_now = get(cp, f"/api/v1/namespaces/{namespace}/pods/{n}")["metadata"]
            assert COMMIT_ANNOTATION in notes_now["annotations"]
        assert second.look(lambda _: second.extender.partial_gangs()) == []
    finally:
        second.stop()
