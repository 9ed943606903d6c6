"""The built-in demo cluster: 16 GPU nodes and 2 CPU nodes, some GPUs already in use.

* H100 80GB × 8, in two multi-node NVLink domains (`nvidia.com/gpu.clique`):
  `nvl-a` (h100-a1..a4, zone us-east-1a) and `nvl-b` (h100-b1..b4, zone us-east-1b);
  h100-b4 is tainted `nvidia.com/gpu=maintenance:NoSchedule`.
* A100 40GB × 8 or × 4 across both zones; a100-a3 is cordoned; the two 4-GPU nodes
  a100-a4 and a100-b4 carry the plan tag `tag.phalanx.io/gpu: "true"`.
* cpu-1, cpu-2: no GPUs.
* Already running (scheduled by someone else): 4 GPUs on h100-b2, all 8 on a100-a2,
  2 on a100-b2, and a CPU-only gateway.
"""

from __future__ import annotations

from phalanx.demo.objects import A100, H100, Obj, node, pod

ZONE_A = "us-east-1a"
ZONE_B = "us-east-1b"
MAINTENANCE = {"key": "nvidia.com/gpu", "value": "maintenance", "effect": "NoSchedule"}


def nodes() -> list[Obj]:
    return [
        *(node(f"h100-a{i}", gpus=8, gpu=H100, zone=ZONE_A, clique="nvl-a") for i in (1, 2, 3, 4)),
        *(node(f"h100-b{i}", gpus=8, gpu=H100, zone=ZONE_B, clique="nvl-b") for i in (1, 2, 3)),
        node("h100-b4", gpus=8, gpu=H100, zone=ZONE_B, clique="nvl-b", taints=(MAINTENANCE,)),
        node("a100-a1", gpus=8, gpu=A100, zone=ZONE_A),
        node("a100-a2", gpus=8, gpu=A100, zone=ZONE_A),
        node("a100-a3", gpus=8, gpu=A100, zone=ZONE_A, cordoned=True),
        node("a100-a4", gpus=4, gpu=A100, zone=ZONE_A, tags=("gpu",)),
        node("a100-b1", gpus=8, gpu=A100, zone=ZONE_B),
        node("a100-b2", gpus=8, gpu=A100, zone=ZONE_B),
        node("a100-b3", gpus=4, gpu=A100, zone=ZONE_B),
        node("a100-b4", gpus=4, gpu=A100, zone=ZONE_B, tags=("gpu",)),
        node("cpu-1", zone=ZONE_A, cpu="64", memory="256Gi"),
        node("cpu-2", zone=ZONE_B, cpu="64", memory="256Gi"),
    ]


def running_pods() -> list[Obj]:
    """Pods another scheduler placed before the demo starts."""
    serving = "serving"
    return [
        pod(serving, "llm-inference-0", gpus=4, node_name="h100-b2", scheduler="default-scheduler"),
        pod(serving, "embeddings-0", gpus=8, node_name="a100-a2", scheduler="default-scheduler"),
        pod(serving, "reranker-0", gpus=2, node_name="a100-b2", scheduler="default-scheduler"),
        pod(
            serving,
            "gateway-0",
            cpu="2",
            memory="4Gi",
            node_name="cpu-1",
            scheduler="default-scheduler",
        ),
    ]


def objects() -> list[Obj]:
    """The whole demo cluster, as a cluster file would hold it."""
    return [*nodes(), *running_pods()]
