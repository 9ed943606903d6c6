"""Upstream's `spec.disruptionMode` on a PodGroup (v1alpha2 and later) and a
CompositePodGroup (v1alpha3): a union of exactly one of `single: {}` (the default when
unset: the pods beneath may be disrupted one by one) and `all: {}` (they are disrupted
together or not at all). Preemption reads it (`phalanx.core.preempt`).

The API server defaults and validates the field, so a malformed one raises naming it, as a
malformed `spec.schedulingPolicy` does: the gang is refused with that message.
"""

from __future__ import annotations

from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.model import DisruptionMode
from phalanx.core.rawdict import JsonObject, Source, read_object

FIELD: Final = "spec.disruptionMode"
_MEMBERS: Final = tuple(mode.value for mode in DisruptionMode)


def read_disruption_mode(src: Source, spec: JsonObject) -> DisruptionMode:
    """`spec.disruptionMode` of a PodGroup or CompositePodGroup; unset is `single`."""
    union = read_object(src, spec.get(FIELD.removeprefix("spec.")), FIELD)
    unknown = sorted(name for name in union if name not in _MEMBERS)
    if unknown:
        shown = ", ".join(quoted(name) for name in unknown)
        raise src.invalid(FIELD, f"{shown} is not a disruption mode (single or all)")
    chosen = [mode for mode in DisruptionMode if union.get(mode.value) is not None]
    if not union:
        return DisruptionMode.SINGLE
    if len(chosen) != 1:
        raise src.invalid(FIELD, "exactly one of single, all is required")
    [mode] = chosen
    read_object(src, union.get(mode.value), f"{FIELD}.{mode.value}")
    return mode
