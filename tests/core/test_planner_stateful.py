"""A stateful test of reserve / expire / node-removed / pod-deleted sequences on the planner.

It also holds the planner's memory of unfit gangs (phalanx.core.unfit) to a fresh planner
on a copy of the same model: a gang it would refuse unplanned is refused by a new plan too.

Binding is left to tests/service/test_barrier_interleavings.py, which drives the real bind
barrier; this machine once re-implemented the barrier and so only checked itself.
"""

import copy

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from builders import gang, gpu_node, pod, podgroup, present
from phalanx.core.cache import ClusterState, MemberState
from phalanx.core.model import EMPTY, Pod, Resources
from phalanx.core.planner import GangPlanner

GANGS = {"a": (3, 4), "b": (2, 8), "c": (4, 2), "d": (2, 6)}  # name -> (size, gpus each)


class Scheduling(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = ClusterState()
        self.planner = GangPlanner(self.state)
        self.now = 0.0
        self.nodes = [f"n{i}" for i in range(4)]
        for n in self.nodes:
            self.state.upsert_node(gpu_node(n))
        self.members: dict[str, list[Pod]] = {}
        self.singles = 0
        for name, (size, gpus) in GANGS.items():
            self.state.upsert_group(podgroup(name, size, timeout=30))
            self.members[name] = gang(name, size, gpus)
            for p in self.members[name]:
                self.state.upsert_pod(p)

    @rule(name=st.sampled_from(sorted(GANGS)), index=st.integers(0, 3))
    def filter_a_member(self, name: str, index: int) -> None:
        live = self.state.members(f"default/{name}")
        if live:
            self.planner.filter(
                live[index % len(live)], [n for n in self.nodes if self.state.node(n)], self.now
            )

    @rule(seconds=st.sampled_from([1, 10, 31]))
    def time_passes(self, seconds: int) -> None:
        self.now += seconds
        self.planner.expire(self.now)

    @precondition(lambda self: len([n for n in self.nodes if self.state.node(n)]) > 1)
    @rule(index=st.integers(0, 3))
    def a_node_disappears(self, index: int) -> None:
        self.state.remove_node(self.nodes[index])

    @rule(name=st.sampled_from(sorted(GANGS)))
    def a_gang_finishes_and_is_deleted(self, name: str) -> None:
        for p in self.members[name]:
            self.state.remove_pod(p.uid)

    @rule(index=st.integers(0, 3), gpus=st.integers(1, 4))
    def another_pod_binds(self, index: int, gpus: int) -> None:
        node = self.state.node(self.nodes[index])
        if node is not None and node.free.gpus() >= gpus:
            self.singles += 1
            self.state.upsert_pod(pod(f"single-{self.singles}", gpus, node=node.name))

    @invariant()
    def a_remembered_refusal_is_what_a_new_plan_says(self) -> None:
        offered = [n for n in self.nodes if self.state.node(n)]
        for name in GANGS:
            key = f"default/{name}"
            live = self.state.members(key)
            group = self.state.group(key)
            if not live or group is None or self.state.reservation(key) is not None:
                continue
            if self.planner.unfit.recall(group, live, template=False) is None:
                continue
            fresh_state = copy.deepcopy(self.state)
            first = present(fresh_state.pod(live[0].uid))
            fresh = GangPlanner(fresh_state).filter(first, offered, self.now)
            assert not fresh.result.feasible, f"gang {key} fits now, yet it is remembered unfit"

    @invariant()
    def the_pending_count_is_what_counting_every_pod_says(self) -> None:
        def pending(p: Pod) -> bool:
            return not self.state.is_bound(p) and not (p.terminal or p.deleting)

        assert self.state.pending_count() == sum(1 for p in self.state.pods() if pending(p))
        for name in GANGS:
            key = f"default/{name}"
            assert self.state.pending_count(key) == sum(
                1 for p in self.state.members(key) if pending(p)
            )

    @invariant()
    def the_bound_count_is_what_counting_the_members_says(self) -> None:
        for name in GANGS:
            key = f"default/{name}"
            assert self.state.bound_count(key) == len(self.state.bound_members(key))

    @invariant()
    def a_gang_s_members_are_its_live_pods_by_name(self) -> None:
        # `members` is kept in step with each change, not sorted again at each read.
        for name in GANGS:
            key = f"default/{name}"
            live = [
                p
                for p in self.state.pods()
                if p.group is not None and p.group.key == key and not (p.terminal or p.deleting)
            ]
            assert self.state.members(key) == sorted(live, key=lambda p: p.name)

    @invariant()
    def reserved_capacity_equals_the_reserved_members(self) -> None:
        per_node: dict[str, Resources] = {}
        for r in self.state.reservations().values():
            for m in r.members:
                if m.state is MemberState.RESERVED:
                    per_node[m.node] = per_node.get(m.node, EMPTY) + m.requests
        for info in self.state.nodes():
            assert info.reserved == per_node.get(info.name, EMPTY)
        assert self.state.reserved_gpus() == sum(v.gpus() for v in per_node.values())

    @invariant()
    def no_node_is_overcommitted(self) -> None:
        assert self.state.overcommitted_nodes() == []


TestScheduling = Scheduling.TestCase
TestScheduling.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
