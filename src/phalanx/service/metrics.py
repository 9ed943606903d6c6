"""Prometheus metrics: one registry per service instance, never a module-level global.

Counters and histograms are updated as things happen; gauges that describe the model
(GPUs per node, reservations, partial gangs, whole topology domains) are computed from it
at scrape time, so they can never drift from the truth. The asynchronous API client counts
for itself (`AsyncKubeCounts`); its counters are read at scrape time too, so a request
costs no metric work.

A scrape reads every collector on the event loop (the model's only reader) and formats
the text on a worker thread (`Metrics.exposition`): on 5,000 nodes the per-node gauges are
15,000 samples, and their text took three quarters of a 60 ms scrape that held the loop
(`bench/bench_scrape.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from phalanx.core.cache import ClusterState
from phalanx.core.eligibility import term_matches
from phalanx.core.model import DRA_GPU, Node
from phalanx.core.preempt import PreemptOutcome
from phalanx.core.topology import TopologyIndex
from phalanx.core.topology_usage import LevelFreedom
from phalanx.sources.kube_async import AsyncKubeCounts

# Per configured topology: its index, and per level its whole and GPU-holding domains.
TopologyUsage = Callable[[], Sequence[tuple[TopologyIndex, Sequence[LevelFreedom]]]]

# kube-scheduler's style: exponential buckets from 1 ms, doubling.
LATENCY_BUCKETS = tuple(0.001 * 2**k for k in range(16))  # 1 ms .. ~33 s
TIME_TO_BIND_BUCKETS = tuple(0.001 * 2**k for k in range(22))  # 1 ms .. ~35 min
LOOP_LAG_BUCKETS = tuple(0.00025 * 2**k for k in range(15))  # 0.25 ms .. ~4 s


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.request_duration = Histogram(
            "phalanx_request_duration_seconds",
            "Extender request latency by verb and result.",
            ["verb", "result"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.gang_decisions = Counter(
            "phalanx_gang_decisions",
            "Gang decisions by result (committed, waiting-for-members, unfit, expired, ...).",
            ["result"],
            registry=r,
        )
        self.time_to_bind = Histogram(
            "phalanx_gang_time_to_bind_seconds",
            "Time from a gang's first filter to the binding of its quorum.",
            buckets=TIME_TO_BIND_BUCKETS,
            registry=r,
        )
        self.barrier_waiting = Gauge(
            "phalanx_barrier_waiting",
            "Bind requests held at the bind barrier, waiting for the rest of their gang.",
            registry=r,
        )
        self.reports_held = Gauge(
            "phalanx_reports_held",
            "Gang status writes and Events waiting for Phalanx's bindings to be quiet.",
            registry=r,
        )
        self.bindings = Counter(
            "phalanx_bindings",
            "Bindings issued by Phalanx, by result (bound, failed, gone, conflict).",
            ["result"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "phalanx_watch_restarts",
            "Informer watch restarts by kind and reason (closed, gone, error, forbidden, missing).",
            ["kind", "reason"],
            registry=r,
        )
        self.watch_delay = Histogram(
            "phalanx_watch_delay_seconds",
            "From the API server's answer to a binding Phalanx made to its pod watch showing "
            "the pod bound: how far the cluster snapshot trails the API server.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.gang_placements = Counter(
            "phalanx_gang_placements",
            "Gangs whose quorum bound, by the narrowest topology level one of whose domains "
            "holds every member (a level of a configured topology, node-label for a node "
            "label no configured topology has, or cluster).",
            ["level"],
            registry=r,
        )
        self.bind_window = Histogram(
            "phalanx_gang_bind_window_seconds",
            "From the first to the last binding of a gang's quorum landing: how long the gang "
            "was partially bound in the API (one round trip of its bind fan-out).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.bind_steps = Histogram(
            "phalanx_gang_bind_step_seconds",
            "The steps of an opened gate, in order: the commit record written (record), then "
            "every binding of the gang answered (bindings). Their sum is how long the gang's "
            "held /bind calls waited once the quorum was there.",
            ["step"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.members_completed = Counter(
            "phalanx_members_completed_total",
            "Gang members the bind barrier bound with their gang before kube-scheduler sent "
            "their /bind (the gang's other members were reserved and asked for nothing only "
            "kube-scheduler judges).",
            registry=r,
        )
        self.conditions_corrected = Counter(
            "phalanx_pod_conditions_corrected_total",
            "Pods bound by Phalanx whose PodScheduled condition kube-scheduler then set False "
            "(its own cycle of a member bound with its gang failed), set True again.",
            registry=r,
        )
        self.replans = Counter(
            "phalanx_replans",
            "Reservations re-planned, by cause: kube-scheduler did not offer a reserved node "
            "(not-offered; dra when the member had devices to allocate on that node, claims "
            "or an extended resource the node serves from DRA devices, so its "
            "DynamicResources plugin refused it), an arriving member fit no template slot "
            "(no-slot), or a reserved member now asks for more than its reservation holds "
            "(grew).",
            ["cause"],
            registry=r,
        )
        self.releases = Counter(
            "phalanx_releases",
            "Gang reservations released, by cause: expired (its timeout passed with members "
            "unbound), barrier (the bind barrier gave up), replan, node-gone, group-gone, "
            "group-changed, topology-changed, roll-forward, released. Each release of a "
            "reservation with held binds answers them with an error, which kube-scheduler "
            "counts as a failed binding.",
            ["cause"],
            registry=r,
        )
        self.preemption_nodes = Counter(
            "phalanx_preemption_nodes",
            "Nodes kube-scheduler proposed preemption victims on (/preempt), by what Phalanx "
            "answered: kept (the victims as proposed), widened (with the rest of a gang or a "
            "disruptionMode all unit on that node added, so it goes whole), dropped (the node "
            "refused: the victims would leave a gang or unit partial, its rest is on other "
            "nodes). Counted per answer: kube-scheduler evicts at most one node's set, of its "
            "own choosing, per preemption.",
            ["outcome"],
            registry=r,
        )
        for outcome in PreemptOutcome:  # every outcome exported from the start, at 0
            self.preemption_nodes.labels(outcome.value)
        self.preemption_added = Counter(
            "phalanx_preemption_added_pods",
            "Pods Phalanx added to kube-scheduler's proposed victims by widening a node's set "
            "(summed over the widened nodes of every /preempt answer).",
            registry=r,
        )
        self.loop_lag = Histogram(
            "phalanx_event_loop_lag_seconds",
            "How late the event loop ran a timer that was due: about the wait every extender "
            "call adds before it is read (inside kube-scheduler's serial cycle for filter).",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )
        self.plan_transfers = Histogram(
            "phalanx_plan_data_transfers",
            "Cross-node data transfers in each committed execution-plan placement.",
            buckets=(0, 1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )

    async def exposition(self) -> bytes:
        """The text format of every metric: read now, on the calling loop, and formatted on
        a worker thread, so the loop serves extender calls meanwhile."""
        return await asyncio.to_thread(generate_latest, Collected(self.registry))

    def watch(
        self,
        state: ClusterState,
        partial_gangs: Callable[[], list[str]],
        synced: Callable[[], bool],
    ) -> None:
        """Export the model-derived gauges of one running service."""
        self.registry.register(_ModelCollector(state, partial_gangs, synced))

    def watch_topology(self, usage: TopologyUsage) -> None:
        """Export, at scrape time, how many domains of each topology level are whole."""
        self.registry.register(_TopologyCollector(usage))

    def watch_api_client(self, counts: Callable[[], AsyncKubeCounts]) -> None:
        """Export, at scrape time, what the asynchronous API client did so far. `counts` is
        asked at every scrape: the client behind it may be made later, or made again.

        Assumes scrapes run on the client's event loop (its counts are loop-only)."""
        self.registry.register(_ApiClientCollector(counts))


class Collected(CollectorRegistry):
    """A registry's metric families as collected at one moment, to be formatted elsewhere.

    Collecting runs every collector (the model's gauges read loop-only state); the families
    it yields are plain values, safe to read from another thread."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(auto_describe=False)
        self._families = list(registry.collect())

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def claimed_gpus(node: Node) -> int:
    """GPU-like DRA devices of the node that allocated claims hold (0 without DRA)."""
    if node.devices is None:
        return 0
    return max(0, node.devices.gpus - node.allocatable.get(DRA_GPU))


def claims_off_node(state: ClusterState) -> int:
    """Allocated claims of bound pods whose allocation their node cannot reach."""
    off = 0
    for pod in state.pods():
        needs = pod.devices
        if needs is None or not pod.node_name:
            continue
        info = state.node(pod.node_name)
        if info is None:
            continue
        for claim in needs.demand.claims:
            terms = claim.node_terms
            if claim.allocated and terms is not None:
                off += not any(term_matches(t, info.node) for t in terms)
    return off


class _ModelCollector(Collector):
    def __init__(
        self,
        state: ClusterState,
        partial_gangs: Callable[[], list[str]],
        synced: Callable[[], bool],
    ) -> None:
        self.state = state
        self.partial_gangs = partial_gangs
        self.synced = synced

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # computed at collect time; avoids a collect during registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.state
        rows: list[tuple[str, int, int, int]] = []
        totals = {"free": 0, "used": 0, "reserved": 0}
        for info in sorted(state.nodes(), key=lambda i: i.name):
            alloc = info.node.allocatable.gpus()
            requested = info.requested.gpus()
            # A DRA node's allocatable holds its free devices only: the ones its allocated
            # ResourceClaims hold are used too, as bound pods' nvidia.com/gpu are.
            used = requested + claimed_gpus(info.node)
            if not alloc and not used:
                continue
            reserved = info.reserved.gpus()
            free = max(0, alloc - requested - reserved)
            rows.append((info.name, free, used, reserved))
            totals["free"] += free
            totals["used"] += used
            totals["reserved"] += reserved
        yield _PerNodeGpus(rows)
        cluster = GaugeMetricFamily(
            "phalanx_cluster_gpus", "GPUs in the cluster by state.", labels=["state"]
        )
        for name, value in totals.items():
            cluster.add_metric([name], value)
        yield cluster
        yield GaugeMetricFamily(
            "phalanx_reserved_gpus",
            "GPUs reserved for gangs and not yet bound (returns to 0 when all bind or expire).",
            value=state.reserved_gpus(),
        )
        yield GaugeMetricFamily(
            "phalanx_reservations", "Gangs holding a reservation.", value=len(state.reservations())
        )
        yield GaugeMetricFamily(
            "phalanx_partial_gangs",
            "Gangs with some but fewer than minMember members bound (must stay 0).",
            value=len(self.partial_gangs()),
        )
        yield GaugeMetricFamily(
            "phalanx_cache_synced",
            "1 once the cluster source has loaded every kind, else 0.",
            value=1 if self.synced() else 0,
        )
        yield GaugeMetricFamily(
            "phalanx_overcommitted_nodes",
            "Nodes whose requests plus reservations exceed allocatable.",
            value=len(state.overcommitted_nodes()),
        )
        yield GaugeMetricFamily(
            "phalanx_dra_claims_off_node",
            "Allocated ResourceClaims of bound pods that their pod's node cannot reach "
            "(kube-scheduler allocated devices elsewhere than the node Phalanx placed the pod "
            "on; must be 0).",
            value=claims_off_node(state),
        )


class _PerNodeGpus(GaugeMetricFamily):
    """`phalanx_gpus`: three samples a node, made where they are first read. The loop keeps
    the numbers only; a scrape formats on a worker thread (`Metrics.exposition`), and
    making 15,000 samples for 5,000 nodes was 40 % of what it left on the loop."""

    def __init__(self, rows: list[tuple[str, int, int, int]]) -> None:
        self._rows: list[tuple[str, int, int, int]] | None = rows
        self._made: list[Sample] = []
        super().__init__(
            "phalanx_gpus",
            "GPUs per node by state (free, used, reserved).",
            labels=["node", "state"],
        )

    @property
    def samples(self) -> list[Sample]:
        rows, self._rows = self._rows, None
        if rows is not None:
            name = self.name
            self._made = [
                Sample(name, {"node": node, "state": state}, float(value))
                for node, free, used, reserved in rows
                for state, value in (("free", free), ("used", used), ("reserved", reserved))
            ]
        return self._made

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._made = value


class _TopologyCollector(Collector):
    def __init__(self, usage: TopologyUsage) -> None:
        self.usage = usage

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # computed at collect time; avoids a collect during registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        free = GaugeMetricFamily(
            "phalanx_topology_free_domains",
            "Domains of each topology level with every GPU free (whole NVLink cliques, "
            "leaves, ...): what a rack-sized gang needs.",
            labels=["topology", "level"],
        )
        total = GaugeMetricFamily(
            "phalanx_topology_domains",
            "Domains of each topology level that have GPUs.",
            labels=["topology", "level"],
        )
        inconsistent = GaugeMetricFamily(
            "phalanx_topology_inconsistent_nodes",
            "Nodes whose topology labels contradict the others' (e.g. a clique under two "
            "leaves); each is treated as its own domain.",
            labels=["topology"],
        )
        for index, levels in self.usage():
            name = index.topology.name
            for level in levels:
                free.add_metric([name, level.level], level.free)
                total.add_metric([name, level.level], level.total)
            inconsistent.add_metric([name], len({f.node for f in index.findings}))
        yield free
        yield total
        yield inconsistent


class _ApiClientCollector(Collector):
    def __init__(self, counts: Callable[[], AsyncKubeCounts]) -> None:
        self.counts = counts

    def describe(self) -> list[CounterMetricFamily]:
        return []  # computed at collect time; avoids a collect during registration

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self.counts()
        # Named after the fields of AsyncKubeCounts, one family each.
        for name, what, value in (
            ("attempts", "Requests the API client sent, retries included.", counts.attempts),
            (
                "retries",
                "Attempts the API client made again after a backoff (after a 429, a 5xx or no "
                "answer).",
                counts.retries,
            ),
            (
                "throttled",
                "429 Too Many Requests answers: the API server asked the client to slow down.",
                counts.throttled,
            ),
            ("server_errors", "5xx answers from the API server.", counts.server_errors),
            (
                "no_answer",
                "Attempts that got no answer: connection refused, reset or timed out.",
                counts.no_answer,
            ),
        ):
            yield CounterMetricFamily(f"phalanx_api_client_{name}", what, value=value)
        for name, what, by_lane in (
            (
                "token_wait_seconds",
                "Time requests waited for the API client's own QPS/burst token bucket, by lane "
                "(bind: bindings and commit records, which do not queue behind reports; "
                "report: best-effort writes).",
                counts.token_wait_seconds,
            ),
            (
                "slot_wait_seconds",
                "Time requests waited for an in-flight slot of the API client, by lane (bind: "
                "bindings and commit records; report: best-effort writes).",
                counts.slot_wait_seconds,
            ),
        ):
            family = CounterMetricFamily(f"phalanx_api_client_{name}", what, labels=["lane"])
            for lane, seconds in sorted(by_lane.items()):
                family.add_metric([lane], seconds)
            yield family
