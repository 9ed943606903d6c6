"""`kubectl-phalanx`: the commands of the kubectl plugin.

    kubectl phalanx explain GANG               # one gang: members, status, commit record, Events
    kubectl phalanx status [-A]                # gangs, the Leases, waits (+ reservations: --server)
    kubectl phalanx simulate [--workload FILE] # this cluster, dumped through the API, simulated

Every command reads the current kubeconfig context as kubectl does (`--kubeconfig`,
`KUBECONFIG`, `--context`, `-n`), prints tables or `-o json`, and asks a running Phalanx's
`/debug` when `--server URL` names one.

A gang is named by its key, as Phalanx keys it and `status` lists it: `NAMESPACE/NAME`
(scheduler-plugins and annotation-only gangs), `volcano:NAMESPACE/NAME`,
`kai:NAMESPACE/NAME`, `grove:NAMESPACE/NAME`, `kueue:NAMESPACE/NAME`,
`yunikorn:NAMESPACE/NAME`, `lws:NAMESPACE/NAME`, `upstream:NAMESPACE/NAME`,
`upstream:NAMESPACE/WORKLOAD/PODGROUP[/REPLICA]` or `composite:NAMESPACE/NAME`. A key
without `/` (`NAME`, `volcano:NAME`) is in the namespace `-n` picks.

Exit codes, as `phalanx`'s: 0 done; 1 the answer is "no" (no such gang); 2 bad input or an
unusable environment (no kubeconfig or context, the API server unreachable or refusing,
`--server` given but not answering: what the API said is still printed first).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from phalanx.core.groups import registry
from phalanx.core.model import Dialect, GroupRef
from phalanx.kubectl import render
from phalanx.kubectl.cluster import (
    ClusterApi,
    ClusterReader,
    PluginError,
    Target,
    ask_phalanx,
    cluster_dump,
    connect,
    resolve_target,
)
from phalanx.kubectl.views import (
    Explanation,
    GangState,
    LeaseView,
    Status,
    collect_gangs,
    gang_events,
    wait_of,
)
from phalanx.sources.lease import LEASE_NAME as ROLLFORWARD_LEASE

PROG = "kubectl phalanx"
DEFAULT_PHALANX_NAMESPACE = "phalanx-system"  # the chart's namespace in the README
DEFAULT_SCHEDULER_LEASE = "phalanx-scheduler"  # the chart's kubeScheduler.leaderElection
Connect = Callable[[Target, float], ClusterApi]
Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


# ---- arguments -------------------------------------------------------------------------------


def _seconds(text: str) -> float:
    """A positive, finite number of seconds: the client library refuses 0 or less only
    once a request is made, with a traceback."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return seconds


def _common(*, defaults: bool) -> argparse.ArgumentParser:
    """Flags every command takes, before or after its name (as kubectl's global flags).

    Only the top-level copy has defaults: a subcommand's parser writes every default it
    has over what the top level parsed, so its copy leaves absent flags alone (SUPPRESS).
    """

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig",
        default=default(None),
        help="kubeconfig file (default: KUBECONFIG, else ~/.kube/config)",
    )
    common.add_argument(
        "--context", default=default(None), help="kubeconfig context (default: its current one)"
    )
    common.add_argument(
        "-n",
        "--namespace",
        default=default(None),
        help="namespace (default: the context's, else default)",
    )
    common.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default=default("text"),
        help="output format (default text)",
    )
    common.add_argument(
        "--server",
        default=default(None),
        metavar="URL",
        help="a running Phalanx whose /debug to ask too, e.g. http://127.0.0.1:8888 after "
        "`kubectl -n phalanx-system port-forward pod/<leader> 8888`",
    )
    common.add_argument(
        "--phalanx-namespace",
        default=default(DEFAULT_PHALANX_NAMESPACE),
        metavar="NS",
        help=f"namespace of Phalanx's Leases (the chart's release namespace; default "
        f"{DEFAULT_PHALANX_NAMESPACE})",
    )
    common.add_argument(
        "--scheduler-lease",
        default=default(DEFAULT_SCHEDULER_LEASE),
        metavar="[NS/]NAME",
        help=f"kube-scheduler's leader-election Lease (default {DEFAULT_SCHEDULER_LEASE})",
    )
    common.add_argument(
        "--request-timeout",
        type=_seconds,
        default=default(10.0),
        metavar="SECONDS",
        help="per API request (default 10)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common(defaults=False)
    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[_common(defaults=True)],
        description="What Phalanx and the cluster say about gangs: run as `kubectl phalanx`.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    explain = sub.add_parser(
        "explain",
        parents=[common],
        help="one gang: members, status, commit record, Events (and Phalanx's view)",
        description="Everything the API says about one gang — its PodGroup's phase and "
        "condition, its members and where they are bound, its commit record, the Events "
        "about it and its members — and, with --server, what the running Phalanx holds.",
    )
    explain.add_argument(
        "gang",
        metavar="GANG",
        help="the gang's key, as `status` lists it: [DIALECT:]NAMESPACE/NAME, e.g. "
        "team-a/train, volcano:team-a/train, kai:team-a/train, grove:team-a/serve-0, "
        "kueue:team-a/train, "
        "yunikorn:team-a/spark-pi, lws:team-a/vllm-0, upstream:team-a/train; a key without "
        "'/' is in the namespace -n picks",
    )
    explain.set_defaults(func=_cmd_explain)
    status = sub.add_parser(
        "status",
        parents=[common],
        help="gangs, leader and roll-forward Leases, waits, and (with --server) reservations",
    )
    status.add_argument(
        "-A", "--all-namespaces", action="store_true", help="gangs of every namespace"
    )
    status.set_defaults(func=_cmd_status)
    simulate = sub.add_parser(
        "simulate",
        parents=[common],
        help="dump this cluster through the API and run `phalanx simulate` on it",
        description="Lists nodes, pods and PodGroups of every namespace (what `kubectl get "
        "nodes,pods,podgroups -A -o json` prints) and schedules the pending gangs of the "
        "served schedulers through an in-process Phalanx: where each would land, or why it "
        "would wait. Nothing is written to the cluster. Flags after `--` go to `phalanx "
        "simulate` (e.g. -- --default-placement spread).",
    )
    simulate.add_argument(
        "--workload", type=Path, metavar="FILE", help="objects to add first (a List or documents)"
    )
    simulate.add_argument(
        "--dump", type=Path, metavar="FILE", help="also keep the cluster dump in FILE (JSON)"
    )
    simulate.add_argument("simulate_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    simulate.set_defaults(func=_cmd_simulate)
    return parser


def main(
    argv: Sequence[str] | None = None, *, connector: Connect = connect, clock: Clock = _now
) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else 2
    command: Callable[[argparse.Namespace, ClusterReader, Clock], int] = args.func
    try:
        target = resolve_target(
            args.kubeconfig,
            args.context,
            args.namespace,
            environ=os.environ,
            home=Path.home(),
        )
        reader = ClusterReader(connector(target, args.request_timeout), target)
        return command(args, reader, clock)
    except PluginError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _emit(answer: str | dict[str, object]) -> None:
    print(json.dumps(answer, indent=2) if isinstance(answer, dict) else answer)


def _leases(args: argparse.Namespace, reader: ClusterReader) -> tuple[LeaseView, ...]:
    home = args.phalanx_namespace
    namespace, _, name = str(args.scheduler_lease).rpartition("/")
    return (
        reader.lease(namespace or home, name),
        reader.lease(home, ROLLFORWARD_LEASE),
    )


def _asked(args: argparse.Namespace, error: str) -> int:
    """Exit code once everything is printed: 2 if the Phalanx named by --server failed."""
    if error:
        print(f"{PROG} {args.command}: {error}", file=sys.stderr)
        return 2
    return 0


# ---- explain ---------------------------------------------------------------------------------


# Every dialect whose keys carry a prefix (annotation-only gangs share scheduler-plugins' keys).
_PREFIXES = tuple(
    f"{d.value}:" for d in Dialect if d not in (Dialect.SCHEDULER_PLUGINS, Dialect.ANNOTATIONS)
)


def gang_ref(text: str, namespace: str) -> GroupRef:
    """The gang a key names (see the module docstring); a key without "/" is in
    `namespace`."""
    prefix = next((p for p in _PREFIXES if text.startswith(p)), "")
    rest = text[len(prefix) :]
    ref = registry.parse_key(text if "/" in rest else f"{prefix}{namespace}/{rest}")
    if ref is None:
        raise PluginError(f"{text!r} names no gang; keys are {registry.KEY_FORMS}")
    return ref


def _cmd_explain(args: argparse.Namespace, reader: ClusterReader, clock: Clock) -> int:
    ref = gang_ref(str(args.gang), reader.target.namespace)
    objects = reader.group_objects(ref.namespace)
    gangs, skipped = collect_gangs(objects, reader.pods(ref.namespace))
    gang = next((g for g in gangs if g.key == ref.key), None)
    if gang is None:
        what = "" if ref.dialect is Dialect.SCHEDULER_PLUGINS else f"{ref.dialect.value} "
        print(
            f"gang {ref.key} not found (context {reader.target.context}): no {what}"
            f"{registry.object_kind(ref)} {ref.object_ref.name} in namespace {ref.namespace}, "
            "and no pod there names it as its gang",
            file=sys.stderr,
        )
        return 1
    events = gang_events(gang, reader.events(ref.namespace))
    leases = _leases(args, reader)
    phalanx = ask_phalanx(args.server, [gang.key], None) if args.server else None
    expl = Explanation(
        reader.target.context, gang, tuple(events), wait_of(gang, events), phalanx, tuple(skipped)
    )
    if args.output == "json":
        _emit(render.explanation_json(expl, leases))
    else:
        _emit(
            render.render_explanation(
                expl, clock(), leases=leases, phalanx_namespace=args.phalanx_namespace
            )
        )
    return _asked(args, phalanx.error if phalanx is not None else "")


# ---- status ----------------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace, reader: ClusterReader, clock: Clock) -> int:
    namespace = None if args.all_namespaces else reader.target.namespace
    gangs, skipped = collect_gangs(reader.group_objects(namespace), reader.pods(namespace))
    events = reader.events(namespace) if any(g.state is not GangState.WHOLE for g in gangs) else []
    waits = tuple(w for g in gangs if (w := wait_of(g, gang_events(g, events))) is not None)
    phalanx = ask_phalanx(args.server, None, namespace) if args.server else None
    status = Status(
        reader.target.context,
        namespace,
        tuple(gangs),
        waits,
        _leases(args, reader),
        phalanx,
        tuple(skipped),
    )
    if args.output == "json":
        _emit(render.status_json(status))
    else:
        _emit(render.render_status(status, clock(), phalanx_namespace=args.phalanx_namespace))
    return _asked(args, phalanx.error if phalanx is not None else "")


# ---- simulate --------------------------------------------------------------------------------


def _cmd_simulate(args: argparse.Namespace, reader: ClusterReader, clock: Clock) -> int:
    from phalanx import cli  # noqa: PLC0415  # the simulator's whole stack: only here

    passed = list(args.simulate_args)
    if passed[:1] == ["--"]:
        passed = passed[1:]
    dump = cluster_dump(reader)
    kinds = [str(i.get("kind")) for i in dump["items"]]
    print(
        f"dumped {kinds.count('Node')} nodes, {kinds.count('Pod')} pods and "
        f"{kinds.count('PodGroup')} PodGroups from context {reader.target.context} "
        f"({reader.target.server}) at {clock().strftime('%Y-%m-%dT%H:%M:%SZ')}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="kubectl-phalanx-") as scratch:
        # The file's name is the report's title; a context name may hold "/" (EKS ARNs).
        name = re.sub(r"[^A-Za-z0-9_.@-]+", "_", reader.target.context)
        path = args.dump or Path(scratch) / f"{name}.json"
        try:
            path.write_text(json.dumps(dump), encoding="utf-8")
        except OSError as exc:
            raise PluginError(f"cannot write the dump to {path}: {exc.strerror}") from exc
        argv = ["simulate", str(path), *passed]
        if args.workload is not None:
            argv += ["--workload", str(args.workload)]
        if args.output == "json":
            argv.append("--json")
        return cli.main(argv)
