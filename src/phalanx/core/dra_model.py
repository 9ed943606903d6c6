"""DRA in the cluster model: where ResourceSlices, classes, claims, nodes and pods meet.

`DraModel` holds the cluster's `DraState` and applies every change to a `ClusterState`,
each in one step (single writer, the service's event loop, as for `ClusterState`):

    node in  ──▶ bridged: free devices in `allocatable`, installed ones in `devices`
                 (`node_with_devices`) ──▶ ClusterState.upsert_node
    pod in   ──▶ its demand derived and carried (`with_needs`) ──▶ ClusterState.upsert_pod;
                 indexed under the claims and templates it names, and the extended
                 resources it asks (a class may serve them: KEP-5004)
    slice / class / claim / template / DeviceTaintRule ──▶ DraState, staged ──settle()──▶
                 the pods naming a changed claim or template derived again, then the nodes
                 the changes name bridged again, in the same step (a new catalog, device
                 shape or kind of taint: every pod with claims, every node); a batch of
                 changes is settled once

Deriving the pods and bridging the nodes together is what keeps a claim from being
counted twice, or not at all. Who counts an allocated claim:

    claim allocated (kube-scheduler's PreBind), its pod still a RESERVED gang member
        ──▶ carried: the pod counts it (as the reservation does), the node does not
    its pod bound, assumed, or out of the reservation ──▶ the node counts it, the pod not

A claim is carried while any pod naming it is a reserved member (`DraState.carry`).
Bindings Phalanx makes (`ClusterState.assume`) need no step here: an assumed pod is counted
with its requests, which still hold the carried claim, and the node still leaves it out.
A reservation released without binding leaves the claim carried until the next event for
its pod or claim (kube-scheduler un-reserving the pod updates the claim): for that moment
its devices count nowhere. Nodes known only as a pod's phantom are never bridged.

`upsert_pod`, `remove_pod` and `settle` return the pods they derived as the model now
holds them, so the caller can say what is new about them (problems, approximations) and
requeue the ones a change unblocked.
"""

from __future__ import annotations

from collections.abc import Iterable

from phalanx.core.cache import ClusterState, MemberState
from phalanx.core.dra import (
    IMPLICIT_EXTENDED_PREFIX,
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from phalanx.core.dra_demand import claim_key, own_requests, shared_refs
from phalanx.core.dra_state import NOTHING, Changes, DraState
from phalanx.core.model import Dialect, GroupRef, Node, Pod, PodClaimRef, PodGroup
from phalanx.core.rawdict import is_extended_resource

_CLAIM = "claim:"
_TEMPLATE = "template:"
# Pods naming an upstream PodGroup, whose `spec.resourceClaims` may serve their templates.
_GROUP = "group:"
# Pods asking an extended resource a class may serve: derived again with every catalog.
_EXTENDED = "extended:"


class DraModel:
    """A `DraState` and the cluster model kept consistent with it (see module docstring)."""

    def __init__(self, *, extended_resources: bool = True) -> None:
        # `extended_resources`: whether kube-scheduler serves extended resources from DRA
        # devices (its DRAExtendedResource gate; `DeviceCatalog`).
        self.dra = DraState(extended_resources=extended_resources)
        self._nodes: set[str] = set()  # nodes the source reported (phantoms are not)
        # "claim:ns/name" / "template:ns/name" -> uids of the pods naming it, and back.
        self._pods_of: dict[str, set[str]] = {}
        self._refs: dict[str, tuple[str, ...]] = {}
        # Allocated claim key -> uids of the reserved members carrying it.
        self._carriers: dict[str, set[str]] = {}
        # Upstream PodGroup key -> its claims as last seen (`_sync_group`).
        self._group_claims: dict[str, tuple[PodClaimRef, ...]] = {}
        # Staged by the DRA object methods (and carries), applied by `settle`.
        self._changes = NOTHING
        self._stale: set[str] = set()

    # ---- nodes -------------------------------------------------------------------------

    def upsert_node(self, state: ClusterState, node: Node) -> None:
        self._nodes.add(node.name)
        state.upsert_node(self.dra.bridge_node(node))

    def remove_node(self, state: ClusterState, name: str) -> list[str]:
        """As `ClusterState.remove_node`: the gangs whose reservations it released."""
        self._nodes.discard(name)
        return state.remove_node(name)

    # ---- pods --------------------------------------------------------------------------

    def upsert_pod(self, state: ClusterState, pod: Pod) -> list[Pod]:
        """Add or update a pod as the API reports it; returns it (first) and any pod whose
        demand changed with it, as the model holds them."""
        if pod.resource_claims or pod.uid in self._refs or _extended(pod):
            self._index(state, pod)
        if pod.resource_claims or self.dra.serves(pod):
            pod = self._derive(state, pod)
        state.upsert_pod(pod)
        self._stale.discard(pod.uid)
        return [pod, *self.settle(state)]

    def remove_pod(self, state: ClusterState, uid: str) -> list[Pod]:
        """Forget a pod; returns the pods whose demand changed with it."""
        self._drop_carries(uid)
        self._unindex(uid)
        state.remove_pod(uid)
        self._stale.discard(uid)
        return self.settle(state)

    def _derive(self, state: ClusterState, pod: Pod) -> Pod:
        """The pod with its demand, once it is decided which allocated claims it carries."""
        reserved = _reserved_member(state, pod)
        claims = self.dra.claims
        for ref in self._refs.get(pod.uid, ()):
            if not ref.startswith(_CLAIM):
                continue
            key = ref.removeprefix(_CLAIM)
            claim = claims.get(key)
            carries = reserved and claim is not None and claim.allocation is not None
            holders = self._carriers.get(key, set())
            if carries == (pod.uid in holders):
                continue
            before = bool(holders)
            if carries:
                self._carriers.setdefault(key, holders).add(pod.uid)
            else:
                holders.discard(pod.uid)
                if not holders:
                    self._carriers.pop(key, None)
            if before != bool(holders):
                # The other pods naming it count it differently now, and so does its node.
                self._stage(self.dra.carry(key, bool(holders)), ref)
        if not pod.resource_claims and pod.devices is None and not self.dra.serves(pod):
            return pod  # asks extended resources no class serves: nothing to derive
        return self.dra.bridge_pod(pod, _group_claims(state, pod))

    def _drop_carries(self, uid: str) -> None:
        for ref in self._refs.get(uid, ()):
            key = ref.removeprefix(_CLAIM)
            holders = self._carriers.get(key)
            if ref.startswith(_CLAIM) and holders is not None and uid in holders:
                holders.discard(uid)
                if not holders:
                    del self._carriers[key]
                    self._stage(self.dra.carry(key, False), ref)

    def _index(self, state: ClusterState, pod: Pod) -> None:
        names = pod.resource_claims
        shared = shared_refs(pod, _group_claims(state, pod)).values()
        group = _group_key(pod) if any(r.template for r in names) else ""
        refs = tuple(
            sorted(
                {_CLAIM + claim_key(pod.namespace, r.claim) for r in (*names, *shared) if r.claim}
                | {_TEMPLATE + claim_key(pod.namespace, r.template) for r in names if r.template}
                | {_EXTENDED + r for r in _extended(pod)}
                | ({_GROUP + group} if group else set())
            )
        )
        if self._refs.get(pod.uid) == refs:
            return
        self._drop_carries(pod.uid)
        self._unindex(pod.uid)
        if refs:
            self._refs[pod.uid] = refs
            for ref in refs:
                self._pods_of.setdefault(ref, set()).add(pod.uid)

    def _unindex(self, uid: str) -> None:
        for ref in self._refs.pop(uid, ()):
            uids = self._pods_of.get(ref)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._pods_of[ref]

    # ---- upstream PodGroups ------------------------------------------------------------

    def upsert_group(self, state: ClusterState, group: PodGroup) -> list[Pod]:
        """As `ClusterState.upsert_group`; returns the members derived again because its
        claims may now serve theirs (`_sync_group`)."""
        state.upsert_group(group)
        return self._sync_group(state, group.key)

    def set_group_error(self, state: ClusterState, key: str, reason: str) -> list[Pod]:
        """As `ClusterState.set_group_error`: an invalid PodGroup's claims serve no member."""
        state.set_group_error(key, reason)
        return self._sync_group(state, key)

    def remove_group(self, state: ClusterState, key: str) -> list[Pod]:
        """As `ClusterState.remove_group`: a deleted PodGroup's claims serve no member."""
        state.remove_group(key)
        return self._sync_group(state, key)

    def _sync_group(self, state: ClusterState, key: str) -> list[Pod]:
        """The upstream PodGroup `key` was added, changed or removed in `state`: when its
        claims (`PodGroup.resource_claims`) changed, the members naming it with template
        entries are indexed and derived again (`dra_demand.shared_refs`). Returns them as
        `settle` does."""
        group = state.group(key)
        claims = group.resource_claims if group is not None else ()
        if self._group_claims.get(key, ()) == claims:
            return []
        if claims:
            self._group_claims[key] = claims
        else:
            self._group_claims.pop(key, None)
        ref = _GROUP + key
        for uid in sorted(self._pods_of.get(ref, ())):
            pod = state.pod(uid)
            if pod is not None:
                self._index(state, pod)
        self._stage(NOTHING, ref)
        return self.settle(state)

    # ---- DRA objects: staged, then settled in the same step --------------------------

    def upsert_slice(self, s: ResourceSlice) -> None:
        self._stage(self.dra.upsert_slice(s))

    def remove_slice(self, name: str) -> None:
        self._stage(self.dra.remove_slice(name))

    def upsert_class(self, device_class: DeviceClass) -> None:
        self._stage(self.dra.upsert_class(device_class))

    def remove_class(self, name: str) -> None:
        self._stage(self.dra.remove_class(name))

    def upsert_rule(self, rule: DeviceTaintRule) -> None:
        self._stage(self.dra.upsert_rule(rule))

    def remove_rule(self, name: str) -> None:
        self._stage(self.dra.remove_rule(name))

    def upsert_claim(self, claim: ResourceClaim) -> None:
        self._stage(self.dra.upsert_claim(claim), _CLAIM + claim.key)

    def remove_claim(self, key: str) -> None:
        self._carriers.pop(key, None)
        self._stage(self.dra.remove_claim(key), _CLAIM + key)

    def upsert_template(self, template: ResourceClaimTemplate) -> None:
        self.dra.upsert_template(template)
        self._stage(NOTHING, _TEMPLATE + template.key)

    def remove_template(self, key: str) -> None:
        self.dra.remove_template(key)
        self._stage(NOTHING, _TEMPLATE + key)

    def unreadable(self, kind: str, key: str, reason: str) -> None:
        """An object of a `resource.k8s.io` kind Phalanx cannot read (`DraState.unreadable`)."""
        ref = {"ResourceClaim": _CLAIM, "ResourceClaimTemplate": _TEMPLATE}.get(kind)
        if kind == "ResourceClaim":
            self._carriers.pop(key, None)
        self._stage(self.dra.unreadable(kind, key, reason), ref + key if ref else "")

    def _stage(self, changes: Changes, ref: str = "") -> None:
        self._changes |= changes
        if ref:
            self._stale.update(self._pods_of.get(ref, ()))

    def settle(self, state: ClusterState) -> list[Pod]:
        """Apply what the staged changes mean to the cluster model, in this one step: the
        pods naming a changed claim or template derived again, then the nodes the changes
        name bridged again. Returns those pods as the model now holds them.

        Precondition: called in the same loop step as the changes it settles (until then
        the model may count a changed claim twice, or not at all).
        """
        if self._changes.everything:
            self._stale.update(self._refs)
        derived: dict[str, Pod] = {}
        # Deriving a pod may change whether a claim is carried, which changes the demand
        # of the other pods naming it: they are derived in the next round (a claim flips
        # at most once per pod naming it, so this ends).
        while self._stale:
            uids, self._stale = self._stale, set()
            for uid in sorted(uids):
                pod = state.pod(uid)
                if pod is None:  # left the model some other way (replaced under its name)
                    self._drop_carries(uid)
                    self._unindex(uid)
                    continue
                bridged = self._derive(state, pod)
                if bridged is not pod:
                    state.upsert_pod(state.as_declared(bridged))  # the model's copy is filed
                derived[uid] = bridged
        changes, self._changes = self._changes, NOTHING
        names: Iterable[str] = self._nodes if changes.everything else changes.nodes & self._nodes
        for name in sorted(names):
            info = state.node(name)
            if info is not None:
                node = self.dra.bridge_node(info.node)
                if node is not info.node:
                    state.upsert_node(node)
        return list(derived.values())


def _extended(pod: Pod) -> list[str]:
    """The extended resources the pod asks that a DeviceClass may serve (KEP-5004)."""
    return [
        r
        for r in own_requests(pod)
        if r.startswith(IMPLICIT_EXTENDED_PREFIX) or is_extended_resource(r)
    ]


def _group_key(pod: Pod) -> str:
    """The key of the upstream PodGroup the pod names in `spec.schedulingGroup`, or ""."""
    if not pod.scheduling_group:
        return ""
    return GroupRef(pod.namespace, pod.scheduling_group, Dialect.UPSTREAM).key


def _group_claims(state: ClusterState, pod: Pod) -> tuple[PodClaimRef, ...]:
    """The claims of the upstream PodGroup the pod names; () while it is not known."""
    key = _group_key(pod)
    group = state.group(key) if key else None
    return group.resource_claims if group is not None else ()


def _reserved_member(state: ClusterState, pod: Pod) -> bool:
    """Whether the pod holds a place in its gang's reservation and is not binding yet. The
    pod is as the API reports it, naming its own PodGroup; a member of a composite gang is
    filed, and reserved, under the composite: the model's copy says which, while the pod
    still names the gang it did when filed."""
    if pod.node_name or pod.group is None:
        return False
    group = pod.group
    filed = state.pod(pod.uid)
    if filed is not None and filed.group is not None and state.declared_group(filed) == group:
        group = filed.group
    reservation = state.reservation(group.key)
    member = reservation.member(pod.uid) if reservation is not None else None
    return member is not None and member.state is MemberState.RESERVED
