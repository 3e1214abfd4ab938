"""The invoice app's own errors, under the guard's tree (``casekeeper.errors``).

The guard's errors (stores, records, effects, downstream calls) are drawn in ``casekeeper.core.errors``.
The app adds the errors of its events, its queue and its model; a trigger settles a message from the
type alone. Drawn here with the guard classes they hang under::

    CasekeeperError                      retryable  meaning
    ├── InvalidEvent                     no         malformed or impossible event: set it aside
    ├── QueueError                       no         the message queue failed (Service Bus, the local queue)
    │   ├── QueueUnavailable             yes        transient: unreachable, throttled, timed out, closed
    │   └── LockLost                     no         a settlement whose message lock is no longer held
    ├── CaseError                        no         about one case (the guard's)
    │   └── InvalidProposal              no         a proposal the facts do not allow
    └── ModelUnavailable                 yes        the model was throttled, failed, timed out, or no token

A model call is not retried in place (``wait_in_place`` is false; ``shared.handlers.case_events``): it is
slow, and its service asks for a wait (``retry_after``) that only a delayed copy of the event honours
without holding the case's session.

``LockLost`` in ``shared.messaging.sqlite_queue`` is defined next to the only code that raises it: only
the local session queue raises it; in Azure the Functions host settles messages and meets Service Bus's
own ``MessageLockLostError``. The messaging ports (``shared.messaging``) raise ``QueueError``;
``StoreError`` is for the document store. The local session queue itself (``LocalSessionQueue``) reports
its SQLite file's failures as ``StoreError``, as every SQLite user in this code does; its port adapters
(``shared.messaging.local``) translate them, so a caller of a port sees ``QueueError`` on every backend.
``tests/unit/test_errors_tree.py`` checks this drawing against every ``CasekeeperError`` subclass in
``shared``.
"""

from __future__ import annotations

from typing import Any

from casekeeper.errors import CaseError, CasekeeperError


class InvalidEvent(CasekeeperError):
    """An event that is malformed, or impossible for its case: it is set aside, never retried."""

    def __init__(self, reason: str, *, case_id: str | None = None, fields: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.case_id = case_id
        self.fields = dict(fields or {})


# --- queue -------------------------------------------------------------------------------------


class QueueError(CasekeeperError):
    """The message queue failed (sending, scheduling, reading dead letters, settling); subclasses say how."""

    def __init__(self, message: str, *, queue: str | None = None) -> None:
        super().__init__(message)
        self.queue = queue


class QueueUnavailable(QueueError):
    """The broker cannot be reached, is throttling, timed out, or the sender is closed; trying later can help."""

    retryable = True


class InvalidProposal(CaseError):
    """A proposal that the case's facts or status do not allow; it is never executed."""

    def __init__(self, reason: str, *, case_id: str, proposal: dict[str, Any] | None = None) -> None:
        super().__init__(f"invalid proposal for case {case_id!r}: {reason}", case_id=case_id)
        self.reason = reason
        self.proposal = dict(proposal or {})


# --- the model ---------------------------------------------------------------------------------


class ModelUnavailable(CasekeeperError):
    """The model could not answer now: throttled (429), a server error (5xx), a timeout, a dropped
    connection, or no token for it. Trying later can help; nothing was proposed.

    ``kind``: ``throttled``, ``server_error``, ``timeout``, ``unreachable`` or ``token``. ``retry_after``:
    the seconds the service asked to wait (its ``Retry-After``), or ``None``. ``facts_recorded``: as for
    ``EffectInFlight``, the event's facts are recorded and only the decision waits."""

    retryable = True
    wait_in_place = False

    def __init__(
        self,
        reason: str,
        *,
        kind: str,
        case_id: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        deployment: str | None = None,
        facts_recorded: bool = False,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.case_id = case_id
        self.status = status
        self.retry_after = retry_after
        self.deployment = deployment
        self.facts_recorded = facts_recorded

    def after_facts(self) -> ModelUnavailable:
        """The same failure, known to come after the event's facts were recorded."""
        return ModelUnavailable(
            self.reason,
            kind=self.kind,
            case_id=self.case_id,
            status=self.status,
            retry_after=self.retry_after,
            deployment=self.deployment,
            facts_recorded=True,
        )
