"""Kubernetes name forms, annotation integers, and the order of indexed names."""

from __future__ import annotations

import pytest

from phalanx.core.names import annotation_int, index_order, is_dns_label, is_object_name


def test_indexed_names_sort_by_their_numbers_as_operators_create_them() -> None:
    names = ["w-10", "w-2", "w-1", "w-0", "launcher-0", "w-1-a", "w-01"]
    assert sorted(names, key=index_order) == [
        "launcher-0",
        "w-0",
        "w-1",
        "w-01",
        "w-1-a",
        "w-2",
        "w-10",
    ]


def test_names_without_numbers_sort_as_text() -> None:
    assert sorted(["beta", "alpha", "alpha-x"], key=index_order) == ["alpha", "alpha-x", "beta"]


@pytest.mark.parametrize(
    ("text", "label", "name"),
    [("train", True, True), ("a.b", False, True), ("Upper", False, False), ("-x", False, False)],
)
def test_name_forms_follow_the_api_servers_rules(text: str, label: bool, name: bool) -> None:
    assert is_dns_label(text) is label
    assert is_object_name(text) is name


@pytest.mark.parametrize(("text", "value"), [("3", 3), (" 3", None), ("+3", None), ("0", None)])
def test_annotation_integers_are_plain_digits_at_least_the_minimum(
    text: str, value: int | None
) -> None:
    assert annotation_int(text, minimum=1) == value
