"""The emulators path (docs/func-start.md, path 1), checked without Docker or Core Tools.

Neither runs here, so these tests read what a developer would start: ``emulators/compose.yaml``, the
Service Bus emulator's ``servicebus-config.json`` and the ``local.settings.json`` that
``casekeeper local-settings emulators`` writes, and check them against what Azure gets (the Bicep), what the
app reads (its settings loader) and what the Functions host resolves (the indexed bindings).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import isodate
import pytest
import yaml

import function_app
from shared.app.connections import COSMOS_DB, SERVICE_BUS, parse_cosmos, parse_service_bus
from shared.app.local_settings import emulator_values, main
from shared.app.settings import SETTINGS, Settings
from tests.unit.test_infra import APP, MAIN, _body, _path, _string, _text, param_default, resources_of_type

ROOT = Path(__file__).resolve().parents[2]
EMULATORS = ROOT / "emulators"
COMPOSE = EMULATORS / "compose.yaml"
SERVICE_BUS_CONFIG = EMULATORS / "servicebus-config.json"
CONFIG_MOUNT = "/ServiceBus_Emulator/ConfigFiles/Config.json"  # where the emulator reads its entities
DEFAULTS = {s.name: s.default for s in SETTINGS}


def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def service(name: str) -> dict[str, Any]:
    services = compose()["services"]
    assert name in services, f"compose.yaml has no service {name!r}: {sorted(services)}"
    return services[name]  # type: ignore[no-any-return]


def published(name: str) -> set[int]:
    """Host ports a service publishes (``"HOST:CONTAINER"``)."""
    return {int(str(p).split(":")[0]) for p in service(name).get("ports", [])}


def queue_config() -> dict[str, Any]:
    config = json.loads(SERVICE_BUS_CONFIG.read_text())
    [namespace] = config["UserConfig"]["Namespaces"]
    queues = {q["Name"]: q["Properties"] for q in namespace["Queues"]}
    queue_name = DEFAULTS["CASE_EVENTS_QUEUE"]
    assert queue_name in queues, f"the emulator declares no {queue_name!r} queue: {sorted(queues)}"
    return queues[queue_name]  # type: ignore[no-any-return]


def bicep_queue() -> dict[str, str]:
    """The case-events queue's properties as Azure gets them, parameters resolved to main.bicep's defaults."""
    path = APP / "servicebus.bicep"
    (queue,) = resources_of_type(path, "Microsoft.ServiceBus/namespaces/queues@")
    props = _path(_body(queue.value), "properties")
    # servicebus.bicep's parameter -> the main.bicep parameter main passes to it.
    passed = {
        "lockDuration": "queueLockDuration",
        "duplicateDetectionWindow": "duplicateDetectionWindow",
        "maxDeliveryCount": "queueMaxDeliveryCount",
    }
    found: dict[str, str] = {}
    for key in ("requiresSession", "requiresDuplicateDetection", "lockDuration", "maxDeliveryCount"):
        found[key] = _text(_path(props, key))
    found["duplicateDetectionHistoryTimeWindow"] = _text(_path(props, "duplicateDetectionHistoryTimeWindow"))
    for key, value in found.items():
        if value in passed:
            node = param_default(MAIN, passed[value])
            found[key] = _string(node) or _text(node)
    return found


# -- the compose file --


def test_compose_runs_microsofts_three_emulators_and_sql_server_for_service_bus() -> None:
    images = {name: svc["image"].split(":")[0] for name, svc in compose()["services"].items()}
    assert images == {
        "servicebus": "mcr.microsoft.com/azure-messaging/servicebus-emulator",
        "sqlserver": "mcr.microsoft.com/mssql/server",
        "cosmosdb": "mcr.microsoft.com/cosmosdb/linux/azure-cosmos-emulator",
        "azurite": "mcr.microsoft.com/azure-storage/azurite",
    }
    bus = service("servicebus")
    assert bus["environment"]["SQL_SERVER"] == "sqlserver" and "sqlserver" in bus["depends_on"]
    # The emulator reads its entities from this one path; the file mounted there is the one tested below.
    [mount] = bus["volumes"]
    source, target = mount.split(":")[:2]
    assert target == CONFIG_MOUNT and (COMPOSE.parent / source).resolve() == SERVICE_BUS_CONFIG


def test_nothing_accepts_a_license_or_sets_a_password_on_the_readers_behalf() -> None:
    for name in ("servicebus", "sqlserver"):
        env = service(name)["environment"]
        for key in ("ACCEPT_EULA", "MSSQL_SA_PASSWORD"):
            assert re.fullmatch(r"\$\{" + key + r":\?[^}]+\}", env[key]), f"{name}.{key}: {env[key]!r}"


def test_the_ports_the_generated_settings_use_are_published() -> None:
    values = emulator_values(webhook_secret="x" * 64)
    cosmos = urlparse(parse_cosmos(values[COSMOS_DB]).endpoint)
    assert cosmos.port in published("cosmosdb")
    # Gateway over HTTPS: the host's .NET Cosmos DB extension does not talk to the emulator over HTTP.
    assert cosmos.scheme == "https" and service("cosmosdb")["environment"]["PROTOCOL"] == "https"
    # What the emulator advertises after the first request must be where the settings reach it.
    assert service("cosmosdb")["environment"]["GATEWAY_PUBLIC_ENDPOINT"] == cosmos.hostname
    bus = parse_service_bus(values[SERVICE_BUS])
    assert bus.emulator and ":" not in bus.host, "UseDevelopmentEmulator=true means plain AMQP on 5672"
    assert 5672 in published("servicebus")
    assert values["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"
    assert {10000, 10001, 10002} <= published("azurite")  # blob, queue, table: the host uses all three


# -- the Service Bus emulator's queue against the Bicep's --


def test_the_emulator_declares_the_queue_the_bicep_and_the_settings_name() -> None:
    assert _string(param_default(MAIN, "caseEventsQueueName")) == DEFAULTS["CASE_EVENTS_QUEUE"] == "case-events"
    queue_config()  # raises when the emulator's config has no such queue


def test_sessions_duplicate_detection_lock_and_deliveries_match_the_bicep() -> None:
    emulator, azure = queue_config(), bicep_queue()
    assert emulator["RequiresSession"] is True and azure["requiresSession"] == "true"
    assert emulator["RequiresDuplicateDetection"] is True and azure["requiresDuplicateDetection"] == "true"
    assert emulator["LockDuration"] == azure["lockDuration"] == "PT5M"
    assert str(emulator["MaxDeliveryCount"]) == azure["maxDeliveryCount"] == "10"


# The emulator's own limits on a queue's properties, from its documented configuration schema
# (azure-service-bus-emulator-installer, ServiceBus-Emulator/Schema/Config-schema.json): it refuses a
# config outside them. Azure's limits are wider (a window up to 7 days, lifetimes up to unlimited).
EMULATOR_LIMITS = {
    "DuplicateDetectionHistoryTimeWindow": (timedelta(seconds=5), timedelta(minutes=5)),
    "DefaultMessageTimeToLive": (timedelta(minutes=5), timedelta(hours=1)),
    "LockDuration": (timedelta(seconds=5), timedelta(minutes=5)),
}


def test_the_emulators_queue_stays_within_the_emulators_limits() -> None:
    queue = queue_config()
    for name, (low, high) in EMULATOR_LIMITS.items():
        assert low <= isodate.parse_duration(queue[name]) <= high, f"{name}={queue[name]} outside {low}..{high}"
    assert 1 <= queue["MaxDeliveryCount"] <= 10
    assert queue["DeadLetteringOnMessageExpiration"] is True, "as in Azure: an expired event is kept, not dropped"


def test_where_the_emulator_cannot_follow_the_bicep_it_goes_as_far_as_it_allows() -> None:
    """Azure detects duplicates for a day; the emulator at most for five minutes: its maximum, never less."""
    emulator = isodate.parse_duration(queue_config()["DuplicateDetectionHistoryTimeWindow"])
    azure = isodate.parse_duration(bicep_queue()["duplicateDetectionHistoryTimeWindow"])
    ceiling = EMULATOR_LIMITS["DuplicateDetectionHistoryTimeWindow"][1]
    assert emulator == min(azure, ceiling)
    assert (
        isodate.parse_duration(queue_config()["DefaultMessageTimeToLive"])
        == EMULATOR_LIMITS["DefaultMessageTimeToLive"][1]
    )


# -- the generated local.settings.json --


def written(tmp_path: Path, name: str = "local.settings.json") -> dict[str, Any]:
    out = tmp_path / name
    assert main(["emulators", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["IsEncrypted"] is False
    return document  # type: ignore[no-any-return]


def test_the_generated_file_passes_the_settings_loader_with_both_connection_strings(tmp_path: Path) -> None:
    values = written(tmp_path)["Values"]
    settings = Settings.from_mapping(values)
    assert (settings.store, settings.queue) == ("cosmos", "servicebus")
    assert settings.cosmos_connection_string == values[COSMOS_DB]
    assert settings.service_bus_connection_string == values[SERVICE_BUS]
    assert settings.cosmos_endpoint == "https://localhost:8081/" and settings.cosmos_key
    assert settings.service_bus_namespace == "localhost"
    assert len(settings.webhook_secrets[0]) == 64


def test_each_generated_file_gets_its_own_webhook_secret(tmp_path: Path) -> None:
    first, second = (written(tmp_path, name)["Values"]["WEBHOOK_SECRET"] for name in ("a.json", "b.json"))
    assert first != second


def test_an_existing_file_is_kept_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "local.settings.json"
    out.write_text("{}")
    assert main(["emulators", "--out", str(out)]) == 2
    assert out.read_text() == "{}" and "--force" in capsys.readouterr().err
    assert main(["emulators", "--out", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["Values"]["CASEKEEPER_STORE"] == "cosmos"


def _host_references() -> tuple[set[str], set[str]]:
    """The %SETTING% names and the connection prefixes the host resolves in the indexed bindings."""
    names: set[str] = set()
    connections: set[str] = set()
    for fn in function_app.create_app().get_functions():
        for raw in fn.get_raw_bindings():
            binding = json.loads(raw)
            names |= set(re.findall(r"%(\w+)%", raw))
            if "connection" in binding:
                connections.add(binding["connection"])
    return names, connections


def test_the_host_finds_every_setting_and_connection_its_bindings_name(tmp_path: Path) -> None:
    """Python defaults never reach the host: a %NAME% or connection missing from the file stops a listener."""
    values = written(tmp_path)["Values"]
    names, connections = _host_references()
    assert names == {"CASE_EVENTS_QUEUE", "COSMOS_DATABASE", "CHECKPOINT_HEALTH_SCHEDULE"}
    assert names <= set(values)
    assert connections == {SERVICE_BUS, COSMOS_DB}
    assert connections <= set(values), "the triggers' connection strings"
    assert {"FUNCTIONS_WORKER_RUNTIME", "AzureWebJobsStorage"} <= set(values)


def test_the_timer_sweeps_often_because_the_emulators_change_feed_does_not_drive_the_trigger(tmp_path: Path) -> None:
    values = written(tmp_path)["Values"]
    fields = values["CHECKPOINT_HEALTH_SCHEDULE"].split()
    assert len(fields) == 6 and fields[0] == "*/30", values["CHECKPOINT_HEALTH_SCHEDULE"]
