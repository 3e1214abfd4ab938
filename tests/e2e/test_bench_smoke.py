"""``make bench``'s end-to-end section, tiny, so that it cannot rot: it runs, every case it sends completes
with exactly one credit-note request, and it reports store operations per container.

DBOS is not in the test requirements (only ``make bench`` installs requirements-bench.txt), so the
comparison is skipped here; the numbers are not checked, only that they exist and mean what they say.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import store_paths
from benchmarks.e2e import PATH_EVENTS
from casekeeper.core.ports import CONTAINERS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_end_to_end_bench_runs_small_and_every_case_reaches_the_supplier_once(tmp_path: Path) -> None:
    report, keep = tmp_path / "report.json", tmp_path / "work"
    command = [sys.executable, "-m", "benchmarks.e2e", "--n", "10", "--rounds", "1", "--warmup", "2"]
    command += ["--rate", "10", "--seconds", "1", "--ops-events", "3", "--skip-dbos", "--backends", "sqlite"]
    command += ["--report", str(report), "--keep", str(keep)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["failures"] == []

    [round_] = result["throughput"]["rounds"]
    assert (round_["system"], round_["n"], round_["problems"]) == ("casekeeper", 10, [])
    assert round_["casesPerS"] > 0 and round_["cpuMsPerCase"] > 0
    assert result["throughput"]["ratio"] is None  # no DBOS, no ratio
    latency = result["latency"]
    assert latency["cases"] == latency["completed"] == 10 and latency["problems"] == []
    assert latency["toSupplierP50Ms"] > 0 and latency["acceptP99Ms"] > 0

    [ops] = result["storeOps"]
    assert ops["backend"] == "sqlite" and ops["events"] == 3 and ops["problems"] == []
    assert set(CONTAINERS) <= set(ops["byContainer"])
    # The effect's claim and outcome are writes of the case (no effects-container operation on this path).
    assert ops["byContainer"]["cases"] > 0 and ops["byContainer"]["effects"] == 0
    assert ops["opsPerEvent"] == pytest.approx(sum(ops["byContainer"].values()))
    assert ops["opsPerEvent"] == pytest.approx(sum(ops["byPhase"].values()))
    assert ops["byPhase"]["case_worker"] > 0

    # From the supplier's own log, not the bench's bookkeeping: one request per case, and every case
    # the bench measured is there (10 + 2 warm-up, 10 paced + 4 warm-up, 3 + 2 warm-up for the counts, and
    # for section 3b's per-path counts each path's cases, 2 warm-up + PATH_EVENTS, times the requests a case
    # of that path makes).
    posts = [
        json.loads(line)
        for line in (keep / "supplier.jsonl").read_text().splitlines()
        if line.strip() and json.loads(line)["method"] == "POST"
    ]
    per_case = Counter(p["body"]["caseId"] for p in posts)
    assert set(per_case.values()) == {1}, [c for c, k in per_case.items() if k != 1]
    path_cases = sum(spec.posts for spec in store_paths.PATHS) * (2 + PATH_EVENTS)
    assert path_cases > 0 and len(result["storeOpsByPath"]["sqlite"]) == len(store_paths.PATHS)
    assert len(per_case) == 12 + 14 + 5 + path_cases
    assert {p["status"] for p in posts} == {201}

    printed = run.stdout
    for heading in ("1. Throughput", "2. Latency under steady load", "3. Store operations per case event", "Goals"):
        assert heading in printed
    for container in CONTAINERS:  # one row per container, with its count per event
        assert re.search(rf"^\| sqlite +\| {container} +\| +[0-9.]+ \|", printed, flags=re.M), container


def test_the_bench_counts_a_case_as_failed_unless_it_committed_with_exactly_one_request() -> None:
    from benchmarks.e2e import _case_problems

    view = {
        "case": {"status": "credit_requested"},
        "effects": [{"key": "k1", "status": "done"}],
        "history": [{"status": "credit_requested", "effectKey": "k1", "at": 1.0}],
    }
    post = {"status": 201, "body": {"caseId": "C-1", "amount": "100.00"}, "idempotencyKey": "k1"}
    assert _case_problems("C-1", view, [post]) == []
    assert _case_problems("C-1", view, [post, post])  # asked twice
    assert _case_problems("C-1", view, [])  # never asked
    assert _case_problems("C-1", None, [post])  # no case
    assert _case_problems("C-1", {**view, "case": {"status": "open"}}, [post])  # not committed
    assert _case_problems("C-1", view, [{**post, "idempotencyKey": "other"}])  # not the effect's request
