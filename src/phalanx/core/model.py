"""The cluster model: frozen, slotted value types the rest of the core reasons about.

Raw Kubernetes objects never get past `phalanx.core.inventory`; everything here is already
validated and typed. Units: CPU in millicores, memory and storage in bytes, every other
resource in whole units (Kubernetes extended resources are integers).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # DRA values ride on nodes and pods; their modules build on this one
    from phalanx.core.dra_demand import DeviceNeeds
    from phalanx.core.dra_inventory import InstalledDevices

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
# Devices published through Dynamic Resource Allocation count in synthetic resources (see
# phalanx.core.dra): one per device class, one per class and device shape, and this total of
# GPU-like devices (whole GPUs and MIG devices), the DRA twin of nvidia.com/gpu in gpus().
DRA_GPU = "dra.phalanx.io/gpu"
# A DRA node offers an extended resource a DeviceClass serves (`nvidia.com/gpu` from the
# class's devices, KEP-5004) under its own name too; this is how many it offers under GPU
# names, whose GPUs `dra.phalanx.io/gpu` already counts, so `gpus()` counts them once.
DRA_GPU_SERVED = "served.dra.phalanx.io/gpu"

# A Kubernetes label value may be at most 63 characters; a qualified key at most 253 + 63.
ANNOTATION_PREFIX = "phalanx.io/"


def is_gpu_resource(name: str) -> bool:
    """Whether a resource name counts as GPUs (whole devices or MIG slices)."""
    return name in (NVIDIA_GPU, AMD_GPU, DRA_GPU) or name.startswith(MIG_PREFIX)


class Resources(Mapping[str, int]):
    """An immutable resource vector: name -> integer amount; absent names are zero.

    Zero entries are dropped so two equal vectors compare and hash equal.
    """

    __slots__ = ("_amounts", "_gpus", "_hash")

    def __init__(self, amounts: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = amounts.items() if isinstance(amounts, Mapping) else amounts
        self._amounts: dict[str, int] = {k: v for k, v in items if v != 0}
        self._hash: int | None = None
        self._gpus: int | None = None

    def __getitem__(self, name: str) -> int:
        return self._amounts[name]

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]  # always an int
        return self._amounts.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._amounts.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._amounts == other._amounts
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in sorted(self._amounts.items()))
        return f"Resources({inner})"

    def __add__(self, other: Resources) -> Resources:
        if not other:
            return self
        if not self:
            return other
        merged = dict(self._amounts)
        for k, v in other._amounts.items():
            merged[k] = merged.get(k, 0) + v
        return Resources(merged)

    def __sub__(self, other: Resources) -> Resources:
        if not other:
            return self
        merged = dict(self._amounts)
        for k, v in other._amounts.items():
            merged[k] = merged.get(k, 0) - v
        return Resources(merged)

    def scaled(self, factor: int) -> Resources:
        return Resources({k: v * factor for k, v in self._amounts.items()})

    def fits_in(self, free: Resources) -> bool:
        """Whether this request fits in `free` (every requested name has enough)."""
        amounts = free._amounts
        return all(v <= amounts.get(k, 0) for k, v in self._amounts.items() if v > 0)

    def shortfall(self, free: Resources) -> dict[str, int]:
        """Per resource, how much is missing for this request to fit in `free`."""
        return {
            k: v - free.get(k)
            for k, v in sorted(self._amounts.items())
            if v > 0 and v > free.get(k)
        }

    def times_fits_in(self, free: Resources, limit: int) -> int:
        """How many copies of this request fit in `free`, capped at `limit`."""
        count = limit
        amounts = free._amounts
        for k, v in self._amounts.items():
            if v > 0:
                have = amounts.get(k, 0)
                if have < v:
                    return 0
                copies = have // v
                # Not min(): a call per resource on every node of every plan.
                if copies < count:  # noqa: PLR1730
                    count = copies
        return count

    def gpus(self) -> int:
        """Total GPU-like units (whole GPUs and MIG slices) in this vector."""
        if self._gpus is None:
            counted = sum(v for k, v in self._amounts.items() if is_gpu_resource(k))
            self._gpus = counted - self._amounts.get(DRA_GPU_SERVED, 0)
        return self._gpus

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self._amounts.items()))


EMPTY = Resources()


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: TaintEffect


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration; `key=""` with operator Exists tolerates every taint."""

    key: str = ""
    operator: str = "Equal"  # "Equal" or "Exists"
    value: str = ""
    effect: TaintEffect | None = None  # None tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.key == taint.key and self.value == taint.value


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One `matchExpressions` (label) or `matchFields` (field, only `metadata.name`) entry."""

    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """Requirements ANDed together; a pod's required affinity ORs its terms."""

    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """What the device plugin and GPU Feature Discovery say about a node's GPUs."""

    vendor: str = "nvidia"  # "nvidia" or "amd"
    count: int = 0  # allocatable whole GPUs
    product: str = ""
    memory_mib: int = 0  # per GPU
    family: str = ""
    clique: str = ""  # multi-node NVLink domain; "" when the node is its own domain
    replicas: int = 1  # time-slicing / MPS replicas per physical GPU
    sharing_strategy: str = "none"
    mig: Mapping[str, int] = field(default_factory=dict)  # MIG resource name -> allocatable


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    gpu: GpuInfo | None = None
    uid: str = ""
    # DRA: the devices its ResourceSlices publish (None: none), set by
    # `phalanx.core.dra_demand.node_with_devices` with their free counts in `allocatable`.
    devices: InstalledDevices | None = None

    @property
    def schedulable(self) -> bool:
        """Ready and not cordoned (taints are judged per pod)."""
        return self.ready and not self.unschedulable


# `PodClaimRef.name` of the claim kube-scheduler makes for a pod's extended resources.
EXTENDED_CLAIM_ENTRY = "extended-resources"


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One `spec.resourceClaims` entry of a pod (or of an upstream PodGroup, 1.37): which
    ResourceClaim it uses, or will use.

    `claim` is `resourceClaimName`, or for a template the name kube's resourceclaim
    controller generated (`status.resourceClaimStatuses`); "" while not generated yet.
    """

    name: str  # the entry's name inside the pod
    claim: str = ""
    template: str = ""  # resourceClaimTemplateName; "" for a claim named directly
    # The controller decided no claim was needed (a status entry without a name).
    not_needed: bool = False
    # The claim kube-scheduler made for the pod's extended resources served by DRA
    # (`status.extendedResourceClaimStatus`, KEP-5004), not one of `spec.resourceClaims`.
    extended: bool = False


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class Dialect(StrEnum):
    """An API a pod's gang is declared in (see `phalanx.core.groups` for the precedence)."""

    SCHEDULER_PLUGINS = "scheduler-plugins"  # scheduling.x-k8s.io PodGroup + pod label
    ANNOTATIONS = "annotations"  # phalanx.io/pod-group + phalanx.io/min-member on the pods
    UPSTREAM = "upstream"  # scheduling.k8s.io Workload / PodGroup + the pod's spec field
    VOLCANO = "volcano"  # scheduling.volcano.sh PodGroup + scheduling.k8s.io/group-name
    KAI = "kai"  # scheduling.run.ai PodGroup (NVIDIA KAI Scheduler) + pod-group-name
    GROVE = "grove"  # scheduler.grove.io PodGang (NVIDIA Grove) + label grove.io/podgang
    # Kueue's plain pod groups: kueue.x-k8s.io/pod-group-name + pod-group-total-count on the
    # pods, no gang object (Kueue admits the group; Phalanx places it whole).
    KUEUE = "kueue"
    # LeaderWorkerSet groups whose pods opt in (phalanx.io/leaderworkerset-gang: "true"):
    # LWS's labels and size annotation on the pods, no gang object.
    LWS = "lws"
    # Apache YuniKorn's task groups: an application id and yunikorn.apache.org/task-group-name
    # on the pods, the application's task-groups JSON on one or more of them; no gang object.
    YUNIKORN = "yunikorn"
    # scheduling.k8s.io CompositePodGroup (1.37): no pod names one; its upstream PodGroups'
    # pods are its members when it is the topmost `gang` composite above them.
    COMPOSITE = "composite"


class DisruptionMode(StrEnum):
    """Upstream's `spec.disruptionMode` (PodGroup, CompositePodGroup; 1.36+): whether the
    pods beneath may be preempted one by one or only all together (`phalanx.core.preempt`)."""

    SINGLE = "single"  # upstream's default: the members may go one by one
    ALL = "all"  # every pod beneath goes together, or none does


# A pod's `spec.preemptionPolicy` when it sets none (as kube-scheduler reads it), and the
# other value the API allows.
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"


@dataclass(frozen=True, slots=True)
class MemberRules:
    """What kube-scheduler's pod-group cycle requires of an upstream PodGroup's pods before
    it schedules any of them (`validatePodGroup`), by the release whose API the PodGroup is
    read in: it fails every cycle of the group's pods otherwise, and never filters or binds
    one. Judged by `phalanx.core.groups.member_rules`.

    1.36 (`v1alpha2`): its pending pods name one `spec.schedulerName`. 1.37 (`v1beta1`,
    `v1alpha3`): its pending and bound pods name one, each pod's priority is `priority`,
    and each pod's preemption policy is `preemption_policy` or, when that is "", the same
    as the others'."""

    release: str  # "1.36" | "1.37"
    priority: int = 0  # `spec.priority` (unset: 0, as kube-scheduler reads it)
    # `spec.preemptionPolicy`: set only with the PodGroupPreemptionPolicy gate, whose API
    # server then defaults it, and kube-scheduler then holds every pod to it; "": unset
    # (the gate off), the pods' policies need only agree.
    preemption_policy: str = ""

    @property
    def names_only(self) -> bool:
        """1.36's rules: only the pending pods' scheduler names are checked."""
        return self.release == "1.36"


_DIALECT_PREFIXES = frozenset(d.value for d in Dialect if d is not Dialect.SCHEDULER_PLUGINS)


@dataclass(frozen=True, slots=True)
class GroupRef:
    """Which gang a pod belongs to: the API object that holds (or would hold) the gang.

    `GroupRef(namespace, name)` is a scheduler-plugins PodGroup. Annotation-only gangs
    share those names on purpose: a label and an annotation naming one group agree, and a
    PodGroup object of that name, once it exists, gives the settings. Other dialects have
    names of their own, so a Volcano PodGroup "job" and a scheduler-plugins PodGroup "job"
    in one namespace are two gangs.
    """

    namespace: str
    name: str  # the object's name: a PodGroup, or the Workload of an upstream v1alpha1 gang
    dialect: Dialect = Dialect.SCHEDULER_PLUGINS
    pod_group: str = ""  # upstream v1alpha1: the Workload's spec.podGroups[].name
    replica: str = ""  # upstream v1alpha1: the pod's spec.workloadRef.podGroupReplicaKey
    # `key`, made once: the cache, the barrier and the planner look gangs up by it at every
    # watch event and verb, and formatting it at each lookup showed in every profile.
    _key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = "/".join(part for part in (self.pod_group, self.replica) if part)
        path = f"{self.namespace}/{self.name}" + (f"/{parts}" if parts else "")
        if self.dialect is not Dialect.SCHEDULER_PLUGINS:
            path = f"{self.dialect.value}:{path}"
        object.__setattr__(self, "_key", path)

    @property
    def key(self) -> str:
        """Unique and readable: `ns/name`, `volcano:ns/name`, `kai:ns/name`, `grove:ns/name`,
        `kueue:ns/name`, `yunikorn:ns/name`, `lws:ns/name`, `upstream:ns/name`, or
        `upstream:ns/workload/podgroup[/replica]` (names never contain "/")."""
        return self._key

    @property
    def object_ref(self) -> GroupRef:
        """The API object that holds this gang (the Workload, for a Workload's pod group):
        where status and Events go."""
        if not self.pod_group and not self.replica:
            return self
        return GroupRef(self.namespace, self.name, self.dialect)

    @classmethod
    def parse(cls, key: str) -> GroupRef:
        """The reference `key` names: the inverse of `key`, and the one place a key is taken
        apart (the cache keys gangs by it; commit records and the CLI carry it as text)."""
        dialect = Dialect.SCHEDULER_PLUGINS
        head, colon, rest = key.partition(":")
        if colon and head in _DIALECT_PREFIXES:
            dialect, key = Dialect(head), rest
        namespace, name, pod_group, replica = [*key.split("/", 3), "", "", ""][:4]
        return cls(namespace, name, dialect, pod_group, replica)

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod's identity from the wire to the binder: namespace, name and UID ("" if unknown)."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, key: str, uid: str = "") -> PodRef:
        """The pod a `namespace/name` key names (commit records store pods by key)."""
        namespace, _, name = key.partition("/")
        return cls(namespace, name, uid)

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True, slots=True)
class Binding:
    """Bind this pod to this node: asked by kube-scheduler, held by the barrier, written by
    the source."""

    pod: PodRef
    node: str


@dataclass(frozen=True, slots=True)
class Claim:
    """What one dialect says about a pod's gang. `ref` is None when the pod names a group
    of this dialect in a way that cannot be read (`problems` says why)."""

    dialect: Dialect
    ref: GroupRef | None
    problems: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.dialect.value} group {self.ref.key}" if self.ref else self.dialect.value


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    requests: Resources
    node_name: str = ""
    phase: PodPhase = PodPhase.PENDING
    scheduler_name: str = "default-scheduler"
    labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # None: no required node affinity; otherwise the ORed terms.
    required_affinity: tuple[SelectorTerm, ...] | None = None
    group: GroupRef | None = None
    plan_node: str = ""  # phalanx.io/plan-node
    gpu_memory_mib: int = 0  # phalanx.io/gpu-memory-mib: minimum memory per GPU
    priority: int = 0
    # `spec.preemptionPolicy`: an upstream PodGroup's pods must agree on it (`MemberRules`).
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    deleting: bool = False
    # Group settings declared on the pod itself (annotation-only groups).
    min_member: int | None = None
    timeout_seconds: int | None = None
    placement: str = ""  # raw phalanx.io/placement on the pod, "" when absent
    # Topology intent declared on the pod (phalanx.io/topology-* or Kueue's podset-*
    # annotations); None when it declares none. Level names are checked at group resolution.
    topology: TopologyConstraint | None = None
    # Why Phalanx cannot schedule this pod (a malformed phalanx.io/* annotation); "" when fine.
    # The pod still counts toward its node's usage when bound.
    invalid: str = ""
    # metadata.resourceVersion when read from the API (not compared: the same pod, later).
    resource_version: str = field(default="", compare=False)
    # The dialect whose claim gave `group` (None: no dialect claimed the pod); not compared:
    # `group` and the labels already decide it. Then the claims of other dialects that
    # named a different gang and lost (precedence, see `phalanx.core.groups.registry`).
    group_dialect: Dialect | None = field(default=None, compare=False)
    overruled: tuple[Claim, ...] = ()
    # DRA: the pod's `spec.resourceClaims`, and the demand derived from them and the
    # cluster's claims, templates and classes (`phalanx.core.dra_demand.pod_with_demand`;
    # None: not derived, so a pod with claims cannot be placed yet).
    resource_claims: tuple[PodClaimRef, ...] = ()
    devices: DeviceNeeds | None = None
    # Upstream `spec.schedulingGroup.podGroupName` (1.36+), "" for none: a claim this
    # PodGroup controls serves the pod's matching entry (`dra_demand.pod_demand`).
    scheduling_group: str = ""
    # What of the pod only kube-scheduler's own filters judge (host ports, inter-pod
    # affinity, volumes, ...; `phalanx.core.unjudged`); "" when Phalanx judges all of it,
    # so the barrier may bind it with its gang before its own cycle.
    unjudged: str = ""
    # The Volcano task the pod belongs to (`volcano.sh/task-spec`), or its YuniKorn task group
    # (`yunikorn.apache.org/task-group-name`); "" when it names none.
    task: str = ""
    # The (name, minMember) task groups a YuniKorn member declares for its application
    # (`yunikorn.apache.org/task-groups`); None when it declares none (`groups.yunikorn`).
    task_groups: tuple[tuple[str, int], ...] | None = None
    # The reason of its `PodScheduled` condition while that is False ("" when True or
    # absent). A bound pod still saying so was bound here while kube-scheduler's own cycle
    # of it failed (`ClusterState.take_misreported`).
    unscheduled: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)

    @property
    def terminal(self) -> bool:
        return self.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)

    @property
    def departing(self) -> bool:
        """Finished, or being deleted: no longer one of its gang's members."""
        return self.terminal or self.deleting


class PolicyKind(StrEnum):
    PACK = "pack"
    SAME_NODE = "same-node"
    SPREAD = "spread"
    INTERCONNECT_LOCAL = "interconnect-local"
    DOMAIN = "domain"


@dataclass(frozen=True, slots=True)
class Placement:
    """A group's placement policy (`phalanx.io/placement`)."""

    kind: PolicyKind = PolicyKind.PACK
    domain_key: str = ""  # the node label for `domain:<key>`

    def __str__(self) -> str:
        return f"domain:{self.domain_key}" if self.kind is PolicyKind.DOMAIN else self.kind.value


def task_names(tasks: Iterable[str]) -> str:
    """Slice tasks as messages name them: sorted, subgroup indices by number, and a run of
    them from 0 as a range (an LWS group may have hundreds)."""
    names = sorted(tasks, key=lambda name: (not name.isdigit(), len(name), name))
    if len(names) > 3 and names == [str(i) for i in range(len(names))]:
        return f"0..{len(names) - 1}"
    return ", ".join(names)


def tasks_in_levels(
    noun: str, levels: Iterable[tuple[str, str]], *, each: str = "each in one", then: str = "in one"
) -> str:
    """Slice tasks and their levels as messages name them, by level, in the order of their
    names: `subgroup(s) decode, prefill each in one rack`, or with levels of their own
    `subgroup(s) decode each in one spine, prefill in one rack`."""
    by_level: dict[str, list[str]] = {}
    for task, level in levels:
        by_level.setdefault(level, []).append(task)
    shown = sorted((task_names(tasks), level) for level, tasks in by_level.items())
    if not shown:
        return ""
    (names, level), *rest = shown
    return f"{noun}(s) {names} {each} {level}" + "".join(
        f", {names} {then} {level}" for names, level in rest
    )


@dataclass(frozen=True, slots=True)
class TaskSet:
    """Tasks (`Pod.task`) whose members must all lie in one domain of `level` together,
    narrower than the gang's own domain and at least as wide as each task's own level: a
    KAI parent subgroup's leaves, a Grove `topologyConstraintGroupConfigs` entry's
    podgroups. A gang's sets nest or are disjoint."""

    label: str  # what the set is, for people: "subgroup prefill"
    tasks: tuple[str, ...]  # sorted
    level: str  # a node label key, or a level name (as `TopologyConstraint`'s levels)
    field: str = ""  # where it is declared, named when it cannot be honoured

    def __str__(self) -> str:
        return f"{self.label} ({task_names(self.tasks)}) together in one {self.level}"


@dataclass(frozen=True, slots=True)
class TaskPreference:
    """A task's or a set of tasks' preferred level, best effort: its members in one domain of
    `level` if the gang can be placed so, else one level wider at a time, up to its own
    required level (or the gang's domain): a KAI subgroup's `preferredTopologyLevel`, a
    Grove podgroup's or constraint group's `preferred` key. `together`: a set of tasks held
    as one (`TaskSet`), else one task's own level (`tasks` is then that task alone)."""

    label: str  # what it is, for people: "subgroup decode"
    tasks: tuple[str, ...]  # sorted
    level: str  # a node label key, or a level name (as `TopologyConstraint`'s levels)
    field: str = ""  # where it is declared, named when it cannot be honoured
    together: bool = False

    def __str__(self) -> str:
        return f"{self.label} preferably in one {self.level}"


@dataclass(frozen=True, slots=True)
class SubGroupPolicy:
    """A Volcano `spec.subGroupPolicy` entry, as far as placement goes: the pods its label
    selector (`match_labels` and `match_expressions`, ANDed) picks are cut into subgroups by
    their values of `keys`, and each subgroup's members lie in one domain of `required`
    and, best effort, of `preferred` (level names, as `TopologyConstraint`'s; "" none).
    A pod is in the first policy, in the object's order, that picks it and whose every key
    it has a value of (`phalanx.core.subgroups.subgroup_of`)."""

    name: str
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[SelectorRequirement, ...] = ()
    keys: tuple[str, ...] = ()
    required: str = ""
    preferred: str = ""


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """A gang's topology intent as declared: level names are node label keys, or `tier:<n>`
    (a Volcano HyperNode tier: the n-th level counted up from the narrowest above a node),
    not yet checked against the configured topologies (`resolve_topology` does that).

    Every field empty means "no constraint" (Kueue's podset-unconstrained-topology).
    """

    topology: str = ""  # phalanx.io/topology: which named topology; "" = the default one
    required: str = ""  # hard: the whole gang inside one domain of this level
    preferred: str = ""  # soft: one domain of this level, else one level wider at a time
    slice_size: int = 0  # 0: no slices; else every consecutive slice of n members ...
    slice_required: str = ""  # ... inside one domain of this level
    # Wider slices around those (Kueue's multi-layer slices), outermost first: (size, level)
    # for each, every consecutive run of `size` members by rank inside one domain of
    # `level`; each size a multiple of the next one's (the last one's: `slice_size`).
    slice_layers: tuple[tuple[int, str], ...] = ()
    # True for upstream's PodGroup field (`spec.schedulingConstraints.topology[0].key`), which
    # the API server accepts for any node label: a `required` key no configured topology has
    # is then a one-level topology of that label. Phalanx's and Kueue's annotations keep to
    # the configured levels, so a typo there is refused.
    any_label: bool = False
    # A composite gang's child PodGroups (by name) that each have every member inside one
    # domain of `slice_required` (their own `spec.schedulingConstraints.topology` key).
    slice_tasks: tuple[str, ...] = ()
    # What `slice_tasks` name, in messages: a composite's child PodGroups, KAI's subgroups,
    # Grove's podgroups, or a LeaderWorkerSet group's subgroups (by index).
    slice_noun: str = "PodGroup"
    # Slice tasks that do not share one level: (task, level) for each of `slice_tasks`,
    # sorted by task, and `slice_required` is "". Empty when they share `slice_required`.
    task_levels: tuple[tuple[str, str], ...] = ()
    # Sets of tasks each held in one domain of a level of its own (`TaskSet`), sorted by
    # label; the tasks need not be in `slice_tasks`.
    task_sets: tuple[TaskSet, ...] = ()
    # Tasks' and sets' preferred levels (`TaskPreference`), sorted by label; tried inside
    # the gang's domain, never making a gang that fits without them unfit.
    preferences: tuple[TaskPreference, ...] = ()
    # Volcano's subgroup policies (`SubGroupPolicy`), every one in the object's order when
    # one has a network topology of its own: which members share a domain is known only
    # from their labels (a pod is in the first policy that picks it).
    subgroups: tuple[SubGroupPolicy, ...] = ()
    # Where the intent is declared, named when members disagree on it or it cannot be
    # honoured ("" when it is the topology annotations' own).
    declared_by: str = ""

    def __str__(self) -> str:
        parts = []
        if self.topology:
            parts.append(f"topology {self.topology}")
        if self.required:
            parts.append(f"required {self.required}")
        if self.preferred:
            parts.append(f"preferred {self.preferred}")
        parts.extend(f"slices of {size} in {level}" for size, level in self.slice_layers)
        if self.slice_size:
            parts.append(f"slices of {self.slice_size} in {self.slice_required}")
        if self.slice_tasks:
            parts.append(tasks_in_levels(self.slice_noun, self.levels_of_tasks()))
        parts.extend(str(s) for s in self.task_sets)
        parts.extend(str(p) for p in self.preferences)
        for policy in self.subgroups:
            if not policy.required and not policy.preferred:
                continue
            levels = [f"in one {policy.required}"] if policy.required else []
            levels += [f"preferably in one {policy.preferred}"] if policy.preferred else []
            parts.append(f"each subgroup of policy {policy.name} {' and '.join(levels)}")
        return ", ".join(parts) or "unconstrained"

    def levels_of_tasks(self) -> tuple[tuple[str, str], ...]:
        """(task, level) for each of `slice_tasks`, sorted by task."""
        if self.task_levels:
            return self.task_levels
        return tuple((task, self.slice_required) for task in sorted(self.slice_tasks))


DEFAULT_TIMEOUT_SECONDS = 60


class TaskGroupMinima(tuple[tuple[str, int], ...]):
    """(task group, minMember) pairs read from a YuniKorn application's
    `yunikorn.apache.org/task-groups`: enforced exactly as Volcano's `spec.minTaskMember`
    (equal to the plain tuple of the same pairs); the type only names their source in
    messages (`registry.minima_field`)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ChildGroups:
    """A composite gang's quorum (upstream CompositePodGroup, `gang` policy): at least
    `min_groups` of `children` satisfied at once. A child is a PodGroup, as (its name, the
    members it needs: its `minCount`, 1 for a `basic` one), or a nested `gang` composite,
    satisfied by its own quorum. A member's `Pod.task` is the name of its PodGroup."""

    name: str  # the CompositePodGroup's name
    min_groups: int
    children: tuple[tuple[str, int] | ChildGroups, ...]
    # A nested `basic` composite: counted by one satisfied child, but no gang of its own, so
    # preemption holds it to nothing (`phalanx.core.preempt`).
    basic: bool = False

    # In messages: what a leaf is and what its minimum is called (KAI's in `SubGroupTree`).
    LEAF: ClassVar[str] = "PodGroup"
    LEAF_MINIMUM: ClassVar[str] = "minCount"

    def label(self) -> str:
        """This node, for people."""
        return f"CompositePodGroup {self.name}"

    def pod_groups(self) -> Iterator[tuple[str, int]]:
        """Every leaf beneath (a PodGroup, or KAI's leaf subgroup), with the members it
        needs, depth first."""
        for child in self.children:
            if isinstance(child, ChildGroups):
                yield from child.pod_groups()
            else:
                yield child


@dataclass(frozen=True, slots=True)
class SubGroupTree(ChildGroups):
    """KAI's nested subgroups (`spec.subGroups` with `parent` or `minSubGroup`), quorum as
    a composite's: a node is the PodGroup (name "") or a subgroup with child subgroups,
    satisfied by `min_groups` of them (its `minSubGroup`, else all); a leaf is a subgroup
    holding pods, (its name, its `minMember`). A member's `Pod.task` is its leaf's name."""

    LEAF = "subgroup"
    LEAF_MINIMUM = "minMember"

    def label(self) -> str:
        return f"subgroup {self.name}" if self.name else "PodGroup"


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A gang: at least `min_member` of its pods are placed together, or none are.

    Equality covers every setting that changes a plan (size, policy, topology), so a
    changed object compares unequal; status and bookkeeping fields are not read into it.
    """

    namespace: str
    name: str
    min_member: int
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    # False: the object sets no timeout; the configured default applies (registry.resolve).
    timeout_declared: bool = True
    # None: the PodGroup does not say; the members' common phalanx.io/placement, else the
    # configured default, applies (see GangPlanner.resolve).
    placement: Placement | None = None
    plan_json: str = ""  # raw phalanx.io/plan; parsed and validated by phalanx.core.plan
    differentiable: frozenset[str] = frozenset()
    min_resources: Resources = EMPTY
    from_crd: bool = True  # False: declared only by pod annotations
    uid: str = ""
    dialect: Dialect = Dialect.SCHEDULER_PLUGINS
    pod_group: str = ""  # upstream v1alpha1: the Workload's pod group (see GroupRef)
    replica: str = ""
    # None: the PodGroup does not say; the members' common intent applies (resolve_topology).
    topology: TopologyConstraint | None = None
    # Upstream `basic` policy: the members are scheduled one by one, not as a gang.
    basic: bool = False
    # Volcano `spec.minTaskMember`, as enforced: (task, minimum) pairs sorted by task, none
    # of them 0; every quorum holds at least that many members of each (`phalanx.core.quorum`).
    # A composite gang's tree of child groups instead (`ChildGroups`; tasks are PodGroups),
    # or KAI's nested subgroups (`SubGroupTree`; tasks are leaf subgroups).
    min_task_member: tuple[tuple[str, int], ...] | ChildGroups = ()
    # KAI `spec.subGroups` (its leaves: a parent holds no pods), Grove `spec.podgroups`:
    # every task's name (a minimum of 0 too); a member naming another makes the gang
    # invalid (`stray_members` of `groups.kai`, `groups.grove`). Empty for other dialects.
    task_names: frozenset[str] = frozenset()
    # Grove `spec.podgroups[].podReferences`: (pod name, podgroup) sorted, so that a member
    # without the `grove.io/podclique` label is filed in the podgroup that lists it
    # (`ClusterState._as_member`). Not compared: Grove rewrites the lists as it creates
    # the pods, which changes no plan.
    task_by_pod: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # `metadata.deletionTimestamp` is set: finalizers hold the object while its workload is
    # torn down. Nothing of the gang is planned, reserved or bound any more (resolve_group).
    deleting: bool = False
    # Upstream `spec.parentCompositePodGroupName` (1.37): the CompositePodGroup above; "" none.
    parent: str = ""
    # Upstream `spec.resourceClaims` (1.37, DRAWorkloadResourceClaims): claims its members
    # share, with the names generated for templates (`groups.upstream.read_resource_claims`).
    # Not compared: they change the members' device demand (`DraModel.upsert_group`), not
    # the gang, and the generated names arrive in the status.
    resource_claims: tuple[PodClaimRef, ...] = field(default=(), compare=False)
    # Upstream `spec.disruptionMode`: read by preemption only, so it changes no plan (and
    # upstream makes it immutable): outside equality, an edit re-plans nothing.
    disruption_mode: DisruptionMode = field(default=DisruptionMode.SINGLE, compare=False)
    # Upstream PodGroup (1.36+): what kube-scheduler requires of its pods before it
    # schedules any (`MemberRules`); None in other dialects, whose schedulers require none.
    member_rules: MemberRules | None = None

    @property
    def ref(self) -> GroupRef:
        return GroupRef(self.namespace, self.name, self.dialect, self.pod_group, self.replica)

    def referenced_task(self, pod_name: str) -> str:
        """The task whose references list pod `pod_name` (`task_by_pod`, sorted and one
        entry a pod); "" for none. A search, not a scan: asked once a member is filed."""
        i = bisect_left(self.task_by_pod, (pod_name,))
        if i < len(self.task_by_pod) and self.task_by_pod[i][0] == pod_name:
            return self.task_by_pod[i][1]
        return ""

    @property
    def key(self) -> str:
        return self.ref.key
