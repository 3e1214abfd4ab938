"""What the workflow's executors are built from (the composition root makes one per process), and the port
through which the workflow reports to telemetry (:class:`WorkflowTelemetry`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from casekeeper import Guard, GuardedEffect, Record
from casekeeper.records import AlertSink, Ledger
from casekeeper.records import RecordRepository as CaseRepository
from shared.domain.invoice import Rules
from shared.workflow.actions import declare_credit_note
from shared.workflow.proposers import Proposer


class WorkflowTelemetry(Protocol):
    """What the workflow reports: spans around its stages (``propose``, ``commit_status``, ``workflow.run``,
    and the guard's, to which ``span`` is handed as its ``trace``) and the status commits it lost to a race.
    The app's ``shared.app.telemetry.Telemetry`` is one (OpenTelemetry); the workflow never imports it."""

    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
        """A context manager around one stage; what it yields takes ``set_attribute(key, value)``. An
        exception raised inside marks the stage as failed and propagates."""
        ...

    def lost_commit(self, where: str) -> None:
        """A status commit at ``where`` (``commit``, ``approval-gate``) lost to another writer."""
        ...


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass


class NoTelemetry:
    """Reports nothing: what a workflow built without the composition root's telemetry reports through (the
    tests' harness, the benchmarks)."""

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[_NoSpan]:
        yield _NoSpan()

    def lost_commit(self, where: str) -> None:
        pass


@dataclass
class WorkflowDeps:
    cases: CaseRepository
    ledger: Ledger
    supplier: Any  # a SupplierPortal (request_credit_note, find_credit_note), or a test's stand-in
    proposer: Proposer
    rules: Rules
    probe: Callable[[str], None] = lambda point: None
    """Called at named points (``F5``, ``F6``); the crash tests kill the process there."""
    telemetry: WorkflowTelemetry = field(default_factory=NoTelemetry)
    """The app's telemetry (the composition root passes its ``Telemetry``); by default nothing is reported."""
    known_case: Record | None = None
    """For one run: the case as the event just wrote it; the run's first read of it is skipped."""
    new_case: bool = False
    """For one run: ``known_case`` was created by this event, so it has no effects yet (none are read)."""
    alert: AlertSink | None = None
    """Raises the guard's alerts (an effect that happened on a version the case left)."""
    guard: Guard | None = None
    """The guard the workflow decides and acts through; made over ``cases`` and ``ledger`` when not given
    (with the credit-note request declared on it)."""
    credit_note: GuardedEffect | None = None
    """The credit-note request declared on ``guard`` (declared there when not given)."""

    def __post_init__(self) -> None:
        if self.guard is None:
            self.guard = Guard.from_parts(
                self.ledger.store,
                self.cases,
                self.ledger,
                probe=self.probe,
                alert=self.alert,
                trace=self.telemetry.span,
            )
        if self.credit_note is None:
            self.credit_note = declare_credit_note(self.guard, self.supplier)

    @property
    def guarded(self) -> tuple[Guard, GuardedEffect]:
        """The guard and the credit-note effect (always set after construction)."""
        assert self.guard is not None and self.credit_note is not None
        return self.guard, self.credit_note
