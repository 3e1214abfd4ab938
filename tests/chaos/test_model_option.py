"""``casekeeper chaos --model stub``: the option, and what the hosts are given with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cluster import Cluster
from chaos.config import ChaosConfig
from chaos.run import build_parser


def test_the_option_defaults_to_the_rules_and_refuses_anything_else() -> None:
    assert build_parser().parse_args([]).model == "rules"
    assert build_parser().parse_args(["--model", "stub"]).model == "stub"
    with pytest.raises(ValueError, match="--model must be rules or stub"):
        ChaosConfig(model="gpt")


def test_with_the_stub_every_host_talks_to_one_stand_in_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hosts' processes are not started here: the test reads the settings each would get."""
    started: list[dict[str, str]] = []

    class Host:
        def __init__(self, index: int, workdir: Path, data: Path, app_dir: Path, env: dict[str, str]) -> None:
            started.append(dict(env))

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    class Supplier:
        url = "http://127.0.0.1:1"

        def __init__(self, workdir: Path, app_dir: Path) -> None:
            self.journal = workdir / "supplier.jsonl"

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    monkeypatch.setattr("chaos.cluster.HostProcess", Host)
    monkeypatch.setattr("chaos.cluster.SupplierProcess", Supplier)
    cluster = Cluster(ChaosConfig(model="stub", hosts=2, data=tmp_path / "run"))
    cluster.start()
    try:
        assert cluster.model is not None
        assert len(started) == 2 and started[0] == started[1]
        assert started[0]["AZURE_OPENAI_ENDPOINT"] == cluster.model.url
        assert started[0]["AZURE_OPENAI_DEPLOYMENT"] == "chaos-stub" and started[0]["AZURE_OPENAI_API_KEY"]
        assert float(started[0]["AZURE_OPENAI_TIMEOUT_SECONDS"]) < 5  # a "slow" answer (5 s) outlives it
    finally:
        cluster.stop()
    rules = Cluster(ChaosConfig(data=tmp_path / "rules"))
    started.clear()
    rules.start()
    rules.stop()
    assert rules.model is None and "AZURE_OPENAI_ENDPOINT" not in started[0]
