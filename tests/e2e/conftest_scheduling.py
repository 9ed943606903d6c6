"""Fixtures for scheduling through kube-scheduler → Phalanx → the real API.

``pytest_plugins`` is only allowed in the root conftest, so test modules import these
fixtures by name::

    from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401

* ``phalanx`` (module): ``phalanx serve --kubeconfig <admin>`` as a real subprocess
  (:class:`phalanx_process.PhalanxProcess`), given kube-scheduler's configuration
  (``--scheduler-config``) as the chart gives it; a module may set ``PHALANX_ARGS`` (extra
  ``serve`` flags) for its own instance.
* ``scheduler`` (module): the real kube-scheduler running **the chart's**
  ``KubeSchedulerConfiguration``, taken from the rendered ``deploy/manifests/phalanx.yaml``
  (see :func:`scheduler_config` for the only fields rewritten).
* A module may set ``SCHEDULER_NAME``: the profile's ``schedulerName`` and the name Phalanx
  serves (``--scheduler-name``), as the chart's ``schedulerName`` value sets both.
* A module may set ``CHART_VALUES``: the chart is then rendered with them (``helm template``,
  the ``helm_tool`` fixture) instead of read from deploy/manifests/phalanx.yaml, and
  kube-scheduler is the build of the image that render runs (:data:`IMAGE_BUILDS`).
* ``cluster`` (function): a :class:`scheduling.Scenario` in a fresh namespace with its own
  node pool, an :class:`scheduling.InvariantMonitor` running for the whole test, and the
  invariant verdict asserted at teardown (a test that wants it sooner calls
  ``cluster.verdict()``).
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chartkit
import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
import yaml
from chartkit import MANIFESTS, REPO
from phalanx_process import PhalanxProcess
from podgroup_crd import ensure_pod_group_crd
from scheduling import SCHEDULER_NAME, Api, Obj, Scenario, Verdict

import tiers

LEASE_NAMESPACE = "kube-system"  # exists in every cluster; the chart's namespace may not

#: The fixture giving the build of each kube-scheduler image the chart may run, where it is
#: not the control plane's own kube-scheduler (upstream's image, of the same release).
IMAGE_BUILDS = {"registry.k8s.io/scheduler-plugins/kube-scheduler": "scheduler_plugins_tool"}
UPSTREAM_IMAGE = "registry.k8s.io/kube-scheduler"

#: DESIGN.md §2's reference configuration: used only while the rendered chart is missing
#: (the chart is the contract; see scheduler_config). PHALANX_REQUIRE_E2E makes that an error.
REFERENCE_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: true, resourceName: phalanx-scheduler}
percentageOfNodesToScore: 100
profiles:
- schedulerName: phalanx
extenders:
- urlPrefix: http://127.0.0.1:8888
  filterVerb: filter
  prioritizeVerb: prioritize
  preemptVerb: preempt
  bindVerb: bind
  weight: 10
  nodeCacheCapable: true
  httpTimeout: 30s
  ignorable: false
"""


def chart_scheduler_config(path: Path = MANIFESTS) -> dict[str, Any] | None:
    """The KubeSchedulerConfiguration inside the rendered chart's ConfigMap (None if absent)."""
    if not path.is_file():
        return None
    return chartkit.kube_scheduler_configuration(chartkit.documents(path))


@dataclass(frozen=True)
class ChartScheduler:
    """The chart's kube-scheduler container as the e2e tier runs it."""

    config: dict[str, Any]  # its KubeSchedulerConfiguration, as the chart renders it
    origin: str  # what rendered it
    binary: Path | None = None  # the build of its image; None: the control plane's own


def module_chart_scheduler(request: pytest.FixtureRequest) -> ChartScheduler | None:
    """The chart rendered with the module's ``CHART_VALUES`` (None without them)."""
    values = getattr(request.module, "CHART_VALUES", None)
    if values is None:
        return None
    docs = chartkit.render(request.getfixturevalue("helm_tool"), values)
    config = chartkit.kube_scheduler_configuration(docs)
    assert config is not None, f"the chart rendered with {values} has no scheduler ConfigMap"
    repository = chartkit.container_image(docs, "kube-scheduler").rsplit(":", 1)[0]
    if repository == UPSTREAM_IMAGE:
        binary = None
    else:
        assert repository in IMAGE_BUILDS, f"no build here of the chart's image {repository}"
        binary = request.getfixturevalue(IMAGE_BUILDS[repository])
    origin = f"{chartkit.CHART.relative_to(REPO)} rendered with {values}"
    return ChartScheduler(config, origin, binary)


def scheduler_config(
    phalanx_url: str,
    lease_name: str,
    profile: str = SCHEDULER_NAME,
    chart: ChartScheduler | None = None,
) -> tuple[dict[str, Any], str]:
    """The configuration the e2e kube-scheduler runs, and where it came from.

    Taken from the rendered chart: ``chart``, else deploy/manifests/phalanx.yaml. Rewritten,
    because the test cluster differs from a chart install: each extender's ``urlPrefix`` (the
    test's Phalanx port), ``leaderElection.resourceNamespace`` (``kube-system``: the chart's
    namespace may not exist here) and ``resourceName`` (fresh per start, so a restarted
    scheduler need not wait out the previous one's lease); the profile's ``schedulerName`` is
    ``profile`` (what the chart's ``schedulerName`` value sets). ``clientConnection.kubeconfig``
    is filled in by ``ControlPlane.start_scheduler``. Everything else — profiles,
    ``percentageOfNodesToScore``, the extender's verbs, ``nodeCacheCapable``, ``httpTimeout``,
    ``ignorable``, ``weight``, lease timings, client QPS — is the chart's.
    """
    if chart is not None:
        rendered, origin = chart.config, chart.origin
    elif (manifest := chart_scheduler_config()) is not None:
        rendered, origin = manifest, str(MANIFESTS.relative_to(REPO))
    else:
        # The rendered chart is the contract; without it, DESIGN.md §2's reference config.
        if tiers.required():
            pytest.fail(
                f"PHALANX_REQUIRE_E2E is set, but {MANIFESTS.relative_to(REPO)} has no "
                "KubeSchedulerConfiguration ConfigMap (render the chart: deploy/render.sh)",
                pytrace=False,
            )
        rendered, origin = yaml.safe_load(REFERENCE_CONFIG), "DESIGN.md §2 reference (fallback)"
    config = copy.deepcopy(rendered)
    extenders = config.get("extenders") or []
    assert extenders, f"{origin}: no extenders in the KubeSchedulerConfiguration"
    for extender in extenders:
        extender["urlPrefix"] = phalanx_url
    election = config.setdefault("leaderElection", {})
    election["resourceNamespace"] = LEASE_NAMESPACE
    election["resourceName"] = lease_name
    for entry in config.get("profiles") or []:
        if entry.get("schedulerName") == SCHEDULER_NAME:
            entry["schedulerName"] = profile
    return config, origin


def profile_name(request: pytest.FixtureRequest) -> str:
    """The scheduler name a module's pods use (its ``SCHEDULER_NAME``, else the chart's)."""
    return str(getattr(request.module, "SCHEDULER_NAME", SCHEDULER_NAME))


# ---- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def phalanx(
    control_plane: launcher.ControlPlane, request: pytest.FixtureRequest
) -> Iterator[PhalanxProcess]:
    """``phalanx serve`` for this module (extra flags: the module's ``PHALANX_ARGS``)."""
    ensure_pod_group_crd(control_plane)  # before Phalanx starts: it follows the CRD if present
    module = request.module.__name__.rsplit(".", 1)[-1]
    workdir = control_plane.workdir / f"phalanx-{module}"
    workdir.mkdir(parents=True, exist_ok=True)
    # The configuration kube-scheduler runs (only the profiles matter to Phalanx's check).
    name = profile_name(request)
    chart = module_chart_scheduler(request)
    config_path = workdir / "kube-scheduler.yaml"
    config_path.write_text(
        yaml.safe_dump(scheduler_config("http://127.0.0.1:1", "unused", name, chart)[0])
    )
    args = [
        f"--scheduler-config={config_path}",
        f"--scheduler-name={name}",
        *getattr(request.module, "PHALANX_ARGS", ()),
    ]
    proc = PhalanxProcess(control_plane.kubeconfig, workdir, extra_args=args)
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


class Scheduler:
    """The e2e kube-scheduler: the chart's configuration, pointed at the test's Phalanx
    (``chart``: a render other than deploy/manifests/phalanx.yaml, and its image's build)."""

    def __init__(
        self,
        cp: launcher.ControlPlane,
        phalanx: PhalanxProcess,
        profile: str = SCHEDULER_NAME,
        chart: ChartScheduler | None = None,
    ) -> None:
        self.cp = cp
        self.phalanx = phalanx
        self.profile = profile
        self.chart = chart
        self.config: dict[str, Any] = {}
        self.origin = ""
        self.starts = 0

    def start(self) -> None:
        lease = f"phalanx-scheduler-e2e-{uuid.uuid4().hex[:8]}"
        self.config, self.origin = scheduler_config(
            self.phalanx.url, lease, self.profile, self.chart
        )
        self.start_again()

    def start_again(self) -> None:
        """Start it with the configuration it last ran, its Lease's name too, as its
        container restarts: after a SIGKILL it waits out the dead one's Lease first."""
        binary = self.chart.binary if self.chart is not None else None
        self.cp.start_scheduler(yaml.safe_dump(self.config, sort_keys=False), binary=binary)
        self.starts += 1

    def ensure_running(self) -> bool:
        """Start it again if it exited (e.g. it lost its lease while the API was down).
        True if it had to be restarted."""
        component = self.cp.scheduler
        if component is not None and component.running:
            return False
        self.start()
        return True

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM (it releases its Lease on the way out), or SIGKILL (``kill``: a crash)."""
        self.cp.stop_scheduler(kill=kill)


@pytest.fixture(scope="module")
def scheduler(
    control_plane: launcher.ControlPlane, phalanx: PhalanxProcess, request: pytest.FixtureRequest
) -> Iterator[Scheduler]:
    sched = Scheduler(
        control_plane, phalanx, profile_name(request), module_chart_scheduler(request)
    )
    sched.start()
    try:
        yield sched
    finally:
        sched.stop()


@pytest.fixture
def cluster(
    control_plane: launcher.ControlPlane,
    namespace: str,
    gpu_nodes: Callable[..., dict[str, Any]],
    phalanx: PhalanxProcess,
    scheduler: Scheduler,
) -> Iterator[Scenario]:
    """One test's world, watched by the invariant monitor from start to end."""
    api = Api(control_plane)
    scenario = Scenario(control_plane, api, phalanx, namespace, gpu_nodes)
    scenario.monitor.start()
    try:
        yield scenario
    finally:
        verdict: Verdict = scenario.monitor.stop()
        api.close()
    verdict.assert_clean(scenario.max_partial_seconds)


@contextlib.contextmanager
def native_gang_left_on(
    control_plane: launcher.ControlPlane, scheduler: Scheduler, sc: Scenario, tmp_path: Path
) -> Iterator[PhalanxProcess]:
    """A misconfigured install, for as long as the block runs: kube-scheduler (gates on)
    runs a profile without the chart's `multiPoint.disabled` list, and a second Phalanx is
    given that configuration; that Phalanx has said so at start, once. Afterwards the
    module's supported setup runs again."""
    misconfigured = tmp_path / "kube-scheduler.yaml"
    other = PhalanxProcess(
        control_plane.kubeconfig,
        tmp_path,
        extra_args=[f"--scheduler-config={misconfigured}"],
        name="phalanx-misconfigured",
    )
    config, _ = scheduler_config(other.url, f"phalanx-misconfigured-{sc.namespace}")
    for profile in config["profiles"]:
        profile.pop("plugins", None)  # kube-scheduler's own gang plugins stay on
    misconfigured.write_text(yaml.safe_dump(config, sort_keys=False))
    other.start()
    try:
        said = [
            r
            for r in other.log_records()
            if 'kube-scheduler profile "phalanx" does not disable its own GangScheduling'
            in str(r.get("msg", ""))
        ]
        assert len(said) == 1, other.tail(20)
        control_plane.start_scheduler(yaml.safe_dump(config))
        yield other
    finally:
        other.close()
        scheduler.start()


def phalanx_hears_a_lone_member_and_binds_the_pair(
    sc: Scenario,
    pod_group: Callable[[Scenario, str, int], Obj],
    member: Callable[[Scenario, str, str, int], Obj],
) -> None:
    """The chart's profile (kube-scheduler's GangScheduling off): Phalanx decides about a
    gang's first member while it is alone, and the pair binds when the second arrives.
    `pod_group` and `member` make the objects in the release's own API version (`sc` judged
    by its gang sizes already); the caller checks the release's own condition after."""
    sc.node("a", 8)
    sc.nodes_ready()
    pod_group(sc, "pair", 2)
    member(sc, "pair-0", "pair", 4)
    sc.wait(
        "Phalanx's first decision about the gang",
        lambda: [e for e in sc.events("pair") if e.get("reportingComponent") == "phalanx"],
    )
    member(sc, "pair-1", "pair", 4)
    sc.wait_bound(["pair-0", "pair-1"], timeout=60)


def native_gang_plugin_holds_a_lone_member(
    control_plane: launcher.ControlPlane,
    scheduler: Scheduler,
    sc: Scenario,
    tmp_path: Path,
    pod_group: Callable[[Scenario, str, int], Obj],
    member: Callable[[Scenario, str, str, int], Obj],
) -> None:
    """kube-scheduler's own GangScheduling left on in Phalanx's profile (`native_gang_left_on`)
    holds a gang's lone member at PreEnqueue, unseen by Phalanx, which warns on the
    PodGroup; the gang binds once complete. `pod_group` and `member` make the objects in the
    release's own API version (`sc` judged by its gang sizes already)."""
    sc.node("a", 8)
    sc.nodes_ready()
    with native_gang_left_on(control_plane, scheduler, sc, tmp_path):
        pod_group(sc, "late", 2)
        member(sc, "late-0", "late", 4)
        event = sc.wait_event("late", "does not disable its own GangScheduling")
        assert (event["reason"], event["type"]) == ("NativeGangScheduling", "Warning")
        sc.assert_unbound_for(["late-0"], 3.0)
        decisions = [
            e
            for e in sc.events("late")
            if e.get("reportingComponent") == "phalanx" and e["reason"] != "NativeGangScheduling"
        ]
        assert decisions == [], decisions  # held at kube-scheduler's PreEnqueue, unseen
        member(sc, "late-1", "late", 4)
        sc.wait_bound(["late-0", "late-1"], timeout=60)
