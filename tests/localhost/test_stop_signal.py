"""``casekeeper dev`` (the host and each case worker) stops on Ctrl-C or SIGTERM whichever of its threads the
kernel hands the signal to. Python runs a signal handler only on the main thread; a main thread asleep in a wait
without a timeout slept through a signal another thread took, and ``make run`` kept running after Ctrl-C.

The signal is sent to a thread other than the main one (``pthread_kill``), which is what the kernel may do with a
process-wide signal; the child is a plain Python process with the host's wait around a stand-in for the host."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import signal, sys, threading, time
    from devhost.host import LocalHost

    class Host:
        def start(self):
            def take_the_signal():  # as another thread of the host would, while the main thread waits
                time.sleep(0.3)
                signal.pthread_kill(threading.get_ident(), getattr(signal, sys.argv[1]))
                time.sleep(30)

            threading.Thread(target=take_the_signal, daemon=True).start()

        def describe(self):
            return "started"

        def stop(self):
            print("stopped", flush=True)

    LocalHost.run_until_signalled(Host())
    """
)


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_taken_by_another_thread_stops_the_host(name: str) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, name], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["started", "stopped"]
