"""The Cosmos DB store from a connection string, and ``casekeeper init-store``, against the Cosmos test server.

The emulator path gives the app ``CosmosDBConnection=AccountEndpoint=...;AccountKey=...;`` (what the Functions
extension reads for the reconciler's trigger). The code reads the same setting: the store is built from its
endpoint and key, as for the test server. ``init-store`` creates what ``infra/app/cosmos.bicep`` creates in
Azure, the trigger's lease container included. (The test server stands in for the emulator: neither the
emulator nor Docker runs here.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.cosmos import CosmosClient

from devhost.cosmos_server import INSECURE_REQUEST_WARNING_FILTER, CosmosServer, start_cosmos_server
from devhost.ports import free_port
from shared.app import bootstrap
from shared.app.settings import Settings
from shared.operator.init_store import main as init_store
from tests.unit.test_infra import _cosmos_containers

pytestmark = [pytest.mark.cosmos, pytest.mark.filterwarnings(INSECURE_REQUEST_WARNING_FILTER)]


@pytest.fixture(scope="module")
def server() -> Iterator[CosmosServer]:
    with start_cosmos_server() as running:
        yield running


def connection_string(server: CosmosServer) -> str:
    return f"AccountEndpoint={server.endpoint};AccountKey={server.key};"


def settings_values(server: CosmosServer, database: str) -> dict[str, str]:
    return {
        "CASEKEEPER_STORE": "cosmos",
        "CosmosDBConnection": connection_string(server),
        "COSMOS_DATABASE": database,
        "CASEKEEPER_QUEUE": "local",
    }


def partition_keys(server: CosmosServer, database: str) -> dict[str, str]:
    """Every container of ``database`` and its partition key path, read with the SDK itself."""
    client = CosmosClient(server.endpoint, credential=server.key)
    db = client.get_database_client(database)
    return {c["id"]: c["partitionKey"]["paths"][0] for c in db.list_containers()}


def test_init_store_creates_what_the_bicep_creates_and_again_changes_nothing(
    server: CosmosServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    database = f"init{uuid.uuid4().hex[:10]}"
    # As a developer runs it: the settings in ./local.settings.json, as `local-settings emulators` writes them.
    monkeypatch.chdir(tmp_path)
    for name in ("CASEKEEPER_STORE", "CosmosDBConnection", "CosmosDBConnection__accountEndpoint", "COSMOS_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": settings_values(server, database)}))
    assert init_store([]) == 0
    assert partition_keys(server, database) == _cosmos_containers()  # containers, leases included, and keys
    assert init_store([]) == 0
    assert partition_keys(server, database) == _cosmos_containers()
    assert "leases" in capsys.readouterr().out


def test_init_store_refuses_settings_without_a_cosmos_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CASEKEEPER_STORE", "sqlite")
    monkeypatch.setenv("CASEKEEPER_QUEUE", "local")
    assert init_store([]) == 2
    assert "CASEKEEPER_STORE=cosmos" in capsys.readouterr().err


def test_the_app_store_works_from_a_connection_string(server: CosmosServer) -> None:
    database = f"conn{uuid.uuid4().hex[:10]}"
    settings = Settings.from_mapping(settings_values(server, database), receives_events=False)
    store = bootstrap.open_store(settings)
    try:
        store.ensure_containers()  # type: ignore[attr-defined]
        created = store.create("cases", "C-1", "C-1", {"id": "C-1", "status": "open"})
        read = store.read("cases", "C-1", "C-1")
        assert read is not None and read.body["status"] == "open" and read.etag == created.etag
    finally:
        store.close()


def test_init_store_without_a_running_emulator_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # a loopback port nothing listens on
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CASEKEEPER_STORE", "cosmos")
    monkeypatch.setenv("CASEKEEPER_QUEUE", "local")
    monkeypatch.setenv("CosmosDBConnection", f"AccountEndpoint=https://127.0.0.1:{port}/;AccountKey=a2V5;")
    assert init_store([]) == 2
    err = capsys.readouterr().err
    assert "unreachable" in err and "emulator running" in err
