"""Loading a cluster file: any file that is not a readable List is refused with a
ClusterFileError naming what is wrong, never another exception."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phalanx.sources.clusterfile import ClusterFileError, load_objects


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"kind": 5}', "'kind' must be a string, not a number"),
        (b"kind: [List]\n", "'kind' must be a string, not an array"),
        (b"\xff\xfe\x00bad", "not UTF-8 text (byte 0xff at offset 0)"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"spec": ' + b"1" * 5000 + b"}", "neither JSON nor YAML"),
        (b"replicas: " + b"1" * 5000 + b"\n", "neither JSON nor YAML"),
        (
            b'{"kind": "List", "items": [{"kind": "Node"}, 5]}',
            "items[1] must be an object, not a number",
        ),
        (b"kind: List\nitems:\n- kind: Node\n-\n", "items[1] must be an object, not null"),
    ],
    ids=[
        "kind-a-number",
        "kind-an-array",
        "not-utf-8",
        "too-deep",
        "json-long-int",
        "yaml-long-int",
        "item-a-number",
        "item-empty",
    ],
)
def test_an_unreadable_cluster_file_is_refused_naming_the_problem(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    with pytest.raises(ClusterFileError, match=re.escape(message)):
        load_objects(path)


@pytest.mark.parametrize(
    ("content", "labels"),
    [
        (
            b'{"metadata": {"labels": {"a": "x\\ud800y", "\\uDC00": "b"}}}',
            {"a": "x\ufffdy", "\ufffd": "b"},
        ),
        (
            b'metadata: {labels: {a: "x\\uD800y", b: "\\U0000DFFF"}}\n',
            {"a": "x\ufffdy", "b": "\ufffd"},
        ),
        (b'metadata: {labels: {a: "\\ud83d\\ude00"}}\n', {"a": "\U0001f600"}),
    ],
    ids=["json-lone-surrogates", "yaml-lone-surrogates", "yaml-surrogate-pair"],
)
def test_an_escaped_lone_surrogate_reads_as_the_replacement_character(
    tmp_path: Path, content: bytes, labels: dict[str, str]
) -> None:
    # As the API server stores it (Go's JSON decoder): no encoder takes a lone surrogate,
    # so one would fail every answer, log line or request that carries the object.
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    [obj] = load_objects(path)
    assert obj["metadata"]["labels"] == labels
