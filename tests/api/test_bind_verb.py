"""POST /bind: ExtenderBindingArgs in, ExtenderBindingResult {"Error": ...} out."""

from __future__ import annotations

import pytest
from api_harness import Phalanx, fixture_bytes

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("fixture", ["bind.json", "bind_legacy_lowercase.json"])
async def test_a_pod_in_no_group_is_bound_at_once(phalanx: Phalanx, fixture: str) -> None:
    response = await phalanx.post("bind", fixture_bytes(fixture))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"Error": ""}
    assert phalanx.source.bindings == [("team-a/solo", "gpu-a")]
    assert phalanx.count("bind", "ok") == 1


async def test_an_unknown_pod_is_a_bind_error_with_a_reason(phalanx: Phalanx) -> None:
    request = {"PodName": "ghost", "PodNamespace": "team-a", "PodUID": "uid-x", "Node": "gpu-a"}

    response = await phalanx.post("bind", request)

    assert response.status_code == 200
    assert response.json() == {"Error": "pod team-a/ghost is unknown to Phalanx"}
    assert phalanx.source.bindings == []
    assert phalanx.count("bind", "error") == 1


async def test_a_recreated_pod_with_another_uid_is_not_bound(phalanx: Phalanx) -> None:
    request = {"PodName": "solo", "PodNamespace": "team-a", "PodUID": "uid-old", "Node": "gpu-a"}

    response = await phalanx.post("bind", request)

    assert response.status_code == 200
    error = response.json()["Error"]
    assert "uid-team-a-solo" in error
    assert "uid-old" in error
    assert phalanx.source.bindings == []


async def test_binding_to_an_unknown_node_is_a_bind_error(phalanx: Phalanx) -> None:
    request = {
        "PodName": "solo",
        "PodNamespace": "team-a",
        "PodUID": "uid-team-a-solo",
        "Node": "gpu-z",
    }

    response = await phalanx.post("bind", request)

    assert response.status_code == 200
    assert "gpu-z" in response.json()["Error"]
    assert phalanx.source.bindings == []
