"""The API server's record of each binding (bench/audit.py), from hand-made audit lines."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import audit  # bench/audit.py


def line(name: str, stamp: str, *, ns: str = "b-1", code: int = 201, **ref: str) -> str:
    return json.dumps(
        {
            "kind": "Event",
            "stage": "ResponseComplete",
            "verb": "create",
            "objectRef": {
                "resource": "pods",
                "namespace": ns,
                "name": name,
                "subresource": "binding",
                **ref,
            },
            "responseStatus": {"code": code},
            "stageTimestamp": stamp,
        }
    )


def test_each_pod_is_timed_by_its_first_successful_binding_in_its_namespace(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                line("a-0", "2026-12-07T15:00:01.250000Z"),
                line("a-0", "2026-12-07T15:00:01.000000Z", code=409),  # refused: not bound
                line("a-1", "2026-12-07T15:00:02.000000Z"),
                line("a-1", "2026-12-07T15:00:01.500000Z"),  # the first answer counts
                line("x-0", "2026-12-07T15:00:01.000000Z", ns="b-2"),
                line("a-2", "2026-12-07T15:00:01.000000Z", subresource="status"),
                '{"kind": "Event", "stage": "ResponseCo',  # cut by the read
            ]
        )
    )
    bound = audit.bindings(log, 0, "b-1")

    assert sorted(bound) == ["a-0", "a-1"]
    assert bound["a-1"] - bound["a-0"] == pytest.approx(0.25, abs=1e-6)
    # On this process's monotonic clock: the wall-clock stamp less the clocks' offset.
    wall = 1_796_655_601.25  # 2026-12-07T15:00:01.25Z
    assert bound["a-0"] == pytest.approx(wall - (time.time() - time.monotonic()), abs=0.05)


def test_a_run_reads_the_log_from_where_it_ended_before_the_run(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    assert audit.size(log) == 0  # no log yet: from its start
    log.write_text(line("a-0", "2026-12-07T15:00:01Z", ns="b-1") + "\n")
    start = audit.size(log)
    with log.open("a") as f:
        f.write(line("a-1", "2026-12-07T15:00:02Z", ns="b-1") + "\n")

    assert sorted(audit.bindings(log, start, "b-1")) == ["a-1"]


def test_the_policy_records_bindings_alone_and_the_flags_name_its_file(tmp_path: Path) -> None:
    flags, log = audit.flags(tmp_path)

    policy = json.loads((tmp_path / "audit-policy.json").read_text())
    (bindings, rest) = policy["rules"]
    assert bindings["resources"] == [{"group": "", "resources": ["pods/binding"]}]
    assert rest == {"level": "None"}
    assert f"--audit-log-path={log}" in flags
    assert f"--audit-policy-file={tmp_path / 'audit-policy.json'}" in flags
