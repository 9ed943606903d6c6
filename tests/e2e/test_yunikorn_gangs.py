"""Apache YuniKorn's task groups through the real kube-scheduler (1.35) and Phalanx: an
application's task groups bind all or none, each group's minMember in the quorum.

YuniKorn is not installed: the test creates the pods as YuniKorn users write them (label
``applicationId``, the ``yunikorn.apache.org/task-group-name`` annotation on every pod and
the application's ``yunikorn.apache.org/task-groups`` on its first, the driver, with its
placeholder fields), all created up front (Spark's own driver creates its executors only once
it runs, which no gang can wait for: docs/gang-dialects.md). No placeholder pod is made:
Phalanx's reservation is their part. Phalanx and kube-scheduler are real; the invariant
monitor judges each application by the sum of its task groups' minima.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest_scheduling import cluster, phalanx, scheduler  # noqa: F401  # fixtures
from scheduling import A_YUNIKORN_TASK_GROUP, A_YUNIKORN_TASK_GROUPS, Obj, Scenario, pod_body

pytestmark = pytest.mark.e2e


def task_groups(gpus: int, **minima: int) -> str:
    """The application's definition as its users write it: placeholders' shape included."""
    return json.dumps(
        [
            {
                "name": name,
                "minMember": minimum,
                "minResource": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": str(gpus)},
                "nodeSelector": {},
                "tolerations": [],
                "affinity": {},
                "topologySpreadConstraints": [],
            }
            for name, minimum in minima.items()
        ]
    )


def yk_pod(sc: Scenario, app: str, name: str, group: str, gpus: int, definition: str = "") -> Obj:
    annotations = {A_YUNIKORN_TASK_GROUP: group}
    if definition:
        annotations[A_YUNIKORN_TASK_GROUPS] = definition
    body = pod_body(
        name,
        gpus=gpus,
        node_selector=sc.selector,
        labels={"applicationId": app, "queue": "root.sandbox"},
        annotations=annotations,
    )
    return sc.api.create(f"/api/v1/namespaces/{sc.namespace}/pods", body)


def application(
    sc: Scenario, app: str, gpus: int, executors: int, min_executors: int
) -> tuple[str, list[str]]:
    """A Spark-shaped application: its driver (carrying the definition), then its executors."""
    definition = task_groups(gpus, driver=1, executor=min_executors)
    driver = yk_pod(sc, app, f"{app}-driver", "driver", gpus, definition)["metadata"]["name"]
    names = [f"{app}-exec-{i}" for i in range(1, executors + 1)]
    for name in names:
        yk_pod(sc, app, name, "executor", gpus)
    return driver, names


def debug_view(sc: Scenario, app: str) -> dict[str, Any]:
    answer = sc.phalanx.get(f"/debug/groups/yunikorn:{sc.namespace}/{app}")
    answer.raise_for_status()
    view: dict[str, Any] = answer.json()
    return view


def test_an_application_that_fits_binds_whole(cluster: Scenario) -> None:  # noqa: F811
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    driver, executors = application(cluster, "spark-pi", 4, 2, 2)

    where = cluster.wait_bound([driver, *executors])
    assert len(set(where.values())) == 2, where
    # No gang object: Phalanx tells the gang's first member.
    cluster.wait_event(driver, "bound 3 member(s) together", reason="Bound")
    view = debug_view(cluster, "spark-pi")
    assert (view["dialect"], view["source"], view["min_member"], view["bound"]) == (
        "yunikorn",
        "annotations",
        3,
        3,
    )


def test_an_application_one_node_short_waits_whole_and_says_why(
    cluster: Scenario,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 8)
    cluster.nodes_ready()
    driver, executors = application(cluster, "wide", 8, 2, 2)

    # The last one created: every member exists by its first cycle (the driver's may have
    # come before its executors, and it then waits for them, saying so).
    cluster.wait_unschedulable(
        executors[-1], f"cannot place 3 member(s) of gang yunikorn:{cluster.namespace}/wide"
    )
    cluster.assert_unbound_for([driver, *executors], 3.0)
    view = debug_view(cluster, "wide")
    assert (view["last_decision"], view["reservation"], view["bound"]) == ("unfit", None, 0)


def test_a_task_group_minimum_below_its_pod_count_binds_the_quorum_with_each_groups_minimum(
    cluster: Scenario,  # noqa: F811
) -> None:
    cluster.node("a", 8)
    cluster.node("b", 4)
    cluster.nodes_ready()
    # Room for three of the four. The executors come first and would fill it on their own;
    # the quorum holds the driver's task group too: the driver and two executors bind.
    definition = task_groups(4, driver=1, executor=2)
    executors = [f"elastic-exec-{i}" for i in (1, 2, 3)]
    for name in executors:
        yk_pod(cluster, "elastic", name, "executor", 4, definition)
    cluster.wait_unschedulable(
        executors[-1],
        "3/3 exist, but task driver has 0 of 1 member(s) "
        "(annotation yunikorn.apache.org/task-groups)",
    )
    cluster.assert_unbound_for(executors, 1.0)
    driver = yk_pod(cluster, "elastic", "elastic-driver", "driver", 4)["metadata"]["name"]

    cluster.wait_bound([driver])
    cluster.wait(
        "two executors bound",
        lambda: sum(map(bool, cluster.placement(executors).values())) == 2,
    )
    spare = [name for name, node in cluster.placement(executors).items() if not node]
    cluster.assert_unbound_for(spare, 1.0)
    view = debug_view(cluster, "elastic")
    assert (view["dialect"], view["min_member"], view["bound"]) == ("yunikorn", 3, 3)
