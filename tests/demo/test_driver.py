"""The kube-scheduler stand-in speaks the extender protocol the way kube-scheduler does.

These run the driver against a scripted extender (httpx.MockTransport): no network.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
import pytest

from builders import node_obj, pod_obj
from phalanx.demo.driver import SchedulerDriver, group_of, normalize, summarize_failures

Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]


class Sink:
    def __init__(self) -> None:
        self.applied: list[Mapping[str, Any]] = []

    def apply(self, obj: Mapping[str, Any]) -> bool:
        self.applied.append(obj)
        return True


class ScriptedExtender:
    """Answers each verb with `handler(verb, body)`; records every call."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        verb = request.url.path.strip("/")
        body = json.loads(request.content)
        self.calls.append((verb, body))
        return httpx.Response(200, json=await self.handler(verb, body))

    def verbs(self) -> list[str]:
        return [v for v, _ in self.calls]


async def drive(
    handler: Handler, objects: list[dict[str, Any]], workload: list[dict[str, Any]]
) -> tuple[Any, ScriptedExtender]:
    ext = ScriptedExtender(handler)
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(ext), base_url="http://phalanx.test"
    ) as client:
        driver = SchedulerDriver(client, Sink(), objects)
        driver.create(workload)
        result = await asyncio.wait_for(driver.run(), timeout=10)
    return result, ext


NODES = [node_obj("n2"), node_obj("n1"), node_obj("n3")]


def test_filter_sends_kube_schedulers_exact_body() -> None:
    async def handler(verb: str, body: dict[str, Any]) -> Any:
        if verb == "filter":
            return {
                "NodeNames": ["n2"],
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
        return {"Error": ""}

    result, ext = asyncio.run(drive(handler, NODES, [pod_obj("p", uid="u-p")]))
    verb, body = ext.calls[0]
    assert verb == "filter"
    assert set(body) == {"Pod", "Nodes", "NodeNames"}
    assert body["Nodes"] is None
    assert body["NodeNames"] == ["n1", "n2", "n3"]
    assert body["Pod"]["metadata"]["name"] == "p"
    assert ext.calls[1] == (
        "bind",
        {"PodName": "p", "PodNamespace": "default", "PodUID": "u-p", "Node": "n2"},
    )
    assert result.outcomes["default/p"].node == "n2"


def test_prioritize_is_called_only_when_several_nodes_are_feasible() -> None:
    feasible = {"solo": ["n3"], "multi": ["n1", "n2", "n3"], "tie": ["n2", "n3"]}
    scores = {"n1": 3, "n2": 7, "n3": 7}

    async def handler(verb: str, body: dict[str, Any]) -> Any:
        if verb == "filter":
            return {"NodeNames": feasible[body["Pod"]["metadata"]["name"]], "Error": ""}
        if verb == "prioritize":
            return [{"Host": n, "Score": scores[n]} for n in body["NodeNames"]]
        return {"Error": ""}

    pods = [pod_obj(name, uid=f"u-{name}") for name in feasible]
    result, ext = asyncio.run(drive(handler, NODES, pods))
    prioritized = [b["Pod"]["metadata"]["name"] for v, b in ext.calls if v == "prioritize"]
    assert sorted(prioritized) == ["multi", "tie"]
    assert {k: o.node for k, o in result.outcomes.items()} == {
        "default/solo": "n3",
        "default/multi": "n2",  # top score
        "default/tie": "n2",  # equal scores: lowest name
    }


def test_binds_run_concurrently_so_a_bind_barrier_can_release_the_whole_gang() -> None:
    arrived: list[str] = []
    everyone = asyncio.Event()

    async def handler(verb: str, body: dict[str, Any]) -> Any:
        if verb == "filter":
            return {"NodeNames": ["n1"], "Error": ""}
        arrived.append(body["PodName"])
        if len(arrived) == 3:
            everyone.set()
        try:
            await asyncio.wait_for(everyone.wait(), timeout=2)
        except TimeoutError:
            return {"Error": "barrier timed out: binds arrived one at a time"}
        return {"Error": ""}

    gang = [pod_obj(f"g-{i}", group="g", uid=f"u-g-{i}") for i in range(3)]
    result, _ = asyncio.run(drive(handler, NODES, gang))
    assert [o.node for o in result.outcomes.values()] == ["n1", "n1", "n1"]


def test_a_run_without_progress_stops_and_keeps_the_reason() -> None:
    async def handler(verb: str, body: dict[str, Any]) -> Any:
        reason = "waiting for gang members: 1/2 exist"
        return {
            "NodeNames": [],
            "FailedAndUnresolvableNodes": dict.fromkeys(body["NodeNames"], reason),
            "Error": "",
        }

    result, ext = asyncio.run(drive(handler, NODES, [pod_obj("lonely", group="pair")]))
    assert result.rounds == 1
    assert ext.verbs() == ["filter"]
    assert result.outcomes["default/lonely"].reason == "waiting for gang members: 1/2 exist"


def test_a_failed_bind_requeues_the_pod() -> None:
    binds = 0

    async def handler(verb: str, body: dict[str, Any]) -> Any:
        nonlocal binds
        if verb == "filter":
            return {"NodeNames": ["n1"], "Error": ""}
        binds += 1
        return {"Error": "" if binds > 1 else "pod no longer fits node n1"}

    result, ext = asyncio.run(drive(handler, NODES, [pod_obj("retry")]))
    assert ext.verbs() == ["filter", "bind", "filter", "bind"]
    assert result.outcomes["default/retry"].node == "n1"
    assert result.outcomes["default/retry"].attempts == 2


def test_pods_of_other_schedulers_and_bound_pods_are_left_alone() -> None:
    async def handler(verb: str, body: dict[str, Any]) -> Any:
        raise AssertionError(f"unexpected {verb}")

    objects = [*NODES, pod_obj("running", node="n1", phase="Running")]
    result, ext = asyncio.run(
        drive(handler, objects, [pod_obj("theirs", scheduler="default-scheduler")])
    )
    assert ext.calls == []
    assert result.ignored == ["default/theirs"]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"Error": "boom", "FailedNodes": {"n1": "x"}}, "boom"),
        ({"FailedAndUnresolvableNodes": {"n1": "full", "n2": "full"}}, "full"),
        (
            {
                "FailedAndUnresolvableNodes": {"n1": "cordoned"},
                "FailedNodes": {"n2": "full", "n3": "full"},
            },
            "2 node(s): full; 1 node(s): cordoned",
        ),
        ({}, "no node was offered or kept"),
    ],
    ids=["error-wins", "one-reason", "counted-reasons", "nothing"],
)
def test_failures_are_summarised_like_failed_scheduling_events(
    answer: dict[str, Any], expected: str
) -> None:
    assert summarize_failures(answer) == expected


def test_created_objects_get_what_the_api_server_fills_in() -> None:
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {"containers": []},
    }
    obj = normalize(raw)
    assert obj["metadata"]["namespace"] == "default"
    assert obj["metadata"]["uid"]
    assert obj["spec"]["schedulerName"] == "default-scheduler"
    assert obj["status"]["phase"] == "Pending"
    assert "namespace" not in raw["metadata"]  # the caller's dict is untouched


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        (pod_obj("w-0", group="train"), "default/train"),
        (pod_obj("w-0", annotations={"phalanx.io/pod-group": "train"}), "default/train"),
        (pod_obj("w-0", volcano_group="train"), "volcano:default/train"),
        (pod_obj("w-0", scheduling_group="workers"), "upstream:default/workers"),
        (pod_obj("alone"), None),
    ],
    ids=["scheduler-plugins", "annotations", "volcano", "upstream", "single"],
)
def test_a_pod_s_gang_is_named_in_every_dialect_as_phalanx_keys_it(
    obj: dict[str, Any], key: str | None
) -> None:
    # simulate's tables and progress lines group members by this key: Volcano and upstream
    # members were once listed as single pods.
    assert group_of(obj) == key
