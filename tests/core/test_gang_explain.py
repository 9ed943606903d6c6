"""The texts people read about a gang: requests, shortfalls, misses, where a gang landed."""

import pytest

from builders import CLIQUE, LEAF, SPINE
from phalanx.core.gang_explain import (
    LevelMiss,
    describe_request,
    landing_text,
    miss_text,
    shortfall_text,
    topology_unfit_detail,
)
from phalanx.core.model import CPU, MEMORY, NVIDIA_GPU, PODS, Resources
from phalanx.core.quantity import format_amount
from phalanx.core.topology import CLUSTER, DEFAULT_TOPOLOGIES, GangTopology

GIB = 1 << 30
DEFAULT = DEFAULT_TOPOLOGIES.default
EIGHTY = Resources({NVIDIA_GPU: 80, CPU: 20_000, MEMORY: 80 * GIB, PODS: 20})


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        (CPU, 1500, "1500m"),
        (CPU, 2000, "2"),
        (MEMORY, 4 * GIB, "4Gi"),
        (MEMORY, 512 << 20, "512Mi"),
        (MEMORY, 1000, "1000"),
        ("hugepages-2Mi", 2 << 20, "2Mi"),
        (NVIDIA_GPU, 8, "8"),
    ],
    ids=["millicores", "whole-cpus", "gibibytes", "mebibytes", "bytes", "hugepages", "gpus"],
)
def test_amounts_read_as_people_write_them(resource: str, amount: int, text: str) -> None:
    assert format_amount(resource, amount) == text


def test_a_request_is_shown_without_its_pod_slot() -> None:
    assert describe_request(EIGHTY) == "{cpu: 20, memory: 80Gi, nvidia.com/gpu: 80}"
    assert shortfall_text({NVIDIA_GPU: 2, CPU: 500}) == "2 nvidia.com/gpu, 500m cpu"


@pytest.mark.parametrize(
    ("miss", "text"),
    [
        (
            LevelMiss(2, CLIQUE, 0, (f"{CLIQUE}=c-7", 72), None),
            f"no clique has 80 free GPUs; best: {CLIQUE}=c-7 with 72 free",
        ),
        (LevelMiss(2, CLIQUE, 0, None, None), "no clique has 80 free GPUs"),
        (
            LevelMiss(1, LEAF, 2, (f"{LEAF}=l-1", 96), (3, f"{LEAF}=l-1", "only 3 of 20 fit")),
            f"no leaf could hold every member; best: {LEAF}=l-1 (only 3 of 20 fit)",
        ),
    ],
    ids=["too-few-gpus", "no-domain-at-all", "capacity-but-not-per-node"],
)
def test_a_level_miss_says_what_was_missing_and_the_closest_domain(
    miss: LevelMiss, text: str
) -> None:
    assert miss_text(miss, EIGHTY) == text


def test_a_gpu_less_gang_miss_names_its_request() -> None:
    cpu_only = Resources({CPU: 64_000, MEMORY: GIB})
    miss = LevelMiss(2, CLIQUE, 0, (f"{CLIQUE}=c-1", 0), None)
    assert miss_text(miss, cpu_only) == (
        f"no clique has room for {{cpu: 64, memory: 1Gi}}; best: {CLIQUE}=c-1"
    )


@pytest.mark.parametrize(
    ("topology", "misses", "text"),
    [
        (GangTopology(DEFAULT), (), ""),
        (
            GangTopology(DEFAULT, required=1),
            (),
            f"required {LEAF}: placed within {CLIQUE}=c-3",
        ),
        (
            GangTopology(DEFAULT, preferred=2),
            (),
            f"preferred {CLIQUE}: placed within {CLIQUE}=c-3",
        ),
        (
            GangTopology(DEFAULT, preferred=2),
            (
                LevelMiss(2, CLIQUE, 0, (f"{CLIQUE}=c-7", 72), None),
                LevelMiss(1, LEAF, 0, (f"{LEAF}=l-1", 70), None),
            ),
            f"preferred {CLIQUE}: no clique has 80 free GPUs; best: {CLIQUE}=c-7 with 72 free; "
            f"no leaf either; placed within {CLIQUE}=c-3",
        ),
        (
            GangTopology(DEFAULT, required=0, slice_size=4, slice_level=2),
            (),
            f"required {SPINE}: placed within {CLIQUE}=c-3; "
            "every 4 consecutive members within one clique",
        ),
        (
            GangTopology(
                DEFAULT,
                required=0,
                slice_level=1,
                slice_tasks=frozenset({"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}),
                slice_noun="LWS subgroup",
            ),
            (),
            f"required {SPINE}: placed within {CLIQUE}=c-3; "
            "each of LWS subgroup(s) 0..10 within one leaf",
        ),
        (
            GangTopology(
                DEFAULT,
                required=0,
                slice_tasks=frozenset({"decode", "prefill", "router"}),
                slice_noun="subgroup",
                task_levels=(("decode", 1), ("prefill", 2), ("router", 1)),
            ),
            (),
            f"required {SPINE}: placed within {CLIQUE}=c-3; "
            "each of subgroup(s) decode, router within one leaf, prefill within one clique",
        ),
    ],
    ids=[
        "unconstrained",
        "required",
        "preferred-met",
        "preferred-fell-back",
        "slices",
        "lws-subgroups",
        "subgroups-at-levels-of-their-own",
    ],
)
def test_where_a_gang_landed_reads_as_one_line(
    topology: GangTopology, misses: tuple[LevelMiss, ...], text: str
) -> None:
    assert landing_text(topology, misses, f"{CLIQUE}=c-3", EIGHTY) == text


@pytest.mark.parametrize(
    ("miss", "flags", "text"),
    [
        (None, {}, ""),
        (
            LevelMiss(1, LEAF, 0, None, None),
            {"anchors_split": True},
            f"bound members already span more than one {LEAF} domain",
        ),
        (
            LevelMiss(1, LEAF, 0, None, None),
            {"no_domain": True},
            f"no {LEAF} domain has eligible nodes",
        ),
        (LevelMiss(CLUSTER, "", 0, None, None), {"no_domain": True}, "no node is eligible"),
        (
            LevelMiss(CLUSTER, "", 1, None, (2, "the cluster", "only 2 of 3 member(s) fit")),
            {},
            "only 2 of 3 member(s) fit",
        ),
        (
            LevelMiss(1, LEAF, 1, None, (2, f"{LEAF}=l-0", "only 2 of 3 member(s) fit")),
            {},
            f"no single {LEAF} domain fits; best: {LEAF}=l-0 (only 2 of 3 member(s) fit)",
        ),
    ],
    ids=["nothing-tried", "anchors-split", "no-domain", "no-node", "cluster", "required"],
)
def test_an_unfit_topology_gang_says_why_at_its_last_level(
    miss: LevelMiss | None, flags: dict[str, bool], text: str
) -> None:
    options = {"anchors_split": False, "no_domain": False, **flags}
    assert topology_unfit_detail(miss, EIGHTY, **options) == text
