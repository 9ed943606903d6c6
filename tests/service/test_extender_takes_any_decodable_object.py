"""Whatever object decodes, the real Extender takes it: the model applies it and every verb
answers, with a value, never an exception.

The decoder fuzz (tests/core/test_decoders_refuse_garbage_clearly.py) shows that a garbled
object is decoded or refused clearly. This one follows what decodes into the model and
the verbs: a small cluster of every gang dialect, `phalanx.io/*` annotations and DRA
objects is loaded with some objects garbled (tests/json_garbage.py), then garbled,
restored and deleted objects arrive as watch updates between rounds of filter,
prioritize, bind and preempt, as kube-scheduler would send them. An exception in
`Extender.apply` would lose a watch update (the model then diverges from the cluster); one
in a verb is an opaque "internal error" answer. So:

* nothing raises out of an update or a verb, and nothing fails on the loop or in a
  background task (the loop's exception handler and the `phalanx` error log stay empty);
* filter answers, and prioritize scores, only the nodes offered; preempt answers only the
  nodes it was given; every bind is answered once things settle;
* Phalanx's bindings over-commit no node that was not over-committed already (garbled
  pods bound by others can over-commit one: Phalanx cannot undo that);
* the model stays consistent: a pod found by name is the pod of that name, reserved
  capacity is exactly the reserved members', and once settled nothing is assumed or
  reserved and the kept counts are what counting the pods says.

Besides garbage (json_garbage.py), an object may be given values from elsewhere in the
cluster (another pod's UID, another gang's name or size), which decode more often and
mean something where they land.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support import FakeTimers, ScriptedSource, errors_logged

from builders import (
    LEAF,
    SPINE,
    claim_obj,
    claim_template_obj,
    composite_obj,
    device_request,
    dra_pod_obj,
    gpu_slice_obj,
    grove_pod_obj,
    grove_podgang_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    node_obj,
    nvidia_class_objs,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from clocks import FakeClock
from json_garbage import at, garbled, objects_in, places
from phalanx.core.cache import ClusterState, MemberState
from phalanx.core.dra import (
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import registry
from phalanx.core.inventory import parse_object, parse_pod
from phalanx.core.model import EMPTY, Binding, Pod, Resources
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.service.rollforward import RollForwardSettings

# Each example loads, updates and drives a cluster of some 25 pods a few times: about
# 20 ms, so some 5 s in all (every run draws new examples).
EXAMPLES = 200
BARRIER_SECONDS = 5.0  # on the fake clock: binds held at a gate are answered when it passes
GHOST = "ghost"  # offered, never in the cluster: kube-scheduler's view may lag the model's

Obj = dict[str, Any]


def seeds() -> list[Obj]:
    """A small cluster every decoder and every planner path has something in: GPU nodes
    (racked, tainted, without GPUs, DRA-only), single pods, gangs of every dialect family
    (scheduler-plugins, Volcano, KAI, Grove, upstream PodGroups under a composite and a
    Workload, annotations only) with placement, topology and plan annotations, a bound
    gang to preempt, DRA claims."""
    sp_annotations = {
        "phalanx.io/placement": "spread",
        "phalanx.io/plan": '{"sequence": [{"execute": "sp-0"}, {"execute": "sp-1"}]}',
    }
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    tolerant = pod_obj("tolerant", 2, annotations={"phalanx.io/placement": "pack"})
    tolerant["spec"]["tolerations"] = [toleration]
    return [
        node_obj("n1", 8, labels={SPINE: "s0", LEAF: "l0"}, clique="c0"),
        node_obj("n2", 8, labels={SPINE: "s0", LEAF: "l1"}, clique="c1"),
        node_obj("n3", 4, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]),
        node_obj("n4", 0, cpu="16", memory="64Gi"),
        node_obj("n5", 0),
        node_obj("n6", 8, labels={SPINE: "s0", LEAF: "l0"}, clique="c0"),
        *nvidia_class_objs(),
        gpu_slice_obj("n5", 4),
        claim_template_obj("one", device_request("gpu", "gpu.nvidia.com", 1)),
        claim_obj("shared", device_request("gpu", "gpu.nvidia.com", 1)),
        dra_pod_obj("dra-0", templates={"gpu": "one"}),
        dra_pod_obj("dra-1", claims={"gpu": "shared"}),
        pod_obj("solo", 1, annotations={"phalanx.io/gpu-memory-mib": "40000"}),
        pod_obj("cpu-only", 0, annotations={"phalanx.io/plan-node": "n4"}),
        tolerant,
        pod_obj("running", 2, node="n1", phase="Running"),
        podgroup_obj("sp", 2, timeout=30, annotations=sp_annotations),
        *(pod_obj(f"sp-{i}", 3, group="sp") for i in range(2)),
        podgroup_obj("done", 2, annotations={"phalanx.io/topology": "default"}),
        *(pod_obj(f"done-{i}", 2, group="done", node="n2", phase="Running") for i in range(2)),
        volcano_podgroup_obj("vg", 2, min_task_member={"w": 2}),
        *(
            pod_obj(f"vg-{i}", 2, volcano_group="vg", annotations={"volcano.sh/task-spec": "w"})
            for i in range(2)
        ),
        kai_podgroup_obj("kg", 2),
        *(kai_pod_obj(f"kg-{i}", "kg", gpus=1) for i in range(2)),
        upstream_podgroup_obj("up", 2, topology_key=LEAF),
        *(pod_obj(f"up-{i}", 2, scheduling_group="up") for i in range(2)),
        *(
            pod_obj(
                f"ann-{i}",
                1,
                annotations={
                    "phalanx.io/pod-group": "ann",
                    "phalanx.io/min-member": "2",
                    "phalanx.io/topology-required": LEAF,
                },
            )
            for i in range(2)
        ),
        grove_podgang_obj("gg", {"gw": 2}),
        *(grove_pod_obj(f"gw-{i}", "gg", "gw", gpus=1) for i in range(2)),
        composite_obj("ray", 2, disruption_mode="all"),
        upstream_podgroup_obj("ray-head", 1, parent="ray"),
        upstream_podgroup_obj("ray-workers", 1, parent="ray"),
        pod_obj("ray-0", 1, scheduling_group="ray-head"),
        pod_obj("ray-1", 1, scheduling_group="ray-workers"),
        workload_obj("wl", {"workers": 2}),
        *(
            pod_obj(f"wl-{i}", 1, workload_ref={"name": "wl", "podGroup": "workers"})
            for i in range(2)
        ),
    ]


SEEDS = seeds()
NODE_NAMES = sorted(o["metadata"]["name"] for o in SEEDS if o["kind"] == "Node")
POD_SEEDS = [i for i, seed in enumerate(SEEDS) if seed["kind"] == "Pod"]
DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim")


def decodes(obj: Obj) -> bool:
    """Whether the cluster file source takes `obj` (as it decodes it), or refuses it."""
    try:
        if obj.get("apiVersion") == "resource.k8s.io/v1" and obj.get("kind") in DRA_KINDS:
            parse = {
                "DeviceClass": parse_device_class,
                "ResourceSlice": parse_resource_slice,
                "ResourceClaimTemplate": parse_resource_claim_template,
                "ResourceClaim": parse_resource_claim,
            }[obj["kind"]]
            parse(obj)
        elif registry.parse_group_object(obj) is None:
            parse_object(obj)
    except InvalidObjectError:
        return False
    return True


def request_pod(obj: Obj) -> Pod | None:
    """The pod a verb's request carries, as the HTTP layer decodes it (None: it answers
    with the refusal)."""
    try:
        return parse_pod(obj)
    except InvalidObjectError:
        return None


def deleter(seed: Obj) -> Callable[[ScriptedSource], None]:
    """How the source deletes the object `seed` (by its uid, name or key)."""
    meta, kind = seed["metadata"], seed["kind"]
    if seed.get("apiVersion") == "resource.k8s.io/v1":
        key = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        return lambda source: source.delete_dra(kind, key)
    if kind == "Node":
        return lambda source: source.delete_node(meta["name"])
    if kind == "Pod":
        return lambda source: source.delete_pod(meta["uid"])
    group = registry.parse_group_object(seed)
    assert group is not None
    return lambda source: source.delete_group(group.value.key)


def seed_index() -> st.SearchStrategy[int]:
    return st.integers(0, len(SEEDS) - 1)


def _scalars_and_keys(value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _scalars_and_keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _scalars_and_keys(item)


# Every key and scalar value of the cluster: put in another place, one decodes more often
# than garbage does, and means something there (another pod's UID, gang or node; another
# gang's size; a label the topology reads).
KEYS = sorted({key for seed in SEEDS for key, _ in _scalars_and_keys(seed)})
VALUES = sorted(
    {
        (type(v).__name__, v)
        for seed in SEEDS
        for _, v in _scalars_and_keys(seed)
        if isinstance(v, str | int | bool)
    },
    key=repr,
)


@st.composite
def transplanted(draw: st.DrawFn, seed: Obj) -> Obj:
    """A copy of `seed` with one to three values (or keys and values) from elsewhere in the
    cluster put in it."""
    obj = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        value = VALUES[draw(st.integers(0, len(VALUES) - 1))][1]
        if draw(st.booleans()):
            where = objects_in(obj)
            key = KEYS[draw(st.integers(0, len(KEYS) - 1))]
            at(obj, where[draw(st.integers(0, len(where) - 1))])[key] = value
        else:
            options = places(obj)
            path = options[draw(st.integers(0, len(options) - 1))]
            at(obj, path[:-1])[path[-1]] = value
    return obj


@st.composite
def decodable_garble(draw: st.DrawFn, index: int) -> Obj | None:
    """The seed garbled or given values from elsewhere, if what came out decodes (else
    None: the source refuses it, and the decoder fuzz already says how)."""
    seed = SEEDS[index]
    obj = draw(
        st.one_of(garbled(seed).map(lambda made: made[0]), transplanted(seed)),
        label=f"changed {seed['metadata']['name']}",
    )
    return obj if decodes(obj) else None


# One step between rounds of verbs: an update with a changed object, the seed put back, an
# object deleted, time passing (gates time out, reservations expire), or a round of verbs
# that leaves out every third pending pod from the given one on (0: none), so that binds
# wait at their gang's gate while later steps change the cluster, and may withhold a node
# (kube-scheduler's own filters refused it).
steps = st.one_of(
    seed_index().flatmap(lambda i: st.tuples(st.just("change"), st.just(i), decodable_garble(i))),
    st.tuples(st.just("restore"), seed_index(), st.none()),
    st.tuples(st.just("delete"), seed_index(), st.none()),
    st.tuples(st.just("time"), st.sampled_from((1, BARRIER_SECONDS, 61)), st.none()),
    st.tuples(st.just("verbs"), st.integers(0, 3), st.sampled_from([None, *NODE_NAMES])),
    # kube-scheduler asks about a version of a pod the watch has not delivered (the HTTP
    # layer decodes it from the request): the extender learns it from there.
    st.sampled_from(POD_SEEDS).flatmap(
        lambda i: st.tuples(st.just("ask"), st.just(i), decodable_garble(i))
    ),
)


@contextmanager
def failures_recorded(loop: asyncio.AbstractEventLoop) -> Iterator[list[str]]:
    """What the loop's exception handler saw and what the service logged as an error (a
    failed background task, a binder or barrier that caught a bug): nothing, hopefully."""
    with errors_logged() as seen:
        loop.set_exception_handler(lambda _loop, context: seen.append(str(context)))
        yield seen


class Driver:
    """kube-scheduler over the extender: each pending pod filtered with every node offered,
    prioritized, and sent to /bind on what filter answered, one pod after another."""

    def __init__(
        self, ext: Extender, source: ScriptedSource, clock: FakeClock, timers: FakeTimers
    ) -> None:
        self.ext, self.source, self.clock, self.timers = ext, source, clock, timers
        self.binds: list[asyncio.Task[str]] = []
        self.overcommitted: set[str] = set()  # by Phalanx's decisions, not before them
        self.withheld: str | None = None  # a node kube-scheduler's own filters refused

    def offered(self) -> list[str]:
        names = {info.name for info in self.ext.state.nodes()} | set(NODE_NAMES) | {GHOST}
        return sorted(names - {self.withheld})

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    async def round(self, leave_out: int = 0) -> None:
        """Ask about every pending pod but every third from `leave_out` on (0: none); the
        views the HTTP layer serves."""
        state = self.ext.state
        pending = [p for p in state.pods() if not state.is_bound(p)]
        for position, pod in enumerate(sorted(pending, key=lambda p: p.key)):
            if leave_out and position % 3 == leave_out - 1:
                continue
            if state.pod(pod.uid) is not None:  # not replaced since the round began
                await self.ask(pod)
        self.ext.debug_groups()
        self.ext.debug_topology()
        await self.ext.metrics.exposition()

    async def ask(self, pod: Pod) -> None:
        """One scheduling cycle of `pod`: filter and prioritize with every node offered, a
        preempt, and a bind to the first feasible node (left running: it may wait at its
        gang's gate)."""
        state = self.ext.state
        before = set(state.overcommitted_nodes())
        offered = self.offered()
        result = self.ext.filter(pod, offered)
        answered = {*result.feasible, *result.failed, *result.unresolvable}
        assert answered <= set(offered), f"{pod.key}: answered {answered - set(offered)}"
        scores = self.ext.prioritize(pod, offered)
        assert set(scores) <= set(offered), f"{pod.key}: scored {set(scores) - set(offered)}"
        victims = {
            name: [p.uid for p in state.pods() if p.node_name == name]
            for name in offered[: len(offered) // 2 + 1]
        }
        kept = self.ext.preempt(pod, victims)
        assert set(kept) <= set(victims), f"preempt answered {set(kept) - set(victims)}"
        if result.feasible:
            known = state.pod(pod.uid) or pod
            binding = Binding(known.ref, result.feasible[0])
            self.binds.append(asyncio.create_task(self.ext.bind(binding)))
        await self.settle()
        self.overcommitted |= set(state.overcommitted_nodes()) - before

    def check_pods_by_name(self) -> None:
        """A pod looked up by namespace and name (as a bind names it) is the pod of that
        name, and every pod in the model is found by its own."""
        state = self.ext.state
        named = {(p.namespace, p.name) for p in state.pods()}
        named |= {("default", SEEDS[i]["metadata"]["name"]) for i in POD_SEEDS}
        for namespace, name in named:
            found = state.pod_by_key(namespace, name)
            assert found is None or found.key == f"{namespace}/{name}", f"{name}: {found}"
        for pod in state.pods():
            assert state.pod_by_key(pod.namespace, pod.name) == pod, f"{pod.key}: not found"

    async def time_passes(self, seconds: float) -> None:
        """What the loop does as time passes: gates time out, reservations expire, statuses
        are refreshed."""
        self.clock.now += seconds
        self.timers.fire_due()
        self.ext.expire()
        self.ext.refresh_statuses()
        await self.settle()


def reserved_is_the_reserved_members(state: ClusterState) -> None:
    """Each node's reserved capacity is exactly its reserved members' requests (as in
    test_barrier_interleavings.py)."""
    per_node: dict[str, Resources] = {}
    for reservation in state.reservations().values():
        for m in reservation.members:
            if m.state is MemberState.RESERVED:
                per_node[m.node] = per_node.get(m.node, EMPTY) + m.requests
    for info in state.nodes():
        assert info.reserved == per_node.get(info.name, EMPTY), info.name


def settled(state: ClusterState) -> None:
    """Once every gate and reservation is gone: nothing assumed or reserved, and the
    counts kept as pods change are what counting the pods says (as in
    test_barrier_interleavings.py)."""
    assert [p.key for p in state.pods() if state.assumed_node(p.uid)] == []
    assert state.reserved_gpus() == 0
    pending = [p for p in state.pods() if not state.is_bound(p) and not (p.terminal or p.deleting)]
    assert state.pending_count() == len(pending)
    for key in state.group_keys():
        assert state.bound_count(key) == len(state.bound_members(key)), key


async def scenario(
    loaded: list[Obj],
    changes: Sequence[tuple[str, float, Obj | str | None]],
    clock: FakeClock,
    *,
    yielding: bool,
    complete_members: bool,
) -> list[str]:
    """Load `loaded`, run `changes`, a last round of verbs, let every gate time out and
    every reservation expire; the nodes Phalanx's bindings over-committed. `yielding`:
    every write yields to the loop, as an API call does."""
    timers = FakeTimers(clock)
    source = ScriptedSource(loaded, yielding=yielding)
    ext = Extender(
        source,
        ServiceSettings(
            barrier_timeout_seconds=BARRIER_SECONDS,
            bind_retry_backoff_seconds=0.0,
            roll_forward=RollForwardSettings(interval_seconds=3600, grace_seconds=3600),
            complete_members=complete_members,
        ),
        clock=clock,
        timers=timers,
    )
    await ext.start()
    driver = Driver(ext, source, clock, timers)
    try:
        for action, number, changed in changes:
            if action == "change" and isinstance(changed, dict):
                source.apply(changed)
            elif action == "restore":
                source.apply(SEEDS[int(number)])
            elif action == "delete":
                deleter(SEEDS[int(number)])(source)
            elif action == "time":
                await driver.time_passes(number)
            elif action == "ask" and isinstance(changed, dict):
                pod = request_pod(changed)
                if pod is not None:
                    await driver.ask(pod)
            elif action == "verbs":
                driver.withheld = changed if isinstance(changed, str) else None
                await driver.round(int(number))
                driver.withheld = None
            await driver.settle()
            driver.check_pods_by_name()
            reserved_is_the_reserved_members(ext.state)
        before = set(ext.state.overcommitted_nodes())
        await driver.round()
        await driver.time_passes(BARRIER_SECONDS)
        await driver.time_passes(3600)
        for task in driver.binds:
            assert task.done(), "a bind request was never answered"
            assert isinstance(task.result(), str)
        settled(ext.state)
        driver.overcommitted |= set(ext.state.overcommitted_nodes()) - before
        return sorted(driver.overcommitted)
    finally:
        await ext.stop()
        await driver.settle()


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_any_decodable_object_is_applied_and_every_verb_answers(data: st.DataObject) -> None:
    garbled_at_load = data.draw(
        st.dictionaries(seed_index(), st.none(), max_size=3), label="garbled at load"
    )
    loaded = list(SEEDS)
    for index in garbled_at_load:
        obj = data.draw(decodable_garble(index))
        if obj is not None:
            loaded[index] = obj
    changes = data.draw(st.lists(steps, max_size=8), label="changes")
    yielding = data.draw(st.booleans(), label="every write yields")
    complete_members = data.draw(st.booleans(), label="complete members")

    loop = asyncio.new_event_loop()
    try:
        with failures_recorded(loop) as seen:
            overcommitted = loop.run_until_complete(
                scenario(
                    loaded,
                    changes,
                    FakeClock(),
                    yielding=yielding,
                    complete_members=complete_members,
                )
            )
        assert seen == [], seen
        assert overcommitted == [], f"Phalanx's bindings over-committed {overcommitted}"
    finally:
        loop.close()
