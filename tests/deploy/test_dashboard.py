"""The Grafana dashboard, checked against Grafana's own schema and against its generator.

grafana-foundation-sdk's models are generated from Grafana's dashboard schema: the shipped
JSON must survive a trip through them unchanged (an unknown or misspelt field is dropped on
the way, a field the schema requires is filled in), use only panel types and query types
Grafana ships, read every query from the data source variable, and use unit ids Grafana
knows. deploy/grafana/dashboard.py writes the files; the committed ones must be its output.
"""

from __future__ import annotations

import enum
import importlib.util
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from deploykit import CHART, DEPLOY
from grafana_foundation_sdk.cog import runtime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import units
from grafana_foundation_sdk.models.common import DataSourceRef
from grafana_foundation_sdk.models.dashboard import (
    Dashboard,
    Panel,
    RowPanel,
    ThresholdsConfig,
    ThresholdsMode,
    VariableType,
)

SHIPPED = {
    "chart": CHART / "files" / "phalanx-dashboard.json",
    "deploy": DEPLOY / "grafana" / "phalanx-dashboard.json",
}
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
METRIC = re.compile(r"\bphalanx_[a-z0-9_]*[a-z0-9]")
# $name or ${name}; Grafana's own variables ($__rate_interval, ...) start with two underscores.
VARIABLE_REF = re.compile(r"\$\{?([A-Za-z_]\w*)")

# Grafana's unit ids: the SDK generates models/units.py from Grafana's
# packages/grafana-data/src/valueFormats/categories.ts (one constant per id).
KNOWN_UNITS = frozenset(
    value
    for name, value in vars(units).items()
    if not name.startswith("_") and isinstance(value, str)
)

# Decoding panels and queries by type needs the SDK's registry of Grafana's core plugins.
register_default_plugins()


def _load_generator() -> ModuleType:
    path = DEPLOY / "grafana" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("phalanx_dashboard_generator", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


generator = _load_generator()


@pytest.fixture(scope="module")
def exported() -> Any:
    """What a real extender's registry exports, as the generator reads it."""
    return generator.Exported.of(generator.live_registry())


@pytest.fixture(params=sorted(SHIPPED), ids=sorted(SHIPPED))
def shipped(request: pytest.FixtureRequest) -> dict[str, Any]:
    data = json.loads(SHIPPED[request.param].read_text())
    assert isinstance(data, dict)
    return data


# ---- reading a dashboard through Grafana's models --------------------------------------


def load(data: dict[str, Any]) -> Dashboard:
    return Dashboard.from_json(data)


def dump(model: Dashboard) -> dict[str, Any]:
    data = json.loads(JSONEncoder().encode(model))
    assert isinstance(data, dict)
    return data


def differences(given: Any, reloaded: Any, path: str) -> Iterator[str]:
    """Where ``reloaded`` (the model's view) is not ``given`` (the file), path by path."""
    if isinstance(given, dict) and isinstance(reloaded, dict):
        for key, value in given.items():
            if key not in reloaded:
                yield f"{path}.{key}: not in Grafana's schema (dropped on load)"
            else:
                yield from differences(value, reloaded[key], f"{path}.{key}")
        for key in reloaded.keys() - given.keys():
            yield f"{path}.{key}: required by Grafana's schema (loads as {reloaded[key]!r})"
    elif isinstance(given, list) and isinstance(reloaded, list) and len(given) == len(reloaded):
        for i, (a, b) in enumerate(zip(given, reloaded, strict=True)):
            yield from differences(a, b, f"{path}[{i}]")
    elif given != reloaded:
        yield f"{path}: {given!r} loads as {reloaded!r}"


def type_problems(obj: object, path: str) -> Iterator[str]:
    """Where a loaded model holds a value its schema type does not allow (paths in the SDK's
    attribute names). from_json copies values as they come; this is the check it skips."""
    for name, hint in typing.get_type_hints(type(obj)).items():
        yield from misfits(getattr(obj, name, None), hint, f"{path}.{name}")


def misfits(value: object, hint: Any, path: str) -> Iterator[str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        arms = [list(misfits(value, arm, path)) for arm in args if arm is not type(None)]
        if all(arms):
            # An arm whose shape fits says what is wrong inside it; else the first arm speaks.
            inside = [arm for arm in arms if not arm[0].startswith(f"{path}: ")]
            yield from (inside or arms)[0]
    elif origin is typing.Literal:
        if value not in args:
            yield f"{path}: {value!r} is not one of {args}"
    elif origin is list:
        if not isinstance(value, list):
            yield f"{path}: {value!r} is not a list"
            return
        for i, item in enumerate(value):
            yield from misfits(item, args[0], f"{path}[{i}]")
    elif origin is dict:
        if not isinstance(value, dict):
            yield f"{path}: {value!r} is not a mapping"
            return
        for key, item in value.items():
            yield from misfits(item, args[1], f"{path}[{key!r}]")
    elif hint is type(None):
        if value is not None:
            yield f"{path}: {value!r} is not null"
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        if value not in {member.value for member in hint}:
            yield f"{path}: {value!r} is not a {hint.__name__}"
    elif hint in (int, float, str, bool):
        allowed = (int, float) if hint is float else hint
        if not isinstance(value, allowed) or (hint is not bool and isinstance(value, bool)):
            yield f"{path}: {value!r} is not {hint.__name__}"
    elif callable(getattr(value, "to_json", None)):
        if isinstance(hint, type) and hint is not object and not isinstance(value, hint):
            yield f"{path}: {type(value).__name__} is not {hint.__name__}"
            return
        yield from type_problems(value, path)
    elif isinstance(hint, type) and callable(getattr(hint, "to_json", None)):
        yield f"{path}: {value!r} is not a {hint.__name__}"


def schema_problems(data: dict[str, Any]) -> list[str]:
    """Everything Grafana's dashboard model objects to in ``data`` (empty: none)."""
    model = load(data)
    problems = list(differences(data, dump(model), ""))
    problems += type_problems(model, "")
    for i, panel in enumerate(model.panels or []):
        if isinstance(panel, RowPanel):
            continue
        if runtime.panelcfg_config(panel.type_val) is None:
            problems.append(f".panels[{i}]: unknown panel type {panel.type_val!r}")
        for j, target in enumerate(panel.targets or []):
            if isinstance(target, runtime.UnknownDataquery):
                problems.append(f".panels[{i}].targets[{j}]: unknown query type")
    return problems


def panels(model: Dashboard) -> list[Panel]:
    return [p for p in model.panels or [] if isinstance(p, Panel)]


# ---- the schema ------------------------------------------------------------------------


def test_the_dashboard_loads_into_grafanas_model_unchanged(shipped: dict[str, Any]) -> None:
    assert schema_problems(shipped) == []


def _first(kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def pick(data: dict[str, Any]) -> dict[str, Any]:
        panel = next(p for p in data["panels"] if p["type"] == kind)
        assert isinstance(panel, dict)
        return panel

    return pick


stat_of, timeseries_of = _first("stat"), _first("timeseries")


@pytest.mark.parametrize(
    ("spoil", "reported"),
    [
        (lambda d: d.update(colour="red"), ".colour: not in Grafana's schema"),
        (lambda d: stat_of(d).update(gridpos=stat_of(d).pop("gridPos")), "gridpos: not in"),
        (lambda d: stat_of(d)["options"].update(sparkle=True), "options.sparkle: not in"),
        (
            lambda d: timeseries_of(d)["fieldConfig"]["defaults"]["custom"].update(glow=1),
            "defaults.custom.glow: not in",
        ),
        (
            lambda d: timeseries_of(d)["options"]["legend"].pop("showLegend"),
            "legend.showLegend: required by Grafana's schema",
        ),
        (lambda d: d.update(schemaVersion="41"), ".schema_version: '41' is not int"),
        (
            lambda d: timeseries_of(d)["options"]["legend"].update(displayMode="tabel"),
            "legend.display_mode: 'tabel' is not a LegendDisplayMode",
        ),
        (
            lambda d: stat_of(d)["fieldConfig"]["defaults"].update(unit=5),
            "defaults.unit: 5 is not str",
        ),
        (lambda d: stat_of(d).update(type="phalanx-gauge"), "unknown panel type 'phalanx-gauge'"),
        (
            lambda d: stat_of(d)["datasource"].update(type="phalanx-db"),
            ".targets[0]: unknown query type",
        ),
    ],
    ids=[
        "unknown-top-level-field",
        "misspelt-panel-field",
        "unknown-stat-option",
        "unknown-timeseries-field-option",
        "legend-without-required-showLegend",
        "number-as-a-string",
        "misspelt-enum-value",
        "unit-of-the-wrong-type",
        "unknown-panel-type",
        "unknown-query-type",
    ],
)
def test_a_dashboard_grafana_would_misread_is_reported(
    spoil: Callable[[dict[str, Any]], object], reported: str
) -> None:
    spoilt = json.loads(SHIPPED["chart"].read_text())
    spoil(spoilt)
    problems = schema_problems(spoilt)
    assert any(reported in p for p in problems), problems


# ---- data source -----------------------------------------------------------------------


def test_every_panel_and_query_reads_from_the_datasource_variable(shipped: dict[str, Any]) -> None:
    model = load(shipped)
    assert model.templating.list_val is not None
    variables = {v.name: v for v in model.templating.list_val}
    chooser = variables["datasource"]
    assert (chooser.type_val, chooser.query) == (VariableType.DATASOURCE, "prometheus")
    refs: list[tuple[str, DataSourceRef | None]] = [
        ("variable " + v.name, v.datasource) for v in variables.values() if v.datasource
    ]
    for panel in panels(model):
        refs.append((f"panel {panel.title!r}", panel.datasource))
        refs += [
            # the loaded queries are Prometheus ones, which have it; their base type does not
            (f"query of {panel.title!r}", t.datasource)  # type: ignore[attr-defined]
            for t in panel.targets or []
        ]
    assert len(refs) > len(panels(model))
    for where, ref in refs:
        assert ref is not None, where
        assert ref.to_json() == DATASOURCE_REF, where


def test_every_variable_the_dashboard_uses_is_defined(shipped: dict[str, Any]) -> None:
    defined = {v["name"] for v in shipped["templating"]["list"]}
    used = {name for name in VARIABLE_REF.findall(json.dumps(shipped)) if not name.startswith("__")}
    assert used == defined


# ---- units and thresholds --------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "known"),
    [
        ("none", True),
        ("s", True),
        ("ops", True),
        ("reqps", True),
        ("percent", True),
        ("seconds", False),
        ("req/s", False),
        ("", False),
    ],
    ids=["none", "s", "ops", "reqps", "percent", "not-seconds", "not-req/s", "not-empty"],
)
def test_grafana_unit_ids_come_from_grafanas_own_list(unit: str, known: bool) -> None:
    assert (unit in KNOWN_UNITS) is known


def field_configs(panel: Panel) -> Iterator[tuple[str, str | None, ThresholdsConfig | None]]:
    """(where, unit, thresholds) of a panel's defaults and of each of its overrides."""
    fc = panel.field_config
    if fc is None:
        return
    unit = fc.defaults.unit
    yield f"{panel.title!r} defaults", unit, fc.defaults.thresholds
    for i, override in enumerate(fc.overrides):
        props = {p.id_val: p.value for p in override.properties}
        raw = props.get("thresholds")
        thresholds = ThresholdsConfig.from_json(raw) if isinstance(raw, dict) else None
        override_unit = props.get("unit", unit)
        yield f"{panel.title!r} override {i}", str(override_unit), thresholds


def test_every_unit_and_threshold_unit_is_one_grafana_knows(shipped: dict[str, Any]) -> None:
    checked = 0
    for panel in panels(load(shipped)):
        for where, unit, thresholds in field_configs(panel):
            assert unit in KNOWN_UNITS, f"{where}: unit {unit!r}"
            if thresholds is None:
                continue
            # Absolute steps are in the field's unit; percentage steps in percent of min..max.
            step_unit = unit if thresholds.mode == ThresholdsMode.ABSOLUTE else units.Percent
            assert step_unit in KNOWN_UNITS, f"{where}: thresholds in {step_unit!r}"
            values = [s.value for s in thresholds.steps]
            assert values[0] is None, f"{where}: the first step is the base, without a value"
            assert values[1:] == sorted(v for v in values[1:] if v is not None), where
            checked += 1
    assert checked >= 4  # the four stat tiles


# ---- the generator ---------------------------------------------------------------------


def test_the_committed_files_are_what_the_generator_writes(exported: Any) -> None:
    text = generator.render(exported)
    for name, path in SHIPPED.items():
        assert path.read_text() == text, f"{name} copy is stale: run `make dashboard`"


def test_every_exported_metric_family_is_charted_or_left_out_with_a_reason(exported: Any) -> None:
    data = json.loads(generator.render(exported))
    text = json.dumps([p.get("targets", []) for p in data["panels"]])
    charted = {exported.series[s] for s in METRIC.findall(text)}
    missing = set(exported.families) - charted - set(generator.NOT_CHARTED)
    assert not missing, (
        f"chart them in deploy/grafana/dashboard.py (or say in NOT_CHARTED why not): {missing}"
    )


@pytest.mark.parametrize(
    "series",
    [
        "phalanx_gang_decisions",  # a counter is queried by its _total series
        "phalanx_request_duration_seconds",  # a histogram by _bucket, _count or _sum
        "phalanx_partial_gang",
    ],
)
def test_the_generator_refuses_a_series_phalanx_does_not_export(exported: Any, series: str) -> None:
    with pytest.raises(ValueError, match=f"queries '{series}';"):
        exported.select(series)


@pytest.mark.parametrize(
    "series",
    ["phalanx_gang_decisions_total", "phalanx_request_duration_seconds_bucket", "phalanx_gpus"],
)
def test_the_generator_accepts_each_exported_series(exported: Any, series: str) -> None:
    assert exported.select(series) == series + '{job=~"$job"}'


def test_the_dashboard_has_a_stable_uid_and_no_database_id(shipped: dict[str, Any]) -> None:
    assert shipped["uid"] == "phalanx"  # links and the sidecar's updates find it by uid
    assert "id" not in shipped  # a database id would collide on import into another Grafana
