"""kube-scheduler's own gang plugin next to Phalanx: which served profiles leave it on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.core.groups.coexistence import NativeGang, native_gang_profiles

REPO = Path(__file__).resolve().parents[3]
OFF = {"multiPoint": {"disabled": [{"name": "GangScheduling"}]}}


def config(*profiles: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "KubeSchedulerConfiguration", "profiles": list(profiles)}


@pytest.mark.parametrize(
    ("profiles", "found"),
    [
        ([{"schedulerName": "phalanx", "plugins": OFF}], ()),
        ([{"schedulerName": "phalanx"}], (NativeGang("phalanx"),)),
        (
            [
                {
                    "schedulerName": "phalanx",
                    "plugins": {"multiPoint": {"disabled": [{"name": "*"}]}},
                }
            ],
            (),
        ),
        (
            [
                {
                    "schedulerName": "phalanx",
                    "plugins": {"permit": {"disabled": [{"name": "GangScheduling"}]}},
                }
            ],
            (NativeGang("phalanx"),),
        ),
        (
            [
                {
                    "schedulerName": "phalanx",
                    "plugins": {
                        "multiPoint": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": "GangScheduling"}],
                        }
                    },
                }
            ],
            (NativeGang("phalanx"),),
        ),
        (
            [{"schedulerName": "default-scheduler"}, {"schedulerName": "phalanx", "plugins": OFF}],
            (),
        ),
        ([{"plugins": OFF}, {"schedulerName": "gpu"}], (NativeGang("gpu"),)),
        ([{"schedulerName": "phalanx", "plugins": "garbage"}], (NativeGang("phalanx"),)),
    ],
    ids=[
        "disabled",
        "left-on",
        "every-default-disabled",
        "disabled-at-one-point-only",
        "enabled-again",
        "another-profile-is-not-ours",
        "every-served-profile-checked",
        "malformed-reads-as-absent",
    ],
)
def test_a_served_profile_must_disable_the_native_gang_plugin_everywhere(
    profiles: list[dict[str, Any]], found: tuple[NativeGang, ...]
) -> None:
    assert native_gang_profiles(config(*profiles), {"phalanx", "gpu"}) == found


@pytest.mark.parametrize("path", ["deploy/kube-scheduler-config.yaml"], ids=["example-config"])
def test_the_shipped_configuration_is_the_supported_setup(path: str) -> None:
    shipped = yaml.safe_load((REPO / path).read_text())
    assert native_gang_profiles(shipped, {"phalanx"}) == ()
    assert native_gang_profiles(config({"schedulerName": "phalanx"}), {"phalanx"})


def test_the_message_says_what_to_disable_and_where() -> None:
    message = NativeGang("phalanx").message()
    assert message.startswith('kube-scheduler profile "phalanx" does not disable its own')
    assert "GangScheduling, TopologyPlacementGenerator, PodGroupPodsCount" in message
    assert "profiles[].plugins.multiPoint.disabled" in message
