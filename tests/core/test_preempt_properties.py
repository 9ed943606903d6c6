"""Properties of preemption's verdict over random clusters of every kind of gang (Hypothesis).

A cluster of a few nodes holds gangs of the dialects preemption tells apart (a
scheduler-plugins PodGroup, an annotation-only gang, a Volcano PodGroup with task minima,
upstream PodGroups with `disruptionMode` `single` or `all`, alone or under a
CompositePodGroup, itself `gang` or `basic` and perhaps nesting another, KAI's nested
subgroups, a 1.35 Workload's pod groups and their replicas, a Grove PodGang's podgroups
(a member filed by the PodGang's `podReferences`, or in none), a YuniKorn application's
task groups declared by some of its members, a Kueue pod group, a LeaderWorkerSet's
groups, alone or admitted by Kueue) and single pods; each member running, being deleted,
finished or pending. A Kueue or LeaderWorkerSet gang has no object: its size is the count
its members declare, now and then one declaring another or none that can be read, a
finished one an earlier group's, and members may disagree on placement or an LWS pod
lack the opt-in (no member then): the gang is refused, its running members still held to
the size they declare. A gang object may be
being deleted (its running members still count), or gone or refused (its members declare
no size: they go all together or stay), a composite may wait for a child group it lacks,
and a root composite may be gone, leaving a tree beneath it that cannot be read.
kube-scheduler proposes a subset of some nodes' pods, now and then with a pod bound
elsewhere, as 1.37 offers an `all` unit spread over nodes.

The oracle is the drawn description itself, not `phalanx.core.preempt`: what each gang
needs (its minimum, task minima or tree of child groups; under a composite that cannot be
read, every child group; with nothing declaring its size, every live bound member), which
`all` unit each pod is beneath, and so what a victim set may take (`partial`). A pod
being deleted or finished is no member any more (`Pod.departing`): taking it takes
nothing from its gang.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import (
    apply_raw,
    composite_obj,
    gpu_node,
    grove_podgang_obj,
    kai_pod_obj,
    kai_podgroup_obj,
    pod_obj,
    podgroup_obj,
    upstream_podgroup_obj,
    volcano_podgroup_obj,
    workload_obj,
)
from phalanx.core.cache import ClusterState
from phalanx.core.groups import registry
from phalanx.core.planner import GangPlanner, PlannerSettings
from phalanx.core.preempt import Preemption, PreemptOutcome, PreemptVerdict

# Each example builds a cluster of some 20 objects and asks one /preempt (a few ms): some
# 3 s for the file. A longer hunt: PREEMPT_EXAMPLES=3000 (about 20 s a property); a child
# group left short, or a nested composite, needed a few hundred examples to turn up.
EXAMPLES = int(os.environ.get("PREEMPT_EXAMPLES", "80"))
common = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# The brute force of completeness tries every subset of at most this many pods of a node.
BRUTE_FORCE = 10

Obj = dict[str, Any]


# ---- what was drawn: the oracle's own description of the cluster --------------------------


@dataclass(frozen=True)
class Leaf:
    """A task, child PodGroup or leaf subgroup and the members it needs."""

    name: str
    need: int


@dataclass(frozen=True)
class Tree:
    """Ready with `need` of its children ready (a composite's minGroupCount, a KAI
    minSubGroup). `basic`: a nested `basic` composite, ready with one, but no gang."""

    need: int
    children: tuple[Tree | Leaf, ...]
    basic: bool = False

    def leaves(self) -> Iterator[Leaf]:
        for child in self.children:
            if isinstance(child, Tree):
                yield from child.leaves()
            else:
                yield child

    def nested(self) -> Iterator[Tree]:
        """Every tree beneath this one that is a gang of its own."""
        for child in self.children:
            if isinstance(child, Tree):
                yield from child.nested()
                if not child.basic:
                    yield child

    def ready(self, have: Counter[str]) -> bool:
        """Whether members of these tasks (`have`, by task) make this node's quorum."""
        met = (
            c.ready(have) if isinstance(c, Tree) else have[c.name] >= c.need for c in self.children
        )
        return sum(met) >= self.need


@dataclass(frozen=True)
class Gang:
    """A gang as Phalanx files it (`key`), with the quorum drawn for it."""

    key: str
    members: frozenset[str]  # pod UIDs, whatever their state
    min_member: int = 1
    tasks: tuple[Leaf, ...] = ()  # Volcano's task minima
    tree: Tree | None = None  # a composite's child groups, KAI's subgroups

    def leaves(self) -> tuple[Leaf, ...]:
        """What stays at its own minimum or goes whole: a child PodGroup, a leaf subgroup."""
        return tuple(self.tree.leaves()) if self.tree else ()

    def nested(self) -> tuple[Tree, ...]:
        """What stays at its own quorum or goes whole: a nested `gang` composite, a KAI
        parent subgroup."""
        return tuple(self.tree.nested()) if self.tree else ()


@dataclass
class Cluster:
    nodes: list[str]
    objects: list[Obj] = field(default_factory=list)  # gang objects first, then pods
    node_of: dict[str, str] = field(default_factory=dict)  # pod UID -> node, "" pending
    departing: set[str] = field(default_factory=set)  # being deleted or finished
    task: dict[str, str] = field(default_factory=dict)  # pod UID -> task, child or leaf
    gangs: list[Gang] = field(default_factory=list)
    units: dict[str, set[str]] = field(default_factory=dict)  # `all` unit -> pod UIDs
    refused: list[str] = field(default_factory=list)  # gang objects Phalanx refuses, by key
    home: str = ""  # the node the gang being drawn lives on, "" when spread over nodes

    def live_bound(self, uid: str) -> bool:
        return bool(self.node_of.get(uid)) and uid not in self.departing

    def on(self, node: str) -> list[str]:
        return [uid for uid, where in self.node_of.items() if where == node]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # Hypothesis shows a failing example so, not field by field

    def __repr__(self) -> str:
        def pods(uids: Iterable[str]) -> str:
            shown = []
            for uid in sorted(uids):
                state = "x" if uid in self.departing else ""
                shown.append(f"{uid}@{self.node_of[uid] or '-'}{state}")
            return " ".join(shown)

        lines = [f"{g.key} min={g.min_member} tasks={g.tasks} tree={g.tree}" for g in self.gangs]
        lines += [f"  {g.key}: {pods(g.members)}" for g in self.gangs]
        lines += [f"all {unit}: {pods(uids)}" for unit, uids in self.units.items()]
        lines += [f"refused: {' '.join(self.refused)}"] if self.refused else []
        lines += [f"single: {pods(u for u in self.node_of if u.startswith('solo'))}"]
        return "\n".join(["Cluster(", *lines, ")"])


STATES = st.sampled_from(["running"] * 5 + ["deleting", "succeeded", "pending"])
PHASES = {"running": "Running", "deleting": "Running", "succeeded": "Succeeded"}
DELETED_AT = "2026-01-01T00:00:00Z"


def gang_object(draw: st.DrawFn, c: Cluster, obj: Obj, *, may_be_unread: bool = False) -> bool:
    """A gang object, now and then being deleted: its members still run, and count. One
    that `may_be_unread`, now and then gone or refused instead: False, and its members,
    declaring no size, go all together or stay (`unread`)."""
    fate = draw(st.sampled_from(range(8)))
    if may_be_unread and fate == 6:
        parsed = registry.parse_group_object(obj)
        if parsed is not None and draw(st.booleans()):
            c.refused.append(parsed.value.key)
        return False
    if fate == 7:
        obj["metadata"]["deletionTimestamp"] = DELETED_AT
    c.objects.insert(0, obj)
    return True


def unread(c: Cluster, pods: Iterable[str]) -> int:
    """The quorum of a gang nothing declares a size of: all its live bound members, the
    one reading under which taking some of them never leaves it partial."""
    return max(sum(c.live_bound(u) for u in pods), 1)


def member(draw: st.DrawFn, c: Cluster, name: str, task: str = "", **kw: Any) -> str:
    """A pod `name` (its UID too) in a drawn state on a drawn node; `kw` names its gang as
    its dialect does (`kai_group` for KAI's annotation, else `pod_obj`'s arguments)."""
    state = draw(STATES)
    node = "" if state == "pending" else c.home or draw(st.sampled_from(c.nodes))
    phase = PHASES.get(state, "Pending")
    if "kai_group" in kw:
        obj = kai_pod_obj(name, kw.pop("kai_group"), task, node=node, phase=phase, uid=name)
    else:
        obj = pod_obj(name, 1, node=node, phase=phase, uid=name, **kw)
    if state == "deleting":
        obj["metadata"]["deletionTimestamp"] = DELETED_AT
    c.objects.append(obj)
    c.node_of[name] = node
    c.task[name] = task
    if state in ("deleting", "succeeded"):
        c.departing.add(name)
    return name


def sizes(low: int = 1, high: int = 3) -> st.SearchStrategy[int]:
    return st.integers(low, high)


# ---- the dialects --------------------------------------------------------------------------


def scheduler_plugins(draw: st.DrawFn, c: Cluster, name: str) -> None:
    need = draw(sizes(1, 4))
    read = gang_object(draw, c, podgroup_obj(name, need), may_be_unread=True)
    pods = [member(draw, c, f"{name}-{i}", group=name) for i in range(draw(sizes(1, 5)))]
    c.gangs.append(Gang(f"default/{name}", frozenset(pods), need if read else unread(c, pods)))


def annotated(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """An annotation-only gang: every member declares the name and the minimum."""
    need = draw(sizes(1, 3))
    says = {"phalanx.io/pod-group": name, "phalanx.io/min-member": str(need)}
    pods = [member(draw, c, f"{name}-{i}", annotations=says) for i in range(draw(sizes(1, 4)))]
    c.gangs.append(Gang(f"default/{name}", frozenset(pods), need))


def volcano(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """Task minima within minMember (Volcano ignores minima summing to more); a member may
    name no task, counting toward minMember only."""
    tasks = [Leaf(f"t{j}", draw(sizes(1, 2))) for j in range(draw(sizes(1, 2)))]
    need = sum(t.need for t in tasks) + draw(sizes(0, 1))
    minima = {t.name: t.need for t in tasks}
    obj = volcano_podgroup_obj(name, need, min_task_member=minima)
    read = gang_object(draw, c, obj, may_be_unread=True)
    pods = []
    for i in range(draw(sizes(1, 6))):
        task = draw(st.sampled_from([*minima, ""]))
        says = {"volcano.sh/task-spec": task} if task else {}
        pods.append(member(draw, c, f"{name}-{i}", task, volcano_group=name, annotations=says))
    key = f"volcano:default/{name}"
    if read:
        c.gangs.append(Gang(key, frozenset(pods), need, tuple(tasks)))
    else:
        c.gangs.append(Gang(key, frozenset(pods), unread(c, pods)))


MODES = st.sampled_from(["single", "all"])


def upstream(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """A PodGroup of `gang` policy, or of `basic` (no gang: it needs one member)."""
    count, mode = draw(st.none() | sizes(1, 3)), draw(MODES)
    need = count or 1
    obj = upstream_podgroup_obj(name, count, disruption_mode=mode)
    read = gang_object(draw, c, obj, may_be_unread=True)
    pods = [member(draw, c, f"{name}-{i}", scheduling_group=name) for i in range(draw(sizes(1, 5)))]
    c.gangs.append(
        Gang(f"upstream:default/{name}", frozenset(pods), need if read else unread(c, pods))
    )
    if mode == "all" and read:
        c.units[f"upstream:default/{name}"] = set(pods)


def composite(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """A CompositePodGroup over one or two PodGroups and perhaps a nested composite over
    one or two more. The topmost `gang` composite is one gang of child groups (a `basic`
    one among them needs one member, a `basic` nested composite one ready child, and is
    no gang of its own); a PodGroup with only `basic` composites above is its own gang. A
    minGroupCount may exceed the children (the composite waits for one it lacks). The root
    may be gone: everything beneath it is then one gang that cannot be read, every child
    group of the root needed. A pod's `all` unit is the highest object with `all` above it
    (its PodGroup included), up to a root that is gone."""
    nested = f"{name}n" if draw(st.booleans()) else ""
    gone = draw(st.sampled_from(range(8))) == 7
    levels = [name, nested] if nested else [name]
    children: dict[str, list[Leaf]] = {}
    policy: dict[str, int | None] = {}  # None: `basic`
    mode: dict[str, str] = {}
    for level in levels:
        children[level] = [Leaf(f"{level}g{j}", draw(sizes(1, 2))) for j in range(draw(sizes()))]
        groups = len(children[level]) + (1 if level == name and nested else 0)
        policy[level] = draw(st.none() | sizes(1, groups + 1))
        mode[level] = draw(MODES)
        parent = name if level == nested else None
        obj = composite_obj(level, policy[level], parent=parent, disruption_mode=mode[level])
        if not (gone and level == name):
            gang_object(draw, c, obj)
    beneath: dict[str, set[str]] = {level: set() for level in levels}
    for level in levels:
        above = [name, level] if level == nested else [level]  # outermost first
        for child in children[level]:
            child_mode = draw(MODES)
            basic = child.need == 1 and draw(st.booleans())
            count = None if basic else child.need
            obj = upstream_podgroup_obj(child.name, count, parent=level, disruption_mode=child_mode)
            gang_object(draw, c, obj)
            pods = {
                member(draw, c, f"{child.name}-{i}", child.name, scheduling_group=child.name)
                for i in range(draw(sizes(0, 3)))
            }
            for composite_above in above:
                beneath[composite_above] |= pods
            read = [a for a in above if not (gone and a == name)]
            units = [f"composite:default/{a}" for a in read if mode[a] == "all"]
            units += [f"upstream:default/{child.name}"] if child_mode == "all" else []
            if units:
                c.units.setdefault(units[0], set()).update(pods)

    def tree(level: str) -> Tree:
        inner = (tree(nested),) if level == name and nested else ()
        mine = (*children[level], *inner)
        if gone and level == name:
            return Tree(len(mine), mine)
        return Tree(policy[level] or 1, mine, basic=policy[level] is None)

    def gang(level: str) -> Gang:
        return Gang(f"composite:default/{level}", frozenset(beneath[level]), 1, (), tree(level))

    if gone or policy[name] is not None:
        c.gangs.append(gang(name))
        return
    for level in levels:
        if policy[level] is not None:  # the nested one, under a `basic` root
            c.gangs.append(gang(level))
            continue
        for child in children[level]:
            mine = frozenset(u for u in c.task if c.task[u] == child.name)
            c.gangs.append(Gang(f"upstream:default/{child.name}", mine, child.need))


def kai(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """KAI's nested subgroups: `spec.minSubGroup` over top-level subgroups, each a leaf
    (its minMember) or a parent of leaves (its minSubGroup, else all of them)."""
    spec: list[Obj] = []
    top: list[Tree | Leaf] = []
    for j in range(draw(sizes(1, 3))):
        sub = f"{name}s{j}"
        if draw(st.booleans()):
            leaves = [Leaf(f"{sub}l{k}", draw(sizes(1, 2))) for k in range(draw(sizes(1, 2)))]
            spec += [{"name": leaf.name, "parent": sub, "minMember": leaf.need} for leaf in leaves]
            least = draw(st.none() | sizes(1, len(leaves)))
            spec.append({"name": sub} | ({"minSubGroup": least} if least else {}))
            top.append(Tree(least or len(leaves), tuple(leaves)))
        else:
            leaf = Leaf(sub, draw(sizes(1, 3)))
            spec.append({"name": sub, "minMember": leaf.need})
            top.append(leaf)
    tree = Tree(draw(sizes(1, len(top))), tuple(top))
    obj = kai_podgroup_obj(name, None)
    obj["spec"] |= {"minSubGroup": tree.need, "subGroups": spec}
    read = gang_object(draw, c, obj, may_be_unread=True)
    pods = [
        member(draw, c, f"{leaf.name}-{i}", leaf.name, kai_group=name)
        for leaf in tree.leaves()
        for i in range(draw(sizes(0, 3)))
    ]
    if read:
        c.gangs.append(Gang(f"kai:default/{name}", frozenset(pods), 1, (), tree))
    else:
        c.gangs.append(Gang(f"kai:default/{name}", frozenset(pods), unread(c, pods)))


def workload(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """A 1.35 Workload of one or two pod groups, `gang` or `basic`: each pod group, and
    each replica key its pods name, is a gang of its own with the pod group's minCount."""
    counts = {f"{name}p{j}": draw(st.none() | sizes(1, 3)) for j in range(draw(sizes(1, 2)))}
    read = gang_object(draw, c, workload_obj(name, counts), may_be_unread=True)
    for group, count in counts.items():
        replicas: dict[str, set[str]] = {}
        for i in range(draw(sizes(1, 4))):
            replica = draw(st.sampled_from(["", "", "r0", "r1"]))
            ref = {"name": name, "podGroup": group}
            ref |= {"podGroupReplicaKey": replica} if replica else {}
            replicas.setdefault(replica, set()).add(
                member(draw, c, f"{group}-{i}", workload_ref=ref)
            )
        for replica, pods in replicas.items():
            key = f"upstream:default/{name}/{group}" + (f"/{replica}" if replica else "")
            c.gangs.append(Gang(key, frozenset(pods), (count or 1) if read else unread(c, pods)))


def grove(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """A PodGang of one to three podgroups, each with its minReplicas (0 asks for nothing;
    the gang's size is their sum). A member is in its podgroup by its `grove.io/podclique`
    label, or, without one, by the PodGang's `podReferences` (`<podgroup>-<i>` for each i
    below minReplicas); one in neither makes the PodGang refuse its members, and counts
    toward the size only."""
    minima = {f"{name}p{j}": draw(sizes(0, 2)) for j in range(draw(sizes(1, 3)))}
    first = next(iter(minima))
    minima[first] = max(minima[first], 1)
    read = gang_object(draw, c, grove_podgang_obj(name, minima), may_be_unread=True)
    pods = []
    for group, minimum in minima.items():
        for i in range(draw(sizes(0, 3))):
            labelled = draw(st.booleans())
            task = group if labelled or i < minimum else ""
            labels = {"grove.io/podgang": name} | (
                {"grove.io/podclique": group} if labelled else {}
            )
            pods.append(member(draw, c, f"{group}-{i}", task, labels=labels))
    size = sum(minima.values())
    tasks = tuple(Leaf(group, minimum) for group, minimum in minima.items())
    if read:
        c.gangs.append(Gang(f"grove:default/{name}", frozenset(pods), size, tasks))
    else:
        c.gangs.append(Gang(f"grove:default/{name}", frozenset(pods), unread(c, pods)))


def yunikorn(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """An application of one or two task groups with their minMember (the size is their
    sum), declared by some of its members: by every one, or by those drawn, at least one,
    which may be finished or being deleted (the definition stays the application's). Now
    and then by none: nothing declares its size (`unread`)."""
    tasks = [Leaf(f"{name}t{j}", draw(sizes(1, 2))) for j in range(draw(sizes(1, 2)))]
    groups = json.dumps([{"name": t.name, "minMember": t.need} for t in tasks])
    everyone = draw(st.booleans())
    defined = draw(st.sampled_from(range(8))) < 7
    pods = []
    for i in range(draw(sizes(1, 5))):
        task = draw(st.sampled_from([t.name for t in tasks]))
        says = {"yunikorn.apache.org/task-group-name": task}
        if defined and (everyone or i == 0 or draw(st.booleans())):
            says["yunikorn.apache.org/task-groups"] = groups
        labels = {"applicationId": name}
        pods.append(member(draw, c, f"{name}-{i}", task, labels=labels, annotations=says))
    key = f"yunikorn:default/{name}"
    if defined:
        size = sum(t.need for t in tasks)
        c.gangs.append(Gang(key, frozenset(pods), size, tuple(tasks)))
    else:
        c.gangs.append(Gang(key, frozenset(pods), unread(c, pods)))


KUEUE_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT = "kueue.x-k8s.io/pod-group-total-count"
LWS = "leaderworkerset.sigs.k8s.io/"
LWS_OPT_IN = "phalanx.io/leaderworkerset-gang"


def declares(count: int) -> st.SearchStrategy[str | None]:
    """What one member says of its gang's size `count`: mostly that, now and then another
    size, one that cannot be read, or nothing."""
    return st.sampled_from([str(count)] * 9 + [str(count + 1), "0", None])


def placement(draw: st.DrawFn) -> dict[str, str]:
    """A member's `phalanx.io/placement`, if any: members that disagree on it refuse their
    gang (it must still be judged, by what its members declare)."""
    said = draw(st.sampled_from(["", "", "", "pack", "spread"]))
    return {"phalanx.io/placement": said} if said else {}


def declared_size(c: Cluster, said: dict[str, str | None]) -> int:
    """A gang's size as its members declare it (pod UID -> Kueue's total count or LWS's
    size): the size its live members agree on; when they disagree, or none declares one
    that can be read (the gang is refused, but its running members run on), the most any
    member declares, finished ones too; else every live bound member (`unread`)."""

    def sizes_of(uids: Iterable[str]) -> set[int]:
        return {int(t) for u in uids if (t := said[u]) and t.isdigit() and int(t) > 0}

    live = sizes_of(u for u in said if u not in c.departing)
    return live.pop() if len(live) == 1 else max(sizes_of(said), default=unread(c, said))


def kueue(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """A Kueue plain pod group: each member labelled with its name and annotated with the
    total count, its size, and perhaps a placement. Now and then the name was used before
    by a group of another count, which its finished members (or being deleted) declare."""
    count, said = draw(sizes(1, 4)), {}
    earlier = draw(sizes(1, 4)) if draw(st.sampled_from(range(4))) == 3 else 0
    for i in range(draw(sizes(1, 5))):
        text = draw(declares(count))
        says = placement(draw) | ({KUEUE_COUNT: text} if text is not None else {})
        uid = member(draw, c, f"{name}-{i}", labels={KUEUE_NAME: name}, annotations=says)
        if earlier and uid in c.departing:
            text = c.objects[-1]["metadata"]["annotations"][KUEUE_COUNT] = str(earlier)
        said[uid] = text
    c.gangs.append(Gang(f"kueue:default/{name}", frozenset(said), declared_size(c, said)))


def leaderworkerset(draw: st.DrawFn, c: Cluster, name: str) -> None:
    """A LeaderWorkerSet's one or two groups, each a leader `<lws>-<g>` and workers
    `<lws>-<g>-<w>` (as LWS names them) of the group's declared size, perhaps in subgroups
    (a member's subgroup is no quorum: the size alone counts). A pod is a member when it
    opted in, now and then one not. Or Kueue admitted the set, labelling each group's
    pods as a pod group of the size: then that is the gang, opted in or not (Kueue's
    precedes LWS's)."""
    admitted = draw(st.sampled_from(range(4))) == 3
    for g in range(draw(sizes(1, 2))):
        group, size = f"{name}-{g}", draw(sizes(1, 4))
        divides = [s for s in range(1, size + 1) if size % s == 0 or (size - 1) % s == 0]
        each = draw(st.none() | st.sampled_from(divides))
        said: dict[str, str | None] = {}
        for w in range(draw(sizes(1, size))):
            pod = f"{group}-{w}" if w else group
            labels = {LWS + "name": name, LWS + "group-index": str(g), LWS + "worker-index": str(w)}
            says = placement(draw) | ({LWS + "size": str(size)} if admitted else {})
            text = draw(declares(size))  # the size the gang reads: Kueue's count, else LWS's
            if text is not None:
                says[KUEUE_COUNT if admitted else LWS + "size"] = text
            if admitted:
                labels[KUEUE_NAME] = group
            opted = draw(st.sampled_from(range(10))) < 9
            if opted:
                says[LWS_OPT_IN] = "true"
            if opted or admitted:
                said[pod] = text
            if each is not None:
                says[LWS + "subgroup-size"] = str(each)
                index = (w - 1) // each if size % each and w else w // each
                labels[LWS + "subgroup-index"] = str(index)
            member(draw, c, pod, labels=labels, annotations=says)
        key = f"kueue:default/{group}" if admitted else f"lws:default/{group}"
        if said:
            c.gangs.append(Gang(key, frozenset(said), declared_size(c, said)))


DIALECTS = {
    "sp": scheduler_plugins,
    "ann": annotated,
    "vc": volcano,
    "up": upstream,
    "cp": composite,
    "kai": kai,
    "wl": workload,
    "grove": grove,
    "yk": yunikorn,
    "kq": kueue,
    "lws": leaderworkerset,
}


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    c = Cluster([f"n{i}" for i in range(1, draw(st.integers(3, 5)) + 1)])
    kinds = draw(st.lists(st.sampled_from(sorted(DIALECTS)), min_size=1, max_size=4))
    for i, kind in enumerate(kinds):
        c.home = "" if draw(st.booleans()) else draw(st.sampled_from(c.nodes))
        DIALECTS[kind](draw, c, f"{kind}{i}")
    c.home = ""
    for i in range(draw(st.integers(0, 3))):
        member(draw, c, f"solo-{i}")
    return c


@st.composite
def proposals(draw: st.DrawFn, c: Cluster) -> dict[str, list[str]]:
    """kube-scheduler's victims for some nodes: pods bound there (being deleted too). Now
    and then, as 1.37 does, an `all` unit they touch whole, its pods on other nodes too;
    rarely any pod bound elsewhere."""
    nodes = draw(st.lists(st.sampled_from(c.nodes), min_size=1, max_size=3, unique=True))
    proposal = {}
    for node in nodes:
        here = sorted(c.on(node))
        victims = draw(st.lists(st.sampled_from(here), unique=True, min_size=1)) if here else []
        spread = [u for unit in c.units.values() if unit & set(victims) for u in sorted(unit)]
        if spread and draw(st.sampled_from(range(4))) == 3:
            victims += [u for u in spread if c.node_of[u] and u not in victims]
        elsewhere = sorted(u for u, n in c.node_of.items() if n and n != node)
        if elsewhere and draw(st.sampled_from(range(10))) == 9:
            victims.append(draw(st.sampled_from(elsewhere)))
        proposal[node] = list(dict.fromkeys(victims))
    return proposal


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Cluster, dict[str, list[str]]]:
    c = draw(clusters())
    return c, draw(proposals(c))


def preempt(c: Cluster, proposal: dict[str, list[str]]) -> Preemption:
    state = ClusterState()
    for node in c.nodes:
        state.upsert_node(gpu_node(node))
    apply_raw(state, *c.objects)
    for key in c.refused:
        state.set_group_error(key, "refused")
    return GangPlanner(state, PlannerSettings()).preempt(proposal)


# ---- the oracle ----------------------------------------------------------------------------


def has_quorum(c: Cluster, gang: Gang, pods: set[str]) -> bool:
    have = Counter(c.task[u] for u in pods)
    return (
        len(pods) >= gang.min_member
        and all(have[t.name] >= t.need for t in gang.tasks)
        and (gang.tree is None or gang.tree.ready(have))
    )


def partial(c: Cluster, victims: Iterable[str]) -> str:
    """What taking `victims` would leave partial, for people; "" when nothing. A gang (or
    a child group of one, a nested gang composite included) it takes members of keeps its
    quorum (its own minimum) or loses them all; an `all` unit it takes members of loses
    them all. Departing pods take nothing."""
    taken = {u for u in victims if c.live_bound(u)}
    for unit, beneath in c.units.items():
        live = {u for u in beneath if c.live_bound(u)}
        if taken & live and not live <= taken:
            return f"unit {unit}: takes {sorted(taken & live)} of {sorted(live)}"
    for gang in c.gangs:
        live = {u for u in gang.members if c.live_bound(u)}
        if not taken & live:
            continue
        left = live - taken
        if left and not has_quorum(c, gang, left):
            return f"gang {gang.key}: leaves {sorted(left)} below its quorum"
        for leaf in gang.leaves():
            pods = {u for u in live if c.task[u] == leaf.name}
            rest = pods - taken
            if pods & taken and 0 < len(rest) < leaf.need:
                return f"{leaf.name} of {gang.key}: leaves {sorted(rest)} below {leaf.need}"
        for tree in gang.nested():
            names = {leaf.name for leaf in tree.leaves()}
            pods = {u for u in live if c.task[u] in names}
            rest = pods - taken
            if pods & taken and rest and not tree.ready(Counter(c.task[u] for u in rest)):
                return f"{sorted(names)} of {gang.key}: leaves {sorted(rest)} below {tree}"
    return ""


def ties(c: Cluster) -> list[set[str]]:
    """The sets of pods one victim may pull in with it: each gang's, each unit's."""
    return [set(g.members) for g in c.gangs] + list(c.units.values())


def reachable(c: Cluster, start: Iterable[str]) -> set[str]:
    """Every pod tied to `start` through gangs and units, any number of steps away."""
    seen, todo = set(start), list(start)
    while todo:
        uid = todo.pop()
        for tie in ties(c):
            if uid in tie:
                todo += tie - seen
                seen |= tie
    return seen


def least_whole_superset(c: Cluster, node: str, proposed: list[str]) -> set[str] | None:
    """The smallest set of pods bound on `node` holding `proposed` that leaves nothing
    partial, by trying every subset of the node's live pods tied to the proposal (others
    change no gang it touches); None when there is none. Raises Skip when too many."""
    if any(c.node_of.get(u) != node for u in proposed):
        return None
    candidates = sorted(
        u for u in reachable(c, proposed) if c.node_of[u] == node and c.live_bound(u)
    )
    candidates = [u for u in candidates if u not in proposed]
    if len(candidates) > BRUTE_FORCE:
        raise Skip
    for size in range(len(candidates) + 1):
        for extra in itertools.combinations(candidates, size):
            if not partial(c, [*proposed, *extra]):
                return {*proposed, *extra}
    return None


class Skip(Exception):  # noqa: N818  # a control-flow signal, not an error
    """Too many pods on a node to try every subset."""


# ---- the properties ------------------------------------------------------------------------


def verdicts(c: Cluster, proposal: dict[str, list[str]]) -> Iterator[PreemptVerdict]:
    preemption = preempt(c, proposal)
    assert [v.node for v in preemption.verdicts] == list(proposal)
    yield from preemption.verdicts


@common
@given(scenarios())
def test_a_node_is_kept_or_widened_with_its_victims_or_dropped_with_none_and_a_reason(
    scenario: tuple[Cluster, dict[str, list[str]]],
) -> None:
    c, proposal = scenario
    preemption = preempt(c, proposal)
    for v in preemption.verdicts:
        if v.node in preemption.kept:
            assert v.outcome in (PreemptOutcome.KEPT, PreemptOutcome.WIDENED)
            assert preemption.kept[v.node] == list(v.victims)
        else:
            assert v.outcome is PreemptOutcome.DROPPED
            assert v.victims == ()
            assert v.reason


@common
@given(scenarios())
def test_a_kept_set_holds_the_proposal_and_only_pods_of_its_node_tied_to_it(
    scenario: tuple[Cluster, dict[str, list[str]]],
) -> None:
    c, proposal = scenario
    for v in verdicts(c, proposal):
        if v.outcome is PreemptOutcome.DROPPED:
            continue
        proposed = proposal[v.node]
        assert v.victims[: len(proposed)] == tuple(proposed)
        added = v.victims[len(proposed) :]
        assert v.added == added
        assert (v.outcome is PreemptOutcome.WIDENED) == bool(added)
        assert all(c.node_of[u] == v.node for u in v.victims)
        assert all(c.live_bound(u) for u in added)
        assert set(added) <= reachable(c, proposed)


@common
@given(scenarios())
def test_what_kube_scheduler_takes_from_a_kept_node_leaves_every_gang_whole_or_gone(
    scenario: tuple[Cluster, dict[str, list[str]]],
) -> None:
    c, proposal = scenario
    for v in verdicts(c, proposal):
        if v.outcome is not PreemptOutcome.DROPPED:
            assert partial(c, v.victims) == "", v


@common
@given(scenarios())
def test_a_proposal_that_leaves_every_gang_whole_or_gone_is_kept_as_proposed(
    scenario: tuple[Cluster, dict[str, list[str]]],
) -> None:
    c, proposal = scenario
    for v in verdicts(c, proposal):
        proposed = proposal[v.node]
        if all(c.node_of[u] == v.node for u in proposed) and not partial(c, proposed):
            assert (v.outcome, v.victims) == (PreemptOutcome.KEPT, tuple(proposed)), v


@common
@given(scenarios())
def test_a_node_is_dropped_only_when_no_set_on_it_leaves_every_gang_whole_and_widened_no_more(
    scenario: tuple[Cluster, dict[str, list[str]]],
) -> None:
    """Completeness by brute force: the least set on the node holding the proposal that
    leaves nothing partial is what Phalanx keeps; none, and the node is dropped."""
    c, proposal = scenario
    for v in verdicts(c, proposal):
        try:
            least = least_whole_superset(c, v.node, proposal[v.node])
        except Skip:
            continue
        if least is None:
            assert v.outcome is PreemptOutcome.DROPPED, v
        else:
            assert v.outcome is not PreemptOutcome.DROPPED, v
            assert set(v.victims) == least, v
