"""When the API server answered each binding: kube-apiserver's audit log, bindings only.

The benchmark's pod watch sees a binding when the API server's watch cache delivers it to
this process. On a saturated machine that is late by the cache's dispatch, by this
process's own turn on a core, and by the gap while the API server closes the watch as
unresponsive and it is opened again (`pod_watchers_closed` in the report): the more CPU a
contender's processes take, the later the benchmark sees what they bound. The audit log is
the API server's own record: the `stageTimestamp` of each binding's `ResponseComplete`
event, in microseconds, written as the answer goes out, whoever watches. The report gives
both: the watch's figures stay the ones the goals are judged by (as in every earlier run),
the audit's say how much of them is the benchmark's own lateness.

The policy records only `create` on `pods/binding`, at the `Metadata` level (no bodies), at
`ResponseComplete`: a line per binding, written by the log backend in blocking mode (a file
write on the request's goroutine), for every contender alike.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path

POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create"],
            "resources": [{"group": "", "resources": ["pods/binding"]}],
        },
        {"level": "None"},
    ],
}


def flags(workdir: Path) -> tuple[list[str], Path]:
    """kube-apiserver's flags for the bindings' audit log, and the log's path (both under
    `workdir`, which must exist)."""
    policy = workdir / "audit-policy.json"
    policy.write_text(json.dumps(POLICY))
    log = workdir / "audit.log"
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxbackup=0",
        "--audit-log-maxsize=0",
    ], log


def size(log: Path) -> int:
    """Where the log ends now (0 before its first line): a run reads from there."""
    try:
        return log.stat().st_size
    except OSError:
        return 0


def _events(log: Path, start: int) -> Iterator[dict[str, object]]:
    try:
        with log.open("rb") as f:
            f.seek(start)
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line cut by the read: its binding is simply not counted
                if isinstance(event, dict):
                    yield event
    except OSError:
        return


def bindings(log: Path, start: int, namespace: str) -> dict[str, float]:
    """Per pod of `namespace`, when the API server answered its first successful binding,
    on this process's `time.monotonic` clock; the log is read from byte `start`."""
    offset = time.time() - time.monotonic()  # both clocks are this machine's
    bound: dict[str, float] = {}
    for event in _events(log, start):
        ref = event.get("objectRef")
        status = event.get("responseStatus")
        if not isinstance(ref, dict) or not isinstance(status, dict):
            continue
        if ref.get("subresource") != "binding" or ref.get("namespace") != namespace:
            continue
        if event.get("stage") != "ResponseComplete" or status.get("code") not in (200, 201):
            continue
        name, stamp = ref.get("name"), event.get("stageTimestamp")
        if not isinstance(name, str) or not isinstance(stamp, str):
            continue
        at = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - offset
        bound[name] = min(at, bound.get(name, at))
    return bound
