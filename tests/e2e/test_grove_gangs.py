"""NVIDIA Grove's PodGangs on the session's control plane, through the real kube-scheduler
(docs/gang-dialects.md, "Grove PodGangs"): pods labelled as Grove's operator labels them
bind whole or not at all, each podgroup's minReplicas holds in the quorum, the PodGang's
status says why a gang waits (`Scheduled` False, `phase` Pending) and that it is placed
(`Scheduled` True), a podgroup's own required key keeps it in one rack, and a preferred
one in one rack where a rack has room, else the gang binds across racks. Grove's
operator does not run: its CRD is served (written from its types,
``crds/grove-podgang.yaml``) before this module's Phalanx starts, and each test creates
the PodGang first and its pods gated, then ungates them, as Grove does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from grove import GROVE_CRD_NAME, ensure_grove_crd, grove_path, grove_sizes, pod_gang
from podgroup_crd import CRDS
from scheduling import (
    GROVE_PODCLIQUE_LABEL,
    GROVE_PODGANG_LABEL,
    RACK,
    Obj,
    Scenario,
    domains_of_roles,
    pod_body,
    racks,
)

pytestmark = pytest.mark.e2e

GPUS = 8  # per node, and per member: one member per node
SCHEDULED = "Scheduled"


@pytest.fixture(scope="module")
def control_plane(control_plane: launcher.ControlPlane) -> Iterator[launcher.ControlPlane]:
    """The session's control plane, with Grove's PodGang CRD served before this module's
    Phalanx starts; removed afterwards."""
    ensure_grove_crd(control_plane)
    yield control_plane
    control_plane.request("DELETE", f"{CRDS}/{GROVE_CRD_NAME}")


def judged(sc: Scenario) -> Scenario:
    """Make the invariant monitor judge Grove gangs too."""
    sc.monitor.gang_sizes.append(grove_sizes)
    return sc


def member(sc: Scenario, name: str, gang: str, podgroup: str) -> str:
    """An 8-GPU pod labelled as Grove's operator labels it, behind a scheduling gate."""
    body = pod_body(
        name,
        gpus=GPUS,
        node_selector=sc.selector,
        labels={GROVE_PODGANG_LABEL: gang, GROVE_PODCLIQUE_LABEL: podgroup},
        gated=True,
    )
    sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)
    return name


def grove_gang(
    sc: Scenario,
    name: str,
    podgroups: dict[str, int],
    preferred: Mapping[str, str] | None = None,
    **keys: str,
) -> dict[str, list[str]]:
    """A PodGang of `podgroups` (podgroup -> minReplicas; `keys` a podgroup's required
    key, `preferred` its preferred one) and its members `<podgroup>-<i>`, released
    together once it exists."""
    pod_gang(sc, name, podgroups, podgroup_keys=keys, podgroup_preferred=preferred)
    names = {
        group: [member(sc, f"{group}-{i}", name, group) for i in range(size)]
        for group, size in podgroups.items()
    }
    for group in names.values():
        for each in group:
            sc.ungate(each)
    return names


def scheduled(sc: Scenario, gang: str) -> tuple[str, Obj] | None:
    """The PodGang's phase and its `Scheduled` condition, once it has one."""
    status: Obj = sc.api.get(grove_path(sc, gang)).get("status") or {}
    found = [c for c in status.get("conditions") or [] if c.get("type") == SCHEDULED]
    return (str(status.get("phase")), found[0]) if found else None


def test_a_podgang_of_two_podgroups_binds_whole(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    for node in ("a", "b", "c"):
        sc.node(node, GPUS)
    sc.nodes_ready()
    names = grove_gang(sc, "serve-0", {"prefill": 1, "decode": 2})
    where = sc.wait_bound([*names["prefill"], *names["decode"]])
    assert len(set(where.values())) == 3, where
    sc.wait_event("serve-0", "bound 3 member(s) together", reason="Bound")

    def placed() -> tuple[str, Obj] | None:
        found = scheduled(sc, "serve-0")
        return found if found and found[1]["status"] == "True" else None

    phase, condition = sc.wait("the PodGang's Scheduled condition True", placed)
    assert condition["reason"] == SCHEDULED, condition
    assert phase in ("Starting", "Running"), phase


def test_a_podgang_one_node_short_waits_whole_and_says_why(cluster: Scenario) -> None:  # noqa: F811
    sc = judged(cluster)
    sc.node("a", GPUS)
    sc.node("b", GPUS)
    sc.nodes_ready()
    names = grove_gang(sc, "wide", {"prefill": 1, "decode": 2})
    pods = [*names["prefill"], *names["decode"]]
    why = f"cannot place 3 member(s) of gang grove:{sc.namespace}/wide"
    sc.wait_unschedulable(pods[0], why)

    def told() -> tuple[str, Obj] | None:  # the status follows the decision a second behind
        found = scheduled(sc, "wide")
        return found if found and why in str(found[1].get("message")) else None

    phase, condition = sc.wait("the PodGang's Scheduled condition, saying why", told)
    assert (phase, condition["status"]) == ("Pending", "False"), (phase, condition)
    sc.assert_unbound_for(pods, 3.0)

    sc.node("c", GPUS)
    sc.nodes_ready()
    sc.wait_bound(pods)

    def placed() -> tuple[str, Obj] | None:
        found = scheduled(sc, "wide")
        return found if found and found[1]["status"] == "True" else None

    sc.wait("the condition turned True", placed)


def test_each_podgroup_required_in_one_rack_binds_inside_one_rack(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Racks of one, two and two nodes (values unique to the test's namespace): prefill and
    decode, two members each, each podgroup requiring one rack, bind each in a rack of two;
    the gang alone would also fit across the lone node and one of the others."""
    sc = judged(cluster)
    rack_of = racks(sc, 1, 2, 2, gpus=GPUS)
    names = grove_gang(sc, "disagg", {"prefill": 2, "decode": 2}, prefill=RACK, decode=RACK)
    where = sc.wait_bound([*names["prefill"], *names["decode"]])
    assert domains_of_roles(names, where, rack_of) == {"r1", "r2"}, where


def test_each_podgroup_preferring_a_rack_binds_inside_one_rack_where_there_is_room(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Racks of one, two and two nodes, prefill and decode each only preferring one rack:
    without the preference the gang would fill the lone node and split a podgroup; with it
    each binds in a rack of two, and the Reserved Event says each preference held."""
    sc = judged(cluster)
    rack_of = racks(sc, 1, 2, 2, gpus=GPUS)
    names = grove_gang(sc, "liking", {"prefill": 2, "decode": 2}, {"prefill": RACK, "decode": RACK})
    where = sc.wait_bound([*names["prefill"], *names["decode"]])
    assert domains_of_roles(names, where, rack_of) == {"r1", "r2"}, where
    sc.wait_event(
        "liking",
        "podgroup decode within one rack as preferred; "
        "podgroup prefill within one rack as preferred",
        reason="Reserved",
    )


def test_a_podgang_whose_podgroups_prefer_racks_too_small_binds_whole_across_racks(
    cluster: Scenario,  # noqa: F811
) -> None:
    """Four racks of one node: prefill and decode, two members each, each preferring one
    rack, fit in none (required, the gang would wait); preferred, it binds whole across
    racks, and the Reserved Event says both preferences widened."""
    sc = judged(cluster)
    racks(sc, 1, 1, 1, 1, gpus=GPUS)
    names = grove_gang(sc, "spread", {"prefill": 2, "decode": 2}, {"prefill": RACK, "decode": RACK})
    sc.wait_bound([*names["prefill"], *names["decode"]])
    event = sc.wait_event(
        "spread",
        "podgroup decode preferred one rack: widened to the cluster; "
        "podgroup prefill preferred one rack: widened to the cluster",
        reason="Reserved",
    )
    assert "not every preference held (all at once: podgroup " in event["message"], event
