"""kube-scheduler restarted (an upgrade, a failover, a crash) while Phalanx holds gang
members' ``/bind`` requests, through the real kube-scheduler and Phalanx.

When kube-scheduler dies, every ``/bind`` it had Phalanx hold is cut, and the next one starts
from nothing: it lists the pending pods again, knows nothing of what Phalanx reserved, and
filters the held members again. kube-scheduler is restarted as its container is, with the
same configuration and Lease: after a SIGTERM it has released the Lease and the next one leads
at once; after a SIGKILL the next one waits out the dead one's Lease (the chart's 15 s), longer
than the barrier timeout here.

Phalanx does not notice a cut ``/bind``: the member stays counted at its gate, as a member
whose bind was answered after the barrier timeout is, and is bound with its gang. The next
kube-scheduler's filter follows the reservation and its ``/bind`` of the same member replaces
the cut one; if the gate gave up first (no new member for the barrier timeout), the
reservation was released and that filter plans the gang again. A gang that gets its last
member while no kube-scheduler runs is not bound by Phalanx alone (a standby's kube-scheduler
may lead by then): the gate gives it up at the barrier timeout and the next kube-scheduler
plans it again. Bindings in flight are Phalanx's own: they land whatever happens to
kube-scheduler. Whatever the path, the gang
ends whole, each member bound once, no node over-committed (the invariant monitor samples the
API throughout), and nothing stays reserved or held at Phalanx's barrier.

A member is kept from kube-scheduler by a scheduling gate, so its siblings' ``/bind``
requests wait at the barrier (as in ``test_faults``). Bindings in flight when kube-scheduler
dies are made so on purpose: a validating admission webhook on ``pods/binding`` (served here,
on loopback) holds Phalanx's bindings at the API server until the test lets them through.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Collection, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import Scheduler, cluster, phalanx, scheduler  # noqa: F401  # fixtures
from phalanx_process import PhalanxProcess
from scheduling import Gang, PodWatch, Scenario, bound_node

from phalanx.service.extender import ACTS_ALONE_SECONDS

pytestmark = pytest.mark.e2e

# The barrier gives a gang up 8 s after its last new member reached bind (instead of 20 s):
# shorter than the Lease a SIGKILLed kube-scheduler leaves behind (15 s), so that path
# crosses a barrier timeout, and the tests stay short.
BARRIER_TIMEOUT_SECONDS = 8
PHALANX_ARGS = [f"--barrier-timeout-seconds={BARRIER_TIMEOUT_SECONDS}"]
SIGNALS = pytest.mark.parametrize("kill", [True, False], ids=["SIGKILL", "SIGTERM"])
# A SIGKILLed kube-scheduler's successor leads once the Lease lapses (15 s), then cycles.
NEXT_LEADER_SECONDS = 45.0
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def _binds_answered(sc: Scenario) -> float:
    return sc.phalanx.metric("phalanx_request_duration_seconds_count", verb="bind")


def _failed_bindings(sc: Scenario) -> float:
    """Bindings Phalanx made that the API refused or that failed (a second binding of a
    bound pod is refused as a conflict)."""
    return sum(
        sc.phalanx.metric("phalanx_bindings_total", result=r)
        for r in ("failed", "conflict", "gone")
    )


def _releases(sc: Scenario, **cause: str) -> float:
    """Reservations Phalanx released (of ``cause=...`` only, if given)."""
    return sc.phalanx.metric("phalanx_releases_total", **cause)


def _errors_logged(sc: Scenario, since: int) -> list[dict[str, Any]]:
    """Phalanx's error lines after its first ``since`` log lines (a failure inside a verb
    or the barrier is logged so: the answer would have been a 500)."""
    return [r for r in sc.phalanx.log_records()[since:] if r.get("level") in ("error", "critical")]


def _bound_once(watch: PodWatch, members: Collection[str]) -> dict[str, list[str]]:
    """Each member's nodes as the watch saw them: one node each, never moved."""
    seen = {m: sorted({bound_node(p) for p in watch.versions(m)} - {""}) for m in members}
    return {m: nodes for m, nodes in seen.items() if len(nodes) != 1}


def _settled(sc: Scenario, gang: Gang) -> None:
    """Nothing of the gang left reserved or held at Phalanx, and no partial gang."""
    sc.phalanx.wait_metric("phalanx_reserved_gpus", lambda v: v == 0, timeout=15)
    sc.wait_held(0, timeout=15)
    view = sc.phalanx.debug_group(sc.namespace, gang.name)
    assert view is not None
    assert view["reservation"] is None, view
    assert sc.phalanx.metric("phalanx_partial_gangs") == 0


def _leads_again(sc: Scenario, name: str) -> None:
    """The new kube-scheduler schedules: a pod created now is bound by it."""
    sc.pod(name, 0)  # no GPU: it fits beside the gang
    sc.wait_bound([name], timeout=NEXT_LEADER_SECONDS)


# ---- binds held at the barrier ---------------------------------------------------------------


@SIGNALS
def test_a_gang_held_at_bind_when_kube_scheduler_restarts_ends_whole_through_the_next_one(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    kill: bool,
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    failed, logged = _failed_bindings(cluster), len(phalanx.log_records())
    with PodWatch(cluster.cp, cluster.namespace) as watch:
        gang = cluster.gang("restart", 4, 2, held=[3])
        cluster.wait_held(3)
        answered, released = _binds_answered(cluster), _releases(cluster)
        given_up = _releases(cluster, cause="barrier")
        try:
            scheduler.stop(kill=kill)  # its three held /bind requests are cut
            time.sleep(1.0)
            assert cluster.bound_count(gang) == 0
            scheduler.start_again()
            # Three /bind requests answered, to nobody: the cut ones, each replaced by the
            # next kube-scheduler's bind of the same member at the same gate, or all three
            # at once when the gate gave up before it led.
            phalanx.wait_metric(
                "phalanx_request_duration_seconds_count",
                lambda v: v >= answered + 3,
                labels={"verb": "bind"},
                timeout=NEXT_LEADER_SECONDS,
                what="the cut /bind requests answered",
            )
            cluster.wait_held(3, timeout=NEXT_LEADER_SECONDS)  # the next one's binds
            assert cluster.bound_count(gang) == 0
        finally:
            scheduler.ensure_running()
        if kill:
            # The next kube-scheduler waited out the dead one's Lease (15 s): the gate gave
            # the gang up after the barrier timeout and its filters planned it again.
            assert _releases(cluster) - released == 1
            assert _releases(cluster, cause="barrier") - given_up == 1
            cluster.wait_event(
                gang.name,
                f"only 3 of 4 member(s) reached bind within {BARRIER_TIMEOUT_SECONDS}s",
                reason="ReservationReleased",
            )
        else:
            # It released the Lease on the way out: the next one led at once and its binds
            # joined the gate the cut ones had opened, the reservation untouched.
            assert _releases(cluster) == released
        cluster.ungate(gang.members[3])
        where = cluster.wait_gang(gang, timeout=30)
        _settled(cluster, gang)
    assert len(where) == 4
    assert not _bound_once(watch, gang.members), _bound_once(watch, gang.members)
    assert _failed_bindings(cluster) == failed
    assert not _errors_logged(cluster, logged), _errors_logged(cluster, logged)


@SIGNALS
def test_a_gang_held_at_bind_is_not_bound_by_phalanx_alone_while_no_kube_scheduler_runs(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    kill: bool,
) -> None:
    # The late member is let through while no kube-scheduler runs. The gate still counts the
    # three members whose /bind was cut, but nobody has asked Phalanx anything for longer
    # than it waits before acting alone: with several replicas, a standby's kube-scheduler
    # may lead by now and plan over the gang. So the gate does not open by itself; it gives
    # the gang up at the barrier timeout, and the next kube-scheduler plans it again.
    cluster.node("a", 8)
    cluster.nodes_ready()
    logged = len(phalanx.log_records())
    gang = cluster.gang("alone", 4, 2, held=[3])
    cluster.wait_held(3)
    completed = phalanx.metric("phalanx_members_completed_total")
    given_up = _releases(cluster, cause="barrier")
    try:
        scheduler.stop(kill=kill)
        time.sleep(ACTS_ALONE_SECONDS + 1)
        cluster.ungate(gang.members[3])
        phalanx.wait_metric(
            "phalanx_releases_total",
            lambda v: v >= given_up + 1,
            labels={"cause": "barrier"},
            timeout=BARRIER_TIMEOUT_SECONDS + 10,
            what="the gate given up",
        )
        assert cluster.bound_count(gang) == 0
        assert phalanx.metric("phalanx_members_completed_total") == completed
    finally:
        scheduler.start_again()
    where = cluster.wait_gang(gang, timeout=NEXT_LEADER_SECONDS)
    _settled(cluster, gang)
    assert len(where) == 4
    assert not _errors_logged(cluster, logged), _errors_logged(cluster, logged)


# ---- bindings in flight --------------------------------------------------------------------


class _HoldBindings(BaseHTTPRequestHandler):
    """A validating webhook on ``pods/binding`` that holds the bindings of ``server.held``
    pods until ``server.release`` is set; it allows everything."""

    server: _Webhook

    def do_POST(self) -> None:  # http.server's name
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        name = str(request.get("name", ""))
        with self.server.lock:
            self.server.seen.append((name, bool(request.get("dryRun"))))
        if name in self.server.held and not request.get("dryRun"):
            self.server.release.wait(20)
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": request["uid"], "allowed": True},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Webhook(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, held: Collection[str]) -> None:
        super().__init__((launcher.LOOPBACK, 0), _HoldBindings)
        self.held = set(held)
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.seen: list[tuple[str, bool]] = []

    def holding(self) -> list[str]:
        with self.lock:
            return [n for n, dry in self.seen if not dry and n in self.held]


@contextlib.contextmanager
def bindings_held(sc: Scenario, members: Collection[str]) -> Iterator[_Webhook]:
    """Bindings of ``members`` held at the API server (a webhook in the test's namespace)
    until the block sets ``release`` or ends."""
    webhook = _Webhook(members)
    # The API server's own serving certificate names 127.0.0.1 and is signed by the CA it
    # trusts: good enough for a webhook on loopback.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    pki = sc.cp.pki_dir
    context.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
    webhook.socket = context.wrap_socket(webhook.socket, server_side=True)
    thread = threading.Thread(target=webhook.serve_forever, name="hold-bindings", daemon=True)
    thread.start()
    name = f"hold-bindings-{sc.namespace}"
    port = webhook.server_address[1]
    sc.api.create(
        WEBHOOKS,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "hold-bindings.e2e.phalanx.io",
                    "clientConfig": {
                        "url": f"https://{launcher.LOOPBACK}:{port}/",
                        "caBundle": base64.b64encode(sc.cp.ca_file.read_bytes()).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": sc.namespace}
                    },
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 20,
                }
            ],
        },
    )
    try:
        # In force once the API server has read it: a dry-run binding reaches it then.
        def in_force() -> bool:
            sc.api.call(
                "POST",
                f"/api/v1/namespaces/{sc.namespace}/pods/webhook-probe/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": "webhook-probe"},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "nowhere"},
                },
                params={"dryRun": "All"},
                expect=range(200, 600),
            )
            with webhook.lock:
                return any(n == "webhook-probe" for n, _ in webhook.seen)

        sc.wait("the binding webhook in force", in_force, timeout=15)
        yield webhook
    finally:
        webhook.release.set()
        sc.api.delete(f"{WEBHOOKS}/{name}")
        webhook.shutdown()
        webhook.server_close()


@SIGNALS
def test_kube_scheduler_dying_while_a_gang_s_bindings_are_in_flight_leaves_it_whole(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    kill: bool,
) -> None:
    cluster.node("a", 8)
    cluster.nodes_ready()
    failed, logged = _failed_bindings(cluster), len(phalanx.log_records())
    gang = cluster.gang("flight", 4, 2, held=[3])
    cluster.wait_held(3)
    try:
        with bindings_held(cluster, gang.members) as webhook:
            cluster.ungate(gang.members[3])  # the gate opens: Phalanx binds the four
            cluster.wait(
                "Phalanx's bindings held at the API server",
                lambda: len(set(webhook.holding())) == 4,
                timeout=10,
            )
            scheduler.stop(kill=kill)
            assert cluster.bound_count(gang) == 0  # all four in flight, none landed
            webhook.release.set()
            where = cluster.wait_gang(gang, timeout=15)
        assert set(where.values()) == {f"{cluster.namespace}-a"}, where
        _settled(cluster, gang)
    finally:
        scheduler.start_again()
    _leads_again(cluster, "after")
    assert cluster.placement(gang.members) == where  # the next one moved nothing
    assert _failed_bindings(cluster) == failed
    assert not _errors_logged(cluster, logged), _errors_logged(cluster, logged)
