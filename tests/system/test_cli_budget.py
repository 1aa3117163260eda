"""`dpsql budget set/show/reset`, through dpsql.cli.main.main and once as a real process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpsql.accounting import Ledger, database_identity
from dpsql.cli.main import main


@pytest.fixture
def paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    return str(tmp_path / "ledger.sqlite"), str(tmp_path / "shop.duckdb")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def charge_many(ledger: str, database: str, n: int, epsilon: float, delta: float = 0.0) -> None:
    with Ledger(ledger) as book:
        for i in range(n):
            book.charge(database, "alice", fingerprint=f"q{i}", epsilon=epsilon, delta=delta,
                        mechanism="laplace")


def test_set_show_reset_round_trip(capsys, paths, monkeypatch):
    ledger, db = paths
    code, out, _ = run(capsys, "budget", "set", "--ledger", ledger, "--analyst", "alice",
                       "--database", db, "--epsilon", "20", "--delta", "1e-5")
    assert code == 0 and "epsilon 20.0" in out and "delta 1e-05" in out
    charge_many(ledger, db, 100, 0.1)

    code, out, _ = run(capsys, "budget", "show", "--ledger", ledger, "--analyst", "alice",
                       "--database", db)
    assert code == 0
    assert "spent:     epsilon 10.0" in out and "(100 charges)" in out
    assert "remaining: epsilon 10.0" in out
    assert "advanced (DRV)" in out and "6.30823" in out  # 0.1 sqrt(200 ln 1e6) + 10 (e^0.1 - 1)
    assert "KOV optimal" in out and "earlier charges" in out  # history truncated in text

    code, out, _ = run(capsys, "budget", "show", "--ledger", ledger, "--analyst", "alice",
                       "--database", db, "--json", "--delta-prime", "1e-6")
    assert code == 0
    report = json.loads(out)
    assert report["database"] == database_identity(db)
    assert report["epsilon_total"] == 20.0 and report["delta_total"] == 1e-5
    assert report["epsilon_spent"] == 10.0 and report["epsilon_remaining"] == 10.0
    assert report["charges"] == 100 and len(report["history"]) == 100
    composition = report["composition"]
    assert composition["homogeneous"] is True and composition["delta_prime"] == 1e-6
    assert composition["basic"]["epsilon"] == 10.0
    assert composition["advanced"]["epsilon"] == pytest.approx(6.3082, abs=1e-4)
    assert composition["kov_bound"]["epsilon"] == pytest.approx(5.7561, abs=1e-4)
    assert composition["kov_optimal"]["epsilon"] == pytest.approx(4.8)

    # reset asks first; "n" aborts and keeps the charges
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    code, _, err = run(capsys, "budget", "reset", "--ledger", ledger, "--analyst", "alice",
                       "--database", db)
    assert code == 1 and "aborted" in err
    with Ledger(ledger) as book:
        assert len(book.status(db, "alice").history) == 100

    code, out, _ = run(capsys, "budget", "reset", "--ledger", ledger, "--analyst", "alice",
                       "--database", db, "--yes")
    assert code == 0 and "remaining: epsilon 20.0" in out
    with Ledger(ledger) as book:
        status = book.status(db, "alice")
        assert status.history == () and status.epsilon_total == 20.0


def test_database_is_required_and_ledger_from_environment(capsys, paths, monkeypatch):
    ledger, db = paths
    monkeypatch.setenv("DPSQL_LEDGER", ledger)
    # no --database: a usage error, never a budget silently keyed to ":memory:"
    code, _, err = run(capsys, "budget", "set", "--analyst", "bob", "--epsilon", "1")
    assert code == 2 and "--database" in err and not Path(ledger).exists()
    code, _, _ = run(capsys, "budget", "set", "--analyst", "bob", "--epsilon", "1",
                     "--database", db)
    assert code == 0
    code, out, _ = run(capsys, "budget", "show", "--analyst", "bob", "--json", "--database", db)
    report = json.loads(out)
    assert code == 0 and report["database"] == database_identity(db)
    assert report["epsilon_total"] == 1.0
    assert report["delta_total"] == 0.0 and report["history"] == []


def test_relative_database_path_is_the_same_budget(capsys, paths):
    ledger, db = paths
    run(capsys, "budget", "set", "--ledger", ledger, "--analyst", "alice", "--database",
        "shop.duckdb", "--epsilon", "2")
    code, out, _ = run(capsys, "budget", "show", "--ledger", ledger, "--analyst", "alice",
                       "--database", db, "--json")
    assert code == 0 and json.loads(out)["epsilon_total"] == 2.0


def test_errors_are_one_readable_line(capsys, paths, tmp_path):
    ledger, db = paths
    code, out, err = run(capsys, "budget", "show", "--ledger", ledger, "--analyst", "alice",
                         "--database", db)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [err.strip()] and "does not exist" in err
    assert not Path(ledger).exists()  # show never creates a ledger

    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"garbage" * 1000)
    code, _, err = run(capsys, "budget", "set", "--ledger", str(corrupt), "--analyst", "alice",
                       "--epsilon", "1", "--database", db)
    assert code == 1 and "corrupt" in err and "Traceback" not in err
    assert corrupt.read_bytes() == b"garbage" * 1000

    code, _, err = run(capsys, "budget", "set", "--ledger", ledger, "--analyst", "alice",
                       "--epsilon", "-1")
    assert code == 2 and "--epsilon" in err  # click usage error
    code, _, err = run(capsys, "budget", "set", "--ledger", ledger, "--analyst", "alice",
                       "--epsilon", "1", "--delta", "2")
    assert code == 2 and "--delta" in err
    run(capsys, "budget", "set", "--ledger", ledger, "--analyst", "alice", "--epsilon", "1",
        "--database", db)
    code, _, err = run(capsys, "budget", "show", "--ledger", ledger, "--analyst", "alice",
                       "--database", db, "--delta-prime", "0")
    assert code == 2 and "--delta-prime" in err


def test_real_process_budget_show(paths):
    ledger, db = paths
    with Ledger(ledger) as book:
        book.set_budget(db, "alice", 1.0, 1e-6)
    charge_many(ledger, db, 3, 0.1, 1e-8)
    exe = Path(sys.executable).with_name("dpsql")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "dpsql.cli.main"]
    env = {k: v for k, v in os.environ.items() if k != "DPSQL_LEDGER"}
    done = subprocess.run(
        [*command, "budget", "show", "--ledger", ledger, "--analyst", "alice",
         "--database", db, "--json"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["epsilon_spent"] == 0.3 and report["delta_spent"] == 3e-8
    assert report["epsilon_remaining"] == 0.7 and report["charges"] == 3

    failed = subprocess.run(
        [*command, "budget", "show", "--ledger", ledger + ".missing", "--analyst", "alice",
         "--database", db],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
