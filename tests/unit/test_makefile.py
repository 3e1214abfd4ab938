"""The Makefile a newcomer meets: ``make help`` lists the targets, ``make run`` sets up only what it runs,
and setup shows its progress. Read through ``make -n`` (what make would run), so nothing is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make(*args: str, venv: Path) -> str:
    done = subprocess.run(
        ["make", "--no-print-directory", *args, f"VENV={venv}", "PYTHON313="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_help_lists_every_target(tmp_path: Path) -> None:
    shown = make("help", venv=tmp_path / "venv")
    for target in ("run", "test", "setup", "lint", "demo", "bench", "sim", "chaos", "screenshots", "clean"):
        assert f"make {target} " in shown, f"make help does not list {target}"
    assert make(venv=tmp_path / "venv") == shown  # plain make is make help


def test_make_run_sets_up_only_what_it_runs(tmp_path: Path) -> None:
    planned = make("-n", "run", venv=tmp_path / "venv")  # a fresh clone: no venv yet
    assert "-r requirements.txt" in planned and "scripts/run-local.sh" in planned
    assert "requirements-dev.txt" not in planned, "make run installs the test tools"
    assert "npm" not in planned and ".venv313" not in planned, "make run sets up what only the tests use"


def test_setup_shows_progress(tmp_path: Path) -> None:
    planned = make("-n", "setup", venv=tmp_path / "venv")
    installs = [line for line in planned.splitlines() if "pip install" in line and "-r requirements" in line]
    assert installs and not [line for line in installs if "--quiet" in line], "pip runs quietly: no progress"
    assert planned.count("==> ") >= 2  # each step says what it does before it starts


def test_make_test_runs_the_lint_and_the_lint_checks_the_import_layers(tmp_path: Path) -> None:
    """A broken import-linter contract fails ``make test``: test depends on lint, and lint runs lint-imports."""
    planned = make("-n", "test", venv=tmp_path / "venv")
    assert f"{tmp_path / 'venv'}/bin/lint-imports" in planned
    assert planned.index("lint-imports") < planned.index("bin/pytest"), "the layers are checked before the tests"


def test_make_test_and_make_test_313_run_the_same_two_passes(tmp_path: Path) -> None:
    """Both targets run the suite in parallel without the ``serial`` tests, then the ``serial`` tests alone:
    together every test, and CI's two Pythons run it the same way."""
    python313 = tmp_path / "python3.13"  # make -n only prints the commands: any path will do
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-n",
            "test",
            "test-313",
            f"VENV={tmp_path / 'venv'}",
            f"PYTHON313={python313}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    runs = [line for line in done.stdout.splitlines() if "/bin/pytest " in line]
    assert [line.split("/bin/pytest")[0].rsplit("/", 1)[-1] for line in runs] == ["venv", ".venv-test313"]
    for line in runs:
        assert '-n 2 --dist loadfile -m "not serial"; first=$?;' in line, line
        assert "/bin/pytest -m serial; second=$?;" in line, line
        assert "exit $(( first ? first : second ))" in line, line


def test_the_serial_marker_is_registered_and_holds_the_chaos_run() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "serial", "tests/chaos"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "tests/chaos/test_chaos_run.py::test_a_small_seeded_run_keeps_every_invariant" in listed.stdout
