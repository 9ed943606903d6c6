"""Upstream's `spec.disruptionMode` on a PodGroup (v1alpha2 and later) and a
CompositePodGroup (v1alpha3): whether the pods beneath may be disrupted one by one (the
default when unset) or only together. Preemption reads it (`phalanx.core.preempt`).

Two shapes, by the version:

* **v1alpha3, v1beta1 (1.37)**: a union of exactly one of `single: {}` and `all: {}`.
* **v1alpha2 (1.36)**: a string, `Pod` (one by one) or `PodGroup` (together). 1.36's API
  server defaults it to `Pod` on every read, whether or not its WorkloadAwarePreemption
  gate keeps the field: every 1.36 PodGroup carries it.

The API server defaults and validates the field, so a malformed one raises naming it, as a
malformed `spec.schedulingPolicy` does: the gang is refused with that message.
"""

from __future__ import annotations

from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.model import DisruptionMode
from phalanx.core.rawdict import JsonObject, Source, read_object, read_string

FIELD: Final = "spec.disruptionMode"
_MEMBERS: Final = tuple(mode.value for mode in DisruptionMode)
# v1alpha2's enum values.
V1ALPHA2_MODES: Final = {"Pod": DisruptionMode.SINGLE, "PodGroup": DisruptionMode.ALL}


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


def read_v1alpha2_disruption_mode(src: Source, spec: JsonObject) -> DisruptionMode:
    """`spec.disruptionMode` of a v1alpha2 PodGroup (1.36): `Pod` or `PodGroup`; unset is
    `Pod`."""
    mode = read_string(src, spec.get(FIELD.removeprefix("spec.")), FIELD)
    if not mode:
        return DisruptionMode.SINGLE
    if mode not in V1ALPHA2_MODES:
        known = " or ".join(V1ALPHA2_MODES)
        raise src.invalid(FIELD, f"{quoted(mode)} is not a disruption mode ({known})")
    return V1ALPHA2_MODES[mode]
