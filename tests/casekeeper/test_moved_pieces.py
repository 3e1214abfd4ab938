"""The Agent Framework pieces moved from ``shared.workflow`` into ``casekeeper`` (issue 24): the old names still
work, are the very same objects, and what the old build stored still loads.

A checkpoint document holds the workflow's own message and state types (the allow-list), never a type of the
storage, the capture or the decoder, so moving those modules changes no stored type key; these tests pin that.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from casekeeper import DocumentStore, capture, checkpoint_decoding, checkpoints, state_schemas
from casekeeper.agent import RecordCheckpoints
from devhost.supplier_stub import SupplierStub
from shared.domain import events as ev
from shared.workflow import capture as old_capture
from shared.workflow import checkpoint_decoding as old_decoding
from shared.workflow import checkpoints as old_checkpoints
from shared.workflow import state_schemas as old_schemas
from shared.workflow.build import WORKFLOW_NAME
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES
from tests.support.app import make_harness
from tests.support.invoices import invoice

MOVED = ("casekeeper.capture", "casekeeper.checkpoint_decoding", "casekeeper.checkpoints", "casekeeper.state_schemas")
OLD = tuple(name.replace("casekeeper.", "shared.workflow.") for name in MOVED)


@pytest.fixture(autouse=True)
def _uninstall_capture() -> Iterator[None]:
    yield
    capture.uninstall()  # the harness installs one, as the composition root does


def test_the_old_names_are_the_same_objects_so_one_capture_and_one_refusal_handler_serve_both() -> None:
    for old, new in ((old_capture, capture), (old_checkpoints, checkpoints), (old_decoding, checkpoint_decoding)):
        for name in old.__all__:
            assert getattr(old, name) is getattr(new, name), f"{old.__name__}.{name}"
    for name in ("held_by", "incompatibilities", "schema_of", "type_key", "Incompatibility", "current"):
        assert getattr(old_schemas, name) is getattr(state_schemas, name)


def test_no_stored_type_key_names_a_moved_module() -> None:
    """The allow-list and the committed manifest (the keys pickled into checkpoints) name no moved module, so
    a checkpoint an older build wrote decodes under the same keys."""
    keys = set(ALLOWED_CHECKPOINT_TYPES) | set(old_schemas.read_manifest())
    assert keys and not [k for k in keys if k.split(":")[0] in MOVED + OLD]


def test_a_paused_invoice_checkpoint_written_through_the_old_path_loads_through_casekeeper(
    store: DocumentStore, supplier: SupplierStub
) -> None:
    """The invoice app writes a pause with its storage (imported by the old name); the guard package's own
    storage for the same record reads it, decodes it under the same allow-list and finds the run to resume."""
    app = make_harness(store, supplier.url)
    assert app.handle(ev.INVOICE_RECEIVED, "C-1", **invoice("2500.00")).status == "awaiting_approval"
    old = old_checkpoints.CaseCheckpointStorage(store, "C-1", ALLOWED_CHECKPOINT_TYPES)
    [record] = old.records(WORKFLOW_NAME)
    doc = store.read("checkpoints", "C-1", record.checkpoint_id)
    assert doc is not None and not [m for m in MOVED + OLD if m in json.dumps(doc.body)]
    new = RecordCheckpoints(store, "C-1", ALLOWED_CHECKPOINT_TYPES)
    loaded = asyncio.run(new.load(record.checkpoint_id))
    again = old.try_decode(record)
    assert loaded.checkpoint_id == again.checkpoint_id == record.checkpoint_id
    assert list(loaded.pending_request_info_events) == list(again.pending_request_info_events) != []
    [event] = loaded.pending_request_info_events.values()
    assert type(event.data).__module__ == "shared.workflow.messages"  # the app's own type, under its old key
