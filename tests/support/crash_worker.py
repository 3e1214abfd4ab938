"""A case worker in its own process, that can be told to die at a failure point (F2-F6).

``python -m tests.support.crash_worker SPEC_JSON`` handles one event and prints one JSON line with
the result or the error type. With ``dieAt`` set it dies at that point (``tests/support/crash.py``), exactly
as a killed host would stop. ``F3`` is special: the process dies while the
supplier holds the request (the supplier stub is told to hold its reply; a timer ends the process).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any

from casekeeper.errors import CasekeeperError
from shared.domain.events import CaseEvent
from tests.conftest import StoreSpec
from tests.support.app import make_harness
from tests.support.crash import DIED, dying_at


def main(raw: str) -> int:
    spec: dict[str, Any] = json.loads(raw)
    store = StoreSpec(**spec["store"]).open()
    die_at = spec.get("dieAt")
    dies = dying_at(die_at)

    def probe(point: str) -> None:
        if die_at == "F3" and point == "F2":
            # The request is about to go out; the supplier holds its reply; die meanwhile.
            threading.Timer(spec.get("f3Delay", 0.8), os._exit, (DIED,)).start()
        dies(point)

    app = make_harness(store, spec["supplier"], call_timeout=spec["callTimeout"], probe=probe)
    event = CaseEvent(spec["event"]["type"], spec["event"]["caseId"], spec["event"].get("data", {}))
    try:
        result = asyncio.run(app.worker.handle(event))
    except CasekeeperError as exc:
        print(json.dumps({"error": type(exc).__name__, "detail": str(exc)}), flush=True)
        return 0
    print(
        json.dumps(
            {
                "outcome": result.outcome,
                "status": result.status,
                "version": result.version,
                "steps": [s.outcome for s in result.steps],
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
