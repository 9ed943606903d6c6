"""Gang workloads on the real control plane, and the invariant monitor that watches them.

Everything goes through the real API (admin credentials, JSON over HTTPS):

* :class:`Api` — a small JSON client (one connection pool per instance; not shared
  between threads);
* :class:`Scenario` — one test's world: its namespace, its own GPU nodes (labelled
  ``e2e.phalanx.io/pool=<namespace>``, which every pod of the test selects, so tests never
  compete for GPUs), PodGroups, labelled and annotation-only members, single pods, waits
  with timeouts and readable failure messages;
* :class:`InvariantMonitor` — a thread that lists the test's pods, PodGroups and nodes every
  ~100 ms and records every moment a gang has ``0 < bound < minMember`` and every node whose
  ``nvidia.com/gpu`` requests exceed its allocatable (DESIGN.md §6, the invariant). A gang
  passes through a short partial window while its bindings land one API call at a time;
  the monitor measures the longest window, and the verdict bounds it.

The fixtures that build these live in ``conftest_scheduling.py``.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
from phalanx_process import PhalanxProcess

from phalanx.core.groups import yunikorn
from phalanx.core.groups.composite import (
    CompositePodGroup,
    child_tree,
    gang_above,
    parse_composite,
)
from phalanx.core.groups.upstream import parse_pod_group
from phalanx.core.model import ChildGroups
from phalanx.core.quorum import fewest_members, task_shortfall

T = TypeVar("T")
Obj = dict[str, Any]

SCHEDULER_NAME = "phalanx"  # the chart's profile
GPU = "nvidia.com/gpu"
POOL_LABEL = "e2e.phalanx.io/pool"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
PG_API = "/apis/scheduling.x-k8s.io/v1alpha1"
UPSTREAM_API = "/apis/scheduling.k8s.io/v1beta1"
COMPOSITE_API = "/apis/scheduling.k8s.io/v1alpha3"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
ZONE_LABEL = "topology.kubernetes.io/zone"
TAG_LABEL_PREFIX = "tag.phalanx.io/"

# phalanx.io/* annotations (DESIGN.md §3)
A_POD_GROUP = "phalanx.io/pod-group"
A_MIN_MEMBER = "phalanx.io/min-member"
A_TIMEOUT = "phalanx.io/schedule-timeout-seconds"
A_PLACEMENT = "phalanx.io/placement"
A_PLAN = "phalanx.io/plan"
A_PLAN_NODE = "phalanx.io/plan-node"
A_COMMIT = "phalanx.io/commit"
A_VOLCANO_GROUP = "scheduling.k8s.io/group-name"
A_KAI_GROUP = "pod-group-name"  # KAI Scheduler's podgrouper
KAI_SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
GROVE_PODGANG_LABEL = "grove.io/podgang"  # Grove's operator
GROVE_PODCLIQUE_LABEL = "grove.io/podclique"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
A_KUEUE_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
A_LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
A_LWS_GANG = "phalanx.io/leaderworkerset-gang"
A_YUNIKORN_TASK_GROUP = yunikorn.TASK_GROUP_NAME_ANNOTATION
A_YUNIKORN_TASK_GROUPS = yunikorn.TASK_GROUPS_ANNOTATION

#: A gang's bindings are issued together; on this 2-core machine the last lands well
#: within this many seconds of the first.
MAX_PARTIAL_SECONDS = 2.0


class ApiError(AssertionError):
    """The API answered something the test did not expect."""


class Api:
    """JSON over HTTPS to the control plane's kube-apiserver as ``admin``."""

    def __init__(
        self, cp: launcher.ControlPlane, *, timeout: float = 10.0, patient: bool = False
    ) -> None:
        # patient: retry 429 (after its Retry-After) and 5xx answers, as client-go does, for a
        # test against an API server that is overloaded on purpose.
        self.patient = patient
        context = ssl.create_default_context(cafile=str(cp.ca_file))
        self._http = httpx.Client(
            base_url=cp.server,
            verify=context,
            headers={"Authorization": f"Bearer {cp.admin_token}", "Accept": "application/json"},
            timeout=timeout,
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        expect: Iterable[int] = (200, 201),
    ) -> Obj:
        headers = {"Content-Type": content_type} if body is not None else {}
        for attempt in range(40 if self.patient else 1):
            answer = self._http.request(
                method,
                path,
                content=json.dumps(body).encode() if body is not None else None,
                params=params,
                headers=headers,
            )
            if not self.patient or (answer.status_code != 429 and answer.status_code < 500):
                break
            time.sleep(float(answer.headers.get("Retry-After") or 0) or 0.05 * (attempt + 1))
        if answer.status_code not in set(expect):
            raise ApiError(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        try:
            data = answer.json()
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {"value": data}

    def get(self, path: str, **params: str) -> Obj:
        return self.call("GET", path, params=params or None)

    def items(self, path: str, **params: str) -> list[Obj]:
        items: list[Obj] = self.get(path, **params).get("items") or []
        return items

    def create(self, path: str, body: Obj) -> Obj:
        return self.call("POST", path, body, expect=(201,))

    def merge_patch(self, path: str, body: Obj) -> Obj:
        return self.call("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, **params: str) -> None:
        self.call("DELETE", path, params=params or None, expect=(200, 202, 404))

    def watch(self, path: str, stop: threading.Event, **params: str) -> Iterable[Obj]:
        """The watch events on ``path`` (its list's ``resourceVersion`` on), until ``stop``
        is set and the server ends a 1 s window."""
        version = self.get(path, **params)["metadata"]["resourceVersion"]
        while not stop.is_set():
            query = {**params, "watch": "1", "timeoutSeconds": "1", "resourceVersion": version}
            with self._http.stream("GET", path, params=query) as answer:
                for line in answer.iter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    yield event


class PodWatch:
    """Every version of the namespace's pods the API showed while open (own thread, own
    connection): what polling would miss between two samples."""

    def __init__(self, cp: launcher.ControlPlane, namespace: str) -> None:
        self.api = Api(cp, timeout=5.0)
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.seen: list[Obj] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def _run(self) -> None:
        for event in self.api.watch(self.path, self._stop):
            self.seen.append(event["object"])

    def __enter__(self) -> PodWatch:
        self._thread.start()
        time.sleep(0.3)  # the initial list is in before the test acts
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.api.close()

    def versions(self, name: str) -> list[Obj]:
        return [p for p in self.seen if p["metadata"]["name"] == name]


# ---- object builders ---------------------------------------------------------------------


def resources(gpus: int, cpu: str = "100m", memory: str = "256Mi") -> Obj:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)  # extended resources: requests == limits
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def pod_body(
    name: str,
    *,
    gpus: int,
    node_selector: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gated: bool = False,
    scheduler: str = SCHEDULER_NAME,
) -> Obj:
    spec: Obj = {
        "schedulerName": scheduler,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": dict(node_selector),
        "containers": [{"name": "main", "image": "fake-image", "resources": resources(gpus)}],
    }
    if gated:
        # kube-scheduler leaves a gated pod alone; Phalanx counts it as an existing member.
        spec["schedulingGates"] = [{"name": "e2e.phalanx.io/held"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def owned_by_job(body: Obj, job: str) -> Obj:
    """``body`` (a pod) naming Job ``job`` as its owner: kwok's pod-complete stage then
    completes it once it runs. The Job need not exist: no garbage collector runs here."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": str(uuid.uuid4())}
    body["metadata"]["ownerReferences"] = [owner]
    return body


def bound_node(pod: Obj) -> str:
    node: str = pod.get("spec", {}).get("nodeName") or ""
    return node


# A node label standing for racks in the topology specs of several dialects.
RACK = "example.com/rack"


def racks(sc: Scenario, *sizes: int, gpus: int = 8) -> dict[str, str]:
    """Racks r0, r1, ... of `sizes` nodes of `gpus` GPUs (label values unique to the test's
    namespace), ready: each node's rack."""
    rack_of = {}
    for r, size in enumerate(sizes):
        for i in range(size):
            name = sc.node(f"{r}-{i}", gpus, labels={RACK: f"{sc.namespace}-r{r}"})
            rack_of[name] = f"r{r}"
    sc.nodes_ready()
    return rack_of


def domains_of_roles(
    roles: Mapping[str, Sequence[str]], where: Mapping[str, str], domain_of: Mapping[str, str]
) -> set[str]:
    """The domains `roles`' pods were bound in (`where`: pod to node), each role's pods
    asserted to lie in one of them."""
    for role, pods in roles.items():
        assert len({domain_of[where[p]] for p in pods}) == 1, (role, where)
    return {domain_of[where[p]] for pods in roles.values() for p in pods}


def gpu_request(pod: Obj) -> int:
    """The device-plugin GPUs the pod holds on its node: none when kube-scheduler served
    its ``nvidia.com/gpu`` from DRA devices (KEP-5004; a claim it made holds them)."""
    if (pod.get("status") or {}).get("extendedResourceClaimStatus"):
        return 0
    total = 0
    for c in pod.get("spec", {}).get("containers") or []:
        requests = (c.get("resources") or {}).get("requests") or {}
        total += int(requests.get(GPU, 0))
    return total


def group_of(pod: Obj) -> str | None:
    """The pod's gang, as Phalanx keys it (without the namespace): a scheduler-plugins or
    annotation-only name, ``volcano:<name>``, ``kai:<name>``, ``grove:<name>``,
    ``kueue:<name>``, ``yunikorn:<application>`` (a pod naming a task group), ``lws:<leader>``
    (opted in), or
    ``upstream:<name>`` /
    ``upstream:<workload>/<pod group>``."""
    meta = pod.get("metadata", {})
    notes = meta.get("annotations") or {}
    label = (meta.get("labels") or {}).get(POD_GROUP_LABEL) or notes.get(A_POD_GROUP)
    if label:
        return str(label)
    if notes.get(A_VOLCANO_GROUP):
        return f"volcano:{notes[A_VOLCANO_GROUP]}"
    if notes.get(A_KAI_GROUP):
        return f"kai:{notes[A_KAI_GROUP]}"
    grove = (meta.get("labels") or {}).get(GROVE_PODGANG_LABEL)
    if grove:
        return f"grove:{grove}"
    kueue = (meta.get("labels") or {}).get(KUEUE_GROUP_LABEL)
    if kueue:
        return f"kueue:{kueue}"
    app = yunikorn.application_id(meta.get("labels") or {}, notes)
    if notes.get(A_YUNIKORN_TASK_GROUP) and app:
        return f"yunikorn:{app[1]}"
    lws = (meta.get("labels") or {}).get(LWS_NAME_LABEL)
    if lws and notes.get(A_LWS_GANG) == "true":
        return f"lws:{lws}-{meta['labels'].get(LWS_GROUP_INDEX_LABEL)}"
    spec = pod.get("spec") or {}
    if spec.get("schedulingGroup"):
        return f"upstream:{spec['schedulingGroup'].get('podGroupName')}"
    if spec.get("workloadRef"):
        ref = spec["workloadRef"]
        return f"upstream:{ref.get('name')}/{ref.get('podGroup')}"
    return None


@dataclass(frozen=True)
class Gang:
    name: str
    members: tuple[str, ...]
    min_member: int
    gpus: int  # per member
    form: str  # "podgroup" | "annotations"
    placement: str | None = None
    timeout_seconds: int | None = None
    plan_nodes: tuple[str, ...] | None = None
    member_annotations: Mapping[str, str] = field(default_factory=dict)


# ---- the invariant monitor ----------------------------------------------------------------

#: What makes a gang whole: its minMember, or a composite gang's tree of child groups
#: (minGroupCount children, each with its own minCount; ``phalanx.core.quorum``).
Quorum = int | ChildGroups


@dataclass(frozen=True)
class Member:
    """A bound member as the quorum counts it: its task is its PodGroup (for a composite)."""

    task: str


@dataclass(frozen=True)
class Count:
    bound: int
    minimum: int  # the fewest bound members that can make the quorum; 0: not known
    whole: bool  # the bound members make the quorum


def gang_counts(pods: Sequence[Obj], quorums: Mapping[str, Quorum]) -> dict[str, Count]:
    """Per gang (a ``group_of`` key), how many of its pods are bound and whether they make
    its quorum: ``quorums``, else the pods' ``phalanx.io/min-member`` (Kueue's total count
    for a Kueue gang, the sum of the task groups' minima for a YuniKorn one), else not known
    (``minimum`` 0). A composite gang (key ``composite:<name>``, its quorum a
    ``ChildGroups``) is one gang of the pods of every PodGroup beneath it, as Phalanx gangs
    it: those pods count toward it, never toward their own PodGroup."""
    above = {
        f"upstream:{name}": gang
        for gang, quorum in quorums.items()
        if isinstance(quorum, ChildGroups)
        for name, _ in quorum.pod_groups()
    }
    bound: dict[str, list[Member]] = {}
    need: dict[str, Quorum] = {}
    for pod in pods:
        own = group_of(pod)
        if not own:
            continue
        gang = above.get(own, own)
        members = bound.setdefault(gang, [])
        if bound_node(pod):
            members.append(Member(own.removeprefix("upstream:")))
        if quorums.get(gang):
            need[gang] = quorums[gang]
        else:
            notes = pod["metadata"].get("annotations") or {}
            sizes = {"kueue": A_KUEUE_TOTAL_COUNT, "lws": A_LWS_SIZE}
            size_key = sizes.get(gang.partition(":")[0], A_MIN_MEMBER)
            text = notes.get(size_key, "")
            if gang.startswith("yunikorn:"):
                # The sum of the task groups' minima, on the members carrying the definition.
                text = str(yunikorn.declared_size(notes))
            if text.isdigit() and int(text) > 0:
                need.setdefault(gang, int(text))
    counts = {}
    for gang, members in bound.items():
        quorum = need.get(gang)
        if isinstance(quorum, ChildGroups):
            minimum = max(fewest_members(quorum), 1)
            whole = len(members) >= minimum and not task_shortfall(quorum, members)
        elif quorum:
            minimum, whole = quorum, len(members) >= quorum
        else:
            minimum, whole = 0, False
        counts[gang] = Count(len(members), minimum, whole)
    return counts


def composite_quorums(api: Api, namespace: str) -> dict[str, Quorum]:
    """For ``InvariantMonitor.gang_sizes`` on 1.37: every composite gang of the namespace
    (the topmost ``gang`` CompositePodGroup above a PodGroup) with its quorum, read by
    Phalanx's own parsers."""
    composites = {
        c.key: c
        for c in map(
            parse_composite, api.items(f"{COMPOSITE_API}/namespaces/{namespace}/compositepodgroups")
        )
    }
    groups = [
        parse_pod_group(g) for g in api.items(f"{UPSTREAM_API}/namespaces/{namespace}/podgroups")
    ]
    roots = {
        top.name: top
        for group in groups
        if isinstance(top := gang_above(group, composites.get), CompositePodGroup)
    }
    return {
        f"composite:{name}": child_tree(root, composites.values(), groups)
        for name, root in roots.items()
    }


@dataclass
class Window:
    """A gang seen partially bound from ``start`` (the sample that saw it) to ``end``.

    ``since`` is when the sample before began: the bindings that opened the window landed
    after it, so a test asking whether the window could hold a moment (a kill) starts there.
    """

    group: str
    start: float
    end: float | None = None
    bound: int = 0
    min_member: int = 0
    since: float = 0.0

    @property
    def seconds(self) -> float:
        return (self.end if self.end is not None else time.monotonic()) - self.start


@dataclass
class Overcommit:
    at: float
    node: str
    requested: int
    allocatable: int
    pods: tuple[str, ...]


@dataclass
class Verdict:
    samples: int
    failed_samples: int
    windows: list[Window]
    open_windows: list[Window]
    overcommits: list[Overcommit]
    seconds: float
    crashed: str = ""

    @property
    def max_partial_seconds(self) -> float:
        return max((w.seconds for w in self.windows + self.open_windows), default=0.0)

    def describe(self) -> str:
        longest = sorted(self.windows + self.open_windows, key=lambda w: -w.seconds)[:5]
        shown = [(w.group, round(w.seconds, 3), f"{w.bound}/{w.min_member}") for w in longest]
        return (
            f"{self.samples} samples over {self.seconds:.1f}s ({self.failed_samples} failed); "
            f"partial windows: {len(self.windows)} closed, {len(self.open_windows)} open; "
            f"longest: {shown}; "
            f"over-commits: {[(o.node, o.requested, o.allocatable) for o in self.overcommits[:5]]}"
        )

    def assert_clean(self, max_partial_seconds: float = MAX_PARTIAL_SECONDS) -> None:
        assert not self.crashed, f"the invariant monitor crashed: {self.crashed}"
        assert self.samples >= 1, "the invariant monitor took no sample"
        assert not self.overcommits, f"GPUs over-committed: {self.describe()}"
        assert not self.open_windows, f"a gang ended partially bound: {self.describe()}"
        assert self.max_partial_seconds < max_partial_seconds, (
            f"a gang stayed partially bound for {self.max_partial_seconds:.2f}s "
            f"(bound {max_partial_seconds}s): {self.describe()}"
        )


class InvariantMonitor:
    """Samples the API every ``interval`` seconds (own thread, own connection).

    A gang is *partial* when ``0 < bound < minMember`` and it has never been seen whole
    (a gang whose pods a test deletes after it ran is not partial: Phalanx's own
    ``phalanx_partial_gangs`` counts the same way). minMember comes from the PodGroup,
    else from ``phalanx.io/min-member``; a gang with neither is not judged. Gangs of other
    dialects are judged when a test adds their sizes: ``gang_sizes`` are callables
    ``(api, namespace) -> {group_of key: Quorum}`` asked at every sample; a composite gang
    (``composite_quorums``) is judged whole by its child groups (``gang_counts``).
    """

    def __init__(
        self, cp: launcher.ControlPlane, namespace: str, pool: str, interval: float = 0.1
    ) -> None:
        self.cp = cp
        self.namespace = namespace
        self.pool = pool
        self.interval = interval
        self.samples = 0
        self.failed_samples = 0
        self.windows: list[Window] = []
        self.open: dict[str, Window] = {}
        self.overcommits: list[Overcommit] = []
        self.whole: set[str] = set()
        self.last_error = ""
        self.crashed = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started_at = 0.0
        self._last_began = 0.0
        self.gang_sizes: list[Callable[[Api, str], Mapping[str, Quorum]]] = []

    def start(self) -> InvariantMonitor:
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="invariant-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        api = Api(self.cp, timeout=5.0)
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                self.sample(api)
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
        except Exception as exc:  # noqa: BLE001  # a monitor bug must fail the verdict, not vanish
            self.crashed = repr(exc)
        finally:
            api.close()

    def sample(self, api: Api) -> None:
        ns = self.namespace
        began = time.monotonic()
        try:
            groups: dict[str, Quorum] = {
                g["metadata"]["name"]: int((g.get("spec") or {}).get("minMember") or 0)
                for g in api.items(f"{PG_API}/namespaces/{ns}/podgroups")
            }
            for sizes in list(self.gang_sizes):
                groups.update(sizes(api, ns))
            pods = api.items(f"/api/v1/namespaces/{ns}/pods")
            nodes = api.items("/api/v1/nodes", labelSelector=f"{POOL_LABEL}={self.pool}")
        except Exception as exc:  # noqa: BLE001  # API down (a restart test): skip this sample
            with self._lock:
                self.failed_samples += 1
                self.last_error = repr(exc)
            return
        now = time.monotonic()
        with self._lock:
            self.samples += 1
            since, self._last_began = self._last_began or self._started_at, began
            self._judge_gangs(now, since, groups, pods)
            self._judge_nodes(now, nodes, pods)

    def _judge_gangs(
        self, now: float, since: float, groups: Mapping[str, Quorum], pods: Sequence[Obj]
    ) -> None:
        counts = gang_counts(pods, groups)
        for group, seen in counts.items():
            count, minimum = seen.bound, seen.minimum
            if not minimum:
                continue
            if seen.whole:
                self.whole.add(group)
            partial = count > 0 and not seen.whole and group not in self.whole
            window = self.open.get(group)
            if partial and window is None:
                self.open[group] = Window(group, now, bound=count, min_member=minimum, since=since)
            elif partial and window is not None:
                window.bound = count
            elif not partial and window is not None:
                window.end = now
                self.windows.append(self.open.pop(group))
        for group in [g for g in self.open if g not in counts]:  # every pod gone
            window = self.open.pop(group)
            window.end = now
            self.windows.append(window)

    def _judge_nodes(self, now: float, nodes: Sequence[Obj], pods: Sequence[Obj]) -> None:
        for node in nodes:
            name = node["metadata"]["name"]
            allocatable = int(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
            on_node = [p for p in pods if bound_node(p) == name]
            requested = sum(gpu_request(p) for p in on_node)
            if requested > allocatable:
                self.overcommits.append(
                    Overcommit(
                        now,
                        name,
                        requested,
                        allocatable,
                        tuple(p["metadata"]["name"] for p in on_node),
                    )
                )

    def stop(self) -> Verdict:
        """Stop sampling, take one last sample, and return what was seen (idempotent)."""
        if self._stop.is_set():
            return self.verdict()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        api = Api(self.cp, timeout=5.0)
        try:
            self.sample(api)
        finally:
            api.close()
        return self.verdict()

    def verdict(self) -> Verdict:
        with self._lock:
            return Verdict(
                samples=self.samples,
                failed_samples=self.failed_samples,
                windows=list(self.windows),
                open_windows=[
                    Window(w.group, w.start, None, w.bound, w.min_member, w.since)
                    for w in self.open.values()
                ],
                overcommits=list(self.overcommits),
                seconds=time.monotonic() - self._started_at,
                crashed=self.crashed,
            )


# ---- one test's world ---------------------------------------------------------------------


@dataclass
class Scenario:
    """A test's namespace, nodes and workloads (see the module docstring)."""

    cp: launcher.ControlPlane
    api: Api
    phalanx: PhalanxProcess
    namespace: str
    make_node: Callable[..., Obj]
    nodes: dict[str, int] = field(default_factory=dict)  # name -> GPUs
    gangs: dict[str, Gang] = field(default_factory=dict)
    monitor: InvariantMonitor = field(init=False)
    # The longest partial window the teardown verdict accepts (a test may widen it, and
    # must say why).
    max_partial_seconds: float = MAX_PARTIAL_SECONDS

    def __post_init__(self) -> None:
        self.monitor = InvariantMonitor(self.cp, self.namespace, self.pool)

    @property
    def pool(self) -> str:
        return self.namespace

    @property
    def selector(self) -> dict[str, str]:
        return {POOL_LABEL: self.pool}

    # ---- nodes ---------------------------------------------------------------------------

    def node(
        self,
        suffix: str,
        gpus: int = 8,
        *,
        labels: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> str:
        """A kwok GPU node in this test's pool (``<namespace>-<suffix>``); not yet waited for."""
        name = f"{self.namespace}-{suffix}"
        labels = {POOL_LABEL: self.pool, **(labels or {})}
        self.make_node(name, gpus=gpus, labels=labels, wait_ready=False, **kwargs)
        self.nodes[name] = gpus
        return name

    def nodes_ready(self, names: Iterable[str] | None = None, timeout: float = 30.0) -> None:
        """Wait until the nodes are Ready and Phalanx's model has them with all their GPUs."""
        names = list(names or self.nodes)
        for name in names:
            self.cp.wait_node_ready(name, timeout=timeout)

        def known() -> bool:
            samples = self.phalanx.scrape()
            for name in names:
                total = sum(
                    v
                    for (sample, labels), v in samples.items()
                    if sample == "phalanx_gpus" and ("node", name) in labels
                )
                if total != self.nodes[name]:
                    return False
            return True

        self.wait("Phalanx's model to hold the test's nodes", known, timeout=timeout)

    def cordon(self, node: str, unschedulable: bool = True) -> None:
        self.api.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": unschedulable}})

    # ---- workloads -----------------------------------------------------------------------

    def pod_group(
        self,
        name: str,
        min_member: int,
        *,
        placement: str | None = None,
        plan: Any = None,
        timeout_seconds: int | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> Obj:
        notes = dict(annotations or {})
        if placement is not None:
            notes[A_PLACEMENT] = placement
        if plan is not None:
            notes[A_PLAN] = plan if isinstance(plan, str) else json.dumps(plan)
        spec: Obj = {"minMember": min_member}
        if timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = timeout_seconds
        return self.api.create(
            f"{PG_API}/namespaces/{self.namespace}/podgroups",
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name, "annotations": notes},
                "spec": spec,
            },
        )

    def pod(
        self,
        name: str,
        gpus: int = 1,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        gated: bool = False,
        node_selector: Mapping[str, str] | None = None,
    ) -> Obj:
        body = pod_body(
            name,
            gpus=gpus,
            node_selector={**self.selector, **(node_selector or {})},
            labels=labels,
            annotations=annotations,
            gated=gated,
        )
        return self.api.create(f"/api/v1/namespaces/{self.namespace}/pods", body)

    def gang(
        self,
        name: str,
        size: int,
        gpus: int = 1,
        *,
        min_member: int | None = None,
        form: str = "podgroup",
        placement: str | None = None,
        timeout_seconds: int | None = None,
        create: int | None = None,
        arrival: str = "together",
        held: Sequence[int] = (),
        plan: Any = None,
        plan_nodes: Sequence[str] | None = None,
        member_annotations: Mapping[str, str] | None = None,
        create_pod_group: bool = True,
    ) -> Gang:
        """A gang of ``size`` members of ``gpus`` GPUs each, as a PodGroup + labelled pods
        (``form="podgroup"``; ``create_pod_group=False`` when the test makes the PodGroup
        itself) or annotation-only pods (``form="annotations"``).

        ``create`` members are created now (default: all; :meth:`add_member` adds the rest).
        ``arrival="together"`` creates them behind a scheduling gate and then lifts every
        gate, so kube-scheduler first sees the gang complete; ``"staggered"`` creates them
        ungated one by one, as a Job controller does, so the first ones are rejected while
        the gang is incomplete and depend on kube-scheduler retrying them. Tests of
        placement, plans and faults use ``together``; tests of quorum use ``staggered``.
        The indices in ``held`` keep their gate (:meth:`ungate` lifts it): such a member
        exists — Phalanx reserves for it — but kube-scheduler does not schedule it yet.
        ``plan_nodes[i]`` is member i's ``phalanx.io/plan-node`` (its name ends with it).
        """
        if arrival not in ("together", "staggered"):
            raise ValueError(f"unknown arrival {arrival!r}")
        minimum = size if min_member is None else min_member
        if form == "podgroup":
            if create_pod_group:
                self.pod_group(
                    name, minimum, placement=placement, timeout_seconds=timeout_seconds, plan=plan
                )
        elif form != "annotations":
            raise ValueError(f"unknown gang form {form!r}")
        elif plan is not None:
            raise ValueError("a plan lives on a PodGroup")
        suffixes = list(plan_nodes) if plan_nodes is not None else [str(i) for i in range(size)]
        members = tuple(f"{name}-{s}" for s in suffixes)
        gang = Gang(
            name,
            members,
            minimum,
            gpus,
            form,
            placement=placement,
            timeout_seconds=timeout_seconds,
            plan_nodes=tuple(plan_nodes) if plan_nodes is not None else None,
            member_annotations=dict(member_annotations or {}),
        )
        self.gangs[name] = gang
        count = size if create is None else create
        together = arrival == "together"
        for i in range(count):
            self.add_member(gang, i, gated=together or i in held)
        if together:
            for i in range(count):
                if i not in held:
                    self.ungate(gang.members[i])
        return gang

    def add_member(self, gang: Gang, index: int, *, gated: bool = False) -> Obj:
        """Create member ``index`` of ``gang`` (the annotations its form needs)."""
        labels: dict[str, str] = {}
        notes: dict[str, str] = dict(gang.member_annotations)
        if gang.form == "podgroup":
            labels[POD_GROUP_LABEL] = gang.name
        else:
            notes[A_POD_GROUP] = gang.name
            notes[A_MIN_MEMBER] = str(gang.min_member)
            if gang.placement is not None:
                notes[A_PLACEMENT] = gang.placement
            if gang.timeout_seconds is not None:
                notes[A_TIMEOUT] = str(gang.timeout_seconds)
        if gang.plan_nodes is not None:
            notes[A_PLAN_NODE] = gang.plan_nodes[index]
        return self.pod(
            gang.members[index], gang.gpus, labels=labels, annotations=notes, gated=gated
        )

    def ungate(self, pod: str) -> None:
        """Lift the scheduling gate: kube-scheduler starts scheduling the pod."""
        self.api.merge_patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}", {"spec": {"schedulingGates": None}}
        )

    def delete_pods(self, names: Iterable[str]) -> None:
        for name in names:
            self.api.delete(
                f"/api/v1/namespaces/{self.namespace}/pods/{name}", gracePeriodSeconds="0"
            )

    # ---- reading -------------------------------------------------------------------------

    def pods(self) -> dict[str, Obj]:
        items = self.api.items(f"/api/v1/namespaces/{self.namespace}/pods")
        return {p["metadata"]["name"]: p for p in items}

    def placement(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """pod -> node ("" while unbound) for ``names`` (default: every pod)."""
        pods = self.pods()
        wanted = list(names) if names is not None else sorted(pods)
        return {n: bound_node(pods[n]) if n in pods else "" for n in wanted}

    def bound_count(self, gang: Gang) -> int:
        return sum(1 for node in self.placement(gang.members).values() if node)

    def get_pod_group(self, name: str) -> Obj:
        return self.api.get(f"{PG_API}/namespaces/{self.namespace}/podgroups/{name}")

    def node_labels(self, node: str) -> dict[str, str]:
        labels: dict[str, str] = self.api.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
        return labels

    def events(self, name: str, *, kind: str | None = None, reason: str | None = None) -> list[Obj]:
        """Events about object ``name`` in this namespace (kube-scheduler's and Phalanx's)."""
        found = []
        for e in self.api.items(f"/api/v1/namespaces/{self.namespace}/events"):
            involved = e.get("involvedObject") or {}
            if involved.get("name") != name:
                continue
            if kind is not None and involved.get("kind") != kind:
                continue
            if reason is not None and e.get("reason") != reason:
                continue
            found.append(e)
        return found

    def event_text(self, name: str, **kwargs: Any) -> str:
        return "\n".join(
            f"[{e.get('reason')}] {e.get('message', '')}" for e in self.events(name, **kwargs)
        )

    # ---- waiting -------------------------------------------------------------------------

    def wait(self, what: str, probe: Callable[[], T | None], *, timeout: float = 30.0) -> T:
        """``probe`` until truthy, or fail after ``timeout`` with the scenario's state."""
        return launcher.wait_for(
            what, probe, timeout=timeout, interval=0.2, on_timeout=self.diagnostics
        )

    def wait_bound(self, names: Iterable[str], *, timeout: float = 30.0) -> dict[str, str]:
        names = list(names)

        def all_bound() -> dict[str, str] | None:
            where = self.placement(names)
            return where if all(where.values()) else None

        return self.wait(f"pods bound: {', '.join(names)}", all_bound, timeout=timeout)

    def wait_gang(self, gang: Gang, *, timeout: float = 30.0) -> dict[str, str]:
        return self.wait_bound(gang.members, timeout=timeout)

    def wait_held(self, waiting: int, *, timeout: float = 30.0) -> None:
        """Until Phalanx's barrier holds exactly ``waiting`` ``/bind`` requests."""
        self.phalanx.wait_metric(
            "phalanx_barrier_waiting",
            lambda v: v == waiting,
            timeout=timeout,
            what=f"{waiting} /bind request(s) held at the barrier",
        )

    def wait_event(
        self, name: str, text: str, *, reason: str | None = None, timeout: float = 30.0
    ) -> Obj:
        def found() -> Obj | None:
            return next(
                (e for e in self.events(name, reason=reason) if text in e.get("message", "")),
                None,
            )

        return self.wait(f"an event on {name} saying {text!r}", found, timeout=timeout)

    def wait_unschedulable(self, name: str, text: str, *, timeout: float = 30.0) -> None:
        """Until kube-scheduler has finished a failed attempt at pod ``name`` whose reason
        says ``text``: it sets PodScheduled=False (Unschedulable) only after it has put the
        pod back in its queue, so the pod then waits there, not in a scheduling cycle."""

        def parked() -> bool:
            pod = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled":
                    return bool(
                        c.get("status") == "False"
                        and c.get("reason") == "Unschedulable"
                        and text in c.get("message", "")
                    )
            return False

        self.wait(f"{name} back in kube-scheduler's queue ({text!r})", parked, timeout=timeout)

    def assert_unbound_for(self, names: Iterable[str], seconds: float) -> None:
        """None of ``names`` gets bound within ``seconds`` (sampled every 0.2 s)."""
        names = list(names)
        deadline = time.monotonic() + seconds
        while True:
            where = {n: node for n, node in self.placement(names).items() if node}
            assert not where, f"pods were bound that must wait: {where}\n{self.diagnostics()}"
            if time.monotonic() >= deadline:
                return
            time.sleep(0.2)

    def wait_quiet(self, *, settle: float = 3.0, timeout: float = 60.0) -> dict[str, str]:
        """Wait until Phalanx holds no reservation and no held /bind, and the placement has
        not changed for ``settle`` seconds; return it."""
        last: dict[str, str] = {}
        since = time.monotonic()

        def quiet() -> dict[str, str] | None:
            nonlocal last, since
            now = self.placement()
            busy = self.phalanx.metric("phalanx_reserved_gpus") or self.phalanx.metric(
                "phalanx_barrier_waiting"
            )
            if now != last or busy:
                last, since = now, time.monotonic()
                return None
            return now if time.monotonic() - since >= settle else None

        return self.wait("the cluster to settle", quiet, timeout=timeout)

    # ---- reporting -----------------------------------------------------------------------

    def diagnostics(self) -> str:
        parts = [f"----- scenario {self.namespace} -----"]
        with contextlib.suppress(Exception):
            for name, pod in sorted(self.pods().items()):
                phase = (pod.get("status") or {}).get("phase")
                parts.append(f"  pod {name}: node={bound_node(pod) or '-'} phase={phase}")
        with contextlib.suppress(Exception):
            for e in self.api.items(f"/api/v1/namespaces/{self.namespace}/events")[-30:]:
                involved = e.get("involvedObject") or {}
                parts.append(
                    f"  event {involved.get('kind')}/{involved.get('name')} "
                    f"[{e.get('reason')}] {e.get('message', '')[:300]}"
                )
        with contextlib.suppress(Exception):
            for view in self.phalanx.debug_groups():
                if str(view.get("group", "")).startswith(f"{self.namespace}/"):
                    parts.append(f"  phalanx: {json.dumps(view)}")
        parts.append(f"  monitor: {self.monitor.verdict().describe()}")
        parts.append(self.phalanx.tail(40))
        return "\n".join(parts)
