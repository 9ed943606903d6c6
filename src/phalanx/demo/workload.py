"""The built-in demo workload: one gang per placement policy, a plan, a study, an elastic
gang, single pods and one gang that can never fit.

Every object is a plain Kubernetes dict, exactly what Kubeflow Training Operator, a Job or
a user's `kubectl apply` would create; `DEMO_GANGS` says what each gang is meant to show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from phalanx.demo.objects import (
    A100,
    GROUP_ANNOTATION,
    GROUP_LABEL,
    H100,
    MIN_MEMBER_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PLAN_ANNOTATION,
    PLAN_NODE_ANNOTATION,
    PRODUCT_LABEL,
    ZONE_LABEL,
    Obj,
    pod,
    podgroup,
)

TRAINING = "training"
RESEARCH = "research"


@dataclass(frozen=True, slots=True)
class DemoGang:
    """What one demo gang is meant to show, and how many of its pods should bind."""

    key: str  # namespace/name
    placement: str
    members: int
    min_member: int
    bound: int  # expected: members, min_member for the elastic gang, 0 for the impossible one
    shows: str


def _gang(
    key: str,
    placement: str,
    members: int,
    *,
    shows: str,
    min_member: int = 0,
    bound: int | None = None,
) -> DemoGang:
    return DemoGang(
        key, placement, members, min_member or members, members if bound is None else bound, shows
    )


DEMO_GANGS = (
    _gang(
        f"{TRAINING}/llm-pretrain",
        "interconnect-local",
        4,
        shows="PyTorchJob-style PodGroup: 4 x 8 H100 inside one NVLink clique",
    ),
    _gang(f"{RESEARCH}/rl-sim", "pack", 3, shows="annotation-only gang (no PodGroup), packed"),
    _gang(f"{TRAINING}/allreduce-bench", "same-node", 4, shows="every member on one node"),
    _gang(f"{RESEARCH}/ray-workers", "spread", 3, shows="every member on a distinct node"),
    _gang(f"{RESEARCH}/eval-suite", f"domain:{ZONE_LABEL}", 4, shows="all members in one zone"),
    _gang(
        f"{TRAINING}/data-pipeline",
        "pack",
        4,
        shows="execution plan: sequence + parallel + remote(tag gpu)",
    ),
    _gang(f"{RESEARCH}/hpo-sweep", "pack", 4, shows="study trials spread round-robin"),
    _gang(
        f"{RESEARCH}/elastic-finetune",
        "same-node",
        4,
        min_member=2,
        bound=2,
        shows="elastic gang: 4 x 4 GPUs cannot share a node, its quorum of 2 can and starts",
    ),
    _gang(
        f"{RESEARCH}/too-big",
        "same-node",
        3,
        bound=0,
        shows="3 x 8 GPUs on one node: no node has 24 GPUs, so it waits with a reason",
    ),
)

DEMO_SINGLES = (
    f"{RESEARCH}/notebook-alice",
    f"{RESEARCH}/notebook-bob",
    f"{TRAINING}/preprocess-0",
)

DATA_PIPELINE_PLAN = {
    "sequence": [
        {"execute": "ingest"},
        {"parallel": [{"execute": "tokenize-en"}, {"execute": "tokenize-de"}]},
        {"remote": {"execute": "train"}, "tag": "gpu"},
    ]
}


def _member_of(group: str) -> dict[str, str]:
    return {GROUP_LABEL: group}


def llm_pretrain() -> list[Obj]:
    """What Kubeflow Training Operator creates for a 4-replica PyTorchJob with gang scheduling."""
    job = "llm-pretrain"
    group = podgroup(TRAINING, job, 4, annotations={PLACEMENT_ANNOTATION: "interconnect-local"})
    pods = []
    for replica, index in (("master", 0), ("worker", 0), ("worker", 1), ("worker", 2)):
        labels = _member_of(job) | {
            "training.kubeflow.org/job-name": job,
            "training.kubeflow.org/replica-type": replica,
            "training.kubeflow.org/replica-index": str(index),
        }
        pods.append(
            pod(
                TRAINING,
                f"{job}-{replica}-{index}",
                gpus=8,
                cpu="48",
                memory="512Gi",
                labels=labels,
                node_selector={PRODUCT_LABEL: H100[0]},
            )
        )
    return [group, *pods]


def rl_sim() -> list[Obj]:
    annotations = {GROUP_ANNOTATION: "rl-sim", MIN_MEMBER_ANNOTATION: "3"}
    return [pod(RESEARCH, f"rl-sim-{i}", gpus=2, annotations=annotations) for i in range(3)]


def allreduce_bench() -> list[Obj]:
    group = podgroup(
        TRAINING, "allreduce-bench", 4, annotations={PLACEMENT_ANNOTATION: "same-node"}
    )
    return [
        group,
        *(
            pod(TRAINING, f"allreduce-bench-{i}", gpus=2, labels=_member_of("allreduce-bench"))
            for i in range(4)
        ),
    ]


def ray_workers() -> list[Obj]:
    group = podgroup(RESEARCH, "ray-workers", 3, annotations={PLACEMENT_ANNOTATION: "spread"})
    return [
        group,
        *(
            pod(RESEARCH, f"ray-workers-{i}", gpus=1, labels=_member_of("ray-workers"))
            for i in range(3)
        ),
    ]


def eval_suite() -> list[Obj]:
    group = podgroup(
        RESEARCH, "eval-suite", 4, annotations={PLACEMENT_ANNOTATION: f"domain:{ZONE_LABEL}"}
    )
    return [
        group,
        *(
            pod(
                RESEARCH,
                f"eval-suite-{i}",
                gpus=2,
                labels=_member_of("eval-suite"),
                node_selector={PRODUCT_LABEL: A100[0]},
            )
            for i in range(4)
        ),
    ]


def data_pipeline() -> list[Obj]:
    group = podgroup(
        TRAINING, "data-pipeline", 4, annotations={PLAN_ANNOTATION: json.dumps(DATA_PIPELINE_PLAN)}
    )
    steps = (("ingest", 0), ("tokenize-en", 0), ("tokenize-de", 0), ("train", 2))
    return [
        group,
        *(
            pod(
                TRAINING,
                f"data-pipeline-{step}",
                gpus=gpus,
                cpu="8",
                labels=_member_of("data-pipeline"),
                annotations={PLAN_NODE_ANNOTATION: step},
            )
            for step, gpus in steps
        ),
    ]


def hpo_sweep() -> list[Obj]:
    plan = {"trials": [{"execute": f"trial-{i}"} for i in range(4)]}
    group = podgroup(RESEARCH, "hpo-sweep", 4, annotations={PLAN_ANNOTATION: json.dumps(plan)})
    return [
        group,
        *(
            pod(
                RESEARCH,
                f"hpo-sweep-trial-{i}",
                gpus=1,
                labels=_member_of("hpo-sweep"),
                annotations={PLAN_NODE_ANNOTATION: f"trial-{i}"},
            )
            for i in range(4)
        ),
    ]


def elastic_finetune() -> list[Obj]:
    """minMember 2 of 4: the quorum starts; the rest join when a node has room next to it."""
    same_node = {PLACEMENT_ANNOTATION: "same-node"}
    group = podgroup(RESEARCH, "elastic-finetune", 2, annotations=same_node)
    return [
        group,
        *(
            pod(RESEARCH, f"elastic-finetune-{i}", gpus=4, labels=_member_of("elastic-finetune"))
            for i in range(4)
        ),
    ]


def too_big() -> list[Obj]:
    group = podgroup(RESEARCH, "too-big", 3, annotations={PLACEMENT_ANNOTATION: "same-node"})
    return [
        group,
        *(pod(RESEARCH, f"too-big-{i}", gpus=8, labels=_member_of("too-big")) for i in range(3)),
    ]


def singles() -> list[Obj]:
    return [
        pod(RESEARCH, "notebook-alice", gpus=1, cpu="8"),
        pod(RESEARCH, "notebook-bob", gpus=2, cpu="8", node_selector={PRODUCT_LABEL: A100[0]}),
        pod(TRAINING, "preprocess-0", cpu="16", memory="64Gi"),
    ]


def objects() -> list[Obj]:
    """The whole workload in submission order."""
    return [
        *llm_pretrain(),
        *rl_sim(),
        *allreduce_bench(),
        *ray_workers(),
        *eval_suite(),
        *data_pipeline(),
        *hpo_sweep(),
        *elastic_finetune(),
        *too_big(),
        *singles(),
    ]
