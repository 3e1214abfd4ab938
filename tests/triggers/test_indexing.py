"""What the Functions host indexes: function names, trigger types, and binding names equal to the settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from shared.app.settings import SETTINGS
from shared.functions import CONTAINER_CASES, CONTAINER_LEASES

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = {s.name: s.default for s in SETTINGS}


def bindings(functions: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [json.loads(b) for b in functions[name].get_raw_bindings()]


def trigger(functions: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [b for b in bindings(functions, name) if b["type"].endswith("Trigger")]
    return found


def resolve(value: str) -> str:
    """What the host does with a %SETTING% reference: the setting's value (here: its default)."""
    if value.startswith("%") and value.endswith("%"):
        return str(DEFAULTS[value.strip("%")])
    return value


def test_the_app_indexes_exactly_these_functions(functions: dict[str, Any]) -> None:
    assert sorted(functions) == sorted(
        [
            "events",
            "approvals",
            "withdraw_request",
            "get_case",
            "health",
            "approvals_page",
            "approval_page",
            "ops_page",
            "ops_redrive",
            "ops_resolve",
            "case_page",
            "openapi",
            "case_worker",
            "reconciler",
            "checkpoint_health",
        ]
    )


def test_http_routes_methods_and_auth_levels(functions: dict[str, Any]) -> None:
    expected = {
        "events": ("events", ["POST"], "ANONYMOUS"),  # HMAC-signed: the signature is the authentication
        "approvals": ("cases/{caseId}/approvals/{requestId}", ["POST"], "FUNCTION"),
        "withdraw_request": ("cases/{caseId}/requests/{effectKey}/withdraw", ["POST"], "FUNCTION"),
        "get_case": ("cases/{caseId}", ["GET"], "FUNCTION"),
        "health": ("health", ["GET"], "ANONYMOUS"),
        # The pages: a browser sends no function key; App Service Authentication signs people in and the
        # handlers refuse a request without the principal and role they need (tests/triggers/test_pages.py).
        "approvals_page": ("approvals", ["GET"], "ANONYMOUS"),
        "approval_page": ("approvals/{caseId}/{requestId}", ["GET", "POST"], "ANONYMOUS"),
        "ops_page": ("ops", ["GET"], "ANONYMOUS"),
        "ops_redrive": ("ops/redrive", ["POST"], "ANONYMOUS"),
        "ops_resolve": ("ops/resolve", ["POST"], "ANONYMOUS"),
        "case_page": ("cases/{caseId}/page", ["GET"], "ANONYMOUS"),
        "openapi": ("openapi.json", ["GET"], "ANONYMOUS"),
    }
    for name, (route, methods, auth) in expected.items():
        t = trigger(functions, name)
        assert (t["type"], t["route"], t["methods"], t["authLevel"]) == ("httpTrigger", route, methods, auth)


def test_the_case_worker_is_a_session_trigger_on_the_configured_queue(functions: dict[str, Any]) -> None:
    t = trigger(functions, "case_worker")
    assert t["type"] == "serviceBusTrigger"
    assert t["isSessionsEnabled"] is True
    assert t["queueName"] == "%CASE_EVENTS_QUEUE%" and resolve(t["queueName"]) == "case-events"
    assert t["connection"] == "ServiceBusConnection"  # identity-based: ServiceBusConnection__fullyQualifiedNamespace
    assert "ServiceBusConnection__fullyQualifiedNamespace" in DEFAULTS


def test_the_reconciler_reads_the_cases_change_feed_with_a_retry_policy(functions: dict[str, Any]) -> None:
    """Effects are claimed and closed on their case, so the reconciler follows ``cases`` (its leases under a
    prefix of their own, apart from those it held on ``effects``)."""
    t = trigger(functions, "reconciler")
    assert t["type"] == "cosmosDBTrigger"
    assert (t["containerName"], t["leaseContainerName"]) == (CONTAINER_CASES, CONTAINER_LEASES) == ("cases", "leases")
    assert t["leaseContainerPrefix"] == "cases-"
    assert t["databaseName"] == "%COSMOS_DATABASE%" and resolve(t["databaseName"]) == "casekeeper"
    assert t["createLeaseContainerIfNotExists"] is False  # identity-based connections cannot create it
    # Without a lease yet (first deployment), effects written before the trigger first ran are read too.
    assert t["startFromBeginning"] is True
    assert t["connection"] == "CosmosDBConnection" and "CosmosDBConnection__accountEndpoint" in DEFAULTS
    retry = functions["reconciler"].get_settings_dict("retry_policy")
    assert retry is not None and retry["strategy"] == "exponential_backoff" and int(retry["max_retry_count"]) >= 3


def test_the_timer_runs_on_the_configured_schedule(functions: dict[str, Any]) -> None:
    t = trigger(functions, "checkpoint_health")
    assert t["type"] == "timerTrigger"
    assert t["schedule"] == "%CHECKPOINT_HEALTH_SCHEDULE%" and resolve(t["schedule"]) == "0 */5 * * * *"


def test_importing_the_app_opens_no_connection() -> None:
    # In a fresh interpreter, every socket is refused; the import (what the host does to index) must pass.
    probe = (
        "import socket\n"
        "def refuse(*a, **k): raise AssertionError('network I/O at import')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "import function_app\n"
        "assert len(function_app.app.get_functions()) == 15\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_sample_settings_list_every_setting_the_app_reads() -> None:
    sample = json.loads((ROOT / "local.settings.sample.json").read_text())["Values"]
    assert {s.name for s in SETTINGS} <= set(sample)
    for s in SETTINGS:
        if s.secret:
            assert not sample[s.name] or sample[s.name].startswith("<"), f"{s.name} must not carry a secret"
