"""A build that installed packages for another Python fails at start, naming them (issue: azd's remote
build has used 3.11 for an app set to 3.13)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import PathDistribution
from pathlib import Path

import pytest

from shared.app.runtime_check import check_installed_packages

ROOT = Path(__file__).resolve().parents[2]


def _dist(tmp_path: Path, name: str, *tags: str) -> PathDistribution:
    info = tmp_path / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: false\n" + "".join(f"Tag: {t}\n" for t in tags))
    return PathDistribution(info)


@pytest.mark.parametrize(
    ("tags", "flagged"),
    [
        (("cp311-cp311-manylinux_2_17_x86_64",), True),
        (("cp313-cp313-manylinux_2_17_x86_64",), False),
        (("cp38-abi3-manylinux_2_17_x86_64",), False),  # the stable ABI loads on any later CPython
        (("py3-none-any",), False),
        (("cp311-cp311-musllinux_1_2_x86_64", "cp311-cp311-manylinux_2_28_x86_64"), True),
        (("cp313-cp313t-manylinux_2_17_x86_64",), False),
    ],
)
def test_a_wheel_compiled_for_another_python_is_named(tmp_path: Path, tags: tuple[str, ...], flagged: bool) -> None:
    dist = _dist(tmp_path, "native", *tags)
    found = check_installed_packages([dist], running=(3, 13))
    assert found == (["native 1.0 (built for 3.11)"] if flagged else [])


def test_this_environment_matches_its_own_python() -> None:
    assert check_installed_packages() == []


def test_the_function_app_refuses_to_start_on_a_mismatched_build(tmp_path: Path) -> None:
    other = (3, sys.version_info.minor - 1)
    _dist(tmp_path, "pydantic_core", f"cp{other[0]}{other[1]}-cp{other[0]}{other[1]}-manylinux_2_17_x86_64")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", "import function_app"],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "PythonMismatch" in done.stderr
    assert f"pydantic_core 1.0 (built for {other[0]}.{other[1]})" in done.stderr
    assert f"rebuild with Python {sys.version_info.major}.{sys.version_info.minor}" in done.stderr
