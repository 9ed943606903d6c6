"""A fake API server behind `KubeApi` (the seam `KubeSource` reads through), for the
source's unit tests: discovery answers, collections listed in one page, and watches that
block until the test sends an event or the source closes them. Writes go through a
`RecordingWriter` (the `Writer` seam) instead. The real client is exercised in tests/e2e.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from phalanx.core.model import Binding
from phalanx.sources.in_flight import Lane
from phalanx.sources.informer import ApiError
from phalanx.sources.kubeclient import MERGE_PATCH

_CLOSED = b""


class FakeWatch:
    """A watch stream: yields what `send` queues, ends when closed."""

    def __init__(self) -> None:
        self._lines: queue.Queue[bytes] = queue.Queue()

    def send(self, line: bytes) -> None:
        self._lines.put(line)

    def __iter__(self) -> Iterator[bytes]:
        while True:
            line = self._lines.get()
            if line is _CLOSED:
                return
            yield line

    def close(self) -> None:
        self._lines.put(_CLOSED)


class FakeApi:
    """Objects by collection path (e.g. `/api/v1/pods`) and discovery documents."""

    def __init__(self, discovery: Mapping[str, dict[str, Any]]) -> None:
        self.discovery = dict(discovery)  # "/apis" and "/apis/<group>/<version>" answers
        self.collections: dict[str, list[dict[str, Any]]] = {}
        self.watches: dict[str, list[FakeWatch]] = {}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.missing: set[str] = set()  # collections whose list answers 404 (CRD removed)
        self.forbidden: set[str] = set()  # collections whose list answers 403 (RBAC)
        self.metadata_reads: list[str] = []  # paths listed or watched through `metadata()`

    def add(self, path: str, *objects: dict[str, Any]) -> None:
        """Objects listed at `path` from now on (and, for open watches, ADDED)."""
        with self.lock:
            self.collections.setdefault(path, []).extend(objects)
            watches = list(self.watches.get(path, ()))
        for obj in objects:
            for watch in watches:
                watch.send(orjson.dumps({"type": "ADDED", "object": obj}))

    def modify(self, path: str, obj: dict[str, Any]) -> None:
        with self.lock:
            items = self.collections.setdefault(path, [])
            name = obj["metadata"]["name"]
            items[:] = [o for o in items if o["metadata"]["name"] != name] + [obj]
            watches = list(self.watches.get(path, ()))
        for watch in watches:
            watch.send(orjson.dumps({"type": "MODIFIED", "object": obj}))

    def remove(self, path: str, name: str) -> None:
        """Object `name` is deleted from `path` (open watches see it DELETED)."""
        with self.lock:
            items = self.collections.setdefault(path, [])
            gone = [o for o in items if o["metadata"]["name"] == name]
            items[:] = [o for o in items if o["metadata"]["name"] != name]
            watches = list(self.watches.get(path, ()))
        for obj in gone:
            for watch in watches:
                watch.send(orjson.dumps({"type": "DELETED", "object": obj}))

    # ---- KubeApi ---------------------------------------------------------------------------

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        with self.lock:
            self.requests.append((method, path))
        if method == "GET" and path in self.discovery:
            return self.discovery[path]
        raise ApiError(404, "NotFound", f"{method} {path}")

    def patch(
        self, path: str, body: Mapping[str, Any], *, content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        raise AssertionError("writes go through the RecordingWriter")

    def bind(self, binding: Binding, annotations: Mapping[str, str] | None = None) -> None:
        raise AssertionError("writes go through the RecordingWriter")

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        with self.lock:
            if path in self.missing:
                raise ApiError(404, "NotFound", path)
            if path in self.forbidden:
                raise ApiError(403, "Forbidden", f"{path} is forbidden: cannot list")
            items = list(self.collections.get(path, ()))
        return orjson.dumps({"metadata": {"resourceVersion": "1"}, "items": items})

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> FakeWatch:
        stream = FakeWatch()
        with self.lock:
            self.watches.setdefault(path, []).append(stream)
        return stream

    def metadata(self) -> MetadataOnly:
        return MetadataOnly(self)

    def close(self) -> None:
        pass


class MetadataOnly:
    """`FakeApi.metadata()`: the same collections (stored as the test wrote them), each
    list and watch recorded in `metadata_reads`."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        with self.api.lock:
            self.api.metadata_reads.append(path)
        return self.api.list(path, limit=limit, continue_token=continue_token)

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> FakeWatch:
        with self.api.lock:
            self.api.metadata_reads.append(path)
        return self.api.watch(
            path, resource_version=resource_version, timeout_seconds=timeout_seconds
        )


class RecordingWriter:
    """The `Writer` seam: every patch (with its content type) and POST, in order.

    `lanes` holds every patch's and POST's (path, lane) as it was asked, and
    `lanes_of(path)` the lanes of one path. `failing[path]` makes writes to a path raise;
    `conflicts[path]` answers that many patches to it with 409 Conflict first (as the API
    server answers a stale resourceVersion precondition); `answers[path]` is what a patch
    there answers (else {}); `objects[path]` what a GET answers (else 404), and `gets` the
    paths read.
    """

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.content_types: list[str] = []
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.failing: dict[str, ApiError] = {}
        self.conflicts: dict[str, int] = {}
        self.answers: dict[str, dict[str, Any]] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []
        self.lanes: list[tuple[str, Lane]] = []

    def lanes_of(self, path: str) -> list[Lane]:
        return [lane for p, lane in self.lanes if p == path]

    async def bind(
        self,
        binding: Binding,
        *,
        annotations: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        raise AssertionError("no binding in these tests")

    async def patch(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        content_type: str = MERGE_PATCH,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.lanes.append((path, lane))
        if path in self.failing:
            raise self.failing[path]
        self.patches.append((path, dict(body)))
        self.content_types.append(content_type)
        if self.conflicts.get(path, 0) > 0:
            self.conflicts[path] -= 1
            raise ApiError(409, "Conflict", "the object has been modified")
        return self.answers.get(path, {})

    async def post(
        self, path: str, body: Mapping[str, Any], *, lane: Lane = Lane.BIND
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.lanes.append((path, lane))
        self.posts.append((path, dict(body)))
        return {}

    async def get(self, path: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.gets.append(path)
        if path not in self.objects:
            raise ApiError(404, "NotFound", path)
        return self.objects[path]

    async def aclose(self) -> None:
        pass

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        return [body for _, body in self.posts if reason is None or body["reason"] == reason]


def group_list(*group_versions: str) -> dict[str, Any]:
    """`GET /apis`: an APIGroupList offering these group-versions."""
    groups: dict[str, list[str]] = {}
    for gv in group_versions:
        groups.setdefault(gv.partition("/")[0], []).append(gv)
    return {
        "kind": "APIGroupList",
        "groups": [
            {"name": g, "versions": [{"groupVersion": gv} for gv in gvs]}
            for g, gvs in groups.items()
        ],
    }


def resource_list(*names: str) -> dict[str, Any]:
    """`GET /apis/<group>/<version>`: an APIResourceList naming these resources."""
    return {"kind": "APIResourceList", "resources": [{"name": n} for n in names]}


async def until(what: str, probe: Callable[[], object], *, attempts: int = 2000) -> None:
    """Yield to the loop (and the informer threads) until `probe()` is true."""
    for _ in range(attempts):
        if probe():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")
