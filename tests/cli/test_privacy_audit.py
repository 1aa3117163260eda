"""`dpsql audit [OPTIONS] SQL` (dpsql/cli/privacy_audit.py): the privacy audit from the command
line, on a real DuckDB file; `dpsql audit log` still reaches its subcommand."""

from __future__ import annotations

import json

import pytest

from dpsql.cli.main import main
from tests.db_files import writing

METADATA = """
tables:
  t:
    rows: 20
    columns:
      g: {type: VARCHAR, releasable: true, domain: {values: [a, b]}}
      v: {type: DOUBLE, bounds: [0, 10]}
"""


@pytest.fixture
def files(tmp_path):
    with writing(tmp_path / "t.duckdb") as con:
        con.execute("CREATE TABLE t (g VARCHAR, v DOUBLE)")
        rows = [("ab"[i % 2], float(i % 10)) for i in range(20)]
        con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    (tmp_path / "m.yaml").write_text(METADATA)
    return ["-m", str(tmp_path / "m.yaml"), "-d", str(tmp_path / "t.duckdb")]


def test_audit_prints_bounds_and_passes(files, capsys):
    code = main(["audit", *files, "--runs", "200", "--tries", "2",
                 "--confidence", "0.999999", "SELECT SUM(v) FROM t"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verdict:    PASS" in out and "max divergence >= " in out
    assert "t: row " in out and "replaced by a copy of row" in out


def test_audit_json(files, capsys):
    code = main(["audit", *files, "--runs", "100", "--tries", "1", "--json",
                 "--confidence", "0.999999", "SELECT g, COUNT(*) FROM t GROUP BY g"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "pass"
    assert report["runs"] == 100 and report["neighbours_tried"] == 1
    assert report["relation"] == "change"
    assert set(report["renyi_lower_bounds"]) == {"2.0", "8.0"}


def test_refusal_is_one_line_and_exit_1(files, capsys):
    assert main(["audit", *files, "SELECT v FROM t"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: column 'v' is neither aggregated") and "Traceback" not in err


def test_audit_log_is_still_a_subcommand(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    code = main(["audit", "log", "--ledger", str(tmp_path / "missing.sqlite")])
    assert code == 1  # the ledger does not exist: the log subcommand ran and refused
    assert "ledger" in capsys.readouterr().err


def test_remove_neighbours(files, capsys):
    code = main(["audit", *files, "--runs", "100", "--neighbours", "remove", "--tries", "2",
                 "--json", "--confidence", "0.999999", "SELECT SUM(v) FROM t"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "pass"
    assert report["relation"] == "remove" and report["neighbour"].endswith("removed")


def test_neighbours_takes_a_relation_not_a_count(files, capsys):
    assert main(["audit", *files, "--neighbours", "2", "SELECT SUM(v) FROM t"]) == 2
    assert "now --tries N" in capsys.readouterr().err


UNIT_METADATA = """
privacy_unit: {table: customer, column: c_id, max_contribution: 2}
tables:
  customer:
    columns:
      c_id: {type: INTEGER}
  orders:
    unit: o_cust
    columns:
      o_id: {type: INTEGER}
      o_cust: {type: INTEGER}
"""


@pytest.mark.parametrize("flag", [["--neighbours", "unit"], []], ids=["unit", "default"])
def test_unit_neighbours(tmp_path, capsys, flag):
    """--neighbours unit (the default under a privacy unit) on a real file: customer 1 (three
    orders) is the heaviest unit; its removal with its orders moves R2T's truncated count by
    tau = 2."""
    with writing(tmp_path / "u.duckdb") as con:
        con.execute("CREATE TABLE customer AS SELECT range::INTEGER AS c_id FROM range(1, 11)")
        con.execute("CREATE TABLE orders AS SELECT range::INTEGER AS o_id, "
                    "(CASE WHEN range < 3 THEN 1 ELSE range - 1 END)::INTEGER AS o_cust "
                    "FROM range(0, 12)")
    (tmp_path / "u.yaml").write_text(UNIT_METADATA)
    code = main(["audit", "-m", str(tmp_path / "u.yaml"), "-d", str(tmp_path / "u.duckdb"),
                 *flag, "--tries", "2", "--runs", "100", "--json",
                 "--confidence", "0.999999", "SELECT COUNT(*) FROM orders"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "pass"
    assert report["relation"] == "unit" and report["exact_change"] == 2.0
    assert report["neighbour"] == ("customer: unit 1 removed with every row linked to it "
                                   "(rows removed: customer 1, orders 3)")


def test_a_pure_r2t_release_is_claimed_with_delta_0(tmp_path, capsys):
    """The audit's bug 8: an R2T release spends no delta, so the claim printed is delta 0
    (it printed the --delta allowed), the allowance beside it; JSON carries both."""
    with writing(tmp_path / "u.duckdb") as con:
        con.execute("CREATE TABLE customer AS SELECT range::INTEGER AS c_id FROM range(1, 11)")
        con.execute("CREATE TABLE orders AS SELECT range::INTEGER AS o_id, "
                    "(range % 10 + 1)::INTEGER AS o_cust FROM range(0, 12)")
    (tmp_path / "u.yaml").write_text(UNIT_METADATA)
    args = ["audit", "-m", str(tmp_path / "u.yaml"), "-d", str(tmp_path / "u.duckdb"),
            "-e", "1", "--delta", "1e-8", "--tries", "1", "--runs", "60",
            "--confidence", "0.999999", "SELECT COUNT(*) FROM orders"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("claimed:    epsilon 1, delta 0 (what the release plan spends; 1e-08 allowed)\n"
            in out)
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["delta"] == 0.0 and report["requested_delta"] == 1e-8


def test_a_claim_spending_the_delta_allowed_says_nothing_more(files, capsys):
    code = main(["audit", *files, "-e", "1", "--delta", "0", "--runs", "60", "--tries", "1",
                 "--confidence", "0.999999", "SELECT SUM(v) FROM t"])
    out = capsys.readouterr().out
    assert code == 0 and "claimed:    epsilon 1, delta 0\n" in out


def test_unit_neighbours_without_a_unit_are_refused(files, capsys):
    assert main(["audit", *files, "--neighbours", "unit", "SELECT SUM(v) FROM t"]) == 1
    assert "needs a privacy unit" in capsys.readouterr().err
