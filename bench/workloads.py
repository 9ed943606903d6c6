"""The benchmark workloads, as plain data: nodes, PodGroups and pods in arrival order.

Every scheduler under test gets exactly the same gangs, pods and requests, built here from a
seed, so runs are comparable within one report and reproducible across reports. Only two
things differ per scheduler: ``spec.schedulerName``, and the *dialect* the gangs are written
in — scheduler-plugins PodGroups (``scheduling.x-k8s.io/v1alpha1``, pods labelled
``scheduling.x-k8s.io/pod-group``) for every contender but kube-scheduler's native gang
scheduling, which gets upstream ``scheduling.k8s.io/v1beta1`` PodGroups (gang policy
``minCount``, pods naming them in ``spec.schedulingGroup``). ``scale`` shrinks node and pod
counts together (``--quick`` is 0.1); the shapes stay the same.

At full size (8-GPU nodes):

* ``singles`` — 2,000 single 1-GPU pods, no gangs, 500 nodes: the throughput ceiling;
* ``gangs`` — 100 gangs × 8 members × 4 GPUs, 500 nodes: all fit at once;
* ``contended`` — ~180 gangs of 2–32 members × 1–8 GPUs asking twice the 4,000 GPUs of
  500 nodes, members arriving shuffled among each other's;
* ``big-gang`` — one 256-member gang, 8 GPUs (a whole node) each, 1,000 nodes;
* ``plans`` — 10 data pipelines and 10 trial studies, each 10× the examples in
  ``deploy/examples`` (40 members), 500 nodes;
* ``upstream-small-gangs`` / ``upstream-big-gangs`` — kube-scheduler's own gang shapes
  (``test/integration/scheduler_perf/podgroup/gangscheduling/performance-config.yaml`` in
  k8s.io/kubernetes v1.37.2: ``5000Nodes_1000Gangs_3000Pods`` and
  ``5000Nodes_3Gangs_3000Pods_1000PerGroup``) with upstream's pod requests (100m CPU,
  100 Mi) plus one GPU each, on 1,000 nodes (a fifth of upstream's 5,000). The gang sizes
  are upstream's (3, and 1,000); the gang counts are cut to 500 and 2 so that a full run of
  both, for every contender, stays near 10 minutes on this 2-core machine;
* ``unschedulable-wide`` / ``unschedulable-full`` — one impossible gang each, an 80-GPU job
  (10 members × 8 GPUs, as in KAI's scale test) on 1,000 nodes. *wide*: its members may use
  only 9 named nodes (required node affinity), so no set of nodes can ever hold it; *full*:
  any node, but every node except 9 is already full (pods bound to them directly, before
  the scheduler starts). Each member fits on its own, so a scheduler without gangs binds 9
  of them. The members are created gated and released together (as Kueue admits a job);
  the run measures how long each scheduler takes to say the gang is unschedulable
  (``report.unschedulable_figures``).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
PODGROUP_API = "scheduling.x-k8s.io/v1alpha1"
UPSTREAM_PODGROUP_API = "scheduling.k8s.io/v1beta1"
HOSTNAME_LABEL = "kubernetes.io/hostname"

#: How a workload's gangs are written: scheduler-plugins PodGroups, or upstream's own.
Dialect = Literal["scheduler-plugins", "upstream"]
GPU = "nvidia.com/gpu"
PLAN_ANNOTATION = "phalanx.io/plan"
PLAN_NODE_ANNOTATION = "phalanx.io/plan-node"
#: Nodes carrying this label are where a plan's ``{"remote": ..., "tag": "gpu"}`` may run.
TAG_LABEL = "tag.phalanx.io/gpu"

#: Every benchmark node: a DGX-like 8-GPU box. One in TAG_EVERY nodes is tagged for plans.
NODE_GPUS = 8
NODE_CPU = "64"
NODE_MEMORY = "512Gi"
NODE_MAX_PODS = 110
TAG_EVERY = 4

#: PodGroup ``scheduleTimeoutSeconds`` of every gang: coscheduling's Permit wait and Phalanx's
#: reservation TTL alike. 30 s keeps a deadlocked coscheduling round short enough to be
#: measured to saturation; Phalanx's bind barrier (20 s) stays below it.
SCHEDULE_TIMEOUT_SECONDS = 30

SEED = 20250601

#: The scheduling gate a gated workload's pods are created behind (``Workload.gated``).
ARRIVAL_GATE = "bench.phalanx.io/arrival"


@dataclass(frozen=True, slots=True)
class Member:
    """One pod to create. ``group`` is its PodGroup's name (None for a single pod)."""

    name: str
    gpus: int
    cpu_millis: int = 1000
    memory_mib: int = 1024
    group: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: Required node affinity: only these nodes (by hostname) may hold it; empty: any node.
    hosts: tuple[str, ...] = ()
    #: Created already bound to this node (``spec.nodeName``): no scheduler sees it pending.
    node: str | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """One PodGroup; every member is needed (``min_member`` == its size)."""

    name: str
    min_member: int
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Workload:
    key: str
    title: str
    nodes: int
    groups: tuple[Group, ...]
    #: In arrival order: the benchmark submits them to its creation pool in this order.
    pods: tuple[Member, ...]
    #: Gangs an offline all-or-nothing packer places on the empty cluster (see
    #: :func:`feasible_gangs`); every gang for the workloads that all fit.
    feasible_gangs: int
    #: True when every pod fits at once: the run ends when all are bound, not at saturation.
    all_fit: bool
    notes: str = ""
    #: Pods bound to their nodes before the scheduler starts (``Member.node``): they fill
    #: the cluster. Not measured, not in ``pods``.
    prefill: tuple[Member, ...] = ()
    #: Every gang is impossible: the run measures the time until each is reported
    #: unschedulable, and ends once they all are (or at the cap).
    impossible: bool = False
    #: Pods are created behind a scheduling gate (ARRIVAL_GATE) and released together once
    #: all exist, as Kueue admits a job: no scheduler sees part of a gang. A pod's arrival
    #: is then its release, not its creation.
    gated: bool = False

    @property
    def gpus_demanded(self) -> int:
        return sum(p.gpus for p in self.pods)

    def group_sizes(self) -> dict[str, int]:
        return {g.name: g.min_member for g in self.groups}


# ---- node and object bodies ---------------------------------------------------------------


def node_name(i: int) -> str:
    return f"bench-node-{i:04d}"


def node_labels(i: int) -> dict[str, str]:
    """Extra labels of node ``i`` (the launcher adds hostname and GPU Feature Discovery ones)."""
    return {TAG_LABEL: "true"} if i % TAG_EVERY == 0 else {}


def is_tagged(name: str) -> bool:
    return int(name.rsplit("-", 1)[1]) % TAG_EVERY == 0


def podgroup_body(group: Group, dialect: Dialect = "scheduler-plugins") -> dict[str, Any]:
    """The gang object. Upstream's v1beta1 PodGroup has no timeout of its own: kube-scheduler's
    gang plugin waits its fixed 5 minutes at Permit."""
    metadata = {"name": group.name, "annotations": dict(group.annotations)}
    if dialect == "upstream":
        return {
            "apiVersion": UPSTREAM_PODGROUP_API,
            "kind": "PodGroup",
            "metadata": metadata,
            "spec": {"schedulingPolicy": {"gang": {"minCount": group.min_member}}},
        }
    return {
        "apiVersion": PODGROUP_API,
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {
            "minMember": group.min_member,
            "scheduleTimeoutSeconds": SCHEDULE_TIMEOUT_SECONDS,
        },
    }


def pod_body(
    member: Member,
    scheduler_name: str,
    dialect: Dialect = "scheduler-plugins",
    *,
    gated: bool = False,
) -> dict[str, Any]:
    requests = {"cpu": f"{member.cpu_millis}m", "memory": f"{member.memory_mib}Mi"}
    limits: dict[str, str] = {}
    if member.gpus:
        requests[GPU] = limits[GPU] = str(member.gpus)
    labels = {"app": "phalanx-bench"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "fake",
                "resources": {"requests": requests, "limits": limits or None},
            }
        ],
    }
    if member.group is not None:
        if dialect == "upstream":
            spec["schedulingGroup"] = {"podGroupName": member.group}
        else:
            labels[GROUP_LABEL] = member.group
    if member.hosts:
        hosts = {"key": HOSTNAME_LABEL, "operator": "In", "values": list(member.hosts)}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [hosts]}]
                }
            }
        }
    if member.node is not None:
        spec["nodeName"] = member.node
    if gated:
        spec["schedulingGates"] = [{"name": ARRIVAL_GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": member.name,
            "labels": labels,
            "annotations": dict(member.annotations),
        },
        "spec": spec,
    }


# ---- the workloads ------------------------------------------------------------------------


def _n(full: int, scale: float, minimum: int = 1) -> int:
    return max(minimum, round(full * scale))


def singles(scale: float) -> Workload:
    nodes = _n(500, scale, 10)
    pods = tuple(Member(f"single-{i:05d}", 1) for i in range(_n(2000, scale, 20)))
    return Workload(
        "singles",
        f"{len(pods)} single 1-GPU pods on {nodes} nodes",
        nodes,
        (),
        pods,
        feasible_gangs=0,
        all_fit=True,
        notes="No gangs: the throughput ceiling (vanilla kube-scheduler's home ground).",
    )


def gangs(scale: float) -> Workload:
    nodes = _n(500, scale, 10)
    count = _n(100, scale, 2)
    groups = tuple(Group(f"gang-{g:03d}", 8) for g in range(count))
    pods = tuple(
        Member(f"gang-{g:03d}-{m}", 4, cpu_millis=4000, memory_mib=16384, group=f"gang-{g:03d}")
        for g in range(count)
        for m in range(8)
    )
    return Workload(
        "gangs",
        f"{count} gangs × 8 pods × 4 GPUs on {nodes} nodes (all fit)",
        nodes,
        groups,
        pods,
        feasible_gangs=count,
        all_fit=True,
        notes="Gang after gang; two members fill a node, so any placement fits them all.",
    )


def contended(scale: float) -> Workload:
    nodes = _n(500, scale, 10)
    capacity = nodes * NODE_GPUS
    rng = random.Random(SEED)
    sizes = (2, 4, 8, 16, 32)
    per_member = (1, 2, 4, 8)
    groups: list[Group] = []
    members: list[Member] = []
    demand = 0
    while demand < 2 * capacity:
        size, gpus = rng.choice(sizes), rng.choice(per_member)
        if size * gpus > capacity // 2:
            continue  # a gang bigger than half the cluster says nothing about contention
        name = f"cg-{len(groups):03d}"
        groups.append(Group(name, size))
        members.extend(
            Member(
                f"{name}-{m:02d}",
                gpus,
                cpu_millis=1000 * gpus,
                memory_mib=4096 * gpus,
                group=name,
            )
            for m in range(size)
        )
        demand += size * gpus
    rng.shuffle(members)  # arrivals interleave: every gang's members trickle in among others'
    work = Workload(
        "contended",
        f"{len(groups)} gangs of 2–32 × 1–8 GPUs, {demand} GPUs asked of {capacity} "
        f"on {nodes} nodes, arriving interleaved",
        nodes,
        tuple(groups),
        tuple(members),
        feasible_gangs=0,
        all_fit=False,
        notes="Demand is twice the cluster: the run ends at saturation (no bind for the "
        "settle window). Feasible = gangs a greedy offline all-or-nothing packer places, "
        "taking gangs in the order their last member arrives.",
    )
    return _with_feasible(work)


def big_gang(scale: float) -> Workload:
    nodes = _n(1000, scale, 20)
    size = _n(256, scale, 8)
    group = Group("big", size)
    pods = tuple(
        Member(f"big-{m:03d}", NODE_GPUS, cpu_millis=32000, memory_mib=262144, group="big")
        for m in range(size)
    )
    return Workload(
        "big-gang",
        f"one {size}-member gang × {NODE_GPUS} GPUs on {nodes} nodes",
        nodes,
        (group,),
        pods,
        feasible_gangs=1,
        all_fit=True,
        notes="Goal: the whole gang bound within 10 s of its last member's creation.",
    )


def _pipeline(name: str, tokenizers: int, trainers: int) -> tuple[Group, list[Member]]:
    """deploy/examples/plan-pipeline.yaml, widened: ingest → N tokenizers → M trainers (tagged)."""
    tok_ids = [f"tokenize-{i:02d}" for i in range(tokenizers)]
    train_ids = [f"train-{i:02d}" for i in range(trainers)]
    plan = {
        "sequence": [
            {"execute": "ingest"},
            {"parallel": [{"execute": t} for t in tok_ids]},
            {"remote": {"parallel": [{"execute": t} for t in train_ids]}, "tag": "gpu"},
        ]
    }
    members = [Member(f"{name}-ingest", 0, 8000, 32768, name, {PLAN_NODE_ANNOTATION: "ingest"})]
    members += [
        Member(f"{name}-{t}", 0, 8000, 32768, name, {PLAN_NODE_ANNOTATION: t}) for t in tok_ids
    ]
    members += [
        Member(f"{name}-{t}", 2, 16000, 131072, name, {PLAN_NODE_ANNOTATION: t}) for t in train_ids
    ]
    group = Group(name, len(members), {PLAN_ANNOTATION: json.dumps(plan, separators=(",", ":"))})
    return group, members


def _study(name: str, trials: int) -> tuple[Group, list[Member]]:
    """deploy/examples/trials-study.yaml, widened: N one-GPU trials."""
    ids = [f"trial-{i:02d}" for i in range(trials)]
    plan = {"trials": [{"execute": t} for t in ids]}
    members = [Member(f"{name}-{t}", 1, 4000, 32768, name, {PLAN_NODE_ANNOTATION: t}) for t in ids]
    group = Group(name, len(members), {PLAN_ANNOTATION: json.dumps(plan, separators=(",", ":"))})
    return group, members


def plans(scale: float) -> Workload:
    nodes = _n(500, scale, 10)
    copies = _n(10, scale, 1)
    groups: list[Group] = []
    pods: list[Member] = []
    for c in range(copies):
        for group, members in (_pipeline(f"pipe-{c:02d}", 29, 10), _study(f"study-{c:02d}", 40)):
            groups.append(group)
            pods.extend(members)
    return Workload(
        "plans",
        f"{copies} pipelines (1 ingest → 29 tokenizers → 10 trainers on tagged nodes) and "
        f"{copies} studies (40 trials) on {nodes} nodes",
        nodes,
        tuple(groups),
        tuple(pods),
        feasible_gangs=len(groups),
        all_fit=True,
        notes="10× deploy/examples/plan-pipeline.yaml and trials-study.yaml, ten of each. Plan "
        "rules are scored for every scheduler: trainers off tagged nodes (hard), trials and "
        "tokenizers on distinct nodes (soft).",
    )


#: kube-scheduler's scheduler_perf gang pods ask this much (templates/gang-pod.yaml); ours
#: also ask one GPU, so every contender has GPUs to gang.
UPSTREAM_CPU_MILLIS = 100
UPSTREAM_MEMORY_MIB = 100


def _upstream(key: str, prefix: str, count: int, size: int, nodes: int, notes: str) -> Workload:
    """``count`` gangs of ``size`` one-GPU members, created gang after gang (as
    scheduler_perf's createPods does: pod i belongs to gang i // size)."""
    groups = tuple(Group(f"{prefix}-{g:04d}", size) for g in range(count))
    pods = tuple(
        Member(
            f"{group.name}-{m:04d}",
            1,
            cpu_millis=UPSTREAM_CPU_MILLIS,
            memory_mib=UPSTREAM_MEMORY_MIB,
            group=group.name,
        )
        for group in groups
        for m in range(size)
    )
    return Workload(
        key,
        f"{count} gangs × {size} pods × 1 GPU on {nodes} nodes (all fit)",
        nodes,
        groups,
        pods,
        feasible_gangs=count,
        all_fit=True,
        notes=notes,
    )


def upstream_small_gangs(scale: float) -> Workload:
    return _upstream(
        "upstream-small-gangs",
        "sg",
        _n(500, scale, 10),
        3,
        _n(1000, scale, 10),
        "kube-scheduler's scheduler_perf `5000Nodes_1000Gangs_3000Pods` (gangscheduling, "
        "v1.37.2) at half its gangs on a fifth of its nodes: many small gangs, the per-gang "
        "overhead.",
    )


def upstream_big_gangs(scale: float) -> Workload:
    return _upstream(
        "upstream-big-gangs",
        "bg",
        2,
        _n(1000, scale, 10),
        _n(1000, scale, 10),
        "kube-scheduler's scheduler_perf `5000Nodes_3Gangs_3000Pods_1000PerGroup` "
        "(gangscheduling, v1.37.2) at two of its three gangs on a fifth of its nodes: gangs "
        "of a thousand.",
    )


#: The impossible gang: an 80-GPU job as in KAI's scale test, 10 whole-node members.
IMPOSSIBLE_MEMBERS = 10
#: Nodes the impossible gang can reach: one short of its members.
IMPOSSIBLE_REACH = IMPOSSIBLE_MEMBERS - 1


def _impossible(key: str, name: str, nodes: int, *, confined: bool, notes: str) -> Workload:
    reach = tuple(node_name(i) for i in range(IMPOSSIBLE_REACH))
    group = Group(name, IMPOSSIBLE_MEMBERS)
    pods = tuple(
        Member(
            f"{name}-{m:02d}",
            NODE_GPUS,
            cpu_millis=32000,
            memory_mib=262144,
            group=name,
            hosts=reach if confined else (),
        )
        for m in range(IMPOSSIBLE_MEMBERS)
    )
    # Every node the gang may not reach is full (one whole-node pod bound to it), or, when
    # the gang is confined to `reach` by affinity, left empty.
    prefill = (
        ()
        if confined
        else tuple(
            Member(f"fill-{i:04d}", NODE_GPUS, node=node_name(i))
            for i in range(IMPOSSIBLE_REACH, nodes)
        )
    )
    gpus = IMPOSSIBLE_MEMBERS * NODE_GPUS
    return Workload(
        key,
        f"one {gpus}-GPU gang ({IMPOSSIBLE_MEMBERS} × {NODE_GPUS} GPUs) that {IMPOSSIBLE_REACH} "
        f"free nodes of {nodes} must hold",
        nodes,
        (group,),
        pods,
        feasible_gangs=0,
        all_fit=False,
        notes=notes,
        prefill=prefill,
        impossible=True,
        gated=True,
    )


def unschedulable_wide(scale: float) -> Workload:
    return _impossible(
        "unschedulable-wide",
        "wide",
        _n(1000, scale, 20),
        confined=True,
        notes=f"Impossible for good: required node affinity lets its members use only "
        f"{IMPOSSIBLE_REACH} nodes (all empty). Each member fits alone.",
    )


def unschedulable_full(scale: float) -> Workload:
    return _impossible(
        "unschedulable-full",
        "full",
        _n(1000, scale, 20),
        confined=False,
        notes=f"Impossible only while the cluster is full: every node but {IMPOSSIBLE_REACH} "
        "holds a whole-node pod, bound before the scheduler starts. Each member fits alone.",
    )


Builder = Callable[[float], Workload]

BUILDERS: dict[str, Builder] = {
    "singles": singles,
    "gangs": gangs,
    "contended": contended,
    "big-gang": big_gang,
    "plans": plans,
    "upstream-small-gangs": upstream_small_gangs,
    "upstream-big-gangs": upstream_big_gangs,
    "unschedulable-wide": unschedulable_wide,
    "unschedulable-full": unschedulable_full,
}

#: Names on the command line that stand for several workloads.
ALIASES = {
    "upstream": ("upstream-small-gangs", "upstream-big-gangs"),
    "unschedulable": ("unschedulable-wide", "unschedulable-full"),
}


def expand(keys: Iterable[str]) -> list[str]:
    """Workload keys with every alias replaced by what it stands for, each once, in order."""
    out: list[str] = []
    for key in keys:
        for name in ALIASES.get(key, (key,)):
            if name not in out:
                out.append(name)
    return out


def build(keys: Iterable[str], scale: float) -> list[Workload]:
    return [BUILDERS[k](scale) for k in keys]


# ---- the feasibility reference --------------------------------------------------------------


def feasible_gangs(work: Workload) -> int:
    """Gangs an offline all-or-nothing packer places on the empty cluster.

    Gangs are taken in the order their last member arrives (when a gang scheduler could first
    place them whole); each member goes best-fit (the fullest node it fits), a gang that does
    not fit whole is skipped. Greedy, so a reference rather than the optimum.
    """
    free = [NODE_GPUS] * work.nodes
    by_group: dict[str, list[Member]] = {}
    completed: list[str] = []
    sizes = work.group_sizes()
    for m in work.pods:
        if m.group is None:
            continue
        by_group.setdefault(m.group, []).append(m)
        if len(by_group[m.group]) == sizes[m.group]:
            completed.append(m.group)
    placed = 0
    for name in completed:
        trial = list(free)
        ok = True
        for m in sorted(by_group[name], key=lambda x: -x.gpus):
            fits = [i for i, f in enumerate(trial) if f >= m.gpus]
            if not fits:
                ok = False
                break
            best = min(fits, key=lambda i: (trial[i], i))
            trial[best] -= m.gpus
        if ok:
            free = trial
            placed += 1
    return placed


def _with_feasible(work: Workload) -> Workload:
    return dataclasses.replace(work, feasible_gangs=feasible_gangs(work))


def describe(works: Sequence[Workload]) -> list[dict[str, Any]]:
    return [
        {
            "key": w.key,
            "title": w.title,
            "nodes": w.nodes,
            "pods": len(w.pods),
            "gangs": len(w.groups),
            "gpus_demanded": w.gpus_demanded,
            "gpus_in_cluster": w.nodes * NODE_GPUS,
            "feasible_gangs": w.feasible_gangs,
            "prefilled_pods": len(w.prefill),
            "impossible": w.impossible,
            "notes": w.notes,
        }
        for w in works
    ]


# ---- the NVL72 churn workload (topology) ----------------------------------------------------
#
# Unlike the five above (all pods at once, run to completion or saturation), jobs here arrive
# over time, run for a while once whole, and are deleted: the steady state of a busy GPU
# cluster, where fragmentation builds up. bench/churn.py runs it, bench/report_topology.py
# reports it.

SPINE_LABEL = "network.topology.nvidia.com/spine"
LEAF_LABEL = "network.topology.nvidia.com/leaf"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
TOPOLOGY_REQUIRED = "phalanx.io/topology-required"
TOPOLOGY_PREFERRED = "phalanx.io/topology-preferred"
#: Only the NVL72 nodes carry it; the churn jobs select it, so nodes other workloads made
#: (8-GPU bench nodes in the same control plane) are never used.
POOL_LABEL = "bench.phalanx.io/pool"
NVL72_POOL = "nvl72"
JOB_LABEL = "bench.phalanx.io/job"
NVL72_GPUS = 4  # per node: GB200 NVL72 trays
NVL72_PER_CLIQUE = 18
CLIQUES_PER_LEAF = 4
#: Offered load: GPU-seconds asked per second, as a fraction of the cluster's GPUs. Busy but
#: not saturated: at 75% about four cliques' worth of GPUs are free on average, so how many
#: of them are whole cliques is the scheduler's doing.
TOPOLOGY_LOAD = 0.75


@dataclass(frozen=True, slots=True)
class JobShape:
    """One kind of job: `members` pods of `gpus` GPUs, its topology intent, how often."""

    key: str
    members: int
    gpus: int
    required: str = ""
    preferred: str = ""
    weight: int = 1

    @property
    def total_gpus(self) -> int:
        return self.members * self.gpus

    @property
    def size_class(self) -> str:
        total = self.total_gpus
        return "small (4-8 GPUs)" if total <= 8 else (
            "medium (16-32 GPUs)" if total <= 32 else "rack-sized (64-72 GPUs)"
        )  # fmt: skip


#: From a single 4-GPU job of four 1-GPU pods (it breaks a node and a clique) to a whole
#: NVL72 rack. Big jobs must own one NVLink domain; medium ones prefer one.
JOB_SHAPES = (
    JobShape("4gpu", 4, 1, weight=30),
    JobShape("8gpu", 2, 4, preferred=CLIQUE_LABEL, weight=25),
    JobShape("16gpu", 4, 4, preferred=CLIQUE_LABEL, weight=20),
    JobShape("32gpu", 8, 4, required=LEAF_LABEL, preferred=CLIQUE_LABEL, weight=12),
    JobShape("64gpu", 16, 4, required=CLIQUE_LABEL, weight=6),
    JobShape("72gpu", 18, 4, required=CLIQUE_LABEL, weight=7),
)


@dataclass(frozen=True, slots=True)
class Job:
    """One job: a PodGroup of `shape.members` pods created at `arrival` (seconds from the
    start of the run); once all are bound it runs `duration` seconds, then is deleted."""

    name: str
    shape: JobShape
    arrival: float
    duration: float

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(f"{self.name}-{m:02d}" for m in range(self.shape.members))

    @property
    def annotations(self) -> dict[str, str]:
        notes = {}
        if self.shape.required:
            notes[TOPOLOGY_REQUIRED] = self.shape.required
        if self.shape.preferred:
            notes[TOPOLOGY_PREFERRED] = self.shape.preferred
        return notes


@dataclass(frozen=True, slots=True)
class ChurnWorkload:
    key: str
    title: str
    cliques: int
    jobs: tuple[Job, ...]
    #: Seconds after the last arrival the run may go on for jobs still running or waiting.
    drain_seconds: float
    #: The steady state starts once the first jobs could have finished (the longest
    #: duration): the figures over time leave out the empty cluster before it.
    warmup_seconds: float = 0.0
    notes: str = ""

    @property
    def nodes(self) -> int:
        return self.cliques * NVL72_PER_CLIQUE

    @property
    def gpus(self) -> int:
        return self.nodes * NVL72_GPUS

    @property
    def arrival_window(self) -> float:
        return max((j.arrival for j in self.jobs), default=0.0)


def nvl72_node_name(clique: int, node: int) -> str:
    return f"nvl-c{clique:02d}-n{node:02d}"


def nvl72_node_labels(clique: int) -> dict[str, str]:
    """Topograph's spine and leaf labels and GPU Feature Discovery's clique (the launcher
    adds hostname and the other GFD labels)."""
    return {
        POOL_LABEL: NVL72_POOL,
        SPINE_LABEL: "spine-0",
        LEAF_LABEL: f"leaf-{clique // CLIQUES_PER_LEAF}",
        CLIQUE_LABEL: f"clique-{clique:02d}",
    }


def topology(scale: float) -> ChurnWorkload:
    """16 cliques of 18 four-GPU nodes at full size (4 at --quick), four cliques per leaf,
    one spine; jobs from JOB_SHAPES arrive as a Poisson process at TOPOLOGY_LOAD."""
    cliques = max(4, round(16 * scale))
    quick = scale < 0.5
    window = 45.0 if quick else 180.0
    low, high = (8.0, 20.0) if quick else (20.0, 60.0)
    rng = random.Random(SEED + 72)
    weights = [s.weight for s in JOB_SHAPES]
    mean_gpus = sum(s.total_gpus * s.weight for s in JOB_SHAPES) / sum(weights)
    gpus = cliques * NVL72_PER_CLIQUE * NVL72_GPUS
    rate = TOPOLOGY_LOAD * gpus / (mean_gpus * (low + high) / 2)  # jobs per second
    jobs: list[Job] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t > window:
            break
        shape = rng.choices(JOB_SHAPES, weights)[0]
        duration = round(rng.uniform(low, high), 1)
        jobs.append(Job(f"j{len(jobs):04d}-{shape.key}", shape, round(t, 2), duration))
    return ChurnWorkload(
        "topology",
        f"{len(jobs)} jobs of 4-72 GPUs arriving over {window:.0f}s on {cliques} NVL72 "
        f"cliques ({cliques * NVL72_PER_CLIQUE} four-GPU nodes, {gpus} GPUs), "
        f"{TOPOLOGY_LOAD:.0%} offered load, each running {low:.0f}-{high:.0f}s once whole",
        cliques,
        tuple(jobs),
        drain_seconds=60.0 if quick else 150.0,
        warmup_seconds=high,
        notes="Jobs of 64 and 72 GPUs require one NVLink clique; 32-GPU jobs require one leaf "
        "and prefer a clique; 8- and 16-GPU jobs prefer a clique; 4-GPU jobs (four 1-GPU pods) "
        "state nothing. The peers do not read the topology annotations: their placements are "
        "measured against the same rules.",
    )


CHURN_BUILDERS = {"topology": topology}


def group_path(dialect: Dialect, namespace: str) -> str:
    """Where a namespace's gang objects of `dialect` live."""
    api = UPSTREAM_PODGROUP_API if dialect == "upstream" else PODGROUP_API
    return f"/apis/{api}/namespaces/{namespace}/podgroups"


def job_pod_body(
    job: Job, member: str, scheduler_name: str, dialect: Dialect = "scheduler-plugins"
) -> dict[str, Any]:
    """A member of `job`: the pool's node selector, the job label (deleted by it)."""
    body = pod_body(
        Member(
            member,
            job.shape.gpus,
            cpu_millis=1000 * job.shape.gpus,
            memory_mib=4096 * job.shape.gpus,
            group=job.name,
        ),
        scheduler_name,
        dialect,
    )
    body["metadata"]["labels"][JOB_LABEL] = job.name
    body["spec"]["nodeSelector"] = {POOL_LABEL: NVL72_POOL}
    return body


def job_podgroup_body(job: Job, dialect: Dialect = "scheduler-plugins") -> dict[str, Any]:
    """The job's gang. Upstream's PodGroup states one required level, as its node label key
    (`schedulingConstraints.topology`), and has no preferred level: native gets only that."""
    body = podgroup_body(Group(job.name, job.shape.members, job.annotations), dialect)
    body["metadata"]["labels"] = {JOB_LABEL: job.name}
    if dialect == "upstream" and job.shape.required:
        body["spec"]["schedulingConstraints"] = {"topology": [{"key": job.shape.required}]}
    return body
