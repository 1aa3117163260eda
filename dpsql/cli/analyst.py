"""`dpsql analyst`: the data owner's analyst accounts for server mode (add, remove, list, passwd,
set).

Accounts live in the ledger (one set per ledger file): the SCRAM-SHA-256 verifier of each
password (never the password) and the owner's policy: the tables the analyst may query, a cap
on one query's epsilon and delta, and the defaults used when the analyst's session sets none
(:mod:`dpsql.accounting.analysts`). A password is read from a hidden prompt, typed twice, or
with ``--password-stdin`` as the first line of standard input (for scripts). ``list`` shows
names and policies, never verifiers. Ledger problems and invalid values raise dpsql errors,
which ``dpsql.cli.main.main`` prints as one line with exit status 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dpsql.accounting import AnalystAccount, Ledger
from dpsql.accounting.analysts import check_account
from dpsql.cli.options import ledger_option, ledger_path, metadata_option
from dpsql.errors import OperationalError


def _ledger_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """-l/--ledger, and -m/--metadata whose ledger: line is the default (dpsql.cli.options)."""
    f = metadata_option(help="Take the ledger from this metadata file's ledger: line.")(f)
    return ledger_option()(f)


_stdin_option = click.option(
    "--password-stdin", is_flag=True,
    help="Read the password from the first line of standard input instead of a prompt.",
)


class _Clear:
    """The value of an option given as 'none' (a cap, default) or 'all' (tables): unset it."""

    def __repr__(self) -> str:
        return "CLEAR"


CLEAR = _Clear()


class _Amount(click.ParamType):
    """A float, or (when ``clearable``) 'none' to remove the setting."""

    name = "number"

    def __init__(self, clearable: bool) -> None:
        self.clearable = clearable

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, (float, _Clear)):
            return value
        if self.clearable and str(value).strip().lower() == "none":
            return CLEAR
        try:
            return float(value)
        except ValueError:
            hint = " or 'none'" if self.clearable else ""
            self.fail(f"{value!r} is not a number{hint}", param, ctx)


class _Tables(click.ParamType):
    """Comma-separated table names, or (when ``clearable``) 'all' for every declared table."""

    name = "tables"

    def __init__(self, clearable: bool) -> None:
        self.clearable = clearable

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, (list, _Clear)):
            return value
        if self.clearable and str(value).strip().lower() == "all":
            return CLEAR
        names = [t.strip() for t in str(value).split(",")]
        if not all(names):
            self.fail(f"{value!r}: give table names separated by commas, e.g. orders,products",
                      param, ctx)
        return names


def _policy_options(clearable: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    none = " ('none' removes it)" if clearable else ""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for flag, what in reversed((
            ("--max-epsilon", f"Cap on one query's epsilon{none}."),
            ("--max-delta", f"Cap on one query's delta{none}."),
            ("--default-epsilon", f"Epsilon of a query when the session sets none{none}."),
            ("--default-delta", f"Delta of a query when the session sets none{none}."),
        )):
            f = click.option(flag, type=_Amount(clearable), help=what)(f)
        tables = ("Tables the analyst may query, comma-separated ('all': every table the "
                  "metadata declares)." if clearable else
                  "Tables the analyst may query, comma-separated (default: every table).")
        return click.option("--tables", type=_Tables(clearable), help=tables)(f)

    return decorate


def _read_password(name: str, from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        password = line.removesuffix("\n").removesuffix("\r")
        if not password:
            raise click.UsageError("--password-stdin: the first line of standard input is empty")
        return password
    value: str = click.prompt(f"Password for {name}", hide_input=True,
                              confirmation_prompt=True)
    return value


def _policy(options: dict[str, Any]) -> dict[str, Any]:
    """The policy keyword arguments the options give (CLEAR becomes None; absent: left out)."""
    return {key: None if value is CLEAR else value for key, value in options.items()
            if value is not None}


def _describe(account: AnalystAccount) -> dict[str, Any]:
    return {
        "name": account.name,
        "tables": None if account.tables is None else sorted(account.tables),
        "max_epsilon": account.max_epsilon,
        "max_delta": account.max_delta,
        "default_epsilon": account.default_epsilon,
        "default_delta": account.default_delta,
    }


def _line(account: AnalystAccount) -> str:
    d = _describe(account)
    tables = "all tables" if d["tables"] is None else "tables " + ",".join(d["tables"])

    def amount(key: str) -> str:
        return "-" if d[key] is None else repr(d[key])

    return (f"{account.name}: {tables}; max epsilon {amount('max_epsilon')}, max delta "
            f"{amount('max_delta')}; default epsilon {amount('default_epsilon')}, default delta "
            f"{amount('default_delta')}")


@click.group("analyst")
def command() -> None:
    """Add, remove, list analysts' accounts and set their passwords and policy (data owner)."""


@command.command("add")
@click.argument("name")
@_ledger_options
@_stdin_option
@_policy_options(clearable=False)
def add(name: str, ledger: str | None, metadata: Path | None, password_stdin: bool,
        **options: Any) -> None:
    """Create the account NAME (asks for its password)."""
    ledger = ledger_path(ledger, metadata)
    policy = _policy(options)
    check_account(name, **policy)  # refuse a bad name or policy before asking for a password
    password = _read_password(name, password_stdin)
    with Ledger(ledger) as book:
        account = book.add_analyst(name, password, **policy)
    click.echo(f"added {_line(account)}")


@command.command("remove")
@click.argument("name")
@_ledger_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def remove(name: str, ledger: str | None, metadata: Path | None, yes: bool) -> None:
    """Delete the account NAME (its budgets and audit history stay)."""
    ledger = ledger_path(ledger, metadata)
    with Ledger(ledger, create=False) as book:
        if not yes:
            click.confirm(f"Remove the account of {name}? They can no longer log in",
                          abort=True)
        book.remove_analyst(name)
    click.echo(f"removed {name}")


@command.command("list")
@_ledger_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def list_accounts(ledger: str | None, metadata: Path | None, as_json: bool) -> None:
    """Show every account's name and policy (never its password verifier)."""
    ledger = ledger_path(ledger, metadata)
    with Ledger(ledger, create=False) as book:
        accounts = book.analysts()
    if as_json:
        click.echo(json.dumps([_describe(a) for a in accounts], indent=2))
    elif not accounts:
        click.echo("no analyst accounts; add one with 'dpsql analyst add NAME --ledger L'")
    else:
        for account in accounts:
            click.echo(_line(account))


@command.command("passwd")
@click.argument("name")
@_ledger_options
@_stdin_option
def passwd(name: str, ledger: str | None, metadata: Path | None, password_stdin: bool) -> None:
    """Set a new password for NAME."""
    ledger = ledger_path(ledger, metadata)
    with Ledger(ledger, create=False) as book:
        if book.analyst(name) is None:  # before asking for a password that cannot be used
            raise OperationalError(
                f"there is no analyst account '{name}' in {ledger}; see 'dpsql analyst list'")
        password = _read_password(name, password_stdin)
        book.set_password(name, password)
    click.echo(f"password of {name} changed")


@command.command("set")
@click.argument("name")
@_ledger_options
@_policy_options(clearable=True)
def set_policy(name: str, ledger: str | None, metadata: Path | None, **options: Any) -> None:
    """Change NAME's policy; options not given stay as they are."""
    ledger = ledger_path(ledger, metadata)
    policy = _policy(options)
    if not policy:
        raise click.UsageError("nothing to change: give --tables, --max-epsilon, --max-delta, "
                               "--default-epsilon or --default-delta")
    with Ledger(ledger, create=False) as book:
        account = book.update_analyst(name, **policy)
    click.echo(f"updated {_line(account)}")
