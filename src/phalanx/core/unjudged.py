"""What of a pod only kube-scheduler's own filters judge.

Phalanx judges a node's readiness, cordon, taints, the pod's node selector and required node
affinity, and every resource request (`phalanx.core.eligibility`, the snapshot). A pending
gang member that asks for nothing else may be bound by the bind barrier together with its
gang before kube-scheduler sends its `/bind` (see `phalanx.core.barrier.completions`): no
filter of kube-scheduler's could have refused it where Phalanx reserved it. Anything else
the pod asks for is named here, and such a member waits for its own cycle:

* scheduling gates (kube-scheduler does not even queue the pod yet);
* host ports (NodePorts; the API server gives a host-network pod's ports as host ports);
* required inter-pod affinity or anti-affinity (InterPodAffinity);
* topology spread constraints that must be met (PodTopologySpread, `DoNotSchedule`);
* volumes bound to storage or limited per node (VolumeBinding, VolumeZone,
  NodeVolumeLimits, VolumeRestrictions): any kind but the node-independent ones below;
* ResourceClaims (DynamicResources allocates their devices while it binds).

Preferences (preferred affinities, `ScheduleAnyway` spreading) are scoring only, which a
gang member has none of already: Phalanx offers it its reserved node alone.
"""

from __future__ import annotations

from phalanx.core.rawdict import JsonObject, Source, read_object, read_objects

# Volume kinds no kube-scheduler filter looks at: nothing about them depends on the node.
NODE_INDEPENDENT_VOLUMES = frozenset(
    {"configMap", "secret", "emptyDir", "downwardAPI", "projected", "hostPath", "image"}
)


def unjudged(src: Source, spec: JsonObject) -> str:
    """What of `spec` only kube-scheduler judges, as a short phrase ("" when nothing is)."""
    found: list[str] = []
    if spec.get("schedulingGates"):
        found.append("scheduling gates")
    if _host_ports(src, spec):
        found.append("host ports")
    affinity = read_object(src, spec.get("affinity"), "spec.affinity")
    kinds = (("podAffinity", "inter-pod affinity"), ("podAntiAffinity", "anti-affinity"))
    for kind, words in kinds:
        terms = read_object(src, affinity.get(kind), f"spec.affinity.{kind}")
        if terms.get("requiredDuringSchedulingIgnoredDuringExecution"):
            found.append(f"required {words}")
    spread = read_objects(
        src, spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints"
    )
    if any(c.get("whenUnsatisfiable", "DoNotSchedule") != "ScheduleAnyway" for _, c in spread):
        found.append("topology spread constraints")
    volumes = sorted(
        {
            kind
            for _, volume in read_objects(src, spec.get("volumes"), "spec.volumes")
            for kind in volume
            if kind != "name" and kind not in NODE_INDEPENDENT_VOLUMES
        }
    )
    if volumes:
        found.append(f"{', '.join(volumes)} volumes")
    if spec.get("resourceClaims"):
        found.append("ResourceClaims")
    return "; ".join(found)


def _host_ports(src: Source, spec: JsonObject) -> bool:
    for field in ("initContainers", "containers"):
        for path, container in read_objects(src, spec.get(field), f"spec.{field}"):
            for _, port in read_objects(src, container.get("ports"), f"{path}.ports"):
                if port.get("hostPort"):
                    return True
    return False
