"""A worker in its own process that dies at a failure point, as a killed host would.

A crash worker module (``tests/support/crash_worker.py`` for the invoice app,
``tests/examples/refund_worker.py`` for the refund example) reads one JSON payload from its argument,
handles one event, and prints one JSON line. With ``dieAt`` set, :func:`dying_at` makes its probe call
``os._exit(DIED)`` at that point: no cleanup, no flush.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DIED = 17
"""The exit status of a worker that died at its failure point."""


def dying_at(point: str | None) -> Callable[[str], None]:
    """A failure-point probe that ends the process at ``point`` (never, for ``None``)."""

    def probe(reached: str) -> None:
        if reached == point:
            os._exit(DIED)

    return probe


def run_crash_worker(module: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``python -m MODULE PAYLOAD_JSON`` to its end: the exit status (0, or :data:`DIED`) and the last JSON
    line it printed (``{}`` when it died before printing)."""
    proc = subprocess.run(
        [sys.executable, "-m", module, json.dumps(payload)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode in (0, DIED), proc.stderr[-3000:]
    return proc.returncode, json.loads(lines[-1]) if lines else {}
