"""Applying the rendered chart (deploy/manifests/phalanx.yaml) to a test control plane as a
user would, and acting as the chart's ServiceAccount (its RBAC, not the admin's); rendering
the chart with other values, and reading a render."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import yaml
from kubernetes.dynamic import DynamicClient
from podgroup_crd import wait_crd_established

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "manifests" / "phalanx.yaml"
CHART = REPO / "helm" / "phalanx"
RELEASE = "phalanx"
NAMESPACE = "phalanx-system"
ACCOUNT = "phalanx"
FIELD_MANAGER = "phalanx-e2e"
Obj = dict[str, Any]


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render(helm: Path, values: Mapping[str, Any]) -> list[Obj]:
    """``helm template`` of the chart with ``values`` over its defaults, as deploy/render.sh
    renders deploy/manifests/phalanx.yaml (release, namespace, the tested Kubernetes release;
    without the CRD)."""
    kube_version = launcher.read_versions()["KUBE_VERSION"]
    done = subprocess.run(
        [
            *(str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE),
            *("--kube-version", kube_version, "--values", "-"),
        ],
        input=yaml.safe_dump(dict(values)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"helm template: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def helm_env(cp: launcher.ControlPlane, home: Path) -> dict[str, str]:
    """helm's environment: the control plane's admin kubeconfig, and homes under ``home``."""
    return {
        **os.environ,
        "KUBECONFIG": str(cp.kubeconfig),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }


def kube_scheduler_configuration(docs: list[Obj]) -> Obj | None:
    """The KubeSchedulerConfiguration inside a render's ConfigMap (None if there is none)."""
    for doc in docs:
        if doc.get("kind") != "ConfigMap":
            continue
        for text in (doc.get("data") or {}).values():
            config = yaml.safe_load(text)
            if isinstance(config, dict) and config.get("kind") == "KubeSchedulerConfiguration":
                return config
    return None


def container_image(docs: list[Obj], container: str) -> str:
    """The image of the Deployment's container ``container``."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    (image,) = [c["image"] for c in containers if c["name"] == container]
    return str(image)


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
