"""kube-scheduler's own gang scheduling next to Phalanx: which served profiles leave it on.

From 1.35, kube-scheduler's `GangScheduling` plugin holds the members of an upstream gang
(`spec.workloadRef` / `spec.schedulingGroup`) at PreEnqueue until `minCount` exist and at
Permit until `minCount` are assumed; with TopologyAwareWorkloadScheduling (1.36+),
`TopologyPlacementGenerator` and `PodGroupPodsCount` choose and score placements for the
group. kube-scheduler adds them to every profile's `multiPoint` when its feature gates are
on. Two gang logics on one pod is a bug, so the supported setup disables them in the
profiles Phalanx serves::

    profiles:
    - schedulerName: phalanx
      plugins:
        multiPoint:
          disabled: [{name: GangScheduling}, {name: TopologyPlacementGenerator},
                     {name: PodGroupPodsCount}]

`native_gang_profiles` reads the KubeSchedulerConfiguration kube-scheduler runs (the
chart gives Phalanx the same file) and names each served profile that leaves
`GangScheduling` on. Whether kube-scheduler's gates are on cannot be read from it; the
caller pairs the answer with discovery (the upstream API is served only with the
`GenericWorkload` gate, and without it no pod can name an upstream gang).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from phalanx.core.errors import quoted

GANG_PLUGIN: Final = "GangScheduling"
# Disabled next to it by the chart: they place and score pod groups in kube-scheduler
# (1.36+, TopologyAwareWorkloadScheduling), which Phalanx's own placement does.
PLACEMENT_PLUGINS: Final = ("TopologyPlacementGenerator", "PodGroupPodsCount")
DEFAULT_SCHEDULER: Final = "default-scheduler"


@dataclass(frozen=True, slots=True)
class NativeGang:
    """A profile Phalanx serves that leaves kube-scheduler's own gang plugin on."""

    profile: str  # its schedulerName

    def message(self) -> str:
        return (
            f"kube-scheduler profile {quoted(self.profile)} does not disable its own "
            f"{GANG_PLUGIN} plugin: with the GenericWorkload feature gate on, kube-scheduler "
            "and Phalanx would both gate the members of scheduling.k8s.io gangs (two gang "
            f"logics on one pod). Add {GANG_PLUGIN}, {', '.join(PLACEMENT_PLUGINS)} to "
            "profiles[].plugins.multiPoint.disabled (docs/gang-dialects.md)"
        )


def native_gang_profiles(
    config: Mapping[str, object], scheduler_names: Collection[str]
) -> tuple[NativeGang, ...]:
    """The profiles of `config` (a KubeSchedulerConfiguration) named in `scheduler_names`
    that leave `GangScheduling` on: neither it nor "*" is under
    `plugins.multiPoint.disabled`, or `plugins.multiPoint.enabled` names it again.

    Disabling it at single extension points (preEnqueue, permit, ...) is not enough: it
    would still act at the others. Malformed parts read as absent (kube-scheduler itself
    refuses a configuration it cannot read, so such a file is not the one it runs).
    """
    found = []
    for profile in _objects(config.get("profiles")):
        name = profile.get("schedulerName", DEFAULT_SCHEDULER)
        if not isinstance(name, str) or name not in scheduler_names:
            continue
        plugins = profile.get("plugins")
        multi = plugins.get("multiPoint") if isinstance(plugins, Mapping) else None
        multi = multi if isinstance(multi, Mapping) else {}
        disabled = _names(multi.get("disabled"))
        if GANG_PLUGIN in _names(multi.get("enabled")) or not disabled & {GANG_PLUGIN, "*"}:
            found.append(NativeGang(name))
    return tuple(found)


def _objects(value: object) -> list[Mapping[str, object]]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _names(value: object) -> frozenset[str]:
    return frozenset(name for item in _objects(value) if isinstance(name := item.get("name"), str))
