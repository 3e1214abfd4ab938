"""The model's settings: key or identity, API version and timeout, validated like the others."""

from __future__ import annotations

import pytest

from casekeeper.errors import ConfigurationError
from shared.app.settings import MAX_MODEL_TIMEOUT, Settings
from shared.workflow.model_client import DEFAULT_API_VERSION

BASE = {"WEBHOOK_SECRET": "s", "CASEKEEPER_QUEUE": "local"}
MODEL = {**BASE, "AZURE_OPENAI_ENDPOINT": "https://x.openai.azure.com", "AZURE_OPENAI_DEPLOYMENT": "gpt-4o"}


def test_without_an_endpoint_the_rules_propose() -> None:
    assert Settings.from_mapping(BASE).model is None


def test_identity_by_default_a_key_when_given() -> None:
    identity = Settings.from_mapping(MODEL).model
    assert identity is not None
    assert (identity.auth, identity.api_version, identity.timeout) == ("identity", DEFAULT_API_VERSION, 30.0)
    keyed = Settings.from_mapping({**MODEL, "AZURE_OPENAI_API_KEY": "k", "AZURE_OPENAI_TIMEOUT_SECONDS": "12.5"}).model
    assert keyed is not None
    assert (keyed.auth, keyed.api_key, keyed.timeout) == ("key", "k", 12.5)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"AZURE_OPENAI_TIMEOUT_SECONDS": "0"}, "AZURE_OPENAI_TIMEOUT_SECONDS must be positive"),
        (
            {"AZURE_OPENAI_TIMEOUT_SECONDS": "600"},
            f"AZURE_OPENAI_TIMEOUT_SECONDS must be at most {MAX_MODEL_TIMEOUT:g}",
        ),
        ({"AZURE_OPENAI_TIMEOUT_SECONDS": "soon"}, "AZURE_OPENAI_TIMEOUT_SECONDS must be a number"),
        ({"AZURE_OPENAI_API_VERSION": "latest"}, "AZURE_OPENAI_API_VERSION must look like"),
        ({"AZURE_OPENAI_ENDPOINT": "http://x.openai.azure.com"}, "AZURE_OPENAI_ENDPOINT must be an https:// URL"),
        (
            {"AZURE_OPENAI_API_KEY": "@Microsoft.KeyVault(SecretUri=https://v.vault.azure.net/secrets/openai-api-key)"},
            "AZURE_OPENAI_API_KEY is an unresolved Key Vault reference",
        ),
        ({"AZURE_OPENAI_DEPLOYMENT": ""}, "AZURE_OPENAI_ENDPOINT and AZURE_OPENAI_DEPLOYMENT go together"),
    ],
)
def test_a_bad_model_setting_is_named(overrides: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        Settings.from_mapping({**MODEL, **overrides})
    assert named in str(err.value)


def test_plain_http_is_allowed_on_loopback_only_for_the_local_stand_in() -> None:
    local = Settings.from_mapping({**MODEL, "AZURE_OPENAI_ENDPOINT": "http://127.0.0.1:8766"}).model
    assert local is not None and local.endpoint == "http://127.0.0.1:8766"
