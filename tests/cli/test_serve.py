"""`dpsql serve`'s ledger (dpsql/cli/serve.py): --ledger, else the metadata's ledger: line, else
$DPSQL_LEDGER, as in every command; refused before anything listens when none names an existing
ledger file. (Serving itself is tested on a real process in tests/server.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsql.cli.main import cli

METADATA = "tables:\n  orders:\n    columns:\n      order_id: {max_freq: 1}\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.yaml").write_text(METADATA)
    (tmp_path / "owned.yaml").write_text("ledger: owned.sqlite\n" + METADATA)
    return tmp_path


def serve(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["serve", *args, "--listen", "127.0.0.1:0"])
    return done.exit_code, done.output


def test_no_ledger_anywhere_is_a_usage_error(folder: Path) -> None:
    code, out = serve("-m", "plain.yaml")
    assert code == 2 and "name the privacy ledger" in out


def test_the_metadata_s_ledger_is_the_default_and_must_exist(folder: Path) -> None:
    code, out = serve("-m", "owned.yaml")
    assert code == 2 and "no such ledger file" in out and "owned.sqlite" in out


def test_the_environment_is_the_last_default(folder: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSQL_LEDGER", str(folder / "env.sqlite"))
    code, out = serve("-m", "plain.yaml")
    assert code == 2 and "env.sqlite" in out


def test_another_ledger_than_the_metadata_s_is_refused(folder: Path) -> None:
    code, out = serve("-m", "owned.yaml", "-l", "other.sqlite")
    assert code == 2 and "names the ledger" in out
