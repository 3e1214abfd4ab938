"""Static checks of the Bicep under ``infra/``: no Bicep compiler is reachable here.

Every ``.bicep`` file must parse with the tree-sitter Bicep grammar without an ERROR or MISSING node. The
parse trees are then checked for what the code depends on: the app-setting names it reads, the Cosmos DB
containers and partition keys, the queue's sessions and duplicate detection, the Cosmos DB data-plane role,
module parameters and outputs, and a parameters file that names only declared parameters and no secret.

What this cannot check (only ``az deployment group what-if`` or a deployment can): resource types, API
versions and property names as Azure Resource Manager knows them, and Bicep's type checking.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import tree_sitter
import tree_sitter_bicep
import yaml

from casekeeper.core.ports import CONTAINERS
from shared.app.settings import SETTINGS
from tests.support.index_with_worker import WORKER_PYTHON

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MAIN = INFRA / "main.bicep"
APP = INFRA / "app"
BICEP_FILES = sorted(INFRA.rglob("*.bicep"))

# The names the code and the host read, as the infra brief lists them. FUNCTIONS_EXTENSION_VERSION is
# not here: Flex Consumption sets it (~4) and deprecates it as an app setting (checked separately).
REQUIRED_APP_SETTINGS = (
    "CASEKEEPER_STORE",
    "CosmosDBConnection__accountEndpoint",
    "COSMOS_DATABASE",
    "ServiceBusConnection__fullyQualifiedNamespace",
    "CASE_EVENTS_QUEUE",
    "CALL_TIMEOUT_SECONDS",
    "SUPPLIER_PORTAL_URL",
    "VARIANCE_TOLERANCE",
    "APPROVAL_THRESHOLD",
    "CHECKPOINT_HEALTH_SCHEDULE",
    "ALERT_WEBHOOK_URL",
    "AZURE_OPENAI_ENDPOINT",
    "AZURE_OPENAI_DEPLOYMENT",
    "WEBHOOK_SECRET",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "AzureWebJobsStorage__accountName",
)
# Names in shared.app.settings.SETTINGS that stay unset in Azure on purpose (local development and tests).
LOCAL_ONLY_SETTINGS = frozenset(
    {
        "CASEKEEPER_SQLITE_PATH",
        "CASEKEEPER_LOCAL_QUEUE_PATH",
        "COSMOS_KEY",
        # Each store's own default in Azure; tests and chaos runs shorten it to provoke outages quickly.
        "STORE_TIMEOUT_SECONDS",
        # Telemetry goes to Application Insights in Azure; these choose OTLP or a console file elsewhere.
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "CASEKEEPER_TELEMETRY_FILE",
        # The connection-string forms, for the emulators: keys are disabled on the Azure resources.
        "ServiceBusConnection",
        "CosmosDBConnection",
    }
)
# Flex Consumption sets these itself; the Functions docs list them as deprecated app settings there.
PLATFORM_SETTINGS = ("FUNCTIONS_EXTENSION_VERSION", "FUNCTIONS_WORKER_RUNTIME")

EXPECTED_CONTAINERS = {
    "cases": "/id",
    "effects": "/caseId",
    "checkpoints": "/caseId",
    "health": "/kind",
    "leases": "/id",
}
COSMOS_DATA_CONTRIBUTOR = "00000000-0000-0000-0000-000000000002"
# Built-in Azure role definition ids, which are the same in every tenant.
BUILT_IN_ROLES = {
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b": "Storage Blob Data Owner",
    "974c5e8b-45b9-4653-ba55-5f855dd0fb88": "Storage Queue Data Contributor",
    "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3": "Storage Table Data Contributor",
    "090c5cfd-751d-490a-894a-3ce6f1109419": "Azure Service Bus Data Owner",
    "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39": "Azure Service Bus Data Sender",
    "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0": "Azure Service Bus Data Receiver",
    "4633458b-17de-408a-b874-0445c86b69e6": "Key Vault Secrets User",
    "3913510d-42f4-4e42-8a64-420c390055eb": "Monitoring Metrics Publisher",
    "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd": "Cognitive Services OpenAI User",
}
GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# -- parsing --


@functools.cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bicep.language()))


@dataclass(frozen=True)
class Problem:
    line: int
    column: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.line}:{self.column}: {self.kind} {self.text!r}"


def syntax_problems(source: bytes) -> list[Problem]:
    """Every ERROR and MISSING node, with its 1-based line and column and the text it covers."""
    tree = _parser().parse(source)
    found: list[Problem] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            kind = f"MISSING {node.type}" if node.is_missing else "ERROR"
            text = node.text.decode("utf-8", "replace") if node.text else ""
            found.append(Problem(node.start_point[0] + 1, node.start_point[1] + 1, kind, text[:120]))
        stack.extend(reversed(node.children))
    return sorted(found, key=lambda p: (p.line, p.column))


@functools.cache
def _tree(path: Path) -> tree_sitter.Tree:
    return _parser().parse(path.read_bytes())


def _text(node: tree_sitter.Node) -> str:
    return node.text.decode("utf-8") if node.text else ""


def _string(node: tree_sitter.Node | None) -> str | None:
    """The value of a string literal without interpolation, else None."""
    if node is None or node.type != "string":
        return None
    parts: list[str] = []
    for child in node.children:
        if child.type == "interpolation":
            return None
        if child.type == "string_content":
            parts.append(_text(child))
        elif child.type == "escape_sequence":
            parts.append(_text(child)[1:])
    return "".join(parts)


def _properties(obj: tree_sitter.Node) -> dict[str, tree_sitter.Node]:
    """Key -> value node of an object literal's properties."""
    props: dict[str, tree_sitter.Node] = {}
    for prop in obj.named_children:
        if prop.type != "object_property":
            continue
        key, value = prop.named_children[0], prop.named_children[-1]
        name = _string(key) if key.type == "string" else _text(key)
        assert name is not None, f"interpolated property key {_text(key)!r}"
        props[name] = value
    return props


def _path(obj: tree_sitter.Node, *keys: str) -> tree_sitter.Node:
    node = obj
    for key in keys:
        assert node.type == "object", f"{key!r}: not an object but {node.type}: {_text(node)[:80]!r}"
        props = _properties(node)
        assert key in props, f"no property {key!r} in {sorted(props)}"
        node = props[key]
    return node


def _body(value: tree_sitter.Node | None) -> tree_sitter.Node:
    """The object of a declaration value, through ``if (...) {}`` and ``[for ...: {}]``."""
    assert value is not None, "declaration without a value"
    if value.type == "if_statement":
        return value.named_children[-1]
    if value.type == "for_statement":
        body = value.child_by_field_name("body")
        assert body is not None
        return body
    return value


@dataclass(frozen=True)
class Declaration:
    kind: str  # param, var, resource, module, output
    name: str
    node: tree_sitter.Node
    decorators: tuple[str, ...]
    decorator_source: str = ""

    @property
    def value(self) -> tree_sitter.Node | None:
        """What follows ``=`` (None for a parameter without a default)."""
        children = self.node.children
        for i, child in enumerate(children):
            if child.type == "=":
                return children[i + 1]
        return None

    @property
    def target(self) -> str:
        """A resource's type string or a module's path."""
        value = _string(self.node.named_children[1])
        assert value is not None
        return value


_KINDS = {
    "parameter_declaration": "param",
    "variable_declaration": "var",
    "resource_declaration": "resource",
    "module_declaration": "module",
    "output_declaration": "output",
}


@functools.cache
def declarations(path: Path) -> tuple[Declaration, ...]:
    """Top-level declarations, each with the names of the decorators written above it."""
    found: list[Declaration] = []
    pending: tuple[str, ...] = ()
    source = ""
    for node in _tree(path).root_node.named_children:
        if node.type == "decorators":
            pending = tuple(_text(call.named_children[0]) for dec in node.named_children for call in dec.named_children)
            source = _text(node)
            continue
        if node.type in _KINDS:
            name = next(c for c in node.named_children if c.type == "identifier")
            found.append(Declaration(_KINDS[node.type], _text(name), node, pending, source))
        if node.type != "comment":
            pending, source = (), ""
    return tuple(found)


def declared(path: Path, kind: str) -> dict[str, Declaration]:
    return {d.name: d for d in declarations(path) if d.kind == kind}


def resources_of_type(path: Path, type_prefix: str) -> list[Declaration]:
    return [d for d in declarations(path) if d.kind == "resource" and d.target.startswith(type_prefix)]


def param_default(path: Path, name: str) -> tree_sitter.Node:
    value = declared(path, "param")[name].value
    assert value is not None, f"param {name} in {path.name} has no default"
    return value


def _comments(path: Path) -> str:
    found: list[str] = []
    stack = [_tree(path).root_node]
    while stack:
        node = stack.pop()
        if node.type == "comment":
            found.append(_text(node))
        stack.extend(node.children)
    return "\n".join(found)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- syntax --


def test_infra_has_the_expected_bicep_files() -> None:
    names = {_relative(p) for p in BICEP_FILES}
    assert "infra/main.bicep" in names
    assert {
        "infra/app/functionapp.bicep",
        "infra/app/cosmos.bicep",
        "infra/app/servicebus.bicep",
        "infra/app/rbac.bicep",
    } <= names


@pytest.mark.parametrize("path", BICEP_FILES, ids=_relative)
def test_bicep_file_parses_without_errors(path: Path) -> None:
    problems = syntax_problems(path.read_bytes())
    for problem in problems:
        print(f"{_relative(path)}:{problem}")
    assert not problems, f"{_relative(path)}: " + "; ".join(map(str, problems))


@pytest.mark.parametrize(
    "source",
    [
        "resource r 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n  name: 'x'\n",
        "param p string =\n",
        "var v = {\n  a: 'x'\n  b:\n}\n",
        "var v = [\n  'a'\n",
    ],
    ids=["unclosed-object", "param-without-value", "property-without-value", "unclosed-array"],
)
def test_the_syntax_check_catches_broken_bicep(source: str) -> None:
    assert syntax_problems(source.encode()), "the grammar accepted broken Bicep: the syntax test would prove nothing"


def test_no_keys_or_connection_strings_in_infra() -> None:
    for path in BICEP_FILES:
        text = path.read_text()
        for marker in ("listKeys(", "listConnectionStrings(", "AccountKey=", "SharedAccessKey", "primaryKey"):
            assert marker not in text, f"{_relative(path)} uses {marker}: every connection is identity-based"


# -- app settings --


def _application_settings() -> dict[str, tree_sitter.Node]:
    value = declared(MAIN, "var")["appSettings"].value
    assert value is not None and value.type == "object"
    return _properties(value)


def _host_settings() -> dict[str, tree_sitter.Node]:
    value = declared(APP / "functionapp.bicep", "var")["hostSettings"].value
    assert value is not None and value.type == "array"
    found: dict[str, tree_sitter.Node] = {}
    for item in value.named_children:
        if item.type != "object":
            continue
        props = _properties(item)
        name = _string(props["name"])
        assert name is not None and name not in found, f"duplicate or computed host setting {_text(props['name'])}"
        found[name] = props["value"]
    return found


def test_every_required_app_setting_is_emitted() -> None:
    app, host = _application_settings(), _host_settings()
    assert not set(app) & set(host), f"set twice: {sorted(set(app) & set(host))}"
    emitted = set(app) | set(host)
    assert not set(REQUIRED_APP_SETTINGS) - emitted, f"missing: {sorted(set(REQUIRED_APP_SETTINGS) - emitted)}"


def test_every_code_setting_is_documented_and_emitted_unless_local_only() -> None:
    header = _comments(MAIN)
    emitted = set(_application_settings()) | set(_host_settings())
    names = {s.name for s in SETTINGS}
    undocumented = sorted(n for n in names | set(REQUIRED_APP_SETTINGS) if n not in header)
    assert not undocumented, f"main.bicep's header does not list: {undocumented}"
    missing = sorted(names - LOCAL_ONLY_SETTINGS - emitted)
    assert not missing, f"read by shared/app/settings.py but not set by infra: {missing}"
    local = sorted(LOCAL_ONLY_SETTINGS & emitted)
    assert not local, f"local-only settings set in Azure: {local}"


def test_identity_based_connections_name_the_user_assigned_identity() -> None:
    app, host = _application_settings(), _host_settings()
    settings = {**app, **host}
    for connection in ("AzureWebJobsStorage", "CosmosDBConnection", "ServiceBusConnection"):
        assert _string(settings[f"{connection}__credential"]) == "managedidentity", connection
        assert f"{connection}__clientId" in settings, connection
    assert "AZURE_CLIENT_ID" in host, "DefaultAzureCredential needs the user-assigned identity's client id"


def test_fixed_app_setting_values() -> None:
    app = _application_settings()
    assert _string(app["CASEKEEPER_STORE"]) == "cosmos"
    assert _string(app["CASEKEEPER_QUEUE"]) == "servicebus"
    schedule = _string(param_default(MAIN, "checkpointHealthSchedule"))
    assert schedule is not None and len(schedule.split()) == 6, f"not 6-field NCRONTAB: {schedule!r}"
    assert _string(param_default(MAIN, "caseEventsQueueName")) == "case-events"
    assert _string(param_default(MAIN, "cosmosDatabaseName")) == "casekeeper"


def test_secrets_come_from_key_vault_and_secure_parameters() -> None:
    app = _application_settings()
    reference = _text(app["WEBHOOK_SECRET"])
    assert reference.startswith("'@Microsoft.KeyVault(SecretUri="), reference
    assert "@Microsoft.KeyVault(SecretUri=" in _text(app["ALERT_WEBHOOK_URL"])
    params = declared(MAIN, "param")
    for name in ("webhookSecret", "alertWebhookUrl"):
        assert "secure" in params[name].decorators, f"param {name} is not @secure()"
    assert params["webhookSecret"].value is None, "the webhook secret must have no default"
    vault = declared(APP / "keyvault.bicep", "param")
    assert "secure" in vault["webhookSecret"].decorators and "secure" in vault["alertWebhookUrl"].decorators
    site = resources_of_type(APP / "functionapp.bicep", "Microsoft.Web/sites@")[0]
    assert "keyVaultReferenceIdentity" in _properties(_path(_body(site.value), "properties"))


def test_telemetry_is_opentelemetry_in_host_and_worker() -> None:
    host = json.loads((ROOT / "host.json").read_text())
    assert host["telemetryMode"] == "OpenTelemetry"
    # Host log levels apply to the host's own categories only; Python loggers are set in code.
    assert not {k for k in host["logging"]["logLevel"] if not k[:1].isupper() and k != "default"}
    assert "applicationInsights" not in host["logging"], "the Application Insights SDK section does not apply"
    settings = _host_settings()
    assert _string(settings["PYTHON_ENABLE_OPENTELEMETRY"]) == "true"
    # The worker's own configure_azure_monitor() would export without the managed identity's credential,
    # which the component refuses (local auth disabled), and the code configures it already.
    assert "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY" not in settings | _application_settings()
    assert "APPLICATIONINSIGHTS_AUTHENTICATION_STRING" in settings
    assert "PYTHON_ENABLE_OPENTELEMETRY" in _comments(MAIN)


def test_flex_consumption_runtime_and_platform_settings() -> None:
    path = APP / "functionapp.bicep"
    plan = resources_of_type(path, "Microsoft.Web/serverfarms@")[0]
    sku = _path(_body(plan.value), "sku")
    assert _string(_path(sku, "name")) == "FC1" and _string(_path(sku, "tier")) == "FlexConsumption"
    site = resources_of_type(path, "Microsoft.Web/sites@")[0]
    runtime = _path(_body(site.value), "properties", "functionAppConfig", "runtime")
    assert _string(_path(runtime, "name")) == "python"
    assert _text(_path(runtime, "version")) == "pythonVersion"
    assert _string(param_default(path, "pythonVersion")) == _string(param_default(MAIN, "pythonVersion"))
    auth = _path(_body(site.value), "properties", "functionAppConfig", "deployment", "storage", "authentication")
    assert _string(_path(auth, "type")) == "UserAssignedIdentity"
    emitted = set(_application_settings()) | set(_host_settings())
    header = _comments(MAIN)
    for name in PLATFORM_SETTINGS:
        assert name not in emitted, f"{name} is deprecated as an app setting on Flex Consumption"
        assert name in header, f"main.bicep's header should say who sets {name}"
    assert "~4" in header


def _allowed(path: Path, name: str) -> list[str]:
    """The string values of a parameter's ``@allowed([...])`` decorator."""
    source = declared(path, "param")[name].decorator_source
    match = re.search(r"@allowed\(\[(.*?)\]\)", source, flags=re.S)
    assert match, f"param {name} in {path.name} has no @allowed list"
    return re.findall(r"'([^']*)'", match.group(1))


def test_python_versions_agree_with_pyproject_and_the_worker_indexing_check() -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=\s*3\.(\d+)", requires)
    assert match, f"requires-python {requires!r}: expected >=3.N"
    oldest = int(match.group(1))
    newest = int(WORKER_PYTHON.split(".")[1])
    # Every minor version from the oldest the code supports up to the one the worker's own indexing check
    # runs on (tests/triggers/test_worker_indexing.py): nothing older (3.10 cannot import the app), nothing
    # newer than what has been indexed.
    expected = [f"3.{minor}" for minor in range(oldest, newest + 1)]
    for path in (MAIN, APP / "functionapp.bicep"):
        assert _allowed(path, "pythonVersion") == expected, f"{_relative(path)}: allowed Python versions"
        assert _string(param_default(path, "pythonVersion")) == WORKER_PYTHON, f"{_relative(path)}: default"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["mypy"]["python_version"] == f"3.{oldest}"
    assert config["tool"]["ruff"]["target-version"] == f"py3{oldest}"


# -- Cosmos DB --


def _cosmos_containers() -> dict[str, str]:
    value = declared(APP / "cosmos.bicep", "var")["containers"].value
    assert value is not None and value.type == "array"
    found: dict[str, str] = {}
    for item in value.named_children:
        if item.type != "object":
            continue
        props = _properties(item)
        name, path = _string(props["name"]), _string(props["partitionKeyPath"])
        assert name and path and name not in found, f"bad container entry {_text(item)!r}"
        found[name] = path
    return found


def test_cosmos_containers_and_partition_keys() -> None:
    containers = _cosmos_containers()
    assert containers == EXPECTED_CONTAINERS
    from_code = {name: f"/{field}" for name, field in CONTAINERS.items()}
    assert {k: v for k, v in containers.items() if k != "leases"} == from_code, (
        "infra and casekeeper/core/ports.py differ"
    )
    path = APP / "cosmos.bicep"
    (container_resource,) = resources_of_type(path, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@")
    assert container_resource.value is not None and container_resource.value.type == "for_statement"
    key = _path(_body(container_resource.value), "properties", "resource", "partitionKey")
    assert _text(_path(key, "paths")).replace(" ", "").replace("\n", "") == "[container.partitionKeyPath]"
    (account,) = resources_of_type(path, "Microsoft.DocumentDB/databaseAccounts@")
    assert _text(_path(_body(account.value), "properties", "disableLocalAuth")) == "true"


def test_cosmos_role_is_the_built_in_data_contributor() -> None:
    path = APP / "rbac.bicep"
    (assignment,) = resources_of_type(path, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@")
    props = _path(_body(assignment.value), "properties")
    role = _text(_path(props, "roleDefinitionId"))
    assert "/sqlRoleDefinitions/" in role, role
    variables = declared(path, "var")
    resolved = role
    for name, decl in variables.items():
        value = _string(decl.value)
        if value is not None:
            resolved = resolved.replace("${" + name + "}", value)
    assert resolved.endswith(f"/sqlRoleDefinitions/{COSMOS_DATA_CONTRIBUTOR}'"), resolved
    assert _text(_path(props, "principalId")) == "principalId"
    assert _text(_path(props, "scope")) == "cosmos.id"


def test_azure_role_ids_are_known_built_in_roles() -> None:
    for path in (APP / "rbac.bicep", APP / "openai-rbac.bicep", APP / "developer-rbac.bicep"):
        ids = set(GUID.findall(path.read_text())) - {COSMOS_DATA_CONTRIBUTOR}
        unknown = sorted(ids - set(BUILT_IN_ROLES))
        assert not unknown, f"{_relative(path)}: unknown role ids {unknown}"
    rbac_roles = {BUILT_IN_ROLES[i] for i in GUID.findall((APP / "rbac.bicep").read_text()) if i in BUILT_IN_ROLES}
    # The Functions host keeps its state in blobs, queues and tables of AzureWebJobsStorage: with the blob
    # role alone it logs 403s on the other two.
    host_storage = {"Storage Blob Data Owner", "Storage Queue Data Contributor", "Storage Table Data Contributor"}
    assert host_storage | {"Key Vault Secrets User", "Monitoring Metrics Publisher"} <= rbac_roles
    assert (
        "Azure Service Bus Data Owner" in rbac_roles
        or {
            "Azure Service Bus Data Sender",
            "Azure Service Bus Data Receiver",
        }
        <= rbac_roles
    )


# -- Service Bus --


def test_case_events_queue_has_sessions_and_duplicate_detection() -> None:
    path = APP / "servicebus.bicep"
    (queue,) = resources_of_type(path, "Microsoft.ServiceBus/namespaces/queues@")
    props = _path(_body(queue.value), "properties")
    assert _text(_path(props, "requiresSession")) == "true"
    assert _text(_path(props, "requiresDuplicateDetection")) == "true"

    def resolved(key: str) -> str:
        node = _path(props, key)
        if node.type == "identifier":
            node = param_default(path, _text(node))
        value = _string(node)
        return value if value is not None else _text(node)

    window = resolved("duplicateDetectionHistoryTimeWindow")
    assert re.fullmatch(r"P(T\d+[SMH]|\d+D)", window), window
    assert resolved("maxDeliveryCount") == "10"
    assert resolved("lockDuration") == "PT5M"
    sku = declared(path, "param")["sku"]
    assert _string(sku.value) == "Standard", "sessions and duplicate detection need Standard or Premium"
    assert "@allowed" in sku.decorator_source and "Basic" not in sku.decorator_source, sku.decorator_source


# -- modules and parameters --


def _module_params(module: Declaration) -> set[str]:
    params = _properties(_body(module.value)).get("params")
    return set(_properties(params)) if params is not None else set()


def test_modules_exist_and_get_exactly_their_parameters() -> None:
    modules = declared(MAIN, "module")
    assert modules, "main.bicep declares no module"
    for name, module in modules.items():
        target = (MAIN.parent / module.target).resolve()
        assert target.is_file(), f"module {name}: no file {module.target}"
        params = declared(target, "param")
        passed = _module_params(module)
        unknown = sorted(passed - set(params))
        assert not unknown, f"module {name} passes undeclared params {unknown}"
        required = sorted(p for p, d in params.items() if d.value is None and p not in passed)
        assert not required, f"module {name} does not pass required params {required}"


def test_module_outputs_used_by_main_exist() -> None:
    text = MAIN.read_text()
    modules = declared(MAIN, "module")
    for module_name, output in re.findall(r"\b(\w+)\.outputs\.(\w+)", text):
        assert module_name in modules, f"{module_name}.outputs.{output}: no such module"
        target = (MAIN.parent / modules[module_name].target).resolve()
        assert output in declared(target, "output"), f"{modules[module_name].target} has no output {output}"


def test_main_outputs() -> None:
    outputs = declared(MAIN, "output")
    for name in ("functionAppName", "functionAppDefaultHostName", "cosmosEndpoint", "serviceBusNamespace"):
        assert name in outputs, name
    for name, output in outputs.items():
        assert "secure" not in output.decorators, f"output {name}: no secret leaves the deployment"


# -- azd, and the parameters files --

AZD_PARAMETERS = INFRA / "main.parameters.json"
AZ_PARAMETERS = INFRA / "main.az.parameters.json"
# The deployment steps (azd, az, sign-in) are in docs/deploying.md, linked from the README.
README = ROOT / "docs" / "deploying.md"
# ${NAME} or ${NAME=default}: azd substitutes the azd environment's value (the default when it has none).
AZD_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:=([^}]*))?\}")
# Values azd puts in every environment itself (azd env new, or its first prompt).
AZD_PROVIDED = {"AZURE_ENV_NAME", "AZURE_LOCATION"}


def _parameter_values(path: Path) -> dict[str, object]:
    """name -> value of a deployment parameters file; checks its shape and that every name is declared."""
    data = json.loads(path.read_text())
    assert data.get("contentVersion") == "1.0.0.0"
    given = data["parameters"]
    assert isinstance(given, dict) and given
    unknown = sorted(set(given) - set(declared(MAIN, "param")))
    assert not unknown, f"{path.name} sets undeclared params {unknown}"
    for name, entry in given.items():
        assert set(entry) == {"value"}, f"{path.name}: {name}: expected only a value"
    return {name: entry["value"] for name, entry in given.items()}


def _azd_references() -> dict[str, tuple[str, str | None]]:
    """Bicep parameter -> (azd environment value, its default or None) for every ${...} value."""
    found: dict[str, tuple[str, str | None]] = {}
    for name, value in _parameter_values(AZD_PARAMETERS).items():
        if isinstance(value, str) and "${" in value:
            match = AZD_REFERENCE.fullmatch(value)
            assert match, f"{name}: {value!r} is not one ${{NAME}} or ${{NAME=default}} reference"
            found[name] = (match.group(1), match.group(2))
    return found


def _azd_service_tags() -> dict[str, str]:
    """Symbolic resource name -> its azd-service-name tag, over every Bicep file."""
    found: dict[str, str] = {}
    for path in BICEP_FILES:
        for decl in declarations(path):
            if decl.kind != "resource":
                continue
            stack = [_body(decl.value)]
            while stack:
                node = stack.pop()
                if node.type == "object_property" and _string(node.named_children[0]) == "azd-service-name":
                    value = _string(node.named_children[-1])
                    assert value is not None, f"{decl.name}: computed azd-service-name"
                    found[f"{_relative(path)}:{decl.name}"] = value
                stack.extend(node.named_children)
    return found


def test_azure_yaml_deploys_this_directory_to_the_tagged_function_app() -> None:
    config = yaml.safe_load((ROOT / "azure.yaml").read_text())
    infra = config["infra"]
    assert infra["provider"] == "bicep"
    assert (ROOT / infra["path"] / f"{infra['module']}.bicep").resolve() == MAIN
    # azd reads <module>.parameters.json next to the module.
    assert (ROOT / infra["path"] / f"{infra['module']}.parameters.json").resolve() == AZD_PARAMETERS
    [(service_name, service)] = config["services"].items()
    assert (service["host"], service["language"]) == ("function", "python")
    assert (ROOT / service["project"]).resolve() == ROOT and (ROOT / service["project"] / "function_app.py").is_file()
    # azd finds the app to deploy to by this tag; exactly one resource carries it, and it is the function app.
    tags = _azd_service_tags()
    assert tags == {"infra/app/functionapp.bicep:functionApp": service_name}, tags
    site = resources_of_type(APP / "functionapp.bicep", "Microsoft.Web/sites@")[0]
    assert site.name == "functionApp"


def test_azd_parameters_take_each_value_from_the_environment_or_a_literal() -> None:
    params = declared(MAIN, "param")
    values, references = _parameter_values(AZD_PARAMETERS), _azd_references()
    assert references, "main.parameters.json has no ${...} value: azd would pass nothing from its environment"
    for name, (_env, default) in references.items():
        assert name in params, f"{name}: not a parameter of main.bicep"
        if params[name].value is None:
            # With no default, azd prompts for a missing value; a default would pass "" to a required param.
            assert default is None, f"{name} is required: ${{...}} must not supply a default"
    for name, decl in params.items():
        if "secure" in decl.decorators and name in values:
            assert name in references, f"{name} is @secure(): only an azd environment value, never a literal"
    required = sorted(n for n, d in params.items() if d.value is None and n not in values)
    assert not required, f"required params missing from main.parameters.json: {required}"
    readme = README.read_text()
    for env, default in references.values():
        if default is None and env not in AZD_PROVIDED:
            assert f"azd env set {env} " in readme, f"README's azd steps do not set {env}"


def test_the_webhook_secret_comes_from_the_azd_environment_and_is_never_committed() -> None:
    assert _azd_references()["webhookSecret"] == ("WEBHOOK_SECRET", None)
    assert "secure" in declared(MAIN, "param")["webhookSecret"].decorators
    # azd keeps environment values, WEBHOOK_SECRET included, under .azure/: never committed nor deployed.
    assert ".azure/" in (ROOT / ".gitignore").read_text().splitlines()
    assert ".azure/" in (ROOT / ".funcignore").read_text().splitlines()


def _readme_az_command() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
    [block] = [b for b in blocks if "az deployment group create" in b]
    joined = block.replace("\\\n", " ")
    [command] = [line for line in joined.splitlines() if "az deployment group create" in line]
    return command


def test_az_parameters_file_is_plain_and_the_documented_command_completes_it() -> None:
    assert "${" not in AZ_PARAMETERS.read_text(), "az deployment passes ${...} through as literal text"
    params = declared(MAIN, "param")
    values = _parameter_values(AZ_PARAMETERS)
    secure = sorted(n for n in values if "secure" in params[n].decorators)
    assert not secure, f"secure params belong on the command line, not in the repository: {secure}"
    command = _readme_az_command()
    assert f"@{_relative(AZ_PARAMETERS)}" in command and f"-f {_relative(MAIN)}" in command
    inline = set(re.findall(r"(?:^|\s)([A-Za-z][A-Za-z0-9]*)=", command))
    assert inline, command
    unknown = sorted(inline - set(params))
    assert not unknown, f"README's az command passes undeclared params {unknown}"
    missing = sorted(n for n, d in params.items() if d.value is None and n not in values and n not in inline)
    assert not missing, f"README's az command leaves required params unset: {missing}"


# -- App Service Authentication, for the pages --


def test_easy_auth_signs_people_in_with_entra_id_and_lets_function_key_callers_through() -> None:
    path = APP / "functionapp.bicep"
    [auth] = resources_of_type(path, "Microsoft.Web/sites/config@")
    assert "if (!empty(authClientId))" in _text(auth.value)
    body = _body(auth.value)
    assert _string(_path(body, "name")) == "authsettingsV2" and _text(_path(body, "parent")) == "functionApp"
    props = _path(body, "properties")
    assert _text(_path(props, "platform", "enabled")) == "true"
    # Not a platform-wide redirect: the machine API's callers have function keys, not Entra ID sign-ins.
    validation = _path(props, "globalValidation")
    assert _string(_path(validation, "unauthenticatedClientAction")) == "AllowAnonymous"
    assert _text(_path(validation, "requireAuthentication")) == "false"
    aad = _path(props, "identityProviders", "azureActiveDirectory")
    assert _text(_path(aad, "registration", "clientId")) == "authClientId"
    assert "tenant().tenantId" in _text(_path(aad, "registration", "openIdIssuer"))
    # The client id is a parameter all the way from the azd environment.
    assert (
        _text(_path(_body(declared(MAIN, "module")["functionApp"].value), "params", "authClientId")) == "authClientId"
    )
    assert _azd_references()["authClientId"] == ("AUTH_CLIENT_ID", "")


def test_the_app_roles_the_code_checks_are_documented() -> None:
    from shared.web.identity import APPROVER_ROLE, OPERATOR_ROLE

    readme = README.read_text()
    for role in (APPROVER_ROLE, OPERATOR_ROLE):
        assert f"`{role}`" in readme, f"README does not document the app role {role}"
        assert role in (APP / "functionapp.bicep").read_text()
    assert "azd env set AUTH_CLIENT_ID" in readme


@pytest.mark.parametrize(
    ("module", "param"),
    [
        ("cosmos", "cosmosPublicNetworkAccess"),
        ("serviceBus", "serviceBusPublicNetworkAccess"),
        ("keyVault", "keyVaultPublicNetworkAccess"),
        ("storage", "storagePublicNetworkAccess"),
    ],
)
def test_public_network_access_is_a_parameter_a_production_deployment_turns_off(module: str, param: str) -> None:
    main_param = declared(MAIN, "param")[param]
    assert _allowed(MAIN, param) == ["Enabled", "Disabled"]
    assert _string(main_param.value) == "Enabled", "the default stays as before (no private endpoints here)"
    passed = _properties(_body(declared(MAIN, "module")[module].value)).get("params")
    assert passed is not None and _text(_properties(passed)["publicNetworkAccess"]) == param
    target = (MAIN.parent / declared(MAIN, "module")[module].target).resolve()
    assert _allowed(target, "publicNetworkAccess") == ["Enabled", "Disabled"]
    # No resource keeps a literal: the module's parameter decides.
    assert "publicNetworkAccess: 'Enabled'" not in target.read_text()
    assert "publicNetworkAccess: publicNetworkAccess" in target.read_text()
