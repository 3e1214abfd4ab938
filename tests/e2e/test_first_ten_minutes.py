"""The README's "first ten minutes", run as written against a real ``make run`` (``scripts/run-local.sh``): every
shell command of the section, read for this run's ports and folder as the banner says, and what the README says
each shows. The call timeout is shortened so that reconciliation comes in seconds, not two minutes."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from devhost.ports import free_port
from tests.e2e.test_run_script import ROOT, Run, approve, banner, case

pytestmark = pytest.mark.slow

README = (ROOT / "README.md").read_text()


def shell_blocks() -> list[list[str]]:
    """The section's ``sh`` blocks, each as its commands: continuations joined, trailing comments dropped."""
    section = README.split("## The first ten minutes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    commands = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", "", block)
        commands.append([re.sub(r"\s{2,}# .*$", "", line).strip() for line in joined.splitlines() if line.strip()])
    return commands


def for_this_run(command: str, port: int, supplier_port: int, data: Path) -> str:
    """A README command as the banner says to read it when the ports and folder are not the defaults."""
    command = command.replace("127.0.0.1:7071", f"127.0.0.1:{port}").replace(
        "127.0.0.1:8765", f"127.0.0.1:{supplier_port}"
    )
    command = command.replace(".casekeeper/dev", str(data))
    if command.startswith(".venv/bin/casekeeper send "):
        command += f" --url http://127.0.0.1:{port}"
    if command.startswith(".venv/bin/casekeeper "):
        command += f" --data {data}"
    return command


def shell(command: str) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def eventually(read: Callable[[], Any], good: Callable[[Any], bool], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if good(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.3)


def status_of(port: int, case_id: str) -> str | None:
    answer = case(port, case_id)
    return str(answer.json()["case"]["status"]) if answer.status_code == 200 else None


def posts(data: Path, case_id: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (data / "supplier.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in lines if r["method"] == "POST" and (r.get("body") or {}).get("caseId") == case_id]


def test_the_first_ten_minutes_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = shell_blocks()
    assert len(blocks) == 4, blocks  # steps 2, 3 (two blocks) and 4
    monkeypatch.setenv("CALL_TIMEOUT_SECONDS", "6")
    monkeypatch.setenv("SUPPLIER_TIMEOUT_SECONDS", "1")
    data = tmp_path / "data"
    port, supplier_port = free_port(), free_port()
    run = Run(tmp_path, "run", port=port, supplier_port=supplier_port, data=data)
    try:
        said = banner(run)
        assert "Sent INV-2002" in said

        def reaches(case_id: str, wanted: str) -> None:
            eventually(lambda: status_of(port, case_id), lambda now: now == wanted)

        commands = [[for_this_run(c, port, supplier_port, data) for c in block] for block in blocks]

        # 1. Approve INV-2002 (the page itself is tested in tests/browser): one POST.
        approve(port, "INV-2002")
        assert len(posts(data, "INV-2002")) == 1

        # 2. An invoice below the threshold: credit_requested, one effect done, one POST per case so far.
        send, show, cat, curl = commands[0]
        shell(send)
        reaches("INV-1001", "credit_requested")
        shown = shell(show)
        assert "credit_requested" in shown.splitlines()[0] and re.search(r"request_credit_note\s+done", shown)
        assert [json.loads(line)["method"] for line in shell(cat).splitlines()] == ["POST", "POST"]
        assert '"status": "credit_requested"' in shell(curl)

        # 3. The supplier creates the note, then answers 503: the effect stays started, nothing is re-sent.
        fault, send, pending = commands[1]
        shell(fault)
        shell(send)
        listed = eventually(lambda: shell(pending), lambda text: "INV-1002" in text)
        assert re.search(r"INV-1002\s+request_credit_note\s+started", listed) and "in flight" in listed
        assert status_of(port, "INV-1002") == "open"
        # After the call timeout, reconciliation finds the note by the key and commits the case.
        reaches("INV-1002", "credit_requested")
        show, count = commands[2]
        assert "(commit finished by reconciliation)" in shell(show)
        assert shell(count).strip() == "1"
        [post] = posts(data, "INV-1002")
        assert post["status"] == 503 and post["created"]
        lookups = [
            r
            for r in map(json.loads, (data / "supplier.jsonl").read_text().splitlines())
            if r["method"] == "GET" and r["idempotencyKey"] == post["idempotencyKey"]
        ]
        assert len(lookups) == 1 and lookups[0]["creditNoteId"] == post["creditNoteId"]

        # 4. The supplier fails before creating anything: retried with the same key, one credit note.
        fault, send = commands[3]
        shell(fault)
        shell(send)
        reaches("INV-1003", "credit_requested")
        tried = posts(data, "INV-1003")
        assert [p["status"] for p in tried] == [503, 201] and len({p["idempotencyKey"] for p in tried}) == 1
        notes = httpx.get(
            f"http://127.0.0.1:{supplier_port}/credit-notes", params={"idempotencyKey": tried[0]["idempotencyKey"]}
        )
        assert notes.status_code == 200
    finally:
        run.stop()

    # 5. make run again: the cases are kept, and the banner says what became of INV-2002.
    again = Run(tmp_path, "again", port=port, supplier_port=supplier_port, data=data)
    try:
        said = banner(again)
        assert "INV-2002 was approved in an earlier run" in said
        assert status_of(port, "INV-1003") == "credit_requested"
    finally:
        again.stop()
