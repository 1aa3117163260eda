"""`dpsql audit log` (dpsql/cli/audit.py) through click's CliRunner on a real ledger file, and
once as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsql.accounting import Ledger, database_identity
from dpsql.cli.main import cli, main


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    """alice: a released charge, a refunded one, a reset; bob: one charge on another database."""
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "ledger.sqlite")
    with Ledger(path) as book:
        book.set_budget("shop.duckdb", "alice", 1.0, 1e-6)
        book.set_budget("other.duckdb", "bob", 1.0, 0.0)
        first = book.charge("shop.duckdb", "alice", fingerprint="f1", epsilon=0.25, delta=1e-8,
                            mechanism="gaussian", sql="SELECT COUNT(*) AS n FROM t WHERE x > ?",
                            params=[Decimal("2.5")])
        book.record_release("shop.duckdb", "alice", first, [(41.7,)], columns=["n"])
        second = book.charge("shop.duckdb", "alice", fingerprint="f2", epsilon=0.5, delta=0.0,
                             mechanism="laplace", sql="SELECT SUM(x) FROM t", params=[])
        book.refund("shop.duckdb", "alice", second)
        book.reset("shop.duckdb", "alice")
        book.charge("other.duckdb", "bob", fingerprint="f3", epsilon=0.1, delta=0.0,
                    mechanism="laplace", sql="SELECT 1", params=None)
    return path


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_text_log_shows_every_entry_oldest_first(ledger):
    done = run("audit", "log", "--ledger", ledger)
    assert done.exit_code == 0, done.output
    shop = database_identity("shop.duckdb")
    lines = done.output.splitlines()
    heads = [line.split("  ")[0] for line in lines if not line.startswith(" ")]
    assert heads == ["charge #1", "charge #2", "reset #1", "charge #3"]
    assert f"alice  {shop}" in lines[0]
    assert lines[1] == "    epsilon 0.25  delta 1e-08  gaussian  [released, reset #1]"
    assert lines[2] == "    sql:      SELECT COUNT(*) AS n FROM t WHERE x > ?"
    assert lines[3] == '    params:   [{"$decimal": "2.5"}]'
    assert lines[4] == '    columns:  ["n"]'
    assert lines[5].startswith("    released: 1 row(s) at ")
    assert lines[6] == "      [41.7]"
    assert "    epsilon 0.5  delta 0.0  laplace  [refunded]" in lines
    assert "    cleared 1 charge(s): epsilon 0.25, delta 1e-08" in lines
    assert "    epsilon 0.1  delta 0.0  laplace  [not released]" in lines


def test_json_log_filters_and_limit(ledger):
    entries = json.loads(run("audit", "log", "--ledger", ledger, "--json").output)
    assert [(e["kind"], e["id"]) for e in entries] == [
        ("charge", 1), ("charge", 2), ("reset", 1), ("charge", 3)]
    first = entries[0]
    assert first["sql"] == "SELECT COUNT(*) AS n FROM t WHERE x > ?"
    assert first["params"] == [{"$decimal": "2.5"}]
    assert first["released"] == {"columns": ["n"], "rows": [[41.7]]}
    assert (first["epsilon"], first["delta"], first["counts"]) == (0.25, 1e-8, False)
    assert entries[1]["state"] == "refunded" and entries[1]["refunded_at"] is not None
    assert entries[2]["charges_cleared"] == 1 and entries[2]["epsilon_cleared"] == 0.25
    assert entries[3]["params"] is None and entries[3]["counts"] is True

    bob = json.loads(run("audit", "log", "--ledger", ledger, "--json", "--analyst", "bob").output)
    assert [e["id"] for e in bob] == [3]
    # --database takes a path as connections do: relative, absolute, ./ all name one database
    on_shop = json.loads(run("audit", "log", "--ledger", ledger, "--json", "--database",
                             "./shop.duckdb").output)
    assert [(e["kind"], e["id"]) for e in on_shop] == [("charge", 1), ("charge", 2), ("reset", 1)]
    last = json.loads(run("audit", "log", "--ledger", ledger, "--json", "--limit", "2").output)
    assert [(e["kind"], e["id"]) for e in last] == [("reset", 1), ("charge", 3)]
    none = run("audit", "log", "--ledger", ledger, "--analyst", "carol")
    assert none.output.strip() == "the audit log has no entries matching the filters"


def test_errors(ledger, tmp_path, capsys):
    code = main(["audit", "log", "--ledger", str(tmp_path / "absent.sqlite")])
    err = capsys.readouterr().err
    assert code == 1 and "does not exist" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "absent.sqlite").exists()
    code = main(["audit", "log", "--ledger", ledger, "--limit", "-1"])
    assert code == 2 and "--limit" in capsys.readouterr().err


def test_real_process_audit_log(ledger):
    exe = Path(sys.executable).with_name("dpsql")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "dpsql.cli.main"]
    env = {k: v for k, v in os.environ.items() if k != "DPSQL_LEDGER"}
    done = subprocess.run([*command, "audit", "log", "--ledger", ledger, "--json"],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 4
