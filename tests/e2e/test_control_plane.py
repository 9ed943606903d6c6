"""Smoke test of the real-control-plane tier: kwok GPU nodes, vanilla kube-scheduler,
a GPU pod bound and Running, and an apiserver restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from kubernetes import client

pytestmark = pytest.mark.e2e

NODES = ["smoke-gpu-0", "smoke-gpu-1", "smoke-gpu-2"]


def test_gpu_nodes_ready_and_gpu_pod_runs(
    control_plane: launcher.ControlPlane,
    gpu_nodes: Callable[..., dict[str, Any]],
    namespace: str,
) -> None:
    cp = control_plane
    for i, name in enumerate(NODES):
        gpu_nodes(name, gpus=8, clique=f"cluster-a.{i % 2}", zone="zone-a", wait_ready=False)
    for name in NODES:
        node = cp.wait_node_ready(name)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.memory"] == "81559"
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.family"] == "hopper"
        assert labels["topology.kubernetes.io/zone"] == "zone-a"
        assert labels["nvidia.com/gpu.clique"].startswith("cluster-a.")

    core = cp.core_v1()
    cp.start_scheduler()  # vanilla profile "default-scheduler"
    try:
        core.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="gpu-pod"),
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(
                            name="main",
                            image="fake-image",  # kwok runs nothing: never pulled
                            resources=client.V1ResourceRequirements(
                                requests={"nvidia.com/gpu": "2", "cpu": "1"},
                                limits={"nvidia.com/gpu": "2"},
                            ),
                        )
                    ]
                ),
            ),
        )

        def running() -> client.V1Pod | None:
            pod = core.read_namespaced_pod("gpu-pod", namespace)
            assert pod.spec is not None
            assert pod.status is not None
            return pod if pod.spec.node_name and pod.status.phase == "Running" else None

        pod = launcher.wait_for("gpu-pod Running", running, timeout=30, on_timeout=cp.log_tails)
        assert pod.spec is not None
        assert pod.status is not None
        assert pod.spec.node_name in NODES
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        assert conditions.get("PodScheduled") == "True"
        assert conditions.get("Ready") == "True"
    finally:
        cp.stop_scheduler()


def test_apiserver_restart_keeps_working(
    control_plane: launcher.ControlPlane, gpu_nodes: Callable[..., dict[str, Any]]
) -> None:
    cp = control_plane
    gpu_nodes("restart-gpu-0", gpus=4)
    pid_before = cp.pids()["kube-apiserver"]
    cp.restart_apiserver()
    assert cp.pids()["kube-apiserver"] != pid_before
    names = {n.metadata.name for n in cp.core_v1().list_node().items if n.metadata}
    assert "restart-gpu-0" in names  # etcd kept the data; the Python client reconnected
    # kwok re-established its watches: a node created after the restart still turns Ready.
    node = gpu_nodes("restart-gpu-1", gpus=4)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
