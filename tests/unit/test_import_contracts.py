"""The layers in ``pyproject.toml`` ([tool.importlinter]) hold, and each contract can fail.

``make lint`` runs ``lint-imports`` on the real tree. Here the same config runs once on the real tree and
once per contract on a copy of the packages with one forbidden import added, which must break exactly
the contract it offends: a contract that cannot fail checks nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {c["id"]: c for c in CONFIG["contracts"]}


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_real_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout


# (contract, file, the import added to it)
INJECTED = [
    ("guard", "casekeeper/core/ids.py", "import shared.domain.money"),
    ("core", "casekeeper/core/ids.py", "import casekeeper.stores"),
    ("domain", "shared/domain/money.py", "import shared.app.settings"),
    ("adapters", "shared/supplier/portal.py", "import shared.workflow.runner"),
    ("no-local-host", "shared/handlers/health.py", "import shared.localhost.send"),
    ("no-commands", "shared/handlers/door.py", "from shared.operator import events"),
    ("views", "shared/views/cases.py", "from shared.handlers import http"),
    ("workflow-below-app", "shared/workflow/runner.py", "from shared.app.alerts import Alerter"),
    ("telemetry-port", "shared/app/telemetry.py", "from shared.workflow import proposers"),
    # ledger.py imports keys.py; keys.py importing ledger.py back closes a cycle.
    ("acyclic", "casekeeper/core/keys.py", "from casekeeper.core import ledger"),
    ("guard", "casekeeper/checkpoints.py", "from shared.workflow import messages"),
    ("public-guard", "shared/views/runs.py", "from casekeeper.core import ledger"),
]


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages, the config and the cycle contract's module, as lint-imports sees them."""
    tree = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in CONFIG["root_packages"]:
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    for file in ("pyproject.toml", "tests/__init__.py", "tests/support/__init__.py", "tests/support/import_cycles.py"):
        (tree / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / file, tree / file)
    return tree


@pytest.mark.parametrize(("contract", "file", "line"), INJECTED, ids=[f"{c}:{f}" for c, f, _ in INJECTED])
def test_one_forbidden_import_breaks_its_contract(copy_of_the_tree: Path, contract: str, file: str, line: str) -> None:
    target = copy_of_the_tree / file
    original = target.read_text()
    # Before the injection the copy keeps the contract: the failure below is the added line's doing.
    kept = lint_imports(copy_of_the_tree, "--contract", contract)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    target.write_text(f"{original}\n{line}  # injected by the test\n")
    try:
        broken = lint_imports(copy_of_the_tree, "--contract", contract)
    finally:
        target.write_text(original)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"{CONTRACTS[contract]['name']} BROKEN" in broken.stdout
    importer = file.removesuffix(".py").replace("/", ".")
    assert importer in broken.stdout, broken.stdout


def test_a_package_added_later_is_covered_by_the_layers() -> None:
    """Forbidden to the lower layers, and counted as production, without anyone remembering to list it."""
    packages = {f"shared.{p.stem}" for p in (ROOT / "shared").iterdir() if (p / "__init__.py").is_file()}
    packages |= {"shared.cli", "shared.errors", *CONFIG["root_packages"]} - {"shared"}
    app_errors = {"shared.errors"}
    assert set(CONTRACTS["domain"]["forbidden_modules"]) == packages - {"casekeeper", "shared.domain"} - app_errors
    not_production = {"shared.localhost", "shared.cli", "shared.chaos"}
    assert set(CONTRACTS["no-local-host"]["source_modules"]) == packages - not_production
    guard_modules = {
        f"casekeeper.{p.stem}"
        for p in (ROOT / "casekeeper").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert set(CONTRACTS["core"]["forbidden_modules"]) == guard_modules - {"casekeeper.core"}


def test_the_casekeeper_command_loads_the_local_host_only_for_its_local_subcommands() -> None:
    """Why ``shared.cli`` may import ``shared.localhost``: only inside the subcommands that start it, so
    an operator command run against production never loads the local host."""
    probe = "import sys, shared.cli; print(sorted(m for m in sys.modules if m.startswith('shared.localhost')))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
