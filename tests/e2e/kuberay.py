"""KubeRay's ray-operator on the e2e control plane: its CRDs, the operator process, and
RayCluster bodies.

The operator is the pinned release build-tools.sh builds (``ray-operator`` family), run as a
real process on the admin kubeconfig (it needs RBAC on pods, services, its CRDs and, with a
batch scheduler, PodGroups). With ``--batch-scheduler=scheduler-plugins`` KubeRay v1.5.0
(controllers/ray/batchscheduler/scheduler-plugins/scheduler_plugins.go):

* sets ``spec.schedulerName: scheduler-plugins-scheduler`` on every pod it creates;
* for a RayCluster labelled ``ray.io/gang-scheduling-enabled`` (any value) only, creates a
  ``scheduling.x-k8s.io/v1alpha1`` PodGroup named after the cluster, ``minMember`` = desired
  workers + 1 (the head), ``minResources`` their summed requests, owned by the RayCluster; and
  labels each pod ``scheduling.x-k8s.io/pod-group: <cluster>``.

It exits while waiting for its caches if any of its three CRDs is missing.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, on sys.path via tests/e2e/conftest.py
import yaml
from podgroup_crd import CRDS, ensure_pod_group_crd, wait_crd_established

RAY_API = "/apis/ray.io/v1"
#: The schedulerName KubeRay's scheduler-plugins integration puts on every pod.
SCHEDULER_NAME = "scheduler-plugins-scheduler"
GANG_LABEL = "ray.io/gang-scheduling-enabled"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
IMAGE = "rayproject/ray:2.49.0"  # never pulled: kwok runs no containers

Obj = dict[str, Any]


def install_crds(cp: launcher.ControlPlane, tools: launcher.RayOperatorTools) -> None:
    """RayCluster, RayJob and RayService (from the pinned module) and the PodGroup CRD."""
    ensure_pod_group_crd(cp)
    for path in tools.crds:
        crd = yaml.safe_load(path.read_text())
        status, answer = cp.request("POST", CRDS, crd, timeout=60)
        assert status in (201, 409), f"{path.name}: {status} {answer}"
        wait_crd_established(cp, crd["metadata"]["name"])
    launcher.wait_for("ray.io/v1 served", lambda: cp.request("GET", RAY_API)[0] == 200, timeout=30)


class RayOperator:
    """One ray-operator process against ``cp``, logging into the control plane's log dir."""

    def __init__(
        self,
        cp: launcher.ControlPlane,
        tools: launcher.RayOperatorTools,
        *,
        batch_scheduler: str = "scheduler-plugins",
    ) -> None:
        (self.probe_port,) = launcher.free_ports(1)
        argv = [
            str(tools.binary),
            f"--batch-scheduler={batch_scheduler}",
            "--enable-leader-election=false",
            "--metrics-addr=0",  # controller-runtime: 0 turns the metrics server off
            f"--health-probe-bind-address={launcher.LOOPBACK}:{self.probe_port}",
            "--log-stdout-encoder=console",
        ]
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
        self.component = launcher.Component(
            "ray-operator", argv, cp.log_dir / "ray-operator.log", env=env
        )
        self.log_path: Path = self.component.log_path

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait until its probe server answers ``/readyz``."""
        self.component.start()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        url = f"http://{launcher.LOOPBACK}:{self.probe_port}/readyz"

        def ready() -> bool:
            self.component.check_alive()
            with opener.open(url, timeout=2) as resp:
                return bool(resp.status == 200)

        launcher.wait_for("ray-operator /readyz", ready, timeout=timeout, on_timeout=self.tail)

    def stop(self) -> None:
        self.component.stop()

    def tail(self, lines: int = 40) -> str:
        return f"----- ray-operator {self.log_path} -----\n{self.component.tail(lines)}"


def _container(name: str, requests: Mapping[str, str]) -> Obj:
    return {
        "name": name,
        "image": IMAGE,
        "resources": {"requests": dict(requests), "limits": dict(requests)},
    }


def ray_cluster(name: str, *, workers: int, worker_gpus: int, gang: bool = True) -> Obj:
    """A RayCluster: a CPU head and one group of ``workers`` GPU workers (fixed size)."""
    head = _container("ray-head", {"cpu": "1", "memory": "2Gi"})
    worker = _container(
        "ray-worker", {"cpu": "1", "memory": "1Gi", launcher.GPU_RESOURCE: str(worker_gpus)}
    )
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {GANG_LABEL: "true"} if gang else {}},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [head]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker]}},
                }
            ],
        },
    }
