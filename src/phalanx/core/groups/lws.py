"""LeaderWorkerSet groups (kubernetes-sigs/lws), as gangs when the user opts in.

Each replica of a LeaderWorkerSet is a group: a leader pod and `size - 1` workers, useless
unless all of them run. LWS stamps every pod of a group (its controller on the templates,
its pod webhook on the leader):

* label `leaderworkerset.sigs.k8s.io/name` (the LWS) and
  `leaderworkerset.sigs.k8s.io/group-index` (the replica; on the leader the webhook adds it
  from the pod's ordinal, a pod without it was not made through LWS);
* annotation `leaderworkerset.sigs.k8s.io/size` (the group's pod count, leader included);
* label `leaderworkerset.sigs.k8s.io/worker-index` ("0" on the leader) and
  `leaderworkerset.sigs.k8s.io/group-key` (a hash) are not needed here.

**Opt-in.** With LWS's `startupPolicy: LeaderReady` the workers are created only once the
leader is Ready, so a gang of the whole group would wait for ever; the policy is not on
the pods. A group is a gang only when its pods carry `phalanx.io/leaderworkerset-gang:
"true"` (set on both pod templates). "false" or no annotation: the pods are scheduled as
before, one by one. Any other value is refused naming the annotation.

**The gang** is `GroupRef(namespace, "<lws>-<group-index>", Dialect.LWS)`, key
`lws:ns/<lws>-<group-index>`: the name of the group's leader pod (LWS names it so; its
workers are `<leader>-<worker-index>`), which the group-index label gives on every member,
leader included, and which lets the resolver find a member that did not opt in
(`opt_in_missing`). Its size is the `size` annotation, declared on the members like a
Kueue pod group's total count (`declared_gang`).

**Exclusive placement.** `leaderworkerset.sigs.k8s.io/exclusive-topology: <node label>` on
the pods makes LWS's webhook add a required pod affinity (the group inside one value of the
label) and anti-affinity (no other group there). Phalanx plans the first half as a required
topology level of that label (as upstream's PodGroup topology key: any node label); the
exclusivity stays kube-scheduler's, which checks the anti-affinity LWS injected.

**Subgroups.** With `subGroupPolicy.subGroupSize`, LWS puts annotation
`leaderworkerset.sigs.k8s.io/subgroup-size` on every pod and label
`leaderworkerset.sigs.k8s.io/subgroup-index` on each pod of a subgroup: worker `w` is in
subgroup `w / subGroupSize`, or `(w - 1) / subGroupSize` when `size - 1` is a multiple of it
and `size` is not (the leader is then the extra pod of subgroup 0). The leader is in
subgroup 0, except with `subGroupPolicyType: LeaderExcluded`, where it has no index and
is in no subgroup. A member's subgroup is its task (`task_of`), for the slices only:
the gang's quorum stays its size. `leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology:
<node label>` makes LWS's webhook pin each subgroup to one value of that label (affinity)
and keep other subgroups out of it (anti-affinity); Phalanx plans the first half as one
slice per subgroup at that label (`member_topology`), inside the group's own level when
`exclusive-topology` is set too. Without `subgroup-size` LWS makes no subgroups and
injects nothing for the key, so it is not read either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.groups.annotations import declared_gang
from phalanx.core.groups.common import PodView, declared_size, group_name_problem
from phalanx.core.model import (
    ANNOTATION_PREFIX,
    Claim,
    Dialect,
    GroupRef,
    Pod,
    PodGroup,
    TopologyConstraint,
)
from phalanx.core.names import annotation_int, is_qualified_name

NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
SIZE_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/size"
EXCLUSIVE_TOPOLOGY_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
SUBGROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/subgroup-index"
SUBGROUP_SIZE_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/subgroup-size"
SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION: Final = (
    "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
)
# Each subgroup pinned to a domain is named in the gang's topology intent: a bound on what
# one pod's reading costs (a declared size may be huge). Subgroups that many are one or two
# pods each.
MAX_SUBGROUPS: Final = 1024
SUBGROUP_NOUN: Final = "LWS subgroup"
OPT_IN_ANNOTATION: Final = ANNOTATION_PREFIX + "leaderworkerset-gang"


def opted_in(annotations: Mapping[str, str]) -> bool | str:
    """The opt-in's value, or what is wrong with it (only "true" and "false" are read, so
    a typo never makes a gang nor silently leaves one out)."""
    text = annotations.get(OPT_IN_ANNOTATION)
    if text is None or text == "false":
        return False
    if text == "true":
        return True
    return f'annotation {OPT_IN_ANNOTATION}: {quoted(text)} is not "true" or "false"'


def claim(pod: PodView) -> Claim | None:
    """The pod's group when it opted in; None when it did not (or carries no LWS label).
    The opt-in without LWS's label is `stray_opt_in_problem`'s, not a claim."""
    lws = pod.labels.get(NAME_LABEL, "")
    if not lws:
        return None
    choice = opted_in(pod.annotations)
    if isinstance(choice, str):
        return Claim(Dialect.LWS, None, (choice,))
    if not choice:
        return None
    index_text = pod.labels.get(GROUP_INDEX_LABEL)
    if index_text is None:
        problem = (
            f"label {NAME_LABEL} needs label {GROUP_INDEX_LABEL} "
            "(LWS's pod webhook sets it on every pod of a group)"
        )
        return Claim(Dialect.LWS, None, (problem,))
    index = annotation_int(index_text, minimum=0)
    if index is None or str(index) != index_text:
        problem = f"label {GROUP_INDEX_LABEL}: {quoted(index_text)} is not a non-negative integer"
        return Claim(Dialect.LWS, None, (problem,))
    name = f"{lws}-{index}"
    problem = group_name_problem(f"label {NAME_LABEL}", name, "LeaderWorkerSet group")
    if problem:
        return Claim(Dialect.LWS, None, (problem,))
    size = group_size(pod.annotations)
    ref = GroupRef(pod.namespace, name, Dialect.LWS)
    if isinstance(size, str):
        return Claim(Dialect.LWS, ref, (size,))
    problem = _subgroup_problem(pod.labels, pod.annotations, size)
    return Claim(Dialect.LWS, ref, (problem,) if problem else ())


def task_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The member's subgroup (its `Pod.task`): the index LWS labels it with, "" for none
    (no subgroups, or the leader under `LeaderExcluded`)."""
    return labels.get(SUBGROUP_INDEX_LABEL, "")


def subgroup_count(annotations: Mapping[str, str], size: int) -> int | str | None:
    """How many subgroups a group of `size` pods has by its `subgroup-size` annotation
    (None without it), or what is wrong with it: LWS accepts a subgroup size only when it
    divides `size` or `size - 1`."""
    text = annotations.get(SUBGROUP_SIZE_ANNOTATION)
    if text is None:
        return None
    each = annotation_int(text, minimum=1)
    if each is None or str(each) != text:
        return f"annotation {SUBGROUP_SIZE_ANNOTATION}: {quoted(text)} is not a positive integer"
    if each > size or (size % each and (size - 1) % each):
        return (
            f"annotation {SUBGROUP_SIZE_ANNOTATION}: {each} divides neither the group's size "
            f"{size} ({SIZE_ANNOTATION}) nor {size - 1}"
        )
    # The highest index is the last worker's; the leader is extra when only size - 1 divides.
    last = size - 1
    highest = (last - 1) // each if size % each else last // each
    return highest + 1


def _subgroup_problem(labels: Mapping[str, str], annotations: Mapping[str, str], size: int) -> str:
    """What is wrong with the member's subgroup labels and annotations ("" when nothing)."""
    count = subgroup_count(annotations, size)
    if isinstance(count, str):
        return count
    text = labels.get(SUBGROUP_INDEX_LABEL)
    if text is None:
        return ""
    index = annotation_int(text, minimum=0)
    if index is None or str(index) != text:
        return f"label {SUBGROUP_INDEX_LABEL}: {quoted(text)} is not a non-negative integer"
    if count is None:
        return (
            f"label {SUBGROUP_INDEX_LABEL} needs annotation {SUBGROUP_SIZE_ANNOTATION} "
            "(LWS sets both from subGroupPolicy.subGroupSize)"
        )
    if index >= count:
        return (
            f"label {SUBGROUP_INDEX_LABEL}: {index} is past the group's last subgroup "
            f"({count - 1}, by {SUBGROUP_SIZE_ANNOTATION} and {SIZE_ANNOTATION})"
        )
    return ""


def group_size(annotations: Mapping[str, str]) -> int | str:
    """The group's size a member declares, or what is wrong with it."""
    missing = (
        f"annotation {OPT_IN_ANNOTATION} needs annotation {SIZE_ANNOTATION} "
        "(the group's size; LWS sets it on every pod of a group)"
    )
    return declared_size(annotations, SIZE_ANNOTATION, missing)


def stray_opt_in_problem(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """Why the opt-in means nothing on this pod ("" when it does or is absent): a pod LWS
    did not make would otherwise be scheduled alone, unsaid."""
    if OPT_IN_ANNOTATION in annotations and not labels.get(NAME_LABEL):
        return f"annotation {OPT_IN_ANNOTATION} needs label {NAME_LABEL} (a LeaderWorkerSet's pod)"
    return ""


def member_topology(
    annotations: Mapping[str, str], problems: list[str]
) -> TopologyConstraint | None:
    """The topology LWS's exclusive placement gives a member (None without it): the group's
    label as its required level, and each subgroup inside one value of the subgroup label
    (slices by subgroup). A value no node label key could be is added to `problems`,
    naming the annotation (a bad size or subgroup size is `claim`'s to say)."""
    group_key = _label_key(annotations, EXCLUSIVE_TOPOLOGY_ANNOTATION, problems)
    subgroup_key = _label_key(annotations, SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION, problems)
    if group_key is None and subgroup_key is None:
        return None
    own = TopologyConstraint(required=group_key or "", any_label=True)
    size = group_size(annotations)
    if subgroup_key is None or isinstance(size, str):
        return own if group_key is not None else None
    count = subgroup_count(annotations, size)
    if not isinstance(count, int):
        # No subgroup-size: LWS makes no subgroups; a bad one is the claim's problem.
        return own if group_key is not None else None
    if count > MAX_SUBGROUPS:
        problems.append(
            f"annotation {SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION} with {SUBGROUP_SIZE_ANNOTATION}"
            f" makes {count} subgroups of the group's {size} pods to place each in one domain;"
            f" Phalanx places at most {MAX_SUBGROUPS}"
        )
        return None
    declared = [SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION, SUBGROUP_SIZE_ANNOTATION, SIZE_ANNOTATION]
    if group_key is not None:
        declared.insert(0, EXCLUSIVE_TOPOLOGY_ANNOTATION)
    return replace(
        own,
        slice_required=subgroup_key,
        slice_tasks=tuple(str(i) for i in range(count)),
        slice_noun=SUBGROUP_NOUN,
        declared_by="annotations " + ", ".join(declared),
    )


def _label_key(annotations: Mapping[str, str], annotation: str, problems: list[str]) -> str | None:
    """The node label key `annotation` names (None when absent or not a label key, which
    is added to `problems`)."""
    key = annotations.get(annotation)
    if key is None:
        return None
    if not is_qualified_name(key):
        problems.append(f"annotation {annotation}: {quoted(key)} is not a node label key")
        return None
    return key


def gang_from_members(
    ref: GroupRef, members: Iterable[Pod], *, default_timeout: int
) -> PodGroup | str:
    """The gang the members declare together, or why they cannot: they must agree on the
    size, as Kueue pod group members on their total count."""
    gang = declared_gang(ref, members, SIZE_ANNOTATION, default_timeout=default_timeout)
    if gang is None:
        return f"gang {ref.key}: no member declares {SIZE_ANNOTATION}"
    return gang


def opt_in_missing(
    ref: GroupRef, members: Iterable[Pod], size: int, find: Callable[[str, str], Pod | None]
) -> str:
    """Why the group is no gang when some of its pods did not opt in ("" when every pod
    found did): the gang would wait for ever for pods scheduled on their own.
    `find(namespace, name)` looks a pod up. LWS names the leader like the gang and the
    workers `<leader>-1` … `<leader>-<size-1>`; the workers are looked up in order until
    one is absent, so the cost is bounded by the pods that exist, never by `size` (a
    declared size may be huge). A pod past a gap is checked once the gap fills."""
    member = next(iter(members), None)
    if member is None:
        return ""
    group = (member.labels.get(NAME_LABEL), member.labels.get(GROUP_INDEX_LABEL))
    candidates = [(ref.name, find(ref.namespace, ref.name))]
    for worker in range(1, size):
        name = f"{ref.name}-{worker}"
        pod = find(ref.namespace, name)
        if pod is None:
            break
        candidates.append((name, pod))
    for name, found in candidates:
        if (
            found is None
            or (found.labels.get(NAME_LABEL), found.labels.get(GROUP_INDEX_LABEL)) != group
        ):
            continue  # not there yet, or another LWS's pod that happens to share the name
        if found.group == ref or _claimed(found):
            continue  # a member, or opted in and claimed otherwise (its Event or error says)
        return (
            f'gang {ref.key}: pod {name} has no annotation {OPT_IN_ANNOTATION}: "true" while '
            "other pods of its LeaderWorkerSet group do; set it on both leaderTemplate and "
            "workerTemplate (or on neither)"
        )
    return ""


def _claimed(pod: Pod) -> bool:
    return pod.group_dialect is Dialect.LWS or any(c.dialect is Dialect.LWS for c in pod.overruled)
