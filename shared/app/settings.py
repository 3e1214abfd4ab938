"""Settings, read once into a typed object.

The names are the same everywhere: environment variables / Functions app settings,
``local.settings.sample.json`` and ``infra/``. A test checks that the sample and the Bicep list every
name in :data:`SETTINGS`. :meth:`Settings.from_mapping` names every missing or invalid setting at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal

from casekeeper import ConfigurationError
from casekeeper.records import DEFAULT_CALL_TIMEOUT
from shared.app.connections import (
    COSMOS_DB,
    COSMOS_DB_ENDPOINT,
    SERVICE_BUS,
    SERVICE_BUS_NAMESPACE,
    ConnectionStringError,
    parse_cosmos,
    parse_service_bus,
)
from shared.app.retention import Retention
from shared.core.retry import Backoff
from shared.domain.invoice import Rules
from shared.workflow.model_client import DEFAULT_API_VERSION, ModelConfig

MAX_MODEL_TIMEOUT = 120.0
"""One event may ask the model up to four times (a resumed run, then up to three decisions); at 120 s each
that stays inside the 10-minute ``functionTimeout`` of host.json, with room for the rest of the event."""
_API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(-preview)?")


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None
    help: str
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("CASEKEEPER_STORE", "sqlite", "sqlite (embedded, the default) or cosmos"),
    Setting("CASEKEEPER_SQLITE_PATH", ".casekeeper/casekeeper.sqlite", "the SQLite file (store=sqlite)"),
    Setting("CosmosDBConnection__accountEndpoint", None, "Cosmos DB account endpoint (store=cosmos; identity-based)"),
    Setting("COSMOS_DATABASE", "casekeeper", "Cosmos DB database name"),
    Setting("COSMOS_KEY", None, "account key, only for a local Cosmos server; unset in Azure (managed identity)", True),
    Setting("CASEKEEPER_QUEUE", "servicebus", "servicebus (Azure) or local (the local host's SQLite session queue)"),
    Setting("CASEKEEPER_LOCAL_QUEUE_PATH", ".casekeeper/queue.sqlite", "the local session queue file (queue=local)"),
    Setting(
        "STORE_TIMEOUT_SECONDS",
        None,
        "how long one store request waits before the store counts as unavailable (SQLite's busy timeout, "
        "Cosmos DB's read timeout); unset: 30 on SQLite, the SDK's 65 on Cosmos DB",
    ),
    Setting(
        "ServiceBusConnection__fullyQualifiedNamespace", None, "Service Bus namespace, e.g. x.servicebus.windows.net"
    ),
    Setting("CASE_EVENTS_QUEUE", "case-events", "the session-enabled queue of case events"),
    # The connection-string forms of the two connections above, for the emulators (shared.app.connections);
    # set one form of each connection, not both. Never set in Azure: keys are disabled there.
    Setting(
        "ServiceBusConnection",
        None,
        "Service Bus connection string (the emulator's), instead of ServiceBusConnection__fullyQualifiedNamespace",
        True,
    ),
    Setting(
        "CosmosDBConnection",
        None,
        "Cosmos DB connection string (the emulator's), instead of CosmosDBConnection__accountEndpoint",
        True,
    ),
    Setting("WEBHOOK_SECRET", None, "HMAC secret(s) of the event webhook; comma-separated while rotating", True),
    Setting(
        "WEBHOOK_SIGNATURE_V1_UNTIL",
        None,
        "until this UTC time (ISO 8601, e.g. 2027-01-31T00:00:00Z) webhooks signed the old v1 way, without the "
        "delivery id, are still accepted; unset: v2 only",
    ),
    Setting(
        "EASY_AUTH_ENABLED",
        "false",
        "true where App Service Authentication is in front (infra sets it); only then is X-MS-CLIENT-PRINCIPAL "
        "trusted, and only with the platform's own WEBSITE_AUTH_ENABLED",
    ),
    Setting(
        "CALL_TIMEOUT_SECONDS",
        f"{DEFAULT_CALL_TIMEOUT:g}",
        "how long a started effect is presumed in flight before it is reconciled",
    ),
    Setting("SUPPLIER_PORTAL_URL", "http://127.0.0.1:8765", "base URL of the supplier portal API"),
    Setting(
        "SUPPLIER_TIMEOUT_SECONDS",
        "10",
        "HTTP timeout per phase of a supplier call; 4x it must be below CALL_TIMEOUT_SECONDS",
    ),
    Setting("VARIANCE_TOLERANCE", "5.00", "variance within which an invoice is approved"),
    Setting("APPROVAL_THRESHOLD", "1000.00", "credit-note amount above which a person approves first"),
    Setting("AZURE_OPENAI_ENDPOINT", None, "Azure OpenAI endpoint; when set with the deployment, a model proposes"),
    Setting("AZURE_OPENAI_DEPLOYMENT", None, "Azure OpenAI chat deployment name"),
    Setting(
        "AZURE_OPENAI_API_KEY",
        None,
        "the model's key (in Azure a Key Vault reference); unset: the app's identity (Entra ID) is used",
        True,
    ),
    Setting("AZURE_OPENAI_API_VERSION", DEFAULT_API_VERSION, "Azure OpenAI data-plane API version"),
    Setting(
        "AZURE_OPENAI_TIMEOUT_SECONDS",
        "30",
        f"one model call's whole budget (token included), at most {MAX_MODEL_TIMEOUT:g}; no retries in place",
    ),
    Setting("CHECKPOINT_HEALTH_SCHEDULE", "0 */5 * * * *", "NCRONTAB schedule of the checkpoint-health timer"),
    Setting("CHECKPOINT_LAG_SECONDS", "600", "a run whose newest checkpoint is older than its last activity by this"),
    Setting("CHECKPOINT_MAX_BYTES", "1500000", "checkpoints larger than this are refused at save (Cosmos: 2 MB/doc)"),
    Setting("ALERT_WEBHOOK_URL", None, "when set, every alert is also POSTed here as JSON"),
    Setting(
        "ALERT_NOTIFY_GRACE_SECONDS",
        "30",
        "how long the timer leaves a just-recorded alert to the host that recorded it before notifying it itself",
    ),
    # Retention (shared/app/retention.py): days a finished document is kept after its last write; 0 keeps it.
    Setting("CLOSED_CASE_RETENTION_DAYS", "90", "days a closed or approved case (and its event records) is kept"),
    Setting("SETTLED_EFFECT_RETENTION_DAYS", "90", "days a done or failed effect is kept once its case is final"),
    Setting(
        "FINISHED_CHECKPOINT_RETENTION_DAYS",
        "7",
        "days a run's checkpoints are kept (a pause awaiting a person: as a closed case; all once the case is final)",
    ),
    Setting("ALERT_RETENTION_DAYS", "30", "days a notified alert is kept (an unnotified one is kept until notified)"),
    Setting(
        "FAILURE_RETENTION_DAYS", "30", "days checkpoint failures (once alerted), rejected events and lookup failures"
    ),
    Setting("RETRY_BASE_SECONDS", "1", "first delay of an event retried after a transient error; doubles per attempt"),
    Setting("RETRY_MAX_DELAY_SECONDS", "300", "longest delay between two retries of an event"),
    Setting(
        "RETRY_FOR_SECONDS",
        "3600",
        "how long an event keeps being retried after its first transient error before the queue's own "
        "redeliveries and dead-letter queue take over",
    ),
    Setting("APPLICATIONINSIGHTS_CONNECTION_STRING", None, "telemetry to Application Insights when set", True),
    Setting("OTEL_EXPORTER_OTLP_ENDPOINT", None, "telemetry over OTLP/HTTP when set (and no Application Insights)"),
    Setting("CASEKEEPER_TELEMETRY_FILE", None, "console telemetry goes to this file instead of stderr"),
    Setting(
        "TRACE_SAMPLING_RATIO",
        "1.0",
        "share of traces kept, 0 to 1, decided per trace; logs (alerts included) and metrics are never sampled",
    ),
    Setting(
        "AGENT_FRAMEWORK_SPANS",
        "false",
        "true: Agent Framework's own spans (per superstep, executor, message; its chat spans) too, for debugging",
    ),
)

_DEFAULTS = {s.name: s.default for s in SETTINGS}

# Set by the App Service platform on every instance of a site, Functions apps included (never by Casekeeper,
# its local host or its tests). Either one means "running in Azure".
AZURE_MARKERS = ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME")


@dataclass(frozen=True)
class Settings:
    store: Literal["sqlite", "cosmos"]
    sqlite_path: Path
    store_timeout: float | None
    """``STORE_TIMEOUT_SECONDS``; ``None``: each store's own default."""
    cosmos_endpoint: str | None
    cosmos_database: str
    cosmos_key: str | None
    cosmos_connection_string: str | None
    """Set when ``CosmosDBConnection`` is; ``cosmos_endpoint`` and ``cosmos_key`` then come from it."""
    queue: Literal["servicebus", "local"]
    local_queue_path: Path
    service_bus_namespace: str | None
    service_bus_connection_string: str | None
    """Set when ``ServiceBusConnection`` is (the emulator); else ``service_bus_namespace`` (identity)."""
    case_events_queue: str
    webhook_secrets: tuple[str, ...]
    signature_v1_until: float | None
    """Unix seconds until which ``v1=`` webhook signatures are accepted (``WEBHOOK_SIGNATURE_V1_UNTIL``)."""
    call_timeout: float
    supplier_portal_url: str
    supplier_timeout: float
    rules: Rules
    azure_openai_endpoint: str | None
    azure_openai_deployment: str | None
    model: ModelConfig | None
    """Set when a model proposes (endpoint and deployment given); ``None``: the rules propose."""
    checkpoint_health_schedule: str
    checkpoint_lag: float
    checkpoint_max_bytes: int
    alert_webhook_url: str | None
    alert_notify_grace: float
    appinsights_connection_string: str | None
    backoff: Backoff
    retention: Retention
    trace_sampling_ratio: float
    agent_framework_spans: bool

    @classmethod
    def from_mapping(cls, env: Mapping[str, str], *, receives_events: bool = True) -> Settings:
        """Read and validate; raises ``ConfigurationError`` naming every problem at once.

        ``receives_events=False`` (the operator commands): ``WEBHOOK_SECRET`` is not required, as nothing
        signed is verified."""
        read = _Reader(env)
        store = read.choice("CASEKEEPER_STORE", ("sqlite", "cosmos"))
        queue = read.choice("CASEKEEPER_QUEUE", ("servicebus", "local"))
        read.problems.extend(_refused_in_azure(env, store=store, queue=queue))
        conn = _read_connections(read.values, cosmos=store == "cosmos", bus=queue == "servicebus", missing=read.missing)
        read.problems.extend(conn.problems)
        secret = read.require("WEBHOOK_SECRET") if receives_events else read.values["WEBHOOK_SECRET"]
        v1_until = _who_may_call(read.values, read.problems)
        call_timeout, store_timeout, supplier_timeout = _timeouts(read)
        rules = Rules(
            tolerance=read.number("VARIANCE_TOLERANCE", positive=False),
            approval_threshold=read.number("APPROVAL_THRESHOLD"),
        )
        model = _model_config(read.values, read.number, read.problems)
        schedule = _schedule(read)
        backoff = _backoff(read)
        trace_sampling_ratio = _ratio(read.text("TRACE_SAMPLING_RATIO"), "TRACE_SAMPLING_RATIO", read.problems)
        framework_spans = _flag(read.text("AGENT_FRAMEWORK_SPANS"), "AGENT_FRAMEWORK_SPANS", read.problems)
        checkpoint_lag = float(read.number("CHECKPOINT_LAG_SECONDS"))
        checkpoint_max_bytes = int(read.number("CHECKPOINT_MAX_BYTES"))
        alert_notify_grace = float(read.number("ALERT_NOTIFY_GRACE_SECONDS"))
        retention = Retention(
            closed_case_days=float(read.number("CLOSED_CASE_RETENTION_DAYS", positive=False)),
            settled_effect_days=float(read.number("SETTLED_EFFECT_RETENTION_DAYS", positive=False)),
            finished_checkpoint_days=float(read.number("FINISHED_CHECKPOINT_RETENTION_DAYS", positive=False)),
            alert_days=float(read.number("ALERT_RETENTION_DAYS", positive=False)),
            failure_days=float(read.number("FAILURE_RETENTION_DAYS", positive=False)),
        )
        read.raise_if_invalid()
        values = read.values
        return cls(
            store="cosmos" if store == "cosmos" else "sqlite",
            sqlite_path=Path(read.text("CASEKEEPER_SQLITE_PATH")),
            store_timeout=store_timeout,
            cosmos_endpoint=conn.cosmos_endpoint,
            cosmos_database=values["COSMOS_DATABASE"] or "casekeeper",
            cosmos_key=conn.cosmos_key,
            cosmos_connection_string=conn.cosmos_string,
            queue="local" if queue == "local" else "servicebus",
            local_queue_path=Path(read.text("CASEKEEPER_LOCAL_QUEUE_PATH")),
            service_bus_namespace=conn.namespace,
            service_bus_connection_string=conn.bus_string,
            case_events_queue=values["CASE_EVENTS_QUEUE"] or "case-events",
            webhook_secrets=tuple(s.strip() for s in (secret or "").split(",") if s.strip()),
            signature_v1_until=v1_until,
            call_timeout=call_timeout,
            supplier_portal_url=read.text("SUPPLIER_PORTAL_URL").rstrip("/"),
            supplier_timeout=supplier_timeout,
            rules=rules,
            azure_openai_endpoint=values["AZURE_OPENAI_ENDPOINT"],
            azure_openai_deployment=values["AZURE_OPENAI_DEPLOYMENT"],
            model=model,
            checkpoint_health_schedule=schedule,
            checkpoint_lag=checkpoint_lag,
            checkpoint_max_bytes=checkpoint_max_bytes,
            alert_webhook_url=values["ALERT_WEBHOOK_URL"],
            alert_notify_grace=alert_notify_grace,
            appinsights_connection_string=values["APPLICATIONINSIGHTS_CONNECTION_STRING"],
            backoff=backoff,
            retention=retention,
            trace_sampling_ratio=trace_sampling_ratio,
            agent_framework_spans=framework_spans,
        )


class _Reader:
    """The settings' raw values (trimmed; a blank one is its default) and what is wrong with them, collected
    so that one ``ConfigurationError`` names every problem."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.values: dict[str, str | None] = {
            name: (env.get(name) or "").strip() or default for name, default in _DEFAULTS.items()
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


def _timeouts(read: _Reader) -> tuple[float, float | None, float]:
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


def _schedule(read: _Reader) -> str:
    schedule = read.text("CHECKPOINT_HEALTH_SCHEDULE")
    if len(schedule.split()) != 6:
        read.problems.append(f"CHECKPOINT_HEALTH_SCHEDULE must be a 6-field NCRONTAB expression, not {schedule!r}")
    return schedule


def _backoff(read: _Reader) -> Backoff:
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
class _Connections:
    cosmos_endpoint: str | None = None
    cosmos_key: str | None = None
    cosmos_string: str | None = None
    namespace: str | None = None
    bus_string: str | None = None
    problems: list[str] = field(default_factory=list)


def _read_connections(values: Mapping[str, str | None], *, cosmos: bool, bus: bool, missing: list[str]) -> _Connections:
    """Both connections, each in whichever form is set (``shared.app.connections``). A required connection
    with neither form set: its identity-based name is reported missing (the error names both forms). Both
    forms set: refused, since the host and the code could read different ones."""
    found = _Connections(cosmos_endpoint=values[COSMOS_DB_ENDPOINT], cosmos_key=values["COSMOS_KEY"])
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


def _model_config(
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


def _ratio(raw: str, name: str, problems: list[str]) -> float:
    """A share from 0 to 1 inclusive (``0.25``: one trace in four)."""
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or not Decimal(0) <= value <= Decimal(1):
        problems.append(f"{name} must be a number from 0 to 1 (the share of traces kept, e.g. 0.25), not {raw!r}")
        return 1.0
    return float(value)


def _who_may_call(values: Mapping[str, str | None], problems: list[str]) -> float | None:
    """The settings that decide whom a request is taken from: the secrets must be resolved, the Easy Auth flag
    well-formed (``shared.web.identity`` reads it where each request is served), and the time until which
    ``v1=`` signatures count is returned."""
    problems.extend(_unresolved_references(values, ("WEBHOOK_SECRET", "ALERT_WEBHOOK_URL", "AZURE_OPENAI_API_KEY")))
    _flag(values["EASY_AUTH_ENABLED"] or "", "EASY_AUTH_ENABLED", problems)
    return _instant(values["WEBHOOK_SIGNATURE_V1_UNTIL"] or "", "WEBHOOK_SIGNATURE_V1_UNTIL", problems)


def _instant(raw: str, name: str, problems: list[str]) -> float | None:
    """An ISO 8601 time with its zone (``Z`` or an offset), as unix seconds; empty: ``None``."""
    if not raw:
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        problems.append(f"{name} must be an ISO 8601 time with its zone, e.g. 2027-01-31T00:00:00Z, not {raw!r}")
        return None
    return when.timestamp()


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _flag(raw: str, name: str, problems: list[str]) -> bool:
    value = raw.lower()
    if value not in _TRUE + _FALSE:
        problems.append(f"{name} must be true or false, not {raw!r}")
        return False
    return value in _TRUE


def _refused_in_azure(env: Mapping[str, str], *, store: str, queue: str) -> list[str]:
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
