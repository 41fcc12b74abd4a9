"""``ledger gateway new-key`` / ``hash-key``, and a configuration mistake at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger.cli import cli, main
from ledger.gateway import hash_key


def test_new_key_prints_a_key_and_the_digest_to_store() -> None:
    result = CliRunner().invoke(cli, ["gateway", "new-key"])
    assert result.exit_code == 0
    key_line, digest_line = result.output.strip().splitlines()
    key = key_line.split()[-1]
    assert digest_line.split()[-1] == hash_key(key)


def test_hash_key_reads_stdin_so_the_key_stays_out_of_the_shell_history() -> None:
    result = CliRunner().invoke(cli, ["gateway", "hash-key"], input="lgw-abc\n")
    assert result.exit_code == 0 and result.output.strip() == hash_key("lgw-abc")
    assert CliRunner().invoke(cli, ["gateway", "hash-key"], input="\n").exit_code == 2


def test_a_bad_configuration_is_refused_before_binding(tmp_path: Path) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text('[gateway]\nauth = "none"\nmodels = { x = ["nobody:m"] }\n')
    result = CliRunner().invoke(cli, ["gateway", "--config", str(config)])
    assert result.exit_code != 0
    assert 'gateway.models."x"[0]' in str(result.exception)


def test_a_missing_ledger_is_exit_2_before_anything_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text('[gateway]\nauth = "none"\nmodels = { x = ["openai:gpt-4o-mini"] }\n')
    monkeypatch.setenv("LEDGER_DATABASE_URL", f"sqlite:///{tmp_path / 'ledger.db'}")
    monkeypatch.setattr("sys.argv", ["ledger", "gateway", "--config", str(config)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "there is no ledger database" in err and "ledger gateway on" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.toml"]  # no journal


def test_a_gateway_that_serves_no_model_says_how_to_add_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text('[gateway]\nauth = "none"\n')
    env = {**os.environ, "LEDGER_DATABASE_URL": sqlite_url}
    command = [sys.executable, "-c", "from ledger.cli import main; main()"]
    with subprocess.Popen(
        [*command, "gateway", "--config", str(config), "--port", "0"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    ) as gateway:
        assert gateway.stderr is not None
        lines = [gateway.stderr.readline() for _ in range(2)]
        gateway.terminate()
    assert "no model is served yet" in lines[0] and "[gateway.models]" in lines[0]
    assert lines[1].startswith("ledger gateway on")
