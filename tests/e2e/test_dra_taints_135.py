"""DeviceTaintRules on Kubernetes 1.35, the chart's default kube-scheduler, where only the
alpha ``resource.k8s.io/v1alpha3`` serves them.

This module runs a control plane of its own (the default release): ``DRADeviceTaints`` and
``DRADeviceTaintRules`` on for kube-apiserver and kube-scheduler, and
``resource.k8s.io/v1alpha3`` in kube-apiserver's runtime config. The session's control
plane, which other specs rely on, stays as it is. Checked here: a rule tainting the GPU of
one of two kwok nodes keeps a gang that does not tolerate it off that GPU, and
kube-scheduler's allocator, which reads the same rule, allocates where Phalanx planned.
"""

from __future__ import annotations

from collections.abc import Iterator

import launcher
import planes
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Scenario
from test_dra_taints import a_rule_keeps_a_plain_gang_off_the_gpu_it_taints, slices  # noqa: F401

from builders import nvidia_class_objs

pytestmark = pytest.mark.e2e

RULES_VERSION = "resource.k8s.io/v1alpha3"
RULES_API = f"/apis/{RULES_VERSION}"
# Alpha in 1.35: slices' taints and claims' tolerations (DRADeviceTaints), the rules
# themselves (DRADeviceTaintRules, which needs the former). kube-scheduler reads the rules
# only with both on.
TAINT_GATES = {"DRADeviceTaints": True, "DRADeviceTaintRules": True}


@pytest.fixture(scope="module")
def control_plane(pytestconfig: pytest.Config) -> Iterator[launcher.ControlPlane]:
    """This module's 1.35 control plane (see the module docstring); replaces the session's."""
    with planes.started(
        pytestconfig,
        "control_plane",
        apiserver_feature_gates=TAINT_GATES,
        runtime_config={RULES_VERSION: True},
        scheduler_feature_gates=TAINT_GATES,
    ) as cp:
        assert cp.release.minor == "1.35", cp.release  # the release this module is about
        launcher.wait_for(
            "DeviceTaintRules served",
            lambda: cp.request("GET", f"{RULES_API}/devicetaintrules")[0] == 200,
            timeout=30,
        )
        for obj in nvidia_class_objs():
            status, answer = cp.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", obj)
            assert status in (201, 409), answer
        yield cp


@pytest.fixture
def rules(cluster: Scenario) -> Iterator[list[str]]:  # noqa: F811
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            cluster.api.delete(f"{RULES_API}/devicetaintrules/{name}")


def test_a_gang_not_tolerating_a_v1alpha3_device_taint_rule_is_planned_off_the_gpu_it_taints(
    control_plane: launcher.ControlPlane,
    cluster: Scenario,  # noqa: F811
    slices: list[str],  # noqa: F811
    rules: list[str],
) -> None:
    a_rule_keeps_a_plain_gang_off_the_gpu_it_taints(
        control_plane, cluster, slices, rules, version=RULES_VERSION
    )
