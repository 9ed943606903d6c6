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
from dra_builders import taint_rule_obj
from phalanx.core.cache import ClusterState
from phalanx.core.dra import (
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.inventory import parse_pod
from phalanx.core.model import DRA_GPU, PodRef
from phalanx.sources.informer import ApiError, Delete, Invalid, Upsert
from phalanx.sources.kube_dra import (
    APPROXIMATE_DEVICE_CLAIM,
    DEVICE_TAINT_RULE,
    DRA_API,
    DRA_KINDS,
    DRA_NOT_PLANNED,
    INVALID_DEVICE_CLAIM,
    INVALID_OBJECT,
    RESOURCES,
    RULE_VERSIONS,
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
    """The discovery answer for resource.k8s.io/v1 (or a 404), and DeviceTaintRules served
    in `rules` (a group version, or nowhere)."""

    def __init__(self, resources: Sequence[str] | None, rules: str | None = None) -> None:
        self.resources = resources
        self.rules = rules

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        assert method == "GET"
        served: dict[str, list[str]] = {f"/apis/{v}": [] for v in RULE_VERSIONS if v == self.rules}
        if self.resources is not None:
            served.setdefault(DRA_API, []).extend(self.resources)
        if self.rules is not None:
            served[f"/apis/{self.rules}"].append("devicetaintrules")
        if path not in served:
            raise ApiError(404, "NotFound")
        return {"resources": [{"name": r} for r in served[path]]}

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        raise AssertionError("not listed in these tests")

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> Any:
        raise AssertionError("not watched in these tests")


class Fixture:
    def __init__(
        self, resources: Sequence[str] | None = tuple(RESOURCES.values()), rules: str | None = None
    ) -> None:
        self.state = ClusterState()
        self.sink = Sink()
        self.feed = DraFeed(
            Discovery(resources, rules), post=self._post, spawn=self._spawn, sink=self.sink
        )

    def _post(self, update: Any) -> None:
        update(self.state)  # the loop, at once

    @staticmethod
    def _spawn(coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run(coro)

    def deliver(self, kind: str, *changes: Any, synced: bool = False) -> None:
        if kind == DEVICE_TAINT_RULE:
            self.feed.on_rules(list(changes), synced)
        else:
            self.feed.informers[kind].handler(list(changes), synced)

    def rule(self, obj: dict[str, Any]) -> None:
        self.deliver(
            DEVICE_TAINT_RULE, Upsert(obj["metadata"]["name"], "", parse_device_taint_rule(obj))
        )

    def free_gpus(self, node: str) -> int:
        info = self.state.node(node)
        assert info is not None
        return info.node.allocatable.get(DRA_GPU)

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
    synced_before = absent.feed.synced  # a local: mypy would narrow the property itself
    assert not synced_before  # discovery has not answered
    absent.feed.mark_served(False, absent.state)
    assert absent.feed.synced
    present = Fixture()
    present.feed.mark_served(True, present.state)
    for kind in ("ResourceSlice", "DeviceClass", "ResourceClaim"):
        present.deliver(kind, synced=True)
        assert not present.feed.synced
    present.deliver("ResourceClaimTemplate", synced=True)
    assert not present.feed.synced  # nor whether DeviceTaintRules are served
    present.feed.mark_rules_served("", present.state)
    assert present.feed.synced


def test_where_device_taint_rules_are_served_the_feed_is_synced_once_they_are_listed() -> None:
    f = Fixture(rules="resource.k8s.io/v1")
    f.feed.mark_served(True, f.state)
    for kind in DRA_KINDS:
        f.deliver(kind, synced=True)
    f.feed.mark_rules_served("resource.k8s.io/v1", f.state)
    assert not f.feed.synced
    f.deliver(DEVICE_TAINT_RULE, synced=True)
    assert f.feed.synced


@pytest.mark.parametrize(
    ("resources", "rules", "found"),
    [
        (tuple(RESOURCES.values()), None, None),
        (tuple(RESOURCES.values()), "resource.k8s.io/v1", "resource.k8s.io/v1"),
        (tuple(RESOURCES.values()), "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta2"),
        (tuple(RESOURCES.values()), "resource.k8s.io/v1alpha3", "resource.k8s.io/v1alpha3"),
        (None, None, None),
    ],
    ids=[
        "1.35: not served",
        "1.37: v1",
        "1.36 with v1beta2 on",
        "1.35 with DRADeviceTaints and v1alpha3 on",
        "no DRA at all",
    ],
)
def test_device_taint_rules_are_followed_in_the_version_that_serves_them(
    resources: Sequence[str] | None, rules: str | None, found: str | None
) -> None:
    f = Fixture(resources, rules)
    assert f.feed.discover_rules() == found
    assert f.feed.discover() is (resources is not None)  # the four kinds are unaffected


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
    kind: str, key: str, names: dict[str, Any]
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


# ---- DeviceTaintRules ----------------------------------------------------------------------


def test_a_device_taint_rule_arriving_and_deleted_taints_and_frees_the_gpus_it_picks() -> None:
    f = Fixture(rules="resource.k8s.io/v1")
    f.classes()
    f.feed.upsert_node(f.state, gpu_node("n1", 0))
    f.slice(gpu_slice_obj("n1", 2))
    assert f.free_gpus("n1") == 2
    f.rule(taint_rule_obj("xid", pool="n1", device="gpu-0"))
    assert f.free_gpus("n1") == 1
    f.deliver(DEVICE_TAINT_RULE, Delete("xid", "u"))
    assert f.free_gpus("n1") == 2


def test_a_device_taint_rule_phalanx_cannot_read_is_an_event_on_it_and_ignored() -> None:
    f = Fixture(rules="resource.k8s.io/v1")
    f.classes()
    f.feed.upsert_node(f.state, gpu_node("n1", 0))
    f.slice(gpu_slice_obj("n1", 2))
    f.rule(taint_rule_obj("xid", pool="n1", device="gpu-0"))
    reason = "spec.taint.effect: is required (None, NoSchedule or NoExecute)"
    f.deliver(DEVICE_TAINT_RULE, Invalid("xid", "u", reason))
    assert f.sink.events == [("DeviceTaintRule", "xid", INVALID_OBJECT, reason, True)]
    assert f.free_gpus("n1") == 2  # treated as absent: its earlier taint is lifted
    assert f.feed.api_version(DEVICE_TAINT_RULE) == "resource.k8s.io/v1"


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
