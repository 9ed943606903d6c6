"""Kueue's plain pod groups: a gang declared on its pods, with no gang object.

* Label `kueue.x-k8s.io/pod-group-name: <name>` with annotation
  `kueue.x-k8s.io/pod-group-total-count: "<n>"` on every member (Kueue's webhook requires
  both). The gang is `GroupRef(namespace, name, Dialect.KUEUE)`, key `kueue:ns/name`;
  its size is the total count: Kueue admits the group as one Workload of that many pods,
  and Phalanx places it all or nothing (kube-scheduler alone would place the admitted
  pods one by one, and a fragmented cluster could start part of them).
* Serving groups (`kueue.x-k8s.io/pod-group-serving: "true"`) and
  `kueue.x-k8s.io/retriable-in-group` change what Kueue does when members end, not the
  gang: a replacement of a member of a placed group joins it like any other dialect's
  (the bound members plus the replacement make the count again).
* The total count is read like Phalanx's own numbers (a positive int32); a malformed
  one never raises, it sets the pod's `invalid`, as the annotation dialect does (Kueue's
  webhook may not run, e.g. pods created before it was installed). The members'
  `phalanx.io/schedule-timeout-seconds` sets the gang's timeout, as on annotation-only
  members; `phalanx.io/min-member` is refused (`annotations.consistency_problems`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from phalanx.core.groups.annotations import declared_gang
from phalanx.core.groups.common import PodView, declared_size, group_name_problem
from phalanx.core.model import Claim, Dialect, GroupRef, Pod, PodGroup

GROUP_NAME_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
SERVING_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-serving"
QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
# Kueue holds a group's pods behind it until the group is admitted; gated pods never
# reach a scheduler, so Phalanx needs nothing of it.
ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"


def claim(pod: PodView) -> Claim | None:
    """The label's group; None when the pod has no (or an empty) label. A total count
    without the label is the annotation dialect's kind of stray setting
    (`stray_count_problem`), not a claim."""
    name = pod.labels.get(GROUP_NAME_LABEL, "")
    if not name:
        return None
    problem = group_name_problem(f"label {GROUP_NAME_LABEL}", name, "Kueue pod group")
    if problem:
        return Claim(Dialect.KUEUE, None, (problem,))
    ref = GroupRef(pod.namespace, name, Dialect.KUEUE)
    count = total_count(pod.annotations)
    return Claim(Dialect.KUEUE, ref, (count,) if isinstance(count, str) else ())


def total_count(annotations: Mapping[str, str]) -> int | str:
    """The group's size a member declares, or what is wrong with it."""
    missing = (
        f"label {GROUP_NAME_LABEL} needs annotation {TOTAL_COUNT_ANNOTATION} "
        "(the group's size; Kueue requires both)"
    )
    return declared_size(annotations, TOTAL_COUNT_ANNOTATION, missing)


def stray_count_problem(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """Why a total count means nothing on this pod ("" when it does or is absent)."""
    if TOTAL_COUNT_ANNOTATION in annotations and not labels.get(GROUP_NAME_LABEL):
        return f"annotation {TOTAL_COUNT_ANNOTATION} needs label {GROUP_NAME_LABEL}"
    return ""


def gang_from_members(
    ref: GroupRef, members: Iterable[Pod], *, default_timeout: int
) -> PodGroup | str:
    """The gang the members declare together, or why they cannot: they must agree on the
    total count, as annotation-only members on `phalanx.io/min-member`."""
    gang = declared_gang(ref, members, TOTAL_COUNT_ANNOTATION, default_timeout=default_timeout)
    if gang is None:
        return f"gang {ref.key}: no member declares {TOTAL_COUNT_ANNOTATION}"
    return gang
