"""`dpsql budget` (dpsql/cli/budget.py): which database a budget is keyed to (never ":memory:"
by default), and `reset` keeping the history; CliRunner on real ledger files. The round trip of
set/show/reset is in tests/system/test_cli_budget.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsql.accounting import AuditCharge, AuditReset, Ledger, database_identity
from dpsql.cli.main import cli, main

METADATA = """\
tables:
  orders:
    columns:
      order_id: {max_freq: 1}
"""


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shop.yaml").write_text(METADATA)
    return str(tmp_path / "ledger.sqlite")


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", [["set", "--epsilon", "1"], ["show"], ["reset", "--yes"]])
def test_no_database_is_a_usage_error_not_memory(ledger, command):
    done = run("budget", command[0], "--ledger", ledger, "--analyst", "alice", *command[1:])
    assert done.exit_code == 2
    assert "name the database the budget applies to: --database D.duckdb" in done.output
    assert not Path(ledger).exists()  # nothing was written, not even a new ledger


def test_metadata_without_a_database_file_is_a_usage_error(ledger):
    done = run("budget", "set", "--ledger", ledger, "--analyst", "alice", "--epsilon", "1",
               "-m", "shop.yaml")
    assert done.exit_code == 2
    assert "the metadata shop.yaml does not say which database file" in done.output
    assert "--database D.duckdb" in done.output and not Path(ledger).exists()


def test_source_backed_metadata_keys_the_budget_as_its_connections_do(ledger, tmp_path):
    import dpsql

    (tmp_path / "orders.csv").write_text("order_id\n1\n2\n")
    (tmp_path / "src.yaml").write_text(METADATA.replace(
        "  orders:\n", "  orders:\n    source: orders.csv\n"))
    done = run("budget", "set", "--ledger", ledger, "--analyst", "alice", "--epsilon", "1",
               "-m", "src.yaml")
    assert done.exit_code == 0, done.output
    with dpsql.connect(None, "src.yaml", analyst="alice", ledger=ledger) as conn:
        assert conn.database.startswith("sources:")
        assert conn.budget.epsilon_total == 1.0


def test_spark_takes_the_database_the_connection_would_use(ledger):
    done = run("budget", "set", "--ledger", ledger, "--analyst", "alice", "--epsilon", "1",
               "-m", "shop.yaml", "--backend", "spark")
    assert done.exit_code == 0 and "on spark://default" in done.output
    named = run("budget", "set", "--ledger", ledger, "--analyst", "alice", "--epsilon", "2",
                "--backend", "spark", "--database", "sales")
    assert named.exit_code == 0 and "on spark://sales" in named.output
    with Ledger(ledger) as book:
        assert book.status("spark://default", "alice").epsilon_total == 1.0
        assert book.status("spark://sales", "alice").epsilon_total == 2.0


def test_a_broken_metadata_file_is_reported(ledger, capsys):
    code = main(["budget", "set", "--ledger", ledger, "--analyst", "alice", "--epsilon", "1",
                 "-m", "absent.yaml"])
    err = capsys.readouterr().err
    assert code == 1 and "absent.yaml" in err and "does not exist" in err


def test_an_explicit_memory_database_is_allowed(ledger):
    done = run("budget", "set", "--ledger", ledger, "--analyst", "alice", "--epsilon", "1",
               "--database", ":memory:")
    assert done.exit_code == 0 and "on :memory:" in done.output


def test_setting_a_total_below_the_spending_warns(ledger):
    args = ["budget", "set", "--ledger", ledger, "--analyst", "alice", "--database",
            "shop.duckdb"]
    run(*args, "--epsilon", "1")
    with Ledger(ledger) as book:
        book.charge("shop.duckdb", "alice", fingerprint="q", epsilon=0.5, delta=0.0,
                    mechanism="laplace", sql="SELECT COUNT(*) FROM orders")
    assert "warning" not in run(*args, "--epsilon", "2").output
    lowered = run(*args, "--epsilon", "0.25")
    assert lowered.exit_code == 0
    assert "warning: the epsilon total is below what was already spent" in lowered.output
    shown = run("budget", "show", "--ledger", ledger, "--analyst", "alice", "--database",
                "shop.duckdb")
    assert "(the epsilon total is below the spending: every query is refused)" in shown.output


def test_reset_keeps_the_history(ledger):
    run("budget", "set", "--ledger", ledger, "--analyst", "alice", "--database", "shop.duckdb",
        "--epsilon", "1")
    with Ledger(ledger) as book:
        for _ in range(3):
            book.charge("shop.duckdb", "alice", fingerprint="q", epsilon=0.25, delta=0.0,
                        mechanism="laplace", sql="SELECT COUNT(*) FROM orders")
    done = run("budget", "reset", "--ledger", ledger, "--analyst", "alice", "--database",
               "shop.duckdb", "--yes")
    assert done.exit_code == 0
    assert "cleared (reset #1; the charges stay in the audit log); remaining: epsilon 1.0" \
        in done.output
    shown = json.loads(run("budget", "show", "--ledger", ledger, "--analyst", "alice",
                           "--database", "shop.duckdb", "--json").output)
    assert shown["charges"] == 0 and shown["epsilon_spent"] == 0.0
    with Ledger(ledger) as book:
        entries = book.audit(database="shop.duckdb")
    assert [type(e) for e in entries] == [AuditCharge] * 3 + [AuditReset]
    assert all(e.database == database_identity("shop.duckdb") for e in entries)
    assert [e.state for e in entries[:3]] == ["not released, reset #1"] * 3  # type: ignore[union-attr]


# -- which ledger: --ledger, else the metadata's ledger: line, else $DPSQL_LEDGER ---------------


def _with_ledger_line(tmp_path: Path, line: str) -> str:
    (tmp_path / "owned.yaml").write_text(f"ledger: {line}\n" + METADATA)
    return "owned.yaml"


def test_the_ledger_comes_from_the_metadata_when_ledger_is_absent(ledger, tmp_path):
    md = _with_ledger_line(tmp_path, "owner/ledger.sqlite")  # relative to the metadata file
    (tmp_path / "owner").mkdir()
    done = run("budget", "set", "--analyst", "alice", "-m", md, "--database", "shop.duckdb",
               "--epsilon", "3")
    assert done.exit_code == 0, done.output
    assert not Path(ledger).exists()
    with Ledger(tmp_path / "owner" / "ledger.sqlite") as book:
        assert book.status("shop.duckdb", "alice").epsilon_total == 3.0
    shown = run("budget", "show", "--analyst", "alice", "-m", md, "--database", "shop.duckdb",
                "--json")
    assert json.loads(shown.output)["ledger"] == str(tmp_path / "owner" / "ledger.sqlite")
    reset = run("budget", "reset", "--analyst", "alice", "-m", md, "--database", "shop.duckdb",
                "--yes")
    assert reset.exit_code == 0 and "reset #1" in reset.output


def test_the_metadata_ledger_beats_the_environment(ledger, tmp_path, monkeypatch):
    md = _with_ledger_line(tmp_path, "owned.sqlite")
    monkeypatch.setenv("DPSQL_LEDGER", str(tmp_path / "ambient.sqlite"))
    done = run("budget", "set", "--analyst", "alice", "-m", md, "--database", "shop.duckdb",
               "--epsilon", "1")
    assert done.exit_code == 0, done.output
    assert (tmp_path / "owned.sqlite").exists() and not (tmp_path / "ambient.sqlite").exists()


def test_the_environment_is_the_last_default(ledger, tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_LEDGER", ledger)
    done = run("budget", "set", "--analyst", "alice", "--database", "shop.duckdb",
               "--epsilon", "1")
    assert done.exit_code == 0 and Path(ledger).exists()


def test_a_ledger_other_than_the_metadata_s_is_a_usage_error(ledger, tmp_path):
    md = _with_ledger_line(tmp_path, "owned.sqlite")
    done = run("budget", "set", "--ledger", ledger, "--analyst", "alice", "-m", md,
               "--database", "shop.duckdb", "--epsilon", "1")
    assert done.exit_code == 2
    assert "names the ledger" in done.output and "omit --ledger" in done.output
    assert not Path(ledger).exists() and not (tmp_path / "owned.sqlite").exists()
    same = run("budget", "set", "--ledger", "./owned.sqlite", "--analyst", "alice", "-m", md,
               "--database", "shop.duckdb", "--epsilon", "1")
    assert same.exit_code == 0, same.output


def test_no_ledger_anywhere_is_a_usage_error(ledger):
    done = run("budget", "show", "--analyst", "alice", "--database", "shop.duckdb")
    assert done.exit_code == 2 and "name the privacy ledger: --ledger L.sqlite" in done.output


# -- show without a budget, and list ------------------------------------------------------------


def test_show_without_a_budget_says_so(ledger):
    run("budget", "set", "-l", ledger, "-a", "alice", "-d", "shop.duckdb", "-e", "1")
    done = run("budget", "show", "-l", ledger, "-a", "bob", "-d", "shop.duckdb")
    assert done.exit_code == 0
    assert done.output.startswith("bob has no budget on ")
    assert "every query is refused" in done.output and "dpsql budget set -a bob" in done.output
    assert "epsilon 0.0" not in done.output  # no zeros pretending to be a budget
    shown = json.loads(run("budget", "show", "-l", ledger, "-a", "bob", "-d", "shop.duckdb",
                           "--json").output)
    assert shown["budget"] is None and shown["analyst"] == "bob"
    # a budget of zero is a budget: shown as one
    run("budget", "set", "-l", ledger, "-a", "bob", "-d", "shop.duckdb", "-e", "0")
    zero = run("budget", "show", "-l", ledger, "-a", "bob", "-d", "shop.duckdb")
    assert "budget:    epsilon 0.0  delta 0.0" in zero.output


def test_list_every_budget_per_database(ledger):
    run("budget", "set", "-l", ledger, "-a", "bob", "-d", "shop.duckdb", "-e", "2",
        "--delta", "1e-6")
    run("budget", "set", "-l", ledger, "-a", "alice", "-d", "shop.duckdb", "-e", "1")
    run("budget", "set", "-l", ledger, "-a", "alice", "-d", "other.duckdb", "-e", "3")
    with Ledger(ledger) as book:
        book.charge("shop.duckdb", "alice", fingerprint="q", epsilon=0.25, delta=0.0,
                    mechanism="laplace")
    done = run("budget", "list", "-l", ledger, "-f", "json")
    assert done.exit_code == 0, done.output
    rows = json.loads(done.output)
    shop, other = database_identity("shop.duckdb"), database_identity("other.duckdb")
    assert [(r["database"], r["analyst"]) for r in rows] == sorted(
        [(shop, "bob"), (shop, "alice"), (other, "alice")])
    alice = next(r for r in rows if (r["database"], r["analyst"]) == (shop, "alice"))
    assert (alice["epsilon_total"], alice["epsilon_spent"], alice["epsilon_remaining"],
            alice["charges"]) == (1.0, 0.25, 0.75, 1)
    bob = next(r for r in rows if r["analyst"] == "bob")
    assert bob["delta_total"] == 1e-6
    only = run("budget", "list", "-l", ledger, "-a", "alice", "-d", "other.duckdb", "-f", "csv")
    assert only.output.splitlines()[1].startswith(f"{other},alice,3.0,0.0,3.0")
    assert len(only.output.splitlines()) == 2
    table = run("budget", "list", "-l", ledger)
    assert table.output.split("\n")[0].split()[:2] == ["database", "analyst"]


def test_list_on_a_ledger_without_budgets(ledger):
    with Ledger(ledger):
        pass
    done = run("budget", "list", "-l", ledger)
    assert done.exit_code == 0 and done.output.startswith("no budgets in ")
    assert run("budget", "list", "-l", ledger, "-f", "json").output.strip() == "[]"


# -- the budget's filter: --filter basic|renyi|zcdp, and show's (epsilon, delta) view ----------


def test_set_a_renyi_filter_and_show_its_state(ledger):
    from dpsql.accounting.curves import _laplace_curve

    done = run("budget", "set", "-l", ledger, "-a", "alice", "-d", "shop.duckdb", "-e", "1",
               "--delta", "1e-6", "--filter", "renyi")
    assert done.exit_code == 0, done.output
    assert "Rényi filter at alpha 22" in done.output
    with Ledger(ledger) as book:
        for _ in range(60):
            book.charge("shop.duckdb", "alice", fingerprint="q", epsilon=0.02, delta=0.0,
                        mechanism="discrete_laplace", curve=_laplace_curve([0.02]))
    shown = json.loads(run("budget", "show", "-l", ledger, "-a", "alice", "-d", "shop.duckdb",
                           "--json").output)
    view = shown["filter"]
    assert (view["filter"], view["alpha"], view["unit"]) == ("renyi", 22.0, "Rényi divergence")
    assert view["spent"] == pytest.approx(60 * _laplace_curve([0.02]).at(22.0))
    assert view["remaining"] == pytest.approx(view["total"] - view["spent"])
    # 60 charges of 0.02 are 1.2 by basic composition, but within (1, 1e-6) under the filter
    assert shown["epsilon_spent"] == pytest.approx(1.2)
    assert 0.5 < view["epsilon_spent_equivalent"] < 1.0
    assert shown["epsilon_remaining"] == pytest.approx(view["remaining"])
    text = run("budget", "show", "-l", ledger, "-a", "alice", "-d", "shop.duckdb").output
    assert "filter:    Rényi filter at alpha 22" in text
    assert "the largest epsilon one Laplace query surely fits" in text
    assert "not enforced (the budget's filter is)" in text
    rows = json.loads(run("budget", "list", "-l", ledger, "-f", "json").output)
    assert rows[0]["filter"] == "renyi"


def test_filter_options_are_checked(ledger):
    base = ("budget", "set", "-l", ledger, "-a", "alice", "-d", "shop.duckdb", "-e", "1")
    assert run(*base, "--filter", "pld").exit_code == 2
    refused = CliRunner().invoke(cli, [*base, "--filter", "zcdp"])
    assert refused.exit_code != 0 and "0 < delta < 1" in str(refused.exception)
    done = run(*base, "--delta", "1e-6", "--filter", "zcdp")
    assert done.exit_code == 0 and "zCDP filter" in done.output


def test_set_a_gdp_filter_and_show_its_state(ledger):
    from dpsql.accounting.curves import ALPHAS, PrivacyCurve

    done = run("budget", "set", "-l", ledger, "-a", "alice", "-d", "shop.duckdb", "-e", "1",
               "--delta", "1e-6", "--filter", "gdp")
    assert done.exit_code == 0, done.output
    assert "GDP filter (Gaussian releases only)" in done.output
    curve = PrivacyCurve(tuple(a / (2 * 42.25**2) for a in ALPHAS), 1 / (2 * 42.25**2),
                         mu=1 / 42.25)
    with Ledger(ledger) as book:
        for _ in range(50):
            book.charge("shop.duckdb", "alice", fingerprint="q", epsilon=0.02, delta=1e-8,
                        mechanism="discrete_gaussian", curve=curve)
    shown = json.loads(run("budget", "show", "-l", ledger, "-a", "alice", "-d", "shop.duckdb",
                           "--json").output)
    view = shown["filter"]
    assert (view["filter"], view["unit"]) == ("gdp", "mu^2")
    assert view["spent"] == pytest.approx(50 / 42.25**2, rel=1e-9)
    assert view["total"] == pytest.approx(0.2367043804**2, rel=1e-8)
    # half the squares spent: mu = sqrt(50)/42.25 = 0.167, about (0.63, 1e-6)-DP
    assert 0.55 < view["epsilon_spent_equivalent"] < 0.7
    assert view["largest_laplace_epsilon"] == 0.0
    assert view["largest_gaussian_epsilon"] == shown["epsilon_remaining"] > 0.5
    text = run("budget", "show", "-l", ledger, "-a", "alice", "-d", "shop.duckdb").output
    assert "filter:    GDP filter" in text
    assert "of the largest Gaussian query that fits" in text
    assert "mu^2: spent" in text


# QA round 7: under a filter the summed epsilon may pass its total while queries still fit;
# 'budget show' / 'budget set' said "every query is refused" (they compared it whatever the
# filter)
def test_a_filter_budget_past_its_summed_epsilon_is_not_called_exhausted(ledger):
    from dpsql.accounting.curves import _laplace_curve

    args = ["--ledger", ledger, "--analyst", "alice", "--database", "shop.duckdb"]
    assert run("budget", "set", *args, "--epsilon", "1", "--delta", "1e-6",
               "--filter", "renyi").exit_code == 0
    db = "shop.duckdb"
    with Ledger(ledger) as book:
        for _ in range(60):  # 1.2 summed epsilon: more than basic composition allows
            book.charge(db, "alice", fingerprint="q", epsilon=0.02, delta=0.0,
                        mechanism="discrete_laplace", sql="SELECT COUNT(*) FROM orders",
                        curve=_laplace_curve([0.02]))
        status = book.status(db, "alice")
        assert status.epsilon_spent > 1.0 and status.epsilon_remaining > 0.02
        # the filter still accepts a query: nothing is refused yet
        book.charge(db, "alice", fingerprint="q2", epsilon=0.02, delta=0.0,
                    mechanism="discrete_laplace", sql="SELECT COUNT(*) FROM customers",
                    curve=_laplace_curve([0.02]))
    shown = run("budget", "show", *args)
    assert shown.exit_code == 0
    assert "every query is refused" not in shown.output
    again = run("budget", "set", *args, "--epsilon", "1", "--delta", "1e-6", "--filter", "renyi")
    assert "every query is refused" not in again.output
    # a filter total lowered below the filter's own spending is named as such
    lowered = run("budget", "set", *args, "--epsilon", "0.1", "--delta", "1e-6",
                  "--filter", "renyi")
    assert "the filter total is below what was already spent" in lowered.output
    assert "the filter total is below the spending" in run("budget", "show", *args).output
