"""deploy/: the plain manifests are a fresh render of the chart, the example scheduler config
agrees with the chart's, and every example workload really schedules as a whole gang."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploykit import DEPLOY, REPO, Chart, run, scheduler_config
from served_gangs import Obj, schedule_pods, serve

from builders import DRA_API, gpu_slice_obj, node_obj, nvidia_class_objs

EXAMPLES = sorted((DEPLOY / "examples").glob("*.yaml"))
PLAN_NODE = "phalanx.io/plan-node"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GROUP_ANNOTATION = "phalanx.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
KUEUE_LABEL = "kueue.x-k8s.io/pod-group-name"
LWS_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
YUNIKORN_APP_LABEL = "applicationId"
KAI_ANNOTATION = "pod-group-name"
GROVE_LABEL = "grove.io/podgang"


def test_plain_manifests_are_a_fresh_render_of_the_chart(helm: Path) -> None:
    proc = run(["bash", DEPLOY / "render.sh", "--check"], env={**os.environ, "HELM": str(helm)})
    assert proc.returncode == 0, proc.stderr


def test_plain_manifests_install_the_crd_and_the_namespace_first() -> None:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "manifests" / "phalanx.yaml").read_text()) if d]
    assert [d["kind"] for d in docs[:2]] == ["Namespace", "CustomResourceDefinition"]
    assert docs[0]["metadata"]["name"] == "phalanx-system"


def test_example_scheduler_config_matches_the_chart(chart: Chart) -> None:
    example = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    rendered = scheduler_config(chart.render())
    assert example["extenders"] == rendered["extenders"]
    assert example["profiles"] == rendered["profiles"]
    assert example["percentageOfNodesToScore"] == 100
    assert example["leaderElection"]["resourceName"] == "phalanx-scheduler"


# ---- example workloads ---------------------------------------------------------------


def load_example(path: Path, namespace: str = "examples") -> list[Obj]:
    """The example's objects as the API would hold them (namespace and UIDs filled in)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        meta = doc["metadata"]
        meta.setdefault("namespace", namespace)
        meta["uid"] = f"uid-{namespace}-{meta['name']}"
        if doc["kind"] == "Pod":
            doc["status"] = {"phase": "Pending"}
    return docs


def example_cluster() -> list[Obj]:
    """Four 8-GPU H100 nodes in one NVLink clique, two in another; one is tagged `gpu`."""
    nodes = [node_obj(f"nvl0-{i}", clique="nvl-0") for i in range(4)]
    nodes += [node_obj(f"nvl1-{i}", clique="nvl-1") for i in range(2)]
    nodes[0]["metadata"]["labels"]["tag.phalanx.io/gpu"] = "true"
    return nodes


def dra_cluster() -> list[Obj]:
    """Two nodes whose eight H100s NVIDIA's DRA driver publishes (no device plugin), and
    the driver's DeviceClasses."""
    nodes = [node_obj(f"dra-{i}", gpus=0) for i in range(2)]
    slices = [gpu_slice_obj(n["metadata"]["name"]) for n in nodes]
    return [*nodes, *slices, *nvidia_class_objs()]


def uses_dra(docs: list[Obj]) -> bool:
    return any(d["apiVersion"] == DRA_API for d in docs)


def group_of(pod: Obj) -> str:
    meta = pod["metadata"]
    notes = meta.get("annotations", {})
    labels = meta.get("labels", {})
    named = labels.get(GROUP_LABEL) or notes.get(GROUP_ANNOTATION) or labels.get(KUEUE_LABEL)
    named = named or labels.get(GROVE_LABEL)
    if not named and YUNIKORN_APP_LABEL in labels:
        named = f"yunikorn:{labels[YUNIKORN_APP_LABEL]}"
    if not named and LWS_LABEL in labels:
        named = f"{labels[LWS_LABEL]}-{labels[LWS_INDEX_LABEL]}"
    return str(named or notes.get(KAI_ANNOTATION) or notes[VOLCANO_ANNOTATION])


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_a_well_formed_gang(path: Path) -> None:
    docs = load_example(path)
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert pods
    assert {p["spec"]["schedulerName"] for p in pods} == {"phalanx"}
    assert len({group_of(p) for p in pods}) == 1
    for pod in pods:
        for c in pod["spec"]["containers"]:
            limits = c["resources"].get("limits", {})
            requests = c["resources"]["requests"]
            assert limits.get("nvidia.com/gpu") == requests.get("nvidia.com/gpu"), pod
    groups = [d for d in docs if d["kind"] == "PodGroup"]
    if groups:
        (group,) = groups
        assert group["spec"]["minMember"] <= len(pods)
        plan = group["metadata"].get("annotations", {}).get("phalanx.io/plan")
        if plan:
            leaves = set(_leaves(json.loads(plan)))
            assert {p["metadata"]["annotations"][PLAN_NODE] for p in pods} == leaves


def _leaves(node: Any) -> list[str]:
    if isinstance(node, dict):
        if "execute" in node:
            return [node["execute"]]
        return [leaf for value in node.values() for leaf in _leaves(value)]
    if isinstance(node, list):
        return [leaf for item in node for leaf in _leaves(item)]
    return []


async def _schedule(path: Path) -> dict[str, str]:
    docs = load_example(path)
    cluster = dra_cluster() if uses_dra(docs) else example_cluster()
    nodes = [o for o in cluster if o["kind"] == "Node"]
    async with serve([*cluster, *docs]) as served:
        assert served.source.rejected == []
        pods = [d for d in docs if d["kind"] == "Pod"]
        placements = await schedule_pods(served, pods, [n["metadata"]["name"] for n in nodes])
        assert served.extender.partial_gangs() == []
        return placements


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_schedules_as_one_gang(path: Path) -> None:
    placements = asyncio.run(_schedule(path))
    assert len(placements) == len([d for d in load_example(path) if d["kind"] == "Pod"])


def test_pytorchjob_example_lands_inside_one_nvlink_clique() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "pytorchjob-gang.yaml"))
    assert {node.split("-")[0] for node in placements.values()} == {"nvl0"}
    assert len(set(placements.values())) == 4  # 8 GPUs each: one member per node


def test_plan_example_puts_training_on_the_gpu_tagged_node() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "plan-pipeline.yaml"))
    assert placements["data-pipeline-train"] == "nvl0-0"
    assert placements["data-pipeline-tokenize-en"] != placements["data-pipeline-tokenize-de"]


def test_trials_example_spreads_the_trials() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "trials-study.yaml"))
    assert len(set(placements.values())) == 4


def test_volcano_example_places_master_and_workers_together() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "volcano-mpi-gang.yaml"))
    workers = {placements[f"mpi-allreduce-worker-{i}"] for i in range(2)}
    assert len(workers) == 2  # 8 GPUs each: one worker per node
    assert "mpi-allreduce-master-0" in placements


def test_kai_example_places_prefill_and_both_decoders_together() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "kai-podgroup.yaml"))
    assert len(set(placements.values())) == 3  # 8 GPUs each: one member per node
    assert "disagg-serve-prefill-0" in placements
    # The decode subgroup's level: both decoders in one NVLink clique (nvl0 or nvl1).
    decoders = {placements[f"disagg-serve-decode-{i}"].split("-")[0] for i in range(2)}
    assert len(decoders) == 1, placements


def test_grove_example_places_prefill_and_both_decoders_together() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "grove-podgang.yaml"))
    assert len(set(placements.values())) == 3  # 8 GPUs each: one member per node
    assert "serve-0-prefill-0" in placements
    # The decode podgroup's key: both decoders in one NVLink clique (nvl0 or nvl1).
    decoders = {placements[f"serve-0-decode-{i}"].split("-")[0] for i in range(2)}
    assert len(decoders) == 1, placements


def test_dra_example_places_two_members_on_each_dra_node() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "dra-gpu-gang.yaml"))
    assert sorted(placements.values()) == ["dra-0", "dra-0", "dra-1", "dra-1"]


def test_nvl72_example_keeps_to_one_clique_a_replica_per_node() -> None:
    placements = asyncio.run(_schedule(DEPLOY / "examples" / "nvl72-topology-gang.yaml"))
    assert {node.split("-")[0] for node in placements.values()} == {"nvl1"}  # tightest clique
    assert placements["moe-train-0"] == placements["moe-train-1"]
    assert placements["moe-train-2"] == placements["moe-train-3"]


def test_render_script_and_docs_name_no_machine_paths() -> None:
    for path in [DEPLOY / "render.sh", *DEPLOY.rglob("*.yaml"), REPO / "docs" / "operations.md"]:
        text = path.read_text()
        for needle in ("/root/", "/home/", "/work/", "/tmp/"):
            assert needle not in text, f"{path.relative_to(REPO)} names {needle}"


# ---- docs/operations.md ----------------------------------------------------------------

# Values whose defaults the table describes as a whole rather than key by key.
DESCRIBED_WHOLE = {
    "kubeScheduler.resources",
    "phalanx.resources",
    "phalanx.livenessProbe",
    "phalanx.readinessProbe",
    "podSecurityContext",
    "securityContext",
    "grafanaDashboard.labels",
}


def value_keys(values: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in values.items():
        path = prefix + key
        if isinstance(value, dict) and value and path not in DESCRIBED_WHOLE:
            keys |= value_keys(value, path + ".")
        else:
            keys.add(path)
    return keys


def test_the_values_table_in_the_docs_lists_every_value() -> None:
    values = yaml.safe_load((REPO / "helm" / "phalanx" / "values.yaml").read_text())
    doc = (REPO / "docs" / "operations.md").read_text()
    section = doc.split("## Values", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]*) \|", section, flags=re.MULTILINE)
    assert {key for key, _ in rows} == value_keys(values)
    for key, cell in rows:  # scalar defaults are quoted as they are
        default = cell.strip("`")
        value: Any = values
        for part in key.split("."):
            value = value[part]
        if isinstance(value, bool):
            assert default == str(value).lower(), key
        elif isinstance(value, int | float | str):
            assert default == (str(value) if value != "" else '""'), key
