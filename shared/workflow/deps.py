"""What the workflow's executors are built from (the composition root makes one per process), and what one run
knows before it starts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from casekeeper import Case, Guard, GuardedEffect
from casekeeper.cases import AlertSink, CaseRepository, Ledger
from shared.domain.invoice import Rules
from shared.ports import NoTelemetry, WorkflowTelemetry
from shared.workflow.actions import declare_credit_note
from shared.workflow.proposers import Proposer


@dataclass(frozen=True)
class RunKnowledge:
    """What one run knows before it starts: the case as its event just wrote it (the run's first read of it is
    skipped), and whether the event created it (then it has no effects yet, and none are read)."""

    known_case: Case | None = None
    new_case: bool = False


_NOTHING_KNOWN = RunKnowledge()
_RUN: ContextVar[RunKnowledge] = ContextVar("casekeeper_workflow_run", default=_NOTHING_KNOWN)


@contextmanager
def run_knowing(known_case: Case | None, *, new_case: bool = False) -> Iterator[None]:
    """Within this block (and the tasks and threads it starts, which copy the context), the workflow's
    executors see ``known_case`` and ``new_case`` as their run's (:attr:`WorkflowDeps.known_case`).

    Per run, not per workflow object: the executors are built once and serve one run after another
    (``shared.workflow.runner``), and two sessions' runs on one event loop are two tasks, each with its own
    context, so neither sees the other's case."""
    token = _RUN.set(RunKnowledge(known_case, new_case) if known_case is not None else _NOTHING_KNOWN)
    try:
        yield
    finally:
        _RUN.reset(token)


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
    def known_case(self) -> Case | None:
        """For the current run (:func:`run_knowing`): the case as the event just wrote it; ``None`` otherwise."""
        return _RUN.get().known_case

    @property
    def new_case(self) -> bool:
        """For the current run (:func:`run_knowing`): ``known_case`` was created by this event (no effects)."""
        return _RUN.get().new_case

    @property
    def guarded(self) -> tuple[Guard, GuardedEffect]:
        """The guard and the credit-note effect (always set after construction)."""
        assert self.guard is not None and self.credit_note is not None
        return self.guard, self.credit_note
