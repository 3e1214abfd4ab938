"""What the deployed code imports is pinned in requirements.txt, and the installed set is consistent.

The Functions host installs requirements.txt and nothing else, so a package that ``shared/`` or
``function_app.py`` imports directly must be pinned there, not merely arrive as another package's
dependency (a new release of that package could drop or move it). The imports are read from the source
with ``ast``; each imported module is mapped to the distribution whose files contain it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import subprocess
import sys
from importlib.metadata import Distribution, distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "shared").rglob("*.py")), ROOT / "function_app.py"]
LOCAL = {"shared", "casekeeper", "function_app"}  # casekeeper/ is deployed with the app (.funcignore)

# Imported only on a path that Azure never takes, so pinned in requirements-dev.txt (installed by
# `make setup` for the local host) rather than deployed: distribution -> where and why.
LOCAL_ONLY = {
    "opentelemetry-exporter-otlp-proto-http": (
        "shared/app/telemetry.py imports it lazily when OTEL_EXPORTER_OTLP_ENDPOINT is set; infra/ never sets it"
    ),
    "python-dotenv": (
        "shared/app/local_settings.py imports it lazily for `casekeeper local-settings azd --from FILE`, a "
        "developer's command; the function app never runs it"
    ),
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """name -> pinned version of every ``name==version`` line (markers allowed; one version kept per name)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        requirement = line.split("#", 1)[0].split(";", 1)[0].strip()
        if not requirement:
            continue
        name, sep, version = requirement.partition("==")
        assert sep, f"{path.name}: not pinned with ==: {line!r}"
        found.setdefault(_normalise(name), version.strip())
    return found


def imported_modules() -> dict[str, set[str]]:
    """Every third-party module imported anywhere in the deployed code -> the files importing it.

    ``from a.b import c`` counts as ``a.b.c`` when that is a module (``from opentelemetry import trace``
    imports a module of opentelemetry-api out of a namespace package several distributions share).
    """
    found: dict[str, set[str]] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [_submodule_or_package(node.module, alias.name) for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".", maxsplit=1)[0]
                if top in sys.stdlib_module_names or top in LOCAL:
                    continue
                found.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return found


def _submodule_or_package(package: str, name: str) -> str:
    if package.split(".", maxsplit=1)[0] in sys.stdlib_module_names | LOCAL:
        return package
    try:
        return f"{package}.{name}" if importlib.util.find_spec(f"{package}.{name}") is not None else package
    except ImportError:  # the package itself is not installed; distribution_of() reports it
        return package


@functools.cache
def _owners() -> dict[str, Distribution]:
    """Absolute path of every installed file -> its distribution."""
    owners: dict[str, Distribution] = {}
    for dist in distributions():
        for file in dist.files or ():
            owners[os.path.realpath(dist.locate_file(file))] = dist
    return owners


def distribution_of(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} is imported by the code but not installed"
    assert spec.origin not in (None, "built-in", "frozen"), f"{module}: a namespace package, not a module"
    dist = _owners().get(os.path.realpath(spec.origin))
    assert dist is not None, f"no installed distribution contains {module} ({spec.origin})"
    return _normalise(dist.metadata["Name"])


def test_the_import_scan_finds_what_the_code_uses() -> None:
    # Guards the scan itself: these are imported today, at module level and inside functions.
    modules = imported_modules()
    assert {"pydantic", "azure.core.exceptions", "azure.functions", "azure.monitor.opentelemetry"} <= set(modules)
    assert distribution_of("azure.core.exceptions") == "azure-core"
    assert distribution_of("opentelemetry.sdk.trace") == "opentelemetry-sdk"


def test_every_directly_imported_package_is_pinned_for_deployment() -> None:
    deployed, dev = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    unpinned: list[str] = []
    for module, files in sorted(imported_modules().items()):
        dist = distribution_of(module)
        if dist in deployed:
            continue
        if dist in LOCAL_ONLY and dist in dev:
            continue
        unpinned.append(f"{dist} (imports {module} in {', '.join(sorted(files))})")
    assert not unpinned, "imported but not pinned in requirements.txt: " + "; ".join(unpinned)


def test_local_only_packages_stay_out_of_the_deployed_requirements() -> None:
    deployed, dev = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    for dist, why in LOCAL_ONLY.items():
        assert dist not in deployed, f"{dist} would be deployed: {why}"
        assert dist in dev, f"{dist}: the local host needs it pinned in requirements-dev.txt"


def test_the_installed_versions_are_the_pinned_ones() -> None:
    installed = {_normalise(d.metadata["Name"]): d.version for d in distributions()}
    pinned = {**pins(ROOT / "requirements-dev.txt"), **pins(ROOT / "requirements.txt")}
    # azure-functions has two pins (by Python version); the marker picks one, which pins() cannot evaluate.
    pinned.pop("azure-functions")
    wrong = {name: (version, installed.get(name)) for name, version in pinned.items() if installed.get(name) != version}
    assert not wrong, f"pinned vs installed: {wrong} (run make setup)"


def _pip_check(python: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "check", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_pip_check_is_clean() -> None:
    done = _pip_check(sys.executable)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(not (ROOT / ".venv313" / "bin" / "python").exists(), reason="no .venv313 (make setup builds it)")
def test_pip_check_is_clean_in_the_worker_venv() -> None:
    done = _pip_check(ROOT / ".venv313" / "bin" / "python")
    assert done.returncode == 0, done.stdout + done.stderr
