"""The Functions Python worker's own indexing check (``azure-functions-runtime``, Python 3.13).

``make setup`` builds ``.venv313`` when a Python 3.13 interpreter is present. The check is what the
worker does when the host loads the app: it rejects, for instance, a parameter whose name does not
match its binding, which the decorators alone accept.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.index_with_worker import WORKER_PYTHON

ROOT = Path(__file__).resolve().parents[2]
PY313 = Path(os.environ.get("CASEKEEPER_PY313", ROOT / ".venv313" / "bin" / "python"))

if os.environ.get("CI") and not PY313.exists():
    # CI machines carry Python 3.13 (pyenv) and make setup builds .venv313: a skip there would hide a gap.
    raise RuntimeError(f"CI: {PY313} is missing; make setup should have built .venv313")
pytestmark = pytest.mark.skipif(not PY313.exists(), reason="no Python 3.13 venv with azure-functions-runtime")


def index(app_file: Path) -> dict[str, object]:
    done = subprocess.run(
        [str(PY313), str(ROOT / "tests/support/index_with_worker.py"), str(app_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_venv_runs_the_python_infra_deploys_by_default() -> None:
    done = subprocess.run(
        [str(PY313), "-c", "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == WORKER_PYTHON


def test_the_worker_indexes_every_function() -> None:
    assert index(ROOT / "function_app.py") == {
        "functions": sorted(
            [
                "approval_page",
                "approvals",
                "approvals_page",
                "case_worker",
                "checkpoint_health",
                "events",
                "get_case",
                "health",
                "ops_page",
                "ops_redrive",
                "ops_resolve",
                "case_page",
                "openapi",
                "reconciler",
                "withdraw_request",
            ]
        )
    }


def test_the_check_rejects_a_parameter_that_does_not_match_its_binding(tmp_path: Path) -> None:
    bad = tmp_path / "broken_app.py"
    bad.write_text(
        "import azure.functions as func\n"
        "app = func.FunctionApp()\n"
        "@app.timer_trigger(arg_name='timer', schedule='0 */5 * * * *')\n"
        "def tick(other: func.TimerRequest) -> None:\n"
        "    pass\n"
    )
    result = index(bad)
    assert "FunctionLoadError" in str(result.get("error")) and "'other'" in str(result["error"])
