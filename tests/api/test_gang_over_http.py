"""A four-member gang through HTTP, exactly as kube-scheduler drives it: filter, prioritize,
then four asynchronous binds that succeed only together."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest
from api_harness import Phalanx, as_sent, serve

from builders import node_obj, pod_obj, podgroup_obj
from phalanx.service.extender import ServiceSettings

pytestmark = pytest.mark.anyio

OFFERED = ["gpu-a", "gpu-b", "cpu-1"]


def member(i: int) -> dict[str, Any]:
    """A scheduler-plugins member of gang `train`: 4 of the 8 GPUs of a node each."""
    return pod_obj(f"train-{i}", 4, namespace="team-a", group="train")


def three_of_four() -> list[dict[str, Any]]:
    return [
        node_obj("gpu-a"),
        node_obj("gpu-b"),
        node_obj("cpu-1", 0, cpu="16", memory="64Gi"),
        podgroup_obj("train", 4, namespace="team-a"),
        *(member(i) for i in range(3)),
    ]


async def filter_member(phalanx: Phalanx, i: int) -> dict[str, Any]:
    response = await phalanx.post("filter", {"Pod": as_sent(member(i)), "NodeNames": OFFERED})
    assert response.status_code == 200
    answer = response.json()
    assert isinstance(answer, dict)
    return answer


def bind_request(i: int, node: str) -> dict[str, str]:
    return {
        "PodName": f"train-{i}",
        "PodNamespace": "team-a",
        "PodUID": f"uid-team-a-train-{i}",
        "Node": node,
    }


async def test_a_gang_is_reserved_whole_and_binds_only_together() -> None:
    # Quorum first (template reservation off): 3 of 4 members exist, so nothing is planned.
    # Each member reaches bind itself (no completion): the barrier holds the first three.
    settings = ServiceSettings(
        barrier_timeout_seconds=10.0, template_reservation=False, complete_members=False
    )
    async with serve(three_of_four(), settings=settings) as phalanx:
        waiting = await filter_member(phalanx, 0)
        assert waiting["Error"] == ""
        assert waiting["NodeNames"] == []
        reasons = waiting["FailedAndUnresolvableNodes"]
        assert set(reasons) == set(OFFERED)
        assert all("waiting for gang members: 3/4 exist" in r for r in reasons.values())

        # The fourth member appears; every member now follows its reservation.
        phalanx.source.apply(member(3))
        reserved: dict[int, str] = {}
        for i in range(4):
            answer = await filter_member(phalanx, i)
            assert answer["Error"] == ""
            assert len(answer["NodeNames"]) == 1, answer
            reserved[i] = answer["NodeNames"][0]
            assert reserved[i] not in {
                **answer["FailedNodes"],
                **answer["FailedAndUnresolvableNodes"],
            }
        assert set(reserved.values()) <= {"gpu-a", "gpu-b"}
        assert max(Counter(reserved.values()).values()) <= 2  # 4 GPUs each, 8 per node

        scores = (
            await phalanx.post("prioritize", {"Pod": as_sent(member(0)), "NodeNames": OFFERED})
        ).json()
        assert {s["Host"]: s["Score"] for s in scores}[reserved[0]] == 10

        # Three binds wait at the barrier; nothing is bound yet.
        async def bind(i: int) -> httpx.Response:
            return await phalanx.post("bind", bind_request(i, reserved[i]))

        first_three = [asyncio.create_task(bind(i)) for i in range(3)]
        done, _ = await asyncio.wait(first_three, timeout=0.3)
        assert not done
        assert phalanx.source.bindings == []
        assert phalanx.extender.metrics.registry.get_sample_value("phalanx_barrier_waiting") == 3

        # The fourth releases all of them.
        last = await bind(3)
        answers = [await t for t in first_three] + [last]

        assert [(a.status_code, a.json()) for a in answers] == [(200, {"Error": ""})] * 4
        assert sorted(phalanx.source.bindings) == sorted(
            (f"team-a/train-{i}", node) for i, node in reserved.items()
        )
        assert phalanx.count("bind", "ok") == 4

        view = (await phalanx.client.get("/debug/groups/team-a/train")).json()
        assert view["bound"] == 4
