"""An in-process downstream for ledger contract tests.

The ledger's contract is about the callable it is handed, so these tests hand it a plain function
that counts calls per key. Crossing a real socket is what the supplier stub tests and the
end-to-end tests do; here it would only add noise.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any


class CountingDownstream:
    def __init__(self, *, delay: float = 0.0, fail_with: Callable[[], Exception] | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.delay = delay
        self.fail_with = fail_with
        self._lock = threading.Lock()
        self.during_call: Callable[[str], None] | None = None

    def __call__(self, key: str) -> Mapping[str, Any]:
        with self._lock:
            self.calls[key] += 1
            n = sum(self.calls.values())
        if self.during_call is not None:
            self.during_call(key)
        if self.delay:
            time.sleep(self.delay)
        if self.fail_with is not None:
            raise self.fail_with()
        return {"creditNoteId": f"CN-{n:04d}", "key": key}

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def leave_started(ledger: Any, case_id: str, *, request: Mapping[str, Any] | None = None, version: int = 1) -> Any:
    """Claim a credit-note effect on its case whose call ends with an unknown outcome: the entry stays
    ``started``. ``request``: the effect's stored request (the app's credit-note args); it gets the case id
    and the commit intent the app's declaration writes (``credit_requested``) unless it names them.

    Returns that effect. (What a worker leaves when the supplier times out, or the process dies mid-call.)
    """
    from casekeeper.cases import CommitPlan
    from casekeeper.errors import OutcomeUnknown

    def unknown(key: str) -> Mapping[str, Any]:
        raise OutcomeUnknown("reset by the test")

    stored = {"caseId": case_id, **(request or {})}
    stored.setdefault("commit", {"status": "credit_requested", "reason": "credit note requested"})
    try:
        ledger.run(
            case_id=case_id,
            action="request_credit_note",
            decided_on_version=version,
            call=unknown,
            commit=CommitPlan.from_intent(stored["commit"]),
            request=stored,
        )
    except OutcomeUnknown:
        pass
    else:
        raise AssertionError("the call's unknown outcome was not raised")
    [effect] = [e for e in ledger.for_case(case_id) if e.case_version == version]
    assert effect.status.value == "started"
    return effect
