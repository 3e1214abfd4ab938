"""A user who installed only the guard checks their own workflow: ``python -m casekeeper.check`` from the
wheel (built as a user's pip builds it), over a plain synchronous workflow with no Agent Framework
and a stand-in on a SQLite file. It holds over a budget of seeds; the same workflow over a stand-in that does
not honour idempotency keys is found (exit 1, ``once``) with the command that reproduces it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guard's wheel, built from a copy of ``casekeeper/`` as a user's pip builds it (offline)."""
    out, build = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("build")
    shutil.copytree(ROOT / "casekeeper", build / "casekeeper", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out)]
    subprocess.run([*pip, str(build / "casekeeper")], check=True, timeout=300)
    (built,) = out.glob("casekeeper-*.whl")
    return built


USER_CHECK = textwrap.dedent(
    '''
    """A user's transfer workflow and its stand-in, checked by casekeeper.check."""
    import os
    import sqlite3

    import casekeeper
    from casekeeper import CasekeeperError, Guard, OutcomeUnknown
    from casekeeper.check import Workflow

    assert casekeeper.__file__.startswith(os.environ["GUARD_SITE"]), casekeeper.__file__  # the wheel's guard

    HONOURS_KEYS = os.environ.get("BANK_HONOURS_KEYS", "1") == "1"


    class Bank:
        """The downstream stand-in: transfers by idempotency key, each act journaled."""

        def __init__(self, path):
            self.path = str(path)
            with sqlite3.connect(self.path) as db:
                db.execute("CREATE TABLE IF NOT EXISTS acts (n INTEGER PRIMARY KEY, key TEXT, case_id TEXT)")

        def transfer(self, key, case_id):
            with sqlite3.connect(self.path) as db:
                known = db.execute("SELECT n FROM acts WHERE key = ?", (key,)).fetchone()
                if known is None or not HONOURS_KEYS:
                    db.execute("INSERT INTO acts (key, case_id) VALUES (?, ?)", (key, case_id))
            return {"key": key}

        def find(self, key):
            with sqlite3.connect(self.path) as db:
                row = db.execute("SELECT key FROM acts WHERE key = ?", (key,)).fetchone()
            return None if row is None else {"key": row[0]}

        def journal(self):
            with sqlite3.connect(self.path) as db:
                return [{"key": k, "caseId": r} for k, r in db.execute("SELECT key, case_id FROM acts ORDER BY n")]


    class Facts:
        def __init__(self, guard, send):
            self.guard, self.send = guard, send

        def open(self, case_id, n):
            self.guard.create(case_id, {"amount": str(n % 500)}, status="new")

        def change(self, case_id, n):
            case = self.guard.get(case_id)
            self.guard.update(case_id, case.version, {"amount": str(n % 500)}, reason="changed")

        def run(self, case_id):
            try:
                decision = self.guard.decide(case_id)
                if decision.case.status == "new":
                    self.send.run(decision, {"caseId": case_id})
            except (CasekeeperError, OutcomeUnknown):
                pass  # the host's retry, or the reconciler, settles it

        def answer(self, request, approve, by):
            pass  # this workflow asks no approvals


    def world(env):
        bank = Bank(env.path("bank.sqlite"))
        guard = Guard(env.store, **env.guard_options)
        send = guard.register(
            "transfer", lambda key, args: bank.transfer(key, args["caseId"]),
            commit="sent", lookup=bank.find, retry_same_key=True,
        )
        return Workflow(guard=guard, effects=[send], facts=Facts(guard, send), journal=bank.journal)
    '''
)


def check(built: Path, tmp_path: Path, *args: str, honours_keys: bool) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    if not site.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "-t", str(site), built],
            check=True,
            timeout=300,
        )
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "transfers.py").write_text(USER_CHECK)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{project}{os.pathsep}{site}"
    env["BANK_HONOURS_KEYS"] = "1" if honours_keys else "0"
    env["GUARD_SITE"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "casekeeper.check", "transfers:world", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_user_with_only_the_guard_checks_their_workflow_and_the_checker_can_fail(
    wheel: Path,
    tmp_path: Path,
) -> None:
    held = check(wheel, tmp_path, "--seeds", "40", honours_keys=True)
    assert held.returncode == 0, held.stdout + held.stderr
    assert "no violation: 40 seeds (0..39)" in held.stdout
    broken = check(wheel, tmp_path, "--seeds", "80", "--shrink-seconds", "20", honours_keys=False)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "once: the downstream acted 2 times under key" in broken.stdout
    assert "reproduce: python -m casekeeper.check transfers:world --seed " in broken.stdout
