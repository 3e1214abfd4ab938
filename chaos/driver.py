"""Carry out the plan's steps over the documented HTTP API only, recording every request and answer.

Steps run in time order on one thread, so the events of a case reach the queue in the order the plan
gives them. A request that gets no answer or a 5xx is sent again, with the same delivery id, to the
planned host or, while that one is down, to the other (as a webhook sender retries); 202 is accepted,
anything else is recorded as it is. Steps that need what only the case can say (the note to credit, the
pending approval) look it up with ``GET /api/cases/{id}`` and, if it is not there yet, try again later;
while the store is down they wait for it (on Cosmos DB reads hang too), without using up their tries.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from typing import Any
from urllib.parse import quote

import httpx

from chaos.cluster import Cluster
from chaos.config import SECRET
from chaos.evidence import Attempt, Sent
from chaos.plan import CREDIT, Plan, Step
from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign

APPROVAL = "approval.answered"
GIVE_UP_SECONDS = 45.0  # a request no host answered for this long is recorded as not accepted
LOOKUP_TRIES = 5
LOOKUP_DELAY = 2.0
LOOKUP_STEPS = ("credit_for_request", "observe_approval", "approval")
FACT_EVENTS = ("po.updated", "credit_note.issued")


@dataclass
class Driver:
    plan: Plan
    cluster: Cluster
    sent: list[Sent] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    facts_accepted: int = 0
    """Fact events (PO changes, credit notes) accepted so far: a kill can be timed just after one."""
    _resolved: dict[int, Sent] = field(default_factory=dict)
    _observed: dict[str, dict[str, Any]] = field(default_factory=dict)
    _answered: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10.0))

    def run(self, t0: float, stop: threading.Event, *, deadline: float) -> None:
        """Run every step at ``t0 + step.at`` (monotonic seconds); stop at ``deadline`` or when ``stop`` is set."""
        queue: list[tuple[float, int, int, Step]] = [(s.at, s.id, 0, s) for s in self.plan.steps]
        heapq.heapify(queue)
        while queue and not stop.is_set():
            at, _, tries, step = heapq.heappop(queue)
            wait = t0 + at - time.monotonic()
            if wait > 0 and stop.wait(wait):
                return
            if time.monotonic() > deadline:
                self._skip(step, "the injection phase ended first")
                continue
            if step.kind in LOOKUP_STEPS and self.cluster.store_down:
                heapq.heappush(queue, (time.monotonic() - t0 + 1.0, step.id, tries, step))
                continue
            retry_in = self._do(step, tries)
            if retry_in is not None:
                heapq.heappush(queue, (at + retry_in, step.id, tries + 1, step))
        for _, _, _, step in queue:
            self._skip(step, "the injection phase ended first")

    def counts(self) -> tuple[int, int]:
        """(requests sent, accepted) so far, for the progress line."""
        with self._lock:
            return len(self.attempts), sum(1 for s in self.sent if s.accepted)

    def close(self) -> None:
        self._http.close()

    # --- steps -----------------------------------------------------------------------------------

    def _do(self, step: Step, tries: int) -> float | None:
        """Carry out one step; a delay when it must be tried again later."""
        if step.kind == "event":
            self._send_event(step, step.event_type, dict(step.data), step.delivery)
        elif step.kind in ("resend", "copy"):
            original = self._resolved.get(step.ref if step.ref is not None else -1)
            if original is None:
                self._skip(step, "the event it repeats was not sent (yet)")
            else:
                delivery = original.delivery if step.kind == "resend" else step.delivery
                self._send_event(step, original.event_type, dict(original.data), delivery)
        elif step.kind == "credit_for_request":
            return self._credit_for_request(step, tries)
        elif step.kind == "observe_approval":
            pending = self._pending_approval(step)
            if pending is None and tries < LOOKUP_TRIES:
                return LOOKUP_DELAY
            if pending is None:
                self._skip(step, "no approval was pending for the case")
            else:
                self._observed[step.case_id] = pending
        elif step.kind == "approval":
            return self._approval(step, tries)
        return None

    def _credit_for_request(self, step: Step, tries: int) -> float | None:
        view = self._get(step, step.case_id)
        notes = [
            e["result"]
            for e in (view or {}).get("effects") or []
            if e.get("status") == "done" and isinstance(e.get("result"), dict) and e["result"].get("creditNoteId")
        ]
        if not notes:
            if tries < LOOKUP_TRIES:
                return LOOKUP_DELAY
            self._skip(step, "no credit note was requested for the case (yet)")
            return None
        note = notes[-1]
        amount = (Decimal(str(note["amount"])) * Decimal(step.fraction or "1")).quantize(Decimal("0.01"), ROUND_DOWN)
        data = {"creditNoteId": str(note["creditNoteId"]), "amount": str(max(amount, Decimal("0.01")))}
        self._send_event(step, CREDIT, data, step.delivery)
        return None

    def _approval(self, step: Step, tries: int) -> float | None:
        if step.mode == "again":
            request = self._answered.get(step.case_id)
        elif step.mode == "stale":
            request = self._observed.get(step.case_id)
        else:
            request = self._pending_approval(step)
        if request is None:
            if tries < LOOKUP_TRIES and step.mode not in ("again", "stale"):
                return LOOKUP_DELAY
            self._skip(step, "no approval was pending (or seen) for the case")
            return None
        self._answered[step.case_id] = request
        body = {"decision": step.decision, "caseVersion": request["caseVersion"], "approver": f"chaos-{step.id}"}
        path = f"/api/cases/{quote(step.case_id, safe='')}/approvals/{quote(request['requestId'], safe='')}"
        record = Sent(step.id, step.kind, step.case_id, APPROVAL, body, str(request["requestId"]))
        self._post(step, record, path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return None

    def _pending_approval(self, step: Step) -> dict[str, Any] | None:
        view = self._get(step, step.case_id)
        pending = (view or {}).get("pendingApproval")
        return dict(pending) if isinstance(pending, dict) else None

    # --- HTTP ------------------------------------------------------------------------------------

    def _send_event(self, step: Step, event_type: str, data: dict[str, Any], delivery: str) -> None:
        record = Sent(step.id, step.kind, step.case_id, event_type, data, delivery)
        body = json.dumps({"type": event_type, "caseId": step.case_id, "data": data}).encode()
        headers = {"Content-Type": "application/json", DELIVERY_HEADER: delivery}
        self._post(step, record, "/api/events", body, headers, signed=True)
        if step.kind in ("event", "credit_for_request"):
            self._resolved[step.id] = record

    def _post(
        self, step: Step, record: Sent, path: str, body: bytes, headers: dict[str, str], *, signed: bool = False
    ) -> None:
        with self._lock:
            self.sent.append(record)
        give_up = time.monotonic() + GIVE_UP_SECONDS
        while True:
            host = self.cluster.pick(step.host)
            if host is None:
                if time.monotonic() > give_up:
                    record.skipped = "no host came up to take it"
                    return
                time.sleep(0.1)
                continue
            if signed:  # signed per attempt: a retry minutes later must not carry a stale timestamp
                headers[SIGNATURE_HEADER] = sign(SECRET, body, int(time.time()), headers[DELIVERY_HEADER])
            status = self._attempt(step, host, "POST", path, content=body, headers=headers)
            record.status, record.host = status, host
            if status == 202:
                record.accepted_at = time.time()
                if record.event_type in FACT_EVENTS:
                    with self._lock:
                        self.facts_accepted += 1
                return
            if (status is not None and status < 500) or time.monotonic() > give_up:
                return
            time.sleep(0.25)

    def _get(self, step: Step, case_id: str) -> dict[str, Any] | None:
        host = self.cluster.pick(step.host)
        if host is None:
            return None
        path = f"/api/cases/{quote(case_id, safe='')}"
        try:
            response = self._http.get(self.cluster.url(host) + path)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        body: dict[str, Any] = response.json()
        return body

    def _attempt(self, step: Step, host: int, method: str, path: str, **kwargs: Any) -> int | None:
        started = time.time()
        status: int | None = None
        error = ""
        try:
            status = self._http.request(method, self.cluster.url(host) + path, **kwargs).status_code
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:200]
        with self._lock:
            self.attempts.append(Attempt(step.id, host, method, path, started, time.time(), status, error))
        return status

    def _skip(self, step: Step, why: str) -> None:
        with self._lock:
            self.sent.append(Sent(step.id, step.kind, step.case_id, step.event_type, dict(step.data), "", skipped=why))
