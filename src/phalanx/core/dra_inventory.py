"""DRA inventory: which devices each node has, which classes they belong to, how many are free.

Pools, as kube-scheduler's allocator reads them (`structured.GatherPools`):

* only the newest `pool.generation` of a pool counts; older slices are ignored;
* a pool with fewer (or more) slices of that generation than `resourceSliceCount` is
  *incomplete*: the driver is mid-update, kube-scheduler allocates nothing from it, and
  neither does Phalanx (its devices count zero until the pool is whole again);
* a pool listing one device name twice is *invalid*: again nothing is allocated from it.

Only node-local devices (slice `nodeName`, or a device's own `nodeName`) are counted per
node; devices reachable from several nodes (`nodeSelector`, `allNodes`) are one shared
capacity that per-node vectors cannot hold, so they are reported and not planned.

Free = published devices (complete, valid pools) minus the devices allocated to
claims (`status.allocation`, except admin-access and shared results: kube-scheduler's
`foreachAllocatedDevice` skips those too), minus the partitions whose shared counters the
allocated devices have taken (`used_up`). A free device with a NoSchedule/NoExecute taint
is free only to requests that tolerate it (`any_entry`). `node_entries` turns that into the
synthetic resources the gang transaction plans with; `phalanx.core.dra_demand` explains them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from types import MappingProxyType
from typing import Final

from phalanx.core.cel import Selector, Unsupported
from phalanx.core.dra import (
    IMPLICIT_EXTENDED_PREFIX,
    NVIDIA_GPU_DRIVER,
    Counters,
    Device,
    DeviceClass,
    DeviceFlag,
    DeviceShape,
    DeviceTaint,
    DeviceToleration,
    ResourceClaim,
    ResourceSlice,
    intern_devices,
    tolerated,
)
from phalanx.core.model import DRA_GPU, DRA_GPU_SERVED, MIG_PREFIX, GpuInfo, Resources

# Synthetic resource names. A class name is a DNS subdomain, so "~" never occurs in one.
CLASS_PREFIX: Final = "class.dra.phalanx.io/"
SHAPE_SEPARATOR: Final = "~"
COUNTER_PREFIX: Final = "counter.dra.phalanx.io/"
WHOLE_PREFIX: Final = "whole.dra.phalanx.io/"
ANY_PREFIX: Final = "any.dra.phalanx.io/"
# What an allocationMode All request takes of a `whole_entry`: more than all other requests on
# a node can take together (each takes its device count), so nothing fits beside it.
WHOLE: Final = 1_000_000
_MIB = 1 << 20


def class_entry(device_class: str) -> str:
    """Free devices of a class on a node."""
    return CLASS_PREFIX + device_class


def shape_entry(device_class: str, shape: DeviceShape) -> str:
    """Free devices of a class with one shape on a node."""
    return f"{CLASS_PREFIX}{device_class}{SHAPE_SEPARATOR}{shape.key}"


def counter_entry(driver: str, counter: str) -> str:
    """What a node has left of one shared counter, summed over its counter sets."""
    return f"{COUNTER_PREFIX}{driver}/{counter}"


def whole_entry(device_class: str) -> str:
    """A node's devices of a class, as an allocationMode All request takes them: whole."""
    return WHOLE_PREFIX + device_class


def any_entry(device_class: str) -> str:
    """Free devices of a class on a node, tainted or not (classes with tainted devices)."""
    return ANY_PREFIX + device_class


def is_dra_entry(name: str) -> bool:
    return name in (DRA_GPU, DRA_GPU_SERVED) or name.startswith(
        (CLASS_PREFIX, COUNTER_PREFIX, WHOLE_PREFIX, ANY_PREFIX)
    )


# ---- pools -------------------------------------------------------------------------------


class PoolState(StrEnum):
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"  # not every slice of the newest generation is here
    INVALID = "invalid"  # a device name listed twice


@dataclass(frozen=True, slots=True)
class NodePool:
    """What one node holds of a pool made of several slices (or shared between nodes)."""

    driver: str
    pool: str
    node: str
    devices: tuple[Device, ...]
    counters: Counters = ()  # the pool's shared counter sets, whichever slice defines them


# What one node holds of one pool: the pool's only slice itself when it has one (the usual
# case, and no copy), else the devices merged from its slices. Both read alike.
DeviceHolder = NodePool | ResourceSlice


@dataclass(frozen=True, slots=True)
class Pool:
    """One (driver, pool) after merging its slices."""

    driver: str
    name: str
    generation: int
    state: PoolState
    problem: str = ""  # why incomplete or invalid, for people
    local: tuple[DeviceHolder, ...] = ()  # per node, only for a complete and valid pool
    # Reachable from several nodes, only for a complete and valid pool: not counted per node.
    shared_devices: tuple[Device, ...] = ()

    @property
    def nonlocal_devices(self) -> int:
        return len(self.shared_devices)

    @property
    def key(self) -> tuple[str, str]:
        return (self.driver, self.name)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(held.node for held in self.local)


def merge_pool(slices: Iterable[ResourceSlice]) -> Pool:
    """The pool the slices (all of one driver and pool name) describe together.

    Precondition: at least one slice, all with the same driver and pool name.
    """
    ordered = sorted(slices, key=lambda s: s.name)
    newest = max(s.generation for s in ordered)
    current = [s for s in ordered if s.generation == newest]
    first = current[0]
    base = Pool(first.driver, first.pool, newest, PoolState.COMPLETE)
    where = f"pool {first.pool} of driver {first.driver}"
    # Completeness first: it is a count, and a pool arriving slice by slice is re-merged
    # once per slice, so only the last merge reads every device.
    if len(current) != first.slice_count:
        return _with(
            base,
            PoolState.INCOMPLETE,
            f"{where}: {len(current)} of {first.slice_count} slices of generation {newest} "
            "are published; its devices are not used until the driver finishes the update",
        )
    duplicates = _duplicate_devices(current)
    if duplicates:
        return _with(base, PoolState.INVALID, f"{where}: {duplicates}; no device of it is used")
    shared = intern_devices(d for s in current for d in s.shared_devices)
    if len(current) == 1 and not first.device_nodes:
        holders: tuple[DeviceHolder, ...] = (first,) if first.node and first.devices else ()
        return Pool(
            first.driver,
            first.pool,
            newest,
            PoolState.COMPLETE,
            local=holders,
            shared_devices=shared,
        )
    local: dict[str, list[Device]] = {}
    for s in current:
        for node, devices in s.by_node():
            local.setdefault(node, []).extend(devices)
    # Since Kubernetes 1.35 counter sets are published in slices of their own.
    counters = tuple(sorted(c for s in current for c in s.counters))
    return Pool(
        first.driver,
        first.pool,
        newest,
        PoolState.COMPLETE,
        local=tuple(
            NodePool(first.driver, first.pool, node, intern_devices(devices), counters)
            for node, devices in sorted(local.items())
        ),
        shared_devices=shared,
    )


def _with(base: Pool, state: PoolState, problem: str) -> Pool:
    return Pool(base.driver, base.name, base.generation, state, problem)


def _duplicate_devices(slices: Sequence[ResourceSlice]) -> str:
    """'device gpu-3 is listed twice (slices a, b)', or "" when every name is unique."""
    where: dict[str, list[str]] = {}
    for s in slices:
        for name in s.duplicates:
            where.setdefault(name, []).extend([s.name, s.name])
        for name in {d.name for d in s.devices} - set(s.duplicates):
            where.setdefault(name, []).append(s.name)
    repeated = sorted((name, sorted(owners)) for name, owners in where.items() if len(owners) > 1)
    if not repeated:
        return ""
    name, owners = repeated[0]
    more = f" (and {len(repeated) - 1} more)" if len(repeated) > 1 else ""
    return f"device {name} is listed more than once (slices {', '.join(owners)}){more}"


@dataclass(frozen=True, slots=True)
class DraInventory:
    """Every pool, and the node-local devices of the usable ones by node."""

    pools: Mapping[tuple[str, str], Pool]
    by_node: Mapping[str, tuple[DeviceHolder, ...]]

    def node(self, name: str) -> tuple[DeviceHolder, ...]:
        return self.by_node.get(name, ())

    def problems(self) -> list[str]:
        """Pools not used, and devices not counted per node: each once, sorted."""
        found = [p.problem for p in self.pools.values() if p.problem]
        found.extend(
            f"pool {p.name} of driver {p.driver}: {p.nonlocal_devices} device(s) reachable "
            "from several nodes are not planned by Phalanx (kube-scheduler still allocates them)"
            for p in self.pools.values()
            if p.nonlocal_devices
        )
        return sorted(found)


def build_inventory(slices: Iterable[ResourceSlice]) -> DraInventory:
    """Merge every slice into pools, and the usable pools into per-node device lists."""
    grouped: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        grouped.setdefault((s.driver, s.pool), []).append(s)
    pools = {key: merge_pool(group) for key, group in sorted(grouped.items())}
    return DraInventory(pools, node_pools(pools.values()))


def node_pools(pools: Iterable[Pool]) -> dict[str, tuple[DeviceHolder, ...]]:
    """Per node, what it holds of each complete, valid pool (ordered by driver, pool)."""
    by_node: dict[str, list[DeviceHolder]] = {}
    for pool in sorted(pools, key=lambda p: p.key):
        for held in pool.local:
            by_node.setdefault(held.node, []).append(held)
    return {node: tuple(held) for node, held in by_node.items()}


# ---- allocated devices -------------------------------------------------------------------

# (driver, pool) -> names of devices some claim holds exclusively.
Allocated = Mapping[tuple[str, str], Container[str]]


def allocated_devices(claims: Iterable[ResourceClaim]) -> dict[tuple[str, str], frozenset[str]]:
    """Devices held by allocated claims, the way kube-scheduler's cache counts them."""
    held: dict[tuple[str, str], set[str]] = {}
    for claim in claims:
        if claim.allocation is None:
            continue
        for result in claim.allocation.devices:
            if result.exclusive:
                held.setdefault((result.driver, result.pool), set()).add(result.device)
    return {key: frozenset(names) for key, names in held.items()}


def used_up(pool: DeviceHolder, held: Container[str]) -> list[Device]:
    """Devices no claim holds that can no longer be allocated: a partition whose shared
    counters the held devices have taken (a MIG device of a GPU allocated whole, the whole
    GPU when one of its MIG devices is allocated). kube-scheduler's allocator checks every
    device's consumption against what is left of its counter sets in the same way.
    """
    if not pool.counters:
        return []
    left = _counters_left(pool, held)
    return [
        device
        for device in pool.devices
        if device.consumes
        and device.name not in held
        and any(
            amount > left.get(name, {}).get(counter, amount)
            for name, counters in device.consumes
            for counter, amount in counters
        )
    ]


def _counters_left(pool: DeviceHolder, held: Container[str]) -> dict[str, dict[str, Fraction]]:
    """Per counter set of the pool, what the held devices have left of each counter."""
    left = {name: dict(counters) for name, counters in pool.counters}
    for device in pool.devices:
        if device.consumes and device.name in held:
            for name, counters in device.consumes:
                remaining = left.get(name)
                if remaining is not None:
                    for counter, amount in counters:
                        if counter in remaining:
                            remaining[counter] -= amount
    return left


# ---- classes -----------------------------------------------------------------------------


def countable(device: Device) -> bool:
    """Whether a device counts as one allocatable unit for any request (see `DeviceFlag`):
    a tainted one counts only for requests that tolerate it (`usable`).

    A device several claims may share (`MULTIPLE_ALLOCATIONS`) counts as one while planning;
    its allocations carry a `shareID` and never hold it (`AllocatedDevice.exclusive`).
    """
    return not device.flags & DeviceFlag.TAINTED


def usable(device: Device, tolerations: tuple[DeviceToleration, ...]) -> bool:
    """Whether kube-scheduler may give the device to a request with these tolerations."""
    return countable(device) or (bool(tolerations) and tolerated(device.taints, tolerations))


def counts_as_gpu(device: Device) -> bool:
    """A whole GPU or a MIG device, counted once in `DRA_GPU` (as nvidia.com/gpu counts them).

    A MIG partition of shared counters is one way of using a GPU already counted whole.
    """
    if not device.shape.gpu_like:
        return False
    partition = device.flags & DeviceFlag.CONSUMES_COUNTERS
    return not (partition and device.attribute(f"{NVIDIA_GPU_DRIVER}/type") == "mig")


def _summed(
    memo: dict[tuple[Device, ...], Counter[str]],
    devices: tuple[Device, ...],
    entries_of: Callable[[Device], Iterable[str]],
) -> Counter[str]:
    """The entries of every device of a list, counted; memoized per list in `memo` (identical
    nodes share their lists)."""
    found = memo.get(devices)
    if found is None:
        found = memo[devices] = Counter()
        for device in devices:
            found.update(entries_of(device))
    return found


ClassShapes = Mapping[str, frozenset[DeviceShape]]
# Per class with tainted devices: the (shape, taints) of each kind of them.
ClassTaints = Mapping[str, frozenset[tuple[DeviceShape, tuple[DeviceTaint, ...]]]]
Consumption = Mapping[DeviceShape, Mapping[str, int]]  # shape -> counter entry -> amount


class DeviceCatalog:
    """The cluster's DeviceClasses and what each selects, memoized per (interned) device.

    `shapes` are, per class, the device shapes it accepts anywhere in the cluster
    (`class_shapes`): a class with several gets one entry per shape besides its total
    (`shape_entry`), a class with one needs none. Immutable by contract: a class change
    means a new catalog, `with_shapes` a new shape picture (class matching is kept); then
    every node's entries and every pending pod's demand are recomputed. `remote` names the
    classes that accept a device reachable from several nodes (`class_remote`): Phalanx
    cannot count those per node, so requests for them are left to kube-scheduler. `gpus`
    names the classes whose devices all count in `DRA_GPU` (`class_gpus`): a request for
    one of them takes from it as well. `tainted` holds, per class with tainted devices, what
    kinds of them there are (`class_taints`): such a class gets `any_entry`, which counts its
    tainted devices too.

    `extended_resources` says whether kube-scheduler serves extended resources from DRA
    devices (its `DRAExtendedResource` gate, which Phalanx cannot read). Off, no class
    serves one (`extended` is empty, as kube-scheduler's plugin maps none) and `unbridged`
    keeps the mapping the classes ask for, so a pod asking such a resource can be told why
    only device-plugin nodes host it.
    """

    __slots__ = (
        "_entries",
        "_match",
        "_totals",
        "_wholes",
        "anys",
        "classes",
        "consumption",
        "extended",
        "gpus",
        "notes",
        "remote",
        "shapes",
        "tainted",
        "unbridged",
        "wholes",
    )

    def __init__(
        self,
        classes: Iterable[DeviceClass],
        shapes: ClassShapes | None = None,
        remote: frozenset[str] = frozenset(),
        gpus: frozenset[str] = frozenset(),
        consumption: Consumption | None = None,
        *,
        tainted: ClassTaints | None = None,
        extended_resources: bool = True,
    ) -> None:
        self.classes: Mapping[str, DeviceClass] = {c.name: c for c in classes}
        self.shapes: ClassShapes = shapes if shapes is not None else {}
        self.remote = remote
        self.gpus = gpus
        self.tainted: ClassTaints = tainted if tainted is not None else {}
        # Per class, the `any_entry` names every request for it draws its count from (those of
        # the classes with tainted devices it shares a shape with, `related_anys`).
        self.anys: Mapping[str, tuple[str, ...]] = related_anys(self.shapes, self.tainted)
        # Per shape of partitions, the least any device of it takes of each shared counter
        # (`shape_consumption`): what a request for it takes of `counter_entry` at least.
        self.consumption: Consumption = consumption if consumption is not None else {}
        # Per class with devices, the `whole_entry` names its requests draw from (`related`);
        # every node offers the entry of each such class.
        # (Tainted devices count: an All request that tolerates them is given them.)
        self.wholes: Mapping[str, tuple[str, ...]] = related(
            with_tainted(self.shapes, self.tainted), self.consumption
        )
        # What Phalanx could not evaluate in a class: told once per catalog.
        self.notes: tuple[str, ...] = tuple(
            f"DeviceClass {c.name}: selector {s.expression!r} is not evaluated by Phalanx "
            f"({s.reason}); its devices are those its other selectors, and the parts of this "
            "one Phalanx evaluates, accept"
            for c in self.classes.values()
            for s in c.selectors
            if isinstance(s, Unsupported)
        )
        # Extended resource name -> the class serving it (`extended_classes`); with the
        # bridge off, the class that would serve it, in `unbridged` instead.
        self.extended: Mapping[str, str]
        self.unbridged: Mapping[str, str] = {}
        self.extended, told = extended_classes(self.classes.values())
        if extended_resources:
            self.notes += told  # which class serves a name is news only where one does
        else:
            self.extended, self.unbridged = {}, self.extended
        self._match = _Matching(self.classes)
        self._entries: dict[Device, tuple[str, ...]] = {}
        self._totals: dict[tuple[Device, ...], Counter[str]] = {}
        self._wholes: dict[Device, tuple[str, ...]] = {}

    def with_shapes(
        self,
        shapes: ClassShapes,
        remote: frozenset[str] = frozenset(),
        gpus: frozenset[str] = frozenset(),
        consumption: Consumption | None = None,
        *,
        tainted: ClassTaints | None = None,
    ) -> DeviceCatalog:
        """The same classes over another shape picture, keeping what matching learnt."""
        catalog = DeviceCatalog((), shapes, remote, gpus, consumption, tainted=tainted)
        catalog.classes, catalog.notes, catalog._match = self.classes, self.notes, self._match
        catalog.extended, catalog.unbridged = self.extended, self.unbridged
        return catalog

    def class_notes(self, name: str) -> tuple[str, ...]:
        """The `notes` about one class."""
        return tuple(n for n in self.notes if n.startswith(f"DeviceClass {name}: "))

    def several_shapes(self, name: str) -> bool:
        return len(self.shapes.get(name, ())) > 1

    def in_class(self, device: Device, name: str) -> bool:
        """Whether the class accepts the device; an invalid or unknown class accepts none."""
        return self._match.in_class(device, name)

    def matches(
        self,
        device: Device,
        name: str,
        selectors: tuple[Selector, ...],
        tolerations: tuple[DeviceToleration, ...] = (),
    ) -> bool:
        """Whether a device of the class the request may be given (`usable`) also passes its
        selectors."""
        return self._match.matches(device, name, selectors, tolerations)

    def count_matching(
        self,
        devices: tuple[Device, ...],
        name: str,
        selectors: tuple[Selector, ...],
        tolerations: tuple[DeviceToleration, ...] = (),
    ) -> int:
        """How many of the devices `matches` accepts; memoized per (shared) device list."""
        return self._match.count(devices, name, selectors, tolerations)

    def entries(self, device: Device) -> tuple[str, ...]:
        """The synthetic resources one free device of this kind adds to its node."""
        found = self._entries.get(device)
        if found is None:
            names: list[str] = []
            if countable(device):
                for name in sorted(self.classes):
                    if self.in_class(device, name):
                        names.append(class_entry(name))
                        if self.several_shapes(name):
                            names.append(shape_entry(name, device.shape))
                if counts_as_gpu(device):
                    names.append(DRA_GPU)
            names.extend(any_entry(name) for name in self.tainted if self.in_class(device, name))
            found = self._entries[device] = tuple(names)
        return found

    def totals(self, devices: tuple[Device, ...]) -> Counter[str]:
        """Entries of a whole device list; memoized, as identical nodes share the list."""
        return _summed(self._totals, devices, self.entries)

    def whole_entries(self, device: Device) -> tuple[str, ...]:
        """The `whole_entry` of every class with devices that accepts this one: what its
        being taken keeps an allocationMode All request from. (A taint keeps one only if
        not tolerated: checked per node, `phalanx.core.dra_demand.ineligibility`.)"""
        found = self._wholes.get(device)
        if found is None:
            found = self._wholes[device] = tuple(
                whole_entry(name) for name in self.wholes if self.in_class(device, name)
            )
        return found

    def class_shapes(
        self, device_lists: Iterable[tuple[Device, ...]]
    ) -> dict[str, frozenset[DeviceShape]]:
        """Per class, the shapes of the countable devices it accepts in these lists."""
        shapes: dict[str, set[DeviceShape]] = {name: set() for name in self.classes}
        for devices in set(device_lists):
            for device in devices:
                if countable(device):
                    for name in self.classes:
                        if self.in_class(device, name):
                            shapes[name].add(device.shape)
        return {name: frozenset(found) for name, found in shapes.items()}

    @staticmethod
    def shape_consumption(device_lists: Iterable[tuple[Device, ...]]) -> Consumption:
        """Per shape of devices that consume shared counters, the least any device of it
        takes of each counter (a counter some device of the shape does not take, say on a
        node whose GPUs are not partitionable: none)."""
        least: dict[DeviceShape, dict[str, int]] = {}
        for devices in set(device_lists):
            for device in devices:
                takes: dict[str, int] = {}
                for _, counters in device.consumes:
                    for counter, amount in counters:
                        entry = counter_entry(device.driver, counter)
                        takes[entry] = takes.get(entry, 0) + int(amount)
                known = least.get(device.shape)
                least[device.shape] = (
                    takes
                    if known is None
                    else {e: min(a, takes[e]) for e, a in known.items() if e in takes}
                )
        return {shape: MappingProxyType(takes) for shape, takes in least.items() if takes}

    def class_taints(
        self, device_lists: Iterable[tuple[Device, ...]]
    ) -> dict[str, frozenset[tuple[DeviceShape, tuple[DeviceTaint, ...]]]]:
        """Per class that accepts tainted devices in these lists, their (shape, taints)."""
        found: dict[str, set[tuple[DeviceShape, tuple[DeviceTaint, ...]]]] = {}
        for devices in set(device_lists):
            for device in devices:
                if device.taints:
                    for name in self.classes:
                        if self.in_class(device, name):
                            found.setdefault(name, set()).add((device.shape, device.taints))
        return {name: frozenset(kinds) for name, kinds in sorted(found.items())}

    def class_gpus(self, device_lists: Iterable[tuple[Device, ...]]) -> frozenset[str]:
        """The classes that accept countable devices in these lists, all counted as GPUs
        (not the MIG devices of partitionable GPUs: those count as their GPU)."""
        seen: dict[str, bool] = {}
        for devices in set(device_lists):
            for device in devices:
                if countable(device):
                    for name in self.classes:
                        if seen.get(name, True) and self.in_class(device, name):
                            seen[name] = counts_as_gpu(device)
        return frozenset(name for name, gpu in seen.items() if gpu)

    def class_remote(self, device_lists: Iterable[tuple[Device, ...]]) -> frozenset[str]:
        """The classes that accept a countable device of these lists (devices reachable
        from several nodes)."""
        return frozenset(
            name
            for name in self.classes
            if any(
                countable(device) and self.in_class(device, name)
                for devices in set(device_lists)
                for device in devices
            )
        )


def extended_classes(classes: Iterable[DeviceClass]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Which class serves each extended resource name, and what people should know of it.

    As kube-scheduler's DynamicResources plugin maps them (KEP-5004): every class by
    `deviceclass.resource.kubernetes.io/<class>`, and by its `spec.extendedResourceName`;
    of several classes naming one resource the newest (`metadata.creationTimestamp`)
    serves it, equal times the first by name. A name that is not an extended resource
    name is ignored (`DeviceClass.extended_problem`).
    """
    ordered = sorted(classes, key=lambda c: c.name)
    mapping = {IMPLICIT_EXTENDED_PREFIX + c.name: c.name for c in ordered}
    notes = [f"DeviceClass {c.name}: {c.extended_problem}" for c in ordered if c.extended_problem]
    named: dict[str, list[DeviceClass]] = {}
    for c in ordered:
        if c.extended_resource_name:
            named.setdefault(c.extended_resource_name, []).append(c)
    for resource, rivals in sorted(named.items()):
        # Newest first; sorted() is stable, so equal times keep name order.
        chosen, *others = sorted(rivals, key=lambda c: c.created, reverse=True)
        mapping[resource] = chosen.name
        notes += [
            f"DeviceClass {c.name}: spec.extendedResourceName {resource} is also set by "
            f"DeviceClass {chosen.name}, which serves it (the newest, equal times by name)"
            for c in others
        ]
    return mapping, tuple(notes)


def related(shapes: ClassShapes, consumption: Consumption) -> dict[str, tuple[str, ...]]:
    """Per class with devices, the `whole_entry` of itself (first) and of each class that may
    be given one of its devices (they share a shape) or eat into its partitions' shared
    counters (their shapes consume a common counter): what its requests draw from.

    An allocationMode All request takes `WHOLE` of each, any other request its count, so
    an All request is never planned beside a request that could take one of its devices.
    """
    entries = {name: whole_entry(name) for name, found in sorted(shapes.items()) if found}
    counters = {
        name: {entry for shape in shapes[name] for entry in consumption.get(shape, {})}
        for name in entries
    }
    return {
        name: (
            own,
            *(
                entry
                for other, entry in entries.items()
                if other != name
                and (shapes[name] & shapes[other] or counters[name] & counters[other])
            ),
        )
        for name, own in entries.items()
    }


def with_tainted(shapes: ClassShapes, tainted: ClassTaints) -> dict[str, frozenset[DeviceShape]]:
    """Per class, the shapes of its devices, tainted ones included."""
    return {
        name: shapes.get(name, frozenset())
        | frozenset(shape for shape, _ in tainted.get(name, frozenset()))
        for name in sorted({*shapes, *tainted})
    }


def related_anys(shapes: ClassShapes, tainted: ClassTaints) -> dict[str, tuple[str, ...]]:
    """Per class, the `any_entry` of each class with tainted devices that may be given one
    of its devices (itself, or a class sharing a device shape with it).

    A request takes its count from each, tolerating or not; one that does not tolerate the
    taints takes its class's untainted entries as well. So requests that do not tolerate
    them never get more than the untainted devices, and all together never more than every
    free device: a tolerating request is planned on tainted devices only where the others
    leave enough.
    """
    everything = with_tainted(shapes, tainted)
    return {
        name: tuple(
            any_entry(other) for other in tainted if other == name or mine & everything[other]
        )
        for name, mine in everything.items()
        if any(other == name or mine & everything[other] for other in tainted)
    }


_Tolerations = tuple[DeviceToleration, ...]
_MatchKey = tuple[Device, str, tuple[Selector, ...], _Tolerations]


class _Matching:
    """Memoized class membership and selector matches (independent of the shape picture)."""

    __slots__ = ("_classes", "_counts", "_matches", "_members")

    def __init__(self, classes: Mapping[str, DeviceClass]) -> None:
        self._classes = classes
        self._members: dict[tuple[str, Device], bool] = {}
        self._matches: dict[_MatchKey, bool] = {}
        self._counts: dict[
            tuple[tuple[Device, ...], str, tuple[Selector, ...], _Tolerations], int
        ] = {}

    def in_class(self, device: Device, name: str) -> bool:
        key = (name, device)
        found = self._members.get(key)
        if found is None:
            device_class = self._classes.get(name)
            found = (
                device_class is not None
                and not device_class.problem
                and all(
                    s.matches(device)
                    if isinstance(s, Selector)
                    else all(n.matches(device) for n in s.necessary)
                    for s in device_class.selectors
                )
            )
            self._members[key] = found
        return found

    def matches(
        self,
        device: Device,
        name: str,
        selectors: tuple[Selector, ...],
        tolerations: _Tolerations,
    ) -> bool:
        key = (device, name, selectors, tolerations)
        found = self._matches.get(key)
        if found is None:
            found = (
                usable(device, tolerations)
                and self.in_class(device, name)
                and all(s.matches(device) for s in selectors)
            )
            self._matches[key] = found
        return found

    def count(
        self,
        devices: tuple[Device, ...],
        name: str,
        selectors: tuple[Selector, ...],
        tolerations: _Tolerations,
    ) -> int:
        key = (devices, name, selectors, tolerations)
        found = self._counts.get(key)
        if found is None:
            found = self._counts[key] = sum(
                1 for d in devices if self.matches(d, name, selectors, tolerations)
            )
        return found


def catalog_for(classes: Iterable[DeviceClass], inventory: DraInventory) -> DeviceCatalog:
    """A catalog with the inventory's shape picture (what tests and one-shot callers need)."""
    bare = DeviceCatalog(classes)
    lists = [pool.devices for pools in inventory.by_node.values() for pool in pools]
    shared = [pool.shared_devices for pool in inventory.pools.values()]
    return bare.with_shapes(
        bare.class_shapes(lists),
        bare.class_remote(shared),
        bare.class_gpus(lists),
        bare.shape_consumption(lists),
        tainted=bare.class_taints(lists),
    )


# ---- what a node offers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstalledDevices:
    """A node's DRA devices as its `Node` carries them (`Node.devices`).

    `pools` are what eligibility checks selectors against (installed, whatever is
    allocated); `gpus` counts its GPU-like devices, free or not, so metrics can tell used
    from free (`allocatable` holds only the free ones); `own_gpu` is what the node said of
    its GPUs itself (device plugin, GPU Feature Discovery), kept so that bridging again
    starts from it rather than from a description derived from devices since replaced.
    """

    pools: tuple[DeviceHolder, ...]
    gpus: int = 0
    own_gpu: GpuInfo | None = None
    # Extended resources the node offers from its devices (not in its own allocatable),
    # so bridging again takes them out first.
    served: tuple[str, ...] = ()


def node_entries(
    pools: Sequence[DeviceHolder], catalog: DeviceCatalog, allocated: Allocated
) -> Resources:
    """The node's free DRA devices as synthetic resources, to add to its allocatable.

    Per class `class_entry(c)`, per class and shape `shape_entry(c, s)`, and `DRA_GPU` for
    GPU-like devices; allocated devices are left out. Per class with devices in the cluster
    `whole_entry(c)`: `WHOLE` less its devices here that are not free (held, used up), so
    an allocationMode All request (it takes `WHOLE`) fits only where every device of its
    class is free and no related request takes one (they take their count). Per class with
    tainted devices in the cluster `any_entry(c)`: its free devices, tainted or not.
    Offered where the class has no device too, as a related class's requests draw from it.
    """
    total: Counter[str] = Counter()
    taken: Counter[str] = Counter()  # per whole entry: devices here that are not free
    for pool in pools:
        total.update(catalog.totals(pool.devices))
        held = allocated.get((pool.driver, pool.pool))
        if held:
            for device in pool.devices:
                if device.name in held:
                    total.subtract(catalog.entries(device))
                    taken.update(catalog.whole_entries(device))
            for device in used_up(pool, held):
                total.subtract(catalog.entries(device))
                taken.update(catalog.whole_entries(device))
        if pool.counters:
            # What is left of the shared counters, so that partitions reserved one way (a
            # GPU whole) cannot be reserved again another way (its MIG devices).
            for counters in _counters_left(pool, held or ()).values():
                for counter, amount in counters.items():
                    total[counter_entry(pool.driver, counter)] += max(int(amount), 0)
    for own, *_ in catalog.wholes.values():
        total[own] = WHOLE - taken[own]
    return Resources(total)


def gpu_info(pools: Sequence[DeviceHolder]) -> GpuInfo | None:
    """What the node's DRA GPUs say about it, as device-plugin nodes say it with labels.

    `count` is whole GPUs; `mig` counts MIG devices by `nvidia.com/mig-<profile>`.
    """
    gpus: list[Device] = []
    mig: Counter[str] = Counter()
    domain = NVIDIA_GPU_DRIVER
    for pool in pools:
        for device in pool.devices:
            if not counts_as_gpu(device):
                continue
            if device.attribute(f"{domain}/type") == "gpu":
                gpus.append(device)
            else:
                mig[f"{MIG_PREFIX}{device.attribute(f'{domain}/profile')}"] += 1
    if not gpus and not mig:
        return None
    first = gpus[0] if gpus else None
    memory = first.capacity(f"{domain}/memory") if first is not None else None
    product = first.attribute(f"{domain}/productName") if first is not None else None
    architecture = first.attribute(f"{domain}/architecture") if first is not None else None
    return GpuInfo(
        vendor="nvidia",
        count=len(gpus),
        product=str(product or ""),
        memory_mib=int(memory // _MIB) if memory is not None else 0,
        family=str(architecture or "").lower(),
        mig=dict(sorted(mig.items())),
    )


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """A node's DRA picture for /debug and metrics: installed and free per class."""

    installed: Mapping[str, int] = field(default_factory=dict)
    free: Mapping[str, int] = field(default_factory=dict)


def describe_node(
    pools: Sequence[DeviceHolder], catalog: DeviceCatalog, allocated: Allocated
) -> NodeDevices:
    def per_class(entries: Mapping[str, int]) -> dict[str, int]:
        return {
            name[len(CLASS_PREFIX) :]: count
            for name, count in sorted(entries.items())
            if name.startswith(CLASS_PREFIX) and SHAPE_SEPARATOR not in name
        }

    return NodeDevices(
        installed=per_class(node_entries(pools, catalog, {})),
        free=per_class(node_entries(pools, catalog, allocated)),
    )
