"""``docs/design.md`` and the code that cites it stay in step.

Comments cite the design as ``rule R3`` and ``docs/design.md#f5``; the design names, for each rule, the
file and function that keep it. Each of those must resolve: every rule and failure point cited exists,
every anchor linked exists, every "Enforced in" names a file that exists and a function or class it
defines, every rule names the tests that pin it and those files exist, and nothing points at a design
document outside the repository.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

# "R3", "rules R2-R4", "(R8)"; not the "R1" of a test id such as "INV-R1".
RULE = re.compile(r"(?<![\w-])R(\d+)\b")
POINT = re.compile(r"(?<![\w-])F(\d+)\b")
LINK = re.compile(r"docs/design\.md#([\w-]+)")


def design() -> str:
    return DESIGN.read_text()


def anchors() -> set[str]:
    return set(re.findall(r'<a id="([\w-]+)"></a>', design()))


@cache
def tracked_text_files() -> tuple[Path, ...]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    wanted = {".py", ".md", ".bicep", ".kql", ".json", ".toml", ".yaml", ".yml", ".sh", ".js", ".html", ".txt"}
    names = [*listed.split(), "docs/design.md"]  # the design itself, even before it is committed
    return tuple(sorted({ROOT / n for n in names if Path(n).suffix in wanted and (ROOT / n).is_file()}))


def cited_in_code(pattern: re.Pattern[str]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for path in tracked_text_files():
        if path.suffix != ".py" and path.name != "README.md":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                found.setdefault(int(match[1]), []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def test_every_rule_has_a_stable_anchor_and_a_heading() -> None:
    for n in range(1, 11):
        assert f'<a id="r{n}"></a>\n### R{n}. ' in design(), f"R{n} has no anchor followed by its heading"


def test_every_rule_number_cited_in_the_code_is_defined() -> None:
    undefined = {n: where for n, where in cited_in_code(RULE).items() if f"r{n}" not in anchors()}
    assert not undefined, f"rules cited but not in docs/design.md: {undefined}"


def test_every_failure_point_cited_in_the_code_is_defined() -> None:
    undefined = {n: where for n, where in cited_in_code(POINT).items() if f"f{n}" not in anchors()}
    assert not undefined, f"failure points cited but not in docs/design.md: {undefined}"


def test_every_link_into_the_design_resolves() -> None:
    broken = []
    for path in tracked_text_files():
        for anchor in LINK.findall(path.read_text()):
            if anchor not in anchors():
                broken.append(f"{path.relative_to(ROOT)}: #{anchor}")
    broken += [f"docs/design.md: #{a}" for a in re.findall(r"\]\(#([\w-]+)\)", design()) if a not in anchors()]
    assert not broken, f"links to anchors docs/design.md does not have: {broken}"


def test_nothing_points_at_a_design_outside_the_repository() -> None:
    outside = re.compile(r"DESIGN\.md|\.\./shared\b|/work/shared")
    offending = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in tracked_text_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if outside.search(line) and path != Path(__file__).resolve()
    ]
    assert not offending, offending


def test_every_enforced_in_names_a_file_and_what_it_defines() -> None:
    entries = re.findall(r"Enforced in: `([^`]+)`, `([\w.]+)`", " ".join(design().split()))
    assert len(entries) >= 15, "every numbered and named rule says where it is enforced"
    for file, qualified in entries:
        source = ROOT / file
        assert source.is_file(), f"Enforced in: {file} does not exist"
        text = source.read_text()
        for part in qualified.split("."):
            assert re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{part}\b", text, re.M), f"{file} defines no {part}"


def test_every_rule_names_the_tests_that_pin_it_and_they_exist() -> None:
    text = design()
    for n in range(1, 11):
        section = text.split(f'<a id="r{n}"></a>', 1)[1].split("<a id=", 1)[0]
        pinned = re.search(r"^Pinned by: (.*?)\.\n\n", section, re.S | re.M)
        assert pinned, f"R{n} names no tests (a paragraph 'Pinned by: `tests/...`, ...')"
        files = re.findall(r"`(tests/[\w/]+\.py)`", pinned[1])
        assert files, f"R{n}: 'Pinned by' names no test file"
        missing = [f for f in files if not (ROOT / f).is_file()]
        assert not missing, f"R{n} is pinned by test files that do not exist: {missing}"
        assert any(re.search(r"^def test_", (ROOT / f).read_text(), re.M) for f in files), f"R{n}: no tests in {files}"


def test_the_readme_and_the_layout_link_the_design() -> None:
    intro = (ROOT / "README.md").read_text().split("## Two commands")[0]
    layout = (ROOT / "docs" / "layout.md").read_text()
    assert "](docs/design.md)" in intro and "](design.md)" in layout and "docs/design.md" in layout
