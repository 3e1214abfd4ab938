"""casekeeper sim-hunt: which seed first finds each failure of issue 32, and how fast (the table in docs/simulator.md).

For each failure: seeds from 0 on are run judging only the invariants that failure breaks; each seed that
breaks one is shrunk, and the shrunk steps are matched against the failure's signature (what a person reading
the steps would call that failure), so that a seed finding another failure first is not counted for it.
Prints one row per failure: the invariant that caught it, the seed, the steps it took, the seconds of search
(seeds run until that one, shrinking excluded), and the shrunk steps.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from casekeeper.check import Step
from sim.runner import Plan, Sim, make_plan, replay, shrink


def _case_steps(plan: Plan, case: int) -> list[tuple[int, Step]]:
    return [(i, s) for i, s in enumerate(plan.steps) if s.args and s.name in FACT_STEPS and s.args[0] == case]


def _invoice_at(plan: Plan, case: int) -> int:
    """Where the case's invoice is sent: its step, or the first quiescent point (senders send what is missing)."""
    steps = _case_steps(plan, case)
    sent = [i for i, s in steps if s.name == "invoice"] + [i for i, s in enumerate(plan.steps) if s.name == "settle"]
    return min(sent, default=len(plan.steps))


FACT_STEPS = ("invoice", "po", "late_po", "ext_credit", "credit_for_request", "investigate")
DELAYS = ("hold", "release", "outage", "crash", "pause", "time", "reuse", "copy", "resend")


def _violated_case(detail: str) -> int:
    marker = detail.split("case SIM", 1)[-1]
    return int(marker.split("-C", 1)[1].split(":", 1)[0].split(" ", 1)[0]) - 1


def fact_before_case(plan: Plan, detail: str) -> bool:
    """A fact of the case was sent before its invoice (or the invoice came only at a quiescent point), or the
    invoice was held back (the network, a store outage) and a fact sent after it."""
    case = _violated_case(detail)
    invoice = _invoice_at(plan, case)
    facts = [i for i, s in _case_steps(plan, case) if s.name in ("po", "ext_credit", "late_po")]
    delayed = any(s.name in ("hold", "outage") for s in plan.steps[:invoice])
    return any(i < invoice for i in facts) or (delayed and any(i > invoice for i in facts))


def skewed_clocks(plan: Plan, detail: str) -> bool:
    """Undated PO edits on instances with different clocks, after the invoice, nothing delayed."""
    case = _violated_case(detail)
    if plan.shape.senders[case][0] != "undated" or len(set(plan.shape.offsets)) < 2:
        return False
    if fact_before_case(plan, detail) or any(s.name in DELAYS for s in plan.steps):
        return False
    offsets = plan.shape.offsets
    instances = {offsets[s.args[-1] % len(offsets)] for _, s in _case_steps(plan, case) if s.name in ("po", "invoice")}
    return len(instances) >= 2


def two_clocks(plan: Plan, detail: str) -> bool:
    case = _violated_case(detail)
    return plan.shape.senders[case][0] == "undated" and len(set(plan.shape.offsets)) >= 2


def late_success_after_failed(plan: Plan, detail: str) -> bool:
    """A call stalled past the call timeout while an operator resolved its effect."""
    return any(s.name == "supplier_fault" and s.args[0] == "stall" and "resolve" in s.args[1] for s in plan.steps)


def over_ask_after_request(plan: Plan, detail: str) -> bool:
    """A fact that lowers what is owed arrives after a request, the invoice having come first."""
    if fact_before_case(plan, detail) or late_success_after_failed(plan, detail):
        return False
    case = _violated_case(detail)
    invoice = _invoice_at(plan, case)
    return any(s.name in ("po", "ext_credit", "late_po") and i > invoice for i, s in _case_steps(plan, case))


def split_proposals(plan: Plan, detail: str) -> bool:
    """The threshold crossed by several requests (the model's split, or a fact change between them)."""
    return True


def model_split(plan: Plan, detail: str) -> bool:
    """The scripted model split a proposal just under the threshold (its request's reason says so)."""
    return "(model: split)" in detail


def scripted(plan: Plan, detail: str) -> bool:
    return plan.shape.scripted_model


def reuse_after_retention(plan: Plan, detail: str) -> bool:
    """A delivery id re-used with another body after a jump past the door's record retention (90 days)."""
    jumped = [i for i, s in enumerate(plan.steps) if s.name == "time" and s.args[0] >= 90 * 86400]
    return bool(jumped) and any(s.name == "reuse" and i > jumped[0] for i, s in enumerate(plan.steps))


def any_step(plan: Plan, detail: str) -> bool:
    return True


@dataclass(frozen=True)
class Failure:
    name: str
    invariants: tuple[str, ...]
    signature: Callable[[Plan, str], bool]
    hint: Callable[[Plan, str], bool] = lambda plan, detail: True
    """What the steps run must hold for the shrunk ones to match (checked before shrinking, which costs)."""


FAILURES = (
    Failure("1 a fact before its case", ("facts", "money", "deliveries"), fact_before_case),
    Failure("2 order from the ingress host's clock", ("facts",), skewed_clocks, two_clocks),
    Failure(
        "3 late success after resolve --failed", ("outcomes",), late_success_after_failed, late_success_after_failed
    ),
    Failure("4 over-ask without an alert", ("money",), over_ask_after_request),
    Failure("5 approval threshold split", ("threshold",), split_proposals),
    Failure("5 (by the model's proposals)", ("threshold",), model_split, scripted),
    Failure("6 delivery id re-used after retention", ("deliveries",), reuse_after_retention, reuse_after_retention),
    Failure("7 the door hangs on the store", ("door",), any_step),
    Failure("8 no bound on a case's size", ("case_size",), any_step),
)


@dataclass
class Found:
    failure: Failure
    seed: int
    invariant: str
    steps: int
    seconds: float
    plan: Plan


def hunt(failure: Failure, *, steps: int, budget: float, shrink_seconds: float) -> Found | None:
    searched = 0.0
    seed = 0
    while searched < budget:
        started = time.monotonic()
        outcome = Sim(make_plan(seed, steps), failure.invariants).run()
        searched += time.monotonic() - started
        prefix = Plan(outcome.plan.seed, outcome.plan.shape, outcome.plan.steps[: outcome.at_step])
        # The signature holds for the shrunk steps only if it holds for the steps run (a cheap filter first).
        if outcome.violations and failure.hint(prefix, outcome.violations[0].detail):
            small = shrink(outcome, seconds=shrink_seconds, invariants=failure.invariants)
            # The shrunk steps may break the invariant on another case: judge them by their own violations.
            shown = replay(small, failure.invariants).violations if small is not outcome.plan else outcome.violations
            if any(v.invariant in failure.invariants and failure.signature(small, v.detail) for v in shown):
                return Found(failure, seed, outcome.violations[0].invariant, outcome.at_step, searched, small)
        seed += 1
    return None


def main(argv: list[str] | None = None) -> int:
    """Find, seed by seed, each failure of issue 32 (the simulator's table in docs/simulator.md)."""
    parser = argparse.ArgumentParser(prog="casekeeper sim-hunt", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of search per failure (default 300)")
    parser.add_argument("--shrink-seconds", type=float, default=10.0)
    parser.add_argument("--only", help="failure numbers, comma-separated")
    parser.add_argument("--app-dir", type=Path, default=Path.cwd(), help="where function_app.py is (default: here)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.app_dir.resolve()))
    logging.disable(logging.CRITICAL)
    wanted = {n.strip() for n in args.only.split(",")} if args.only else None
    missing = 0
    print("| failure | invariant | seed | steps | seconds |")
    print("|---|---|---|---|---|")
    details = []
    for failure in FAILURES:
        if wanted and failure.name.split()[0] not in wanted:
            continue
        found = hunt(failure, steps=args.steps, budget=args.budget, shrink_seconds=args.shrink_seconds)
        if found is None:
            missing += 1
            print(
                f"| {failure.name} | {'/'.join(failure.invariants)} | not found in {args.budget:g}s | | |", flush=True
            )
            continue
        print(
            f"| {failure.name} | {found.invariant} | {found.seed} | {found.steps} | {found.seconds:.1f} |", flush=True
        )
        details.append(f"{failure.name} (seed {found.seed}, shrunk):\n" + "\n".join(f"  {s}" for s in found.plan.steps))
    print("\n" + "\n\n".join(details))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
