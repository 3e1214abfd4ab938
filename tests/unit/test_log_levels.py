"""Python loggers' levels are set in code (host.json's logLevel does not reach them)."""

from __future__ import annotations

import logging

from shared.app.telemetry import QUIET_LOGGERS, quiet_library_loggers


def test_library_loggers_are_held_at_warning_in_code_because_host_json_does_not_reach_python() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    quiet_library_loggers()
    assert {name: logging.getLogger(name).level for name in QUIET_LOGGERS} == dict.fromkeys(
        QUIET_LOGGERS, logging.WARNING
    )
    # The checkpoint-failure capture listens to Agent Framework's warnings: those still pass.
    assert logging.getLogger("agent_framework._workflows._runner").isEnabledFor(logging.WARNING)
