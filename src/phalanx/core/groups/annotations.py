"""The annotation-only dialect: a gang declared on its pods, with no object of its own.

* `phalanx.io/pod-group: <name>` with `phalanx.io/min-member: "<n>"` (and optionally
  `phalanx.io/schedule-timeout-seconds`) on every member.
* Its names are scheduler-plugins' names (`GroupRef(namespace, name)`): a pod labelled
  `scheduling.x-k8s.io/pod-group` and annotated with the same name is in that one group,
  and a PodGroup object of that name, when there is one, gives the settings. The label
  and the annotation naming different groups is an error, never a precedence.
* These are Phalanx's own annotations: malformed ones never raise, they set the pod's
  `invalid` (the API server accepts any annotation text, and a bound pod must still count
  toward its node's usage).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from phalanx.core.errors import quoted
from phalanx.core.groups.common import (
    SCHEDULE_TIMEOUT_ANNOTATION,
    PodView,
    annotation_int32,
    group_name_problem,
    parse_placement,
)
from phalanx.core.groups.scheduler_plugins import POD_GROUP_LABEL
from phalanx.core.model import (
    ANNOTATION_PREFIX,
    DEFAULT_TIMEOUT_SECONDS,
    Claim,
    Dialect,
    GroupRef,
    Pod,
    PodGroup,
)

POD_GROUP_ANNOTATION: Final = ANNOTATION_PREFIX + "pod-group"
MIN_MEMBER_ANNOTATION: Final = ANNOTATION_PREFIX + "min-member"


def claim(pod: PodView) -> Claim | None:
    """The annotation's group; None when absent or when it repeats the label (the
    scheduler-plugins claim then says the same)."""
    from_label = pod.labels.get(POD_GROUP_LABEL, "")
    from_annotation = pod.annotations.get(POD_GROUP_ANNOTATION)
    if from_annotation is None or (from_label and from_annotation == from_label):
        return None
    problem = group_name_problem(f"annotation {POD_GROUP_ANNOTATION}", from_annotation)
    if problem:
        return Claim(Dialect.ANNOTATIONS, None, (problem,))
    if from_label:
        problem = (
            f"annotation {POD_GROUP_ANNOTATION}: {quoted(from_annotation)} names a different "
            f"group than label {POD_GROUP_LABEL}: {quoted(from_label)}"
        )
        return Claim(Dialect.ANNOTATIONS, None, (problem,))
    return Claim(Dialect.ANNOTATIONS, GroupRef(pod.namespace, from_annotation))


@dataclass(slots=True)
class PodDeclaration:
    """The gang settings a pod declares for itself (`min-member`, `schedule-timeout`)."""

    min_member: int | None = None
    timeout_seconds: int | None = None
    problems: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, annotations: Mapping[str, str]) -> PodDeclaration:
        declaration = cls()
        declaration.min_member = declaration._number(annotations, MIN_MEMBER_ANNOTATION)
        declaration.timeout_seconds = declaration._number(annotations, SCHEDULE_TIMEOUT_ANNOTATION)
        return declaration

    def _number(self, annotations: Mapping[str, str], key: str) -> int | None:
        text = annotations.get(key)
        if text is None:
            return None
        read = annotation_int32(text)
        if isinstance(read, str):
            self.problems.append(f"annotation {key}: {read}")
            return None
        return read


def consistency_problems(
    labels: Mapping[str, str], annotations: Mapping[str, str], group: GroupRef | None
) -> list[str]:
    """Settings that make no sense without the declarations that give them meaning."""
    problems = []
    annotation_only = POD_GROUP_ANNOTATION in annotations and not labels.get(POD_GROUP_LABEL)
    if annotation_only and group is not None and MIN_MEMBER_ANNOTATION not in annotations:
        problems.append(
            f"annotation {POD_GROUP_ANNOTATION}: {quoted(group.name)} needs annotation "
            f"{MIN_MEMBER_ANNOTATION} (there is no PodGroup object to give it)"
        )
    if POD_GROUP_ANNOTATION not in annotations and not labels.get(POD_GROUP_LABEL):
        # Kueue, LWS and YuniKorn gangs have no object either: their members may set the
        # timeout (the size is Kueue's total count, LWS's size, YuniKorn's task groups).
        declared = group is not None and group.dialect in _MEMBER_DECLARED
        for key in (MIN_MEMBER_ANNOTATION, *(() if declared else (SCHEDULE_TIMEOUT_ANNOTATION,))):
            if key in annotations:
                problems.append(
                    f"annotation {key} needs annotation {POD_GROUP_ANNOTATION} "
                    f"or label {POD_GROUP_LABEL}"
                )
    return problems


_MEMBER_DECLARED: Final = frozenset({Dialect.KUEUE, Dialect.LWS, Dialect.YUNIKORN})


def group_from_pod(pod: Pod) -> PodGroup | None:
    """The gang an annotation-only pod declares (`phalanx.io/pod-group` + `min-member`).

    None for pods in no group, for pods whose group is a PodGroup object (the label), and
    for pods whose declaration is incomplete (their `invalid` says why).
    """
    if pod.group is None or pod.min_member is None or pod.labels.get(POD_GROUP_LABEL):
        return None
    if pod.group_dialect not in (None, Dialect.ANNOTATIONS):
        return None
    return PodGroup(
        namespace=pod.group.namespace,
        name=pod.group.name,
        min_member=pod.min_member,
        timeout_seconds=pod.timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
        placement=parse_placement(pod.placement) if pod.placement else None,
        from_crd=False,
    )


def gang_from_members(
    ref: GroupRef, members: Iterable[Pod], *, default_timeout: int
) -> PodGroup | str:
    """The gang that members with no PodGroup object declare together, or why they cannot.

    Members must agree on `min-member`; the shortest declared timeout wins. A string
    starting with "waiting" means the object may still come (the pods use the label).
    """
    gang = declared_gang(ref, members, MIN_MEMBER_ANNOTATION, default_timeout=default_timeout)
    if gang is None:
        return f"waiting for PodGroup {ref.key} to exist (pods name it with a label)"
    return gang


def declared_gang(
    ref: GroupRef, members: Iterable[Pod], size_key: str, *, default_timeout: int
) -> PodGroup | str | None:
    """The gang members declare on themselves (`Pod.min_member`, read from `size_key`), or
    why they cannot: they disagree on the size, or none declares one and a member says
    why (its `invalid`). None when none declares a size and none is broken. The shortest
    declared timeout wins."""
    pods = list(members)
    declared = {p.min_member for p in pods if p.min_member is not None}
    if not declared:
        broken = next((p for p in pods if p.invalid), None)
        if broken is not None:
            return f"gang {ref.key}: pod {broken.name}: {broken.invalid}"
        return None
    if len(declared) > 1:
        return f"members of gang {ref.key} disagree on {size_key}: " + ", ".join(
            str(n) for n in sorted(declared)
        )
    timeouts = {p.timeout_seconds for p in pods if p.timeout_seconds is not None}
    return PodGroup(
        namespace=ref.namespace,
        name=ref.name,
        min_member=declared.pop(),
        timeout_seconds=min(timeouts) if timeouts else default_timeout,
        from_crd=False,
        dialect=ref.dialect,
    )
