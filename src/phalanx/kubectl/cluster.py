"""Where `kubectl phalanx` reads from: the kubeconfig as kubectl reads it, the API, `/debug`.

* **The kubeconfig.** `--kubeconfig PATH`, else every file of `KUBECONFIG` (merged: the
  first file that names a context, a cluster or the current context wins), else
  `~/.kube/config`. `--context` picks the context, else its `current-context`; `-n`
  picks the namespace, else the context's, else `default`. The client library then
  loads the same files for the credentials (tokens, certificates, exec plugins).
* **The API.** Read-only GETs and lists (pages of 500), through the project's one
  transport (`phalanx.sources.kubeclient`). The gang objects of every dialect are listed
  as Phalanx follows them: discovery (`GET /apis`, then the group-versions Phalanx
  reads; `phalanx.core.groups.discovery`) says which kinds and versions are served, and
  each served kind is listed; a kind not served has no objects. A missing or forbidden
  Lease is a view saying so; anything else that fails is a `PluginError` naming the
  server and the context.
* **A running Phalanx.** Its `/debug` views, when `--server URL` names one. The extender
  port is loopback-only inside its pod (it also serves `/bind`), so this is normally
  `kubectl port-forward` to the leader's pod; a failure there is a value
  (`PhalanxView.error`), the API's answer stands without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx
import orjson
import yaml

from phalanx.core.groups import discovery, registry
from phalanx.kubectl.views import LeaseView, PhalanxView, lease_view
from phalanx.sources.informer import ApiError

PAGE = 500
LEASES = "/apis/coordination.k8s.io/v1"
DEBUG_TIMEOUT_SECONDS = 10.0
# /debug/groups phases for which Phalanx holds a reservation (GroupPhase.SCHEDULING).
RESERVED_PHASES = frozenset({"Scheduling"})


class PluginError(Exception):
    """Bad input or an unusable environment: printed as is, exit code 2."""


# ---- the kubeconfig -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """The cluster to read: kubeconfig file(s), context, namespace, and the server's URL."""

    kubeconfig: str  # one path, or a KUBECONFIG list (os.pathsep-separated)
    context: str
    namespace: str
    server: str


def _load(path: Path) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PluginError(f"cannot read kubeconfig {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise PluginError(
            f"kubeconfig {path} is not UTF-8 text (byte {byte:#04x} at offset {exc.start})"
        ) from exc
    except yaml.YAMLError as exc:
        raise PluginError(f"kubeconfig {path} is not YAML: {exc}") from exc
    except RecursionError as exc:  # PyYAML composes nested collections recursively
        raise PluginError(f"kubeconfig {path} is nested too deeply to read") from exc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise PluginError(f"kubeconfig {path} is not a mapping")
    return data


def _named(entries: object, path: Path, what: str) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    if entries is None:
        return found
    if not isinstance(entries, list):
        raise PluginError(f"kubeconfig {path}: {what} must be a list")
    for entry in entries:
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not name:
            raise PluginError(f"kubeconfig {path}: an entry of {what} has no name")
        body = entry.get(what.rstrip("s"))
        found[name] = body if isinstance(body, Mapping) else {}
    return found


def resolve_target(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    *,
    environ: Mapping[str, str],
    home: Path,
) -> Target:
    """The context to read from, chosen as kubectl chooses it (see the module docstring)."""
    if kubeconfig:
        listed, paths = kubeconfig, [Path(kubeconfig).expanduser()]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise PluginError(f"kubeconfig {kubeconfig} does not exist")
    else:
        listed = environ.get("KUBECONFIG", "") or str(home / ".kube" / "config")
        paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
        paths = [p for p in paths if p.is_file()]
        if not paths:
            raise PluginError(
                f"no kubeconfig found (looked for {listed}): pass --kubeconfig or set KUBECONFIG"
            )
    contexts: dict[str, Mapping[str, Any]] = {}
    clusters: dict[str, Mapping[str, Any]] = {}
    current = ""
    for path in paths:
        data = _load(path)
        for name, body in _named(data.get("contexts"), path, "contexts").items():
            contexts.setdefault(name, body)
        for name, body in _named(data.get("clusters"), path, "clusters").items():
            clusters.setdefault(name, body)
        chosen = data.get("current-context")
        if not current and isinstance(chosen, str):
            current = chosen
    where = kubeconfig or listed
    known = ", ".join(sorted(contexts)) or "none"
    name = context or current
    if not name:
        raise PluginError(
            f"kubeconfig {where} has no current context: pass --context (contexts: {known})"
        )
    if name not in contexts:
        raise PluginError(f"context {name!r} is not in kubeconfig {where} (contexts: {known})")
    chosen_context = contexts[name]
    cluster = clusters.get(str(chosen_context.get("cluster") or ""), {})
    return Target(
        kubeconfig=os.pathsep.join(str(p) for p in paths),
        context=name,
        namespace=namespace or str(chosen_context.get("namespace") or "default"),
        server=str(cluster.get("server") or "?"),
    )


# ---- the API --------------------------------------------------------------------------------


class ClusterApi(Protocol):
    """The part of `phalanx.sources.kubeclient.KubeClient` the plugin reads through."""

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]: ...

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes: ...


def connect(target: Target, request_timeout_seconds: float) -> ClusterApi:
    """The real transport on the target's context."""
    from phalanx.sources.kubeclient import KubeClient  # noqa: PLC0415  # slow import, only here

    try:
        client = KubeClient.from_kubeconfig(target.kubeconfig, context=target.context)
    except Exception as exc:
        # The client library's own errors (a user entry without credentials, a missing
        # certificate file, a failing exec plugin) are bad input here.
        raise PluginError(f"cannot use context {target.context!r}: {exc}") from exc
    client.request_timeout_seconds = request_timeout_seconds
    return client


def namespaced(api_root: str, resource: str, namespace: str | None) -> str:
    if namespace is None:
        return f"{api_root}/{resource}"
    return f"{api_root}/namespaces/{quote(namespace, safe='')}/{resource}"


class ClusterReader:
    """Read-only calls to the API of one target; failures as `PluginError`s that say where."""

    def __init__(self, api: ClusterApi, target: Target) -> None:
        self.api = api
        self.target = target

    def _error(self, what: str, exc: ApiError) -> PluginError:
        where = f"the API server {self.target.server} (context {self.target.context})"
        if exc.status == 0:
            return PluginError(f"cannot reach {where}: {exc}")
        if exc.status == 401:
            return PluginError(f"{where} refused the context's credentials: {exc}")
        if exc.status == 403:
            return PluginError(f"{where} forbids {what}: {exc.message or exc}")
        return PluginError(f"{what} from {where} failed: {exc}")

    def items(
        self, path: str, *, kind: str, api_version: str, missing_ok: bool = False
    ) -> list[dict[str, Any]]:
        """Every object of a list, page by page, each with its `kind` and `apiVersion` (a
        list's items carry neither); [] if `missing_ok` and the resource does not exist."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            try:
                page = orjson.loads(self.api.list(path, limit=PAGE, continue_token=token))
            except ApiError as exc:
                if missing_ok and exc.status == 404:
                    return []
                raise self._error(f"listing {path}", exc) from exc
            except orjson.JSONDecodeError as exc:
                raise PluginError(f"listing {path}: the answer is not JSON: {exc}") from exc
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    items.append({"apiVersion": api_version, "kind": kind, **item})
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return items

    def lease(self, namespace: str, name: str) -> LeaseView:
        """A Lease, or a view saying why it cannot be read (never raises for 403/404)."""
        path = f"{namespaced(LEASES, 'leases', namespace)}/{quote(name, safe='')}"
        try:
            return lease_view(namespace, name, self.api.request("GET", path))
        except ApiError as exc:
            if exc.status == 404:
                return lease_view(namespace, name, None, "not found")
            if exc.status == 403:
                return lease_view(namespace, name, None, "forbidden")
            raise self._error(f"reading Lease {namespace}/{name}", exc) from exc

    def get(self, path: str, what: str) -> dict[str, Any]:
        try:
            return self.api.request("GET", path)
        except ApiError as exc:
            raise self._error(what, exc) from exc

    # ---- what the commands read --------------------------------------------------------

    def served(self) -> discovery.Served:
        """The gang kinds the API server serves, chosen as Phalanx chooses them."""
        apis = self.get("/apis", "discovery (GET /apis)")
        lists = {}
        for group_version in discovery.probes(apis):
            try:
                lists[group_version] = self.api.request("GET", f"/apis/{group_version}")
            except ApiError as exc:
                if exc.status != 404:  # gone between the two answers: not served
                    raise self._error(f"discovery (GET /apis/{group_version})", exc) from exc
        return discovery.served(apis, lists)

    def group_objects(self, namespace: str | None) -> list[dict[str, Any]]:
        """The gang objects of every dialect the API server serves (PodGroups of each
        dialect, 1.35's Workloads); 404 on a list (a CRD removed meanwhile) is none."""
        found: list[dict[str, Any]] = []
        for kind in self.served().kinds:
            found += self.items(
                namespaced(f"/apis/{kind.api_version}", kind.resource, namespace),
                kind=kind.kind,
                api_version=kind.api_version,
                missing_ok=True,
            )
        return found

    def pods(self, namespace: str | None) -> list[dict[str, Any]]:
        return self.items(namespaced("/api/v1", "pods", namespace), kind="Pod", api_version="v1")

    def events(self, namespace: str | None) -> list[dict[str, Any]]:
        return self.items(
            namespaced("/api/v1", "events", namespace), kind="Event", api_version="v1"
        )

    def nodes(self) -> list[dict[str, Any]]:
        return self.items("/api/v1/nodes", kind="Node", api_version="v1")


def cluster_dump(reader: ClusterReader) -> dict[str, Any]:
    """`kubectl get nodes,pods,podgroups -A -o json` (the gang objects of every dialect), as
    `phalanx simulate` reads it (managedFields dropped: the simulator never reads them and
    they double the size)."""
    items = [*reader.nodes(), *reader.pods(None), *reader.group_objects(None)]
    for item in items:
        meta = item.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
    return {"apiVersion": "v1", "kind": "List", "items": items}


# ---- a running Phalanx ------------------------------------------------------------------------


def _debug_path(key: str) -> str:
    """Phalanx's view of the gang `key` (any dialect's: `/debug/groups/volcano:ns/name`)."""
    return f"/debug/groups/{quote(key, safe='/:')}"


def _in_namespace(summary: Mapping[str, Any], namespace: str) -> bool:
    ref = registry.parse_key(str(summary.get("group", "")))
    return ref is not None and ref.namespace == namespace


def _object(answer: httpx.Response) -> dict[str, Any]:
    body = answer.json()
    if not isinstance(body, dict):
        raise ValueError(f"{answer.request.url} answered {type(body).__name__}, not an object")
    return body


def ask_phalanx(
    server: str,
    keys: Sequence[str] | None,
    namespace: str | None,
    *,
    transport: httpx.BaseTransport | None = None,
) -> PhalanxView:
    """`/debug/groups` of the Phalanx at `server`, plus the detail of each gang in `keys`
    (None: of each gang it holds a reservation for), within `namespace` (None: all)."""
    server = server.rstrip("/")
    try:
        # No proxies from the environment: the server is normally a port-forward on loopback.
        client = httpx.Client(
            base_url=server, timeout=DEBUG_TIMEOUT_SECONDS, trust_env=False, transport=transport
        )
        with client:
            answer = client.get("/debug/groups")
            answer.raise_for_status()
            groups = [g for g in _object(answer).get("groups") or [] if isinstance(g, dict)]
            if namespace is not None:
                groups = [g for g in groups if _in_namespace(g, namespace)]
            wanted = (
                list(keys)
                if keys is not None
                else [str(g["group"]) for g in groups if g.get("phase") in RESERVED_PHASES]
            )
            details: dict[str, dict[str, Any]] = {}
            for key in wanted:
                detail = client.get(_debug_path(key))
                if detail.status_code == 404:
                    continue  # Phalanx does not know this gang (yet)
                detail.raise_for_status()
                details[key] = _object(detail)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        return PhalanxView(server, error=f"cannot ask Phalanx at {server}: {exc}")
    return PhalanxView(server, groups=tuple(groups), details=details)
