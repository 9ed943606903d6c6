"""DRA demand: what a pod's ResourceClaims ask of a node, in the gang transaction's terms.

The bridge. The gang transaction plans `Resources` vectors; DRA devices join them as
synthetic resources (`phalanx.core.dra_inventory`): a node offers, per device class,
`class.dra.phalanx.io/<class>` free devices, per class and device shape
`class.dra.phalanx.io/<class>~<shape>` (for classes with several shapes in the cluster),
and `dra.phalanx.io/gpu` GPU-like devices (counted by `Resources.gpus()` like
`nvidia.com/gpu`). A pod's unallocated claims ask for the same
names, so whole-gang reservation, overlays, release and "reserved is invisible to others"
work unchanged, and a device-plugin node (no such entries) can never serve a DRA member.

`allocationMode: All` asks for as many devices as the node has, which no per-pod vector can
say. It takes `whole.dra.phalanx.io/<class>` whole instead, an entry every request that could
get one of the class's devices also draws its count from, and that a node offers whole only
while every device of the class there is free: so an All member is planned alone on its
class's devices, never beside a claim kube-scheduler would refuse it for (stricter than
kube-scheduler where the class has devices its selectors do not match).

Extended resources a DeviceClass serves (`extendedResourceName`, or the implicit
`deviceclass.resource.kubernetes.io/<class>`; KEP-5004): a pod asking `nvidia.com/gpu` is
served by device plugin where the node has it allocatable and by the class's devices
elsewhere, and its vector must fit both. So it asks the resource and what as many
untainted devices of the class take as a claim request would (`ExtendedDemand`); a
device-plugin node offers the latter in proportion to its allocatable, a DRA node the
resource as many as the class's free untainted devices. Claim requests and these pods meet
on the class entry, the wholes and the anys, so one device is never planned twice.

Who counts a claim (never twice):

* an *allocated* claim is counted by the node: its devices are gone from `node_entries`;
  the pod asks for nothing more, only for nodes where the allocation is reachable;
* an *unallocated* claim is counted by the pod's requests (a template not yet turned into a
  claim counts from the template); a claim several members share is charged to one member
  (`gang_demand`), and the sharers must share its node;
* the claim kube-scheduler makes for a pod's extended resources, once allocated, likewise:
  the node counts it, and the pod's extended resource requests are taken off.

How exactly a request is counted (`Exactness`):

* EXACT: no selector, or selectors on shape attributes that one device shape of the class
  satisfies: the request takes the class entry and, if the class has several shapes, that
  shape's entry.
* PER_NODE: other supported selectors: the class entry, and a node serves the pod only if
  it has enough matching devices. Exact on nodes whose devices of the class are alike.
* COUNT_ONLY (the fallback, said once): a selector Phalanx cannot evaluate, or one reading
  a value it does not keep (`uuid`): the class entry, on nodes with enough class devices
  that pass what Phalanx does evaluate (other selectors, conjuncts of the unevaluated one).

Device taints: a class with tainted devices in the cluster also has `any.dra.phalanx.io/
<class>`, its free devices tainted or not. Every request for it (or for a class sharing a
device shape with it) takes its count there; one that does not tolerate the taints takes
the untainted entries above as well, one that does takes `any` alone and is checked per
node for enough devices it tolerates (PER_NODE at best).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from enum import StrEnum
from fractions import Fraction

from phalanx.core.cel import AttributeValue, Selector, Unsupported
from phalanx.core.dra import (
    IMPLICIT_EXTENDED_PREFIX,
    AllocationMode,
    ClaimSpec,
    DeviceRequest,
    DeviceShape,
    DeviceToleration,
    ResourceClaim,
    ResourceClaimTemplate,
    is_dropped,
    is_identifying,
    tolerated,
)
from phalanx.core.dra_inventory import (
    WHOLE,
    Allocated,
    DeviceCatalog,
    DeviceHolder,
    InstalledDevices,
    class_entry,
    gpu_info,
    is_dra_entry,
    node_entries,
    shape_entry,
    used_up,
)
from phalanx.core.eligibility import term_matches
from phalanx.core.model import (
    DRA_GPU,
    DRA_GPU_SERVED,
    EMPTY,
    Node,
    Pod,
    PodClaimRef,
    Resources,
    SelectorTerm,
    is_gpu_resource,
)


class Exactness(StrEnum):
    EXACT = "exact"
    PER_NODE = "per-node"
    COUNT_ONLY = "count-only"


@dataclass(frozen=True, slots=True)
class RequestDemand:
    """One device request of one claim, as Phalanx plans it."""

    request: str  # the request's name ("gpu", or "gpu/h100" for a firstAvailable choice)
    device_class: str
    count: int  # devices a node must have that match (0: its devices need not be on the node)
    takes: Resources  # what it takes from the node's DRA entries (EMPTY: takes none)
    selectors: tuple[Selector, ...] = ()  # checked per node (empty for COUNT_ONLY)
    exactness: Exactness = Exactness.EXACT
    note: str = ""  # why it is not exact, for people
    # The device taints it may be given (only where its class has tainted devices).
    tolerations: tuple[DeviceToleration, ...] = ()
    every: bool = False  # allocationMode All: every device of the node that matches


@dataclass(frozen=True, slots=True)
class ClaimDemand:
    key: str  # "namespace/name"; a claim not made from its template yet: "namespace/pod#entry"
    requests: tuple[RequestDemand, ...] = ()
    allocated: bool = False
    # An allocated claim's devices are reachable only here (None: anywhere).
    node_terms: tuple[SelectorTerm, ...] | None = None
    shareable: bool = False  # named directly by the pod, so other pods may name it too

    @property
    def takes(self) -> Resources:
        total = EMPTY
        if not self.allocated:
            for r in self.requests:
                total = total + r.takes
        return total


@dataclass(frozen=True, slots=True)
class ExtendedDemand:
    """A pod's request of an extended resource a DeviceClass serves (KEP-5004).

    A node with the resource in its allocatable serves it by device plugin; one without it
    from the class's devices, as kube-scheduler's DynamicResources plugin allocates them
    into a claim it makes for the pod. The pod asks for `resource` and `takes`: what as many
    devices of the class take for an untainted request without selectors (the class entry,
    and the wholes, anys and counters a claim request draws from). A device-plugin node
    offers `takes` in proportion to its allocatable, a DRA node offers `resource` as many as
    the class's free untainted devices, so every node checks the same vector (`node_with_devices`).
    """

    resource: str
    count: int
    device_class: str
    takes: Resources = EMPTY
    # The claim kube-scheduler made is allocated and counted by its node: the pod asks
    # nothing more (its `resource` request is taken off, `PodDemand.released`).
    held: bool = False


@dataclass(frozen=True, slots=True)
class PodDemand:
    """All of a pod's claims. `problems` is bad input: the pod cannot be placed as it is;
    `waiting` is a claim kube's resourceclaim controller named but Phalanx has not seen yet
    (the pod cannot be placed yet, and nothing is wrong)."""

    claims: tuple[ClaimDemand, ...] = ()
    problems: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    extended: tuple[ExtendedDemand, ...] = ()
    # (resource, class) of each extended resource the pod asks that a class maps while
    # kube-scheduler serves none from devices (`DeviceCatalog.unbridged`): only nodes with
    # it allocatable host the pod, and the others say why.
    unbridged: tuple[tuple[str, str], ...] = ()

    @property
    def blocker(self) -> str:
        """Why the pod cannot be placed on any node now, or ""."""
        return (self.problems or self.waiting or ("",))[0]

    @property
    def shares(self) -> bool:
        """Whether it names an unallocated claim other pods may name too."""
        return any(c.shareable and not c.allocated for c in self.claims)

    @property
    def notes(self) -> tuple[str, ...]:
        """Where Phalanx is less than exact, each said once."""
        seen = dict.fromkeys(
            f"claim {c.key} request {r.request}: {r.note}"
            for c in self.claims
            for r in c.requests
            if r.note
        )
        return tuple(seen)

    @property
    def released(self) -> Resources:
        """Extended resource requests an allocated claim serves, taken off the pod's own."""
        return Resources((e.resource, e.count) for e in self.extended if e.held)

    def requests(self, exclude: Set[str] = frozenset()) -> Resources:
        """Extra requests for the pod: its unallocated claims, except the `exclude`d keys,
        and its extended resources served by DRA (less those a held claim serves)."""
        total = EMPTY
        for claim in self.claims:
            if claim.key not in exclude:
                total = total + claim.takes
        for extended in self.extended:
            if not extended.held:
                total = total + extended.takes
        return total - self.released

    def eligibility_key(self) -> tuple[object, ...]:
        """Pods with equal keys are served by the same nodes (see `ineligibility`)."""
        claims = tuple(
            (
                c.allocated,
                c.node_terms,
                tuple(
                    (r.device_class, r.count, r.selectors, r.tolerations, r.every)
                    for r in c.requests
                ),
            )
            for c in self.claims
        )
        served = tuple((e.resource, e.count, e.device_class, e.held) for e in self.extended)
        key: tuple[object, ...] = (claims, served) if served else claims
        if self.unbridged:
            key = (key, self.unbridged)
        return (key, self.blocker) if self.blocker else key


NO_DEMAND = PodDemand()


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def pod_demand(
    pod: Pod,
    claims: Mapping[str, ResourceClaim],
    templates: Mapping[str, ResourceClaimTemplate],
    catalog: DeviceCatalog,
    carried: Container[str] = frozenset(),
    *,
    unreadable: Mapping[str, str] | None = None,
    group_claims: Sequence[PodClaimRef] = (),
) -> PodDemand:
    """The device demand of a pod's `spec.resourceClaims` (claims and templates by key).

    An allocated claim in `carried` is still counted by the pod (its devices are held by
    the pod's reservation, not yet by its node: see `DraState.carry`), on its node only.
    `unreadable` says why objects the API holds but Phalanx cannot read are missing
    ("Kind key" -> why, `unreadable_key`). `group_claims` are the `spec.resourceClaims` of
    the upstream PodGroup the pod names (`Pod.scheduling_group`; see `shared_refs`).
    """
    why = unreadable or {}
    mapped = extended_requests(pod, catalog)
    unbridged = unbridged_requests(pod, catalog)
    if not pod.resource_claims and not mapped and not unbridged:
        return NO_DEMAND
    result: list[ClaimDemand] = []
    problems: list[str] = []
    waiting: list[str] = []
    named: set[str] = set()
    made: PodClaimRef | None = None
    shared = shared_refs(pod, group_claims)
    for ref in (shared.get(r.name, r) if r.template else r for r in pod.resource_claims):
        if ref.extended:
            made = ref
            continue
        if ref.not_needed:
            continue
        if ref.claim:
            key = claim_key(pod.namespace, ref.claim)
            if key in named:
                continue  # one claim is one allocation, however many entries name it
            named.add(key)
            claim = claims.get(key)
            if claim is None and unreadable_key("ResourceClaim", key) in why:
                problems.append(_unreadable("ResourceClaim", key, why))
                continue
            if claim is None and ref.template:
                waiting.append(
                    f"waiting for ResourceClaim {key} (made from template {ref.template})"
                )
                continue
            if claim is None:
                problems.append(f"ResourceClaim {key} does not exist (yet)")
                continue
            refused = _not_made_for(pod, claim) if ref.template else ""
            if refused:
                problems.append(refused)
                continue
            if claim.deleting:
                problems.append(f"ResourceClaim {key} is being deleted")
                continue
            terms = claim.allocation.node_terms if claim.allocation is not None else None
            if claim.allocation is not None and key not in carried:
                # Its devices are chosen: only where they are reachable matters now.
                result.append(ClaimDemand(key, allocated=True, node_terms=terms))
                continue
            demand, found = _claim(key, claim.spec, catalog, why)
            problems += found
            # A claim of the pod's PodGroup serves every member naming it, as one named
            # directly may serve several pods.
            shareable = not ref.template or bool(claim.owner_pod_group)
            result.append(ClaimDemand(key, demand.requests, node_terms=terms, shareable=shareable))
        else:
            template_key = claim_key(pod.namespace, ref.template)
            template = templates.get(template_key)
            if template is None and unreadable_key("ResourceClaimTemplate", template_key) in why:
                problems.append(_unreadable("ResourceClaimTemplate", template_key, why))
                continue
            if template is None:
                problems.append(f"ResourceClaimTemplate {template_key} does not exist")
                continue
            if ref.name in shared:
                # The PodGroup's claim, not made yet: one for the gang, whichever member asks.
                key = f"{pod.namespace}/{pod.scheduling_group}#{ref.name}"
            else:
                key = f"{pod.namespace}/{pod.name}#{ref.name}"
            demand, found = _claim(key, template.spec, catalog, why)
            problems += found
            result.append(replace(demand, shareable=ref.name in shared))
    held = False
    if made is not None and mapped:
        key = claim_key(pod.namespace, made.claim)
        claim = claims.get(key)
        if claim is not None and claim.allocation is not None:
            terms = claim.allocation.node_terms
            if key in carried:
                # Its pod is a reserved member (as for any claim): the pod counts it.
                result.append(ClaimDemand(key, node_terms=terms))
            elif pod.node_name:
                held = True
                result.append(ClaimDemand(key, allocated=True, node_terms=terms))
            # Else it is left from a cycle that did not bind: kube-scheduler deletes it and
            # allocates anew, so it pins the pod nowhere (its node counts it meanwhile).
    extended = []
    for resource, count, name in mapped:
        device_class = catalog.classes[name]
        if device_class.problem:
            problems.append(
                f"{resource}: DeviceClass {name}, which serves it, is invalid "
                f"({device_class.problem})"
            )
            continue
        takes = extended_takes(resource, name, count, catalog)
        extended.append(ExtendedDemand(resource, count, name, takes, held))
    return PodDemand(tuple(result), tuple(problems), tuple(waiting), tuple(extended), unbridged)


def shared_refs(pod: Pod, group_claims: Sequence[PodClaimRef]) -> dict[str, PodClaimRef]:
    """The pod's template entries whose claim is its PodGroup's, by entry name, each as the
    PodGroup names its claim, for those the pod's own status does not name yet.

    An entry is the PodGroup's when one of `group_claims` has its name and template
    (`resourceclaim.BindTo`): kube's resourceclaim controller then makes one claim for the
    gang, names it in the PodGroup's status, then in each member's. Until the member's
    status names it, the PodGroup's status may; until neither does, the gang's one claim is
    counted from the template under the PodGroup's name.
    """
    if not group_claims or not pod.scheduling_group:
        return {}
    found = {}
    for ref in pod.resource_claims:
        if not ref.template or ref.claim or ref.not_needed:
            continue
        entry = next(
            (g for g in group_claims if (g.name, g.template) == (ref.name, ref.template)), None
        )
        if entry is not None:
            found[ref.name] = entry
    return found


def _not_made_for(pod: Pod, claim: ResourceClaim) -> str:
    """Why a claim generated for one of the pod's templates may not serve it, or "".

    As kube-scheduler's `resourceclaim.IsForPod` with `DRAWorkloadResourceClaims`: the claim
    must be controlled by the pod, or by the PodGroup the pod names in
    `spec.schedulingGroup.podGroupName` (kind PodGroup, `scheduling.k8s.io`, any version).
    """
    if pod.uid and claim.owner_pod == pod.uid:
        return ""
    group = pod.scheduling_group
    if group and claim.owner_pod_group == group:
        return ""
    controller = claim.controller
    owner = f"controlled by {controller}" if controller else "controlled by nothing"
    allowed = f"the pod or its PodGroup {group}" if group else "the pod"
    return f"ResourceClaim {claim.key} was not created for pod {pod.key}: {owner}, not by {allowed}"


def own_requests(pod: Pod) -> Resources:
    """The pod's requests as the API gave them: without the DRA entries its demand added,
    with the extended resources a held claim serves (`PodDemand.released`) back."""
    base = Resources((k, v) for k, v in pod.requests.items() if not is_dra_entry(k))
    return base + pod.devices.demand.released if pod.devices is not None else base


def extended_requests(pod: Pod, catalog: DeviceCatalog) -> list[tuple[str, int, str]]:
    """(resource, count, class) for each extended resource the pod asks that a class
    serves. Asked at every pod's arrival: the pod's own requests are only rebuilt when
    some class serves a resource at all."""
    mapping = catalog.extended
    if not mapping:
        return []
    requests = own_requests(pod)
    return [(r, n, mapping[r]) for r, n in sorted(requests.items()) if n > 0 and r in mapping]


def unbridged_requests(pod: Pod, catalog: DeviceCatalog) -> tuple[tuple[str, str], ...]:
    """(resource, class) for each extended resource the pod asks that a class maps while
    the bridge is off (`DeviceCatalog.unbridged`)."""
    mapping = catalog.unbridged
    if not mapping:
        return ()
    requests = own_requests(pod)
    return tuple((r, mapping[r]) for r, n in sorted(requests.items()) if n > 0 and r in mapping)


def extended_takes(
    resource: str, device_class: str, count: int, catalog: DeviceCatalog
) -> Resources:
    """What `count` devices of the class take, asked as kube-scheduler asks them for
    extended resource `resource`: one untainted request without selectors.

    `DRA_GPU` (the class's devices are GPUs: `DeviceCatalog.gpus`) only for the class's
    implicit name, which no device plugin serves, so its devices are always the class's and
    count the pod's GPUs as a claim's would. Another name is served by device plugin where
    allocatable: it counts the pod's GPUs itself if it is a GPU name (`nvidia.com/gpu`),
    and what a device plugin serves under any other name is not known to be GPUs."""
    request = DeviceRequest("extended", device_class, count=count)
    shapes = catalog.shapes.get(device_class, frozenset())
    takes = _request("extended", request, shapes, catalog).takes
    if resource.startswith(IMPLICIT_EXTENDED_PREFIX):
        return takes
    return Resources((k, v) for k, v in takes.items() if k != DRA_GPU)


def unreadable_key(kind: str, key: str) -> str:
    return f"{kind} {key}"


def _unreadable(kind: str, key: str, why: Mapping[str, str]) -> str:
    return f"{kind} {key} cannot be read ({why[unreadable_key(kind, key)]})"


def _claim(
    key: str, spec: ClaimSpec, catalog: DeviceCatalog, why: Mapping[str, str]
) -> tuple[ClaimDemand, list[str]]:
    problems = [f"claim {key}: {spec.problem}"] if spec.problem else []
    requests = []
    for request in spec.requests:
        chosen = request
        if request.alternatives:
            # kube-scheduler falls back choice by choice; a choice no device in the cluster
            # can serve would leave the pod unplaceable everywhere.
            chosen = next(
                (a for a in request.alternatives if not _ruled_out(a, catalog)),
                request.alternatives[0],
            )
        name = f"{request.name}/{chosen.name}" if request.alternatives else request.name
        device_class = catalog.classes.get(chosen.device_class)
        if device_class is None and unreadable_key("DeviceClass", chosen.device_class) in why:
            unread = _unreadable("DeviceClass", chosen.device_class, why)
            problems.append(f"claim {key} request {name}: {unread}")
            continue
        if device_class is None:
            problems.append(
                f"claim {key} request {name}: DeviceClass {chosen.device_class} does not exist"
            )
            continue
        if device_class.problem:
            problems.append(
                f"claim {key} request {name}: DeviceClass {chosen.device_class} is invalid "
                f"({device_class.problem})"
            )
            continue
        shapes = catalog.shapes.get(chosen.device_class, frozenset())
        demand = _request(name, chosen, shapes, catalog)
        notes = [demand.note] if demand.note else []
        if request.alternatives and len(request.alternatives) > 1:
            notes.append(
                f"firstAvailable: Phalanx plans {chosen.name}, the first choice devices in the "
                "cluster can serve; nodes that could serve only another choice are not used"
            )
        if spec.constraints:
            notes.append("matchAttribute/distinctAttribute constraints are left to kube-scheduler")
        if notes:
            exactness = (
                demand.exactness if demand.exactness is not Exactness.EXACT else Exactness.PER_NODE
            )
            demand = replace(demand, exactness=exactness, note="; ".join(notes))
        requests.append(demand)
    return ClaimDemand(key, tuple(requests)), problems


def _ruled_out(request: DeviceRequest, catalog: DeviceCatalog) -> bool:
    """Whether no device in the cluster can serve the request, as far as the shapes of its
    class's devices tell (selectors on a device's own or unkept values cannot say no). A
    class that is missing or invalid is not ruled out here: it is the problem to report."""
    device_class = catalog.classes.get(request.device_class)
    if device_class is None or device_class.problem or request.device_class in catalog.remote:
        return False
    evaluated = (
        *(s for s in request.selectors if isinstance(s, Selector)),
        *(n for s in request.selectors if isinstance(s, Unsupported) for n in s.necessary),
    )
    on_shapes = [
        s
        for s in evaluated
        if not any(is_identifying(kind, n) or is_dropped(n) for kind, n in s.reads)
    ]
    shapes = _shapes(request, catalog.shapes.get(request.device_class, frozenset()), catalog)
    return not any(all(_shape_matches(s, shape) for s in on_shapes) for shape in shapes)


def _shapes(
    request: DeviceRequest, shapes: frozenset[DeviceShape], catalog: DeviceCatalog
) -> frozenset[DeviceShape]:
    """The shapes of the devices of its class the request may be given: the untainted
    ones, and the tainted ones whose taints it tolerates."""
    if not request.tolerations:
        return shapes
    kinds = catalog.tainted.get(request.device_class, frozenset())
    return shapes | {shape for shape, taints in kinds if tolerated(taints, request.tolerations)}


@dataclass(frozen=True, slots=True)
class _Selectors:
    """A request's selectors, sorted once for `_request` and `_tolerating`."""

    supported: tuple[Selector, ...]  # evaluated by Phalanx
    unsupported: tuple[Unsupported, ...]
    dropped: tuple[str, ...]  # values the supported ones read that Phalanx does not keep
    # What a count-only request is still checked against per node: every selector, or part
    # of one, that Phalanx evaluates on values it keeps (each is necessary, none sufficient).
    checked: tuple[Selector, ...]

    @classmethod
    def of(cls, request: DeviceRequest) -> _Selectors:
        supported = tuple(s for s in request.selectors if isinstance(s, Selector))
        unsupported = tuple(s for s in request.selectors if isinstance(s, Unsupported))
        dropped = tuple(sorted({n for s in supported for _, n in s.reads if is_dropped(n)}))
        checked = tuple(
            s
            for s in (*supported, *(n for u in unsupported for n in u.necessary))
            if not any(is_dropped(read) for _, read in s.reads)
        )
        return cls(supported, unsupported, dropped, checked)


def _request(
    name: str, request: DeviceRequest, shapes: frozenset[DeviceShape], catalog: DeviceCatalog
) -> RequestDemand:
    device_class = request.device_class
    selectors = _Selectors.of(request)
    supported, unsupported = selectors.supported, selectors.unsupported
    dropped, checked = selectors.dropped, selectors.checked
    gpu_like = device_class in catalog.gpus
    # Tolerations matter only where the class has tainted devices.
    tolerations = request.tolerations if device_class in catalog.tainted else ()
    if device_class in catalog.remote:
        why = (
            f"DeviceClass {device_class} has devices reachable from several nodes (a "
            "nodeSelector or allNodes pool), which Phalanx does not count per node; "
            "kube-scheduler allocates this request"
        )
        return RequestDemand(name, device_class, 0, EMPTY, (), Exactness.COUNT_ONLY, why)
    if request.admin_access:
        needs = request.count if request.mode is AllocationMode.EXACT_COUNT else 1
        why = "adminAccess takes no device"
        return RequestDemand(
            name, device_class, needs, EMPTY, checked, Exactness.COUNT_ONLY, why, tolerations
        )
    wholes = catalog.wholes.get(device_class, ())
    if request.mode is AllocationMode.ALL:
        # kube-scheduler gives All every matching device of the node, and refuses the node
        # if one is taken. Its size is the node's, but requests are per pod: so it takes the
        # class's devices whole (`related`), which every request that could get one of them
        # draws from too. Stricter than kube-scheduler where the class has devices the
        # selectors do not match; never beside a claim on one of its devices.
        why = (
            "allocationMode All is planned as taking every device of its class on the node "
            "(only where all are free and at least one matches)"
        )
        exactness = Exactness.COUNT_ONLY if unsupported or dropped else Exactness.PER_NODE
        takes_all = Resources(dict.fromkeys(wholes, WHOLE))
        return RequestDemand(
            name, device_class, 1, takes_all, checked, exactness, why, tolerations, every=True
        )
    count = request.count
    # Its count from every whole it could take a device of (see All above), and from every
    # count of devices tainted or not it could be given.
    takes = {
        **dict.fromkeys(wholes, count),
        **dict.fromkeys(catalog.anys.get(device_class, ()), count),
    }
    if tolerations:
        return _tolerating(
            name, request, shapes, catalog, selectors, takes=takes, tolerations=tolerations
        )
    takes[class_entry(device_class)] = count
    if gpu_like:
        takes[DRA_GPU] = count
    notes: list[str] = []
    if request.capacity:
        notes.append("consumable capacity is counted as whole devices")
    if unsupported or dropped:
        notes.insert(0, _count_only_note(unsupported, dropped))
        return RequestDemand(
            name,
            device_class,
            count,
            Resources(takes),
            checked,
            Exactness.COUNT_ONLY,
            "; ".join(notes),
        )
    if not supported:
        takes.update(_counters_taken(shapes, catalog, count))
        return RequestDemand(
            name, device_class, count, Resources(takes), (), Exactness.EXACT, "; ".join(notes)
        )
    matching = [s for s in shapes if all(_shape_matches(sel, s) for sel in supported)]
    reads_identity = any(is_identifying(kind, n) for s in supported for kind, n in s.reads)
    takes.update(_counters_taken(shapes if reads_identity else matching, catalog, count))
    if len(matching) <= 1 and not reads_identity:
        if matching:
            # One shape: every device of the class that has it matches, and no other does.
            if catalog.several_shapes(device_class):
                takes[shape_entry(device_class, matching[0])] = count
        else:
            # No node can serve it; `ineligibility` says so on every node.
            notes.insert(0, f"no {device_class} device in the cluster matches the selectors")
        return RequestDemand(
            name,
            device_class,
            count,
            Resources(takes),
            supported,
            Exactness.EXACT,
            "; ".join(notes),
        )
    why = (
        "selectors read per-device values"
        if reads_identity
        else f"selectors match {len(matching)} device shapes"
    )
    notes.insert(0, f"{why}: devices of the class are counted, matching ones checked per node")
    return RequestDemand(
        name, device_class, count, Resources(takes), supported, Exactness.PER_NODE, "; ".join(notes)
    )


def _tolerating(
    name: str,
    request: DeviceRequest,
    shapes: frozenset[DeviceShape],
    catalog: DeviceCatalog,
    selectors: _Selectors,
    *,
    takes: dict[str, int],
    tolerations: tuple[DeviceToleration, ...],
) -> RequestDemand:
    """A request that tolerates taints of its class's devices: planned on the class's free
    devices tainted or not (`any_entry`), checked per node for enough it may be given. The
    untainted entries (class, shape, GPUs) are for requests that do not tolerate: a device
    it may be given is in `any` only if tainted."""
    device_class, count = request.device_class, request.count
    supported, unsupported, dropped = selectors.supported, selectors.unsupported, selectors.dropped
    notes = [
        "tolerates device taints: planned on the free devices of its class, tainted or not; "
        "enough that it tolerates are checked per node"
    ]
    if request.capacity:
        notes.append("consumable capacity is counted as whole devices")
    may_get = _shapes(request, shapes, catalog)
    reads_identity = any(is_identifying(kind, n) for s in supported for kind, n in s.reads)
    matching = [s for s in may_get if all(_shape_matches(sel, s) for sel in supported)]
    if unsupported or dropped:
        notes.insert(0, _count_only_note(unsupported, dropped))
        return RequestDemand(
            name,
            device_class,
            count,
            Resources(takes),
            selectors.checked,
            Exactness.COUNT_ONLY,
            "; ".join(notes),
            tolerations,
        )
    takes.update(_counters_taken(may_get if reads_identity else matching, catalog, count))
    return RequestDemand(
        name,
        device_class,
        count,
        Resources(takes),
        supported,
        Exactness.PER_NODE,
        "; ".join(notes),
        tolerations,
    )


def _count_only_note(unsupported: Sequence[Unsupported], dropped: Sequence[str]) -> str:
    """Why a request is planned by its device count only, for people."""
    reasons = [
        f"selector {s.expression!r} is not evaluated by Phalanx ({s.reason})" for s in unsupported
    ]
    reasons += [f"selectors read {n}, which Phalanx does not keep" for n in dropped]
    return "; ".join(reasons) + "; planned by device count only"


def _counters_taken(
    shapes: Iterable[DeviceShape], catalog: DeviceCatalog, count: int
) -> dict[str, int]:
    """What `count` devices of any of these shapes take of shared counters at least (the
    least over the shapes; nothing when one of them is not a partition)."""
    least: dict[str, int] | None = None
    for shape in shapes:
        takes = catalog.consumption.get(shape, {})
        least = (
            dict(takes)
            if least is None
            else {e: min(a, takes[e]) for e, a in least.items() if e in takes}
        )
    return {entry: amount * count for entry, amount in (least or {}).items()}


class _ShapeView:
    """A device shape seen as a device with no values of its own."""

    __slots__ = ("shape",)

    def __init__(self, shape: DeviceShape) -> None:
        self.shape = shape

    @property
    def driver(self) -> str:
        return self.shape.driver

    def attribute(self, name: str) -> AttributeValue | None:
        return self.shape.attributes.get(name)

    def capacity(self, name: str) -> Fraction | None:
        return self.shape.capacity.get(name)


def _shape_matches(selector: Selector, shape: DeviceShape) -> bool:
    return selector.matches(_ShapeView(shape))


# ---- gangs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangDemand:
    """A gang's extra requests with every shared claim charged once."""

    requests: Mapping[str, Resources] = field(default_factory=dict)  # member key -> extra
    # Members sharing an unallocated claim: its devices are on one node, so must they be.
    together: tuple[frozenset[str], ...] = ()


def gang_demand(members: Iterable[tuple[str, PodDemand]]) -> GangDemand:
    """Charge each unallocated claim to the first member (by key) that uses it."""
    ordered = sorted(members)
    owner: dict[str, str] = {}
    sharers: dict[str, set[str]] = {}
    for member, demand in ordered:
        for claim in demand.claims:
            if claim.allocated:
                continue
            owner.setdefault(claim.key, member)
            sharers.setdefault(claim.key, set()).add(member)
    requests = {
        member: demand.requests(
            exclude=frozenset(c.key for c in demand.claims if owner.get(c.key, member) != member)
        )
        for member, demand in ordered
    }
    return GangDemand(requests, _merge([s for s in sharers.values() if len(s) > 1]))


def _merge(groups: list[set[str]]) -> tuple[frozenset[str], ...]:
    """Overlapping groups joined (members linked through several claims)."""
    merged: list[set[str]] = []
    for group in groups:
        joined = set(group)
        rest = []
        for other in merged:
            if other & joined:
                joined |= other
            else:
                rest.append(other)
        merged = [*rest, joined]
    return tuple(sorted((frozenset(g) for g in merged), key=sorted))


# ---- which nodes can serve ---------------------------------------------------------------


def ineligibility(
    demand: PodDemand,
    node: Node,
    pools: Sequence[DeviceHolder],
    catalog: DeviceCatalog,
    allocated: Allocated | None = None,
) -> str | None:
    """Why the node cannot serve the pod's claims whatever is free, or None if it can.

    Counts installed devices; with `allocated`, only the free ones (stricter, changes with
    every allocation, so not cacheable per topology).
    """
    if demand.blocker:
        return demand.blocker
    for resource, device_class in demand.unbridged:
        if node.allocatable.get(resource) <= 0:
            return (
                f"had no {resource} allocatable (DeviceClass {device_class} maps it, but the "
                "DRA extended-resource bridge is off: kube-scheduler serves it from device "
                "plugins only)"
            )
    for claim in demand.claims:
        if claim.node_terms is not None and not any(
            term_matches(t, node) for t in claim.node_terms
        ):
            return f"could not reach the devices allocated to claim {claim.key}"
        if claim.allocated:
            continue
        for request in claim.requests:
            if request.every:
                # kube-scheduler gives All every matching device, and refuses the node if it
                # may not be given one of them; a taint is the node's, not a reservation's.
                refused = _untolerated(request, pools, catalog)
                if refused:
                    return (
                        f"had {refused} {request.device_class} device(s) with a taint claim "
                        f"{claim.key} request {request.request} does not tolerate "
                        "(allocationMode All is given every one)"
                    )
            have = _matching(request, pools, catalog, allocated or {})
            if have < request.count:
                return (
                    f"had {have} free {request.device_class} device(s) for claim {claim.key} "
                    f"request {request.request}, it needs {request.count}"
                    if allocated is not None
                    else f"had {have} {request.device_class} device(s) for claim {claim.key} "
                    f"request {request.request}, it needs {request.count}"
                )
    return None


def _matching(
    request: RequestDemand,
    pools: Sequence[DeviceHolder],
    catalog: DeviceCatalog,
    allocated: Allocated,
) -> int:
    count = 0
    name, selectors, tolerations = request.device_class, request.selectors, request.tolerations
    for pool in pools:
        held = allocated.get((pool.driver, pool.pool))
        if not held:
            count += catalog.count_matching(pool.devices, name, selectors, tolerations)
            continue
        gone = {device.name for device in used_up(pool, held)}
        count += sum(
            1
            for device in pool.devices
            if device.name not in held
            and device.name not in gone
            and catalog.matches(device, name, selectors, tolerations)
        )
    return count


_TOLERATES_EVERYTHING = (DeviceToleration(exists=True),)


def _untolerated(
    request: RequestDemand, pools: Sequence[DeviceHolder], catalog: DeviceCatalog
) -> int:
    """How many devices matching the request have a taint it does not tolerate."""
    name, selectors = request.device_class, request.selectors
    return sum(
        catalog.count_matching(pool.devices, name, selectors, _TOLERATES_EVERYTHING)
        - catalog.count_matching(pool.devices, name, selectors, request.tolerations)
        for pool in pools
    )


# ---- the bridge, applied to model values -------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceNeeds:
    """A pod's derived DRA demand as its `Pod` carries it (`Pod.devices`), with the catalog
    it was derived against, so eligibility can check a node's installed devices.

    `generation` names the catalog (`DraState.catalog_generation`): the same demand against
    another set of classes may be served by other nodes, so it is part of the eligibility key.
    """

    demand: PodDemand
    catalog: DeviceCatalog = field(compare=False, repr=False)
    generation: int = 0

    def ineligibility(self, node: Node) -> str | None:
        pools = node.devices.pools if node.devices is not None else ()
        return ineligibility(self.demand, node, pools, self.catalog)

    def eligibility_key(self) -> tuple[object, ...]:
        return (self.generation, self.demand.eligibility_key())

    def allocates_on(self, node: Node) -> bool:
        """Whether kube-scheduler's DynamicResources plugin allocates devices for the pod on
        `node`, in the pod's own binding cycle: its unallocated claims, or the extended
        resources the node serves from devices (a device-plugin node serves them itself)."""
        unallocated = any(not c.allocated for c in self.demand.claims)
        return unallocated or bool(self.served_by_devices(node))

    def served_by_devices(self, node: Node) -> tuple[str, ...]:
        """The pod's extended resources `node` serves from its DRA devices, not by device
        plugin: kube-scheduler's DynamicResources plugin makes the pod's claim for them in
        PreBind, so only the pod's own cycle may bind it there. A node serves a resource by
        device plugin exactly where its own allocatable has it (`node_with_devices`)."""
        served = node.devices.served if node.devices is not None else ()
        return tuple(
            e.resource
            for e in self.demand.extended
            if not e.held and (node.allocatable.get(e.resource) <= 0 or e.resource in served)
        )


def node_with_devices(
    node: Node,
    pools: Sequence[DeviceHolder],
    catalog: DeviceCatalog,
    allocated: Allocated,
    *,
    clique_label: str = "nvidia.com/gpu.clique",
) -> Node:
    """The node with its free DRA devices in `allocatable` and its installed ones in
    `devices` (earlier DRA entries replaced: bridging a bridged node again is fine).

    A node without device-plugin GPUs gets its `gpu` description from its DRA GPUs, so GPU
    memory checks, metrics and /debug read both kinds of node the same way.
    """
    # Only a bridged node (devices set) has DRA entries, and served resources, to replace.
    base = node.allocatable
    if node.devices is not None:
        served = node.devices.served
        base = Resources((k, v) for k, v in base.items() if not is_dra_entry(k) and k not in served)
    mapping = catalog.extended
    plugin = [(r, mapping[r], n) for r, n in base.items() if n > 0 and r in mapping]
    if not pools and node.devices is None and not plugin:
        return node  # the usual node: no devices now, none before (so no DRA entries)
    own_gpu = node.devices.own_gpu if node.devices is not None else node.gpu
    gpu, devices = own_gpu, None
    allocatable = base
    for resource, name, amount in plugin:
        # A device-plugin node serves the resource itself (kube-scheduler asks DRA only
        # where it is not allocatable): what DRA pods asking it take, it offers as many.
        allocatable = allocatable + extended_takes(resource, name, amount, catalog)
    if plugin and not pools:
        devices = InstalledDevices((), 0, own_gpu)
    if pools:
        entries = node_entries(pools, catalog, allocated)
        offered = _served(base, entries, catalog)
        allocatable = allocatable + entries + offered
        if gpu is None or (gpu.count == 0 and not gpu.mig):
            described = gpu_info(pools)
            if described is not None:
                gpu = replace(described, clique=node.labels.get(clique_label, ""))
        installed = sum(catalog.totals(p.devices)[DRA_GPU] for p in pools)
        names = tuple(k for k in offered if k != DRA_GPU_SERVED)
        devices = InstalledDevices(tuple(pools), installed, own_gpu, names)
    if allocatable == node.allocatable and gpu == node.gpu and devices == node.devices:
        return node
    return replace(node, allocatable=allocatable, gpu=gpu, devices=devices)


def _served(base: Resources, entries: Resources, catalog: DeviceCatalog) -> Resources:
    """The extended resources a DRA node serves from its devices: each a class serves and
    the node does not have allocatable, as many as the class's free untainted devices
    there; and `DRA_GPU_SERVED`, as many as those of them with a GPU name, which
    `Resources.gpus()` would count again: `DRA_GPU` counts the node's GPUs already, and a
    MIG partition of shared counters (`nvidia.com/mig-1g.10gb` from partitionable GPUs) as
    the GPU it is made of."""
    offered: dict[str, int] = {}
    for resource, name in catalog.extended.items():
        amount = entries.get(class_entry(name))
        if amount > 0 and base.get(resource) <= 0:
            offered[resource] = amount
            if is_gpu_resource(resource):
                offered[DRA_GPU_SERVED] = offered.get(DRA_GPU_SERVED, 0) + amount
    return Resources(offered)


def pod_with_demand(pod: Pod, extra: Resources, needs: DeviceNeeds | None = None) -> Pod:
    """The pod asking for its DRA devices too (`extra` from `PodDemand.requests` or a
    `GangDemand`; earlier DRA entries of its requests are replaced), carrying `needs`
    (None: the demand it carries already)."""
    base = own_requests(pod)
    requests = base + extra
    devices = pod.devices if needs is None else needs
    if requests == pod.requests and devices == pod.devices:
        return pod
    return replace(pod, requests=requests, devices=devices)


def with_needs(pod: Pod, needs: DeviceNeeds) -> Pod:
    """The pod asking for everything its own claims need (`pod_with_demand` with the
    needs' requests): a pod seen alone, before any gang shares its claims out."""
    return pod_with_demand(pod, needs.demand.requests(), needs)


def shared_out(members: Sequence[Pod]) -> tuple[tuple[Pod, ...], tuple[frozenset[str], ...]]:
    """A gang's members with every claim they share charged to one of them, and the uids
    of the members that must share a node because they share an unallocated claim.

    Members that share nothing come back as they are (the usual case, and free).
    """
    if not any(p.devices is not None and p.devices.demand.shares for p in members):
        return tuple(members), ()
    gang = gang_demand((p.key, p.devices.demand) for p in members if p.devices is not None)
    shared = tuple(
        pod_with_demand(p, gang.requests[p.key]) if p.devices is not None else p for p in members
    )
    uid_of = {p.key: p.uid for p in members}
    return shared, tuple(frozenset(uid_of[k] for k in group) for group in gang.together)
