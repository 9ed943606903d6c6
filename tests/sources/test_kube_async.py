"""The asynchronous API writer against a fake API server (httpx.MockTransport).

Time is a fake clock that moves only when the client sleeps on it, so backoff, Retry-After,
deadlines and the token bucket are checked exactly and instantly.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from clocks import FakeClock
from phalanx.sources.api_transport import HttpxSender
from phalanx.sources.base import BindError
from phalanx.sources.in_flight import Lane
from phalanx.sources.informer import ApiError
from phalanx.sources.kube_async import AsyncKubeClient, AsyncKubeSettings, TokenBucket

pytestmark = pytest.mark.anyio

BIND_PATH = "/api/v1/namespaces/team/pods/worker-0/binding"
UID_MISMATCH = "Precondition failed: UID in precondition: u-1, UID in object meta: u-2"


def assigned(node: str) -> str:
    """The API server's refusal of a second binding, word for word."""
    return (
        'Operation cannot be fulfilled on pods/binding "worker-0": '
        f'pod worker-0 is already assigned to node "{node}"'
    )


Answer = tuple[int, Any] | tuple[int, Any, dict[str, str]] | httpx.TransportError


class FakeApi:
    """Answers requests from a script; the last answer repeats. Records every request."""

    def __init__(self, *script: Answer) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, httpx.TransportError):
            raise answer
        status, body, *headers = answer
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        return httpx.Response(status, content=content, headers=headers[0] if headers else {})


def status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {"kind": "Status", "status": "Failure", "reason": reason, "message": message}


def make_client(
    api: Callable[[httpx.Request], Any],
    time: FakeClock,
    *,
    authorization: Callable[[], str] | None = None,
    **settings: Any,
) -> AsyncKubeClient:
    return AsyncKubeClient(
        HttpxSender(httpx.MockTransport(api)),
        "https://api.test",
        authorization=authorization,
        settings=AsyncKubeSettings(**settings),
        clock=time,
        sleep=time.sleep,
        jitter=lambda: 0.0,
    )


@pytest.fixture
def time() -> FakeClock:
    return FakeClock()


# ---- bindings ---------------------------------------------------------------------------------


async def test_a_binding_posts_the_binding_object_and_never_reads_the_answer(
    time: FakeClock,
) -> None:
    api = FakeApi((201, b"not json: a successful binding is never decoded"))
    client = make_client(api, time)

    await client.bind("team", "worker-0", "u-1", "gpu-7")

    [sent] = api.requests
    assert (sent.method, sent.url.path) == ("POST", BIND_PATH)
    assert sent.headers["Content-Type"] == "application/json"
    assert orjson.loads(sent.content) == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "worker-0", "namespace": "team", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-7"},
    }


@pytest.mark.parametrize(
    ("refusal", "gone", "conflict"),
    [
        (status(404, "NotFound", 'pods "worker-0" not found'), True, False),
        (status(409, "Conflict", UID_MISMATCH), True, False),
        (status(409, "Conflict", assigned("gpu-3")), False, True),
        # Bound to our node by someone else, with no attempt of ours in doubt: as before.
        (status(409, "Conflict", assigned("gpu-7")), False, True),
        (status(403, "Forbidden", "cannot create pods/binding"), False, False),
        (status(422, "Invalid", "target.name: Required value"), False, False),
    ],
    ids=["404-gone", "uid-precondition-gone", "bound-elsewhere", "bound-here-by-another",
         "forbidden", "invalid"],
)  # fmt: skip
async def test_a_refused_binding_says_whether_the_pod_is_gone_or_in_conflict(
    time: FakeClock, refusal: Answer, gone: bool, conflict: bool
) -> None:
    api = FakeApi(refusal)
    client = make_client(api, time)

    with pytest.raises(BindError) as caught:
        await client.bind("team", "worker-0", "u-1", "gpu-7")

    assert (caught.value.gone, caught.value.conflict) == (gone, conflict)
    assert "team/worker-0" in str(caught.value)
    assert len(api.requests) == 1, "a refusal is never retried"


@pytest.mark.parametrize(
    ("first", "bound_to", "succeeds"),
    [
        (httpx.ReadTimeout("no answer"), "gpu-7", True),
        (httpx.RemoteProtocolError("stream reset"), "gpu-7", True),
        (status(504, "Timeout", "request did not complete within the allotted timeout"),
         "gpu-7", True),
        (httpx.ReadTimeout("no answer"), "gpu-3", False),
        (httpx.ConnectError("connection refused"), "gpu-7", False),
        (status(429, "TooManyRequests", "try again later"), "gpu-7", False),
    ],
    ids=["read-timeout-then-here", "reset-then-here", "504-then-here",
         "read-timeout-then-elsewhere", "never-connected-then-here", "throttled-then-here"],
)  # fmt: skip
async def test_a_retried_binding_that_finds_its_pod_on_its_node_succeeds_only_if_it_may_have_landed(
    time: FakeClock, first: Answer, bound_to: str, succeeds: bool
) -> None:
    api = FakeApi(first, status(409, "Conflict", assigned(bound_to)))
    client = make_client(api, time)

    if succeeds:
        await client.bind("team", "worker-0", "u-1", "gpu-7")
    else:
        with pytest.raises(BindError) as caught:
            await client.bind("team", "worker-0", "u-1", "gpu-7")
        assert caught.value.conflict
    assert len(api.requests) == 2


# ---- overload: what is retried, how long -----------------------------------------------------


async def test_a_429_is_retried_no_sooner_than_its_retry_after(time: FakeClock) -> None:
    api = FakeApi((429, {}, {"Retry-After": "3"}), (201, {}))
    client = make_client(api, time, backoff_initial_seconds=0.05)

    await client.bind("team", "worker-0", "u-1", "gpu-7")

    assert time.slept == [3.0]
    assert (client.counts.throttled, client.counts.retries, client.counts.attempts) == (1, 1, 2)


async def test_server_errors_are_retried_with_doubling_backoff_until_one_succeeds(
    time: FakeClock,
) -> None:
    api = FakeApi(
        status(503, "ServiceUnavailable", "etcd leader changed"),
        status(500, "InternalError", "etcdserver: request timed out"),
        httpx.ConnectError("connection refused"),
        (200, {"metadata": {"name": "worker-0"}}),
    )
    client = make_client(api, time, backoff_initial_seconds=0.1)

    answer = await client.patch("/api/v1/namespaces/team/pods/worker-0", {"metadata": {}})

    assert answer == {"metadata": {"name": "worker-0"}}
    assert time.slept == pytest.approx([0.1, 0.2, 0.4])
    assert (client.counts.server_errors, client.counts.no_answer) == (2, 1)


async def test_retries_stop_at_the_callers_deadline_with_the_last_error(time: FakeClock) -> None:
    api = FakeApi(status(503, "ServiceUnavailable", "still overloaded"))
    client = make_client(api, time, backoff_initial_seconds=0.1)
    deadline = time.now + 1.0

    with pytest.raises(BindError) as caught:
        await client.bind("team", "worker-0", "u-1", "gpu-7", deadline=deadline)

    # 0.1 + 0.2 + 0.4 fit before the deadline; a fourth backoff of 0.8 would not.
    assert time.slept == pytest.approx([0.1, 0.2, 0.4])
    assert len(api.requests) == 4
    assert time.now <= deadline
    assert "HTTP 503" in str(caught.value)
    assert "still overloaded" in str(caught.value)
    assert (caught.value.gone, caught.value.conflict) == (False, False)


async def test_a_retry_after_beyond_the_deadline_gives_up_at_once(time: FakeClock) -> None:
    api = FakeApi((429, {}, {"Retry-After": "30"}), (201, {}))
    client = make_client(api, time)

    with pytest.raises(ApiError) as caught:
        await client.request("POST", "/api/v1/namespaces/team/events", {}, deadline=time.now + 5)

    assert caught.value.status == 429
    assert time.slept == []


async def test_without_a_deadline_overload_is_retried_for_the_retry_window(
    time: FakeClock,
) -> None:
    api = FakeApi(httpx.ReadTimeout("no answer"))
    client = make_client(
        api, time, retry_window_seconds=4.0, backoff_initial_seconds=1.0, backoff_cap_seconds=1.0
    )
    start = time.now

    with pytest.raises(ApiError) as caught:
        await client.patch("/api/v1/namespaces/team/pods/worker-0", {})

    assert (caught.value.status, caught.value.reason) == (0, "ReadTimeout")
    assert time.slept == [1.0, 1.0, 1.0]  # a fourth second would end at the window
    assert time.now - start < 4.0


@pytest.mark.parametrize("code", [400, 403, 404, 409, 410, 422], ids=lambda c: f"http-{c}")
async def test_a_client_error_is_raised_at_once(time: FakeClock, code: int) -> None:
    api = FakeApi(status(code, "Refused", "no"))
    client = make_client(api, time)

    with pytest.raises(ApiError) as caught:
        await client.request("DELETE", "/api/v1/namespaces/team/pods/worker-0")

    assert (caught.value.status, caught.value.reason, caught.value.message) == (
        code,
        "Refused",
        "no",
    )
    assert len(api.requests) == 1
    assert time.slept == []


# ---- the client's own limits ------------------------------------------------------------------


def times_of(bucket: TokenBucket, time: FakeClock, count: int) -> list[float]:
    """When each of `count` acquires in a row got its token, from the bucket's start."""
    start = time.now
    got: list[float] = []

    async def run() -> None:
        for _ in range(count):
            await bucket.acquire()
            got.append(round(time.now - start, 9))

    asyncio.run(run())
    return got


def test_the_token_bucket_admits_a_burst_at_once_then_qps_a_second(time: FakeClock) -> None:
    bucket = TokenBucket(qps=10.0, burst=4, clock=time, sleep=time.sleep)

    assert times_of(bucket, time, 7) == [0.0, 0.0, 0.0, 0.0, 0.1, 0.2, 0.3]


def test_an_idle_token_bucket_refills_to_its_burst_and_no_further(time: FakeClock) -> None:
    bucket = TokenBucket(qps=10.0, burst=3, clock=time, sleep=time.sleep)
    times_of(bucket, time, 3)

    time.now += 60.0

    assert times_of(bucket, time, 5) == [0.0, 0.0, 0.0, 0.1, 0.2]


def test_a_token_due_after_the_deadline_is_not_taken(time: FakeClock) -> None:
    bucket = TokenBucket(qps=2.0, burst=1, clock=time, sleep=time.sleep)
    assert bucket.reserve() == 0.0

    assert bucket.reserve(deadline=time.now + 0.4) is None
    assert bucket.reserve(deadline=time.now + 0.5) == 0.5  # the refused call took nothing


def test_a_binding_does_not_queue_behind_reports_for_its_token(time: FakeClock) -> None:
    bucket = TokenBucket(qps=10.0, burst=2, clock=time, sleep=time.sleep)
    reports = [bucket.reserve(lane=Lane.REPORT) for _ in range(6)]
    assert reports == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3, 0.4])
    # The shared bucket owes four tokens; the binding waits for none of them.
    assert bucket.reserve(lane=Lane.BIND) == 0.0
    assert bucket.reserve(lane=Lane.BIND) == 0.0
    assert bucket.reserve(lane=Lane.BIND) == pytest.approx(0.1)  # bindings alone: qps
    # The bindings' tokens came out of the shared bucket too: the next report waits for them.
    assert bucket.reserve(lane=Lane.REPORT) == pytest.approx(0.8)


def test_bindings_alone_are_held_to_the_qps_and_respect_a_deadline(time: FakeClock) -> None:
    bucket = TokenBucket(qps=2.0, burst=1, clock=time, sleep=time.sleep)
    assert bucket.reserve(lane=Lane.BIND) == 0.0
    assert bucket.reserve(time.now + 0.4, lane=Lane.BIND) is None
    assert bucket.reserve(time.now + 0.5, lane=Lane.BIND) == 0.5


async def test_every_attempt_waits_for_a_token_and_a_call_gives_up_at_its_deadline(
    time: FakeClock,
) -> None:
    api = FakeApi((200, {}))
    client = make_client(api, time, qps=2.0, burst=1)

    await client.patch("/api/v1/nodes/a", {})
    await client.patch("/api/v1/nodes/b", {})
    with pytest.raises(ApiError) as caught:
        await client.patch("/api/v1/nodes/c", {}, deadline=time.now + 0.1)

    assert time.slept == [0.5]
    assert client.counts.token_wait_seconds == {"bind": 0.5, "report": 0.0}
    assert (caught.value.status, caught.value.reason) == (0, "NotSent")
    assert [r.url.path for r in api.requests] == ["/api/v1/nodes/a", "/api/v1/nodes/b"]


async def test_no_more_than_max_in_flight_requests_await_an_answer_at_once() -> None:
    in_flight = 0
    peak = 0

    async def slow_api(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        for _ in range(5):  # stay in flight while the other callers run
            await asyncio.sleep(0)
        in_flight -= 1
        return httpx.Response(201)

    settings = AsyncKubeSettings(qps=1e6, burst=1000, max_in_flight=8)
    sender = HttpxSender(httpx.MockTransport(slow_api))
    async with AsyncKubeClient(sender, "https://api.test", settings=settings) as client:
        await asyncio.gather(*(client.bind("team", f"worker-{i}", "", "gpu-0") for i in range(200)))

    assert peak == 8
    assert client.counts.attempts == 200


async def test_a_binding_overtakes_reports_waiting_for_room_in_flight() -> None:
    # Reports fill every slot they may (3 of 4) and more wait; the binding is sent at once.
    release = asyncio.Event()
    sent: list[str] = []

    async def api(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if "binding" not in request.url.path:
            await release.wait()
        return httpx.Response(201)

    settings = AsyncKubeSettings(qps=1e6, burst=1000, max_in_flight=4)
    assert settings.bind_reserve == 1
    sender = HttpxSender(httpx.MockTransport(api))
    async with AsyncKubeClient(sender, "https://a.test", settings=settings) as c:
        reports = [
            asyncio.create_task(c.patch(f"/api/v1/nodes/n{i}", {}, lane=Lane.REPORT))
            for i in range(6)
        ]
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.wait_for(c.bind("team", "worker-0", "", "gpu-0"), timeout=5)
        assert sent[-1] == BIND_PATH
        assert len(sent) == 4  # three reports in flight, three waiting behind the binding
        release.set()
        await asyncio.gather(*reports)
    assert len(sent) == 7
    assert c.counts.slot_wait_seconds["report"] > 0.0  # three waited for room


@pytest.mark.parametrize(
    ("limit", "reserve"), [(1, 0), (2, 1), (4, 1), (64, 16)], ids=["one", "two", "four", "cap"]
)
def test_a_quarter_of_the_slots_is_kept_for_bindings_and_reports_keep_at_least_one(
    limit: int, reserve: int
) -> None:
    assert AsyncKubeSettings(burst=limit).bind_reserve == reserve


@pytest.mark.parametrize(
    ("burst", "max_in_flight", "limit"),
    [(40, None, 40), (1000, None, 64), (1000, 300, 300)],
    ids=["small-burst", "capped", "explicit"],
)
def test_max_in_flight_defaults_to_the_burst_up_to_a_cap(
    burst: int, max_in_flight: int | None, limit: int
) -> None:
    assert AsyncKubeSettings(burst=burst, max_in_flight=max_in_flight).in_flight_limit == limit


@pytest.mark.parametrize(
    ("field", "value"),
    [("qps", 0.0), ("burst", 0), ("max_in_flight", 0), ("request_timeout_seconds", -1.0),
     ("retry_window_seconds", 0.0), ("backoff_jitter", -0.1)],
    ids=["qps", "burst", "max_in_flight", "request_timeout", "retry_window", "jitter"],
)  # fmt: skip
def test_settings_refuse_a_limit_that_cannot_work(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"AsyncKubeSettings.{field} must be"):
        AsyncKubeSettings(**{field: value})  # type: ignore[arg-type]  # one field per case


# ---- answers and credentials -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "decoded"),
    [({"kind": "Event"}, {"kind": "Event"}), ([1, 2], {}), (b"", {}), (b"<html>", {})],
    ids=["object", "list", "empty", "not-json"],
)
async def test_request_answers_the_decoded_object_or_nothing(
    time: FakeClock, body: Any, decoded: dict[str, Any]
) -> None:
    client = make_client(FakeApi((201, body)), time)

    assert await client.request("POST", "/api/v1/namespaces/team/events", {"a": 1}) == decoded


async def test_a_patch_is_a_json_merge_patch(time: FakeClock) -> None:
    api = FakeApi((200, {}))
    client = make_client(api, time)

    await client.patch("/apis/x/v1/namespaces/team/things/a/status", {"status": {"phase": "Ok"}})

    [sent] = api.requests
    assert sent.method == "PATCH"
    assert sent.headers["Content-Type"] == "application/merge-patch+json"
    assert orjson.loads(sent.content) == {"status": {"phase": "Ok"}}


async def test_a_post_sends_json_and_answers_the_created_object(time: FakeClock) -> None:
    api = FakeApi((201, {"metadata": {"name": "ev-1"}}))
    client = make_client(api, time)

    made = await client.post("/api/v1/namespaces/team/events", {"reason": "Waiting"})

    [sent] = api.requests
    assert (sent.method, sent.headers["Content-Type"]) == ("POST", "application/json")
    assert orjson.loads(sent.content) == {"reason": "Waiting"}
    assert made == {"metadata": {"name": "ev-1"}}


def tokens(*values: str) -> Callable[[], str]:
    supply: Iterator[str] = itertools.chain(values, itertools.repeat(values[-1]))
    return lambda: next(supply)


async def test_a_401_reads_the_credential_again_and_retries_once(time: FakeClock) -> None:
    api = FakeApi(status(401, "Unauthorized", "token expired"), (201, {}))
    client = make_client(api, time, authorization=tokens("Bearer old", "Bearer new"))

    await client.bind("team", "worker-0", "u-1", "gpu-7")

    assert [r.headers["Authorization"] for r in api.requests] == ["Bearer old", "Bearer new"]
    assert time.slept == []


async def test_a_second_401_is_raised(time: FakeClock) -> None:
    api = FakeApi(status(401, "Unauthorized", "token rejected"))
    client = make_client(api, time, authorization=tokens("Bearer a", "Bearer b", "Bearer c"))

    with pytest.raises(BindError, match="token rejected"):
        await client.bind("team", "worker-0", "u-1", "gpu-7")
    assert len(api.requests) == 2


async def test_the_credential_is_read_again_once_it_is_older_than_the_refresh_period(
    time: FakeClock,
) -> None:
    api = FakeApi((200, {}))
    client = make_client(
        api, time, authorization=tokens("Bearer 1", "Bearer 2"), token_refresh_seconds=60.0
    )

    await client.patch("/api/v1/nodes/a", {})
    time.now += 59.0
    await client.patch("/api/v1/nodes/a", {})
    time.now += 2.0
    await client.patch("/api/v1/nodes/a", {})

    seen = [r.headers["Authorization"] for r in api.requests]
    assert seen == ["Bearer 1", "Bearer 1", "Bearer 2"]


async def test_a_credential_that_cannot_be_read_yet_is_retried_like_no_answer(
    time: FakeClock,
) -> None:
    reads: Iterator[str | OSError] = iter([OSError("token file missing"), "Bearer rotated"])

    def rotating() -> str:
        value = next(reads)
        if isinstance(value, OSError):
            raise value
        return value

    api = FakeApi((200, {}))
    client = make_client(api, time, authorization=rotating, backoff_initial_seconds=0.1)

    await client.patch("/api/v1/nodes/a", {})

    assert time.slept == [0.1]
    assert [r.headers["Authorization"] for r in api.requests] == ["Bearer rotated"]
