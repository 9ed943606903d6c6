"""A stand-in for kube-scheduler that drives Phalanx over its real HTTP endpoints.

For the demo, `phalanx simulate` and the tests. It is NOT a substitute for the real
kube-scheduler — the e2e tier runs that, against a real control plane — but it speaks the
extender protocol the same way (DESIGN §2):

* one scheduling cycle at a time: `/filter` with kube-scheduler's exact body
  (`{"Pod": <pod>, "Nodes": null, "NodeNames": [...]}`, i.e. `nodeCacheCapable: true`),
  `/prioritize` only when more than one node is feasible, the top score wins (ties by
  node name);
* binding is asynchronous: each `/bind` runs as a background task while the next pods are
  scheduled. It must be: the bind barrier HOLDS a gang's binds until its whole quorum has
  arrived, so binding one pod at a time would deadlock on the first gang.

It also plays the API server for the objects it creates (`create`): fills in what the
API server would (UID, namespace, phase) and hands them to the cluster source, as a
watch event would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from phalanx.core.errors import InvalidObjectError
from phalanx.core.inventory import parse_pod
from phalanx.demo.objects import GROUP_ANNOTATION, GROUP_LABEL, Obj

# The chart's extender httpTimeout: a held /bind may legitimately take nearly this long.
HTTP_TIMEOUT_SECONDS = 30.0
# A safety net against a run that never settles; real runs end far sooner.
MAX_ROUNDS = 200
# kube-scheduler retries a pod whose binding failed forever (with backoff); a dry run gives
# up on it after this many failed bindings and reports the last error.
MAX_BIND_FAILURES = 3

Progress = Callable[[str], None]


class ObjectSink(Protocol):
    """Where created objects go (ClusterFileSource.apply)."""

    def apply(self, obj: Mapping[str, Any]) -> bool: ...


@dataclass(slots=True)
class PodOutcome:
    """What happened to one pod the driver scheduled."""

    key: str  # namespace/name
    group: str | None  # namespace/name of its gang, None for a single pod
    gpus: int = 0
    node: str = ""  # bound node, "" while pending
    reason: str = ""  # why it is not bound: the last filter verdict or bind error
    attempts: int = 0  # scheduling cycles (filter calls)
    bind_failures: int = 0


@dataclass(slots=True)
class DriveResult:
    outcomes: dict[str, PodOutcome] = field(default_factory=dict)
    rounds: int = 0
    requests: dict[str, int] = field(default_factory=dict)  # verb -> calls
    elapsed_seconds: float = 0.0
    ignored: list[str] = field(default_factory=list)  # pending pods of other schedulers

    @property
    def bound(self) -> list[PodOutcome]:
        return [o for o in self.outcomes.values() if o.node]

    @property
    def pending(self) -> list[PodOutcome]:
        return [o for o in self.outcomes.values() if not o.node]


def _map(value: object) -> Mapping[str, Any]:
    """A part of a raw object that should be an object; anything else reads as empty. Such
    an object is refused by the source naming the field, and filter answers why."""
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def group_of(obj: Mapping[str, Any]) -> str | None:
    """The key of the gang a pod object belongs to, in any dialect, as Phalanx reads it
    (`ns/name`, `volcano:ns/name`, `upstream:...`); for a pod Phalanx cannot read, the
    scheduler-plugins label or Phalanx annotation it names."""
    try:
        pod = parse_pod(obj)
    except InvalidObjectError:
        meta = _map(obj.get("metadata"))
        labels, annotations = _map(meta.get("labels")), _map(meta.get("annotations"))
        name = _text(labels.get(GROUP_LABEL)) or _text(annotations.get(GROUP_ANNOTATION))
        return f"{_text(meta.get('namespace')) or 'default'}/{name}" if name else None
    return pod.group.key if pod.group is not None else None


def key_of(obj: Mapping[str, Any]) -> str:
    meta = _map(obj.get("metadata"))
    return f"{_text(meta.get('namespace')) or 'default'}/{_text(meta.get('name'))}"


def gpus_of(obj: Mapping[str, Any]) -> int:
    """GPUs a pod object requests (whole devices across its app containers)."""
    total = 0
    containers = _map(obj.get("spec")).get("containers")
    for c in containers if isinstance(containers, list) else []:
        resources = _map(_map(c).get("resources"))
        amounts = _map(resources.get("requests")) or _map(resources.get("limits"))
        for name, value in amounts.items():
            if name in ("nvidia.com/gpu", "amd.com/gpu"):
                try:
                    total += int(str(value))
                except ValueError:
                    continue
    return total


def normalize(obj: Mapping[str, Any]) -> Obj:
    """The object as the API server would store it: namespace, UID and phase filled in.
    One whose metadata, spec or status is no object is left as it is, for the source to
    refuse naming the field."""
    out: Obj = dict(obj)
    if not all(isinstance(out.get(part) or {}, Mapping) for part in ("metadata", "spec", "status")):
        return out
    kind = _text(out.get("kind"))
    meta = dict(out.get("metadata") or {})
    if kind in ("Pod", "PodGroup"):
        meta.setdefault("namespace", "default")
    if not meta.get("uid"):
        ns = _text(meta.get("namespace"))
        meta["uid"] = f"uid-{kind.lower()}-{ns + '-' if ns else ''}{_text(meta.get('name'))}"
    out["metadata"] = meta
    if kind == "Pod":
        spec = dict(out.get("spec") or {})
        spec.setdefault("schedulerName", "default-scheduler")
        out["spec"] = spec
        status = dict(out.get("status") or {})
        status.setdefault("phase", "Running" if spec.get("nodeName") else "Pending")
        out["status"] = status
    return out


def summarize_failures(result: Mapping[str, Any]) -> str:
    """kube-scheduler's FailedScheduling text for a filter answer with no feasible node."""
    error = result.get("Error") or ""
    if error:
        return str(error)
    counts: dict[str, int] = {}
    for field_name in ("FailedAndUnresolvableNodes", "FailedNodes"):
        for reason in (result.get(field_name) or {}).values():
            counts[str(reason)] = counts.get(str(reason), 0) + 1
    if not counts:
        return "no node was offered or kept"
    if len(counts) == 1:
        return next(iter(counts))
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "; ".join(f"{n} node(s): {reason}" for reason, n in ordered)


class SchedulerDriver:
    """See module docstring. Create, `create()` the workload, `await run()` once."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        sink: ObjectSink,
        objects: Iterable[Mapping[str, Any]],
        *,
        scheduler_names: Sequence[str] = ("phalanx",),
        progress: Progress | None = None,
    ) -> None:
        self.client = client
        self.sink = sink
        self.scheduler_names = frozenset(scheduler_names)
        self.progress = progress or (lambda _text: None)
        self._nodes: list[str] = []
        self._pods: dict[str, Obj] = {}
        self._arrival: dict[str, int] = {}  # pod key -> creation order
        # pod key -> its gang's key (None: a single pod), read once: each round orders by it
        self._group: dict[str, str | None] = {}
        for obj in objects:
            self._see(normalize(obj))
        self._binding: dict[str, asyncio.Task[None]] = {}
        self._done = 0  # binds finished (either way): progress between rounds
        self._newly_bound: list[str] = []
        self._told: dict[str, str] = {}  # group or pod -> last waiting reason shown
        self.result = DriveResult()

    def _see(self, obj: Obj) -> None:
        kind = obj.get("kind")
        if kind == "Node":
            name = _text(_map(obj.get("metadata")).get("name"))
            if name and name not in self._nodes:
                self._nodes.append(name)
                self._nodes.sort()
        elif kind == "Pod":
            key = key_of(obj)
            self._pods[key] = obj
            self._group[key] = group_of(obj)
            self._arrival.setdefault(key, len(self._arrival))

    def create(self, objects: Iterable[Mapping[str, Any]]) -> list[str]:
        """Create objects (as `kubectl apply` would); returns the ones the source rejected."""
        rejected = []
        for raw in objects:
            obj = normalize(raw)
            if self.sink.apply(obj):
                self._see(obj)
            else:
                rejected.append(f"{obj.get('kind', '?')} {key_of(obj)}")
        return rejected

    @property
    def node_names(self) -> list[str]:
        return list(self._nodes)

    def _served(self, obj: Mapping[str, Any]) -> bool:
        return _text(_map(obj.get("spec")).get("schedulerName")) in self.scheduler_names

    def _pending(self) -> list[Obj]:
        """Unbound pods of the served schedulers in queue order: higher priority first, then
        creation order, a gang's members together where its first member was created."""
        pending = []
        for key, obj in self._pods.items():
            spec, meta = _map(obj.get("spec")), _map(obj.get("metadata"))
            phase = _map(obj.get("status")).get("phase", "Pending")
            if spec.get("nodeName") or key in self._binding or meta.get("deletionTimestamp"):
                continue
            if phase not in ("Pending", "", None) or not self._served(obj):
                continue
            out = self.result.outcomes.get(key)
            if out is not None and out.bind_failures >= MAX_BIND_FAILURES:
                continue
            pending.append(obj)
        first: dict[str, int] = {}
        for obj in pending:
            key = key_of(obj)
            name = self._group[key] or key
            first[name] = min(first.get(name, 1 << 62), self._arrival[key])

        def order(obj: Obj) -> tuple[int, int, str]:
            priority = _map(obj.get("spec")).get("priority")
            rank = -priority if isinstance(priority, int) else 0
            key = key_of(obj)
            return (rank, first[self._group[key] or key], key)

        return sorted(pending, key=order)

    def _outcome(self, obj: Obj) -> PodOutcome:
        key = key_of(obj)
        out = self.result.outcomes.get(key)
        if out is None:
            out = self.result.outcomes[key] = PodOutcome(key, self._group[key], gpus_of(obj))
        return out

    async def _post(self, verb: str, body: object) -> Any:
        self.result.requests[verb] = self.result.requests.get(verb, 0) + 1
        response = await self.client.post(f"/{verb}", json=body)
        if response.status_code != 200:
            # kube-scheduler throws the body away; we keep it, it is what a human wants.
            raise DriverError(
                f"/{verb} answered HTTP {response.status_code}: {response.text[:300]}"
            )
        return response.json()

    # ---- scheduling cycle -----------------------------------------------------------------

    async def _schedule_one(self, obj: Obj) -> bool:
        """One scheduling cycle; True if the pod was assumed and its binding started."""
        out = self._outcome(obj)
        out.attempts += 1
        names = self.node_names
        try:
            answer = await self._post("filter", {"Pod": obj, "Nodes": None, "NodeNames": names})
        except (DriverError, httpx.HTTPError) as exc:
            out.reason = f"filter failed: {exc}"
            return False
        offered = set(names)
        feasible = sorted(n for n in (answer.get("NodeNames") or []) if n in offered)
        if answer.get("Error") or not feasible:
            out.reason = summarize_failures(answer)
            return False
        node = feasible[0]
        if len(feasible) > 1:
            node = await self._pick(obj, feasible)
        task = asyncio.create_task(self._bind(obj, node), name=f"bind {out.key}")
        self._binding[out.key] = task
        return True

    async def _pick(self, obj: Obj, feasible: list[str]) -> str:
        """The highest-scoring feasible node, ties (and a failed prioritize) by name."""
        try:
            scores = await self._post(
                "prioritize", {"Pod": obj, "Nodes": None, "NodeNames": feasible}
            )
        except (DriverError, httpx.HTTPError):
            return feasible[0]  # kube-scheduler ignores prioritize errors
        by_node = {
            s.get("Host"): int(s.get("Score", 0)) for s in scores or [] if isinstance(s, dict)
        }
        return min(feasible, key=lambda n: (-by_node.get(n, 0), n))

    async def _bind(self, obj: Obj, node: str) -> None:
        out = self._outcome(obj)
        meta = obj["metadata"]
        body = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
        try:
            try:
                answer = await self._post("bind", body)
                error = str(answer.get("Error") or "")
            except (DriverError, httpx.HTTPError) as exc:
                error = f"bind failed: {exc}"
            if error:
                out.reason = error  # kube-scheduler forgets the pod and requeues it
                out.bind_failures += 1
                if out.bind_failures >= MAX_BIND_FAILURES:
                    out.reason = f"gave up after {out.bind_failures} failed bindings: {error}"
            else:
                obj["spec"]["nodeName"] = node
                obj["status"]["phase"] = "Running"
                out.node, out.reason = node, ""
                self._newly_bound.append(out.key)
        finally:
            self._done += 1
            self._binding.pop(out.key, None)

    # ---- the loop -------------------------------------------------------------------------

    async def run(self, max_rounds: int = MAX_ROUNDS) -> DriveResult:
        """Schedule until a round makes no progress and no binding is in flight."""
        started = time.perf_counter()
        self.result.ignored = sorted(
            key_of(o)
            for o in self._pods.values()
            if not _map(o.get("spec")).get("nodeName") and not self._served(o)
        )
        for obj in self._pending():
            self._outcome(obj)
        done_before = self._done
        while self.result.rounds < max_rounds:
            self.result.rounds += 1
            started_binds = 0
            for obj in self._pending():
                if await self._schedule_one(obj):
                    started_binds += 1
            if started_binds == 0 and self._binding:
                await asyncio.wait(set(self._binding.values()), return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(0)  # let the new binds reach the server
            self._report()
            if started_binds == 0 and not self._binding and self._done == done_before:
                break
            done_before = self._done if started_binds == 0 else -1
        if self._binding:  # only when max_rounds cut the loop short
            await asyncio.gather(*self._binding.values(), return_exceptions=True)
        self._report()
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    def _report(self) -> None:
        """Progress lines: gangs whose members just bound, and new reasons for waiting."""
        bound, self._newly_bound = self._newly_bound, []
        by_group: dict[str, list[PodOutcome]] = {}
        for key in bound:
            out = self.result.outcomes[key]
            by_group.setdefault(out.group or out.key, []).append(out)
        for name, outs in sorted(by_group.items(), key=lambda kv: self._arrival[kv[1][0].key]):
            nodes = ", ".join(sorted({o.node for o in outs}))
            if outs[0].group is None:
                self.progress(f"bound   {name} -> {nodes}")
            else:
                self.progress(f"bound   {name}: {len(outs)} pod(s) -> {nodes}")
            self._told.pop(name, None)
        if self._binding:
            return
        for out in sorted(self.result.pending, key=lambda o: o.key):
            name = out.group or out.key
            if out.reason and self._told.get(name) != out.reason:
                self._told[name] = out.reason
                self.progress(f"waiting {name}: {out.reason}")


class DriverError(RuntimeError):
    """The extender answered outside the protocol (non-200, not JSON)."""
