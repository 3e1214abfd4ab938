"""The README's examples run, and its settings table lists what the code reads."""

from __future__ import annotations

import re
from pathlib import Path

from shared.app.settings import SETTINGS
from shared.handlers.ingress import sign

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_the_signature_example_matches_the_ingress() -> None:
    [block] = [b for b in python_blocks() if "casekeeper_signature" in b]
    namespace: dict[str, object] = {}
    exec(block, namespace)  # the README's own example, run as a reader would
    body = b'{"type":"case.investigate","caseId":"C-1","data":{}}'
    expected = sign("s3cret", body, 1_800_000_000, "d-1")
    assert namespace["casekeeper_signature"]("s3cret", body, "d-1", 1_800_000_000) == expected  # type: ignore[operator]


def test_every_setting_is_documented() -> None:
    missing = [s.name for s in SETTINGS if f"`{s.name}`" not in README]
    assert not missing, f"README does not document: {missing}"


def test_the_two_commands_are_there() -> None:
    assert "make run" in README and "make test" in README


# A file the reader makes by copying local.settings.sample.json, not one the repository holds.
MADE_BY_THE_READER = {"local.settings.json"}


def test_every_repository_path_the_readme_names_exists() -> None:
    root = Path(__file__).resolve().parents[2]
    quoted = re.findall(r"`([^`\s]+)`", README)
    paths = [
        q
        for q in quoted
        if re.fullmatch(r"(infra|shared|tests|scripts|benchmarks)(/[\w.-]+)*/?", q)
        or re.fullmatch(r"[\w-]+\.(py|json|yaml|txt|toml|kql)", q)
    ]
    assert "infra/main.az.parameters.json" in paths and "azure.yaml" in paths
    missing = sorted(p for p in set(paths) - MADE_BY_THE_READER if not (root / p).exists())
    assert not missing, f"README names files that do not exist: {missing}"
