"""Child processes for the queue's cross-process tests: ``python -m tests.localhost.queue_child MODE ...``.

- ``send PATH QUEUE SESSION MESSAGE_ID``: send one message, print ``sent``, then ``os._exit`` at once
  (no close, no cleanup: a crash right after the acknowledgement).
- ``hold PATH QUEUE LOCK_DURATION``: receive one message, print it as JSON, then wait to be killed.
- ``work PATH QUEUE MARKERS LOG``: receive and complete until the queue is empty. While it holds a
  message it owns the marker file ``MARKERS/<session>``, created with ``O_EXCL``: finding it already
  there means another process holds the same session, logged as ``overlap``.
- ``mix PATH QUEUE MARKERS LOG SEED``: like ``work``, but with a seeded mix: some deliveries are
  abandoned (delivered again), and each receipt logs the wall time and the scheduled time, so that a
  test can check that a scheduled message was delivered within its poll bound.
- ``wait PATH QUEUE TIMEOUT``: print ``waiting``, block in one ``receive(timeout=TIMEOUT)``, then print
  what it got (or ``none``) with the wall time of its return.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from shared.messaging.sqlite_queue import LocalSessionQueue, LockLost


def _send(path: str, queue: str, session_id: str, message_id: str) -> None:
    q = LocalSessionQueue(path)
    q.send(queue, b"durable", session_id=session_id, message_id=message_id)
    print("sent", flush=True)
    os._exit(0)


def _hold(path: str, queue: str, lock_duration: str) -> None:
    q = LocalSessionQueue(path, lock_duration=float(lock_duration))
    msg = q.receive(queue, timeout=5.0)
    assert msg is not None
    print(json.dumps({"message_id": msg.message_id, "delivery_count": msg.delivery_count}), flush=True)
    time.sleep(60)


def _work(path: str, queue: str, markers: str, log_path: str) -> None:
    q = LocalSessionQueue(path)
    # Start together: say ready, then wait for the test's go, so that a process slow to start (a loaded
    # machine) does not find the work already done by the first one up.
    (Path(markers) / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 30
    while not (Path(markers) / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    with Path(log_path).open("a", encoding="utf-8") as log:
        while True:
            msg = q.receive(queue, timeout=0.2)
            if msg is None:
                counts = q.counts(queue)
                if counts["active"] == 0 and counts["scheduled"] == 0:
                    return
                continue
            marker = Path(markers) / msg.session_id
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                log.write(f"overlap {msg.session_id} {msg.message_id}\n")
                fd = None
            # CLOCK_MONOTONIC is system-wide on Linux: receipts of one session sort across processes.
            log.write(f"recv {time.monotonic_ns()} {msg.session_id} {msg.sequence_number} {msg.message_id}\n")
            log.flush()
            time.sleep(0.003)  # "work": long enough for a second holder to show up, if one could
            if fd is not None:
                os.close(fd)
                marker.unlink()
            try:
                q.complete(msg)
            except LockLost as exc:
                log.write(f"lost {msg.message_id} {exc.reason}\n")
            else:
                log.write(f"done {msg.message_id}\n")
            log.flush()
            # Step back briefly, so the session moves between processes instead of staying with one.
            time.sleep(0.004)


def _mix(path: str, queue: str, markers: str, log_path: str, seed: str) -> None:
    q = LocalSessionQueue(path, lock_duration=10.0)
    rng = random.Random(seed)
    with Path(log_path).open("a", encoding="utf-8") as log:
        while True:
            msg = q.receive(queue, timeout=0.2)
            if msg is None:
                counts = q.counts(queue)
                if counts["active"] == 0 and counts["scheduled"] == 0:
                    return
                continue
            received_at = time.time()
            marker = Path(markers) / msg.session_id
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                log.write(f"overlap {msg.session_id} {msg.message_id}\n")
                fd = None
            due = msg.scheduled_enqueue_time if msg.scheduled_enqueue_time is not None else 0.0
            log.write(
                f"recv {time.monotonic_ns()} {msg.session_id} {msg.sequence_number} {msg.message_id} "
                f"{msg.delivery_count} {received_at:.6f} {due:.6f}\n"
            )
            log.flush()
            time.sleep(rng.uniform(0.0, 0.004))
            if fd is not None:
                os.close(fd)
                marker.unlink()
            try:
                if msg.delivery_count == 1 and rng.random() < 0.25:
                    q.abandon(msg)
                    log.write(f"abandoned {msg.message_id}\n")
                else:
                    q.complete(msg)
                    log.write(f"done {msg.message_id}\n")
            except LockLost as exc:
                log.write(f"lost {msg.message_id} {exc.reason}\n")
            log.flush()
            time.sleep(rng.uniform(0.0, 0.004))


def _wait(path: str, queue: str, timeout: str) -> None:
    q = LocalSessionQueue(path, poll_interval=0.05)
    q.receive(queue)  # open the connection (and read once) before saying it waits
    print("waiting", flush=True)
    msg = q.receive(queue, timeout=float(timeout))
    print(f"{msg.message_id if msg is not None else 'none'} {time.time():.6f}", flush=True)


def main(argv: list[str]) -> None:
    mode, *args = argv
    modes: dict[str, Callable[..., None]] = {"send": _send, "hold": _hold, "work": _work, "mix": _mix, "wait": _wait}
    modes[mode](*args)


def spawn(*args: str) -> subprocess.Popen[str]:
    """Start this module in a child process (``tests.localhost.queue_child ARGS``), stdout piped."""
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.localhost.queue_child", *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
        text=True,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
