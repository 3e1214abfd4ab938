"""The ``casekeeper`` command.

Each subcommand is a thin wrapper over a module with its own ``main(argv) -> int``, so that each can
be run and tested on its own (``python -m shared.localhost.demo``,
``python -m shared.localhost.supplier_stub``).

No traceback reaches a person: :func:`main` turns whatever a command raises into one line on stderr.
Exit status 2 is bad input (an id no store accepts, an unknown case, invalid settings, a wrong option),
1 a failure of something else (a store, the network), 130 Ctrl-C. Output cut short by a closed pipe
(``casekeeper case show X | head -2``) ends the command quietly. ``CASEKEEPER_DEBUG=1`` shows the
traceback of an unexpected error, for a bug report.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from casekeeper.errors import CasekeeperError, ConfigurationError, InvalidDocumentId
from casekeeper.errors import RecordNotFound as CaseNotFound
from shared.errors import InvalidEvent

Command = tuple[str, Callable[[list[str]], int]]


def _demo(argv: list[str]) -> int:
    from shared.localhost.demo import main

    return main(argv)


def _supplier_stub(argv: list[str]) -> int:
    from shared.localhost.supplier_stub import main

    return main(argv)


def _model_stub(argv: list[str]) -> int:
    from shared.localhost.model_stub import main

    return main(argv)


def _dev(argv: list[str]) -> int:
    from shared.localhost.host import main

    return main(argv)


def _send(argv: list[str]) -> int:
    from shared.localhost.send import main

    return main(argv)


def _chaos(argv: list[str]) -> int:
    from shared.chaos.run import main

    return main(argv)


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
    "dev": ("serve the function app locally on SQLite (HTTP, session queue, change feed, timers)", _dev),
    "send": ("sign and post an event to the ingress", _send),
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
    "demo": ("drive the failure modes against a local supplier and print what the supplier saw", _demo),
    "supplier-stub": ("serve the supplier portal API locally, logging every request", _supplier_stub),
    "model-stub": ("serve a scriptable stand-in for an Azure OpenAI chat deployment locally", _model_stub),
    "chaos": ("drive events through faults and kill -9, then check the invariants from outside", _chaos),
}


def usage() -> str:
    lines = ["usage: casekeeper COMMAND [ARGS...]   (casekeeper --version)", "", "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (help_, _) in COMMANDS.items()]
    lines += ["", "Run 'casekeeper COMMAND --help' for a command's options."]
    return "\n".join(lines)


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
    if command is None:
        print(f"casekeeper: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return command[1](args[1:])


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
    name = "casekeeper" + (f" {args[0]}" if args and args[0] in COMMANDS else "")
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
