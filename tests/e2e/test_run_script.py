"""``make run`` (``scripts/run-local.sh``) run twice, as a newcomer does: the second run must not harm the first and
says every problem at once, a restart keeps the data, and the banner says what is true now (this run's ports and
supplier URL, the waiting case's status). Real processes on real ports; no browser."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devhost.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run-local.sh"

pytestmark = pytest.mark.slow


class Run:
    """One ``scripts/run-local.sh`` in its own process group, its output in a file."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        *,
        port: int,
        supplier_port: int,
        data: Path,
        fresh: bool = False,
        port_text: str | None = None,
    ) -> None:
        self.port, self.out = port, tmp / f"{name}.out"
        env = {
            **os.environ,
            "PORT": port_text if port_text is not None else str(port),
            "SUPPLIER_PORT": str(supplier_port),
            "CASEKEEPER_RUN_DATA": str(data),
        }
        env.pop("WEBHOOK_SECRET", None)
        env.pop("CASEKEEPER_FRESH", None)
        if fresh:
            env["CASEKEEPER_FRESH"] = "1"
        with self.out.open("w") as sink:
            self.proc = subprocess.Popen(
                [str(SCRIPT)], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    def text(self) -> str:
        return self.out.read_text()

    def wait_for(self, needle: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert self.proc.poll() is None or needle in self.text(), f"exited {self.proc.returncode}:\n{self.text()}"
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.2)

    def finished(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    try:
        yield started
    finally:
        for run in reversed(started):
            run.stop()


def case(port: int, case_id: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/api/cases/{case_id}", timeout=10)


SENT = "Sent INV-2002"
BANNER_END = "Ctrl-C stops it."


def banner(run: Run) -> str:
    """The banner the run printed once its host answered."""
    run.wait_for(BANNER_END)
    text = run.text()
    return text[text.rindex("Casekeeper is running on") :]


def approve(port: int, case_id: str) -> None:
    """Approve the case's pending request as the local approver, and wait until the case has moved."""
    pending = case(port, case_id).json()["pendingApproval"]
    answer = httpx.post(
        f"http://127.0.0.1:{port}/api/cases/{case_id}/approvals/{pending['requestId']}",
        json={"decision": "approve", "caseVersion": pending["caseVersion"]},
        timeout=10,
    )
    assert answer.status_code == 202, answer.text
    deadline = time.monotonic() + 30
    while case(port, case_id).json()["case"]["status"] != "credit_requested":
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_second_make_run_leaves_the_first_answering_with_its_cases(tmp_path: Path, runs: list[Run]) -> None:
    data = tmp_path / "data"
    port, supplier_port = free_port(), free_port()
    first = Run(tmp_path, "first", port=port, supplier_port=supplier_port, data=data)
    runs.append(first)
    first.wait_for(SENT)
    assert case(port, "INV-2002").json()["case"]["status"] == "awaiting_approval"

    # The same ports and folder: refused at once, with every problem in one go, each with its fix, and
    # nothing touched.
    second = Run(tmp_path, "second", port=port, supplier_port=supplier_port, data=data)
    assert second.finished(10) == 1
    said = second.text()
    assert "cannot start (3 problems; nothing was started or changed)" in said, said
    assert f"port {port} (PORT) is already in use" in said
    assert f"port {supplier_port} (SUPPLIER_PORT) is already in use" in said
    assert f"another make run is using {data}" in said
    assert said.count("Fix: ") == 3
    # Other ports, the same data folder: refused too (the first run holds the folder's lock).
    third = Run(tmp_path, "third", port=free_port(), supplier_port=free_port(), data=data, fresh=True)
    assert third.finished(60) == 1
    assert f"another make run is using {data}" in third.text()

    answer = case(port, "INV-2002")
    assert answer.status_code == 200 and answer.json()["case"]["status"] == "awaiting_approval"
    assert (data / "casekeeper.sqlite").is_file()


def test_a_restart_keeps_the_cases_and_a_fresh_start_is_asked_for(tmp_path: Path, runs: list[Run]) -> None:
    data = tmp_path / "data"
    port, supplier_port = free_port(), free_port()
    first = Run(tmp_path, "first", port=port, supplier_port=supplier_port, data=data)
    runs.append(first)
    first.wait_for(SENT)
    version = case(port, "INV-2002").json()["case"]["version"]
    first.stop()

    again = Run(tmp_path, "again", port=port, supplier_port=supplier_port, data=data)
    runs.append(again)
    assert "INV-2002 (kept from the last run) is still waiting for your approval" in banner(again)
    kept = case(port, "INV-2002").json()["case"]
    assert kept["version"] == version  # kept, and not sent a second time
    again.stop()

    secret = (data / "webhook-secret").read_text()
    (data / "mine.txt").write_text("not Casekeeper's")
    fresh = Run(tmp_path, "fresh", port=port, supplier_port=supplier_port, data=data, fresh=True)
    runs.append(fresh)
    fresh.wait_for(SENT)
    assert "fresh start" in fresh.text() and "left alone" in fresh.text()
    assert (data / "mine.txt").read_text() == "not Casekeeper's"
    assert (data / "webhook-secret").read_text() != secret  # the old stores and secret are gone


def test_a_folder_that_is_not_casekeepers_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "home"
    data.mkdir()
    (data / "notes.txt").write_text("keep me")
    run = Run(tmp_path, "run", port=free_port(), supplier_port=free_port(), data=data, fresh=True)
    assert run.finished() == 1
    assert "is not empty and is not a Casekeeper data folder" in run.text()
    assert sorted(p.name for p in data.iterdir()) == ["notes.txt"]


def test_after_a_restart_the_banner_says_what_is_true_now(tmp_path: Path, runs: list[Run]) -> None:
    """The seed case approved, then make run again on another supplier port: the banner says the case was
    approved (not that it waits) and every command it prints names this run's supplier, never the last one's
    nor an empty host."""
    data = tmp_path / "data"
    port, supplier_port = free_port(), free_port()
    first = Run(tmp_path, "first", port=port, supplier_port=supplier_port, data=data)
    runs.append(first)
    said = banner(first)
    assert SENT in said and "Approve it" in said
    approve(port, "INV-2002")
    first.stop()

    for attempt in range(3):  # the stale URL was read in 1 run of 6: more than one restart
        new_supplier_port = free_port()
        again = Run(tmp_path, f"again-{attempt}", port=port, supplier_port=new_supplier_port, data=data)
        runs.append(again)
        said = banner(again)
        assert "INV-2002 was approved in an earlier run: its credit note was requested (credit_requested)" in said
        assert f"http://127.0.0.1:{port}/api/cases/INV-2002/page" in said
        assert "waiting for your approval" not in said and "Approve it" not in said
        assert f"supplier stub: http://127.0.0.1:{new_supplier_port})" in said
        assert f" http://127.0.0.1:{new_supplier_port}/_control/faults" in said
        assert f":{supplier_port}" not in said or supplier_port == new_supplier_port
        assert "' /_control" not in said and "'/_control" not in said
        again.stop()


def test_the_printed_commands_carry_this_runs_port_and_folder(tmp_path: Path, runs: list[Run]) -> None:
    """Every command in the banner that talks to the host names its port, and every one that reads the data
    folder names it, when they are not the commands' defaults (7071, .casekeeper/dev)."""
    data = tmp_path / "data"
    port, supplier_port = free_port(), free_port()
    run = Run(tmp_path, "run", port=port, supplier_port=supplier_port, data=data)
    runs.append(run)
    said = banner(run)
    joined = re.sub(r"\\\n\s*", "", said)  # a command continued over lines, as one line
    commands = [line.strip() for line in joined.splitlines() if ".venv/bin/casekeeper " in line]
    assert commands, said
    sends = [c for c in commands if " send " in c]
    assert sends and all(c.endswith(f"--url http://127.0.0.1:{port} --data {data}") for c in sends), sends
    assert all(f"--data {data}" in c for c in commands), commands
    commands_part = said.split("This run is not on the defaults", 1)[0]
    hosts = re.findall(r"https?://([^/\s'\")]*)", commands_part)
    assert hosts and set(hosts) == {f"127.0.0.1:{port}", f"127.0.0.1:{supplier_port}"}, hosts
    assert f"cat {data}/supplier.jsonl" in said
    # Starting again names this run's settings, and the README's commands, written for the defaults, are
    # translated: the defaults appear only there.
    again = f"PORT={port} SUPPLIER_PORT={supplier_port} CASEKEEPER_RUN_DATA={data} make run"
    assert f"Start again from nothing:    {again} FRESH=1" in said
    translation = said.split("This run is not on the defaults the README's commands are written for.", 1)[1]
    assert f"http://127.0.0.1:{port} for http://127.0.0.1:7071, and give casekeeper send --url" in translation
    assert f"http://127.0.0.1:{supplier_port} for http://127.0.0.1:8765" in translation
    assert f"{data} for .casekeeper/dev, and give every casekeeper command --data {data}" in translation
    assert f"{again} for make run" in translation
    assert not re.search(r":(7071|8765)\b", commands_part)


def test_a_typo_in_a_port_and_a_busy_port_are_both_reported(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        env_port = "7O71"
        run = Run(tmp_path, "run", port=0, supplier_port=taken, data=tmp_path / "data", port_text=env_port)
        assert run.finished(10) == 1
    said = run.text()
    assert "cannot start (2 problems" in said, said
    assert "PORT='7O71' is not a port number (1-65535). Fix: PORT=" in said
    assert f"port {taken} (SUPPLIER_PORT) is already in use" in said
    assert not (tmp_path / "data").exists()  # nothing was touched
