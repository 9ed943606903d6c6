"""NVIDIA Grove's PodGangs on an e2e control plane: the CRD (written from Grove's types,
see ``crds/grove-podgang.yaml``), a PodGang builder and the sizes the invariant monitor
judges."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
from podgroup_crd import ensure_crd_file
from scheduling import Api, Obj, Scenario

GROVE_CRD = Path(__file__).resolve().parent / "crds" / "grove-podgang.yaml"
GROVE_CRD_NAME = "podgangs.scheduler.grove.io"
GROVE_API = "/apis/scheduler.grove.io/v1alpha1"


def ensure_grove_crd(cp: launcher.ControlPlane) -> None:
    """Create the CRD (or find it there) and wait until it is Established and served."""
    ensure_crd_file(cp, GROVE_CRD)


def pod_gang(
    sc: Scenario,
    name: str,
    podgroups: Mapping[str, int],
    *,
    required: str = "",
    podgroup_keys: Mapping[str, str] | None = None,
    podgroup_preferred: Mapping[str, str] | None = None,
) -> Obj:
    """A PodGang as Grove's operator writes it: a podgroup per PodClique (its
    `minReplicas`, and `podReferences` naming `<podgroup>-<i>`), a priority class, which
    Phalanx does not read; `required` the gang's packConstraint key, `podgroup_keys` each
    podgroup's own, `podgroup_preferred` each podgroup's `preferred` key."""
    entries = []
    for group, minimum in podgroups.items():
        entry: Obj = {
            "name": group,
            "minReplicas": minimum,
            "podReferences": [
                {"namespace": sc.namespace, "name": f"{group}-{i}"} for i in range(minimum)
            ],
        }
        pack = {
            field: key
            for field, key in (
                ("required", (podgroup_keys or {}).get(group)),
                ("preferred", (podgroup_preferred or {}).get(group)),
            )
            if key
        }
        if pack:
            entry["topologyConstraint"] = {"packConstraint": pack}
        entries.append(entry)
    spec: Obj = {"podgroups": entries, "priorityClassName": ""}
    if required:
        spec["topologyConstraint"] = {"packConstraint": {"required": required}}
    return sc.api.create(
        f"{GROVE_API}/namespaces/{sc.namespace}/podgangs",
        {
            "apiVersion": "scheduler.grove.io/v1alpha1",
            "kind": "PodGang",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def grove_path(sc: Scenario, name: str) -> str:
    return f"{GROVE_API}/namespaces/{sc.namespace}/podgangs/{name}"


def grove_sizes(api: Api, namespace: str) -> dict[str, int]:
    """The invariant monitor's gang sizes of Grove gangs (``scheduling.group_of`` keys):
    the sum of the podgroups' minReplicas."""
    return {
        f"grove:{g['metadata']['name']}": sum(
            int(p.get("minReplicas") or 0) for p in g["spec"].get("podgroups") or []
        )
        for g in api.items(f"{GROVE_API}/namespaces/{namespace}/podgangs")
    }
