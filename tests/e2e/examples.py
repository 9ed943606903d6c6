"""deploy/examples on an e2e control plane: which release each example needs, its objects
applied as ``kubectl apply --server-side -n <ns>`` would, and a check that the API server
kept every field the example writes (a field of a disabled feature gate is dropped
silently, which a dry run alone would not show).

The rule: ``deploy/examples/*.yaml`` are for the default release (``KUBE_VERSION``),
``deploy/examples/1.37/*.yaml`` for Kubernetes 1.37 (``control_plane_137``). An example
naming Volcano's, KAI Scheduler's or Grove's API needs that API's CRD, which the chart
does not install.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
from chartkit import REPO, apply, documents
from kubernetes.dynamic import DynamicClient
from scheduling import POOL_LABEL

EXAMPLES = REPO / "deploy" / "examples"
EXAMPLES_137 = EXAMPLES / "1.37"
VOLCANO_GROUP = "scheduling.volcano.sh/"
KAI_GROUP = "scheduling.run.ai/"
GROVE_GROUP = "scheduler.grove.io/"
Obj = dict[str, Any]


def default_release_examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def release_137_examples() -> list[Path]:
    return sorted(EXAMPLES_137.glob("*.yaml"))


def needs_volcano(path: Path) -> bool:
    return any(d["apiVersion"].startswith(VOLCANO_GROUP) for d in documents(path))


def needs_kai(path: Path) -> bool:
    return any(d["apiVersion"].startswith(KAI_GROUP) for d in documents(path))


def needs_grove(path: Path) -> bool:
    return any(d["apiVersion"].startswith(GROVE_GROUP) for d in documents(path))


def chart_validated_examples() -> list[Path]:
    """The examples the chart's own API (the PodGroup CRD, no Volcano, KAI or Grove)
    validates."""
    return [
        p
        for p in default_release_examples()
        if not needs_volcano(p) and not needs_kai(p) and not needs_grove(p)
    ]


def in_pool(doc: Obj, pool: str) -> Obj:
    """``doc``; a pod also selects the test's node pool (so it never lands on another
    test's nodes), nothing else changed."""
    doc = copy.deepcopy(doc)
    if doc["kind"] == "Pod":
        doc["spec"].setdefault("nodeSelector", {})[POOL_LABEL] = pool
    return doc


def apply_example(
    cp: launcher.ControlPlane,
    path: Path,
    namespace: str,
    *,
    pool: str | None = None,
    dry_run: bool = False,
) -> list[Obj]:
    """Every object of the example, in file order; the objects as the API answered."""
    dyn = DynamicClient(cp.api_client())
    answers = []
    for doc in documents(path):
        body = in_pool(doc, pool) if pool is not None else doc
        answers.append(apply(dyn, body, namespace=namespace, dry_run=dry_run))
    return answers


def dropped_fields(written: Any, kept: Any, where: str = "") -> list[str]:
    """The paths of ``written`` that ``kept`` (the API's answer) does not hold as written."""
    if isinstance(written, dict):
        if not isinstance(kept, dict):
            return [where or "."]
        return [
            path
            for key, value in written.items()
            for path in dropped_fields(value, kept.get(key), f"{where}.{key}")
        ]
    if isinstance(written, list):
        if not isinstance(kept, list) or len(kept) != len(written):
            return [where]
        return [
            path
            for i, (a, b) in enumerate(zip(written, kept, strict=True))
            for path in dropped_fields(a, b, f"{where}[{i}]")
        ]
    return [] if str(written) == str(kept) else [where]


def assert_valid(cp: launcher.ControlPlane, path: Path, namespace: str) -> None:
    """A server-side dry run of every object of ``path`` is accepted and keeps its fields."""
    for doc, answer in zip(
        documents(path), apply_example(cp, path, namespace, dry_run=True), strict=True
    ):
        assert answer["metadata"]["name"] == doc["metadata"]["name"]
        for part in ("spec", "metadata"):
            if part == "metadata":
                written = {k: doc["metadata"].get(k) for k in ("labels", "annotations")}
                written = {k: v for k, v in written.items() if v}
            else:
                written = doc.get(part) or {}
            lost = dropped_fields(written, answer.get(part) or {})
            assert not lost, f"{path.name}: {doc['kind']} {doc['metadata']['name']} lost {lost}"
