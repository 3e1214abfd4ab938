"""The refund example's worker in its own process, told to die at a failure point (F1-F6).

``python -m tests.examples.refund_worker SPEC_JSON`` handles one event and prints one JSON line: the run's
outcome. With ``dieAt`` set it dies at that point (``tests/support/crash.py``), as a killed host would stop.
F3 (the payment made, no reply yet) is made by the payments stand-in (``die_after_paying``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict
from typing import Any

from casekeeper.agent import capture_failures
from examples.refund.app import ApprovalAnswered, RefundApp, RefundRequested
from examples.refund.payments import Payments
from tests.conftest import StoreSpec
from tests.support.crash import dying_at


def main(raw: str) -> int:
    spec: dict[str, Any] = json.loads(raw)
    store = StoreSpec(**spec["store"]).open()
    capture_failures(store)
    app = RefundApp(
        store, Payments(spec["payments"]), call_timeout=spec["callTimeout"], probe=dying_at(spec.get("dieAt"))
    )
    event = spec["event"]
    message = ApprovalAnswered(**event["answer"]) if "answer" in event else RefundRequested(event["caseId"])
    outcome = asyncio.run(app.handle(message))
    print(json.dumps(asdict(outcome)), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
