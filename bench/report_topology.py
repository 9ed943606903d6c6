"""Figures, goals and the report of the NVL72 churn benchmark (``bench/churn.py``).

Everything is worked out from what the run observed — when each job was created, when each
pod was first seen bound and where, when each job was deleted — against the nodes' topology
labels, the same way for every scheduler:

* **within one clique**: of the jobs that became whole, the fraction whose members all share
  one NVLink clique (every job spans at least two members);
* **wait** by size class: from a job's creation until its last member was bound; a job never
  whole counts as waiting for ever (so a p99 is "never" once more than 1% never ran);
* **whole cliques free** in the steady state (from the warm-up, the longest job duration, to
  the last arrival), sampled every second: cliques none of whose GPUs are held by a bound
  pod (mean and minimum);
* **GPU utilisation by whole jobs**: GPU-seconds of jobs while all their members were bound,
  over the cluster's GPU-seconds in the same steady-state window;
* **GPU-seconds held by partial gangs**: GPUs of bound members of jobs not yet whole (or never
  whole), summed over the run;
* **required-level violations**: whole jobs whose members span more than one domain of the
  level they require (a hard rule for Phalanx, and for native, which gets the level as its
  PodGroup's `schedulingConstraints.topology`; vanilla and coscheduling have no such rule).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import png
import report
import workloads

SAMPLE_SECONDS = 1.0
PEERS = ("vanilla", "coscheduling", "native")
NEVER = math.inf
CLASSES = ("small (4-8 GPUs)", "medium (16-32 GPUs)", "rack-sized (64-72 GPUs)")
RACK_CLASS = CLASSES[-1]
WHOLE_CLIQUES_GOAL = 1.2


def job_lines(
    work: workloads.ChurnWorkload, rec: Any, domains: Mapping[str, Mapping[str, str]]
) -> list[dict[str, Any]]:
    """One line per job: when it was created, became whole and ended, and where it ran."""
    lines = []
    for job in work.jobs:
        created = rec.arrived.get(job.name)
        whole = rec.whole.get(job.name)
        nodes = sorted({rec.bound[m][1] for m in job.members if m in rec.bound})
        cliques = {domains.get(n, {}).get(workloads.CLIQUE_LABEL, n) for n in nodes}
        required_ok = None
        if whole is not None and job.shape.required:
            values = {domains.get(n, {}).get(job.shape.required, n) for n in nodes}
            required_ok = len(values) == 1
        lines.append(
            {
                "job": job.name,
                "shape": job.shape.key,
                "class": job.shape.size_class,
                "gpus": job.shape.total_gpus,
                "created": created,
                "whole": whole,
                "wait": (whole - created) if whole is not None and created is not None else None,
                "end": rec.deleted.get(job.name, rec.end),
                "nodes": nodes,
                "cliques": len(cliques),
                "required": job.shape.required,
                "required_ok": required_ok,
            }
        )
    return lines


def occupancy(
    work: workloads.ChurnWorkload, rec: Any, domains: Mapping[str, Mapping[str, str]]
) -> list[tuple[float, float, str, int]]:
    """(bound at, released at, clique, GPUs) of every bound pod."""
    job_of = {m: job for job in work.jobs for m in job.members}
    spans = []
    for pod, (t, node) in rec.bound.items():
        job = job_of.get(pod)
        if job is None:
            continue
        end = rec.deleted.get(job.name, rec.end)
        clique = domains.get(node, {}).get(workloads.CLIQUE_LABEL, node)
        spans.append((t, max(t, end), clique, job.shape.gpus))
    return spans


def whole_cliques_over_time(
    work: workloads.ChurnWorkload, rec: Any, domains: Mapping[str, Mapping[str, str]]
) -> list[tuple[float, float]]:
    """(t, cliques with no GPU held) every SAMPLE_SECONDS from the start to the last arrival."""
    cliques = {d[workloads.CLIQUE_LABEL] for d in domains.values()}
    spans = occupancy(work, rec, domains)
    points = []
    steps = int(work.arrival_window // SAMPLE_SECONDS)
    for i in range(steps + 1):
        t = i * SAMPLE_SECONDS
        held = {clique for start, end, clique, _ in spans if start <= t < end}
        points.append((t, float(len(cliques - held))))
    return points


def run_figures(
    work: workloads.ChurnWorkload, rec: Any, domains: Mapping[str, Mapping[str, str]]
) -> dict[str, Any]:
    jobs = job_lines(work, rec, domains)
    whole = [j for j in jobs if j["whole"] is not None]
    within = [j for j in whole if j["cliques"] == 1]
    waits: dict[str, dict[str, Any]] = {}
    for cls in CLASSES:
        mine = [j for j in jobs if j["class"] == cls and j["created"] is not None]
        values = [j["wait"] if j["wait"] is not None else NEVER for j in mine]
        waits[cls] = {
            "jobs": len(mine),
            "never_whole": sum(1 for v in values if v == NEVER),
            "p50_s": _finite(report.quantile(values, 0.5)),
            "p99_s": _finite(report.quantile(values, 0.99)),
        }
    series = whole_cliques_over_time(work, rec, domains)
    start, stop = steady_window(work)
    cluster_gpus = len(domains) * workloads.NVL72_GPUS
    counts = [y for t, y in series if start <= t <= stop]
    busy = sum(
        j["gpus"] * _overlap(j["whole"], j["end"], start, stop) for j in whole
    )  # GPU-seconds of whole jobs inside the steady-state window
    partial = 0.0
    job_of = {m: job for job in work.jobs for m in job.members}
    for pod, (t, _node) in rec.bound.items():
        job = job_of.get(pod)
        if job is None:
            continue
        until = rec.whole.get(job.name, rec.deleted.get(job.name, rec.end))
        partial += job.shape.gpus * max(0.0, until - t)
    required = [j for j in whole if j["required"]]
    return {
        "scheduler": rec.scheduler,
        "error": rec.error or None,
        "end_reason": rec.end_reason,
        "jobs": len(jobs),
        "jobs_created": sum(1 for j in jobs if j["created"] is not None),
        "jobs_whole": len(whole),
        "within_one_clique": report.r3(len(within) / len(whole)) if whole else None,
        "wait_by_class": waits,
        "whole_cliques_free": {
            "mean": report.r3(sum(counts) / len(counts)) if counts else None,
            "min": min(counts) if counts else None,
            "of": len({d[workloads.CLIQUE_LABEL] for d in domains.values()}),
        },
        "gpu_utilisation_whole_jobs": report.r3(busy / (cluster_gpus * (stop - start))),
        "gpu_seconds_partial": round(partial, 1),
        "required_checked": len(required),
        "required_violations": sum(1 for j in required if not j["required_ok"]),
        "phalanx_cpu": (rec.processes.get("phalanx") or {}).get("cores"),
        "series": {"whole_cliques_free": report.downsample(series)},
        "job_lines": jobs,
    }


def steady_window(work: workloads.ChurnWorkload) -> tuple[float, float]:
    """[after the warm-up, the last arrival] (the whole arrival window if that is empty)."""
    stop = max(work.arrival_window, 1e-9)
    start = work.warmup_seconds if work.warmup_seconds < stop else 0.0
    return start, stop


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _finite(v: float | None) -> float | str | None:
    if v is None:
        return None
    return "never" if v == NEVER else round(v, 2)


def _wait_key(v: Any) -> float:
    """A wait figure as a number for comparison ("never" is infinite, missing is unknown)."""
    if v == "never":
        return NEVER
    return float(v) if isinstance(v, int | float) else math.nan


def goals(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    mine = next((r for r in runs if r["scheduler"] == "phalanx" and not r["error"]), None)
    peers = [r for r in runs if r["scheduler"] in PEERS and not r["error"]]
    if mine is None:
        return []
    out = [
        {
            "goal": "every gang with a required level inside one domain of it (Phalanx, checked)",
            "value": f"{mine['required_violations']} violation(s) in {mine['required_checked']}",
            "met": mine["required_violations"] == 0,
        }
    ]
    if not peers:
        return out
    best = max(peers, key=lambda r: r["whole_cliques_free"]["mean"] or 0.0)
    ours, theirs = mine["whole_cliques_free"]["mean"] or 0.0, best["whole_cliques_free"]["mean"]
    factor = ours / theirs if theirs else (math.inf if ours else None)
    out.append(
        {
            "goal": f"≥{WHOLE_CLIQUES_GOAL}× the whole cliques free (mean) of the best peer "
            f"({best['scheduler']})",
            "value": f"{ours:g} vs {theirs:g}"
            + (f" = {factor:.2f}×" if factor not in (None, math.inf) else ""),
            "met": factor is not None and factor >= WHOLE_CLIQUES_GOAL,
        }
    )
    rack = _wait_key(mine["wait_by_class"][RACK_CLASS]["p99_s"])
    peer_rack = min(_wait_key(r["wait_by_class"][RACK_CLASS]["p99_s"]) for r in peers)
    out.append(
        {
            "goal": "rack-sized gangs wait no longer at p99 than with the best peer",
            "value": f"{_show(rack)} vs {_show(peer_rack)}",
            "met": rack <= peer_rack,
        }
    )
    return out


def _show(v: float) -> str:
    return "never" if v == NEVER else ("-" if math.isnan(v) else f"{v:.1f}s")


def write(
    out_dir: Path,
    stem: str,
    meta: dict[str, Any],
    work: workloads.ChurnWorkload,
    records: Sequence[Any],
    domains: Mapping[str, Mapping[str, str]],
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [run_figures(work, r, domains) for r in records]
    doc = {
        "meta": meta,
        "workload": {
            "key": work.key,
            "title": work.title,
            "cliques": work.cliques,
            "nodes": work.nodes,
            "gpus": work.gpus,
            "jobs": len(work.jobs),
            "arrival_window_seconds": work.arrival_window,
            "steady_window_seconds": list(steady_window(work)),
            "drain_seconds": work.drain_seconds,
            "shapes": [
                {
                    "key": s.key,
                    "members": s.members,
                    "gpus_per_member": s.gpus,
                    "required": s.required,
                    "preferred": s.preferred,
                    "jobs": sum(1 for j in work.jobs if j.shape.key == s.key),
                }
                for s in workloads.JOB_SHAPES
            ],
            "notes": work.notes,
        },
        "runs": runs,
        "goals": goals(runs),
    }
    stem = f"{stem}-topology"
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    paths = [json_path]
    good = [r for r in runs if not r["error"]]
    if good:
        chart = out_dir / f"{stem}-whole-cliques.png"
        png.line_chart(
            chart,
            "Whole NVLink cliques free over time",
            "seconds since the first arrival",
            "cliques with every GPU free",
            [png.Series(r["scheduler"], r["series"]["whole_cliques_free"]) for r in good],
            subtitle=work.title,
        )
        paths.append(chart)
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(markdown(doc, [p.name for p in paths if p.suffix == ".png"]))
    return [md_path, *paths]


def markdown(doc: dict[str, Any], pngs: Sequence[str]) -> str:
    meta, work, runs = doc["meta"], doc["workload"], doc["runs"]
    lines = [
        "# Topology benchmark: NVL72 cliques with churn",
        "",
        f"{meta.get('date', '')}, {meta.get('mode', '')} mode. {work['title']}.",
        "",
        f"Over time figures are for the steady state, from {work['steady_window_seconds'][0]:g}s "
        f"(the longest job duration) to the last arrival at {work['arrival_window_seconds']:g}s.",
        "",
        work["notes"],
        "",
        "| job shape | members × GPUs | required | preferred | jobs |",
        "|---|---|---|---|---|",
    ]
    for s in work["shapes"]:
        lines.append(
            f"| {s['key']} | {s['members']} × {s['gpus_per_member']} | {s['required'] or '-'} "
            f"| {s['preferred'] or '-'} | {s['jobs']} |"
        )
    lines += ["", "## Results", ""]
    header = ["", *(r["scheduler"] for r in runs)]
    rows: list[list[str]] = [
        ["jobs whole / created", *(f"{r['jobs_whole']} / {r['jobs_created']}" for r in runs)],
        ["within one clique", *(_pct(r["within_one_clique"]) for r in runs)],
        *(
            [
                f"wait p50 / p99, {cls}",
                *(
                    f"{_wait(r['wait_by_class'][cls]['p50_s'])} / "
                    f"{_wait(r['wait_by_class'][cls]['p99_s'])}"
                    + (
                        f" ({r['wait_by_class'][cls]['never_whole']} never)"
                        if r["wait_by_class"][cls]["never_whole"]
                        else ""
                    )
                    for r in runs
                ),
            ]
            for cls in CLASSES
        ),
        [
            "whole cliques free, mean / min",
            *(
                f"{_num(r['whole_cliques_free']['mean'])} / {_num(r['whole_cliques_free']['min'])}"
                f" of {r['whole_cliques_free']['of']}"
                for r in runs
            ),
        ],
        ["GPU utilisation by whole jobs", *(_pct(r["gpu_utilisation_whole_jobs"]) for r in runs)],
        ["GPU-seconds held by partial gangs", *(f"{r['gpu_seconds_partial']:,.0f}" for r in runs)],
        [
            "required level violated",
            *(f"{r['required_violations']} of {r['required_checked']}" for r in runs),
        ],
        ["Phalanx CPU (cores)", *(_num(r["phalanx_cpu"]) for r in runs)],
        ["run ended", *(r["end_reason"] or r["error"] or "" for r in runs)],
    ]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if doc["goals"]:
        lines += ["", "## Goals", "", "| goal | value | met |", "|---|---|---|"]
        lines += [
            f"| {g['goal']} | {g['value']} | {'yes' if g['met'] else '**no**'} |"
            for g in doc["goals"]
        ]
    for name in pngs:
        lines += ["", f"![whole cliques free over time]({name})"]
    versions = meta.get("versions", {})
    lines += [
        "",
        f"Kubernetes {versions.get('kubernetes', '?')}, scheduler-plugins "
        f"{versions.get('scheduler_plugins', '?')}, Phalanx {versions.get('phalanx', '?')}; "
        f"{meta.get('machine', {}).get('cores', '?')} cores shared by the control plane, kwok, "
        "the scheduler under test and the benchmark.",
        "",
    ]
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:g}"


def _wait(v: Any) -> str:
    return "-" if v is None else ("never" if v == "never" else f"{v:.1f}s")
