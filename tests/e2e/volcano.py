"""Volcano's PodGroups on an e2e control plane: the CRD (written from Volcano's schema, see
``crds/volcano-podgroup.yaml``), a PodGroup builder and the sizes the invariant monitor
judges. Shared by the dialect modules of every Kubernetes version."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
from podgroup_crd import ensure_crd_file
from scheduling import Api, Obj, Scenario

VOLCANO_CRD = Path(__file__).resolve().parent / "crds" / "volcano-podgroup.yaml"
VOLCANO_CRD_NAME = "podgroups.scheduling.volcano.sh"
VOLCANO_API = "/apis/scheduling.volcano.sh/v1beta1"


def ensure_volcano_crd(cp: launcher.ControlPlane) -> None:
    """Create the CRD (or find it there, on a control plane shared by modules) and wait
    until it is Established and served."""
    ensure_crd_file(cp, VOLCANO_CRD)


def volcano_pod_group(
    sc: Scenario,
    name: str,
    min_member: int,
    queue: str = "default",
    *,
    network_topology: Mapping[str, Any] | None = None,
    min_task_member: Mapping[str, int] | None = None,
) -> Obj:
    spec: Obj = {"minMember": min_member, "queue": queue}
    if network_topology is not None:
        spec["networkTopology"] = dict(network_topology)
    if min_task_member is not None:
        spec["minTaskMember"] = dict(min_task_member)
    return sc.api.create(
        f"{VOLCANO_API}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def volcano_path(sc: Scenario, name: str) -> str:
    return f"{VOLCANO_API}/namespaces/{sc.namespace}/podgroups/{name}"


def volcano_sizes(api: Api, namespace: str) -> dict[str, int]:
    """The invariant monitor's gang sizes of Volcano gangs (``scheduling.group_of`` keys)."""
    return {
        f"volcano:{g['metadata']['name']}": int(g["spec"].get("minMember") or 0)
        for g in api.items(f"{VOLCANO_API}/namespaces/{namespace}/podgroups")
    }
