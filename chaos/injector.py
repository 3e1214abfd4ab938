"""Faults and kills, on their own threads, at the plan's times.

- Faults go to the stub's control API (``POST /_control/faults`` replaces the whole set, so each change
  posts everything that is in force; a counter still armed keeps what remains of it).
- Store outages (:mod:`chaos.outage`): from the planned start to the planned end, then the store
  is brought back; each is recorded as it happened (:class:`~chaos.evidence.StoreOutage`).
- Kills: at the planned time, or, for ``after_supplier_request``, at the first credit-note request
  the supplier logs from then on (bounded wait): the host dies with its request at the supplier and
  its reply not yet recorded. The host is restarted after the planned pause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from chaos.cluster import Cluster
from chaos.outage import OutageError
from chaos.plan import KEEP, Plan

WAIT_FOR_REQUEST_SECONDS = 8.0


@dataclass
class Injector:
    plan: Plan
    cluster: Cluster
    fault_log: list[dict[str, Any]] = field(default_factory=list)
    kills_done: int = 0
    errors: list[str] = field(default_factory=list)
    current_faults: dict[str, Any] = field(default_factory=dict)
    facts_accepted: Callable[[], int] = lambda: 0
    """How many fact events the driver got accepted so far (the driver's counter)."""

    def start(self, t0: float, stop: threading.Event) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._faults, args=(t0, stop), name="chaos-faults", daemon=True),
            threading.Thread(target=self._kills, args=(t0, stop), name="chaos-kills", daemon=True),
            threading.Thread(target=self._outages, args=(t0, stop), name="chaos-outages", daemon=True),
        ]
        for thread in threads:
            thread.start()
        return threads

    def clear_faults(self) -> None:
        self._post_faults({})

    # --- faults ----------------------------------------------------------------------------------

    def _faults(self, t0: float, stop: threading.Event) -> None:
        for at, wanted in self.plan.fault_changes():
            if stop.wait(max(0.0, t0 + at - time.monotonic())):
                return
            faults = dict(wanted)
            if KEEP in faults.values():
                current = self._get_faults()
                faults = {k: (current.get(k, 0) if v == KEEP else v) for k, v in faults.items()}
            self._post_faults(faults, at=at)

    def _get_faults(self) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = httpx.get(self.cluster.supplier.url + "/_control/faults", timeout=5.0).json()
            return answer
        except (httpx.HTTPError, ValueError) as exc:
            self.errors.append(f"reading the stub's faults failed: {exc}")
            return {}

    def _post_faults(self, faults: dict[str, Any], *, at: float | None = None) -> None:
        try:
            response = httpx.post(self.cluster.supplier.url + "/_control/faults", json=faults, timeout=5.0)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self.errors.append(f"setting faults {faults} failed: {exc}")
            return
        self.current_faults = faults
        self.fault_log.append({"at": at, "time": time.time(), "faults": faults})

    # --- store outages ----------------------------------------------------------------------------

    def _outages(self, t0: float, stop: threading.Event) -> None:
        for outage in self.plan.outages:
            if stop.wait(max(0.0, t0 + outage.start - time.monotonic())):
                return
            try:
                self.cluster.store_outage(outage, t0 + outage.end, stop.wait)
            except OutageError as exc:
                self.errors.append(f"store outage at {outage.start:.0f}s not made: {exc}")

    # --- kills -----------------------------------------------------------------------------------

    def _kills(self, t0: float, stop: threading.Event) -> None:
        for kill in self.plan.kills:
            if stop.wait(max(0.0, t0 + kill.at - time.monotonic())):
                return
            detail = ""
            if kill.mode == "after_supplier_request":
                detail = self._wait_for_request(stop)
            elif kill.mode == "after_fact_event":
                detail = self._wait_for_fact_event(stop, kill.delay)
            try:
                self.cluster.kill(kill.host, restart_after=kill.restart_after, mode=kill.mode, detail=detail)
            except Exception as exc:  # a host that will not come back ends the run: say why
                self.errors.append(f"restarting host {kill.host} failed: {exc}")
                stop.set()
                return
            self.kills_done += 1

    def _wait_for_fact_event(self, stop: threading.Event, delay: float) -> str:
        seen = self.facts_accepted()
        deadline = time.monotonic() + WAIT_FOR_REQUEST_SECONDS
        while time.monotonic() < deadline and not stop.is_set():
            if self.facts_accepted() > seen:
                time.sleep(delay)
                return f"killed {delay:.2f}s after a fact event was accepted"
            time.sleep(0.005)
        return f"no fact event within {WAIT_FOR_REQUEST_SECONDS:.0f}s; killed anyway"

    def _wait_for_request(self, stop: threading.Event) -> str:
        journal = self.cluster.journal
        seen = journal.credit_note_posts()
        deadline = time.monotonic() + WAIT_FOR_REQUEST_SECONDS
        while time.monotonic() < deadline and not stop.is_set():
            if journal.credit_note_posts() > seen:
                return "killed just after a credit-note request reached the supplier"
            time.sleep(0.01)
        return f"no credit-note request within {WAIT_FOR_REQUEST_SECONDS:.0f}s; killed anyway"
