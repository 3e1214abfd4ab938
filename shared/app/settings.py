"""Settings, read once into a typed object.

The names are the same everywhere: environment variables / Functions app settings,
``local.settings.sample.json`` and ``infra/``. A test checks that the sample and the Bicep list every
name in :data:`SETTINGS` (the table is :mod:`shared.app.setting_names`). :meth:`Settings.from_mapping` names
every missing or invalid setting at once (the checks are :mod:`shared.app.setting_checks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shared.app.retention import Retention
from shared.app.setting_checks import (
    Reader,
    backoff_of,
    flag,
    model_config,
    ratio,
    read_connections,
    refused_in_azure,
    schedule_of,
    timeouts,
    who_may_call,
)
from shared.app.setting_names import AZURE_MARKERS, MAX_MODEL_TIMEOUT, SETTINGS, Setting
from shared.domain.invoice import Rules
from shared.messaging.retry import Backoff
from shared.workflow.model_client import ModelConfig

__all__ = ["AZURE_MARKERS", "MAX_MODEL_TIMEOUT", "SETTINGS", "Setting", "Settings"]


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
    call_timeout: float
    late_watch: float
    """``LATE_WATCH_SECONDS``: how long an effect a person resolved failed is still looked up by key."""
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
    future_skew: float
    """``FUTURE_SKEW_SECONDS``: how far ahead of the store's clock an event's ``occurredAt`` may be."""
    invoice_wait: float
    """``INVOICE_WAIT_SECONDS``: how long a case may hold facts without its invoice before ``invoice_missing``."""
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
        read = Reader(env)
        store = read.choice("CASEKEEPER_STORE", ("sqlite", "cosmos"))
        queue = read.choice("CASEKEEPER_QUEUE", ("servicebus", "local"))
        read.problems.extend(refused_in_azure(env, store=store, queue=queue))
        conn = read_connections(read.values, cosmos=store == "cosmos", bus=queue == "servicebus", missing=read.missing)
        read.problems.extend(conn.problems)
        secret = read.require("WEBHOOK_SECRET") if receives_events else read.values["WEBHOOK_SECRET"]
        who_may_call(read.values, read.problems)
        call_timeout, store_timeout, supplier_timeout = timeouts(read)
        late_watch = float(read.number("LATE_WATCH_SECONDS"))
        if late_watch < call_timeout:
            read.problems.append("LATE_WATCH_SECONDS must be at least CALL_TIMEOUT_SECONDS")
        rules = Rules(
            tolerance=read.number("VARIANCE_TOLERANCE", positive=False),
            approval_threshold=read.number("APPROVAL_THRESHOLD"),
        )
        model = model_config(read.values, read.number, read.problems)
        schedule = schedule_of(read)
        backoff = backoff_of(read)
        trace_sampling_ratio = ratio(read.text("TRACE_SAMPLING_RATIO"), "TRACE_SAMPLING_RATIO", read.problems)
        framework_spans = flag(read.text("AGENT_FRAMEWORK_SPANS"), "AGENT_FRAMEWORK_SPANS", read.problems)
        checkpoint_lag = float(read.number("CHECKPOINT_LAG_SECONDS"))
        checkpoint_max_bytes = int(read.number("CHECKPOINT_MAX_BYTES"))
        alert_notify_grace = float(read.number("ALERT_NOTIFY_GRACE_SECONDS"))
        future_skew = float(read.number("FUTURE_SKEW_SECONDS"))
        invoice_wait = float(read.number("INVOICE_WAIT_SECONDS"))
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
            call_timeout=call_timeout,
            late_watch=late_watch,
            supplier_portal_url=read.text("SUPPLIER_PORTAL_URL").rstrip("/"),
            supplier_timeout=supplier_timeout,
            rules=rules,
            azure_openai_endpoint=values["AZURE_OPENAI_ENDPOINT"],
            azure_openai_deployment=values["AZURE_OPENAI_DEPLOYMENT"],
            model=model,
            checkpoint_health_schedule=schedule,
            checkpoint_lag=checkpoint_lag,
            checkpoint_max_bytes=checkpoint_max_bytes,
            future_skew=future_skew,
            invoice_wait=invoice_wait,
            alert_webhook_url=values["ALERT_WEBHOOK_URL"],
            alert_notify_grace=alert_notify_grace,
            appinsights_connection_string=values["APPLICATIONINSIGHTS_CONNECTION_STRING"],
            backoff=backoff,
            retention=retention,
            trace_sampling_ratio=trace_sampling_ratio,
            agent_framework_spans=framework_spans,
        )
