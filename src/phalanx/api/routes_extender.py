"""The verbs kube-scheduler POSTs: filter, prioritize, bind, preempt.

kube-scheduler throws away the body of any non-200 answer, so a request it could send
always gets 200, with the reason in `Error` (filter, bind) where the text reaches the
pod's FailedScheduling event. Only garbage gets 400 (413 when oversized), and a failure
inside the extender becomes a 200 answer: the server never answers 500 and never dies.

The verbs run on the event loop itself, never in a thread pool: the extender's model has a
single writer and a decision made with no `await` in between is atomic (see
`phalanx.service.extender`). These are plain Starlette routes (no dependency injection,
no schema validation): filter latency is kube-scheduler's throughput ceiling.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from phalanx.api import wire
from phalanx.api.responses import OrjsonResponse, error_response
from phalanx.core.errors import InvalidObjectError
from phalanx.core.inventory import parse_pod
from phalanx.core.model import Pod
from phalanx.service.extender import Extender

log = logging.getLogger(__name__)

VERBS = ("filter", "prioritize", "bind", "preempt")
# phalanx_request_duration_seconds{result}: answered normally / answered with an Error (or
# a degraded answer) / refused as garbage (400, 413).
OK, ERROR, BAD_REQUEST = "ok", "error", "bad-request"

# Handles a decoded-enough body: (answer, True if it is a success answer).
Handler = Callable[[bytes], Awaitable[tuple[Any, bool]]]


class BodyTooLargeError(Exception):
    """The request body is over the limit (413)."""


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing more than `limit` bytes without reading past the limit.

    Content-Length is checked first; a chunked body is counted as it arrives.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise wire.WireError(f"Content-Length is not a number: {declared!r}") from None
        if size > limit:
            raise BodyTooLargeError(
                f"request body of {size} bytes exceeds the limit of {limit} bytes"
            )
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise wire.WireError("the client disconnected before sending the whole body")
        chunk: bytes = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            raise BodyTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ExtenderVerbs:
    """The verb endpoints of one extender; `routes()` mounts them."""

    def __init__(self, extender: Extender, *, max_body_bytes: int) -> None:
        self._extender = extender
        self._limit = max_body_bytes
        duration = extender.metrics.request_duration
        # Resolved once: every series exists from the start and the hot path skips a lookup.
        self._timers = {
            (v, r): duration.labels(v, r) for v in VERBS for r in (OK, ERROR, BAD_REQUEST)
        }

    def endpoints(self) -> dict[str, Callable[[Request], Awaitable[Response]]]:
        """The verbs by path."""
        return {
            "/filter": self.filter,
            "/prioritize": self.prioritize,
            "/bind": self.bind,
            "/preempt": self.preempt,
        }

    def routes(self) -> list[BaseRoute]:
        return [
            Route(path, endpoint, methods=["POST"], include_in_schema=False)
            for path, endpoint in self.endpoints().items()
        ]

    # ---- endpoints -----------------------------------------------------------------------

    async def filter(self, request: Request) -> Response:
        return await self._serve("filter", request, self._filter, _failed_filter)

    async def prioritize(self, request: Request) -> Response:
        return await self._serve("prioritize", request, self._prioritize, _no_priorities)

    async def bind(self, request: Request) -> Response:
        return await self._serve("bind", request, self._bind, wire.binding_answer)

    async def preempt(self, request: Request) -> Response:
        return await self._serve("preempt", request, self._preempt, _no_victims)

    async def _serve(
        self, verb: str, request: Request, handle: Handler, fallback: Callable[[str], Any]
    ) -> Response:
        started = perf_counter()
        result = BAD_REQUEST
        try:
            body = await read_body(request, self._limit)
            answer, ok = await handle(body)
            response: Response = OrjsonResponse(answer)
            result = OK if ok else ERROR
        except wire.WireError as exc:
            response = error_response(400, f"bad {verb} request: {exc}")
        except BodyTooLargeError as exc:
            response = error_response(413, str(exc))
        except Exception as exc:  # any failure inside: answer, log, keep serving
            log.exception("extender %s failed", verb, extra={"verb": verb})
            response = OrjsonResponse(fallback(f"internal error: {type(exc).__name__}: {exc}"))
            result = ERROR
        self._timers[verb, result].observe(perf_counter() - started)
        return response

    # ---- verbs -----------------------------------------------------------------------------

    def _pod(self, raw: dict[str, Any]) -> Pod | str:
        """The pod, or why it cannot be read. When the model holds this very version of it
        (same UID and resourceVersion: the informer parsed the same object), that copy;
        else parsed from the request."""
        uid, version = wire.pod_version(raw)
        if not uid:  # the model keys pods by UID: two without one would be the same pod
            return f"pod {wire.pod_key(raw)}: metadata.uid: required, and empty or missing"
        known = self._extender.known_pod(uid)
        if known is not None and version and known.resource_version == version:
            return known
        return _parse_pod(raw)

    async def _filter(self, body: bytes) -> tuple[wire.FilterAnswer, bool]:
        args = wire.decode_extender_args(body)
        pod = self._pod(args.pod)
        if isinstance(pod, str):
            return wire.filter_error(args, pod), False
        result = self._extender.filter(pod, args.node_names, args.offered)
        answer = wire.filter_answer(args, result)
        return answer, not answer["Error"]

    async def _prioritize(self, body: bytes) -> tuple[list[wire.HostPriority], bool]:
        args = wire.decode_extender_args(body)
        pod = self._pod(args.pod)
        if isinstance(pod, str):
            # Prioritize errors are ignored by kube-scheduler; neutral scores say the same.
            return wire.priorities_answer(args, {}), False
        return wire.priorities_answer(args, self._extender.prioritize(pod, args.node_names)), True

    async def _bind(self, body: bytes) -> tuple[wire.BindingAnswer, bool]:
        error = await self._extender.bind(wire.decode_binding_args(body).binding)
        return wire.binding_answer(error), not error

    async def _preempt(self, body: bytes) -> tuple[wire.PreemptionAnswer, bool]:
        args = wire.decode_preemption_args(body)
        pod = self._pod(args.pod)
        if isinstance(pod, str):
            # No candidate node: preempting on behalf of a pod we cannot read could break a gang.
            return wire.preemption_answer(args, {}), False
        victims = {node: v.uids for node, v in args.victims.items()}
        return wire.preemption_answer(args, self._extender.preempt(pod, victims)), True


def _parse_pod(raw: dict[str, Any]) -> Pod | str:
    """The pod, or why it cannot be read (the text kube-scheduler will show)."""
    try:
        return parse_pod(raw)
    except InvalidObjectError as exc:
        where = f"{exc.field}: " if exc.field else ""
        return f"pod {exc.name or wire.pod_key(raw)}: {where}{exc.reason}"


def _failed_filter(error: str) -> wire.FilterAnswer:
    return wire.filter_error(None, error)


def _no_priorities(_error: str) -> list[wire.HostPriority]:
    return []


def _no_victims(_error: str) -> wire.PreemptionAnswer:
    return {"NodeNameToMetaVictims": {}}
