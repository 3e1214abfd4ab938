"""The guard's errors: one tree, so a caller settles its work from the type alone.

::

    CasekeeperError                      retryable  meaning
    ├── ConfigurationError               no         settings missing or invalid
    ├── StoreError                       no         a storage backend failed
    │   ├── StoreUnavailable             yes        transient: throttled, timed out, unreachable
    │   ├── AlreadyExists                no         create found the document already there
    │   ├── ConcurrencyConflict          yes        a conditional write lost (ETag / row version)
    │   └── InvalidDocumentId            no         an id no backend may store (``casekeeper.core.ids``)
    ├── CaseError                        no         about one case
    │   ├── CaseNotFound                 no         no such case
    │   ├── CaseTooLarge                 no         the write would take the case past its size bound
    │   ├── CheckpointUnusable           no         this build cannot resume a stored checkpoint: rebuild
    │   ├── ApprovalNotPending           no         the answered request is not pending: answered, withdrawn
    │   └── StaleApproval                no         answered on a version the case has left (rule R6)
    ├── EffectError                      no         about one guarded side effect (key, case, action)
    │   ├── EffectInFlight               yes        another attempt is mid-call: retry after ``retry_after``
    │   ├── NeedsReconciliation          no         started long ago, outcome unknown: never retry blindly
    │   ├── EffectFailed                 no         the downstream definitely refused (recorded)
    │   ├── StaleDecision                no         the case moved on since the decision: decide again
    │   ├── OutcomeAlreadyRecorded       no         a late outcome lost to one recorded meanwhile
    │   ├── MissingCommitIntent          no         a ``done`` effect names no commit: a person settles it
    │   ├── ArgumentsMismatch            no         the key was claimed with other arguments: name a part
    │   └── ApprovalPending              no         a pending request guards the action: answer it first
    └── DownstreamError                  no         raised by a callee, read by the ledger
        ├── DownstreamRejected           no         definite refusal (a 4xx): recorded as ``failed``
        └── OutcomeUnknown               yes        timeout, 5xx, reset: the row stays ``started``
            └── SendDeadlinePassed       yes        not sent: too long since the gate (rule R4's deadline)

``retryable`` says whether trying the same thing again later can help. ``wait_in_place`` says whether
a caller may first retry a retryable error a few times in place (the invoice app's case worker does,
holding its message) rather than only later. Context travels as attributes (case id, key, versions),
never only in the message text.

Three classes of the tree are defined next to the only code that raises them, not in this module:
``CheckpointUnusable`` in ``casekeeper.checkpoints`` (its ``kind`` names the checkpoint storage's
reasons), ``ApprovalNotPending`` in ``casekeeper.errors`` and ``StaleApproval`` in ``casekeeper.errors``
(the public guard's approvals). An application adds its own errors under ``CasekeeperError`` (the invoice
app's are in ``shared.errors``, drawn there). ``tests/unit/test_errors_tree.py`` checks this drawing
against every ``CasekeeperError`` subclass in ``casekeeper``.
"""

from __future__ import annotations

from typing import ClassVar


class CasekeeperError(Exception):
    """Root of every error Casekeeper raises on purpose."""

    retryable: ClassVar[bool] = False
    wait_in_place: ClassVar[bool] = True


class ConfigurationError(CasekeeperError):
    """Settings are missing or invalid; ``missing`` lists every missing name at once."""

    def __init__(self, message: str, *, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.missing = missing


# --- storage -----------------------------------------------------------------------------------


class StoreError(CasekeeperError):
    """A storage backend failed; subclasses say how."""

    def __init__(self, message: str, *, container: str | None = None, doc_id: str | None = None) -> None:
        super().__init__(message)
        self.container = container
        self.doc_id = doc_id


class StoreUnavailable(StoreError):
    """The backend is throttling, timed out or cannot be reached; trying later can help."""

    retryable = True


class AlreadyExists(StoreError):
    """A create found a document with the same id in the same partition."""


class ConcurrencyConflict(StoreError):
    """A conditional write lost: the document changed (or vanished) since it was read."""

    retryable = True


class InvalidDocumentId(StoreError):
    """An id that breaks the identifier rule (``casekeeper.core.ids``); nothing was sent to the backend."""


# --- cases -------------------------------------------------------------------------------------


class CaseError(CasekeeperError):
    """About one case."""

    def __init__(self, message: str, *, case_id: str) -> None:
        super().__init__(message)
        self.case_id = case_id


class CaseNotFound(CaseError):
    """No case with this id exists."""

    def __init__(self, case_id: str) -> None:
        super().__init__(f"case {case_id!r} not found", case_id=case_id)


class CaseTooLarge(CaseError):
    """A write would take the case past its size bound (``casekeeper.core.cases.MAX_CASE_BYTES``); nothing
    was written. Trying again cannot help: what the write would add is refused for good."""

    def __init__(self, case_id: str, *, size: int, limit: int) -> None:
        super().__init__(
            f"case {case_id!r} would take {size} bytes (with the room kept for its open effects' outcomes), "
            f"over its bound of {limit} bytes: refused, nothing written",
            case_id=case_id,
        )
        self.size = size
        self.limit = limit


# --- effects -----------------------------------------------------------------------------------


class EffectError(CasekeeperError):
    """About one guarded side effect, identified by its key."""

    def __init__(self, message: str, *, key: str, case_id: str, action: str) -> None:
        super().__init__(message)
        self.key = key
        self.case_id = case_id
        self.action = action


class EffectInFlight(EffectError):
    """Another attempt holds the claim and is within its call timeout; re-read after ``retry_after``.

    ``facts_recorded``: the event's facts were recorded, and only the decision has to wait, so what comes
    back later only decides (a fact event brought back after newer ones must not write its old facts)."""

    retryable = True

    def __init__(
        self, *, key: str, case_id: str, action: str, retry_after: float, facts_recorded: bool = False
    ) -> None:
        super().__init__(
            f"effect {action} for case {case_id!r} is in flight; retry after {retry_after:.1f}s",
            key=key,
            case_id=case_id,
            action=action,
        )
        self.retry_after = retry_after
        self.facts_recorded = facts_recorded

    def after_facts(self) -> EffectInFlight:
        """The same wait, known to come after the event's facts were recorded."""
        return EffectInFlight(
            key=self.key, case_id=self.case_id, action=self.action, retry_after=self.retry_after, facts_recorded=True
        )


class NeedsReconciliation(EffectError):
    """The effect started and its outcome is unknown; only a lookup by key or a person may settle it."""

    def __init__(self, *, key: str, case_id: str, action: str, age: float | None, reason: str) -> None:
        super().__init__(
            f"effect {action} for case {case_id!r} needs reconciliation: {reason}",
            key=key,
            case_id=case_id,
            action=action,
        )
        self.age = age
        self.reason = reason


class EffectFailed(EffectError):
    """The downstream definitely refused this effect; the refusal is recorded and re-raised."""

    def __init__(self, *, key: str, case_id: str, action: str, reason: str) -> None:
        super().__init__(
            f"effect {action} for case {case_id!r} failed: {reason}", key=key, case_id=case_id, action=action
        )
        self.reason = reason


class StaleDecision(EffectError):
    """The case's version moved since the decision was made; nothing was called. Decide again."""

    def __init__(
        self, *, key: str, case_id: str, action: str, decided_on_version: int, current_version: int | None
    ) -> None:
        super().__init__(
            f"decision on case {case_id!r} v{decided_on_version} is stale (case is at v{current_version})",
            key=key,
            case_id=case_id,
            action=action,
        )
        self.decided_on_version = decided_on_version
        self.current_version = current_version


class OutcomeAlreadyRecorded(EffectError):
    """An outcome arrived for an effect that is no longer ``started``; the recorded one stands."""

    def __init__(self, *, key: str, case_id: str, action: str, recorded_status: str) -> None:
        super().__init__(
            f"effect {action} for case {case_id!r} already has outcome {recorded_status!r}",
            key=key,
            case_id=case_id,
            action=action,
        )
        self.recorded_status = recorded_status


class MissingCommitIntent(EffectError):
    """A ``done`` effect whose ledger row names no commit (``request.commit``): nobody can tell what the
    case should become. Raised instead of silently leaving the case's gate open; a person settles it."""

    def __init__(self, *, key: str, case_id: str, action: str) -> None:
        super().__init__(
            f"effect {action} ({key[:12]}) of case {case_id!r} is done but names no commit intent",
            key=key,
            case_id=case_id,
            action=action,
        )


class ArgumentsMismatch(EffectError):
    """The effect's key was claimed with arguments of another digest: the same decision run with other
    arguments, or a second effect of the same action in one decision. Nothing was called; the recorded
    effect stands. A second effect is named with ``part=`` (it joins the key)."""

    def __init__(self, *, key: str, case_id: str, action: str, recorded: str, given: str) -> None:
        super().__init__(
            f"effect {action} of case {case_id!r} under key {key} was claimed with arguments of digest "
            f"{recorded}, and is now run with arguments of digest {given}: nothing called. If this is another "
            "effect of the same action in this decision, name it with part=... (e.g. the order line); if the "
            "facts changed, decide again",
            key=key,
            case_id=case_id,
            action=action,
        )
        self.recorded_digest = recorded
        self.given_digest = given


class ApprovalPending(EffectError):
    """A pending approval request of the case guards this action, and the run does not carry that request's
    approval: nothing was written or called. Answer the request (``guard.answer``) and run the effect on the
    decision the approval returns, or pass the answer (``answer=``) that approves it."""

    def __init__(self, *, key: str, case_id: str, action: str, request_id: str, detail: str | None = None) -> None:
        how = detail or (
            "answer the request (guard.answer) and run on the decision it returns, or pass its approving answer"
        )
        super().__init__(
            f"effect {action} of case {case_id!r} is guarded by pending approval request {request_id}: nothing "
            f"called; {how}",
            key=key,
            case_id=case_id,
            action=action,
        )
        self.request_id = request_id
        self.detail = detail


# --- downstream --------------------------------------------------------------------------------


class DownstreamError(CasekeeperError):
    """Raised by a guarded call to tell the ledger what the downstream said."""


class DownstreamRejected(DownstreamError):
    """The downstream definitely refused (a 4xx): the effect is recorded ``failed`` with ``reason``."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class OutcomeUnknown(DownstreamError):
    """Timeout, 5xx or dropped connection: the effect may or may not have happened."""

    retryable = True

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class SendDeadlinePassed(OutcomeUnknown):
    """The call was not sent: too long had passed since its version gate (a pause, a slow host), and a
    reconciler may already have taken its row for an unknown outcome. Nothing was asked; the row stays as
    it was, for reconciliation to settle by key like any unknown outcome."""
