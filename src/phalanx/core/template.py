"""Template reservation: a gang reserved from its first member's shape before every sibling
exists (DESIGN §10 narrows §4's "quorum first").

Operators create a gang's pods from one template (Kubeflow, MPI, JobSet, KubeRay workers),
so the first member to reach `/filter` already says what the rest will ask for. Waiting
for all `minMember` pods to exist costs each of them kube-scheduler's backoff; reserving
`minMember` slots of that shape at once lets every sibling claim a slot the moment it
arrives. The bind barrier still releases nothing until the quorum has reached `/bind`, so
all-or-nothing is unchanged.

A gang is templated only when its members are interchangeable: no execution plan, no
differentiable members, no topology slices or Volcano subgroups (they need member ranks or
labels that pods not yet created do not have), no member bound yet, and every existing
member with the same requests and the same node constraints. Otherwise it keeps
quorum-first.

A gang with task minima (Volcano's `spec.minTaskMember`, KAI's subgroups, YuniKorn's task
groups) is templated only when they name
one task and every existing member is of it: the slots then stand for members of that task
and only they may claim one (`Reservation.slot_task`), so every reservation made holds
`minMember` members of the task, its minimum included. Minima naming two tasks or more
keep quorum-first: one member's shape says nothing of another task's.

Lifecycle of a template reservation::

    first member ──▶ RESERVED: its own place + (minMember - existing) slots of its shape
    a sibling arrives ──▶ claims a slot (one on an offered node, that it is eligible for)
        │ no slot fits it (another shape) ──▶ released, re-planned once (quorum-first if the
        │                                     shapes are mixed)
    a claimed member vanishes before binding ──▶ its slot is free again (`ClusterState`)
    every slot claimed + quorum at /bind ──▶ the barrier binds them together
    expiry, release ──▶ as any reservation
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from phalanx.core import eligibility
from phalanx.core.cache import SLOT_PREFIX, ClusterState, MemberReservation, Reservation
from phalanx.core.groups.registry import task_minima_field
from phalanx.core.model import ChildGroups, GroupRef, Pod, PodGroup, Resources
from phalanx.core.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Claim:
    """The slot an arriving member takes; `offered` tells whether kube-scheduler offered its
    node (if not, the gang re-plans as for any reserved node not offered)."""

    slot: MemberReservation
    offered: bool


@dataclass(frozen=True, slots=True)
class NoSlot:
    reason: str


def template_of(state: ClusterState, group: PodGroup, members: Sequence[Pod]) -> Pod | None:
    """The member whose shape the gang's missing members are assumed to share, or None when
    the gang must wait for its quorum (see module docstring)."""
    if not members or len(members) >= group.min_member:
        return None
    if group.plan_json or group.differentiable or group.basic:
        return None
    if group.topology is not None and (group.topology.slice_size or group.topology.subgroups):
        return None  # which member lands in which slice or subgroup is not known yet
    if isinstance(group.min_task_member, ChildGroups):
        return None  # a composite's PodGroups are shaped each its own way (head, workers)
    if group.min_task_member and (
        len(group.min_task_member) > 1
        or any(p.task != group.min_task_member[0][0] for p in members)
    ):
        return None
    first = members[0]
    shape = (first.requests, eligibility.eligibility_key(first))
    for p in members:
        if p.invalid or p.plan_node or state.is_bound(p):
            return None
        if (p.requests, eligibility.eligibility_key(p)) != shape:
            return None
    return first


def slot_requests(template: Pod, group: PodGroup) -> Resources:
    """What one slot holds: the template's requests, raised to the PodGroup's
    `minResources` shared out over `minMember` where that asks for more."""
    if not group.min_resources:
        return template.requests
    share = {k: -(-v // group.min_member) for k, v in group.min_resources.items() if v > 0}
    merged = dict(template.requests.items())
    for k, v in share.items():
        merged[k] = max(merged.get(k, 0), v)
    return Resources(merged)


def cluster_room(snapshot: Snapshot, requests: Resources, count: int) -> int:
    """How many members asking for `requests` the nodes could hold even empty, counted up to
    `count`. Checked before one placeholder per missing member is made: a `minMember` of a
    billion must be refused at once, not planned."""
    room = 0
    for info in snapshot:
        room += requests.times_fits_in(info.node.allocatable, count - room)
        if room >= count:
            break
    return room


def placeholders(template: Pod, count: int, requests: Resources) -> tuple[Pod, ...]:
    """Stand-ins for the members not created yet: the template's constraints, the slot's
    requests, and a slot id for a UID (never a real one)."""
    return tuple(
        replace(
            template, uid=f"{SLOT_PREFIX}{i}", name=f"{template.name}+slot{i}", requests=requests
        )
        for i in range(count)
    )


def pick_slot(
    state: ClusterState, reservation: Reservation, pod: Pod, offered: Sequence[str]
) -> Claim | NoSlot:
    """The slot `pod` should claim: one its requests fit on a node it may use, preferring an
    offered node (then the first in reservation order, for determinism)."""
    # The first fitting slot on an offered node, else the first fitting one: stop at the
    # first that settles it (each arrival of a 256-member gang asks, so a full scan is
    # quadratic).
    task = reservation.slot_task
    if task and pod.task != task:
        return NoSlot(
            f"pod {pod.key} is not of task {task}, whose members gang "
            f"{reservation.group_key} reserved its slots for "
            f"({task_minima_field(GroupRef.parse(reservation.group_key).dialect)})"
        )
    first: MemberReservation | None = None
    wanted = set(offered) if offered else None
    for slot in reservation.slots():
        if first is not None and (wanted is None or slot.node not in wanted):
            continue  # could not change the answer
        info = state.node(slot.node)
        if info is None or not pod.requests.fits_in(slot.requests):
            continue
        if eligibility.ineligibility(pod, info.node) is not None:
            continue
        if wanted is not None and slot.node in wanted:
            return Claim(slot, offered=True)
        if first is None:
            first = slot
            if wanted is None:
                break
    if first is None:
        return NoSlot(
            f"pod {pod.key} matches none of the {len(reservation.slots())} slot(s) gang "
            f"{reservation.group_key} reserved from its first member's shape"
        )
    return Claim(first, offered=False)
