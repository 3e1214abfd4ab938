"""The ``casekeeper`` command.

Each subcommand is a thin wrapper over a module with its own ``main(argv) -> int``, so that each can
be run and tested on its own (``python -m shared.localhost.demo``,
``python -m shared.localhost.supplier_stub``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

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
    lines = ["usage: casekeeper COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (help_, _) in COMMANDS.items()]
    lines += ["", "Run 'casekeeper COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"casekeeper: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return command[1](args[1:])


if __name__ == "__main__":
    sys.exit(main())
