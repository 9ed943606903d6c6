"""GPUs through Dynamic Resource Allocation, on the real kube-apiserver and kube-scheduler.

kwok nodes publish NVIDIA-shaped ResourceSlices (8 H100s per node; some nodes A100s in MIG
mode; ComputeDomain channels on a clique), the four NVIDIA DeviceClasses are installed, and
gangs' members ask for devices through ResourceClaimTemplates. The real resourceclaim
controller (kube-controller-manager with only that controller) turns templates into
claims; kube-scheduler's DynamicResources plugin allocates the devices on the node Phalanx
reserved (kwok never runs the kubelet side). Checked here:

* gangs become whole, every claim allocated on its pod's node, and no member refused by
  the DynamicResources plugin after Phalanx reserved its node (`phalanx_replans_total
  {cause="dra"}` stays put; kube-scheduler never says it cannot allocate the claims);
* an unfit DRA gang holds nothing (no claim allocated, nothing reserved);
* two DRA gangs contending for the same nodes: one whole, the other waits, then whole;
* a gang mixing device-plugin and DRA members lands each where its request is served;
* a ComputeDomain gang (channel + 4 GPUs per member) takes one node per member, in a clique;
* bad input: a claim for an unknown class (an Event, nothing else affected); a selector
  that does not parse and a slice listing a device twice are refused by the API server; a
  device listed in two slices of one pool is accepted: Phalanx says once that the pool is
  not used and plans the other nodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import launcher
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import (
    CLIQUE_LABEL,
    POD_GROUP_LABEL,
    ApiError,
    Gang,
    Scenario,
    pod_body,
)

from builders import (
    DRA_API,
    claim_template_obj,
    compute_domain_slice_obj,
    device_request,
    gpu_device,
    gpu_slice_obj,
    mig_slice_obj,
    nvidia_class_objs,
    slice_obj,
)

pytestmark = pytest.mark.e2e

API = f"/apis/{DRA_API}"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
Obj = dict[str, Any]


# ---- the cluster's DRA side ----------------------------------------------------------------


@pytest.fixture(scope="module")
def claim_controller(
    control_plane: launcher.ControlPlane, controller_manager_tool: Path
) -> Iterator[None]:
    """kube-controller-manager with only the resourceclaim controller, and NVIDIA's classes."""
    del controller_manager_tool  # needed built; the launcher finds it
    control_plane.start_controller_manager()
    for obj in nvidia_class_objs():
        status, answer = control_plane.request("POST", f"{API}/deviceclasses", obj)
        assert status in (201, 409), answer
    try:
        yield
    finally:
        control_plane.stop_controller_manager()


class Dra:
    """One test's DRA objects on top of its `Scenario`; cluster-scoped ones removed after."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.slices: list[str] = []

    def close(self) -> None:
        for name in self.slices:
            with contextlib.suppress(ApiError):
                self.sc.api.delete(f"{API}/resourceslices/{name}")

    # ---- nodes -------------------------------------------------------------------------

    def node(self, suffix: str, *slices: Obj, clique: str | None = None, gpus: int = 8) -> str:
        """A kwok node without device-plugin GPUs, whose devices `slices` publish."""
        labels = {CLIQUE_LABEL: clique} if clique else {}
        name = self.sc.node(suffix, 0, labels=labels)
        self.sc.nodes[name] = gpus  # what phalanx_gpus must count once the slices are in
        for obj in slices or (gpu_slice_obj(name),):
            self.publish(obj)
        return name

    def gpu_node(self, suffix: str, **kw: Any) -> str:
        name = f"{self.sc.namespace}-{suffix}"
        return self.node(suffix, gpu_slice_obj(name), **kw)

    def publish(self, obj: Obj) -> None:
        self.sc.api.create(f"{API}/resourceslices", obj)
        self.slices.append(obj["metadata"]["name"])

    # ---- claims ------------------------------------------------------------------------

    def template(self, name: str, *requests: Obj) -> Obj:
        obj = claim_template_obj(name, *requests, namespace=self.sc.namespace)
        return self.sc.api.create(
            f"{API}/namespaces/{self.sc.namespace}/resourceclaimtemplates", obj
        )

    def pod(
        self,
        name: str,
        *,
        templates: Mapping[str, str] | None = None,
        gpus: int = 0,
        group: str | None = None,
        gated: bool = True,
    ) -> Obj:
        """A pod asking for devices through templates (entry -> template), or for
        `gpus` device-plugin GPUs, in the test's pool; created gated unless told."""
        body = pod_body(
            name,
            gpus=gpus,
            node_selector=self.sc.selector,
            labels={POD_GROUP_LABEL: group} if group else None,
            gated=gated,
        )
        entries = [
            {"name": e, "resourceClaimTemplateName": t} for e, t in (templates or {}).items()
        ]
        if entries:
            body["spec"]["resourceClaims"] = entries
            body["spec"]["containers"][0]["resources"]["claims"] = [
                {"name": e} for e in templates or {}
            ]
        return self.sc.api.create(f"/api/v1/namespaces/{self.sc.namespace}/pods", body)

    def gang(
        self,
        name: str,
        size: int,
        templates: Mapping[str, str],
        *,
        placement: str | None = None,
        ungate: bool = True,
    ) -> Gang:
        """A PodGroup and `size` members claiming from `templates`, released together."""
        self.sc.pod_group(name, size, placement=placement)
        members = tuple(f"{name}-{i}" for i in range(size))
        for member in members:
            self.pod(member, templates=templates, group=name)
        if ungate:
            for member in members:
                self.sc.ungate(member)
        gang = Gang(name, members, size, 0, "podgroup", placement=placement)
        self.sc.gangs[name] = gang
        return gang

    def claims(self) -> dict[str, Obj]:
        items = self.sc.api.items(f"{API}/namespaces/{self.sc.namespace}/resourceclaims")
        return {c["metadata"]["name"]: c for c in items}

    def claim_nodes(self, pods: Sequence[str]) -> dict[str, list[str]]:
        """pod -> the nodes its claims are allocated on (one entry per claim)."""
        claims = self.claims()
        found: dict[str, list[str]] = {}
        for name, pod in self.sc.pods().items():
            if name not in pods:
                continue
            for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
                claim = claims.get(status.get("resourceClaimName") or "")
                found.setdefault(name, []).append(allocation_node(claim))
        return found

    def assert_allocated_where_bound(self, pods: Sequence[str]) -> None:
        where = self.sc.placement(pods)
        claimed = self.claim_nodes(pods)
        for pod in pods:
            assert claimed.get(pod), f"{pod} has no claim\n{self.sc.diagnostics()}"
            assert set(claimed[pod]) == {where[pod]}, (
                f"{pod} is bound to {where[pod]} but its claims are allocated on "
                f"{claimed[pod]}\n{self.sc.diagnostics()}"
            )

    def wait_cluster_event(self, name: str, text: str) -> Obj:
        """An Event about a cluster-scoped object (they are kept in namespace default)."""

        def found() -> Obj | None:
            return next(
                (
                    e
                    for e in self.sc.api.items("/api/v1/namespaces/default/events")
                    if (e.get("involvedObject") or {}).get("name") == name
                    and text in (e.get("message") or "")
                ),
                None,
            )

        return self.sc.wait(f"an event on {name} saying {text!r}", found)

    def refused_by_dynamic_resources(self, pods: Sequence[str]) -> list[str]:
        return refused_by_dynamic_resources(self.sc, pods)


#: Phalanx's reasons while its informers have not yet seen what a member needs (it refuses
#: every node offered, planning nothing): the claims are unknown, the pod's status names a
#: claim made from its template that has not reached the informer, or the gang's PodGroup,
#: created just before its pods, has not either. kube-scheduler's own filters ran first, so
#: such a cycle's message also names every node DynamicResources refused, whatever Phalanx
#: would have planned.
NOT_SEEN_YET = (
    "are not known to Phalanx yet",
    "waiting for ResourceClaim",
    "to exist (pods name it with a label)",
)


def refused_by_dynamic_resources(sc: Scenario, pods: Sequence[str]) -> list[str]:
    """kube-scheduler's messages saying it could not allocate a member's claims on a node,
    in cycles where Phalanx had seen the claims and the gang (a node Phalanx planned that
    DynamicResources then refused)."""
    return [
        f"{pod}: {message}"
        for pod in pods
        for e in sc.events(pod, reason="FailedScheduling")
        if "cannot allocate all claims" in (message := e.get("message") or "")
        and not any(unseen in message for unseen in NOT_SEEN_YET)
    ]


def allocation_node(claim: Obj | None) -> str:
    """The node a claim's allocation is reachable from ("" while unallocated)."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


@pytest.fixture
def dra(cluster: Scenario, claim_controller: None) -> Iterator[Dra]:  # noqa: F811
    world = Dra(cluster)
    try:
        yield world
    finally:
        world.close()


def four_gpus(dra: Dra) -> dict[str, str]:
    dra.template("four", device_request("gpu", GPU_CLASS, 4))
    return {"gpus": "four"}


def dra_replans(sc: Scenario) -> float:
    return sc.phalanx.metric("phalanx_replans_total", cause="dra")


# ---- gangs over DRA devices -----------------------------------------------------------------


def test_a_gang_claiming_gpus_from_a_template_becomes_whole_where_its_claims_are(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    for i in range(4):
        dra.gpu_node(f"h{i}")
    cluster.nodes_ready()
    refusals_before = dra_replans(cluster)
    gang = dra.gang("train", 8, four_gpus(dra))
    where = cluster.wait_gang(gang, timeout=60)
    assert sorted(where.values()) == sorted([f"{cluster.namespace}-h{i}" for i in range(4)] * 2)
    dra.assert_allocated_where_bound(gang.members)
    assert dra.refused_by_dynamic_resources(gang.members) == []
    assert dra_replans(cluster) == refusals_before
    cluster.wait_quiet(settle=1.0)
    assert cluster.phalanx.metric("phalanx_dra_claims_off_node") == 0
    assert cluster.phalanx.metric("phalanx_overcommitted_nodes") == 0
    # Used DRA GPUs are counted as used device-plugin GPUs are.
    for i in range(4):
        node = f"{cluster.namespace}-h{i}"
        assert cluster.phalanx.metric("phalanx_gpus", node=node, state="used") == 8


def test_a_gang_asking_for_mig_devices_lands_on_the_mig_nodes(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    ns = cluster.namespace
    dra.gpu_node("h0")
    layout = {0: ["3g.20gb", "3g.20gb"], 1: ["3g.20gb", "3g.20gb"]}
    for suffix in ("a0", "a1"):
        dra.node(suffix, mig_slice_obj(f"{ns}-{suffix}", layout), gpus=4)
    cluster.nodes_ready()
    profile = "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"
    dra.template("slice", device_request("mig", MIG_CLASS, 2, profile))
    gang = dra.gang("mig", 4, {"mig": "slice"})
    where = cluster.wait_gang(gang, timeout=60)
    assert sorted(where.values()) == [f"{ns}-a0", f"{ns}-a0", f"{ns}-a1", f"{ns}-a1"]
    dra.assert_allocated_where_bound(gang.members)


def test_an_unfit_dra_gang_holds_nothing(cluster: Scenario, dra: Dra) -> None:  # noqa: F811
    for i in range(2):
        dra.gpu_node(f"h{i}")
    cluster.nodes_ready()
    dra.template("eight", device_request("gpu", GPU_CLASS, 8))
    gang = dra.gang("huge", 3, {"gpus": "eight"})  # 24 GPUs on 16
    cluster.wait_event("huge", "cannot place 3 member(s)", timeout=30)
    cluster.assert_unbound_for(gang.members, 5.0)
    assert [n for n, c in dra.claims().items() if allocation_node(c)] == []
    assert cluster.phalanx.metric("phalanx_reserved_gpus") == 0


def test_two_dra_gangs_contending_for_the_same_nodes_never_deadlock(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    for i in range(2):
        dra.gpu_node(f"h{i}")
    cluster.nodes_ready()
    templates = four_gpus(dra)
    first = dra.gang("red", 4, templates, ungate=False)  # 16 GPUs each, 16 in all
    second = dra.gang("blue", 4, templates, ungate=False)
    for red, blue in zip(first.members, second.members, strict=True):
        cluster.ungate(red)
        cluster.ungate(blue)
    placed = cluster.wait_quiet(settle=3.0, timeout=90)
    bound = {g.name: sum(1 for m in g.members if placed.get(m)) for g in (first, second)}
    assert sorted(bound.values()) == [0, 4], f"{bound}\n{cluster.diagnostics()}"
    winner, loser = (first, second) if bound["red"] else (second, first)
    dra.assert_allocated_where_bound(winner.members)
    cluster.delete_pods(winner.members)
    cluster.wait_gang(loser, timeout=90)
    dra.assert_allocated_where_bound(loser.members)


def test_a_gang_mixing_device_plugin_and_dra_members_lands_each_where_it_is_served(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    ns = cluster.namespace
    dra.gpu_node("dra")
    cluster.node("plugin", 8)
    cluster.nodes_ready()
    dra.template("eight", device_request("gpu", GPU_CLASS, 8))
    cluster.pod_group("mixed", 2)
    dra.pod("mixed-dra", templates={"gpus": "eight"}, group="mixed")
    dra.pod("mixed-plugin", gpus=8, group="mixed")
    for member in ("mixed-dra", "mixed-plugin"):
        cluster.ungate(member)
    where = cluster.wait_bound(["mixed-dra", "mixed-plugin"], timeout=60)
    assert where == {"mixed-dra": f"{ns}-dra", "mixed-plugin": f"{ns}-plugin"}
    dra.assert_allocated_where_bound(["mixed-dra"])
    for node in (f"{ns}-dra", f"{ns}-plugin"):
        assert cluster.phalanx.metric("phalanx_gpus", node=node, state="used") == 8


def test_a_compute_domain_gang_takes_one_clique_node_per_member(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    ns = cluster.namespace
    clique = f"{ns}-domain"
    for suffix in ("c0", "c1", "c2"):
        name = f"{ns}-{suffix}"
        dra.node(suffix, gpu_slice_obj(name), compute_domain_slice_obj(name, 1), clique=clique)
    outside = f"{ns}-x0"
    dra.node("x0", gpu_slice_obj(outside), compute_domain_slice_obj(outside, 1))
    cluster.nodes_ready()
    dra.template(
        "cd", device_request("channel", CHANNEL_CLASS, 1), device_request("gpu", GPU_CLASS, 4)
    )
    gang = dra.gang("imex", 3, {"cd": "cd"}, placement="interconnect-local")
    where = cluster.wait_gang(gang, timeout=60)
    assert sorted(where.values()) == [f"{ns}-c0", f"{ns}-c1", f"{ns}-c2"]
    dra.assert_allocated_where_bound(gang.members)


# ---- bad input -------------------------------------------------------------------------------


def test_a_claim_for_an_unknown_class_gets_an_event_and_affects_nothing_else(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    for i in range(2):
        dra.gpu_node(f"h{i}")
    cluster.nodes_ready()
    dra.template("odd", device_request("gpu", "no-such-class.example.com", 1))
    dra.pod("odd", templates={"gpus": "odd"}, gated=False)
    gang = dra.gang("fine", 4, four_gpus(dra))
    cluster.wait_gang(gang, timeout=60)
    event = cluster.wait_event("odd", "DeviceClass no-such-class.example.com does not exist")
    assert event["reason"] == "InvalidDeviceClaim"
    assert event["source"]["component"] == "phalanx"
    cluster.assert_unbound_for(["odd"], 2.0)


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (
            "resourceclaimtemplates",
            claim_template_obj("broken", device_request("gpu", GPU_CLASS, 1, "device.attributes[")),
        ),
        (
            "deviceclasses",
            {
                "apiVersion": DRA_API,
                "kind": "DeviceClass",
                "metadata": {"name": "broken.example.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == "}}]},
            },
        ),
    ],
    ids=["claim template", "device class"],
)
def test_a_selector_that_does_not_parse_is_refused_by_the_api_server(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
    kind: str,
    body: Obj,
) -> None:
    namespaced = kind != "deviceclasses"
    path = f"{API}/namespaces/{cluster.namespace}/{kind}" if namespaced else f"{API}/{kind}"
    if namespaced:
        body = {**body, "metadata": {**body["metadata"], "namespace": cluster.namespace}}
    with pytest.raises(ApiError, match="422"):
        cluster.api.create(path, body)


def test_a_slice_listing_a_device_twice_is_refused_by_the_api_server(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    node = cluster.node("h0", 0)
    twice = slice_obj(node, [gpu_device(node, 0), gpu_device(node, 0)])
    with pytest.raises(ApiError, match="422"):
        dra.publish(twice)


def test_a_device_in_two_slices_of_one_pool_idles_that_pool_and_nothing_else(
    cluster: Scenario,  # noqa: F811
    dra: Dra,
) -> None:
    ns = cluster.namespace
    dra.gpu_node("good")
    bad = f"{ns}-bad"
    cluster.node("bad", 0)
    for half in ("a", "b"):  # both slices of pool <bad> list gpu-0 (the API cannot tell)
        dra.publish(slice_obj(bad, [gpu_device(bad, 0)], pool=bad, count=2, name=f"{bad}-{half}"))
    cluster.nodes_ready([f"{ns}-good"])
    event = dra.wait_cluster_event(f"{bad}-a", "device gpu-0 is listed more than once")
    assert event["involvedObject"]["kind"] == "ResourceSlice"
    assert cluster.phalanx.metric("phalanx_gpus", node=bad) == 0
    dra.template("one", device_request("gpu", GPU_CLASS, 1))
    gang = dra.gang("elsewhere", 2, {"gpus": "one"})
    where = cluster.wait_gang(gang, timeout=60)
    assert set(where.values()) == {f"{ns}-good"}
    # kube-scheduler does not allocate from an invalid pool either.
    dra.assert_allocated_where_bound(gang.members)
