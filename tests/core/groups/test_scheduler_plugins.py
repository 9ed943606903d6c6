"""scheduler-plugins: the pod label names a scheduling.x-k8s.io PodGroup; status as before."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from builders import pod_obj, podgroup_obj
from clocks import FakeClock
from phalanx.core.groups import scheduler_plugins
from phalanx.core.groups.discovery import ServedKind
from phalanx.core.groups.status import GroupPhase, GroupStatus
from phalanx.core.inventory import parse_pod
from phalanx.core.model import Claim, Dialect, GroupRef
from phalanx.sources.kube import KubeSource
from phalanx.sources.kube_reports import Held

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("labels", "claim"),
    [
        (
            {"scheduling.x-k8s.io/pod-group": "pytorchjob-mnist"},
            Claim(Dialect.SCHEDULER_PLUGINS, GroupRef("kubeflow", "pytorchjob-mnist")),
        ),
        ({"scheduling.x-k8s.io/pod-group": ""}, None),
        ({"training.kubeflow.org/job-name": "mnist"}, None),
    ],
    ids=["label", "empty-label", "no-label"],
)
def test_the_pod_group_label_claims_a_pod(labels: dict[str, str], claim: Claim | None) -> None:
    pod = parse_pod(pod_obj("mnist-worker-0", namespace="kubeflow", labels=labels))
    assert (pod.group, pod.group_dialect) == (
        (claim.ref, Dialect.SCHEDULER_PLUGINS) if claim else (None, None)
    )


@pytest.mark.parametrize("name", ["MyJob", "job_1"])
def test_a_label_no_pod_group_could_be_named_marks_the_pod_invalid(name: str) -> None:
    # A legal label value, but no PodGroup can have that name: the member would wait for
    # it forever.
    labels = {"scheduling.x-k8s.io/pod-group": name}
    pod = parse_pod(pod_obj("p", labels=labels))
    assert (pod.group, pod.group_dialect) == (None, Dialect.SCHEDULER_PLUGINS)
    assert pod.invalid == (
        f'label scheduling.x-k8s.io/pod-group: "{name}" is not a valid PodGroup name '
        '(lower-case letters, digits, "-" and ".")'
    )


def test_a_pod_group_is_keyed_by_namespace_and_name_as_before() -> None:
    group = scheduler_plugins.parse_pod_group(podgroup_obj("mnist", 4, namespace="kubeflow"))
    assert (group.key, group.ref, group.dialect) == (
        "kubeflow/mnist",
        GroupRef("kubeflow", "mnist"),
        Dialect.SCHEDULER_PLUGINS,
    )


def test_an_edited_min_member_makes_a_different_pod_group() -> None:
    before = podgroup_obj("mnist", 4)
    after = podgroup_obj("mnist", 6)
    after["status"] = {"phase": "Scheduling", "scheduled": 2}
    with_status = podgroup_obj("mnist", 4)
    with_status["status"] = {"phase": "Running", "running": 4}
    with_status["metadata"]["resourceVersion"] = "2041"
    parse = scheduler_plugins.parse_pod_group
    assert parse(before) != parse(after)
    assert parse(before) == parse(with_status)


# --- status ----------------------------------------------------------------------------


def status(
    phase: str, reason: str, message: str, scheduled: int, running: int, **kw: Any
) -> GroupStatus:
    return GroupStatus(
        GroupRef("ml", "job"), GroupPhase(phase), scheduled, running, reason, message, **kw
    )


def condition(state: str, reason: str, message: str, at: str) -> dict[str, Any]:
    return {
        "type": "PodGroupScheduled",
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


WAITING = status("Pending", "waiting-for-members", "waiting for gang members: 1/4 exist", 0, 0)


@pytest.mark.parametrize(
    ("gang", "previous", "body"),
    [
        pytest.param(
            WAITING,
            None,
            {
                "phase": "Pending",
                "scheduled": 0,
                "running": 0,
                "succeeded": 0,
                "failed": 0,
                "conditions": [
                    condition(
                        "False",
                        "WaitingForMembers",
                        "waiting for gang members: 1/4 exist",
                        "2026-01-01T00:00:00Z",
                    )
                ],
            },
            id="first-write",
        ),
        pytest.param(
            status("Scheduling", "", "", 0, 0, schedule_start_time=T0 - 30),
            None,
            {
                "phase": "Scheduling",
                "scheduled": 0,
                "running": 0,
                "succeeded": 0,
                "failed": 0,
                "conditions": [condition("False", "Scheduling", "", "2026-01-01T00:00:00Z")],
                "scheduleStartTime": "2025-12-31T23:59:30Z",
            },
            id="phase-as-reason",
        ),
        pytest.param(
            status("Running", "committed", "placed", 4, 4),
            {"conditions": [condition("False", "Committed", "x", "2025-12-31T00:00:00Z")]},
            {
                "phase": "Running",
                "scheduled": 4,
                "running": 4,
                "succeeded": 0,
                "failed": 0,
                "conditions": [
                    condition("True", "Committed", "placed", "2026-01-01T00:00:00Z"),
                ],
            },
            id="status-flips",
        ),
        pytest.param(
            status("Pending", "waiting-for-members", "2/4 exist", 0, 0),
            {
                "conditions": [
                    condition("False", "WaitingForMembers", "1/4 exist", "2025-12-31T00:00:00Z")
                ]
            },
            {
                "phase": "Pending",
                "scheduled": 0,
                "running": 0,
                "succeeded": 0,
                "failed": 0,
                "conditions": [
                    condition("False", "WaitingForMembers", "2/4 exist", "2025-12-31T00:00:00Z")
                ],
            },
            id="same-reason-keeps-time",
        ),
        pytest.param(
            status("Pending", "", "x" * 2000, 0, 0),
            None,
            {
                "phase": "Pending",
                "scheduled": 0,
                "running": 0,
                "succeeded": 0,
                "failed": 0,
                "conditions": [condition("False", "Pending", "x" * 1024, "2026-01-01T00:00:00Z")],
            },
            id="message-cut",
        ),
    ],
)
def test_status_is_scheduler_plugins_own(
    gang: GroupStatus, previous: dict[str, Any] | None, body: dict[str, Any]
) -> None:
    assert scheduler_plugins.build_status(gang, previous, T0, "v1alpha1") == body


def test_finished_members_are_counted_in_the_fields_scheduler_plugins_api_has_for_them() -> None:
    # PodGroupStatus has succeeded and failed (its CRD prints them); running alone undercounts
    # a gang whose Jobs finish.
    done = status("Scheduled", "bound", "bound", 4, 0, succeeded=3, failed=1)
    body = scheduler_plugins.build_status(done, None, T0, "v1alpha1")
    assert (body["running"], body["succeeded"], body["failed"]) == (0, 3, 1)


def test_an_empty_previous_status_reads_as_none() -> None:
    built = scheduler_plugins.build_status(WAITING, {"conditions": []}, T0, "v1alpha1")
    assert built == scheduler_plugins.build_status(WAITING, None, T0, "v1alpha1")


# --- what the live source sent before dialects -----------------------------------------


class RecordingApi:
    """Records the merge patches; the source is never started, so nothing else is called."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str]] = []

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, json.dumps(body)))
        return {}

    def close(self) -> None:
        pass


JOB = GroupRef("ml", "job")
SEQUENCE = [
    (T0, GroupStatus(JOB, GroupPhase.PENDING, 0, 0, "waiting-for-members", "1/4 exist")),
    (T0 + 5, GroupStatus(JOB, GroupPhase.PENDING, 0, 0, "waiting-for-members", "3/4 exist")),
    (T0 + 6, GroupStatus(JOB, GroupPhase.PENDING, 0, 0, "waiting-for-members", "3/4 exist")),
    (T0 + 9, GroupStatus(JOB, GroupPhase.SCHEDULING, 0, 0, "committed", "reserved", T0 + 8)),
    (T0 + 12, GroupStatus(JOB, GroupPhase.SCHEDULED, 4, 0, "bound", "bound", T0 + 8)),
    (T0 + 40, GroupStatus(JOB, GroupPhase.RUNNING, 4, 4, "", "", T0 + 8)),
]
# What KubeSource sent for SEQUENCE before the dialects were wired (recorded from it then;
# json.dumps keeps the key order, so the bytes compare).
SENT_BEFORE = [
    {
        "status": {
            "phase": "Pending",
            "scheduled": 0,
            "running": 0,
            "conditions": [
                {
                    "type": "PodGroupScheduled",
                    "status": "False",
                    "reason": "WaitingForMembers",
                    "message": "1/4 exist",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    },
    {
        "status": {
            "phase": "Pending",
            "scheduled": 0,
            "running": 0,
            "conditions": [
                {
                    "type": "PodGroupScheduled",
                    "status": "False",
                    "reason": "WaitingForMembers",
                    "message": "3/4 exist",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    },
    {
        "status": {
            "phase": "Scheduling",
            "scheduled": 0,
            "running": 0,
            "conditions": [
                {
                    "type": "PodGroupScheduled",
                    "status": "False",
                    "reason": "Committed",
                    "message": "reserved",
                    "lastTransitionTime": "2026-01-01T00:00:09Z",
                }
            ],
            "scheduleStartTime": "2026-01-01T00:00:08Z",
        }
    },
    {
        "status": {
            "phase": "Scheduled",
            "scheduled": 4,
            "running": 0,
            "conditions": [
                {
                    "type": "PodGroupScheduled",
                    "status": "True",
                    "reason": "Bound",
                    "message": "bound",
                    "lastTransitionTime": "2026-01-01T00:00:12Z",
                }
            ],
            "scheduleStartTime": "2026-01-01T00:00:08Z",
        }
    },
    {
        "status": {
            "phase": "Running",
            "scheduled": 4,
            "running": 4,
            "conditions": [
                {
                    "type": "PodGroupScheduled",
                    "status": "True",
                    "reason": "Running",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:40Z",
                }
            ],
            "scheduleStartTime": "2026-01-01T00:00:08Z",
        }
    },
]


def with_finished(sent: dict[str, Any]) -> dict[str, Any]:
    """`sent` with the finished members' counts Phalanx has written since, after `running`."""
    status: dict[str, Any] = {}
    for key, value in sent["status"].items():
        status[key] = value
        if key == "running":
            status |= {"succeeded": 0, "failed": 0}
    return {"status": status}


def test_the_status_body_is_what_the_kube_source_sent_before_dialects_and_the_finished_counts() -> (
    None
):
    api = RecordingApi()
    wall = FakeClock(T0)
    source = KubeSource(api, wall_clock=wall)  # type: ignore[arg-type]  # only patch() runs
    # What the watch records when it sees the PodGroup.
    kind = ServedKind(
        Dialect.SCHEDULER_PLUGINS, "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"
    )
    source._objects["ml/job"] = Held(kind, "pg-uid")  # noqa: SLF001

    async def send_all() -> None:
        for at, update in SEQUENCE:
            wall.now = at
            await source.update_group_status(update)

    asyncio.run(send_all())
    path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups/job/status"
    assert api.patches == [(path, json.dumps(with_finished(body))) for body in SENT_BEFORE]
    assert len(api.patches) == 5  # the repeat at T0+6 is not sent


@pytest.mark.parametrize("phase", ["Finished", "Failed"])
def test_a_gang_that_ran_to_its_end_keeps_its_placed_condition(phase: str) -> None:
    ended = status(phase, "bound", "bound 4 member(s) together", 4, 0, succeeded=4)
    body: dict[str, Any] = scheduler_plugins.build_status(ended, None, T0, "v1alpha1")  # JSON
    assert body["phase"] == phase
    assert body["conditions"][0]["status"] == "True"
