"""Topology intent from annotations (docs/topology.md): Phalanx's own `phalanx.io/topology-*`,
on a group object or identical on every member, and Kueue's pod-set annotations on pods.

Level names are node label keys; they are checked against the configured topologies only
when the gang is resolved (`phalanx.core.topology.resolve_topology`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.model import ANNOTATION_PREFIX, TopologyConstraint
from phalanx.core.names import annotation_int, is_qualified_name
from phalanx.core.rawdict import INT32_MAX, Source, key_path

# Topology intent (docs/topology.md), on the PodGroup or identical on the members.
TOPOLOGY_ANNOTATION: Final = ANNOTATION_PREFIX + "topology"
TOPOLOGY_REQUIRED_ANNOTATION: Final = ANNOTATION_PREFIX + "topology-required"
TOPOLOGY_PREFERRED_ANNOTATION: Final = ANNOTATION_PREFIX + "topology-preferred"
TOPOLOGY_SLICE_SIZE_ANNOTATION: Final = ANNOTATION_PREFIX + "topology-slice-size"
TOPOLOGY_SLICE_REQUIRED_ANNOTATION: Final = ANNOTATION_PREFIX + "topology-slice-required"

# The same intent in Kueue's pod-set annotations (Topology Aware Scheduling), read on pods.
KUEUE_REQUIRED_ANNOTATION: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_ANNOTATION: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED_ANNOTATION: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_SIZE_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-size"
KUEUE_SLICE_REQUIRED_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-required-topology"
# Kueue's multi-layer slices: a JSON list of {"topology": <level>, "size": <members>},
# outermost first, in place of the two annotations above (Kueue's TASMultiLayerTopology).
KUEUE_SLICE_CONSTRAINTS_ANNOTATION: Final = (
    "kueue.x-k8s.io/podset-slice-required-topology-constraints"
)
# Kueue's webhook takes at most three layers, each size an int32.
MAX_SLICE_LAYERS: Final = 3

_TOPOLOGY_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS label

# Go's strconv.ParseBool, which Kueue uses for podset-unconstrained-topology.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_LEVEL_EXAMPLE = "a node label key such as nvidia.com/gpu.clique, or tier:<n>"
# A Volcano HyperNode tier (docs/topology.md): counted against the topology at resolve time.
_TIER_LEVEL = re.compile(r"tier:[0-9]{1,18}")

# (annotation key, what is wrong): the caller says where (pod problem or PodGroup field).
TopologyProblem = tuple[str, str]


def read_topology(
    annotations: Mapping[str, str], *, kueue: bool
) -> tuple[TopologyConstraint | None, list[TopologyProblem]]:
    """The topology intent in `annotations` (Kueue's pod-set ones too when `kueue`), or None
    when they declare none; with every problem found (then the intent is None)."""
    problems: list[TopologyProblem] = []
    name = annotations.get(TOPOLOGY_ANNOTATION)
    if name is not None and not is_topology_name(name):
        problems.append((TOPOLOGY_ANNOTATION, f"{quoted(name)} is not a topology name"))
    own = _topology_levels(
        annotations,
        problems,
        required=TOPOLOGY_REQUIRED_ANNOTATION,
        preferred=TOPOLOGY_PREFERRED_ANNOTATION,
        slice_size=TOPOLOGY_SLICE_SIZE_ANNOTATION,
        slice_required=TOPOLOGY_SLICE_REQUIRED_ANNOTATION,
        tiers=True,
    )
    theirs = _kueue_levels(annotations, problems) if kueue else None
    if own is not None and theirs is not None and own != theirs:
        problems.append(
            (
                TOPOLOGY_REQUIRED_ANNOTATION,
                f"phalanx.io/topology-* annotations ({own}) and Kueue's podset-* annotations "
                f"({theirs}) disagree",
            )
        )
    if problems:
        return None, problems
    levels = own or theirs
    if name is None and levels is None:
        return None, []
    return TopologyConstraint(
        topology=name or "",
        required=levels.required if levels else "",
        preferred=levels.preferred if levels else "",
        slice_size=levels.slice_size if levels else 0,
        slice_required=levels.slice_required if levels else "",
        slice_layers=levels.slice_layers if levels else (),
    ), []


def is_topology_name(text: str) -> bool:
    """A topology's name: a DNS label (lower-case letters, digits and -, at most 63)."""
    return _TOPOLOGY_NAME.fullmatch(text) is not None


def _topology_levels(
    annotations: Mapping[str, str],
    problems: list[TopologyProblem],
    *,
    required: str,
    preferred: str,
    slice_size: str,
    slice_required: str,
    tiers: bool,
) -> TopologyConstraint | None:
    """The levels one family of annotations declares (None if it declares none); `tiers`:
    whether a level may be a `tier:<n>` (Phalanx's own family; Kueue's takes label keys)."""
    if not any(key in annotations for key in (required, preferred, slice_size, slice_required)):
        return None
    levels = {
        key: _level(annotations, key, problems, tiers=tiers)
        for key in (required, preferred, slice_required)
    }
    size = 0
    size_text = annotations.get(slice_size)
    if size_text is not None:
        number = annotation_int(size_text, minimum=1)
        if number is None:
            problems.append((slice_size, f"{quoted(size_text)} is not a positive integer"))
        else:
            size = number
    if size_text is not None and slice_required not in annotations:
        problems.append((slice_size, f"needs annotation {slice_required} (the slice level)"))
    if slice_required in annotations and size_text is None:
        problems.append((slice_required, f"needs annotation {slice_size} (members per slice)"))
    return TopologyConstraint(
        required=levels[required],
        preferred=levels[preferred],
        slice_size=size,
        slice_required=levels[slice_required],
    )


def _kueue_levels(
    annotations: Mapping[str, str], problems: list[TopologyProblem]
) -> TopologyConstraint | None:
    layers: tuple[tuple[int, str], ...] = ()
    layers_text = annotations.get(KUEUE_SLICE_CONSTRAINTS_ANNOTATION)
    if layers_text is not None:
        layers = _slice_layers(layers_text, problems)
        for key in (KUEUE_SLICE_REQUIRED_ANNOTATION, KUEUE_SLICE_SIZE_ANNOTATION):
            if key in annotations:
                problems.append(
                    (KUEUE_SLICE_CONSTRAINTS_ANNOTATION, f"cannot be set together with {key}")
                )
    unconstrained = False
    text = annotations.get(KUEUE_UNCONSTRAINED_ANNOTATION)
    if text is not None:
        if text in _TRUE:
            unconstrained = True
        elif text not in _FALSE:
            problems.append((KUEUE_UNCONSTRAINED_ANNOTATION, f"{quoted(text)} is not a boolean"))
    declared = [
        key for key in (KUEUE_REQUIRED_ANNOTATION, KUEUE_PREFERRED_ANNOTATION) if key in annotations
    ] + ([KUEUE_UNCONSTRAINED_ANNOTATION] if unconstrained else [])
    if len(declared) > 1:
        problems.append((declared[0], "only one of " + ", ".join(declared) + " may be set"))
    levels = _topology_levels(
        annotations,
        problems,
        required=KUEUE_REQUIRED_ANNOTATION,
        preferred=KUEUE_PREFERRED_ANNOTATION,
        slice_size=KUEUE_SLICE_SIZE_ANNOTATION,
        slice_required=KUEUE_SLICE_REQUIRED_ANNOTATION,
        tiers=False,
    )
    if levels is None and (unconstrained or layers):
        levels = TopologyConstraint()
    if layers and levels is not None:
        (size, level), outer = layers[-1], layers[:-1]
        levels = replace(levels, slice_size=size, slice_required=level, slice_layers=outer)
    return levels


def _slice_layers(text: str, problems: list[TopologyProblem]) -> tuple[tuple[int, str], ...]:
    """Kueue's multi-layer slices, outermost first, as (size, level); () with the problems
    added when they are malformed (what Kueue's webhook refuses, said per entry)."""
    key = KUEUE_SLICE_CONSTRAINTS_ANNOTATION
    shape = '[{"topology": <node label key>, "size": <members per slice>}, ...], outermost first'
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to be a layer list
        problems.append((key, f"is not JSON; expected {shape}"))
        return ()
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_SLICE_LAYERS:
        problems.append((key, f"must be a list of 1 to {MAX_SLICE_LAYERS} layers: {shape}"))
        return ()
    found = len(problems)
    layers: list[tuple[int, str]] = []
    last = 0  # the index of the entry in `layers[-1]`
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            problems.append((key, f"[{i}] must be an object: {shape}"))
            continue
        if "sizes" in entry:
            problems.append((key, f"[{i}].sizes (slices of uneven sizes) is not supported"))
            continue
        level, size = entry.get("topology"), entry.get("size")
        if not isinstance(level, str) or not is_qualified_name(level):
            said = quoted(level) if isinstance(level, str) else "missing or not a string"
            problems.append((key, f"[{i}].topology {said} is not a node label key"))
            continue
        if type(size) is not int or not 1 <= size <= INT32_MAX:
            problems.append(
                (key, f"[{i}].size {json.dumps(size)} is not an integer from 1 to {INT32_MAX}")
            )
            continue
        if any(level == seen for _, seen in layers):
            problems.append((key, f"[{i}].topology {quoted(level)} is named by two layers"))
            continue
        if layers and layers[-1][0] % size:
            problems.append(
                (
                    key,
                    f"[{i}].size {size} does not divide [{last}].size {layers[-1][0]} (each "
                    "layer's slices split the slices of the layer before it evenly)",
                )
            )
            continue
        layers.append((size, level))
        last = i
    return tuple(layers) if len(problems) == found else ()


def _level(
    annotations: Mapping[str, str], key: str, problems: list[TopologyProblem], *, tiers: bool
) -> str:
    value = annotations.get(key)
    if value is None:
        return ""
    if tiers and _TIER_LEVEL.fullmatch(value):
        return value
    if not is_qualified_name(value):
        example = _LEVEL_EXAMPLE if tiers else _LEVEL_EXAMPLE.partition(", or")[0]
        problems.append((key, f"{quoted(value)} is not {example}"))
        return ""
    return value


def pod_topology(annotations: Mapping[str, str], problems: list[str]) -> TopologyConstraint | None:
    intent, found = read_topology(annotations, kueue=True)
    problems.extend(f"annotation {key}: {message}" for key, message in found)
    return intent


def group_topology(src: Source, annotations: Mapping[str, str]) -> TopologyConstraint | None:
    intent, found = read_topology(annotations, kueue=False)
    if found:
        key, message = found[0]
        raise src.invalid(key_path("metadata.annotations", key), message)
    return intent
