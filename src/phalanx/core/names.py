"""Kubernetes name forms, checked as the API server checks them, and annotation integers."""

from __future__ import annotations

import re
from typing import Final

DNS_LABEL_FORM: Final = '(lower-case letters, digits and "-", at most 63)'
OBJECT_NAME_FORM: Final = '(lower-case letters, digits, "-" and ".")'

# The longest DNS subdomain, so the longest name of most objects (pods, nodes, PodGroups).
MAX_NAME_LENGTH = 253

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_ONLY = re.compile(_DNS_LABEL)
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# Annotation integers: plain ASCII digits (int() would also take " 3", "+3", "1_000", "٣").
_DIGITS = re.compile(r"[0-9]{1,18}")


def is_object_name(text: str) -> bool:
    """A DNS subdomain: what most object names must be (PodGroups, Workloads)."""
    return len(text) <= MAX_NAME_LENGTH and _DNS_SUBDOMAIN.fullmatch(text) is not None


def is_dns_label(text: str) -> bool:
    """A DNS label: a Workload's pod group name, a replica key."""
    return len(text) <= 63 and _DNS_LABEL_ONLY.fullmatch(text) is not None


def is_qualified_name(text: str) -> bool:
    """Kubernetes `IsQualifiedName`: a label key such as `topology.kubernetes.io/zone`."""
    prefix, slash, name = text.rpartition("/")
    if slash and not (
        prefix and len(prefix) <= MAX_NAME_LENGTH and _DNS_SUBDOMAIN.fullmatch(prefix)
    ):
        return False
    return len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


def annotation_int(text: str, *, minimum: int) -> int | None:
    """An annotation's (or label's) whole number, or None when it is not one or is below
    `minimum`."""
    if _DIGITS.fullmatch(text) is None or int(text) < minimum:
        return None
    return int(text)
