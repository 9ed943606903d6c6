"""Applying the rendered chart (deploy/manifests/phalanx.yaml) to a test control plane as a
user would, and acting as the chart's ServiceAccount (its RBAC, not the admin's)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import yaml
from kubernetes.dynamic import DynamicClient
from podgroup_crd import wait_crd_established

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "manifests" / "phalanx.yaml"
NAMESPACE = "phalanx-system"
ACCOUNT = "phalanx"
FIELD_MANAGER = "phalanx-e2e"
Obj = dict[str, Any]


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def apply(
    dyn: DynamicClient, doc: Obj, *, namespace: str | None = None, dry_run: bool = False
) -> Obj:
    """`kubectl apply --server-side` of one object."""
    api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force_conflicts": True}
    if dry_run:
        kwargs["dry_run"] = "All"
    if api.namespaced:
        kwargs["namespace"] = namespace or doc["metadata"].get("namespace")
    answer = api.server_side_apply(body=doc, **kwargs)
    return dict(answer.to_dict())


def install(cp: launcher.ControlPlane) -> list[Obj]:
    """Every manifest applied server-side; the objects as the API holds them."""
    dyn = DynamicClient(cp.api_client())
    applied = []
    for doc in documents(MANIFESTS):
        applied.append(apply(dyn, doc))
        if doc["kind"] == "CustomResourceDefinition":
            wait_crd_established(cp, doc["metadata"]["name"])
    return applied


def service_account_kubeconfig(cp: launcher.ControlPlane, path: Path) -> Path:
    """A kubeconfig holding a fresh token of the chart's ServiceAccount (TokenRequest)."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    status, answer = cp.request(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token", request
    )
    assert status == 201, answer
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {
                    "server": cp.server,
                    "certificate-authority-data": base64.b64encode(
                        cp.ca_file.read_bytes()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": ACCOUNT, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": ACCOUNT, "context": {"cluster": "e2e", "user": ACCOUNT}}],
        "current-context": ACCOUNT,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
