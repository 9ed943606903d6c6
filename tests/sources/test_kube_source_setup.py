"""Building the live source from a kubeconfig: where its Lease lives."""

from pathlib import Path

import pytest
import yaml

from phalanx.sources.kube import KubeSource


def kubeconfig(tmp_path: Path, contexts: dict[str, str | None], current: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})},
            }
            for name, ns in contexts.items()
        ],
        "current-context": current,
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    ("context", "explicit", "expected"),
    [
        (None, None, "team-a"),  # the current context's namespace, as kubectl uses it
        ("other", None, "default"),  # a context without one: "default"
        ("other", "ops", "ops"),  # an explicit namespace wins
    ],
    ids=["current-context", "context-without-namespace", "explicit"],
)
def test_the_lease_lives_in_the_kubeconfig_contexts_namespace(
    tmp_path: Path, context: str | None, explicit: str | None, expected: str
) -> None:
    path = kubeconfig(tmp_path, {"main": "team-a", "other": None}, current="main")
    source = KubeSource.from_kubeconfig(path, context=context, namespace=explicit)
    assert source.namespace == expected
