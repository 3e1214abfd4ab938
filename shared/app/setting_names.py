"""The settings' names, defaults and help: one table (:data:`SETTINGS`), the same names everywhere
(environment variables / Functions app settings, ``local.settings.sample.json``, ``infra/``). Read and checked
by :meth:`shared.app.settings.Settings.from_mapping`."""

from __future__ import annotations

from dataclasses import dataclass

from casekeeper.cases import DEFAULT_CALL_TIMEOUT, DEFAULT_LATE_WATCH
from shared.workflow.model_client import DEFAULT_API_VERSION

MAX_MODEL_TIMEOUT = 120.0
"""One event may ask the model up to four times (a resumed run, then up to three decisions); at 120 s each
that stays inside the 10-minute ``functionTimeout`` of host.json, with room for the rest of the event."""


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
    Setting(
        "LATE_WATCH_SECONDS",
        f"{DEFAULT_LATE_WATCH:g}",
        "how long an effect a person resolved failed is still looked up by key (at least CALL_TIMEOUT_SECONDS)",
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
    Setting(
        "FUTURE_SKEW_SECONDS",
        "300",
        "an event whose data.occurredAt is further than this ahead of the store's clock is refused at the door (400)",
    ),
    Setting(
        "INVOICE_WAIT_SECONDS",
        "86400",
        "a case holding facts but no invoice (awaiting_invoice) this long after its last fact raises invoice_missing",
    ),
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

DEFAULTS: dict[str, str | None] = {s.name: s.default for s in SETTINGS}
"""Each setting's default (``None``: unset unless given)."""

# Set by the App Service platform on every instance of a site, Functions apps included (never by Casekeeper,
# its local host or its tests). Either one means "running in Azure".
AZURE_MARKERS = ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME")
