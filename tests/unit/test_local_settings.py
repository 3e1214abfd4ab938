"""The provisioned-environment path (docs/func-start.md, path 2), checked without azd or Azure.

``casekeeper local-settings azd`` turns the azd environment (Bicep outputs plus the values set with
``azd env set``) into an identity-based ``local.settings.json``; ``azure.yaml`` runs it after every
provision; the Bicep grants azd's signed-in principal the data roles that file needs.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from casekeeper.errors import ConfigurationError
from shared.app.connections import COSMOS_DB, COSMOS_DB_ENDPOINT, SERVICE_BUS, SERVICE_BUS_NAMESPACE
from shared.app.local_settings import AZD_OUTPUTS, STORAGE_OUTPUT, azd_values, main
from shared.app.settings import Settings
from tests.unit.test_infra import (
    APP,
    AZD_PARAMETERS,
    BUILT_IN_ROLES,
    COSMOS_DATA_CONTRIBUTOR,
    GUID,
    MAIN,
    _azd_references,
    _body,
    _path,
    _properties,
    _text,
    declared,
    resources_of_type,
)

ROOT = Path(__file__).resolve().parents[2]

# What `azd env get-values` prints after `azd provision` of infra/main.bicep (outputs under their declared
# names), plus what the README's azd steps set.
AZD_ENV = {
    "AZURE_ENV_NAME": "dev",
    "AZURE_LOCATION": "swedencentral",
    "AZURE_PRINCIPAL_ID": "11111111-2222-3333-4444-555555555555",
    "cosmosEndpoint": "https://cosmos-casekeeper-abc.documents.azure.com:443/",
    "cosmosDatabaseName": "casekeeper",
    "serviceBusFullyQualifiedNamespace": "sb-casekeeper-abc.servicebus.windows.net",
    "caseEventsQueueName": "case-events",
    "storageAccountName": "stcasekeeperabc",
    "functionAppName": "func-casekeeper-abc",
    "WEBHOOK_SECRET": "w" * 40,
    "SUPPLIER_PORTAL_URL": "https://supplier.example.com",
}


def test_the_azd_form_is_identity_based_and_passes_the_settings_loader() -> None:
    values = azd_values(AZD_ENV)
    settings = Settings.from_mapping(values)
    assert (settings.store, settings.queue) == ("cosmos", "servicebus")
    assert settings.cosmos_endpoint == AZD_ENV["cosmosEndpoint"]
    assert settings.service_bus_namespace == AZD_ENV["serviceBusFullyQualifiedNamespace"]
    # The signed-in developer's identity: no key, no connection string, no managed-identity selection.
    assert settings.cosmos_key is None
    assert settings.cosmos_connection_string is None and settings.service_bus_connection_string is None
    assert COSMOS_DB not in values and SERVICE_BUS not in values
    assert not [name for name in values if name.endswith(("__credential", "__clientId"))]
    assert values[COSMOS_DB_ENDPOINT] and values[SERVICE_BUS_NAMESPACE]
    assert values["WEBHOOK_SECRET"] == AZD_ENV["WEBHOOK_SECRET"]
    assert values["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"


def test_upper_cased_outputs_are_read_too() -> None:
    upper = {(k.upper() if k in AZD_OUTPUTS.values() else k): v for k, v in AZD_ENV.items()}
    assert azd_values(upper) == azd_values(AZD_ENV)


def test_host_storage_in_azure_is_identity_based_on_the_environments_account() -> None:
    values = azd_values(AZD_ENV, host_storage="azure")
    assert values["AzureWebJobsStorage__accountName"] == AZD_ENV["storageAccountName"]
    assert "AzureWebJobsStorage" not in values
    Settings.from_mapping(values)


def test_missing_outputs_are_named_together() -> None:
    env = {k: v for k, v in AZD_ENV.items() if k not in ("cosmosEndpoint", "caseEventsQueueName", STORAGE_OUTPUT)}
    with pytest.raises(ConfigurationError) as err:
        azd_values(env, host_storage="azure")
    assert set(err.value.missing) == {"cosmosEndpoint", "caseEventsQueueName", STORAGE_OUTPUT}
    assert "azd provision" in str(err.value)


def test_every_output_read_is_one_main_bicep_declares() -> None:
    outputs = declared(MAIN, "output")
    for name in [*AZD_OUTPUTS.values(), STORAGE_OUTPUT]:
        assert name in outputs, f"main.bicep has no output {name}"


def _dotenv(env: dict[str, str]) -> str:
    """The azd environment as `azd env get-values` prints it: NAME="value" lines."""
    return "".join(f'{name}="{value}"\n' for name, value in env.items())


def test_the_command_reads_azd_env_get_values_output_and_writes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "local.settings.json"
    monkeypatch.setattr("sys.stdin", io.StringIO(_dotenv(AZD_ENV)))
    assert main(["azd", "--from", "-", "--out", str(out)]) == 0
    values = json.loads(out.read_text())["Values"]
    assert values == azd_values(AZD_ENV)
    # The warning that matters: this host competes with the deployed one for the queue and the leases.
    assert "deployed app" in capsys.readouterr().err


def test_inside_the_hook_the_values_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AZD_ENV.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "local.settings.json"
    assert main(["azd", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["Values"][COSMOS_DB_ENDPOINT] == AZD_ENV["cosmosEndpoint"]


def test_a_file_the_loader_would_refuse_is_not_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in AZD_ENV.items() if k != "WEBHOOK_SECRET"}
    source = tmp_path / "azd.env"
    source.write_text(_dotenv(env))
    out = tmp_path / "local.settings.json"
    assert main(["azd", "--from", str(source), "--out", str(out)]) == 2
    assert not out.exists() and "WEBHOOK_SECRET" in capsys.readouterr().err


def test_azure_yaml_writes_local_settings_after_every_provision() -> None:
    hooks = yaml.safe_load((ROOT / "azure.yaml").read_text())["hooks"]["postprovision"]
    for shell in ("posix", "windows"):
        assert hooks[shell]["run"].split() == ["python", "-m", "shared.app.local_settings", "azd", "--force"]
        # A developer without the project's virtual environment still gets the provisioned resources.
        assert hooks[shell]["continueOnError"] is True


# -- the developer's data roles --


def test_azd_passes_the_signed_in_principal_to_the_bicep() -> None:
    references = _azd_references()
    assert references["principalId"] == ("AZURE_PRINCIPAL_ID", "")
    assert references["principalType"] == ("AZURE_PRINCIPAL_TYPE", "User")
    assert "principalId" in json.loads(AZD_PARAMETERS.read_text())["parameters"]
    module = declared(MAIN, "module")["developerRbac"]
    assert _text(module.value).startswith("if (!empty(principalId))"), "no principal: no developer roles"
    assert _text(_path(_body(module.value), "params", "principalId")) == "principalId"


def test_the_developer_gets_the_data_roles_local_settings_needs() -> None:
    path = APP / "developer-rbac.bicep"
    (cosmos,) = resources_of_type(path, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@")
    props = _path(_body(cosmos.value), "properties")
    assert COSMOS_DATA_CONTRIBUTOR in path.read_text() and "/sqlRoleDefinitions/" in _text(props)
    assert _text(_path(props, "principalId")) == "principalId"
    roles = {BUILT_IN_ROLES[i] for i in GUID.findall(path.read_text()) if i in BUILT_IN_ROLES}
    assert roles == {
        "Azure Service Bus Data Owner",
        "Storage Blob Data Owner",
        "Storage Queue Data Contributor",
        "Storage Table Data Contributor",
    }
    for assignment in resources_of_type(path, "Microsoft.Authorization/roleAssignments@"):
        props = _properties(_path(_body(assignment.value), "properties"))
        assert _text(props["principalId"]) == "principalId"
        assert _text(props["principalType"]) == "principalType", "a user, not the app's service principal"
