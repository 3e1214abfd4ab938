"""Without chromium, a browser test skips on a developer's machine and fails under ``CI=true``: CI must never pass
by skipping the browser tests. One browser test run in a child pytest, chromium hidden from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_one_browser_test(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    empty = tmp_path / "bin"  # a PATH with no chromium on it
    empty.mkdir(exist_ok=True)
    environment = {k: v for k, v in os.environ.items() if k not in ("CI", "CHROMIUM")}
    environment.update(PATH=str(empty), CHROMIUM=str(tmp_path / "no-chromium"), **env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "tests/browser/test_refresh.py",
        ],
        check=False,
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_chromium_fails(tmp_path: Path, ci: str) -> None:
    result = run_one_browser_test(tmp_path, CI=ci)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "browser tests cannot run under CI: no chromium" in result.stdout
    assert "skipped" not in result.stdout


def test_on_a_developers_machine_a_missing_chromium_skips(tmp_path: Path) -> None:
    result = run_one_browser_test(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
