"""`dpsql audit log` (dpsql/cli/audit.py) through click's CliRunner on a real ledger file, and
once as a real process: charges, resets, the owner's actions and cache hits."""

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
from tests.db_files import writing


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
    assert heads == ["budget set #1", "budget set #2", "charge #1", "charge #2", "reset #1",
                     "charge #3"]
    assert f"alice  {shop}" in lines[0]
    assert lines[1] == '    {"epsilon": 1.0, "delta": 1e-06}'
    lines = lines[4:]  # the charges
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
        ("budget set", 1), ("budget set", 2), ("charge", 1), ("charge", 2), ("reset", 1),
        ("charge", 3)]
    assert entries[0]["detail"] == {"epsilon": 1.0, "delta": 1e-6}
    entries = entries[2:]
    first = entries[0]
    assert first["sql"] == "SELECT COUNT(*) AS n FROM t WHERE x > ?"
    assert first["params"] == [{"$decimal": "2.5"}]
    assert first["released"] == {"columns": ["n"], "rows": [[41.7]]}
    assert (first["epsilon"], first["delta"], first["counts"]) == (0.25, 1e-8, False)
    assert entries[1]["state"] == "refunded" and entries[1]["refunded_at"] is not None
    assert entries[2]["charges_cleared"] == 1 and entries[2]["epsilon_cleared"] == 0.25
    assert entries[3]["params"] is None and entries[3]["counts"] is True

    bob = json.loads(run("audit", "log", "--ledger", ledger, "--json", "--analyst", "bob").output)
    assert [(e["kind"], e["id"]) for e in bob] == [("budget set", 2), ("charge", 3)]
    # --database takes a path as connections do: relative, absolute, ./ all name one database
    on_shop = json.loads(run("audit", "log", "--ledger", ledger, "--json", "--database",
                             "./shop.duckdb").output)
    assert [(e["kind"], e["id"]) for e in on_shop] == [
        ("budget set", 1), ("charge", 1), ("charge", 2), ("reset", 1)]
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
    assert len(json.loads(done.stdout)) == 6


def test_owner_actions_are_logged_with_their_values_never_a_password(tmp_path, monkeypatch):
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    path = str(tmp_path / "ledger.sqlite")
    steps = [
        ["analyst", "add", "carol", "--password-stdin", "--tables", "orders",
         "--max-epsilon", "1"],
        ["analyst", "passwd", "carol", "--password-stdin"],
        ["analyst", "set", "carol", "--default-epsilon", "0.5"],
        ["budget", "set", "--analyst", "carol", "--database", str(tmp_path / "d.duckdb"),
         "--epsilon", "2", "--delta", "1e-6"],
        ["budget", "reset", "--analyst", "carol", "--database", str(tmp_path / "d.duckdb"),
         "--yes"],
        ["analyst", "remove", "carol", "--yes"],
    ]
    for step in steps:
        done = CliRunner().invoke(cli, [*step, "--ledger", path], input="pw-Secret-1\n",
                                  catch_exceptions=False)
        assert done.exit_code == 0, (step, done.output)
    entries = json.loads(run("audit", "log", "--ledger", path, "--json").output)
    assert [e["kind"] for e in entries] == ["analyst add", "analyst passwd", "analyst set",
                                            "budget set", "reset", "analyst remove"]
    assert all(e["analyst"] == "carol" for e in entries)
    assert entries[0]["detail"] == {"tables": ["orders"], "max_epsilon": 1.0, "max_delta": None,
                                    "default_epsilon": None, "default_delta": None}
    assert entries[1]["detail"] is None
    assert entries[2]["detail"] == {"default_epsilon": 0.5}
    assert entries[3]["detail"] == {"epsilon": 2.0, "delta": 1e-6}
    assert entries[3]["database"] == database_identity(str(tmp_path / "d.duckdb"))
    text = run("audit", "log", "--ledger", path).output
    assert "pw-Secret-1" not in text and "pw-Secret-1" not in json.dumps(entries)
    assert text.splitlines()[0].startswith("analyst add #1  ")


def test_a_cache_hit_is_logged_with_the_request_and_the_charge_that_paid(tmp_path,
                                                                         monkeypatch):
    """A real library session on a real DuckDB file: the repeat is answered from the cache,
    charged nothing, and the log says so, naming the first charge."""

    import dpsql

    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    db, path = str(tmp_path / "t.duckdb"), str(tmp_path / "ledger.sqlite")
    with writing(db) as con:
        con.execute("CREATE TABLE t AS SELECT i AS x FROM range(10) r(i)")
    md = {"tables": {"t": {"columns": {"x": {"max_freq": 1}}}}}
    with Ledger(path) as book:
        book.set_budget(db, "alice", 1.0, 0.0)
    with dpsql.connect(db, md, analyst="alice", ledger=path, epsilon=0.25) as conn:
        first = conn.execute("SELECT COUNT(*) AS n FROM t WHERE x > ?", [2]).fetchall()
        again = conn.execute("SELECT COUNT(*) AS n FROM t WHERE x > ?", [2]).fetchall()
        assert again == first and conn.budget.epsilon_spent == 0.25
    entries = json.loads(run("audit", "log", "--ledger", path, "--json").output)
    assert [e["kind"] for e in entries] == ["budget set", "charge", "cache hit"]
    hit = entries[2]
    assert hit["charge_id"] == entries[1]["id"] and hit["analyst"] == "alice"
    assert hit["database"] == entries[1]["database"]
    assert hit["detail"] == {"sql": "SELECT COUNT(*) AS n FROM t WHERE x > ?", "params": [2],
                             "epsilon": 0.25, "delta": 0.0}
    text = run("audit", "log", "--ledger", path).output.splitlines()
    assert text[-4].startswith("cache hit #2  ")
    assert text[-3] == (f"    epsilon 0.25  delta 0.0  [the answer of charge #{entries[1]['id']}"
                        ", not charged again]")
    assert text[-2] == "    sql:      SELECT COUNT(*) AS n FROM t WHERE x > ?"
    assert text[-1] == "    params:   [2]"
