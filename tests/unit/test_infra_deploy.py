"""Deploy defects a review of ``infra/`` found, pinned: each test fails on the templates as they were.

- ``azd down`` then ``azd up`` must not collide with the soft-deleted, purge-protected Key Vault.
- The host storage identity holds every data role the Functions host needs (``test_infra.py`` checks the
  role table); the Flex plan accepts its documented minimum of instances; no FTP; no token store.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import yaml

from tests.unit.test_infra import (
    APP,
    MAIN,
    ROOT,
    _azd_references,
    _text,
    declared,
)

AZURE_YAML = ROOT / "azure.yaml"


def _postdown_posix() -> str:
    hooks = yaml.safe_load(AZURE_YAML.read_text())["hooks"]
    hook = hooks["postdown"]["posix"]
    assert hook["shell"] == "sh"
    return str(hook["run"])


def _run_hook(tmp_path: Path) -> list[str]:
    # azd is not installed here, so a stand-in on PATH records what the hook asks of it: the hook's own
    # shell pipeline (the random suffix) runs for real.
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "azd"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    subprocess.run(["sh", "-c", _postdown_posix()], check=True, env=env, timeout=30)
    return calls.read_text().splitlines()


def test_azd_down_then_up_names_a_new_key_vault(tmp_path: Path) -> None:
    first, second = _run_hook(tmp_path), _run_hook(tmp_path)[1:]
    suffixes = []
    for line in (first[0], second[0]):
        match = re.fullmatch(r"env set AZURE_KEY_VAULT_SUFFIX ([0-9a-z]+)", line)
        assert match, line
        suffixes.append(match.group(1))
    assert suffixes[0] != suffixes[1], "each azd down must draw a new suffix"
    param = declared(MAIN, "param")["keyVaultNameSuffix"]
    max_length = int(re.search(r"@maxLength\((\d+)\)", param.decorator_source).group(1))  # type: ignore[union-attr]
    assert all(len(s) <= max_length for s in suffixes)
    assert _azd_references()["keyVaultNameSuffix"] == ("AZURE_KEY_VAULT_SUFFIX", "")
    # The suffix is appended after the 24-character cut, so a long prefix can never cut it off.
    names = _text(declared(MAIN, "var")["names"].value)  # type: ignore[arg-type]
    expected = "'${take('kv${prefix}${resourceToken}', 24 - length(keyVaultNameSuffix))}${keyVaultNameSuffix}'"
    assert f"keyVault: {expected}" in names


def test_purge_protection_stays_on_by_default() -> None:
    assert _text(declared(MAIN, "param")["keyVaultPurgeProtection"].value) == "true"  # type: ignore[arg-type]


def test_flex_plan_limits_ftp_and_token_store() -> None:
    path = APP / "functionapp.bicep"
    maximum = declared(path, "param")["maximumInstanceCount"]
    assert "@minValue(1)" in maximum.decorator_source, "Flex Consumption's documented minimum is 1"
    source = path.read_text()
    assert "ftpsState: 'Disabled'" in source
    assert re.search(r"tokenStore: \{\s*enabled: false\s*\}", source), "a token store with nowhere to keep tokens"
