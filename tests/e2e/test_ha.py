"""High availability, proven on the real control plane: the chart run with two replicas.

Each replica is the chart's pod re-enacted process by process (there is no kubelet here):
a real kube-scheduler running the rendered ``KubeSchedulerConfiguration`` — leader election
on, the chart's lease timings (15 s / 10 s / 2 s), both replicas on one Lease — and its own
``phalanx serve`` on its own loopback port, which only that kube-scheduler calls.

* The leader (kube-scheduler and Phalanx together, SIGKILL) dies in the middle of a contended
  run, holding a reservation at its bind barrier and the ``phalanx-rollforward`` Lease. The
  standby takes over, places the gangs, and finishes from its commit record the gang the
  crash left half bound. An invariant monitor samples the API all along: no gang is ever
  partial beyond its bind fan-out, except the one the crash cut, which is made whole.
* Nothing acts on a standby: its extender gets no request while its kube-scheduler is not
  the leader, and no Phalanx rolls anything forward without the ``phalanx-rollforward``
  Lease (held here by the test itself, then released).

The failover time — SIGKILL of the leader to the first pod the new leader binds — is
printed (run with ``-s``); docs/operations.md quotes it.
"""

from __future__ import annotations

import contextlib
import itertools
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
import yaml
from conftest_scheduling import LEASE_NAMESPACE, scheduler_config
from phalanx_process import PhalanxProcess
from podgroup_crd import ensure_pod_group_crd
from scheduling import (
    A_COMMIT,
    MAX_PARTIAL_SECONDS,
    PG_API,
    POD_GROUP_LABEL,
    POOL_LABEL,
    Api,
    Gang,
    Scenario,
    Window,
)

from phalanx.core.rollforward import CommitRecord, encode_commit_record
from phalanx.sources.lease import LEASE_NAME as ROLLFORWARD_LEASE

pytestmark = pytest.mark.e2e

# `phalanx serve --kubeconfig` keeps its roll-forward Lease in "default".
ROLLFORWARD_PATH = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{ROLLFORWARD_LEASE}"
ROLLED = (
    "rolling gang forward from its commit record",
    "gang complete; clearing its commit record",
)

NODES = {"a": 8, "b": 8, "c": 8, "d": 8}  # 32 GPUs
# name: (members, GPUs per member, form) — 56 GPUs of gangs besides the held one
CONTENDERS = {
    "four-by-two": (4, 2, "podgroup"),
    "two-by-four": (2, 4, "podgroup"),
    "eight-by-one": (8, 1, "podgroup"),
    "three-by-four": (3, 4, "annotations"),
    "two-by-eight": (2, 8, "podgroup"),
    "four-by-one": (4, 1, "annotations"),
}


def lease_holder(cp: launcher.ControlPlane, path: str) -> str:
    status, lease = cp.request("GET", path)
    return str((lease.get("spec") or {}).get("holderIdentity") or "") if status == 200 else ""


class Replica:
    """One scheduler pod of the chart: kube-scheduler and its own Phalanx on loopback."""

    def __init__(self, cp: launcher.ControlPlane, name: str, lease: str) -> None:
        self.cp = cp
        self.name = name
        workdir = cp.workdir / f"ha-{name}-{uuid.uuid4().hex[:6]}"
        workdir.mkdir(parents=True)
        self.phalanx = PhalanxProcess(cp.kubeconfig, workdir, name=f"phalanx-{name}")
        config, _ = scheduler_config(self.phalanx.url, lease)
        rendered = cp.render_scheduler_config(yaml.safe_dump(config))
        # The chart's own client rate limits, not the launcher's benchmark defaults.
        rendered["clientConnection"].update(config.get("clientConnection") or {})
        rendered["clientConnection"]["kubeconfig"] = str(cp.scheduler_kubeconfig)
        self.config = rendered
        config_path = workdir / "kube-scheduler.yaml"
        config_path.write_text(yaml.safe_dump(rendered, sort_keys=False))
        (self.port,) = launcher.free_ports(1)
        self.scheduler = launcher.Component(
            f"kube-scheduler {name}",
            [
                str(cp.tools["kube-scheduler"]),
                f"--config={config_path}",
                f"--bind-address={launcher.LOOPBACK}",
                f"--secure-port={self.port}",
                f"--authentication-kubeconfig={cp.scheduler_kubeconfig}",
                f"--authorization-kubeconfig={cp.scheduler_kubeconfig}",
                f"--cert-dir={workdir / 'certs'}",
                "--v=2",
            ],
            workdir / "kube-scheduler.log",
        )

    def start_scheduler(self) -> None:
        self.scheduler.start()
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; loopback only
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)
        )

        def healthy() -> bool:
            self.scheduler.check_alive()
            url = f"https://{launcher.LOOPBACK}:{self.port}/healthz"
            with opener.open(url, timeout=2) as resp:
                return bool(resp.status == 200)

        launcher.wait_for(
            f"kube-scheduler {self.name} /healthz",
            healthy,
            timeout=60,
            on_timeout=self.scheduler.tail,
        )

    def kill(self) -> None:
        """The pod dies: SIGKILL to kube-scheduler and Phalanx, no goodbye."""
        self.scheduler.stop(kill=True)
        self.phalanx.kill()

    def stop(self) -> None:
        self.scheduler.stop()
        self.phalanx.close()

    def served(self) -> float:
        """Extender requests this replica's Phalanx has answered, every verb."""
        return self.phalanx.metric("phalanx_request_duration_seconds_count")

    def rolled_forward(self, *, before: str = "") -> list[dict[str, Any]]:
        """Its log lines of roll-forward acts (optionally only those logged before `before`)."""
        return [
            r
            for r in self.phalanx.log_records()
            if r.get("msg") in ROLLED and (not before or str(r.get("ts", "")) < before)
        ]

    def duty_acquired_at(self) -> str:
        """When its log says it took the roll-forward Lease ("" if never)."""
        return next(
            (
                str(r.get("ts", ""))
                for r in self.phalanx.log_records()
                if r.get("msg") == "roll-forward duty acquired"
            ),
            "",
        )


@pytest.fixture
def replicas(control_plane: launcher.ControlPlane) -> Iterator[Callable[[str], Replica]]:
    ensure_pod_group_crd(control_plane)
    lease = f"phalanx-scheduler-ha-{uuid.uuid4().hex[:8]}"
    made: list[Replica] = []

    def make(name: str) -> Replica:
        made.append(Replica(control_plane, name, lease))
        return made[-1]

    yield make
    for replica in made:
        replica.stop()


def _stamp() -> str:
    """Now in the log's `ts` format (UTC, milliseconds), for ordering against log lines."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# ---- the failover run ----------------------------------------------------------------------------


@dataclass
class Failover:
    """When the standby took over, sampled every 0.1 s on a thread of its own (monotonic):

    * `leader_at` — its kube-scheduler holds the scheduler Lease;
    * `first_bind_at` — its Phalanx made its first binding (any path: roll-forward too);
    * `scheduled_at` — the first pod bound through its kube-scheduler: a pod of the run
      (not of the crash's half-bound gang) bound after the Lease changed hands.
    """

    cp: launcher.ControlPlane
    namespace: str
    lease_path: str
    old_holder: str
    standby: Replica
    skip: frozenset[str]  # pods not scheduled through kube-scheduler (roll-forward's)
    killed_at: float = 0.0
    leader_at: float | None = None
    new_holder: str = ""
    first_bind_at: float | None = None
    scheduled_at: float | None = None
    scheduled: str = ""
    _bound_at_lease: frozenset[str] = frozenset()
    _last_bound: frozenset[str] = frozenset()
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.killed_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="failover-clock", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return None not in (self.leader_at, self.first_bind_at, self.scheduled_at)

    def _run(self) -> None:
        api = Api(self.cp, timeout=5.0)
        try:
            while not self._stop.is_set() and not self.done:
                with contextlib.suppress(Exception):  # a failed sample is retried 0.1 s later
                    self._sample(api)
                self._stop.wait(0.1)
        finally:
            api.close()

    def _sample(self, api: Api) -> None:
        now = time.monotonic()
        holder = lease_holder(self.cp, self.lease_path)  # before the pods: see below
        pods = api.items(f"/api/v1/namespaces/{self.namespace}/pods")
        bound = frozenset(
            p["metadata"]["name"]
            for p in pods
            if p["spec"].get("nodeName") and p["metadata"]["name"] not in self.skip
        )
        if self.leader_at is None and holder and holder != self.old_holder:
            # Against the pods of the last sample that still saw the old holder: whatever
            # bound since went through the new leader (the old one died seconds before).
            self.leader_at, self.new_holder = now, holder
            self._bound_at_lease = self._last_bound
        if self.leader_at is not None and self.scheduled_at is None:
            new = bound - self._bound_at_lease
            if new:
                self.scheduled_at, self.scheduled = now, min(new)
        self._last_bound = bound
        made = self.standby.phalanx.metric("phalanx_bindings_total", result="bound")
        if self.first_bind_at is None and made > 0:
            self.first_bind_at = now

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def describe(self) -> str:
        def since(at: float | None) -> str:
            return f"{at - self.killed_at:.1f} s" if at is not None else "never"

        return (
            f"leader SIGKILLed → the standby's kube-scheduler holds the Lease after "
            f"{since(self.leader_at)}; first pod it scheduled ({self.scheduled}) bound after "
            f"{since(self.scheduled_at)}; its Phalanx's first binding (any path) after "
            f"{since(self.first_bind_at)}"
        )


def _judge(sc: Scenario, gangs: list[Gang]) -> tuple[list[Gang], list[Gang]]:
    """(whole gangs, empty gangs); fails on a gang with some but not all members bound."""
    where = sc.placement()
    whole: list[Gang] = []
    empty: list[Gang] = []
    for gang in gangs:
        bound = sum(1 for m in gang.members if where.get(m))
        assert bound in (0, len(gang.members)), (
            f"gang {gang.name} ended with {bound}/{len(gang.members)} bound\n{sc.diagnostics()}"
        )
        (whole if bound else empty).append(gang)
    return whole, empty


def _cut_gang(
    sc: Scenario, gpu_nodes: Callable[..., dict[str, Any]]
) -> tuple[Gang, dict[str, str]]:
    """What a leader SIGKILLed between two bindings of a gang leaves: one member bound to
    its recorded node, carrying the gang's commit record (its binding wrote it onto the
    pod). SIGKILL cannot be aimed at that window of milliseconds, so the test makes it, as
    the dying leader would have (on nodes of their own, so the contenders cannot take its
    recorded places)."""
    pool = f"{sc.namespace}-cut"
    nodes = [f"{pool}-{i}" for i in range(2)]
    for node in nodes:
        gpu_nodes(node, gpus=8, labels={POOL_LABEL: pool}, wait_ready=False)
    for node in nodes:
        sc.cp.wait_node_ready(node)
    sc.pod_group("cut", 3)
    gang = Gang("cut", tuple(f"cut-{i}" for i in range(3)), 3, 2, "podgroup")
    for member in gang.members:
        sc.pod(member, 2, labels={POD_GROUP_LABEL: "cut"}, node_selector={POOL_LABEL: pool})
    pods = sc.pods()
    recorded = {gang.members[0]: nodes[0], gang.members[1]: nodes[0], gang.members[2]: nodes[1]}
    keys = {f"{sc.namespace}/{p}": n for p, n in recorded.items()}
    uids = {f"{sc.namespace}/{p}": pods[p]["metadata"]["uid"] for p in recorded}
    record = CommitRecord(f"{sc.namespace}/cut", keys, uids)
    written = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    first = gang.members[0]
    sc.api.create(
        f"/api/v1/namespaces/{sc.namespace}/pods/{first}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": first,
                "uid": pods[first]["metadata"]["uid"],
                "annotations": {A_COMMIT: encode_commit_record(record, written)},
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": recorded[first]},
        },
    )
    return gang, recorded


def test_the_standby_takes_over_when_the_leader_dies_mid_run_and_no_gang_stays_partial(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    replicas: Callable[[str], Replica],
) -> None:
    cp = control_plane
    first, second = replicas("a"), replicas("b")
    # The leader's pair first, so it holds both Leases before the standby exists.
    first.phalanx.start()
    launcher.wait_for(
        "replica a holds the roll-forward Lease",
        first.duty_acquired_at,
        timeout=40,
        on_timeout=first.phalanx.tail,
    )
    first.start_scheduler()
    lease_path = (
        f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/"
        f"{first.config['leaderElection']['resourceName']}"
    )
    leader = launcher.wait_for(
        "replica a's kube-scheduler leads", lambda: lease_holder(cp, lease_path), timeout=30
    )
    second.phalanx.start()
    second.start_scheduler()

    api = Api(cp)
    sc = Scenario(cp, api, first.phalanx, namespace, gpu_nodes)
    sc.monitor.start()
    try:
        for suffix, gpus in NODES.items():
            sc.node(suffix, gpus)
        sc.nodes_ready()
        sc.phalanx = second.phalanx  # the standby's model holds them too
        sc.nodes_ready()
        sc.phalanx = first.phalanx

        # A reservation held at the leader's barrier: two members wait for the third.
        held = sc.gang("held", 3, 2, held=[2])
        first.phalanx.wait_metric(
            "phalanx_barrier_waiting", lambda v: v == 2, what="held at the leader's barrier"
        )
        # The contest: every contender's members reach kube-scheduler interleaved.
        gangs = [
            sc.gang(name, size, gpus, form=form, create=0)
            for name, (size, gpus, form) in CONTENDERS.items()
        ]
        queues = [[(g, i) for i in range(len(g.members))] for g in gangs]
        order = [x for x in itertools.chain.from_iterable(itertools.zip_longest(*queues)) if x]
        for gang, i in order:
            sc.add_member(gang, i, gated=True)
        for gang, i in order:
            sc.ungate(gang.members[i])
        sc.wait("a contender bound whole", lambda: any(sc.bound_count(g) for g in gangs))

        # ---- the standby has done nothing so far
        assert lease_holder(cp, lease_path) == leader
        assert second.served() == 0, "the standby's extender was called by its kube-scheduler"
        assert second.phalanx.metric("phalanx_bindings_total") == 0
        assert not second.duty_acquired_at(), "the standby took the roll-forward Lease"

        # ---- the leader dies, Phalanx and all
        cut_pods = frozenset(f"cut-{i}" for i in range(3))
        clock = Failover(cp, namespace, lease_path, leader, second, skip=cut_pods)
        first.kill()
        killed = _stamp()
        clock.start()
        sc.phalanx = second.phalanx
        cut, recorded = _cut_gang(sc, gpu_nodes)
        sc.ungate(held.members[2])

        cut_where = sc.wait_gang(cut, timeout=90)
        cut_whole = time.monotonic() - clock.killed_at
        sc.wait(
            "the new leader's first bind",
            lambda: clock.done,
            timeout=90,
        )
        clock.stop()
        print(f"\nfailover ({first.config['leaderElection']}): {clock.describe()}")
        assert clock.new_holder not in ("", leader)

        # ---- the crash's half-bound gang: rolled forward or completed; the record its
        # first member carries stays there, settled (docs/design.md)
        assert cut_where[cut.members[0]] == recorded[cut.members[0]]
        assert A_COMMIT in sc.pods()[cut.members[0]]["metadata"]["annotations"]

        # ---- the contest finishes under the new leader: whole or empty, then whole
        contenders = [held, *gangs]
        sc.wait_quiet(settle=4.0, timeout=120)
        whole, empty = _judge(sc, contenders)
        sc.delete_pods([m for g in whole for m in g.members])
        if empty:
            sc.wait(
                "a waiting gang placed by the new leader",
                lambda: any(sc.bound_count(g) for g in empty),
                timeout=60,
            )
        sc.wait_quiet(settle=4.0, timeout=120)
        whole_after, _ = _judge(sc, empty)
        assert whole_after or not empty, "no waiting gang was placed after capacity was freed"
        assert second.phalanx.metric("phalanx_partial_gangs") == 0
        assert second.phalanx.metric("phalanx_reserved_gpus") == 0
        assert second.phalanx.metric("phalanx_overcommitted_nodes") == 0
        assert second.served() > 0
        verdict = sc.monitor.stop()
    finally:
        sc.monitor.stop()
        api.close()

    # ---- the invariant, sampled all along
    def cut_by_the_kill(window: Window) -> bool:
        # A fan-out the kill cut short is seen by the sample after it, which may end after the
        # kill: such a window may have opened as early as the sample before began.
        return window.group == "cut" or (
            window.since <= clock.killed_at <= (window.end or time.monotonic())
        )

    assert not verdict.crashed, verdict.crashed
    assert not verdict.overcommits, verdict.describe()
    assert not verdict.open_windows, f"a gang ended partially bound: {verdict.describe()}"
    fan_outs = [w for w in verdict.windows if not cut_by_the_kill(w)]
    assert all(w.seconds < MAX_PARTIAL_SECONDS for w in fan_outs), verdict.describe()
    cuts = [w for w in verdict.windows if cut_by_the_kill(w)]
    assert {w.group for w in cuts} >= {"cut"}, verdict.describe()
    acts = [r["msg"] for r in second.rolled_forward() if r.get("group") == f"{namespace}/cut"]
    print(
        f"the half-bound gang was whole {cut_whole:.1f} s after the kill ({acts}); "
        f"partial windows the kill cut: {[(w.group, round(w.seconds, 1)) for w in cuts]}"
    )
    # Nobody rolled forward on the standby before the leader died; afterwards it did, or
    # the new leader's kube-scheduler completed the gang first (its record then cleared).
    assert not second.rolled_forward(before=killed)
    assert second.duty_acquired_at() > killed
    assert second.rolled_forward(), "the new holder never looked at the record"


# ---- the roll-forward Lease --------------------------------------------------------------------


def _hold(cp: launcher.ControlPlane, holder: str, duration: int) -> None:
    """Write the roll-forward Lease as `holder` (what a live holder's renewal looks like)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": ROLLFORWARD_LEASE, "namespace": "default"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": now,
            "renewTime": now,
        },
    }
    status, _ = cp.request("GET", ROLLFORWARD_PATH)
    if status == 404:
        status, answer = cp.request("POST", ROLLFORWARD_PATH.rsplit("/", 1)[0], body)
    else:
        status, answer = cp.request(
            "PATCH", ROLLFORWARD_PATH, body, content_type="application/merge-patch+json"
        )
    assert status in (200, 201), answer


def test_no_phalanx_rolls_forward_without_the_lease(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    replicas: Callable[[str], Replica],
) -> None:
    cp = control_plane
    # Someone else holds the duty (for an hour): two Phalanx replicas start as followers.
    _hold(cp, "someone-else", 3600)
    pair = [replicas("a"), replicas("b")]
    for replica in pair:
        replica.phalanx.start()
    api = Api(cp)
    try:
        sc = Scenario(cp, api, pair[0].phalanx, namespace, gpu_nodes)
        a = sc.node("a", 8)
        sc.nodes_ready()
        # A half-bound gang whose record is long past the grace a live barrier gets: any
        # holder of the duty would bind the rest at its next pass (every 2 s).
        gang = sc.gang("stranded", 2, 2)  # no kube-scheduler runs: only roll-forward binds
        pods = sc.pods()
        keys = {f"{namespace}/{m}": a for m in gang.members}
        uids = {f"{namespace}/{m}": pods[m]["metadata"]["uid"] for m in gang.members}
        written = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        record = encode_commit_record(CommitRecord(f"{namespace}/stranded", keys, uids), written)
        sc.api.merge_patch(
            f"{PG_API}/namespaces/{namespace}/podgroups/stranded",
            {"metadata": {"annotations": {A_COMMIT: record}}},
        )
        first = gang.members[0]
        sc.api.create(
            f"/api/v1/namespaces/{namespace}/pods/{first}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": first, "uid": pods[first]["metadata"]["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": a},
            },
        )
        for replica in pair:  # both have seen the record
            replica.phalanx.wait_metric(
                "phalanx_gpus", lambda v: v == 2, labels={"node": a, "state": "used"}
            )

        # Several passes go by: neither follower acts.
        sc.assert_unbound_for([gang.members[1]], seconds=8.0)
        assert [r.rolled_forward() for r in pair] == [[], []]
        assert [r.duty_acquired_at() for r in pair] == ["", ""]

        # The holder lets go: one replica takes the duty and finishes the gang.
        _hold(cp, "", 1)
        sc.wait_gang(gang, timeout=40)
        actors = [r.name for r in pair if r.rolled_forward()]
        holders = [r.name for r in pair if r.duty_acquired_at()]
        assert len(actors) == 1, actors
        assert actors == holders
    finally:
        api.close()
        _hold(cp, "", 1)  # leave the Lease free for the next test's Phalanx
