"""Settings, read once into a typed object.

The names are the same everywhere: environment variables / Functions app settings,
``local.settings.sample.json`` and ``infra/``. A test checks that the sample lists every name below.
Errors name every missing or invalid setting at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal

from shared.core.errors import ConfigurationError


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("CASEKEEPER_STORE", "sqlite", "sqlite (embedded, the default) or cosmos"),
    Setting("CASEKEEPER_SQLITE_PATH", ".casekeeper/casekeeper.sqlite", "the SQLite file (store=sqlite)"),
    Setting("CosmosDBConnection__accountEndpoint", None, "Cosmos DB account endpoint (store=cosmos; identity-based)"),
    Setting("COSMOS_DATABASE", "casekeeper", "Cosmos DB database name"),
    Setting("COSMOS_KEY", None, "account key: only for a local Cosmos server; in Azure leave unset (managed identity)"),
    Setting("CALL_TIMEOUT_SECONDS", "120", "how long a started effect is presumed in flight before it is reconciled"),
    Setting("SUPPLIER_PORTAL_URL", "http://127.0.0.1:8765", "base URL of the supplier portal API"),
)


@dataclass(frozen=True)
class Settings:
    store: Literal["sqlite", "cosmos"]
    sqlite_path: Path
    cosmos_endpoint: str | None
    cosmos_database: str
    cosmos_key: str | None
    call_timeout: float
    supplier_portal_url: str

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> Settings:
        """Read and validate; raises ``ConfigurationError`` listing every problem."""
        values = {s.name: (env.get(s.name) or s.default) for s in SETTINGS}
        problems: list[str] = []
        missing: list[str] = []

        store = (values["CASEKEEPER_STORE"] or "").strip().lower()
        if store not in ("sqlite", "cosmos"):
            problems.append(f"CASEKEEPER_STORE must be sqlite or cosmos, not {store!r}")
        if store == "cosmos" and not values["CosmosDBConnection__accountEndpoint"]:
            missing.append("CosmosDBConnection__accountEndpoint")

        call_timeout = _positive_float(values, "CALL_TIMEOUT_SECONDS", problems)

        if missing:
            problems.append("missing: " + ", ".join(missing))
        if problems:
            raise ConfigurationError("invalid settings: " + "; ".join(problems), missing=tuple(missing))
        return cls(
            store="cosmos" if store == "cosmos" else "sqlite",
            sqlite_path=Path(values["CASEKEEPER_SQLITE_PATH"] or ".casekeeper/casekeeper.sqlite"),
            cosmos_endpoint=values["CosmosDBConnection__accountEndpoint"],
            cosmos_database=values["COSMOS_DATABASE"] or "casekeeper",
            cosmos_key=values["COSMOS_KEY"],
            call_timeout=call_timeout,
            supplier_portal_url=(values["SUPPLIER_PORTAL_URL"] or "").rstrip("/"),
        )


def _positive_float(values: Mapping[str, str | None], name: str, problems: list[str]) -> float:
    raw = values[name] or ""
    try:
        value = float(Decimal(raw))
    except (InvalidOperation, ValueError):
        problems.append(f"{name} must be a number, not {raw!r}")
        return 0.0
    if value <= 0:
        problems.append(f"{name} must be positive, not {raw!r}")
    return value
