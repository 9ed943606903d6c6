"""A fake of the plugin's transport (`ClusterApi`): lists in pages, GETs by path, errors on
demand. The real transport (`phalanx.sources.kubeclient.KubeClient`) is exercised against a
real API server in tests/e2e/test_kubectl_plugin.py."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from phalanx.sources.informer import ApiError


class FakeApi:
    """Lists served in pages of `page` items (a core list nobody filled is empty, any other
    unknown list a 404); GETs by path (404 when absent); an error per path if set."""

    def __init__(
        self,
        lists: Mapping[str, list[dict[str, Any]]] | None = None,
        objects: Mapping[str, dict[str, Any]] | None = None,
        errors: Mapping[str, ApiError] | None = None,
        page: int = 2,
    ) -> None:
        self.lists = dict(lists or {})
        self.objects = dict(objects or {})
        self.errors = dict(errors or {})
        self.page = page
        self.calls: list[str] = []

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.calls.append(f"{method} {path}")
        if path in self.errors:
            raise self.errors[path]
        if path in self.objects:
            return self.objects[path]
        discovered = self._discovery(path)
        if discovered is None:
            raise ApiError(404, "NotFound", f"{path} not found")
        return discovered

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """`GET /apis` and `GET /apis/<group>/<version>` as a server serving exactly the
        API collections this fake lists (or fails on): `/apis/<g>/<v>/[namespaces/<ns>/]<res>`."""
        served: dict[str, set[str]] = {}
        for listed in [*self.lists, *self.errors]:
            parts = listed.strip("/").split("/")
            if parts[0] == "apis" and len(parts) >= 4:
                served.setdefault(f"{parts[1]}/{parts[2]}", set()).add(parts[-1])
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for group_version in served:
                groups.setdefault(group_version.partition("/")[0], []).append(group_version)
            return {
                "kind": "APIGroupList",
                "groups": [
                    {"name": g, "versions": [{"groupVersion": gv} for gv in gvs]}
                    for g, gvs in groups.items()
                ],
            }
        resources = served.get(path.removeprefix("/apis/"))
        if resources is None:
            return None
        names = sorted(resources | {f"{r}/status" for r in resources})
        return {"kind": "APIResourceList", "resources": [{"name": n} for n in names]}

    def list(self, path: str, *, limit: int, continue_token: str) -> bytes:
        self.calls.append(f"LIST {path} {continue_token}")
        if path in self.errors:
            raise self.errors[path]
        if path not in self.lists and not path.startswith("/api/v1/"):
            # A resource of no installed API group (a CRD that is not there); core lists exist.
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        items = self.lists.get(path, [])
        start = int(continue_token or 0)
        end = start + min(limit, self.page)
        more = str(end) if end < len(items) else ""
        return json.dumps({"items": items[start:end], "metadata": {"continue": more}}).encode()
