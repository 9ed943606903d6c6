"""Figures, ratios and goals from the runs of one benchmark; the JSON, Markdown and PNG files.

Every figure comes from what the benchmark itself observed (creation times on its clock, the
pod watch's first sight of each binding, /proc samples), except the extender request latency,
which only Phalanx can report (its /metrics). Definitions:

* **pods/s** — pods bound ÷ (last binding − first creation request).
* **time to whole gang** — from a gang's first member created to its ``minMember``-th member
  bound; p50 / p99 / max over the gangs that became whole. A gang that never did is not in it
  (see *gangs placed*).
* **partially-bound gang-seconds** — Σ over gangs of the time between its first member bound
  and its ``minMember``-th bound (or the end of the run, if it never got there). Exact, not
  sampled: pods never unbind during a run, so the watch's binding times are the whole story.
  Binding a whole gang takes one API call per member, so an all-or-nothing scheduler still
  shows a window of milliseconds per gang; *longest partial window* and *gangs partial > 1 s*
  tell that fan-out from a gang left holding GPUs.
* **GPUs allocated at saturation** — GPUs requested by bound pods when the run ended (all bound,
  or nothing bound for the settle window); *in whole gangs* counts only single pods and
  members of gangs that became whole, i.e. GPUs doing useful work.
* **the API server's watch delay** — per pod, from its creation being answered to the pod
  watch's first sight of it; p50 / p90. Every watcher gets an event at about the same moment
  (the scheduler's, Phalanx's, this one), so it is how late every scheduler learns of a pod,
  and how late this watch sees a binding. It grows with the load on the machine.
* **pod watchers the API server closed as unresponsive** — anyone's (the scheduler's,
  Phalanx's, this benchmark's), from kube-apiserver's ``apiserver_terminated_watchers_total``.
  Its watch cache waits for a watcher whose channel is full out of a budget of 50 ms a
  second, delaying every pod watcher, then closes it; the channel holds
  max(10, capacity / 75) events, fixed when the watch opens. The JSON has the pod watch
  cache's capacity at the run's start and end too (``pod_watch_cache``).
* **by the API server's audit log** — the same times to whole gang, with each binding timed
  when kube-apiserver answered it (its audit log, ``bench/audit.py``) instead of when this
  benchmark's watch saw it; *a binding seen after its answer* is the difference, per pod.
  The goals are judged by the watch's figures, as in every earlier run; these say how much
  of them is the benchmark's own lateness on a saturated machine.
* **gangs placed vs feasible** — gangs that became whole, against what an offline greedy
  all-or-nothing packer fits on the empty cluster (``workloads.feasible_gangs``).
* **time to unschedulable** (the impossible-gang workloads) — the gang's members are created
  behind a scheduling gate and released together (as Kueue admits a job), so no scheduler
  ever sees part of it. From the last member's release until the scheduler has *judged every
  member unschedulable since the release began*: each member's ``PodScheduled`` condition
  seen, by the pod watch, to turn (or change to) ``False`` with reason ``Unschedulable`` after
  the first member's release, with no member bound. 0 when the last judgement came before
  the last release. Pod conditions are the one report every contender gives in its own words
  (kube-scheduler writes them for every failed cycle: its filters, an extender's refusal, a
  Permit rejection, a failed pod-group cycle), and rewrites them only when their status,
  reason or message changes, so a condition from before the release (the API server's
  ``SchedulingGated``) never counts. A gang with a member bound is never reported: it holds
  GPUs (vanilla's partial gang), and the table says how many. The gang object's own status
  (upstream's ``PodGroupInitiallyScheduled`` condition, Phalanx's ``PodGroupScheduled``) is
  shown beside it, not used: coscheduling writes none without its controller.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cpus
import png
import workloads
from observe import Condition

PEERS = ("vanilla", "floor", "coscheduling", "native")
#: Column order in the tables: the peers around Phalanx and its variants.
ORDER = (
    "vanilla",
    "floor",
    "phalanx",
    "phalanx-prioritize",
    "phalanx-mostallocated",
    "phalanx-each-member",
    "phalanx-queuesort",
    "coscheduling",
    "native",
)
#: Phalanx's lowest latency bucket (phalanx.service.metrics.LATENCY_BUCKETS starts at 1 ms).
LATENCY_FLOOR_MS = 1.0
SERIES_POINTS = 400


# ---- helpers --------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (p99 of 100 gangs is the 99th smallest)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def r3(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def downsample(points: list[tuple[float, float]], n: int = SERIES_POINTS) -> list[list[float]]:
    if len(points) <= n:
        return [[round(x, 3), y] for x, y in points]
    step = len(points) / n
    picked = [points[int(i * step)] for i in range(n)] + [points[-1]]
    return [[round(x, 3), y] for x, y in picked]


# ---- Phalanx /metrics -------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group(2) or ""))
            try:
                out.append((m.group(1), labels, float(m.group(3))))
            except ValueError:
                continue
    return out


def histogram(
    samples: list[tuple[str, dict[str, str], float]], name: str, by: str | None
) -> dict[str, dict[str, Any]]:
    """Per value of label ``by`` (summed over other labels): count, mean, p50, p99 (seconds)."""
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, float] = defaultdict(float)
    for metric, labels, value in samples:
        key = labels.get(by, "") if by else ""
        if metric == f"{name}_bucket":
            buckets[key][float(labels["le"])] += value
        elif metric == f"{name}_sum":
            sums[key] += value
        elif metric == f"{name}_count":
            counts[key] += value
    out = {}
    for key, cum in buckets.items():
        total = counts[key]
        if not total:
            continue
        edges = sorted(cum.items())
        out[key] = {
            "count": int(total),
            "mean_ms": round(sums[key] / total * 1000, 3),
            "p50_ms": _bucket_quantile(edges, 0.5, total),
            "p99_ms": _bucket_quantile(edges, 0.99, total),
        }
    return out


def _bucket_quantile(edges: list[tuple[float, float]], q: float, total: float) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q."""
    rank = q * total
    prev_le, prev_cum = 0.0, 0.0
    for le, cum in edges:
        if cum >= rank:
            if math.isinf(le):
                return round(prev_le * 1000, 3)
            width = cum - prev_cum
            frac = (rank - prev_cum) / width if width else 1.0
            return round((prev_le + (le - prev_le) * frac) * 1000, 3)
        prev_le, prev_cum = le, cum
    return None


API_CLIENT = "phalanx_api_client_"
# The report's columns for Phalanx's API client: (key in `api_client`, heading).
API_CLIENT_COLUMNS = (
    ("attempts", "requests"),
    ("retries", "retries"),
    ("throttled", "429"),
    ("server_errors", "5xx"),
    ("no_answer", "no answer"),
    ("token_wait_seconds", "token wait s"),
    ("token_wait_seconds_bind", "of it bind lane"),
    ("token_wait_seconds_report", "of it report lane"),
    ("slot_wait_seconds_bind", "slot wait s, bind lane"),
    ("slot_wait_seconds_report", "slot wait s, report lane"),
)


def cpus_line(meta: Mapping[str, Any]) -> str:
    """Where the processes ran (`bench/run.py --control-plane-cpus`)."""
    pinned = meta.get("cpu_affinity") or {}
    if not pinned:
        return "Every process shared every core. "
    return (
        f"**The control plane had cores of its own:** kube-apiserver on CPU(s) "
        f"{cpus.show(pinned.get('kube-apiserver', []))} and etcd on "
        f"{cpus.show(pinned.get('etcd', []))}, every other process (kwok, the schedulers, "
        f"Phalanx, the load) on {cpus.show(pinned.get('others', []))}. "
    )


def _backoff_line(meta: dict[str, Any]) -> str:
    """The chart's queue backoff, when the run gave it to Phalanx's kube-scheduler (runs
    before 2026-12-02 did not record it: they ran upstream's 1 s / 10 s)."""
    backoff = meta.get("phalanx_backoff")
    if not backoff:
        return ""
    return (
        f" and the chart's backoff `podInitialBackoffSeconds: "
        f"{backoff['podInitialBackoffSeconds']}`, `podMaxBackoffSeconds: "
        f"{backoff['podMaxBackoffSeconds']}`"
    )


def phalanx_figures(text: str) -> dict[str, Any]:
    if not text:
        return {}
    samples = parse_metrics(text)
    counters: dict[str, dict[str, float]] = defaultdict(dict)
    gauges: dict[str, float] = {}
    client: dict[str, float] = {}
    restarts: dict[str, int] = {}
    for metric, labels, value in samples:
        if metric.startswith(API_CLIENT):
            # Its writes and what held them: its own limits (token, slot) or the API server.
            name = metric.removeprefix(API_CLIENT).removesuffix("_total")
            if "lane" in labels:
                name = f"{name}_{labels['lane']}"
            client[name] = value
        elif metric in ("phalanx_gang_decisions_total", "phalanx_bindings_total"):
            counters[metric.removesuffix("_total")][labels.get("result", "")] = value
        elif metric == "phalanx_releases_total":
            counters["phalanx_releases"][labels.get("cause", "")] = value
        elif metric == "phalanx_members_completed_total":
            gauges[metric] = value
        elif metric in (
            "phalanx_partial_gangs",
            "phalanx_reserved_gpus",
            "phalanx_watch_restarts_total",
        ):
            gauges[metric] = gauges.get(metric, 0.0) + value
            if metric == "phalanx_watch_restarts_total" and value:
                restarts[f"{labels.get('kind', '')}/{labels.get('reason', '')}"] = int(value)
    if "token_wait_seconds_bind" in client:  # by lane since 2026-12-02 night: the total too
        client["token_wait_seconds"] = client["token_wait_seconds_bind"] + client.get(
            "token_wait_seconds_report", 0.0
        )
    return {
        "request_latency": histogram(samples, "phalanx_request_duration_seconds", "verb"),
        # How late its loop ran what was due: the wait before a call is even read.
        "loop_lag": histogram(samples, "phalanx_event_loop_lag_seconds", None).get(""),
        # From each of its bindings answered to its pod watch showing it: how stale its model ran.
        "watch_delay": histogram(samples, "phalanx_watch_delay_seconds", None).get(""),
        "gang_time_to_bind": histogram(samples, "phalanx_gang_time_to_bind_seconds", None).get(""),
        # An opened gate's steps (record, bindings) and the gang's partially-bound window.
        "bind_steps": histogram(samples, "phalanx_gang_bind_step_seconds", "step"),
        "bind_window": histogram(samples, "phalanx_gang_bind_window_seconds", None).get(""),
        "gang_decisions": {k: int(v) for k, v in counters["phalanx_gang_decisions"].items() if v},
        "bindings": {k: int(v) for k, v in counters["phalanx_bindings"].items() if v},
        # Why reservations were given up: a release with binds held fails them.
        "releases": {k: int(v) for k, v in counters["phalanx_releases"].items() if v},
        # Members the barrier bound with their gang before kube-scheduler sent their /bind.
        "members_completed": int(gauges.pop("phalanx_members_completed_total", 0)),
        "gauges_at_end": gauges,
        # Which informer's watch restarted, and why (closed, gone, error, forbidden, missing).
        "watch_restarts": restarts,
        "api_client": client,
    }


def kube_scheduler_figures(text: str) -> dict[str, Any]:
    """The scheduler's own account: attempts by result, cycle and end-to-end latencies."""
    if not text:
        return {}
    samples = parse_metrics(text)
    attempts: dict[str, int] = defaultdict(int)
    podgroup_attempts: dict[str, int] = defaultdict(int)
    # Pods moved into its queues, by the event that moved them ("event/queue"): which
    # cluster events send refused pods back for another attempt.
    incoming: dict[str, int] = defaultdict(int)
    preemptions = 0
    for metric, labels, value in samples:
        if metric == "scheduler_schedule_attempts_total":
            attempts[labels.get("result", "")] += int(value)
        elif metric == "scheduler_queue_incoming_pods_total":
            incoming[f"{labels.get('event', '')}/{labels.get('queue', '')}"] += int(value)
        elif metric == "scheduler_preemption_attempts_total":
            preemptions += int(value)
        elif metric == "scheduler_podgroup_schedule_attempts_total":
            podgroup_attempts[labels.get("result", "")] += int(value)
    return {
        "attempts": dict(attempts),
        "incoming_pods": dict(sorted(incoming.items(), key=lambda kv: -kv[1])),
        "preemption_attempts": preemptions,
        "attempt_duration": histogram(
            samples, "scheduler_scheduling_attempt_duration_seconds", "result"
        ),
        "algorithm_duration": histogram(
            samples, "scheduler_scheduling_algorithm_duration_seconds", None
        ).get(""),
        "pod_scheduling_sli": histogram(
            samples, "scheduler_pod_scheduling_sli_duration_seconds", None
        ).get(""),
        # Where a cycle's time goes besides the extender: kube-scheduler's own plugins, per
        # extension point (PreFilter, Filter, Score, ...), summed over the run.
        "extension_points": histogram(
            samples, "scheduler_framework_extension_point_duration_seconds", "extension_point"
        ),
        "permit_wait": histogram(samples, "scheduler_permit_wait_duration_seconds", "result"),
        # The pod-group cycle (native gang scheduling, 1.37): one attempt per gang.
        "podgroup_attempts": dict(podgroup_attempts),
        "podgroup_attempt_duration": histogram(
            samples, "scheduler_podgroup_scheduling_attempt_duration_seconds", "result"
        ),
        "podgroup_algorithm_duration": histogram(
            samples, "scheduler_podgroup_scheduling_algorithm_duration_seconds", None
        ).get(""),
    }


# ---- kube-apiserver /metrics ---------------------------------------------------------------

# The writes a scheduler makes, in the report's columns (the rest are summed as "other").
API_WRITE_COLUMNS = (
    "POST pods",
    "POST pods/binding",
    "PATCH pods/status",
    "PATCH pods",
    "PATCH podgroups/status",
    "POST events",
    "PATCH events",
)
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})


def api_write_counts(text: str) -> dict[str, int]:
    """Mutating requests kube-apiserver served so far, by "VERB resource[/subresource]"."""
    counts: dict[str, int] = defaultdict(int)
    for metric, labels, value in parse_metrics(text):
        if metric == "apiserver_request_total" and labels.get("verb") in WRITE_VERBS:
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            counts[f"{labels['verb']} {resource}"] += int(value)
    return dict(counts)


def pod_watch_cache_now(text: str) -> tuple[int, int | None]:
    """(watchers of pods closed as unresponsive so far, the pod watch cache's capacity)."""
    closed, capacity = 0, None
    for metric, labels, value in parse_metrics(text):
        if labels.get("resource") != "pods" or labels.get("group", "") != "":
            continue
        if metric == "apiserver_terminated_watchers_total":
            closed += int(value)
        elif metric == "watch_cache_capacity":
            capacity = int(value)
    return closed, capacity


def pod_watch_cache(before: str, after: str) -> dict[str, int | None] | None:
    """What kube-apiserver's pod watch cache did during a run: the pod watchers it closed as
    unresponsive (anyone's: Phalanx's, kube-scheduler's, this benchmark's), and its capacity
    when the run began and ended. A watcher that falls a full channel behind is waited for
    out of a budget of 50 ms a second, delaying every pod watcher, then closed; the channel
    holds max(10, capacity / 75) events, fixed when the watch opens (k8s.io/apiserver
    pkg/storage/cacher), so watches opened on a fresh cluster are the shortest. None without
    both scrapes."""
    if not before or not after:
        return None
    closed_before, capacity_before = pod_watch_cache_now(before)
    closed_after, capacity_after = pod_watch_cache_now(after)
    return {
        "watchers_closed": closed_after - closed_before,
        "capacity_at_start": capacity_before,
        "capacity_at_end": capacity_after,
    }


def watch_cache_line(meta: Mapping[str, Any]) -> str:
    """What the pod watch cache held before the first run (bench/run.py
    `warm_pod_watch_cache`); results from before 7 December say nothing: cold."""
    cache = meta.get("pod_watch_cache") or {}
    if cache.get("warmed"):
        return (
            f"kube-apiserver's pod watch cache warmed to {cache.get('capacity')} events before "
            "the first run, so every run's watches open with the same channels. "
        )
    return "kube-apiserver's pod watch cache cold at the first run (10-event channels). "


def api_writes(before: str, after: str) -> dict[str, int] | None:
    """The writes kube-apiserver served during a run, by verb and resource: everyone's (the
    benchmark's pod creations and kwok's pod status updates too, the same for every
    contender); None without both scrapes."""
    if not before or not after:
        return None
    start = api_write_counts(before)
    delta = {k: v - start.get(k, 0) for k, v in api_write_counts(after).items()}
    return {k: v for k, v in sorted(delta.items()) if v > 0}


# The extension points inside the scheduling algorithm (PostFilter runs after it fails).
ALGORITHM_EXTENSION_POINTS = ("PreFilter", "Filter", "PreScore", "Score")


def plugin_ms_per_cycle(kube_scheduler: Mapping[str, Any]) -> float | None:
    """kube-scheduler's own plugins' share of the mean algorithm time: their extension
    points' summed time over the run, per algorithm run (None without the figures)."""
    algo = kube_scheduler.get("algorithm_duration") or {}
    points = kube_scheduler.get("extension_points") or {}
    if not algo.get("count") or not points:
        return None
    total = sum(
        points[p]["count"] * points[p]["mean_ms"] for p in ALGORITHM_EXTENSION_POINTS if p in points
    )
    return round(float(total / algo["count"]), 3)


# ---- time to unschedulable --------------------------------------------------------------------


def judged_unschedulable_at(history: Sequence[Condition], since: float) -> float | None:
    """When the pod's ``PodScheduled`` first turned False/Unschedulable at or after ``since``."""
    return next((c.t for c in history if c.t >= since and c.unschedulable), None)


def condition_at(history: Sequence[Condition], t: float) -> Condition | None:
    """The condition as it stood at ``t`` (its last change at or before ``t``)."""
    current = None
    for c in history:
        if c.t > t:
            break
        current = c
    return current


def gang_settled_at(
    members: Sequence[str],
    arrived: Mapping[str, float],
    bound: Mapping[str, tuple[float, str]],
    conditions: Mapping[str, Sequence[Condition]],
) -> float | None:
    """When every member was either bound or judged unschedulable since the gang began to
    arrive (the latest of those moments), or None while one is still neither."""
    if not members or any(m not in arrived for m in members):
        return None
    first = min(arrived[m] for m in members)
    moments = []
    for m in members:
        at = bound[m][0] if m in bound else judged_unschedulable_at(conditions.get(m, ()), first)
        if at is None:
            return None
        moments.append(at)
    return max(moments)


def reported_unschedulable_at(
    members: Sequence[str],
    arrived: Mapping[str, float],
    bound: Mapping[str, tuple[float, str]],
    conditions: Mapping[str, Sequence[Condition]],
) -> float | None:
    """The moment the gang was reported unschedulable (the module docstring's criterion): no
    member bound, each judged unschedulable since the gang began to arrive, and each still
    so then. None if that never happened."""
    if any(m in bound for m in members):
        return None
    at = gang_settled_at(members, arrived, bound, conditions)
    if at is None:
        return None
    for m in members:
        now = condition_at(conditions.get(m, ()), at)
        if now is None or not now.unschedulable:
            return None
    return at


def group_summary(status: Mapping[str, Any]) -> str:
    """The gang object's status in a few words: its scheduling condition, else its phase."""
    found = group_condition(status)
    if found is not None:
        return f"{found[0]}={found[1]} ({found[2]})"
    return f"phase {status['phase']}" if status.get("phase") else "no status"


def group_condition(status: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(type, status, reason) of the gang object's scheduling condition, whatever its dialect."""
    for cond in status.get("conditions") or ():
        if cond.get("type") in ("PodGroupInitiallyScheduled", "PodGroupScheduled"):
            return str(cond["type"]), str(cond.get("status", "")), str(cond.get("reason", ""))
    return None


def unschedulable_figures(work: workloads.Workload, rec: Any) -> dict[str, Any]:
    """Time to unschedulable and what each scheduler left behind, for an impossible gang.

    ``rec.created`` holds each member's arrival (its release from the gate). Times are from
    the last member's arrival.
    """
    (group,) = work.groups
    members = [m.name for m in work.pods if m.group == group.name]
    gpus = {m.name: m.gpus for m in work.pods}
    conditions: Mapping[str, Sequence[Condition]] = rec.conditions
    arrivals = [rec.created[m] for m in members if m in rec.created]
    last = max(arrivals) if len(arrivals) == len(members) else None

    def after(t: float | None) -> float | None:
        return None if t is None or last is None else r3(max(0.0, t - last))

    at = reported_unschedulable_at(members, rec.created, rec.bound, conditions)
    settled = gang_settled_at(members, rec.created, rec.bound, conditions)
    bound = [m for m in members if m in rec.bound]
    latest = [conditions[m][-1] for m in members if conditions.get(m)]
    said: dict[str, Any] | None = None
    for t, status in rec.group_status:
        found = group_condition(status)
        if found is not None and found[1] == "False":
            said = {"condition": found[0], "reason": found[2], "after_s": after(t)}
            break
    return {
        "gang": group.name,
        "members": len(members),
        "gpus_asked": sum(gpus[m] for m in members),
        "release_seconds": None if last is None else r3(last - min(arrivals)),
        "time_to_unschedulable_s": after(at),
        "every_member_settled_s": after(settled),
        "members_bound": len(bound),
        "gpus_held": sum(gpus[m] for m in bound),
        "members_unschedulable_at_end": sum(c.unschedulable for c in latest),
        "group_condition_false": said,
        "group_status_at_end": group_summary(rec.group_status[-1][1])
        if rec.group_status
        else "no status",
        "message": max((c.message for c in latest if c.unschedulable), key=len, default="")[:400],
        # Seconds from the last member's arrival (negative: before it).
        "pod_conditions": {
            m: [
                [r3(c.t - last), c.status, c.reason, c.message[:160]] for c in conditions.get(m, ())
            ]
            for m in members
            if last is not None
        },
        "group_status": [[r3(t - last), status] for t, status in rec.group_status if last],
    }


# ---- one run ----------------------------------------------------------------------------------


def watch_delays(work: workloads.Workload, rec: Any) -> list[float]:
    """Per pod, from its creation being answered to the benchmark's watch first seeing it
    (s): how late the API server's watches deliver, to every watcher alike (Phalanx's
    informer and kube-scheduler's too). It grows with the load on the machine. Empty (its
    figures None) for a gated workload, whose `created` is each gate's release, after the
    pod was first seen."""
    if work.gated:
        return []
    return [rec.seen[name] - t for name, t in rec.created.items() if name in rec.seen]


def whole_gang_times(
    members: Mapping[str, Sequence[str]],
    sizes: Mapping[str, int],
    bound_at: Mapping[str, float],
    created: Mapping[str, float],
) -> list[float]:
    """Per gang that became whole by `bound_at` (pod → when bound): from its first member's
    creation to its `size`-th binding (s)."""
    times_to_whole = []
    for g, names in members.items():
        times = sorted(bound_at[n] for n in names if n in bound_at)
        made = [created[n] for n in names if n in created]
        if made and len(times) >= sizes[g]:
            times_to_whole.append(times[sizes[g] - 1] - min(made))
    return times_to_whole


def run_figures(work: workloads.Workload, rec: Any) -> dict[str, Any]:
    t0 = rec.t_first_create
    gpus = {m.name: m.gpus for m in work.pods}
    sizes = work.group_sizes()
    members: dict[str, list[str]] = defaultdict(list)
    for m in work.pods:
        if m.group is not None:
            members[m.group].append(m.name)
    binds = sorted((t, name) for name, (t, _node) in rec.bound.items() if name in gpus)
    last_bind = binds[-1][0] if binds else None
    span = (last_bind - t0) if last_bind is not None else None

    whole: list[str] = []
    ttw: list[float] = []
    partial_seconds = 0.0
    longest_partial = 0.0
    partial_over_1s = 0
    partial_at_end = 0
    whole_after_last_member: list[float] = []
    for g, names in members.items():
        need = sizes[g]
        times = sorted(rec.bound[n][0] for n in names if n in rec.bound)
        if not times:
            continue
        if len(times) >= need:
            whole_at = times[need - 1]
            whole.append(g)
            created = [rec.created[n] for n in names if n in rec.created]
            ttw.append(whole_at - min(created))
            whole_after_last_member.append(whole_at - max(created))
            partial = whole_at - times[0]
        else:
            partial_at_end += 1
            partial = rec.t_end - times[0]
        partial_seconds += partial
        longest_partial = max(longest_partial, partial)
        partial_over_1s += partial > 1.0
    whole_set = set(whole)
    group_of = {m.name: m.group for m in work.pods}
    in_whole = sum(gpus[n] for _, n in binds if group_of[n] is None or group_of[n] in whole_set)
    throughput = downsample([(t - t0, i + 1) for i, (t, _) in enumerate(binds)])
    ttw_cdf = downsample([(v, (i + 1) / len(ttw)) for i, v in enumerate(sorted(ttw))])
    delays = watch_delays(work, rec)
    # The API server's own record of each binding (bench/audit.py): how much of the watch's
    # figures is the benchmark's lateness in seeing them.
    at_apiserver: Mapping[str, float] = getattr(rec, "bound_at_apiserver", {})
    api_ttw = whole_gang_times(members, sizes, at_apiserver, rec.created)
    seen_after = [rec.bound[n][0] - t for n, t in at_apiserver.items() if n in rec.bound]
    out: dict[str, Any] = {
        "workload": work.key,
        "scheduler": rec.scheduler,
        "end": rec.end_reason or "error",
        "error": rec.error or None,
        "pods": len(work.pods),
        "pods_bound": len(binds),
        "create_errors": rec.create_errors,
        "creation_seconds": r3(rec.t_last_create - t0),
        "watch_delay_p50_s": r3(quantile(delays, 0.5)),
        "watch_delay_p90_s": r3(quantile(delays, 0.9)),
        "first_create_to_last_bind_seconds": r3(span),
        "pods_per_second": r3(len(binds) / span) if span else None,
        "gpus_in_cluster": work.nodes * workloads.NODE_GPUS,
        "gpus_allocated": sum(gpus[n] for _, n in binds),
        "gpus_in_whole_gangs": in_whole,
        "gangs": len(members),
        "gangs_placed": len(whole),
        "gangs_feasible": work.feasible_gangs,
        "gangs_partial_at_end": partial_at_end,
        "time_to_whole_gang_p50_s": r3(quantile(ttw, 0.5)),
        "time_to_whole_gang_p99_s": r3(quantile(ttw, 0.99)),
        "time_to_whole_gang_max_s": r3(max(ttw) if ttw else None),
        "time_to_whole_gang_p50_api_s": r3(quantile(api_ttw, 0.5)),
        "time_to_whole_gang_p99_api_s": r3(quantile(api_ttw, 0.99)),
        "binding_seen_after_p50_s": r3(quantile(seen_after, 0.5)),
        "binding_seen_after_p99_s": r3(quantile(seen_after, 0.99)),
        "last_member_to_whole_gang_p50_s": r3(quantile(whole_after_last_member, 0.5)),
        "last_member_to_whole_gang_p99_s": r3(quantile(whole_after_last_member, 0.99)),
        "partial_gang_seconds": round(partial_seconds, 4),
        "longest_partial_window_s": round(longest_partial, 4),
        "gangs_partial_over_1s": partial_over_1s,
        "watch_restarts": rec.watch_restarts,
        "processes": rec.processes,
        "phalanx": phalanx_figures(rec.phalanx_metrics),
        "kube_scheduler": kube_scheduler_figures(rec.scheduler_metrics),
        "api_writes": api_writes(*rec.apiserver_metrics),
        "pod_watch_cache": pod_watch_cache(*rec.apiserver_metrics),
        "scheduler_config": rec.scheduler_config,
        "series": {"bound_over_time": throughput, "time_to_whole_gang_cdf": ttw_cdf},
    }
    out["pod_watchers_closed"] = (out["pod_watch_cache"] or {}).get("watchers_closed")
    algo = (out["kube_scheduler"].get("algorithm_duration") or {}).get("mean_ms")
    out["cycle_ceiling_pods_per_second"] = round(1000 / algo, 1) if algo else None
    if work.key == "big-gang" and whole_after_last_member:
        out["whole_after_last_member_created_s"] = r3(whole_after_last_member[0])
    if work.key == "plans":
        out["plan_rules"] = plan_rules(work, rec)
    if work.impossible:
        out["unschedulable"] = unschedulable_figures(work, rec)
    return out


def plan_rules(work: workloads.Workload, rec: Any) -> dict[str, Any]:
    """How each scheduler's placements score against the plans' rules (DESIGN §3)."""
    node_of = {name: node for name, (_t, node) in rec.bound.items()}
    by_group: dict[str, list[str]] = defaultdict(list)
    for m in work.pods:
        if m.group is not None and m.name in node_of:
            by_group[m.group].append(m.name)
    train_total = train_off_tag = 0
    trials = trials_distinct = tok = tok_distinct = 0
    for group, names in by_group.items():
        if group.startswith("pipe-"):
            trains = [n for n in names if "-train-" in n]
            train_total += len(trains)
            train_off_tag += sum(not workloads.is_tagged(node_of[n]) for n in trains)
            toks = [n for n in names if "-tokenize-" in n]
            tok += len(toks)
            tok_distinct += len({node_of[n] for n in toks})
        else:
            trials += len(names)
            trials_distinct += len({node_of[n] for n in names})
    return {
        "trainers_bound": train_total,
        "trainers_off_tagged_nodes": train_off_tag,
        "tokenizers_on_distinct_nodes": r3(tok_distinct / tok) if tok else None,
        "trials_on_distinct_nodes": r3(trials_distinct / trials) if trials else None,
    }


# ---- ratios and goals ---------------------------------------------------------------------------

#: (figure, label, True when higher is better)
COMPARED = (
    ("pods_per_second", "pods/s", True),
    (
        "cycle_ceiling_pods_per_second",
        "cycle ceiling pods/s (kube-scheduler's algorithm time)",
        True,
    ),
    ("first_create_to_last_bind_seconds", "first create → last bind (s)", False),
    ("time_to_whole_gang_p50_s", "time to whole gang p50 (s)", False),
    ("time_to_whole_gang_p99_s", "time to whole gang p99 (s)", False),
    (
        "time_to_whole_gang_p50_api_s",
        "time to whole gang p50, by the API server's audit log (s)",
        False,
    ),
    (
        "time_to_whole_gang_p99_api_s",
        "time to whole gang p99, by the API server's audit log (s)",
        False,
    ),
    ("last_member_to_whole_gang_p50_s", "last member created → whole gang p50 (s)", False),
    ("last_member_to_whole_gang_p99_s", "last member created → whole gang p99 (s)", False),
    ("gpus_allocated", "GPUs allocated at saturation", True),
    ("gpus_in_whole_gangs", "GPUs in whole gangs", True),
    ("gangs_placed", "gangs placed", True),
    ("partial_gang_seconds", "partially-bound gang-seconds", False),
    ("longest_partial_window_s", "longest partial window (s)", False),
)


UNSCHEDULABLE = "time_to_unschedulable_s"
#: KAI scheduler's scale test: 249 s until an 80-GPU job is reported unschedulable (issue #12;
#: its cluster and criterion, cited for scale, not measured here).
KAI_UNSCHEDULABLE_SECONDS = 249.0
#: Native is "ahead" of Phalanx on a figure when better by more than this factor.
AHEAD_MARGIN = 1.1


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


def ratios(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """``{workload: {peer: {figure: phalanx ÷ peer}}}``."""
    by = {(r["workload"], r["scheduler"]): r for r in runs}
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for (wl, sched), run in by.items():
        if sched != "phalanx":
            continue
        for peer in PEERS:
            other = by.get((wl, peer))
            if other is None:
                continue
            out.setdefault(wl, {})[peer] = {
                key: ratio(run.get(key), other.get(key)) for key, _label, _ in COMPARED
            }
            if "unschedulable" in run and "unschedulable" in other:
                out[wl][peer][UNSCHEDULABLE] = ratio(
                    run["unschedulable"][UNSCHEDULABLE], other["unschedulable"][UNSCHEDULABLE]
                )
    return out


def goals(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(r["workload"], r["scheduler"]): r for r in runs}
    out: list[dict[str, Any]] = []

    def add(goal: str, target: str, measured: str, met: bool | None, note: str = "") -> None:
        out.append({"goal": goal, "target": target, "measured": measured, "met": met, "note": note})

    p, v, f = (by.get(("singles", k)) for k in ("phalanx", "vanilla", "floor"))
    if p and v:
        rt = ratio(p["pods_per_second"], v["pods_per_second"])
        created, last = v.get("creation_seconds"), v.get("first_create_to_last_bind_seconds")
        capped = (
            f"vanilla bound its last pod {last - created:.2f} s after the last was created, so "
            "its figure is the pod-creation rate; "
            if created is not None and last is not None and last - created < 0.5
            else ""
        )
        ceiling = ratio(
            p.get("cycle_ceiling_pods_per_second"), v.get("cycle_ceiling_pods_per_second")
        )
        if f:
            rf = ratio(p["pods_per_second"], f["pods_per_second"])
            add(
                "singles: pods/s",
                "Phalanx ≥ 0.9× the do-nothing extender (floor)",
                f"{p['pods_per_second']} vs {f['pods_per_second']} pods/s = {rf}× "
                f"(vanilla {v['pods_per_second']}: Phalanx {rt}×, floor "
                f"{ratio(f['pods_per_second'], v['pods_per_second'])}×)",
                None if rf is None else rf >= 0.9,
                capped + f"scheduling-cycle ceilings vs vanilla {ceiling}×",
            )
        else:
            add(
                "singles: pods/s",
                "Phalanx ≥ 0.9× the do-nothing extender (floor; not run)",
                f"{p['pods_per_second']} vs vanilla {v['pods_per_second']} pods/s = {rt}×",
                None,
                capped,
            )
    for variant, label in GANG_GOAL_VARIANTS:
        fast_path_goals(by, add, variant, label)
    issue12_goals(by, add)
    return out


#: The Phalanx configurations the fast-path goals (issue #11) are reported for: the chart's
#: default, and the chart's `kubeScheduler.queueSort: Coscheduling` (a goal's name says which).
GANG_GOAL_VARIANTS = (("phalanx", ""), ("phalanx-queuesort", " (queueSort: Coscheduling)"))


def fast_path_goals(
    by: Mapping[tuple[str, str], dict[str, Any]], add: Any, variant: str, label: str
) -> None:
    """Issue #11's gang goals for one Phalanx configuration against coscheduling."""
    for wl, p50_target, p99_target in (("gangs", None, 0.8), ("contended", 1.0, 0.5)):
        p, c = by.get((wl, variant)), by.get((wl, "coscheduling"))
        if p is None:
            continue
        if c is not None:
            for q, target in (("p50", p50_target), ("p99", p99_target)):
                if target is None:
                    continue
                pq, cq = p[f"time_to_whole_gang_{q}_s"], c[f"time_to_whole_gang_{q}_s"]
                rq = ratio(pq, cq)
                pa, ca = (
                    p.get(f"time_to_whole_gang_{q}_api_s"),
                    c.get(f"time_to_whole_gang_{q}_api_s"),
                )
                by_audit = (
                    f"; by the API server's audit log {pa} s vs {ca} s = {ratio(pa, ca)}×"
                    if pa is not None and ca is not None
                    else ""
                )
                add(
                    f"{wl}: time to whole gang {q}{label}",
                    f"≤ {target}× coscheduling",
                    f"{pq} s vs {cq} s = {rq}× (over {p['gangs_placed']} vs "
                    f"{c['gangs_placed']} whole gangs){by_audit}",
                    None if rq is None else rq <= target,
                )
            target = 1.3 if wl == "contended" else 1.0
            pg, cg = p["gpus_in_whole_gangs"], c["gpus_in_whole_gangs"]
            rg = ratio(pg, cg)
            add(
                f"{wl}: GPUs in whole gangs{label}",
                f"≥ {target}× coscheduling",
                f"{pg} vs {cg} = {rg}×",
                None if rg is None else rg >= target,
            )
        # The issue's words: no gang partial beyond its bind fan-out (one API call per
        # member, so never a strict zero), none at the end. A window over a second is not
        # fan-out on these gangs: a gang left holding GPUs.
        add(
            f"{wl}: no gang partial beyond its bind fan-out{label}",
            "no window > 1 s, none partial at the end",
            f"{p['gangs_partial_over_1s']} gang(s) > 1 s; "
            f"{p['gangs_partial_at_end']} partial at end; longest window "
            f"{p['longest_partial_window_s']} s; {p['partial_gang_seconds']} gang-seconds in all",
            not p["gangs_partial_over_1s"] and not p["gangs_partial_at_end"],
        )
    p, c = by.get(("big-gang", variant)), by.get(("big-gang", "coscheduling"))
    if p is not None:
        w = p.get("whole_after_last_member_created_s")
        cw = c.get("whole_after_last_member_created_s") if c is not None else None
        rw = ratio(w, cw)
        add(
            f"big gang: whole after its last member exists{label}",
            "≤ 1.0× coscheduling",
            (f"{w} s" if w is not None else f"not whole ({p['pods_bound']}/{p['pods']} bound)")
            + (f" vs {cw} s = {rw}×" if cw is not None else " (coscheduling not run)"),
            None if rw is None else rw <= 1.0,
        )


def issue12_goals(by: Mapping[tuple[str, str], dict[str, Any]], add: Any) -> None:
    """Issue #12: Phalanx next to kube-scheduler's native gang scheduling."""
    for wl in ("upstream-small-gangs", "upstream-big-gangs"):
        p, n = by.get((wl, "phalanx")), by.get((wl, "native"))
        if p is None or n is None:
            continue
        pq, nq = p["time_to_whole_gang_p99_s"], n["time_to_whole_gang_p99_s"]
        rq = ratio(pq, nq)
        add(
            f"#12 {wl}: time to whole gang p99",
            "≤ 1.0× native (where not, the notes below say why)",
            f"{pq} s vs {nq} s = {rq}× (over {p['gangs_placed']} vs {n['gangs_placed']} whole "
            "gangs)",
            None if rq is None else rq <= 1.0,
        )
    for wl in ("unschedulable-wide", "unschedulable-full"):
        p = by.get((wl, "phalanx"))
        if p is None or "unschedulable" not in p:
            continue
        pu = p["unschedulable"]
        t = pu[UNSCHEDULABLE]
        n = by.get((wl, "native"))
        nt = n["unschedulable"][UNSCHEDULABLE] if n and "unschedulable" in n else None
        measured = (
            f"{t} s" if t is not None else f"not reported ({pu['members_bound']} member(s) bound)"
        )
        if n is not None:
            measured += f" vs native {nt} s" if nt is not None else " vs native: not reported"
        add(
            f"#12 {wl}: impossible gang reported unschedulable, holding nothing",
            f"< {KAI_UNSCHEDULABLE_SECONDS:g} s (KAI's scale test, 80-GPU job), no GPU held",
            measured + f"; GPUs held {pu['gpus_held']}",
            t is not None and t < KAI_UNSCHEDULABLE_SECONDS and pu["gpus_held"] == 0,
        )


# ---- where native gang scheduling is ahead ------------------------------------------------------

#: Figures a user sees (not the scheduler's internal cycle ceiling), for the native comparison.
USER_FIGURES = (
    *(c for c in COMPARED if c[0] != "cycle_ceiling_pods_per_second"),
    (UNSCHEDULABLE, "time to unschedulable (s)", False),
)


def _figure(run: Mapping[str, Any], key: str) -> Any:
    if key == UNSCHEDULABLE:
        return (run.get("unschedulable") or {}).get(UNSCHEDULABLE)
    return run.get(key)


def native_ahead(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (workload, figure) where native gang scheduling beats Phalanx by more than
    AHEAD_MARGIN, with the evidence from both schedulers' /metrics and /proc."""
    by = {(r["workload"], r["scheduler"]): r for r in runs}
    out = []
    for (wl, sched), p in by.items():
        n = by.get((wl, "native"))
        if sched != "phalanx" or n is None or p["error"] or n["error"]:
            continue
        behind = []
        for key, label, higher in USER_FIGURES:
            pv, nv = _figure(p, key), _figure(n, key)
            r = ratio(pv, nv)
            if r is not None and (r < 1 / AHEAD_MARGIN if higher else r > AHEAD_MARGIN):
                behind.append(
                    {"figure": key, "label": label, "phalanx": pv, "native": nv, "ratio": r}
                )
        if behind:
            out.append({"workload": wl, "figures": behind, "evidence": evidence(p, n)})
    return out


def evidence(p: Mapping[str, Any], n: Mapping[str, Any]) -> list[str]:
    """What the two runs' own accounts say about where Phalanx's time went."""
    lines = []
    lat = (p.get("phalanx") or {}).get("request_latency") or {}
    verbs = [
        f"{verb} {h['count']} × {_fmt(h['mean_ms'])} ms mean (p99 {_ms(h['p99_ms'])})"
        for verb in ("filter", "prioritize", "bind")
        if (h := lat.get(verb))
    ]
    if verbs:
        lines.append("Phalanx extender calls: " + "; ".join(verbs) + " (bind includes the barrier)")
    proc = (p.get("processes") or {}).get("phalanx") or {}
    if proc:
        lines.append(
            f"Phalanx process {_fmt(proc.get('cores'))} cores, its event loop "
            f"{_fmt(proc.get('main_thread_cores'))} (one Python thread answers every call)"
        )
    decisions = (p.get("phalanx") or {}).get("gang_decisions")
    releases = (p.get("phalanx") or {}).get("releases")
    attempts = (p.get("kube_scheduler") or {}).get("attempts")
    if decisions or attempts:
        lines.append(
            f"Phalanx gang decisions {decisions or {}}; reservations released by cause "
            f"{releases or {}}; its kube-scheduler's pod attempts "
            f"{attempts or {}} (an `error` attempt is a bind that failed or timed out)"
        )

    pa = ((p.get("kube_scheduler") or {}).get("algorithm_duration") or {}).get("mean_ms")
    na = ((n.get("kube_scheduler") or {}).get("algorithm_duration") or {}).get("mean_ms")
    if pa is not None or na is not None:
        lines.append(
            f"kube-scheduler algorithm time per pod attempt: Phalanx profile {_fmt(pa)} ms "
            f"(extender calls included), native {_fmt(na)} ms"
        )
    nks = n.get("kube_scheduler") or {}
    if nks.get("podgroup_attempts"):
        dur = nks.get("podgroup_attempt_duration") or {}
        per = ", ".join(
            f"{res} {h['count']} × {_fmt(h['mean_ms'])} ms" for res, h in sorted(dur.items())
        )
        lines.append(
            f"native pod-group cycles (one per gang attempt): {per or nks['podgroup_attempts']}"
        )
    binds = (p.get("phalanx") or {}).get("gang_time_to_bind")
    if binds:
        lines.append(
            f"Phalanx gang time to bind (its metric): {binds['count']} gangs, mean "
            f"{_fmt(binds['mean_ms'])} ms, p99 {_ms(binds['p99_ms'])} ms"
        )
    return lines


# ---- output ----------------------------------------------------------------------------------


def write(
    out_dir: Path,
    stem: str,
    meta: dict[str, Any],
    works: Sequence[workloads.Workload],
    records: Sequence[Any],
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    by_key = {w.key: w for w in works}
    runs = [run_figures(by_key[r.workload], r) for r in records]
    doc = {
        "meta": meta,
        "workloads": workloads.describe(works),
        "runs": runs,
        "ratios": ratios(runs),
        "goals": goals(runs),
        "native_ahead": native_ahead(runs),
    }
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    pngs = plots(out_dir, stem, works, runs)
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(markdown(doc, stem, [p.name for p in pngs]))
    return [json_path, md_path, *pngs]


def plots(
    out_dir: Path, stem: str, works: Sequence[workloads.Workload], runs: list[dict[str, Any]]
) -> list[Path]:
    paths = []
    for w in works:
        mine = [r for r in runs if r["workload"] == w.key and not r["error"]]
        if not mine or w.impossible:  # a handful of pods: the table says it all
            continue
        path = out_dir / f"{stem}-{w.key}-throughput.png"
        png.line_chart(
            path,
            f"Pods bound over time: {w.key}",
            "seconds since the first pod was created",
            "pods bound",
            [png.Series(r["scheduler"], r["series"]["bound_over_time"]) for r in mine],
            subtitle=w.title,
        )
        paths.append(path)
        if w.groups and any(r["series"]["time_to_whole_gang_cdf"] for r in mine):
            path = out_dir / f"{stem}-{w.key}-time-to-whole-gang.png"
            png.line_chart(
                path,
                f"Time to whole gang: {w.key}",
                "seconds from first member created to last member bound",
                "fraction of whole gangs",
                [
                    png.Series(
                        f"{r['scheduler']} ({r['gangs_placed']}/{r['gangs']})",
                        r["series"]["time_to_whole_gang_cdf"],
                    )
                    for r in mine
                    if r["series"]["time_to_whole_gang_cdf"]
                ],
                subtitle=f"{w.title}; CDF over the gangs each scheduler made whole",
            )
            paths.append(path)
    return paths


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _sec(ms: float | None) -> str:
    return "–" if ms is None else _fmt(round(ms / 1000, 3))


def _ms(v: float | None) -> str:
    """A bucket-interpolated quantile: inside the lowest bucket (1 ms) it says only "< 1"."""
    if v is not None and v <= LATENCY_FLOOR_MS:
        return f"< {LATENCY_FLOOR_MS:g}"
    return _fmt(v)


def _ratio_cell(v: float | None, higher_better: bool) -> str:
    if v is None:
        return "–"
    better = v > 1 if higher_better else v < 1
    mark = "" if v == 1 else (" ✓" if better else " ✗")
    return f"{v:.2f}×{mark}"


def _gates_line(meta: Mapping[str, Any]) -> str:
    gates = meta.get("apiserver_feature_gates") or {}
    if not gates:
        return ""
    on = ", ".join(f"`{g}`" for g, v in gates.items() if v)
    config = ", ".join(f"`{c}`" for c, v in (meta.get("runtime_config") or {}).items() if v)
    native = ", ".join(f"`{g}`" for g, v in (meta.get("native_feature_gates") or {}).items() if v)
    return (
        f" kube-apiserver feature gates {on}, runtime-config {config}; native's kube-scheduler "
        f"gates {native}, the other kube-schedulers the release's defaults."
    )


UNSCHEDULABLE_ROWS = (
    ("release_seconds", "members released over (s)", None),
    (UNSCHEDULABLE, "reported unschedulable after (s)", False),
    ("every_member_settled_s", "every member bound or judged after (s)", None),
    ("members_bound", "members bound", False),
    ("gpus_held", "GPUs held by a gang that cannot run", False),
    ("members_unschedulable_at_end", "members Unschedulable at the end", None),
    ("group_status_at_end", "gang object's status at the end", None),
)


def unschedulable_table(
    key: str,
    present: Sequence[str],
    peers: Sequence[str],
    by: Mapping[tuple[str, str], dict[str, Any]],
    ratios_for: Mapping[str, Mapping[str, float | None]],
) -> list[str]:
    """An impossible gang's section: time to unschedulable per scheduler, and its words."""
    head = "| figure | " + " | ".join(present) + "".join(f" | phalanx ÷ {p}" for p in peers) + " |"
    lines = [
        "Times from the last member's release (module docstring of `bench/report.py`); KAI's "
        f"scale test reports {KAI_UNSCHEDULABLE_SECONDS:g} s for an 80-GPU job (its cluster, "
        "cited for scale).",
        "",
        head,
        "|---" * (1 + len(present) + len(peers)) + "|",
    ]
    ends = [_fmt(by[(key, s)]["end"]) for s in present]
    lines.append("| run ended | " + " | ".join(ends + [""] * len(peers)) + " |")
    for fig, label, higher in UNSCHEDULABLE_ROWS:
        cells = [_fmt((by[(key, s)].get("unschedulable") or {}).get(fig)) for s in present]
        rcells = [
            _ratio_cell(ratios_for.get(p, {}).get(fig), bool(higher))
            if fig == UNSCHEDULABLE
            else ""
            for p in peers
        ]
        lines.append(f"| {label} | " + " | ".join(cells + rcells) + " |")
    lines.append("")
    for s in present:
        run = by[(key, s)]
        if run["error"]:
            lines.append(f"**{s} failed:** `{run['error'][:300]}`")
            continue
        message = (run.get("unschedulable") or {}).get("message") or "(no Unschedulable member)"
        lines.append(f"- **{s}** tells a member's pod: `{message[:300]}`")
    return lines


#: Why native gang scheduling is ahead of Phalanx on a workload, from the profiles of the
#: runs (kept here, beside the figures they explain, so a re-rendered report keeps them).
#: The lead's reading of the evidence, per workload: written from the profiles of the full
#: run (`--profile-phalanx`) and the per-attempt figures above, so it names mechanisms, not
#: one run's numbers (those are in the evidence lines beside it).
_PER_POD_CYCLE = (
    "kube-scheduler takes every member through its own pod cycle and, in Phalanx's profile "
    "(`percentageOfNodesToScore: 100`, which the whole-cluster plan needs), runs its filter "
    "plugins over every node before it asks the extender; the per-attempt figure above is "
    "that cycle with the HTTP round trip, of which Phalanx's own filter is the small part "
    "(its mean above). The do-nothing floor extender pays the same mechanism. Native places "
    "a whole gang in one pod-group cycle inside kube-scheduler, with no round trip."
)
WHY_NATIVE_AHEAD: dict[str, str] = {
    "singles": (
        "No gang here: native is plain kube-scheduler, one in-process cycle per pod. With "
        "Phalanx, kube-scheduler runs its filter plugins over every node "
        "(`percentageOfNodesToScore: 100`) and then makes one HTTP round trip per pod; the "
        "do-nothing floor extender pays exactly that, and Phalanx's goal is set against it. "
        "Phalanx's own filter is the small part of the per-attempt figure above."
    ),
    "gangs": _PER_POD_CYCLE,
    "plans": _PER_POD_CYCLE,
    "big-gang": _PER_POD_CYCLE
    + " A gang is whole only after its last member's cycle, so a 256-member gang waits for "
    "256 serial cycles.",
    "upstream-small-gangs": _PER_POD_CYCLE,
    "upstream-big-gangs": _PER_POD_CYCLE
    + " With 1,000 members per gang the serial cycles alone take tens of seconds, and the "
    "first members wait at `/bind` meanwhile. The profile of the 2026-12-01 full run also "
    "found two thirds of Phalanx's CPU in the barrier re-checking every held member after "
    "every model change through a linear scan; that is fixed since (a uid index).",
    "contended": _PER_POD_CYCLE
    + " With 2× demand every member of a gang that cannot fit costs one such cycle on each "
    "retry, and members arrive interleaved, so a gang is whole only after its last member's "
    "first cycle: the first pass through the queue is serial per pod. Native rejects a whole "
    "unfit gang, and places a fitting one, in one pod-group cycle each. The profile of the "
    "2026-12-01 full run also found half of Phalanx's CPU spent writing the reason an unfit "
    "gang misses (the closest node, over every candidate); that is fixed since.",
    "unschedulable-wide": _PER_POD_CYCLE
    + " Phalanx finds the gang unfit at its first member's filter; it is reported "
    "unschedulable once every member has had its cycle. Both stay far inside KAI's 249 s "
    "and hold nothing.",
    "unschedulable-full": _PER_POD_CYCLE
    + " Phalanx finds the gang unfit at its first member's filter; it is reported "
    "unschedulable once every member has had its cycle. Both stay far inside KAI's 249 s "
    "and hold nothing.",
}
WHY_PLACEHOLDER = (
    "_to be written from the full run on a quiet machine (`make bench`; "
    "`--profile-phalanx DIR` for where Phalanx's time goes)._"
)


def native_notes(ahead: Sequence[Mapping[str, Any]], native_ran: bool) -> list[str]:
    """Where native gang scheduling beats Phalanx, the figures and the evidence, and a marked
    place for the lead's explanation."""
    if not native_ran:
        return []
    lines = [
        "",
        "## Where native gang scheduling is ahead of Phalanx",
        "",
        f"Figures where native is better than Phalanx by more than {AHEAD_MARGIN:g}× in this "
        "run, with what both schedulers' own accounts (/metrics, /proc) say about them.",
    ]
    if not ahead:
        return [*lines, "", "None in this run."]
    for item in ahead:
        lines += ["", f"### {item['workload']}", ""]
        lines += [
            f"- {f['label']}: Phalanx {_fmt(f['phalanx'])} vs native {_fmt(f['native'])} "
            f"({f['ratio']:.2f}×)"
            for f in item["figures"]
        ]
        lines += ["", "Evidence:", ""]
        lines += [f"- {e}" for e in item["evidence"]]
        why = WHY_NATIVE_AHEAD.get(item["workload"], WHY_PLACEHOLDER)
        lines += ["", f"> **Why:** {why}"]
    return lines


def markdown(doc: dict[str, Any], stem: str, pngs: list[str]) -> str:
    meta = doc["meta"]
    m = meta["machine"]
    runs = doc["runs"]
    by = {(r["workload"], r["scheduler"]): r for r in runs}
    lines = [
        f"# Phalanx benchmark — {meta['date']} ({meta['mode']}, scale {meta['scale']})",
        "",
        f"**Machine:** {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux "
        f"{m['kernel']}, Python {m['python']} — {m['note']}.",
        "",
        f"**Versions:** Kubernetes {meta['versions']['kubernetes']} (kube-apiserver, "
        f"kube-scheduler), etcd {meta['versions']['etcd']}, kwok {meta['versions']['kwok']}, "
        f"scheduler-plugins {meta['versions']['scheduler_plugins']} (embeds kube-scheduler "
        f"1.34), Phalanx {meta['versions']['phalanx']} (source digest "
        f"{meta['versions'].get('phalanx_source_digest', '?')}). "
        f"PodGroup CRD: {meta['podgroup_crd']}.{_gates_line(meta)}",
        "",
        f"**Settings:** every kube-scheduler's client QPS/burst {meta['client_qps_burst'][0]}/"
        f"{meta['client_qps_burst'][1]}; no leader election; PodGroups "
        f"`scheduleTimeoutSeconds: {meta['schedule_timeout_seconds']}`; Coscheduling args "
        f"`{json.dumps(meta['coscheduling_args'])}`; Phalanx profile "
        f"`percentageOfNodesToScore: 100` (DESIGN §2){_backoff_line(meta)}, the others upstream "
        # Runs before 2026-12-06 logged warnings only (and wrote no access lines then).
        f"defaults; Phalanx's log level `{meta.get('phalanx_log_level', 'warning')}`. A run ends "
        f"when every pod is bound, or at saturation (no binding for {meta['settle_seconds']:g} s), "
        f"or after {meta['cap_seconds']:g} s. {cpus_line(meta)}{watch_cache_line(meta)}"
        f"Total runtime {meta['runtime_seconds'] / 60:.1f} min.",
        "",
        "Ratios are Phalanx ÷ the peer, from this one run; ✓ marks Phalanx better.",
        "",
        "## Goals",
        "",
        "| goal | target | measured | met |",
        "|---|---|---|---|",
    ]
    for g in doc["goals"]:
        met = {True: "**yes**", False: "**no**", None: "n/a"}[g["met"]]
        note = f" ({g['note']})" if g["note"] else ""
        lines.append(f"| {g['goal']} | {g['target']} | {g['measured']}{note} | {met} |")
    for w in doc["workloads"]:
        key = w["key"]
        present = [s for s in ORDER if (key, s) in by]
        if not present:
            continue
        lines += [
            "",
            f"## {key}: {w['title']}",
            "",
            f"{w['notes']} {w['pods']} pods, {w['gangs']} gangs, {w['gpus_demanded']} GPUs asked "
            f"of {w['gpus_in_cluster']}; feasible gangs {w['feasible_gangs']}.",
            "",
        ]
        peers = [p for p in PEERS if p in present and "phalanx" in present]
        if w.get("impossible"):
            lines += unschedulable_table(key, present, peers, by, doc["ratios"].get(key, {}))
            continue
        head = (
            "| figure | " + " | ".join(present) + "".join(f" | phalanx ÷ {p}" for p in peers) + " |"
        )
        lines += [head, "|---" * (1 + len(present) + len(peers)) + "|"]
        rows = [
            ("end", "run ended", None),
            ("pods_bound", "pods bound", True),
            ("creation_seconds", "all pods created after (s)", None),
            ("watch_delay_p50_s", "the API server's watch delay p50 (s)", None),
            ("watch_delay_p90_s", "the API server's watch delay p90 (s)", None),
            ("pod_watchers_closed", "pod watchers the API server closed as unresponsive", None),
            (
                "binding_seen_after_p50_s",
                "a binding seen by this watch after its answer p50 (s)",
                None,
            ),
            (
                "binding_seen_after_p99_s",
                "a binding seen by this watch after its answer p99 (s)",
                None,
            ),
            *COMPARED,
            ("gangs_partial_at_end", "gangs partial at the end", False),
            ("gangs_partial_over_1s", "gangs partial > 1 s", False),
        ]
        if key == "big-gang":
            rows.append(
                ("whole_after_last_member_created_s", "whole after last member created (s)", False)
            )
        ratios_for = doc["ratios"].get(key, {})
        for fig, label, higher in rows:
            cells = [_fmt(by[(key, s)].get(fig)) for s in present]
            rcells = []
            for p in peers:
                val = ratios_for.get(p, {}).get(fig)
                rcells.append(_ratio_cell(val, bool(higher)) if higher is not None else "")
            lines.append(f"| {label} | " + " | ".join(cells + rcells) + " |")
        for s in present:
            if by[(key, s)]["error"]:
                lines.append(f"\n**{s} failed:** `{by[(key, s)]['error'][:300]}`")
        if key == "plans":
            lines += [
                "",
                "| plan rule | " + " | ".join(present) + " |",
                "|---" * (1 + len(present)) + "|",
            ]
            for fig, label in (
                (
                    "trainers_off_tagged_nodes",
                    "trainers off `tag.phalanx.io/gpu` nodes (hard rule)",
                ),
                ("tokenizers_on_distinct_nodes", "parallel tokenizers on distinct nodes (soft)"),
                ("trials_on_distinct_nodes", "trials on distinct nodes (soft)"),
            ):
                cells = [_fmt((by[(key, s)].get("plan_rules") or {}).get(fig)) for s in present]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += native_notes(doc["native_ahead"], any(s == "native" for _w, s in by))
    lines += [
        "",
        "## Phalanx extender latency (its /metrics, per verb; bind includes the barrier wait)",
        "",
        "Quantiles are interpolated inside Phalanx's histogram buckets (1 ms × 2^k), so below "
        "1 ms only the mean is exact. A verb's time starts once its body is read; *loop lag* "
        "is how late Phalanx's event loop ran a timer that was due (sampled every 50 ms, "
        "buckets from 0.25 ms): about the wait before a call is read at all. *Watch delay* is "
        "from the API server's answer to each binding Phalanx made to its pod watch showing "
        "the pod bound: how stale its model ran. The *gate* rows "
        "time each gang once its quorum was at the barrier: its commit record written "
        "(*record*), then all its bindings answered (*bindings*); the *partial window* is "
        "from its first binding landing to its last.",
        "",
        "| workload | scheduler | verb | requests | mean ms | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        figures = r.get("phalanx") or {}
        lat = figures.get("request_latency") or {}
        timed = [(verb, lat.get(verb)) for verb in ("filter", "prioritize", "bind", "preempt")]
        timed.append(("loop lag", figures.get("loop_lag")))
        timed.append(("watch delay", figures.get("watch_delay")))
        steps = figures.get("bind_steps") or {}
        timed += [(f"gate: {step}", steps.get(step)) for step in ("record", "bindings")]
        timed.append(("gate: partial window", figures.get("bind_window")))
        for verb, h in timed:
            if h:
                lines.append(
                    f"| {r['workload']} | {r['scheduler']} | {verb} | {h['count']} | "
                    f"{_fmt(h['mean_ms'])} | {_ms(h['p50_ms'])} | {_ms(h['p99_ms'])} |"
                )
    client_runs = [r for r in runs if (r.get("phalanx") or {}).get("api_client")]
    if client_runs:
        lines += [
            "",
            "## Phalanx's API client (its /metrics)",
            "",
            "Every write Phalanx made (bindings, commit records, nominations, requeues, status, "
            "Events): the requests sent, the API server's push-back, and the time writes "
            "waited inside the client, for its QPS token and for an in-flight slot per lane "
            "(summed over writes: 10 s over a 10 s run is one write waiting all along).",
            "",
            "| workload | scheduler | "
            + " | ".join(heading for _key, heading in API_CLIENT_COLUMNS)
            + " |",
            "|---|---|" + "---|" * len(API_CLIENT_COLUMNS),
        ]
        for r in client_runs:
            client = r["phalanx"]["api_client"]
            cells = [_fmt(client.get(key)) for key, _heading in API_CLIENT_COLUMNS]
            lines.append(f"| {r['workload']} | {r['scheduler']} | " + " | ".join(cells) + " |")
    queue_runs = [
        r
        for r in runs
        if (r.get("kube_scheduler") or {}).get("incoming_pods")
        or (r.get("phalanx") or {}).get("releases")
    ]
    if queue_runs:
        lines += [
            "",
            "## Requeues and releases",
            "",
            "Pods each kube-scheduler moved into a queue, by the event that moved them and the "
            "queue (its `scheduler_queue_incoming_pods_total`, the most frequent first): a pod "
            "an extender refused is requeued by any cluster event, its own status update "
            "included. Phalanx's reservations released, by cause (a release with binds "
            "held fails them), and the gang members it bound with their gang before "
            "kube-scheduler sent their /bind (completed).",
            "",
            "| workload | scheduler | pods moved, by event/queue | reservations released "
            "| members completed |",
            "|---|---|---|---|---|",
        ]
        for r in queue_runs:
            moved = (r.get("kube_scheduler") or {}).get("incoming_pods") or {}
            released = (r.get("phalanx") or {}).get("releases") or {}
            moves = ", ".join(f"{k} {v:,}" for k, v in list(moved.items())[:6]) or "–"
            causes = ", ".join(f"{k} {v:,}" for k, v in released.items())
            if not causes:
                causes = "none" if r["scheduler"].startswith("phalanx") else "–"
            phalanx = r.get("phalanx") or {}
            completed = (
                f"{phalanx['members_completed']:,}" if "members_completed" in phalanx else "–"
            )
            lines.append(
                f"| {r['workload']} | {r['scheduler']} | {moves} | {causes} | {completed} |"
            )
    lines += [
        "",
        "## kube-scheduler's own account (its /metrics)",
        "",
        "Attempts by result; the mean scheduling-algorithm time per attempt — the serial part "
        "of a cycle (filter and score, extender calls included; binding is asynchronous and "
        "not in it) — and the throughput that alone would allow (1 ÷ it); the pod-scheduling "
        "SLI (queue entry to bound, p50 / p99). The algorithm time splits into kube-scheduler's "
        "own plugins (PreFilter, Filter, PreScore and Score, from its extension-point "
        "histogram) and the rest: the extender calls, and whatever waits on them.",
        "",
        "| workload | scheduler | scheduled | unschedulable | error | algorithm ms (mean) | "
        "of it plugins ms | of it extenders and the rest ms | "
        "cycle ceiling pods/s | SLI p50 s | SLI p99 s | preemption attempts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        ks = r.get("kube_scheduler") or {}
        att = ks.get("attempts") or {}
        algo = ks.get("algorithm_duration") or {}
        sli = ks.get("pod_scheduling_sli") or {}
        plugins = plugin_ms_per_cycle(ks)
        rest = None if plugins is None else round(algo["mean_ms"] - plugins, 3)
        lines.append(
            f"| {r['workload']} | {r['scheduler']} | {_fmt(att.get('scheduled'))} | "
            f"{_fmt(att.get('unschedulable'))} | {_fmt(att.get('error'))} | "
            f"{_fmt(algo.get('mean_ms'))} | {_fmt(plugins)} | {_fmt(rest)} | "
            f"{_fmt(r.get('cycle_ceiling_pods_per_second'))} | "
            f"{_sec(sli.get('p50_ms'))} | {_sec(sli.get('p99_ms'))} | "
            f"{_fmt(ks.get('preemption_attempts'))} |"
        )
    lines += [
        "",
        "## Writes to the API server during the run (kube-apiserver's own count)",
        "",
        "Everyone's writes: the benchmark's pod creations and kwok's pod status updates are "
        "the same for every contender, so the differences are the schedulers'. Bindings are "
        "`POST pods/binding`; Phalanx's nominations are `PATCH pods/status`, its requeues "
        "`PATCH pods`, its gang status `PATCH podgroups/status`; kube-scheduler's own "
        "unschedulable conditions are `PATCH pods/status` too.",
        "",
        "| workload | scheduler | pods | " + " | ".join(API_WRITE_COLUMNS) + " | other | "
        "writes per pod |",
        "|---|---|---|" + "---|" * (len(API_WRITE_COLUMNS) + 2),
    ]
    for r in runs:
        writes = r.get("api_writes")
        if writes is None:
            continue
        named = [writes.get(c, 0) for c in API_WRITE_COLUMNS]
        other = sum(writes.values()) - sum(named)
        per_pod = sum(writes.values()) / r["pods"] if r.get("pods") else None
        lines.append(
            f"| {r['workload']} | {r['scheduler']} | {r.get('pods')} | "
            + " | ".join(str(n) for n in named)
            + f" | {other} | {_fmt(per_pod)} |"
        )
    lines += [
        "",
        "## CPU (cores, averaged over the run) and peak memory (MiB RSS)",
        "",
        "Phalanx's event loop is its main thread (every extender call is answered there); its "
        "other threads are the API client's workers and the informers.",
        "",
        "| workload | scheduler | scheduler cores | phalanx cores | phalanx loop cores | "
        "phalanx MiB | kube-scheduler MiB | apiserver cores | etcd cores | kwok cores | "
        "bench cores | machine busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        pr = r["processes"] or {}

        def g(name: str, key: str, pr: dict[str, Any] = pr) -> str:
            return _fmt((pr.get(name) or {}).get(key))

        lines.append(
            f"| {r['workload']} | {r['scheduler']} | {g('kube-scheduler', 'cores')} | "
            f"{g('phalanx', 'cores')} | {g('phalanx', 'main_thread_cores')} | "
            f"{g('phalanx', 'rss_mib_max')} | "
            f"{g('kube-scheduler', 'rss_mib_max')} | {g('kube-apiserver', 'cores')} | "
            f"{g('etcd', 'cores')} | {g('kwok', 'cores')} | {g('bench', 'cores')} | "
            f"{_fmt((pr.get('machine') or {}).get('busy_fraction'))} |"
        )
    lines += ["", "## Plots", ""]
    lines += [f"![{name}]({name})" for name in pngs]
    lines += [
        "",
        "## Method",
        "",
        "One control plane (etcd, kube-apiserver, kwok from `tests/controlplane`) for the whole "
        "run; nodes created once per node count and reused. Each workload × scheduler run gets a "
        "fresh namespace and its own scheduler process (and Phalanx process), started before the "
        "pods are created; afterwards its pods are deleted so the next run finds the same nodes "
        "empty. Every scheduler gets the same gangs: scheduler-plugins PodGroups, except native, "
        "which gets them as upstream `scheduling.k8s.io/v1beta1` PodGroups. "
        "Pods are created by 16 threads in the workload's arrival order. Binding times are "
        "when the benchmark's pod watch first saw `spec.nodeName`; CPU and memory come from "
        "`/proc`. Everything shares 2 cores, so schedulers that use less CPU leave more to the "
        "apiserver: compare ratios, not absolute figures, and only within one report. See "
        "`bench/report.py` for each figure's definition.",
        "",
    ]
    return "\n".join(lines)


def rerender(json_path: Path) -> Path:
    """Write `<stem>.md` again from `<stem>.json` and the plots beside it (after editing the
    explanations above, say); returns the Markdown's path."""
    doc = json.loads(json_path.read_text())
    stem = json_path.stem
    pngs = sorted(p.name for p in json_path.parent.glob(f"{stem}-*.png"))
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(doc, stem, pngs))
    return md_path


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(rerender(Path(arg)))
