"""POST /prioritize answers a bare HostPriorityList with integer scores 0..10."""

from __future__ import annotations

import pytest
from api_harness import Phalanx, fixture_bytes, fixture_json

pytestmark = pytest.mark.anyio


def assert_host_priorities(answer: object, hosts: list[str]) -> None:
    assert isinstance(answer, list)
    assert [entry["Host"] for entry in answer] == hosts
    for entry in answer:
        assert set(entry) == {"Host", "Score"}
        assert type(entry["Score"]) is int
        assert 0 <= entry["Score"] <= 10


@pytest.mark.parametrize(
    "fixture", ["filter_nodenames.json", "filter_nodes.json", "filter_legacy_lowercase.json"]
)
async def test_every_offered_node_gets_one_integer_score(phalanx: Phalanx, fixture: str) -> None:
    response = await phalanx.post("prioritize", fixture_bytes(fixture))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert_host_priorities(response.json(), ["gpu-a", "gpu-b", "cpu-1"])
    assert phalanx.count("prioritize", "ok") == 1


async def test_an_unreadable_pod_gets_neutral_scores(phalanx: Phalanx) -> None:
    request = fixture_json("filter_nodenames.json")
    request["Pod"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "a lot"

    response = await phalanx.post("prioritize", request)

    assert response.status_code == 200
    assert response.json() == [
        {"Host": "gpu-a", "Score": 0},
        {"Host": "gpu-b", "Score": 0},
        {"Host": "cpu-1", "Score": 0},
    ]
    assert phalanx.count("prioritize", "error") == 1
