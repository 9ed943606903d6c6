"""Preempt: kube-scheduler's proposed victims kept, widened to a whole gang or unit, or the
node dropped; each decided as a verdict naming why."""

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import pytest

from builders import (
    apply_raw,
    composite_obj,
    gpu_node,
    kai_pod_obj,
    kai_podgroup_obj,
    pod,
    pod_obj,
    podgroup,
    podgroup_obj,
    upstream_podgroup_obj,
    workload_obj,
)
from phalanx.core.cache import ClusterState
from phalanx.core.model import Pod, PodGroup, PodPhase, SubGroupTree
from phalanx.core.planner import GangPlanner, PlannerSettings
from phalanx.core.preempt import PreemptOutcome, PreemptVerdict, Widening

NODES = ["n1", "n2", "n3"]


def setup(
    groups: Iterable[PodGroup] = (), pods: Iterable[Pod] = ()
) -> tuple[ClusterState, GangPlanner]:
    state = ClusterState()
    for n in NODES:
        state.upsert_node(gpu_node(n))
    for g in groups:
        state.upsert_group(g)
    for p in pods:
        state.upsert_pod(p)
    return state, GangPlanner(state, PlannerSettings())


@pytest.mark.parametrize(
    ("victims", "kept"),
    [
        (["g-0"], {}),  # would leave g at 1 of 2 on another node: drop the node
        (["solo"], {"n1": ["solo"]}),
    ],
    ids=["half-a-gang", "single-pod"],
)
def test_preemption_never_leaves_a_running_gang_below_min_member(
    victims: list[str], kept: dict[str, list[str]]
) -> None:
    g0 = pod("g-0", 4, node="n1", group="g", uid="g-0", phase=PodPhase.RUNNING)
    g1 = pod("g-1", 4, node="n2", group="g", uid="g-1", phase=PodPhase.RUNNING)
    solo = pod("solo", 2, node="n1", uid="solo", phase=PodPhase.RUNNING)
    _, planner = setup(groups=[podgroup("g", 2)], pods=[g0, g1, solo])
    assert planner.preempt({"n1": victims}).kept == kept


def test_preemption_takes_a_whole_gang_that_lives_on_one_node() -> None:
    g0 = pod("g-0", 2, node="n1", group="g", uid="g-0")
    g1 = pod("g-1", 2, node="n1", group="g", uid="g-1")
    _, planner = setup(groups=[podgroup("g", 2)], pods=[g0, g1])
    assert planner.preempt({"n1": ["g-0"]}).kept == {"n1": ["g-0", "g-1"]}


def test_preemption_never_takes_a_running_gangs_last_member_of_a_task() -> None:
    # Three of four would still make minMember 3, but not without the master.
    minima = (("master", 1), ("worker", 2))
    master = pod("m-0", 4, node="n1", group="g", uid="m-0", task="master", phase=PodPhase.RUNNING)
    workers = [
        pod(f"w-{i}", 4, node="n2", group="g", uid=f"w-{i}", task="worker", phase=PodPhase.RUNNING)
        for i in range(3)
    ]
    group = replace(podgroup("g", 3), min_task_member=minima)
    _, planner = setup(groups=[group], pods=[master, *workers])
    assert planner.preempt({"n1": ["m-0"]}).kept == {}
    assert planner.preempt({"n2": ["w-0"]}).kept == {"n2": ["w-0"]}  # 2 workers still make it


def upstream(*objects: dict[str, Any]) -> GangPlanner:
    """A planner over n1..n3 and raw gang objects and pods, as the sources feed them."""
    state, planner = setup()
    apply_raw(state, *objects)
    return planner


def running(name: str, node: str, group: str, gpus: int = 4) -> dict[str, Any]:
    """A running member of upstream PodGroup `group` on `node` (its UID is its name)."""
    return pod_obj(name, gpus, node=node, phase="Running", uid=name, scheduling_group=group)


# A PodGroup of minCount 2 with two members on n1 and two on n2.
SPREAD = [running("a-0", "n1", "a"), running("a-1", "n1", "a")]
SPREAD += [running("a-2", "n2", "a"), running("a-3", "n2", "a")]


@pytest.mark.parametrize(
    ("mode", "victims", "kept"),
    [
        ("all", ["a-0"], {}),
        ("all", ["a-0", "a-1"], {}),
        ("single", ["a-0"], {"n1": ["a-0"]}),
        ("single", ["a-0", "a-1"], {"n1": ["a-0", "a-1"]}),
    ],
    ids=["all-one", "all-a-node", "single-one", "single-a-node"],
)
def test_preemption_takes_no_part_of_a_pod_group_with_disruption_mode_all(
    mode: str, victims: list[str], kept: dict[str, list[str]]
) -> None:
    # With `single` two of four members still make minCount 2; with `all` none may go alone.
    planner = upstream(upstream_podgroup_obj("a", 2, disruption_mode=mode), *SPREAD)
    assert planner.preempt({"n1": victims}).kept == kept


def test_preemption_widens_to_an_all_pod_group_that_lives_on_the_victims_node() -> None:
    planner = upstream(
        upstream_podgroup_obj("a", 1, disruption_mode="all"),
        running("a-0", "n1", "a"),
        running("a-1", "n1", "a"),
    )
    assert planner.preempt({"n1": ["a-0"]}).kept == {"n1": ["a-0", "a-1"]}


def test_preemption_drops_a_node_whose_victims_are_bound_elsewhere() -> None:
    # kube-scheduler 1.37 offers an `all` unit spread over nodes as one node's victims, and
    # fails its whole preemption when an extender returns a pod it cannot find on the node.
    planner = upstream(upstream_podgroup_obj("a", 2, disruption_mode="all"), *SPREAD)
    assert planner.preempt({"n1": ["a-0", "a-1", "a-2", "a-3"]}).kept == {}


def ray(mode: str, *, min_group_count: int = 1, head_mode: str = "single") -> list[Any]:
    """A composite gang over a head PodGroup (minCount 1, on n1) and a worker PodGroup
    (minCount 2, two workers on n2 and one on n3)."""
    return [
        composite_obj("ray", min_group_count, disruption_mode=mode),
        upstream_podgroup_obj("head", 1, parent="ray", disruption_mode=head_mode),
        upstream_podgroup_obj("workers", 2, parent="ray"),
        running("head-0", "n1", "head"),
        running("worker-0", "n2", "workers"),
        running("worker-1", "n2", "workers"),
        running("worker-2", "n3", "workers"),
    ]


def test_preemption_takes_a_composite_with_disruption_mode_all_whole_or_not_at_all() -> None:
    planner = upstream(*ray("all"))
    # The workers alone still make minGroupCount 1, but the composite goes only whole.
    assert planner.preempt({"n1": ["head-0"], "n3": ["worker-2"]}).kept == {}


def test_preemption_under_a_single_composite_judges_each_child_by_its_own_mode_and_quorum() -> None:
    planner = upstream(*ray("single", head_mode="all"))
    assert planner.preempt({"n1": ["head-0"]}).kept == {"n1": ["head-0"]}  # the workers suffice
    assert planner.preempt({"n3": ["worker-2"]}).kept == {"n3": ["worker-2"]}  # 2 of 2 remain
    # The head alone makes minGroupCount 1, but the workers would be left at 1 of 2.
    assert planner.preempt({"n2": ["worker-0", "worker-1"]}).kept == {}


def test_preemption_takes_a_child_pod_group_with_disruption_mode_all_whole_or_not_at_all() -> None:
    objects = ray("single")
    objects[2] = upstream_podgroup_obj("workers", 2, parent="ray", disruption_mode="all")
    planner = upstream(*objects)
    assert planner.preempt({"n3": ["worker-2"]}).kept == {}
    assert planner.preempt({"n1": ["head-0"]}).kept == {"n1": ["head-0"]}


def test_a_basic_composite_with_disruption_mode_all_takes_its_separate_gangs_together() -> None:
    planner = upstream(
        composite_obj("job", None, disruption_mode="all"),
        upstream_podgroup_obj("a", 1, parent="job"),
        upstream_podgroup_obj("b", 1, parent="job"),
        running("a-0", "n1", "a"),
        running("b-0", "n1", "b"),
        running("b-1", "n2", "b"),
    )
    assert planner.preempt({"n1": ["a-0"]}).kept == {}  # b-1 on n2 would stay
    assert planner.preempt({"n1": ["a-0"], "n2": ["b-1"]}).kept == {}


def test_preemption_never_leaves_a_composite_gang_below_its_min_group_count() -> None:
    planner = upstream(*ray("single", min_group_count=2))
    assert planner.preempt({"n1": ["head-0"]}).kept == {}


def test_preemption_leaves_a_child_pod_group_it_takes_nothing_of_as_it_was() -> None:
    """b runs below its minCount (b-1 pending again): taking a-0 leaves a, and the gang
    (minGroupCount 1), whole, and b as it was; b-0 need not go, so n1 is kept."""
    planner = upstream(
        composite_obj("job", 1),
        upstream_podgroup_obj("a", 1, parent="job"),
        upstream_podgroup_obj("b", 2, parent="job"),
        running("a-0", "n1", "a"),
        running("a-1", "n1", "a"),
        running("b-0", "n2", "b"),
        pod_obj("b-1", 4, uid="b-1", scheduling_group="b"),
    )
    assert planner.preempt({"n1": ["a-0"]}).kept == {"n1": ["a-0"]}
    assert planner.preempt({"n2": ["b-0"]}).kept == {"n2": ["b-0"]}  # b goes whole


def _all_unit_with_a_member_being_deleted() -> GangPlanner:
    deleting = running("a-0", "n1", "a")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return upstream(
        upstream_podgroup_obj("a", 1, disruption_mode="all"), deleting, running("a-1", "n2", "a")
    )


def _gang_short_of_a_member_being_deleted() -> GangPlanner:
    g0 = pod("g-0", 4, node="n1", group="g", uid="g-0", phase=PodPhase.RUNNING, deleting=True)
    g1 = pod("g-1", 4, node="n1", group="g", uid="g-1", phase=PodPhase.RUNNING)
    return setup(groups=[podgroup("g", 2)], pods=[g0, g1])[1]


@pytest.mark.parametrize(
    ("planner", "victim"),
    [
        (_all_unit_with_a_member_being_deleted, "a-0"),
        (_gang_short_of_a_member_being_deleted, "g-0"),
    ],
    ids=["all-unit-spread", "gang-below-quorum"],
)
def test_a_victim_being_deleted_takes_nothing_from_its_gang_or_unit(
    planner: Callable[[], GangPlanner], victim: str
) -> None:
    # kube-scheduler proposes a pod being deleted too (its resources are not back yet); it
    # is no member any more, so nothing else need go with it, nor the node be dropped.
    assert verdict(planner(), "n1", [victim]) == PreemptVerdict(
        "n1", PreemptOutcome.KEPT, (victim,)
    )


@pytest.mark.parametrize("deleting", [False, True], ids=["live", "being-deleted"])
def test_preemption_never_leaves_a_workload_pod_group_below_its_min_count(deleting: bool) -> None:
    # Its members run on while the Workload is being deleted; before, such a pod group was
    # judged against one member.
    workload = workload_obj("job", {"workers": 2})
    planner = upstream(
        being_deleted(workload) if deleting else workload,
        *(
            pod_obj(
                f"w-{i}",
                4,
                node=f"n{i + 1}",
                phase="Running",
                uid=f"w-{i}",
                workload_ref={"name": "job", "podGroup": "workers"},
            )
            for i in range(2)
        ),
    )
    assert planner.preempt({"n1": ["w-0"]}).kept == {}


# ---- nested child groups -----------------------------------------------------------------


def nested(inner: int | None, y_node: str, y_count: int = 1) -> GangPlanner:
    """A composite gang `r` (minGroupCount 1) over PodGroup a (a-0 on n3) and a nested
    composite n of minGroupCount `inner` (None: `basic`) over x (x-0 on n1) and y (y-0 on
    `y_node`), of minCount 1 but y's `y_count`."""
    return upstream(
        composite_obj("r", 1),
        composite_obj("n", inner, parent="r"),
        upstream_podgroup_obj("a", 1, parent="r"),
        upstream_podgroup_obj("x", 1, parent="n"),
        upstream_podgroup_obj("y", y_count, parent="n"),
        running("a-0", "n3", "a"),
        running("x-0", "n1", "x"),
        running("y-0", y_node, "y"),
    )


def test_preemption_never_leaves_a_nested_composite_below_its_own_min_group_count() -> None:
    """a alone keeps r's quorum, but n with y alone is a partial gang of its own."""
    found = verdict(nested(2, "n2"), "n1", ["x-0"])
    assert (found.outcome, found.unit, found.reason) == (
        PreemptOutcome.DROPPED,
        "composite:default/r",
        "the victims would leave CompositePodGroup n of gang composite:default/r with 1 "
        "bound member(s), below its quorum (CompositePodGroup n has 1 of 2 child group(s) "
        "ready: PodGroup x has 0 of 1 member(s)), but 1 of its 1 other pod(s) that would "
        "have to go too are not on n1 (n2)",
    )
    assert nested(2, "n1").preempt({"n1": ["x-0"]}).kept == {"n1": ["x-0", "y-0"]}


def test_a_nested_basic_composite_is_held_to_nothing_of_its_own() -> None:
    """y runs below its minCount 2 and the victims take nothing of it: n, `basic`, is no
    gang that would need y to go with x."""
    assert nested(None, "n2", y_count=2).preempt({"n1": ["x-0"]}).kept == {"n1": ["x-0"]}
    assert nested(1, "n2", y_count=2).preempt({"n1": ["x-0"]}).kept == {}


def test_a_kai_parent_subgroup_stays_at_its_own_quorum_or_goes_whole() -> None:
    """Leaf a alone keeps the PodGroup's minSubGroup 1, but parent p (all of x and y)
    left with y alone is a partial subgroup."""
    group = kai_podgroup_obj("k", None)
    group["spec"] |= {
        "minSubGroup": 1,
        "subGroups": [
            {"name": "a", "minMember": 1},
            {"name": "p"},
            {"name": "x", "parent": "p", "minMember": 1},
            {"name": "y", "parent": "p", "minMember": 1},
        ],
    }
    where = {"a": "n3", "x": "n1", "y": "n2"}
    planner = upstream(
        group,
        *(
            kai_pod_obj(f"{s}-0", "k", s, node=n, phase="Running", uid=f"{s}-0")
            for s, n in where.items()
        ),
    )
    found = verdict(planner, "n1", ["x-0"])
    assert (found.outcome, found.unit) == (PreemptOutcome.DROPPED, "kai:default/k")
    assert found.reason.startswith("the victims would leave subgroup p of gang kai:default/k")


# ---- a running gang that does not resolve now -----------------------------------------------


def being_deleted(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def _ray_disagreeing_on_placement() -> list[Any]:
    objects = ray("single", min_group_count=2)
    objects[3]["metadata"]["annotations"]["phalanx.io/placement"] = "pack"
    objects[4]["metadata"]["annotations"]["phalanx.io/placement"] = "spread"
    return objects


@pytest.mark.parametrize(
    "objects",
    [
        lambda: [being_deleted(composite_obj("ray", 2)), *ray("single")[1:]],
        _ray_disagreeing_on_placement,
        lambda: ray("single", min_group_count=3),
    ],
    ids=["composite-being-deleted", "members-disagree-on-placement", "waiting-for-a-child"],
)
def test_a_composite_gang_that_does_not_resolve_now_is_still_held_to_its_min_group_count(
    objects: Callable[[], list[Any]],
) -> None:
    """Its members still run: taking the head leaves the workers alone, one child group of
    the two (or three) it needs. Before, it was judged against a quorum of one member."""
    found = verdict(upstream(*objects()), "n1", ["head-0"])
    assert (found.outcome, found.unit) == (PreemptOutcome.DROPPED, "composite:default/ray")


@pytest.mark.parametrize(
    "unreadable",
    [
        lambda state: state.remove_group("composite:default/ray"),
        lambda state: state.set_group_error("composite:default/ray", "refused"),
    ],
    ids=["deleted", "refused"],
)
def test_pod_groups_beneath_a_composite_that_cannot_be_read_are_judged_as_all_its_children(
    unreadable: Callable[[ClusterState], object],
) -> None:
    """Its minGroupCount unknown, every child group counts: the head goes only with the
    workers. Before, each PodGroup was judged alone by its own minCount."""
    planner = upstream(*ray("single", min_group_count=2))
    unreadable(planner.state)
    found = verdict(planner, "n1", ["head-0"])
    assert (found.outcome, found.unit) == (PreemptOutcome.DROPPED, "composite:default/ray")
    assert found.reason == (
        "the victims would leave gang composite:default/ray with 3 of its 4 bound member(s), "
        "below its quorum (CompositePodGroup ray has 1 of 2 child group(s) ready: PodGroup "
        "head has 0 of 1 member(s)) (CompositePodGroup default/ray cannot be read: every child "
        "group counts), but 3 of its 3 other pod(s) that would have to go too are not on n1 "
        "(n2, n3)"
    )
    assert planner.preempt({"n3": ["worker-2"]}).kept == {"n3": ["worker-2"]}  # 2 of 2 remain


def test_a_yunikorn_definition_still_counts_once_the_member_carrying_it_has_finished() -> None:
    groups = '[{"name": "a", "minMember": 1}, {"name": "b", "minMember": 2}]'

    def member(name: str, node: str, phase: str = "Running", **more: str) -> dict[str, Any]:
        annotations = {"yunikorn.apache.org/task-group-name": name[0], **more}
        labels = {"applicationId": "app"}
        return pod_obj(
            name, node=node, phase=phase, uid=name, labels=labels, annotations=annotations
        )

    planner = upstream(
        member("a-0", "n3", "Succeeded", **{"yunikorn.apache.org/task-groups": groups}),
        member("a-1", "n3"),
        member("b-0", "n1"),
        member("b-1", "n2"),
    )
    found = verdict(planner, "n1", ["b-0"])
    assert (found.outcome, found.unit) == (PreemptOutcome.DROPPED, "yunikorn:default/app")


# A gang's object's key, the gang's key and its objects.
Unread = tuple[str, str, list[Any]]


def _workload_gang(nodes: list[str]) -> Unread:
    """A 1.35 Workload's pod group of minCount 2, a member on each of `nodes`."""
    ref = {"name": "job", "podGroup": "workers"}
    pods = [
        pod_obj(f"x-{i}", 4, node=n, phase="Running", uid=f"x-{i}", workload_ref=ref)
        for i, n in enumerate(nodes)
    ]
    return (
        "upstream:default/job",
        "upstream:default/job/workers",
        [workload_obj("job", {"workers": 2}), *pods],
    )


def _scheduler_plugins_gang(nodes: list[str]) -> Unread:
    """A scheduler-plugins PodGroup of minMember 2, a member on each of `nodes`."""
    pods = [
        pod_obj(f"x-{i}", 4, node=n, phase="Running", uid=f"x-{i}", group="g")
        for i, n in enumerate(nodes)
    ]
    return "default/g", "default/g", [podgroup_obj("g", 2), *pods]


@pytest.mark.parametrize("gang", [_workload_gang, _scheduler_plugins_gang], ids=["wl", "sp"])
@pytest.mark.parametrize(
    "unreadable",
    [ClusterState.remove_group, lambda state, key: state.set_group_error(key, "refused")],
    ids=["deleted", "refused"],
)
def test_a_gang_whose_object_cannot_be_read_and_whose_members_declare_no_size_goes_whole(
    gang: Callable[[list[str]], Unread],
    unreadable: Callable[[ClusterState, str], object],
) -> None:
    """Its quorum unknown, taking some of its running members takes them all: none or all
    leave it whole, whatever it was. Before, it was judged against one member, so the
    victims could leave it partial."""
    key, gang_key, objects = gang(["n1", "n1", "n2"])
    planner = upstream(*objects)
    unreadable(planner.state, key)
    found = verdict(planner, "n2", ["x-2"])
    assert (found.outcome, found.unit) == (PreemptOutcome.DROPPED, gang_key)
    assert found.reason == (
        f"the victims would leave gang {gang_key} with 2 of its 3 bound member(s), below its "
        "quorum of 3 (no object or member declares its size: every bound member counts), but "
        "2 of its 2 other pod(s) that would have to go too are not on n2 (n1)"
    )
    key, _, objects = gang(["n1", "n1"])
    planner = upstream(*objects)
    unreadable(planner.state, key)
    assert planner.preempt({"n1": ["x-0"]}).kept == {"n1": ["x-0", "x-1"]}


def test_a_refused_kueue_pod_group_is_held_to_its_live_members_count_not_a_finished_pods() -> None:
    """The members disagree on placement, so the group does not resolve; its live members
    declare 2, a finished pod of an earlier group of the name 3. Taking q-2 leaves 2 of
    2: before, it was judged against the finished pod's 3 and the node dropped."""

    def member(name: str, node: str, count: str, phase: str = "Running", **more: str) -> Any:
        labels = {"kueue.x-k8s.io/pod-group-name": "q"}
        annotations = {"kueue.x-k8s.io/pod-group-total-count": count, **more}
        return pod_obj(
            name, node=node, phase=phase, uid=name, labels=labels, annotations=annotations
        )

    planner = upstream(
        member("q-0", "n1", "2", **{"phalanx.io/placement": "pack"}),
        member("q-1", "n1", "2", **{"phalanx.io/placement": "spread"}),
        member("q-2", "n2", "2"),
        member("q-3", "n3", "3", "Succeeded"),
    )
    assert verdict(planner, "n2", ["q-2"]) == PreemptVerdict("n2", PreemptOutcome.KEPT, ("q-2",))
    assert verdict(planner, "n1", ["q-0", "q-1"]).outcome is PreemptOutcome.DROPPED  # 1 of 2


# ---- the verdicts ------------------------------------------------------------------------


def verdict(planner: GangPlanner, node: str, victims: list[str]) -> PreemptVerdict:
    (found,) = planner.preempt({node: victims}).verdicts
    assert found.node == node
    return found


def test_a_set_that_leaves_every_gang_whole_is_kept_as_proposed_with_no_reason() -> None:
    solo = pod("solo", 2, node="n1", uid="solo", phase=PodPhase.RUNNING)
    _, planner = setup(pods=[solo])
    assert verdict(planner, "n1", ["solo"]) == PreemptVerdict("n1", PreemptOutcome.KEPT, ("solo",))


def test_a_set_widened_to_a_whole_gang_names_the_gang_the_counts_and_the_pods_added() -> None:
    g0 = pod("g-0", 2, node="n1", group="g", uid="g-0")
    g1 = pod("g-1", 2, node="n1", group="g", uid="g-1")
    _, planner = setup(groups=[podgroup("g", 2)], pods=[g0, g1])
    found = verdict(planner, "n1", ["g-0"])
    assert found.outcome is PreemptOutcome.WIDENED
    assert found.victims == ("g-0", "g-1")
    assert found.widenings == (Widening("default/g", ("g-1",)),)
    assert found.added == ("g-1",)
    assert found.reason == (
        "the victims would leave gang default/g with 1 of its 2 bound member(s), below its "
        "quorum of 2: its 1 other pod(s) on n1 go too"
    )


def test_a_set_widened_to_a_disruption_unit_names_the_unit() -> None:
    planner = upstream(
        upstream_podgroup_obj("a", 1, disruption_mode="all"),
        running("a-0", "n1", "a"),
        running("a-1", "n1", "a"),
    )
    found = verdict(planner, "n1", ["a-0"])
    assert found.outcome is PreemptOutcome.WIDENED
    assert found.widenings == (Widening("upstream:default/a", ("a-1",)),)
    assert found.reason == (
        "the victims take 1 of the 2 bound pod(s) under upstream:default/a (disruptionMode "
        "all): its 1 other pod(s) on n1 go too"
    )


def test_each_widening_is_told_in_the_order_it_was_made() -> None:
    # The gang is whole once a-1 goes with a-0, but a-1's own gang b then needs b-1.
    a = [pod(f"a-{i}", 1, node="n1", group="a", uid=f"a-{i}") for i in range(2)]
    b = [pod(f"b-{i}", 1, node="n1", group="b", uid=f"b-{i}") for i in range(2)]
    _, planner = setup(groups=[podgroup("a", 2), podgroup("b", 2)], pods=[*a, *b])
    found = verdict(planner, "n1", ["a-0", "b-0"])
    assert found.widenings == (Widening("default/a", ("a-1",)), Widening("default/b", ("b-1",)))
    assert found.reason.count("; ") == 1
    assert found.reason.index("gang default/a") < found.reason.index("gang default/b")


@pytest.mark.parametrize(
    ("objects", "node", "victims", "unit", "reason"),
    [
        (
            "gang-spread",
            "n1",
            ["g-0"],
            "default/g",
            "the victims would leave gang default/g with 1 of its 2 bound member(s), below "
            "its quorum of 2, but 1 of its 1 other pod(s) that would have to go too are not "
            "on n1 (n2)",
        ),
        (
            "task-minima",
            "n1",
            ["m-0"],
            "default/g",
            "the victims would leave gang default/g with 3 of its 4 bound member(s), below "
            "its quorum (task master has 0 of 1 member(s)), but 3 of its 3 other pod(s) that "
            "would have to go too are not on n1 (n2)",
        ),
        (
            "all-spans-nodes",
            "n1",
            ["a-0"],
            "upstream:default/a",
            "the victims take 1 of the 4 bound pod(s) under upstream:default/a (disruptionMode "
            "all), but 2 of its 3 other pod(s) that would have to go too are not on n1 (n2)",
        ),
        (
            "all-spans-nodes",
            "n1",
            ["a-0", "a-1", "a-2", "a-3"],
            "upstream:default/a",
            "2 proposed victim(s) of upstream:default/a are bound to other node(s) (n2); "
            "kube-scheduler takes n1's victims from n1 alone",
        ),
        (
            "composite-child",
            "n2",
            ["worker-0", "worker-1"],
            "composite:default/ray",
            "the victims would leave PodGroup workers of gang composite:default/ray with 1 "
            "bound member(s), below its minCount of 2, but 1 of its 1 other pod(s) that would "
            "have to go too are not on n2 (n3)",
        ),
    ],
    ids=["gang-left-partial", "task-left-short", "unit-spans-nodes", "bound-elsewhere", "child"],
)
def test_a_dropped_node_names_what_would_be_left_partial(
    objects: str, node: str, victims: list[str], unit: str, reason: str
) -> None:
    planner = DROP_CASES[objects]()
    found = verdict(planner, node, victims)
    assert (found.outcome, found.victims, found.unit) == (PreemptOutcome.DROPPED, (), unit)
    assert found.reason == reason


def _spread_gang() -> GangPlanner:
    g0 = pod("g-0", 4, node="n1", group="g", uid="g-0", phase=PodPhase.RUNNING)
    g1 = pod("g-1", 4, node="n2", group="g", uid="g-1", phase=PodPhase.RUNNING)
    return setup(groups=[podgroup("g", 2)], pods=[g0, g1])[1]


def _master_and_workers() -> GangPlanner:
    master = pod("m-0", 4, node="n1", group="g", uid="m-0", task="master", phase=PodPhase.RUNNING)
    workers = [
        pod(f"w-{i}", 4, node="n2", group="g", uid=f"w-{i}", task="worker", phase=PodPhase.RUNNING)
        for i in range(3)
    ]
    group = replace(podgroup("g", 3), min_task_member=(("master", 1), ("worker", 2)))
    return setup(groups=[group], pods=[master, *workers])[1]


DROP_CASES: dict[str, Callable[[], GangPlanner]] = {
    "gang-spread": _spread_gang,
    "task-minima": _master_and_workers,
    "all-spans-nodes": lambda: upstream(
        upstream_podgroup_obj("a", 2, disruption_mode="all"), *SPREAD
    ),
    "composite-child": lambda: upstream(*ray("single", head_mode="all")),
}


def test_the_kept_sets_are_those_of_the_nodes_not_dropped_in_the_order_proposed() -> None:
    planner = upstream(
        upstream_podgroup_obj("a", 2, disruption_mode="all"),
        *SPREAD,
        running("lone", "n3", "lone"),
        upstream_podgroup_obj("lone", 1),
    )
    preemption = planner.preempt({"n3": ["lone"], "n1": ["a-0"], "n2": ["a-2"]})
    outcomes = [(v.node, v.outcome) for v in preemption.verdicts]
    assert outcomes == [
        ("n3", PreemptOutcome.KEPT),
        ("n1", PreemptOutcome.DROPPED),
        ("n2", PreemptOutcome.DROPPED),
    ]
    assert preemption.kept == {"n3": ["lone"]}


def test_a_kai_leaf_subgroup_stays_at_its_min_member_or_goes_whole() -> None:
    """Any one of two replicas of two (KAI's minSubGroup 1): the gang keeps its quorum
    without either, but a replica left with one member is a partial subgroup."""
    tree = SubGroupTree("", 1, (("r0", 2), ("r1", 2)))
    group = replace(podgroup("g", 2), min_task_member=tree)

    def running(name: str, node: str) -> Pod:
        task = name.partition("-")[0]
        return pod(name, 4, node=node, group="g", uid=name, task=task, phase=PodPhase.RUNNING)

    r0 = [running(f"r0-{i}", "n1") for i in range(2)]
    r1 = [running(f"r1-{i}", f"n{i + 1}") for i in range(2)]
    _, planner = setup(groups=[group], pods=[*r0, *r1])
    found = verdict(planner, "n1", ["r1-0"])
    assert (found.outcome, found.reason) == (
        PreemptOutcome.DROPPED,
        "the victims would leave subgroup r1 of gang default/g with 1 bound member(s), below "
        "its minMember of 2, but 1 of its 1 other pod(s) that would have to go too are not "
        "on n1 (n2)",
    )
    assert planner.preempt({"n1": ["r0-0"]}).kept == {"n1": ["r0-0", "r0-1"]}
