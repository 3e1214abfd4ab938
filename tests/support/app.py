"""Wiring for tests that run the case worker against a real store and a real supplier stub."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_framework import Workflow

from casekeeper.capture import install as install_capture
from casekeeper.core.cases import Case, CaseRepository
from casekeeper.core.clock import ManualClock
from casekeeper.core.effect import Effect
from casekeeper.core.ledger import Ledger
from casekeeper.core.ports import DocumentStore
from shared.app.alerts import Alerter
from shared.domain.events import CaseEvent
from shared.domain.invoice import Rules
from shared.supplier.portal import SupplierPortal
from shared.workflow.actions import money_watch
from shared.workflow.build import build_workflow
from shared.workflow.deps import WorkflowDeps
from shared.workflow.proposers import Proposer, RulesProposer
from shared.workflow.runner import WorkflowRunner
from shared.workflow.worker import CaseWorker, EventResult


@dataclass
class Harness:
    store: DocumentStore
    worker: CaseWorker
    deps: WorkflowDeps

    @property
    def cases(self) -> CaseRepository:
        return self.deps.cases

    @property
    def ledger(self) -> Ledger:
        return self.deps.ledger

    def handle(self, type_: str, case_id: str, **data: Any) -> EventResult:
        return asyncio.run(self.worker.handle(CaseEvent(type_, case_id, data)))


def make_harness(
    store: DocumentStore,
    supplier_url: str,
    *,
    proposer: Proposer | None = None,
    call_timeout: float = 120.0,
    rules: Rules | None = None,
    build: Callable[[WorkflowDeps], Workflow] = build_workflow,
    probe: Callable[[str], None] | None = None,
    allowed_checkpoint_types: frozenset[str] | None = None,
) -> Harness:
    alerts = Alerter(store, ManualClock())

    def effects_for(case: Case) -> list[Effect]:
        return ledger.effects_for(case)

    # As the composition root wires it: every case write judged by the money rule (shared.app.bootstrap).
    cases = CaseRepository(store, ManualClock(), watch=money_watch(effects_for), alert=alerts.raise_alert)
    ledger = Ledger(store, cases, call_timeout=call_timeout, probe=probe)
    deps = WorkflowDeps(
        cases=cases,
        ledger=ledger,
        supplier=SupplierPortal(supplier_url, timeout=min(10.0, call_timeout / 2)),
        proposer=proposer or RulesProposer(),
        rules=rules or Rules(),
        probe=probe or (lambda point: None),
    )
    install_capture(store)  # what the composition root does: checkpoint failures are recorded in this store
    kwargs: dict[str, Any] = {"build": build, "alert": alerts.raise_alert}
    if allowed_checkpoint_types is not None:
        kwargs["allowed_checkpoint_types"] = allowed_checkpoint_types
    return Harness(store, CaseWorker(WorkflowRunner(deps, store, **kwargs)), deps)
