"""What a newcomer does: ``make run`` (``scripts/run-local.sh``), open the URL it prints, approve the invoice
waiting there as the local approver, and watch the case move."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips, or fails under CI, with the reason
    expect = None

from devhost.ports import free_port
from tests.browser.conftest import ROOT


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """``scripts/run-local.sh`` on free ports and its own data folder; yields (its output file, data, ...)."""
    data = tmp_path / "run"
    out = tmp_path / "make-run.out"
    env = {
        **os.environ,
        "PORT": str(free_port()),
        "SUPPLIER_PORT": str(free_port()),
        "CASEKEEPER_RUN_DATA": str(data),
    }
    env.pop("WEBHOOK_SECRET", None)
    with out.open("w") as sink:
        proc = subprocess.Popen(
            ["scripts/run-local.sh"], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield env["PORT"], data, out
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the script's own process group: stub, host, seeding
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_make_run_prints_the_url_and_the_waiting_approval_can_be_approved(
    browser: Any, make_run: tuple[str, Path, Path]
) -> None:
    port, data, out = make_run
    deadline = time.monotonic() + 60
    while "Sent INV-2002" not in out.read_text():
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.2)
    printed = out.read_text()
    url = f"http://127.0.0.1:{port}/api/approvals"
    assert url in printed and "you@localhost" in printed

    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(url)
        assert "local identity" in page.locator("header").inner_text()
        page.locator('tr[data-case="INV-2002"] a.request').click()
        assert "1400.00 EUR" in page.locator("#amount").inner_text()
        page.locator("#approve").click()
        expect(page.locator("#case-status")).to_have_text("credit_requested", timeout=20_000)
        assert "approved by you@localhost" in page.locator("#history").inner_text()
    finally:
        context.close()
    lines = [json.loads(line) for line in (data / "supplier.jsonl").read_text().splitlines() if line.strip()]
    posts = [r for r in lines if r["method"] == "POST"]
    assert len(posts) == 1 and re.fullmatch(r"1400\.00", posts[0]["body"]["amount"])
