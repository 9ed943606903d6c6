"""The cluster file reads gang objects of every dialect, and says once what it ignores."""

from __future__ import annotations

import asyncio

from builders import node_obj, pod_obj, volcano_podgroup_obj, workload_obj
from phalanx.core.cache import ClusterState
from phalanx.core.model import Dialect
from phalanx.sources.clusterfile import ClusterFileSource


def loaded(*objects: dict) -> tuple[ClusterFileSource, ClusterState]:
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
