"""Make failed checkpoint saves loud (rule R7, failure point F7).

When ``CheckpointStorage.save`` raises, Agent Framework 1.23 does not fail the run and emits no event,
span or exception: its runner logs one WARNING on logger ``agent_framework._workflows._runner``,

    "Failed to create checkpoint at iteration %d: %s. Note that this does not fail the workflow run. ..."

with ``args = (iteration, exception, last_good_checkpoint_id)``, and carries on. A run can thus "succeed"
(or pause for a person) with nothing to resume from. :class:`CheckpointFailureCapture` is a logging
handler for that logger: it recognises exactly that record and

- writes one durable record per failure to container ``health`` (``record="checkpoint_failure"``, in one of
  :data:`FAILURE_SHARDS` partitions ``kind="checkpoint_failure-NN"`` chosen by the case id)
  with ``alerted: false``, for the timer to turn into an alert (:func:`failures_since`,
  :func:`mark_alerted`);
- counts it in the OpenTelemetry counter ``casekeeper.checkpoint.failures`` (attributes: workflow name,
  error type, and whether the durable record was written; not the case id, which would give the metric
  one time series per case);
- appends it to the :class:`RunCapture` of the run, so the caller learns at once that its run was not
  saved.

The log record says nothing about which case it belongs to, so the caller wraps each run in
:func:`capturing`, which sets a :class:`contextvars.ContextVar`. The runner logs from the task that
runs the workflow (tasks copy the context they were created in), so the handler sees the variable of
the run that failed, even with several sessions' runs interleaved on one event loop.

The handler never raises into the framework: if the durable write fails, it logs the failure's details
at ERROR on logger ``casekeeper.capture`` (which reaches Application Insights) and still counts it.

The write is synchronous, on the event loop thread, on purpose: failures are rare, and a record queued
for a background thread would be lost in exactly the crash that makes it matter.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from opentelemetry import metrics

from casekeeper.errors import ConcurrencyConflict
from casekeeper.stores import HEALTH, Document, DocumentStore, Query

RUNNER_LOGGER: Final = "agent_framework._workflows._runner"
"""The logger Agent Framework's runner reports failed checkpoint saves on."""
MESSAGE_PREFIX: Final = "Failed to create checkpoint at iteration"
"""How the runner's message template starts (``record.msg``, before formatting)."""

KIND_CHECKPOINT_FAILURE: Final = "checkpoint_failure"
"""The record's type (field ``record``) and the prefix of its partitions (:func:`failure_partition`)."""
FAILURE_SHARDS: Final = 16
"""Logical partitions the failure records are spread over (``checkpoint_failure-00`` ... ``-15``), by a hash
of the case id: an incident that fails the saves of thousands of cases shares no one partition's 20 GB and
10,000 RU/s, and one case's failures (what the lag check asks for) are in one partition."""


def failure_partition(case_id: str | None, failure_id: str) -> str:
    """The partition of a failure record: by its case (by its own id when it has no case)."""
    digest = hashlib.sha256((case_id if case_id is not None else failure_id).encode("utf-8")).hexdigest()
    return f"{KIND_CHECKPOINT_FAILURE}-{int(digest[:8], 16) % FAILURE_SHARDS:02d}"


METRIC_NAME: Final = "casekeeper.checkpoint.failures"

logger = logging.getLogger("casekeeper.capture")

_MAX_MARK_ATTEMPTS: Final = 4


@dataclass
class RunCapture:
    """The run :func:`capturing` is wrapped around, and the checkpoint failures captured during it."""

    case_id: str
    workflow_name: str
    failures: list[CheckpointFailure] = field(default_factory=list)


@dataclass(frozen=True)
class CheckpointFailure:
    """One failed checkpoint save, as recorded.

    ``case_id``/``workflow_name`` are ``None`` when the run was not wrapped in :func:`capturing`.
    ``iteration`` is the superstep the save was for (``None`` if the framework's log record did not
    have the expected shape). ``at`` is when the framework logged it (this host's clock); ``ts`` is the
    store's write time, the one to compare with :func:`failures_since`'s bound.
    """

    id: str
    case_id: str | None
    workflow_name: str | None
    iteration: int | None
    error_type: str
    error_message: str
    last_good_checkpoint_id: str | None
    at: str
    alerted: bool
    ts: float
    partition: str
    """The partition the record is in (its ``kind``, :func:`failure_partition`)."""

    @classmethod
    def from_body(cls, body: Mapping[str, Any], *, ts: float = 0.0) -> CheckpointFailure:
        """The failure a stored body holds (``ts``: its document's store time)."""
        error = body.get("error") or {}
        iteration = body.get("iteration")
        return cls(
            id=str(body["id"]),
            case_id=_opt_str(body.get("caseId")),
            workflow_name=_opt_str(body.get("workflowName")),
            iteration=iteration if isinstance(iteration, int) and not isinstance(iteration, bool) else None,
            error_type=str(error.get("type", "")),
            error_message=str(error.get("message", "")),
            last_good_checkpoint_id=_opt_str(body.get("lastGoodCheckpointId")),
            at=str(body.get("at", "")),
            alerted=bool(body.get("alerted", False)),
            ts=ts,
            partition=str(body["kind"]),
        )

    @classmethod
    def from_document(cls, doc: Document) -> CheckpointFailure:
        return cls.from_body(doc.body, ts=doc.ts)


_current_run: ContextVar[RunCapture | None] = ContextVar("casekeeper_checkpoint_run", default=None)


@contextmanager
def capturing(case_id: str, workflow_name: str) -> Iterator[RunCapture]:
    """Attribute checkpoint failures logged inside this block (in this task) to ``case_id``.

    Use it around ``await workflow.run(...)`` in the task that awaits the run. Yields the
    :class:`RunCapture` whose ``failures`` fill up as saves fail. Logs an ERROR once per process if no
    capture is installed (:func:`install`), since failures would then go unrecorded.
    """
    _check_installed()
    run = RunCapture(case_id=case_id, workflow_name=workflow_name)
    token = _current_run.set(run)
    try:
        yield run
    finally:
        _current_run.reset(token)


class CheckpointFailureCapture(logging.Handler):
    """Logging handler that records Agent Framework's "Failed to create checkpoint" warnings durably.

    Attach it to :data:`RUNNER_LOGGER` (:func:`install` does, idempotently). Records other than that
    warning are ignored. ``meter_provider`` defaults to the global OpenTelemetry provider.
    ``emit`` never raises.
    """

    def __init__(self, store: DocumentStore, *, meter_provider: metrics.MeterProvider | None = None) -> None:
        super().__init__(level=logging.WARNING)
        self._store = store
        self._meter_provider = meter_provider
        self._counter = metrics.get_meter("casekeeper", meter_provider=meter_provider).create_counter(
            METRIC_NAME,
            unit="{failure}",
            description="Failed Agent Framework checkpoint saves (the run carried on without a checkpoint)",
        )
        self._busy = threading.local()
        self._host = socket.gethostname()

    @property
    def store(self) -> DocumentStore:
        return self._store

    @property
    def meter_provider(self) -> metrics.MeterProvider | None:
        return self._meter_provider

    @staticmethod
    def matches(record: logging.LogRecord) -> bool:
        """Whether ``record`` is the runner's failed-checkpoint warning."""
        return (
            record.levelno == logging.WARNING and isinstance(record.msg, str) and record.msg.startswith(MESSAGE_PREFIX)
        )

    def emit(self, record: logging.LogRecord) -> None:
        if not self.matches(record) or getattr(self._busy, "active", False):
            return
        # Re-entrancy guard: if the store logs through this logger while we write, do not recurse.
        self._busy.active = True
        try:
            self._capture(record)
        except Exception:  # the last line of defence: never raise into the framework's except block
            logger.exception("checkpoint failure capture failed unexpectedly; original: %s", _safe_message(record))
        finally:
            self._busy.active = False

    def _capture(self, record: logging.LogRecord) -> None:
        run = _current_run.get()
        body = _failure_body(record, run, host=self._host)
        failure = CheckpointFailure.from_body(body)
        recorded = False
        try:
            doc = self._store.create(HEALTH, body["kind"], body["id"], body)
            failure = CheckpointFailure.from_document(doc)
            recorded = True
        except Exception as exc:
            # The durable record is lost; make sure the details reach the logs with the case attached.
            logger.error(
                "could not record a checkpoint failure (%s: %s): case=%s workflow=%s iteration=%s "
                "error=%s: %s last_good_checkpoint=%s",
                type(exc).__name__,
                exc,
                failure.case_id,
                failure.workflow_name,
                failure.iteration,
                failure.error_type,
                failure.error_message,
                failure.last_good_checkpoint_id,
                extra={"caseId": failure.case_id, "checkpointFailure": body},
            )
        finally:
            self._count(failure, recorded=recorded)
        if run is not None:
            run.failures.append(failure)

    def _count(self, failure: CheckpointFailure, *, recorded: bool) -> None:
        try:
            self._counter.add(
                1,
                {
                    "casekeeper.workflow": failure.workflow_name or "unknown",
                    "error.type": failure.error_type or "unknown",
                    "casekeeper.recorded": recorded,
                },
            )
        except Exception:
            logger.exception("could not count a checkpoint failure")


def report_failed_save(iteration: int, error: BaseException, last_good_checkpoint_id: str | None) -> None:
    """Report a failed save that Casekeeper made itself (a checkpoint it deferred to the end of a run,
    :class:`casekeeper.agent.RunCheckpoints`) exactly as the framework reports its own: the same WARNING on the
    runner's logger, so the capture records it once, by the same path."""
    logging.getLogger(RUNNER_LOGGER).warning(
        MESSAGE_PREFIX + " %d: %s. Note that this does not fail the workflow run. "
        "The next successfully-created checkpoint will be parented to the last successful checkpoint: %s",
        iteration,
        error,
        last_good_checkpoint_id,
    )


# --- installing ----------------------------------------------------------------------------------


@dataclass
class _Installation:
    """Process-wide install state (one capture per process, see :func:`install`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    handler: CheckpointFailureCapture | None = None
    level_before: int | None = None  # the runner logger's level before install lowered it
    warned_not_installed: bool = False


_installation = _Installation()


def install(store: DocumentStore, *, meter_provider: metrics.MeterProvider | None = None) -> CheckpointFailureCapture:
    """Attach a :class:`CheckpointFailureCapture` for ``store`` to the runner logger; return it.

    Idempotent: with the same store (and provider) it returns the handler already attached; with a
    different one it replaces it, so there is never more than one (two would record every failure twice).
    If the runner logger is configured above WARNING (a common way to quiet the framework), its level is
    set to WARNING, since a logger drops records below its level before any handler sees them;
    :func:`uninstall` restores it.
    """
    state = _installation
    with state.lock:
        runner = logging.getLogger(RUNNER_LOGGER)
        current = state.handler
        if (
            current is not None
            and current in runner.handlers
            and current.store is store
            and current.meter_provider is meter_provider
        ):
            _ensure_enabled(runner)
            return current
        if current is not None:
            runner.removeHandler(current)
            current.close()
        handler = CheckpointFailureCapture(store, meter_provider=meter_provider)
        runner.addHandler(handler)
        state.handler = handler
        _ensure_enabled(runner)
        return handler


def uninstall() -> None:
    """Detach the installed capture (if any) and restore the runner logger's level. Idempotent."""
    state = _installation
    with state.lock:
        runner = logging.getLogger(RUNNER_LOGGER)
        if state.handler is not None:
            runner.removeHandler(state.handler)
            state.handler.close()
            state.handler = None
        if state.level_before is not None:
            runner.setLevel(state.level_before)
            state.level_before = None


def installed() -> CheckpointFailureCapture | None:
    """The capture :func:`install` attached, if any."""
    return _installation.handler


def _ensure_enabled(runner: logging.Logger) -> None:
    """Lower the runner logger to WARNING if it would drop the warning (call with the lock held)."""
    if not runner.isEnabledFor(logging.WARNING):
        if _installation.level_before is None:
            _installation.level_before = runner.level
        runner.setLevel(logging.WARNING)
        logger.warning(
            "logger %s was set above WARNING; lowered to WARNING so checkpoint failures reach the capture",
            RUNNER_LOGGER,
        )


def _check_installed() -> None:
    state = _installation
    if state.handler is None:
        if not state.warned_not_installed:
            state.warned_not_installed = True
            logger.error("capturing() used but no checkpoint failure capture is installed: failures go unrecorded")
        return
    runner = logging.getLogger(RUNNER_LOGGER)
    if not runner.isEnabledFor(logging.WARNING):
        with state.lock:
            _ensure_enabled(runner)


# --- reading and acknowledging --------------------------------------------------------------------


def failures_since(
    store: DocumentStore, ts: float | None, *, alerted: bool | None = None, case_id: str | None = None
) -> list[CheckpointFailure]:
    """Recorded checkpoint failures written after store time ``ts`` (all when ``None``), oldest first.

    ``alerted`` filters on the flag (``False``: not yet alerted); ``case_id`` on the case (indexed).
    Cosmos DB's ``_ts`` has one-second
    resolution and the bound is strict, so a record written in the same second as the previous
    watermark is not returned: a timer should select on ``alerted=False`` (with ``ts`` only as a
    look-back limit) rather than trust the watermark alone.
    """
    if case_id is not None:
        # One case's failures are in its one partition, which holds nothing else.
        of_case: dict[str, str | bool] = {"caseId": case_id}
        if alerted is not None:
            of_case["alerted"] = alerted
        where = failure_partition(case_id, "")
        found = store.query(HEALTH, Query(partition=where, equals=of_case, ts_after=ts, order_by_ts="asc"))
    else:
        across: dict[str, str | bool] = {"record": KIND_CHECKPOINT_FAILURE}
        if alerted is not None:
            across["alerted"] = alerted
        found = store.query(HEALTH, Query(equals=across, ts_after=ts, order_by_ts="asc"))
    # The store orders by ts only; make ties (same second on Cosmos) deterministic.
    return [CheckpointFailure.from_document(d) for d in sorted(found, key=lambda d: (d.ts, d.body.get("at", ""), d.id))]


def mark_alerted(store: DocumentStore, failure: CheckpointFailure) -> bool:
    """Set ``alerted: true`` on the recorded ``failure``.

    Returns ``True`` when this call set it, ``False`` when it was already set or the record is gone; of
    two timers marking one failure, exactly one gets ``True`` (conditional replace on the ETag), so
    "alert only if ``mark_alerted`` returned ``True``" alerts at most once.
    """
    for _ in range(_MAX_MARK_ATTEMPTS):
        doc = store.read(HEALTH, failure.partition, failure.id)
        if doc is None or doc.body.get("alerted"):
            return False
        body = {**doc.body, "alerted": True, "alertedAt": datetime.now(UTC).isoformat()}
        try:
            store.replace(HEALTH, failure.partition, failure.id, body, etag=doc.etag)
        except ConcurrencyConflict:
            continue
        return True
    raise ConcurrencyConflict(
        f"could not mark checkpoint failure {failure.id} alerted in {_MAX_MARK_ATTEMPTS} attempts",
        container=HEALTH,
        doc_id=failure.id,
    )


# --- helpers ---------------------------------------------------------------------------------------


def _failure_body(record: logging.LogRecord, run: RunCapture | None, *, host: str) -> dict[str, Any]:
    """The health document for one failure. Tolerates a record whose args are not the expected shape:
    a changed framework message must still be recorded, not dropped."""
    args = record.args if isinstance(record.args, tuple) else ()
    iteration: int | None = None
    error: dict[str, Any]
    last_good: str | None = None
    if len(args) >= 3 and isinstance(args[1], BaseException):
        raw_iteration, exc, raw_last_good = args[0], args[1], args[2]
        if isinstance(raw_iteration, int) and not isinstance(raw_iteration, bool):
            iteration = raw_iteration
        last_good = None if raw_last_good is None else str(raw_last_good)
        error = {"type": _qualified_name(type(exc)), "message": str(exc)}
        cause = exc.__cause__ or exc.__context__
        if cause is not None:
            error["cause"] = f"{_qualified_name(type(cause))}: {cause}"
    else:
        error = {"type": "unknown", "message": _safe_message(record)}
    # A uuid, not a key derived from (case, iteration, last good): two runs of one case can fail at the
    # same iteration with the same last good checkpoint, and each failure is its own event.
    failure_id = uuid.uuid4().hex
    case_id = run.case_id if run is not None else None
    return {
        "id": failure_id,
        "kind": failure_partition(case_id, failure_id),
        "record": KIND_CHECKPOINT_FAILURE,
        "caseId": case_id,
        "workflowName": run.workflow_name if run is not None else None,
        "iteration": iteration,
        "error": error,
        "lastGoodCheckpointId": last_good,
        "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
        "alerted": False,
        "host": host,
        "pid": record.process if record.process is not None else os.getpid(),
    }


def _qualified_name(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _safe_message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:
        return f"{record.msg!r} % {record.args!r}"


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
