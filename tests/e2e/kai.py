"""NVIDIA KAI Scheduler's PodGroups on an e2e control plane: the CRD (written from KAI's
types, see ``crds/kai-podgroup.yaml``), a PodGroup builder and the sizes the invariant
monitor judges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
from podgroup_crd import ensure_crd_file
from scheduling import Api, Obj, Scenario

from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import kai

KAI_CRD = Path(__file__).resolve().parent / "crds" / "kai-podgroup.yaml"
KAI_CRD_NAME = "podgroups.scheduling.run.ai"
KAI_API = "/apis/scheduling.run.ai/v2alpha2"


def ensure_kai_crd(cp: launcher.ControlPlane) -> None:
    """Create the CRD (or find it there) and wait until it is Established and served."""
    ensure_crd_file(cp, KAI_CRD)


def kai_pod_group(
    sc: Scenario,
    name: str,
    min_member: int | None,
    *,
    sub_groups: Mapping[str, int] | None = None,
    topology: Mapping[str, Any] | None = None,
    sub_group_levels: Mapping[str, str] | None = None,
    sub_group_preferred: Mapping[str, str] | None = None,
    nested: Sequence[Obj] = (),
    min_sub_group: int | None = None,
) -> Obj:
    """A PodGroup as KAI's podgrouper writes it (a queue, which Phalanx does not read);
    `sub_group_levels` gives subgroups a `topologyConstraint.requiredTopologyLevel`,
    `sub_group_preferred` a `preferredTopologyLevel`;
    `nested` are `spec.subGroups` as written (with `parent`, `minSubGroup`), and
    `min_sub_group` the PodGroup's `spec.minSubGroup` (`min_member` None then)."""
    spec: Obj = {"queue": "default-queue"}
    if min_member is not None:
        spec["minMember"] = min_member
    if min_sub_group is not None:
        spec["minSubGroup"] = min_sub_group
    if nested:
        spec["subGroups"] = [dict(entry) for entry in nested]
    if sub_groups is not None:
        spec["subGroups"] = [{"name": n, "minMember": m} for n, m in sub_groups.items()]
        for entry in spec["subGroups"]:
            constraint = {}
            level = (sub_group_levels or {}).get(entry["name"])
            if level:
                constraint["requiredTopologyLevel"] = level
            preferred = (sub_group_preferred or {}).get(entry["name"])
            if preferred:
                constraint["preferredTopologyLevel"] = preferred
            if constraint:
                entry["topologyConstraint"] = constraint
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
    """The invariant monitor's gang sizes of KAI gangs (``scheduling.group_of`` keys), read
    by Phalanx's own parser: with `spec.minSubGroup` there is no `minMember`, and the
    fewest members the subgroups' quorum needs is the size; an object Phalanx refuses
    is not judged (0)."""
    sizes = {}
    for obj in api.items(f"{KAI_API}/namespaces/{namespace}/podgroups"):
        try:
            size = kai.parse_pod_group(obj).value.min_member
        except InvalidObjectError:
            size = 0
        sizes[f"kai:{obj['metadata']['name']}"] = size
    return sizes
