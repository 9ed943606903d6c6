"""Reading raw API objects: the paths that error messages name."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.rawdict import KEY_LIMIT, key_path


def test_a_key_is_named_as_a_json_string_after_its_path() -> None:
    assert key_path("spec.containers[0].resources.requests", "nvidia.com/gpu") == (
        'spec.containers[0].resources.requests["nvidia.com/gpu"]'
    )


def test_quotes_backslashes_and_control_characters_in_a_key_are_escaped() -> None:
    assert key_path("metadata.labels", 'a"b\\c\nd') == 'metadata.labels["a\\"b\\\\c\\nd"]'


@given(st.text(max_size=KEY_LIMIT))
def test_any_key_reads_as_json_would_write_it(key: str) -> None:
    assert key_path("p", key) == f"p[{json.dumps(key, ensure_ascii=False)}]"


def test_a_key_longer_than_any_label_key_is_cut() -> None:
    longest = "a" * 253 + "/" + "b" * 63
    assert key_path("p", longest) == f'p["{longest}"]'
    assert key_path("p", "c" * 100_000) == 'p["' + "c" * KEY_LIMIT + '…"]'
    assert key_path("p", '"' * 1_000) == 'p["' + '\\"' * KEY_LIMIT + '…"]'
