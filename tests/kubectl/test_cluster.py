"""Where the plugin reads from: the kubeconfig chosen as kubectl chooses it, paged reads
through a fake transport (the real one is exercised in tests/e2e), and a Phalanx's /debug
behind httpx's mock transport."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fake_api import FakeApi

from builders import lease_obj, node_obj, pod_obj
from phalanx.kubectl.cluster import (
    ClusterReader,
    PluginError,
    Target,
    ask_phalanx,
    cluster_dump,
    resolve_target,
)
from phalanx.sources.informer import ApiError


def kubeconfig(
    contexts: Mapping[str, str | None], current: str | None = None, server: str = "https://k:6443"
) -> dict[str, Any]:
    """A kubeconfig with one cluster; `contexts` maps a context name to its namespace."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})},
            }
            for name, ns in contexts.items()
        ],
    }
    if current is not None:
        config["current-context"] = current
    return config


def write(path: Path, config: Any) -> str:
    if isinstance(config, bytes):
        path.write_bytes(config)
    else:
        path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return str(path)


# ---- the kubeconfig ------------------------------------------------------------------------------


def test_the_current_context_and_its_namespace_are_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "k", kubeconfig({"dev": "team-a", "prod": None}, current="dev"))
    target = resolve_target(path, None, None, environ={}, home=tmp_path)
    assert target == Target(path, "dev", "team-a", "https://k:6443")


def test_context_and_namespace_flags_win(tmp_path: Path) -> None:
    path = write(tmp_path / "k", kubeconfig({"dev": "team-a", "prod": None}, current="dev"))
    target = resolve_target(path, "prod", None, environ={}, home=tmp_path)
    assert (target.context, target.namespace) == ("prod", "default")
    target = resolve_target(path, "dev", "team-b", environ={}, home=tmp_path)
    assert (target.context, target.namespace) == ("dev", "team-b")


def test_kubeconfig_files_merge_first_one_wins(tmp_path: Path) -> None:
    first = write(tmp_path / "a", kubeconfig({"dev": "from-a"}))  # no current context
    second = write(tmp_path / "b", kubeconfig({"dev": "from-b", "ops": None}, current="dev"))
    third = write(tmp_path / "c", kubeconfig({}, current="ops"))
    listed = os.pathsep.join([first, str(tmp_path / "missing"), second, third])
    target = resolve_target(None, None, None, environ={"KUBECONFIG": listed}, home=tmp_path)
    # current-context from the first file that sets it; the context from the first defining it.
    assert (target.context, target.namespace) == ("dev", "from-a")
    assert target.kubeconfig == os.pathsep.join([first, second, third])


def test_kubeconfig_flag_ignores_the_environment(tmp_path: Path) -> None:
    env_file = write(tmp_path / "env", kubeconfig({"env": None}, current="env"))
    flag_file = write(tmp_path / "flag", kubeconfig({"flag": None}, current="flag"))
    target = resolve_target(flag_file, None, None, environ={"KUBECONFIG": env_file}, home=tmp_path)
    assert target.context == "flag"


def test_home_kube_config_is_the_last_resort(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    write(tmp_path / ".kube" / "config", kubeconfig({"home": None}, current="home"))
    assert resolve_target(None, None, None, environ={}, home=tmp_path).context == "home"


BAD: list[tuple[str, Any, str | None, str | None, str]] = [
    ("no-file-anywhere", None, None, None, "no kubeconfig found"),
    ("flag-names-a-missing-file", "missing", None, None, "does not exist"),
    ("no-current-context", kubeconfig({"a": None, "b": None}), None, None, "contexts: a, b"),
    ("unknown-context", kubeconfig({"a": None}, "a"), "zzz", None, "context 'zzz' is not in"),
    ("current-context-undefined", kubeconfig({"a": None}, "gone"), None, None, "'gone' is not"),
    ("not-yaml", "clusters: [", None, None, "is not YAML"),
    ("nested-too-deeply", "[" * 50_000, None, None, "is nested too deeply to read"),
    (
        "not-utf-8",
        b"\xff\xfecontexts: []",
        None,
        None,
        r"is not UTF-8 text \(byte 0xff at offset 0\)",
    ),
    ("not-a-mapping", "- 1\n- 2\n", None, None, "is not a mapping"),
    ("contexts-not-a-list", {"contexts": {"a": 1}}, None, None, "contexts must be a list"),
    ("nameless-context", {"contexts": [{"context": {}}]}, None, None, "has no name"),
]


@pytest.mark.parametrize(
    ("config", "context", "namespace", "message"),
    [b[1:] for b in BAD],
    ids=[b[0] for b in BAD],
)
def test_an_unusable_kubeconfig_says_what_is_wrong(
    tmp_path: Path, config: Any, context: str | None, namespace: str | None, message: str
) -> None:
    if config is None:
        path = None
    elif config == "missing":
        path = str(tmp_path / "missing")
    else:
        path = write(tmp_path / "k", config)
    with pytest.raises(PluginError, match=message):
        resolve_target(path, context, namespace, environ={}, home=tmp_path)


# ---- the API -------------------------------------------------------------------------------------


TARGET = Target("k", "dev", "team-a", "https://k:6443")


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    """As a list's items come: without kind and apiVersion."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def test_lists_are_read_page_by_page_and_items_get_their_kind() -> None:
    pods = [pod_obj(f"p{i}", namespace="team-a") for i in range(5)]
    api = FakeApi({"/api/v1/namespaces/team-a/pods": [strip(p) for p in pods]})
    assert ClusterReader(api, TARGET).pods("team-a") == pods
    assert len([c for c in api.calls if c.startswith("LIST")]) == 3


def test_without_any_gang_api_served_there_are_no_gang_objects() -> None:
    api = FakeApi()
    assert ClusterReader(api, TARGET).group_objects(None) == []
    assert api.calls == ["GET /apis"]


def test_the_gang_objects_of_every_served_dialect_are_listed_each_with_its_kind() -> None:
    api = FakeApi(
        lists={
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups": [
                {"metadata": {"name": "sp"}}
            ],
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups": [
                {"metadata": {"name": "vc"}}
            ],
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups": [
                {"metadata": {"name": "up"}}
            ],
            # An older version of the same kind: Phalanx follows the newest served only.
            "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups": [
                {"metadata": {"name": "up"}}
            ],
        }
    )
    found = ClusterReader(api, TARGET).group_objects("ml")
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in found] == [
        ("scheduling.x-k8s.io/v1alpha1", "PodGroup", "sp"),
        ("scheduling.volcano.sh/v1beta1", "PodGroup", "vc"),
        ("scheduling.k8s.io/v1beta1", "PodGroup", "up"),
    ]


def test_a_discovery_the_server_refuses_is_an_error_naming_it() -> None:
    api = FakeApi(errors={"/apis": ApiError(403, "Forbidden", "no discovery for you")})
    with pytest.raises(PluginError, match=r"forbids discovery \(GET /apis\)"):
        ClusterReader(api, TARGET).group_objects(None)


API_ERRORS = [
    ("unreachable", ApiError(0, "MaxRetryError", "refused"), "cannot reach the API server"),
    ("bad-credentials", ApiError(401, "Unauthorized"), "refused the context's credentials"),
    ("forbidden", ApiError(403, "Forbidden", "cannot list pods"), "forbids listing"),
    ("server-error", ApiError(500, "InternalError", "boom"), "failed: HTTP 500"),
]


@pytest.mark.parametrize(
    ("error", "message"), [e[1:] for e in API_ERRORS], ids=[e[0] for e in API_ERRORS]
)
def test_an_api_failure_names_the_server_and_context(error: ApiError, message: str) -> None:
    api = FakeApi(errors={"/api/v1/pods": error})
    with pytest.raises(PluginError, match=message) as caught:
        ClusterReader(api, TARGET).pods(None)
    assert "https://k:6443 (context dev)" in str(caught.value)


LEASE = "/apis/coordination.k8s.io/v1/namespaces/phalanx-system/leases/phalanx-scheduler"
LEASES = [
    ("held", {LEASE: lease_obj("phalanx-scheduler", "pod-a_123")}, {}, "pod-a_123", ""),
    ("missing", {}, {}, "", "not found"),
    ("forbidden", {}, {LEASE: ApiError(403, "Forbidden")}, "", "forbidden"),
]


@pytest.mark.parametrize(
    ("objects", "errors", "holder", "error"), [x[1:] for x in LEASES], ids=[x[0] for x in LEASES]
)
def test_a_lease_is_read_or_says_why_not(
    objects: dict[str, Any], errors: dict[str, ApiError], holder: str, error: str
) -> None:
    view = ClusterReader(FakeApi(objects=objects, errors=errors), TARGET).lease(
        "phalanx-system", "phalanx-scheduler"
    )
    assert (view.holder, view.error) == (holder, error)


def test_an_unreachable_server_is_an_error_when_reading_a_lease_too() -> None:
    api = FakeApi(errors={LEASE: ApiError(0, "MaxRetryError")})
    with pytest.raises(PluginError, match="cannot reach"):
        ClusterReader(api, TARGET).lease("phalanx-system", "phalanx-scheduler")


def test_the_cluster_dump_is_nodes_pods_and_pod_groups_without_managed_fields() -> None:
    pod = pod_obj("p")
    pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    api = FakeApi(
        {
            "/api/v1/nodes": [strip(node_obj("n"))],
            "/api/v1/pods": [strip(pod)],
            "/apis/scheduling.x-k8s.io/v1alpha1/podgroups": [],
        }
    )
    dump = cluster_dump(ClusterReader(api, TARGET))
    assert [(i["kind"], i["metadata"]["name"]) for i in dump["items"]] == [
        ("Node", "n"),
        ("Pod", "p"),
    ]
    assert "managedFields" not in dump["items"][1]["metadata"]


# ---- a running Phalanx ---------------------------------------------------------------------------

SUMMARIES = [
    {"group": "team-a/held", "phase": "Scheduling"},
    {"group": "team-a/done", "phase": "Running"},
    {"group": "team-b/held", "phase": "Scheduling"},
    {"group": "volcano:team-a/job", "phase": "Scheduling"},
    {"group": "upstream:team-b/train/workers", "phase": "Scheduling"},
]


def debug_server(details: Mapping[str, Any]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/debug/groups":
            return httpx.Response(200, json={"groups": SUMMARIES})
        key = request.url.path.removeprefix("/debug/groups/")
        if key in details:
            return httpx.Response(200, json=details[key])
        return httpx.Response(404, json={"error": f"gang {key} is unknown"})

    return httpx.MockTransport(answer)


def test_phalanx_is_asked_about_the_reservations_it_holds_in_the_namespace() -> None:
    reservation = {"expires_in_seconds": 12.5, "members": [{"pod": "team-a/held-0"}]}
    details = {"team-a/held": {"group": "team-a/held", "reservation": reservation}}
    view = ask_phalanx("http://x/", None, "team-a", transport=debug_server(details))
    assert view.error == ""
    assert [g["group"] for g in view.groups] == ["team-a/held", "team-a/done", "volcano:team-a/job"]
    assert view.reservations() == [("team-a/held", reservation)]


def test_phalanx_is_asked_about_a_gang_of_any_dialect_by_its_key() -> None:
    details = {
        "volcano:team-a/job": {"group": "volcano:team-a/job", "dialect": "volcano"},
        "upstream:team-b/train/workers": {"group": "upstream:team-b/train/workers"},
    }
    view = ask_phalanx("http://x", None, None, transport=debug_server(details))
    assert sorted(view.details) == ["upstream:team-b/train/workers", "volcano:team-a/job"]
    assert view.details["volcano:team-a/job"]["dialect"] == "volcano"


def test_a_gang_phalanx_does_not_know_has_no_detail() -> None:
    view = ask_phalanx("http://x", ["team-a/nope"], None, transport=debug_server({}))
    assert (view.error, dict(view.details)) == ("", {})


def test_a_phalanx_that_answers_garbage_is_an_error_value() -> None:
    garbage = httpx.MockTransport(lambda _: httpx.Response(200, text="<html>"))
    view = ask_phalanx("http://x", None, None, transport=garbage)
    assert view.error.startswith("cannot ask Phalanx at http://x:")


def test_a_phalanx_that_refuses_is_an_error_value() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    view = ask_phalanx("http://x", None, None, transport=httpx.MockTransport(refuse))
    assert "connection refused" in view.error


@pytest.mark.parametrize("server", ["http://256.1.1.1:80", "http://[::1"])
def test_a_server_url_that_is_no_url_is_an_error_value_not_a_crash(server: str) -> None:
    view = ask_phalanx(server, None, None, transport=debug_server({}))
    assert view.error.startswith(f"cannot ask Phalanx at {server}: ")
