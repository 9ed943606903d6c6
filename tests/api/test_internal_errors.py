"""A failure inside the extender is a 200 answer, logged with its traceback; the server goes on."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

import pytest
from api_harness import fixture_bytes, serve, small_cluster

from phalanx.core.decisions import FilterResult
from phalanx.core.model import Binding, Pod
from phalanx.service.extender import Extender

pytestmark = pytest.mark.anyio


class FailingOnce(Extender):
    """An extender whose next call of each verb raises (a bug in a collaborator)."""

    armed: set[str]

    def arm(self, *verbs: str) -> None:
        self.armed = set(verbs)

    def _trip(self, verb: str) -> None:
        if verb in getattr(self, "armed", set()):
            self.armed.discard(verb)
            raise RuntimeError(f"boom in {verb}")

    def filter(
        self, pod: Pod, offered: Sequence[str], offered_set: AbstractSet[str] | None = None
    ) -> FilterResult:
        self._trip("filter")
        return super().filter(pod, offered, offered_set)

    def prioritize(self, pod: Pod, offered: Sequence[str]) -> dict[str, int]:
        self._trip("prioritize")
        return super().prioritize(pod, offered)

    def preempt(self, pod: Pod, victims: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        self._trip("preempt")
        return super().preempt(pod, victims)

    async def bind(self, binding: Binding) -> str:
        self._trip("bind")
        return await super().bind(binding)


INTERNAL = "internal error: RuntimeError: boom in"

CASES = [
    (
        "filter",
        "filter_nodenames.json",
        {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": f"{INTERNAL} filter",
        },
    ),
    ("prioritize", "filter_nodenames.json", []),
    ("bind", "bind.json", {"Error": f"{INTERNAL} bind"}),
    ("preempt", "preempt_meta_victims.json", {"NodeNameToMetaVictims": {}}),
]


@pytest.mark.parametrize(("verb", "fixture", "degraded"), CASES, ids=[c[0] for c in CASES])
async def test_an_exception_in_the_extender_is_a_200_answer_and_the_next_request_works(
    verb: str, fixture: str, degraded: object, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve(small_cluster(), extender_type=FailingOnce) as phalanx:
        assert isinstance(phalanx.extender, FailingOnce)
        phalanx.extender.arm(verb)

        with caplog.at_level(logging.ERROR, logger="phalanx.api"):
            failed = await phalanx.post(verb, fixture_bytes(fixture))
        again = await phalanx.post(verb, fixture_bytes(fixture))

        assert failed.status_code == 200
        assert failed.json() == degraded
        assert phalanx.count(verb, "error") == 1
        (logged,) = [r for r in caplog.records if r.exc_info]
        assert logged.exc_info is not None
        assert str(logged.exc_info[1]) == f"boom in {verb}"
        assert again.status_code == 200
        assert again.json() != degraded
        assert phalanx.count(verb, "ok") == 1
