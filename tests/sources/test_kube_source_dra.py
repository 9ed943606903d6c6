"""The live source with DRA, against a fake API server: discovery, the four informers feeding
the model beside the node and pod informers, watch events, and Events on DRA objects."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
from source_fakes import FakeApi, RecordingWriter, group_list, resource_list, until

from builders import (
    GPU_DRIVER,
    claim_obj,
    claim_template_obj,
    device_request,
    dra_pod_obj,
    gpu_slice_obj,
    node_obj,
    nvidia_class_objs,
    upstream_podgroup_obj,
)
from dra_builders import taint_rule_obj
from phalanx.core.cache import ClusterState
from phalanx.core.model import DRA_GPU, Pod
from phalanx.sources.informer import Backoff, InformerSettings
from phalanx.sources.kube import KubeSource, KubeSourceSettings
from phalanx.sources.kube_dra import DRA_API, DRA_GROUP_VERSION, RESOURCES, RULE_VERSIONS

FAST = KubeSourceSettings(
    crd_recheck_seconds=0.05,
    informer=InformerSettings(backoff=Backoff(initial_seconds=0.01, cap_seconds=0.05)),
)
SERVED = {
    "/apis": {"kind": "APIGroupList", "groups": []},
    DRA_API: resource_list(*RESOURCES.values()),
}
NOT_SERVED = {"/apis": {"kind": "APIGroupList", "groups": []}}
SLICES, CLASSES, CLAIMS, TEMPLATES = (f"{DRA_API}/{r}" for r in RESOURCES.values())


class Live:
    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.state = ClusterState()
        self.writer = RecordingWriter()
        self.source = KubeSource(
            api,
            settings=FAST,
            writer=self.writer,
        )

    def sink(self, update: Callable[[ClusterState], None]) -> None:
        update(self.state)

    def pod(self, name: str) -> Pod:
        found = self.state.pod_by_key("default", name)
        assert found is not None
        return found

    def free_dra_gpus(self, node: str) -> int:
        info = self.state.node(node)
        assert info is not None
        return info.free.get(DRA_GPU)


@asynccontextmanager
async def running(
    discovery: dict[str, Any],
    forbidden: frozenset[str] = frozenset(),
    objects: Mapping[str, list[dict[str, Any]]] | None = None,
) -> AsyncIterator[Live]:
    api = FakeApi(discovery)
    api.forbidden.update(forbidden)
    api.add("/api/v1/nodes", node_obj("d1", 0))
    for path, items in (objects or {}).items():
        api.add(path, *items)
    live = Live(api)
    await live.source.start(live.sink)
    try:
        await until("synced", lambda: live.source.synced)
        yield live
    finally:
        await live.source.stop()


OWNER = "uid-default-w"  # the pod's uid: the claim made from its template is its own


def dra_objects() -> dict[str, list[dict[str, Any]]]:
    template = claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4))
    pod = dra_pod_obj("w", templates={"gpus": "four"}, generated={"gpus": "w-gpus"})
    pod["spec"]["schedulerName"] = "phalanx"
    return {
        SLICES: [gpu_slice_obj("d1")],
        CLASSES: nvidia_class_objs(),
        TEMPLATES: [template],
        CLAIMS: [claim_obj("w-gpus", device_request("gpu", "gpu.nvidia.com", 4), owner_pod=OWNER)],
        "/api/v1/pods": [pod],
    }


def test_with_dra_served_the_model_holds_each_node_s_devices_and_each_pod_s_claims() -> None:
    async def scenario() -> None:
        async with running(SERVED, objects=dra_objects()) as live:
            assert live.source.dra.served is True
            await until("the node bridged", lambda: live.free_dra_gpus("d1") == 8)
            await until("the pod derived", lambda: live.pod("w").requests.get(DRA_GPU) == 4)

    asyncio.run(scenario())


def test_an_allocation_seen_on_the_claim_watch_moves_its_devices_off_the_node() -> None:
    async def scenario() -> None:
        async with running(SERVED, objects=dra_objects()) as live:
            await until("the pod derived", lambda: live.pod("w").requests.get(DRA_GPU) == 4)
            held = [(GPU_DRIVER, "d1", f"gpu-{i}") for i in range(4)]
            allocated = claim_obj(
                "w-gpus",
                device_request("gpu", "gpu.nvidia.com", 4),
                allocated=held,
                node="d1",
                owner_pod=OWNER,
            )
            live.api.modify(CLAIMS, allocated)
            await until("the node counts the claim", lambda: live.free_dra_gpus("d1") == 4)
            assert live.pod("w").requests.get(DRA_GPU) == 0  # in the same step

    asyncio.run(scenario())


def test_without_the_dra_api_the_source_syncs_and_pods_with_claims_cannot_be_placed() -> None:
    async def scenario() -> None:
        objects = dra_objects()
        async with running(NOT_SERVED, objects={"/api/v1/pods": objects["/api/v1/pods"]}) as live:
            assert live.source.dra.served is False
            listed = {path for _, path in live.api.requests}
            assert SLICES not in listed
            devices = live.pod("w").devices
            assert devices is not None
            assert devices.demand.blocker  # its claim is not known, nor can be

    asyncio.run(scenario())


def test_a_slice_phalanx_cannot_read_is_an_event_on_it_naming_its_api_version() -> None:
    async def scenario() -> None:
        bad = gpu_slice_obj("d1")
        del bad["spec"]["driver"]
        async with running(SERVED, objects={SLICES: [bad], CLASSES: nvidia_class_objs()}) as live:
            await until("the event", lambda: live.writer.events("InvalidObject"))
            [event] = live.writer.events("InvalidObject")
            assert event["involvedObject"]["kind"] == "ResourceSlice"
            assert event["involvedObject"]["apiVersion"] == "resource.k8s.io/v1"
            assert "spec.driver" in event["message"]
            assert live.free_dra_gpus("d1") == 0

    asyncio.run(scenario())


def test_a_claim_with_a_toleration_phalanx_cannot_read_is_an_event_and_its_pod_is_told() -> None:
    async def scenario() -> None:
        objects = dra_objects()
        request = device_request("gpu", "gpu.nvidia.com", 4)
        request["exactly"]["tolerations"] = [{"key": "gpu.nvidia.com/xid", "operator": "In"}]
        objects[CLAIMS] = [claim_obj("w-gpus", request)]
        async with running(SERVED, objects=objects) as live:
            await until("the event", lambda: live.writer.events("InvalidObject"))
            [event] = live.writer.events("InvalidObject")
            assert event["involvedObject"]["kind"] == "ResourceClaim"
            assert "spec.devices.requests[0].exactly.tolerations[0].operator" in event["message"]
            devices = live.pod("w").devices
            assert devices is not None
            assert "ResourceClaim default/w-gpus cannot be read" in devices.demand.blocker

    asyncio.run(scenario())


def test_a_dra_kind_rbac_refuses_is_said_loudly_and_the_source_is_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        async with running(SERVED, forbidden=frozenset({CLAIMS})) as live:
            assert live.source.synced

    asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records if "may not list" in r.getMessage()]
    assert said == [
        "may not list ResourceClaim: pods with ResourceClaims are refused until Phalanx may; "
        "grant list and watch on it (the chart's RBAC does)"
    ]


# ---- DeviceTaintRules ------------------------------------------------------------------------


def rules_served(version: str) -> tuple[dict[str, Any], str]:
    """Discovery serving DRA, with DeviceTaintRules in `version`; the rules' collection."""
    discovery = dict(SERVED)
    if version == DRA_GROUP_VERSION:
        discovery[DRA_API] = resource_list(*RESOURCES.values(), "devicetaintrules")
    else:
        discovery[f"/apis/{version}"] = resource_list("devicetaintrules")
    return discovery, f"/apis/{version}/devicetaintrules"


@pytest.mark.parametrize(
    "version", ["resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1alpha3"]
)
def test_device_taint_rules_are_followed_where_served_and_their_taints_counted(
    version: str,
) -> None:
    async def scenario() -> None:
        discovery, rules = rules_served(version)
        one = taint_rule_obj("xid-0", pool="d1", device="gpu-0", api_version=version)
        async with running(discovery, objects={**dra_objects(), rules: [one]}) as live:
            assert live.source.dra.rules_version == version
            await until("the listed rule counted", lambda: live.free_dra_gpus("d1") == 7)
            await until("watching the rules", lambda: rules in live.api.watches)
            live.api.add(rules, taint_rule_obj("xid-1", pool="d1", device="gpu-1"))
            await until("the watched rule counted", lambda: live.free_dra_gpus("d1") == 6)

    asyncio.run(scenario())


def test_without_device_taint_rules_served_nothing_else_changes() -> None:
    async def scenario() -> None:
        async with running(SERVED, objects=dra_objects()) as live:
            await until("the node bridged", lambda: live.free_dra_gpus("d1") == 8)
            assert live.source.dra.rules_version == ""
            listed = {path for _, path in live.api.requests}
            assert {f"/apis/{v}" for v in RULE_VERSIONS} <= listed  # each asked for, not found
            assert not any(path.endswith("/devicetaintrules") for path in live.api.collections)

    asyncio.run(scenario())


def test_a_device_taint_rule_phalanx_cannot_read_is_an_event_naming_its_api_version() -> None:
    async def scenario() -> None:
        version = "resource.k8s.io/v1beta2"
        discovery, rules = rules_served(version)
        bad = taint_rule_obj("xid", pool="d1", api_version=version)
        del bad["spec"]["taint"]["effect"]
        async with running(discovery, objects={**dra_objects(), rules: [bad]}) as live:
            await until("the event", lambda: live.writer.events("InvalidObject"))
            [event] = live.writer.events("InvalidObject")
            assert event["involvedObject"]["kind"] == "DeviceTaintRule"
            assert event["involvedObject"]["apiVersion"] == version
            assert event["involvedObject"]["uid"] == "uid-xid"
            assert "spec.taint.effect" in event["message"]
            assert live.free_dra_gpus("d1") == 8

    asyncio.run(scenario())


def test_device_taint_rules_rbac_refuses_are_said_loudly_and_the_source_is_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        discovery, rules = rules_served(DRA_GROUP_VERSION)
        async with running(discovery, forbidden=frozenset({rules}), objects=dra_objects()) as live:
            assert live.source.synced
            await until("the node bridged", lambda: live.free_dra_gpus("d1") == 8)

    asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records if "may not list" in r.getMessage()]
    assert said == [
        "may not list DeviceTaintRule: devices tainted by DeviceTaintRules are planned as "
        "untainted until Phalanx may; grant list and watch on it (the chart's RBAC does)"
    ]


UPSTREAM_PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/podgroups"
SERVED_WITH_PODGROUPS = {
    **SERVED,
    "/apis": group_list("scheduling.k8s.io/v1beta1"),
    "/apis/scheduling.k8s.io/v1beta1": resource_list("podgroups", "podgroups/status"),
}


def claim_keys(live: Live, pod: str) -> list[str]:
    devices = live.pod(pod).devices
    return [c.key for c in devices.demand.claims] if devices is not None else []


def test_a_podgroup_made_invalid_and_fixed_serves_its_members_template_entries_again() -> None:
    # While the PodGroup cannot be read its claims serve no member (as once it is deleted);
    # fixed, they serve its members again, even one updated in between.
    group = upstream_podgroup_obj("team", 1)
    group["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four"}]
    member = dra_pod_obj("m", templates={"gpus": "four"}, scheduling_group="team")
    objects = {**dra_objects(), "/api/v1/pods": [member], UPSTREAM_PODGROUPS: [group]}

    async def scenario() -> None:
        async with running(SERVED_WITH_PODGROUPS, objects=objects) as live:
            await until("the gang's entry", lambda: claim_keys(live, "m") == ["default/team#gpus"])
            broken = copy.deepcopy(group)
            broken["spec"]["schedulingPolicy"] = {"gang": {"minCount": 0}}
            live.api.modify(UPSTREAM_PODGROUPS, broken)
            await until("its own entry", lambda: claim_keys(live, "m") == ["default/m#gpus"])
            edited = copy.deepcopy(member)
            edited["metadata"]["labels"]["edited"] = "yes"
            live.api.modify("/api/v1/pods", edited)
            await until("the edit", lambda: live.pod("m").labels.get("edited") == "yes")
            live.api.modify(UPSTREAM_PODGROUPS, group)
            await until("the gang's again", lambda: claim_keys(live, "m") == ["default/team#gpus"])

    asyncio.run(scenario())


def test_a_podgroups_claims_seen_on_its_watch_serve_its_members_template_entries() -> None:
    group = upstream_podgroup_obj("team", 1)
    group["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four"}]
    member = dra_pod_obj("m", templates={"gpus": "four"}, scheduling_group="team")
    objects = {**dra_objects(), "/api/v1/pods": [member], UPSTREAM_PODGROUPS: [group]}

    def claim_keys(live: Live) -> list[str]:
        devices = live.pod("m").devices
        return [c.key for c in devices.demand.claims] if devices is not None else []

    async def scenario() -> None:
        async with running(SERVED_WITH_PODGROUPS, objects=objects) as live:
            # The gang's one claim, not made yet: counted from the template as the gang's.
            await until("the gang's entry", lambda: claim_keys(live) == ["default/team#gpus"])
            made = claim_obj(
                "team-gpus-x", device_request("gpu", "gpu.nvidia.com", 4), owner_pod_group="team"
            )
            live.api.add(CLAIMS, made)
            named = copy.deepcopy(group)
            named["status"] = {
                "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "team-gpus-x"}]
            }
            live.api.modify(UPSTREAM_PODGROUPS, named)
            await until("the PodGroup's claim", lambda: claim_keys(live) == ["default/team-gpus-x"])

    asyncio.run(scenario())
