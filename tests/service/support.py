"""Shared set-up for the service tests: timers on the test's clock (`clocks.FakeClock`),
scripted sources and a started extender.

The sources here are collaborators of the code under test (the real `Extender`): a
`ClusterFileSource` whose I/O can fail as a test says, yield to the event loop, and run a
hook in the middle of a write, so a test can interleave a delete, an expiry or another
request with the barrier's awaits. The real sources are exercised in tests/sources and
tests/e2e.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, cast, overload

from builders import node_obj, pod_obj, podgroup_obj
from clocks import FakeClock
from phalanx.core.model import Binding, Pod, PodRef
from phalanx.core.rollforward import CARRIED_RECORD_MAX_BYTES, CommitRecord
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.service.rollforward import RollForwardSettings
from phalanx.service.timers import Timers
from phalanx.sources.clusterfile import ClusterFileSource

NODES = ["n1", "n2", "n3"]

Hook = Callable[[], None]


@contextlib.contextmanager
def errors_logged() -> Iterator[list[str]]:
    """What Phalanx logs at ERROR and above while the block runs (a failed background task,
    a binder, barrier or roll-forward pass that caught a bug): nothing, hopefully."""
    seen: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    handler = Recorder(logging.ERROR)
    logger = logging.getLogger("phalanx")
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


class FakeTimers:
    """Barrier timeouts on the test's clock: they fire only when the test says time passed."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._due: list[tuple[float, int, Callable[[], None], list[bool]]] = []
        self._seq = 0

    def call_later(self, delay: float, callback: Callable[[], None]) -> _FakeTimer:
        cancelled = [False]
        self._seq += 1
        self._due.append((self.clock.now + delay, self._seq, callback, cancelled))
        return _FakeTimer(cancelled)

    def fire_due(self) -> None:
        """Run, in deadline order, every callback whose time has come and is not cancelled."""
        ready = sorted(t for t in self._due if t[0] <= self.clock.now)
        self._due = [t for t in self._due if t[0] > self.clock.now]
        for _, _, callback, cancelled in ready:
            if not cancelled[0]:
                callback()


class _FakeTimer:
    def __init__(self, cancelled: list[bool]) -> None:
        self._cancelled = cancelled

    def cancel(self) -> None:
        self._cancelled[0] = True


class ScriptedSource(ClusterFileSource):
    """A cluster file whose writes fail, yield and run hooks as a test scripts them.

    * `failures[pod name]`: exceptions its next bindings raise, in order;
    * `commit_failures`: exceptions the next commit-record writes raise;
    * `hooks[verb]` (`commit`, `bind`, `status`): callables run, once each, inside the next
      such write, after it has yielded to the loop and before it takes effect (what they
      start runs first);
    * `yielding`: every write yields to the loop first (as a real API call does).

    `order` lists the writes (`commit <gang>`, `bind <pod>`) as they took effect, and
    `carried` the commit record each binding carried, by pod name.
    """

    def __init__(
        self,
        objects: Any,
        failures: Mapping[str, list[Exception]] | None = None,
        *,
        yielding: bool = False,
        dra_extended_resources: bool = True,
    ) -> None:
        super().__init__(objects, dra_extended_resources=dra_extended_resources)
        self.failures: dict[str, list[Exception]] = {
            k: list(v) for k, v in (failures or {}).items()
        }
        self.commit_failures: list[Exception] = []
        self.hooks: dict[str, list[Hook]] = {}
        self.yielding = yielding
        self.order: list[str] = []
        self.carried: dict[str, CommitRecord] = {}  # by pod name: the record its binding carried

    def on(self, verb: str, hook: Hook) -> None:
        self.hooks.setdefault(verb, []).append(hook)

    async def _io(self, verb: str) -> None:
        hooks = self.hooks.pop(verb, [])
        if self.yielding or hooks:
            await asyncio.sleep(0)
        for hook in hooks:
            hook()
        if hooks:  # what a hook started (a request, say) runs before the write takes effect
            await asyncio.sleep(0)

    async def write_commit_record(self, record: CommitRecord) -> None:
        self.order.append(f"commit {record.group_key}")
        await self._io("commit")
        if self.commit_failures:
            raise self.commit_failures.pop(0)
        await super().write_commit_record(record)

    async def bind(
        self,
        binding: Binding,
        *,
        record: CommitRecord | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        name = binding.pod.name
        await self._io("bind")
        pending = self.failures.get(name)
        if pending:
            raise pending.pop(0)
        self.order.append(f"bind {name}")
        if record is not None:
            self.carried[name] = record
        await super().bind(binding, record=record, timeout_seconds=timeout_seconds)

    async def update_group_status(self, status: Any) -> None:
        await self._io("status")
        await super().update_group_status(status)


S = TypeVar("S", bound=ScriptedSource)


class RecordingSource(ScriptedSource):
    """A scripted source that also keeps commit records for roll-forward (a `CommitLog`)."""

    def __init__(self, objects: Any, failures: Any = None, **kw: Any) -> None:
        super().__init__(objects, failures, **kw)
        self.lease_held = True
        self.cleared: list[str] = []

    @property
    def may_roll_forward(self) -> bool:
        return self.lease_held

    def commit_records(self) -> Mapping[str, CommitRecord]:
        return dict(self.records)

    async def clear_commit_record(self, group_key: str) -> None:
        self.cleared.append(group_key)
        self.records.pop(group_key, None)


def carried(source: ScriptedSource) -> dict[str, set[str]]:
    """By bound pod name: the members named by the commit record its binding carried."""
    return {name: set(record.placements) for name, record in source.carried.items()}


def gang_objects(
    name: str = "g",
    size: int = 3,
    gpus: int = 8,
    min_member: int | None = None,
    timeout: int | None = None,
) -> list[dict[str, Any]]:
    return [
        podgroup_obj(name, min_member or size, timeout=timeout),
        *(pod_obj(f"{name}-{i}", gpus, group=name) for i in range(size)),
    ]


@overload
async def started(
    objects: list[dict[str, Any]],
    *,
    failures: Mapping[str, list[Exception]] | None = None,
    barrier: float = 5.0,
    clock: Callable[[], float] | None = None,
    yielding: bool = False,
    retries: int = 3,
    roll_forward: RollForwardSettings | None = None,
    timers: Timers | None = None,
    nominate_members: bool = True,
    complete_members: bool = True,
    carried_record_bytes: int = CARRIED_RECORD_MAX_BYTES,
    report_hold: float = 0.0,
) -> tuple[Extender, ScriptedSource]: ...


@overload
async def started(
    objects: list[dict[str, Any]],
    *,
    failures: Mapping[str, list[Exception]] | None = None,
    barrier: float = 5.0,
    clock: Callable[[], float] | None = None,
    source_class: type[S],
    yielding: bool = False,
    retries: int = 3,
    roll_forward: RollForwardSettings | None = None,
    timers: Timers | None = None,
    nominate_members: bool = True,
    complete_members: bool = True,
    carried_record_bytes: int = CARRIED_RECORD_MAX_BYTES,
    report_hold: float = 0.0,
) -> tuple[Extender, S]: ...


async def started(
    objects: list[dict[str, Any]],
    *,
    failures: Mapping[str, list[Exception]] | None = None,
    barrier: float = 5.0,
    clock: Callable[[], float] | None = None,
    source_class: type[ScriptedSource] = ScriptedSource,
    yielding: bool = False,
    retries: int = 3,
    roll_forward: RollForwardSettings | None = None,
    timers: Timers | None = None,
    nominate_members: bool = True,
    complete_members: bool = True,
    carried_record_bytes: int = CARRIED_RECORD_MAX_BYTES,
    report_hold: float = 0.0,
) -> tuple[Extender, ScriptedSource]:
    source = source_class([node_obj(n) for n in NODES] + objects, failures, yielding=yielding)
    ext = Extender(
        source,
        ServiceSettings(
            barrier_timeout_seconds=barrier,
            bind_retry_backoff_seconds=0.0,
            bind_retries=retries,
            roll_forward=roll_forward or RollForwardSettings(),
            nominate_members=nominate_members,
            complete_members=complete_members,
            carried_record_bytes=carried_record_bytes,
            # Status and Events at once: these specs read them as a gang binds. Held
            # behind bindings: tests/service/test_bindings_first.py.
            report_hold_seconds=report_hold,
        ),
        clock=clock or FakeClock(),
        timers=timers,
    )
    await ext.start()
    return ext, source


def pod_of(ext: Extender, name: str, namespace: str = "default") -> Pod:
    pod = ext.state.pod_by_key(namespace, name)
    assert pod is not None, f"no pod {namespace}/{name} in the model"
    return pod


def group_view(ext: Extender, name: str, namespace: str = "default") -> dict[str, Any]:
    """The gang's /debug view, which the test expects to exist, as the JSON it is served as."""
    view = ext.debug_group(namespace, name)
    assert view is not None, f"no gang {namespace}/{name} in the model"
    return cast(dict[str, Any], view)


def topology_view(ext: Extender) -> dict[str, Any]:
    """The /debug topology view, as the JSON it is served as."""
    return cast(dict[str, Any], ext.debug_topology())


def reserve_all(ext: Extender, names: Iterable[str]) -> dict[str, str]:
    nodes = {}
    for n in names:
        result = ext.filter(pod_of(ext, n), NODES)
        assert len(result.feasible) == 1, result
        nodes[n] = result.feasible[0]
    return nodes


async def bind(ext: Extender, name: str, node: str) -> str:
    return await ext.bind(Binding(pod_of(ext, name).ref, node))


def binding(name: str, node: str, uid: str = "", namespace: str = "default") -> Binding:
    return Binding(PodRef(namespace, name, uid), node)
