"""The real ``ledger`` entry point: exit codes and error lines as a shell sees them."""

from __future__ import annotations

import click
import pytest

from ledger import cli as ledger_cli
from ledger.errors import ConfigurationError, LakeTargetError


@click.command()
@click.argument("code", type=int)
def exits(code: int) -> None:
    """A command that ends through ctx.exit(code), as click commands do."""
    click.get_current_context().exit(code)


@click.command()
def fails() -> None:
    raise ConfigurationError("LEDGER_DATABASE_URL is not a valid SQLAlchemy URL")


@click.command()
def quotes() -> None:
    """A message quoting a ledger string with an escape sequence in it (hand-edited data)."""
    raise LakeTargetError("lake holds another ledger's rows (row 3 is event \x1b[2J)", target="x")


@pytest.fixture(autouse=True)
def extra_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = (
        *ledger_cli.COMMANDS,
        f"{__name__}:exits",
        f"{__name__}:fails",
        f"{__name__}:quotes",
    )
    monkeypatch.setattr(ledger_cli, "COMMANDS", specs)


@pytest.mark.parametrize("code", [0, 1, 2])
def test_ctx_exit_codes_reach_the_shell(code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["ledger", "exits", str(code)])
    with pytest.raises(SystemExit) as raised:
        ledger_cli.main()
    assert raised.value.code == code


def test_ledger_errors_are_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["ledger", "fails"])
    with pytest.raises(SystemExit) as raised:
        ledger_cli.main()
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err == "ledger: LEDGER_DATABASE_URL is not a valid SQLAlchemy URL\n"


def test_a_ledger_string_in_an_error_cannot_drive_the_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["ledger", "quotes"])
    with pytest.raises(SystemExit):
        ledger_cli.main()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "row 3 is event \\x1b[2J)" in err


def test_a_mistyped_command_is_exit_2_with_the_nearest_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["ledger", "reprot"])
    with pytest.raises(SystemExit) as raised:
        ledger_cli.main()
    assert raised.value.code == 2
    assert "No such command 'reprot'. Did you mean 'report'" in capsys.readouterr().err
