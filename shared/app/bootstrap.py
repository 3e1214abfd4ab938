"""The composition root: the one place that wires settings, stores, clients and policy together.

Importing this module (which ``function_app.py`` does, and the Functions host does to index the
functions) opens nothing. :func:`services` builds everything on first use from the environment, once
per process, and reuses it; :func:`use` installs a prepared :class:`Services` (the local host, tests).
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from casekeeper import Case, Clock, DocumentStore, Effect, Guard, SystemClock, checkpoint_decoding
from casekeeper.capture import install as install_capture
from casekeeper.cases import CaseRepository, Ledger, Reconciler
from shared.app.alerts import Alerter
from shared.app.operations import Operations
from shared.app.retention import RetainingStore, backend
from shared.app.settings import Settings
from shared.app.telemetry import Telemetry
from shared.app.telemetry import configure as configure_telemetry
from shared.handlers import door
from shared.handlers.case_events import CaseEventDeps
from shared.handlers.effect_changes import EffectChangeDeps
from shared.handlers.health import HealthDeps
from shared.handlers.http import ApiDeps
from shared.handlers.ingress import Ingress
from shared.handlers.pages import OpsPageDeps, PageDeps
from shared.messaging import DeadLetterQueue, EventSender
from shared.supplier.portal import SupplierPortal
from shared.views.case import CaseRecords
from shared.views.resolution import Settler
from shared.views.runs import graph_hash_of
from shared.workflow.actions import money_watch
from shared.workflow.build import build_workflow
from shared.workflow.deps import WorkflowDeps
from shared.workflow.proposers import AgentProposer, Proposer, RulesProposer
from shared.workflow.runner import WorkflowRunner
from shared.workflow.worker import CaseWorker


@dataclass
class Services:
    """Everything one process built, and the handful of collaborators each trigger family takes.

    The handlers never see this object: each trigger in ``shared.functions`` hands its handler the one
    ``*Deps`` value below. The other fields are for the hosts (the local host, the tests) that start,
    inspect and close what was built.
    """

    settings: Settings
    ops: Operations
    sender: EventSender
    ingress: Ingress
    telemetry: Telemetry
    case_events: CaseEventDeps
    effect_changes: EffectChangeDeps
    health: HealthDeps
    api: ApiDeps
    pages: PageDeps

    # The parts the hosts and tests reach for, by their usual names.
    @property
    def store(self) -> DocumentStore:
        return self.ops.store

    @property
    def clock(self) -> Clock:
        return self.ops.clock

    @property
    def cases(self) -> CaseRepository:
        return self.ops.cases

    @property
    def ledger(self) -> Ledger:
        return self.ops.ledger

    @property
    def supplier(self) -> SupplierPortal:
        return self.ops.supplier

    @property
    def worker(self) -> CaseWorker:
        return self.ops.worker

    @property
    def reconciler(self) -> Reconciler:
        return self.ops.reconciler

    @property
    def dead_letters(self) -> DeadLetterQueue:
        return self.ops.dead_letters

    @property
    def alerts(self) -> Alerter:
        return self.ops.alerts

    def close(self) -> None:
        for own in (self.sender, self.ingress.sender, self.ingress.store):
            if own is self.ops.store or (own is self.ingress.sender and own is self.sender):
                continue
            closer = getattr(own, "close", None)
            if callable(closer):
                closer()
        self.ops.close()


def open_store(settings: Settings) -> DocumentStore:
    """The configured store, stamping each written document's time to live from ``settings.retention``
    (:class:`~shared.app.retention.RetainingStore`). Creating it does no network I/O (Cosmos connects on
    first use)."""
    return RetainingStore(_open_backend(settings), settings.retention)


def _open_backend(settings: Settings) -> DocumentStore:
    if settings.store == "cosmos":
        from casekeeper.stores.cosmos import cosmos_store_from_settings

        assert settings.cosmos_endpoint is not None
        options: dict[str, Any] = {}
        if settings.store_timeout is not None:
            options["read_timeout"] = settings.store_timeout
        return cosmos_store_from_settings(
            settings.cosmos_endpoint, settings.cosmos_database, settings.cosmos_key, **options
        )
    from casekeeper.stores.sqlite import SqliteDocumentStore

    if settings.store_timeout is not None:
        return SqliteDocumentStore(settings.sqlite_path, busy_timeout=settings.store_timeout)
    return SqliteDocumentStore(settings.sqlite_path)


def open_door_store(settings: Settings) -> DocumentStore:
    """The configured store as the door opens it, for itself alone: every call bounded by
    ``door.STORE_CALL_SECONDS`` (docs/design.md#door-budget). SQLite: that busy timeout, on its own
    connections to the same file. Cosmos DB: a client of its own whose total, connect and read timeouts are
    that budget, without transport retries, with at most one throttling retry, 0.2 s later (the SDK's
    defaults: 65 s reads retried by the transport, nine retries of a 429 over up to 30 s, each after the wait
    the server asks). A call cut short may have landed; the door's records are created
    if absent and compared, so a retry is safe. No network I/O here."""
    budget = door.STORE_CALL_SECONDS
    if settings.store_timeout is not None:  # a shorter store timeout (casekeeper chaos sets one) holds here too
        budget = min(budget, settings.store_timeout)
    if settings.store == "cosmos":
        from casekeeper.stores.cosmos import cosmos_store_from_settings

        assert settings.cosmos_endpoint is not None
        inner: DocumentStore = cosmos_store_from_settings(
            settings.cosmos_endpoint,
            settings.cosmos_database,
            settings.cosmos_key,
            timeout=budget,
            connection_timeout=budget,
            read_timeout=budget,
            # No transport retry (the SDK would retry a read that timed out, a budget each time); one retry of
            # a 429, a fifth of a second later: the SDK would otherwise wait the x-ms-retry-after-ms the server
            # asks (it may be seconds), and 0 here means its default of nine retries.
            retry_total=0,
            retry_throttle_total=1,
            retry_fixed_interval=200,
            retry_throttle_backoff_max=1,
        )
    else:
        from casekeeper.stores.sqlite import SqliteDocumentStore

        inner = SqliteDocumentStore(settings.sqlite_path, busy_timeout=budget)
    return RetainingStore(inner, settings.retention)


def open_door_sender(settings: Settings) -> EventSender:
    """The case-events sender as the door opens it, for itself alone: a send bounded by
    ``door.SEND_SECONDS``. The local queue: that busy timeout. Service Bus: that operation timeout, with at
    most one retry of its own. A send cut short may have landed: the retry is the same message id, which
    the broker drops."""
    budget = door.SEND_SECONDS
    if settings.queue == "local":
        from shared.messaging.local import LocalQueueEventSender
        from shared.messaging.sqlite_queue import LocalSessionQueue

        queue = LocalSessionQueue(settings.local_queue_path, busy_timeout=budget)
        return LocalQueueEventSender(queue, settings.case_events_queue, owns_queue=True)
    from shared.messaging.servicebus import ServiceBusEventSender, client_factories

    clients, _admin = client_factories(
        namespace=settings.service_bus_namespace,
        connection_string=settings.service_bus_connection_string,
        retry_total=1,
        retry_backoff_max=budget / 2,
    )
    return ServiceBusEventSender(settings.case_events_queue, clients, send_timeout=budget)


def open_sender(settings: Settings) -> EventSender:
    if settings.queue == "local":
        from shared.messaging.local import LocalQueueEventSender
        from shared.messaging.sqlite_queue import LocalSessionQueue

        return LocalQueueEventSender(LocalSessionQueue(settings.local_queue_path), settings.case_events_queue)
    from shared.messaging.servicebus import ServiceBusEventSender, client_factories

    clients, _admin = client_factories(
        namespace=settings.service_bus_namespace, connection_string=settings.service_bus_connection_string
    )
    return ServiceBusEventSender(settings.case_events_queue, clients)


def open_dead_letters(settings: Settings) -> DeadLetterQueue:
    """The case-events queue's dead letters. Opening connects to nothing."""
    if settings.queue == "local":
        from shared.messaging.local import LocalDeadLetters
        from shared.messaging.sqlite_queue import LocalSessionQueue

        return LocalDeadLetters(LocalSessionQueue(settings.local_queue_path), settings.case_events_queue)
    from shared.messaging.servicebus import ServiceBusDeadLetters, client_factories

    clients, admin = client_factories(
        namespace=settings.service_bus_namespace, connection_string=settings.service_bus_connection_string
    )
    return ServiceBusDeadLetters(settings.case_events_queue, clients, admin_factory=admin)


def build_operations(
    settings: Settings,
    *,
    store: DocumentStore | None = None,
    dead_letters: DeadLetterQueue | None = None,
    clock: Clock | None = None,
    proposer: Proposer | None = None,
    telemetry: Telemetry | None = None,
    probe: Callable[[str], None] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> Operations:
    """The store-side half: the case repository, the ledger, the reconciler, alerts, the case worker.
    What the operator commands use; it needs no webhook secret and no sender. Opens nothing and
    installs nothing process-wide. ``monotonic``: the clock the ledger measures the time since a claim by
    (its send deadline, rule R4): this process's own, unless a test puts the worker in its world's time."""
    telemetry = telemetry or Telemetry()
    store = store if store is not None else open_store(settings)
    clock = clock or SystemClock()
    alerts = Alerter(store, clock, webhook_url=settings.alert_webhook_url, notify_grace=settings.alert_notify_grace)

    def effects_for(case: Case) -> list[Effect]:
        return ledger.effects_for(case)  # the ledger below: made before any case is written

    # Every write of a case is judged by the money rule before it lands, whoever writes it: more requested than
    # the facts owe raises an over_requested alert (docs/design.md#money).
    cases = CaseRepository(store, clock, watch=money_watch(effects_for), alert=alerts.raise_alert)
    ledger = Ledger(
        store,
        cases,
        call_timeout=settings.call_timeout,
        late_watch=settings.late_watch,
        observer=telemetry.observe_effect,
        probe=probe,
        alert=alerts.raise_alert,
        send_margin=send_margin(settings),
        monotonic=monotonic,
    )
    supplier = SupplierPortal(settings.supplier_portal_url, timeout=settings.supplier_timeout)
    if proposer is None:
        if settings.model is not None:
            proposer = AgentProposer.from_config(settings.model, observer=telemetry.model_call)
        else:
            proposer = RulesProposer()
    # A checkpoint holding a type outside the allow-list was tampered with, or names a type this build
    # forgot to list: either way a person must know (casekeeper.checkpoint_decoding).
    checkpoint_decoding.on_refused(
        lambda types, digest: alerts.raise_alert(
            "checkpoint_type_refused",
            f"a stored checkpoint holds {', '.join(types)}, outside the allow-list; it was not loaded",
            {"types": types, "digest": digest},
            dedupe_key=digest,
        )
    )
    # The guard over the ledger configured above: the workflow's effects, their commits, re-checks by key.
    guard = Guard.from_parts(
        store,
        cases,
        ledger,
        on_escalate=lambda message, fields: alerts.raise_alert(
            "effect_escalated", message, fields, dedupe_key=str(fields.get("effectKey"))
        ),
        probe=probe,
        alert=alerts.raise_alert,
        # A failed lookup is retried a few times before a person is asked; pace it by the call timeout.
        lookup_backoff=max(1.0, min(60.0, settings.call_timeout / 4)),
        trace=telemetry.span,
    )
    workflow = WorkflowDeps(
        guard=guard,
        cases=cases,
        ledger=ledger,
        supplier=supplier,
        proposer=proposer,
        rules=settings.rules,
        telemetry=telemetry,
        probe=probe or (lambda point: None),
        alert=alerts.raise_alert,
    )
    # The guard's own reconciler (its policy: the credit-note request declared on it by the workflow's
    # deps), for the commands and the timer that settle effects themselves.
    reconciler = guard.reconciler
    return Operations(
        store=store,
        clock=clock,
        cases=cases,
        ledger=ledger,
        reconciler=reconciler,
        alerts=alerts,
        dead_letters=dead_letters if dead_letters is not None else open_dead_letters(settings),
        workflow=workflow,
        worker=CaseWorker(
            WorkflowRunner(
                workflow, store, checkpoint_max_bytes=settings.checkpoint_max_bytes, alert=alerts.raise_alert
            )
        ),
        supplier=supplier,
    )


def send_margin(settings: Settings) -> float:
    """The ledger's gate deadline margin: what sending can take (the supplier client's pool, connect and
    write phases) plus a second for a store clock with whole-second resolution (Cosmos DB's ``_ts``).
    At most half the call timeout, so that short test timeouts still leave time to send."""
    return min(3 * settings.supplier_timeout + 1.0, settings.call_timeout / 2)


def build(
    settings: Settings,
    *,
    store: DocumentStore | None = None,
    sender: EventSender | None = None,
    dead_letters: DeadLetterQueue | None = None,
    clock: Clock | None = None,
    proposer: Proposer | None = None,
    telemetry: Telemetry | None = None,
    probe: Callable[[str], None] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    door_store: DocumentStore | None = None,
    door_sender: EventSender | None = None,
) -> Services:
    """Wire everything. Pass ``store``/``sender``/``clock``/``proposer``/``telemetry`` to replace the
    configured ones. ``probe`` is called at the failure points F1, F2, F4 (the ledger), F5 and F6 (the
    commit) by name: the fault tests raise there to stop a run as a crash would; production passes none.
    ``monotonic`` is the process's monotonic clock: the ledger's for the send deadline
    (:func:`build_operations`), and the door's for its budget per request. ``door_store`` and
    ``door_sender``: what the door uses, with its short budgets (:func:`open_door_store`,
    :func:`open_door_sender`); by default opened from ``settings``, or, where ``store``/``sender`` is given,
    that one.

    Nothing process-wide changes here: the host that runs workflows installs the checkpoint-failure
    capture itself (:func:`start`)."""
    telemetry = telemetry or Telemetry()
    ops = build_operations(
        settings,
        store=store,
        dead_letters=dead_letters,
        clock=clock,
        proposer=proposer,
        telemetry=telemetry,
        probe=probe,
        monotonic=monotonic,
    )
    if door_sender is None:
        door_sender = open_door_sender(settings) if sender is None else sender
    sender = sender if sender is not None else open_sender(settings)
    if door_store is None:
        door_store = open_door_store(settings) if store is None else ops.store
    records = CaseRecords(store=ops.store, cases=ops.cases, ledger=ops.ledger)
    ingress = Ingress(
        settings.webhook_secrets,
        door_sender,
        ops.clock,
        store=door_store,
        future_skew=settings.future_skew,
        monotonic=monotonic,
    )
    return Services(
        settings=settings,
        ops=ops,
        sender=sender,
        ingress=ingress,
        telemetry=telemetry,
        case_events=CaseEventDeps(
            worker=ops.worker,
            guard=ops.workflow.guarded[0],
            sender=sender,
            store=ops.store,
            clock=ops.clock,
            backoff=settings.backoff,
            telemetry=telemetry,
        ),
        effect_changes=EffectChangeDeps(guard=ops.workflow.guarded[0], sender=sender, telemetry=telemetry),
        health=HealthDeps(
            store=ops.store,
            cases=ops.cases,
            ledger=ops.ledger,
            sender=sender,
            alerts=ops.alerts,
            dead_letters=ops.dead_letters,
            checkpoint_lag=settings.checkpoint_lag,
            invoice_wait=settings.invoice_wait,
            open_case_grace=settings.call_timeout,
            call_timeout=settings.call_timeout,
        ),
        api=ApiDeps(
            ingress=ingress,
            records=records,
            clock=ops.clock,
            telemetry=telemetry,
            backends={"store": settings.store, "queue": settings.queue},
        ),
        pages=PageDeps(
            records=records,
            clock=ops.clock,
            ingress=ingress,
            ops_page=OpsPageDeps(
                alerts=ops.alerts,
                dead_letters=ops.dead_letters,
                graph_hash=lambda: graph_hash_of(build_workflow, ops.workflow),
                resolver=Settler(clock=ops.clock, cases=ops.cases, ledger=ops.ledger, reconciler=ops.reconciler),
            ),
            webhook_secrets=settings.webhook_secrets,
            store_option=store_option(settings, ops.store),
            platform=os.environ,
        ),
    )


def start(svc: Services) -> Services:
    """What a process that runs workflows does once it built its services: checkpoint-save failures are
    recorded in this store from now on (``casekeeper.capture``)."""
    install_capture(svc.store)
    return svc


def store_option(settings: Settings, store: DocumentStore) -> str:
    """How an operator command names this store: ``--data DIR`` for a local host's SQLite file, else
    ``--from-settings``."""
    from casekeeper.stores.sqlite import SqliteDocumentStore

    path = settings.sqlite_path
    if isinstance(backend(store), SqliteDocumentStore) and path.name == "casekeeper.sqlite":
        return f"--data {shlex.quote(str(path.parent))}"
    return "--from-settings"


class _Holder:
    """The process's one :class:`Services`, built lazily under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.services: Services | None = None


_holder = _Holder()


def services() -> Services:
    """The process's services, built from the environment on first use."""
    with _holder.lock:
        if _holder.services is None:
            settings = Settings.from_mapping(os.environ)
            configure_telemetry(settings)
            _holder.services = start(build(settings))
        return _holder.services


def use(prepared: Services | None) -> None:
    """Install ``prepared`` as the process's services (``None``: build from the environment next time)."""
    with _holder.lock:
        _holder.services = prepared
