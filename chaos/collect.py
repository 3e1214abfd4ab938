"""After the injection phase: wait for quiescence (bounded), then collect the evidence from outside.

Sources, and only these: the supplier's journal, ``GET /api/cases/{id}``, the operator commands with
``--json`` (run as an operator runs them, in their own process), the alert sink's deliveries.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from chaos.cluster import Cluster

QUEUE = "case-events"


def queue_state(cluster: Cluster) -> dict[str, Any]:
    """The case-events queue's counts and dead letters, as an operator sees them (``casekeeper events queue``
    and ``casekeeper events dead-lettered``)."""
    counts = operator(cluster, "events", "queue")
    dead = operator(cluster, "events", "dead-lettered")
    return {
        "counts": counts.get("queue") if isinstance(counts, dict) and "queue" in counts else {},
        "deadLetters": dead.get("deadLettered") or [] if isinstance(dead, dict) else [],
        "errors": [r["error"] for r in (counts, dead) if isinstance(r, dict) and "error" in r],
    }


def case_views(cluster: Cluster, case_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``GET /api/cases/{id}`` for every case, from whichever host is up."""
    views: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=10.0) as http:
        for case_id in case_ids:
            host = cluster.pick(0)
            if host is None:
                views[case_id] = {"status": None, "body": None, "error": "no host up"}
                continue
            url = f"{cluster.url(host)}/api/cases/{quote(case_id, safe='')}"
            try:
                response = http.get(url)
                views[case_id] = {"status": response.status_code, "body": _json(response)}
            except httpx.HTTPError as exc:
                views[case_id] = {"status": None, "body": None, "error": f"{type(exc).__name__}: {exc}"}
    return views


def operator(cluster: Cluster, *args: str) -> Any:
    """Run ``casekeeper ARGS --json`` against the run's store; its JSON, or ``{"error": ...}``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(cluster.config.app_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if cluster.config.store == "cosmos":
        env.update(cluster.operator_env())
        where = ["--from-settings"]
    else:
        where = ["--data", str(cluster.data)]
    argv = [sys.executable, "-m", "shared.cli", *args, *where, "--json"]
    done = subprocess.run(
        argv, check=False, cwd=cluster.config.app_dir, env=env, capture_output=True, text=True, timeout=120
    )
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-800:]}"}


def settle(
    cluster: Cluster, case_ids: list[str], bound: float, *, on_poll: Callable[[str], None] = lambda line: None
) -> dict[str, Any]:
    """Wait until no effect is ``started``, the queue has nothing active or scheduled, no alert is owed a
    notification (a host killed between recording and posting one leaves it to the timer), and the case views
    stop changing (two polls alike), for at most ``bound`` seconds. Says whether it got there and why not."""
    started = time.monotonic()
    previous: str | None = None
    alike = 0
    detail = ""
    while True:
        cluster.ensure_hosts_up()
        views = case_views(cluster, case_ids)
        fingerprint = hashlib.sha256(json.dumps(views, sort_keys=True, default=str).encode()).hexdigest()
        in_flight = sum(
            1
            for v in views.values()
            for e in (v.get("body") or {}).get("effects") or []
            if e.get("status") == "started"
        )
        counts = queue_state(cluster)["counts"]
        alerts = operator(cluster, "alerts", "--limit", "100000")
        unnotified = (
            sum(1 for a in (alerts.get("alerts") or []) if a.get("notified") is False)
            if isinstance(alerts, dict)
            else 1
        )
        busy = in_flight or counts.get("active", 1) or counts.get("scheduled", 1) or unnotified
        alike = alike + 1 if fingerprint == previous and not busy else 0
        previous = fingerprint
        waited = time.monotonic() - started
        detail = (
            f"{in_flight} effects started, queue {counts.get('active')} active / {counts.get('scheduled')} scheduled, "
            f"{unnotified} alerts owed a notification, views {'unchanged' if alike else 'changing'}"
        )
        on_poll(f"settling {waited:.0f}s/{bound:.0f}s: {detail}")
        if alike >= 2:
            return {"reached": True, "waited": round(waited, 1), "detail": detail}
        if waited > bound:
            return {"reached": False, "waited": round(waited, 1), "detail": detail}
        time.sleep(1.5)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"text": response.text[:500]}
