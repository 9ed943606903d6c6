"""`phalanx`: serve the extender, run the demo, simulate a cluster dump, explain a gang.

    phalanx serve --cluster-file cluster.yaml        # or --kubeconfig PATH / --in-cluster
    phalanx demo [--port 8888] [--exit] [--json]
    phalanx simulate CLUSTER_FILE [--workload FILE] [--json]
    phalanx explain NAMESPACE/NAME [--server URL] [--json]
    phalanx --version

Exit codes: 0 done; 1 the answer is "no" (unknown gang, demo invariant broken);
2 bad input or an unusable environment (settings, files, server unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import json
import logging
import os
import ssl
import sys
import typing
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from phalanx import logs
from phalanx.api import server
from phalanx.core.groups import registry
from phalanx.demo import cluster, scenario, workload
from phalanx.demo.report import Report, render_group_view, render_text
from phalanx.service.extender import Extender
from phalanx.service.loop_health import freeze_heap_once, tune_collector
from phalanx.service.metrics import Metrics
from phalanx.settings import LogLevel, Settings, describe_error, env_var, flag
from phalanx.sources.base import ClusterSource
from phalanx.sources.clusterfile import ClusterFileError, ClusterFileSource, load_objects
from phalanx.sources.kube import KubeSource, load_scheduler_config
from phalanx.sources.kube_async import AsyncKubeSettings

log = logging.getLogger("phalanx.cli")

DEFAULT_SERVER = "http://127.0.0.1:8888"
EXPLAIN_TIMEOUT_SECONDS = 10.0
# Settings that tune scheduling; `simulate` takes them too, so a dry run matches production.
TUNING = (
    "scheduler_names",
    "default_placement",
    "topologies",
    "reservation_ttl_seconds",
    "barrier_timeout_seconds",
    "dra_extended_resources",
)


class UsageError(Exception):
    """Bad input or environment: printed as is, exit code 2."""


# ---- argument parsing ---------------------------------------------------------------------


def _add_setting_flags(parser: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    """One flag per settings field, help from the field's description. Absent flags stay
    absent (SUPPRESS) so the environment, then the default, apply."""
    for name in fields:
        info = Settings.model_fields[name]
        help_text = f"{info.description} [env {env_var(name)}]"
        if info.annotation is bool:
            # --x and --no-x: a setting that defaults to true must be turnable off too.
            parser.add_argument(
                flag(name),
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif name == "scheduler_names":
            parser.add_argument(
                flag(name),
                dest=name,
                action="append",
                default=argparse.SUPPRESS,
                metavar="NAME",
                help=help_text + " (repeatable)",
            )
        else:
            parser.add_argument(
                flag(name),
                dest=name,
                default=argparse.SUPPRESS,
                metavar=name.split("_")[-1].upper(),
                help=help_text,
            )


def _port(text: str) -> int:
    """A TCP port from a flag (`serve`'s port is checked by its settings instead)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="phalanx",
        description="All-or-nothing, plan-aware GPU gang placement: a kube-scheduler extender.",
    )
    parser.add_argument(
        "--version", action="version", version=f"phalanx {importlib.metadata.version('phalanx')}"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="serve the extender to kube-scheduler",
        description="Serve the extender verbs, /metrics, /healthz, /readyz and /debug. "
        "Every flag can also be set as a PHALANX_* environment variable; flags win.",
    )
    _add_setting_flags(serve, list(Settings.model_fields))
    serve.set_defaults(func=_cmd_serve)

    demo = sub.add_parser(
        "demo",
        help="run the built-in demo: a GPU cluster, a mixed workload, a summary",
        description="Start Phalanx on a built-in 18-node GPU cluster, schedule a mixed "
        "workload through its real HTTP endpoints as kube-scheduler would, print a summary, "
        "then keep serving /metrics and /debug until Ctrl-C.",
    )
    demo.add_argument("--host", default="127.0.0.1", help="listen address (default %(default)s)")
    demo.add_argument(
        "--port",
        type=_port,
        default=8888,
        help="listen port; 0 picks a free one (default %(default)s)",
    )
    demo.add_argument(
        "--exit", action="store_true", help="exit after the summary instead of serving on"
    )
    demo.add_argument(
        "--json", action="store_true", help="print the summary as JSON (progress goes to stderr)"
    )
    demo.add_argument(
        "--log-level",
        type=str.lower,
        choices=typing.get_args(LogLevel),
        default="warning",
        help="threshold of the JSON logs on stderr (default %(default)s)",
    )
    demo.set_defaults(func=_cmd_demo)

    sim = sub.add_parser(
        "simulate",
        help="would these gangs fit this cluster? (a dry run over a cluster dump)",
        description="Load a cluster dump (`kubectl get nodes,pods,podgroups -A -o yaml`, JSON or "
        "YAML), schedule its pending pods of the served schedulers — or the --workload "
        "objects added to it — through an in-process Phalanx, and say where each gang "
        "would land or why it would wait. Nothing touches a real cluster.",
    )
    sim.add_argument("dump", type=Path, metavar="CLUSTER_FILE")
    sim.add_argument(
        "--workload", type=Path, metavar="FILE", help="objects to add first (a List or documents)"
    )
    sim.add_argument("--json", action="store_true", help="print the report as JSON")
    sim.add_argument(
        "--log-level",
        default="warning",
        help="threshold of the JSON logs on stderr (default %(default)s)",
    )
    _add_setting_flags(sim, TUNING)
    sim.set_defaults(func=_cmd_simulate)

    explain = sub.add_parser(
        "explain",
        help="show what a running Phalanx knows about one gang",
        description="Print a gang's reservation, plan placements, phases, data transfers, "
        "warnings and last reason, from a running Phalanx's /debug/groups/KEY.",
    )
    explain.add_argument(
        "group",
        metavar="KEY",
        help=f"the gang's key: {registry.KEY_FORMS}",
    )
    explain.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        help="Phalanx base URL; a path is kept as a prefix, e.g. a proxy's (default %(default)s)",
    )
    explain.add_argument("--json", action="store_true", help="print the raw JSON view")
    explain.set_defaults(func=_cmd_explain)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else 2
    func = cast(Callable[[argparse.Namespace], int], args.func)
    try:
        return func(args)
    except UsageError as exc:
        print(f"phalanx {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`phalanx demo --exit | head`): not a failure of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# ---- shared plumbing ----------------------------------------------------------------------


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the environment, overridden by the flags given."""
    given = {name: getattr(args, name) for name in Settings.model_fields if hasattr(args, name)}
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise UsageError(describe_error(exc)) from exc


def _run(coro: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop when installed (what `serve` uses in production), else asyncio."""
    factory = None
    if server.loop_name() == "uvloop":
        factory = cast(
            Callable[[], asyncio.AbstractEventLoop],
            importlib.import_module("uvloop").new_event_loop,
        )
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


async def _until_signal() -> None:
    stop = asyncio.Event()
    with server.on_signals(stop.set):
        await stop.wait()


# ---- serve --------------------------------------------------------------------------------


def build_source(settings: Settings, metrics: Metrics) -> ClusterSource:
    """The cluster source the settings name (exactly one)."""
    chosen = settings.cluster_sources()
    if len(chosen) != 1:
        names = ", ".join(
            f"{flag(f)} / {env_var(f)}" for f in ("cluster_file", "kubeconfig", "in_cluster")
        )
        raise UsageError(f"choose exactly one cluster source: {names}")
    config = None
    if settings.scheduler_config is not None:
        # Read whatever the source, so a wrong path fails now, not once deployed; a cluster
        # file has no kube-scheduler to check it against.
        try:
            config = load_scheduler_config(settings.scheduler_config)
        except ValueError as exc:
            raise UsageError(f"{flag('scheduler_config')}: {exc}") from exc
    if settings.cluster_file is not None:
        try:
            return ClusterFileSource.from_path(
                settings.cluster_file, dra_extended_resources=settings.dra_extended_resources
            )
        except ClusterFileError as exc:
            raise UsageError(str(exc)) from exc
    served = settings.scheduler_names
    api = AsyncKubeSettings(qps=settings.api_qps, burst=settings.api_burst)
    where = f"kubeconfig {settings.kubeconfig}" if settings.kubeconfig else "in-cluster config"
    try:
        if settings.kubeconfig is not None:
            return KubeSource.from_kubeconfig(
                settings.kubeconfig,
                scheduler_names=served,
                metrics=metrics,
                api_settings=api,
                scheduler_config=config,
                dra_extended_resources=settings.dra_extended_resources,
            )
        return KubeSource.in_cluster(
            scheduler_names=served,
            metrics=metrics,
            api_settings=api,
            scheduler_config=config,
            dra_extended_resources=settings.dra_extended_resources,
        )
    except Exception as exc:
        # The client library's own errors (missing file, no current context, no service
        # account) are bad input here; its exception types stay inside the source.
        raise UsageError(f"cannot load the {where}: {exc}") from exc


def check_tls(settings: Settings) -> None:
    """Refuse TLS files the listener could not load, naming the flag: uvicorn would only
    raise ssl.SSLError once serving starts. A key must be unencrypted (no passphrase flag:
    the server starts unattended)."""
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if cert is None or key is None:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_verify_locations(cafile=cert)
    except OSError as exc:  # ssl.SSLError included
        raise UsageError(f"{flag('tls_cert_file')}: {cert} holds no PEM certificate") from exc
    try:
        context.load_cert_chain(cert, key, password=lambda: b"")
    except OSError as exc:
        if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
            why = f"does not match the certificate in {cert}"
        else:
            why = "holds no unencrypted PEM private key"
        raise UsageError(f"{flag('tls_key_file')}: {key} {why}") from exc


def _cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    check_tls(settings)
    metrics = Metrics()
    source = build_source(settings, metrics)
    logs.configure(settings.log_level)
    return _run(serve(settings, source, metrics))


async def serve(settings: Settings, source: ClusterSource, metrics: Metrics | None = None) -> int:
    """Serve until SIGTERM / SIGINT, then shut down gracefully (held binds are answered)."""
    extender = Extender(source, settings.service_settings(), metrics=metrics)
    # Process-wide, so here and not in the extender (which tests run many of per process).
    tune_collector()
    freeze = asyncio.create_task(freeze_heap_once(lambda: extender.ready), name="phalanx-freeze")
    try:
        return await server.serve(
            extender,
            host=settings.host,
            port=settings.port,
            max_body_bytes=settings.max_body_bytes,
            ssl_certfile=settings.tls_cert_file,
            ssl_keyfile=settings.tls_key_file,
            metrics_address=settings.metrics_address,
        )
    except server.ListenError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        freeze.cancel()


# ---- demo and simulate ---------------------------------------------------------------------


def _printer(stream: IO[str]) -> Callable[[str], None]:
    def show(text: str) -> None:
        print(f"  {text}", file=stream, flush=True)

    return show


def _emit(report: Report, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_json(), indent=2, sort_keys=False))
    else:
        print(render_text(report))


def _healthy(report: Report) -> bool:
    return not (
        report.partial_gangs
        or report.reserved_gpus
        or report.overcommitted_nodes
        or report.policy_violations
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    return _run(_demo(args))


async def _demo(args: argparse.Namespace) -> int:
    chat = sys.stderr if args.json else sys.stdout
    objects = cluster.objects()
    work = workload.objects()
    try:
        opened = scenario.session(objects, host=args.host, port=args.port)
        async with opened as run:
            gpus = sum(
                int(o["status"]["allocatable"].get("nvidia.com/gpu", 0)) for o in cluster.nodes()
            )
            print(f"Phalanx demo: extender listening on {run.url}", file=chat)
            print(
                f"cluster: {len(cluster.nodes())} nodes, {gpus} GPUs, "
                f"{len(cluster.running_pods())} pods already running; "
                f"workload: {len(workload.DEMO_GANGS)} gangs and {len(workload.DEMO_SINGLES)} "
                "single pods, scheduled over HTTP as kube-scheduler would",
                file=chat,
                flush=True,
            )
            report = (
                await run.drive(work, title="Phalanx demo summary", progress=_printer(chat))
            ).report
            print(file=chat)
            _emit(report, args.json)
            if not args.exit:
                print(
                    f"\nStill serving: {run.url}/metrics  {run.url}/debug/groups\n"
                    f"Try: phalanx explain training/data-pipeline --server {run.url}\n"
                    "Ctrl-C to stop.",
                    file=chat,
                    flush=True,
                )
                await _until_signal()
    except server.ListenError as exc:
        raise UsageError(f"{exc} (try --port 0)") from exc
    return 0 if _healthy(report) else 1


def _load(path: Path, what: str) -> list[dict[str, Any]]:
    try:
        return load_objects(path)
    except ClusterFileError as exc:
        raise UsageError(f"{what}: {exc}") from exc


def _cmd_simulate(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    logs.configure(args.log_level)
    objects = _load(args.dump, "cluster file")
    if not any(o.get("kind") == "Node" for o in objects):
        raise UsageError(
            f"{args.dump} holds no Node objects; dump a cluster with "
            "`kubectl get nodes,pods,podgroups -A -o yaml`"
        )
    work = _load(args.workload, "workload") if args.workload is not None else []
    return _run(_simulate(args, settings, objects, work))


async def _simulate(
    args: argparse.Namespace,
    settings: Settings,
    objects: list[dict[str, Any]],
    work: list[dict[str, Any]],
) -> int:
    chat = sys.stderr if args.json else sys.stdout
    title = f"phalanx simulate {args.dump.name}" + (
        f" + {args.workload.name}" if args.workload else ""
    )
    async with scenario.session(
        objects,
        settings=settings.service_settings(),
        scheduler_names=settings.scheduler_names,
        dra_extended_resources=settings.dra_extended_resources,
    ) as run:
        report = (await run.drive(work, title=title, progress=_printer(chat))).report
    print(file=chat)
    _emit(report, args.json)
    return 0


# ---- explain ------------------------------------------------------------------------------


def _cmd_explain(args: argparse.Namespace) -> int:
    return explain(str(args.group), str(args.server), as_json=bool(args.json))


def server_url(text: str) -> str:
    """The base URL `--server` names, without a trailing "/". A path is kept as a prefix
    (a proxy's: `kubectl proxy`'s service path, an ingress sub-path); a query or fragment
    could not be joined with the API path, so it is refused."""
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise UsageError(f"--server: {text!r} is not a URL ({exc})") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"--server: {text!r} is not an http(s)://HOST[:PORT] URL")
    if url.query or url.fragment or "?" in text or "#" in text:
        raise UsageError(f"--server: {text!r} has a query or fragment; give the base URL")
    return text.rstrip("/")


def explain(
    key: str, server: str, *, as_json: bool, transport: httpx.BaseTransport | None = None
) -> int:
    """Print what the Phalanx at base URL `server` knows about gang `key`; 1 if nothing."""
    if registry.parse_key(key) is None:
        raise UsageError(f"{key!r} is not a gang key; keys are {registry.KEY_FORMS}")
    server = server_url(server)
    url = f"{server}/debug/groups/{quote(key, safe='/:')}"
    try:
        with httpx.Client(timeout=EXPLAIN_TIMEOUT_SECONDS, transport=transport) as client:
            response = client.get(url)
            # Phalanx's own 404 for an unknown gang, or an address with no Phalanx behind it
            # (a wrong path, another server): only a Phalanx answers its gang list.
            unknown = response.status_code == 404 and _serves_gangs(client, server)
    except httpx.HTTPError as exc:
        raise UsageError(f"cannot reach Phalanx at {server}: {exc}") from exc
    body = _json_or_none(response)
    if unknown:
        message = body.get("error") if isinstance(body, dict) else None
        print(message or f"gang {key} is unknown to Phalanx at {server}", file=sys.stderr)
        return 1
    if response.status_code == 404:
        raise UsageError(f"--server: no Phalanx API at {server} ({url} answered HTTP 404)")
    if response.status_code != 200 or not isinstance(body, dict):
        raise UsageError(f"{url} answered HTTP {response.status_code}: {response.text[:300]}")
    if as_json:
        print(json.dumps(body, indent=2))
    else:
        print(render_group_view(body))
    return 0


def _serves_gangs(client: httpx.Client, server: str) -> bool:
    """Whether `server` answers Phalanx's gang list (`GET /debug/groups`)."""
    answer = client.get(f"{server}/debug/groups")
    body = _json_or_none(answer)
    return answer.status_code == 200 and isinstance(body, dict) and "groups" in body


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


if __name__ == "__main__":
    sys.exit(main())
