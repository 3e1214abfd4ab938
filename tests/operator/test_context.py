"""Store selection: ``--data DIR`` or ``--from-settings``; operator commands never create a store or send."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from casekeeper import capture
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app.operations import Operations
from shared.operator import alerts
from shared.operator.context import open_operations


def test_from_settings_opens_the_configured_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "elsewhere.sqlite"
    SqliteDocumentStore(path).close()
    settings = {"CASEKEEPER_SQLITE_PATH": str(path), "CASEKEEPER_QUEUE": "local", "WEBHOOK_SECRET": "s"}
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": settings}))  # cwd is tmp_path
    assert alerts.main(["--from-settings"]) == 0
    assert capsys.readouterr().out == "no alerts\n"

    monkeypatch.setenv("CASEKEEPER_SQLITE_PATH", str(tmp_path / "absent.sqlite"))  # the environment wins
    assert alerts.main(["--from-settings"]) == 2
    assert "no store at" in capsys.readouterr().err
    assert not (tmp_path / "absent.sqlite").exists()


def test_invalid_settings_are_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": {"CASEKEEPER_STORE": "mongo"}}))
    assert alerts.main(["--from-settings"]) == 2
    assert "CASEKEEPER_STORE must be one of" in capsys.readouterr().err


def test_opening_the_store_side_changes_nothing_process_wide_and_holds_no_sender(tmp_path: Path) -> None:
    SqliteDocumentStore(tmp_path / "casekeeper.sqlite").close()
    capture.uninstall()  # whatever an earlier test left
    ops = open_operations(argparse.Namespace(data=tmp_path, from_settings=False))
    try:
        assert capture.installed() is None
        # Nothing to send with: operator commands change the store directly, never enqueue.
        assert not hasattr(ops, "sender")
        assert isinstance(ops, Operations)
    finally:
        ops.close()


def test_from_settings_needs_no_webhook_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "casekeeper.sqlite"
    SqliteDocumentStore(path).close()
    (tmp_path / "local.settings.json").write_text(
        json.dumps({"Values": {"CASEKEEPER_SQLITE_PATH": str(path), "CASEKEEPER_QUEUE": "local"}})
    )
    assert alerts.main(["--from-settings"]) == 0, capsys.readouterr().err
