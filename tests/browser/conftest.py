"""Browser tests: headless Chromium (Debian's ``chromium`` package, driven by Playwright) against a real
``casekeeper dev`` and supplier stub, both started once for the module.

Playwright's own browser download cannot work here, so the browser is the system's ``/usr/bin/chromium``
(``CHROMIUM`` overrides the path). Without it the tests skip on a developer's machine, but fail under
``CI=true``: CI must never pass by skipping them (``.ci/run`` installs chromium first).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.localhost.supplier_stub import SupplierStub
from tests.e2e.conftest import DevHost

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
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
    stub = SupplierStub(port=0, log_path=tmp_path_factory.mktemp("supplier") / "supplier.jsonl")
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser") / "data"


@pytest.fixture(scope="module")
def host(data: Path, supplier: SupplierStub) -> Iterator[DevHost]:
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
