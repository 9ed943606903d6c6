"""The asynchronous API writer against a real kube-apiserver: HTTP/2, many bindings in
flight at once, gone and conflict, and an API server throttling it hard.

Bindings name nodes that do not exist: the API server does not check the target, and no
kwok node has to run the pods, which keeps the machine's two cores for the API server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest

from builders import cluster_access
from phalanx.sources.base import BindError
from phalanx.sources.informer import ApiError
from phalanx.sources.kube_async import AsyncKubeClient, AsyncKubeSettings

pytestmark = pytest.mark.e2e

# The client's limits are not what is under test here: the server's are.
WIDE_OPEN = AsyncKubeSettings(qps=5000.0, burst=5000)
# One write at a time, the rest refused with 429 at once (two let a quiet run slip
# through). With API Priority and Fairness on (the default), these flags only size its
# seats and the excess waits in its queues instead (no 429: slow answers), so APF is off
# here to make the server push back.
OVERLOAD_FLAGS = (
    "--max-requests-inflight=5",
    "--max-mutating-requests-inflight=1",
    "--enable-priority-and-fairness=false",
)


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": "phalanx", "containers": [{"name": "main", "image": "fake"}]},
    }


async def create_pods(client: AsyncKubeClient, namespace: str, names: Sequence[str]) -> list[str]:
    """Create the pods (admin, concurrently); their UIDs in order."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    made = await asyncio.gather(*(client.request("POST", path, pod(n)) for n in names))
    return [str(p["metadata"]["uid"]) for p in made]


async def nodes_of(client: AsyncKubeClient, namespace: str) -> dict[str, str]:
    listed = await client.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in listed["items"]}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_api_server_speaks_http2_with_the_writer_when_asked_and_http11_by_default(
    control_plane: launcher.ControlPlane,
) -> None:
    async def versions() -> tuple[str, str]:
        async with (
            AsyncKubeClient.from_kubeconfig(
                control_plane.kubeconfig, settings=AsyncKubeSettings(http2=True)
            ) as h2,
            AsyncKubeClient.from_kubeconfig(control_plane.kubeconfig) as h11,
        ):
            return await h2.http_version(), await h11.http_version()

    assert run(versions()) == ("HTTP/2", "HTTP/1.1")


def test_two_hundred_bindings_in_flight_together_all_land(
    control_plane: launcher.ControlPlane, namespace: str
) -> None:
    names = [f"p-{i}" for i in range(200)]
    wanted = {n: f"async-node-{i % 7}" for i, n in enumerate(names)}

    async def scenario() -> dict[str, str]:
        async with AsyncKubeClient.from_kubeconfig(
            control_plane.kubeconfig, settings=WIDE_OPEN
        ) as client:
            uids = await create_pods(client, namespace, names)
            await asyncio.gather(
                *(client.bind(namespace, n, u, wanted[n]) for n, u in zip(names, uids, strict=True))
            )
            return await nodes_of(client, namespace)

    assert run(scenario()) == wanted


def test_a_pod_deleted_or_recreated_meanwhile_is_gone(
    control_plane: launcher.ControlPlane, namespace: str
) -> None:
    async def scenario() -> tuple[BindError, BindError]:
        async with AsyncKubeClient.from_kubeconfig(control_plane.kubeconfig) as client:
            [deleted, recreated] = await create_pods(client, namespace, ["deleted", "recreated"])
            for name in ("deleted", "recreated"):
                path = f"/api/v1/namespaces/{namespace}/pods/{name}"
                await client.request("DELETE", path, {"gracePeriodSeconds": 0})
            await create_pods(client, namespace, ["recreated"])
            errors = []
            for name, uid in (("deleted", deleted), ("recreated", recreated)):
                with pytest.raises(BindError) as caught:
                    await client.bind(namespace, name, uid, "async-node-0")
                errors.append(caught.value)
            return errors[0], errors[1]

    deleted, recreated = run(scenario())
    assert (deleted.gone, deleted.conflict) == (True, False)
    assert (recreated.gone, recreated.conflict) == (True, False)
    assert "Precondition failed: UID" in str(recreated)


def test_binding_a_bound_pod_to_another_node_is_a_conflict(
    control_plane: launcher.ControlPlane, namespace: str
) -> None:
    async def scenario() -> BindError:
        async with AsyncKubeClient.from_kubeconfig(control_plane.kubeconfig) as client:
            [uid] = await create_pods(client, namespace, ["bound"])
            await client.bind(namespace, "bound", uid, "async-node-0")
            with pytest.raises(BindError) as caught:
                await client.bind(namespace, "bound", uid, "async-node-1")
            return caught.value

    conflict = run(scenario())
    assert (conflict.gone, conflict.conflict) == (False, True)
    assert 'already assigned to node "async-node-0"' in str(conflict)


# ---- an API server that throttles -------------------------------------------------------------


@pytest.fixture(scope="module")
def throttled_plane() -> Iterator[launcher.ControlPlane]:
    """A second control plane (no kwok) admitting a handful of requests at a time."""
    try:
        launcher.find_tools()
    except launcher.ToolsMissingError as exc:
        pytest.fail(f"the e2e tools are missing: {exc}", pytrace=False)
    with launcher.ControlPlane(start_kwok=False, apiserver_extra_args=OVERLOAD_FLAGS) as cp:
        yield cp


@pytest.mark.parametrize("http2", [False, True], ids=["http1-aiohttp", "http2-httpx"])
def test_three_hundred_bindings_against_a_throttling_api_server_land_or_fail_cleanly(
    throttled_plane: launcher.ControlPlane, http2: bool
) -> None:
    cp = throttled_plane
    names = [f"p-{i}" for i in range(300)]
    namespace = f"overload-{uuid.uuid4().hex[:6]}"
    status, answer = cp.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    assert status == 201, answer

    async def scenario() -> tuple[list[BaseException | None], dict[str, str], int, int]:
        # The admin (system:masters) is exempt from the limits: it sets up and checks. The
        # bindings go as kube-scheduler's identity, which the API server does throttle.
        async with (
            AsyncKubeClient.from_kubeconfig(cp.kubeconfig, settings=WIDE_OPEN) as admin,
            AsyncKubeClient.from_kubeconfig(
                cp.scheduler_kubeconfig,
                settings=AsyncKubeSettings(qps=500.0, burst=1000, http2=http2),
            ) as binder,
        ):
            uids = await create_pods(admin, namespace, names)
            deadline = time.monotonic() + 60.0
            outcomes = await asyncio.gather(
                *(
                    binder.bind(namespace, n, u, "async-node-0", deadline=deadline)
                    for n, u in zip(names, uids, strict=True)
                ),
                return_exceptions=True,
            )
            bound = await nodes_of(admin, namespace)
            return outcomes, bound, binder.counts.throttled, binder.counts.attempts

    outcomes, bound, throttled, attempts = run(scenario())
    landed = sum(outcome is None for outcome in outcomes)
    print(f"300 bindings: {landed} landed, {attempts} attempts, {throttled} answered 429")
    assert throttled > 0, "the API server never pushed back: the test did not test overload"
    for name, outcome in zip(names, outcomes, strict=True):
        if outcome is None:
            assert bound[name] == "async-node-0", name
        else:
            # Cleanly: an overload error at the deadline, never a wrong gone or conflict.
            assert isinstance(outcome, BindError), repr(outcome)
            assert (outcome.gone, outcome.conflict, bound[name]) == (False, False, ""), name


# ---- no API server at all -----------------------------------------------------------------------


@pytest.mark.parametrize("http2", [False, True], ids=["http1-aiohttp", "http2-httpx"])
def test_a_port_nobody_listens_on_is_no_answer_retried_until_the_deadline(http2: bool) -> None:
    [port] = launcher.free_ports(1)
    access = cluster_access(f"https://127.0.0.1:{port}")
    settings = AsyncKubeSettings(http2=http2, backoff_initial_seconds=0.05)

    async def scenario() -> tuple[BindError, int]:
        async with AsyncKubeClient.from_access(access, settings=settings) as client:
            with pytest.raises(BindError) as caught:
                await client.bind("team", "p", "u", "n", deadline=time.monotonic() + 0.5)
            return caught.value, client.counts.no_answer

    error, no_answer = run(scenario())
    assert (error.gone, error.conflict) == (False, False)
    cause = error.__cause__
    assert isinstance(cause, ApiError)
    assert (cause.status, cause.reason) == (0, "ConnectError")
    assert no_answer >= 2, "refused connections are retried"
