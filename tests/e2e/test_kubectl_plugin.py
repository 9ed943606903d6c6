"""`kubectl phalanx` against the real API server: the installed `kubectl-phalanx` executable,
run as kubectl runs a plugin (same arguments, same environment), reading a kubeconfig
context, the API (PodGroups, pods, Events, Leases, commit records) and the running
Phalanx's `/debug`, while the real kube-scheduler and Phalanx schedule the gangs.

There is no kubectl binary here: kubectl's plugin mechanism is an `exec` of
`kubectl-<name>` found on the PATH with the remaining arguments, which is what these tests
do. Set ``PHALANX_SHOW_PLUGIN_OUTPUT=1`` (with ``-s``) to see every output in full; the
documentation's examples are copied from such a run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
import yaml
from conftest_scheduling import Scheduler, cluster, phalanx, scheduler  # noqa: F401  # fixtures
from phalanx_process import PhalanxProcess
from podgroup_crd import CRDS
from scheduling import A_COMMIT, A_VOLCANO_GROUP, PG_API, Gang, Scenario, pod_body
from volcano import VOLCANO_CRD_NAME, ensure_volcano_crd, volcano_pod_group, volcano_sizes

from phalanx.core.rollforward import CommitRecord, encode_commit_record

pytestmark = pytest.mark.e2e

PLUGIN = "kubectl-phalanx"
# Where `phalanx serve --kubeconfig` keeps its roll-forward Lease (no namespace of its own).
PHALANX_LEASE_NAMESPACE = "default"


@pytest.fixture(scope="module")
def control_plane(control_plane: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """The session's control plane, with Volcano's PodGroup CRD served while this module's
    Phalanx runs (a gang of another dialect is explained below); removed afterwards."""
    ensure_volcano_crd(control_plane)
    yield control_plane
    control_plane.request("DELETE", f"{CRDS}/{VOLCANO_CRD_NAME}")


def plugin_command() -> list[str]:
    script = shutil.which(PLUGIN, path=str(Path(sys.executable).parent))
    if script is not None:
        return [script]
    return [
        sys.executable,
        "-c",
        "import sys; from phalanx.kubectl.plugin import main; sys.exit(main())",
    ]


class Plugin:
    """Runs `kubectl-phalanx` with a clean environment: no PHALANX_* settings, no proxies,
    a HOME without a ~/.kube, and KUBECONFIG only when a test sets it."""

    def __init__(self, home: Path, kube_scheduler: Scheduler) -> None:
        self.home = home
        lease = kube_scheduler.config["leaderElection"]
        self.lease_flags = [
            f"--phalanx-namespace={PHALANX_LEASE_NAMESPACE}",
            f"--scheduler-lease={lease['resourceNamespace']}/{lease['resourceName']}",
        ]

    def run(
        self, *args: str, kubeconfig: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PHALANX_") and k not in ("KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY")
        }
        clean.update({"HOME": str(self.home), **(env or {})})
        # Before the command, as kubectl's global flags go (after it works too).
        given = [f"--kubeconfig={kubeconfig}"] if kubeconfig is not None else []
        argv = [*plugin_command(), *given, *args]
        done = subprocess.run(
            argv, capture_output=True, text=True, env=clean, timeout=120, check=False
        )
        if os.environ.get("PHALANX_SHOW_PLUGIN_OUTPUT", "") not in ("", "0"):
            shown = " ".join(["kubectl phalanx", *args])
            print(f"\n$ {shown}\n{done.stdout}{done.stderr}(exit {done.returncode})")
        return done

    def json(self, *args: str, **kwargs: Any) -> dict[str, Any]:
        done = self.run(*args, "-o", "json", **kwargs)
        assert done.returncode == 0, done.stderr
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer


@pytest.fixture
def plugin(tmp_path: Path, scheduler: Scheduler) -> Plugin:  # noqa: F811
    home = tmp_path / "home"
    home.mkdir()
    return Plugin(home, scheduler)


def _kubeconfig(cp: launcher.ControlPlane) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(cp.kubeconfig.read_text())
    return config


def _write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def condition_reason(sc: Scenario, gang: Gang, reason: str) -> Callable[[], bool]:
    def probe() -> bool:
        conditions = (sc.get_pod_group(gang.name).get("status") or {}).get("conditions") or [{}]
        return bool(conditions[0].get("reason") == reason)

    return probe


def condition_message(sc: Scenario, gang: Gang, tail: str) -> Callable[[], bool]:
    def probe() -> bool:
        conditions = (sc.get_pod_group(gang.name).get("status") or {}).get("conditions") or [{}]
        return str(conditions[0].get("message")).endswith(tail)

    return probe


def _gangs(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in answer["gangs"]}


# ---- status ------------------------------------------------------------------------------------


def test_status_shows_each_gang_the_leases_why_gangs_wait_and_the_reservations(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    plugin: Plugin,
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    ns = cluster.namespace
    whole = cluster.gang("whole", 2, 2)
    notes = cluster.gang("notes", 2, 1, form="annotations")
    cluster.wait_gang(whole)
    cluster.wait_gang(notes)
    # Its PodGroup says so about a second after (status written once per burst).
    cluster.wait(
        "whole: phase Scheduled or Running",
        lambda: (
            (cluster.get_pod_group(whole.name).get("status") or {}).get("phase")
            in ("Scheduled", "Running")
        ),
        timeout=10,
    )
    # A plan makes its members distinct, so it waits for its quorum rather than being
    # reserved from its first member's shape (template reservation).
    plan = {"sequence": [{"execute": "a"}, {"execute": "b"}, {"execute": "c"}]}
    short = cluster.gang(
        "short", 3, 1, create=2, arrival="staggered", plan=plan, plan_nodes=["a", "b", "c"]
    )
    unfit = cluster.gang("unfit", 2, 8)  # each member fits a node alone, the gang fits nowhere
    for gang, reason in ((short, "WaitingForMembers"), (unfit, "Unfit")):
        cluster.wait(
            f"{gang.name}: {reason} on its PodGroup", condition_reason(cluster, gang, reason)
        )
    # The second member's decision reaches the status about a second after the first's.
    cluster.wait("short: 2/3 exist on its PodGroup", condition_message(cluster, short, "2/3 exist"))
    # Last: its reservation lasts while two members are held at the barrier (20 s).
    held = cluster.gang("held", 3, 2, held=[2])
    phalanx.wait_metric("phalanx_barrier_waiting", lambda v: v == 2, what="held at the barrier")
    # Its PodGroup says Scheduling within about a second (status written once per burst).
    cluster.wait(
        "held: phase Scheduling",
        lambda: (cluster.get_pod_group(held.name).get("status") or {}).get("phase") == "Scheduling",
        timeout=10,
    )

    answer = plugin.json(
        "status", "-n", ns, "--server", phalanx.url, *plugin.lease_flags,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    assert answer["namespace"] == ns
    gangs = _gangs(answer)
    assert set(gangs) == {"whole", "notes", "short", "unfit", "held"}
    states = {name: (g["state"], g["bound"], g["min_member"]) for name, g in gangs.items()}
    assert states == {
        "whole": ("whole", 2, 2),
        "notes": ("whole", 2, 2),
        "short": ("waiting", 0, 3),
        "unfit": ("waiting", 0, 2),
        "held": ("reserved", 0, 3),  # its PodGroup's phase: Scheduling
    }
    assert gangs["notes"]["source"] == "annotations"
    assert gangs["whole"]["source"] == "PodGroup"
    assert gangs["whole"]["phase"] in ("Scheduled", "Running")
    # Nothing of theirs was bound: no commit record (a whole gang keeps its record until
    # the next roll-forward pass clears it, 15 s after it was written).
    assert [g["commit"] for g in gangs.values() if g["bound"] == 0] == [None] * 3

    # Why each gang waits is what Phalanx wrote on its PodGroup.
    waits = {w["gang"].split("/", 1)[1]: w for w in answer["waits"]}
    assert set(waits) == {"short", "unfit", "held"}
    for name, wait in waits.items():
        condition = cluster.get_pod_group(name)["status"]["conditions"][0]
        assert wait["reason"] == condition["message"], (name, wait, condition)
        assert wait["said_by"] == "condition"
    assert waits["short"]["reason"].endswith("2/3 exist")

    # The Leases: kube-scheduler's leader and Phalanx's roll-forward duty.
    leases = {lease["lease"].split("/", 1)[1]: lease for lease in answer["leases"]}
    scheduler_lease = plugin.lease_flags[1].rsplit("/", 1)[1]
    assert leases[scheduler_lease]["holder"], leases
    assert leases[scheduler_lease]["holder_pod"], leases  # `<hostname>_<uuid>`
    assert leases["phalanx-rollforward"]["holder"], leases

    # The reservation lives only in the running Phalanx: asked over /debug.
    reservations = answer["phalanx"]["reservations"]
    assert [r["gang"] for r in reservations] == [f"{ns}/held"]
    assert sorted(m["pod"] for m in reservations[0]["members"]) == [
        f"{ns}/{m}" for m in held.members
    ]

    text = plugin.run(
        "status", "-n", ns, "--server", phalanx.url, *plugin.lease_flags,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert any(line.split()[:1] == ["GANG"] and "STATE" in line for line in lines), text.stdout
    for name, (state, _, _) in states.items():
        assert any(
            line.split()[:1] == [f"{ns}/{name}"] and state in line.split() for line in lines
        ), (
            name,
            text.stdout,
        )
    assert f"{ns}/held" in text.stdout.split("Reservations", 1)[1]
    cluster.ungate(held.members[2])
    cluster.wait_gang(held)


# ---- explain -----------------------------------------------------------------------------------


def test_explain_shows_members_status_events_and_what_phalanx_planned(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    plugin: Plugin,
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    ns = cluster.namespace
    gang = cluster.gang("trainer", 3, 4)
    where = cluster.wait_gang(gang)
    cluster.wait_event(gang.name, "bound 3 member(s) together", reason="Bound")

    answer = plugin.json(
        "explain", f"{ns}/{gang.name}", "--server", phalanx.url, *plugin.lease_flags,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    view = answer["gang"]
    assert view["gang"] == f"{ns}/{gang.name}"
    assert view["state"] == "whole"
    assert {m["pod"]: m["node"] for m in view["members"]} == where
    assert answer["wait"] is None
    reasons = {(e["object"], e["reason"]) for e in answer["events"]}
    assert {(f"PodGroup/{gang.name}", "Reserved"), (f"PodGroup/{gang.name}", "Bound")} <= reasons
    assert (f"Pod/{gang.members[0]}", "Scheduled") in reasons  # kube-scheduler's own Event
    planned = answer["phalanx"]["details"][f"{ns}/{gang.name}"]["plan"]["placements"]
    assert planned == {f"{ns}/{pod}": node for pod, node in where.items()}

    # A bare name is looked up in the namespace -n gives; the text names every member.
    text = plugin.run(
        "explain", gang.name, "-n", ns, "--server", phalanx.url, *plugin.lease_flags,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(
        f"Gang {ns}/{gang.name}  (scheduler-plugins PodGroup, minMember 3"
    )
    for pod, node in where.items():
        assert any(line.split()[:2] == [pod, node] for line in text.stdout.splitlines())
    assert "Phalanx at" in text.stdout
    assert "placements:" in text.stdout


def test_explain_and_status_address_a_volcano_gang_by_its_key(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    plugin: Plugin,
) -> None:
    """A gang of another dialect, named by the key `status` lists: the plugin reads its
    Volcano PodGroup and status, and the running Phalanx's view of it (`/debug/groups/
    volcano:<ns>/<name>`), which names its dialect too."""
    cluster.monitor.gang_sizes.append(volcano_sizes)
    cluster.node("a", 8)
    cluster.nodes_ready()
    ns = cluster.namespace
    volcano_pod_group(cluster, "job", 2)
    names = ["job-0", "job-1"]
    for name in names:
        body = pod_body(
            name, gpus=4, node_selector=cluster.selector, annotations={A_VOLCANO_GROUP: "job"}
        )
        cluster.api.create(f"/api/v1/namespaces/{ns}/pods", body)
    where = cluster.wait_bound(names)
    cluster.wait_event("job", "bound 2 member(s) together", reason="Bound")

    answer = plugin.json(
        "explain", "volcano:job", "-n", ns, "--server", phalanx.url, *plugin.lease_flags,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    view = answer["gang"]
    assert (view["gang"], view["dialect"], view["source"]) == (
        f"volcano:{ns}/job",
        "volcano",
        "PodGroup",
    )
    assert (view["state"], view["min_member"]) == ("whole", 2)
    assert {m["pod"]: m["node"] for m in view["members"]} == where
    assert ("PodGroup/job", "Bound") in {(e["object"], e["reason"]) for e in answer["events"]}
    detail = answer["phalanx"]["details"][f"volcano:{ns}/job"]
    assert (detail["dialect"], detail["source"], detail["bound"]) == ("volcano", "PodGroup", 2)
    assert detail["api_version"] == "scheduling.volcano.sh/v1beta1"

    listed = plugin.json(
        "status", "-n", ns, "--server", phalanx.url, *plugin.lease_flags,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    assert [(g["gang"], g["dialect"], g["state"]) for g in listed["gangs"]] == [
        (f"volcano:{ns}/job", "volcano", "whole")
    ]
    assert [g["group"] for g in listed["phalanx"]["groups"]] == [f"volcano:{ns}/job"]
    text = plugin.run(
        "explain", f"volcano:{ns}/job", "--server", phalanx.url, *plugin.lease_flags,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"Gang volcano:{ns}/job  (volcano PodGroup, minMember 2")
    assert f"gang volcano:{ns}/job  (volcano PodGroup, minMember 2" in text.stdout  # /debug's


def test_explain_reads_the_commit_record_a_dead_instance_left(
    cluster: Scenario,  # noqa: F811
    phalanx: PhalanxProcess,  # noqa: F811
    scheduler: Scheduler,  # noqa: F811
    plugin: Plugin,
) -> None:
    # The record as Phalanx writes it before a gang's first binding; kube-scheduler is
    # stopped and Phalanx killed, so nothing finishes the gang while the plugin reads it.
    a = cluster.node("a", 8)
    cluster.nodes_ready()
    scheduler.stop()
    phalanx.kill()
    try:
        gang = cluster.gang("cut", 2, 2)
        pods = cluster.pods()
        placements = {f"{cluster.namespace}/{m}": a for m in gang.members}
        uids = {f"{cluster.namespace}/{m}": pods[m]["metadata"]["uid"] for m in gang.members}
        written = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        record = CommitRecord(f"{cluster.namespace}/cut", placements, uids)
        cluster.api.merge_patch(
            f"{PG_API}/namespaces/{cluster.namespace}/podgroups/cut",
            {"metadata": {"annotations": {A_COMMIT: encode_commit_record(record, written)}}},
        )
        answer = plugin.json(
            "explain", f"{cluster.namespace}/cut", *plugin.lease_flags,
            kubeconfig=cluster.cp.kubeconfig,
        )  # fmt: skip
        assert answer["gang"]["commit"] == {
            "at": written,
            "placements": placements,
            "error": None,
        }
        assert answer["gang"]["state"] == "binding"
        assert answer["phalanx"] is None
    finally:
        phalanx.start()
        scheduler.start()
    # Scheduling resumes: the gang is placed whole (by kube-scheduler, or from the record).
    cluster.wait_gang(gang, timeout=60)


# ---- the kubeconfig ----------------------------------------------------------------------------


def test_the_kubeconfig_is_read_as_kubectl_reads_it(
    cluster: Scenario,  # noqa: F811
    plugin: Plugin,
    tmp_path: Path,
) -> None:
    base = _kubeconfig(cluster.cp)
    (context,) = base["contexts"]
    # KUBECONFIG lists two files: the first names no current context but defines one with
    # the test's namespace; the second sets the current context (the first setting wins).
    first = dict(base, contexts=[
        {"name": "team", "context": {**context["context"], "namespace": cluster.namespace}},
    ])  # fmt: skip
    first.pop("current-context")
    second = dict(base, **{"current-context": "team"})
    paths = [_write(tmp_path / "first", first), _write(tmp_path / "second", second)]
    merged = os.pathsep.join(str(p) for p in paths)

    answer = plugin.json("status", *plugin.lease_flags, env={"KUBECONFIG": merged})
    assert (answer["context"], answer["namespace"]) == ("team", cluster.namespace)
    # --context and -n win over the current context and its namespace.
    answer = plugin.json(
        "status", "--context", context["name"], "-n", "kube-system", *plugin.lease_flags,
        env={"KUBECONFIG": merged},
    )  # fmt: skip
    assert (answer["context"], answer["namespace"]) == (context["name"], "kube-system")
    # So does --kubeconfig over KUBECONFIG.
    answer = plugin.json("status", kubeconfig=cluster.cp.kubeconfig, env={"KUBECONFIG": merged})
    assert (answer["context"], answer["namespace"]) == (base["current-context"], "default")


# ---- errors ------------------------------------------------------------------------------------


def _no_current_context(base: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k != "current-context"}


def _unreachable(base: dict[str, Any]) -> dict[str, Any]:
    (port,) = launcher.free_ports(1)  # nothing listens there
    entry = dict(base["clusters"][0]["cluster"], server=f"https://127.0.0.1:{port}")
    return dict(base, clusters=[{"name": base["clusters"][0]["name"], "cluster": entry}])


def _bad_token(base: dict[str, Any]) -> dict[str, Any]:
    return dict(base, users=[{"name": base["users"][0]["name"], "user": {"token": "nope"}}])


ERRORS = [
    ("no-current-context", _no_current_context, ["status"], 2, "has no current context"),
    ("unknown-context", lambda b: b, ["status", "--context", "nope"], 2, "context 'nope' is not"),
    ("unreachable", _unreachable, ["status"], 2, "cannot reach the API server https://127.0.0.1"),
    ("bad-credentials", _bad_token, ["status"], 2, "refused the context's credentials"),
    ("unknown-gang", lambda b: b, ["explain", "default/no-such-gang"], 1, "not found"),
    ("bad-gang-name", lambda b: b, ["explain", "a/"], 2, "names no gang; keys are NAMESPACE/NAME"),
]


@pytest.mark.parametrize(
    ("config", "args", "code", "message"),
    [e[1:] for e in ERRORS],
    ids=[e[0] for e in ERRORS],
)
def test_errors_say_what_is_wrong_and_exit_non_zero(
    control_plane: launcher.ControlPlane,
    plugin: Plugin,
    tmp_path: Path,
    config: Any,
    args: Sequence[str],
    code: int,
    message: str,
) -> None:
    path = _write(tmp_path / "kubeconfig", config(_kubeconfig(control_plane)))
    done = plugin.run(*args, "--request-timeout=5", kubeconfig=path)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_without_any_kubeconfig_it_says_where_it_looked(plugin: Plugin) -> None:
    done = plugin.run("status")
    assert done.returncode == 2
    assert "no kubeconfig found" in done.stderr, done.stderr
    assert "KUBECONFIG" in done.stderr, done.stderr


def test_a_server_that_does_not_answer_is_an_error_after_the_apis_answer(
    cluster: Scenario,  # noqa: F811
    plugin: Plugin,
) -> None:
    (port,) = launcher.free_ports(1)
    done = plugin.run(
        "status", "-n", cluster.namespace, "--server", f"http://127.0.0.1:{port}",
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"Context {_kubeconfig(cluster.cp)['current-context']}" in done.stdout
    assert f"cannot ask Phalanx at http://127.0.0.1:{port}" in done.stderr


# ---- simulate ----------------------------------------------------------------------------------


def test_simulate_dumps_the_cluster_through_the_api_into_the_simulator(
    cluster: Scenario,  # noqa: F811
    plugin: Plugin,
    tmp_path: Path,
) -> None:
    # Pods of a scheduler nobody runs stay pending in the real cluster; the simulation
    # serves that scheduler name and places them on the test's nodes.
    a = cluster.node("a", 8)
    b = cluster.node("b", 8)
    cluster.nodes_ready()
    ns = cluster.namespace
    idle = "phalanx-simulated"
    cluster.pod_group("sim", 2)
    for i in range(2):
        body = pod_body(
            f"sim-{i}",
            gpus=8,
            node_selector=cluster.selector,
            labels={"scheduling.x-k8s.io/pod-group": "sim"},
            scheduler=idle,
        )
        cluster.api.create(f"/api/v1/namespaces/{ns}/pods", body)
    dump = tmp_path / "dump.json"
    done = plugin.run(
        "simulate", "-o", "json", "--dump", str(dump), "--", "--scheduler-name", idle,
        kubeconfig=cluster.cp.kubeconfig,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "from context" in done.stderr, done.stderr
    report = json.loads(done.stdout)
    (line,) = [g for g in report["groups"] if g["group"] == f"{ns}/sim"]
    assert line["status"] == "placed", line
    assert sorted(line["placements"].values()) == [a, b]
    # Nothing was written to the cluster.
    assert cluster.placement(["sim-0", "sim-1"]) == {"sim-0": "", "sim-1": ""}
    # The dump is what `phalanx simulate` reads, kept for a rerun offline.
    kinds = {i["kind"] for i in json.loads(dump.read_text())["items"]}
    assert kinds == {"Node", "Pod", "PodGroup"}
