"""The Functions deployment package is exactly what runs: ``.funcignore`` leaves out everything else.

azd and Core Tools zip this directory minus what ``.funcignore`` matches (gitignore syntax; with the file
present their own default exclusions no longer apply). The package's file list is built here the same
way, with ``pathspec``'s gitignore semantics: over a made-up checkout holding every kind of thing that
must stay out beside the real app files, over the real checkout, and the app is then imported and
indexed from nothing but the files that ship.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pathspec
import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPS = {"function_app.py", "host.json", "requirements.txt", "shared", "casekeeper"}
"""The top-level entries of the package: the app's entry point and settings, its requirements (installed
by the remote build), the app and the guard (a folder on the path: requirements.txt does not install it)."""

# Every kind of thing that must stay out, as it appears in a checkout after make setup, make test, make run,
# the emulators and a build (paths relative to the root; a trailing / makes a directory with a file in it).
LEFT_OUT = [
    ".git",  # a worktree's .git is a file; a clone's a directory
    ".gitignore",
    ".funcignore",
    ".github/workflows/ci.yml",
    ".ci/run",
    ".azure/prod/.env",
    ".vscode/settings.json",
    ".venv/bin/python",
    ".venv313/bin/python",
    ".venv-checkov/bin/python",
    ".venv-test313/bin/python",
    ".venv-other/lib/x.py",
    "venv/bin/python",
    "__pycache__/function_app.cpython-311.pyc",
    "shared/__pycache__/cli.cpython-311.pyc",
    "shared/app/__pycache__/bootstrap.cpython-313.pyc",
    "casekeeper/core/__pycache__/ledger.cpython-311.pyc",
    "shared/stray.pyc",
    ".mypy_cache/3.11/cache.db",
    ".ruff_cache/CACHEDIR.TAG",
    ".pytest_cache/README.md",
    ".hypothesis/examples/x",
    ".import_linter_cache/x.json",
    "build/lib/shared/cli.py",
    "dist/casekeeper_app-0.1.0-py3-none-any.whl",
    "casekeeper_app.egg-info/PKG-INFO",
    "casekeeper/casekeeper.egg-info/PKG-INFO",
    ".casekeeper/dev/casekeeper.sqlite",
    ".casekeeper/dev/supplier.jsonl",
    ".azurite/__azurite_db_blob__.json",
    "__azurite_db_blob__.json",
    "__blobstorage__/x",
    "__queuestorage__/x",
    "__tablestorage__/x",
    "data/cases.json",
    "store.sqlite",
    "store.sqlite-wal",
    "store.sqlite-shm",
    "shared/left.sqlite",
    "supplier.jsonl",
    "cosmos-emulator.crt",
    "emulator.pem",
    "emulator.pfx",
    "local.settings.json",
    "local.settings.sample.json",
    "devhost/host.py",
    "devhost/cosmos_server.js",
    "chaos/run.py",
    "sim/run.py",
    "tests/conftest.py",
    "benchmarks/e2e.py",
    "examples/refund/app.py",
    "scripts/run-local.sh",
    "docs/design.md",
    "infra/main.bicep",
    "emulators/compose.yaml",
    "node_modules/@vercel/cosmosdb-server/package.json",
    "package.json",
    "package-lock.json",
    "Makefile",
    "pyproject.toml",
    "casekeeper/pyproject.toml",
    "README.md",
    "azure.yaml",
    "requirements-dev.txt",
    "requirements-bench.txt",
    "requirements-checkov.txt",
]
LEFT_OUT_TOP = {path.split("/", maxsplit=1)[0] for path in LEFT_OUT}


def funcignore() -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines((ROOT / ".funcignore").read_text().splitlines())


def package_files(root: Path, spec: pathspec.GitIgnoreSpec) -> Iterator[Path]:
    """Every file under ``root`` the package holds (relative), walking as a zip tool does; a directory the
    spec leaves out is not entered (gitignore semantics: nothing under it can come back)."""
    for top, dirs, files in os.walk(root):
        here = Path(top).relative_to(root)
        dirs[:] = sorted(d for d in dirs if not spec.match_file(f"{(here / d).as_posix()}/"))
        for name in sorted(files):
            path = here / name
            if not spec.match_file(path.as_posix()):
                yield path


def tracked_app_files() -> list[str]:
    """The app's files as the repository holds them: what the package must carry, every one."""
    listed = subprocess.run(
        ["git", "ls-files", "--", "function_app.py", "host.json", "requirements.txt", "shared", "casekeeper"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [path for path in listed if path != "casekeeper/pyproject.toml" and (ROOT / path).is_file()]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout holding the real app files and one of everything that must stay out."""
    root = tmp_path_factory.mktemp("checkout")
    for path in tracked_app_files():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, root / path)
    for path in LEFT_OUT:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("left out\n")
    return root


def test_the_package_holds_exactly_the_app(checkout: Path) -> None:
    shipped = [p.as_posix() for p in package_files(checkout, funcignore())]
    assert {path.split("/", maxsplit=1)[0] for path in shipped} == SHIPS
    assert sorted(shipped) == sorted(tracked_app_files())  # every app file, the templates and schemas too


@pytest.mark.parametrize("path", LEFT_OUT)
def test_what_does_not_run_stays_out(path: str) -> None:
    assert funcignore().match_file(path), f"{path} would be deployed"


def test_nothing_under_a_left_out_name_ships(checkout: Path) -> None:
    shipped = list(package_files(checkout, funcignore()))
    assert not [p for p in shipped if p.parts[0] in LEFT_OUT_TOP - SHIPS]
    assert not [p for p in shipped if "__pycache__" in p.parts or p.suffix == ".pyc"]
    assert not [p for p in shipped if any(part.endswith(".egg-info") for part in p.parts)]
    assert not [p for p in shipped if ".sqlite" in p.name or p.name in ("pyproject.toml", "supplier.jsonl")]


def test_dependencies_built_into_the_package_stay_whole() -> None:
    """``func azure functionapp publish --build local`` puts the dependencies in .python_packages/: no
    pattern for the checkout's own files (a certificate, a README, a package.json) reaches into them."""
    spec = funcignore()
    site = ".python_packages/lib/site-packages"
    for path in (
        f"{site}/certifi/cacert.pem",
        f"{site}/some_package/README.md",
        f"{site}/some_package/package.json",
        f"{site}/legacy_package-1.0.egg-info/PKG-INFO",
        f"{site}/azure_functions-1.26.0.dist-info/METADATA",
        f"{site}/data/schema.json",
        f"{site}/venv/__init__.py",
    ):
        assert not spec.match_file(path), f"{path} would be left out of a locally built package"


def test_the_app_imports_and_indexes_from_the_package_alone(checkout: Path) -> None:
    """From the files that ship, and the installed libraries, with no editable install on the path (``-S``:
    no ``.pth`` files): ``function_app`` imports, every function indexes, nothing of the dev tools loads."""
    package = checkout.parent / "package"
    for path in package_files(checkout, funcignore()):
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(checkout / path, package / path)
    probe = (
        "import json, sys, function_app, shared, casekeeper\n"
        "names = [f.get_function_name() for f in function_app.create_app().get_functions()]\n"
        "dev_tools = {'devhost', 'chaos', 'sim', 'tests', 'benchmarks'}\n"
        "outside = sorted({m.split('.')[0] for m in sys.modules} & dev_tools)\n"
        "where = sorted({str(m.__file__).startswith(sys.argv[1]) for m in (function_app, shared, casekeeper)})\n"
        "print(json.dumps({'functions': len(names), 'outside': outside, 'from_package': where}))\n"
    )
    site = sysconfig.get_paths()["purelib"]
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(package)],
        cwd=package,
        env={"PYTHONPATH": f"{package}{os.pathsep}{site}", "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["functions"] > 5 and found["outside"] == [] and found["from_package"] == [True], found


def test_the_real_checkout_ships_the_app_and_nothing_else(capsys: pytest.CaptureFixture[str]) -> None:
    """This checkout as it is (after make setup, with its virtual environments, caches and data): the list
    and size of what ``azd deploy`` would upload, printed for a person (``pytest -s``)."""
    shipped = list(package_files(ROOT, funcignore()))
    tops = {p.parts[0] for p in shipped}
    assert tops <= SHIPS, f"would be deployed too: {sorted(tops - SHIPS)}"
    assert {p.as_posix() for p in shipped} >= set(tracked_app_files())
    assert not [p for p in shipped if p.parts[0] in LEFT_OUT_TOP - SHIPS or "__pycache__" in p.parts]
    size = sum((ROOT / p).stat().st_size for p in shipped)
    with capsys.disabled():
        print(f"\nthe deployment package from {ROOT}: {len(shipped)} files, {size} bytes")
        for top in sorted(tops):
            files = [p for p in shipped if p.parts[0] == top]
            print(
                f"  {top}{'/' if (ROOT / top).is_dir() else ''}  {len(files)} files, "
                f"{sum((ROOT / p).stat().st_size for p in files)} bytes"
            )
