"""`kubectl phalanx` answers as kubectl-style text (aligned tables, ages) or as JSON.

Text is for people: ages relative to `now`, holders resolved to pods, the leader's
port-forward spelt out when `/debug` was not asked. JSON is for scripts: the same facts
with RFC 3339 times instead of ages, and nothing left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from phalanx.core.groups.registry import minima_field
from phalanx.core.model import ChildGroups, SubGroupTree
from phalanx.core.quorum import TaskMinima
from phalanx.demo.report import render_group_view, table
from phalanx.kubectl.views import (
    EventView,
    Explanation,
    GangView,
    LeaseView,
    PhalanxView,
    Status,
    WaitView,
    age,
)

NONE = "-"


def _ago(text: str, now: datetime) -> str:
    shown = age(text, now)
    return shown if shown == NONE else f"{shown} ago"


def _scope(namespace: str | None) -> str:
    return "all namespaces" if namespace is None else f"namespace {namespace}"


# ---- pieces ----------------------------------------------------------------------------------


def lease_lines(leases: Sequence[LeaseView], now: datetime) -> list[str]:
    rows = []
    for lease in leases:
        if lease.error:
            holder, renewed = f"({lease.error})", NONE
        else:
            holder = lease.holder or "(nobody)"
            if lease.holder_pod:
                holder += f"  [pod {lease.holder_pod}]"
            renewed = _ago(lease.renewed, now)
        rows.append([f"{lease.namespace}/{lease.name}", holder, renewed])
    return table(["LEASE", "HOLDER", "RENEWED"], rows)


def gang_lines(gangs: Sequence[GangView], now: datetime) -> list[str]:
    rows = [
        [
            g.key,
            g.dialect,
            g.source,
            str(g.min_member) if g.min_member is not None else NONE,
            str(len(g.members)),
            str(g.bound),
            str(g.state),
            g.phase or NONE,
            "yes" if g.commit is not None else NONE,
            age(g.created, now),
        ]
        for g in gangs
    ]
    header = [
        "GANG",
        "DIALECT",
        "SOURCE",
        "MIN",
        "MEMBERS",
        "BOUND",
        "STATE",
        "PHASE",
        "COMMIT",
        "AGE",
    ]
    return table(header, rows, right=(3, 4, 5))


def wait_lines(waits: Sequence[WaitView], now: datetime) -> list[str]:
    rows = [
        [w.gang, str(w.state), age(w.since, now), w.said_by or NONE, w.reason or NONE]
        for w in waits
    ]
    return table(["GANG", "STATE", "SINCE", "SAID BY", "REASON"], rows)


def reservation_lines(phalanx: PhalanxView) -> list[str]:
    rows = []
    for key, reservation in phalanx.reservations():
        expires = f"{reservation.get('expires_in_seconds', '?')}s"
        for member in reservation.get("members") or []:
            if isinstance(member, Mapping):
                rows.append(
                    [
                        key,
                        expires,
                        str(member.get("pod", "")),
                        str(member.get("node", "")),
                        str(member.get("state", "")),
                        str(member.get("gpus", "")),
                    ]
                )
    return table(["GANG", "EXPIRES IN", "POD", "NODE", "STATE", "GPUS"], rows, right=(1, 5))


def event_lines(events: Sequence[EventView], now: datetime) -> list[str]:
    rows = [
        [
            age(e.at, now),
            f"{e.kind}/{e.name}",
            e.type,
            e.reason,
            e.source or NONE,
            e.message + (f" (x{e.count})" if e.count > 1 else ""),
        ]
        for e in events
    ]
    return table(["AGE", "OBJECT", "TYPE", "REASON", "FROM", "MESSAGE"], rows)


def _port_forward_hint(leases: Sequence[LeaseView], namespace: str) -> str:
    pod = next((lease.holder_pod for lease in leases if lease.holder_pod), "")
    target = f"pod/{pod}" if pod else "<leader-pod>"
    return (
        f"kubectl -n {namespace} port-forward {target} 8888, then add "
        "--server http://127.0.0.1:8888"
    )


def _phalanx_lines(
    phalanx: PhalanxView | None, leases: Sequence[LeaseView], phalanx_namespace: str
) -> list[str]:
    if phalanx is None:
        return [
            "not asked: reservations live in the leader's Phalanx; "
            + _port_forward_hint(leases, phalanx_namespace)
        ]
    if phalanx.error:
        return [phalanx.error]
    return []


# ---- status ----------------------------------------------------------------------------------


def render_status(status: Status, now: datetime, *, phalanx_namespace: str) -> str:
    out = [f"Context {status.context}, {_scope(status.namespace)}", ""]
    out += lease_lines(status.leases, now)
    out.append("")
    if status.gangs:
        out += gang_lines(status.gangs, now)
    else:
        out.append(f"No gangs in {_scope(status.namespace)}.")
    if status.waits:
        out += ["", "Waiting:"]
        out += ["  " + line for line in wait_lines(status.waits, now)]
    out += [
        "",
        "Reservations" + (f" (Phalanx at {status.phalanx.server}):" if status.phalanx else ":"),
    ]
    problem = _phalanx_lines(status.phalanx, status.leases, phalanx_namespace)
    if problem:
        out += ["  " + line for line in problem]
    elif status.phalanx is not None and status.phalanx.reservations():
        out += ["  " + line for line in reservation_lines(status.phalanx)]
    else:
        out.append("  none")
    if status.skipped:
        out += ["", "Skipped (unreadable):"] + [f"  {s}" for s in status.skipped]
    return "\n".join(out)


def status_json(status: Status) -> dict[str, Any]:
    return {
        "context": status.context,
        "namespace": status.namespace,
        "leases": [lease_json(lease) for lease in status.leases],
        "gangs": [gang_json(g) for g in status.gangs],
        "waits": [wait_json(w) for w in status.waits],
        "phalanx": phalanx_json(status.phalanx),
        "skipped": list(status.skipped),
    }


# ---- explain ---------------------------------------------------------------------------------


def _commit_line(gang: GangView, now: datetime) -> str:
    commit = gang.commit
    if commit is None:
        return "none"
    if commit.error:
        return f"unreadable: {commit.error}"
    return f"written {_ago(commit.at, now)}, {len(commit.placements)} placement(s)"


def declared(gang: GangView) -> str:
    """`volcano PodGroup`, `upstream Workload missing`, `annotations`, ..."""
    return gang.source if gang.dialect == gang.source else f"{gang.dialect} {gang.source}"


def member_lines(gang: GangView) -> list[str]:
    recorded = gang.commit.placements if gang.commit is not None else {}
    rows = []
    for m in gang.members:
        notes = [n for n, on in (("gated", m.gated), ("deleting", m.deleting)) if on]
        rows.append(
            [
                m.name,
                m.node or NONE,
                m.phase,
                recorded.get(f"{gang.namespace}/{m.name}", NONE),
                m.scheduler,
                ", ".join(notes) or NONE,
            ]
        )
    return table(["MEMBER", "NODE", "PHASE", "RECORDED NODE", "SCHEDULER", "NOTE"], rows)


def _short(gang: GangView) -> str:
    """ ", but task master has 0 of 1 member(s) (spec.minTaskMember)" when the bound members
    miss a Volcano task minimum; "" otherwise."""
    short = gang.tasks_short
    return f", but {short} ({minima_field(gang.min_task_member, gang.dialect)})" if short else ""


def render_explanation(
    expl: Explanation, now: datetime, *, leases: Sequence[LeaseView], phalanx_namespace: str
) -> str:
    gang = expl.gang
    need = gang.min_member if gang.min_member is not None else "?"
    out = [
        f"Gang {gang.key}  ({declared(gang)}, minMember {need}, "
        f"placement {gang.placement or 'default'})  context {expl.context}",
        f"  state:          {gang.state} ({gang.bound}/{need} bound{_short(gang)}, "
        f"{len(gang.members)} member(s))",
        f"  phase:          {gang.phase or NONE}",
        f"  topology:       {gang.topology or 'none declared'}",
    ]
    if gang.disruption_mode:
        out.append(f"  disruption:     {gang.disruption_mode} (spec.disruptionMode)")
    if gang.deleting:
        out.append(f"  deleting:       {gang.deleting}")
    cond = gang.condition
    if cond is not None:
        out.append(
            f"  condition:      {cond.type}={cond.status} {cond.reason} "
            f"(since {_ago(cond.since, now)}): {cond.message or NONE}"
        )
    if expl.wait is not None:
        said = f" (said by {expl.wait.said_by}, {_ago(expl.wait.since, now)})"
        out.append(
            f"  waiting:        {expl.wait.reason or NONE}{said if expl.wait.said_by else ''}"
        )
    out.append(f"  commit record:  {_commit_line(gang, now)}")
    out += [f"  problem:        {p}" for p in gang.problems]
    out.append("")
    out += member_lines(gang) if gang.members else ["No member pods yet."]
    out.append("")
    if expl.events:
        out.append("Events (oldest first):")
        out += ["  " + line for line in event_lines(expl.events, now)]
    else:
        out.append("Events: none (Events expire after an hour)")
    out.append("")
    phalanx = expl.phalanx
    problem = _phalanx_lines(phalanx, leases, phalanx_namespace)
    if phalanx is not None and not problem:
        view = phalanx.details.get(gang.key)
        out.append(f"Phalanx at {phalanx.server}:")
        out.append(
            "  " + render_group_view(view).replace("\n", "\n  ")
            if view is not None
            else f"  does not know gang {gang.key} (not seen since it started?)"
        )
    else:
        out.append("Phalanx: " + "; ".join(problem))
    if expl.skipped:
        out += ["", "Skipped (unreadable):"] + [f"  {s}" for s in expl.skipped]
    return "\n".join(out)


def explanation_json(expl: Explanation, leases: Sequence[LeaseView]) -> dict[str, Any]:
    return {
        "context": expl.context,
        "gang": gang_json(expl.gang),
        "wait": wait_json(expl.wait) if expl.wait is not None else None,
        "events": [event_json(e) for e in expl.events],
        "leases": [lease_json(lease) for lease in leases],
        "phalanx": phalanx_json(expl.phalanx),
        "skipped": list(expl.skipped),
    }


# ---- JSON pieces -----------------------------------------------------------------------------


def _minima(minima: TaskMinima) -> dict[str, Any] | None:
    """Volcano's task minima as a map; a composite's child groups (or KAI's nested
    subgroups) as a tree of them."""
    if isinstance(minima, ChildGroups):
        node, leaf = (
            ("subgroup", "subgroup")
            if isinstance(minima, SubGroupTree)
            else (
                "composite",
                "pod_group",
            )
        )
        return {
            node: minima.name,
            "min_groups": minima.min_groups,
            "children": [
                _minima(c) if isinstance(c, ChildGroups) else {leaf: c[0], "min": c[1]}
                for c in minima.children
            ],
        }
    return dict(minima) or None


def gang_json(gang: GangView) -> dict[str, Any]:
    cond = gang.condition
    commit = gang.commit
    return {
        "gang": gang.key,
        "namespace": gang.namespace,
        "name": gang.name,
        "dialect": gang.dialect,
        "source": gang.source,
        "api_version": gang.api_version or None,
        "min_member": gang.min_member,
        "min_task_member": _minima(gang.min_task_member),
        "bound": gang.bound,
        "tasks_short": gang.tasks_short or None,
        "state": str(gang.state),
        "phase": gang.phase or None,
        "placement": gang.placement or None,
        "topology": gang.topology or None,
        "disruption_mode": gang.disruption_mode or None,
        "deleting": gang.deleting or None,
        "created": gang.created or None,
        "condition": None
        if cond is None
        else {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "since": cond.since or None,
            "placed": cond.placed,
        },
        "commit": None
        if commit is None
        else {
            "at": commit.at or None,
            "placements": dict(commit.placements),
            "error": commit.error or None,
        },
        "members": [
            {
                "pod": m.name,
                "node": m.node or None,
                "phase": m.phase,
                "scheduler": m.scheduler,
                "gated": m.gated,
                "deleting": m.deleting,
            }
            for m in gang.members
        ],
        "problems": list(gang.problems),
    }


def wait_json(wait: WaitView) -> dict[str, Any]:
    return {
        "gang": wait.gang,
        "state": str(wait.state),
        "since": wait.since or None,
        "reason": wait.reason,
        "said_by": wait.said_by or None,
    }


def event_json(event: EventView) -> dict[str, Any]:
    return {
        "at": event.at or None,
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "object": f"{event.kind}/{event.name}",
        "source": event.source or None,
        "count": event.count,
    }


def lease_json(lease: LeaseView) -> dict[str, Any]:
    return {
        "lease": f"{lease.namespace}/{lease.name}",
        "holder": lease.holder or None,
        "holder_pod": lease.holder_pod or None,
        "renewed": lease.renewed or None,
        "duration_seconds": lease.duration_seconds,
        "error": lease.error or None,
    }


def phalanx_json(phalanx: PhalanxView | None) -> dict[str, Any] | None:
    if phalanx is None:
        return None
    return {
        "server": phalanx.server,
        "error": phalanx.error or None,
        "groups": [dict(g) for g in phalanx.groups],
        "details": {k: dict(v) for k, v in phalanx.details.items()},
        "reservations": [{"gang": k, **dict(r)} for k, r in phalanx.reservations()],
    }
