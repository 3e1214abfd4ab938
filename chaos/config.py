"""What a chaos run is configured with: its size, the build under test, and the hosts' short timeouts.

:data:`HOST_ENV` is the one place the hosts' setting overrides live, so a new setting (a retry backoff,
say) is one more line. The timeouts are short so that a run of a few minutes sees every path: calls
that outlive their timeout, reconciliation, escalation, the timer's sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

CALL_TIMEOUT_SECONDS = 4.0
LOCK_DURATION_SECONDS = 3.0
STORE_TIMEOUT_SECONDS = 3.0
SECRET = "chaos-webhook-secret"  # noqa: S105 - a test secret for hosts this command starts and stops

HOST_ENV: dict[str, str] = {
    "CALL_TIMEOUT_SECONDS": str(CALL_TIMEOUT_SECONDS),
    # httpx applies it per phase; 4x must stay below the call timeout (the settings check it).
    "SUPPLIER_TIMEOUT_SECONDS": "0.9",
    "CHECKPOINT_HEALTH_SCHEDULE": "*/2 * * * * *",
    # A host killed between recording an alert and posting it leaves it to the timer after this grace.
    "ALERT_NOTIFY_GRACE_SECONDS": "3",
    # Transient errors (a busy SQLite file under two hosts) come back within seconds, not minutes.
    "RETRY_BASE_SECONDS": "0.5",
    "RETRY_MAX_DELAY_SECONDS": "5",
    # A store request gives up after this (SQLite's busy timeout, Cosmos DB's read timeout): a store outage
    # of some 20 s then outlasts an event's in-place retries, and the event takes the delayed copies.
    "STORE_TIMEOUT_SECONDS": str(STORE_TIMEOUT_SECONDS),
    "WEBHOOK_SECRET": SECRET,
}
"""Environment overrides for every host; the run adds the supplier URL, the alert sink and the store."""

MODEL_MIX = {"correct": 0.8, "throttle": 0.1, "error": 0.05, "slow": 0.05}
"""``--model stub``: what share of model calls get which answer (``devhost.model_stub``). Only
transient failures: each must end in the right decision, later."""
MODEL_ENV = {"AZURE_OPENAI_TIMEOUT_SECONDS": "2"}
"""With ``--model stub``: a ``slow`` answer (5 s) outlives the call's budget."""

HOLD_SECONDS = 1.5
"""How long the stub holds a reply in a hold window: past the hosts' supplier timeout (0.9 s per phase),
well within the call timeout, so the call's outcome is unknown and reconciliation must find the note."""


@dataclass(frozen=True)
class ChaosConfig:
    """One run. ``seconds`` is the injection phase; settling and checking come after it."""

    cases: int = 160
    seconds: float = 140.0
    kills: int = 15
    seed: int = 0
    outages: int | None = None
    """Store outages; ``None``: :func:`chaos.plan.default_outages` (two in a default run)."""
    hosts: int = 1
    store: str = "sqlite"
    report: Path | None = None
    data: Path = field(default_factory=lambda: REPO_ROOT / ".casekeeper" / "chaos")
    app_dir: Path = REPO_ROOT
    settle_seconds: float = 3 * CALL_TIMEOUT_SECONDS + 33.0
    progress: bool = True
    model: str = "rules"
    """``rules`` propose, or ``stub``: the real Azure OpenAI client against a local stand-in model that also
    throttles (429, ``Retry-After``), fails (500) and stalls past its timeout now and then (:data:`MODEL_MIX`)."""
    tolerance: Decimal = Decimal("5.00")
    approval_threshold: Decimal = Decimal("1000.00")

    def __post_init__(self) -> None:
        if self.cases < 1:
            raise ValueError("--cases must be at least 1")
        if self.seconds < 10:
            raise ValueError("--seconds must be at least 10")
        if self.kills < 0:
            raise ValueError("--kills must be zero or more")
        if self.outages is not None and not 0 <= self.outages <= 3:
            raise ValueError("--outages must be from 0 to 3")
        if self.hosts not in (1, 2):
            raise ValueError("--hosts must be 1 or 2")
        if self.store not in ("sqlite", "cosmos"):
            raise ValueError("--store must be sqlite or cosmos")
        if self.model not in ("rules", "stub"):
            raise ValueError("--model must be rules or stub")
