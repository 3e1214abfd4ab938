"""The checkpointed types' schemas against the committed manifest: a developer hears before merging (rule R8).

``shared/workflow/state_schemas.json`` records the fields of every type on the checkpoint allow-list as the
last release wrote them, like a lock file. The first test is the guard itself: it fails when the code's
types are incompatible with the manifest (checkpoints the previous release wrote would not resume), naming
each type and field and the fix, and fails with the command to run when the change is compatible but the
manifest was not regenerated. The others prove that it fails for the changes it must catch, through the
same command CI can run against an older build's manifest (``casekeeper drain schemas --against FILE``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casekeeper.state_schemas import incompatibilities
from shared.operator.drain import main as drain
from shared.workflow import messages, state_schemas
from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES
from shared.workflow.state_schemas import FIXES, MANIFEST, REGENERATE, build_schemas, read_manifest
from tests.support.changed_build import (
    ApprovalRequestWithOptionalApprovers,
    deploy_approvers_field,
    deploy_renamed_request,
    deploy_state_type,
)


def test_the_checkpointed_types_are_compatible_with_the_manifest_and_it_is_up_to_date() -> None:
    recorded, code = read_manifest(), build_schemas()
    problems = incompatibilities(recorded, code)
    assert not problems, (
        "checkpoints the previous release wrote could not be resumed by this code:\n"
        + "\n".join(f"  {p.text()}" for p in problems)
        + f"\nFix: {FIXES}"
    )
    assert recorded == code, f"a compatible change to a checkpointed type: record it with '{REGENERATE}'"


def check(capsys: pytest.CaptureFixture[str], allowed: frozenset[str] = ALLOWED_CHECKPOINT_TYPES) -> tuple[int, str]:
    capsys.readouterr()
    code = state_schemas.main([], allowed_types=allowed)
    return code, capsys.readouterr().out


def test_a_default_factory_field_fails_naming_the_field_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    allowed = deploy_approvers_field(monkeypatch)
    code, out = check(capsys, allowed)
    assert code == 1
    assert out.startswith(
        "shared.workflow.messages:ApprovalRequest.approvers: added with a default_factory: an object restored "
        "from a checkpoint lacks it (no __init__ runs)\n"
    )
    assert "give a new field a plain default" in out and "new type name" in out and "drain" in out


def test_a_renamed_type_fails_naming_the_old_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = check(capsys, deploy_renamed_request(monkeypatch))
    assert code == 1
    assert out.startswith("shared.workflow.messages:ApprovalRequest: no such type in this build (renamed or removed)")


def test_a_plain_default_is_compatible_but_asks_for_the_manifest_to_be_regenerated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    allowed = deploy_state_type(monkeypatch, ApprovalRequestWithOptionalApprovers, replaces=messages.ApprovalRequest)
    code, out = check(capsys, allowed)
    assert (
        code == 1
        and out == f"compatible with the previous build, but the manifest is out of date: run '{REGENERATE}'\n"
    )

    # Regenerated (to a copy here), the next check passes.
    copy = tmp_path / "state_schemas.json"
    assert state_schemas.main(["--against", str(copy), "--write"], allowed_types=allowed) == 0
    assert state_schemas.main(["--against", str(copy)], allowed_types=allowed) == 0
    recorded = json.loads(copy.read_text())["schemas"]["shared.workflow.messages:ApprovalRequest"]
    assert recorded["approvers"] == {"type": "list[str] | None", "default": "None"}
    assert MANIFEST.read_text() != copy.read_text()


def test_drain_schemas_compares_with_an_older_builds_manifest_in_ci(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """CI keeps the manifest of the release in production and checks the merge candidate against it."""
    released = tmp_path / "released.json"
    assert drain(["schemas", "--against", str(released), "--write"]) == 0  # written by the released build
    assert drain(["schemas", "--against", str(released)]) == 0

    allowed = deploy_approvers_field(monkeypatch)  # the candidate build
    capsys.readouterr()
    assert drain(["schemas", "--against", str(released)], allowed_types=allowed) == 1
    assert "ApprovalRequest.approvers: added with a default_factory" in capsys.readouterr().out
    assert drain(["schemas", "--against", str(tmp_path / "missing.json")], allowed_types=allowed) == 2
