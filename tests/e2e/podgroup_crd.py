"""The PodGroup CRD on the e2e control plane: the chart's own manifest, installed once
and waited for until the API serves it (shared by the e2e modules)."""

from __future__ import annotations

from pathlib import Path

import launcher  # tests/controlplane/launcher.py, on sys.path via tests/e2e/conftest.py
import yaml

CRD_FILE = (
    Path(__file__).resolve().parents[2] / "helm/phalanx/crds/scheduling.x-k8s.io_podgroups.yaml"
)
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD_NAME = "podgroups.scheduling.x-k8s.io"
CRD_PATH = f"{CRDS}/{CRD_NAME}"
PG_API = "/apis/scheduling.x-k8s.io/v1alpha1"


def ensure_pod_group_crd(cp: launcher.ControlPlane) -> None:
    """Create the CRD (or find it there) and wait until it is Established and served."""
    status, answer = cp.request(
        "POST",
        CRDS,
        yaml.safe_load(CRD_FILE.read_text()),
    )
    assert status in (201, 409), answer
    wait_crd_established(cp, CRD_NAME)
    launcher.wait_for(
        "PodGroup API served", lambda: cp.request("GET", PG_API)[0] == 200, timeout=30
    )


def ensure_crd_file(cp: launcher.ControlPlane, path: Path) -> None:
    """Create the CRD written in ``path`` (a third-party gang API's, or find it there on a
    control plane shared by modules) and wait until it is Established and its first
    version served."""
    crd = yaml.safe_load(path.read_text())
    status, answer = cp.request("POST", CRDS, crd)
    assert status in (201, 409), answer
    name = crd["metadata"]["name"]
    wait_crd_established(cp, name)
    api = f"/apis/{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
    launcher.wait_for(f"{api} served", lambda: cp.request("GET", api)[0] == 200, timeout=30)


def wait_crd_established(cp: launcher.ControlPlane, name: str) -> None:
    """Wait until the CRD `name` reports Established."""

    def established() -> bool:
        status, crd = cp.request("GET", f"{CRDS}/{name}")
        conditions = {
            c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []
        }
        return status == 200 and conditions.get("Established") == "True"

    launcher.wait_for(f"CRD {name} established", established, timeout=30)


def remove_pod_group_crd(cp: launcher.ControlPlane) -> None:
    cp.request("DELETE", CRD_PATH)
    launcher.wait_for("PodGroup CRD gone", lambda: cp.request("GET", PG_API)[0] == 404, timeout=60)
