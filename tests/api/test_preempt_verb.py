"""POST /preempt: full or meta victims in, always NodeNameToMetaVictims out."""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import Phalanx, as_sent, fixture_bytes, fixture_json, serve

from builders import node_obj, pod_obj, podgroup_obj

pytestmark = pytest.mark.anyio

BOTH_NODES = {
    "NodeNameToMetaVictims": {
        "gpu-a": {"Pods": [{"UID": "uid-team-a-victim"}], "NumPDBViolations": 1},
        "gpu-b": {"Pods": [{"UID": "uid-team-a-other"}], "NumPDBViolations": 0},
    }
}


@pytest.mark.parametrize(
    "fixture",
    ["preempt_meta_victims.json", "preempt_full_victims.json", "preempt_legacy_lowercase.json"],
    ids=["meta-victims", "full-victims", "legacy-lower-case"],
)
async def test_victims_in_any_form_are_answered_as_meta_victims(
    phalanx: Phalanx, fixture: str
) -> None:
    response = await phalanx.post("preempt", fixture_bytes(fixture))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == BOTH_NODES
    assert phalanx.count("preempt", "ok") == 1


async def test_no_candidates_is_answered_with_none(phalanx: Phalanx) -> None:
    request = fixture_json("preempt_meta_victims.json")
    request["NodeNameToMetaVictims"] = None

    response = await phalanx.post("preempt", request)

    assert response.status_code == 200
    assert response.json() == {"NodeNameToMetaVictims": {}}


async def test_an_unreadable_preemptor_preempts_nothing(phalanx: Phalanx) -> None:
    request = fixture_json("preempt_meta_victims.json")
    request["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "many"

    response = await phalanx.post("preempt", request)

    assert response.status_code == 200
    assert response.json() == {"NodeNameToMetaVictims": {}}
    assert phalanx.count("preempt", "error") == 1


def bound_gang(job_1_on: str) -> list[dict[str, Any]]:
    """Gang `job` (minMember 2): job-0 on gpu-a, job-1 on `job_1_on`; a lone pod on gpu-b."""
    return [
        node_obj("gpu-a"),
        node_obj("gpu-b"),
        podgroup_obj("job", 2, namespace="team-a"),
        pod_obj("job-0", 2, namespace="team-a", group="job", node="gpu-a", phase="Running"),
        pod_obj("job-1", 2, namespace="team-a", group="job", node=job_1_on, phase="Running"),
        pod_obj("lone", 2, namespace="team-a", node="gpu-b", phase="Running"),
    ]


LONE = {"Pods": [{"UID": "uid-team-a-lone"}], "NumPDBViolations": 3}


@pytest.mark.parametrize(
    ("job_1_on", "expected"),
    [
        (
            "gpu-a",
            {
                "gpu-a": {
                    "Pods": [{"UID": "uid-team-a-job-0"}, {"UID": "uid-team-a-job-1"}],
                    "NumPDBViolations": 0,
                },
                "gpu-b": LONE,
            },
        ),
        ("gpu-b", {"gpu-b": LONE}),
    ],
    ids=["whole-gang-on-the-node:-widened", "gang-across-nodes:-node-dropped"],
)
async def test_victims_that_would_leave_a_gang_partial_are_widened_to_it_or_dropped(
    job_1_on: str, expected: dict[str, Any]
) -> None:
    preemptor = as_sent(pod_obj("urgent", 4, namespace="team-a"))
    request = {
        "Pod": preemptor,
        "NodeNameToMetaVictims": {
            "gpu-a": {"Pods": [{"UID": "uid-team-a-job-0"}], "NumPDBViolations": 0},
            "gpu-b": LONE,
        },
    }
    async with serve(bound_gang(job_1_on)) as phalanx:
        response = await phalanx.post("preempt", request)

    assert response.status_code == 200
    assert response.json() == {"NodeNameToMetaVictims": expected}
