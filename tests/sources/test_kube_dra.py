"""DraFeed: DRA informer changes into the model, and what people are told about them."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import (
    claim_obj,
    claim_template_obj,
    device_request,
    dra_pod_obj,
    gpu_device,
    gpu_node,
    gpu_slice_obj,
    nvidia_class_objs,
    slice_obj,
)
from phalanx.core.cache import ClusterState
from phalanx.core.dra import (
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.inventory import parse_pod
from phalanx.core.model import DRA_GPU, PodRef
from phalanx.sources.informer import ApiError, Delete, Invalid, Upsert
from phalanx.sources.kube_dra import (
    APPROXIMATE_DEVICE_CLAIM,
    DRA_API,
    DRA_NOT_PLANNED,
    INVALID_DEVICE_CLAIM,
    INVALID_OBJECT,
    RESOURCES,
    DraFeed,
)


@dataclass
class Sink:
    """Records Events and requeues as the live source would write them."""

    events: list[tuple[str, str, str, str, bool]] = field(default_factory=list)
    requeued: list[PodRef] = field(default_factory=list)

    async def emit_event(
        self,
        kind: str,
        namespace: str,
        name: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
    ) -> None:
        self.events.append(
            (kind, f"{namespace}/{name}" if namespace else name, reason, message, warning)
        )

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        del reason
        self.requeued.extend(pods)

    def reasons(self) -> list[str]:
        return [e[2] for e in self.events]


class Discovery:
    """The discovery answer for resource.k8s.io/v1 (or a 404)."""

    def __init__(self, resources: Sequence[str] | None) -> None:
        self.resources = resources

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        assert (method, path) == ("GET", DRA_API)
        if self.resources is None:
            raise ApiError(404, "NotFound")
        return {"resources": [{"name": r} for r in self.resources]}

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        raise AssertionError("not listed in these tests")

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> Any:
        raise AssertionError("not watched in these tests")


class Fixture:
    def __init__(self, resources: Sequence[str] | None = tuple(RESOURCES.values())) -> None:
        self.state = ClusterState()
        self.sink = Sink()
        self.feed = DraFeed(
            Discovery(resources), post=self._post, spawn=self._spawn, sink=self.sink
        )

    def _post(self, update: Any) -> None:
        update(self.state)  # the loop, at once

    @staticmethod
    def _spawn(coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run(coro)

    def deliver(self, kind: str, *changes: Any, synced: bool = False) -> None:
        self.feed.informers[kind].handler(list(changes), synced)

    def classes(self) -> None:
        self.deliver(
            "DeviceClass",
            *(
                Upsert(o["metadata"]["name"], "", parse_device_class(o))
                for o in nvidia_class_objs()
            ),
        )

    def slice(self, obj: dict[str, Any]) -> None:
        self.deliver(
            "ResourceSlice", Upsert(obj["metadata"]["name"], "", parse_resource_slice(obj))
        )

    def claim(self, obj: dict[str, Any]) -> None:
        key = f"default/{obj['metadata']['name']}"
        self.deliver("ResourceClaim", Upsert(key, "", parse_resource_claim(obj)))

    def template(self, obj: dict[str, Any]) -> None:
        key = f"default/{obj['metadata']['name']}"
        self.deliver("ResourceClaimTemplate", Upsert(key, "", parse_resource_claim_template(obj)))


# ---- discovery and sync --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "served"),
    [
        (None, False),
        (("resourceslices", "deviceclasses"), False),
        (tuple(RESOURCES.values()), True),
    ],
    ids=["group not served", "some kinds missing", "every kind served"],
)
def test_dra_is_followed_only_when_the_api_serves_every_kind(
    resources: Sequence[str] | None, served: bool
) -> None:
    assert Fixture(resources).feed.discover() is served


def test_the_feed_is_synced_once_dra_is_known_absent_or_every_kind_is_listed() -> None:
    absent = Fixture(None)
    assert not absent.feed.synced  # discovery has not answered
    absent.feed.mark_served(False, absent.state)
    assert absent.feed.synced
    present = Fixture()
    present.feed.mark_served(True, present.state)
    for kind in ("ResourceSlice", "DeviceClass", "ResourceClaim"):
        present.deliver(kind, synced=True)
        assert not present.feed.synced
    present.deliver("ResourceClaimTemplate", synced=True)
    assert present.feed.synced


# ---- bad input -------------------------------------------------------------------------------


def test_an_object_the_decoder_refuses_is_absent_and_reported_once() -> None:
    f = Fixture()
    f.classes()
    f.claim(claim_obj("team", device_request("gpu", "gpu.nvidia.com", 2)))
    assert "default/team" in f.feed.model.dra.claims
    bad = Invalid("default/team", "u", "spec.devices.requests[0].exactly.count: must be positive")
    f.deliver("ResourceClaim", bad)
    f.deliver("ResourceClaim", bad)
    assert "default/team" not in f.feed.model.dra.claims
    assert f.sink.events == [
        ("ResourceClaim", "default/team", INVALID_OBJECT, bad.reason, True),
    ]
    f.claim(claim_obj("team", device_request("gpu", "gpu.nvidia.com", 2)))
    f.deliver("ResourceClaim", bad)  # invalid again after being valid: said again
    assert f.sink.reasons() == [INVALID_OBJECT, INVALID_OBJECT]


@pytest.mark.parametrize(
    ("kind", "key", "names"),
    [
        ("ResourceClaim", "default/team", {"claims": {"gpus": "team"}}),
        ("ResourceClaimTemplate", "default/four", {"templates": {"gpus": "four"}}),
        ("DeviceClass", "gpu.nvidia.com", {"templates": {"gpus": "four"}}),
    ],
    ids=["claim", "template", "class"],
)
def test_a_pod_naming_an_object_phalanx_cannot_read_is_told_why_until_it_is_fixed(
    kind: str, key: str, names: dict[str, dict[str, str]]
) -> None:
    f = Fixture()
    f.classes()
    f.template(claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4)))
    f.claim(claim_obj("team", device_request("gpu", "gpu.nvidia.com", 2)))
    pod = parse_pod(dra_pod_obj("w", **names))
    f.feed.upsert_pod(f.state, pod)
    reason = "spec.devices.requests[0].exactly.count: must be positive, not 0"
    f.deliver(kind, Invalid(key, "u", reason))
    told = [e for e in f.sink.events if e[0] == "Pod"]
    assert [e[2] for e in told] == [INVALID_DEVICE_CLAIM]
    assert f"{kind} {key} cannot be read ({reason})" in told[0][3]
    f.deliver(kind, Delete(key, "u"))  # gone for good: no longer what the pod is told
    held = f.state.pod(pod.uid)
    assert held is not None
    assert held.devices is not None
    assert "cannot be read" not in held.devices.demand.blocker


def test_a_pod_whose_claim_names_an_unknown_class_gets_one_warning_event() -> None:
    f = Fixture()
    f.classes()
    f.template(claim_template_obj("odd", device_request("gpu", "nope.example.com", 1)))
    pod = parse_pod(dra_pod_obj("w", templates={"gpus": "odd"}))
    f.feed.upsert_pod(f.state, pod)
    f.feed.upsert_pod(f.state, pod)  # the next pod update says nothing new
    [event] = f.sink.events
    assert event[:3] == ("Pod", "default/w", INVALID_DEVICE_CLAIM)
    assert "DeviceClass nope.example.com does not exist" in event[3]
    assert event[4] is True


def test_a_request_planned_by_count_only_is_said_once_as_a_normal_event() -> None:
    f = Fixture()
    f.classes()
    f.slice(gpu_slice_obj("n1"))
    selector = "device.attributes['gpu.nvidia.com'].productName.matches('H100')"
    f.template(claim_template_obj("h100", device_request("gpu", "gpu.nvidia.com", 2, selector)))
    pod = parse_pod(dra_pod_obj("w", templates={"gpus": "h100"}))
    f.feed.upsert_pod(f.state, pod)
    f.feed.upsert_pod(f.state, pod)
    [event] = f.sink.events
    assert event[:3] == ("Pod", "default/w", APPROXIMATE_DEVICE_CLAIM)
    assert "planned by device count only" in event[3]
    assert event[4] is False


def test_a_pool_listing_a_device_twice_is_said_once_on_its_slice_and_other_nodes_plan_on() -> None:
    f = Fixture()
    f.classes()
    for name in ("n1", "n2"):
        f.feed.upsert_node(f.state, gpu_node(name, 0))
    f.slice(gpu_slice_obj("n2"))
    twice = [gpu_device("n1", 0)]
    for half in ("a", "b"):  # one pool of two slices, both listing gpu-0
        f.slice(slice_obj("n1", twice, pool="n1", count=2, name=f"n1-{half}"))
    f.slice(slice_obj("n1", twice, pool="n1", count=2, name="n1-b"))  # an update: not repeated
    [event] = f.sink.events
    assert event[:3] == ("ResourceSlice", "n1-a", DRA_NOT_PLANNED)
    assert "device gpu-0 is listed more than once" in event[3]
    n1, n2 = f.state.node("n1"), f.state.node("n2")
    assert n1 is not None
    assert n2 is not None
    assert n1.node.allocatable.get(DRA_GPU) == 0
    assert n2.node.allocatable[DRA_GPU] == 8


# ---- unblocked pods ----------------------------------------------------------------------------


def test_a_pod_unblocked_by_its_claim_arriving_is_requeued() -> None:
    f = Fixture()
    f.classes()
    f.slice(gpu_slice_obj("n1"))
    f.template(claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4)))
    pod = parse_pod(dra_pod_obj("w", templates={"gpus": "four"}, generated={"gpus": "w-gpus"}))
    f.feed.upsert_pod(f.state, pod)
    assert f.sink.requeued == []
    f.claim(claim_obj("w-gpus", device_request("gpu", "gpu.nvidia.com", 4), owner_pod=pod.uid))
    assert f.sink.requeued == [pod.ref]
    assert f.sink.events == []  # waiting for a generated claim is not bad input
    f.claim(claim_obj("w-gpus", device_request("gpu", "gpu.nvidia.com", 4), owner_pod=pod.uid))
    assert f.sink.requeued == [pod.ref]  # once


def test_a_deleted_claim_makes_its_pod_unplaceable_again() -> None:
    f = Fixture()
    f.classes()
    f.claim(claim_obj("team", device_request("gpu", "gpu.nvidia.com", 2)))
    pod = parse_pod(dra_pod_obj("w", claims={"shared": "team"}))
    f.feed.upsert_pod(f.state, pod)
    f.deliver("ResourceClaim", Delete("default/team", "u"))
    held = f.state.pod(pod.uid)
    assert held is not None
    assert held.devices is not None
    assert held.devices.demand.blocker == "ResourceClaim default/team does not exist (yet)"
