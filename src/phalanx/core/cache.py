"""The cache: the one cluster model fed by watch events, and the reservation lifecycle.

Node usage = requests of non-terminal pods bound to the node (or assumed: being bound by
Phalanx) + gang reservations not yet bound. Every mutation goes through `ClusterState`;
decisions read a `Snapshot` (phalanx.core.snapshot) and try members on an `Overlay`.

Threading: `ClusterState` takes no locks. It assumes a single writer — the service's
event loop; adapters that receive events on other threads hand them to the loop first.
A decision computed from a snapshot and committed with no `await` in between is therefore
one atomic step.

Reservation lifecycle (one per gang, `Reservation.members` hold the per-pod state)::

    reserve() ──▶ RESERVED ──assume()──▶ ASSUMED ──upsert_pod(bound)──▶ (member dropped: bound)
                     ▲  │                    │
                     │  └──release()/expire()│──▶ (member dropped, its resources returned)
                     └──────forget()─────────┘

    The reservation itself disappears when its last member is dropped.

Every release, whatever causes it (expiry, a re-plan, a node or PodGroup that went away or
changed, the bind barrier giving up, roll-forward), goes through `release()`, which tells the
`on_release` listener: the service fails that gang's bind barrier at once with the cause.
Each reservation gets a `serial` when it is published, so whoever holds an old one (a bind
barrier opened for it) can release that one and never a newer re-plan of the same gang.

Gang objects: PodGroups of every dialect by their gang key (`GroupRef.key`), upstream
v1alpha1 Workloads by their object key (`upstream:ns/name`), which hold the gangs their
pods name (`GroupRef.object_ref`), and upstream CompositePodGroups (`composite:ns/name`).
An object that comes back different (an edited `minMember`/`minCount`, placement, plan or
topology: values compare unequal) releases the reservations it held, so the next filter
re-plans them with the new settings.

A pod whose PodGroup has a `gang` composite above it is kept as a member of the topmost
one (its `group` is the composite's, its `task` its PodGroup's name: `_as_member`), and
re-filed whenever a composite or a PodGroup in a tree changes (`_tree_changed`), so every
reader of `members` sees the composite as the one gang; `declared_group` says the
PodGroup the pod itself names. Likewise a Grove member without its podgroup's label takes
the podgroup whose `podReferences` list it (`PodGroup.task_by_pod`), re-filed whenever its
PodGang's lists change (`_refile_referenced`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import TypeVar, cast

from phalanx.core.groups.composite import CompositePodGroup, gang_above
from phalanx.core.groups.discovery import Served
from phalanx.core.groups.registry import deleting_reason
from phalanx.core.groups.upstream import Workload
from phalanx.core.model import EMPTY, Dialect, GroupRef, Node, Pod, PodGroup, Resources
from phalanx.core.snapshot import NodeInfo, Snapshot

T = TypeVar("T")


class MemberState(StrEnum):
    RESERVED = "reserved"
    ASSUMED = "assumed"  # Phalanx is binding it; counted in `requested`, not `reserved`


# A template slot's `pod_uid` starts with this (no API UID contains "/"): capacity held for a
# member that does not exist yet, claimed by the first arriving member of that shape.
SLOT_PREFIX = "slot/"


@dataclass(frozen=True, slots=True)
class MemberReservation:
    pod_uid: str  # SLOT_PREFIX + n for an unclaimed template slot
    pod_key: str  # namespace/name, for people and for the commit record ("" for a slot)
    node: str
    requests: Resources
    state: MemberState = MemberState.RESERVED
    # Whether this is an unclaimed template slot: set once, since every copy of a
    # reservation (each claim, assume or extension makes one) sorts its members by it.
    is_slot: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_slot", self.pod_uid.startswith(SLOT_PREFIX))


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity held for a gang's members until they bind or the reservation expires."""

    group_key: str
    members: tuple[MemberReservation, ...]
    reserved_at: float
    expires_at: float
    # Set by `ClusterState.reserve`: tells this reservation from a later one of the same gang.
    serial: int = 0
    # Reserved from the gang's template before every member existed: members claim slots,
    # and a claimed member that vanishes before binding gives its slot back.
    template: bool = False
    # A gang with Volcano task minima: only members of this task may claim its slots (the
    # slots stand for that task's members; "" lets any member of their shape claim one).
    slot_task: str = ""
    # pod uid -> member, built once per (immutable) reservation: the barrier looks members
    # up for every held bind after every model change, so a scan would be quadratic.
    _by_uid: Mapping[str, MemberReservation] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    # Members held for a pod that exists and is not being bound yet (no slots, no assumed
    # ones), counted once: an upper bound the barrier checks after every change to a gang.
    pods_reserved: int = field(init=False, repr=False, compare=False, default=0)
    # The unclaimed slots, once: every arrival and watch event of a templated gang asks.
    _slots: tuple[MemberReservation, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_uid", {m.pod_uid: m for m in self.members})
        slots, pods = [], 0
        for m in self.members:
            if m.is_slot:
                slots.append(m)
            elif m.state is MemberState.RESERVED:
                pods += 1
        object.__setattr__(self, "_slots", tuple(slots))
        object.__setattr__(self, "pods_reserved", pods)

    def member(self, pod_uid: str) -> MemberReservation | None:
        return self._by_uid.get(pod_uid)

    def node_of(self, pod_uid: str) -> str | None:
        m = self.member(pod_uid)
        return m.node if m is not None else None

    @property
    def reserved_gpus(self) -> int:
        return sum(m.requests.gpus() for m in self.members if m.state is MemberState.RESERVED)

    def slots(self) -> tuple[MemberReservation, ...]:
        """Template slots no member has claimed yet, in reservation order."""
        return self._slots

    def with_member(self, replacing: str, member: MemberReservation) -> Reservation:
        """This reservation with the member held for `replacing` replaced by `member` (a
        slot claimed or given back, a member assumed). Each arrival and each binding of a
        big gang makes one, so what is derived from the members is updated, not rebuilt:
        the copies are C-level, the Python work O(1) but for a slot given back (rare)."""
        old = self._by_uid[replacing]
        at = _position(self.members, old)
        members = (*self.members[:at], member, *self.members[at + 1 :])
        by_uid = dict(self._by_uid)
        del by_uid[replacing]
        by_uid[member.pod_uid] = member
        slots = self._slots
        if member.is_slot and not old.is_slot:  # back among the slots, in member order
            slots = tuple(m for m in members if m.is_slot)
        elif old.is_slot:
            i = _position(slots, old)
            kept = (member,) if member.is_slot else ()
            slots = (*slots[:i], *kept, *slots[i + 1 :])
        return self._derived(members, by_uid, slots, _held(member) - _held(old))

    def without_member(self, pod_uid: str) -> Reservation:
        """This reservation without the member held for `pod_uid` (bound, or gone)."""
        old = self._by_uid[pod_uid]
        at = _position(self.members, old)
        members = (*self.members[:at], *self.members[at + 1 :])
        by_uid = dict(self._by_uid)
        del by_uid[pod_uid]
        slots = self._slots
        if old.is_slot:
            i = _position(slots, old)
            slots = (*slots[:i], *slots[i + 1 :])
        return self._derived(members, by_uid, slots, -_held(old))

    def _derived(
        self,
        members: tuple[MemberReservation, ...],
        by_uid: dict[str, MemberReservation],
        slots: tuple[MemberReservation, ...],
        held: int,
    ) -> Reservation:
        changed = self._copy()
        object.__setattr__(changed, "members", members)
        object.__setattr__(changed, "_by_uid", by_uid)
        object.__setattr__(changed, "_slots", slots)
        object.__setattr__(changed, "pods_reserved", self.pods_reserved + held)
        return changed

    def _copy(self) -> Reservation:
        """A shallow copy, field by field: `copy.copy` goes through pickling's protocol and
        took four times as long, at every claim, assume and binding of every member."""
        copied = object.__new__(Reservation)
        for name in _RESERVATION_FIELDS:
            object.__setattr__(copied, name, getattr(self, name))
        return copied

    def extended(self, until: float) -> Reservation:
        """This reservation with its deadline at `until`. The members and what is derived
        from them are shared, not rebuilt: the barrier extends a gang's deadline at every
        member's `/bind`, and rebuilding cost O(members) each time."""
        later = self._copy()
        object.__setattr__(later, "expires_at", until)
        return later


_RESERVATION_FIELDS = tuple(f.name for f in fields(Reservation))


def _live(pod: Pod) -> bool:
    """Whether `pod` counts among its gang's members (`ClusterState.members`)."""
    return not pod.departing


def _name(pod: Pod) -> str:
    return pod.name


def _position(members: tuple[MemberReservation, ...], member: MemberReservation) -> int:
    """Where `member` (this very object) is: compared by identity in C, since a field-wise
    comparison of each member before it would be Python calls."""
    return list(map(id, members)).index(id(member))


def _held(member: MemberReservation) -> int:
    """1 if `member` counts in `Reservation.pods_reserved` (a pod's, reserved), else 0."""
    return int(not member.is_slot and member.state is MemberState.RESERVED)


class ReleaseCause(StrEnum):
    """Why a gang's reservation was released."""

    RELEASED = "released"  # asked for without a more precise cause
    EXPIRED = "expired"  # not bound within the group's timeout
    REPLAN = "replan"  # kube-scheduler did not offer a reserved node
    NODE_GONE = "node-gone"  # a node it used was deleted
    GROUP_GONE = "group-gone"  # its gang object was deleted, or is being deleted
    # Its gang object changed (size, policy, plan, topology), or a member joined that
    # kube-scheduler refuses the gang for (`GangPlanner.release_refused`).
    GROUP_CHANGED = "group-changed"
    TOPOLOGY_CHANGED = "topology-changed"  # relabelled nodes split it across required domains
    BARRIER = "barrier"  # the bind barrier gave up (timeout, re-check, commit record)
    ROLL_FORWARD = "roll-forward"  # a commit record wins over it, or cannot be carried out


@dataclass(frozen=True, slots=True)
class Released:
    """A reservation as it was when released, and why."""

    reservation: Reservation
    cause: ReleaseCause
    why: str

    @property
    def group_key(self) -> str:
        return self.reservation.group_key


ReleaseListener = Callable[[Released], None]


class StateError(RuntimeError):
    """A caller broke a precondition of `ClusterState` (a bug, not an expected outcome)."""


def _phantom(name: str) -> Node:
    return Node(name=name, allocatable=EMPTY, ready=False)


def _gives_back(delta: Resources) -> bool:
    return any(v < 0 for v in delta.values())


def _shape(node: Node) -> tuple[object, ...]:
    """What eligibility reads of a node (see phalanx.core.eligibility)."""
    return (node.labels, node.taints, node.ready, node.unschedulable, node.gpu, node.devices)


@dataclass(slots=True)
class Touched:
    """What changed since the last `ClusterState.take_touched()` that can make a bind held at
    the barrier unbindable: pods added, updated or removed; nodes that appeared, went, or
    became (un)schedulable; gangs whose reservation changed."""

    pods: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.pods or self.nodes or self.groups)


class ClusterState:
    """The cluster model fed by watch events (DESIGN's Cache). See module docstring."""

    def __init__(self, on_release: ReleaseListener | None = None) -> None:
        # Told of every release after it happened (see module docstring); set once, by the owner.
        self.on_release = on_release
        self._serials = 0
        self._nodes: dict[str, NodeInfo] = {}
        # Nodes known only because pods are bound to them (node unseen or already deleted):
        # counted so usage stays exact, never eligible, dropped once nothing is bound there.
        self._phantoms: set[str] = set()
        self._common_free: dict[str, tuple[int, int, int, int]] = {}  # NodeInfo.common_free
        # Node names by free nvidia.com/gpu, each list sorted: the single-pod best fit reads
        # the tightest bucket first, in name order, instead of scanning every offered node.
        self._by_free_gpus: dict[int, list[str]] = {}
        self._names: tuple[str, ...] | None = ()
        self._pods: dict[str, Pod] = {}  # by uid
        self._uid_by_key: dict[str, str] = {}
        self._counted: dict[str, tuple[str, Resources]] = {}  # uid -> (node, requests)
        self._assumed: dict[str, str] = {}  # uid -> node Phalanx is binding it to
        # Live pods neither bound nor assumed (kept by `_recount`): the backlog is asked for
        # on every claimed arrival, and counting it there was O(pods).
        self._pending: set[str] = set()
        self._groups: dict[str, PodGroup] = {}  # PodGroup objects (any dialect) by gang key
        self._workloads: dict[str, Workload] = {}  # upstream v1alpha1, by object key
        self._composites: dict[str, CompositePodGroup] = {}  # upstream, `composite:ns/name`
        # What is derived from the gang objects alone (a composite's tree), until one changes.
        self._tree_memo: dict[str, object] = {}
        # Pods filed under a composite gang, or in the Grove podgroup whose podReferences
        # list them: uid -> the (group, task) they declare.
        self._declared: dict[str, tuple[GroupRef | None, str]] = {}
        self._group_errors: dict[str, str] = {}  # invalid gang objects, by object key
        self._members: dict[str, set[str]] = {}  # group key -> pod uids
        # `members(key)` once sorted, then kept in step with each change to a pod of the
        # gang (`_refresh_live`): every /filter and /bind resolves its gang from them, and
        # sorting a big gang's at each one was quadratic over its assembly.
        self._live_members: dict[str, tuple[Pod, ...]] = {}
        self._reservations: dict[str, Reservation] = {}
        self.generation = 0
        # Bumped only when a node appears, goes, or changes what eligibility reads (labels,
        # taints, readiness, cordon, GPUs, installed DRA devices): heartbeats leave it alone,
        # so caches keyed on it survive the steady stream of node status updates.
        self.topology_generation = 0
        # Bumped when a node becomes schedulable (new, Ready again, uncordoned): kube-scheduler
        # may have seen it first and retried a pod that Phalanx then refused on its older view.
        self.nodes_opened = 0
        # Bumped whenever capacity may have grown somewhere: a pod or reservation gave
        # resources back, or a node appeared or changed. Binding, reserving and claiming only
        # take capacity, so a gang that did not fit still does not while it stays put
        # (`phalanx.core.unfit`).
        self.freed = 0
        # UIDs of pending members that arrived while their gang held a reservation, until
        # `take_arrivals`: the service claims them a template slot before their first cycle.
        self._arrivals: list[str] = []
        # UIDs of bound pods whose binding Phalanx made (confirmed from its assumption), and
        # those of them that say `PodScheduled: False` since the last `take_misreported`.
        self._bound_here: set[str] = set()
        self._misreported: list[str] = []
        # Gangs that a new pending member joined while they held no reservation (or whose
        # gang object came after their members), until `take_joined`: the service may plan
        # one before kube-scheduler reaches any member.
        self._joined: dict[str, GroupRef] = {}
        # For the barrier's sweep: re-checking every held bind after every watch event was
        # the loop's largest cost on a contended cluster (hundreds held, thousands of events).
        self._touched = Touched()
        # Gangs whose status may now read differently (a member, the gang's object or its
        # reservation changed), until `take_moved`: the status refresh recomputes only these.
        self._moved: set[str] = set()
        # Live bound (or assumed) members per gang, and the gang each such pod counts in:
        # the barrier asks at every arrival and `/bind`, and counting the members each time
        # was quadratic over a big gang's assembly.
        self._bound_counts: dict[str, int] = {}
        self._bound_in: dict[str, str] = {}
        # Which gang APIs the API server serves (discovery), when the source knows.
        self.served: Served | None = None

    # ---- reads -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        if self._names is None:
            self._names = tuple(sorted(self._nodes))
        return Snapshot(dict(self._nodes), self.generation, self._names)

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def node_infos(self) -> Mapping[str, NodeInfo]:
        """The live per-node map (read-only by contract; valid until the next mutation)."""
        return self._nodes

    def common_free(self) -> Mapping[str, tuple[int, int, int, int]]:
        """Per node, free (cpu, memory, pods, nvidia.com/gpu): the single-pod hot path."""
        return self._common_free

    def nodes_by_free_gpus(self) -> Mapping[int, Sequence[str]]:
        """Node names by free nvidia.com/gpu, each in name order (read-only by contract;
        live until the next mutation)."""
        return self._by_free_gpus

    def nodes(self) -> Iterable[NodeInfo]:
        return self._nodes.values()

    def pod(self, uid: str) -> Pod | None:
        return self._pods.get(uid)

    def pod_by_key(self, namespace: str, name: str) -> Pod | None:
        uid = self._uid_by_key.get(f"{namespace}/{name}")
        return self._pods.get(uid) if uid is not None else None

    def pods(self) -> Iterable[Pod]:
        return self._pods.values()

    def assumed_node(self, uid: str) -> str | None:
        return self._assumed.get(uid)

    def group(self, key: str) -> PodGroup | None:
        return self._groups.get(key)

    def groups(self) -> Mapping[str, PodGroup]:
        return self._groups

    def workload(self, key: str) -> Workload | None:
        return self._workloads.get(key)

    def group_object(self, key: str) -> PodGroup | Workload | CompositePodGroup | None:
        """The gang object whose key (`GroupRef.object_ref.key`) is `key`, of any kind."""
        return self._groups.get(key) or self._workloads.get(key) or self._composites.get(key)

    def composite(self, key: str) -> CompositePodGroup | None:
        return self._composites.get(key)

    def composites(self) -> Mapping[str, CompositePodGroup]:
        return self._composites

    def tree_memo(self, key: str, derive: Callable[[], T]) -> T:
        """`derive()` for `key`, kept until a PodGroup or CompositePodGroup changes: what a
        composite gang's tree makes of the gang objects, asked at every member's filter and
        bind, without walking every PodGroup of the cluster each time."""
        if key not in self._tree_memo:
            self._tree_memo[key] = derive()
        return cast(T, self._tree_memo[key])

    def pod_groups_under(self, key: str) -> list[PodGroup]:
        """The PodGroups whose pods are composite gang `key`'s members, by name."""
        return sorted(
            (g for g in self._groups.values() if g.parent and self._gang_key_above(g) == key),
            key=lambda g: g.name,
        )

    def declared_group(self, pod: Pod) -> GroupRef | None:
        """The gang `pod` names itself: its PodGroup when it is filed under a composite."""
        declared = self._declared.get(pod.uid)
        return declared[0] if declared is not None else pod.group

    def as_declared(self, pod: Pod) -> Pod:
        """The model's copy `pod` as the API reports it: with the gang and task it names
        itself, not those it is filed under (`_as_member`). What to give `upsert_pod` when
        updating a copy taken from the model, which would otherwise be filed as declaring
        its composite gang (or its Grove podgroup) itself and stay there."""
        declared = self._declared.get(pod.uid)
        if declared is None:
            return pod
        group, task = declared
        return replace(pod, group=group, task=task)

    def group_error(self, key: str) -> str | None:
        return self._group_errors.get(key)

    def group_keys(self) -> set[str]:
        return set(self._groups) | set(self._members) | set(self._group_errors)

    def members(self, group_key: str, *, include_finished: bool = False) -> list[Pod]:
        """Members of a group sorted by name: live ones (not terminal, not being deleted),
        plus finished ones when asked."""
        if not include_finished:
            live = self._live_members.get(group_key)
            if live is None:
                live = tuple(self._sorted_members(group_key))
                if live:  # kept only while it has members: gone gangs leave nothing behind
                    self._live_members[group_key] = live
            return list(live)
        return self._sorted_members(group_key, include_finished=True)

    def _refresh_live(self, key: str, old: Pod | None, new: Pod | None) -> None:
        """Keep gang `key`'s sorted live members in step with one pod's change: `old` left
        them (or was replaced), `new` joined. A binary search and C-level copies, not a
        sort; anything unexpected (a name twice) drops them to be sorted afresh."""
        live = self._live_members.get(key)
        if live is None:
            return
        items = list(live)
        if old is not None and _live(old):
            at = bisect.bisect_left(items, old.name, key=_name)
            if at == len(items) or items[at].uid != old.uid:
                del self._live_members[key]
                return
            del items[at]
        if new is not None and _live(new):
            at = bisect.bisect_left(items, new.name, key=_name)
            if at < len(items) and items[at].name == new.name:
                del self._live_members[key]
                return
            items.insert(at, new)
        if items:
            self._live_members[key] = tuple(items)
        else:
            del self._live_members[key]

    def _sorted_members(self, group_key: str, *, include_finished: bool = False) -> list[Pod]:
        pods = (self._pods[u] for u in self._members.get(group_key, ()))
        return sorted((p for p in pods if include_finished or _live(p)), key=_name)

    def bound_node(self, pod: Pod) -> str:
        """The node `pod` is bound to per the API, or being bound to by Phalanx; "" if none."""
        return pod.node_name or self._assumed.get(pod.uid, "")

    def member_count(self, group_key: str) -> int:
        """How many pods name the gang, finished or not (O(1))."""
        return len(self._members.get(group_key, ()))

    def pending_count(self, group_key: str = "") -> int:
        """Live pods not bound or assumed: in all (kube-scheduler's backlog, roughly), or
        of one gang. O(1) for all, O(members) for a gang."""
        if not group_key:
            return len(self._pending)
        return sum(1 for u in self._members.get(group_key, ()) if u in self._pending)

    def is_bound(self, pod: Pod) -> bool:
        """Bound per the API, or assumed by Phalanx (a binding in flight)."""
        return bool(self.bound_node(pod))

    def reservation(self, group_key: str) -> Reservation | None:
        return self._reservations.get(group_key)

    def reservations(self) -> Mapping[str, Reservation]:
        return self._reservations

    def reserved_gpus(self) -> int:
        return sum(r.reserved_gpus for r in self._reservations.values())

    # ---- nodes -------------------------------------------------------------------------

    def upsert_node(self, node: Node) -> None:
        old = self._nodes.get(node.name)
        if old is None or node.name in self._phantoms or old.node.schedulable != node.schedulable:
            self._touched.nodes.add(node.name)
        if node.schedulable and (
            old is None or node.name in self._phantoms or not old.node.schedulable
        ):
            self.nodes_opened += 1
        if old is None or node.name in self._phantoms or _shape(old.node) != _shape(node):
            self.topology_generation += 1
            self.freed += 1
        elif old.node.allocatable != node.allocatable:
            self.freed += 1
        self._phantoms.discard(node.name)
        if old is None:
            self._store(NodeInfo(node))
            self._names = None
        else:
            self._store(NodeInfo(node, old.requested, old.reserved))
        self.generation += 1

    def remove_node(self, name: str) -> list[str]:
        """Forget a node. Returns the keys of gangs whose reservations it held (released)."""
        if name not in self._nodes or name in self._phantoms:
            return []
        self._touched.nodes.add(name)
        hit = [k for k, r in self._reservations.items() if any(m.node == name for m in r.members)]
        for key in hit:
            self.release(key, ReleaseCause.NODE_GONE, f"node {name} was removed")
        info = self._drop(name)
        if info.requested:
            self._store(NodeInfo(_phantom(name), info.requested, info.reserved))
            self._phantoms.add(name)
        self._names = None
        self.generation += 1
        self.topology_generation += 1
        return hit

    # ---- pods --------------------------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        """Add or update a pod as the API reports it (confirms an assumed binding)."""
        self._declared.pop(pod.uid, None)
        pod = self._as_member(pod)
        old = self._pods.get(pod.uid)
        self._touched.pods.add(pod.uid)
        for member_of in (old.group if old is not None else None, pod.group):
            if member_of is not None:
                self._moved.add(member_of.key)
        joined = old is None or old.group != pod.group
        if old is not None and old.group is not None and old.group != pod.group:
            # Relabelled into another gang: gone from the old one as if deleted.
            self._leave(old.group.key, pod.uid)
            self._drop_member(old.group.key, pod.uid, vanished=True)
        if old is not None and old.key != pod.key and self._uid_by_key.get(old.key) == pod.uid:
            # Its UID under another name (an object copied in a cluster file; the API never
            # renames): the old name no longer leads to it, nor does a new pod of that name
            # remove it.
            del self._uid_by_key[old.key]
        stale_uid = self._uid_by_key.get(pod.key)
        if stale_uid is not None and stale_uid != pod.uid:
            # Same name, new object: the old pod is gone even if we missed its delete.
            self.remove_pod(stale_uid)
        self._pods[pod.uid] = pod
        self._uid_by_key[pod.key] = pod.uid
        was = old.group.key if old is not None and old.group is not None else None
        now = pod.group.key if pod.group is not None else None
        if was is not None and was != now:
            self._refresh_live(was, old, None)
        if now is not None:
            self._refresh_live(now, old if was == now else None, pod)
        if pod.group is not None:
            self._members.setdefault(pod.group.key, set()).add(pod.uid)
            if joined and not pod.node_name:
                if pod.group.key in self._reservations:
                    self._arrivals.append(pod.uid)
                else:
                    self._joined[pod.group.key] = pod.group
        if pod.node_name:
            if self._assumed.pop(pod.uid, None) is not None:
                self._bound_here.add(pod.uid)
            if pod.unscheduled and pod.uid in self._bound_here:
                self._misreported.append(pod.uid)
            self._drop_member(pod.group.key if pod.group else None, pod.uid, vanished=False)
        self._recount(pod.uid)

    def _as_member(self, pod: Pod) -> Pod:
        """`pod` as its gang's member: filed under the topmost `gang` composite above its
        PodGroup, if any (see the module docstring); a broken tree leaves it on its
        PodGroup, whose resolution then says why it waits. A Grove member naming no
        podgroup takes the one its PodGang's `podReferences` list it in, if any."""
        ref = pod.group
        if ref is not None and ref.dialect is Dialect.GROVE and not pod.task:
            gang = self._groups.get(ref.key)
            task = gang.referenced_task(pod.name) if gang is not None else ""
            if not task:
                return pod
            self._declared[pod.uid] = (pod.group, pod.task)
            return replace(pod, task=task)
        if ref is None or ref.dialect is not Dialect.UPSTREAM or ref.pod_group:
            return pod
        group = self._groups.get(ref.key)
        top = gang_above(group, self._composites.get) if group is not None else None
        if not isinstance(top, CompositePodGroup):
            return pod
        self._declared[pod.uid] = (pod.group, pod.task)
        return replace(pod, group=top.ref, task=ref.name)

    def _refile(self, namespace: str) -> None:
        """Re-file the upstream pods of `namespace` after a change to the tree of groups
        (a composite, or a PodGroup's parent): each moves to the gang it belongs to now."""
        for uid, pod in list(self._pods.items()):
            if pod.namespace != namespace:
                continue
            group, task = self._declared.get(uid, (pod.group, pod.task))
            if group is None or group.dialect is not Dialect.UPSTREAM:
                continue
            declared = replace(pod, group=group, task=task)
            if self._as_member(declared) != pod:
                self.upsert_pod(declared)
            elif uid in self._declared and pod.group == group:
                del self._declared[uid]

    def take_touched(self) -> Touched:
        """What changed since the last call (see `Touched`), and start a new record."""
        touched, self._touched = self._touched, Touched()
        return touched

    def take_moved(self) -> set[str]:
        """The keys of the gangs that moved since the last call, and start a new record."""
        moved, self._moved = self._moved, set()
        return moved

    def take_arrivals(self) -> list[Pod]:
        """The pending members that arrived while their gang held a reservation, since the
        last call (still present, still pending)."""
        if not self._arrivals:
            return []
        uids, self._arrivals = self._arrivals, []
        return [p for u in uids if (p := self._pods.get(u)) is not None and not p.node_name]

    def take_misreported(self) -> list[Pod]:
        """Pods bound by a binding Phalanx made that say `PodScheduled: False`, since the
        last call (still so). kube-scheduler writes that when its own cycle of a pod fails,
        and one of a member Phalanx bound with its gang can: the binding reached
        kube-scheduler's cache before its cycle assumed the pod ("is in the cache, so can't
        be assumed"), and the condition then contradicts `spec.nodeName` for good."""
        if not self._misreported:
            return []
        uids, self._misreported = self._misreported, []
        found = {}
        for uid in uids:
            pod = self._pods.get(uid)
            if pod is not None and pod.node_name and pod.unscheduled:
                found[uid] = pod
        return list(found.values())

    def take_joined(self) -> list[GroupRef]:
        """The gangs a new pending member joined while they held no reservation, or whose
        gang object arrived or changed while they had a pending member and none, since the
        last call (whatever they hold now)."""
        if not self._joined:
            return []
        joined, self._joined = list(self._joined.values()), {}
        return joined

    def remove_pod(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return
        self._touched.pods.add(uid)
        self._declared.pop(uid, None)
        if self._uid_by_key.get(pod.key) == uid:
            del self._uid_by_key[pod.key]
        self._assumed.pop(uid, None)
        self._bound_here.discard(uid)
        if pod.group is not None:
            self._moved.add(pod.group.key)
            self._refresh_live(pod.group.key, pod, None)
            self._leave(pod.group.key, uid)
            self._drop_member(pod.group.key, uid, vanished=True)
        self._recount(uid)

    def _leave(self, key: str, uid: str) -> None:
        """The pod is no longer one of gang `key`'s: a gang left with no pod is forgotten."""
        members = self._members.get(key)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._members[key]

    def _recount(self, uid: str) -> None:
        """Make the pod's contribution to node usage (and to the pending pods) match its
        current state."""
        pod = self._pods.get(uid)
        where = self.bound_node(pod) if pod is not None else ""
        live = pod is not None and _live(pod)
        if live and not where:
            self._pending.add(uid)
        else:
            self._pending.discard(uid)
        gang = pod.group.key if live and where and pod is not None and pod.group else None
        counted = self._bound_in.get(uid)
        if counted != gang:
            if counted is not None:
                left = self._bound_counts[counted] - 1
                if left:
                    self._bound_counts[counted] = left
                else:
                    del self._bound_counts[counted]
                del self._bound_in[uid]
            if gang is not None:
                self._bound_counts[gang] = self._bound_counts.get(gang, 0) + 1
                self._bound_in[uid] = gang
        node = where if pod is not None and not pod.terminal else None
        want = (node, pod.requests) if node and pod is not None else None
        have = self._counted.get(uid)
        if have == want:
            return
        if have is not None:
            self._add_requested(have[0], EMPTY - have[1])
            del self._counted[uid]
        if want is not None and want[0] is not None:
            self._counted[uid] = (want[0], want[1])
            self._add_requested(want[0], want[1])

    def _store(self, info: NodeInfo) -> None:
        old = self._common_free.get(info.name)
        if old is not None and old[3] != info.common_free[3]:
            self._unindex(info.name, old[3])
        if old is None or old[3] != info.common_free[3]:
            bisect.insort(self._by_free_gpus.setdefault(info.common_free[3], []), info.name)
        self._nodes[info.name] = info
        self._common_free[info.name] = info.common_free

    def _drop(self, name: str) -> NodeInfo:
        self._unindex(name, self._common_free.pop(name)[3])
        return self._nodes.pop(name)

    def _unindex(self, name: str, free_gpus: int) -> None:
        bucket = self._by_free_gpus[free_gpus]
        del bucket[bisect.bisect_left(bucket, name)]
        if not bucket:
            del self._by_free_gpus[free_gpus]

    def _add_requested(self, name: str, delta: Resources) -> None:
        # A pod bound to a node we have not seen yet still counts once that node arrives.
        info = self._nodes.get(name)
        if info is None:
            info = NodeInfo(_phantom(name))
            self._phantoms.add(name)
            self._names = None
        updated = NodeInfo(info.node, info.requested + delta, info.reserved)
        if _gives_back(delta):
            self.freed += 1
        if name in self._phantoms and not updated.requested:
            self._drop(name)
            self._phantoms.discard(name)
            self._names = None
        else:
            self._store(updated)
        self.generation += 1

    def _add_reserved(self, name: str, delta: Resources, *, to_requested: bool = False) -> None:
        """`to_requested`: the amount leaves the reservation for the node's requests (a
        member being bound): nothing is given back."""
        info = self._nodes[name]
        self._store(NodeInfo(info.node, info.requested, info.reserved + delta))
        if not to_requested and _gives_back(delta):
            self.freed += 1
        self.generation += 1

    # ---- groups ------------------------------------------------------------------------

    def upsert_group(self, group: PodGroup) -> None:
        """Add or update a PodGroup; a changed one releases its gang's reservation, as one
        being deleted does (`group-gone`: its workload is being torn down)."""
        old = self._groups.get(group.key)
        above = self._gang_key_above(old)
        self._groups[group.key] = group
        self._group_errors.pop(group.key, None)
        self.generation += 1
        self._moved.add(group.key)
        if old != group:
            self._tree_memo.clear()
        if group.deleting:
            self.release(group.key, ReleaseCause.GROUP_GONE, _deleting(group.ref))
        elif old is not None and old != group:
            self.release(group.key, ReleaseCause.GROUP_CHANGED, _changed(old, group))
        if old != group and (above or group.parent):
            self._tree_changed(group.namespace, [above, self._gang_key_above(group)], group.key)
        if old != group:
            self._rejoin(group.key)
        if group.dialect is Dialect.GROVE and (old is None or old.task_by_pod != group.task_by_pod):
            self._refile_referenced(group.key)

    def _refile_referenced(self, key: str) -> None:
        """Re-file the members of Grove gang `key` that name no podgroup themselves, after
        its PodGang's `podReferences` changed (or it appeared)."""
        for uid in sorted(self._members.get(key, set())):
            pod = self._pods[uid]
            group, task = self._declared.get(uid, (pod.group, pod.task))
            if task:
                continue  # labelled: the label stands
            declared = replace(pod, group=group, task=task)
            if self._as_member(declared) != pod:
                self.upsert_pod(declared)
            elif uid in self._declared and pod.task == task:
                del self._declared[uid]

    def _gang_key_above(self, group: PodGroup | None) -> str:
        """The key of the composite gang `group` is part of; "" when none."""
        if group is None or not group.parent:
            return ""
        top = gang_above(group, self._composites.get)
        return top.key if isinstance(top, CompositePodGroup) else ""

    def _tree_changed(self, namespace: str, gangs: Iterable[str], what: str) -> None:
        """A PodGroup or composite in a tree of `namespace` changed: its pods are re-filed,
        and the composite gangs it was or is part of (`gangs`) or that gained or lost a
        member are re-planned (their quorum and members may differ)."""
        before = {u: p.group for u, p in self._pods.items() if p.namespace == namespace}
        self._refile(namespace)
        keys = {k for k in gangs if k}
        for uid, old in before.items():
            pod = self._pods.get(uid)
            new = pod.group if pod is not None else None
            if old != new:
                keys.update(r.key for r in (old, new) if r and r.dialect is Dialect.COMPOSITE)
        for key in sorted(keys):
            why = f"{what} changed in the tree of gang {key}; re-planning it"
            self.release(key, ReleaseCause.GROUP_CHANGED, why)
            self._rejoin(key)

    def upsert_composite(self, composite: CompositePodGroup) -> None:
        """Add or update a CompositePodGroup: the composite gangs it is or was part of are
        re-planned (`group-gone` for its own while it is being deleted)."""
        old = self._composites.get(composite.key)
        self._composites[composite.key] = composite
        self._group_errors.pop(composite.key, None)
        self.generation += 1
        self._moved.add(composite.key)
        if old != composite:
            self._tree_memo.clear()
        if composite.deleting:
            self.release(composite.key, ReleaseCause.GROUP_GONE, _deleting(composite.ref))
        if old != composite:
            self._tree_changed(composite.namespace, [composite.key], composite.key)

    def upsert_workload(self, workload: Workload) -> None:
        """Add or update a Workload; a changed one releases the reservations of its gangs,
        as one being deleted does (`group-gone`)."""
        old = self._workloads.get(workload.key)
        self._workloads[workload.key] = workload
        self._group_errors.pop(workload.key, None)
        self.generation += 1
        if workload.deleting:
            for key in self._held_by(workload.key):
                self.release(key, ReleaseCause.GROUP_GONE, _deleting(GroupRef.parse(key)))
        elif old is not None and old != workload:
            why = f"Workload {workload.namespace}/{workload.name} changed; re-planning"
            for key in self._held_by(workload.key):
                self.release(key, ReleaseCause.GROUP_CHANGED, why)
        if old != workload:
            for key in self.gangs_of(workload.key):
                self._moved.add(key)
                self._rejoin(key)

    def _rejoin(self, key: str) -> None:
        """A gang whose object arrived or changed counts as joined (`take_joined`) while it
        has a pending member and no reservation: its members may have come first, since
        pods and gang objects arrive on separate watches in no common order."""
        if key in self._reservations:
            return
        for uid in self._members.get(key, ()):
            pod = self._pods[uid]
            if pod.group is not None and not pod.node_name:
                self._joined[key] = pod.group
                return

    def set_group_error(self, key: str, reason: str) -> None:
        """Record that a gang object exists but is invalid; its members wait with `reason`.
        A reservation it held is released: its gangs can no longer be planned or bound."""
        group = self._groups.pop(key, None)
        self._workloads.pop(key, None)
        composite = self._composites.pop(key, None)
        self._group_errors[key] = reason
        self.generation += 1
        self._moved.add(key)
        self._tree_memo.clear()
        why = f"gang object {key} is invalid now ({reason}); its members wait until it is fixed"
        for held in self._held_by(key):
            self.release(held, ReleaseCause.GROUP_CHANGED, why)
        if composite is not None:
            self._tree_changed(composite.namespace, [], key)
        elif group is not None and group.parent:
            self._tree_changed(group.namespace, [], key)

    def remove_group(self, key: str) -> bool:
        """Forget a gang object (a PodGroup, or a Workload and its gangs). Returns whether a
        reservation was released with it."""
        group = self._groups.pop(key, None)
        workload = self._workloads.pop(key, None)
        composite = self._composites.pop(key, None)
        self._group_errors.pop(key, None)
        self.generation += 1
        self._moved.add(key)
        self._tree_memo.clear()
        if composite is not None:
            why = f"CompositePodGroup {composite.namespace}/{composite.name} was deleted"
            released = self.release(key, ReleaseCause.GROUP_GONE, why)
            self._tree_changed(composite.namespace, [], key)
            return released is not None
        if group is not None and group.parent:
            self._tree_changed(group.namespace, [self._gang_key_above(group)], key)
        if workload is not None:
            why = f"Workload {workload.namespace}/{workload.name} was deleted"
            held = [self.release(k, ReleaseCause.GROUP_GONE, why) for k in self._held_by(key)]
            return any(r is not None for r in held)
        return self.release(key, ReleaseCause.GROUP_GONE, f"PodGroup {key} was deleted") is not None

    def _held_by(self, object_key: str) -> list[str]:
        """Keys of the reserved gangs whose object is `object_key`."""
        return [k for k in self._reservations if GroupRef.parse(k).object_ref.key == object_key]

    def gangs_of(self, object_key: str) -> list[str]:
        """Keys of the gangs with members whose object is `object_key` (a Workload holds
        one per pod group and replica key; a PodGroup's pods may be a composite gang's)."""
        return sorted(
            key
            for key, uids in self._members.items()
            if any(
                (group := self.declared_group(self._pods[uid])) is not None
                and group.object_ref.key == object_key
                for uid in uids
            )
        )

    # ---- reservations ------------------------------------------------------------------

    def reserve(self, reservation: Reservation) -> Reservation:
        """Publish every member's reservation at once; returns it with its serial.

        Preconditions: no reservation for the group exists, and every member fits on its
        node in the current state (the caller planned on a snapshot of this generation).
        Violations raise StateError and change nothing.
        """
        if reservation.group_key in self._reservations:
            raise StateError(f"gang {reservation.group_key} already holds a reservation")
        per_node: dict[str, Resources] = {}
        for m in reservation.members:
            if m.state is not MemberState.RESERVED:
                raise StateError(f"member {m.pod_key} must start reserved")
            per_node[m.node] = per_node.get(m.node, EMPTY) + m.requests
        for name, total in per_node.items():
            info = self._nodes.get(name)
            if info is None or not total.fits_in(info.free):
                raise StateError(f"reservation for {reservation.group_key} no longer fits {name}")
        for name, total in per_node.items():
            self._add_reserved(name, total)
        self._serials += 1
        published = replace(reservation, serial=self._serials)
        self._reservations[reservation.group_key] = published
        self._touched.groups.add(reservation.group_key)
        self._moved.add(reservation.group_key)
        return published

    def release(
        self,
        group_key: str,
        cause: ReleaseCause = ReleaseCause.RELEASED,
        why: str = "",
        *,
        serial: int | None = None,
    ) -> Reservation | None:
        """Return every still-reserved member's resources; assumed members stay counted.

        With `serial`, only that reservation is released (a newer one of the gang stays).
        Returns the reservation as it was, or None if there was nothing to release.
        """
        reservation = self._reservations.get(group_key)
        if reservation is None or (serial is not None and reservation.serial != serial):
            return None
        del self._reservations[group_key]
        self._touched.groups.add(group_key)
        self._moved.add(group_key)
        for m in reservation.members:
            if m.state is MemberState.RESERVED:
                self._add_reserved(m.node, EMPTY - m.requests)
        assumed = tuple(m for m in reservation.members if m.state is MemberState.ASSUMED)
        if assumed:
            # Bindings in flight keep their member records so forget() can still find them.
            self._reservations[group_key] = replace(reservation, members=assumed)
        self.generation += 1
        if self.on_release is not None:
            self.on_release(Released(reservation, cause, why))
        return reservation

    def extend(self, group_key: str, serial: int, until: float) -> None:
        """Push reservation `serial`'s deadline out to `until` (never in): its gang is still
        assembling at the bind barrier."""
        r = self._reservations.get(group_key)
        if r is not None and r.serial == serial and until > r.expires_at:
            self._reservations[group_key] = r.extended(until)

    def expire(self, now: float) -> list[Released]:
        """Release every reservation whose deadline has passed (kube-scheduler never says)."""
        due = [
            r
            for r in self._reservations.values()
            if r.expires_at <= now and any(m.state is MemberState.RESERVED for m in r.members)
        ]
        released = []
        for r in due:
            unbound = [
                m.pod_key or "a slot no member claimed"
                for m in r.members
                if m.state is MemberState.RESERVED
            ]
            why = (
                f"reservation expired after {round(r.expires_at - r.reserved_at)}s with members "
                f"still unbound: {', '.join(unbound)}"
            )
            if self.release(r.group_key, ReleaseCause.EXPIRED, why) is not None:
                released.append(Released(r, ReleaseCause.EXPIRED, why))
        return released

    def claim(self, group_key: str, slot_uid: str, pod: Pod) -> MemberReservation:
        """An arriving member takes a template slot of its gang's reservation.

        Preconditions: the slot exists and is unclaimed, the pod is not a member yet, and
        its requests fit the slot's (the planner matched them); the slot's capacity stays reserved
        for it. Violations raise StateError.
        """
        r = self._reservations.get(group_key)
        slot = r.member(slot_uid) if r is not None else None
        if r is None or slot is None or not slot.is_slot:
            raise StateError(f"gang {group_key} holds no slot {slot_uid}")
        if r.member(pod.uid) is not None:
            raise StateError(f"pod {pod.key} already holds a place in gang {group_key}")
        if not pod.requests.fits_in(slot.requests):
            raise StateError(f"pod {pod.key} asks for more than slot {slot_uid} holds")
        claimed = replace(slot, pod_uid=pod.uid, pod_key=pod.key)
        self._replace_member(r, claimed, replacing=slot_uid)
        self.generation += 1
        return claimed

    def unclaim(self, group_key: str, pod_uid: str) -> None:
        """A member of a template reservation gives its claimed slot back, unbound (it was
        claimed on arrival, and kube-scheduler then did not offer that node)."""
        r = self._reservations.get(group_key)
        m = r.member(pod_uid) if r is not None else None
        if r is None or m is None or not r.template or m.state is not MemberState.RESERVED:
            raise StateError(f"pod {pod_uid} holds no claimed slot in gang {group_key}")
        slot_uid = f"{SLOT_PREFIX}{pod_uid}"
        taken = 0
        while r.member(slot_uid) is not None:  # the pod gave a slot back before: one uid each
            taken += 1
            slot_uid = f"{SLOT_PREFIX}{pod_uid}~{taken}"
        slot = replace(m, pod_uid=slot_uid, pod_key="")
        self._replace_member(r, slot, replacing=pod_uid)
        self.generation += 1

    def assume(self, pod_uid: str, node: str) -> None:
        """Mark a pod as being bound to `node`: its usage moves from reserved to requested."""
        pod = self._pods.get(pod_uid)
        if pod is None:
            raise StateError(f"cannot assume unknown pod {pod_uid}")
        if pod.node_name or pod_uid in self._assumed:
            raise StateError(f"pod {pod.key} is already bound or assumed")
        if node not in self._nodes:
            raise StateError(f"cannot assume pod {pod.key} onto unknown node {node}")
        if pod.group is not None:
            r = self._reservations.get(pod.group.key)
            m = r.member(pod_uid) if r is not None else None
            if r is not None and m is not None:
                if m.node != node:
                    raise StateError(f"pod {pod.key} is reserved on {m.node}, not {node}")
                if m.state is MemberState.RESERVED:
                    self._add_reserved(node, EMPTY - m.requests, to_requested=True)
                self._replace_member(r, replace(m, state=MemberState.ASSUMED))
        self._assumed[pod_uid] = node
        self._recount(pod_uid)
        if pod.group is not None:
            self._moved.add(pod.group.key)

    def forget(self, pod_uid: str) -> None:
        """Undo assume() after a failed binding: the member is reserved again if it was one."""
        node = self._assumed.pop(pod_uid, None)
        if node is None:
            return
        pod = self._pods.get(pod_uid)
        self._recount(pod_uid)
        if pod is not None and pod.group is not None:
            self._moved.add(pod.group.key)
            r = self._reservations.get(pod.group.key)
            m = r.member(pod_uid) if r is not None else None
            if r is None or m is None or m.state is not MemberState.ASSUMED:
                return
            if m.node not in self._nodes or m.node in self._phantoms:
                # Its node was removed while it was being bound (which released the gang):
                # nothing is left to hold there, and a phantom node holds no reservation.
                self._drop_member(r.group_key, pod_uid, vanished=False)
                return
            self._add_reserved(m.node, m.requests)
            self._replace_member(r, replace(m, state=MemberState.RESERVED))

    def _replace_member(
        self, r: Reservation, member: MemberReservation, *, replacing: str | None = None
    ) -> None:
        old = member.pod_uid if replacing is None else replacing
        self._reservations[r.group_key] = r.with_member(old, member)
        self._touched.groups.add(r.group_key)
        self._moved.add(r.group_key)

    def _drop_member(self, group_key: str | None, pod_uid: str, *, vanished: bool) -> None:
        """The pod bound or vanished: its reservation record has served its purpose (a
        template's member that vanished before binding gives its slot back)."""
        if group_key is None:
            return
        r = self._reservations.get(group_key)
        m = r.member(pod_uid) if r is not None else None
        if r is None or m is None:
            return
        if vanished and r.template and m.state is MemberState.RESERVED:
            self.unclaim(group_key, pod_uid)
            return
        if m.state is MemberState.RESERVED:
            self._add_reserved(m.node, EMPTY - m.requests)
        self._touched.groups.add(group_key)
        self._moved.add(group_key)
        if len(r.members) > 1:
            self._reservations[group_key] = r.without_member(pod_uid)
        else:
            del self._reservations[group_key]
        self.generation += 1

    # ---- invariants --------------------------------------------------------------------

    def bound_members(self, group_key: str) -> list[Pod]:
        return [p for p in self.members(group_key) if self.is_bound(p)]

    def bound_count(self, group_key: str) -> int:
        """`len(bound_members(group_key))`, kept as pods change (`_recount`): the barrier
        asks at every arrival and bind of a gang that may have a thousand members."""
        return self._bound_counts.get(group_key, 0)

    def overcommitted_nodes(self) -> list[str]:
        """Nodes whose requested + reserved exceeds allocatable in some resource (must be empty
        for everything Phalanx decides; pods bound by others can still cause it)."""
        return sorted(
            info.name
            for info in self._nodes.values()
            if info.name not in self._phantoms and any(v < 0 for v in info.free.values())
        )


def _deleting(ref: GroupRef) -> str:
    return f"{deleting_reason(ref)}; its reservation is released"


def _changed(old: PodGroup, new: PodGroup) -> str:
    """Why a changed PodGroup's reservation is released, for people."""
    what = (
        f"gang size {old.min_member} -> {new.min_member}"
        if old.min_member != new.min_member
        else "its settings changed"
    )
    return f"PodGroup {new.key} changed ({what}); re-planning the gang"
