"""``make run`` (``scripts/run-local.sh``) run twice, as a newcomer does: the second run must not harm the first,
and a restart keeps the data. Real processes on real ports; no browser."""

from __future__ import annotations

import os
import signal
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

    def __init__(self, tmp: Path, name: str, *, port: int, supplier_port: int, data: Path, fresh: bool = False) -> None:
        self.port, self.out = port, tmp / f"{name}.out"
        env = {
            **os.environ,
            "PORT": str(port),
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


def test_a_second_make_run_leaves_the_first_answering_with_its_cases(tmp_path: Path, runs: list[Run]) -> None:
    data = tmp_path / "data"
    port, supplier_port = free_port(), free_port()
    first = Run(tmp_path, "first", port=port, supplier_port=supplier_port, data=data)
    runs.append(first)
    first.wait_for("sent INV-2002")
    assert case(port, "INV-2002").json()["case"]["status"] == "awaiting_approval"

    # The same ports: refused at once, naming the port, with nothing touched.
    second = Run(tmp_path, "second", port=port, supplier_port=supplier_port, data=data)
    assert second.finished() == 1
    assert f"port {port} (PORT) is already in use" in second.text()
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
    first.wait_for("sent INV-2002")
    version = case(port, "INV-2002").json()["case"]["version"]
    first.stop()

    again = Run(tmp_path, "again", port=port, supplier_port=supplier_port, data=data)
    runs.append(again)
    again.wait_for("INV-2002 is already there")
    kept = case(port, "INV-2002").json()["case"]
    assert kept["version"] == version  # kept, and not sent a second time
    again.stop()

    secret = (data / "webhook-secret").read_text()
    (data / "mine.txt").write_text("not Casekeeper's")
    fresh = Run(tmp_path, "fresh", port=port, supplier_port=supplier_port, data=data, fresh=True)
    runs.append(fresh)
    fresh.wait_for("sent INV-2002")
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
