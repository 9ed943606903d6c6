"""The asynchronous API writer: bindings, merge patches and Events on the event loop.

The blocking `kubeclient.KubeClient` needs a thread per call in flight, so a thread pool
caps how many writes wait on the API server at once (16 threads at about 100 ms a call
bind at most about 160 pods/s). `AsyncKubeClient` makes the same writes from the event
loop, many in flight at once:

* **Transport.** A `Sender` (`api_transport`): by default aiohttp's pool of keep-alive
  HTTP/1.1 connections, one request in flight on each; with `http2=True`, httpx's own,
  one HTTP/2 connection (negotiated by ALPN) whose streams carry the requests. aiohttp
  speaks no HTTP/2, but parses in C: on a loaded control-plane host its CPU per request
  is about a quarter of httpx's pure-Python h2, and kube-apiserver spends less CPU per
  request over HTTP/1.1 as well (bench/bench_binder.py), so HTTP/1.1 is the default.
* **Load.** What limits the load is the client's QPS and burst, as in client-go: a token
  bucket admits `burst` requests at once, then `qps` a second, and every attempt
  (retries too) takes a token; bindings do not queue behind reports for theirs
  (`TokenBucket`). On top of that, at most `max_in_flight` requests wait for
  an answer at once, in two lanes (`in_flight`): a quarter of the slots are kept for
  bindings and commit records (`Lane.BIND`), and a freed slot goes to them before any
  best-effort report (`Lane.REPORT`).
* **Overload.** A 429 (after its `Retry-After` at least), a 5xx, or no answer at all is
  retried with exponential backoff until the deadline the caller gives. Past it, the
  last error is raised. Any other 4xx is raised at once.

One call, as a state machine::

        ┌──────────────────────────────────────────────┐
        ▼                                              │ backoff ends before the deadline
    admit: a token from the bucket,                    │
           then a slot under the in-flight cap ─── none before the deadline ──▶ raise
        │                                              │
        ▼                                              │
    send ──▶ 2xx ───────────────────────────────────────────────────────────▶ done
        ├──▶ 401, first in this call: read the credential again, send again
        ├──▶ 429 / 5xx / no answer ────────────────────┤
        │                                              └─ else ──▶ raise the last error
        └──▶ any other 4xx ─────────────────────────────────────────────────▶ raise

Errors are `informer.ApiError`, as from the blocking client: the HTTP status, or 0 when
no answer came. A binding's refusal is a `BindError` (`kubeclient.bind_error`: 404 and a
UID precondition failure are gone, another 409 is a conflict).

**A retried binding.** The API server keeps no request ids, so when an attempt got no
answer (or a 5xx) the pod may be bound already. The retry then answers 409 "pod ... is
already assigned to node X". When X is the node this call asked for, the earlier attempt
landed: the call succeeds. The UID precondition is checked before that refusal, so it is
the pod we meant. A 409 on a call whose earlier attempts were all refused for certain
(a 429, a connection that never opened) stays a conflict: as in the blocking client,
someone else bound the pod.

Loop-only: one event loop owns a client; nothing in it is thread-safe.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from phalanx.sources.api_transport import (
    AiohttpSender,
    HttpxSender,
    Reply,
    Sender,
    SendError,
    tls_context,
)
from phalanx.sources.in_flight import InFlight, Lane
from phalanx.sources.informer import ApiError
from phalanx.sources.kubeclient import (
    JSON,
    MERGE_PATCH,
    USER_AGENT,
    ClusterAccess,
    api_error,
    bind_error,
    binding_body,
    binding_path,
    in_cluster_access,
    kubeconfig_access,
)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

# Default cap on requests in flight: at QPS 500 and the 100 ms a saturated API server takes
# to answer, 50 are in flight; more only opens connections (HTTP/1.1) or, in httpx's pool,
# costs CPU (it rescans its queue whenever a request ends). httpx's HTTP/2 connection
# carries at most 100 streams anyway.
IN_FLIGHT_CAP = 64
# The share of in-flight slots kept for bindings and commit records (`in_flight`).
BIND_RESERVE_FRACTION = 0.25
# The API server's refusal of a second binding (pkg/registry/core/pod/storage).
_ASSIGNED = re.compile(r'is already assigned to node "([^"]+)"')


@dataclass(frozen=True, slots=True)
class AsyncKubeSettings:
    # Sustained requests per second (client-go's QPS). kube-scheduler's own default is 50;
    # 250 outruns the thread pool it replaces (about 160 binds/s) with room for events.
    qps: float = 250.0
    # Requests admitted at once after a quiet spell (client-go's Burst): the bindings of a
    # 256-member gang, its commit record and its events go out together.
    burst: int = 500
    # Requests awaiting an answer at once (over HTTP/1.1: connections); None: `burst`, up
    # to IN_FLIGHT_CAP.
    max_in_flight: int | None = None
    # One attempt's limit (seconds), as the blocking client's read timeout.
    request_timeout_seconds: float = 30.0
    # HTTP/2 (httpx + h2, offered by ALPN) instead of keep-alive HTTP/1.1 connections
    # (aiohttp). Off by measurement (bench/bench_binder.py): pure-Python h2 costs about four
    # times aiohttp's CPU per request, and kube-apiserver more CPU per request over h2 too.
    http2: bool = False
    # How long overload (429, 5xx, no answer) is retried when the caller gives no deadline
    # (seconds): well inside kube-scheduler's 30 s extender timeout for /bind.
    retry_window_seconds: float = 10.0
    # First backoff and its cap (seconds, doubling); a 429's Retry-After is waited at least.
    backoff_initial_seconds: float = 0.05
    backoff_cap_seconds: float = 2.0
    # Each backoff grows by up to this fraction at random, so that callers throttled together
    # do not all come back in the same instant.
    backoff_jitter: float = 0.2
    # How long a bearer token is reused before the loader is asked again (seconds): client-go
    # re-reads a projected token file every minute; the kubelet rotates it long before expiry.
    token_refresh_seconds: float = 60.0

    def __post_init__(self) -> None:
        positive = {
            "qps": self.qps,
            "burst": self.burst,
            "request_timeout_seconds": self.request_timeout_seconds,
            "retry_window_seconds": self.retry_window_seconds,
            "backoff_initial_seconds": self.backoff_initial_seconds,
            "backoff_cap_seconds": self.backoff_cap_seconds,
            "token_refresh_seconds": self.token_refresh_seconds,
        }
        if self.max_in_flight is not None:
            positive["max_in_flight"] = self.max_in_flight
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"AsyncKubeSettings.{name} must be > 0, got {value!r}")
        if self.backoff_jitter < 0:
            jitter = self.backoff_jitter
            raise ValueError(f"AsyncKubeSettings.backoff_jitter must be >= 0, got {jitter!r}")

    @property
    def in_flight_limit(self) -> int:
        if self.max_in_flight is not None:
            return self.max_in_flight
        return min(self.burst, IN_FLIGHT_CAP)

    @property
    def bind_reserve(self) -> int:
        """In-flight slots no report may take (none when there is only one)."""
        limit = self.in_flight_limit
        return min(limit - 1, math.ceil(limit * BIND_RESERVE_FRACTION))


class TokenBucket:
    """client-go's token bucket (golang.org/x/time/rate): `burst` tokens, refilled at `qps`,
    with bindings first.

    A caller takes its token at once, even one not yet due (the count goes below zero),
    then sleeps until it is due. So waiters are served in arrival order without polling.
    A caller that is cancelled while it sleeps does not give its token back: the bucket
    errs on the side of fewer requests. Loop-only: nothing awaits between reading and
    taking the tokens.

    Bindings and commit records (`Lane.BIND`) do not queue behind reports for a token. They
    also count in a bucket of their own, of the same size and rate, and wait only for that
    one; the token they take from the shared bucket delays the reports that ask after them.
    So bindings alone never exceed `qps`, reports never run ahead of the shared bucket, and
    the two together exceed `qps` only by the reports already admitted when a gang's
    bindings arrive (on a contended cluster writes waited 0.7 s for a token on average,
    bindings among them, bench/results/2026-12-02-token-lanes.md).
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock, sleep: Sleep) -> None:
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        now = clock()
        self._tokens = dict.fromkeys(Lane, float(burst))  # REPORT: the shared bucket
        self._at = dict.fromkeys(Lane, now)

    def _refill(self, bucket: Lane, now: float) -> float:
        tokens = min(float(self.burst), self._tokens[bucket] + (now - self._at[bucket]) * self.qps)
        self._tokens[bucket], self._at[bucket] = tokens, now
        return tokens

    def reserve(self, deadline: float = math.inf, lane: Lane = Lane.REPORT) -> float | None:
        """Take a token: seconds until it is due, or None (nothing taken) if after `deadline`."""
        now = self._clock()
        shared = self._refill(Lane.REPORT, now)
        own = self._refill(Lane.BIND, now) if lane is Lane.BIND else shared
        wait = max(0.0, (1.0 - own) / self.qps)
        if now + wait > deadline:
            return None
        self._tokens[Lane.REPORT] -= 1.0
        if lane is Lane.BIND:
            self._tokens[Lane.BIND] -= 1.0
        return wait

    async def acquire(self, deadline: float = math.inf, lane: Lane = Lane.REPORT) -> float | None:
        """Wait for a token: the seconds waited, or None when it would come after `deadline`."""
        wait = self.reserve(deadline, lane)
        if wait:
            await self._sleep(wait)
        return wait


def _seconds_per_lane() -> dict[str, float]:
    return dict.fromkeys((lane.value for lane in Lane), 0.0)


@dataclass(slots=True)
class AsyncKubeCounts:
    """What a client did so far, for metrics and benchmarks (loop-only)."""

    attempts: int = 0  # requests sent
    retries: int = 0  # attempts after a backoff
    throttled: int = 0  # 429 answers
    server_errors: int = 0  # 5xx answers
    no_answer: int = 0  # connection refused, reset or timed out
    # Time spent waiting on the client's own token bucket, by lane ("bind", "report").
    token_wait_seconds: dict[str, float] = field(default_factory=_seconds_per_lane)
    # Time spent waiting for an in-flight slot, by lane ("bind", "report").
    slot_wait_seconds: dict[str, float] = field(default_factory=_seconds_per_lane)


@dataclass(slots=True)
class _Call:
    """One call: what to send, until when, and what its attempts left behind."""

    method: str
    path: str
    content: bytes | None
    content_type: str
    end: float  # the deadline, on the client's clock
    lane: Lane  # which in-flight slots it may take (`in_flight`)
    maybe_applied: bool = False  # an attempt may have reached storage without an answer
    retry_after: float = 0.0  # the last answer's Retry-After (seconds)

    def unsent(self, why: str) -> ApiError:
        return ApiError(0, "NotSent", f"{self.method} {self.path}: {why}")


class AsyncKubeClient:
    """JSON writes to one API server from the event loop, limited by QPS/burst (see module)."""

    def __init__(
        self,
        sender: Sender,
        base_url: str,
        *,
        authorization: Callable[[], str] | None = None,
        settings: AsyncKubeSettings | None = None,
        tls_server_name: str | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        """`sender` reaches the API server at `base_url`; `authorization` answers the header
        value (it may block: it runs on a worker thread). `clock` is the one deadlines are on.
        `tls_server_name`: the name the server's certificate is checked against, when it is
        not the URL's host.

        Requests go straight to the sender: an HTTP client's own layer (redirects, cookies,
        auth flows, hooks, merging defaults) cost a third of the CPU of a binding.
        """
        self.settings = settings or AsyncKubeSettings()
        self.counts = AsyncKubeCounts()
        self._sender = sender
        self._base_url = base_url.rstrip("/")
        self._authorize = authorization
        self._clock = clock
        self._sleep = sleep
        self._jitter = jitter
        self._server_name = tls_server_name or None
        self._bucket = TokenBucket(self.settings.qps, self.settings.burst, clock=clock, sleep=sleep)
        self._in_flight = InFlight(self.settings.in_flight_limit, self.settings.bind_reserve)
        self._authorization = ""
        self._authorization_due = -math.inf
        self._authorization_generation = 0
        self._authorization_lock = asyncio.Lock()

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | Path,
        *,
        context: str | None = None,
        settings: AsyncKubeSettings | None = None,
    ) -> AsyncKubeClient:
        return cls.from_access(kubeconfig_access(path, context=context), settings=settings)

    @classmethod
    def in_cluster(cls, *, settings: AsyncKubeSettings | None = None) -> AsyncKubeClient:
        return cls.from_access(in_cluster_access(), settings=settings)

    @classmethod
    def from_access(
        cls, access: ClusterAccess, *, settings: AsyncKubeSettings | None = None
    ) -> AsyncKubeClient:
        settings = settings or AsyncKubeSettings()
        limit = settings.in_flight_limit
        sender: Sender
        if settings.http2:
            sender = HttpxSender.http2(access, connections=limit)
        else:
            sender = AiohttpSender(tls_context(access), connections=limit, proxy=access.proxy)
        return cls(
            sender,
            access.host,
            authorization=access.authorization,
            settings=settings,
            tls_server_name=access.tls_server_name,
        )

    async def aclose(self) -> None:
        await self._sender.aclose()

    async def __aenter__(self) -> AsyncKubeClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ---- the API ---------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = JSON,
        deadline: float | None = None,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]:
        """One JSON request, retried on overload until `deadline` (on the client's clock;
        None: `retry_window_seconds` from now). The decoded answer ({} if not an object).
        `lane`: `Lane.REPORT` for a best-effort write, which yields to bindings.

        A POST retried after no answer may meet its own earlier success as a 409.
        """
        answer = await self._call(self._new(method, path, body, content_type, deadline, lane=lane))
        try:
            decoded = orjson.loads(answer.content) if answer.content else {}
        except orjson.JSONDecodeError:
            return {}
        return decoded if isinstance(decoded, dict) else {}

    async def patch(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        content_type: str = MERGE_PATCH,
        deadline: float | None = None,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386), or the patch `content_type` names, also on status
        subresources; idempotent (a precondition in `body` makes a retry a 409 instead)."""
        return await self.request(
            "PATCH", path, body, content_type=content_type, deadline=deadline, lane=lane
        )

    async def post(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        deadline: float | None = None,
        lane: Lane = Lane.BIND,
    ) -> dict[str, Any]:
        """A JSON POST (an Event, say), retried on overload like any call: after no answer,
        a retry may meet the first attempt's success as 409 AlreadyExists."""
        return await self.request("POST", path, body, deadline=deadline, lane=lane)

    async def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        annotations: Mapping[str, str] | None = None,
        deadline: float | None = None,
    ) -> None:
        """POST pods/{name}/binding, retried on overload until `deadline`.

        Raises BindError: gone (404, UID precondition failed), conflict (bound elsewhere),
        or neither (still overloaded at the deadline, or another refusal). The answer is
        never decoded (see `kubeclient`).
        """
        body = binding_body(namespace, name, uid, node, annotations)
        call = self._new(
            "POST", binding_path(namespace, name), body, JSON, deadline, lane=Lane.BIND
        )
        try:
            await self._call(call)
        except ApiError as exc:
            if call.maybe_applied and exc.status == 409 and _assigned_node(exc) == node:
                return  # our own earlier attempt landed (module docstring)
            raise bind_error(namespace, name, node, exc) from exc

    async def http_version(self) -> str:
        """The protocol the API server speaks with this client: "HTTP/2" or "HTTP/1.1"."""
        answer = await self._call(self._new("GET", "/version", None, JSON, None, lane=Lane.REPORT))
        return answer.http_version

    # ---- one call ----------------------------------------------------------------------------

    def _new(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        content_type: str,
        deadline: float | None,
        *,
        lane: Lane,
    ) -> _Call:
        if deadline is None:
            deadline = self._clock() + self.settings.retry_window_seconds
        content = orjson.dumps(body) if body is not None else None
        return _Call(method, path, content, content_type, deadline, lane)

    async def _call(self, call: _Call) -> Reply:
        """The 2xx answer, after retries (module docstring); raises ApiError otherwise."""
        settings = self.settings
        end = call.end
        backoff = settings.backoff_initial_seconds
        refreshed = False
        last: ApiError | None = None
        while True:
            waited = await self._bucket.acquire(end, call.lane)
            if waited is None:
                raise last or call.unsent("the client's QPS admits it only after the deadline")
            self.counts.token_wait_seconds[call.lane.value] += waited
            asked = self._clock()
            async with self._in_flight.slot(call.lane):
                self.counts.slot_wait_seconds[call.lane.value] += self._clock() - asked
                remaining = end - self._clock()
                if remaining <= 0:
                    raise last or call.unsent("no room in flight before the deadline")
                timeout = min(remaining, settings.request_timeout_seconds)
                try:
                    return await self._attempt(call, timeout)
                except ApiError as exc:
                    error = exc
            last = error
            if last.status == 401 and not refreshed and self._authorize is not None:
                refreshed = True
                await self._refresh_authorization(self._authorization_generation)
                continue
            if not (last.status in (0, 429) or last.status >= 500):
                raise last
            delay = max(backoff, call.retry_after) * (
                1.0 + settings.backoff_jitter * self._jitter()
            )
            if self._clock() + delay >= end:
                raise last
            await self._sleep(delay)
            backoff = min(2.0 * backoff, settings.backoff_cap_seconds)
            self.counts.retries += 1

    async def _attempt(self, call: _Call, timeout: float) -> Reply:
        """Send once (holding an in-flight slot); the 2xx answer, or raises ApiError."""
        headers = {"User-Agent": USER_AGENT, "Accept": JSON}
        if call.content is not None:
            headers["Content-Type"] = call.content_type
        authorization = await self._current_authorization()
        if authorization:
            headers["Authorization"] = authorization
        self.counts.attempts += 1
        call.retry_after = 0.0
        try:
            answer = await self._sender.send(
                call.method,
                self._base_url + call.path,
                call.content,
                headers,
                timeout=timeout,
                server_name=self._server_name,
            )
        except SendError as exc:
            self.counts.no_answer += 1
            call.maybe_applied |= exc.sent
            raise ApiError(0, exc.kind, exc.message) from exc
        status = answer.status
        if 200 <= status < 300:
            return answer
        if status == 429:
            self.counts.throttled += 1
        elif status >= 500:
            # A 504 from the API server's own timeout leaves the handler writing on.
            self.counts.server_errors += 1
            call.maybe_applied = True
        call.retry_after = _retry_after(answer.retry_after)
        raise api_error(status, answer.content)

    # ---- credentials -----------------------------------------------------------------------

    async def _current_authorization(self) -> str:
        if self._authorize is not None and self._clock() >= self._authorization_due:
            await self._refresh_authorization(self._authorization_generation)
        return self._authorization

    async def _refresh_authorization(self, seen: int) -> None:
        """Ask the loader again (on a thread), unless someone did since generation `seen`."""
        authorize = self._authorize
        if authorize is None:
            return
        async with self._authorization_lock:
            if self._authorization_generation != seen:
                return
            try:
                value = await asyncio.to_thread(authorize)
            except Exception as exc:  # a loader's failure (file, exec plugin) fails this call
                raise ApiError(0, "CredentialUnavailable", str(exc)) from exc
            self._authorization = value
            self._authorization_due = self._clock() + self.settings.token_refresh_seconds
            self._authorization_generation += 1


def _retry_after(header: str) -> float:
    """`Retry-After` in seconds (the API server sends whole seconds); 0 when absent or bad."""
    try:
        seconds = float(header)
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds > 0 else 0.0


def _assigned_node(exc: ApiError) -> str | None:
    found = _ASSIGNED.search(exc.message)
    return found.group(1) if found else None
