"""Moved to :mod:`casekeeper.capture` (the checkpoint-failure capture, rule R7, is the guard package's, for
any workflow). These names stay importable from here for the app's modules that still use them; the
process-wide installation lives in :mod:`casekeeper.capture`, so both names see one capture."""

from casekeeper.capture import (
    KIND_CHECKPOINT_FAILURE,
    MESSAGE_PREFIX,
    METRIC_NAME,
    RUNNER_LOGGER,
    CheckpointFailure,
    CheckpointFailureCapture,
    RunCapture,
    capturing,
    failures_since,
    install,
    installed,
    mark_alerted,
    report_failed_save,
    uninstall,
)
from casekeeper.stores import HEALTH

__all__ = [
    "HEALTH",
    "KIND_CHECKPOINT_FAILURE",
    "MESSAGE_PREFIX",
    "METRIC_NAME",
    "RUNNER_LOGGER",
    "CheckpointFailure",
    "CheckpointFailureCapture",
    "RunCapture",
    "capturing",
    "failures_since",
    "install",
    "installed",
    "mark_alerted",
    "report_failed_save",
    "uninstall",
]
