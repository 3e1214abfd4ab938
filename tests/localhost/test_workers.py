"""``casekeeper dev --workers N``: the case worker in N processes that live and die with the host.

The host is a real subprocess (as in ``tests/e2e``) so that it and its workers can be killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from devhost.supplier_stub import SupplierStub
from tests.support.dev_host import DevHost
from tests.support.invoices import invoice
from tests.support.supplier import posts

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_until(check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s")


def test_the_case_worker_runs_in_worker_processes_that_die_with_the_host(
    tmp_path: Path, supplier: SupplierStub
) -> None:
    host = DevHost(tmp_path / "data", supplier, extra_args=["--workers", "2"]).start()
    try:
        assert host.proc is not None
        wait_until(lambda: len(children(host.proc.pid)) == 2)  # type: ignore[union-attr]
        workers = children(host.proc.pid)
        assert host.post_event("invoice.received", "INV-W1", invoice("1250.00")).status_code == 202
        host.wait_for("INV-W1", lambda v: v["case"]["status"] == "credit_requested")
        [line] = [line for line in host.log().splitlines() if "case INV-W1: invoice.received -> committed" in line]
        assert "[worker " in line  # handled in a worker process, logged to the host's output

        # A worker that dies is started again, and the host goes on handling events.
        os.kill(workers[0], signal.SIGKILL)
        wait_until(lambda: len(children(host.proc.pid)) == 2 and workers[0] not in children(host.proc.pid))  # type: ignore[union-attr]
        assert host.post_event("invoice.received", "INV-W2", invoice("1300.00")).status_code == 202
        host.wait_for("INV-W2", lambda v: v["case"]["status"] == "credit_requested")

        # kill -9 of the host alone (not its process group): no worker outlives it.
        workers = children(host.proc.pid)
        host.kill()
        wait_until(lambda: not any(alive(pid) for pid in workers), timeout=5)
    finally:
        if host.proc is not None and host.proc.poll() is None:
            host.stop()
    assert len(posts(supplier)) == 2


def test_a_stopped_host_stops_its_workers_and_exits_cleanly(tmp_path: Path, supplier: SupplierStub) -> None:
    host = DevHost(tmp_path / "data", supplier, extra_args=["--workers", "2"]).start()
    assert host.proc is not None
    wait_until(lambda: host.log().count("Casekeeper case worker of host") == 2)  # both serving
    workers = children(host.proc.pid)
    assert len(workers) == 2
    assert host.stop() == 0
    assert not any(alive(pid) for pid in workers)
    assert host.log().count("shutting down") == 3  # the host and each worker, each cleanly


def test_one_worker_keeps_the_case_worker_in_the_host_process(tmp_path: Path, supplier: SupplierStub) -> None:
    host = DevHost(tmp_path / "data", supplier, extra_args=["--workers", "1"]).start()
    try:
        assert host.post_event("invoice.received", "INV-W3", invoice("1250.00")).status_code == 202
        host.wait_for("INV-W3", lambda v: v["case"]["status"] == "credit_requested")
        assert host.proc is not None and children(host.proc.pid) == []
        assert "[worker " not in host.log()
    finally:
        assert host.stop() == 0


def test_a_worker_ends_when_its_host_is_gone_even_without_the_parent_death_signal(tmp_path: Path) -> None:
    """The pipe is what ends a worker where ``PR_SET_PDEATHSIG`` does not exist (or did not fire)."""
    worker = textwrap.dedent(
        """
        import sys, time
        from devhost.host import die_with_parent
        # As where there is no PR_SET_PDEATHSIG: only the pipe is left.
        die_with_parent(int(sys.argv[1]), int(sys.argv[2]), death_signal=False)
        time.sleep(60)
        """
    )
    host = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        r, w = os.pipe()
        child = subprocess.Popen([sys.executable, "-c", {worker!r}, str(os.getpid()), str(r)], pass_fds=(r,))
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", host], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        wait_until(lambda: alive(worker_pid), timeout=10)
        time.sleep(0.5)  # past its set-up
        assert alive(worker_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: not alive(worker_pid), timeout=5)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
