"""Which nodes a pod may use, judged the way kube-scheduler's own filters would.

Phalanx re-checks what it can judge itself (readiness, cordon, taints, node selector,
required node affinity, GPU memory, plan tags, and for a pod with ResourceClaims the devices
the node has installed, as `phalanx.core.dra_demand.ineligibility` judges them) so that a
gang is never planned onto a node kube-scheduler would refuse; capacity is judged
separately, against the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from phalanx.core.model import (
    Node,
    Pod,
    SelectorOperator,
    SelectorRequirement,
    SelectorTerm,
    TaintEffect,
)

PLAN_TAG_PREFIX = "tag.phalanx.io/"

# Reasons are short, stable predicates read as "<n> node(s) <reason>" (kube-scheduler's style):
# they are counted per node in failure summaries.
NOT_READY = "were not ready"
CORDONED = "were cordoned (unschedulable)"
SELECTOR_MISMATCH = "didn't match the pod's node selector"
AFFINITY_MISMATCH = "didn't match the pod's required node affinity"
# A pod whose claims the model has not read yet (a /filter that outran the watch).
CLAIMS_UNKNOWN = "could not be judged: the pod's ResourceClaims are not known to Phalanx yet"


def requirement_matches(req: SelectorRequirement, value: str | None) -> bool:
    """Whether a label's (or field's) `value` (None: absent) meets `req`."""
    op = req.operator
    if op is SelectorOperator.EXISTS:
        return value is not None
    if op is SelectorOperator.DOES_NOT_EXIST:
        return value is None
    if op is SelectorOperator.IN:
        return value is not None and value in req.values
    if op is SelectorOperator.NOT_IN:
        return value is None or value not in req.values
    # Gt / Lt compare integers; a missing or non-integer label never matches.
    if value is None or len(req.values) != 1:
        return False
    try:
        have, want = int(value), int(req.values[0])
    except ValueError:
        return False
    return have > want if op is SelectorOperator.GT else have < want


def term_matches(term: SelectorTerm, node: Node) -> bool:
    """A term matches when all its expressions and fields match; an empty term matches nothing."""
    if not term.match_expressions and not term.match_fields:
        return False
    labels = node.labels
    if not all(requirement_matches(r, labels.get(r.key)) for r in term.match_expressions):
        return False
    return all(
        requirement_matches(r, node.name if r.key == "metadata.name" else None)
        for r in term.match_fields
    )


def untolerated_taint(pod: Pod, node: Node) -> str | None:
    """The first NoSchedule/NoExecute taint the pod does not tolerate, as a reason."""
    for taint in node.taints:
        if taint.effect is TaintEffect.PREFER_NO_SCHEDULE:
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            shown = f"{taint.key}={taint.value}" if taint.value else taint.key
            return f"had untolerated taint {{{shown}:{taint.effect.value}}}"
    return None


def missing_tags(node: Node, tags: Iterable[str]) -> list[str]:
    return sorted(t for t in tags if node.labels.get(PLAN_TAG_PREFIX + t) != "true")


def ineligibility(pod: Pod, node: Node, tags: frozenset[str] = frozenset()) -> str | None:
    """Why `pod` may not run on `node` regardless of free capacity, or None if it may."""
    if not node.ready:
        return NOT_READY
    if node.unschedulable:
        return CORDONED
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return taint
    labels = node.labels
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return SELECTOR_MISMATCH
    if pod.required_affinity is not None and not any(
        term_matches(t, node) for t in pod.required_affinity
    ):
        return AFFINITY_MISMATCH
    if pod.gpu_memory_mib and pod.requests.gpus():
        have = node.gpu.memory_mib if node.gpu is not None else 0
        if have < pod.gpu_memory_mib:
            return f"had GPUs with {have} MiB, the pod needs {pod.gpu_memory_mib} MiB per GPU"
    if tags:
        lacking = missing_tags(node, tags)
        if lacking:
            return "lacked plan tag " + ", ".join(f"{PLAN_TAG_PREFIX}{t}=true" for t in lacking)
    if pod.devices is not None:
        return pod.devices.ineligibility(node)
    if pod.resource_claims:
        return CLAIMS_UNKNOWN
    return None


def eligibility_key(pod: Pod) -> tuple[object, ...]:
    """Pods with equal keys are eligible for exactly the same nodes (see `ineligibility`)."""
    return (
        pod.tolerations,
        tuple(sorted(pod.node_selector.items())),
        pod.required_affinity,
        pod.gpu_memory_mib if pod.requests.gpus() else 0,
        pod.devices.eligibility_key() if pod.devices is not None else bool(pod.resource_claims),
    )


def summarize(reasons: Mapping[str, int]) -> str:
    """'3 node(s) were cordoned (unschedulable), 1 node(s) ...', most frequent first."""
    ordered = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{count} node(s) {reason}" for reason, count in ordered)
