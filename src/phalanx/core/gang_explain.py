"""What people read about a gang's placement: why it does not fit, and where it landed.

The search (`phalanx.core.gang`) records what it found as values; this module turns them
into the one-line texts shown in pod events, the PodGroup status, `/debug` and
`phalanx explain`. Texts are stable: tests and runbooks match on their phrases.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from phalanx.core import eligibility
from phalanx.core.model import CPU, MEMORY, PODS, Resources, tasks_in_levels
from phalanx.core.quantity import format_amount
from phalanx.core.topology import CLUSTER, GangTopology, TaskPreferenceLevel, short_name


def describe_request(r: Resources) -> str:
    shown = {k: v for k, v in r.as_dict().items() if k != PODS}
    return "{" + ", ".join(f"{k}: {format_amount(k, v)}" for k, v in shown.items()) + "}"


def shortfall_text(short: Mapping[str, int]) -> str:
    return ", ".join(f"{format_amount(k, v)} {k}" for k, v in short.items())


def resource_order(r: Resources) -> list[str]:
    """GPU-like resources first, then CPU and memory, then the rest: the order a shortfall
    is judged in when picking the closest node."""
    gpu = sorted(k for k in r if r.gpus() and k not in (CPU, MEMORY, PODS))
    return [*gpu, CPU, MEMORY, *sorted(k for k in r if k not in (*gpu, CPU, MEMORY))]


def miss_reason(
    *,
    members: int,
    plan_ids: frozenset[str],
    request: Resources,
    need: int,
    picks: Sequence[str],
    candidates: Sequence[str],
    free: Callable[[str], Resources],
    spread: bool,
) -> str:
    """Why `need` copies of a unit (of `members` pods asking `request` in all) do not fit on
    `candidates`: how many did (`picks`), and the closest node. `free` reads the trial."""
    got = len(picks)
    taken: dict[str, int] = {}
    for name in picks:
        taken[name] = taken.get(name, 0) + 1

    def left(name: str) -> Resources:
        return free(name) - request.scaled(taken.get(name, 0))

    what = f"{need} member(s)" if members == 1 else f"a unit of {members} members"
    if plan_ids and members > 1:
        what = "plan unit [" + ", ".join(sorted(plan_ids)) + "]"
    shown = describe_request(request)
    if not candidates:
        return f"no eligible node for {what} needing {shown} each"
    # The closest node: smallest shortfall, judged resource by resource in `order`. Plain
    # ints: this runs over every candidate on every miss of an unfit gang's search.
    asked = [(k, v) for k in resource_order(request) if (v := request.get(k)) > 0]

    def distance(name: str) -> tuple[tuple[int, ...], str]:
        room = free(name)
        copies = taken.get(name, 0) + 1
        return tuple(max(0, v * copies - room.get(k)) for k, v in asked), name

    closest = min(candidates, key=distance)
    short = request.shortfall(left(closest))
    if spread and not short:
        return (
            f"{what} needing {shown} each need distinct nodes; only {got} distinct "
            f"eligible node(s) have room"
        )
    hint = f"closest: {closest} lacks {shortfall_text(short)}" if short else f"best: {closest}"
    if got:
        return f"only {got} of {need} member(s) needing {shown} fit; {hint}"
    return f"no node has room for {what} needing {shown}; {hint}"


def unfit_reason(
    *,
    gang: str,
    members: int,
    total: Resources,
    policy: str,
    detail: str,
    ineligible: Mapping[str, int],
) -> str:
    """`cannot place <n> member(s) of gang <key> (<total> in all, placement <policy>): <detail>;
    <why nodes were ineligible>`."""
    head = (
        f"cannot place {members} member(s) of gang {gang} "
        f"({describe_request(total)} in all, placement {policy})"
    )
    parts = [head, *([detail] if detail else [])]
    if ineligible:
        parts.append(eligibility.summarize(ineligible))
    return ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if len(parts) > 2 else "")


# --- Topology -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LevelMiss:
    """Why the gang fits in no single domain of one level.

    `fitting` domains had enough free capacity in all; `largest` is the one with the most
    free GPUs (name, free GPUs); `tried` the trial that placed the most units (units placed,
    domain name, why the rest did not fit), None when no domain was tried.
    """

    level: int
    key: str
    fitting: int
    largest: tuple[str, int] | None
    tried: tuple[int, str, str] | None


def miss_text(miss: LevelMiss, total: Resources) -> str:
    """`no clique has 16 free GPUs; best: nvidia.com/gpu.clique=c-7 with 12 free`."""
    noun = short_name(miss.key) if miss.level != CLUSTER else "cluster"
    if miss.fitting == 0:
        need = total.gpus()
        text = (
            f"no {noun} has {need} free GPUs"
            if need
            else f"no {noun} has room for {describe_request(total)}"
        )
        if miss.largest is not None and need:
            text += f"; best: {miss.largest[0]} with {miss.largest[1]} free"
        elif miss.largest is not None:
            text += f"; best: {miss.largest[0]}"
        return text
    text = f"no {noun} could hold every member"
    if miss.tried is not None:
        text += f"; best: {miss.tried[1]} ({miss.tried[2]})"
    return text


def landing_text(
    topology: GangTopology,
    misses: Sequence[LevelMiss],
    landed: str,
    total: Resources,
    *,
    preferences: Sequence[tuple[TaskPreferenceLevel, int]] = (),
    unmet: str = "",
) -> str:
    """One line: where a constrained gang landed and, if wider than preferred, why not
    narrower (`preferred nvidia.com/gpu.clique: no clique has 16 free GPUs; best: ...;
    placed within network.topology.nvidia.com/leaf=l-2`); then its tasks and sets, and
    where each task's or set's preference landed (`preferences`: with the narrowest level
    holding its members), with why not every one held when one did not (`unmet`)."""
    if not topology.constrained:
        return ""
    parts: list[str] = []
    if topology.preferred is not None:
        head = f"preferred {topology.key(topology.preferred)}"
        if misses:
            parts.append(f"{head}: {miss_text(misses[0], total)}")
            parts.extend(
                f"no {short_name(m.key) if m.level != CLUSTER else 'cluster'} either"
                for m in misses[1:]
            )
            parts.append(f"placed within {landed}")
        else:
            parts.append(f"{head}: placed within {landed}")
    elif topology.required is not None:
        parts.append(f"required {topology.key(topology.required)}: placed within {landed}")
    else:
        parts.append(f"placed within {landed}")
    parts.extend(
        f"every {size} consecutive members within one {short_name(topology.key(level))}"
        for size, level in topology.slice_layers
    )
    if topology.slice_size and topology.slice_level is not None:
        parts.append(
            f"every {topology.slice_size} consecutive members within one "
            f"{short_name(topology.key(topology.slice_level))}"
        )
    levels = ((t, short_name(topology.key(lv))) for t, lv in topology.levels_of_tasks())
    tasks = tasks_in_levels(topology.slice_noun, levels, each="within one", then="within one")
    if tasks:
        parts.append(f"each of {tasks}")
    parts.extend(
        f"{s.label} within one {short_name(topology.key(s.level))}" for s in topology.task_sets
    )
    parts.extend(
        f"each subgroup of policy {s.policy.name} within one {short_name(topology.key(s.required))}"
        for s in topology.subgroups
        if s.required is not None
    )
    widened = False
    for pref, level in preferences:
        noun = short_name(topology.key(pref.level))
        if level >= pref.level:
            parts.append(f"{pref.label} within one {noun} as preferred")
            continue
        widened = True
        where = f"one {short_name(topology.key(level))}" if level != CLUSTER else "the cluster"
        parts.append(f"{pref.label} preferred one {noun}: widened to {where}")
    if widened and unmet:
        # The first try's failure, with every preference at its own level together: the unit
        # it names may be one that held its own once others were widened.
        parts.append(f"not every preference held (all at once: {unmet})")
    return "; ".join(parts)


def topology_unfit_detail(
    miss: LevelMiss | None, total: Resources, *, anchors_split: bool, no_domain: bool
) -> str:
    """The part of an unfit reason about the last level tried (the required one, or the
    whole cluster)."""
    if miss is None:
        return ""
    if anchors_split:
        return f"bound members already span more than one {miss.key} domain"
    if no_domain:
        return f"no {miss.key} domain has eligible nodes" if miss.key else "no node is eligible"
    if miss.tried is None:
        return miss_text(miss, total)
    if miss.level == CLUSTER:
        return miss.tried[2]
    return f"no single {miss.key} domain fits; best: {miss.tried[1]} ({miss.tried[2]})"
