"""Browser tests: headless Chromium (Debian's ``chromium`` package, driven by Playwright) against a real
``casekeeper dev`` and supplier stub, both started once for the module.

Playwright's own browser download cannot work here, so the browser is the system's ``/usr/bin/chromium``
(``CHROMIUM`` overrides the path). Without it the tests skip on a developer's machine, but fail under
``CI=true``: CI must never pass by skipping them (``.ci/run`` installs chromium first).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from casekeeper.capture import uninstall
from shared.app import bootstrap
from shared.app.settings import Settings
from shared.domain.events import CaseEvent
from shared.localhost.supplier_stub import SupplierStub
from shared.messaging import encode
from shared.messaging.sqlite_queue import LocalSessionQueue
from tests.support.dev_host import SECRET, DevHost
from tests.support.downstream import leave_started
from tests.support.supplier import running_supplier

ROOT = Path(__file__).resolve().parents[2]
DOCS = Path(os.environ.get("CASEKEEPER_SCREENSHOTS") or (Path(tempfile.gettempdir()) / "casekeeper-screenshots"))
"""Where the browser tests save their screenshots: a temporary folder, so that ``make test`` leaves the tree
clean; ``make screenshots`` points it at ``docs/`` to refresh the README's pictures."""
DOCS.mkdir(parents=True, exist_ok=True)
APPROVER = "ana@example.com"
OPERATOR = "olga@example.com"


def _chromium() -> str | None:
    wanted = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    return wanted if Path(wanted).exists() else shutil.which("chromium")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"browser tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


# Module scope, not session: Playwright's sync API runs an event loop on this thread while it is open,
# and later tests that call asyncio.run() must not find one.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (requirements-dev.txt)")
    executable = _chromium()
    if executable is None:
        _unavailable("no chromium (apt-get install -y chromium)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def supplier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupplierStub]:
    """The root conftest's supplier, once for the module: the host the browser drives is started once."""
    with running_supplier(tmp_path_factory.mktemp("supplier") / "supplier.jsonl") as stub:
        yield stub


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser") / "data"


ESCALATED_CASE = "INV-ESC"
DEAD_CASE = "INV-DEAD"


def seed_stuck_work(data: Path, supplier: SupplierStub) -> str:
    """Before the host starts: an effect escalated to a person, and a dead-lettered event, so the ops page
    has something in each part. Returns the escalated effect's key."""
    data.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_mapping(
        {
            "CASEKEEPER_STORE": "sqlite",
            "CASEKEEPER_SQLITE_PATH": str(data / "casekeeper.sqlite"),
            "CASEKEEPER_QUEUE": "local",
            "CASEKEEPER_LOCAL_QUEUE_PATH": str(data / "queue.sqlite"),
            "WEBHOOK_SECRET": SECRET,
            "SUPPLIER_PORTAL_URL": supplier.url,
        }
    )
    svc = bootstrap.build(settings)
    try:
        svc.cases.create(ESCALATED_CASE, {"invoiceId": ESCALATED_CASE, "supplierId": "SUP-3", "poNumber": "PO-3"})

        effect = leave_started(svc.ledger, ESCALATED_CASE)
        svc.ledger.mark_needs_reconciliation(effect, "three lookups failed: the supplier cannot say")
    finally:
        uninstall()
        svc.close()
    queue = LocalSessionQueue(data / "queue.sqlite")
    try:
        event = CaseEvent(type="case.investigate", case_id=DEAD_CASE, data={}, delivery_id="seeded")
        queue.send("case-events", encode(event), session_id=DEAD_CASE, message_id="seeded-dead-letter")
        msg = queue.receive("case-events")
        assert msg is not None
        queue.dead_letter(msg, "Seeded", "a dead letter for the browser test")
    finally:
        queue.close()
    return effect.key


@pytest.fixture(scope="module")
def escalated_key(data: Path, supplier: SupplierStub) -> str:
    return seed_stuck_work(data, supplier)


@pytest.fixture(scope="module")
def host(data: Path, supplier: SupplierStub, escalated_key: str) -> Iterator[DevHost]:
    """Signed in as an approver who is also the operator, as ``make run`` is."""
    dev = DevHost(data, supplier, extra_args=["--as", APPROVER, "--role", "approver", "--role", "operator"]).start()
    try:
        yield dev
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def operator_host(data: Path, supplier: SupplierStub, host: DevHost) -> Iterator[DevHost]:
    """A second local host on the same data, signed in as an operator who is not an approver."""
    dev = DevHost(data, supplier, extra_args=["--as", OPERATOR, "--role", "operator"]).start()
    try:
        yield dev
    finally:
        dev.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    dialogs: list[str] = []
    tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    tab.dialogs = dialogs  # what any alert() would have said: the escaping test wants none
    try:
        yield tab
    finally:
        context.close()
