"""The local host's data folder and generated secret are this user's only, from the moment they exist."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from devhost.host import SECRET_FILE, DevOptions, load_environment


def test_the_secret_is_created_0600_not_restricted_afterwards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A chmod after the write leaves a window in which the secret is readable: take chmod away, and the
    # mode must still be right, so it was set at creation.
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    previous = os.umask(0o022)
    try:
        env = load_environment(DevOptions(data=tmp_path / "data", app_dir=tmp_path), base={})
    finally:
        os.umask(previous)
    secret = tmp_path / "data" / SECRET_FILE
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert env["WEBHOOK_SECRET"] == secret.read_text().strip() and len(env["WEBHOOK_SECRET"]) == 64
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700  # created so, chmod or not
