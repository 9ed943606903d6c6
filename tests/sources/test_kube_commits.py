"""Commit records read from the watched objects that carry them."""

from __future__ import annotations

from builders import pod_obj
from phalanx.core.rollforward import COMMIT_ANNOTATION
from phalanx.sources.kube_commits import decode_pod


def test_a_pod_whose_commit_record_is_nested_too_deeply_is_kept_with_the_records_problem() -> None:
    # An annotation holds up to 256 KiB: room for far more nesting than Python's parser takes.
    raw = pod_obj("w-0", group="train", annotations={COMMIT_ANNOTATION: "[" * 100_000})

    recorded = decode_pod(raw)

    assert recorded.obj.name == "w-0"
    assert recorded.commit is None
    assert recorded.commit_error == f"{COMMIT_ANNOTATION} is not JSON: nested too deeply"
