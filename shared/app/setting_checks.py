"""How :meth:`shared.app.settings.Settings.from_mapping` reads and checks the settings' raw values, one
concern each (timeouts, schedule, backoff, the two connections, the model, who may call, the embedded backends
in Azure), collecting every problem so that one ``ConfigurationError`` names them all."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from casekeeper import ConfigurationError
from shared.app.connections import (
    COSMOS_DB,
    COSMOS_DB_ENDPOINT,
    SERVICE_BUS,
    SERVICE_BUS_NAMESPACE,
    ConnectionStringError,
    parse_cosmos,
    parse_service_bus,
)
from shared.app.setting_names import AZURE_MARKERS, DEFAULTS, MAX_MODEL_TIMEOUT
from shared.messaging.retry import Backoff
from shared.workflow.model_client import ModelConfig

_API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(-preview)?")


class Reader:
    """The settings' raw values (trimmed; a blank one is its default) and what is wrong with them, collected
    so that one ``ConfigurationError`` names every problem."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.values: dict[str, str | None] = {
            name: (env.get(name) or "").strip() or default for name, default in DEFAULTS.items()
        }
        self.problems: list[str] = []
        self.missing: list[str] = []

    def text(self, name: str) -> str:
        return self.values[name] or ""

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        value = self.text(name).lower()
        if value not in allowed:
            self.problems.append(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
            return allowed[0]
        return value

    def number(self, name: str, *, positive: bool = True) -> Decimal:
        """The value as a finite number, positive (or, ``positive=False``, non-negative); a wrong one is a
        problem, and 1 stands in for it so that the checks after it can run."""
        raw = self.text(name)
        try:
            value = Decimal(raw)
        except InvalidOperation:
            self.problems.append(f"{name} must be a number, not {raw!r}")
            return Decimal(1)
        if not value.is_finite() or (positive and value <= 0) or value < 0:
            self.problems.append(f"{name} must be {'positive' if positive else 'non-negative'}, not {raw!r}")
            return Decimal(1)
        return value

    def require(self, name: str) -> str | None:
        if not self.values[name]:
            self.missing.append(name)
        return self.values[name]

    def raise_if_invalid(self) -> None:
        if self.missing:
            self.problems.insert(0, "missing: " + ", ".join(_both_forms(name) for name in self.missing))
        if self.problems:
            raise ConfigurationError("invalid settings: " + "; ".join(self.problems), missing=tuple(self.missing))


def timeouts(read: Reader) -> tuple[float, float | None, float]:
    """``CALL_TIMEOUT_SECONDS``, ``STORE_TIMEOUT_SECONDS`` (unset: each store keeps its own) and
    ``SUPPLIER_TIMEOUT_SECONDS``."""
    call_timeout = float(read.number("CALL_TIMEOUT_SECONDS"))
    store_timeout = float(read.number("STORE_TIMEOUT_SECONDS")) if read.values["STORE_TIMEOUT_SECONDS"] else None
    supplier_timeout = float(read.number("SUPPLIER_TIMEOUT_SECONDS"))
    # httpx applies the timeout to each phase (pool, connect, write, read): a call can take about four
    # times it. It must end before the ledger presumes the call lost and reconciliation retries it.
    if 4 * supplier_timeout >= call_timeout:
        read.problems.append("4 x SUPPLIER_TIMEOUT_SECONDS must be below CALL_TIMEOUT_SECONDS")
    return call_timeout, store_timeout, supplier_timeout


def schedule_of(read: Reader) -> str:
    """``CHECKPOINT_HEALTH_SCHEDULE``, which must have NCRONTAB's six fields."""
    schedule = read.text("CHECKPOINT_HEALTH_SCHEDULE")
    if len(schedule.split()) != 6:
        read.problems.append(f"CHECKPOINT_HEALTH_SCHEDULE must be a 6-field NCRONTAB expression, not {schedule!r}")
    return schedule


def backoff_of(read: Reader) -> Backoff:
    """The event retries' backoff (``RETRY_*``); the cap is never below the first delay."""
    retry_base = float(read.number("RETRY_BASE_SECONDS"))
    retry_cap = float(read.number("RETRY_MAX_DELAY_SECONDS"))
    if retry_cap < retry_base:
        read.problems.append("RETRY_MAX_DELAY_SECONDS must not be below RETRY_BASE_SECONDS")
        retry_cap = retry_base
    return Backoff(
        base=retry_base, cap=retry_cap, give_up_after=float(read.number("RETRY_FOR_SECONDS", positive=False))
    )


_CONNECTIONS = {COSMOS_DB_ENDPOINT: COSMOS_DB, SERVICE_BUS_NAMESPACE: SERVICE_BUS}


@dataclass
class Connections:
    """The two connections as read (each from whichever form was set), and what was wrong with them."""

    cosmos_endpoint: str | None = None
    cosmos_key: str | None = None
    cosmos_string: str | None = None
    namespace: str | None = None
    bus_string: str | None = None
    problems: list[str] = field(default_factory=list)


def read_connections(values: Mapping[str, str | None], *, cosmos: bool, bus: bool, missing: list[str]) -> Connections:
    """Both connections, each in whichever form is set (``shared.app.connections``). A required connection
    with neither form set: its identity-based name is reported missing (the error names both forms). Both
    forms set: refused, since the host and the code could read different ones."""
    found = Connections(cosmos_endpoint=values[COSMOS_DB_ENDPOINT], cosmos_key=values["COSMOS_KEY"])
    for string_name, identity_name, required in (
        (COSMOS_DB, COSMOS_DB_ENDPOINT, cosmos),
        (SERVICE_BUS, SERVICE_BUS_NAMESPACE, bus),
    ):
        string, identity = values[string_name], values[identity_name]
        if string and identity:
            found.problems.append(
                f"set {string_name} (a connection string) or {identity_name} (identity-based), not both"
            )
        elif required and not string and not identity:
            missing.append(identity_name)
    found.cosmos_string, found.bus_string = values[COSMOS_DB] or None, values[SERVICE_BUS] or None
    found.namespace = values[SERVICE_BUS_NAMESPACE]
    try:
        if found.cosmos_string and found.cosmos_key:
            found.problems.append(f"COSMOS_KEY goes with {COSMOS_DB_ENDPOINT}; {COSMOS_DB} carries its own AccountKey")
        elif found.cosmos_string:
            account = parse_cosmos(found.cosmos_string)
            found.cosmos_endpoint, found.cosmos_key = account.endpoint, account.key
    except ConnectionStringError as exc:
        found.problems.append(str(exc))
    try:
        if found.bus_string:
            found.namespace = parse_service_bus(found.bus_string).host
    except ConnectionStringError as exc:
        found.problems.append(str(exc))
    return found


def _both_forms(name: str) -> str:
    """A missing setting as the error names it: both forms for a connection."""
    string_name = _CONNECTIONS.get(name)
    if string_name is None:
        return name
    return f"{name} or {string_name} (identity-based, or a connection string)"


def model_config(
    values: Mapping[str, str | None], number: Callable[[str], Decimal], problems: list[str]
) -> ModelConfig | None:
    """The model's settings, checked whether or not a model is configured (a typo shows at once)."""
    timeout = float(number("AZURE_OPENAI_TIMEOUT_SECONDS"))
    if timeout > MAX_MODEL_TIMEOUT:
        problems.append(
            f"AZURE_OPENAI_TIMEOUT_SECONDS must be at most {MAX_MODEL_TIMEOUT:g} (one event may ask the model four "
            f"times within the 10-minute function timeout), not {values['AZURE_OPENAI_TIMEOUT_SECONDS']!r}"
        )
    version = values["AZURE_OPENAI_API_VERSION"] or ""
    if not _API_VERSION.fullmatch(version):
        problems.append(f"AZURE_OPENAI_API_VERSION must look like 2024-10-21 (or ...-preview), not {version!r}")
    endpoint, deployment = values["AZURE_OPENAI_ENDPOINT"], values["AZURE_OPENAI_DEPLOYMENT"]
    if bool(endpoint) != bool(deployment):
        problems.append("AZURE_OPENAI_ENDPOINT and AZURE_OPENAI_DEPLOYMENT go together")
    if endpoint and not endpoint.startswith(("https://", "http://127.0.0.1", "http://localhost")):
        problems.append(
            f"AZURE_OPENAI_ENDPOINT must be an https:// URL (plain http only on loopback), not {endpoint!r}"
        )
    if not (endpoint and deployment):
        return None
    return ModelConfig(
        endpoint=endpoint,
        deployment=deployment,
        api_key=values["AZURE_OPENAI_API_KEY"] or None,
        api_version=version,
        timeout=timeout,
    )


def _unresolved_references(values: Mapping[str, str | None], names: tuple[str, ...]) -> list[str]:
    """An unresolved Key Vault reference reaches the app as its literal text; used as an HMAC key it would
    be guessable, so it is refused rather than trusted."""
    return [
        f"{name} is an unresolved Key Vault reference (check the app's identity and vault)"
        for name in names
        if (values[name] or "").startswith("@Microsoft.KeyVault(")
    ]


def ratio(raw: str, name: str, problems: list[str]) -> float:
    """A share from 0 to 1 inclusive (``0.25``: one trace in four)."""
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or not Decimal(0) <= value <= Decimal(1):
        problems.append(f"{name} must be a number from 0 to 1 (the share of traces kept, e.g. 0.25), not {raw!r}")
        return 1.0
    return float(value)


def who_may_call(values: Mapping[str, str | None], problems: list[str]) -> None:
    """The settings that decide whom a request is taken from: the secrets must be resolved, and the Easy Auth
    flag well-formed (``shared.web.identity`` reads it where each request is served)."""
    problems.extend(_unresolved_references(values, ("WEBHOOK_SECRET", "ALERT_WEBHOOK_URL", "AZURE_OPENAI_API_KEY")))
    flag(values["EASY_AUTH_ENABLED"] or "", "EASY_AUTH_ENABLED", problems)


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def flag(raw: str, name: str, problems: list[str]) -> bool:
    """A true/false setting (``true``, ``1``, ``yes``, ``on`` and their opposites, any case)."""
    value = raw.lower()
    if value not in _TRUE + _FALSE:
        problems.append(f"{name} must be true or false, not {raw!r}")
        return False
    return value in _TRUE


def refused_in_azure(env: Mapping[str, str], *, store: str, queue: str) -> list[str]:
    """The embedded store and queue, refused in Azure: both are SQLite files on one instance's disk.

    Another instance (scale-out, a restart elsewhere) would see none of that data: a case's events and
    effects would be split between files, and the ledger's promise rests on one store. There is no
    override on purpose.
    """
    markers = [name for name in AZURE_MARKERS if (env.get(name) or "").strip()]
    if not markers:
        return []
    where = f"running in Azure ({markers[0]} is set)"
    refused: list[str] = []
    if store == "sqlite":
        refused.append(
            f"CASEKEEPER_STORE=sqlite is refused when {where}: the SQLite file is per instance and not durable "
            "across scale-out or a move to another instance; set CASEKEEPER_STORE=cosmos"
        )
    if queue == "local":
        refused.append(
            f"CASEKEEPER_QUEUE=local is refused when {where}: the local queue is a SQLite file per instance, "
            "so messages would not reach other instances nor survive a move; set CASEKEEPER_QUEUE=servicebus"
        )
    return refused
