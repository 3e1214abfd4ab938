"""No traceback reaches a person: the installed ``casekeeper`` command, run as a person runs it (a real
process, a real pipe), answers bad input with one line on stderr and exit status 2, and a closed pipe
ends it quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.domain import events as ev
from tests.support.app import Harness
from tests.support.invoices import invoice

CASEKEEPER = str(Path(sys.executable).with_name("casekeeper"))


def casekeeper(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CASEKEEPER_DEBUG"}
    return subprocess.run(
        [CASEKEEPER, *argv], check=False, capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def one_line_error(done: subprocess.CompletedProcess[str], status: int) -> str:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    [line] = done.stderr.splitlines()
    return line


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        (["case", "show", "INV/1"], 2, "must not contain /"),  # an id no store accepts: bad input
        (["case", "show", "C-1\t"], 2, "C-1"),
        (["case", "show", "NO-SUCH"], 1, "no case 'NO-SUCH'"),  # well-formed, not there: as the commands say
        (["effects", "resolve", "abc", "--done", "{}", "--by", "me", "--why", "x"], 1, "abc"),
        (["requests", "withdraw", "C-1", "zz", "--by", "me", "--why", "x"], 1, "zz"),
    ],
)
def test_a_mistake_is_one_line_on_stderr(
    argv: list[str], status: int, says: str, app: Harness, data: Path, tmp_path: Path
) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    line = one_line_error(casekeeper(*argv, "--data", str(data), cwd=tmp_path), status)
    assert says in line


def test_a_wrong_option_is_argparse_usage_and_exit_2(tmp_path: Path) -> None:
    done = casekeeper("case", "show", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == "casekeeper case show: error: the following arguments are required: ID"


def test_an_unknown_command_is_exit_2_with_the_list(tmp_path: Path) -> None:
    done = casekeeper("nonsense", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("casekeeper: unknown command 'nonsense'") and "commands:" in done.stderr


def test_a_missing_store_is_one_line(tmp_path: Path) -> None:
    line = one_line_error(casekeeper("case", "show", "C-1", "--data", str(tmp_path / "none"), cwd=tmp_path), 2)
    assert "no store at" in line


def closed_pipe(*argv: str, cwd: Path) -> tuple[int, str]:
    """Run with stdout a pipe whose only reader is closed before the command writes: as ``| head -1`` after
    head has gone."""
    proc = subprocess.Popen([CASEKEEPER, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(60), err


@pytest.mark.parametrize(
    "argv", [["--help"], ["case", "--help"], ["case", "show", "C-1"], ["case", "show", "C-1", "--json"]]
)
def test_a_closed_pipe_is_quiet(argv: list[str], app: Harness, data: Path, tmp_path: Path) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("1100.00"))
    extra = ["--data", str(data)] if argv[-1] != "--help" else []
    status, err = closed_pipe(*argv, *extra, cwd=tmp_path)
    assert err == "" and status == 0


def test_version(tmp_path: Path) -> None:
    done = casekeeper("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("casekeeper 0.")
