"""Kubernetes name forms, checked as the API server checks them, annotation integers, and
the order of indexed names."""

from __future__ import annotations

import re

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_ONLY = re.compile(_DNS_LABEL)
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# Annotation integers: plain ASCII digits (int() would also take " 3", "+3", "1_000", "٣").
_DIGITS = re.compile(r"[0-9]{1,18}")
_RUNS_OF_DIGITS = re.compile(r"([0-9]+)")


def is_object_name(text: str) -> bool:
    """A DNS subdomain: what most object names must be (PodGroups, Workloads)."""
    return len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text) is not None


def is_dns_label(text: str) -> bool:
    """A DNS label: a Workload's pod group name, a replica key."""
    return len(text) <= 63 and _DNS_LABEL_ONLY.fullmatch(text) is not None


def is_qualified_name(text: str) -> bool:
    """Kubernetes `IsQualifiedName`: a label key such as `topology.kubernetes.io/zone`."""
    prefix, slash, name = text.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


def annotation_int(text: str, *, minimum: int) -> int | None:
    """An annotation's (or label's) whole number, or None when it is not one or is below
    `minimum`."""
    if _DIGITS.fullmatch(text) is None or int(text) < minimum:
        return None
    return int(text)


def index_order(name: str) -> tuple[str, ...]:
    """A sort key that orders names by the numbers in them ("w-2" before "w-10"): the order
    in which operators create indexed members (Jobs, JobSets, MPI and Kubeflow workers).
    Text and runs of digits alternate, so the digits (padded) compare as numbers."""
    parts = _RUNS_OF_DIGITS.split(name)
    return tuple(part.zfill(20) if i % 2 else part for i, part in enumerate(parts))
