"""The summary after a driven run (demo and `simulate`): plain aligned text, or JSON.

Everything is read back from the extender's own model after the run — where each pod is
bound, what is still reserved — and each placed gang is checked against its placement
policy using the labels of the nodes it got, so the summary proves rather than asserts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from phalanx.core.model import Node, PolicyKind
from phalanx.core.plan import NodeKind, PlanError, PlanNode, leaves, parse_plan
from phalanx.demo.driver import DriveResult, PodOutcome
from phalanx.service.extender import Extender

CLIQUE_LABEL = "nvidia.com/gpu.clique"
ZONE_LABEL = "topology.kubernetes.io/zone"
PRODUCT_LABEL = "nvidia.com/gpu.product"
TAG_PREFIX = "tag.phalanx.io/"

PLACED, WAITING, PARTIAL = "placed", "waiting", "PARTIAL"
# Widest GPU bar of the node table: wider than any real node, narrower than a terminal.
BAR_CELLS = 32


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    ok: bool
    detail: str


@dataclass(slots=True)
class GroupLine:
    group: str
    placement: str
    members: int
    min_member: int | None
    bound: int
    status: str  # placed | waiting | PARTIAL
    nodes: list[str]
    placements: dict[str, str]  # pod -> node
    policy_ok: bool | None  # None while nothing is bound
    policy: str
    reason: str
    plan: dict[str, Any] | None = None  # phases, data transfers, warnings


@dataclass(slots=True)
class SingleLine:
    pod: str
    gpus: int
    node: str
    reason: str


@dataclass(slots=True)
class NodeLine:
    node: str
    gpu: str
    zone: str
    clique: str
    gpus: int
    used: int
    reserved: int
    state: str
    pods: list[str]


@dataclass(slots=True)
class FreeDomainsLine:
    """At the end of the run: of one topology level's domains with GPUs, how many are whole."""

    topology: str
    level: str
    free: int
    total: int


@dataclass(slots=True)
class Report:
    title: str
    groups: list[GroupLine] = field(default_factory=list)
    singles: list[SingleLine] = field(default_factory=list)
    nodes: list[NodeLine] = field(default_factory=list)
    free_domains: list[FreeDomainsLine] = field(default_factory=list)
    partial_gangs: list[str] = field(default_factory=list)
    reserved_gpus: int = 0
    overcommitted_nodes: list[str] = field(default_factory=list)
    policy_violations: list[str] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    rounds: int = 0
    requests: dict[str, int] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    @property
    def placed(self) -> list[GroupLine]:
        return [g for g in self.groups if g.status == PLACED]

    @property
    def waiting(self) -> list[GroupLine]:
        return [g for g in self.groups if g.status == WAITING]

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["summary"] = {
            "gangs": len(self.groups),
            "gangs_placed": len(self.placed),
            "gangs_waiting": len(self.waiting),
            "single_pods": len(self.singles),
            "single_pods_bound": sum(1 for s in self.singles if s.node),
            "partial_gangs": len(self.partial_gangs),
            "reserved_gpus": self.reserved_gpus,
            "overcommitted_nodes": len(self.overcommitted_nodes),
            "policy_violations": len(self.policy_violations),
        }
        return out


# ---- policy checks ---------------------------------------------------------------------


def check_policy(placement: str, nodes: Sequence[Node], bound_pods: int) -> PolicyCheck:
    """Whether the nodes a gang got (one entry per distinct node) satisfy its policy."""
    names = sorted(n.name for n in nodes)
    if placement.startswith("domain:"):
        key = placement.removeprefix("domain:")
        values = {n.labels.get(key, "") for n in nodes}
        if len(values) == 1 and "" not in values:
            return PolicyCheck(True, f"one {key.rsplit('/', 1)[-1]}: {values.pop()}")
        return PolicyCheck(False, f"{key} values {sorted(values)} on {', '.join(names)}")
    kind = next((k for k in PolicyKind if k.value == placement), None)
    if kind is PolicyKind.SAME_NODE:
        ok = len(names) == 1
        return PolicyCheck(ok, "one node" if ok else f"{len(names)} nodes")
    if kind is PolicyKind.SPREAD:
        ok = len(names) == bound_pods
        return PolicyCheck(ok, f"{len(names)} distinct nodes for {bound_pods} pods")
    if kind is PolicyKind.INTERCONNECT_LOCAL:
        if len(names) == 1:
            return PolicyCheck(True, "one node")
        cliques = {n.labels.get(CLIQUE_LABEL, "") for n in nodes}
        if len(cliques) == 1 and "" not in cliques:
            return PolicyCheck(True, f"one NVLink clique: {cliques.pop()}")
        return PolicyCheck(False, f"cliques {sorted(cliques)}")
    return PolicyCheck(True, f"{len(names)} node(s)")


def remote_tags(plan: PlanNode) -> dict[str, set[str]]:
    """Plan member -> tags its `remote` ancestors require."""
    need: dict[str, set[str]] = {}

    def visit(node: PlanNode, inherited: frozenset[str]) -> None:
        if node.kind is NodeKind.REMOTE:
            inherited = inherited | {node.tag}
            for member in leaves(node):
                need.setdefault(member, set()).update(inherited)
        for child in node.children:
            visit(child, inherited)

    visit(plan, frozenset())
    return need


def check_tags(
    plan_json: str, plan_nodes: Mapping[str, str], nodes: Mapping[str, Node]
) -> PolicyCheck | None:
    """Whether members under `remote` landed on nodes carrying the tag; None if no plan tags.

    `plan_nodes`: bound pod's plan-node id -> its node name.
    """
    try:
        need = remote_tags(parse_plan(plan_json))
    except PlanError:
        return None
    if not need:
        return None
    bad = []
    for member, tags in sorted(need.items()):
        node_name = plan_nodes.get(member)
        node = nodes.get(node_name or "")
        if node is None:
            continue
        missing = sorted(t for t in tags if node.labels.get(TAG_PREFIX + t) != "true")
        if missing:
            bad.append(f"{member} on {node_name} lacks tag {', '.join(missing)}")
    if bad:
        return PolicyCheck(False, "; ".join(bad))
    shown = sorted({t for tags in need.values() for t in tags})
    return PolicyCheck(True, f"remote tag {', '.join(shown)} honoured")


# ---- building ----------------------------------------------------------------------------


def _short_gpu(node: Node) -> str:
    product = node.labels.get(PRODUCT_LABEL, "")
    if not product:
        return "-" if not node.allocatable.gpus() else "gpu"
    return product.removeprefix("NVIDIA-").replace("-SXM4", "").replace("-HBM3", "")


def _node_state(node: Node) -> str:
    states = []
    if not node.ready:
        states.append("not ready")
    if node.unschedulable:
        states.append("cordoned")
    for t in node.taints:
        shown = f"{t.key}={t.value}" if t.value else t.key
        states.append(f"taint {shown}:{t.effect.value}")
    return ", ".join(states)


def build_report(
    extender: Extender, result: DriveResult, *, title: str, rejected: Iterable[str] = ()
) -> Report:
    state = extender.state
    report = Report(
        title=title,
        elapsed_seconds=round(result.elapsed_seconds, 3),
        rounds=result.rounds,
        requests=dict(sorted(result.requests.items())),
        ignored=list(result.ignored),
        rejected=list(rejected),
    )
    nodes = {info.name: info.node for info in state.nodes()}
    by_group: dict[str, list[PodOutcome]] = {}
    for out in sorted(result.outcomes.values(), key=lambda o: o.key):
        if out.group is None:
            report.singles.append(
                SingleLine(out.key, out.gpus, out.node, "" if out.node else out.reason)
            )
        else:
            by_group.setdefault(out.group, []).append(out)
    for key, outs in sorted(by_group.items()):
        report.groups.append(_group_line(extender, key, outs, nodes))
    for line in report.groups:
        if line.policy_ok is False:
            report.policy_violations.append(f"{line.group}: {line.policy}")
    pods_on: dict[str, list[str]] = {}
    for p in sorted(state.pods(), key=lambda p: p.key):
        node = state.bound_node(p)
        if node and not p.terminal and p.requests.gpus():
            pods_on.setdefault(node, []).append(f"{p.key}({p.requests.gpus()})")
    for info in sorted(state.nodes(), key=lambda i: i.name):
        total = info.node.allocatable.gpus()
        if not total and not info.requested.gpus():
            continue
        report.nodes.append(
            NodeLine(
                node=info.name,
                gpu=_short_gpu(info.node),
                zone=info.node.labels.get(ZONE_LABEL, ""),
                clique=info.node.labels.get(CLIQUE_LABEL, ""),
                gpus=total,
                used=info.requested.gpus(),
                reserved=info.reserved.gpus(),
                state=_node_state(info.node),
                pods=pods_on.get(info.name, []),
            )
        )
    report.free_domains = [
        FreeDomainsLine(index.topology.name, level.level, level.free, level.total)
        for index, levels in extender.planner.topology_usage()
        for level in levels
        if level.total
    ]
    report.partial_gangs = extender.partial_gangs()
    report.reserved_gpus = state.reserved_gpus()
    report.overcommitted_nodes = state.overcommitted_nodes()
    return report


def _group_line(
    extender: Extender, key: str, outs: list[PodOutcome], nodes: Mapping[str, Node]
) -> GroupLine:
    state = extender.state
    namespace, name = key.split("/", 1)
    view = extender.debug_group(namespace, name) or {}
    members = state.members(key, include_finished=True)
    placements: dict[str, str] = {}
    plan_nodes: dict[str, str] = {}
    for p in members:
        node = state.bound_node(p)
        if node:
            placements[p.key] = node
            if p.plan_node:
                plan_nodes[p.plan_node] = node
    bound = len(placements)
    min_member = view.get("min_member")
    need = min_member if isinstance(min_member, int) else None
    placement = str(view.get("placement") or "")
    used = sorted(set(placements.values()))
    if bound == 0:
        status = WAITING
    elif need is not None and bound < need:
        status = PARTIAL
    else:
        status = PLACED
    reason = ""
    if status != PLACED or bound < len(members):
        waiting = [o.reason for o in outs if not o.node and o.reason]
        reason = waiting[0] if waiting else str(view.get("error") or view.get("last_reason") or "")
    policy_ok: bool | None = None
    policy = ""
    if used:
        check = check_policy(placement, [nodes[n] for n in used if n in nodes], bound)
        policy_ok, policy = check.ok, check.detail
        group = state.group(key)
        if group is not None and group.plan_json:
            tags = check_tags(group.plan_json, plan_nodes, nodes)
            if tags is not None:
                policy_ok = policy_ok and tags.ok
                policy = f"{policy}; {tags.detail}"
    plan = view.get("plan")
    plan_summary = None
    if isinstance(plan, dict) and (
        plan.get("phases") or plan.get("data_transfers") or plan.get("warnings")
    ):
        plan_summary = {
            "phases": plan.get("phases") or [],
            "data_transfers": plan.get("data_transfers") or [],
            "warnings": plan.get("warnings") or [],
        }
    return GroupLine(
        group=key,
        placement=placement,
        members=len(members),
        min_member=need,
        bound=bound,
        status=status,
        nodes=used,
        placements=dict(sorted(placements.items())),
        policy_ok=policy_ok,
        policy=policy,
        reason=reason,
        plan=plan_summary,
    )


# ---- rendering ---------------------------------------------------------------------------


def table(
    header: Sequence[str], rows: Iterable[Sequence[str]], *, right: Iterable[int] = ()
) -> list[str]:
    """Columns padded to their widest cell; `right` columns right-aligned."""
    body = [list(r) for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body, strict=False)]
    align = set(right)

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).rjust(w) if i in align else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(header), *(line(r) for r in body)]


def _bar(line: NodeLine) -> str:
    """One cell per GPU up to BAR_CELLS GPUs; a bigger node's bar is scaled to BAR_CELLS
    cells (the USED column keeps the exact counts)."""
    used, reserved = line.used, line.reserved
    total = max(line.gpus, used + reserved)  # an over-committed node shows its excess
    if total > BAR_CELLS:
        used = _cells(used, total)
        reserved = min(_cells(reserved, total), BAR_CELLS - used)
        total = BAR_CELLS
    return "[" + "#" * used + "r" * reserved + "." * (total - used - reserved) + "]"


def _cells(count: int, total: int) -> int:
    """Cells of a scaled bar for `count` of `total` GPUs, rounded up so any use shows."""
    return -(-count * BAR_CELLS // total)


def render_text(report: Report) -> str:
    out = [report.title, ""]
    if report.groups:
        rows = []
        for g in report.groups:
            check = "-" if g.policy_ok is None else ("ok" if g.policy_ok else "VIOLATED")
            rows.append(
                [
                    g.group,
                    g.placement,
                    f"{g.bound}/{g.members}",
                    str(g.min_member if g.min_member is not None else "-"),
                    g.status,
                    ", ".join(g.nodes) or "-",
                    f"{check}: {g.policy}" if g.policy else check,
                ]
            )
        header = ["GANG", "POLICY", "BOUND", "MIN", "STATUS", "NODES", "POLICY CHECK"]
        lines = table(header, rows, right=(2, 3))
        out.append(lines[0])
        for g, text in zip(report.groups, lines[1:], strict=True):
            out.append(text)
            if g.reason:
                label = "why" if g.status != PLACED else "members still waiting"
                out.append(f"    {label}: {g.reason}")
        out.append("")
    if report.singles:
        rows = [[s.pod, str(s.gpus), s.node or "waiting", s.reason] for s in report.singles]
        out.extend(table(["SINGLE POD", "GPUS", "NODE", "WHY NOT BOUND"], rows, right=(1,)))
        out.append("")
    plans = [g for g in report.groups if g.plan]
    for g in plans:
        assert g.plan is not None
        phases = g.plan["phases"]
        transfers = g.plan["data_transfers"]
        out.append(
            f"plan {g.group}: {len(phases)} phase(s), {len(transfers)} cross-node transfer(s)"
        )
        out.extend(f"    phase {line}" for line in _phase_lines(phases))
        out.extend(f"    transfer {line}" for line in _transfer_lines(transfers))
        out.extend(f"    warning: {w}" for w in g.plan["warnings"])
    if plans:
        out.append("")
    if report.nodes:
        rows = [
            [
                n.node,
                n.gpu,
                n.zone,
                n.clique or "-",
                _bar(n),
                f"{n.used}/{n.gpus}",
                str(n.reserved),
                n.state,
            ]
            for n in report.nodes
        ]
        out.extend(
            table(
                [
                    "NODE",
                    "GPU",
                    "ZONE",
                    "CLIQUE",
                    "GPUS (#used r=reserved)",
                    "USED",
                    "RSVD",
                    "STATE",
                ],
                rows,
                right=(5, 6),
            )
        )
        out.append("")
    if report.free_domains:
        out.append("domains left whole (every GPU free), per topology level:")
        rows = [[d.topology, d.level, str(d.free), str(d.total)] for d in report.free_domains]
        out.extend(table(["TOPOLOGY", "LEVEL", "WHOLE FREE", "WITH GPUS"], rows, right=(2, 3)))
        out.append("")
    if report.ignored:
        out.append(f"not scheduled (pending for another scheduler): {', '.join(report.ignored)}")
    if report.rejected:
        out.append(f"skipped invalid objects: {'; '.join(report.rejected)}")
    gpus = sum(n.gpus for n in report.nodes)
    used = sum(n.used for n in report.nodes)
    out.append(
        f"gangs placed {len(report.placed)}/{len(report.groups)}, waiting {len(report.waiting)}; "
        f"single pods bound {sum(1 for s in report.singles if s.node)}/{len(report.singles)}; "
        f"GPUs in use {used}/{gpus}"
    )
    out.append(
        f"partial gangs: {len(report.partial_gangs)}   "
        f"reserved GPUs after the run: {report.reserved_gpus}   "
        f"over-committed nodes: {len(report.overcommitted_nodes)}   "
        f"policy violations: {len(report.policy_violations)}"
    )
    calls = ", ".join(f"{verb} {n}" for verb, n in report.requests.items())
    out.append(
        f"elapsed {report.elapsed_seconds:.2f}s over {report.rounds} round(s); requests: {calls}"
    )
    return "\n".join(out)


# ---- one gang, as `phalanx explain` shows it -------------------------------------------------


def _phase_lines(phases: Iterable[Mapping[str, Any]]) -> list[str]:
    lines = []
    for ph in phases:
        trial = f" (trial {ph['trial']})" if "trial" in ph else ""
        members = ", ".join(ph.get("members") or [])
        nodes = ", ".join(ph.get("nodes") or []) or "-"
        lines.append(f"{ph.get('index')}: {ph.get('kind')}{trial} [{members}] on {nodes}")
    return lines


def _transfer_lines(transfers: Iterable[Mapping[str, Any]]) -> list[str]:
    return [
        f"{t.get('from')} ({t.get('from_node')}) -> {t.get('to')} ({t.get('to_node')})"
        for t in transfers
    ]


def _text(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def render_group_view(view: Mapping[str, Any]) -> str:
    """A /debug/groups/{key} view, readable (see `GangViews.group`)."""
    source, need, policy = (_text(view.get(k)) for k in ("source", "min_member", "placement"))
    phase, bound, members = (_text(view.get(k)) for k in ("phase", "bound", "members"))
    dialect = view.get("dialect")
    # "volcano PodGroup"; an annotation-only gang's source already says its dialect.
    declared = f"{dialect} {source}" if dialect and dialect != source else source
    # Upstream's spec.disruptionMode, where the gang object has one.
    mode = f", disruptionMode {view['disruption_mode']}" if view.get("disruption_mode") else ""
    out = [
        f"gang {view.get('group', '?')}  ({declared}, minMember {need}, placement {policy}{mode})",
        f"  phase:          {phase}  (bound {bound}/{members})",
        f"  last decision:  {_text(view.get('last_decision'))}",
        f"  last reason:    {_text(view.get('last_reason'))}",
    ]
    if view.get("deleting"):
        out.append("  deleting:       true (its object is being deleted)")
    if view.get("error"):
        out.append(f"  error:          {view['error']}")
    invalid = view.get("invalid_members")
    if isinstance(invalid, Mapping):
        for pod, reason in invalid.items():
            out.append(f"  refused member: {pod}: {reason}")
    reservation = view.get("reservation")
    if isinstance(reservation, Mapping):
        out.append(f"  reservation:    expires in {_text(reservation.get('expires_in_seconds'))}s")
        rows = [
            [
                str(m.get("pod", "")),
                str(m.get("node", "")),
                str(m.get("state", "")),
                str(m.get("gpus", "")),
            ]
            for m in reservation.get("members") or []
            if isinstance(m, Mapping)
        ]
        out.extend(
            "    " + line for line in table(["POD", "NODE", "STATE", "GPUS"], rows, right=(3,))
        )
    else:
        out.append("  reservation:    none")
    plan = view.get("plan")
    if not isinstance(plan, Mapping):
        out.append("  plan:           none (no placement computed yet)")
        return "\n".join(out)
    if plan.get("domain"):
        out.append(f"  domain:         {plan['domain']}")
    if plan.get("level"):
        out.append(f"  level:          {plan['level']}")
    if plan.get("explanation"):
        out.append(f"  topology:       {plan['explanation']}")
    placements = plan.get("placements") or {}
    out.append("  placements:")
    out.extend("    " + line for line in table(["POD", "NODE"], sorted(placements.items())))
    phases = plan.get("phases") or []
    if phases:
        out.append("  phases:")
        out.extend(f"    {line}" for line in _phase_lines(phases))
    transfers = plan.get("data_transfers") or []
    out.append(f"  data transfers: {len(transfers) or 'none'}")
    out.extend(f"    {line}" for line in _transfer_lines(transfers))
    warnings = plan.get("warnings") or []
    out.append(f"  warnings:       {len(warnings) or 'none'}")
    out.extend(f"    - {w}" for w in warnings)
    return "\n".join(out)
