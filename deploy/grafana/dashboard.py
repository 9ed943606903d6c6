"""The Grafana dashboard, generated with Grafana's typed builders (grafana-foundation-sdk).

Run ``make dashboard`` after changing a panel or a metric: it writes the chart's
``helm/phalanx/files/phalanx-dashboard.json`` and its copy in ``deploy/grafana/``;
tests/deploy/test_dashboard.py fails while the committed files differ from what this writes.

Metric names come from one place, the registry of a real extender (``Metrics`` plus the
model-derived gauges): every query asks ``Exported`` for its series, and a series no
extender exports stops the generation instead of shipping a blank panel.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, units
from grafana_foundation_sdk.models import dashboard as dm
from prometheus_client import CollectorRegistry

from phalanx.service.extender import Extender
from phalanx.service.metrics import Metrics
from phalanx.sources.clusterfile import ClusterFileSource
from phalanx.sources.kube_async import AsyncKubeCounts

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = (
    REPO / "helm" / "phalanx" / "files" / "phalanx-dashboard.json",
    REPO / "deploy" / "grafana" / "phalanx-dashboard.json",
)

# Every panel and query reads from the data source the viewer picks in this variable.
DATASOURCE = common.DataSourceRef(type_val="prometheus", uid="${datasource}")
JOB = 'job=~"$job"'

# The series a Prometheus family of each type is queried by (prometheus-client's naming).
SERIES_SUFFIXES: Mapping[str, tuple[str, ...]] = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("_count", "_sum", ""),
    "info": ("_info",),
}

# Exported families deliberately left off the dashboard, each with the reason (none today).
NOT_CHARTED: Mapping[str, str] = {}


def live_registry() -> CollectorRegistry:
    """The registry of an extender on an empty cluster, writing through the asynchronous API
    client as ``phalanx serve`` does: what every replica exports."""
    metrics = Metrics()
    metrics.watch_api_client(AsyncKubeCounts)
    return Extender(ClusterFileSource([]), metrics=metrics).metrics.registry


@dataclass(frozen=True, slots=True)
class Exported:
    """The metric families an extender exports, and the series PromQL names them by."""

    families: Mapping[str, str]  # family name -> Prometheus type
    series: Mapping[str, str] = field(init=False)  # series name -> family name

    def __post_init__(self) -> None:
        series = {
            name + suffix: name
            for name, kind in self.families.items()
            for suffix in SERIES_SUFFIXES.get(kind, ("",))
        }
        object.__setattr__(self, "series", series)

    @classmethod
    def of(cls, registry: CollectorRegistry) -> Exported:
        return cls({family.name: family.type for family in registry.collect()})

    def name(self, series: str) -> str:
        """``series`` itself, once it is known to be exported (else ValueError naming it)."""
        if series not in self.series:
            known = ", ".join(sorted(self.series))
            raise ValueError(f"the dashboard queries {series!r}; Phalanx exports only {known}")
        return series

    def select(self, series: str) -> str:
        """``series{job=~"$job"}``: one exported series of the jobs the viewer picked."""
        return f"{self.name(series)}{{{JOB}}}"


# ---- building blocks -------------------------------------------------------------------


def query(expr: str, legend: str = "", *, instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    return q.instant() if instant else q


def with_ref_ids(queries: Sequence[prometheus.Dataquery]) -> list[Builder[variants.Dataquery]]:
    return [q.ref_id(chr(ord("A") + i)) for i, q in enumerate(queries)]


def steps(*colours: tuple[float | None, str]) -> db.ThresholdsConfig:
    """Absolute thresholds, in the panel's unit; the first step is the base (value None)."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=value, color=colour) for value, colour in colours])
    )


def stat_panel(
    title: str,
    description: str,
    queries: Sequence[prometheus.Dataquery],
    thresholds: db.ThresholdsConfig,
    mappings: Mapping[str, str] | None = None,
) -> stat.Panel:
    """A 6×4 single-number tile coloured by its thresholds (counts: no unit)."""
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(6)
        .height(4)
        .targets(with_ref_ids(queries))
        .unit(units.NoUnit)
        .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
        .thresholds(thresholds)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .text_mode(common.BigValueTextMode.AUTO)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .orientation(common.VizOrientation.AUTO)
    )
    if mappings:
        options = {
            value: dm.ValueMappingResult(text=text, index=i)
            for i, (value, text) in enumerate(mappings.items())
        }
        panel = panel.mappings([dm.ValueMap(options=options)])
    return panel


def timeseries_panel(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[prometheus.Dataquery],
    *,
    width: int,
    height: int = 8,
    style: Literal["lines", "stacked", "bars"] = "lines",
) -> timeseries.Panel:
    """Lines (or stacked areas, or bars per interval) with a table legend of last and max."""
    stacked = style == "stacked"
    return (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(width)
        .height(height)
        .targets(with_ref_ids(queries))
        .unit(unit)
        .draw_style(common.GraphDrawStyle.BARS if style == "bars" else common.GraphDrawStyle.LINE)
        .fill_opacity(30 if stacked else 10)
        .stacking(
            cb.StackingConfig()
            .mode(common.StackingMode.NORMAL if stacked else common.StackingMode.NONE)
            .group("A")
        )
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            cb.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.RIGHT)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            cb.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )


def quantiles(
    m: Exported, histogram: str, qs: Iterable[float], by: str = ""
) -> list[prometheus.Dataquery]:
    """One histogram_quantile query per quantile of ``<histogram>_bucket``, legend "p99"
    (or "<by> p99" when split by a label)."""
    labels = ", ".join(["le", *([by] if by else [])])
    prefix = f"{{{{{by}}}}} " if by else ""
    bucket = m.select(f"{histogram}_bucket")
    return [
        query(
            f"histogram_quantile({q}, sum by ({labels}) (rate({bucket}[$__rate_interval])))",
            f"{prefix}p{q * 100:g}",
        )
        for q in qs
    ]


# ---- the dashboard ----------------------------------------------------------------------


def health_row(m: Exported) -> list[stat.Panel]:
    red_from_one = steps((None, "green"), (1, "red"))
    return [
        stat_panel(
            "Partial gangs (must be 0)",
            "Gangs with some but fewer than minMember members bound. Phalanx's invariant: this "
            "reads 0 at every moment. Anything else pages (PhalanxPartialGang).",
            [query(f"max({m.select('phalanx_partial_gangs')})", instant=True)],
            red_from_one,
        ),
        stat_panel(
            "Cache synced",
            "1 once every replica has loaded its first full list of nodes, pods and podgroups "
            "(/readyz is 503 until then).",
            [query(f"min({m.select('phalanx_cache_synced')})", instant=True)],
            steps((None, "red"), (1, "green")),
            mappings={"0": "NOT SYNCED", "1": "synced"},
        ),
        stat_panel(
            "Over-committed nodes",
            "Nodes whose pod requests plus gang reservations exceed allocatable (must be 0).",
            [query(f"max({m.select('phalanx_overcommitted_nodes')})", instant=True)],
            red_from_one,
        ),
        stat_panel(
            "Reservations / reserved GPUs",
            "Gangs holding a reservation and the GPUs reserved for them (the leader's view). "
            "Returns to 0 when every gang has bound or expired.",
            [
                query(f"max({m.select('phalanx_reservations')})", "gangs", instant=True),
                query(f"max({m.select('phalanx_reserved_gpus')})", "GPUs", instant=True),
            ],
            steps((None, "green")),
        ),
    ]


def gangs_row(m: Exported) -> list[timeseries.Panel]:
    return [
        timeseries_panel(
            "Gang decisions by result",
            "Rate of gang decisions: committed (reserved whole), waiting-for-members, unfit, "
            "invalid, expired, replanned, released, rolled-forward, bound.",
            units.OpsPerSecond,
            [
                query(
                    "sum by (result) "
                    f"(rate({m.select('phalanx_gang_decisions_total')}[$__rate_interval]))",
                    "{{result}}",
                )
            ],
            width=12,
        ),
        timeseries_panel(
            "Time to whole gang",
            "From a gang's first /filter to the binding of its quorum: p50, p90, p99.",
            units.Seconds,
            quantiles(m, "phalanx_gang_time_to_bind_seconds", (0.5, 0.9, 0.99)),
            width=12,
        ),
        timeseries_panel(
            "Partially-bound window per gang",
            "From the first to the last binding of a gang's quorum landing (p50 / p99): how long "
            "the gang was partially bound in the API. One round trip of the bind fan-out.",
            units.Seconds,
            quantiles(m, "phalanx_gang_bind_window_seconds", (0.5, 0.99)),
            width=12,
        ),
        timeseries_panel(
            "Opened gate: commit record, then bindings",
            "Once a gang's quorum is at the barrier: the commit record written (record), then "
            "every binding answered (bindings), p50 / p99. Their sum is what the held /bind "
            "calls waited after the quorum; a slow record is the API server's write latency.",
            units.Seconds,
            quantiles(m, "phalanx_gang_bind_step_seconds", (0.5, 0.99), by="step"),
            width=12,
        ),
        timeseries_panel(
            "Re-plans by cause",
            "Reservations re-planned because kube-scheduler did not offer a reserved node "
            "(not-offered; dra when the member had devices to allocate on that node, claims or "
            "an extended resource served from DRA devices, so its DynamicResources plugin "
            "refused the node), because an arriving member fit no template slot (no-slot), or "
            "because a reserved member now asks for more than its reservation holds (grew). "
            "dra stays near 0 while Phalanx counts devices exactly.",
            units.OpsPerSecond,
            [
                query(
                    f"sum by (cause) (rate({m.select('phalanx_replans_total')}[$__rate_interval]))",
                    "{{cause}}",
                )
            ],
            width=12,
        ),
        timeseries_panel(
            "Reservations released by cause",
            "Gang reservations given up, by cause: expired (the gang's timeout passed with "
            "members unbound), barrier (the bind barrier gave up), replan, node-gone, "
            "group-gone, group-changed, topology-changed, roll-forward. A release that finds "
            "binds held at the barrier answers them with an error: kube-scheduler's failed "
            "bindings follow it.",
            units.OpsPerSecond,
            [
                query(
                    "sum by (cause) "
                    f"(rate({m.select('phalanx_releases_total')}[$__rate_interval]))",
                    "{{cause}}",
                )
            ],
            width=12,
        ),
        timeseries_panel(
            "Bind barrier waiters, held reports",
            "/bind requests held at the barrier waiting for the rest of their gang. Each waits "
            "at most the barrier timeout (20 s by default). Held reports: gang status writes "
            "and Events waiting while Phalanx has bindings in flight, each at most "
            "reportHoldSeconds (5 s by default).",
            units.NoUnit,
            [
                query(f"sum({m.select('phalanx_barrier_waiting')})", "waiting"),
                query(f"sum({m.select('phalanx_reports_held')})", "held reports"),
            ],
            width=8,
        ),
        timeseries_panel(
            "Bindings by result",
            "Bindings Phalanx issued: bound, failed, gone (pod deleted meanwhile), conflict "
            "(bound elsewhere); and, of the bound, the gang members bound with their gang "
            "before kube-scheduler sent their /bind (completed), and those whose PodScheduled "
            "condition kube-scheduler's overtaken cycle set False, set True again (corrected).",
            units.OpsPerSecond,
            [
                query(
                    "sum by (result) "
                    f"(rate({m.select('phalanx_bindings_total')}[$__rate_interval]))",
                    "{{result}}",
                ),
                query(
                    f"sum(rate({m.select('phalanx_members_completed_total')}[$__rate_interval]))",
                    "completed",
                ),
                query(
                    "sum(rate("
                    f"{m.select('phalanx_pod_conditions_corrected_total')}[$__rate_interval]))",
                    "corrected",
                ),
            ],
            width=8,
        ),
        timeseries_panel(
            "Plan data transfers per gang",
            "Cross-node data transfers in committed execution-plan placements (p50 / p99): "
            "consecutive plan steps placed on different nodes.",
            units.NoUnit,
            quantiles(m, "phalanx_plan_data_transfers", (0.5, 0.99)),
            width=8,
        ),
        timeseries_panel(
            "Preemption: nodes by Phalanx's answer",
            "Per interval, the nodes kube-scheduler proposed preemption victims on, by what "
            "Phalanx answered: kept as proposed, widened (the rest of a gang or a "
            "disruptionMode all unit on that node added, so it goes whole), dropped (the "
            "victims would leave a gang or unit partial whose rest is on other nodes); and the "
            "pods widening added. Answers, not evictions: kube-scheduler evicts on at most one "
            "node per preemption. Phalanx's log has a line per widened or dropped node.",
            units.NoUnit,
            [
                query(
                    "sum by (outcome) "
                    f"(increase({m.select('phalanx_preemption_nodes_total')}[$__rate_interval]))",
                    "{{outcome}}",
                ),
                query(
                    "sum "
                    f"(increase({m.select('phalanx_preemption_added_pods_total')}"
                    "[$__rate_interval]))",
                    "pods added",
                ),
            ],
            width=24,
            style="bars",
        ),
    ]


def gpus_row(m: Exported) -> list[timeseries.Panel]:
    return [
        timeseries_panel(
            "Cluster GPUs by state",
            "Free, used (requests of bound pods) and reserved (held for gangs not yet bound) "
            "GPUs in the cluster; device-plugin GPUs and DRA GPUs (dra.phalanx.io/gpu, whose "
            "used ones are the devices allocated claims hold) alike.",
            units.NoUnit,
            [query(f"max by (state) ({m.select('phalanx_cluster_gpus')})", "{{state}}")],
            width=8,
            height=9,
            style="stacked",
        ),
        timeseries_panel(
            "GPUs per node: reserved / used / free",
            "Per node, stacked: a node with reserved GPUs is being held for a gang that has not "
            "bound yet.",
            units.NoUnit,
            [query(f"max by (node, state) ({m.select('phalanx_gpus')})", "{{node}} {{state}}")],
            width=10,
            height=9,
            style="stacked",
        ),
        timeseries_panel(
            "DRA claims off their pod's node",
            "Allocated ResourceClaims of bound pods that their node cannot reach: kube-scheduler's "
            "DynamicResources plugin allocated devices elsewhere than where Phalanx placed the "
            "pod. Must be 0.",
            units.NoUnit,
            [query(f"max({m.select('phalanx_dra_claims_off_node')})", "claims")],
            width=6,
            height=9,
        ),
    ]


def topology_row(m: Exported) -> list[stat.Panel | timeseries.Panel]:
    return [
        timeseries_panel(
            "Whole free domains per topology level",
            "Domains of each level (NVLink clique, leaf, spine, node) with every GPU free, out "
            "of those with GPUs: what a rack-sized gang needs. Fragmentation shows as whole "
            "domains falling while GPUs stay free.",
            units.NoUnit,
            [
                query(
                    f"max by (topology, level) ({m.select('phalanx_topology_free_domains')})",
                    "{{topology}} {{level}} whole",
                ),
                query(
                    f"max by (topology, level) ({m.select('phalanx_topology_domains')})",
                    "{{topology}} {{level}} with GPUs",
                ),
            ],
            width=12,
        ),
        timeseries_panel(
            "Gangs placed by achieved level",
            "Gangs whose quorum bound, by the narrowest topology level one of whose domains "
            "holds every member (cluster: they span the widest level).",
            units.NoUnit,
            [
                query(
                    "sum by (level) "
                    f"(increase({m.select('phalanx_gang_placements_total')}[$__rate_interval]))",
                    "{{level}}",
                )
            ],
            width=6,
            style="bars",
        ),
        stat_panel(
            "Nodes with inconsistent topology labels",
            "Nodes whose labels contradict the others' (a clique under two leaves): each is "
            "treated as its own domain, and said once as a Warning Event on the Node.",
            [
                query(
                    f"max({m.select('phalanx_topology_inconsistent_nodes')})",
                    instant=True,
                )
            ],
            steps((None, "green"), (1, "orange")),
        ),
    ]


def extender_row(m: Exported) -> list[timeseries.Panel]:
    return [
        timeseries_panel(
            "Request latency per verb (p50 / p99)",
            "kube-scheduler abandons a call after its extender httpTimeout (30 s in the chart). "
            "/filter runs serially in the scheduling cycle; /bind waits at the barrier by design.",
            units.Seconds,
            quantiles(m, "phalanx_request_duration_seconds", (0.5, 0.99), by="verb"),
            width=12,
        ),
        timeseries_panel(
            "Event loop lag (p50 / p99)",
            "How late the event loop ran a timer that was due: the wait every extender call "
            "adds before it is read. /filter waits inside kube-scheduler's serial cycle, so a "
            "lag near the verb's own latency says the process is short of CPU or busy.",
            units.Seconds,
            quantiles(m, "phalanx_event_loop_lag_seconds", (0.5, 0.99)),
            width=12,
        ),
        timeseries_panel(
            "Requests per verb and result",
            "ok: answered normally; error: answered with an Error kube-scheduler reports; "
            "bad-request: not a request kube-scheduler would send.",
            units.RequestsPerSecond,
            [
                query(
                    "sum by (verb, result) "
                    f"(rate({m.select('phalanx_request_duration_seconds_count')}[$__rate_interval]))",
                    "{{verb}} {{result}}",
                )
            ],
            width=12,
        ),
        timeseries_panel(
            "Watch restarts",
            "Informer watch restarts by kind and reason (a relist after 410 Gone is routine; a "
            "steady stream of errors is not).",
            units.NoUnit,
            [
                query(
                    "sum by (kind, reason) "
                    f"(increase({m.select('phalanx_watch_restarts_total')}[$__rate_interval]))",
                    "{{kind}} {{reason}}",
                )
            ],
            width=12,
            style="bars",
        ),
        timeseries_panel(
            "Watch delay (p50 / p99)",
            "From the API server's answer to a binding Phalanx made to its pod watch showing "
            "the pod bound: how stale the cluster snapshot is. It is mostly the API server's "
            "own delay in delivering watch events, which every watcher (kube-scheduler's "
            "too) shares and which grows with its load; seconds mean a saturated API server.",
            units.Seconds,
            quantiles(m, "phalanx_watch_delay_seconds", (0.5, 0.99)),
            width=12,
        ),
        timeseries_panel(
            "Cache synced per instance",
            "Per replica: 1 once its cluster model is synced.",
            units.NoUnit,
            [query(m.select("phalanx_cache_synced"), "{{instance}}")],
            width=12,
        ),
    ]


def api_client_row(m: Exported) -> list[timeseries.Panel]:
    def rate(series: str, by: str = "") -> str:
        grouping = f" by ({by}) " if by else ""
        return f"sum{grouping}(rate({m.select(series)}[$__rate_interval]))"

    return [
        timeseries_panel(
            "Requests waiting inside the API client",
            "About how many writes wait at once inside Phalanx's own API client (seconds "
            "waited per second), per lane: for a token of its QPS/burst bucket (apiQps, "
            "apiBurst), and for an in-flight slot (bind: bindings and commit records; report: "
            "nominations, requeues, status, Events). Bind waits while the API server answers "
            "quickly say Phalanx's client, not the API server, is the bottleneck.",
            units.NoUnit,
            [
                query(rate("phalanx_api_client_slot_wait_seconds_total", "lane"), "slot {{lane}}"),
                query(
                    rate("phalanx_api_client_token_wait_seconds_total", "lane"),
                    "QPS token {{lane}}",
                ),
            ],
            width=12,
        ),
        timeseries_panel(
            "API server answers to the API client",
            "Requests the API client sent, and the API server's push-back: 429 (throttled by "
            "API Priority and Fairness), 5xx, no answer (refused, reset, timed out), and the "
            "retries they caused. Rising 429s and 5xx: the API server is overloaded.",
            units.RequestsPerSecond,
            [
                query(rate("phalanx_api_client_attempts_total"), "sent"),
                query(rate("phalanx_api_client_retries_total"), "retried"),
                query(rate("phalanx_api_client_throttled_total"), "429"),
                query(rate("phalanx_api_client_server_errors_total"), "5xx"),
                query(rate("phalanx_api_client_no_answer_total"), "no answer"),
            ],
            width=12,
        ),
    ]


def build(m: Exported) -> dm.Dashboard:
    jobs = f"label_values({m.name('phalanx_cache_synced')}, job)"
    builder = (
        db.Dashboard("Phalanx gang scheduling")
        .uid("phalanx")
        .description(
            "Phalanx, the all-or-nothing GPU gang scheduler extender: gang decisions, GPUs, "
            "extender latency, its API client, health."
        )
        .tags(["phalanx", "scheduling", "gpu"])
        .timezone("")  # the viewer's own preference
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-1h", "now")
        .version(1)
        .with_variable(
            db.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
            .hide(dm.VariableHide.DONT_HIDE)
        )
        .with_variable(
            db.QueryVariable("job")
            .label("Job")
            .datasource(DATASOURCE)
            .query({"query": jobs, "refId": "job"})
            .include_all(True)
            .all_value(".*")
            .multi(True)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .hide(dm.VariableHide.DONT_HIDE)
        )
    )
    rows: list[tuple[str, Sequence[stat.Panel | timeseries.Panel]]] = [
        ("Health", health_row(m)),
        ("Gangs", gangs_row(m)),
        ("GPUs", gpus_row(m)),
        ("Topology", topology_row(m)),
        ("Extender", extender_row(m)),
        ("API client", api_client_row(m)),
    ]
    for title, panels in rows:
        builder = builder.with_row(db.Row(title))
        for panel in panels:
            builder = builder.with_panel(panel)
    model = builder.build()
    # Grafana needs ids unique within the dashboard; number them in reading order.
    for number, panel_model in enumerate(model.panels or [], start=1):
        panel_model.id_val = number
    return model


def render(m: Exported) -> str:
    # Sorted keys: the file does not reorder when the SDK reorders its fields.
    return JSONEncoder(indent=2, sort_keys=True).encode(build(m)) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    text = render(Exported.of(live_registry()))
    stale = [path for path in OUTPUTS if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale: run `make dashboard`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
