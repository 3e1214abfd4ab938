"""The mistakes a newcomer makes, each answered with what to do: ``casekeeper send`` to a host that is not
running or with the wrong secret, ``casekeeper dev`` with a role that does not exist, and the sample
settings copied unchanged. Real processes and a real local host."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from devhost.host import SECRET_FILE, DevOptions, load_environment
from devhost.ports import free_port
from tests.support.dev_host import SECRET, DevHost

ROOT = Path(__file__).resolve().parents[2]
CASEKEEPER = str(Path(sys.executable).with_name("casekeeper"))


def casekeeper(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin"}  # no WEBHOOK_SECRET from the developer's shell
    return subprocess.run(
        [CASEKEEPER, *argv], check=False, capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def test_send_to_a_host_that_is_not_running_names_the_url_and_make_run(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = casekeeper("send", "case.investigate", "C-1", "--url", url, "--secret", "s", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert f"nothing answers at {url}/api/events" in line and "make run" in line


def test_send_with_the_wrong_secret_says_where_the_secret_comes_from(host: DevHost, tmp_path: Path) -> None:
    done = casekeeper("send", "case.investigate", "C-1", "--url", host.url, "--data", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "no secret" in done.stderr  # nothing to sign with: said before sending
    (tmp_path / SECRET_FILE).write_text("not-the-hosts\n")
    done = casekeeper("send", "case.investigate", "C-1", "--url", host.url, "--data", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    first, hint = done.stderr.splitlines()
    assert "answered 401" in first
    assert str(tmp_path / SECRET_FILE) in hint and "--secret" in hint


def test_send_prints_the_answer_and_json_on_request(host: DevHost, tmp_path: Path) -> None:
    done = casekeeper("send", "case.investigate", "C-1", "--url", host.url, "--secret", SECRET, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("202 ") and done.stderr == ""
    done = casekeeper("send", "case.investigate", "C-1", "--url", host.url, "--secret", SECRET, "--json", cwd=tmp_path)
    assert done.returncode == 0
    answer = json.loads(done.stdout)
    assert answer["status"] == 202 and answer["body"]["accepted"] is True and answer["body"]["deliveryId"]
    refused = casekeeper(
        "send", "case.investigate", "C/1", "--url", host.url, "--secret", SECRET, "--json", cwd=tmp_path
    )
    assert refused.returncode == 1 and json.loads(refused.stdout)["status"] == 400


def test_dev_names_the_valid_roles(tmp_path: Path) -> None:
    done = casekeeper("dev", "--as", "me", "--role", "admin", "--data", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "unknown role 'admin'" in line and "approver (Casekeeper.Approver)" in line and "operator" in line


def test_the_sample_settings_copied_unchanged_give_a_real_secret(tmp_path: Path) -> None:
    shutil.copy(ROOT / "local.settings.sample.json", tmp_path / "local.settings.json")
    values = load_environment(DevOptions(data=tmp_path / "data", app_dir=tmp_path), base={})
    generated = (tmp_path / "data" / SECRET_FILE).read_text().strip()
    assert values["WEBHOOK_SECRET"] == generated and len(generated) == 64
