"""Refuse to start on packages built for another Python.

The Functions host installs ``requirements.txt`` with whatever Python the build used. Azure's remote build
has been seen to run Python 3.11 for an app set to 3.13: the markers in ``requirements.txt`` then pick
3.11's pins and pip installs wheels compiled for 3.11, which a 3.13 runtime cannot load. What follows is
an ``ImportError`` deep inside a dependency on the first import that needs one, or worse, a pure-Python
pin meant for the other version that imports and misbehaves.

:func:`check_installed_packages` compares the CPython ABI tag of every installed wheel (its ``WHEEL``
file) with the running interpreter; ``function_app.py`` calls :func:`require_matching_packages` before it
imports anything else, so the host logs one clear error naming the packages and both versions, and no
function is indexed. Pure-Python wheels (``none``) and the stable ABI (``abi3``, any later version) match.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from importlib.metadata import Distribution, distributions

_CPYTHON_ABI = re.compile(r"^cp(\d)(\d+)")


class PythonMismatch(RuntimeError):
    """Installed packages were built for another Python than the one running: rebuild with this one."""


def _abi_versions(dist: Distribution) -> set[tuple[int, int]]:
    """The CPython versions a wheel's ABI tags tie it to; empty for pure-Python or stable-ABI wheels."""
    text = dist.read_text("WHEEL") or ""
    found: set[tuple[int, int]] = set()
    for line in text.splitlines():
        if not line.startswith("Tag:"):
            continue
        parts = line.split(":", 1)[1].strip().split("-")
        if len(parts) != 3:
            continue
        abi = _CPYTHON_ABI.match(parts[1])
        if abi:
            found.add((int(abi.group(1)), int(abi.group(2))))
    return found


def check_installed_packages(
    dists: Iterable[Distribution] | None = None, running: tuple[int, int] | None = None
) -> list[str]:
    """``name version (built for 3.X)`` for every installed wheel compiled for another CPython."""
    here = running or (sys.version_info.major, sys.version_info.minor)
    wrong: list[str] = []
    for dist in distributions() if dists is None else dists:
        versions = _abi_versions(dist)
        if versions and here not in versions:
            built = ", ".join(f"{major}.{minor}" for major, minor in sorted(versions))
            wrong.append(f"{dist.metadata['Name']} {dist.version} (built for {built})")
    return sorted(wrong)


def require_matching_packages() -> None:
    """Raise :class:`PythonMismatch` when :func:`check_installed_packages` finds any."""
    wrong = check_installed_packages()
    if wrong:
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise PythonMismatch(
            f"these packages were built for another Python than this runtime's {here}: {'; '.join(wrong)}. "
            "The build ran another Python version than the function app: rebuild with Python "
            f"{here} (README: Deploying, the Python version check)."
        )
