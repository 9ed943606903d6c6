"""A cluster loaded from a Kubernetes `List` file; bindings update it in memory.

What `kubectl get nodes,pods,podgroups -A -o yaml` prints (JSON or YAML) is a valid
cluster file. It is the embedded default of the demo, the simulator and most tests. Gang
objects of every dialect are read (PodGroups, upstream Workloads); what Phalanx ignores in
one (e.g. a Volcano queue) is logged once and kept in `warnings`. So are
`resourceslices,deviceclasses,resourceclaims,resourceclaimtemplates` (`resource.k8s.io/v1`),
whose devices are planned as the live source plans them (`phalanx.core.dra_model`). An
object Phalanx cannot use is skipped and kept in `rejected`, and a version of it read before
is gone from the model; the members of an invalid gang object, and the pods naming an
invalid DRA object, are told why. All as the live source does.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from phalanx.core.cache import ClusterState
from phalanx.core.dra import (
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.dra_model import DraModel
from phalanx.core.errors import InvalidObjectError
from phalanx.core.groups import registry
from phalanx.core.groups.composite import CompositePodGroup
from phalanx.core.groups.upstream import Workload
from phalanx.core.inventory import parse_object
from phalanx.core.model import Binding, GroupRef, Node, Pod, PodGroup, PodPhase, PodRef
from phalanx.core.rawdict import DEFAULT_NAMESPACE, json_type
from phalanx.sources.base import BindError, CommitRecord, GroupStatus, Nomination, StateSink

log = logging.getLogger(__name__)

DRA_GROUP_VERSION = "resource.k8s.io/v1"
# Applied first when the file is loaded: nodes and pods are then bridged once.
_DRA_ORDER = ("DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim")
_NAMESPACED_DRA = ("ResourceClaimTemplate", "ResourceClaim")


def _is_dra(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == DRA_GROUP_VERSION and obj.get("kind") in _DRA_ORDER


def _load_order(obj: Mapping[str, Any]) -> int:
    return _DRA_ORDER.index(obj["kind"]) if _is_dra(obj) else len(_DRA_ORDER)


def _remove_node(dra: DraModel, name: str, state: ClusterState) -> None:
    dra.remove_node(state, name)


def _remove_pod_named(dra: DraModel, namespace: str, name: str, state: ClusterState) -> None:
    held = state.pod_by_key(namespace, name)
    if held is not None:
        dra.remove_pod(state, held.uid)


def _unreadable(dra: DraModel, kind: str, key: str, reason: str, state: ClusterState) -> None:
    dra.unreadable(kind, key, reason)
    dra.settle(state)


class ClusterFileError(ValueError):
    """The file is not a Kubernetes List (or a single object) we can read."""


def load_objects(path: Path) -> list[dict[str, Any]]:
    """The objects of a List (JSON or YAML, one or many documents)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClusterFileError(f"cannot read cluster file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise ClusterFileError(
            f"cannot read cluster file {path}: not UTF-8 text (byte {byte:#04x} at offset "
            f"{exc.start})"
        ) from exc
    return parse_objects(text, str(path))


# The escape of a UTF-16 surrogate (`\ud800`, YAML's `\U0000DC00`): JSON and YAML decode
# one that is not half of a pair into a str no encoder takes, so the object would fail every
# answer, log line and request carrying it. The API server (Go's decoder) stores U+FFFD.
_SURROGATE_ESCAPE = re.compile(r"\\(?:u|U0000)[dD][89a-fA-F]")


def _without_lone_surrogates(value: Any) -> Any:
    """`value` with each lone surrogate replaced by U+FFFD (a pair becomes its character)."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    return value


def parse_objects(text: str, where: str = "cluster file") -> list[dict[str, Any]]:
    try:
        docs = (
            [json.loads(text)] if text.lstrip().startswith("{") else list(yaml.safe_load_all(text))
        )
        if _SURROGATE_ESCAPE.search(text):
            docs = [_without_lone_surrogates(doc) for doc in docs]
    except (ValueError, yaml.YAMLError) as exc:  # ValueError: also an integer too long
        raise ClusterFileError(f"{where} is neither JSON nor YAML: {exc}") from exc
    except RecursionError as exc:
        raise ClusterFileError(f"{where} is nested too deeply to read") from exc
    objects: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ClusterFileError(
                f"{where}: expected a Kubernetes object or List, got {type(doc).__name__}"
            )
        kind = doc.get("kind", "")
        if not isinstance(kind, str):
            raise ClusterFileError(f"{where}: 'kind' must be a string, not {json_type(kind)}")
        if kind.endswith("List") or "items" in doc:
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ClusterFileError(f"{where}: 'items' must be a list")
            for index, item in enumerate(items):
                if not isinstance(item, dict):  # no API server holds such an item
                    raise ClusterFileError(
                        f"{where}: items[{index}] must be an object, not {json_type(item)}"
                    )
            objects.extend(items)
        else:
            objects.append(doc)
    return objects


class ClusterFileSource:
    """An in-memory cluster. Not thread-safe: used from the event loop only."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]],
        *,
        name: str = "cluster file",
        dra_extended_resources: bool = True,
    ) -> None:
        """`dra_extended_resources`: whether the kube-scheduler of the cluster serves
        extended resources from DRA devices (`phalanx.core.dra_model.DraModel`)."""
        self._objects = list(objects)
        self._name = name
        self._sink: StateSink | None = None
        self._synced = False
        self.rejected: list[str] = []  # objects skipped as invalid, with the reason
        self.warnings: list[str] = []  # what Phalanx ignores in gang objects, with the object
        self.records: dict[str, CommitRecord] = {}  # commit records written, by group key
        self.events: list[tuple[str, str, str, str, str, bool]] = []
        self.statuses: dict[str, GroupStatus] = {}
        self.bindings: list[tuple[str, str]] = []  # (pod key, node), in order
        self.requeued: list[str] = []  # pod keys Phalanx asked to be retried
        self.nominated: dict[str, str] = {}  # pod key -> the node last nominated ("" cleared)
        self.marked_scheduled: list[str] = []  # pod keys whose PodScheduled was set True
        self.dra = DraModel(extended_resources=dra_extended_resources)

    @classmethod
    def from_path(cls, path: Path, *, dra_extended_resources: bool = True) -> ClusterFileSource:
        return cls(
            load_objects(path), name=str(path), dra_extended_resources=dra_extended_resources
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def synced(self) -> bool:
        return self._synced

    async def start(self, sink: StateSink) -> None:
        self._sink = sink
        for obj in sorted(self._objects, key=_load_order):
            self.apply(obj)
        self._synced = True

    async def stop(self) -> None:
        self._sink = None

    def apply(self, obj: Mapping[str, Any]) -> bool:
        """Add or update one object in the cluster (what `kubectl apply` would do)."""
        if self._sink is None:
            raise RuntimeError("cluster file source is not started")
        try:
            if _is_dra(obj):
                return self._apply_dra(obj)
            parsed = self._parse(obj)
        except InvalidObjectError as exc:
            self.rejected.append(str(exc))
            log.warning("skipping invalid object", extra={"reason": str(exc)})
            self._tell_members(obj, exc)
            self._forget_unreadable(obj, exc)
            return False
        dra = self.dra
        if isinstance(parsed, Node):
            self._sink(lambda st: dra.upsert_node(st, parsed))
        elif isinstance(parsed, Pod):

            def add_pod(state: ClusterState) -> None:
                dra.upsert_pod(state, parsed)  # a file has no one to tell of problems

            self._sink(add_pod)
        elif isinstance(parsed, Workload):
            self._sink(lambda st: st.upsert_workload(parsed))
        elif isinstance(parsed, CompositePodGroup):
            self._sink(lambda st: st.upsert_composite(parsed))
        else:

            def add_group(state: ClusterState) -> None:
                dra.upsert_group(state, parsed)

            self._sink(add_group)
        return True

    def _parse(
        self, obj: Mapping[str, Any]
    ) -> Node | Pod | PodGroup | Workload | CompositePodGroup:
        """Raises InvalidObjectError for an object Phalanx cannot use."""
        group = registry.parse_group_object(obj)
        if group is None:
            return parse_object(obj)
        for text in group.warnings:
            where = f"{obj.get('kind')} {group.value.key}"
            if f"{where}: {text}" not in self.warnings:
                self.warnings.append(f"{where}: {text}")
                log.warning("ignored in a gang object", extra={"object": where, "reason": text})
        return group.value

    def _tell_members(self, obj: Mapping[str, Any], exc: InvalidObjectError) -> None:
        """An invalid gang object still exists: its members wait with its reason, not for
        it to appear (what the live source does, so a dry run says what production says)."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return
        dialect = registry.dialect_of_kind(api_version, kind)
        namespace, slash, name = exc.name.partition("/")  # "" while the name is unreadable
        if dialect is None or self._sink is None or not slash:
            return
        key, reason, dra = GroupRef(namespace, name, dialect).key, str(exc), self.dra

        def invalid(state: ClusterState) -> None:
            dra.set_group_error(state, key, reason)

        self._sink(invalid)

    def _forget_unreadable(self, obj: Mapping[str, Any], exc: InvalidObjectError) -> None:
        """A node, pod or `resource.k8s.io` object read before that can no longer be is
        gone from the model, as it is from the live source's: its informer keeps no older
        version to plan with. A node is not planned onto, a pod is forgotten, a DRA object
        is absent and the pods naming it are told why."""
        api_version, kind, metadata = obj.get("apiVersion"), obj.get("kind"), obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        namespace = metadata.get("namespace", "") if isinstance(metadata, Mapping) else ""
        if not isinstance(name, str) or not isinstance(namespace, str) or self._sink is None:
            return  # keyed by nothing: the informer could not have held it either
        dra, reason = self.dra, str(exc)
        update: Callable[[ClusterState], object]
        if api_version == "v1" and kind == "Node":
            update = functools.partial(_remove_node, dra, name)
        elif api_version == "v1" and kind == "Pod":
            update = functools.partial(_remove_pod_named, dra, namespace or DEFAULT_NAMESPACE, name)
        elif _is_dra(obj):
            key = f"{namespace or DEFAULT_NAMESPACE}/{name}" if kind in _NAMESPACED_DRA else name
            update = functools.partial(_unreadable, dra, str(kind), key, reason)
        else:
            return
        self._sink(update)

    def _apply_dra(self, obj: Mapping[str, Any]) -> bool:
        """A `resource.k8s.io/v1` object into the DRA model, settled at once."""
        dra = self.dra
        stage: Callable[[], None]
        match obj["kind"]:
            case "ResourceSlice":
                s = parse_resource_slice(obj)
                stage = functools.partial(dra.upsert_slice, s)
            case "DeviceClass":
                c = parse_device_class(obj)
                stage = functools.partial(dra.upsert_class, c)
            case "ResourceClaim":
                claim = parse_resource_claim(obj)
                stage = functools.partial(dra.upsert_claim, claim)
            case _:
                template = parse_resource_claim_template(obj)
                stage = functools.partial(dra.upsert_template, template)
        self._settle(stage)
        return True

    def delete_dra(self, kind: str, key: str) -> None:
        """Delete a `resource.k8s.io/v1` object by kind and key (`name`, or `ns/name`)."""
        removers: dict[str, Callable[[str], None]] = {
            "ResourceSlice": self.dra.remove_slice,
            "DeviceClass": self.dra.remove_class,
            "ResourceClaim": self.dra.remove_claim,
            "ResourceClaimTemplate": self.dra.remove_template,
        }
        self._settle(functools.partial(removers[kind], key))

    def _settle(self, stage: Callable[[], None]) -> None:
        dra = self.dra

        def update(state: ClusterState) -> None:
            stage()
            dra.settle(state)

        if self._sink is not None:
            self._sink(update)

    def delete_pod(self, uid: str) -> None:
        dra = self.dra

        def update(state: ClusterState) -> None:
            dra.remove_pod(state, uid)

        if self._sink is not None:
            self._sink(update)

    def delete_node(self, name: str) -> None:
        def update(state: ClusterState) -> None:
            self.dra.remove_node(state, name)

        if self._sink is not None:
            self._sink(update)

    def delete_group(self, key: str) -> None:
        """Delete a gang object (a PodGroup, or a Workload) by its key (`GroupRef.key`)."""
        dra = self.dra

        def update(state: ClusterState) -> None:
            dra.remove_group(state, key)

        if self._sink is not None:
            self._sink(update)

    async def bind(
        self,
        binding: Binding,
        *,
        record: CommitRecord | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        """In memory, at once; a carried `record` is kept as if written (`records`)."""
        del timeout_seconds
        if self._sink is None:
            raise BindError("cluster file source is not started")
        outcome: list[BindError] = []
        ref, node = binding.pod, binding.node

        def update(state: ClusterState) -> None:
            pod = state.pod_by_key(ref.namespace, ref.name)
            if pod is None or pod.uid != ref.uid:
                outcome.append(BindError(f"pod {ref} not found", gone=True))
                return
            if pod.node_name:  # to its own node too: the API server answers 409 either way
                outcome.append(
                    BindError(f"pod {ref} is already bound to {pod.node_name}", conflict=True)
                )
                return
            if state.node(node) is None:
                outcome.append(BindError(f"node {node} not found"))
                return
            bound = replace(pod, node_name=node, phase=PodPhase.RUNNING)
            self.dra.upsert_pod(state, state.as_declared(bound))  # as the API would report it

        self._sink(update)
        if outcome:
            raise outcome[0]
        self.bindings.append((ref.key, node))
        if record is not None:
            self.records[record.group_key] = record

    async def write_commit_record(self, record: CommitRecord) -> None:
        self.records[record.group_key] = record

    async def emit_event(
        self,
        kind: str,
        namespace: str,
        name: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
    ) -> None:
        self.events.append((kind, f"{namespace}/{name}", reason, message, "", warning))

    async def emit_group_event(
        self, group: GroupRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        kind = registry.object_kind(group)
        self.events.append((kind, group.object_ref.key, reason, message, "", warning))

    async def update_group_status(self, status: GroupStatus) -> None:
        self.statuses[status.group_key] = status

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        """Recorded only: the demo driver retries every pending pod each round anyway."""
        self.requeued.extend(p.key for p in pods)

    async def mark_scheduled(self, pods: Sequence[PodRef]) -> None:
        """Recorded only (pod keys, in call order)."""
        self.marked_scheduled.extend(p.key for p in pods)

    async def nominate(self, nominations: Sequence[Nomination], reason: str) -> None:
        """Recorded only (pod key -> node, "" once cleared); a nomination requeues too."""
        for n in nominations:
            self.nominated[n.pod.key] = n.node
        await self.requeue([n.pod for n in nominations if n.node], reason)
