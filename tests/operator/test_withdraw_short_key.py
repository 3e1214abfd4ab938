"""``casekeeper requests withdraw`` takes the 12-character key ``case show`` prints, and says nothing about
checkpoint capture: a newcomer copies what the operator view shows."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from casekeeper.capture import uninstall
from casekeeper.core.ledger import EffectStatus
from shared.domain import events as ev
from shared.operator.cases import main as case_main
from shared.operator.requests import main as requests_main
from tests.operator.conftest import Ran
from tests.support.app import Harness
from tests.support.invoices import invoice

Run = Callable[..., Ran]


def test_the_short_key_case_show_prints_withdraws_the_request(
    app: Harness, run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1300.00"))
    app.handle(ev.PO_UPDATED, "C-1", poAmount="1200.00")
    [effect] = app.ledger.for_case("C-1")
    assert effect.status == EffectStatus.DONE
    shown = run(case_main, "show", "C-1")
    assert effect.key[:12] in shown.out
    uninstall()  # as in a fresh ``casekeeper`` process: nothing installed yet
    with caplog.at_level(logging.WARNING):
        done = run(requests_main, "withdraw", "C-1", effect.key[:12], "--by", "ana", "--why", "cancelled")
    assert done.code == 0, done.err
    [withdrawal] = app.cases.require("C-1").facts["withdrawn"]
    assert withdrawal["effectKey"] == effect.key
    assert not [r for r in caplog.records if "capture" in r.getMessage()], caplog.text


def test_a_prefix_of_several_keys_asks_for_more(app: Harness, run: Run) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-2", **invoice("1300.00"))  # 300 requested
    app.handle(ev.PO_UPDATED, "C-2", poAmount="900.00")  # 400 over-billed: 100 more requested
    keys = sorted(e.key for e in app.ledger.for_case("C-2"))
    assert len(keys) == 2
    common = next((i for i, (a, b) in enumerate(zip(*keys, strict=True)) if a != b), 64)
    refused = run(requests_main, "withdraw", "C-2", keys[0][:common], "--by", "ana", "--why", "x")
    assert refused.code == 1 and "starts more than one effect key of case C-2" in refused.err
    assert not app.cases.require("C-2").facts.get("withdrawn")
