"""Lint the Bicep under infra/ with checkov, offline, and hold its findings at zero.

No Bicep compiler installs here, so this is the static check of the templates against a maintained rule
set (checkov parses Bicep itself). It passes only when checkov reports no failed check, no file it could
not parse and no check that crashed, and when every deliberate exception is a
``// checkov:skip=CKV_ID: reason`` comment inside the resource it concerns, with a reason a reviewer can
judge. Run by ``make lint`` (so by ``make test``) with checkov from its own virtual environment
(``.venv-checkov``: its pins conflict with pytest's). ``--skip-download`` and ``BC_SKIP_MAPPING`` keep it
from calling its vendor's API.

Usage: python scripts/lint_infra.py [--checkov PATH] [DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
MIN_REASON = 20
"""A reason shorter than this ("n/a", "not needed") says nothing a reviewer can judge."""
CRASH = re.compile(r"Failed to run check (?P<check>[A-Z0-9_]+) on \S+?:(?P<resource>\S+)\s*$")
"""How checkov logs a check that raised (it then reports no result for it)."""


def run_checkov(checkov: Path, directory: Path) -> tuple[dict[str, Any], str]:
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE"}
    done = subprocess.run(
        [str(checkov), "-d", str(directory), "--framework", "bicep", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    if not done.stdout.strip():
        raise SystemExit(f"checkov printed nothing (exit {done.returncode}):\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if isinstance(report, list):  # one entry per framework; only bicep is asked for
        [report] = [r for r in report if r.get("check_type") == "bicep"]
    return report, done.stderr


def problems(report: dict[str, Any], stderr: str) -> list[str]:
    """Every reason this lint fails, one line each; empty when the templates pass."""
    found: list[str] = []
    results = report.get("results", {})
    for check in results.get("failed_checks", []):
        lines = check.get("file_line_range") or ["?", "?"]
        found.append(
            f"{check['check_id']} {check['check_name']!r} failed for {check['resource']} "
            f"({check['file_path'].lstrip('/')}:{lines[0]}-{lines[1]})"
        )
    for path in results.get("parsing_errors", []):
        found.append(f"checkov could not parse {path}: a check that cannot read a file cannot pass it")
    for check in results.get("skipped_checks", []):
        reason = (check.get("check_result", {}).get("suppress_comment") or "").strip()
        if len(reason) < MIN_REASON or reason == "No comment provided":
            found.append(f"{check['check_id']} skipped for {check['resource']} without a reason: {reason!r}")
    # checkov still runs a check that a comment skips; a crash of such a check on that resource is moot.
    skipped = {(c["check_id"], c["resource"]) for c in results.get("skipped_checks", [])}
    for line in stderr.splitlines():
        crash = CRASH.search(line)
        if crash and (crash["check"], crash["resource"]) not in skipped:
            found.append(f"{crash['check']} crashed on {crash['resource']}: skip it in that resource, with the reason")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkov", type=Path, default=DEFAULT_CHECKOV)
    parser.add_argument("directory", type=Path, nargs="?", default=ROOT / "infra")
    args = parser.parse_args(argv)
    if not args.checkov.exists():
        print(f"lint_infra: {args.checkov} is missing; `make lint` installs it", file=sys.stderr)
        return 2
    report, stderr = run_checkov(args.checkov, args.directory)
    summary = report.get("summary", {})
    skipped = report.get("results", {}).get("skipped_checks", [])
    found = problems(report, stderr)
    print(
        f"checkov {summary.get('checkov_version', '?')} on {args.directory.name}/: {summary.get('passed', 0)} passed, "
        f"{summary.get('failed', 0)} failed, {len(skipped)} skipped on purpose, "
        f"{summary.get('parsing_errors', 0)} parsing errors"
    )
    for line in found:
        print(f"  {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
