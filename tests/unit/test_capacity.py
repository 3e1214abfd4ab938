"""Capacity in the Bicep for the scale it claims: the model's formulas, evaluated as written.

``infra/main.bicep`` sizes the function app's instance ceiling and the Cosmos DB autoscale maximum from
``casesPerDay`` and the figures of ``capacityModel`` (docs/performance.md#capacity). No Bicep compiler
runs here, so this test evaluates those integer formulas itself (Bicep's ``/`` on integers truncates, as
Python's ``//`` does) and checks what they promise: at every scale the documentation prices, the
instances the model allows carry the peak's messages, the autoscale maximum covers the peak's request
units, and the figures agree with ``host.json``, the function app's settings and the documentation.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.unit.test_cosmos_indexing import bicep_value
from tests.unit.test_infra import (
    APP,
    MAIN,
    ROOT,
    _allowed,
    _body,
    _host_settings,
    _path,
    _properties,
    _string,
    _text,
    declared,
    param_default,
    resources_of_type,
)

PERFORMANCE = ROOT / "docs" / "performance.md"
SCALES = (100_000, 1_000_000, 10_000_000)
"""The scales docs/performance.md prices."""
FORMULAS = (
    "peakMessagesPerSecond",
    "messagesPerInstancePerSecond",
    "modelMaximumInstanceCount",
    "peakRequestUnitsPerSecond",
    "modelCosmosMaxThroughput",
)


def model() -> dict[str, int]:
    value = declared(MAIN, "var")["capacityModel"].value
    assert value is not None
    figures = bicep_value(value)
    assert all(isinstance(v, int) for v in figures.values()), figures
    return figures


def evaluate(cases_per_day: int) -> dict[str, int]:
    """Every formula of main.bicep's capacity section at ``cases_per_day``."""
    figures = model()
    found: dict[str, int] = {}
    for name in FORMULAS:
        node = declared(MAIN, "var")[name].value
        assert node is not None
        text = _text(node).replace("/", "//")
        text = re.sub(r"capacityModel\.(\w+)", lambda m: str(figures[m.group(1)]), text)
        assert re.fullmatch(r"[\w\s()+\-*/,]+", text), text  # integers, names, arithmetic, min and max only
        namespace = {"min": min, "max": max, "casesPerDay": cases_per_day, **found}
        found[name] = int(eval(text, {"__builtins__": {}}, namespace))
    return found


@pytest.mark.parametrize("cases_per_day", SCALES)
def test_the_model_carries_the_peak_at_every_scale_it_prices(cases_per_day: int) -> None:
    figures, sized = model(), evaluate(cases_per_day)
    per_day_messages = cases_per_day * figures["messagesPerCaseTenths"] / 10
    peak = per_day_messages / 86400 * figures["peakFactor"]
    assert sized["peakMessagesPerSecond"] == int(peak)
    # One session slot handles a message, then waits sessionIdleTimeout for the case's next one.
    slot_rate = 1000 / (figures["sessionIdleMs"] + figures["messageMs"])
    carried = sized["modelMaximumInstanceCount"] * figures["sessionsPerInstance"] * slot_rate
    assert carried >= figures["headroom"] * peak, (carried, peak)
    assert sized["modelMaximumInstanceCount"] <= 1000, "past Flex Consumption's documented ceiling"
    peak_ru = cases_per_day * figures["requestUnitsPerCase"] * figures["peakFactor"] / 86400
    assert sized["modelCosmosMaxThroughput"] >= peak_ru and sized["modelCosmosMaxThroughput"] % 1000 == 0


def test_the_sessions_per_instance_fit_the_measured_cpu_per_message() -> None:
    """Sessions are chosen from the CPU a message costs: an instance's share stays under half of its one vCPU
    (Flex Consumption gives a 2,048 MB instance one vCPU), and the model's CPU figure is at least what
    ``make bench`` measured per case (the table in docs/performance.md)."""
    figures = model()
    assert _text(param_default(MAIN, "instanceMemoryMB")) == "2048"
    per_instance = evaluate(1_000_000)["messagesPerInstancePerSecond"]
    assert per_instance * figures["cpuMsPerMessage"] <= 500
    measured = re.search(r"^\| casekeeper \|[^|]*\|[^|]*\|\s*([\d.]+)\s*\|", PERFORMANCE.read_text(), flags=re.M)
    assert measured, "docs/performance.md lost the bench table's CPU per case"
    assert float(measured.group(1)) <= figures["cpuMsPerMessage"]


def test_the_old_idle_timeout_is_what_capped_the_queue() -> None:
    """The issue's arithmetic: 5 s idle, 8 sessions, 40 instances top out near 60 messages a second,
    under the 10M-a-day peak; the model's settings carry it."""
    old = 40 * 8 / (5 + 0.15)
    assert old < evaluate(10_000_000)["peakMessagesPerSecond"]


def test_host_json_and_the_function_app_use_the_models_session_figures() -> None:
    figures = model()
    service_bus = json.loads((ROOT / "host.json").read_text())["extensions"]["serviceBus"]
    hours, minutes, seconds = (int(x) for x in service_bus["sessionIdleTimeout"].split(":"))
    assert (hours * 3600 + minutes * 60 + seconds) * 1000 == figures["sessionIdleMs"]
    assert service_bus["maxConcurrentSessions"] == 8, "the local host's default, kept for its one SQLite file"
    setting = _host_settings()["AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentSessions"]
    assert _text(setting) == "string(maxConcurrentSessions)"
    module = _properties(_path(_body(declared(MAIN, "module")["functionApp"].value), "params"))
    assert _text(module["maxConcurrentSessions"]) == "capacityModel.sessionsPerInstance"
    assert "modelMaximumInstanceCount" in _text(module["maximumInstanceCount"])
    cosmos = _properties(_path(_body(declared(MAIN, "module")["cosmos"].value), "params"))
    assert "modelCosmosMaxThroughput" in _text(cosmos["autoscaleMaxThroughput"])
    for name in ("maximumInstanceCount", "cosmosAutoscaleMaxThroughput"):
        assert _text(param_default(MAIN, name)) == "0", f"{name}: 0 means sized by the model"


def test_the_case_worker_has_an_always_ready_instance() -> None:
    [entry] = bicep_value(param_default(MAIN, "alwaysReady"))
    assert entry == {"name": "function:case_worker", "instanceCount": 1}
    assert '@bp.function_name("case_worker")' in (ROOT / "shared" / "functions" / "worker.py").read_text()
    for path in (MAIN.parent / "main.parameters.json", MAIN.parent / "main.az.parameters.json"):
        assert "alwaysReady" not in json.loads(path.read_text())["parameters"], f"{path.name} overrides it"


def test_premium_service_bus_is_a_parameter_passed_through() -> None:
    assert _allowed(MAIN, "serviceBusSku") == ["Standard", "Premium"]
    assert _string(param_default(MAIN, "serviceBusSku")) == "Standard"
    params = _properties(_path(_body(declared(MAIN, "module")["serviceBus"].value), "params"))
    assert _text(params["sku"]) == "serviceBusSku"
    assert _text(params["premiumMessagingUnits"]) == "serviceBusPremiumMessagingUnits"
    (namespace,) = resources_of_type(APP / "servicebus.bicep", "Microsoft.ServiceBus/namespaces@")
    capacity = _text(_path(_body(namespace.value), "sku", "capacity"))
    assert capacity == "sku == 'Premium' ? premiumMessagingUnits : 1"


def test_the_documentation_prices_the_same_model() -> None:
    text = PERFORMANCE.read_text()
    section = text[text.index('<a id="capacity"></a>') :]
    figures = model()
    for scale in SCALES:
        sized = evaluate(scale)
        row = next((line for line in section.splitlines() if line.startswith(f"| {scale:,} ")), None)
        assert row is not None, f"no row for {scale:,} cases a day"
        cells = [cell.strip() for cell in row.split("|")]
        assert cells[2:5] == [
            str(sized["peakMessagesPerSecond"]),
            str(sized["modelMaximumInstanceCount"]),
            f"{sized['peakRequestUnitsPerSecond']:,}",
        ], (row, sized)
        assert f"({sized['modelCosmosMaxThroughput']:,})" in cells[5], (row, sized)
    for phrase in (
        f"{figures['sessionsPerInstance']} sessions",
        f"{figures['sessionIdleMs'] // 1000} s",
        f"{figures['requestUnitsPerCase']} RU",
        f"x{figures['peakFactor']}",
    ):
        assert phrase in section, phrase
