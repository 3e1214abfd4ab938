"""The guard ships as a distribution of its own, and a user's project that has a ``shared`` package of its
own (every Azure Functions project laid out like this one has) uses it unchanged.

The wheel is built from ``casekeeper/pyproject.toml`` the way a user's ``pip`` builds it (offline: the
build backend is the pinned ``setuptools`` of requirements-dev.txt), installed into a folder of its own,
and imported by a fresh interpreter from a project folder holding a ``shared`` package that is not ours.
The guarded effect then runs twice on one decision, on SQLite: one call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    # The build writes its egg-info and build/ folders next to the sources: build from a copy.
    source = build / "casekeeper"
    shutil.copytree(ROOT / "casekeeper", source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("casekeeper-*.whl")
    return built


def test_the_wheel_holds_the_guard_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    packages = {name.split("/", 1)[0] for name in names}
    assert {p for p in packages if not p.endswith(".dist-info")} == {"casekeeper"}, packages
    for module in (
        "__init__.py",
        "guard.py",
        "core/ledger.py",
        "core/entries.py",
        "stores/sqlite.py",
        "stores/cosmos.py",
        "agent.py",
    ):
        assert f"casekeeper/{module}" in names, module
    sources = {
        f"casekeeper/{p.relative_to(ROOT / 'casekeeper').as_posix()}" for p in (ROOT / "casekeeper").rglob("*.py")
    }
    assert sources - set(names) == set(), "modules of the guard the wheel leaves out"
    assert not [n for n in names if n.startswith("shared/") or n.endswith("pyproject.toml")]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: casekeeper\n" in metadata
    required = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert required and all("extra ==" in line for line in required), required  # the guard itself needs none


USER_SCRIPT = textwrap.dedent(
    """
    import sys
    import shared  # the user's own package, first on the path
    assert shared.WHOSE == "the user's", shared.__file__
    import casekeeper
    from casekeeper import Guard, open_sqlite
    assert casekeeper.__file__.startswith(sys.argv[1]), casekeeper.__file__

    store = open_sqlite("refunds.sqlite")
    guard = Guard(store, call_timeout=30)
    calls = []

    @guard.effect("refund", commit="refunded")
    def refund(key, args):
        calls.append(key)
        return {"paid": args["amount"]}

    guard.create("r-1", {"amount": "12.50"}, status="requested")
    decision = guard.decide("r-1")
    first = refund.run(decision, {"amount": "12.50"})
    second = refund.run(decision, {"amount": "12.50"})
    print(len(calls), first.replayed, second.replayed, second.key == first.key, guard.decide("r-1").case.status)
    """
)


def test_a_project_with_its_own_shared_package_uses_the_installed_guard(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    project = tmp_path / "project"
    (project / "shared").mkdir(parents=True)
    (project / "shared" / "__init__.py").write_text('WHOSE = "the user\'s"\n')
    (project / "app.py").write_text(USER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{project}{os.pathsep}{site}"  # the project first, as a Functions host puts it
    done = subprocess.run(
        [sys.executable, "app.py", str(site)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "False", "True", "True", "refunded"], done.stdout
