"""Preemption of a nested CompositePodGroup through the real kube-scheduler 1.37 and
Phalanx's ``/preempt``: kube-scheduler proposes victims per node and picks among the nodes
Phalanx keeps; Phalanx keeps a set only if every level of the composite gang it takes pods
of stays at its own minimum or goes entirely (``core/preempt.py``).

Each test runs one composite gang: a root CompositePodGroup ``r`` (``gang``, minGroupCount
1) over a PodGroup ``a`` and a nested CompositePodGroup ``n`` over PodGroups ``x`` and
``y``, one member each, released together. ``a-0`` asks a whole node and is of a higher
PriorityClass than ``x-0`` and ``y-0`` (priority 0), so kube-scheduler would rather evict them: the
outcome is kube-scheduler's choice among the nodes Phalanx keeps, and each test fails
if Phalanx keeps one it must not. Each PodGroup has its member's PriorityClass, as
kube-scheduler requires of a pod group (it judges each PodGroup alone: it runs without
``CompositePodGroup``). A pod of a high PriorityClass (``urgent``) then needs room:

* ``n`` a ``gang`` of minGroupCount 2 with ``x-0`` and ``y-0`` sharing a node: kube-scheduler
  offers one of them, Phalanx widens the set to both, and ``n`` goes whole;
* the same ``n`` spread over two nodes: Phalanx drops both of those nodes (either victim
  would leave ``n`` running one child) and the preemptor takes ``a-0``'s, which ``r``
  can lose;
* ``n`` ``basic`` (no gang of its own) with ``y`` running below its own minCount (``r``'s
  quorum needs neither): ``x-0`` is taken alone, ``n`` being held to nothing.

kube-scheduler 1.37 preempts asynchronously, and a preemptor's next cycle can come before
its first victims are gone: in one CI run it preempted ``x-0``'s node, then 46 ms later
``y-0``'s as well (both offers Phalanx rightly kept). So where a test says which pods are
spared (the first and the third), those pods are of ``urgent``'s own PriorityClass, which it
cannot preempt: the one node left to choose is the one Phalanx must keep, and the test
fails if Phalanx drops it (``urgent`` then finds no node) or widens it.

Runs on ``control_plane_137`` (1.37.2, ``GenericWorkload`` and ``CompositePodGroup``;
kube-scheduler without its own gang plugins, as for every 1.37 gang: see
``test_composite_137``). kwok finalizes a pod once it carries a deletionTimestamp, so the
victims disappear from the API.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import launcher  # tests/controlplane/launcher.py, put on sys.path by conftest.py
import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import Member, Scenario, bound_node, composite_quorums
from test_composite_137 import child_group, composite, judged, member  # noqa: F401  # judged: fixture
from test_preemption import (  # noqa: F401  # high: a fixture
    gone,
    high,
    preempt_nodes,
    priority_class,
    urgent,
    verdicts,
)

from phalanx.core.model import ChildGroups
from phalanx.core.quorum import task_shortfall

pytestmark = pytest.mark.e2e

MEMBERS = ("a-0", "x-0", "y-0")


@pytest.fixture(scope="module")
def control_plane(control_plane_137: launcher.ControlPlane) -> launcher.ControlPlane:
    return control_plane_137


@pytest.fixture
def medium(cluster: Scenario) -> Iterator[str]:  # noqa: F811
    """A PriorityClass between the default 0 and the preemptor's: members it should spare."""
    with priority_class(cluster, "medium", 500) as name:
        yield name


def nested_composite(
    sc: Scenario,
    inner: int | None,
    *,
    gpus: int,
    classes: Mapping[str, str],
    y_min: int = 1,
) -> dict[str, str]:
    """Composite `r` (gang, minGroupCount 1) over PodGroup `a` and composite `n` (gang of
    minGroupCount `inner`, None: `basic`) over PodGroups `x` and `y` (minCount `y_min`, the
    others 1). One member each, released together: `a-0` asks 8 GPUs, `x-0` and `y-0`
    `gpus` each, of the PriorityClasses in `classes` (by pod, else priority 0; its PodGroup
    of the same, as kube-scheduler requires). Returns where they bound."""
    composite(sc, "r", 1)
    composite(sc, "n", inner, parent="r")
    for group, parent, need in (("a", "r", 1), ("x", "n", 1), ("y", "n", y_min)):
        child_group(sc, group, need, parent, priority_class_name=classes.get(f"{group}-0", ""))
    for name, size in zip(MEMBERS, (8, gpus, gpus), strict=True):
        member(sc, name, name.split("-")[0], gpus=size, priority_class_name=classes.get(name, ""))
    for name in MEMBERS:
        sc.ungate(name)
    return sc.wait_bound(MEMBERS, timeout=45)


def short_levels(tree: ChildGroups, tasks: Sequence[str]) -> list[str]:
    """Each level of composite gang `tree` (itself, a nested `gang` composite, a PodGroup)
    that keeps some bound members (`tasks`: each one's PodGroup) but not its own quorum,
    for people: what preemption must never leave behind."""
    names = {name for name, _ in tree.pod_groups()}
    members = [Member(t) for t in tasks if t in names]
    why = task_shortfall(tree, members) if members and not tree.basic else ""
    short = [why] if why else []
    for child in tree.children:
        if isinstance(child, ChildGroups):
            short += short_levels(child, tasks)
        elif 0 < (have := tasks.count(child[0])) < child[1]:
            short.append(f"PodGroup {child[0]} has {have} of {child[1]} member(s)")
    return short


def tree_of_r(sc: Scenario) -> ChildGroups:
    """Composite gang `r`'s quorum, as Phalanx reads it from the API."""
    tree = composite_quorums(sc.api, sc.namespace)["composite:r"]
    assert isinstance(tree, ChildGroups), tree
    return tree


def running_tasks(sc: Scenario) -> list[str]:
    """The PodGroup of each bound member not being deleted."""
    return [
        p["spec"]["schedulingGroup"]["podGroupName"]
        for p in sc.pods().values()
        if p["spec"].get("schedulingGroup")
        and bound_node(p)
        and not p["metadata"].get("deletionTimestamp")
    ]


def spared(sc: Scenario, where: Mapping[str, str]) -> dict[str, str]:
    """Where each pod of `where` now runs ("" if gone or being deleted)."""
    pods = sc.pods()
    return {
        name: bound_node(pods[name])
        if name in pods and not pods[name]["metadata"].get("deletionTimestamp")
        else ""
        for name in where
    }


def test_a_preemptor_takes_a_nested_gang_composite_whole_never_one_of_its_children(
    judged: Scenario,  # noqa: F811
    high: str,  # noqa: F811
) -> None:
    sc = judged
    sc.node("a", 8)
    sc.node("b", 8)
    sc.nodes_ready()
    # a-0 of urgent's own class: kube-scheduler may not take it (see the module docstring).
    where = nested_composite(sc, 2, gpus=4, classes={"a-0": high})
    node = where["x-0"]
    assert where["y-0"] == node != where["a-0"], where
    widened = preempt_nodes(sc, "widened")

    urgent(sc, "urgent", 4, high)  # half a node: kube-scheduler offers x-0 or y-0 alone

    # x-0 or y-0 alone would leave n one child of its minGroupCount 2 while r keeps its
    # quorum through a: Phalanx widens the set to n whole.
    assert sc.wait_bound(["urgent"]) == {"urgent": node}
    sc.wait("n preempted whole", lambda: gone(sc, ["x-0", "y-0"]) or None, timeout=10)
    assert spared(sc, {"a-0": where["a-0"]}) == {"a-0": where["a-0"]}
    assert short_levels(tree_of_r(sc), running_tasks(sc)) == []
    assert preempt_nodes(sc, "widened") >= widened + 1
    (line, *_) = verdicts(sc, "urgent", "widened")
    assert (line["node"], line["group"], line["added"]) == (node, f"composite:{sc.namespace}/r", 1)
    assert "would leave CompositePodGroup n of gang" in line["reason"], line


def test_a_nested_gang_composite_spread_over_nodes_is_spared_and_its_sibling_preempted(
    judged: Scenario,  # noqa: F811
    high: str,  # noqa: F811
    medium: str,
) -> None:
    sc = judged
    for suffix in "abc":
        sc.node(suffix, 8)
    sc.nodes_ready()
    where = nested_composite(sc, 2, gpus=8, classes={"a-0": medium})
    assert len(set(where.values())) == 3, where
    dropped = preempt_nodes(sc, "dropped")

    urgent(sc, "urgent", 8, high)  # a node's worth: any one member's

    # kube-scheduler would rather evict x-0 or y-0 (priority 0), but either alone leaves
    # n one child of two, the other on another node: Phalanx drops both nodes, and the
    # preemptor takes a-0's, r keeping its minGroupCount 1 through n.
    assert sc.wait_bound(["urgent"]) == {"urgent": where["a-0"]}
    sc.wait("a-0 preempted", lambda: gone(sc, ["a-0"]) or None, timeout=10)
    survivors = {n: where[n] for n in ("x-0", "y-0")}
    assert spared(sc, survivors) == survivors
    assert short_levels(tree_of_r(sc), running_tasks(sc)) == []
    assert preempt_nodes(sc, "dropped") >= dropped + 2
    lines = verdicts(sc, "urgent", "dropped")
    assert {line["node"] for line in lines} == set(survivors.values()), lines
    assert {line["group"] for line in lines} == {f"composite:{sc.namespace}/r"}, lines
    assert all("would leave CompositePodGroup n of gang" in line["reason"] for line in lines)


def test_a_nested_basic_composites_pods_are_taken_singly(
    judged: Scenario,  # noqa: F811
    high: str,  # noqa: F811
) -> None:
    """n is `basic`, no gang: held to nothing of its own, so x-0 goes alone though y
    runs below its minCount 2 (r's quorum needs neither) and n is left with no
    satisfied child."""
    sc = judged
    for suffix in "abc":
        sc.node(suffix, 8)
    sc.nodes_ready()
    # x-0, priority 0, is the only pod urgent may take (see the module docstring).
    classes = {"a-0": high, "y-0": high}
    where = nested_composite(sc, None, gpus=8, classes=classes, y_min=2)
    assert len(set(where.values())) == 3, where

    urgent(sc, "urgent", 8, high)

    assert sc.wait_bound(["urgent"]) == {"urgent": where["x-0"]}
    sc.wait("x-0 preempted", lambda: gone(sc, ["x-0"]) or None, timeout=10)
    survivors = {n: where[n] for n in ("a-0", "y-0")}
    assert spared(sc, survivors) == survivors
    assert verdicts(sc, "urgent", "dropped") == []
    assert verdicts(sc, "urgent", "widened") == []
