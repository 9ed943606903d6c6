"""Which gang APIs the API server serves, from its discovery answers.

The source asks `GET /apis` (an `APIGroupList`), then `GET /apis/<group>/<version>` (an
`APIResourceList`) for each group-version `probes` names, and hands both to `served`. It
does so at start and again now and then (a CRD may be installed later, a feature gate
turned on at an upgrade); `Served` values compare equal while nothing changed.

* scheduler-plugins: `scheduling.x-k8s.io/v1alpha1` `podgroups`.
* Volcano: `scheduling.volcano.sh/v1beta1` `podgroups`.
* KAI: `scheduling.run.ai/v2alpha2` `podgroups`.
* Grove: `scheduler.grove.io/v1alpha1` `podgangs`.
* upstream: the newest of `scheduling.k8s.io` `v1beta1`, `v1alpha3`, `v1alpha2` that lists
  `podgroups`, `v1alpha1` `workloads` (1.35) and `v1alpha3` `compositepodgroups` (1.37,
  the `CompositePodGroup` gate) when served.

A kind's status goes to `<object>/status` when its resource list has `<resource>/status`,
else onto the object itself (Volcano's CRD has no status subresource).

`defines_followed_kind` tells the source's watch on CustomResourceDefinitions which ones
may change this answer, so it asks again at once rather than at its next periodic look.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from phalanx.core.groups import composite, grove, kai, scheduler_plugins, upstream, volcano
from phalanx.core.model import Dialect
from phalanx.core.rawdict import JsonObject, Source, read_objects, read_string


@dataclass(frozen=True, slots=True)
class ServedKind:
    """One gang object kind the API server serves, and where to read and write it."""

    dialect: Dialect
    group: str
    version: str
    kind: str
    resource: str  # the plural, as in the URL
    status_subresource: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def list_path(self) -> str:
        """Every namespace's objects: list, then watch the same path (`?watch=1`)."""
        return f"/apis/{self.api_version}/{self.resource}"

    def object_path(self, namespace: str, name: str) -> str:
        return f"/apis/{self.api_version}/namespaces/{namespace}/{self.resource}/{name}"

    def status_path(self, namespace: str, name: str) -> str:
        path = self.object_path(namespace, name)
        return f"{path}/status" if self.status_subresource else path


# Every kind Phalanx can follow, newest upstream PodGroup version first.
_WANTED: Final = (
    ServedKind(
        Dialect.SCHEDULER_PLUGINS,
        scheduler_plugins.GROUP,
        scheduler_plugins.VERSION,
        scheduler_plugins.KIND,
        scheduler_plugins.RESOURCE,
    ),
    ServedKind(Dialect.VOLCANO, volcano.GROUP, volcano.VERSION, volcano.KIND, volcano.RESOURCE),
    ServedKind(Dialect.KAI, kai.GROUP, kai.VERSION, kai.KIND, kai.RESOURCE),
    ServedKind(Dialect.GROVE, grove.GROUP, grove.VERSION, grove.KIND, grove.RESOURCE),
    *(
        ServedKind(
            Dialect.UPSTREAM,
            upstream.GROUP,
            version,
            upstream.POD_GROUP_KIND,
            upstream.POD_GROUP_RESOURCE,
        )
        for version in upstream.POD_GROUP_VERSIONS
    ),
    ServedKind(
        Dialect.UPSTREAM,
        upstream.GROUP,
        upstream.WORKLOAD_VERSION,
        upstream.WORKLOAD_KIND,
        upstream.WORKLOAD_RESOURCE,
    ),
    ServedKind(
        Dialect.COMPOSITE, upstream.GROUP, composite.VERSION, composite.KIND, composite.RESOURCE
    ),
)


# The CustomResourceDefinition names of those kinds: the API server requires a CRD to be
# named `<plural>.<group>`, so the name alone says what it defines.
_CRD_NAMES: Final = frozenset(f"{kind.resource}.{kind.group}" for kind in _WANTED)


def defines_followed_kind(crd_name: str) -> bool:
    """Whether the CustomResourceDefinition named `crd_name` defines a kind Phalanx can
    follow (in any version): creating, changing or deleting it may change `served`."""
    return crd_name in _CRD_NAMES


@dataclass(frozen=True, slots=True)
class Served:
    """The gang kinds to follow (at most one version of each kind). Which one holds a
    given gang is `registry.served_holding`'s to say: the kind of a gang's object is its
    registry entry's, and the registry imports this module."""

    kinds: tuple[ServedKind, ...] = ()

    def of(self, dialect: Dialect) -> tuple[ServedKind, ...]:
        return tuple(kind for kind in self.kinds if kind.dialect is dialect)

    def serves_any_version_of(self, kind: ServedKind) -> bool:
        """Whether `kind`'s group and kind are served, in its version or another."""
        return any(k.group == kind.group and k.kind == kind.kind for k in self.kinds)


def probes(apis: JsonObject) -> tuple[str, ...]:
    """The group-versions, among those Phalanx can follow, that `/apis` says are served."""
    offered = _group_versions(apis)
    wanted = dict.fromkeys(kind.api_version for kind in _WANTED)
    return tuple(gv for gv in wanted if gv in offered)


def served(apis: JsonObject, resources: Mapping[str, JsonObject]) -> Served:
    """What to follow, from `/apis` and the resource lists of `probes(apis)` (a missing
    list, e.g. a 404 because the CRD went away meanwhile, means not served)."""
    offered = _group_versions(apis)
    kinds: list[ServedKind] = []
    for wanted in _WANTED:
        if wanted.api_version not in offered or wanted.api_version not in resources:
            continue
        if any(k.kind == wanted.kind and k.group == wanted.group for k in kinds):
            continue  # a newer version of this kind is already chosen
        names = _resource_names(wanted.api_version, resources[wanted.api_version])
        if wanted.resource not in names:
            continue
        kinds.append(
            ServedKind(
                wanted.dialect,
                wanted.group,
                wanted.version,
                wanted.kind,
                wanted.resource,
                status_subresource=f"{wanted.resource}/status" in names,
            )
        )
    return Served(tuple(kinds))


def _group_versions(apis: JsonObject) -> frozenset[str]:
    src = Source("APIGroupList", "/apis")
    found = set()
    for path, group in read_objects(src, apis.get("groups"), "groups"):
        for item_path, version in read_objects(src, group.get("versions"), f"{path}.versions"):
            found.add(read_string(src, version.get("groupVersion"), f"{item_path}.groupVersion"))
    return frozenset(found)


def _resource_names(group_version: str, answer: JsonObject) -> frozenset[str]:
    src = Source("APIResourceList", f"/apis/{group_version}")
    return frozenset(
        read_string(src, resource.get("name"), f"{path}.name")
        for path, resource in read_objects(src, answer.get("resources"), "resources")
    )
