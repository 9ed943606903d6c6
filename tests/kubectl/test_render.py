"""How `kubectl phalanx` prints its answers: tables for people, JSON for scripts."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from builders import (
    event_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    lease_obj,
    pod_obj,
    podgroup_obj,
    volcano_podgroup_obj,
)
from phalanx.core.rollforward import COMMIT_ANNOTATION, CommitRecord, encode_commit_record
from phalanx.kubectl.render import (
    explanation_json,
    gang_json,
    render_explanation,
    render_status,
    status_json,
)
from phalanx.kubectl.views import (
    Explanation,
    GangView,
    LeaseView,
    PhalanxView,
    Status,
    collect_gangs,
    gang_events,
    lease_view,
    wait_of,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
LEADER = lease_view(
    "phalanx-system",
    "phalanx-scheduler",
    lease_obj("phalanx-scheduler", "phalanx-5c9f-abcde_3f1e", renewed="2026-01-01T11:59:58Z"),
)
DUTY = lease_view(
    "phalanx-system",
    "phalanx-rollforward",
    lease_obj("phalanx-rollforward", "phalanx-1a2b3c4d", renewed="2026-01-01T11:59:57Z"),
)
LEASES = (LEADER, DUTY)
WAITING = {
    "phase": "Pending",
    "conditions": [
        {
            "type": "PodGroupScheduled",
            "status": "False",
            "reason": "WaitingForMembers",
            "message": "waiting for gang members: 2/3 exist",
            "lastTransitionTime": "2026-01-01T11:59:30Z",
        }
    ],
}
RESERVED = {
    "group": "team-a/held",
    "source": "PodGroup",
    "min_member": 2,
    "placement": "pack",
    "members": 2,
    "bound": 0,
    "phase": "Scheduling",
    "last_decision": "committed",
    "last_reason": "reserved 2 member(s) on gpu-1",
    "reservation": {
        "expires_in_seconds": 41.5,
        "members": [
            {"pod": "team-a/held-0", "node": "gpu-1", "state": "assumed", "gpus": 4},
            {"pod": "team-a/held-1", "node": "gpu-1", "state": "reserved", "gpus": 4},
        ],
    },
    "plan": {"placements": {"team-a/held-0": "gpu-1", "team-a/held-1": "gpu-1"}},
}


def gangs() -> list[GangView]:
    ns = "team-a"
    record = encode_commit_record(
        CommitRecord("team-a/held", {"team-a/held-0": "gpu-1"}, {"team-a/held-0": "u"}),
        "2026-01-01T11:59:50Z",
    )
    pods = [
        pod_obj("trainer-0", namespace=ns, group="trainer", node="gpu-0"),
        pod_obj("trainer-1", namespace=ns, group="trainer", node="gpu-0"),
        pod_obj("short-0", namespace=ns, group="short"),
        pod_obj("short-1", namespace=ns, group="short"),
        pod_obj("held-0", namespace=ns, group="held", node="gpu-1"),
        pod_obj("held-1", namespace=ns, group="held"),
    ]
    pod_groups = [
        podgroup_obj("trainer", 2, namespace=ns, status={"phase": "Running"}),
        podgroup_obj("short", 3, namespace=ns, status=WAITING),
        podgroup_obj("held", 2, namespace=ns, annotations={COMMIT_ANNOTATION: record}),
    ]
    found, _ = collect_gangs(pod_groups, pods)
    return found


def status(phalanx: PhalanxView | None, leases: tuple[LeaseView, ...] = LEASES) -> Status:
    found = gangs()
    waits = tuple(w for g in found if (w := wait_of(g, [])) is not None)
    return Status("prod", "team-a", tuple(found), waits, leases, phalanx)


def lines_starting(text: str, first: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.split()[:1] == [first]]


def test_status_has_a_row_per_gang_with_its_state() -> None:
    text = render_status(status(None), NOW, phalanx_namespace="phalanx-system")
    assert text.startswith("Context prod, namespace team-a\n")
    table = text.split("Waiting:", 1)[0]  # the waits repeat the waiting gangs' names
    rows = {
        r[0]: r for name in ("trainer", "held") for r in lines_starting(table, f"team-a/{name}")
    }
    sp = ["scheduler-plugins", "PodGroup"]
    assert rows["team-a/trainer"][1:9] == [*sp, "2", "2", "2", "whole", "Running", "-"]
    assert rows["team-a/held"][1:9] == [*sp, "2", "2", "1", "binding", "-", "yes"]


def test_status_shows_the_leader_by_its_pod_and_how_long_ago_it_renewed() -> None:
    text = render_status(status(None), NOW, phalanx_namespace="phalanx-system")
    (row,) = lines_starting(text, "phalanx-system/phalanx-scheduler")
    assert row[1:] == ["phalanx-5c9f-abcde_3f1e", "[pod", "phalanx-5c9f-abcde]", "2s", "ago"]


def test_status_says_why_each_gang_waits() -> None:
    text = render_status(status(None), NOW, phalanx_namespace="phalanx-system")
    waiting = text.split("Waiting:", 1)[1]
    assert "team-a/short  waiting  30s    condition  waiting for gang members: 2/3 exist" in waiting


def test_without_a_server_status_says_how_to_reach_the_leaders_phalanx() -> None:
    text = render_status(status(None), NOW, phalanx_namespace="phalanx-system")
    assert (
        "kubectl -n phalanx-system port-forward pod/phalanx-5c9f-abcde 8888, "
        "then add --server http://127.0.0.1:8888"
    ) in text


def test_without_a_known_leader_the_hint_has_a_placeholder() -> None:
    nobody = (LeaseView("phalanx-system", "phalanx-scheduler", error="not found"),)
    text = render_status(status(None, nobody), NOW, phalanx_namespace="phalanx-system")
    assert "port-forward <leader-pod> 8888" in text
    assert "phalanx-system/phalanx-scheduler  (not found)" in text


def test_status_lists_the_reservations_phalanx_holds() -> None:
    phalanx = PhalanxView("http://127.0.0.1:8888", details={"team-a/held": RESERVED})
    text = render_status(status(phalanx), NOW, phalanx_namespace="phalanx-system")
    reserved = text.split("Reservations (Phalanx at http://127.0.0.1:8888):", 1)[1]
    assert lines_starting(reserved, "team-a/held") == [
        ["team-a/held", "41.5s", "team-a/held-0", "gpu-1", "assumed", "4"],
        ["team-a/held", "41.5s", "team-a/held-1", "gpu-1", "reserved", "4"],
    ]


def test_a_phalanx_that_could_not_be_asked_is_said_in_place_of_reservations() -> None:
    phalanx = PhalanxView("http://127.0.0.1:8888", error="cannot ask Phalanx: refused")
    text = render_status(status(phalanx), NOW, phalanx_namespace="phalanx-system")
    assert text.split("Reservations", 1)[1].splitlines()[1] == "  cannot ask Phalanx: refused"


def test_status_json_holds_the_same_facts_with_times_not_ages() -> None:
    phalanx = PhalanxView("http://p", details={"team-a/held": RESERVED})
    answer = json.loads(json.dumps(status_json(status(phalanx))))
    assert [g["gang"] for g in answer["gangs"]] == ["team-a/held", "team-a/short", "team-a/trainer"]
    held = answer["gangs"][0]
    assert held["commit"] == {
        "at": "2026-01-01T11:59:50Z",
        "placements": {"team-a/held-0": "gpu-1"},
        "error": None,
    }
    assert answer["leases"][0]["holder_pod"] == "phalanx-5c9f-abcde"
    assert answer["waits"][1]["since"] == "2026-01-01T11:59:30Z"
    assert answer["phalanx"]["reservations"][0]["gang"] == "team-a/held"


# ---- explain ------------------------------------------------------------------------------------


def explanation(phalanx: PhalanxView | None) -> Explanation:
    held = next(g for g in gangs() if g.name == "held")
    events = gang_events(
        held,
        [
            event_obj("PodGroup", "held", "Reserved", "reserved 2 member(s) on gpu-1",
                      namespace="team-a", at="2026-01-01T11:59:40Z"),
            event_obj("Pod", "held-1", "FailedScheduling", "binding failed", namespace="team-a",
                      at="2026-01-01T11:59:55Z", component="phalanx", warning=True, count=3),
        ],
    )  # fmt: skip
    return Explanation("prod", held, tuple(events), wait_of(held, events), phalanx)


def test_explain_lists_members_with_the_node_their_commit_record_names() -> None:
    text = render_explanation(
        explanation(None), NOW, leases=LEASES, phalanx_namespace="phalanx-system"
    )
    assert text.startswith(
        "Gang team-a/held  (scheduler-plugins PodGroup, minMember 2, placement default)"
    )
    assert "  state:          binding (1/2 bound, 2 member(s))" in text
    assert "  commit record:  written 10s ago, 1 placement(s)" in text
    assert lines_starting(text, "held-0") == [
        ["held-0", "gpu-1", "Pending", "gpu-1", "phalanx", "-"]
    ]
    assert lines_starting(text, "held-1") == [["held-1", "-", "Pending", "-", "phalanx", "-"]]


def test_explain_shows_the_topology_the_gang_declares() -> None:
    gang = GangView(
        "team-a/job", "team-a", "job", "PodGroup", 2, (),
        topology="required topology.kubernetes.io/zone",
    )  # fmt: skip
    expl = Explanation("prod", gang, (), None, None)
    text = render_explanation(expl, NOW, leases=LEASES, phalanx_namespace="phalanx-system")
    assert "  topology:       required topology.kubernetes.io/zone" in text
    assert explanation_json(expl, LEASES)["gang"]["topology"] == gang.topology
    held = render_explanation(
        explanation(None), NOW, leases=LEASES, phalanx_namespace="phalanx-system"
    )
    assert "  topology:       none declared" in held


def test_explain_shows_upstreams_disruption_mode_where_the_gang_object_has_one() -> None:
    gang = GangView(
        "upstream:team-a/job", "team-a", "job", "PodGroup", 2, (), disruption_mode="all"
    )
    expl = Explanation("prod", gang, (), None, None)
    text = render_explanation(expl, NOW, leases=LEASES, phalanx_namespace="phalanx-system")
    assert "  disruption:     all (spec.disruptionMode)" in text
    assert explanation_json(expl, LEASES)["gang"]["disruption_mode"] == "all"
    held = render_explanation(
        explanation(None), NOW, leases=LEASES, phalanx_namespace="phalanx-system"
    )
    assert "disruption:" not in held


def test_explain_says_the_gang_object_is_being_deleted() -> None:
    reason = "PodGroup team-a/job is being deleted (gang team-a/job): its members are not ..."
    gang = GangView("team-a/job", "team-a", "job", "PodGroup", 2, (), deleting=reason)
    expl = Explanation("prod", gang, (), None, None)
    text = render_explanation(expl, NOW, leases=LEASES, phalanx_namespace="phalanx-system")
    assert f"  deleting:       {reason}" in text
    assert explanation_json(expl, LEASES)["gang"]["deleting"] == reason
    held = render_explanation(
        explanation(None), NOW, leases=LEASES, phalanx_namespace="phalanx-system"
    )
    assert "deleting:" not in held


def test_explain_shows_the_events_oldest_first_with_repeats_counted() -> None:
    text = render_explanation(
        explanation(None), NOW, leases=LEASES, phalanx_namespace="phalanx-system"
    )
    events = text.split("Events (oldest first):", 1)[1].splitlines()[2:]  # after the header
    assert events[0].split()[:4] == ["20s", "PodGroup/held", "Normal", "Reserved"]
    assert events[1].split()[:4] == ["5s", "Pod/held-1", "Warning", "FailedScheduling"]
    assert events[1].endswith("binding failed (x3)")


def test_explain_adds_what_phalanx_holds_when_asked() -> None:
    phalanx = PhalanxView("http://127.0.0.1:8888", details={"team-a/held": RESERVED})
    text = render_explanation(
        explanation(phalanx), NOW, leases=LEASES, phalanx_namespace="phalanx-system"
    )
    part = text.split("Phalanx at http://127.0.0.1:8888:", 1)[1]
    assert "  gang team-a/held  (PodGroup, minMember 2, placement pack)" in part
    assert "    reservation:    expires in 41.5s" in part


def test_explain_says_when_phalanx_does_not_know_the_gang() -> None:
    phalanx = PhalanxView("http://127.0.0.1:8888")
    text = render_explanation(
        explanation(phalanx), NOW, leases=LEASES, phalanx_namespace="phalanx-system"
    )
    assert "does not know gang team-a/held" in text


def test_explain_json_carries_the_events_and_the_wait() -> None:
    answer = json.loads(json.dumps(explanation_json(explanation(None), LEASES)))
    assert [e["reason"] for e in answer["events"]] == ["Reserved", "FailedScheduling"]
    assert answer["events"][1]["count"] == 3
    assert answer["wait"]["reason"] == "binding failed"
    assert answer["phalanx"] is None


def test_explain_says_which_volcano_task_its_bound_members_lack() -> None:
    group = volcano_podgroup_obj("mpi", 2, min_task_member={"master": 1, "worker": 1})
    pods = [
        pod_obj(f"mpi-worker-{i}", volcano_group="mpi", node=f"gpu-{i}",
                annotations={"volcano.sh/task-spec": "worker"})
        for i in range(2)
    ]  # fmt: skip
    [gang], _ = collect_gangs([group], pods)
    text = render_explanation(
        Explanation("prod", gang, (), wait_of(gang, []), None),
        NOW,
        leases=LEASES,
        phalanx_namespace="phalanx-system",
    )
    assert (
        "  state:          partial (2/2 bound, but task master has 0 of 1 member(s) "
        "(spec.minTaskMember), 2 member(s))"
    ) in text
    answer = gang_json(gang)
    assert (answer["min_task_member"], answer["tasks_short"]) == (
        {"master": 1, "worker": 1},
        "task master has 0 of 1 member(s)",
    )


def test_explain_shows_kai_s_nested_subgroups_as_a_tree_and_the_one_short() -> None:
    group = kai_podgroup_obj("serve", None)
    group["spec"].update(
        minSubGroup=2,
        subGroups=[
            {"name": "decode"},
            {"name": "decode-workers", "parent": "decode", "minMember": 2},
            {"name": "prefill", "minMember": 1},
        ],
    )
    pods = [kai_pod_obj(f"d-{i}", "serve", "decode-workers", node=f"gpu-{i}") for i in range(2)]
    [gang], _ = collect_gangs([group], pods)
    answer = gang_json(gang)
    assert (answer["min_task_member"], answer["tasks_short"]) == (
        {
            "subgroup": "",
            "min_groups": 2,
            "children": [
                {
                    "subgroup": "decode",
                    "min_groups": 1,
                    "children": [{"subgroup": "decode-workers", "min": 2}],
                },
                {"subgroup": "prefill", "min": 1},
            ],
        },
        "PodGroup has 1 of 2 child group(s) ready: subgroup prefill has 0 of 1 member(s)",
    )
