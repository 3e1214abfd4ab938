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
    ("no-devhost", "shared/handlers/health.py", "import devhost.send"),
    # Not even inside a function: the deployed package has no devhost/ to import from.
    ("no-devhost", "shared/cli.py", "def _injected() -> None:\n    import devhost.host"),
    ("no-devhost", "casekeeper/guard.py", "from devhost import supplier_stub"),
    ("no-devhost", "examples/refund/payments.py", "import devhost.ports"),
    # Through another package: chaos.run imports the local host.
    ("no-devhost", "shared/views/cases.py", "import chaos.run"),
    ("no-chaos", "shared/cli.py", "def _injected() -> None:\n    from chaos.run import main"),
    ("no-chaos", "casekeeper/cases.py", "import chaos.plan"),
    ("no-chaos", "examples/refund/app.py", "import chaos.report"),
    ("no-chaos", "devhost/host.py", "from chaos import config"),
    ("no-chaos", "benchmarks/store_ops.py", "import chaos.processes"),
    ("no-chaos", "sim/world.py", "import chaos.checks"),
    ("no-sim", "shared/cli.py", "def _injected() -> None:\n    from sim.run import main"),
    ("no-sim", "chaos/run.py", "from sim import runner"),
    ("no-sim", "devhost/host.py", "import sim.world"),
    ("no-benchmarks", "shared/app/bootstrap.py", "from benchmarks import tables"),
    ("no-benchmarks", "devhost/supplier_stub.py", "import benchmarks.processes"),
    ("no-benchmarks", "chaos/cluster.py", "import benchmarks.scale"),
    ("no-commands", "shared/handlers/door.py", "from shared.operator import events"),
    ("views", "shared/views/cases.py", "from shared.handlers import http"),
    ("workflow-below-app", "shared/workflow/runner.py", "from shared.app.alerts import Alerter"),
    ("telemetry-port", "shared/app/telemetry.py", "from shared.workflow import proposers"),
    # ledger.py imports keys.py; keys.py importing ledger.py back closes a cycle.
    ("acyclic", "casekeeper/core/keys.py", "from casekeeper.core import ledger"),
    ("guard", "casekeeper/checkpoints.py", "from shared.workflow import messages"),
    ("public-guard", "shared/views/runs.py", "from casekeeper.core import ledger"),
    ("public-guard", "devhost/demo.py", "from casekeeper.core import ledger"),
    ("public-guard", "chaos/collect.py", "import casekeeper._numbers"),
    ("public-guard", "sim/checks.py", "from casekeeper.core import ledger"),
    # checks.py runs consistency.py's checks; consistency.py importing checks.py back closes a cycle, even
    # from inside a function.
    ("acyclic", "chaos/consistency.py", "def _injected() -> None:\n    from chaos import checks"),
    # plan.py uses disorder.py's kills and outages; disorder.py naming the plan's types closes one.
    ("acyclic", "chaos/disorder.py", "from chaos.plan import Plan"),
    # host.py serves the change feed; the change feed importing the host closes one.
    ("acyclic", "devhost/changefeed.py", "from devhost import host"),
    # e2e.py prints store_paths.py's table; store_paths.py importing e2e.py back closes one.
    ("acyclic", "benchmarks/store_paths.py", "def _injected() -> None:\n    from benchmarks.e2e import table"),
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
    packages |= {"shared.cli", "shared.errors"}
    roots = set(CONFIG["root_packages"])
    dev_tools = {"devhost", "chaos", "sim", "benchmarks"}
    assert dev_tools <= roots
    app_errors = {"shared.errors"}
    domain = set(CONTRACTS["domain"]["forbidden_modules"])
    assert domain == (packages | {"examples"}) - {"shared.domain"} - app_errors
    # Every other root package is below the dev tools: a new one is either a dev tool or kept from them.
    assert set(CONTRACTS["no-devhost"]["source_modules"]) == roots - dev_tools
    assert set(CONTRACTS["no-chaos"]["source_modules"]) == roots - {"chaos"}
    assert set(CONTRACTS["no-sim"]["source_modules"]) == roots - {"sim"}
    assert set(CONTRACTS["no-benchmarks"]["source_modules"]) == roots - {"benchmarks"}
    assert set(CONTRACTS["public-guard"]["source_modules"]) == roots - {"casekeeper", "examples", "benchmarks"}
    assert set(CONTRACTS["acyclic"]["containers"]) == roots
    guard_modules = {
        f"casekeeper.{p.stem}"
        for p in (ROOT / "casekeeper").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert set(CONTRACTS["core"]["forbidden_modules"]) == guard_modules - {"casekeeper.core"}


def test_every_package_at_the_top_is_a_root_package() -> None:
    """A new top-level package (a dev tool beside devhost and chaos, say) is checked by the contracts from
    its first commit: it must be listed in ``root_packages``."""
    top = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"tests"}
    assert top == set(CONFIG["root_packages"])


def test_the_dev_tools_cycles_are_gone_for_good() -> None:
    """Only the guard's own known cycles are ignored; none in the app, its dev tools or the benchmarks."""
    ignored = CONTRACTS["acyclic"].get("ignore_imports", [])
    assert all(line.startswith("casekeeper.") for line in ignored), ignored


def test_the_casekeeper_command_loads_no_dev_tool_to_start_or_to_list_its_commands() -> None:
    """``shared.cli`` finds the dev tools' commands as entry points, so neither importing it nor showing its
    usage loads devhost or chaos: an operator command run against production never loads the local host."""
    probe = (
        "import contextlib, io, sys, shared.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    shared.cli.main(['--help'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('devhost', 'chaos', 'benchmarks')))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
