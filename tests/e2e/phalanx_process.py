"""`phalanx serve` against the e2e control plane, as a real subprocess.

The e2e tier runs Phalanx exactly as an operator does — the console script, a kubeconfig,
loopback ports — so what is tested is the process kube-scheduler talks to, not an
in-process imitation. :class:`PhalanxProcess` starts it, waits for ``/readyz``, can kill it
with SIGKILL (a crash: no graceful shutdown, held ``/bind`` requests just break) and start
it again on the same ports (kube-scheduler's ``urlPrefix`` names the port), and reads
``/metrics``, ``/debug/groups`` and its JSON log lines.

Used by the fixtures in ``conftest_scheduling.py``; nothing here knows about pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
from prometheus_client.parser import text_string_to_metric_families

#: Environment variables of the test runner that must not reach Phalanx's settings
#: (pydantic-settings reads every ``PHALANX_*`` variable; the runner's are for the tests).
_RUNNER_ENV_PREFIX = "PHALANX_"


def phalanx_command() -> list[str]:
    """The installed ``phalanx`` console script of this interpreter's environment."""
    script = shutil.which("phalanx", path=str(Path(sys.executable).parent))
    if script is not None:
        return [script]
    # Same entry point, for an environment whose scripts directory is elsewhere.
    return [sys.executable, "-c", "import sys; from phalanx.cli import main; sys.exit(main())"]


class PhalanxProcess:
    """One ``phalanx serve --kubeconfig ...`` process; ports stay fixed across restarts."""

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        *,
        extra_args: Sequence[str] = (),
        name: str = "phalanx",
        startup_timeout: float = 60.0,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.port, self.metrics_port = launcher.free_ports(2)
        self.url = f"http://{launcher.LOOPBACK}:{self.port}"
        self.metrics_url = f"http://{launcher.LOOPBACK}:{self.metrics_port}"
        self.log_path = workdir / f"{name}.log"
        self.startup_timeout = startup_timeout
        self.starts = 0
        env = {k: v for k, v in os.environ.items() if not k.startswith(_RUNNER_ENV_PREFIX)}
        env.pop("KUBECONFIG", None)
        self.component = launcher.Component(name, self.argv(), self.log_path, env=env)
        # No proxies (CI runners set them) and short timeouts: every call is to loopback.
        self._http = httpx.Client(timeout=10.0, trust_env=False)

    def argv(self) -> list[str]:
        return [
            *phalanx_command(),
            "serve",
            f"--kubeconfig={self.kubeconfig}",
            f"--host={launcher.LOOPBACK}",
            f"--port={self.port}",
            f"--metrics-port={self.metrics_port}",
            "--log-level=info",
            *self.extra_args,
        ]

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start it and wait until ``/readyz`` says the cluster model is synced."""
        self.component.start()
        self.starts += 1
        self.wait_ready()

    def wait_ready(self, timeout: float | None = None) -> None:
        def ready() -> bool:
            self.component.check_alive()
            return self._http.get(f"{self.url}/readyz").status_code == 200

        launcher.wait_for(
            "phalanx /readyz",
            ready,
            timeout=timeout or self.startup_timeout,
            interval=0.1,
            on_timeout=self.tail,
        )

    def kill(self) -> None:
        """SIGKILL: a crash. Held ``/bind`` requests see their connection break."""
        self.component.stop(kill=True)

    def stop(self) -> None:
        """SIGTERM (graceful: held binds are answered), then SIGKILL if it lingers."""
        self.component.stop(timeout=10.0)

    def restart(self, *, crash: bool = True) -> None:
        if crash:
            self.kill()
        else:
            self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self._http.close()

    @property
    def running(self) -> bool:
        return self.component.running

    @property
    def pid(self) -> int | None:
        return self.component.pid

    def check_alive(self) -> None:
        """Raise (with the log tail) if the process has exited."""
        self.component.check_alive()

    # ---- HTTP ------------------------------------------------------------------------

    def get(self, path: str) -> httpx.Response:
        return self._http.get(f"{self.url}{path}")

    def ready(self) -> bool:
        try:
            return self.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def debug_groups(self) -> list[dict[str, Any]]:
        answer = self.get("/debug/groups")
        answer.raise_for_status()
        groups: list[dict[str, Any]] = answer.json()["groups"]
        return groups

    def debug_group(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``/debug/groups/{namespace}/{name}``, or None when Phalanx does not know the gang."""
        answer = self.get(f"/debug/groups/{namespace}/{name}")
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        view: dict[str, Any] = answer.json()
        return view

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics`` on the metrics port: (sample name, labels) -> value."""
        answer = self._http.get(f"{self.metrics_url}/metrics")
        answer.raise_for_status()
        samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(answer.text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
        wanted = set(labels.items())
        return sum(
            value
            for (sample, have), value in self.scrape().items()
            if sample == name and wanted <= set(have)
        )

    # ---- logs ------------------------------------------------------------------------

    def log_records(self) -> list[dict[str, Any]]:
        """Every JSON log line written so far (all starts), oldest first."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        records = []
        for line in text.splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue  # a line cut short by SIGKILL
        return records

    def tail(self, lines: int = 60) -> str:
        return f"----- phalanx ({self.log_path}) -----\n{self.component.tail(lines)}"

    def wait_metric(
        self,
        name: str,
        predicate: Any,
        *,
        labels: Mapping[str, str] | None = None,
        timeout: float = 20.0,
        what: str = "",
    ) -> float:
        """Wait until ``predicate(metric value)`` holds; return the value."""
        seen: list[float] = []

        def probe() -> bool:
            value = self.metric(name, **(labels or {}))
            seen.append(value)
            return bool(predicate(value))

        launcher.wait_for(
            what or f"metric {name}{dict(labels or {})}",
            probe,
            timeout=timeout,
            interval=0.2,
            on_timeout=lambda: f"last value: {seen[-1] if seen else None}\n{self.tail()}",
        )
        return seen[-1]
