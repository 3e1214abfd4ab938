"""The Bicep lint (``scripts/lint_infra.py``, run by ``make lint``): what makes it fail, and that the real
checkov finds a real defect in a template, so a green lint means the rules ran."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from scripts.lint_infra import DEFAULT_CHECKOV, problems, run_checkov

ROOT = Path(__file__).resolve().parents[2]


def _report(**results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"check_type": "bicep", "results": results, "summary": {}}


def _skip(check: str, resource: str, reason: str) -> dict[str, Any]:
    return {"check_id": check, "resource": resource, "check_result": {"result": "SKIPPED", "suppress_comment": reason}}


def test_a_clean_report_has_no_problems() -> None:
    report = _report(skipped_checks=[_skip("CKV_AZURE_41", "x.y", " an expiry would stop the webhooks on that date")])
    assert problems(report, "") == []


def test_failures_parse_errors_and_reasonless_skips_are_problems() -> None:
    failed = {
        "check_id": "CKV_AZURE_1",
        "check_name": "a rule",
        "resource": "Microsoft.Web/sites.app",
        "file_path": "/app/functionapp.bicep",
        "file_line_range": [3, 9],
    }
    report = _report(
        failed_checks=[failed],
        parsing_errors=["/infra/app/broken.bicep"],
        skipped_checks=[_skip("CKV_AZURE_2", "a.b", ""), _skip("CKV_AZURE_3", "a.b", " n/a")],
    )
    found = problems(report, "")
    assert len(found) == 4
    assert "CKV_AZURE_1" in found[0] and "functionapp.bicep:3-9" in found[0]
    assert "broken.bicep" in found[1]
    assert all("without a reason" in line for line in found[2:])


def test_a_crashed_check_is_a_problem_unless_skipped_for_that_resource() -> None:
    line = (
        "2026-12-03 [MainThread  ] [ERROR]  Failed to run check CKV_AZURE_70 on "
        "/x/infra/app/f.bicep:Microsoft.Web/sites/config.auth"
    )
    assert problems(_report(), line) == [
        "CKV_AZURE_70 crashed on Microsoft.Web/sites/config.auth: skip it in that resource, with the reason"
    ]
    skipped = _report(
        skipped_checks=[_skip("CKV_AZURE_70", "Microsoft.Web/sites/config.auth", " not a site; https is set")]
    )
    assert problems(skipped, line) == []


def _checkov() -> Path:
    if not DEFAULT_CHECKOV.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{DEFAULT_CHECKOV} is missing: `make lint` installs it before the tests")
        pytest.skip("checkov's environment is missing: run `make lint` once")
    return DEFAULT_CHECKOV


@pytest.mark.slow
def test_checkov_catches_a_storage_account_that_accepts_plain_http(tmp_path: Path) -> None:
    checkov = _checkov()
    original, defective = tmp_path / "original", tmp_path / "defective"
    source = (ROOT / "infra" / "app" / "storage.bicep").read_text()
    for folder, text in (
        (original, source),
        (defective, source.replace("supportsHttpsTrafficOnly: true", "supportsHttpsTrafficOnly: false")),
    ):
        folder.mkdir()
        (folder / "storage.bicep").write_text(text)
    before = set(problems(*run_checkov(checkov, original)))
    after = set(problems(*run_checkov(checkov, defective)))
    new = after - before
    assert new, "checkov passed a storage account that accepts plain HTTP"
    assert all("Microsoft.Storage/storageAccounts.storage" in line for line in new), new
