"""A value planted in a stored checkpoint cannot run code through a framework class: checkpoint decoding
admits only the types the checkpoints contain, refuses the rest and raises an alert
(``casekeeper.checkpoint_decoding``)."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage

from casekeeper.checkpoint_decoding import FRAMEWORK_CHECKPOINT_TYPES, decode_checkpoint_value
from casekeeper.checkpoints import CHECKPOINTS, KIND_CHECKPOINT
from casekeeper.core.clock import ManualClock
from casekeeper.core.ports import Query
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app.alerts import Alerter
from shared.domain import events as ev
from shared.operator.drain import main
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES
from tests.operator.conftest import Ran
from tests.support.app import Harness
from tests.support.invoices import invoice

Run = Callable[..., Ran]


class _Gadget:
    """Pickles as "call FileCheckpointStorage(path)": a top-level agent_framework class, which the
    framework's own unpickler admits, and whose constructor creates the directory it is given."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (FileCheckpointStorage, (str(self.path),))


def envelope(value: object) -> dict[str, str]:
    """As the framework's encoding stores a pickled value."""
    return {"__pickled__": base64.b64encode(pickle.dumps(value)).decode(), "__type__": "builtins:dict"}


def plant(store: SqliteDocumentStore, case_id: str, value: object) -> str:
    """Put ``value`` into the case's newest stored checkpoint, as someone with write access to the store
    could. Returns the checkpoint's id."""
    docs = [d for d in store.query(CHECKPOINTS, _query(case_id)) if d.body.get("kind") == KIND_CHECKPOINT]
    newest = max(docs, key=lambda d: d.body["seq"])
    body = dict(newest.body)
    encoded = json.loads(body["encoded"])
    encoded["state"] = {**dict(encoded.get("state") or {}), "planted": envelope(value)}
    body["encoded"] = json.dumps(encoded)
    store.replace(CHECKPOINTS, case_id, newest.id, body, etag=newest.etag)
    return newest.id


def _query(case_id: str) -> Query:
    return Query(partition=case_id)


def test_a_gadget_planted_in_a_checkpoint_is_refused_runs_nothing_and_is_alerted(
    app: Harness, store: SqliteDocumentStore, run: Run, tmp_path: Path
) -> None:
    app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2500.00"))  # paused for approval: a stored checkpoint
    target = tmp_path / "made-by-the-gadget"
    plant(store, "C-1", _Gadget(target))

    checked = run(main, "check", "--json")  # what the ops page's drain check runs
    assert not target.exists(), "decoding the checkpoint ran the planted constructor"
    assert checked.code == 1
    [stranded] = checked.json()["cannotResume"]
    [problem] = stranded["problems"]
    assert problem["kind"] == "undecodable" and "FileCheckpointStorage" in problem["reason"]

    [alert] = [a for a in Alerter(store, ManualClock()).recent() if a.alert_kind == "checkpoint_type_refused"]
    assert "FileCheckpointStorage" in alert.message
    run(main, "check", "--json")  # the ops page refreshes: the same planted value, still one alert
    assert len([a for a in Alerter(store, ManualClock()).recent() if a.alert_kind == "checkpoint_type_refused"]) == 1


@pytest.mark.parametrize(
    "planted",
    [
        pytest.param(lambda p: FileCheckpointStorage, id="a framework class itself"),
        pytest.param(_Gadget, id="a framework constructor call"),
    ],
)
def test_only_the_listed_types_decode(planted: Callable[[Path], object], tmp_path: Path) -> None:
    value = {"ok": envelope({"a": 1}), "bad": envelope(planted(tmp_path / "x"))}
    with pytest.raises(Exception, match="blocked for type 'agent_framework"):
        decode_checkpoint_value(value, allowed_types=ALLOWED_CHECKPOINT_TYPES)
    assert not (tmp_path / "x").exists()
    # What the checkpoints do hold still decodes.
    assert decode_checkpoint_value({"ok": envelope({"a": 1})}, allowed_types=ALLOWED_CHECKPOINT_TYPES) == {
        "ok": {"a": 1}
    }
    assert len(FRAMEWORK_CHECKPOINT_TYPES) == 4
