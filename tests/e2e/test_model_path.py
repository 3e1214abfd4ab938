"""The model path end to end: ``casekeeper dev`` in its own process, the real Azure OpenAI chat client in it,
and the local stand-in model over loopback (scripted from here, or started by ``--model stub``)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost.model_stub import ModelStub, settings_for
from devhost.supplier_stub import SupplierStub
from tests.support.dev_host import DevHost
from tests.support.invoices import invoice
from tests.support.supplier import posts


@pytest.fixture
def model() -> Iterator[ModelStub]:
    with ModelStub(api_key="e2e-key") as stub:
        yield stub


@pytest.fixture
def modelled(tmp_path: Path, supplier: SupplierStub, model: ModelStub) -> Iterator[DevHost]:
    env = {**settings_for(model, "gpt-e2e"), "RETRY_BASE_SECONDS": "0.2", "AZURE_OPENAI_TIMEOUT_SECONDS": "10"}
    dev = DevHost(tmp_path / "data", supplier, env_overrides=env, extra_args=["--workers", "1"]).start()
    try:
        yield dev
    finally:
        dev.stop()


def test_a_throttled_model_is_waited_for_as_it_asks_and_then_decides(
    modelled: DevHost, model: ModelStub, supplier: SupplierStub
) -> None:
    """Three 429s with ``Retry-After: 1``: the host asks again about a second later each time (never in a
    burst, never dead-letters), then the model's proposal is committed, recorded as the model's."""
    model.script.replace({"steps": [{"mode": "throttle", "retryAfter": 1}] * 3})
    assert modelled.post_event("invoice.received", "C-1", invoice("1100.00")).status_code == 202
    view = modelled.wait_for("C-1", lambda v: v["case"]["status"] == "credit_requested", timeout=40)
    calls = model.calls()
    assert [c["mode"] for c in calls] == ["throttle", "throttle", "throttle", "correct"]
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(calls)]
    assert all(gap >= 0.95 for gap in gaps), gaps
    assert view["history"][-1]["proposedBy"] == "model gpt-e2e"
    notes = [n for n in view["notes"] if "model unavailable" in n["text"]]
    assert len(notes) == 3 and notes[0]["status"] == 429
    assert [p["body"]["amount"] for p in posts(supplier)] == ["100.00"]
    assert "dead-letter" not in modelled.log().lower()


def test_a_refusal_reaches_a_person_with_the_models_words(
    modelled: DevHost, model: ModelStub, supplier: SupplierStub
) -> None:
    model.script.replace({"steps": [{"mode": "refusal"}]})
    modelled.post_event("invoice.received", "C-2", invoice("1100.00"))
    view = modelled.wait_for("C-2", lambda v: v["case"]["status"] == "needs_review")
    assert "the model refused: I can't help with approving payments." in view["history"][-1]["reason"]
    assert view["history"][-1]["proposedBy"] == "model gpt-e2e"
    assert posts(supplier) == []


def test_dev_with_model_stub_has_a_model_decide(tmp_path: Path, supplier: SupplierStub) -> None:
    """``casekeeper dev --model stub`` (what ``make run`` starts with ``CASEKEEPER_MODEL=stub``)."""
    dev = DevHost(tmp_path / "data", supplier, extra_args=["--model", "stub", "--workers", "1"]).start()
    try:
        dev.post_event("invoice.received", "C-3", invoice("1250.00"))
        view = dev.wait_for("C-3", lambda v: v["case"]["status"] == "credit_requested")
        assert view["history"][-1]["proposedBy"] == "model stub"
        started = time.monotonic()
        dev.post_event("invoice.received", "C-4", invoice("1000.00"))
        assert dev.wait_for("C-4", lambda v: v["case"]["status"] == "approved")["history"][-1]["proposedBy"] == (
            "model stub"
        )
        assert time.monotonic() - started < 20
    finally:
        dev.stop()
