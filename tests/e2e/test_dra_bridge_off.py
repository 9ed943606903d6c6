"""A kube-scheduler that does not serve extended resources from DRA devices
(``DRAExtendedResource`` off), and Phalanx told so (``--no-dra-extended-resources``).

This is the chart's default on a 1.36 cluster: kube-apiserver keeps a DeviceClass's
``extendedResourceName``, while kube-scheduler v1.35.4 (the gate off) fits ``nvidia.com/gpu``
on nodes that have it allocatable only. The module runs a control plane of its own on 1.35
(the default release), the gate on for kube-apiserver and off for kube-scheduler: 1.37 locks
the gate on, so no 1.37 kube-scheduler can run without it. The session's control plane, which
other specs rely on, stays as it is. A class maps ``nvidia.com/gpu`` onto the GPUs kwok nodes
publish in ResourceSlices (no ``nvidia.com/gpu`` allocatable); other kwok nodes have it from
a device plugin. Checked here:

* a gang asking ``nvidia.com/gpu`` binds whole onto the device-plugin nodes, never a DRA-only
  one, and no claim is made for it;
* with too few device-plugin nodes it waits whole (nothing bound), and its reason says the
  DRA nodes lack the resource because the bridge is off.
"""

from __future__ import annotations

from collections.abc import Iterator

import launcher
import planes
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Scenario
from test_dra_extended import API, GPUS, SERVING_CLASS, dra_node, extended_claims
from test_dra_taints import slices  # noqa: F401  # a fixture: the slices a spec published

from builders import NVIDIA_CLASSES, device_class_obj
from phalanx.core.model import NVIDIA_GPU

pytestmark = pytest.mark.e2e

PHALANX_ARGS = ["--no-dra-extended-resources"]
# kube-apiserver keeps the class's extendedResourceName (alpha in 1.35); kube-scheduler does
# not serve it from devices (as its default before 1.36, said outright).
APISERVER_GATES = {"DRAExtendedResource": True}
SCHEDULER_GATES = {"DRAExtendedResource": False}


@pytest.fixture(scope="module")
def control_plane(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """This module's 1.35 control plane (see the module docstring), with a class mapping
    nvidia.com/gpu; replaces the session's."""
    with planes.started(
        pytestconfig,
        "control_plane",
        apiserver_feature_gates=APISERVER_GATES,
        scheduler_feature_gates=SCHEDULER_GATES,
    ) as cp:
        assert cp.release.minor == "1.35", cp.release  # the release this module is about
        obj = device_class_obj(SERVING_CLASS, NVIDIA_CLASSES["gpu.nvidia.com"])
        obj["spec"]["extendedResourceName"] = NVIDIA_GPU
        status, answer = cp.request("POST", f"{API}/deviceclasses", obj)
        assert status == 201, answer
        status, kept = cp.request("GET", f"{API}/deviceclasses/{SERVING_CLASS}")
        assert status == 200, kept
        # Dropped without kube-apiserver's gate: then nothing here would be about the bridge.
        assert kept["spec"].get("extendedResourceName") == NVIDIA_GPU, kept
        yield cp


def test_a_gang_asking_nvidia_gpu_binds_whole_onto_device_plugin_nodes_only(
    cluster: Scenario,  # noqa: F811
    slices: list[str],  # noqa: F811
) -> None:
    dra = {dra_node(cluster, slices, f"d{i}") for i in range(3)}
    plugin = {cluster.node(f"p{i}", GPUS) for i in range(2)}
    cluster.nodes_ready()
    gang = cluster.gang("plugin", 2, GPUS)

    where = cluster.wait_gang(gang, timeout=30)

    assert set(where.values()) == plugin, where
    assert not set(where.values()) & dra
    assert extended_claims(cluster) == {}  # kube-scheduler made no claim: no DRA involved


def test_with_too_few_device_plugin_nodes_a_gang_waits_whole_and_says_the_bridge_is_off(
    cluster: Scenario,  # noqa: F811
    slices: list[str],  # noqa: F811
) -> None:
    for i in range(2):
        dra_node(cluster, slices, f"d{i}")
    cluster.node("p0", GPUS)
    cluster.nodes_ready()
    gang = cluster.gang("short", 2, GPUS, create=1)
    # The first member alone is refused by its template's count of the nodes' room; the
    # plan of both members then says which nodes hold none, and why. That second reason
    # comes within the Event interval (30 s) of the first: it is written when that is up.
    cluster.wait_event("short", "together could hold 1 of them", timeout=20)
    cluster.add_member(gang, 1)

    event = cluster.wait_event("short", "the DRA extended-resource bridge is off", timeout=50)

    assert event["message"].startswith("cannot place 2 member(s)"), event
    assert f"2 node(s) had no {NVIDIA_GPU} allocatable" in event["message"], event
    cluster.assert_unbound_for(gang.members, 3.0)
    assert extended_claims(cluster) == {}
