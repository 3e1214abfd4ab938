"""The ``casekeeper`` command finds the dev tools' subcommands as entry points and loads one only to run it.

The app (``shared``) never imports the local host (``devhost``), the chaos run (``chaos``) or the simulator
(``sim``): they are not deployed. ``pyproject.toml`` declares their commands in the ``casekeeper.commands``
group; ``shared.cli`` lists them from the installed metadata, each with the first line of its target's
docstring, and says in one line when they are not installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from shared import cli

ROOT = Path(__file__).resolve().parents[2]
DECLARED: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
    cli.DEV_COMMANDS_GROUP
]
DEV_PACKAGES = ("devhost", "chaos", "sim")


def test_pyproject_declares_the_dev_commands_and_the_install_has_them() -> None:
    assert set(DECLARED) == {"dev", "send", "demo", "supplier-stub", "model-stub", "chaos", "sim", "sim-hunt"}
    assert all(target.split(".", maxsplit=1)[0] in DEV_PACKAGES for target in DECLARED.values())
    installed = {name: ep.value for name, ep in cli.dev_commands().items()}
    assert installed == DECLARED, "the installed metadata is stale: make setup reinstalls when pyproject changes"
    assert not set(DECLARED) & set(cli.COMMANDS), "a dev command named like one of the app's would be hidden"


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_each_dev_command_loads_to_a_main_and_has_a_help_line(name: str) -> None:
    entry = cli.dev_commands()[name]
    assert callable(entry.load())
    line = cli.summary(entry)
    assert line and line[0].islower() and not line.endswith("."), line
    assert f"  {name:<16} {line}" in cli.usage()


def _run(code: str, *, cwd: Path = ROOT, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_listing_the_commands_loads_no_dev_tool() -> None:
    """``casekeeper``, ``--help``, an unknown command and an operator command's import load neither
    devhost nor chaos: the help lines come from the sources, not from importing them."""
    probe = (
        "import contextlib, io, sys\n"
        "from shared import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):\n"
        "    codes = [cli.main([]), cli.main(['--help']), cli.main(['nonsense'])]\n"
        "import shared.operator.cases\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('devhost', 'chaos', 'sim'))\n"
        "print(codes, loaded, 'serve the function app locally' in out.getvalue())\n"
    )
    done = _run(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2, 0, 2] [] True"


def test_a_dev_command_loads_its_package_only_when_it_runs() -> None:
    probe = (
        "import sys\n"
        "from shared import cli\n"
        "try:\n"
        "    cli.main(['send', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('devhost', 'chaos')}))\n"
    )
    done = _run(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['devhost']"


def _fake_group(monkeypatch: pytest.MonkeyPatch, **targets: str) -> None:
    entries = metadata.EntryPoints(
        metadata.EntryPoint(name=name.replace("_", "-"), value=value, group=cli.DEV_COMMANDS_GROUP)
        for name, value in targets.items()
    )

    def entry_points(*, group: str) -> metadata.EntryPoints:
        assert group == cli.DEV_COMMANDS_GROUP
        return entries

    monkeypatch.setattr(cli.metadata, "entry_points", entry_points)


def test_a_command_whose_package_is_missing_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_group(monkeypatch, dev="no_such_devtools.host:main")
    assert cli.main(["dev", "--port", "1"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line == f"casekeeper dev: {cli.NOT_INSTALLED}; no module 'no_such_devtools'"


def test_a_module_the_command_itself_lacks_is_an_error_of_the_command_not_missing_dev_tools(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Only the entry point's own package missing means "not installed"; a broken import inside it is
    reported as what it is (one line too)."""
    (tmp_path / "broken_tool.py").write_text('import no_such_dependency\n\ndef main(argv):\n    """Do."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    _fake_group(monkeypatch, broken="broken_tool:main")
    assert cli.main(["broken"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("casekeeper broken: unexpected error: ModuleNotFoundError")
    assert "no_such_dependency" in line and cli.NOT_INSTALLED not in line


def test_without_any_dev_tools_the_usage_and_an_unknown_command_say_they_are_not_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_group(monkeypatch)
    assert cli.main(["chaos"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"casekeeper: unknown command 'chaos'; {cli.NOT_INSTALLED}"
    assert f"  none: {cli.NOT_INSTALLED}" in err


def test_a_summary_is_read_without_importing_and_is_empty_when_there_is_none(tmp_path: Path) -> None:
    package = tmp_path / "pkg_for_summary"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "tool.py").write_text(
        'raise RuntimeError("imported")\n\ndef main(argv):\n    """Do the thing.\n\n    More."""\n\n'
        "def bare(argv):\n    return 0\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        documented = metadata.EntryPoint(name="t", value="pkg_for_summary.tool:main", group=cli.DEV_COMMANDS_GROUP)
        bare = metadata.EntryPoint(name="b", value="pkg_for_summary.tool:bare", group=cli.DEV_COMMANDS_GROUP)
        absent = metadata.EntryPoint(name="a", value="pkg_for_summary.nothing:main", group=cli.DEV_COMMANDS_GROUP)
        assert [cli.summary(e) for e in (documented, bare, absent)] == ["do the thing", "", ""]
        assert "pkg_for_summary" not in sys.modules
    finally:
        sys.path.remove(str(tmp_path))


def _tree_without_dev_tools(tmp_path: Path) -> Path:
    """What the deployment package holds of the code: the app and the guard, no devhost, no chaos."""
    app = tmp_path / "app"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("shared", "casekeeper"):
        shutil.copytree(ROOT / package, app / package, ignore=ignore)
    return app


def test_in_an_environment_without_devhost_the_dev_commands_say_they_are_not_installed(tmp_path: Path) -> None:
    """The installed metadata declares the commands, but the packages are not on the path (``-S``: no
    ``.pth`` file, so no editable install's finder; the site-packages directory alone, for the libraries)."""
    app = _tree_without_dev_tools(tmp_path)
    site = sysconfig.get_paths()["purelib"]
    for command in ("dev", "demo", "chaos", "sim"):
        done = subprocess.run(
            [sys.executable, "-S", "-m", "shared.cli", command],
            cwd=app,
            env={"PYTHONPATH": f"{app}:{site}", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        [line] = done.stderr.splitlines()
        package = DECLARED[command].split(".", maxsplit=1)[0]
        assert line == f"casekeeper {command}: {cli.NOT_INSTALLED}; no module {package!r}"


PYTHON313 = ROOT / ".venv313" / "bin" / "python"


@pytest.mark.skipif(not PYTHON313.exists(), reason="no .venv313 (make setup builds it)")
def test_in_the_deployed_app_the_dev_commands_say_they_are_not_installed(tmp_path: Path) -> None:
    """.venv313 holds requirements.txt alone, as the Functions host installs it: no casekeeper-app, so no
    entry points at all."""
    app = _tree_without_dev_tools(tmp_path)
    done = subprocess.run(
        [str(PYTHON313), "-m", "shared.cli", "dev"], cwd=app, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[0] == f"casekeeper: unknown command 'dev'; {cli.NOT_INSTALLED}"
