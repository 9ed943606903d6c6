"""`spec.resourceClaims` entries, as a pod and an upstream PodGroup (1.37,
`DRAWorkloadResourceClaims`) both declare them: which ResourceClaim each entry uses.

A claim named directly is used as named; a template's claim is the one kube's resourceclaim
controller generated and wrote in the object's `status.resourceClaimStatuses`
(`resourceclaim.Name` and `NameFromPodGroup` in `k8s.io/dynamic-resource-allocation`).
"""

from __future__ import annotations

from phalanx.core.model import PodClaimRef
from phalanx.core.rawdict import JsonObject, Source, read_objects, read_string


def read_claim_refs(src: Source, spec: JsonObject, status: JsonObject) -> tuple[PodClaimRef, ...]:
    """`spec.resourceClaims`, with the names generated for templates."""
    generated: dict[str, str | None] = {}
    path = "status.resourceClaimStatuses"
    for item_path, entry in read_objects(src, status.get("resourceClaimStatuses"), path):
        name = read_string(src, entry.get("name"), f"{item_path}.name")
        claim = entry.get("resourceClaimName")
        generated[name] = read_string(src, claim, f"{item_path}.resourceClaimName") or None
    refs = []
    for item_path, entry in read_objects(src, spec.get("resourceClaims"), "spec.resourceClaims"):
        name = read_string(src, entry.get("name"), f"{item_path}.name")
        claim = read_string(src, entry.get("resourceClaimName"), f"{item_path}.resourceClaimName")
        template = read_string(
            src, entry.get("resourceClaimTemplateName"), f"{item_path}.resourceClaimTemplateName"
        )
        if not name:
            raise src.invalid(f"{item_path}.name", "is required")
        if bool(claim) == bool(template):
            raise src.invalid(
                item_path, "must set exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        if template:
            status_name = generated.get(name, "")
            refs.append(
                PodClaimRef(
                    name,
                    claim=status_name or "",
                    template=template,
                    not_needed=name in generated and status_name is None,
                )
            )
        else:
            refs.append(PodClaimRef(name, claim=claim))
    return tuple(refs)
