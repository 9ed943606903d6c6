"""The thin transport over the official `kubernetes` client: the only module that imports it.

Every request goes through `ApiClient.param_serialize` + `ApiClient.call_api`, which hand
back the raw urllib3 response unread (what `_preload_content=False` gives the generated
methods). Nothing is deserialised into the client's models:

* lists and watch events are bytes, decoded with orjson by the informer, which keeps only
  the fields Phalanx needs (the generic model deserialisation is the slow part of the
  client on a large cluster);
* a binding's answer is never decoded at all: some client versions raise a ValueError on
  `target` while deserialising it, which would report a successful bind as failed.

Errors come out as `informer.ApiError` (HTTP status, Status reason and message; status 0
when no answer came) and, for bindings, as `BindError` with `gone` / `conflict` set. Calls
block: the source runs them on informer threads or its bounded thread pool, never on the
event loop.

`KubeClient.metadata()` is the same client asking for metadata only (PartialObjectMetadata,
as client-go's metadata client does), for a kind whose objects are large and whose metadata
says enough (CustomResourceDefinitions: their schemas can run to hundreds of KB).

`kubeconfig_access` / `in_cluster_access` hand the same loaders' result to clients with a
transport of their own (`kube_async.AsyncKubeClient`) as a `ClusterAccess`, so this stays
the one module that knows the `kubernetes` client.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from phalanx.core.model import Binding
from phalanx.sources.base import BindError
from phalanx.sources.informer import ApiError

USER_AGENT = "phalanx"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# Kubernetes' own patch for built-in kinds: lists with a merge key are merged by it.
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# Each object's `metadata` only, as a list and as a watch event's object; plain JSON last, so
# an API server that cannot transform answers whole objects rather than 406.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
# Enough for three watches, the lease, and the source's bind pool at once.
POOL_CONNECTIONS = 32


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    """Where one API server is and how to authenticate to it, as the client's loaders read it."""

    host: str  # scheme://host:port[/prefix], no trailing slash
    ca_file: str | None  # PEM bundle to verify the server; None: the system's trust store
    cert_file: str | None  # client certificate (mTLS), with key_file
    key_file: str | None
    verify: bool  # False only when the kubeconfig says insecure-skip-tls-verify
    tls_server_name: str | None  # SNI and the name verified, when it differs from the host
    proxy: str | None  # the kubeconfig's proxy-url
    # The Authorization header value ("" when the credential is a client certificate).
    # Re-reads an expiring credential (a projected token file, an exec plugin), so it may
    # block: call it off the event loop.
    authorization: Callable[[], str]


def kubeconfig_access(path: str | Path, *, context: str | None = None) -> ClusterAccess:
    cfg = k8s_client.Configuration()
    load: Any = k8s_config.load_kube_config  # untyped
    load(config_file=str(path), context=context, client_configuration=cfg, persist_config=False)
    return _access(cfg)


def kubeconfig_namespace(path: str | Path, *, context: str | None = None) -> str | None:
    """The namespace the kubeconfig's (current or named) context sets, as kubectl reads it;
    None when it sets none."""
    read: Any = k8s_config.list_kube_config_contexts  # untyped
    contexts, active = read(config_file=str(path))
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


def in_cluster_access() -> ClusterAccess:
    cfg = k8s_client.Configuration()
    load: Any = k8s_config.load_incluster_config  # untyped
    load(client_configuration=cfg)  # its hook re-reads the rotating token file every minute
    return _access(cfg)


def _access(cfg: Any) -> ClusterAccess:
    def authorization() -> str:
        # Runs the loader's refresh hook first, as the client does before every request.
        value = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        return str(value or "")

    return ClusterAccess(
        host=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert or None,
        cert_file=cfg.cert_file or None,
        key_file=cfg.key_file or None,
        verify=bool(cfg.verify_ssl),
        tls_server_name=cfg.tls_server_name or None,
        proxy=cfg.proxy or None,
        authorization=authorization,
    )


class KubeClient:
    """Raw JSON calls to one API server. Thread-safe (urllib3's pool is)."""

    def __init__(self, api_client: Any, *, request_timeout_seconds: float = 30.0) -> None:
        self._api = api_client
        self._api.user_agent = USER_AGENT
        self.request_timeout_seconds = request_timeout_seconds

    @classmethod
    def from_kubeconfig(cls, path: str | Path, *, context: str | None = None) -> KubeClient:
        cfg = k8s_client.Configuration()
        load: Any = k8s_config.load_kube_config  # untyped
        load(config_file=str(path), context=context, client_configuration=cfg, persist_config=False)
        return cls._with(cfg)

    @classmethod
    def in_cluster(cls) -> KubeClient:
        cfg = k8s_client.Configuration()
        load: Any = k8s_config.load_incluster_config  # untyped
        load(client_configuration=cfg)
        return cls._with(cfg)

    @classmethod
    def _with(cls, cfg: Any) -> KubeClient:
        cfg.connection_pool_maxsize = POOL_CONNECTIONS
        return cls(k8s_client.ApiClient(cfg))

    def close(self) -> None:
        self._api.close()

    # ---- raw requests ------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        timeout: tuple[float, float] | None = None,
        accept: str = JSON,
    ) -> Any:
        """The urllib3 response of a 2xx answer, unread; raises ApiError otherwise."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, payload, post = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        limit = timeout or (10.0, self.request_timeout_seconds)
        try:
            answer = self._api.call_api(method, url, headers, payload, post, _request_timeout=limit)
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, type(exc).__name__, str(exc)) from exc
        except k8s_client.ApiException as exc:  # raised for TLS failures before any answer
            raise ApiError(
                int(exc.status or 0), str(exc.reason or ""), str(exc.body or "")
            ) from exc
        raw = answer.response
        if 200 <= raw.status < 300:
            return raw
        try:
            data = raw.data
        except urllib3.exceptions.HTTPError:
            data = b""
        raise api_error(raw.status, data)

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        """One JSON request; the decoded answer ({} when it is not a JSON object)."""
        raw = self._send(method, path, body=body, content_type=content_type)
        try:
            data = raw.data
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, type(exc).__name__, str(exc)) from exc
        try:
            decoded = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            return {}
        return decoded if isinstance(decoded, dict) else {}

    def patch(
        self, path: str, body: Mapping[str, Any], *, content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386), or the patch `content_type` names; also on
        status subresources."""
        return self.request("PATCH", path, body, content_type=content_type)

    # ---- informer transport --------------------------------------------------------------

    def metadata(self) -> MetadataClient:
        """This client, listing and watching each object's metadata only."""
        return MetadataClient(self)

    def list(self, path: str, *, limit: int, continue_token: str, accept: str = JSON) -> bytes:
        query = [("limit", str(limit))]
        if continue_token:
            query.append(("continue", continue_token))
        raw = self._send("GET", path, query=query, timeout=(10.0, 120.0), accept=accept)
        try:
            return bytes(raw.data)
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, type(exc).__name__, str(exc)) from exc

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int, accept: str = JSON
    ) -> _Stream:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        # The read timeout outlives the server's own timeout: a silent connection is dead.
        raw = self._send(
            "GET", path, query=query, timeout=(10.0, timeout_seconds + 60.0), accept=accept
        )
        return _Stream(raw)

    # ---- bindings ------------------------------------------------------------------------

    def bind(self, binding: Binding, annotations: Mapping[str, str] | None = None) -> None:
        """POST pods/{name}/binding; BindError(gone=...) / (conflict=...) on refusal."""
        pod, node = binding.pod, binding.node
        namespace, name, uid = pod.namespace, pod.name, pod.uid
        body = binding_body(namespace, name, uid, node, annotations)
        try:
            raw = self._send("POST", binding_path(namespace, name), body=body)
        except ApiError as exc:
            raise bind_error(namespace, name, node, exc) from exc
        raw.release_conn()  # the answer is never read (see module docstring)


class MetadataClient:
    """An informer's transport answering PartialObjectMetadata: per object its `metadata`
    (name, UID, resourceVersion, labels, ...) and nothing else, on the client's connections."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        return self._client.list(
            path, limit=limit, continue_token=continue_token, accept=METADATA_LIST
        )

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> _Stream:
        return self._client.watch(
            path,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            accept=METADATA,
        )


def binding_body(
    namespace: str,
    name: str,
    uid: str,
    node: str,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Binding object for `pods/{name}/binding`; the UID makes it a precondition, and
    the API server writes its `annotations` onto the pod in the same update as its node."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def binding_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}/binding"


def bind_error(namespace: str, name: str, node: str, exc: ApiError) -> BindError:
    """What a refused binding means for the service: gone, conflict, or worth a retry."""
    what = f"binding pod {namespace}/{name} to {node}: {exc}"
    if exc.status == 404:
        return BindError(what, gone=True)
    if exc.status == 409:
        # A UID precondition failure means the pod we planned for was deleted and
        # recreated under the same name: for that pod, it is gone.
        if "Precondition failed: UID" in exc.message:
            return BindError(what, gone=True)
        return BindError(what, conflict=True)
    return BindError(what)


def api_error(status: int, data: bytes) -> ApiError:
    """The ApiError of a refused request, from its status and (Status object) body."""
    reason, message = "", ""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or "")
    elif data:
        message = data[:200].decode(errors="replace")
    return ApiError(status, reason, message)


class _Stream:
    """A watch response as lines; `close` (from any thread) unblocks a pending read."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        try:
            for chunk in self._raw.stream(65536, decode_content=True):
                pending += chunk
                if b"\n" not in chunk:
                    continue
                *lines, pending = pending.split(b"\n")
                yield from lines
        except Exception as exc:
            if self._closed.is_set():
                return  # closed under our feet by close(): whatever the read raised is moot
            raise ApiError(0, type(exc).__name__, str(exc)) from exc
        if pending.strip() and not self._closed.is_set():
            yield pending

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # nothing left to shut
            self._raw.shutdown()  # unblocks a read in progress on another thread
        self._raw.close()  # never back to the pool: it may have been cut mid-stream
