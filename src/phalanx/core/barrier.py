"""The bind barrier's decisions (DESIGN §6), pure: the service only holds requests and binds.

For each `/bind` kube-scheduler sends, `admit` decides what happens to it:

* `Answer(error)` — answer at once ("" is success: the pod is already bound there);
* `BindAlone` — a pod in no gang (or in a group of upstream's `basic` policy), or a member
  beyond a bound quorum with no reservation: bind now if it still fits;
* `BindReserved` — a member beyond a bound quorum that holds its own reservation: bind now;
* `Join` — a reserved member of a gang whose quorum is not bound: wait at the gang's gate.

A gate opens when `quorum_present` and nothing is `tasks_short` (a Volcano gang's task
minima, among the members held and bound); before any binding, and again after every
`await`, each waiter is re-checked with `still_bindable`. Where the service allows it, the
gate also counts the gang's other reserved members that Phalanx may bind itself
(`completions`): once one member has reached `/bind`, the rest of a reserved gang need not
wait for their own cycles.
Like coscheduling's Permit, the decision is a value here and the glue
(`phalanx.service.barrier`) does the waiting and the side effects.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from phalanx.core import eligibility
from phalanx.core.cache import ClusterState, MemberState
from phalanx.core.dra_inventory import is_dra_entry
from phalanx.core.model import Binding, Node, Pod, PodGroup, Resources
from phalanx.core.quorum import TaskMinima, task_shortfall
from phalanx.core.resolution import GroupDefaults, Resolved, resolve_group


@dataclass(frozen=True, slots=True)
class Answer:
    error: str  # "" is success


@dataclass(frozen=True, slots=True)
class BindAlone:
    pod: Pod
    node: str


@dataclass(frozen=True, slots=True)
class BindReserved:
    pod: Pod
    node: str


@dataclass(frozen=True, slots=True)
class Join:
    pod: Pod
    node: str
    group: PodGroup
    serial: int  # the reservation the gate is opened for
    bound: int  # members bound (or being bound) when this one arrived


Admission = Answer | BindAlone | BindReserved | Join


@dataclass(frozen=True, slots=True)
class Completion:
    """A reserved member the gate binds with its gang before kube-scheduler sent its `/bind`."""

    pod: Pod
    node: str


def admit(state: ClusterState, binding: Binding, defaults: GroupDefaults) -> Admission:
    """What to do with one `/bind` (see module docstring)."""
    ref, node = binding.pod, binding.node
    pod = state.pod_by_key(ref.namespace, ref.name)
    if pod is None:
        return Answer(f"pod {ref.key} is unknown to Phalanx")
    if ref.uid and pod.uid != ref.uid:
        return Answer(f"pod {ref.key} has UID {pod.uid}, not {ref.uid}: it was recreated")
    if pod.node_name:
        if pod.node_name == node:
            return Answer("")
        return Answer(f"pod {pod.key} is already bound to {pod.node_name}")
    if state.assumed_node(pod.uid) is not None:
        return Answer(f"pod {pod.key} is already being bound")
    if pod.group is None:
        return BindAlone(pod, node)
    key = pod.group.key
    resolution = resolve_group(state, pod.group, defaults)
    if not isinstance(resolution, Resolved):
        return Answer(resolution.reason)
    group = resolution.group
    if group.basic:
        return BindAlone(pod, node)
    bound = state.bound_count(key)
    reservation = state.reservation(key)
    member = reservation.member(pod.uid) if reservation is not None else None
    if bound >= group.min_member and not tasks_short(state, key, group.min_task_member, ()):
        # Elastic members beyond a bound quorum join as capacity allows; a reserved one
        # binds into its own reservation.
        if member is None:
            return BindAlone(pod, node)
        if member.node != node:
            return Answer(f"gang {key} reserved {member.node} for pod {pod.key}, not {node}")
        return BindReserved(pod, node)
    if reservation is None or member is None or member.state is not MemberState.RESERVED:
        return Answer(
            f"gang {key} holds no reservation for pod {pod.key} (it expired or was released); "
            "the gang will be re-planned"
        )
    if member.node != node:
        return Answer(f"gang {key} reserved {member.node} for pod {pod.key}, not {node}")
    return Join(pod, node, group, reservation.serial, bound)


def quorum_present(waiting: int, bound: int, min_member: int) -> bool:
    """Whether the members held at the gate plus those already bound make the quorum's
    count (a gang with task minima also needs `tasks_short` to say nothing)."""
    return waiting + bound >= min_member


def tasks_short(state: ClusterState, key: str, minima: TaskMinima, present: Iterable[Pod]) -> str:
    """Which Volcano task minima the `present` members (held at the gate, or completed with
    them) and gang `key`'s bound ones miss ("task worker has 1 of 2 member(s)"); "" when
    none, or when the gang has none."""
    if not minima:
        return ""
    return task_shortfall(minima, [*present, *state.bound_members(key)])


def fits_alone(state: ClusterState, pod: Pod, node: str) -> str:
    """Why `pod` may not be bound to `node` on its own now, or "" if it may."""
    info = state.node(node)
    if info is None:
        return f"node {node} is unknown to Phalanx"
    if not pod.requests.fits_in(info.free):
        short = ", ".join(pod.requests.shortfall(info.free))
        return f"pod {pod.key} no longer fits node {node} (insufficient {short})"
    return ""


def still_bindable(state: ClusterState, key: str, serial: int, waiter: Pod, node: str) -> str:
    """Why a member waiting at the gate of reservation `serial` must not be bound now, or ""."""
    pod = state.pod(waiter.uid)
    if pod is None:
        return f"pod {waiter.key} no longer exists"
    if state.bound_node(pod):
        return f"pod {pod.key} is already bound"
    reservation = state.reservation(key)
    member = reservation.member(pod.uid) if reservation is not None else None
    if (
        reservation is None
        or reservation.serial != serial
        or member is None
        or member.state is not MemberState.RESERVED
        or member.node != node
    ):
        return f"gang {key} no longer holds {node} for pod {pod.key}"
    if outgrew(pod, member.requests):
        # Its requests grew after its gang was planned (a resize, an edited file): the
        # capacity reserved for it no longer holds it.
        return f"pod {pod.key} now asks for more than gang {key} reserved for it on {node}"
    info = state.node(node)
    if info is None or not info.node.schedulable:
        return f"node {node} is gone, cordoned or not ready"
    return ""


def outgrew(pod: Pod, reserved: Resources) -> bool:
    """Whether `pod` now asks for more than `reserved`, what its gang's reservation holds
    for it. Its DRA entries are left out: a claim the gang's members share is charged to
    one of them until it is allocated (`dra_demand.gang_demand`), and which one changes as
    members arrive and claims are allocated, while the gang's total stays the same. Most
    members share their requests object with their reservation: nothing to compare."""
    requests = pod.requests
    if requests is reserved:
        return False
    return any(
        amount > reserved.get(name)
        for name, amount in requests.items()
        if amount > 0 and not is_dra_entry(name)
    )


def completions(
    state: ClusterState,
    key: str,
    serial: int,
    held: Collection[str],
) -> list[Completion]:
    """The members of reservation `serial` that the gate may bind without their `/bind`.

    Each is reserved (not a slot, not assumed), pending, and still bindable where it is
    reserved; asks for nothing only kube-scheduler judges (`Pod.unjudged`: no scheduling
    gates, host ports, inter-pod affinity, required spreading, storage volumes or
    ResourceClaims), nor an extended resource its node serves from DRA devices (the claim
    for them is made in the pod's own PreBind; a device-plugin node serves them itself);
    and is still eligible for its node by everything Phalanx judges, since its own cycle
    never filtered that node. `held` are the uids already at the gate.

    Every such member is completed, whether or not kube-scheduler would reach it soon:
    completing only those that would otherwise wait left the bench's gangs whole later, and
    the 256-member gang no sooner (docs/design.md "Completing a gang at its first /bind").
    """
    reservation = state.reservation(key)
    if reservation is None or reservation.serial != serial:
        return []
    found = []
    for member in reservation.members:
        if member.is_slot or member.state is not MemberState.RESERVED or member.pod_uid in held:
            continue
        pod, info = state.pod(member.pod_uid), state.node(member.node)
        if pod is None or info is None or not completable(pod, info.node):
            continue
        if still_bindable(state, key, serial, pod, member.node):
            continue
        if eligibility.ineligibility(pod, info.node) is not None:
            continue
        found.append(Completion(pod, member.node))
    return found


def completable(pod: Pod, node: Node) -> bool:
    """Whether a gate may bind `pod` on `node` without the pod's own cycle, as far as the
    pod itself says: nothing only kube-scheduler judges (`Pod.unjudged`), no devices its
    own PreBind allocates there, not deleted or invalid. The rest of `completions`' checks
    (the reservation, eligibility) change with the cluster and are made at the gate."""
    if pod.deleting or pod.unjudged or pod.invalid:
        return False
    return pod.devices is None or not pod.devices.allocates_on(node)
