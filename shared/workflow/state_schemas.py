"""The invoice workflow's state schema manifest and its check (rule R8).

What a schema is, and which changes of a checkpointed type a checkpoint survives, is
:mod:`casekeeper.state_schemas`.
:data:`MANIFEST` is the committed record of the schemas as the last release wrote them (like a lock file);
``tests/unit/test_state_schema_manifest.py`` fails when the code's schemas are incompatible with it, naming
the fix, and asks for it to be regenerated (``python -m shared.workflow.state_schemas --write``) when they
differ compatibly. A run that cannot be resumed is rebuilt from the case document; ``casekeeper drain
check`` lists those runs before a deploy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from casekeeper.state_schemas import Schemas, current, incompatibilities

MANIFEST: Final = Path(__file__).with_name("state_schemas.json")
REGENERATE: Final = "python -m shared.workflow.state_schemas --write"
FIXES: Final = (
    "give a new field a plain default (e.g. '= None', a class attribute an old object reads), put the new "
    "shape under a new type name (keep the old type until no checkpoint holds it), or drain: let "
    "'casekeeper drain check' reach 0 before the deploy (or accept that the runs it lists are rebuilt from "
    f"the case document) and record the change with '{REGENERATE}'"
)

__all__ = ["FIXES", "MANIFEST", "REGENERATE", "build_schemas", "main", "manifest_text", "read_manifest"]


def read_manifest(path: Path = MANIFEST) -> Schemas:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("schemas"), dict):
        raise ValueError(f"{path} is not a state schema manifest (no 'schemas' object)")
    schemas: Schemas = data["schemas"]
    return schemas


def manifest_text(schemas: Schemas) -> str:
    about = (
        "The state schemas of every checkpointed type as the last release wrote them; "
        f"compared with the code by tests/unit/test_state_schema_manifest.py. Regenerate: {REGENERATE}"
    )
    return json.dumps({"about": about, "schemas": schemas}, indent=2, sort_keys=True) + "\n"


def build_schemas(allowed_types: Iterable[str] | None = None) -> Schemas:
    """The running build's schemas of every type on its checkpoint allow-list (``allowed_types``, by
    default ``shared.workflow.messages.ALLOWED_CHECKPOINT_TYPES``)."""
    if allowed_types is None:
        from shared.workflow.messages import ALLOWED_CHECKPOINT_TYPES  # the build's list, read when asked

        allowed_types = ALLOWED_CHECKPOINT_TYPES
    return current(allowed_types)


def main(argv: list[str] | None = None, *, allowed_types: frozenset[str] | None = None) -> int:
    """Compare this build's state schemas with a manifest: exit 0 when equal, 1 when incompatible (naming
    the fix) or compatible but different (the manifest must be regenerated), 2 when it cannot be read. With
    ``--write``, write the manifest. ``allowed_types`` stands for the build's allow-list (tests pass a
    changed one)."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.workflow.state_schemas",
        description="Check the checkpointed state types against the schemas a previous build wrote (rule R8).",
    )
    parser.add_argument("--against", type=Path, default=MANIFEST, help="the previous build's manifest")
    parser.add_argument("--write", action="store_true", help="write this build's schemas to --against")
    args = parser.parse_args(argv)
    schemas = build_schemas(allowed_types)
    if args.write:
        args.against.write_text(manifest_text(schemas))
        print(f"wrote {len(schemas)} type schemas to {args.against}")
        return 0
    try:
        previous = read_manifest(args.against)
    except (OSError, ValueError) as exc:
        print(f"cannot read {args.against}: {exc}", file=sys.stderr)
        return 2
    problems = incompatibilities(previous, schemas)
    for problem in problems:
        print(problem.text())
    if problems:
        print(f"checkpoints written by the previous build could not be resumed. Fix: {FIXES}")
        return 1
    if previous != schemas:
        print(f"compatible with the previous build, but the manifest is out of date: run '{REGENERATE}'")
        return 1
    print(f"{len(schemas)} checkpointed types, unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
