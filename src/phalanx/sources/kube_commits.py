"""Commit records in the live cluster (DESIGN §6): the annotation `phalanx.io/commit`.

A gang's record rides on its bindings onto each member they bind, when it is short
(`core.rollforward.carried_by_bindings`). A longer one lives on its PodGroup (of any
dialect) when it has one, else on every member pod (annotation-only gangs, and the gangs of
an upstream Workload, which holds several). Records are read back from the same watches
that feed the model (`decode_pod`, and `kube_groups.decode_group_object` for gang objects,
run on informer threads), so a new instance sees them after its first sync. `CommitBook`
keeps what the watches show, gives the annotation a gang's bindings carry (the record, when
short), writes a longer record before a gang's first binding (in the client's bind lane: the
held binds wait on it), and clears it once the gang is complete or released (in the report
lane: nothing waits on that). Loop only, except the decoders.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from phalanx.core.inventory import parse_pod
from phalanx.core.model import Pod, PodRef
from phalanx.core.rollforward import (
    COMMIT_ANNOTATION,
    CommitRecord,
    decode_commit_record,
    encode_commit_record,
)
from phalanx.sources.in_flight import Lane
from phalanx.sources.informer import ApiError
from phalanx.sources.kube_writes import Writer

log = logging.getLogger(__name__)

T = TypeVar("T")


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_path(pod: PodRef) -> str:
    return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"


# ---- decoding (informer threads) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recorded(Generic[T]):
    """A decoded object and the commit record it carries (or why that record is unreadable);
    for gang objects also its raw `status` and what Phalanx ignores in it."""

    obj: T
    commit: CommitRecord | None = None
    commit_error: str = ""
    status: Mapping[str, Any] | None = None
    resource_version: str = ""  # gang objects: the version `status` was observed at
    warnings: tuple[str, ...] = ()


def _annotations(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    return notes if isinstance(notes, Mapping) else {}


def commit_of(group_key: str | None, raw: Mapping[str, Any]) -> tuple[CommitRecord | None, str]:
    """The commit record on `raw` for gang `group_key`, or why it is unreadable."""
    text = _annotations(raw).get(COMMIT_ANNOTATION)
    if group_key is None or not isinstance(text, str) or not text:
        return None, ""
    return _decoded(group_key, text)


@functools.lru_cache(maxsize=4096)
def _decoded(group_key: str, text: str) -> tuple[CommitRecord | None, str]:
    """Decoded once per text: a bound member carries its record for life, so every later
    event of the pod (its status, say) and every member of its gang repeat the same one."""
    try:
        return decode_commit_record(group_key, text), ""
    except ValueError as exc:
        return None, str(exc)


def decode_pod(raw: dict[str, Any]) -> Recorded[Pod]:
    pod = parse_pod(raw)
    commit, error = commit_of(pod.group.key if pod.group else None, raw)
    return Recorded(pod, commit, error)


# ---- the book (loop) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Copy:
    """A record as one pod carries it, and whether that pod is bound."""

    record: CommitRecord
    bound: bool


class CommitBook:
    """The commit records the watches show, and their writes.

    `group_path(key)` is the API path of the gang's group object, or None when the gang
    has none (annotation-only): then a record written before the bindings goes on every
    member. Where a gang has several records (on its object, on its members), the newest
    is the one in force.

    A record its bindings carried stays on each bound member for the pod's life: taking it
    back would cost a write per member, and it is true. Clearing such a gang's record
    *settles* those copies instead: they are no longer among `records()`, unless a newer
    record of the gang turns up. A new instance settles them again at its first pass (every
    recorded member is bound: `COMPLETE`), with no write.
    """

    def __init__(
        self,
        writer: Writer,
        group_path: Callable[[str], str | None],
        wall_clock: Callable[[], float],
    ) -> None:
        self.writer = writer
        self.group_path = group_path
        self.wall_clock = wall_clock
        self._groups: dict[str, CommitRecord] = {}
        self._pods: dict[str, _Copy] = {}  # by pod key
        self._pods_of: dict[str, set[str]] = {}  # pod keys carrying a copy, by group key
        self._settled: dict[str, str] = {}  # by group key: copies written at or before are done
        self._records: dict[str, CommitRecord] | None = None  # `records()`, until a change
        self._carried: tuple[CommitRecord, str, str] | None = None  # record, at, its text

    # ---- what the watches show ---------------------------------------------------------

    def saw_group(self, key: str, recorded: Recorded[Any]) -> str:
        """A group object's record (or its absence); the reason it is unreadable, or ""."""
        if recorded.commit is not None:
            if self._groups.get(key) != recorded.commit:
                self._groups[key] = recorded.commit
                self._records = None
        elif self._groups.pop(key, None) is not None:
            self._records = None
        return recorded.commit_error

    def saw_pod(self, key: str, recorded: Recorded[Pod]) -> str:
        """A pod's record (or its absence); the reason it is unreadable, or ""."""
        if recorded.commit is None:
            if key in self._pods:
                self.forget_pod(key)
            return recorded.commit_error
        copy = _Copy(recorded.commit, bool(recorded.obj.node_name))
        had = self._pods.get(key)
        if had != copy:
            if had is not None and had.record.group_key != copy.record.group_key:
                self.forget_pod(key)
            self._pods[key] = copy
            self._pods_of.setdefault(copy.record.group_key, set()).add(key)
            self._records = None
        return recorded.commit_error

    def forget_group(self, key: str) -> None:
        if self._groups.pop(key, None) is not None:
            self._records = None

    def forget_pod(self, key: str) -> None:
        copy = self._pods.pop(key, None)
        if copy is None:
            return
        group_key = copy.record.group_key
        keys = self._pods_of.get(group_key, set())
        keys.discard(key)
        if not keys:
            self._pods_of.pop(group_key, None)
            self._settled.pop(group_key, None)
        self._records = None

    def records(self) -> Mapping[str, CommitRecord]:
        """The records in force now, by group key: each gang's newest, but for settled
        copies."""
        if self._records is None:
            self._records = {}
            for key in self._groups.keys() | self._pods_of.keys():
                record = self._newest(key)
                if record is not None:
                    self._records[key] = record
        return self._records

    def _newest(self, group_key: str) -> CommitRecord | None:
        newest = self._groups.get(group_key)
        settled = self._settled.get(group_key)
        for pod_key in self._pods_of.get(group_key, ()):
            record = self._pods[pod_key].record
            if settled is not None and record.at <= settled:
                continue
            if newest is None or record.at > newest.at:
                newest = record
        return newest

    # ---- writes ------------------------------------------------------------------------

    def carried(self, record: CommitRecord) -> dict[str, str]:
        """The annotations a binding carrying `record` writes onto its pod. A gang's
        bindings all ask in the same step of the loop, so the text is encoded once per gang
        (and stamped second), not once per member."""
        at = rfc3339(self.wall_clock())
        last = self._carried
        if last is None or last[0] is not record or last[1] != at:
            last = self._carried = (record, at, encode_commit_record(record, at))
        return {COMMIT_ANNOTATION: last[2]}

    async def write(self, record: CommitRecord) -> None:
        """On the group object if the gang has one, else on every member (concurrently).

        Raises ApiError if the record could not be written whole (nothing is bound yet);
        a partly written annotation-only record is taken back first.
        """
        at = rfc3339(self.wall_clock())
        body = {"metadata": {"annotations": {COMMIT_ANNOTATION: encode_commit_record(record, at)}}}
        path = self.group_path(record.group_key)
        if path is not None:
            await self.writer.patch(path, body)
            return
        pods = sorted(record.placements)
        results = await asyncio.gather(
            *(self.writer.patch(pod_path(PodRef.parse(k)), body) for k in pods),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            written = [
                k for k, r in zip(pods, results, strict=True) if not isinstance(r, BaseException)
            ]
            await self._clear({k: pod_path(PodRef.parse(k)) for k in written})
            raise failed[0]

    async def clear(self, group_key: str) -> None:
        """Remove the record from the group object and from unbound pods; settle the copies
        on bound pods (class docstring). A copy that could not be removed stays in the
        book (and in the API), so a later pass tries again."""
        copies = {k: self._pods[k] for k in self._pods_of.get(group_key, ())}
        kept = [c.record.at for c in copies.values() if c.bound]
        if kept:
            self._settled[group_key] = max(kept)
            self._records = None
        paths = {k: pod_path(PodRef.parse(k)) for k, c in copies.items() if not c.bound}
        path = self.group_path(group_key)
        if group_key in self._groups and path is not None:
            paths[""] = path
        for key in await self._clear(paths):
            if key:
                self.forget_pod(key)
            else:
                self.forget_group(group_key)

    async def _clear(self, paths: Mapping[str, str]) -> Sequence[str]:
        """Drop the annotation at each path, concurrently; the keys where it is gone now."""
        body = {"metadata": {"annotations": {COMMIT_ANNOTATION: None}}}
        keys = list(paths)
        results = await asyncio.gather(
            *(self.writer.patch(paths[k], body, lane=Lane.REPORT) for k in keys),
            return_exceptions=True,
        )
        cleared = []
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, ApiError) and result.status != 404:
                log.warning(
                    "cannot clear a commit record",
                    extra={"object": paths[key], "reason": str(result)},
                )
                continue
            if isinstance(result, BaseException) and not isinstance(result, ApiError):
                raise result  # a bug, not an API answer
            cleared.append(key)  # cleared, or gone together with its object (404)
        return cleared
