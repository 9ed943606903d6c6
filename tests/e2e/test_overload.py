"""Gangs through kube-scheduler and Phalanx against an API server overloaded on purpose
(issue #11): started with `--max-requests-inflight=5 --max-mutating-requests-inflight=1` and
API Priority and Fairness off, so excess requests are refused with 429 rather than queued.
Phalanx runs as the chart's ServiceAccount (the API server never limits `system:masters`, so
the admin identity would not be throttled at all). Its writer retries 429 (after Retry-After)
and 5xx within each binding's deadline: every gang still ends whole or with nothing bound,
never partial, and the API server did refuse Phalanx's own requests (its metrics say so)."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from chartkit import install, service_account_kubeconfig
from conftest_scheduling import Scheduler
from phalanx_process import PhalanxProcess
from podgroup_crd import ensure_pod_group_crd
from scheduling import Api, Gang, Scenario

pytestmark = pytest.mark.e2e

OVERLOAD = (
    "--max-requests-inflight=5",
    "--max-mutating-requests-inflight=1",
    "--enable-priority-and-fairness=false",
)
NODES = {"a": 8, "b": 8, "c": 8, "d": 8}  # 32 GPUs
GANGS = 6  # gangs of 4 members x 2 GPUs: 48 GPUs asked of 32


@pytest.fixture(scope="module")
def overloaded() -> Iterator[launcher.ControlPlane]:
    try:
        launcher.find_tools()
    except launcher.ToolsMissingError as exc:
        pytest.fail(f"the e2e tools are missing: {exc}", pytrace=False)
    cp = launcher.ControlPlane(apiserver_flags=OVERLOAD)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def stack(overloaded: launcher.ControlPlane) -> Iterator[tuple[PhalanxProcess, Scheduler]]:
    install(overloaded)  # the CRD, and the RBAC of the chart's ServiceAccount
    ensure_pod_group_crd(overloaded)
    workdir = overloaded.workdir / "phalanx-overload"
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = service_account_kubeconfig(overloaded, workdir / "phalanx.kubeconfig")
    phalanx = PhalanxProcess(kubeconfig, workdir)
    phalanx.start()
    scheduler = Scheduler(overloaded, phalanx)
    scheduler.start()
    try:
        yield phalanx, scheduler
    finally:
        scheduler.stop()
        phalanx.close()


@pytest.fixture
def scenario(
    overloaded: launcher.ControlPlane, stack: tuple[PhalanxProcess, Scheduler]
) -> Iterator[Scenario]:
    api = Api(overloaded, patient=True)
    namespace = f"overload-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    made: list[str] = []

    def make_node(name: str, **kwargs: Any) -> dict[str, Any]:
        made.append(name)
        return overloaded.create_gpu_node(name, **kwargs)

    sc = Scenario(overloaded, api, stack[0], namespace, make_node)
    # Refused bindings are retried with backoff, so a gang's bind fan-out takes longer than one
    # round trip here; it is bounded by each binding's deadline (bind_timeout_seconds, 8 s).
    sc.max_partial_seconds = 8.0
    sc.monitor.start()
    try:
        yield sc
    finally:
        verdict = sc.monitor.stop()
        for name in made:
            api.delete(f"/api/v1/nodes/{name}")
        api.close()
    verdict.assert_clean(sc.max_partial_seconds)


def refused(cp: launcher.ControlPlane) -> float:
    """Writes kube-apiserver refused with 429 since it started (its own /metrics): bindings
    (pods/binding), requeues and commit records (pods, podgroups patches), Events."""
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    headers = {"Authorization": f"Bearer {cp.admin_token}"}
    for _ in range(100):  # /metrics is itself a request the limit may refuse
        answer = httpx.get(f"{cp.server}/metrics", verify=context, headers=headers, timeout=10)
        if answer.status_code == 200:
            break
    total = 0.0
    for line in answer.text.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'code="429"' in line
            and ('subresource="binding"' in line or 'verb="PATCH"' in line)
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def judge(sc: Scenario, gangs: list[Gang], count: Callable[[Gang], int]) -> list[Gang]:
    """The whole gangs; fails on any gang with some but not all members bound."""
    whole = []
    for gang in gangs:
        bound = count(gang)
        assert bound in (0, len(gang.members)), (
            f"gang {gang.name} ended {bound}/{len(gang.members)} bound\n{sc.diagnostics()}"
        )
        if bound:
            whole.append(gang)
    return whole


def test_every_gang_ends_whole_or_released_while_the_api_server_refuses_requests(
    scenario: Scenario,
) -> None:
    for suffix, gpus in NODES.items():
        scenario.node(suffix, gpus)
    scenario.nodes_ready(timeout=120)
    before = refused(scenario.cp)
    gangs = [scenario.gang(f"g{i}", 4, 2) for i in range(GANGS)]
    scenario.wait_quiet(settle=6.0, timeout=240)
    whole = judge(scenario, gangs, scenario.bound_count)
    assert len(whole) == 4, f"{len(whole)} whole gangs: 32 GPUs hold 4\n{scenario.diagnostics()}"
    # The rest land, whole, once the winners leave.
    scenario.delete_pods([m for g in whole for m in g.members])
    waiting = [g for g in gangs if g not in whole]
    scenario.wait(
        "the waiting gangs to land",
        lambda: all(scenario.bound_count(g) == len(g.members) for g in waiting),
        timeout=240,
    )
    judge(scenario, waiting, scenario.bound_count)
    assert refused(scenario.cp) > before, "the API server never refused a request: no overload"
    assert scenario.phalanx.metric("phalanx_partial_gangs") == 0
    assert scenario.phalanx.metric("phalanx_reserved_gpus") == 0
