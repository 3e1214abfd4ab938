"""What the workflow's executors are built from (the composition root makes one per process)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.app.telemetry import Telemetry
from shared.core.cases import Case, CaseRepository
from shared.core.commits import CommitFinisher
from shared.core.ledger import AlertSink, Ledger
from shared.domain.invoice import Rules
from shared.workflow.proposers import Proposer


@dataclass
class WorkflowDeps:
    cases: CaseRepository
    ledger: Ledger
    supplier: Any  # a SupplierPortal (request_credit_note, find_credit_note), or a test's stand-in
    proposer: Proposer
    rules: Rules
    probe: Callable[[str], None] = lambda point: None
    """Called at named points (``F5``, ``F6``); the crash tests kill the process there."""
    telemetry: Telemetry = field(default_factory=Telemetry)
    known_case: Case | None = None
    """For one run: the case as the event just wrote it; the run's first read of it is skipped."""
    new_case: bool = False
    """For one run: ``known_case`` was created by this event, so it has no effects yet (none are read)."""
    alert: AlertSink | None = None
    """Raises the finisher's alerts (an effect that happened on a version the case left)."""

    @property
    def finisher(self) -> CommitFinisher:
        return CommitFinisher(self.cases, self.ledger, alert=self.alert)
