"""casekeeper sim: the seeded simulator; seeds from --seed on, until a violation or the budget ends.

``casekeeper sim --seed 0 --seconds 60`` runs seeds 0, 1, 2, ... for a minute, each a plan of ``--steps``
steps in a fresh world, and stops at the first seed that breaks an invariant: it prints the seed, the
world's shape, the steps (shrunk to those that still break it) and the violations, and exits 1.
``--seeds N`` runs N seeds instead of a time budget. ``--invariants money,facts`` judges only those.
``--expect-violation NAME`` exits 0 only when the seed breaks that invariant (to show a finding by seed);
``--save FILE`` writes the shrunk plan, ``--replay FILE`` runs a saved plan again.

``casekeeper sim --workflow module:factory`` checks a user's own guarded workflow instead, the same way
(:mod:`casekeeper.check`, which the guard ships: ``python -m casekeeper.check`` for a user who installed only
the guard); the options after it are that checker's.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from casekeeper.check import Step
from sim.checks import INVARIANTS
from sim.runner import Outcome, Plan, Shape, replay, search, shrink


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="casekeeper sim", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, default=40, help="steps per seed (default 40)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, help="run seeds for this long (default 60 unless --seeds)")
    budget.add_argument("--seeds", type=int, help="run this many seeds")
    parser.add_argument(
        "--invariants",
        default=",".join(INVARIANTS),
        help=f"which to judge, comma-separated (default all: {','.join(INVARIANTS)})",
    )
    parser.add_argument("--expect-violation", metavar="NAME", choices=INVARIANTS, help="exit 0 only if NAME breaks")
    parser.add_argument("--no-shrink", action="store_true", help="print the failing plan as it ran")
    parser.add_argument("--shrink-seconds", type=float, default=60.0, help="budget for shrinking (default 60)")
    parser.add_argument("--save", metavar="FILE", help="write the (shrunk) failing plan as JSON")
    parser.add_argument("--replay", metavar="FILE", help="run a plan written by --save")
    parser.add_argument("--verbose", action="store_true", help="show the app's log lines")
    parser.add_argument("--app-dir", type=Path, default=Path.cwd(), help="where function_app.py is (default: here)")
    parser.add_argument(
        "--workflow",
        metavar="MODULE:FACTORY",
        help="check your own guarded workflow instead (casekeeper.check; its options: python -m casekeeper.check -h)",
    )
    return parser


def check_workflow(argv: list[str]) -> int | None:
    """``--workflow module:factory``: the user's workflow, checked by :mod:`casekeeper.check` with the other
    options (``--app-dir`` puts the factory's folder on the path); ``None`` without ``--workflow``."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--workflow")
    pre.add_argument("--app-dir", type=Path, default=Path.cwd())
    known, rest = pre.parse_known_args(argv)
    if known.workflow is None:
        return None
    from casekeeper.check import main as check_main

    sys.path.insert(0, str(known.app_dir.resolve()))
    return check_main([known.workflow, *rest], prog="casekeeper sim --workflow")


def main(argv: list[str] | None = None) -> int:
    """Run the seeded simulator: seeds in a simulated world until an invariant breaks or the budget ends."""
    checked = check_workflow(list(sys.argv[1:] if argv is None else argv))
    if checked is not None:
        return checked
    args = build_parser().parse_args(argv)
    sys.path.insert(0, str(args.app_dir.resolve()))
    if args.verbose:
        logging.basicConfig(level=logging.INFO)
    else:
        logging.disable(logging.CRITICAL)
    invariants = tuple(name.strip() for name in args.invariants.split(",") if name.strip())
    unknown = sorted(set(invariants) - set(INVARIANTS))
    if unknown:
        print(f"unknown invariants: {', '.join(unknown)} (known: {', '.join(INVARIANTS)})", file=sys.stderr)
        return 2
    started = time.monotonic()
    if args.replay:
        with open(args.replay, encoding="utf-8") as file:
            plan = plan_from_json(json.load(file))
        outcome = replay(plan, invariants)
        print(describe(outcome, outcome.plan, time.monotonic() - started, args.steps))
        return _exit(outcome, args.expect_violation)
    seconds = args.seconds if args.seconds is not None or args.seeds is not None else 60.0
    found = search(args.seed, steps=args.steps, seconds=seconds, seeds=args.seeds, invariants=invariants)
    elapsed = time.monotonic() - started
    failing = found.failing
    if failing is None:
        print(
            f"no violation: {len(found.outcomes)} seeds ({args.seed}..{args.seed + len(found.outcomes) - 1}) of "
            f"{args.steps} steps in {elapsed:.1f}s; invariants judged: {', '.join(invariants)}"
        )
        return 1 if args.expect_violation else 0
    plan = failing.plan
    if not args.no_shrink:
        plan = shrink(failing, seconds=args.shrink_seconds, invariants=invariants)
    shown = replay(plan, invariants) if plan is not failing.plan else failing
    if not shown.violations:  # shrinking is judged on the first violation's invariant alone
        plan, shown = failing.plan, failing
    print(describe(failing, plan, elapsed, args.steps, shown))
    if args.save:
        with open(args.save, "w", encoding="utf-8") as file:
            json.dump(plan_to_json(plan), file, indent=1)
    return _exit(failing, args.expect_violation)


def _exit(outcome: Outcome, expected: str | None) -> int:
    broken = {v.invariant for v in outcome.violations}
    if expected:
        return 0 if expected in broken else 1
    return 1 if broken else 0


def describe(outcome: Outcome, plan: Plan, elapsed: float, steps: int, shown: Outcome | None = None) -> str:
    """The finding as a person reads it: the seed and how to reproduce it, the world, the (shrunk) steps,
    and the violations the shown plan (``shown``: the shrunk plan's run) breaks."""
    shown = shown or outcome
    shrunk = ", shrunk" if len(plan.steps) < outcome.at_step else ""
    if not outcome.violations:
        return f"seed {outcome.plan.seed}: no violation in {len(outcome.plan.steps)} steps"
    lines = [
        f"seed {outcome.plan.seed}: {outcome.violations[0].invariant} broken at step {outcome.at_step} "
        f"(found in {elapsed:.1f}s); reproduce: casekeeper sim --seed {outcome.plan.seed} --seeds 1 --steps {steps}",
        f"world: {plan.shape}",
        f"steps ({len(plan.steps)} of {len(outcome.plan.steps)}{shrunk}; a quiescent point follows the last):",
        *(f"  {i + 1:>3}. {step}" for i, step in enumerate(plan.steps)),
        "violations:",
        *(f"  {v}" for v in shown.violations),
    ]
    return "\n".join(lines)


def plan_to_json(plan: Plan) -> dict[str, object]:
    return {
        "seed": plan.seed,
        "shape": {
            "offsets": list(plan.shape.offsets),
            "senders": [list(s) for s in plan.shape.senders],
            "scriptedModel": plan.shape.scripted_model,
        },
        "steps": [[step.name, list(step.args)] for step in plan.steps],
    }


def plan_from_json(raw: dict[str, object]) -> Plan:
    shape = raw["shape"]
    assert isinstance(shape, dict)
    steps = raw["steps"]
    assert isinstance(steps, list)
    return Plan(
        int(str(raw["seed"])),
        Shape(
            tuple(float(o) for o in shape["offsets"]),
            tuple((str(mode), float(ahead)) for mode, ahead in shape["senders"]),
            bool(shape["scriptedModel"]),
        ),
        tuple(Step(str(name), tuple(_tuple(a) for a in args)) for name, args in steps),
    )


def _tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


if __name__ == "__main__":
    sys.exit(main())
