"""Settings: read once, every problem named at once."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shared.app.settings import Settings
from shared.core.errors import ConfigurationError

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


def test_rotation_secrets_are_comma_separated() -> None:
    assert Settings.from_mapping({**BASE, "WEBHOOK_SECRET": "new, old ,"}).webhook_secrets == ("new", "old")


def test_an_unresolved_key_vault_reference_is_refused() -> None:
    ref = "@Microsoft.KeyVault(SecretUri=https://v.vault.azure.net/secrets/webhook/)"
    with pytest.raises(ConfigurationError, match="unresolved Key Vault reference"):
        Settings.from_mapping({**BASE, "WEBHOOK_SECRET": ref})
