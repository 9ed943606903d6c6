"""The blocking client's informer transport: what it asks the API server for, per request
(the real server's answers are exercised in tests/e2e)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from phalanx.sources.kubeclient import JSON, METADATA, METADATA_LIST, KubeClient


@dataclass
class Answer:
    status: int = 200
    data: bytes = b'{"metadata": {}, "items": []}'

    def stream(self, amount: int, *, decode_content: bool) -> Iterator[bytes]:
        del amount, decode_content
        yield b""

    def shutdown(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class Called:
    response: Answer


@dataclass
class RecordingApiClient:
    """The `kubernetes` ApiClient's two calls the client makes, each request's headers kept."""

    user_agent: str = ""
    headers: list[Mapping[str, str]] = field(default_factory=list)

    def param_serialize(self, **request: Any) -> tuple[Any, ...]:
        url = request["resource_path"]
        return request["method"], url, dict(request["header_params"]), None, None

    def call_api(
        self, method: str, url: str, headers: Mapping[str, str], *_: Any, **__: Any
    ) -> Called:
        self.headers.append(headers)
        return Called(Answer())


def list_then_watch(client: Any) -> None:
    client.list("/apis/x/v1/things", limit=500, continue_token="")
    client.watch("/apis/x/v1/things", resource_version="7", timeout_seconds=300)


@pytest.mark.parametrize(
    ("metadata_only", "accepted"),
    [(False, [JSON, JSON]), (True, [METADATA_LIST, METADATA])],
    ids=["whole-objects", "metadata-only"],
)
def test_the_metadata_client_asks_for_partial_object_metadata_on_lists_and_watches(
    metadata_only: bool, accepted: list[str]
) -> None:
    api = RecordingApiClient()
    client = KubeClient(api)
    list_then_watch(client.metadata() if metadata_only else client)
    assert [h["Accept"] for h in api.headers] == accepted


def test_partial_object_metadata_is_asked_with_plain_json_as_the_fallback() -> None:
    # A server that cannot transform answers whole objects rather than 406 Not Acceptable.
    assert METADATA_LIST.startswith("application/json;as=PartialObjectMetadataList;g=meta.k8s.io")
    assert METADATA.startswith("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,")
    assert METADATA_LIST.endswith(",application/json")
    assert METADATA.endswith(",application/json")
