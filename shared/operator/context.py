"""What every operator command shares: choosing the store, building the services, printing.

Store selection (the same options on every command):

- ``--data DIR`` (default ``.casekeeper/dev``): the local host's SQLite store, ``DIR/casekeeper.sqlite``.
  The store must exist: an operator command never creates one.
- ``--from-settings``: the app's settings (the environment, falling back to ``local.settings.json`` in
  the current directory, as the local host reads them) and whatever store they configure.

What the commands act through comes from the composition root
(:func:`shared.app.bootstrap.build_operations`), so the reconciler's policies (what a finished commit
writes) are the app's own. It has no sender: operator commands never enqueue. Nor do they need the
webhook secret.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from casekeeper.errors import ConfigurationError
from shared.app import bootstrap
from shared.app.operations import Operations
from shared.app.settings import Settings
from shared.views.text import age_text, compact, short, time_text
from shared.workflow.proposers import RulesProposer

__all__ = [
    "DEFAULT_DATA",
    "STORE_FILE",
    "StoreSelectionError",
    "age_text",
    "app_settings_values",
    "common_arguments",
    "compact",
    "error",
    "open_operations",
    "operator_identity",
    "print_json",
    "run_with_operations",
    "settings_for",
    "short",
    "time_text",
]

DEFAULT_DATA = Path(".casekeeper/dev")
STORE_FILE = "casekeeper.sqlite"
"""The local host keeps its store at ``<data>/casekeeper.sqlite`` (``shared.localhost.host``)."""

# With --data, only these are taken from the app's settings: they change what the commands report
# (the call timeout decides whether a started effect is still in flight), and the local host reads them
# from the same places. Everything else is irrelevant to a command that calls nobody.
_TUNING = ("CALL_TIMEOUT_SECONDS", "SUPPLIER_TIMEOUT_SECONDS")


class StoreSelectionError(Exception):
    """The store the options name cannot be opened (absent, or the settings are invalid)."""


def common_arguments() -> argparse.ArgumentParser:
    """A parent parser with the store selection and ``--json``, for every command and subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    where = parent.add_mutually_exclusive_group()
    where.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"the local host's data folder; its store is DIR/{STORE_FILE} (default: {DEFAULT_DATA})",
    )
    where.add_argument(
        "--from-settings",
        action="store_true",
        help="open the store the app's settings configure (environment, then ./local.settings.json)",
    )
    parent.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    return parent


def app_settings_values(app_dir: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The app's settings as the local host reads them: ``local.settings.json`` ``Values``, overridden
    by the environment."""
    values: dict[str, str] = {}
    local = (app_dir or Path.cwd()) / "local.settings.json"
    if local.exists():
        values.update({k: str(v) for k, v in json.loads(local.read_text()).get("Values", {}).items()})
    values.update(os.environ if env is None else env)
    return values


def settings_for(args: argparse.Namespace) -> Settings:
    """The settings the store options select. Raises :class:`StoreSelectionError`."""
    app = app_settings_values()
    if args.from_settings:
        values = app
    else:
        data: Path = args.data if args.data is not None else DEFAULT_DATA
        values = {name: app[name] for name in _TUNING if name in app}
        values.update(
            {
                "CASEKEEPER_STORE": "sqlite",
                "CASEKEEPER_SQLITE_PATH": str(data / STORE_FILE),
                "CASEKEEPER_QUEUE": "local",
                "CASEKEEPER_LOCAL_QUEUE_PATH": str(data / "queue.sqlite"),
            }
        )
    try:
        settings = Settings.from_mapping(values, receives_events=False)
    except ConfigurationError as exc:
        raise StoreSelectionError(str(exc)) from exc
    if settings.store == "sqlite" and not settings.sqlite_path.is_file():
        hint = "pass --data DIR for another local host" if not args.from_settings else "check CASEKEEPER_SQLITE_PATH"
        raise StoreSelectionError(f"no store at {settings.sqlite_path} ({hint})")
    return settings


def open_operations(args: argparse.Namespace) -> Operations:
    """The app's store-side half over the selected store. Close it with ``Operations.close()``.

    Raises :class:`StoreSelectionError`. Nothing here does network I/O (Cosmos DB connects on first use),
    and nothing process-wide changes but one thing: a checkpoint holding a type outside the allow-list,
    met by any command here, raises its alert in this store (``casekeeper.checkpoint_decoding``).
    """
    settings = settings_for(args)
    try:
        # The rules proposer: operator commands propose nothing, and a model client is not built for it.
        return bootstrap.build_operations(settings, proposer=RulesProposer())
    except ConfigurationError as exc:
        raise StoreSelectionError(str(exc)) from exc


def run_with_operations(command: str, args: argparse.Namespace, work: Callable[[Operations], int]) -> int:
    """Open the store ``args`` select, run ``work`` on it, close it. Returns ``work``'s exit status, or 2
    (with the reason on stderr) when the store cannot be opened."""
    try:
        ops = open_operations(args)
    except StoreSelectionError as exc:
        error(command, str(exc))
        return 2
    try:
        return work(ops)
    finally:
        ops.close()


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def error(command: str, message: str) -> None:
    print(f"{command}: {message}", file=sys.stderr)


def operator_identity(given: str) -> str:
    """Who an operator command records as acting: the name typed with ``--by``, for reading, and the
    account that ran the command on this machine, which nobody types: ``Ana <cli:ana@ops-vm>``.

    Every state change a person makes is recorded as an identity, never only as a typed name
    (docs/design.md#who-acts). An operator command reaches the store directly, so whoever runs it could
    write anything; what it can still record truthfully is the operating-system account and host that
    ran it, which is what an audit of the store's access will name too."""
    import getpass
    import socket

    try:
        account = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container): the uid is still an identity
        account = f"uid{os.getuid()}"
    return f"{given.strip()} <cli:{account}@{socket.gethostname()}>"
