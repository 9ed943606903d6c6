"""Every extender request decoder, handed a request kube-scheduler could send with anything
in it made wrong (or bytes that are no request at all), decodes it or refuses it with a
`WireError` that says what is wrong: never a TypeError, KeyError or RecursionError, which
kube-scheduler would only see as an unexplained 500.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from api_harness import fixture_json
from hypothesis import given, settings
from hypothesis import strategies as st

from json_garbage import garbled, refusal_of
from phalanx.api import wire

EXAMPLES = 300
fuzz = settings(max_examples=EXAMPLES, deadline=None)

# A refusal is written into the answer kube-scheduler logs and shows; it names the field,
# never the whole of what was sent.
LONGEST_MESSAGE = 1_000

Decoder = Callable[[bytes], object]

DECODERS: dict[str, tuple[Decoder, list[str]]] = {
    "filter": (
        wire.decode_extender_args,
        ["filter_nodes.json", "filter_nodenames.json", "filter_legacy_lowercase.json"],
    ),
    "bind": (wire.decode_binding_args, ["bind.json", "bind_legacy_lowercase.json"]),
    "preempt": (
        wire.decode_preemption_args,
        ["preempt_full_victims.json", "preempt_meta_victims.json", "preempt_legacy_lowercase.json"],
    ),
}


def test_every_seed_request_decodes_as_it_stands() -> None:
    for decode, names in DECODERS.values():
        for name in names:
            decode(json.dumps(fixture_json(name)).encode())


def check_refusal(decode: Decoder, body: bytes) -> None:
    error = refusal_of(lambda: decode(body), (wire.WireError,))
    if error is not None:
        assert str(error), "an empty message"
        assert len(str(error)) <= LONGEST_MESSAGE, f"a message of {len(str(error))} characters"


def encoded(doc: Any) -> bytes:
    # As a client would send it: numbers Python holds but JSON decoders refuse included.
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("verb", DECODERS)
@fuzz
@given(data=st.data())
def test_a_request_with_anything_changed_decodes_or_is_refused_saying_why(
    verb: str, data: st.DataObject
) -> None:
    decode, names = DECODERS[verb]
    seed = fixture_json(data.draw(st.sampled_from(names), label="request"))
    request, _ = data.draw(garbled(seed), label="mutations")
    check_refusal(decode, encoded(request))


@pytest.mark.parametrize("verb", DECODERS)
@fuzz
@given(body=st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode)))
def test_any_bytes_decode_or_are_refused_saying_why(verb: str, body: bytes) -> None:
    check_refusal(DECODERS[verb][0], body)


@pytest.mark.parametrize("verb", DECODERS)
@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"Pod":' * 100_000, b'{"Pod": {}, "NodeNames": [' + b"1" * 5_000 + b"]}"],
    ids=["nested arrays", "nested objects", "a 5,000-digit number"],
)
def test_json_beyond_what_a_decoder_holds_is_refused_as_not_json(verb: str, body: bytes) -> None:
    check_refusal(DECODERS[verb][0], body)
