"""The cluster's DRA picture, kept up to date by watch events: slices, classes, claims.

`DraState` is to DRA what `phalanx.core.snapshot.ClusterState` is to nodes and pods: one
writer (the service's event loop) applies each event, and every mutation says which nodes'
free devices changed, so the caller re-bridges only those (`node_with_devices`) and
re-derives the demand of the pods it names. It takes no locks and does no I/O.

    upsert_slice / remove_slice   -> that pool re-merged (generations, completeness)
    upsert_class / remove_class   -> a new catalog: every node, every pending pod
    upsert_claim / remove_claim   -> the nodes of the pools its allocation touches
    carry                         -> the same: an allocated claim counted by its pod instead
    upsert_template / ...         -> pending pods only (no node changes)
    upsert_rule / remove_rule     -> the pools the rule picks re-merged with its taint
                                     added or lifted (as their slices' own taints would be)

A change of the cluster's device shapes (the first A100 node in an H100 cluster) changes
which synthetic entries exist, so it is reported as `Changes.everything` too; so is a taint
of a kind the cluster had not seen, whether a slice or a DeviceTaintRule brings it.

Memory: a pool made of one slice (the usual case) is held by the node as that slice
itself; identical servers share one device list (`phalanx.core.dra.intern_devices`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass

from phalanx.core.dra import (
    Device,
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    with_rule_taints,
)
from phalanx.core.dra_demand import (
    DeviceNeeds,
    PodDemand,
    extended_requests,
    node_with_devices,
    pod_demand,
    unbridged_requests,
    unreadable_key,
    with_needs,
)
from phalanx.core.dra_inventory import (
    Allocated,
    DeviceCatalog,
    DeviceHolder,
    Pool,
    PoolState,
    merge_pool,
    node_entries,
)
from phalanx.core.model import Node, Pod, PodClaimRef, Resources


@dataclass(frozen=True, slots=True)
class Changes:
    """What a mutation changed: nodes to re-bridge, or everything (nodes and pending pods)."""

    nodes: frozenset[str] = frozenset()
    everything: bool = False

    def __or__(self, other: Changes) -> Changes:
        return Changes(self.nodes | other.nodes, self.everything or other.everything)


NOTHING = Changes()
EVERYTHING = Changes(everything=True)


@dataclass(frozen=True, slots=True)
class Finding:
    """Something about the cluster's DRA objects people should know, and the object it is
    about (`kind`, cluster-scoped `name`)."""

    kind: str
    name: str
    text: str
    # A pool mid-update (its driver is publishing a new generation): usually over soon.
    passing: bool = False


def _nonlocal(pool: Pool) -> str:
    return (
        f"pool {pool.name} of driver {pool.driver}: {pool.nonlocal_devices} device(s) reachable "
        "from several nodes are not planned by Phalanx (kube-scheduler still allocates them)"
    )


class DraState:
    """Slices, classes, claims and templates, and per node the devices that count."""

    def __init__(self, *, extended_resources: bool = True) -> None:
        # Whether kube-scheduler serves extended resources from devices (`DeviceCatalog`).
        self.extended_resources = extended_resources
        self._slices: dict[str, ResourceSlice] = {}
        # driver -> pool -> its slices' names (a lone name as itself: pools are one slice)
        self._pool_slices: dict[str, dict[str, str | tuple[str, ...]]] = {}
        self._unusable: dict[tuple[str, str], Pool] = {}  # incomplete, invalid or shared pools
        self._by_node: dict[str, tuple[DeviceHolder, ...]] = {}
        self._lists: Counter[tuple[Device, ...]] = Counter()  # in use, for the shape picture
        # Per pool, its devices reachable from several nodes (for `DeviceCatalog.remote`).
        self._shared: dict[tuple[str, str], tuple[Device, ...]] = {}
        self._shapes_dirty = False
        self._classes: dict[str, DeviceClass] = {}
        self.catalog = DeviceCatalog(())
        # Bumped with every new catalog: a demand derived against an older one is stale.
        self.catalog_generation = 0
        self._claims: dict[str, ResourceClaim] = {}
        # (driver, pool) -> device -> the claim holding it
        self._held: dict[tuple[str, str], dict[str, str]] = {}
        # Allocated claims whose devices a gang's reservation still holds (see `carry`).
        self._carried: set[str] = set()
        self._templates: dict[str, ResourceClaimTemplate] = {}
        # DeviceTaintRules by name: their taints are added to slices as pools are merged.
        self._rules: dict[str, DeviceTaintRule] = {}
        # Objects the API holds that Phalanx cannot read: "Kind key" -> why (`unreadable`).
        self._unreadable: dict[str, str] = {}

    # ---- reads -----------------------------------------------------------------------

    def node(self, name: str) -> tuple[DeviceHolder, ...]:
        return self._by_node.get(name, ())

    def nodes(self) -> Iterable[str]:
        return self._by_node.keys()

    @property
    def allocated(self) -> Allocated:
        """Devices held by allocated claims, except carried ones (a reservation holds them)."""
        return _Counted(self._held, self._carried) if self._carried else self._held

    def entries(self, name: str) -> Resources:
        """The node's free devices as synthetic resources (`node_entries`)."""
        return node_entries(self.node(name), self.catalog, self.allocated)

    @property
    def claims(self) -> Mapping[str, ResourceClaim]:
        return self._claims

    @property
    def templates(self) -> Mapping[str, ResourceClaimTemplate]:
        return self._templates

    @property
    def rules(self) -> Mapping[str, DeviceTaintRule]:
        return self._rules

    def demand(self, pod: Pod, group_claims: Sequence[PodClaimRef] = ()) -> PodDemand:
        """`pod_demand`; `group_claims`: those of the upstream PodGroup the pod names."""
        return pod_demand(
            pod,
            self._claims,
            self._templates,
            self.catalog,
            self._carried,
            unreadable=self._unreadable,
            group_claims=group_claims,
        )

    def serves(self, pod: Pod) -> bool:
        """Whether a DeviceClass serves an extended resource the pod asks (KEP-5004), or
        would with the bridge on (the pod is told why device-plugin nodes alone host it)."""
        return bool(extended_requests(pod, self.catalog) or unbridged_requests(pod, self.catalog))

    def needs(self, pod: Pod, group_claims: Sequence[PodClaimRef] = ()) -> DeviceNeeds:
        """The pod's demand as its `Pod.devices` carries it."""
        demand = self.demand(pod, group_claims)
        return DeviceNeeds(demand, self.catalog, self.catalog_generation)

    def bridge_node(self, node: Node) -> Node:
        """The node with its DRA devices (`node_with_devices`; idempotent)."""
        return node_with_devices(node, self.node(node.name), self.catalog, self.allocated)

    def bridge_pod(self, pod: Pod, group_claims: Sequence[PodClaimRef] = ()) -> Pod:
        """The pod asking for its claims' devices and carrying its demand (`with_needs`)."""
        return with_needs(pod, self.needs(pod, group_claims))

    def findings(self) -> list[Finding]:
        """`problems()`, each with the object to tell: a pool's first slice, or the class."""
        found = []
        for pool in sorted(self._unusable.values(), key=lambda p: p.key):
            names = sorted(self._names(pool.driver, pool.name))
            first = names[0] if names else ""
            if pool.problem:
                passing = pool.state is PoolState.INCOMPLETE
                found.append(Finding("ResourceSlice", first, pool.problem, passing))
            if pool.nonlocal_devices:
                found.append(Finding("ResourceSlice", first, _nonlocal(pool)))
        for device_class in sorted(self.catalog.classes.values(), key=lambda c: c.name):
            found += [
                Finding("DeviceClass", device_class.name, note)
                for note in self.catalog.class_notes(device_class.name)
            ]
        return found

    def problems(self) -> list[str]:
        """Pools not used, devices not counted per node, class selectors not evaluated."""
        found = [p.problem for p in self._unusable.values() if p.problem]
        found += [_nonlocal(p) for p in self._unusable.values() if p.nonlocal_devices]
        return sorted(found) + list(self.catalog.notes)

    # ---- objects Phalanx cannot read --------------------------------------------------

    def unreadable(self, kind: str, key: str, reason: str) -> Changes:
        """An object the API holds that Phalanx cannot read: absent, and the pods naming it
        are told why (`pod_demand`). Reading it again, or its deletion, forgets why."""
        removers = {
            "ResourceSlice": self.remove_slice,
            "DeviceClass": self.remove_class,
            "ResourceClaim": self.remove_claim,
            "DeviceTaintRule": self.remove_rule,
        }
        remove = removers.get(kind)
        if remove is not None:
            changes = remove(key)
        else:
            self.remove_template(key)
            changes = NOTHING
        if kind not in ("ResourceSlice", "DeviceTaintRule"):  # no pod names these
            self._unreadable[unreadable_key(kind, key)] = reason
        # A class no pod can use as written: every pending pod is derived again.
        return changes | (EVERYTHING if kind == "DeviceClass" else NOTHING)

    def _readable(self, kind: str, key: str) -> bool:
        """Forget why an object could not be read; whether there was anything to forget."""
        return bool(self._unreadable) and (
            self._unreadable.pop(unreadable_key(kind, key), None) is not None
        )

    # ---- slices ----------------------------------------------------------------------

    def upsert_slice(self, s: ResourceSlice) -> Changes:
        old = self._slices.get(s.name)
        moved = old is not None and (old.driver, old.pool) != (s.driver, s.pool)
        left = self._pool_nodes((old.driver, old.pool)) if old is not None and moved else None
        before = self._pool_nodes((s.driver, s.pool))
        if old is not None and moved:
            self._forget_name(old)
        self._slices[s.name] = s
        names = self._names(s.driver, s.pool)
        if s.name not in names:
            everyone = (*names, s.name)
            self._pool_slices.setdefault(s.driver, {})[s.pool] = (
                everyone[0] if len(everyone) == 1 else everyone
            )
        changes = self._merge(s.driver, s.pool, before)
        if old is not None and left is not None:
            changes |= self._merge(old.driver, old.pool, left)
        return changes | self._reshape()

    def remove_slice(self, name: str) -> Changes:
        old = self._slices.get(name)
        if old is None:
            return NOTHING
        before = self._pool_nodes((old.driver, old.pool))
        del self._slices[name]
        self._forget_name(old)
        return self._merge(old.driver, old.pool, before) | self._reshape()

    def _names(self, driver: str, pool: str) -> tuple[str, ...]:
        names = self._pool_slices.get(driver, {}).get(pool, ())
        return (names,) if isinstance(names, str) else names

    def _forget_name(self, old: ResourceSlice) -> None:
        pools = self._pool_slices.get(old.driver, {})
        rest = tuple(n for n in self._names(old.driver, old.pool) if n != old.name)
        if rest:
            pools[old.pool] = rest[0] if len(rest) == 1 else rest
        else:
            pools.pop(old.pool, None)
            if not pools:
                self._pool_slices.pop(old.driver, None)

    def _merge(self, driver: str, pool: str, before: frozenset[str]) -> Changes:
        """Re-merge one pool; `before`: the nodes its slices named before the change."""
        key = (driver, pool)
        for node in before:
            held = self._by_node.get(node, ())
            kept = tuple(h for h in held if (h.driver, h.pool) != key)
            for h in held:
                if (h.driver, h.pool) == key:
                    self._release(h.devices)
            if kept:
                self._by_node[node] = kept
            else:
                self._by_node.pop(node, None)
        self._unusable.pop(key, None)
        if self._shared.pop(key, None) is not None:
            self._shapes_dirty = True
        nodes = set(before)
        names = self._names(driver, pool)
        if names:
            merged = merge_pool(self._as_scheduled(self._slices[n]) for n in names)
            if merged.state is not PoolState.COMPLETE or merged.nonlocal_devices:
                self._unusable[key] = merged
            if merged.shared_devices:
                self._shared[key] = merged.shared_devices
                self._shapes_dirty = True
            for holder in merged.local:
                held = (*self._by_node.get(holder.node, ()), holder)
                self._by_node[holder.node] = tuple(sorted(held, key=lambda h: (h.driver, h.pool)))
                self._acquire(holder.devices)
                nodes.add(holder.node)
        return Changes(frozenset(nodes))

    def _as_scheduled(self, s: ResourceSlice) -> ResourceSlice:
        """The slice with the taints DeviceTaintRules add to its devices."""
        return with_rule_taints(s, self._rules.values()) if self._rules else s

    # ---- DeviceTaintRules --------------------------------------------------------------

    def upsert_rule(self, rule: DeviceTaintRule) -> Changes:
        old = self._rules.get(rule.name)
        if old == rule:
            return NOTHING
        self._rules[rule.name] = rule
        return self._retaint(rule, old)

    def remove_rule(self, name: str) -> Changes:
        old = self._rules.pop(name, None)
        return self._retaint(old) if old is not None else NOTHING

    def _retaint(self, *rules: DeviceTaintRule | None) -> Changes:
        """Re-merge the pools the rules (as they are and as they were) pick."""
        changes = NOTHING
        picked = [
            (driver, pool)
            for driver, pools in self._pool_slices.items()
            for pool in pools
            if any(r is not None and r.picks_pool(driver, pool) for r in rules)
        ]
        for driver, pool in picked:
            changes |= self._merge(driver, pool, self._pool_nodes((driver, pool)))
        return changes | self._reshape()

    # Device lists in use, counted, so a new or vanished kind of server is noticed.

    def _acquire(self, devices: tuple[Device, ...]) -> None:
        self._lists[devices] += 1
        if self._lists[devices] == 1:
            self._shapes_dirty = True

    def _release(self, devices: tuple[Device, ...]) -> None:
        self._lists[devices] -= 1
        if self._lists[devices] <= 0:
            del self._lists[devices]
            self._shapes_dirty = True

    def _reshape(self) -> Changes:
        """A new shape picture, if the device lists in use changed it."""
        if not self._shapes_dirty:
            return NOTHING
        self._shapes_dirty = False
        shapes = self.catalog.class_shapes(self._lists)
        remote = self.catalog.class_remote(self._shared.values())
        gpus = self.catalog.class_gpus(self._lists)
        consumption = self.catalog.shape_consumption(self._lists)
        tainted = self.catalog.class_taints(self._lists)
        catalog = self.catalog
        now = (catalog.shapes, catalog.remote, catalog.gpus, catalog.consumption, catalog.tainted)
        if (shapes, remote, gpus, consumption, tainted) == now:
            return NOTHING
        self.catalog = self.catalog.with_shapes(shapes, remote, gpus, consumption, tainted=tainted)
        self.catalog_generation += 1
        return EVERYTHING

    # ---- classes ---------------------------------------------------------------------

    def upsert_class(self, device_class: DeviceClass) -> Changes:
        self._readable("DeviceClass", device_class.name)
        if self._classes.get(device_class.name) == device_class:
            return NOTHING
        self._classes[device_class.name] = device_class
        return self._new_catalog()

    def remove_class(self, name: str) -> Changes:
        forgotten = self._readable("DeviceClass", name)
        if self._classes.pop(name, None) is None:
            return EVERYTHING if forgotten else NOTHING
        return self._new_catalog()

    def _new_catalog(self) -> Changes:
        self.catalog = DeviceCatalog(
            self._classes.values(), extended_resources=self.extended_resources
        )
        self.catalog_generation += 1
        self._shapes_dirty = True
        self._reshape()
        return EVERYTHING

    # ---- claims and templates --------------------------------------------------------

    def upsert_claim(self, claim: ResourceClaim) -> Changes:
        self._readable("ResourceClaim", claim.key)
        old = self._claims.get(claim.key)
        self._claims[claim.key] = claim
        changes = self._unhold(old) if old is not None else NOTHING
        return changes | self._hold(claim)

    def remove_claim(self, key: str) -> Changes:
        self._readable("ResourceClaim", key)
        self._carried.discard(key)
        old = self._claims.pop(key, None)
        return self._unhold(old) if old is not None else NOTHING

    def carry(self, key: str, carried: bool) -> Changes:
        """Whether an allocated claim's devices are counted by its pod rather than its node.

        kube-scheduler allocates a claim (PreBind) before it asks the extender to bind the
        pod. While the pod is still a member of a gang's reservation, that reservation
        holds the claim's devices: counting them on the node as well would count them
        twice. So, until its pod is bound, such a claim is *carried*: left out of its
        node's allocated devices and kept in its pods' demand (`pod_demand`). Returns the
        nodes whose free devices changed.
        """
        if (key in self._carried) == carried:
            return NOTHING
        if carried:
            self._carried.add(key)
        else:
            self._carried.discard(key)
        claim = self._claims.get(key)
        return self._nodes_of_claim(claim) if claim is not None else NOTHING

    def carried(self, key: str) -> bool:
        return key in self._carried

    def _hold(self, claim: ResourceClaim) -> Changes:
        if claim.allocation is None:
            return NOTHING
        claim_key = claim.key  # one string for all its devices
        for result in claim.allocation.devices:
            if result.exclusive:
                key = (result.driver, result.pool)
                self._held.setdefault(key, {})[result.device] = claim_key
        return self._nodes_of_claim(claim)

    def _nodes_of_claim(self, claim: ResourceClaim) -> Changes:
        """The nodes of the pools an allocated claim holds devices of."""
        if claim.allocation is None:
            return NOTHING
        pools = {(r.driver, r.pool) for r in claim.allocation.devices if r.exclusive}
        return Changes(frozenset(n for key in pools for n in self._pool_nodes(key)))

    def _unhold(self, claim: ResourceClaim) -> Changes:
        if claim.allocation is None:
            return NOTHING
        pools = set()
        for result in claim.allocation.devices:
            key = (result.driver, result.pool)
            held = self._held.get(key)
            if held is not None and held.get(result.device) == claim.key:
                del held[result.device]
                pools.add(key)
                if not held:
                    del self._held[key]
        return Changes(frozenset(n for key in pools for n in self._pool_nodes(key)))

    def _pool_nodes(self, key: tuple[str, str]) -> frozenset[str]:
        names = self._names(*key)
        nodes: frozenset[str] = frozenset()
        for name in names:
            nodes |= _nodes_of(self._slices[name])
        return nodes

    def upsert_template(self, template: ResourceClaimTemplate) -> None:
        self._readable("ResourceClaimTemplate", template.key)
        self._templates[template.key] = template

    def remove_template(self, key: str) -> None:
        self._readable("ResourceClaimTemplate", key)
        self._templates.pop(key, None)


class _Counted(Mapping[tuple[str, str], Container[str]]):
    """Devices held by allocated claims, less those of carried claims (`DraState.carry`)."""

    __slots__ = ("_carried", "_held")

    def __init__(self, held: Mapping[tuple[str, str], Mapping[str, str]], carried: Set[str]):
        self._held = held
        self._carried = carried

    def __getitem__(self, key: tuple[str, str]) -> Container[str]:
        return _Uncarried(self._held[key], self._carried)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)


class _Uncarried(Container[str]):
    __slots__ = ("_carried", "_held")

    def __init__(self, held: Mapping[str, str], carried: Set[str]) -> None:
        self._held = held
        self._carried = carried

    def __contains__(self, device: object) -> bool:
        claim = self._held.get(device) if isinstance(device, str) else None
        return claim is not None and claim not in self._carried


def _nodes_of(s: ResourceSlice | None) -> frozenset[str]:
    if s is None:
        return frozenset()
    return frozenset(s.device_nodes) | ({s.node} if s.node else set())
