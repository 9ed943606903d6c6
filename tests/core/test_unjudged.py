"""What of a pod only kube-scheduler's own filters judge: such a member is never bound by the
barrier before its own cycle. Read from the pod as the API server stores it."""

from typing import Any

import pytest

from builders import pod_obj
from phalanx.core.errors import InvalidObjectError
from phalanx.core.inventory import parse_pod


def with_spec(**spec: Any) -> dict[str, Any]:
    obj = pod_obj("worker-0", 8, group="job")
    obj["spec"].update(spec)
    return obj


def ported(port: dict[str, Any]) -> dict[str, Any]:
    obj = pod_obj("worker-0", 8, group="job")
    obj["spec"]["containers"][0]["ports"] = [port]
    return obj


def test_a_plain_training_member_asks_for_nothing_phalanx_does_not_judge() -> None:
    obj = with_spec(
        hostNetwork=True,  # NCCL over the host network, no ports declared
        nodeSelector={"gpu": "h100"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
        volumes=[
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "cfg", "configMap": {"name": "job"}},
            {"name": "token", "projected": {"sources": []}},
            {"name": "data", "hostPath": {"path": "/data"}},
        ],
        affinity={
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]},
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}},
        },
        topologySpreadConstraints=[{"maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}],
    )
    assert parse_pod(obj).unjudged == ""


@pytest.mark.parametrize(
    ("obj", "named"),
    [
        pytest.param(with_spec(schedulingGates=[{"name": "wait"}]), "scheduling gates", id="gate"),
        pytest.param(ported({"containerPort": 80, "hostPort": 8080}), "host ports", id="port"),
        pytest.param(
            with_spec(
                affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}
            ),
            "required inter-pod affinity",
            id="affinity",
        ),
        pytest.param(
            with_spec(
                affinity={
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}
                }
            ),
            "required anti-affinity",
            id="anti-affinity",
        ),
        pytest.param(
            with_spec(topologySpreadConstraints=[{"maxSkew": 1}]),  # DoNotSchedule by default
            "topology spread constraints",
            id="spread",
        ),
        pytest.param(
            with_spec(
                volumes=[
                    {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}},
                    {"name": "scratch", "ephemeral": {}},
                    {"name": "cfg", "configMap": {"name": "job"}},
                ]
            ),
            "ephemeral, persistentVolumeClaim volumes",
            id="volumes",
        ),
        pytest.param(
            with_spec(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}]),
            "ResourceClaims",
            id="claims",
        ),
    ],
)
def test_what_only_kube_scheduler_judges_is_named(obj: dict[str, Any], named: str) -> None:
    assert parse_pod(obj).unjudged == named


def test_every_such_ask_is_named_together() -> None:
    obj = ported({"containerPort": 80, "hostPort": 80})
    obj["spec"]["schedulingGates"] = [{"name": "wait"}]
    assert parse_pod(obj).unjudged == "scheduling gates; host ports"


def test_a_container_port_without_a_host_port_is_no_ask() -> None:
    assert parse_pod(ported({"containerPort": 29500})).unjudged == ""


def test_a_malformed_field_it_reads_is_a_clear_error_naming_the_field() -> None:
    with pytest.raises(InvalidObjectError, match=r"spec\.topologySpreadConstraints"):
        parse_pod(with_spec(topologySpreadConstraints="spread"))
