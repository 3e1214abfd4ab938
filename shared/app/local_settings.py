"""``casekeeper local-settings``: write the ``local.settings.json`` that ``func start`` reads, for one of the
two ways a Functions developer works locally (docs/func-start.md):

- ``emulators``: the Service Bus emulator, the Cosmos DB emulator and Azurite of ``emulators/compose.yaml``,
  reached with connection strings (``ServiceBusConnection``, ``CosmosDBConnection``). A fresh webhook secret.
- ``azd``: the resources ``azd provision`` created, identity-based (``ServiceBusConnection__fullyQualifiedNamespace``,
  ``CosmosDBConnection__accountEndpoint``) for the signed-in developer, whose principal the Bicep grants the
  data roles (``infra/app/developer-rbac.bicep``). Values come from the azd environment: the environment
  variables azd gives its hooks (``azure.yaml``'s ``postprovision``), or ``--from FILE`` with the output of
  ``azd env get-values`` (``-`` for standard input).

Either file passes the app's settings loader before it is written; an existing file is kept unless
``--force``. Exit codes: 0 written, 2 usage, missing values or an existing file.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from casekeeper import ConfigurationError
from shared.app.connections import COSMOS_DB, COSMOS_DB_ENDPOINT, SERVICE_BUS, SERVICE_BUS_NAMESPACE
from shared.app.settings import SETTINGS, Settings

PROG = "casekeeper local-settings"

# The emulators' well-known credentials, published by Microsoft for local use only (the Cosmos DB emulator's
# fixed account key; the Service Bus emulator's documented connection string). Nothing secret: they open
# containers on this machine, and keys are disabled on the Azure resources.
COSMOS_EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
COSMOS_EMULATOR_PORT = 8081
AZURITE = "UseDevelopmentStorage=true"

# Names the Functions host resolves in bindings (%NAME%): Python defaults do not reach the host, so every
# generated file carries them (tests/unit/test_local_settings.py checks against the indexed bindings).
_HOST_READS = ("CASE_EVENTS_QUEUE", "COSMOS_DATABASE", "CHECKPOINT_HEALTH_SCHEDULE")
_DEFAULTS = {s.name: s.default for s in SETTINGS}

# Bicep outputs of infra/main.bicep that the azd form reads. azd stores outputs under their declared name,
# or upper-cased (older versions, or templates whose casing it cannot recover): both are accepted.
AZD_OUTPUTS = {
    COSMOS_DB_ENDPOINT: "cosmosEndpoint",
    "COSMOS_DATABASE": "cosmosDatabaseName",
    SERVICE_BUS_NAMESPACE: "serviceBusFullyQualifiedNamespace",
    "CASE_EVENTS_QUEUE": "caseEventsQueueName",
}
STORAGE_OUTPUT = "storageAccountName"
# azd environment values (azd env set ...) the app reads under the same name.
AZD_PASSTHROUGH = ("WEBHOOK_SECRET", "SUPPLIER_PORTAL_URL", "AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_DEPLOYMENT")


def emulator_values(*, webhook_secret: str, host: str = "localhost") -> dict[str, str]:
    """Settings for ``func start`` against ``emulators/compose.yaml`` on ``host``."""
    return {
        "FUNCTIONS_WORKER_RUNTIME": "python",
        "AzureWebJobsStorage": AZURITE,
        "CASEKEEPER_STORE": "cosmos",
        COSMOS_DB: f"AccountEndpoint=https://{host}:{COSMOS_EMULATOR_PORT}/;AccountKey={COSMOS_EMULATOR_KEY};",
        "COSMOS_DATABASE": _DEFAULTS["COSMOS_DATABASE"] or "casekeeper",
        "CASEKEEPER_QUEUE": "servicebus",
        SERVICE_BUS: (
            # No port: with UseDevelopmentEmulator=true the clients speak plain AMQP on its port, 5672.
            f"Endpoint=sb://{host};SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
        ),
        "CASE_EVENTS_QUEUE": _DEFAULTS["CASE_EVENTS_QUEUE"] or "case-events",
        "WEBHOOK_SECRET": webhook_secret,
        "SUPPLIER_PORTAL_URL": _DEFAULTS["SUPPLIER_PORTAL_URL"] or "",
        # The emulator's change feed does not drive the Functions Cosmos DB trigger (docs/func-start.md): the
        # timer's sweep of stuck effects stands in for the reconciler, so it runs every 30 s here.
        "CHECKPOINT_HEALTH_SCHEDULE": "*/30 * * * * *",
    }


def _lookup(env: Mapping[str, str], name: str) -> str:
    """An azd value by its declared name, else upper-cased; empty when absent."""
    return (env.get(name) or env.get(name.upper()) or "").strip()


def azd_values(env: Mapping[str, str], *, host_storage: str = "azurite") -> dict[str, str]:
    """Identity-based settings for the provisioned environment whose azd values are ``env``.

    ``host_storage``: ``azurite`` (the host's own storage on this machine) or ``azure`` (the environment's
    storage account, identity-based). Raises ``ConfigurationError`` naming every missing value."""
    values: dict[str, str] = {
        "FUNCTIONS_WORKER_RUNTIME": "python",
        "CASEKEEPER_STORE": "cosmos",
        "CASEKEEPER_QUEUE": "servicebus",
        "CHECKPOINT_HEALTH_SCHEDULE": _DEFAULTS["CHECKPOINT_HEALTH_SCHEDULE"] or "",
    }
    missing: list[str] = []
    for setting, output in AZD_OUTPUTS.items():
        values[setting] = _lookup(env, output)
        if not values[setting]:
            missing.append(output)
    if host_storage == "azure":
        account = _lookup(env, STORAGE_OUTPUT)
        if not account:
            missing.append(STORAGE_OUTPUT)
        values["AzureWebJobsStorage__accountName"] = account
    else:
        values["AzureWebJobsStorage"] = AZURITE
    for name in AZD_PASSTHROUGH:
        if env.get(name):
            values[name] = env[name]
    if missing:
        raise ConfigurationError(
            "the azd environment has no " + ", ".join(missing) + " (run `azd provision` first)", missing=tuple(missing)
        )
    return values


def document(values: Mapping[str, str]) -> dict[str, Any]:
    """The ``local.settings.json`` document for ``values``."""
    return {"IsEncrypted": False, "Values": dict(values), "Host": {"LocalHttpPort": 7071}}


def read_azd_values(source: str | None) -> dict[str, str]:
    """The azd environment: ``os.environ`` (``source`` None: inside an azd hook), else the dotenv text
    ``azd env get-values`` prints, from a file or ``-`` (standard input)."""
    if source is None:
        return dict(os.environ)
    from dotenv import dotenv_values

    text = sys.stdin.read() if source == "-" else Path(source).read_text()
    return {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("target", choices=("emulators", "azd"), help="which way of working locally")
    parser.add_argument("--out", type=Path, default=Path("local.settings.json"), help="default: %(default)s")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--from", dest="source", metavar="FILE", help="azd: `azd env get-values` output; - for stdin")
    parser.add_argument(
        "--host-storage",
        choices=("azurite", "azure"),
        default="azurite",
        help="azd: the Functions host's own storage (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        if args.target == "emulators":
            values = emulator_values(webhook_secret=secrets.token_hex(32))
        else:
            values = azd_values(read_azd_values(args.source), host_storage=args.host_storage)
        Settings.from_mapping(values)  # what the app will refuse, refused now
    except (ConfigurationError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.out.exists() and not args.force:
        print(f"{PROG}: {args.out} exists; pass --force to replace it", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(document(values), indent=2) + "\n")
    print(f"wrote {args.out} ({args.target})")
    if args.target == "azd":
        print(
            "note: a host started with these settings takes messages from the environment's queue and change-feed "
            "leases from its Cosmos DB account, as the deployed app does: stop the deployed app, or use an "
            "environment of your own (docs/func-start.md)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
