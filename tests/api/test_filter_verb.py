"""POST /filter as kube-scheduler sends it, in both node modes."""

from __future__ import annotations

import copy

import pytest
from api_harness import Phalanx, as_sent, fixture_bytes, fixture_json, serve

from builders import node_obj, pod_obj

pytestmark = pytest.mark.anyio

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


async def test_node_names_mode_answers_node_names_and_null_nodes(phalanx: Phalanx) -> None:
    response = await phalanx.post("filter", fixture_bytes("filter_nodenames.json"))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert set(answer) == FILTER_KEYS
    assert answer["Nodes"] is None
    assert answer["Error"] == ""
    assert sorted(answer["NodeNames"]) == ["gpu-a", "gpu-b"]
    assert answer["FailedNodes"] == answer["FailedAndUnresolvableNodes"] == {}
    assert phalanx.count("filter", "ok") == 1


async def test_full_nodes_mode_returns_the_kept_node_objects_unchanged(phalanx: Phalanx) -> None:
    sent = fixture_json("filter_nodes.json")["Nodes"]["items"]

    response = await phalanx.post("filter", fixture_bytes("filter_nodes.json"))

    assert response.status_code == 200
    answer = response.json()
    assert set(answer) == FILTER_KEYS
    assert answer["NodeNames"] is None
    kept = answer["Nodes"]["items"]
    assert [n["metadata"]["name"] for n in kept] == ["gpu-a", "gpu-b"]
    assert kept == [sent[0], sent[1]]  # byte-for-byte the objects kube-scheduler sent


async def test_legacy_lower_case_keys_get_the_same_answer_in_go_names(phalanx: Phalanx) -> None:
    go = (await phalanx.post("filter", fixture_bytes("filter_nodenames.json"))).json()
    legacy = await phalanx.post("filter", fixture_bytes("filter_legacy_lowercase.json"))

    assert legacy.status_code == 200
    assert legacy.json() == go


async def test_a_node_that_was_not_offered_is_never_returned(phalanx: Phalanx) -> None:
    request = fixture_json("filter_nodenames.json")
    request["NodeNames"] = ["gpu-b"]

    answer = (await phalanx.post("filter", request)).json()

    assert answer["NodeNames"] == ["gpu-b"]
    assert set(answer["FailedNodes"]) <= {"gpu-b"}
    assert set(answer["FailedAndUnresolvableNodes"]) <= {"gpu-b"}


async def test_a_pod_no_node_is_left_for_gets_each_offered_nodes_reason(phalanx: Phalanx) -> None:
    request = fixture_json("filter_nodenames.json")
    request["NodeNames"] = ["cpu-1"]

    answer = (await phalanx.post("filter", request)).json()

    assert answer["NodeNames"] == []
    reasons = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert list(reasons) == ["cpu-1"]
    assert reasons["cpu-1"]


async def test_no_offered_nodes_is_an_empty_answer_not_an_error(phalanx: Phalanx) -> None:
    request = fixture_json("filter_nodenames.json")
    request["NodeNames"] = []

    response = await phalanx.post("filter", request)

    assert response.status_code == 200
    assert response.json() == {
        "Nodes": None,
        "NodeNames": [],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


async def test_a_pod_with_bad_annotations_is_rejected_per_node_not_as_an_error(
    phalanx: Phalanx,
) -> None:
    bad = pod_obj(
        "typo",
        namespace="team-a",
        annotations={"phalanx.io/pod-group": "g", "phalanx.io/min-member": "four"},
    )
    response = await phalanx.post("filter", {"Pod": as_sent(bad), "NodeNames": ["gpu-a", "gpu-b"]})

    assert response.status_code == 200
    answer = response.json()
    assert answer["Error"] == ""
    assert answer["NodeNames"] == []
    reasons = answer["FailedAndUnresolvableNodes"]
    assert set(reasons) == {"gpu-a", "gpu-b"}
    assert "min-member" in reasons["gpu-a"]


async def test_a_pod_object_that_cannot_be_read_gets_200_with_the_reason_in_error(
    phalanx: Phalanx,
) -> None:
    broken = as_sent(pod_obj("broken", namespace="team-a"))
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"

    response = await phalanx.post("filter", {"Pod": broken, "NodeNames": ["gpu-a"]})

    assert response.status_code == 200
    answer = response.json()
    assert answer["Error"].startswith("pod team-a/broken: ")
    assert answer["NodeNames"] == []
    assert phalanx.count("filter", "error") == 1


@pytest.mark.parametrize("uid", [None, ""], ids=["missing", "empty"])
async def test_a_pod_without_a_uid_is_refused_not_taken_for_another(
    phalanx: Phalanx, uid: str | None
) -> None:
    # The model keys pods by UID: a CPU pod and an 8-GPU pod, both without one, were once
    # the same pod, and the second got the first's CPU node.
    for name, gpus in (("cpu-only", 0), ("eight-gpus", 8)):
        pod = as_sent(pod_obj(name, gpus, namespace="team-a"))
        if uid is None:
            del pod["metadata"]["uid"]
        else:
            pod["metadata"]["uid"] = uid

        response = await phalanx.post("filter", {"Pod": pod, "NodeNames": ["gpu-a", "cpu-1"]})

        assert response.status_code == 200
        answer = response.json()
        assert answer["Error"] == f"pod team-a/{name}: metadata.uid: required, and empty or missing"
        assert answer["NodeNames"] == []
    assert phalanx.count("filter", "error") == 2


async def test_by_default_a_single_pod_gets_only_its_best_fit_node_so_prioritize_is_skipped() -> (
    None
):
    cluster = [
        node_obj("gpu-a"),
        node_obj("gpu-b"),
        pod_obj("solo", namespace="team-a"),
        pod_obj("busy", 6, namespace="team-a", node="gpu-b", phase="Running"),
        pod_obj("light", 2, namespace="team-a", node="gpu-a", phase="Running"),
    ]
    body = {"Pod": as_sent(pod_obj("solo", namespace="team-a")), "NodeNames": ["gpu-a", "gpu-b"]}
    async with serve(cluster) as phalanx:
        answer = (await phalanx.post("filter", body)).json()
    assert answer["Error"] == ""
    assert answer["NodeNames"] == ["gpu-b"]  # the fullest that fits; kube-scheduler has no choice


async def test_a_pod_the_model_holds_at_the_same_version_is_read_from_the_model() -> None:
    # The informer parsed this very object (same UID and resourceVersion): the request's
    # copy is not parsed again. Here it is made unreadable on purpose, to show which is read.
    stored = {**pod_obj("solo", namespace="team-a")}
    stored["metadata"] = {**stored["metadata"], "resourceVersion": "42"}
    sent = copy.deepcopy(as_sent(stored))
    sent["spec"]["containers"][0]["resources"]["requests"]["memory"] = "a lot"
    cluster = [node_obj("gpu-a"), stored]
    async with serve(cluster) as phalanx:
        same = (await phalanx.post("filter", {"Pod": sent, "NodeNames": ["gpu-a"]})).json()
        sent["metadata"]["resourceVersion"] = "43"  # a newer object: parsed, and refused
        newer = (await phalanx.post("filter", {"Pod": sent, "NodeNames": ["gpu-a"]})).json()
    assert same["NodeNames"] == ["gpu-a"]
    assert newer["NodeNames"] == []
    assert "memory" in newer["Error"] or "memory" in str(newer["FailedAndUnresolvableNodes"])
