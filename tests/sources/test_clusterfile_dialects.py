"""The cluster file reads gang objects of every dialect, says once what it ignores, and
tells the members of an invalid one why they wait (as the live source does)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from builders import (
    claim_template_obj,
    composite_obj,
    device_request,
    dra_pod_obj,
    node_obj,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.cache import ClusterState
from phalanx.core.model import Binding, Dialect
from phalanx.service.extender import Extender, ServiceSettings
from phalanx.sources.clusterfile import ClusterFileSource


def loaded(*objects: dict[str, Any]) -> tuple[ClusterFileSource, ClusterState]:
    state = ClusterState()
    source = ClusterFileSource([node_obj("n1"), *objects])
    asyncio.run(source.start(lambda update: update(state)))
    return source, state


def test_a_workload_and_a_volcano_pod_group_are_read_with_their_dialects() -> None:
    _, state = loaded(
        workload_obj("train", {"workers": 2}),
        volcano_podgroup_obj("job", 3),
        pod_obj("w-0", workload_ref={"name": "train", "podGroup": "workers"}),
    )
    workload = state.workload("upstream:default/train")
    assert workload is not None
    assert workload.pod_group("workers") is not None
    group = state.group("volcano:default/job")
    assert group is not None
    assert (group.dialect, group.min_member) == (Dialect.VOLCANO, 3)
    assert state.gangs_of("upstream:default/train") == ["upstream:default/train/workers"]


def test_what_a_gang_object_says_that_phalanx_ignores_is_kept_once() -> None:
    queued = volcano_podgroup_obj("job", 3, queue="research")
    source, _ = loaded(queued)
    source.apply(queued)  # applied again: said once
    assert source.warnings == [
        'PodGroup volcano:default/job: spec.queue: "research" is ignored: Phalanx has no '
        "queues (the gang is admitted as soon as it fits)"
    ]
    assert source.rejected == []


def test_an_invalid_gang_object_is_rejected_naming_its_field() -> None:
    source, state = loaded(volcano_podgroup_obj("job", 0))
    assert state.group("volcano:default/job") is None
    assert source.rejected == [
        "PodGroup default/job: spec.minMember: must be a positive integer, not 0"
    ]


# (the invalid gang object, a member pod naming it, the field the member must be told)
INVALID_GANGS = {
    "scheduler-plugins": (
        podgroup_obj("x", 2, timeout=-5),
        pod_obj("x-0", group="x"),
        "spec.scheduleTimeoutSeconds",
    ),
    "volcano": (
        volcano_podgroup_obj("x", -2),
        pod_obj("x-0", volcano_group="x"),
        "spec.minMember",
    ),
    "upstream": (
        upstream_podgroup_obj("x", 0),
        pod_obj("x-0", scheduling_group="x"),
        "spec.schedulingPolicy.gang.minCount",
    ),
    "upstream-workload": (
        workload_obj("x", {"workers": 0}),
        pod_obj("x-0", workload_ref={"name": "x", "podGroup": "workers"}),
        "spec.podGroups[0].policy.gang.minCount",
    ),
}


def filter_reasons(*objects: dict[str, Any], pod: str) -> set[str]:
    """Why Phalanx, serving these objects from a cluster file, refuses `pod` on node n1."""

    async def ask() -> set[str]:
        extender = Extender(ClusterFileSource([node_obj("n1"), *objects]), ServiceSettings())
        await extender.start()
        try:
            member = extender.state.pod_by_key("default", pod)
            assert member is not None
            result = extender.filter(member, ["n1"])
        finally:
            await extender.stop()
        assert result.feasible == ()
        return {*result.failed.values(), *result.unresolvable.values(), result.error} - {""}

    return asyncio.run(ask())


@pytest.mark.parametrize(("group", "member", "field"), INVALID_GANGS.values(), ids=INVALID_GANGS)
def test_the_members_of_an_invalid_gang_object_are_told_its_field_not_to_wait_for_it(
    group: dict[str, Any], member: dict[str, Any], field: str
) -> None:
    [reason] = filter_reasons(group, member, pod="x-0")
    assert "is invalid" in reason
    assert field in reason
    assert "to exist" not in reason


def test_a_gang_object_made_valid_again_is_used() -> None:
    source, state = loaded(podgroup_obj("x", 2, timeout=-5), pod_obj("x-0", group="x"))
    assert state.group_error("default/x") is not None
    source.apply(podgroup_obj("x", 2))
    assert state.group_error("default/x") is None
    assert state.group("default/x") is not None


def test_a_pod_group_listed_after_its_members_gives_them_its_claims() -> None:
    group = upstream_podgroup_obj("team", 2)
    group["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four"}]
    _, state = loaded(
        claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4)),
        dra_pod_obj("m", templates={"gpus": "four"}, scheduling_group="team"),
        group,
    )
    member = state.pod_by_key("default", "m")
    assert member is not None
    assert member.devices is not None
    assert [c.key for c in member.devices.demand.claims] == ["default/team#gpus"]


def test_a_composite_member_bound_from_the_file_still_names_its_own_pod_group() -> None:
    # The demo binds the model's copy, filed under the composite: bound, the member is
    # still its PodGroup's (preemption reads the PodGroup's disruption mode).
    source, state = loaded(
        composite_obj("job", 1),
        upstream_podgroup_obj("head", 1, parent="job"),
        pod_obj("head-0", scheduling_group="head"),
    )
    member = state.pod_by_key("default", "head-0")
    assert member is not None
    asyncio.run(source.bind(Binding(member.ref, "n1")))
    bound = state.pod_by_key("default", "head-0")
    assert bound is not None
    assert bound.node_name == "n1"
    assert str(state.declared_group(bound)) == "upstream:default/head"
    assert state.gangs_of("upstream:default/head") == ["composite:default/job"]


def claim_keys(state: ClusterState, pod: str) -> list[str]:
    member = state.pod_by_key("default", pod)
    assert member is not None
    assert member.devices is not None
    return [c.key for c in member.devices.demand.claims]


@pytest.mark.parametrize("gone", ["deleted", "made invalid"])
def test_a_pod_group_back_after_it_was_gone_gives_its_members_its_claims_again(gone: str) -> None:
    # While the PodGroup is gone its members count their own claims; once it is back,
    # its claim serves them again, whatever they were derived from in between.
    group = upstream_podgroup_obj("team", 2)
    group["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four"}]
    member = dra_pod_obj("m", templates={"gpus": "four"}, scheduling_group="team")
    source, state = loaded(
        claim_template_obj("four", device_request("gpu", "gpu.nvidia.com", 4)), group, member
    )
    assert claim_keys(state, "m") == ["default/team#gpus"]
    if gone == "deleted":
        source.delete_group("upstream:default/team")
    else:
        source.apply(upstream_podgroup_obj("team", 0))
    member["metadata"]["labels"]["edited"] = "yes"  # any update of the member meanwhile
    source.apply(member)
    assert claim_keys(state, "m") == ["default/m#gpus"]
    source.apply(group)
    assert claim_keys(state, "m") == ["default/team#gpus"]
