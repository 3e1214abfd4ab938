"""The README and the reference it links stay true: the examples run, the settings table
(docs/configuration.md) lists what the code reads, the first screen gets a newcomer running, and every link
resolves."""

from __future__ import annotations

import re
from pathlib import Path

from shared.app.settings import SETTINGS
from shared.handlers.ingress import sign

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
API = (ROOT / "docs" / "api.md").read_text()
HOW_IT_WORKS = (ROOT / "docs" / "how-it-works.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_signature_example_matches_the_ingress() -> None:
    [block] = [b for b in python_blocks(API) if "casekeeper_signature" in b]
    namespace: dict[str, object] = {}
    exec(block, namespace)  # the API document's own example, run as a reader would
    body = b'{"type":"case.investigate","caseId":"C-1","data":{}}'
    expected = sign("s3cret", body, 1_800_000_000, "d-1")
    assert namespace["casekeeper_signature"]("s3cret", body, "d-1", 1_800_000_000) == expected  # type: ignore[operator]


def test_every_setting_is_documented() -> None:
    missing = [s.name for s in SETTINGS if f"`{s.name}`" not in CONFIGURATION]
    assert not missing, f"docs/configuration.md does not document: {missing}"


def test_the_two_commands_are_there() -> None:
    assert "make run" in README and "make test" in README


def test_the_reference_tables_live_in_docs_linked_from_the_readme() -> None:
    """The README leads with what a newcomer needs; the settings, the layout and the API are one link away."""
    assert not re.search(r"^\| `[A-Z_]{4,}`", README, flags=re.M), "a settings table in the README"
    assert "## Project layout" not in README and "## Configuration" not in README and "## HTTP API" not in README
    for linked in ("docs/configuration.md", "docs/layout.md", "docs/api.md", "docs/how-it-works.md#how-a-case-moves"):
        assert f"]({linked})" in README, f"README does not link {linked}"
    assert len(README.splitlines()) < 300


# A file the reader makes by copying local.settings.sample.json, not one the repository holds.
MADE_BY_THE_READER = {"local.settings.json"}


def test_every_repository_path_the_readme_and_docs_name_exists() -> None:
    root = Path(__file__).resolve().parents[2]
    documentation = "\n".join([README, *(p.read_text() for p in sorted((root / "docs").glob("*.md")))])
    quoted = re.findall(r"`([^`\s]+)`", documentation)
    paths = [
        q
        for q in quoted
        if re.fullmatch(r"(infra|shared|tests|scripts|benchmarks)(/[\w.-]+)*/?", q)
        or re.fullmatch(r"[\w-]+\.(py|json|yaml|txt|toml|kql)", q)
    ]
    assert "infra/main.az.parameters.json" in paths and "azure.yaml" in paths
    missing = sorted(p for p in set(paths) - MADE_BY_THE_READER if not (root / p).exists())
    assert not missing, f"README names files that do not exist: {missing}"


DOCS = sorted((ROOT / "docs").glob("*.md"))


def test_the_first_screen_gets_a_newcomer_running() -> None:
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    assert headings[:5] == [
        "Contents",
        "Two commands",
        "The first ten minutes",
        "What goes wrong, and what Casekeeper does about it",
        "Use the guard in your own workflow",
    ]
    lines = README.splitlines()
    assert next(i for i, line in enumerate(lines) if line == "## Two commands") < 40
    # The contents list names every section.
    contents = README.split("## Contents", 1)[1].split("\n## ", 1)[0]
    for heading in headings[1:]:
        assert f"[{heading}]" in contents, f"the contents list misses {heading!r}"


def test_make_runs_settings_are_documented_and_read_by_the_script() -> None:
    script = (ROOT / "scripts" / "run-local.sh").read_text()
    for name in ("PORT", "SUPPLIER_PORT", "CASEKEEPER_RUN_DATA", "CASEKEEPER_LOCAL_USER", "CASEKEEPER_FRESH"):
        assert f"`{name}`" in CONFIGURATION or f"`{name}=1`" in CONFIGURATION, f"not in docs/configuration.md: {name}"
        assert "${" + name + ":-" in script, f"run-local.sh does not read {name}"


def mermaid_states(block_marker: str) -> set[str]:
    blocks = re.findall(r"```mermaid\n(stateDiagram-v2\n.*?)```", HOW_IT_WORKS, flags=re.S)
    [block] = [b for b in blocks if block_marker in b]
    return set(re.findall(r"(\w+) -->", block)) | set(re.findall(r"--> (\w+)", block))


def test_the_state_diagrams_show_every_status() -> None:
    from casekeeper.core.ledger import EffectStatus
    from shared.domain.invoice import Status

    assert {str(s) for s in Status} <= mermaid_states("invoice.received")
    assert {str(s) for s in EffectStatus} <= mermaid_states("claimed before the call")


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors (lowercase, punctuation dropped, spaces to hyphens) and explicit ids."""
    slugs = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, flags=re.M)
    }
    return slugs | set(re.findall(r'<a id="([^"]+)"', text))


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    broken = []
    for path in [ROOT / "README.md", *DOCS]:
        text = path.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'<img src="([^"]+)"', text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved.read_text()):
                broken.append(f"{path.name}: {target} (no such anchor)")
    assert not broken, broken
