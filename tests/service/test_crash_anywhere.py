"""Phalanx keeps a gang all-or-nothing across a crash at any point of its bind.

A cluster of a few nodes and gangs (of different sizes, `minMember` up to every member, one
gang's members maybe created late, maybe a pod of no gang) outlives the Phalanx processes
that schedule it (`Cluster`: its objects, the bindings made, and the commit records written
on a PodGroup or carried by a binding onto its pod). Each process is a real `Extender` over
a fresh list of that cluster, on an event loop of its own, driven by kube-scheduler: a
`/filter` then a `/bind` for every unbound pod, in a drawn order, each bind running on while
the next pods are filtered. Every write the process makes (a binding, a retry of one, a
commit record, its removal) lands after a drawn number of turns of the loop, so concurrent
bindings land in any order, and may fail transiently (the binder retries). A process dies
just before its drawn n-th write would land (or, past its last write, between two): that
write and every later one are lost, the loop's tasks are cancelled, the model is gone, while
the cluster keeps what landed. While no process runs, a member may be deleted or created
again under a new UID, a node removed (its pods with it) or cordoned, or a pod of another
scheduler may take capacity. Records are read back as the live source reads them
(`sources/kube_commits.CommitBook`): each gang's newest, with the copies on bound pods that
a process settled coming back for the next process to settle.

In the last process kube-scheduler retries every unbound pod and roll-forward passes run
(the fake clocks past the grace) until nothing changes. Then:

1. every gang has no member bound or at least its quorum, unless a member it needed
   vanished while no process ran, or a node its commit record named for an unbound member
   was removed, cordoned or given to another pod. For those the design promises what
   roll-forward promises ("Roll-forward never evicts" in docs/design.md): its bound members
   stay bound (nothing here unbinds a pod), the record is cleared (3 below), and the gang is
   re-planned, so it stays partial only for want of members (fewer than its quorum exist)
   or of room (the schedulable nodes' free GPUs cannot hold the members it misses);
2. no node is over-committed, in the cluster or in the model;
3. no commit record is left in force;
4. nothing is assumed without a binding in flight, no bind is held at a gate, and once the
   reservations' time is up nothing is reserved;

and the last process answered every `/bind` once, with a string, and logged no error.

Why one drawn scenario per example rather than a state machine beside the interleavings
one: the crash falls *inside* a write, as it is about to land, which a rule between steps
cannot reach; a scenario draws each process's course as it starts (`Script`: which write
it dies at, how long each takes to land, which fail), and kube-scheduler's rounds between.
`hypothesis.event` names the write each crash interrupted, what it left each gang, the
kinds of write that landed and roll-forward's verdicts (`--hypothesis-show-statistics`).
CRASH_EXAMPLES raises the example count for a longer hunt.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from hypothesis import event, given, settings
from hypothesis import strategies as st
from support import FakeTimers, errors_logged

from builders import node_obj, pod_obj, podgroup_obj
from clocks import Clocks, FakeClock
from phalanx.core.model import NVIDIA_GPU, Binding
from phalanx.core.rollforward import CARRIED_RECORD_MAX_BYTES, CommitRecord, Decision
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.service.rollforward import RollForwardSettings
from phalanx.sources.base import BindError
from phalanx.sources.clusterfile import ClusterFileSource
from phalanx.sources.kube_commits import rfc3339

T = TypeVar("T")
Obj = dict[str, Any]

# Up to four processes of a few rounds each: some 30 ms an example, 3 s for the file. A
# longer hunt: CRASH_EXAMPLES=5000 (about 3 minutes). Before the fix, 300 examples found a
# restarted Phalanx giving a cut gang's recorded node away; 100 did in one of six seeds.
EXAMPLES = int(os.environ.get("CRASH_EXAMPLES", "80"))
NODE_GPUS = 8
GRACE = 15.0  # roll-forward's grace, on the fake clocks
BARRIER_SECONDS = 5.0
TIMEOUT = 30  # every gang's scheduleTimeoutSeconds
RETRIES = 2
# Transient binding failures per process at most: the binder retries each RETRIES times.
FAILURES = 2
SETTLE_ROUNDS = 12
TURNS = 200  # loop turns that let everything started run to its end


def gpus_of(obj: Obj) -> int:
    requests = obj["spec"]["containers"][0]["resources"]["requests"]
    return int(requests.get(NVIDIA_GPU, "0"))


@dataclass
class Cluster:
    """What outlives a Phalanx process: the API server's objects, the bindings made, and the
    commit records written on a PodGroup or carried by a binding onto its pod."""

    nodes: dict[str, Obj]
    groups: dict[str, Obj]  # by group key
    pods: dict[str, Obj]  # by pod key
    min_member: dict[str, int]  # by group key
    group_records: dict[str, CommitRecord] = field(default_factory=dict)
    pod_records: dict[str, CommitRecord] = field(default_factory=dict)  # by pod key

    def objects(self) -> list[Obj]:
        return copy.deepcopy([*self.nodes.values(), *self.groups.values(), *self.pods.values()])

    def uid(self, pod_key: str) -> str:
        return str(self.pods[pod_key]["metadata"]["uid"])

    def node_of(self, pod_key: str) -> str:
        return str(self.pods[pod_key]["spec"].get("nodeName", ""))

    def group_of(self, pod_key: str) -> str | None:
        name = self.pods[pod_key]["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group")
        return f"default/{name}" if name else None

    def members(self, group_key: str) -> list[str]:
        return sorted(k for k in self.pods if self.group_of(k) == group_key)

    def bound(self, group_key: str) -> list[str]:
        return [k for k in self.members(group_key) if self.node_of(k)]

    def used(self, node: str) -> int:
        return sum(gpus_of(p) for k, p in self.pods.items() if self.node_of(k) == node)

    def schedulable(self, node: str) -> bool:
        return node in self.nodes and not self.nodes[node]["spec"].get("unschedulable", False)

    def bind(self, pod_key: str, node: str) -> None:
        pod = self.pods[pod_key]
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"

    def delete_pod(self, pod_key: str) -> None:
        del self.pods[pod_key]
        self.pod_records.pop(pod_key, None)  # a carried copy lives and dies with its pod

    def records_naming(self, node: str) -> set[str]:
        """The gangs any record in the cluster (settled or not) sends an unbound member to
        `node`."""
        every = [*self.group_records.values(), *self.pod_records.values()]
        return {
            r.group_key
            for r in every
            for pod_key, recorded in r.placements.items()
            if recorded == node and pod_key in self.pods and not self.node_of(pod_key)
        }

    def newest_record(self, group_key: str) -> CommitRecord | None:
        """What a fresh process reads for the gang: its newest record, nothing settled."""
        found = [r for r in self.pod_records.values() if r.group_key == group_key]
        if group_key in self.group_records:
            found.append(self.group_records[group_key])
        return max(found, key=lambda r: r.at, default=None)

    def state(self) -> tuple[object, ...]:
        """Everything that matters for whether the cluster has settled."""
        return (
            tuple(sorted((k, self.uid(k), self.node_of(k)) for k in self.pods)),
            tuple(sorted((k, r.at) for k, r in self.group_records.items())),
            tuple(sorted((k, r.at) for k, r in self.pod_records.items())),
        )


class Script:
    """The course of one process's writes, drawn when it starts (nothing is drawn inside
    the loop's tasks, which would keep Hypothesis's own stop to themselves): how many turns
    of the loop each write takes to land, which bindings fail transiently, and before which
    write, by the order they were made, the process dies."""

    def __init__(self) -> None:
        self.crash_at: int | None = None  # None: this process does not die
        self.turns: list[int] = []
        self.failing: set[int] = set()
        self.writes = 0  # the writes made so far

    def start(self, data: st.DataObject, crash_at: int | None, failures: int) -> None:
        self.crash_at, self.writes = crash_at, 0
        self.turns = data.draw(st.lists(st.integers(0, 3), max_size=24), label="turns to land")
        fails = st.sets(st.integers(0, 23), max_size=failures)
        self.failing = data.draw(fails, label="writes that fail transiently")

    def write(self) -> int:
        self.writes += 1
        return self.writes - 1

    def turns_of(self, write: int) -> int:
        return self.turns[write] if write < len(self.turns) else 0

    def dies(self, write: int) -> bool:
        return self.crash_at is not None and write >= self.crash_at


# Who makes a write, by the coroutine of the task it runs in (a gathered binding runs in a
# task of its own, named by no one).
_ORIGINS = {
    "BindBarrier._bind_gang": "the bind barrier",
    "BindBarrier._bind_gang.<locals>.bind_one": "the bind barrier",
    "Binder.clear_commit": "the bind barrier giving up",
    "Extender.bind": "a /bind bound on its own",
    "Binder.bind_assumed": "roll-forward",  # gathered by roll-forward alone
    "RollForward.run_once": "roll-forward",
    "RollForward.forever": "roll-forward",
}


def _origin() -> str:
    task = asyncio.current_task()
    name = str(getattr(task.get_coro(), "__qualname__", "")) if task is not None else ""
    return _ORIGINS.get(name, name)


class ProcessSource(ClusterFileSource):
    """One process's view of the cluster: a fresh list at its start. Its writes land in the
    cluster (and then in its model) after the turns the script draws, unless the process
    died first. A `CommitLog` that reads records back as the live `CommitBook` does: the
    newest of each gang's, its copies on bound pods settled in this process's memory only."""

    def __init__(self, cluster: Cluster, script: Script, wall: FakeClock) -> None:
        super().__init__(cluster.objects())
        self.cluster = cluster
        self.script = script
        self.wall = wall
        self.dead = False
        self.died_at = ""  # the write the process died making
        self._settled: dict[str, str] = {}  # group key -> copies at or before it are done
        self._failed: set[str] = set()  # pods whose last binding failed: the next retries
        self.landed: set[str] = set()  # the kinds of write that landed (or failed), by whom

    @property
    def may_roll_forward(self) -> bool:
        return True

    def commit_records(self) -> dict[str, CommitRecord]:
        c = self.cluster
        keys = set(c.group_records) | {r.group_key for r in c.pod_records.values()}
        found: dict[str, CommitRecord] = {}
        for key in sorted(keys):
            newest = c.group_records.get(key)
            settled = self._settled.get(key)
            for record in c.pod_records.values():
                if record.group_key != key or (settled is not None and record.at <= settled):
                    continue
                if newest is None or record.at > newest.at:
                    newest = record
            if newest is not None:
                found[key] = newest
        return found

    async def _land(self, what: str) -> int:
        """Wait for the write's turn; returns its number. Never returns once the process
        died."""
        write = self.script.write()
        for _ in range(self.script.turns_of(write)):
            await asyncio.sleep(0)
        if not self.dead and self.script.dies(write):
            self.dead = True
            self.died_at = f"{what}, made by {_origin()}"
        if self.dead:  # the process is gone: this write and every later one never land
            await asyncio.get_running_loop().create_future()
        self.landed.add(f"{what}, made by {_origin()}")
        return write

    def _stamped(self, record: CommitRecord) -> CommitRecord:
        return replace(record, at=rfc3339(self.wall()))

    async def bind(
        self,
        binding: Binding,
        *,
        record: CommitRecord | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        ref, node, c = binding.pod, binding.node, self.cluster
        retried = ref.uid in self._failed
        write = await self._land("a retried binding" if retried else "a binding")
        if write in self.script.failing:
            self._failed.add(ref.uid)
            raise BindError("injected: the API server is overloaded")
        self._failed.discard(ref.uid)
        if ref.key not in c.pods or c.uid(ref.key) != ref.uid:
            raise BindError(f"pod {ref} not found", gone=True)
        if c.node_of(ref.key):  # the API refuses any second binding
            raise BindError(f"pod {ref} is already bound", conflict=True)
        if node not in c.nodes:
            raise BindError(f"node {node} not found")
        c.bind(ref.key, node)
        if record is not None:  # in the same write as the node (the binding's annotations)
            c.pod_records[ref.key] = self._stamped(record)
        await super().bind(binding, timeout_seconds=timeout_seconds)  # the watch, at once

    async def write_commit_record(self, record: CommitRecord) -> None:
        await self._land("the commit record's write")
        self.cluster.group_records[record.group_key] = self._stamped(record)

    async def clear_commit_record(self, group_key: str) -> None:
        await self._land("a commit record's removal")
        c = self.cluster
        copies = {k: r for k, r in c.pod_records.items() if r.group_key == group_key}
        kept = [r.at for k, r in copies.items() if c.node_of(k)]
        if kept:
            self._settled[group_key] = max(kept)
        for key in copies.keys() - {k for k in copies if c.node_of(k)}:
            del c.pod_records[key]
        c.group_records.pop(group_key, None)


@dataclass
class Process:
    """A running Phalanx: its loop, its extender over its own source, and the `/bind`
    requests kube-scheduler has sent it."""

    loop: asyncio.AbstractEventLoop
    ext: Extender
    source: ProcessSource
    timers: FakeTimers
    requests: dict[str, asyncio.Task[str]] = field(default_factory=dict)  # by pod uid
    binding_to: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod key, node

    def died(self) -> bool:
        return self.source.dead

    def call(self, action: Callable[[], T]) -> T:
        """Run a synchronous step on the loop, as the HTTP verbs do."""

        async def step() -> T:
            return action()

        return self.loop.run_until_complete(step())

    def turn(self, turns: int = TURNS) -> None:
        async def spin() -> None:
            for _ in range(turns):
                await asyncio.sleep(0)

        self.loop.run_until_complete(spin())

    def run(self, work: Coroutine[Any, Any, T], name: str) -> T | None:
        """Run `work` to its end, or until the process dies (None)."""
        task = self.loop.create_task(work, name=name)
        for _ in range(TURNS):
            if task.done() or self.source.dead:
                break
            self.turn(1)
        if self.source.dead and not task.done():
            return None
        assert task.done(), f"{name} never finished"
        return task.result()


class Scenario:
    """One example: the cluster, the processes that schedule it, and what happens while
    none runs."""

    def __init__(self, data: st.DataObject, cluster: Cluster, late: list[Obj], carried: int):
        self.data = data
        self.cluster = cluster
        self.late = late  # members not created yet, in order
        self.carried = carried
        self.script = Script()
        self.clocks = Clocks()
        self.loop_errors: list[str] = []
        # Gangs the design lets stay partial: a member they needed vanished, or a node their
        # record named for an unbound member was taken away, while no process ran.
        self.spoiled: set[str] = set()
        self._names = itertools.count()
        self.running: asyncio.AbstractEventLoop | None = None  # the live process's loop

    def advance(self, seconds: float) -> None:
        self.clocks.advance(seconds)

    # ---- a process's life --------------------------------------------------------------

    def start(self, crash_at: int | None) -> Process:
        self.script.start(self.data, crash_at, FAILURES)
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(lambda _, ctx: self.loop_errors.append(str(ctx)))
        self.running = loop
        source = ProcessSource(self.cluster, self.script, self.clocks.wall)
        timers = FakeTimers(self.clocks.mono)
        ext = Extender(
            source,
            ServiceSettings(
                barrier_timeout_seconds=BARRIER_SECONDS,
                bind_retries=RETRIES,
                bind_retry_backoff_seconds=0.0,
                # Expiry and roll-forward run when the scenario says, on the fake clocks.
                expiry_interval_seconds=3600,
                roll_forward=RollForwardSettings(interval_seconds=3600, grace_seconds=GRACE),
                carried_record_bytes=self.carried,
            ),
            clock=self.clocks.mono,
            wall_clock=self.clocks.wall,
            timers=timers,
        )
        process = Process(loop, ext, source, timers)
        loop.run_until_complete(ext.start())
        process.turn()  # its first roll-forward pass (records seen now: within their grace)
        return process

    def crash(self, process: Process) -> None:
        """The process dies: nothing it has not written lands, its loop's tasks are gone."""
        process.source.dead = True
        self._note_crash(process.source.died_at or "between two writes")
        _note_landed(process)
        for request in process.requests.values():  # those answered before it died
            if request.done() and not request.cancelled():
                assert isinstance(request.result(), str)
        _close(process.loop)

    def stop(self, process: Process) -> None:
        _note_landed(process)
        process.loop.run_until_complete(process.ext.stop())
        _close(process.loop)

    def _note_crash(self, where: str) -> None:
        event(f"crash: {where}")
        c = self.cluster
        for key in sorted(c.min_member):
            record = c.newest_record(key)
            bound = len(c.bound(key))
            if record is None:
                left = "no record, none bound" if bound == 0 else f"no record, {bound} bound"
            else:
                n = len(record.placements)
                k = sum(
                    1
                    for p, uid in record.pod_uids.items()
                    if p in c.pods and c.uid(p) == uid and c.node_of(p)
                )
                left = "a record, none of it bound" if k == 0 else "a record, all of it bound"
                if 0 < k < n:
                    left = "a record, some of it bound"
            event(f"a crash left a gang with {left}")

    def run_until_crash(self) -> None:
        crash_at = self.data.draw(st.integers(0, 8), label="the write the process dies at")
        process = self.start(crash_at)
        for _ in range(self.data.draw(st.integers(1, 3), label="rounds")):
            if bool(self.late) and self.data.draw(st.booleans(), label="a late member"):
                self.create_late(process)
            self.kube_scheduler_round(process)
            if process.died():
                break
            self.time_passes(process)
            if process.died():
                break
        self.crash(process)

    def time_passes(self, process: Process) -> None:
        seconds = self.data.draw(st.sampled_from([0.0, BARRIER_SECONDS, GRACE + 1]))
        self.advance(seconds)
        process.call(process.timers.fire_due)
        process.call(process.ext.expire)
        process.turn()
        if seconds > GRACE and process.ext.roll_forward is not None:
            decisions = process.run(process.ext.roll_forward.run_once(), "roll-forward pass")
            _note_decisions(decisions)

    # ---- kube-scheduler ------------------------------------------------------------------

    def kube_scheduler_round(self, process: Process, *, everyone: bool = False) -> None:
        """kube-scheduler cycles the unbound pods, each bind running on as the next pod is
        filtered: every one of them, or those not waiting out a backoff (a drawn few)."""
        c = self.cluster
        pending = [k for k in sorted(c.pods) if not c.node_of(k)]
        order = self.data.draw(st.permutations(pending), label="queue order")
        if not everyone:
            order = order[: self.data.draw(st.integers(0, len(order)), label="cycled")]
        for key in order:
            if process.source.dead:
                return
            self.cycle(process, key)
            process.turn(self.data.draw(st.integers(0, 3), label="turns between cycles"))
        process.turn()

    def cycle(self, process: Process, key: str) -> None:
        c = self.cluster
        if key not in c.pods or c.node_of(key):
            return
        namespace, name = key.split("/")
        pod = process.ext.state.pod_by_key(namespace, name)
        sent = process.requests.get(c.uid(key))
        if pod is None or (sent is not None and not sent.done()):
            return  # its binding cycle is still running
        # kube-scheduler's own filters: the pods bound, and those it is binding (assumed in
        # its cache until their binding lands).
        used = {n: c.used(n) for n in c.nodes}
        for uid, (other, node) in process.binding_to.items():
            landed = other in c.pods and c.node_of(other)
            if not process.requests[uid].done() and not landed and node in used:
                used[node] += gpus_of(c.pods[other]) if other in c.pods else 0
        need = gpus_of(c.pods[key])
        offered = [n for n in sorted(c.nodes) if c.schedulable(n) and NODE_GPUS - used[n] >= need]
        if not offered:
            return
        result = process.call(lambda: process.ext.filter(pod, offered))
        if not result.feasible:
            return
        node = result.feasible[0]
        bind = process.ext.bind(Binding(pod.ref, node))
        process.requests[pod.uid] = process.loop.create_task(bind, name="kube-scheduler bind")
        process.binding_to[pod.uid] = (key, node)

    def create_late(self, process: Process | None) -> None:
        obj = self.late.pop(0)
        self.cluster.pods[f"default/{obj['metadata']['name']}"] = obj
        if process is not None:
            process.call(lambda: process.source.apply(copy.deepcopy(obj)))

    # ---- while no process runs ---------------------------------------------------------

    def while_down(self) -> None:
        c = self.cluster
        # How long until the next process lists the cluster: its records may be due at once.
        self.advance(self.data.draw(st.sampled_from([0.0, BARRIER_SECONDS, GRACE + 5])))
        actions = st.sampled_from(["delete", "recreate", "remove-node", "cordon", "squat", "late"])
        for action in self.data.draw(st.lists(actions, max_size=2), label="while down"):
            members = sorted(k for k in c.pods if c.group_of(k))
            nodes = sorted(c.nodes)
            if action in ("delete", "recreate") and members:
                key = self.data.draw(st.sampled_from(members))
                obj, uid = c.pods[key], c.uid(key)
                self.vanish(key)
                if action == "recreate":
                    again = copy.deepcopy(obj)
                    again["metadata"]["uid"] = f"{uid}-again-{next(self._names)}"
                    again["spec"].pop("nodeName", None)
                    again["status"]["phase"] = "Pending"
                    again["metadata"]["annotations"] = {}
                    c.pods[key] = again
            elif action == "remove-node" and len(nodes) > 1:
                node = self.data.draw(st.sampled_from(nodes))
                self.spoiled |= c.records_naming(node)
                del c.nodes[node]
                for key in [k for k in c.pods if c.node_of(k) == node]:
                    self.vanish(key)  # the pod garbage collector deletes them
            elif action == "cordon" and nodes:
                node = self.data.draw(st.sampled_from(nodes))
                self.spoiled |= c.records_naming(node)
                c.nodes[node]["spec"]["unschedulable"] = True
            elif action == "squat" and nodes:
                node = self.data.draw(st.sampled_from(nodes))
                free = NODE_GPUS - c.used(node)
                if free > 0:  # the kubelet admits no more than fits
                    self.spoiled |= c.records_naming(node)
                    name = f"squatter-{next(self._names)}"
                    gpus = self.data.draw(st.integers(1, free))
                    c.pods[f"default/{name}"] = pod_obj(name, gpus, node=node, phase="Running")
            elif action == "late" and self.late:
                self.create_late(None)
            event(f"while down: {action}")

    def vanish(self, key: str) -> None:
        group = self.cluster.group_of(key)
        if group is not None:
            self.spoiled.add(group)
        self.cluster.delete_pod(key)

    # ---- the last process --------------------------------------------------------------

    def settle(self) -> Process:
        process = self.start(None)
        while self.late:
            self.create_late(process)
        calm = 0
        for round_ in range(SETTLE_ROUNDS):
            before = (self.cluster.state(), tuple(process.source.commit_records()))
            self.kube_scheduler_round(process, everyone=round_ > 0)
            self.advance(GRACE + 1)
            process.call(process.timers.fire_due)
            process.call(process.ext.expire)
            process.turn()
            assert process.ext.roll_forward is not None
            _note_decisions(process.run(process.ext.roll_forward.run_once(), "roll-forward pass"))
            process.turn()
            after = (self.cluster.state(), tuple(process.source.commit_records()))
            calm = calm + 1 if before == after and not process.ext.barrier.held() else 0
            if calm == 2:
                return process
        raise AssertionError(f"still changing after {SETTLE_ROUNDS} rounds")


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel every task left on `loop`, let them unwind (and what they start as they do),
    and close it."""

    async def unwound() -> None:
        for _ in range(10):
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            if not tasks:
                return
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    loop.run_until_complete(unwound())
    loop.close()


def _note_landed(process: Process) -> None:
    for what in sorted(process.source.landed):
        event(f"landed: {what}")


def _note_decisions(decisions: list[Decision] | None) -> None:
    for decision in decisions or ():
        event(f"roll-forward: {decision.verdict.value}")


# ---- the cluster --------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Cluster, list[Obj]]:
    """2 or 3 nodes of 8 GPUs; 2 or 3 gangs of 1 to 4 members of 2, 4 or 8 GPUs each, with
    any quorum; the last gang maybe created one member at a time; maybe a pod of no gang."""
    nodes = {f"n{i}": node_obj(f"n{i}", NODE_GPUS) for i in range(draw(st.integers(2, 3)))}
    groups: dict[str, Obj] = {}
    pods: dict[str, Obj] = {}
    quorum: dict[str, int] = {}
    late: list[Obj] = []
    count = draw(st.integers(2, 3), label="gangs")
    late_gang = draw(st.booleans(), label="the last gang's members are created late")
    for name in "abc"[:count]:
        size = draw(st.integers(1, 4), label=f"gang {name}'s members")
        need = draw(st.integers(1, size), label=f"gang {name}'s minMember")
        gpus = draw(st.sampled_from([2, 4, 8]), label=f"gang {name}'s GPUs each")
        key = f"default/{name}"
        groups[key], quorum[key] = podgroup_obj(name, need, timeout=TIMEOUT), need
        for i in range(size):
            obj = pod_obj(f"{name}-{i}", gpus, group=name)
            if late_gang and name == "abc"[count - 1] and i > 0:
                late.append(obj)
            else:
                pods[f"default/{name}-{i}"] = obj
    if draw(st.booleans(), label="a pod of no gang"):
        pods["default/solo"] = pod_obj("solo", draw(st.sampled_from([2, 4])))
    return Cluster(nodes, groups, pods, quorum), late


@settings(max_examples=EXAMPLES)
@given(
    drawn=clusters(),
    carried=st.sampled_from([CARRIED_RECORD_MAX_BYTES, 0]),
    crashes=st.integers(1, 3),
    data=st.data(),
)
def test_a_gang_is_whole_or_unbound_after_a_crash_anywhere_and_a_restart(
    drawn: tuple[Cluster, list[Obj]], carried: int, crashes: int, data: st.DataObject
) -> None:
    scenario = Scenario(data, *copy.deepcopy(drawn), carried)
    with errors_logged() as errors:
        try:
            event("records carried by the bindings" if carried else "records written first")
            for _ in range(crashes):
                scenario.run_until_crash()
                scenario.while_down()
            process = scenario.settle()
            check_settled(scenario, process)
            scenario.stop(process)
        finally:
            if scenario.running is not None and not scenario.running.is_closed():
                _close(scenario.running)  # a failed example's process: no tasks left pending
    assert scenario.loop_errors == []
    assert errors == []


def check_settled(scenario: Scenario, process: Process) -> None:
    cluster, state = scenario.cluster, process.ext.state
    for uid, request in process.requests.items():
        assert request.done(), f"the /bind of pod {uid} was never answered"
        assert isinstance(request.result(), str)
    assert process.ext.barrier.held() == []

    # 1. Whole or unbound, but for what the design lets stay partial.
    for key, need in sorted(cluster.min_member.items()):
        bound = len(cluster.bound(key))
        if 0 < bound < need:
            assert key in scenario.spoiled, (
                f"gang {key}: {bound} of its quorum {need} bound; "
                f"members {[(k, cluster.node_of(k)) for k in cluster.members(key)]}"
            )
            # Released and re-planned: it stays partial only for want of members or of room.
            unbound = [k for k in cluster.members(key) if not cluster.node_of(k)]
            missing = need - bound
            if len(unbound) >= missing:
                each = gpus_of(cluster.pods[unbound[0]])
                room = sum(
                    (NODE_GPUS - cluster.used(n)) // each
                    for n in cluster.nodes
                    if cluster.schedulable(n)
                )
                assert room < missing, (
                    f"gang {key}: {bound} of its quorum {need} bound, and room for the "
                    f"{missing} member(s) it misses"
                )
            event("a gang the design lets stay partial stayed partial")

    # 2. No node over-committed, and the model sees the cluster as it is.
    for node in cluster.nodes:
        assert cluster.used(node) <= NODE_GPUS, f"node {node} is over-committed"
    assert state.overcommitted_nodes() == []
    for key in cluster.pods:
        namespace, name = key.split("/")
        pod = state.pod_by_key(namespace, name)
        assert pod is not None, key
        assert pod.uid == cluster.uid(key), key
        assert pod.node_name == cluster.node_of(key), key

    # 3. No record left in force.
    assert process.source.commit_records() == {}

    # 4. Nothing assumed, nothing reserved once the reservations' time is up.
    assert [p.key for p in state.pods() if state.assumed_node(p.uid)] == []
    scenario.advance(TIMEOUT * 10)
    process.call(process.ext.expire)
    assert state.reserved_gpus() == 0
    assert dict(state.reservations()) == {}
