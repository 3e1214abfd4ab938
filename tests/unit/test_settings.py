"""Settings: read once, every problem named at once."""

from __future__ import annotations

import sqlite3
import time
from decimal import Decimal
from pathlib import Path

import pytest

from casekeeper.errors import ConfigurationError, StoreUnavailable
from shared.app.bootstrap import open_store
from shared.app.settings import Settings

BASE = {"WEBHOOK_SECRET": "s", "CASEKEEPER_QUEUE": "local"}


def test_defaults() -> None:
    s = Settings.from_mapping(BASE)
    assert (s.store, s.queue, s.case_events_queue, s.call_timeout) == ("sqlite", "local", "case-events", 120.0)
    assert (s.rules.tolerance, s.rules.approval_threshold) == (Decimal("5.00"), Decimal("1000.00"))
    assert s.webhook_secrets == ("s",)


def test_every_problem_is_named_at_once() -> None:
    env = {
        "CASEKEEPER_STORE": "cosmos",
        "CASEKEEPER_QUEUE": "servicebus",
        "CALL_TIMEOUT_SECONDS": "ten",
        "VARIANCE_TOLERANCE": "-1",
        "CHECKPOINT_HEALTH_SCHEDULE": "*/5 * * * *",
        "AZURE_OPENAI_ENDPOINT": "https://x",
    }
    with pytest.raises(ConfigurationError) as err:
        Settings.from_mapping(env)
    assert set(err.value.missing) == {
        "CosmosDBConnection__accountEndpoint",
        "ServiceBusConnection__fullyQualifiedNamespace",
        "WEBHOOK_SECRET",
    }
    for name in ("CALL_TIMEOUT_SECONDS", "VARIANCE_TOLERANCE", "CHECKPOINT_HEALTH_SCHEDULE", "AZURE_OPENAI_DEPLOYMENT"):
        assert name in str(err.value)


def test_the_supplier_timeout_must_fit_inside_the_call_timeout() -> None:
    with pytest.raises(ConfigurationError, match="SUPPLIER_TIMEOUT_SECONDS"):
        Settings.from_mapping({**BASE, "CALL_TIMEOUT_SECONDS": "20", "SUPPLIER_TIMEOUT_SECONDS": "5"})
    assert Settings.from_mapping({**BASE, "CALL_TIMEOUT_SECONDS": "20", "SUPPLIER_TIMEOUT_SECONDS": "4.9"})


@pytest.mark.parametrize("name", ["CHECKPOINT_LAG_SECONDS", "CHECKPOINT_MAX_BYTES", "ALERT_NOTIFY_GRACE_SECONDS"])
@pytest.mark.parametrize("raw", ["ten", "-5", "0"])
def test_the_checkpoint_and_alert_numbers_are_refused_when_not_positive(name: str, raw: str) -> None:
    """Before, these three were read after the settings were judged: a wrong one became 1, silently."""
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_mapping({**BASE, name: raw})


def test_the_checkpoint_and_alert_numbers_are_read() -> None:
    env = {"CHECKPOINT_LAG_SECONDS": "7.5", "CHECKPOINT_MAX_BYTES": "4096", "ALERT_NOTIFY_GRACE_SECONDS": "2"}
    s = Settings.from_mapping({**BASE, **env})
    assert (s.checkpoint_lag, s.checkpoint_max_bytes, s.alert_notify_grace) == (7.5, 4096, 2.0)


def test_rotation_secrets_are_comma_separated() -> None:
    assert Settings.from_mapping({**BASE, "WEBHOOK_SECRET": "new, old ,"}).webhook_secrets == ("new", "old")


def test_an_unresolved_key_vault_reference_is_refused() -> None:
    ref = "@Microsoft.KeyVault(SecretUri=https://v.vault.azure.net/secrets/webhook/)"
    with pytest.raises(ConfigurationError, match="unresolved Key Vault reference"):
        Settings.from_mapping({**BASE, "WEBHOOK_SECRET": ref})


AZURE_READY = {
    "WEBHOOK_SECRET": "s",
    "CASEKEEPER_STORE": "cosmos",
    "CosmosDBConnection__accountEndpoint": "https://x.documents.azure.com:443/",
    "CASEKEEPER_QUEUE": "servicebus",
    "ServiceBusConnection__fullyQualifiedNamespace": "x.servicebus.windows.net",
}


@pytest.mark.parametrize("marker", ["WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME"])
def test_in_azure_the_sqlite_store_and_the_local_queue_are_refused_together(marker: str) -> None:
    env = {**AZURE_READY, "CASEKEEPER_STORE": "sqlite", "CASEKEEPER_QUEUE": "local", marker: "abc123"}
    with pytest.raises(ConfigurationError) as err:
        Settings.from_mapping(env)
    text = str(err.value)
    assert "CASEKEEPER_STORE=sqlite is refused" in text and "CASEKEEPER_QUEUE=local is refused" in text
    assert marker in text and "per instance" in text


def test_in_azure_the_default_store_is_sqlite_and_so_refused() -> None:
    env = {k: v for k, v in AZURE_READY.items() if k != "CASEKEEPER_STORE"}
    with pytest.raises(ConfigurationError, match="CASEKEEPER_STORE=sqlite is refused") as err:
        Settings.from_mapping({**env, "WEBSITE_SITE_NAME": "casekeeper-prod"})
    assert "CASEKEEPER_QUEUE" not in str(err.value)


def test_in_azure_the_local_queue_alone_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="CASEKEEPER_QUEUE=local is refused") as err:
        Settings.from_mapping({**AZURE_READY, "CASEKEEPER_QUEUE": "local", "WEBSITE_INSTANCE_ID": "i-1"})
    assert "CASEKEEPER_STORE" not in str(err.value)


def test_in_azure_cosmos_and_service_bus_start() -> None:
    settings = Settings.from_mapping({**AZURE_READY, "WEBSITE_INSTANCE_ID": "i-1", "WEBSITE_SITE_NAME": "ck"})
    assert (settings.store, settings.queue) == ("cosmos", "servicebus")


def test_outside_azure_sqlite_and_the_local_queue_start() -> None:
    # An empty marker is not a marker: only a set variable means Azure.
    settings = Settings.from_mapping({**BASE, "CASEKEEPER_STORE": "sqlite", "WEBSITE_INSTANCE_ID": " "})
    assert (settings.store, settings.queue) == ("sqlite", "local")


# -- telemetry: the trace sampling ratio and Agent Framework's spans --


def test_tracing_defaults_keep_every_trace_and_leave_the_frameworks_spans_off() -> None:
    s = Settings.from_mapping(BASE)
    assert (s.trace_sampling_ratio, s.agent_framework_spans) == (1.0, False)


@pytest.mark.parametrize(("raw", "ratio"), [("0", 0.0), ("0.25", 0.25), (" 0.1 ", 0.1), ("1", 1.0), ("1.000", 1.0)])
def test_a_sampling_ratio_from_0_to_1_is_accepted(raw: str, ratio: float) -> None:
    assert Settings.from_mapping({**BASE, "TRACE_SAMPLING_RATIO": raw}).trace_sampling_ratio == ratio


@pytest.mark.parametrize("raw", ["1.5", "-0.1", "25%", "a quarter", "nan", "inf", "1e400"])
def test_a_sampling_ratio_outside_0_to_1_is_refused_with_its_range(raw: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_mapping({**BASE, "TRACE_SAMPLING_RATIO": raw})
    assert f"TRACE_SAMPLING_RATIO must be a number from 0 to 1 (the share of traces kept, e.g. 0.25), not {raw!r}" in (
        str(err.value)
    )


@pytest.mark.parametrize(("raw", "on"), [("true", True), ("TRUE", True), ("1", True), ("false", False), ("no", False)])
def test_agent_framework_spans_is_a_flag(raw: str, on: bool) -> None:
    assert Settings.from_mapping({**BASE, "AGENT_FRAMEWORK_SPANS": raw}).agent_framework_spans is on


def test_agent_framework_spans_refuses_anything_else() -> None:
    with pytest.raises(ConfigurationError, match="AGENT_FRAMEWORK_SPANS must be true or false, not 'verbose'"):
        Settings.from_mapping({**BASE, "AGENT_FRAMEWORK_SPANS": "verbose"})


# -- each connection in either form the Functions extensions accept (shared/app/connections.py) --

EMULATOR_BUS = (
    "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
    "UseDevelopmentEmulator=true;"
)
EMULATOR_COSMOS = "AccountEndpoint=https://localhost:8081/;AccountKey=a2V5a2V5a2V5a2V5==;"
CLOUD = {"WEBHOOK_SECRET": "s", "CASEKEEPER_STORE": "cosmos", "CASEKEEPER_QUEUE": "servicebus"}


def test_connection_strings_stand_in_for_the_identity_based_settings() -> None:
    s = Settings.from_mapping({**CLOUD, "ServiceBusConnection": EMULATOR_BUS, "CosmosDBConnection": EMULATOR_COSMOS})
    assert (s.service_bus_connection_string, s.service_bus_namespace) == (EMULATOR_BUS, "localhost")
    assert s.cosmos_connection_string == EMULATOR_COSMOS
    # The store is built from endpoint and key, as for the Cosmos test server.
    assert (s.cosmos_endpoint, s.cosmos_key) == ("https://localhost:8081/", "a2V5a2V5a2V5a2V5==")


def test_identity_based_settings_carry_no_connection_string() -> None:
    s = Settings.from_mapping(AZURE_READY)
    assert s.service_bus_connection_string is None and s.cosmos_connection_string is None
    assert (s.service_bus_namespace, s.cosmos_key) == ("x.servicebus.windows.net", None)


@pytest.mark.parametrize(
    ("string_name", "identity_name"),
    [
        ("ServiceBusConnection", "ServiceBusConnection__fullyQualifiedNamespace"),
        ("CosmosDBConnection", "CosmosDBConnection__accountEndpoint"),
    ],
)
def test_neither_form_is_an_error_naming_both(string_name: str, identity_name: str) -> None:
    env = {k: v for k, v in {**AZURE_READY}.items() if k != identity_name}
    with pytest.raises(ConfigurationError) as err:
        Settings.from_mapping(env)
    assert err.value.missing == (identity_name,)
    assert f"{identity_name} or {string_name}" in str(err.value)


def test_both_forms_of_one_connection_are_refused() -> None:
    env = {**AZURE_READY, "ServiceBusConnection": EMULATOR_BUS, "CosmosDBConnection": EMULATOR_COSMOS}
    with pytest.raises(ConfigurationError) as err:
        Settings.from_mapping(env)
    text = str(err.value)
    assert "set ServiceBusConnection (a connection string) or ServiceBusConnection__fullyQualifiedNamespace" in text
    assert "set CosmosDBConnection (a connection string) or CosmosDBConnection__accountEndpoint" in text


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        ("ServiceBusConnection", "Endpoint=https://x;SharedAccessKeyName=k;SharedAccessKey=SECRETKEY", "sb://"),
        ("ServiceBusConnection", "Endpoint=sb://x;SharedAccessKeyName=k", "SharedAccessKey"),
        ("ServiceBusConnection", EMULATOR_BUS + "EntityPath=case-events", "EntityPath"),
        ("ServiceBusConnection", "just-a-hostname", "Key=Value"),
        ("CosmosDBConnection", "AccountEndpoint=https://localhost:8081/", "AccountKey"),
        ("CosmosDBConnection", "AccountEndpoint=localhost:8081;AccountKey=SECRETKEY", "http(s) URL"),
    ],
)
def test_a_malformed_connection_string_is_named_and_its_key_never_echoed(name: str, value: str, complaint: str) -> None:
    env = {**CLOUD, "ServiceBusConnection": EMULATOR_BUS, "CosmosDBConnection": EMULATOR_COSMOS, name: value}
    with pytest.raises(ConfigurationError) as err:
        Settings.from_mapping(env)
    assert name in str(err.value) and complaint in str(err.value)
    assert "SECRETKEY" not in str(err.value)


def test_cosmos_key_goes_with_the_endpoint_not_with_a_connection_string() -> None:
    env = {**CLOUD, "ServiceBusConnection": EMULATOR_BUS, "CosmosDBConnection": EMULATOR_COSMOS, "COSMOS_KEY": "k"}
    with pytest.raises(ConfigurationError, match="COSMOS_KEY goes with CosmosDBConnection__accountEndpoint"):
        Settings.from_mapping(env)


def test_the_local_queue_and_sqlite_need_neither_connection() -> None:
    s = Settings.from_mapping(BASE)
    assert s.service_bus_connection_string is None and s.cosmos_connection_string is None


def test_the_store_timeout_is_unset_by_default_and_refused_when_not_a_positive_number() -> None:
    assert Settings.from_mapping(BASE).store_timeout is None
    assert Settings.from_mapping({**BASE, "STORE_TIMEOUT_SECONDS": "2.5"}).store_timeout == 2.5
    with pytest.raises(ConfigurationError, match="STORE_TIMEOUT_SECONDS"):
        Settings.from_mapping({**BASE, "STORE_TIMEOUT_SECONDS": "0"})


def test_the_store_timeout_is_how_long_a_sqlite_write_waits_for_a_lock_held_elsewhere(tmp_path: Path) -> None:
    """Another process's ``BEGIN IMMEDIATE`` (here: another connection) holds the write lock: a write
    gives up after ``STORE_TIMEOUT_SECONDS``, not SQLite's default 30 s, and says the store is unavailable."""
    path = tmp_path / "store.sqlite"
    settings = Settings.from_mapping({**BASE, "CASEKEEPER_SQLITE_PATH": str(path), "STORE_TIMEOUT_SECONDS": "0.5"})
    store = open_store(settings)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.create("cases", "C-1", "C-1", {"id": "C-1"})
        assert 0.4 < time.monotonic() - started < 5.0
        holder.execute("ROLLBACK")
        store.create("cases", "C-1", "C-1", {"id": "C-1"})  # the lock released, the store serves again
    finally:
        holder.close()
        store.close()
