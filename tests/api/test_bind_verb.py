"""POST /bind: ExtenderBindingArgs in, ExtenderBindingResult {"Error": ...} out; a bind
Phalanx refuses is still a 200, its reason in Error (kube-scheduler reports it on the pod)."""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import Phalanx, as_sent, fixture_bytes, serve, small_cluster

from builders import pod_obj, podgroup_obj

pytestmark = pytest.mark.anyio

OFFERED = ["gpu-a", "gpu-b", "cpu-1"]


@pytest.mark.parametrize("fixture", ["bind.json", "bind_legacy_lowercase.json"])
async def test_a_pod_in_no_group_is_bound_at_once(phalanx: Phalanx, fixture: str) -> None:
    response = await phalanx.post("bind", fixture_bytes(fixture))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"Error": ""}
    assert phalanx.source.bindings == [("team-a/solo", "gpu-a")]
    assert phalanx.count("bind", "ok") == 1


def with_a_reserved_pair() -> list[dict[str, Any]]:
    """The small cluster, and gang `pair` (two 4-GPU members) to be reserved by /filter."""
    return [
        *small_cluster(),
        podgroup_obj("pair", 2, namespace="team-a"),
        *(pod_obj(f"pair-{i}", 4, namespace="team-a", group="pair") for i in range(2)),
    ]


async def reserve_pair(phalanx: Phalanx) -> dict[str, str]:
    """Each member's reserved node, as /filter answers it."""
    nodes = {}
    for i in range(2):
        member = as_sent(pod_obj(f"pair-{i}", 4, namespace="team-a", group="pair"))
        answer = (await phalanx.post("filter", {"Pod": member, "NodeNames": OFFERED})).json()
        [nodes[f"pair-{i}"]] = answer["NodeNames"]
    return nodes


def request(name: str, uid: str, node: str) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": "team-a", "PodUID": uid, "Node": node}


# (the request, the exact Error it gets: {pair-0} is where /filter reserved pair-0)
REFUSALS = [
    (
        request("ghost", "uid-x", "gpu-a"),
        "pod team-a/ghost is unknown to Phalanx",
    ),
    (
        request("solo", "uid-old", "gpu-a"),
        "pod team-a/solo has UID uid-team-a-solo, not uid-old: it was recreated",
    ),
    (
        request("solo", "uid-team-a-solo", "gpu-z"),
        "node gpu-z is unknown to Phalanx",
    ),
    (
        request("victim", "uid-team-a-victim", "gpu-b"),
        "pod team-a/victim is already bound to gpu-a",
    ),
    (
        request("pair-0", "uid-team-a-pair-0", "cpu-1"),
        "gang team-a/pair reserved {pair-0} for pod team-a/pair-0, not cpu-1",
    ),
]


@pytest.mark.parametrize(
    ("bind", "error"),
    REFUSALS,
    ids=[
        "unknown-pod",
        "recreated-uid",
        "unknown-node",
        "bound-elsewhere",
        "not-the-reserved-node",
    ],
)
async def test_a_bind_phalanx_must_refuse_gets_200_with_the_reason_and_binds_nothing(
    bind: dict[str, str], error: str
) -> None:
    async with serve(with_a_reserved_pair()) as phalanx:
        reserved = await reserve_pair(phalanx)

        response = await phalanx.post("bind", bind)

        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {"Error": error.format(**reserved)}
        assert phalanx.source.bindings == []
        assert phalanx.count("bind", "error") == 1
        assert phalanx.extender.state.reservation("team-a/pair") is not None  # nothing given up
