"""The composition root: the one place that wires settings, stores, clients and policy together.

Importing this module (which ``function_app.py`` does, and the Functions host does to index the
functions) opens nothing. :func:`services` builds everything on first use from the environment, once
per process, and reuses it; :func:`use` installs a prepared :class:`Services` (the local host, tests).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.app.alerts import Alerter
from shared.app.settings import Settings
from shared.app.telemetry import Telemetry
from shared.app.telemetry import configure as configure_telemetry
from shared.core.cases import CaseRepository
from shared.core.clock import Clock
from shared.core.ledger import Ledger
from shared.core.ports import DocumentStore
from shared.core.reconcile import Reconciler
from shared.handlers.ingress import Ingress
from shared.messaging import DeadLetterQueue, EventSender
from shared.supplier.portal import SupplierPortal
from shared.workflow.actions import REQUEST_CREDIT_NOTE, credit_note_policy
from shared.workflow.capture import install as install_capture
from shared.workflow.executors import WorkflowDeps
from shared.workflow.proposers import AgentProposer, Proposer, RulesProposer
from shared.workflow.worker import CaseWorker


class SystemClock:
    """The wall clock, for human-facing timestamps only (safety decisions use the store's clock)."""

    def now(self) -> float:
        return time.time()


@dataclass
class Services:
    settings: Settings
    store: DocumentStore
    clock: Clock
    cases: CaseRepository
    ledger: Ledger
    supplier: SupplierPortal
    worker: CaseWorker
    reconciler: Reconciler
    sender: EventSender
    dead_letters: DeadLetterQueue
    ingress: Ingress
    alerts: Alerter
    telemetry: Telemetry
    extra: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        self.supplier.close()
        closer = getattr(self.sender, "close", None)
        if callable(closer):
            closer()
        self.store.close()


def open_store(settings: Settings) -> DocumentStore:
    """The configured store. Creating it does no network I/O (Cosmos connects on first use)."""
    if settings.store == "cosmos":
        from shared.stores.cosmos import cosmos_store_from_settings

        assert settings.cosmos_endpoint is not None
        return cosmos_store_from_settings(settings.cosmos_endpoint, settings.cosmos_database, settings.cosmos_key)
    from shared.stores.sqlite import SqliteDocumentStore

    return SqliteDocumentStore(settings.sqlite_path)


def open_sender(settings: Settings) -> EventSender:
    if settings.queue == "local":
        from shared.messaging.local import LocalQueueEventSender
        from shared.messaging.sqlite_queue import LocalSessionQueue

        return LocalQueueEventSender(LocalSessionQueue(settings.local_queue_path), settings.case_events_queue)
    from shared.messaging.servicebus import ServiceBusEventSender, identity_client_factory

    assert settings.service_bus_namespace is not None
    return ServiceBusEventSender(settings.case_events_queue, identity_client_factory(settings.service_bus_namespace))


def open_dead_letters(settings: Settings) -> DeadLetterQueue:
    """The case-events queue's dead letters. Opening connects to nothing."""
    if settings.queue == "local":
        from shared.messaging.local import LocalDeadLetters
        from shared.messaging.sqlite_queue import LocalSessionQueue

        return LocalDeadLetters(LocalSessionQueue(settings.local_queue_path), settings.case_events_queue)
    from shared.messaging.servicebus import ServiceBusDeadLetters, identity_admin_factory, identity_client_factory

    namespace = settings.service_bus_namespace
    assert namespace is not None
    return ServiceBusDeadLetters(
        settings.case_events_queue,
        identity_client_factory(namespace),
        admin_factory=identity_admin_factory(namespace),
    )


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
) -> Services:
    """Wire everything. Pass ``store``/``sender``/``clock``/``proposer``/``telemetry`` to replace the
    configured ones. ``probe`` is called at the failure points F1, F2, F4 (the ledger), F5 and F6 (the
    commit) by name: the fault tests raise there to stop a run as a crash would; production passes none."""
    telemetry = telemetry or Telemetry()
    store = store if store is not None else open_store(settings)
    sender = sender if sender is not None else open_sender(settings)
    clock = clock or SystemClock()
    cases = CaseRepository(store, clock)
    ledger = Ledger(store, cases, call_timeout=settings.call_timeout, observer=telemetry.observe_effect, probe=probe)
    supplier = SupplierPortal(settings.supplier_portal_url, timeout=settings.supplier_timeout)
    if proposer is None:
        if settings.azure_openai_endpoint and settings.azure_openai_deployment:
            proposer = AgentProposer.from_azure_openai(settings.azure_openai_endpoint, settings.azure_openai_deployment)
        else:
            proposer = RulesProposer()
    alerts = Alerter(store, clock, webhook_url=settings.alert_webhook_url)
    deps = WorkflowDeps(
        cases=cases,
        ledger=ledger,
        supplier=supplier,
        proposer=proposer,
        rules=settings.rules,
        telemetry=telemetry,
        probe=probe or (lambda point: None),
    )
    reconciler = Reconciler(
        ledger,
        cases,
        store,
        {REQUEST_CREDIT_NOTE: credit_note_policy(supplier)},
        alert=lambda message, fields: alerts.raise_alert(
            "effect_escalated", message, fields, dedupe_key=str(fields.get("effectKey"))
        ),
        # A failed lookup is retried a few times before a person is asked; pace it by the call timeout.
        lookup_backoff=max(1.0, min(60.0, settings.call_timeout / 4)),
    )
    install_capture(store)
    return Services(
        settings=settings,
        store=store,
        clock=clock,
        cases=cases,
        ledger=ledger,
        supplier=supplier,
        worker=CaseWorker(deps, store, checkpoint_max_bytes=settings.checkpoint_max_bytes),
        reconciler=reconciler,
        sender=sender,
        dead_letters=dead_letters if dead_letters is not None else open_dead_letters(settings),
        ingress=Ingress(settings.webhook_secrets, sender, clock),
        alerts=alerts,
        telemetry=telemetry,
    )


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
            _holder.services = build(settings)
        return _holder.services


def use(prepared: Services | None) -> None:
    """Install ``prepared`` as the process's services (``None``: build from the environment next time)."""
    with _holder.lock:
        _holder.services = prepared
