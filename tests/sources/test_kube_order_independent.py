"""The live source's model ends the same whatever order the watch events arrive in.

`test_clusterfile_order_independent` shows the model (ClusterState with the DRA model)
order-independent when fed through `ClusterFileSource`. The live source has its own path
to it: an informer per kind on its own thread, each posting its updates to the loop, and
loop-side steps of its own (a pending pod of another scheduler dropped, members asked
back when their gang object appears or changes, the gang objects held by key, the notes
on composite children). This property drives that path: the same varied cluster (with
pods of another scheduler), every object delivered as a watch event (ADDED, MODIFIED,
DELETED) on its kind's watch of a fake API server, in a drawn order and with
disturbances: the cluster-file property's (the object again, an earlier other version,
deleted and added again, replaced by one of another UID, an invalid version first) and
some only a watch shows (one of another UID added then deleted; a bound pod pending
first; a pending pod of the other scheduler under the name first). Some watches also end
with 410 Gone, their informer listing its collection again, and events before such a
relist may be missed by the watch (the relist finds what they did). Every object ends on
its last version; the model must then read as it does after the source started with
those last versions already listed (`summary`: what decisions read, as the cluster-file
property's `observed`, and the gang objects the source holds).

Deterministic delivery: the test sends one event at a time and waits for it to be
applied. A `CountingWatch` knows an event was handled when the informer asks for the
next line (the informer handles a line, posting its update to the loop with
`call_soon_threadsafe`, before it asks again); it then posts the test's wake-up the same
way, behind the update, so when the test resumes the update has run. So the order the
loop applies the events in is exactly the drawn one, and a failure replays. A relist is
known applied when its informer opens its next watch, which it does after posting the
list's update.
"""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from enum import Enum
from types import SimpleNamespace
from typing import Any, cast

import orjson
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from source_fakes import FakeApi, FakeWatch, RecordingWriter, group_list, resource_list, until

from builders import pod_obj
from phalanx.core.cache import ClusterState
from phalanx.sources.clusterfile import ClusterFileSource
from phalanx.sources.informer import Backoff, InformerSettings
from phalanx.sources.kube import KubeSource, KubeSourceSettings
from phalanx.sources.kube_dra import DRA_API, RESOURCES
from sources.test_clusterfile_order_independent import (
    AFTER_ITSELF,
    Disturbance,
    changed,
    cluster,
    differences,
    invalid,
    name_of,
    observed,
    replaced,
)

# Each example starts a source (its threads), delivers some 100 watch events and stops it
# (about 70 ms): some 2 s in all, every run drawing new orders. A longer hunt: raise it
# locally (500 examples with up to 40 disturbances each take under a minute).
EXAMPLES = 30

Obj = dict[str, Any]

# Where each kind is listed and watched, and the discovery answers that serve them all.
GANG_COLLECTIONS = {
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): "podgroups",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "podgroups",
    ("scheduling.run.ai/v2alpha2", "PodGroup"): "podgroups",
    ("scheduler.grove.io/v1alpha1", "PodGang"): "podgangs",
    ("scheduling.k8s.io/v1beta1", "PodGroup"): "podgroups",
    ("scheduling.k8s.io/v1alpha3", "CompositePodGroup"): "compositepodgroups",
    ("scheduling.k8s.io/v1alpha1", "Workload"): "workloads",
}
SERVED: dict[str, Any] = {
    "/apis": group_list(
        "scheduling.x-k8s.io/v1alpha1",
        "scheduling.volcano.sh/v1beta1",
        "scheduling.run.ai/v2alpha2",
        "scheduler.grove.io/v1alpha1",
        "scheduling.k8s.io/v1beta1",
        "scheduling.k8s.io/v1alpha3",
        "scheduling.k8s.io/v1alpha1",
    ),
    "/apis/scheduling.x-k8s.io/v1alpha1": resource_list("podgroups", "podgroups/status"),
    "/apis/scheduling.volcano.sh/v1beta1": resource_list("podgroups"),
    "/apis/scheduling.run.ai/v2alpha2": resource_list("podgroups", "podgroups/status"),
    "/apis/scheduler.grove.io/v1alpha1": resource_list("podgangs", "podgangs/status"),
    "/apis/scheduling.k8s.io/v1beta1": resource_list("podgroups", "podgroups/status"),
    "/apis/scheduling.k8s.io/v1alpha3": resource_list(
        "compositepodgroups", "compositepodgroups/status"
    ),
    "/apis/scheduling.k8s.io/v1alpha1": resource_list("workloads"),
    DRA_API: resource_list(*RESOURCES.values()),
}


def path_of(obj: Obj) -> str:
    """The collection `obj` is listed and watched at."""
    version, kind = obj["apiVersion"], obj["kind"]
    if version == "v1":
        return "/api/v1/nodes" if kind == "Node" else "/api/v1/pods"
    if kind in RESOURCES and version == DRA_API.removeprefix("/apis/"):
        return f"{DRA_API}/{RESOURCES[kind]}"
    return f"/apis/{version}/{GANG_COLLECTIONS[(version, kind)]}"


PATHS = sorted(
    {"/api/v1/nodes", "/api/v1/pods"}
    | {f"{DRA_API}/{r}" for r in RESOURCES.values()}
    | {f"/apis/{v}/{r}" for (v, _), r in GANG_COLLECTIONS.items()}
)


def live_cluster() -> list[Obj]:
    """The cluster-file property's cluster, with what only the live source tells apart:
    pods of another scheduler, one pending (not Phalanx's work: dropped) and one bound
    (its usage counts)."""
    return [
        *cluster(),
        pod_obj("theirs", 1, scheduler="default-scheduler"),
        pod_obj("theirs-run", 1, node="gpu-b", phase="Running", scheduler="default-scheduler"),
        pod_obj("theirs-sp", 1, group="sp", scheduler="default-scheduler"),
    ]


OBJECTS = live_cluster()

# ---- the fake API server, telling when an event has been applied ---------------------------


class CountingWatch(FakeWatch):
    """A watch whose every event, once handled, wakes the future `deliver` returned."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def deliver(self, kind: str, obj: Obj) -> asyncio.Future[None]:
        done: asyncio.Future[None] = self.loop.create_future()
        self.waiting.append(done)
        self.send(orjson.dumps({"type": kind, "object": obj}))
        return done

    def __iter__(self) -> Iterator[bytes]:
        for line in super().__iter__():
            yield line
            # Asked for the next line: this one is handled and its update posted.
            done = self.waiting.popleft()
            self.loop.call_soon_threadsafe(_wake, done)


def _wake(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class CountingApi(FakeApi):
    """The fake API server, with each collection's open watch, and `relist` to end one
    with 410 Gone (its informer lists again, then watches anew)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(SERVED)
        self.loop = loop
        self.open: dict[str, CountingWatch] = {}
        self.reopened: dict[str, asyncio.Future[None]] = {}

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> FakeWatch:
        stream = CountingWatch(self.loop)
        with self.lock:
            self.watches.setdefault(path, []).append(stream)
            self.open[path] = stream
            waiting = self.reopened.pop(path, None)
        if waiting is not None:  # the relist's update is posted: wake the test behind it
            self.loop.call_soon_threadsafe(_wake, waiting)
        return stream

    def store(self, path: str, kind: str, obj: Obj) -> str:
        """Make `obj` (deleted, if `kind` is DELETED) what a list of `path` answers; the
        watch event's type: ADDED, or MODIFIED for a name already there."""
        meta = obj["metadata"]
        with self.lock:
            items = self.collections.setdefault(path, [])
            same = [
                o
                for o in items
                if (o["metadata"]["name"], o["metadata"].get("namespace"))
                == (meta["name"], meta.get("namespace"))
            ]
            items[:] = [o for o in items if all(o is not s for s in same)]
            if kind != "DELETED":
                items.append(obj)
        return kind if kind == "DELETED" else "MODIFIED" if same else "ADDED"

    def relist(self, path: str) -> asyncio.Future[None]:
        reopened: asyncio.Future[None] = self.loop.create_future()
        with self.lock:
            self.reopened[path] = reopened
        self.open[path].send(orjson.dumps({"type": "ERROR", "object": {"code": 410}}))
        return reopened


FAST = KubeSourceSettings(
    crd_recheck_seconds=60.0,  # discovery once: nothing here changes what is served
    informer=InformerSettings(backoff=Backoff(initial_seconds=0.01, cap_seconds=0.05)),
)


@dataclass
class Live:
    api: CountingApi
    source: KubeSource
    state: ClusterState


async def started(listed: list[Obj]) -> Live:
    """A source over a fake API listing `listed`, synced, every watch open."""
    api = CountingApi(asyncio.get_running_loop())
    for obj in listed:
        api.add(path_of(obj), copy.deepcopy(obj))
    state = ClusterState()
    source = KubeSource(api, settings=FAST, writer=RecordingWriter())

    def sink(update: Callable[[ClusterState], None]) -> None:
        update(state)

    await source.start(sink)
    await until("synced", lambda: source.synced)
    await until("watching", lambda: set(PATHS) <= set(api.open))
    return Live(api, source, state)


def summary(live: Live) -> dict[str, object]:
    """What decisions read (the cluster-file property's `observed`), and what the live
    source keeps of its own beside the model: the gang objects it holds by key (kind, UID)
    and the notes it keeps on composite children."""
    seen = observed(cast(ClusterFileSource, SimpleNamespace(dra=live.source.dra.model)), live.state)
    seen["held gang objects"] = dict(live.source._objects)  # noqa: SLF001  # loop-side table
    seen["child notes"] = dict(live.source._child_notes)  # noqa: SLF001
    return seen


# ---- deliveries --------------------------------------------------------------------------


class Recreated(Enum):
    """Disturbances only a watch shows (beside the cluster-file property's)."""

    # An object of the same name and another UID, ADDED then DELETED (as a watch shows an
    # object deleted and created again), before the last version.
    GONE_REPLACED = "replaced, then deleted"
    # A bound (or finished) pod's earlier version, pending: how every bound pod began.
    WAS_PENDING = "was pending"
    # A pending pod of the same name, another UID and the other scheduler (Phalanx's for
    # another scheduler's pod, and the other way round), earlier; its delete missed.
    OTHER_SCHEDULER = "another scheduler's before"


def was_pending(obj: Obj) -> Obj:
    other = copy.deepcopy(obj)
    other["spec"].pop("nodeName", None)
    other["status"]["phase"] = "Pending"
    return other


def other_scheduler(obj: Obj) -> Obj:
    other = replaced(obj)
    spec = other["spec"]
    spec["schedulerName"] = "phalanx" if spec["schedulerName"] != "phalanx" else "elsewhere"
    return other


PODS = [i for i, obj in enumerate(OBJECTS) if obj["kind"] == "Pod"]
BOUND = [i for i in PODS if OBJECTS[i]["spec"].get("nodeName")]
PENDING = [i for i in PODS if not OBJECTS[i]["spec"].get("nodeName")]


@dataclass(frozen=True)
class Step:
    """One watch event: object `index` of OBJECTS as it is, or disturbed; `missed`: the
    API server has it, the watch never shows it (a relist of its kind comes later)."""

    index: int
    how: Disturbance | Recreated | None = None
    missed: bool = False

    def __str__(self) -> str:
        what = name_of(OBJECTS[self.index])
        what = what if self.how is None else f"{what} ({self.how.value})"
        return f"{what} (missed)" if self.missed else what

    @property
    def path(self) -> str:
        return path_of(OBJECTS[self.index])

    def event(self) -> tuple[str, Obj]:
        """The event's type (ADDED standing for ADDED or MODIFIED) and object."""
        obj = OBJECTS[self.index]
        if self.how is Recreated.GONE_REPLACED:
            return "DELETED", replaced(obj)
        if self.how is Recreated.WAS_PENDING:
            return "ADDED", was_pending(obj)
        if self.how is Recreated.OTHER_SCHEDULER:
            return "ADDED", other_scheduler(obj)
        if self.how is Disturbance.GONE:
            return "DELETED", copy.deepcopy(obj)
        if self.how is Disturbance.CHANGED:
            return "ADDED", changed(obj)
        if self.how is Disturbance.REPLACED:
            return "ADDED", replaced(obj)
        if self.how is Disturbance.INVALID:
            return "ADDED", invalid(obj)
        return "ADDED", copy.deepcopy(obj)


@dataclass(frozen=True)
class Relist:
    """The watch of `path` ends with 410 Gone: its informer lists the collection again."""

    path: str

    def __str__(self) -> str:
        return f"relist {self.path}"


@st.composite
def deliveries(draw: st.DrawFn, *, disturbances: int = 10, relists: int = 3) -> list[Step | Relist]:
    """As the cluster-file property's: every object in some order, a few disturbances,
    each object ending on its last version; then a few relists, some events before
    each on its collection missed by the watch (the relist finds what they did)."""
    return with_relists(draw, ordered(draw, disturbances), relists)


def ordered(draw: st.DrawFn, disturbances: int) -> list[Step]:
    steps = [Step(i) for i in draw(st.permutations(range(len(OBJECTS))))]
    for _ in range(draw(st.integers(0, disturbances))):
        how = draw(st.sampled_from([*Disturbance, *Recreated]))
        index = draw(
            st.sampled_from(BOUND)
            if how is Recreated.WAS_PENDING
            else st.sampled_from(PENDING)
            if how is Recreated.OTHER_SCHEDULER
            else st.integers(0, len(OBJECTS) - 1)
        )
        if how is Disturbance.AGAIN:
            steps.insert(draw(st.integers(0, len(steps))), Step(index))
            continue
        last = max(at for at, step in enumerate(steps) if step == Step(index))
        at = draw(st.integers(0, last))
        steps.insert(at, Step(index, how))
        if how in AFTER_ITSELF:
            steps.insert(draw(st.integers(0, at)), Step(index))
        if how is Recreated.GONE_REPLACED:  # the replacement first, then its delete
            steps[at] = Step(index, Disturbance.REPLACED)
            steps.insert(draw(st.integers(at + 1, last + 1)), Step(index, how))
    return steps


def with_relists(draw: st.DrawFn, steps: list[Step], relists: int) -> list[Step | Relist]:
    out: list[Step | Relist] = list(steps)
    for _ in range(draw(st.integers(0, relists))):
        out.insert(draw(st.integers(0, len(out))), Relist(draw(st.sampled_from(PATHS))))
    missed = draw(st.sets(st.integers(0, len(out) - 1), max_size=12))
    for at in sorted(missed):
        step = out[at]
        if isinstance(step, Step) and Relist(step.path) in out[at + 1 :]:
            out[at] = replace(step, missed=True)
    return out


async def delivered(steps: list[Step | Relist]) -> dict[str, object]:
    """Start empty, then every step as a watch event (or a relist), each applied before
    the next."""
    live = await started([])
    try:
        for step in steps:
            if isinstance(step, Relist):
                await asyncio.wait_for(live.api.relist(step.path), 5.0)
                continue
            kind, obj = step.event()
            kind = live.api.store(step.path, kind, obj)
            if not step.missed:
                await asyncio.wait_for(live.api.open[step.path].deliver(kind, obj), 5.0)
        return summary(live)
    finally:
        await live.source.stop()


async def listed() -> dict[str, object]:
    """The canonical model: every object's last version listed when the source starts."""
    live = await started(OBJECTS)
    try:
        return summary(live)
    finally:
        await live.source.stop()


_CANONICAL: list[dict[str, object]] = []


def canonical() -> dict[str, object]:
    if not _CANONICAL:
        _CANONICAL.append(asyncio.run(listed()))
    return _CANONICAL[0]


def test_the_listed_cluster_is_the_varied_cluster_meant() -> None:
    want = canonical()
    pods, gangs = want["pods"], want["gangs"]
    assert isinstance(pods, dict)
    assert isinstance(gangs, dict)
    assert "default/theirs" not in pods  # another scheduler's pending pod is not ours
    assert pods["default/theirs-run"]["bound to"] == "gpu-b"
    assert gangs["default/sp"]["resolution"][0] == "resolved"
    assert gangs["composite:default/ray"]["members"] == ["ray-0", "ray-1", "ray-2"]
    assert gangs["grove:default/gg"]["members"] == ["gw-0", "gw-1"]
    assert pods["default/team-0"]["demand"] is not None
    assert want["held gang objects"]


def test_every_object_delivered_once_in_list_order_reads_as_listed() -> None:
    got = asyncio.run(delivered([Step(i) for i in range(len(OBJECTS))]))
    assert differences(got, canonical()) == []


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(deliveries())
def test_the_live_model_ends_the_same_whatever_order_the_watch_events_arrive_in(
    steps: list[Step | Relist],
) -> None:
    note("delivered: " + ", ".join(map(str, steps)))
    assert differences(asyncio.run(delivered(steps)), canonical()) == []
