"""Stores behind one protocol: Cosmos DB container names are configurable, and a third store runs the
contract suites through the factory hook (docs/guard.md#stores)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from casekeeper import CONTAINERS, Guard, open_cosmos, open_sqlite

ROOT = Path(__file__).resolve().parents[2]


def test_open_sqlite_gives_a_store_the_guard_runs_on(tmp_path: Path) -> None:
    store = open_sqlite(tmp_path / "s.sqlite")
    guard = Guard(store)
    pay = guard.register("pay", lambda key, args: {"ok": key}, commit="paid")
    assert pay.run(guard.decide(guard.create("r", {})[0].id), {}).commit == "committed"
    store.close()


def test_an_unknown_container_in_the_mapping_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown container"):
        open_cosmos("https://127.0.0.1:1", "db", key="k", container_names={"ledger": "x"})


@pytest.mark.cosmos
def test_cosmos_container_names_are_configurable(cosmos_server: Any) -> None:
    names = {name: f"refund_{name}" for name in CONTAINERS}
    database = f"t{uuid.uuid4().hex[:12]}"
    store = open_cosmos(
        cosmos_server.endpoint, database, key=cosmos_server.key, container_names=names, create_containers=True
    )
    try:
        guard = Guard(store)
        pay = guard.register("pay", lambda key, args: {"ok": True}, commit="paid")
        guard.create("r1", {})
        assert pay.run(guard.decide("r1"), {}).commit == "committed"
        client = store._get_client()  # the raw SDK, to see where the documents went
        db = client.get_database_client(database)
        containers = {c["id"] for c in db.list_containers()}
        assert containers == set(names.values())
        assert [
            d["id"]
            for d in db.get_container_client("refund_cases").query_items(
                "SELECT c.id FROM c", enable_cross_partition_query=True
            )
        ] == ["r1"]
        # The effect lives on its case (claim and outcome are entries of the case document); the effects
        # container is the archive of closed entries beyond the bound, empty here.
        [case] = list(
            db.get_container_client("refund_cases").query_items("SELECT * FROM c", enable_cross_partition_query=True)
        )
        assert [(e["action"], e["status"]) for e in case["effects"]] == [("pay", "done")]
        assert not list(
            db.get_container_client("refund_effects").query_items(
                "SELECT c.id FROM c", enable_cross_partition_query=True
            )
        )
    finally:
        store.close()


@pytest.mark.slow
def test_a_third_store_runs_the_contract_suite_through_the_factory_hook() -> None:
    env = {**os.environ, "CASEKEEPER_STORE_FACTORY": "tests.casekeeper.third_store:open_store"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/contract/test_document_store.py",
            "-q",
            "-k",
            "factory",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed is not None and int(passed.group(1)) >= 10, proc.stdout[-2000:]
    assert "failed" not in proc.stdout
