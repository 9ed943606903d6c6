"""The kube-scheduler extender wire format (`k8s.io/kube-scheduler/extender/v1`), both ways.

The upstream structs carry no json tags, so kube-scheduler sends and expects the Go field
names (`Pod`, `NodeNames`, `FailedAndUnresolvableNodes`, ...). Go's decoder matches object
keys to field names case-insensitively and lets a later duplicate key win; older
schedulers sent lower-case keys. Decoding here does the same for the extender's own
structs (ExtenderArgs, ExtenderBindingArgs, ExtenderPreemptionArgs, Victims, MetaVictims,
MetaPod) and nowhere else: the embedded v1.Pod / v1.NodeList / v1.Node objects have json
tags and are read by their exact keys. Unknown keys are ignored, as Go does. A JSON `null`
in a pointer field means "absent"; in a string or integer field it leaves the zero value.

Only what Phalanx needs is pulled out of a request: the raw pod object goes to the
inventory parser, node objects are kept as they came (a full-`Nodes` answer returns them).
Validating whole Pod/Node objects with a schema library would dominate filter latency on
a 5,000-node NodeList, and filter latency is kube-scheduler's throughput ceiling.

Answers always use the exact Go names.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from phalanx.core.decisions import FilterResult
from phalanx.core.model import Binding, PodRef
from phalanx.core.names import MAX_NAME_LENGTH
from phalanx.core.rawdict import json_type

MAX_PRIORITY = 10  # extenderv1.MaxExtenderPriority
MIN_PRIORITY = 0  # extenderv1.MinExtenderPriority

JSONObject = dict[str, Any]


INT64_MAX = 2**63 - 1


class WireError(ValueError):
    """The request is not what kube-scheduler sends; the message names the offending field."""


# ---- requests --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """A filter or prioritize request.

    `nodes` is None when kube-scheduler sent `NodeNames` (nodeCacheCapable: true); otherwise
    it holds the offered v1.Node objects by name, in the order they came.
    """

    pod: JSONObject
    node_names: Sequence[str]  # offered names, each once, in the order they came
    nodes: Mapping[str, JSONObject] | None
    offered: AbstractSet[str] = frozenset()  # the same names, for membership tests

    def __post_init__(self) -> None:
        if not self.offered and self.node_names:
            names = frozenset(self.node_names) if self.nodes is None else self.nodes.keys()
            object.__setattr__(self, "offered", names)


@dataclass(frozen=True, slots=True)
class ExtenderBindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str  # "" when not sent: the UID check is then skipped
    node: str

    @property
    def binding(self) -> Binding:
        """The request as the core's one binding value (the pod's identity travels whole)."""
        return Binding(PodRef(self.pod_namespace, self.pod_name, self.pod_uid), self.node)


@dataclass(frozen=True, slots=True)
class MetaVictims:
    """One node's victims reduced to pod UIDs, whichever form they came in."""

    uids: tuple[str, ...]
    num_pdb_violations: int


@dataclass(frozen=True, slots=True)
class ExtenderPreemptionArgs:
    pod: JSONObject
    victims: Mapping[str, MetaVictims]


def load(body: bytes) -> JSONObject:
    """The request body as a JSON object."""
    # A full 5,000-node NodeList decodes into ~10^5 fresh, acyclic containers; letting the
    # cycle collector run every few hundred of them nearly doubles the decode time. The
    # pause is synchronous and ends before anything else runs on the loop.
    collecting = gc.isenabled()
    gc.disable()
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"request body is not JSON: {exc}") from exc
    finally:
        if collecting:
            gc.enable()
    if not isinstance(doc, dict):
        raise WireError(f"request body must be a JSON object, not {json_type(doc)}")
    return doc


def fold(obj: JSONObject) -> JSONObject:
    """Keys folded the way Go matches them to untagged struct fields; a later duplicate wins.

    `str.casefold` agrees with Go's simple Unicode folding on every field name used here
    (e.g. U+017F and U+212A fold to "s" and "k" in both).
    """
    return {key.casefold(): value for key, value in obj.items()}


def decode_extender_args(body: bytes) -> ExtenderArgs:
    """ExtenderArgs{Pod, Nodes *v1.NodeList, NodeNames *[]string}: exactly one of the two."""
    fields = fold(load(body))
    pod = _pod(fields, "Pod")
    nodes_field = fields.get("nodes")
    names_field = fields.get("nodenames")
    if nodes_field is None and names_field is None:
        raise WireError(
            "Nodes and NodeNames are both missing or null: one must list the candidate nodes"
        )
    if nodes_field is not None and names_field is not None:
        raise WireError(
            "Nodes and NodeNames are both set: kube-scheduler sends exactly one of them"
        )
    if names_field is not None:
        if not isinstance(names_field, list):
            raise WireError(
                f"NodeNames must be an array of node names, not {json_type(names_field)}"
            )
        # Checked in C for the common, valid case (5,000 names cost a Python loop about a
        # millisecond); the loop only runs to find what to report.
        try:
            offered = frozenset(names_field)
            "".join(names_field)  # raises TypeError unless every name is a string
            valid = "" not in offered
        except TypeError:  # a name that is not a string
            valid = False
        if not valid:
            for i, name in enumerate(names_field):
                if not isinstance(name, str) or not name:
                    raise WireError(
                        f"NodeNames[{i}] must be a non-empty string, not {json_type(name)}"
                    )
        names = tuple(
            names_field if len(offered) == len(names_field) else dict.fromkeys(names_field)
        )
        return ExtenderArgs(pod, names, None, offered)
    if not isinstance(nodes_field, dict):
        raise WireError(f"Nodes must be a v1.NodeList object, not {json_type(nodes_field)}")
    items = nodes_field.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise WireError(f"Nodes.items must be an array of v1.Node objects, not {json_type(items)}")
    by_name: dict[str, JSONObject] = {}
    for i, node in enumerate(items):
        name = _object_name(node, f"Nodes.items[{i}]")
        by_name.setdefault(name, node)
    return ExtenderArgs(pod, tuple(by_name), by_name, by_name.keys())


def decode_binding_args(body: bytes) -> ExtenderBindingArgs:
    """ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}."""
    fields = fold(load(body))
    return ExtenderBindingArgs(
        pod_name=_string(fields, "PodName", required=True),
        pod_namespace=_string(fields, "PodNamespace", required=True),
        pod_uid=_string(fields, "PodUID", required=False),
        node=_string(fields, "Node", required=True),
    )


def decode_preemption_args(body: bytes) -> ExtenderPreemptionArgs:
    """ExtenderPreemptionArgs{Pod, NodeNameToVictims, NodeNameToMetaVictims}.

    kube-scheduler sends full victims (v1.Pods) or, when nodeCacheCapable, meta victims
    (UIDs); either way they are reduced to UIDs. Both null is a request with no candidates.
    """
    fields = fold(load(body))
    pod = _pod(fields, "Pod")
    full = fields.get("nodenametovictims")
    meta = fields.get("nodenametometavictims")
    if full is not None and meta is not None:
        raise WireError(
            "NodeNameToVictims and NodeNameToMetaVictims are both set: "
            "kube-scheduler sends one of them"
        )
    if meta is not None:
        return ExtenderPreemptionArgs(
            pod, _victims_map(meta, "NodeNameToMetaVictims", _meta_pod_uid)
        )
    if full is not None:
        return ExtenderPreemptionArgs(pod, _victims_map(full, "NodeNameToVictims", _pod_uid))
    return ExtenderPreemptionArgs(pod, {})


# ---- answers ---------------------------------------------------------------------------


class NodeList(TypedDict):
    items: list[JSONObject]


class FilterAnswer(TypedDict):
    Nodes: NodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


class BindingAnswer(TypedDict):
    Error: str


class MetaPod(TypedDict):
    UID: str


class MetaVictimsAnswer(TypedDict):
    Pods: list[MetaPod]
    NumPDBViolations: int


class PreemptionAnswer(TypedDict):
    NodeNameToMetaVictims: dict[str, MetaVictimsAnswer]


def filter_answer(args: ExtenderArgs, result: FilterResult) -> FilterAnswer:
    """ExtenderFilterResult for `args`, made safe whatever `result` says.

    Only offered nodes appear; FailedAndUnresolvableNodes wins over FailedNodes, and a node
    either of them names is never kept (kube-scheduler rejects an answer that keeps a node
    it did not offer, and a node both kept and failed has no defined meaning).

    An answer that keeps a node names no failed one: kube-scheduler reads the reasons only
    to explain (and preempt for) a pod no node is left for, and it decodes and stores each
    one it is sent, in every cycle.
    """
    offered = args.offered
    unresolvable = {n: r for n, r in result.unresolvable.items() if n in offered}
    failed = {n: r for n, r in result.failed.items() if n in offered and n not in unresolvable}
    if unresolvable or failed:
        kept = [
            n for n in result.feasible if n in offered and n not in unresolvable and n not in failed
        ]
    else:
        kept = [n for n in result.feasible if n in offered]
    if len(set(kept)) != len(kept):
        kept = list(dict.fromkeys(kept))
    if kept:
        failed, unresolvable = {}, {}
    if args.nodes is None:
        return {
            "Nodes": None,
            "NodeNames": kept,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": result.error,
        }
    return {
        "Nodes": {"items": [args.nodes[n] for n in kept]},
        "NodeNames": None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": result.error,
    }


def filter_error(args: ExtenderArgs | None, error: str) -> FilterAnswer:
    """A filter answer that fails the whole attempt with `error` (kube-scheduler requeues)."""
    if args is None:
        return {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": error,
        }
    return filter_answer(args, FilterResult(error=error))


def priorities_answer(args: ExtenderArgs, scores: Mapping[str, int]) -> list[HostPriority]:
    """HostPriorityList: one integer score in 0..10 per offered node, in the offered order."""
    # Scores are clamped once per distinct value, not once per node.
    clamped = {s: min(MAX_PRIORITY, max(MIN_PRIORITY, int(s))) for s in set(scores.values())}
    return [
        {"Host": name, "Score": clamped.get(scores.get(name, 0), 0)} for name in args.node_names
    ]


def binding_answer(error: str) -> BindingAnswer:
    return {"Error": error}


def preemption_answer(
    args: ExtenderPreemptionArgs, kept: Mapping[str, Sequence[str]]
) -> PreemptionAnswer:
    """ExtenderPreemptionResult: always meta victims, only for nodes that were sent, each with
    the NumPDBViolations kube-scheduler computed for it."""
    return {
        "NodeNameToMetaVictims": {
            node: {
                "Pods": [{"UID": uid} for uid in dict.fromkeys(uids)],
                "NumPDBViolations": args.victims[node].num_pdb_violations,
            }
            for node, uids in kept.items()
            if node in args.victims
        }
    }


def pod_version(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(`metadata.uid`, `metadata.resourceVersion`) of a raw pod object, "" for what it lacks
    (never raises): together they name one state of one pod."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return "", ""
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    return (uid if isinstance(uid, str) else "", version if isinstance(version, str) else "")


def pod_key(pod: Mapping[str, Any]) -> str:
    """`namespace/name` of a raw pod object, as far as it can be read (for error texts)."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return "?/?"
    parts = [meta.get("namespace"), meta.get("name")]
    return "/".join(p if isinstance(p, str) and p else "?" for p in parts)


# ---- helpers ---------------------------------------------------------------------------


def _pod(fields: JSONObject, field: str) -> JSONObject:
    pod = fields.get(field.casefold())
    if pod is None:
        raise WireError(f"{field} is missing or null: the pod being scheduled is required")
    if not isinstance(pod, dict):
        raise WireError(f"{field} must be a v1.Pod object, not {json_type(pod)}")
    return pod


def _string(fields: JSONObject, field: str, *, required: bool) -> str:
    value = fields.get(field.casefold())
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise WireError(f"{field} must be a string, not {json_type(value)}")
    if required and not value:
        raise WireError(f"{field} is missing or empty")
    if len(value) > MAX_NAME_LENGTH:  # no name (nor UID) is longer; never echo the rest back
        raise WireError(f"{field} must be at most {MAX_NAME_LENGTH} characters, not {len(value)}")
    return value


def _object_name(obj: object, where: str) -> str:
    if not isinstance(obj, dict):
        raise WireError(f"{where} must be an object, not {json_type(obj)}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise WireError(f"{where}.metadata must be an object, not {json_type(meta)}")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise WireError(f"{where}.metadata.name must be a non-empty string, not {json_type(name)}")
    return name


def _pod_uid(obj: object, where: str) -> str:
    """The UID of a full v1.Pod victim (json tags: metadata.uid)."""
    if not isinstance(obj, dict):
        raise WireError(f"{where} must be a v1.Pod object, not {json_type(obj)}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise WireError(f"{where}.metadata must be an object, not {json_type(meta)}")
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        raise WireError(f"{where}.metadata.uid must be a non-empty string, not {json_type(uid)}")
    return uid


def _meta_pod_uid(obj: object, where: str) -> str:
    """The UID of a MetaPod{UID} (untagged: any casing)."""
    if not isinstance(obj, dict):
        raise WireError(f"{where} must be a MetaPod object, not {json_type(obj)}")
    uid = fold(obj).get("uid")
    if not isinstance(uid, str) or not uid:
        raise WireError(f"{where}.UID must be a non-empty string, not {json_type(uid)}")
    return uid


def _victims_map(
    value: object, field: str, uid_of: Callable[[object, str], str]
) -> dict[str, MetaVictims]:
    if not isinstance(value, dict):
        raise WireError(
            f"{field} must be an object of node name to victims, not {json_type(value)}"
        )
    victims: dict[str, MetaVictims] = {}
    for node, entry in value.items():
        # No node name is longer; never echo the rest back (as `_string`).
        shown = node if len(node) <= MAX_NAME_LENGTH else node[:MAX_NAME_LENGTH] + "…"
        where = f"{field}[{shown!r}]"
        if entry is None:  # a nil *Victims: nothing to evict there
            victims[node] = MetaVictims((), 0)
            continue
        if not isinstance(entry, dict):
            raise WireError(
                f"{where} must be an object with Pods and NumPDBViolations, not {json_type(entry)}"
            )
        entry_fields = fold(entry)
        pods = entry_fields.get("pods")
        if pods is None:
            pods = []
        if not isinstance(pods, list):
            raise WireError(f"{where}.Pods must be an array, not {json_type(pods)}")
        violations = entry_fields.get("numpdbviolations")
        if violations is None:
            violations = 0
        if isinstance(violations, bool) or not isinstance(violations, int):
            raise WireError(
                f"{where}.NumPDBViolations must be an integer, not {json_type(violations)}"
            )
        if not 0 <= violations <= INT64_MAX:  # it goes back to kube-scheduler's int64
            raise WireError(
                f"{where}.NumPDBViolations must be between 0 and {INT64_MAX}, not {violations}"
            )
        uids = tuple(uid_of(pod, f"{where}.Pods[{i}]") for i, pod in enumerate(pods))
        victims[node] = MetaVictims(uids, violations)
    return victims
