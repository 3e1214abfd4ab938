"""The workbook (``infra/app/workbook.json``): every name its queries use is one the code emits.

The queries are kept regular so that a plain extraction finds every quoted string and what it stands
for: a telemetry item's ``Name`` (a span, a metric, an HTTP function), a ``Properties["..."]`` key (a span
or metric attribute, a log record's extra field), a value compared with such a key, or an HTTP path.
Each must exist in ``shared/``, read from the source with ``ast``; a quoted string of any other kind
fails the test. How the names reach those tables (spans to AppDependencies, metrics to AppMetrics, with
attributes under Properties) is checked through the Azure Monitor exporter itself.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_infra import APP, MAIN, ROOT, _body, _path, _properties, _text, declared

WORKBOOK = APP / "workbook.json"
WORKBOOK_BICEP = APP / "workbook.bicep"
SHARED = ROOT / "shared"
PLACEHOLDER = re.compile(r"__[A-Z_]+__")

# Names the workbook may use before the code emits them, each with why. Empty: every name it uses is
# emitted today (dead letters come from the Service Bus platform metric, not from the code).
NOT_YET_EMITTED: dict[str, str] = {}

# What each kind of quoted string in a query looks like.
NAME_EQUALS = re.compile(r'\bName (?:==|startswith) "([^"]*)"')
NAME_IN = re.compile(r"\bName in \(([^)]*)\)")
PROPERTY_KEY = re.compile(r'Properties\["([^"]*)"\]')
PROPERTY_VALUE = re.compile(r'Properties\["[^"]*"\]\) == "([^"]*)"')
URL_PATH = re.compile(r'parse_url\(Url\)\.Path\) == "([^"]*)"')
QUOTED = re.compile(r'"([^"]*)"')


def _workbook() -> dict[str, Any]:
    return json.loads(WORKBOOK.read_text())  # type: ignore[no-any-return]


def _queries() -> dict[str, str]:
    """item name -> KQL of every query item."""
    return {item["name"]: item["content"]["query"] for item in _workbook()["items"] if item["type"] == 3}


def _table(query: str) -> str:
    return query.split("\n", 1)[0].strip()


# -- what the code emits, read from shared/ --


def _module_constants(tree: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = value.value
    return found


def _first_argument(call: ast.Call, constants: dict[str, str]) -> str | None:
    """A call's first argument as text; an f-string as its leading literal part plus '*'."""
    if not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Name):
        return constants.get(arg.id)
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return f"{arg.values[0].value}*"
    return None


@cache
def emitted() -> dict[str, frozenset[str]]:
    """What shared/ and the guard it is built on (casekeeper/) emit: span names, metric (instrument) names,
    logger names and every string literal. The guard opens its spans through its ``trace`` hook
    (``self._trace(...)``), which the app points at its telemetry's ``span``."""
    found: dict[str, set[str]] = {"span": set(), "metric": set(), "logger": set(), "literal": set()}
    for path in sorted([*SHARED.rglob("*.py"), *(ROOT / "casekeeper").rglob("*.py")]):
        tree = ast.parse(path.read_text(), filename=str(path))
        constants = _module_constants(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found["literal"].add(node.value)
            if not isinstance(node, ast.Call):
                continue
            method = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            kind = {"span": "span", "_trace": "span", "start_as_current_span": "span", "create_counter": "metric"}.get(
                method
            )
            if method == "getLogger":
                kind = "logger"
            name = _first_argument(node, constants)
            if kind and name:
                found[kind].add(name)
    return {k: frozenset(v) for k, v in found.items()}


@cache
def http_functions() -> dict[str, str]:
    """HTTP function name -> its path, as the host serves it (routePrefix from host.json)."""
    import function_app

    prefix = json.loads((ROOT / "host.json").read_text())["extensions"]["http"]["routePrefix"]
    found: dict[str, str] = {}
    for function in function_app.create_app().get_functions():
        for binding in (json.loads(b) for b in function.get_raw_bindings()):
            if binding["type"] == "httpTrigger":
                found[function.get_function_name()] = f"/{prefix}/{binding['route']}"
    return found


def _is_emitted(kind: str, name: str) -> bool:
    names = emitted()[kind]
    return name in names or any(p.endswith("*") and name.startswith(p[:-1]) for p in names)


# -- the checks --


def test_the_extraction_finds_what_the_code_emits() -> None:
    # Guards the source scan: names known to be emitted today.
    found = emitted()
    assert {"case_event", "workflow.run", "commit_status", "reconcile.recheck", "effect *"} <= found["span"]
    assert {"casekeeper.effects.started", "casekeeper.checkpoint.failures", "casekeeper.alerts"} <= found["metric"]
    assert "casekeeper.alerts" in found["logger"]
    assert http_functions()["events"] == "/api/events"


@pytest.mark.parametrize("item", sorted(_queries()))
def test_every_quoted_string_in_a_query_is_a_name_the_code_emits(item: str) -> None:
    query = _queries()[item]
    table = _table(query)
    names = NAME_EQUALS.findall(query) + [n for group in NAME_IN.findall(query) for n in QUOTED.findall(group)]
    keys, values, paths = PROPERTY_KEY.findall(query), PROPERTY_VALUE.findall(query), URL_PATH.findall(query)
    problems: list[str] = []
    for name in names:
        kind = {"AppDependencies": "span", "AppMetrics": "metric"}.get(table)
        if table == "AppRequests":
            if name not in http_functions():
                problems.append(f"{name!r} is not an HTTP function")
        elif kind is None:
            problems.append(f"{table}: no rule for Name {name!r}")
        elif not _is_emitted(kind, name) and name not in NOT_YET_EMITTED:
            problems.append(f"{kind} {name!r} is not emitted by shared/")
    for key in keys:
        if key not in emitted()["literal"] and key not in NOT_YET_EMITTED:
            problems.append(f"Properties key {key!r} appears nowhere in shared/")
    for value in values:
        if value not in emitted()["literal"] and value not in NOT_YET_EMITTED:
            problems.append(f"value {value!r} appears nowhere in shared/")
    for path in paths:
        if path not in http_functions().values():
            problems.append(f"{path!r} is not the path of an HTTP function")
    classified = names + keys + values + paths
    unknown = [s for s in QUOTED.findall(query) if s not in classified]
    assert not unknown, f"{item}: quoted strings of no known kind (keep the queries regular): {unknown}"
    assert not problems, f"{item}: " + "; ".join(problems)


def test_the_workbook_shows_what_operators_watch_per_hour() -> None:
    queries = _queries()
    for query in queries.values():
        assert "bin(TimeGenerated, 1h)" in query, query
        assert "ago(" not in query, "the workbook's time range parameter sets the range"
    text = "\n".join(queries.values())
    for wanted in (
        '"case_event"',
        '"casekeeper.effects.started"',
        '"casekeeper.effects.done"',
        '"casekeeper.effects.failed"',
        '"casekeeper.effects.reconciled"',
        '"effect_escalated"',
        '"casekeeper.checkpoint.failures"',
        "percentile(DurationMs, 50)",
        "percentile(DurationMs, 95)",
    ):
        assert wanted in text, f"the workbook does not show {wanted}"
    [dead_letters] = [i for i in _workbook()["items"] if i["type"] == 10]
    [metric] = dead_letters["content"]["metrics"]
    assert metric["metric"].endswith("--DeadletteredMessages") and metric["splitBy"] == ["EntityName"]
    assert dead_letters["content"]["resourceType"] == metric["namespace"] == "microsoft.servicebus/namespaces"


def test_every_item_uses_the_time_range_parameter() -> None:
    workbook = _workbook()
    [parameters] = [i for i in workbook["items"] if i["type"] == 9]
    declared_names = {p["name"] for p in parameters["content"]["parameters"]}
    for item in workbook["items"]:
        if item["type"] in (3, 10):
            assert item["content"]["timeContextFromParameter"] in declared_names, item["name"]


def test_the_bicep_loads_the_workbook_and_fills_in_every_placeholder() -> None:
    source = WORKBOOK_BICEP.read_text()
    assert "loadTextContent('workbook.json')" in source
    in_json = set(PLACEHOLDER.findall(WORKBOOK.read_text()))
    replaced = set(re.findall(r"replace\(.*, '(__[A-Z_]+__)', \w+\)", source))
    assert in_json and in_json == replaced, (in_json, replaced)
    assert json.loads(PLACEHOLDER.sub("x", WORKBOOK.read_text()))["version"] == "Notebook/1.0"
    [module] = [m for m in declared(MAIN, "module").values() if m.target == "app/workbook.bicep"]
    params = _properties(_path(_body(module.value), "params"))
    assert _text(params["logAnalyticsWorkspaceId"]) == "monitoring.outputs.logAnalyticsId"
    assert _text(params["serviceBusNamespaceId"]) == "serviceBus.outputs.namespaceId"


def test_spans_and_metrics_land_where_the_queries_look(tmp_path: Path) -> None:
    """Through the Azure Monitor exporter: a span is a dependency named after it (AppDependencies), a
    counter point keeps its name (AppMetrics); both carry their attributes as Properties."""
    from azure.monitor.opentelemetry.exporter.export.metrics._exporter import _convert_point_to_envelope
    from azure.monitor.opentelemetry.exporter.export.trace._exporter import _convert_span_to_envelope
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from shared.app.telemetry import Telemetry

    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
    with telemetry.span("case_event", {"casekeeper.case_id": "C-1"}) as span:
        span.set_attribute("casekeeper.settlement", "completed")
    telemetry.reconciled("found")

    [finished] = spans.get_finished_spans()
    dependency = _convert_span_to_envelope(finished).data
    assert dependency is not None and dependency.base_type == "RemoteDependencyData"
    assert dependency.base_data.name == "case_event" and dependency.base_data.type == "InProc"
    assert dependency.base_data.properties["casekeeper.settlement"] == "completed"

    data = reader.get_metrics_data()
    assert data is not None
    [resource] = data.resource_metrics
    [scope] = resource.scope_metrics
    [metric] = [m for m in scope.metrics if m.name == "casekeeper.effects.reconciled"]
    [point] = metric.data.data_points  # type: ignore[union-attr]
    envelope = _convert_point_to_envelope(point, metric.name, resource.resource, scope.scope)
    assert envelope.data is not None
    [value] = envelope.data.base_data.metrics
    assert (value.name, value.value) == ("casekeeper.effects.reconciled", 1.0)
    assert envelope.data.base_data.properties == {"casekeeper.outcome": "found"}
    assert set(PROPERTY_KEY.findall(_queries()["reconciliations"])) == {"casekeeper.outcome"}
