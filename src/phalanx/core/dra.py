"""Dynamic Resource Allocation objects -> the model: slices, classes, claims and templates,
and the DeviceTaintRules that taint devices of slices.

The `resource.k8s.io/v1` kinds as plain dicts become frozen values here, the only place
they are read. As in `phalanx.core.inventory`, what the API server would refuse raises
`InvalidObjectError` naming the object and field. Two kinds of bad input are values, not
exceptions, because the object still exists and may still hold devices:

* a CEL selector that does not parse: `DeviceClass.problem`, `DeviceRequest.problem`;
* a device name listed twice in a slice: `ResourceSlice.duplicates` (kube-scheduler then
  refuses the whole pool; so does `phalanx.core.dra_inventory`).

Memory: a cluster of identical GPU servers publishes the same devices again and again. A
device is split into its *shape* (every attribute and capacity identical devices share) and
its own few identifying values (`index`, `minor`, `pcieBusID`, `id`, MIG memory slices);
shapes, devices and whole device lists are interned, so identical servers share one copy.
Globally unique values (`uuid`, `parentUUID`) are not kept: a selector that reads them is
evaluated by kube-scheduler only (see `phalanx.core.dra_demand`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import IntFlag, StrEnum
from fractions import Fraction
from types import MappingProxyType
from typing import Final, TypeVar

from phalanx.core.cel import (
    AttributeValue,
    Selector,
    Unsupported,
    Version,
    parse_selector,
)
from phalanx.core.cel_syntax import CelSyntaxError
from phalanx.core.errors import QuantityError, quoted
from phalanx.core.inventory import parse_node_selector
from phalanx.core.model import SelectorTerm
from phalanx.core.quantity import parse_quantity
from phalanx.core.rawdict import (
    JsonObject,
    Source,
    is_extended_resource,
    key_path,
    namespace_and_name,
    read_boolean,
    read_integer,
    read_metadata,
    read_object,
    read_objects,
    read_string,
)

RESOURCE_API_VERSION: Final = "resource.k8s.io/v1"

# NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu): drivers and the device types it publishes.
NVIDIA_GPU_DRIVER: Final = "gpu.nvidia.com"
NVIDIA_COMPUTE_DOMAIN_DRIVER: Final = "compute-domain.nvidia.com"
GPU_TYPES: Final = frozenset({"gpu", "mig"})  # the `type` attribute of GPU-like devices

# Attribute ids (the part after the domain) that differ between otherwise identical devices.
IDENTITY_ATTRIBUTES: Final = frozenset(
    {"index", "minor", "parentIndex", "pcieBusID", "pcieRoot", "id"}
)
# Globally unique per device: never shared, so not kept (a selector reading one falls back).
DROPPED_ATTRIBUTES: Final = frozenset({"uuid", "parentUUID"})
_IDENTITY_CAPACITY = re.compile(r"memorySlice[0-9]+")  # a MIG device's placement

# The device taint effects kube-scheduler's allocator acts on; any other (None, one added
# later) is informational: "consumers must treat unknown effects like None" (resource/v1).
TAINT_EFFECTS_THAT_EXCLUDE: Final = frozenset({"NoSchedule", "NoExecute"})
_EMPTY_ATTRIBUTES: Mapping[str, AttributeValue] = MappingProxyType({})
_EMPTY_CAPACITY: Mapping[str, Fraction] = MappingProxyType({})


# ---- interning ---------------------------------------------------------------------------

_V = TypeVar("_V")


class _Interner:
    """Equal values share one object. Bounded: past `limit` entries it starts afresh, so a
    churn of distinct values cannot grow it forever (objects already handed out stay valid)."""

    __slots__ = ("_limit", "_table")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._table: dict[Hashable, object] = {}

    def get(self, key: Hashable, make: Callable[[], _V]) -> _V:
        found = self._table.get(key)
        if found is None:
            if len(self._table) >= self._limit:
                self._table.clear()
            found = self._table[key] = make()
        return found  # type: ignore[return-value]  # a key's value always comes from its `make`


_SHAPES = _Interner(1 << 14)
_DEVICES = _Interner(1 << 17)
_DEVICE_LISTS = _Interner(1 << 15)


# ---- devices -----------------------------------------------------------------------------


class DeviceFlag(IntFlag):
    """What makes a device count differently from a plain, exclusively allocated one."""

    NONE = 0
    TAINTED = 1  # a NoSchedule/NoExecute device taint (`Device.taints`): needs a toleration
    CONSUMES_COUNTERS = 2  # a partition of shared counters (DRAPartitionableDevices)
    MULTIPLE_ALLOCATIONS = 4  # allowMultipleAllocations (DRAConsumableCapacity): shareable


@dataclass(frozen=True, slots=True, eq=False)
class DeviceShape:
    """What identical devices share: driver, attributes and capacities, identity left out.

    Interned: equal shapes are the same object, so identity comparison is equality.
    `key` is a short stable digest of the content (it names resource entries).
    """

    driver: str
    attributes: Mapping[str, AttributeValue]  # fully qualified name -> value
    capacity: Mapping[str, Fraction]
    key: str

    @property
    def gpu_like(self) -> bool:
        """A whole GPU or a MIG device of NVIDIA's driver (counted like nvidia.com/gpu)."""
        return (
            self.driver == NVIDIA_GPU_DRIVER
            and self.attributes.get(f"{NVIDIA_GPU_DRIVER}/type") in GPU_TYPES
        )

    def describe(self) -> str:
        """What a person calls devices of this shape ("gpu NVIDIA H100 80GB HBM3")."""
        domain = self.driver
        parts = [
            str(self.attributes[f"{domain}/{name}"])
            for name in ("type", "productName", "profile")
            if f"{domain}/{name}" in self.attributes
        ]
        return " ".join(parts) or f"{self.driver} device {self.key}"


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A device taint kube-scheduler acts on (effect NoSchedule or NoExecute): it allocates
    the device only to a request with a toleration of it (`DeviceToleration.tolerates`)."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """One `tolerations` entry of a request: the taints it lets the request be given."""

    key: str = ""  # "" (operator Exists only): every key
    exists: bool = False  # operator Exists (any value), else Equal (this value)
    value: str = ""
    effect: str = ""  # "": every effect

    def tolerates(self, taint: DeviceTaint) -> bool:
        """`resourceclaim.ToleratesTaint` in k8s.io/dynamic-resource-allocation."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.exists or self.value == taint.value


def tolerated(taints: Iterable[DeviceTaint], tolerations: Iterable[DeviceToleration]) -> bool:
    """Whether every taint is tolerated by one of the tolerations."""
    return all(any(t.tolerates(taint) for t in tolerations) for taint in taints)


# Counters by counter set: ((set, ((counter, amount), ...)), ...), sorted, hashable.
Counters = tuple[tuple[str, tuple[tuple[str, Fraction], ...]], ...]


@dataclass(frozen=True, slots=True, eq=False)
class Device:
    """One published device, interned. It is a `phalanx.core.cel.DeviceView`."""

    name: str
    shape: DeviceShape
    own_attributes: Mapping[str, AttributeValue]  # identifying values (`IDENTITY_ATTRIBUTES`)
    own_capacity: Mapping[str, Fraction]  # a MIG device's memory slices
    flags: DeviceFlag
    # What it takes of its pool's shared counters (a partition, DRAPartitionableDevices).
    consumes: Counters = ()
    taints: tuple[DeviceTaint, ...] = ()  # those kube-scheduler acts on (NoSchedule, NoExecute)

    @property
    def driver(self) -> str:
        return self.shape.driver

    def attribute(self, name: str) -> AttributeValue | None:
        value = self.own_attributes.get(name)
        return self.shape.attributes.get(name) if value is None else value

    def capacity(self, name: str) -> Fraction | None:
        value = self.own_capacity.get(name)
        return self.shape.capacity.get(name) if value is None else value


def qualified(driver: str, name: str) -> str:
    """An attribute or capacity name with its domain: a bare name is the driver's own."""
    return name if "/" in name else f"{driver}/{name}"


def is_identifying(kind: str, name: str) -> bool:
    """Whether an attribute or capacity (`kind`, qualified `name`) is a device's own value,
    rather than part of the shape identical devices share."""
    short = name.rpartition("/")[2]
    if kind == "capacity":
        return _IDENTITY_CAPACITY.fullmatch(short) is not None
    return short in IDENTITY_ATTRIBUTES


def is_dropped(name: str) -> bool:
    """Whether an attribute is one Phalanx does not keep (globally unique per device)."""
    return name.rpartition("/")[2] in DROPPED_ATTRIBUTES


def _shape(
    driver: str, attributes: dict[str, AttributeValue], capacity: dict[str, Fraction]
) -> DeviceShape:
    # Type names in the key: True == 1 and "1.2.3" must not meet Version(1, 2, 3).
    key = (
        driver,
        tuple(sorted((n, type(v).__name__, v) for n, v in attributes.items())),
        tuple(sorted(capacity.items())),
    )

    def make() -> DeviceShape:
        digest = hashlib.blake2b(repr(key).encode(), digest_size=4).hexdigest()
        return DeviceShape(
            sys.intern(driver),
            MappingProxyType({sys.intern(n): v for n, v in attributes.items()}),
            MappingProxyType({sys.intern(n): v for n, v in capacity.items()}),
            digest,
        )

    return _SHAPES.get(key, make)


def _device(
    name: str,
    shape: DeviceShape,
    own_attributes: dict[str, AttributeValue],
    own_capacity: dict[str, Fraction],
    flags: DeviceFlag,
    *,
    consumes: Counters = (),
    taints: tuple[DeviceTaint, ...] = (),
) -> Device:
    key = (
        name,
        shape,
        tuple(sorted((n, type(v).__name__, v) for n, v in own_attributes.items())),
        tuple(sorted(own_capacity.items())),
        flags,
        consumes,
        taints,
    )

    def make() -> Device:
        return Device(
            sys.intern(name),
            shape,
            MappingProxyType(own_attributes) if own_attributes else _EMPTY_ATTRIBUTES,
            MappingProxyType(own_capacity) if own_capacity else _EMPTY_CAPACITY,
            flags,
            consumes,
            taints,
        )

    return _DEVICES.get(key, make)


def intern_devices(devices: Iterable[Device]) -> tuple[Device, ...]:
    """One shared tuple for every equal list of devices (identical servers, channels)."""
    key = tuple(devices)  # devices are interned: identity is equality
    return _DEVICE_LISTS.get(key, lambda: key)


# ---- ResourceSlice -----------------------------------------------------------------------


class NodeAccess(StrEnum):
    """Which nodes reach a slice's devices (`spec`: exactly one of these is set)."""

    NODE = "nodeName"
    SELECTOR = "nodeSelector"
    ALL = "allNodes"
    PER_DEVICE = "perDeviceNodeSelection"


@dataclass(frozen=True, slots=True)
class SliceDetails:
    """What few slices have; kept apart so the common slice stays small."""

    access: NodeAccess
    device_nodes: tuple[str, ...] = ()  # PER_DEVICE: the node of each device, in order
    # Reachable from several nodes (nodeSelector, allNodes): not counted per node.
    shared_devices: tuple[Device, ...] = ()
    duplicates: tuple[str, ...] = ()  # device names listed more than once in this slice
    counters: Counters = ()  # `sharedCounters`: the counter sets this slice defines


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """One `ResourceSlice`: part (or all) of a driver's pool of devices."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int  # how many slices make the pool at this generation
    node: str  # the node of a `nodeName` slice; "" otherwise
    devices: tuple[Device, ...]  # the node-local devices (interned)
    details: SliceDetails | None = None  # None: a plain nodeName slice

    @property
    def access(self) -> NodeAccess:
        return NodeAccess.NODE if self.details is None else self.details.access

    @property
    def device_nodes(self) -> tuple[str, ...]:
        return () if self.details is None else self.details.device_nodes

    @property
    def shared_devices(self) -> tuple[Device, ...]:
        return () if self.details is None else self.details.shared_devices

    @property
    def duplicates(self) -> tuple[str, ...]:
        return () if self.details is None else self.details.duplicates

    @property
    def counters(self) -> Counters:
        return () if self.details is None else self.details.counters

    def by_node(self) -> list[tuple[str, tuple[Device, ...]]]:
        """The node-local devices grouped by node."""
        if not self.device_nodes:
            return [(self.node, self.devices)] if self.node and self.devices else []
        grouped: dict[str, list[Device]] = {}
        for node, device in zip(self.device_nodes, self.devices, strict=True):
            grouped.setdefault(node, []).append(device)
        return [(node, intern_devices(devices)) for node, devices in sorted(grouped.items())]


def parse_resource_slice(obj: JsonObject) -> ResourceSlice:
    """A `resource.k8s.io/v1 ResourceSlice`."""
    src, _ = read_metadata("ResourceSlice", obj, namespaced=False)
    spec = read_object(src, obj.get("spec"), "spec")
    driver = read_string(src, spec.get("driver"), "spec.driver")
    if not driver:
        raise src.invalid("spec.driver", "is required")
    pool = read_object(src, spec.get("pool"), "spec.pool")
    pool_name = read_string(src, pool.get("name"), "spec.pool.name")
    if not pool_name:
        raise src.invalid("spec.pool.name", "is required")
    generation = read_integer(src, pool.get("generation"), "spec.pool.generation") or 0
    if generation < 0:
        raise src.invalid("spec.pool.generation", f"must not be negative, not {generation}")
    count = read_integer(src, pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount")
    if count is None or count < 1:
        raise src.invalid("spec.pool.resourceSliceCount", f"must be positive, not {count}")
    access, node = _node_access(src, spec)
    devices: list[Device] = []
    device_nodes: list[str] = []
    shared_devices: list[Device] = []
    seen: set[str] = set()
    duplicates: list[str] = []
    for path, raw in read_objects(src, spec.get("devices"), "spec.devices"):
        device, device_node = _parse_device(src, driver, raw, path, per_device=node is None)
        if device.name in seen:
            duplicates.append(device.name)
        seen.add(device.name)
        if node:
            devices.append(device)
        elif device_node:
            devices.append(device)
            device_nodes.append(sys.intern(device_node))
        else:
            shared_devices.append(device)
    details = SliceDetails(
        access=access,
        device_nodes=tuple(device_nodes),
        shared_devices=intern_devices(shared_devices),
        duplicates=tuple(sorted(set(duplicates))),
        counters=_shared_counters(src, spec.get("sharedCounters")),
    )
    return ResourceSlice(
        name=src.name,
        driver=sys.intern(driver),
        pool=sys.intern(pool_name),
        generation=generation,
        slice_count=count,
        node=sys.intern(node) if node else "",
        devices=intern_devices(devices),
        details=None if details == _PLAIN else details,
    )


_PLAIN = SliceDetails(NodeAccess.NODE)


def _node_access(src: Source, spec: JsonObject) -> tuple[NodeAccess, str | None]:
    """How nodes reach the slice, and its node (None: decided per device, or not local)."""
    node_name = read_string(src, spec.get("nodeName"), "spec.nodeName")
    all_nodes = read_boolean(src, spec.get("allNodes"), "spec.allNodes")
    per_device = read_boolean(
        src, spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection"
    )
    has_selector = spec.get("nodeSelector") is not None
    if has_selector:
        parse_node_selector(src, spec.get("nodeSelector"), "spec.nodeSelector")
    chosen = [
        kind
        for kind, present in (
            (NodeAccess.NODE, bool(node_name)),
            (NodeAccess.SELECTOR, has_selector),
            (NodeAccess.ALL, all_nodes),
            (NodeAccess.PER_DEVICE, per_device),
        )
        if present
    ]
    if len(chosen) != 1:
        raise src.invalid(
            "spec",
            "must set exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection",
        )
    if chosen[0] is NodeAccess.NODE:
        return NodeAccess.NODE, node_name
    return chosen[0], None if chosen[0] is NodeAccess.PER_DEVICE else ""


# Per (driver, name as published): the qualified name and what it is to a shape.
_SHARED, _OWN, _DROPPED = 0, 1, 2
_ATTRIBUTE_NAMES: dict[tuple[str, str], tuple[str, int]] = {}
_CAPACITY_NAMES: dict[tuple[str, str], tuple[str, int]] = {}


def _classify(driver: str, name: str, kind: str) -> tuple[str, int]:
    table = _ATTRIBUTE_NAMES if kind == "attribute" else _CAPACITY_NAMES
    found = table.get((driver, name))
    if found is None:
        full = sys.intern(qualified(driver, name))
        role = _OWN if is_identifying(kind, full) else _SHARED
        if kind == "attribute" and is_dropped(full):
            role = _DROPPED
        if len(table) >= 1 << 14:  # names are few; a flood of distinct ones starts afresh
            table.clear()
        found = table[(driver, name)] = (full, role)
    return found


def _parse_device(
    src: Source, driver: str, raw: JsonObject, path: str, *, per_device: bool
) -> tuple[Device, str]:
    """A device and, for per-device node selection, its node ("" when not node-local)."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        read_string(src, name, f"{path}.name")
        raise src.invalid(f"{path}.name", "is required")
    shared: dict[str, AttributeValue] = {}
    own: dict[str, AttributeValue] = {}
    attributes = raw.get("attributes")
    if attributes is not None:
        for attribute, value in read_object(src, attributes, f"{path}.attributes").items():
            full, role = _classify(driver, attribute, "attribute")
            # A dropped value is checked, never kept: interning a UUID would grow the table.
            parsed = _attribute_value(src, value, path, attribute, keep=role != _DROPPED)
            if role != _DROPPED:
                (own if role == _OWN else shared)[full] = parsed
    capacity: dict[str, Fraction] = {}
    own_capacity: dict[str, Fraction] = {}
    capacities = raw.get("capacity")
    if capacities is not None:
        for item, value in read_object(src, capacities, f"{path}.capacity").items():
            full, role = _classify(driver, item, "capacity")
            amount = _capacity_value(src, value, path, item, "capacity")
            (own_capacity if role == _OWN else capacity)[full] = amount
    flags = DeviceFlag.NONE
    consumes: Counters = ()
    if raw.get("consumesCounters"):
        consumes = _counter_sets(
            src, raw.get("consumesCounters"), f"{path}.consumesCounters", "counterSet"
        )
        flags |= DeviceFlag.CONSUMES_COUNTERS
    taints: tuple[DeviceTaint, ...] = ()
    if raw.get("taints"):
        taints = _taints(src, raw.get("taints"), f"{path}.taints")
        if taints:
            flags |= DeviceFlag.TAINTED
    multiple = raw.get("allowMultipleAllocations")
    if multiple is not None and read_boolean(src, multiple, f"{path}.allowMultipleAllocations"):
        flags |= DeviceFlag.MULTIPLE_ALLOCATIONS
    node = ""
    if per_device:
        node = read_string(src, raw.get("nodeName"), f"{path}.nodeName")
    device = _device(
        name,
        _shape(driver, shared, capacity),
        own,
        own_capacity,
        flags,
        consumes=consumes,
        taints=taints,
    )
    return device, node


def _taints(src: Source, value: object, path: str) -> tuple[DeviceTaint, ...]:
    """A device's taints that keep it from requests not tolerating them (checked all)."""
    kept: list[DeviceTaint] = []
    for item_path, raw in read_objects(src, value, path):
        taint = _taint(src, raw, item_path)
        if taint is not None:
            kept.append(taint)
    return _sorted_taints(kept)


def _taint(src: Source, raw: JsonObject, path: str) -> DeviceTaint | None:
    """One taint, checked; None when its effect keeps the device from nobody (None, or one
    added later)."""
    key = read_string(src, raw.get("key"), f"{path}.key")
    if not key:
        raise src.invalid(f"{path}.key", "is required")
    taint_value = read_string(src, raw.get("value"), f"{path}.value")
    effect = read_string(src, raw.get("effect"), f"{path}.effect")
    if not effect:
        raise src.invalid(f"{path}.effect", "is required (None, NoSchedule or NoExecute)")
    read_string(src, raw.get("timeAdded"), f"{path}.timeAdded")
    if effect not in TAINT_EFFECTS_THAT_EXCLUDE:
        return None
    return DeviceTaint(sys.intern(key), sys.intern(taint_value), sys.intern(effect))


def _sorted_taints(taints: Iterable[DeviceTaint]) -> tuple[DeviceTaint, ...]:
    return tuple(sorted(set(taints), key=lambda t: (t.key, t.value, t.effect)))


def _shared_counters(src: Source, value: object) -> Counters:
    return _counter_sets(src, value, "spec.sharedCounters", "name")


def _counter_sets(src: Source, value: object, path: str, name_field: str) -> Counters:
    """`sharedCounters` (sets by `name`) or a device's `consumesCounters` (by `counterSet`)."""
    sets: dict[str, tuple[tuple[str, Fraction], ...]] = {}
    for item_path, raw in read_objects(src, value, path):
        name = read_string(src, raw.get(name_field), f"{item_path}.{name_field}")
        if not name:
            raise src.invalid(f"{item_path}.{name_field}", "is required")
        if name in sets:
            raise src.invalid(f"{item_path}.{name_field}", f"{quoted(name)} is listed twice")
        counters = read_object(src, raw.get("counters"), f"{item_path}.counters")
        sets[sys.intern(name)] = tuple(
            sorted(
                (sys.intern(counter), _capacity_value(src, amount, item_path, counter, "counters"))
                for counter, amount in counters.items()
            )
        )
    return tuple(sorted(sets.items()))


def _capacity_value(src: Source, value: object, path: str, item: str, kind: str) -> Fraction:
    entry = value.get("value") if isinstance(value, dict) else None
    if isinstance(entry, str):
        try:
            amount = parse_quantity(entry)  # cached per text
        except QuantityError:
            pass
        else:
            if amount >= 0:
                return amount
    where = key_path(f"{path}.{kind}", item)
    return _quantity(src, read_object(src, value, where).get("value"), f"{where}.value")


def _attribute_value(
    src: Source, value: object, path: str, name: str, *, keep: bool = True
) -> AttributeValue:
    if isinstance(value, dict) and len(value) == 1:
        # The common, valid case, read without building paths.
        ((kind, raw),) = value.items()
        if kind == "string" and isinstance(raw, str):
            return sys.intern(raw) if keep else raw
        if kind == "int" and isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if kind == "bool" and isinstance(raw, bool):
            return raw
        if kind == "version" and isinstance(raw, str):
            with contextlib.suppress(ValueError):
                return _version(raw)
    where = key_path(f"{path}.attributes", name)
    entry = read_object(src, value, where)
    present = [k for k in ("int", "bool", "string", "version") if entry.get(k) is not None]
    if len(present) != 1:
        raise src.invalid(where, "must set exactly one of int, bool, string and version")
    kind = present[0]
    raw = entry[kind]
    if kind == "int":
        number = read_integer(src, raw, f"{where}.int")
        assert number is not None
        return number
    if kind == "bool":
        return read_boolean(src, raw, f"{where}.bool")
    text = read_string(src, raw, f"{where}.{kind}")
    if kind == "string":
        return sys.intern(text) if keep else text
    try:
        return _version(text)
    except ValueError as error:
        raise src.invalid(f"{where}.version", str(error)) from error


@functools.lru_cache(maxsize=1024)
def _version(text: str) -> Version:
    # A cluster publishes a handful of driver and CUDA versions, on every device.
    return Version.parse(text)


def _quantity(src: Source, value: object, path: str) -> Fraction:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise src.invalid(path, str(QuantityError(value)))
    try:
        amount = parse_quantity(value)
    except QuantityError as error:
        raise src.invalid(path, str(error)) from error
    if amount < 0:
        raise src.invalid(path, f"{quoted(value)} is negative")
    return amount


# ---- DeviceTaintRule ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """A `DeviceTaintRule`: one taint on every device its `spec.deviceSelector` picks, as if
    the driver had published it in the device's slice (kube-scheduler's ResourceSlice
    tracker adds it there before the allocator reads the slices)."""

    name: str
    taint: DeviceTaint | None  # None: an effect that keeps the device from nobody (None)
    selects: bool = True  # False: no deviceSelector, which picks no device at all
    # Each None: any. All None with `selects`: the empty selector, every device.
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def picks_pool(self, driver: str, pool: str) -> bool:
        """Whether it taints any device of this pool (or could, by device name)."""
        return (
            self.taint is not None
            and self.selects
            and self.driver in (None, driver)
            and self.pool in (None, pool)
        )


def parse_device_taint_rule(obj: JsonObject) -> DeviceTaintRule:
    """A `resource.k8s.io/v1`, `v1beta2` or `v1alpha3` `DeviceTaintRule`.

    A 1.33/1.34 API server's `v1alpha3` selector may also carry `deviceClassName` and CEL
    `selectors` (1.35 dropped both). Their 1.34 kube-scheduler evaluates them against
    the class and the device, which the pool-keyed taint below cannot; such a rule is
    refused, naming the field, rather than taint more devices than kube-scheduler would."""
    src, _ = read_metadata("DeviceTaintRule", obj, namespaced=False)
    spec = read_object(src, obj.get("spec"), "spec")
    if spec.get("taint") is None:
        raise src.invalid("spec.taint", "is required")
    taint = _taint(src, read_object(src, spec.get("taint"), "spec.taint"), "spec.taint")
    raw = spec.get("deviceSelector")
    if raw is None:
        return DeviceTaintRule(src.name, taint, selects=False)
    selector = read_object(src, raw, "spec.deviceSelector")
    for field in ("deviceClassName", "selectors"):
        if selector.get(field) is not None:
            raise src.invalid(
                f"spec.deviceSelector.{field}",
                "is not supported (v1alpha3 before Kubernetes 1.35): Phalanx ignores the rule, "
                "kube-scheduler still applies it",
            )
    picked: dict[str, str | None] = {}
    for field in ("driver", "pool", "device"):
        value = selector.get(field)
        path = f"spec.deviceSelector.{field}"
        text = None if value is None else read_string(src, value, path)
        if text == "":
            raise src.invalid(path, "must not be empty when set (omit it to pick any)")
        picked[field] = sys.intern(text) if text else None
    return DeviceTaintRule(src.name, taint, True, **picked)


def with_rule_taints(s: ResourceSlice, rules: Iterable[DeviceTaintRule]) -> ResourceSlice:
    """The slice as kube-scheduler's allocator sees it: each rule's taint added to the
    devices it picks. `s` itself when no rule taints any of its devices (no copy)."""
    mine = [r for r in rules if r.picks_pool(s.driver, s.pool)]
    if not mine:
        return s

    def retaint(devices: tuple[Device, ...]) -> tuple[Device, ...]:
        out: list[Device] = []
        for device in devices:
            added = {
                r.taint for r in mine if r.taint is not None and r.device in (None, device.name)
            }
            if not added - set(device.taints):
                out.append(device)
                continue
            out.append(
                _device(
                    device.name,
                    device.shape,
                    dict(device.own_attributes),
                    dict(device.own_capacity),
                    device.flags | DeviceFlag.TAINTED,
                    consumes=device.consumes,
                    taints=_sorted_taints((*device.taints, *added)),
                )
            )
        return intern_devices(out)

    devices = retaint(s.devices)
    details = s.details
    if details is not None and details.shared_devices:
        shared = retaint(details.shared_devices)
        if shared is not details.shared_devices:
            details = replace(details, shared_devices=shared)
    if devices is s.devices and details is s.details:
        return s
    return replace(s, devices=devices, details=details)


# ---- DeviceClass -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A `DeviceClass`: the devices its selectors accept (all of them must)."""

    name: str
    selectors: tuple[Selector | Unsupported, ...] = ()
    # `spec.extendedResourceName`: pods asking it are served from the class's devices on
    # nodes without it in allocatable ("" when not set, or not a valid extended resource).
    extended_resource_name: str = ""
    problem: str = ""  # a selector that does not parse: the class selects nothing
    # metadata.creationTimestamp (RFC 3339, so ordered as text): among classes naming one
    # extended resource, the newest serves it.
    created: str = ""
    # Why `spec.extendedResourceName` is ignored ("" when it is used or not set).
    extended_problem: str = ""


# The name every DeviceClass may be asked by as an extended resource (KEP-5004).
IMPLICIT_EXTENDED_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
_QUALIFIED_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def extended_name_problem(name: str) -> str:
    """Why `name` is not an extended resource name a DeviceClass may set, or ""."""
    prefix, slash, rest = name.partition("/")
    if (
        not slash
        or len(prefix) > 253
        or not _DNS_SUBDOMAIN.fullmatch(prefix)
        or len(rest) > 63
        or not _QUALIFIED_PART.fullmatch(rest)
    ):
        return f"{name!r} is not a domain-qualified name (like example.com/gpu)"
    if not is_extended_resource(name):
        return f"{name!r} is not an extended resource name (kubernetes.io names are not)"
    return ""


def parse_device_class(obj: JsonObject) -> DeviceClass:
    """A `resource.k8s.io/v1 DeviceClass`."""
    src, metadata = read_metadata("DeviceClass", obj, namespaced=False)
    spec = read_object(src, obj.get("spec"), "spec")
    selectors, problem = _selectors(src, spec.get("selectors"), "spec.selectors")
    extended = read_string(src, spec.get("extendedResourceName"), "spec.extendedResourceName")
    created = read_string(src, metadata.get("creationTimestamp"), "metadata.creationTimestamp")
    why = extended_name_problem(extended) if extended else ""
    if why:
        # Not a reason to drop the class: its claims are still served. Only the name is not.
        why = f"spec.extendedResourceName: {why}; pods asking it are not served by this class"
        extended = ""
    return DeviceClass(src.name, selectors, extended, problem, created, why)


def _selectors(
    src: Source, value: object, path: str
) -> tuple[tuple[Selector | Unsupported, ...], str]:
    """The parsed selectors, and the first syntax error as text ("" when all parse)."""
    result: list[Selector | Unsupported] = []
    problems: list[str] = []
    for item_path, selector in read_objects(src, value, path):
        cel = selector.get("cel")
        if cel is None:
            raise src.invalid(item_path, "must set cel (the only kind of device selector)")
        expression = read_string(
            src,
            read_object(src, cel, f"{item_path}.cel").get("expression"),
            f"{item_path}.cel.expression",
        )
        try:
            result.append(parse_selector(expression))
        except CelSyntaxError as error:
            problems.append(f"{item_path}.cel.expression: {error}")
    return tuple(result), "; ".join(problems)


# ---- ResourceClaim and ResourceClaimTemplate ---------------------------------------------


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One `spec.devices.requests` entry (or one `firstAvailable` alternative of one)."""

    name: str
    device_class: str = ""  # "" when the request lists alternatives
    mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1  # ExactCount only
    selectors: tuple[Selector | Unsupported, ...] = ()
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()  # the device taints it may be given
    capacity: bool = False  # asks for consumable capacity (DRAConsumableCapacity)
    alternatives: tuple[DeviceRequest, ...] = ()  # firstAvailable, in order of preference
    problem: str = ""  # a selector that does not parse


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]
    constraints: int = 0  # matchAttribute / distinctAttribute entries

    @property
    def problem(self) -> str:
        return "; ".join(r.problem for r in self._all_requests() if r.problem)

    def _all_requests(self) -> tuple[DeviceRequest, ...]:
        return tuple(x for r in self.requests for x in (r, *r.alternatives))


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One `status.allocation.devices.results` entry."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False  # does not take the device (kube-scheduler skips it too)
    shared: bool = False  # a shareID (consumable capacity): not taken exclusively

    @property
    def exclusive(self) -> bool:
        return not (self.admin_access or self.shared)


@dataclass(frozen=True, slots=True)
class Allocation:
    devices: tuple[AllocatedDevice, ...]
    # Where the devices are reachable (None: everywhere); kube-scheduler sets it to the node.
    node_terms: tuple[SelectorTerm, ...] | None = None


# The API group of an upstream PodGroup that may control a claim (`DRAWorkloadResourceClaims`);
# its version is not compared, as kube-scheduler does not (it may change).
POD_GROUP_API_GROUP: Final = "scheduling.k8s.io"


@dataclass(frozen=True, slots=True)
class ClaimController:
    """The owner reference with `controller: true` of a claim made from a template."""

    kind: str
    name: str
    uid: str
    api_group: str  # the group of its `apiVersion` ("" for the core group)

    def __str__(self) -> str:
        group = f".{self.api_group}" if self.api_group else ""
        return f"{self.kind}{group} {self.name}"


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    spec: ClaimSpec
    allocation: Allocation | None = None
    reserved_for: tuple[str, ...] = ()  # consumer uids (pods, or a PodGroup)
    controller: ClaimController | None = None
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner_pod(self) -> str:
        """The uid of the Pod that controls it (claims made from a pod's template), or ""."""
        c = self.controller
        return c.uid if c is not None and c.kind == "Pod" and not c.api_group else ""

    @property
    def owner_pod_group(self) -> str:
        """The name of the upstream PodGroup that controls it (made from a PodGroup's
        template, 1.37 `DRAWorkloadResourceClaims`), or ""."""
        c = self.controller
        if c is not None and c.kind == "PodGroup" and c.api_group == POD_GROUP_API_GROUP:
            return c.name
        return ""


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_resource_claim(obj: JsonObject) -> ResourceClaim:
    """A `resource.k8s.io/v1 ResourceClaim`, with its allocation when it has one."""
    src, metadata = read_metadata("ResourceClaim", obj, namespaced=True)
    namespace, name = namespace_and_name(src)
    spec = _claim_spec(src, read_object(src, obj.get("spec"), "spec"), "spec")
    status = read_object(src, obj.get("status"), "status")
    allocation = None
    if status.get("allocation") is not None:
        allocation = _allocation(
            src, read_object(src, status.get("allocation"), "status.allocation")
        )
    reserved = tuple(
        read_string(src, ref.get("uid"), f"{path}.uid")
        for path, ref in read_objects(src, status.get("reservedFor"), "status.reservedFor")
    )
    controller = None
    for path, ref in read_objects(src, metadata.get("ownerReferences"), "metadata.ownerReferences"):
        if read_boolean(src, ref.get("controller"), f"{path}.controller"):
            api_version = read_string(src, ref.get("apiVersion"), f"{path}.apiVersion")
            controller = ClaimController(
                kind=read_string(src, ref.get("kind"), f"{path}.kind"),
                name=read_string(src, ref.get("name"), f"{path}.name"),
                uid=read_string(src, ref.get("uid"), f"{path}.uid"),
                api_group=api_version.rpartition("/")[0],
            )
    return ResourceClaim(
        namespace=namespace,
        name=name,
        uid=read_string(src, metadata.get("uid"), "metadata.uid"),
        spec=spec,
        allocation=allocation,
        reserved_for=reserved,
        controller=controller,
        deleting=metadata.get("deletionTimestamp") not in (None, ""),
    )


def parse_resource_claim_template(obj: JsonObject) -> ResourceClaimTemplate:
    """A `resource.k8s.io/v1 ResourceClaimTemplate` (`spec.spec` is the claim's spec)."""
    src, _ = read_metadata("ResourceClaimTemplate", obj, namespaced=True)
    namespace, name = namespace_and_name(src)
    outer = read_object(src, obj.get("spec"), "spec")
    spec = _claim_spec(src, read_object(src, outer.get("spec"), "spec.spec"), "spec.spec")
    return ResourceClaimTemplate(namespace, name, spec)


def _claim_spec(src: Source, spec: JsonObject, path: str) -> ClaimSpec:
    devices = read_object(src, spec.get("devices"), f"{path}.devices")
    requests = tuple(
        _request(src, raw, item_path)
        for item_path, raw in read_objects(src, devices.get("requests"), f"{path}.devices.requests")
    )
    constraints = sum(
        1 for _ in read_objects(src, devices.get("constraints"), f"{path}.devices.constraints")
    )
    return ClaimSpec(requests, constraints)


def _request(src: Source, raw: JsonObject, path: str) -> DeviceRequest:
    name = read_string(src, raw.get("name"), f"{path}.name")
    if not name:
        raise src.invalid(f"{path}.name", "is required")
    exactly = raw.get("exactly")
    first_available = raw.get("firstAvailable")
    if (exactly is None) == (first_available is None):
        raise src.invalid(path, "must set exactly one of exactly and firstAvailable")
    if exactly is not None:
        return _exact(src, name, read_object(src, exactly, f"{path}.exactly"), f"{path}.exactly")
    alternatives = tuple(
        _exact(src, read_string(src, sub.get("name"), f"{sub_path}.name"), sub, sub_path)
        for sub_path, sub in read_objects(src, first_available, f"{path}.firstAvailable")
    )
    if not alternatives:
        raise src.invalid(f"{path}.firstAvailable", "must list at least one request")
    return DeviceRequest(name, alternatives=alternatives)


def _exact(src: Source, name: str, raw: JsonObject, path: str) -> DeviceRequest:
    device_class = read_string(src, raw.get("deviceClassName"), f"{path}.deviceClassName")
    if not device_class:
        raise src.invalid(f"{path}.deviceClassName", "is required")
    mode_text = read_string(src, raw.get("allocationMode"), f"{path}.allocationMode")
    try:
        mode = AllocationMode(mode_text or AllocationMode.EXACT_COUNT.value)
    except ValueError:
        raise src.invalid(
            f"{path}.allocationMode", f"{quoted(mode_text)} is not ExactCount or All"
        ) from None
    count = read_integer(src, raw.get("count"), f"{path}.count")
    if mode is AllocationMode.EXACT_COUNT:
        count = 1 if count is None else count
        if count < 1:
            raise src.invalid(f"{path}.count", f"must be positive, not {count}")
    elif count is not None:
        raise src.invalid(f"{path}.count", "must not be set with allocationMode All")
    selectors, problem = _selectors(src, raw.get("selectors"), f"{path}.selectors")
    return DeviceRequest(
        name=name,
        device_class=device_class,
        mode=mode,
        count=count or 0,
        selectors=selectors,
        admin_access=read_boolean(src, raw.get("adminAccess"), f"{path}.adminAccess"),
        tolerations=_tolerations(src, raw.get("tolerations"), f"{path}.tolerations"),
        capacity=raw.get("capacity") is not None,
        problem=problem,
    )


_OPERATORS: Final = ("Equal", "Exists")


def _tolerations(src: Source, value: object, path: str) -> tuple[DeviceToleration, ...]:
    """A request's `tolerations`, checked as the API server checks them."""
    found: list[DeviceToleration] = []
    for item_path, raw in read_objects(src, value, path):
        key = read_string(src, raw.get("key"), f"{item_path}.key")
        operator = read_string(src, raw.get("operator"), f"{item_path}.operator") or "Equal"
        if operator not in _OPERATORS:
            raise src.invalid(f"{item_path}.operator", f"{quoted(operator)} is not Exists or Equal")
        exists = operator == "Exists"
        if not key and not exists:
            raise src.invalid(f"{item_path}.operator", "must be Exists when key is empty")
        toleration_value = read_string(src, raw.get("value"), f"{item_path}.value")
        if exists and toleration_value:
            raise src.invalid(f"{item_path}.value", "must be empty when operator is Exists")
        effect = read_string(src, raw.get("effect"), f"{item_path}.effect")
        # How long a NoExecute taint is tolerated once allocated: eviction, not placement.
        read_integer(src, raw.get("tolerationSeconds"), f"{item_path}.tolerationSeconds")
        found.append(DeviceToleration(key, exists, toleration_value, effect))
    return tuple(found)


def _allocation(src: Source, allocation: JsonObject) -> Allocation:
    path = "status.allocation"
    devices = read_object(src, allocation.get("devices"), f"{path}.devices")
    results = []
    for item_path, result in read_objects(src, devices.get("results"), f"{path}.devices.results"):
        fields = {
            field: read_string(src, result.get(field), f"{item_path}.{field}")
            for field in ("request", "driver", "pool", "device")
        }
        for field in ("driver", "pool", "device"):
            if not fields[field]:
                raise src.invalid(f"{item_path}.{field}", "is required")
        results.append(
            AllocatedDevice(
                request=fields["request"],
                driver=sys.intern(fields["driver"]),
                pool=sys.intern(fields["pool"]),
                device=sys.intern(fields["device"]),
                admin_access=read_boolean(
                    src, result.get("adminAccess"), f"{item_path}.adminAccess"
                ),
                shared=result.get("shareID") not in (None, ""),
            )
        )
    terms = parse_node_selector(src, allocation.get("nodeSelector"), f"{path}.nodeSelector")
    return Allocation(tuple(results), terms)
