"""The ``casekeeper`` command.

Each subcommand is a thin wrapper over a module with its own ``main(argv) -> int``, so that each can
be run and tested on its own (``python -m shared.operator.init_store``, ``python -m devhost.supplier_stub``).

Two kinds of subcommand. The app's own (the operator commands, ``local-settings``) are listed in
:data:`COMMANDS`. The dev tools (``dev``, ``demo``, ``chaos``, the stubs, ``send``) live in packages that
are not part of the deployed app (``devhost``, ``chaos``) and that this module never imports: they are
entry points of the group :data:`DEV_COMMANDS_GROUP`, declared by the distribution that ships them
(pyproject.toml, ``[project.entry-points."casekeeper.commands"]``). An entry point is loaded only when its
command runs; its one-line help, for the usage, is the first line of its target's docstring, read from the
source without importing it. Where no distribution declares them (the deployed app) or the package they
name is missing, the command says so in one line.

No traceback reaches a person: :func:`main` turns whatever a command raises into one line on stderr.
Exit status 2 is bad input (an id no store accepts, an unknown case, invalid settings, a wrong option),
1 a failure of something else (a store, the network, a dev tool that is not installed), 130 Ctrl-C. Output
cut short by a closed pipe (``casekeeper case show X | head -2``) ends the command quietly.
``CASEKEEPER_DEBUG=1`` shows the traceback of an unexpected error, for a bug report.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from importlib.machinery import ModuleSpec, PathFinder
from importlib.util import find_spec

from casekeeper.errors import CasekeeperError, CaseNotFound, ConfigurationError, InvalidDocumentId
from shared.errors import InvalidEvent

Command = tuple[str, Callable[[list[str]], int]]

DEV_COMMANDS_GROUP = "casekeeper.commands"
"""The entry-point group of the dev tools' commands: name -> ``package.module:main``."""

NOT_INSTALLED = "the dev tools (devhost, chaos, sim) are not installed here: they come with a checkout (make setup)"


def _local_settings(argv: list[str]) -> int:
    from shared.app.local_settings import main

    return main(argv)


def _operator(module: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        import importlib

        main: Callable[[list[str]], int] = importlib.import_module(f"shared.operator.{module}").main
        return main(argv)

    return run


COMMANDS: dict[str, Command] = {
    "case": ("case show ID: the case, its versions, effects, approvals and checkpoints", _operator("cases")),
    "effects": ("effects pending | effects resolve KEY: what is stuck, and settling it", _operator("effects")),
    "requests": (
        "requests withdraw CASE KEY: take an outstanding credit-note request off the books",
        _operator("requests"),
    ),
    "events": ("events dead-lettered | events redrive: events the queue gave up on", _operator("events")),
    "drain": ("drain check: in-flight runs this build could not resume (exit 1 if any)", _operator("drain")),
    "alerts": ("recent alerts", _operator("alerts")),
    "init-store": (
        "create the Cosmos DB database and containers the settings name (the emulator)",
        _operator("init_store"),
    ),
    "local-settings": (
        "local-settings emulators | azd: write local.settings.json for func start",
        _local_settings,
    ),
}
"""The app's own commands: name -> (one-line help, run)."""


def dev_commands() -> dict[str, metadata.EntryPoint]:
    """The installed dev tools' commands (entry points of :data:`DEV_COMMANDS_GROUP`), by name, not loaded.
    A name the app's own :data:`COMMANDS` already has stays the app's."""
    found = metadata.entry_points(group=DEV_COMMANDS_GROUP)
    return {ep.name: ep for ep in sorted(found, key=lambda ep: ep.name) if ep.name not in COMMANDS}


def summary(entry: metadata.EntryPoint) -> str:
    """The first line of the entry point's target's docstring, as a usage line ("Serve ..." -> "serve ..."),
    read from its source file without importing the module or its packages; empty when there is none."""
    spec = _spec_unimported(entry.module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return ""
    try:
        with open(spec.origin, encoding="utf-8") as source:
            tree = ast.parse(source.read(), filename=spec.origin)
    except (OSError, SyntaxError, ValueError):
        return ""
    name = entry.attr.split(".", maxsplit=1)[0]
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    doc = ast.get_docstring(node) if node is not None else None
    line = doc.strip().splitlines()[0].rstrip(".") if doc and doc.strip() else ""
    return line[:1].lower() + line[1:]


def _spec_unimported(module: str) -> ModuleSpec | None:
    """``module``'s spec, found level by level on its packages' search paths: no package is imported
    (``importlib.util.find_spec`` imports the parents of a dotted name)."""
    top, *rest = module.split(".")
    try:
        spec = find_spec(top)  # a top-level name: asks the finders, imports nothing
    except (ImportError, ValueError):
        return None
    name = top
    for part in rest:
        locations = spec.submodule_search_locations if spec is not None else None
        if not locations:
            return None
        name = f"{name}.{part}"
        spec = PathFinder.find_spec(name, list(locations))
    return spec


def usage() -> str:
    lines = ["usage: casekeeper COMMAND [ARGS...]   (casekeeper --version)", "", "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (help_, _) in COMMANDS.items()]
    dev = dev_commands()
    lines += ["", "dev commands (the local host and its tools, never part of the deployed app):"]
    lines += [f"  {name:<16} {summary(entry)}".rstrip() for name, entry in dev.items()] or [f"  none: {NOT_INSTALLED}"]
    lines += ["", "Run 'casekeeper COMMAND --help' for a command's options."]
    return "\n".join(lines)


def _run_dev(name: str, entry: metadata.EntryPoint, argv: list[str]) -> int:
    """Load the dev command's entry point (only now) and run it; its package missing is one line, exit 1."""
    try:
        main: Callable[[list[str]], int] = entry.load()
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not missing or not (entry.module == missing or entry.module.startswith(f"{missing}.")):
            raise  # a module the command itself needs: main() reports it as an error of the command
        print(f"casekeeper {name}: {NOT_INSTALLED}; no module {missing!r}", file=sys.stderr)
        return 1
    return main(argv)


BAD_INPUT = (InvalidDocumentId, CaseNotFound, InvalidEvent, ConfigurationError)
"""Errors that mean the person asked for something impossible: exit status 2, as for a wrong option."""


def version() -> str:
    try:
        return metadata.version("casekeeper-app")
    except metadata.PackageNotFoundError:  # run from a checkout without ``pip install -e .``
        return "unknown (not installed)"


def _dispatch(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version", "version"):
        print(f"casekeeper {version()}")
        return 0
    command = COMMANDS.get(args[0])
    if command is not None:
        return command[1](args[1:])
    dev = dev_commands()
    if args[0] in dev:
        return _run_dev(args[0], dev[args[0]], args[1:])
    hint = "" if dev else f"; {NOT_INSTALLED}"
    print(f"casekeeper: unknown command {args[0]!r}{hint}\n\n{usage()}", file=sys.stderr)
    return 2


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null, so that flushing it at exit raises nothing more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (tests capture it): nothing to flush there
        pass
    finally:
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    known = bool(args) and (args[0] in COMMANDS or args[0] in dev_commands())
    name = "casekeeper" + (f" {args[0]}" if known else "")
    try:
        status = _dispatch(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's own flush at exit
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BAD_INPUT as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except CasekeeperError as exc:
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if os.environ.get("CASEKEEPER_DEBUG"):
            raise
        print(
            f"{name}: unexpected error: {type(exc).__name__}: {exc} (CASEKEEPER_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
