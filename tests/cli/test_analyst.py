"""`dpsql analyst add|remove|list|passwd|set` (dpsql/cli/analyst.py) through click's CliRunner
on real ledger files, and once as a real process reading the password from stdin."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from scramp import ScramClient, ScramException, ScramMechanism

from dpsql.accounting import AnalystAccount, Ledger
from dpsql.cli.main import cli, main


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    return str(tmp_path / "ledger.sqlite")


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def logs_in(account: AnalystAccount | None, password: str) -> bool:
    """A full SCRAM-SHA-256 exchange against the stored verifier."""
    assert account is not None
    server = ScramMechanism("SCRAM-SHA-256").make_server(lambda _: account.scram_auth_info())
    client = ScramClient(["SCRAM-SHA-256"], account.name, password)
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    try:
        server.set_client_final(client.get_client_final())
    except ScramException:
        return False
    return True


def account(ledger: str, name: str) -> AnalystAccount | None:
    with Ledger(ledger) as book:
        return book.analyst(name)


def test_add_with_a_confirmed_prompt_and_policy(ledger):
    done = run("analyst", "add", "alice", "--ledger", ledger, "--tables", "orders, Products",
               "--max-epsilon", "1", "--max-delta", "1e-6", "--default-epsilon", "0.1",
               "--default-delta", "0", input="s3cret\ns3cret\n")
    assert done.exit_code == 0, done.output
    assert "s3cret" not in done.output  # hidden input is not echoed
    assert "added alice: tables orders,products; max epsilon 1.0, max delta 1e-06; " \
           "default epsilon 0.1, default delta 0.0" in done.output
    alice = account(ledger, "alice")
    assert alice == AnalystAccount("alice", frozenset({"orders", "products"}), 1.0, 1e-6, 0.1,
                                   0.0)
    assert logs_in(alice, "s3cret") and not logs_in(alice, "other")


def test_a_mistyped_confirmation_is_asked_again(ledger):
    done = run("analyst", "add", "alice", "--ledger", ledger,
               input="first\nsecond\nright\nright\n")
    assert done.exit_code == 0 and "do not match" in done.output.lower()
    assert logs_in(account(ledger, "alice"), "right")


def test_password_stdin_reads_one_line(ledger):
    done = run("analyst", "add", "bob", "--ledger", ledger, "--password-stdin",
               input="pass word  \r\nignored\n")
    assert done.exit_code == 0, done.output
    assert logs_in(account(ledger, "bob"), "pass word  ")  # only the line ending is removed
    empty = run("analyst", "add", "carol", "--ledger", ledger, "--password-stdin", input="\n")
    assert empty.exit_code == 2 and "first line of standard input is empty" in empty.output
    assert account(ledger, "carol") is None


def test_list_shows_policies_never_verifiers(ledger):
    run("analyst", "add", "bob", "--ledger", ledger, "--password-stdin", input="p\n")
    run("analyst", "add", "alice", "--ledger", ledger, "--password-stdin", "--max-epsilon",
        "0.5", input="p\n")
    text = run("analyst", "list", "--ledger", ledger)
    assert text.exit_code == 0
    assert text.output.splitlines() == [
        "alice: all tables; max epsilon 0.5, max delta -; default epsilon -, default delta -",
        "bob: all tables; max epsilon -, max delta -; default epsilon -, default delta -",
    ]
    listed = json.loads(run("analyst", "list", "--ledger", ledger, "--json").output)
    assert listed == [
        {"name": "alice", "tables": None, "max_epsilon": 0.5, "max_delta": None,
         "default_epsilon": None, "default_delta": None},
        {"name": "bob", "tables": None, "max_epsilon": None, "max_delta": None,
         "default_epsilon": None, "default_delta": None},
    ]
    salt, stored, server, _ = account(ledger, "alice").scram_auth_info()  # type: ignore[union-attr]
    for secret in (salt, stored, server):
        assert secret.hex() not in text.output and secret.hex() not in json.dumps(listed)


def test_set_changes_only_what_is_given_and_none_or_all_clears(ledger):
    run("analyst", "add", "alice", "--ledger", ledger, "--password-stdin", "--tables", "orders",
        "--max-epsilon", "1", "--default-epsilon", "0.5", input="p\n")
    done = run("analyst", "set", "alice", "--ledger", ledger, "--max-delta", "1e-7")
    assert done.exit_code == 0 and "max delta 1e-07" in done.output
    assert account(ledger, "alice") == AnalystAccount("alice", frozenset({"orders"}), 1.0, 1e-7,
                                                      0.5, None)
    run("analyst", "set", "alice", "--ledger", ledger, "--tables", "all", "--max-epsilon", "none")
    assert account(ledger, "alice") == AnalystAccount("alice", None, None, 1e-7, 0.5, None)
    nothing = run("analyst", "set", "alice", "--ledger", ledger)
    assert nothing.exit_code == 2 and "nothing to change" in nothing.output
    bad = run("analyst", "set", "alice", "--ledger", ledger, "--max-epsilon", "lots")
    assert bad.exit_code == 2 and "'lots' is not a number or 'none'" in bad.output
    assert logs_in(account(ledger, "alice"), "p")  # the password is untouched


def test_passwd_changes_the_password(ledger):
    run("analyst", "add", "alice", "--ledger", ledger, "--password-stdin", input="old\n")
    done = run("analyst", "passwd", "alice", "--ledger", ledger, input="new\nnew\n")
    assert done.exit_code == 0 and "password of alice changed" in done.output
    alice = account(ledger, "alice")
    assert logs_in(alice, "new") and not logs_in(alice, "old")


def test_remove_asks_and_keeps_the_budget(ledger):
    run("analyst", "add", "alice", "--ledger", ledger, "--password-stdin", input="p\n")
    with Ledger(ledger) as book:
        book.set_budget("shop.duckdb", "alice", 1.0, 0.0)
    assert run("analyst", "remove", "alice", "--ledger", ledger, input="n\n").exit_code == 1
    assert account(ledger, "alice") is not None
    done = run("analyst", "remove", "alice", "--ledger", ledger, "--yes")
    assert done.exit_code == 0 and "removed alice" in done.output
    assert account(ledger, "alice") is None
    with Ledger(ledger) as book:
        assert book.status("shop.duckdb", "alice").epsilon_total == 1.0


def test_errors_are_one_readable_line(ledger, capsys, monkeypatch):
    def main_run(*args: str) -> tuple[int, str]:
        code = main(list(args))
        return code, capsys.readouterr().err

    for args in (("passwd", "nobody"), ("list",), ("remove", "x", "--yes"),
                 ("set", "x", "--max-epsilon", "1")):
        code, err = main_run("analyst", *args, "--ledger", ledger)
        assert code == 1 and "does not exist" in err, args  # only add creates a ledger
    assert not Path(ledger).exists()
    run("analyst", "add", "alice", "--ledger", ledger, "--password-stdin", input="p\n")
    for args, message in (
        (("analyst", "passwd", "bob"), "no analyst account 'bob'"),
        (("analyst", "remove", "bob", "--yes"), "no analyst account 'bob'"),
        (("analyst", "set", "bob", "--max-epsilon", "1"), "no analyst account 'bob'"),
        (("analyst", "add", "alice", "--password-stdin"), "already has an account"),
        (("analyst", "add", " x", "--password-stdin"), "surrounding spaces"),
        (("analyst", "add", "x", "--max-epsilon", "0", "--password-stdin"),
         "max_epsilon must be > 0"),
        (("analyst", "add", "x", "--max-epsilon", "1", "--default-epsilon", "2",
          "--password-stdin"), "above max_epsilon"),
    ):
        monkeypatch.setattr(sys, "stdin", io.StringIO("p\n"))
        code, err = main_run(*args, "--ledger", ledger)
        assert code == 1 and message in err and "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1


def test_real_process_add_from_stdin_and_list(ledger):
    exe = Path(sys.executable).with_name("dpsql")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "dpsql.cli.main"]
    env = {k: v for k, v in os.environ.items() if k != "DPSQL_LEDGER"}
    added = subprocess.run(
        [*command, "analyst", "add", "alice", "--ledger", ledger, "--password-stdin",
         "--max-epsilon", "0.5"],
        input="hunter2\n", capture_output=True, text=True, timeout=60, env=env, check=False)
    assert added.returncode == 0, added.stderr
    listed = subprocess.run([*command, "analyst", "list", "--ledger", ledger, "--json"],
                            capture_output=True, text=True, timeout=60, env=env, check=False)
    assert listed.returncode == 0, listed.stderr
    assert [a["name"] for a in json.loads(listed.stdout)] == ["alice"]
    assert logs_in(account(ledger, "alice"), "hunter2")
    assert b"hunter2" not in Path(ledger).read_bytes()


def test_the_ledger_comes_from_the_metadata_as_in_every_command(ledger, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owned.yaml").write_text(
        "ledger: owned.sqlite\ntables:\n  t:\n    columns:\n      x: {max_freq: 1}\n")
    added = run("analyst", "add", "carol", "-m", "owned.yaml", "--password-stdin",
                input="pw-carol\n")
    assert added.exit_code == 0, added.output
    assert account(str(tmp_path / "owned.sqlite"), "carol") is not None
    listed = run("analyst", "list", "-m", "owned.yaml")
    assert listed.output.startswith("carol")
    other = CliRunner().invoke(cli, ["analyst", "list", "-m", "owned.yaml", "-l", ledger])
    assert other.exit_code == 2 and "names the ledger" in other.output
