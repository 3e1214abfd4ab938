"""The store-side half of the app: what acts on cases and effects without receiving events.

The operator commands take this (and the hosts, through ``Services``). No handler does: each takes the
few parts it uses (``ApiDeps``, ``PageDeps``, ...), which the composition root picks from here. It holds no
sender and no webhook secret: building it needs neither (``shared.app.bootstrap.build_operations``).
"""

from __future__ import annotations

from dataclasses import dataclass

from casekeeper import Clock, DocumentStore
from casekeeper.cases import CaseRepository, Ledger, Reconciler
from shared.app.alerts import Alerter
from shared.messaging import DeadLetterQueue
from shared.supplier.portal import SupplierPortal
from shared.workflow.deps import WorkflowDeps
from shared.workflow.worker import CaseWorker


@dataclass(frozen=True)
class Operations:
    store: DocumentStore
    clock: Clock
    cases: CaseRepository
    ledger: Ledger
    reconciler: Reconciler
    alerts: Alerter
    dead_letters: DeadLetterQueue
    workflow: WorkflowDeps
    """What the workflow is built from (the graph hash an operator command checks is this build's)."""
    worker: CaseWorker
    supplier: SupplierPortal

    def close(self) -> None:
        self.supplier.close()
        self.store.close()
