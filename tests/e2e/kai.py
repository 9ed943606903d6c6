"""NVIDIA KAI Scheduler's PodGroups on an e2e control plane: the CRD (written from KAI's
types, see ``crds/kai-podgroup.yaml``), a PodGroup builder and the sizes the invariant
monitor judges."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
from podgroup_crd import ensure_crd_file
from scheduling import Api, Obj, Scenario

KAI_CRD = Path(__file__).resolve().parent / "crds" / "kai-podgroup.yaml"
KAI_CRD_NAME = "podgroups.scheduling.run.ai"
KAI_API = "/apis/scheduling.run.ai/v2alpha2"


def ensure_kai_crd(cp: launcher.ControlPlane) -> None:
    """Create the CRD (or find it there) and wait until it is Established and served."""
    ensure_crd_file(cp, KAI_CRD)


def kai_pod_group(
    sc: Scenario,
    name: str,
    min_member: int,
    *,
    sub_groups: Mapping[str, int] | None = None,
    topology: Mapping[str, Any] | None = None,
    sub_group_levels: Mapping[str, str] | None = None,
) -> Obj:
    """A PodGroup as KAI's podgrouper writes it (a queue, which Phalanx does not read);
    `sub_group_levels` gives subgroups a `topologyConstraint.requiredTopologyLevel`."""
    spec: Obj = {"minMember": min_member, "queue": "default-queue"}
    if sub_groups is not None:
        spec["subGroups"] = [{"name": n, "minMember": m} for n, m in sub_groups.items()]
        for entry in spec["subGroups"]:
            level = (sub_group_levels or {}).get(entry["name"])
            if level:
                entry["topologyConstraint"] = {"requiredTopologyLevel": level}
    if topology is not None:
        spec["topologyConstraint"] = dict(topology)
    return sc.api.create(
        f"{KAI_API}/namespaces/{sc.namespace}/podgroups",
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def kai_path(sc: Scenario, name: str) -> str:
    return f"{KAI_API}/namespaces/{sc.namespace}/podgroups/{name}"


def kai_sizes(api: Api, namespace: str) -> dict[str, int]:
    """The invariant monitor's gang sizes of KAI gangs (``scheduling.group_of`` keys)."""
    return {
        f"kai:{g['metadata']['name']}": int(g["spec"].get("minMember") or 0)
        for g in api.items(f"{KAI_API}/namespaces/{namespace}/podgroups")
    }
