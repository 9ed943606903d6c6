"""Requests kube-scheduler would never send: 400/413/405/404 with a JSON reason, never a 500,
and the server keeps answering."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from api_harness import Phalanx, fixture_bytes, serve, small_cluster
from garbage_requests import GARBAGE, NOT_AN_OBJECT, VERBS

pytestmark = pytest.mark.anyio


async def assert_still_serving(phalanx: Phalanx) -> None:
    response = await phalanx.post("filter", fixture_bytes("filter_nodenames.json"))
    assert response.status_code == 200
    assert response.json()["Error"] == ""


@pytest.mark.parametrize(
    ("verb", "raw", "problem"), GARBAGE, ids=[f"{v}-{i}" for i, (v, _, _) in enumerate(GARBAGE)]
)
async def test_garbage_gets_400_naming_the_problem_and_the_server_goes_on(
    phalanx: Phalanx, verb: str, raw: bytes, problem: str
) -> None:
    response = await phalanx.post(verb, raw)

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error.startswith(f"bad {verb} request: ")
    assert problem in error
    assert phalanx.count(verb, "bad-request") == 1
    await assert_still_serving(phalanx)


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(
    ("raw", "problem"),
    [(raw, problem) for _, raw, problem in NOT_AN_OBJECT],
    ids=[name for name, _, _ in NOT_AN_OBJECT],
)
async def test_a_body_that_is_no_json_object_gets_400_naming_it_on_every_verb(
    phalanx: Phalanx, verb: str, raw: bytes, problem: str
) -> None:
    response = await phalanx.post(verb, raw)

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert list(response.json()) == ["error"]
    assert response.json()["error"].startswith(f"bad {verb} request: {problem}")
    assert phalanx.count(verb, "bad-request") == 1
    assert phalanx.source.bindings == []
    await assert_still_serving(phalanx)


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_prioritize_refuses_the_same_garbage_as_filter(phalanx: Phalanx, verb: str) -> None:
    response = await phalanx.post(verb, b'{"Pod": {}, "NodeNames": 5}')

    assert response.status_code == 400
    assert "NodeNames must be an array" in response.json()["error"]


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    async with serve(small_cluster(), max_body_bytes=1024) as phalanx:
        response = await phalanx.post("filter", b"{" + b" " * 2000 + b"}")

        assert response.status_code == 413
        assert response.json() == {
            "error": "request body of 2002 bytes exceeds the limit of 1024 bytes"
        }
        assert phalanx.count("filter", "bad-request") == 1


async def test_a_chunked_body_is_cut_off_at_the_limit_without_reading_the_rest() -> None:
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:  # a 1 GB upload would look the same: nothing past the limit is read
            pulled += 1
            yield b" " * 512

    async with serve(small_cluster(), max_body_bytes=4096) as phalanx:
        response = await phalanx.client.post("/filter", content=endless())

        assert response.status_code == 413
        assert "exceeds the limit of 4096 bytes" in response.json()["error"]
        assert pulled <= 4096 // 512 + 1
        await assert_still_serving(phalanx)


async def test_a_body_exactly_at_the_limit_is_read() -> None:
    raw = fixture_bytes("filter_nodenames.json")
    async with serve(small_cluster(), max_body_bytes=len(raw)) as phalanx:
        response = await phalanx.post("filter", raw)

    assert response.status_code == 200


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind", "preempt"])
async def test_a_verb_answers_405_to_anything_but_post(phalanx: Phalanx, verb: str) -> None:
    response = await phalanx.client.get(f"/{verb}")

    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json() == {"error": f"method GET is not allowed on /{verb} (allowed: POST)"}
    await assert_still_serving(phalanx)


async def test_an_ops_route_answers_405_to_post(phalanx: Phalanx) -> None:
    response = await phalanx.client.post("/healthz")

    assert response.status_code == 405
    assert "not allowed on /healthz" in response.json()["error"]


@pytest.mark.parametrize("path", ["/", "/filterx", "/scheduler/filter", "/docs", "/openapi.json"])
async def test_an_unknown_path_is_404_with_a_json_reason(phalanx: Phalanx, path: str) -> None:
    response = await phalanx.client.post(path, content=b"{}")

    assert response.status_code == 404
    assert response.json() == {"error": f"no such path: {path}"}
