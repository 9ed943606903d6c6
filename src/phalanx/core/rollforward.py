"""Roll-forward: finishing a gang whose commit record says where every member goes (DESIGN §6).

Every member Phalanx binds with its gang is bound with the gang's whole placement (the
*commit record*): carried on the binding itself onto the pod, or, for a record too long to
copy onto every member, written once before the first binding. If Phalanx dies part-way,
or a binding keeps failing, some members are bound and the rest are not. Whoever holds the
roll-forward duty reads the record and decides, per gang and from the model alone::

    record ──▶ any recorded member still being bound (assumed)?  ── yes ─▶ WAIT
                 │ no
                 ▼
               every surviving member bound?                        ── yes ─▶ COMPLETE
                 │ no                                                          (clear the record)
                 ▼
               each unbound member still fits its recorded node,
               and enough members survive to make the quorum
               (with a Volcano gang's task minima, unless one is
               bound already)?                                      ── yes ─▶ ROLL_FORWARD
                 │ no                                                          (bind them there)
                 ▼
               RELEASE (clear the record; the gang re-plans; the reason goes into an Event)

A member deleted since the record was written (gone, recreated with another UID, or
finished or terminating before it was bound) has *vanished*: it is skipped, never a failure,
and it does not make the gang partial — its replacement is planned like any new pod.

Pure: no I/O and no clock. Encoding and decoding of the record's JSON text live here too,
so the source that stores it and the decision that reads it agree on one format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from phalanx.core import eligibility
from phalanx.core.cache import ClusterState, MemberState, Reservation
from phalanx.core.groups.registry import minima_field
from phalanx.core.model import EMPTY, Binding, GroupRef, Pod, PodRef, Resources
from phalanx.core.quorum import TaskMinima, task_shortfall

# Where the record lives: on each member its binding carried it to, else on the PodGroup or
# on every member of an annotation-only gang. Not `phalanx.io/placement`: that name is the
# placement policy (DESIGN §3).
COMMIT_ANNOTATION = "phalanx.io/commit"

# A record whose text is at most this long rides on each of the gang's bindings: the binding
# subresource writes its annotations onto the pod in the same write as its node, so a member
# is never bound without the whole record, and the gang is spared the record's own round
# trip. A longer one would be copied onto every member (its size times the members, about
# the square of the gang), so it is written once, before the first binding. 2 KiB holds 16
# members with typical names.
CARRIED_RECORD_MAX_BYTES = 2048

_AT_WIDTH = len("2006-01-02T15:04:05Z")


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """The whole placement of a gang, written with or before its first binding (DESIGN §6)."""

    group_key: str
    placements: Mapping[str, str]  # pod namespace/name -> node
    pod_uids: Mapping[str, str]  # pod namespace/name -> uid
    at: str = ""  # RFC 3339 time the record was written; "" when not (yet) written


def encode_commit_record(record: CommitRecord, at: str) -> str:
    """The annotation value: `{"placements": {...}, "uids": {...}, "at": "<RFC 3339>"}`."""
    body = {
        "placements": dict(sorted(record.placements.items())),
        "uids": dict(sorted(record.pod_uids.items())),
        "at": at,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=False)


def carried_by_bindings(record: CommitRecord, max_bytes: int = CARRIED_RECORD_MAX_BYTES) -> bool:
    """Whether the gang's bindings carry `record` (True) or it is written before them."""
    return len(encode_commit_record(record, "0" * _AT_WIDTH).encode()) <= max_bytes


def decode_commit_record(group_key: str, text: str) -> CommitRecord:
    """Read an annotation value back; ValueError names what is wrong with it."""
    try:
        body: Any = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{COMMIT_ANNOTATION} is not JSON: {exc}") from exc
    except RecursionError as exc:  # "[[[[..." fits an annotation many times over
        raise ValueError(f"{COMMIT_ANNOTATION} is not JSON: nested too deeply") from exc
    if not isinstance(body, dict):
        raise ValueError(f"{COMMIT_ANNOTATION} must be a JSON object")
    placements = _string_map(body.get("placements"), "placements")
    uids = _string_map(body.get("uids", {}), "uids")
    if not placements:
        raise ValueError(f"{COMMIT_ANNOTATION}: placements is empty")
    for key in placements:
        if key.count("/") != 1 or key.startswith("/") or key.endswith("/"):
            raise ValueError(f"{COMMIT_ANNOTATION}: {key!r} is not a namespace/name pod key")
    at = body.get("at", "")
    if not isinstance(at, str):
        raise ValueError(f"{COMMIT_ANNOTATION}: at must be a string")
    return CommitRecord(group_key, placements, uids, at)


def _string_map(value: object, name: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
    ):
        raise ValueError(f"{COMMIT_ANNOTATION}: {name} must map strings to non-empty strings")
    return dict(value)


class Verdict(StrEnum):
    WAIT = "wait"
    COMPLETE = "complete"
    ROLL_FORWARD = "roll-forward"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class Decision:
    group_key: str
    verdict: Verdict
    bindings: tuple[Binding, ...] = ()
    bound: int = 0  # recorded members bound (or being bound) now
    vanished: tuple[str, ...] = ()  # recorded members deleted since the record was written
    reason: str = ""


def decide(
    state: ClusterState,
    record: CommitRecord,
    *,
    min_member: int | None = None,
    min_task_member: TaskMinima = (),
    deleting: str = "",
) -> Decision:
    """What to do with one gang's commit record, given the model now (see module docstring).

    `min_member` is the gang's quorum when known, and `min_task_member` its Volcano task
    minima; without them, any survivors roll forward. `deleting` says why the gang's
    object is being deleted ("" when it is not): none bound, nothing more is bound; some
    bound, the rest are, rather than leave a partial gang.
    """
    key = record.group_key
    bound = 0
    vanished: list[str] = []
    pending: list[tuple[Pod, str]] = []
    for pod_key, node in sorted(record.placements.items()):
        ref = PodRef.parse(pod_key, record.pod_uids.get(pod_key, ""))
        pod = state.pod_by_key(ref.namespace, ref.name)
        want_uid = ref.uid
        if pod is None or (want_uid and pod.uid != want_uid):
            vanished.append(pod_key)
        elif pod.node_name:
            bound += 1  # bound here, or elsewhere by someone else: either way it is placed
        elif state.assumed_node(pod.uid) is not None:
            return Decision(key, Verdict.WAIT, reason=f"pod {pod_key} is being bound")
        elif pod.departing:
            vanished.append(pod_key)
        else:
            pending.append((pod, node))
    gone = tuple(vanished)
    if not pending:
        return Decision(key, Verdict.COMPLETE, bound=bound, vanished=gone)
    if bound == 0 and deleting:
        reason = f"{deleting}; nothing of it was bound, so nothing more is"
        return Decision(key, Verdict.RELEASE, vanished=gone, reason=reason)
    survivors = bound + len(pending)
    if bound == 0 and min_member is not None and survivors < min_member:
        reason = (
            f"gang {key}: only {survivors} of the {len(record.placements)} recorded member(s) "
            f"still exist, fewer than minMember {min_member}; the gang will be re-planned"
        )
        return Decision(key, Verdict.RELEASE, vanished=gone, reason=reason)
    short = task_shortfall(min_task_member, (p for p, _ in pending)) if bound == 0 else ""
    if short:
        field = minima_field(min_task_member, GroupRef.parse(key).dialect)
        reason = (
            f"gang {key}: of the {len(record.placements)} recorded member(s) those that still "
            f"exist miss a task minimum ({short}, {field}); "
            "the gang will be re-planned"
        )
        return Decision(key, Verdict.RELEASE, vanished=gone, reason=reason)
    problems = _misfits(state, key, pending)
    if problems:
        reason = (
            f"gang {key}: cannot roll forward ({'; '.join(problems)}); the gang will be re-planned"
        )
        return Decision(key, Verdict.RELEASE, bound=bound, vanished=gone, reason=reason)
    bindings = tuple(Binding(p.ref, node) for p, node in pending)
    return Decision(key, Verdict.ROLL_FORWARD, bindings, bound, gone)


def _misfits(state: ClusterState, key: str, pending: list[tuple[Pod, str]]) -> list[str]:
    """Why the pending members cannot all go to their recorded nodes now ([] if they can)."""
    wanted: dict[str, Resources] = {}
    problems: list[str] = []
    for pod, node in pending:
        why = _unusable(state, pod, node)
        if why:
            problems.append(f"recorded node {node} of pod {pod.key} {why}")
            continue
        wanted[node] = wanted.get(node, EMPTY) + pod.requests
    returned = _returned(state.reservation(key), pending)
    for node, total in sorted(wanted.items()):
        info = state.node(node)
        assert info is not None  # only nodes that exist were added above
        free = info.free + returned.get(node, EMPTY)
        if not total.fits_in(free):
            short = ", ".join(sorted(total.shortfall(free)))
            problems.append(f"recorded node {node} no longer has room (insufficient {short})")
    return problems


def _returned(
    reservation: Reservation | None, pending: list[tuple[Pod, str]]
) -> dict[str, Resources]:
    """What the gang's own reservation gives back per node when its record is carried out.

    A reservation that sends any pending member elsewhere is released whole (the record
    wins), so all of it is free for the gang; otherwise each pending member's own share is.
    """
    if reservation is None:
        return {}
    overridden = any(
        (m := reservation.member(pod.uid)) is not None and m.node != node for pod, node in pending
    )
    mine = {pod.uid for pod, _ in pending}
    returned: dict[str, Resources] = {}
    for m in reservation.members:
        if m.state is MemberState.RESERVED and (overridden or m.pod_uid in mine):
            returned[m.node] = returned.get(m.node, EMPTY) + m.requests
    return returned


def _unusable(state: ClusterState, pod: Pod, node: str) -> str:
    """Why `pod` may not go to `node` whatever its free capacity, or ""."""
    info = state.node(node)
    if info is None:
        return "is gone"
    if not info.node.ready:
        return "is not ready (or gone)"  # nodes known only from bound pods are never ready
    if info.node.unschedulable:
        return "is cordoned"
    why = eligibility.ineligibility(pod, info.node)
    return f"no longer suits it: {why}" if why else ""
