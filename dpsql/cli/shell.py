"""`dpsql shell`: an interactive SQL shell, and its batch mode, over the DB-API driver.

The shell is only a client of :func:`dpsql.connect` (as litecli is of its driver): every query
goes through the driver, which analyses, charges and noises it; the shell adds prompt_toolkit
editing (history, multi-line statements ended by ``;``, completion from the metadata, SQL
highlighting), result rendering (:mod:`dpsql.cli.output`) and backslash commands
(:mod:`dpsql.cli.commands`).

Batch mode: ``-c "SQL"`` (psql's ``-c``; ``-e`` is epsilon, as in every dpsql command) or a
script on standard input (when it is not a terminal) runs the statements and commands in order
and stops with exit status 1 at the first error. The options shared with the other commands
come from :mod:`dpsql.cli.options`.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import dpsql
from dpsql.cli.backend import backend_options, ledger_argument, no_ledger_option, spark_argument
from dpsql.cli.commands import CommandError, QuitShell, run_command
from dpsql.cli.completion import sql_completer
from dpsql.cli.options import (
    analyst_option,
    analyst_required,
    database_option,
    delta_option,
    epsilon_option,
    format_option,
    ledger_option,
    metadata_option,
    raw_option,
)
from dpsql.cli.output import release_line, render_rows, row_count, with_interval_columns
from dpsql.cli.script import Statement, script_items, statement_complete
from dpsql.errors import Error

if TYPE_CHECKING:
    from dpsql.metadata import Metadata

# ---------------------------------------------------------------------------------------------
# The session
# ---------------------------------------------------------------------------------------------


class Shell:
    """One session: a DB-API connection, the metadata it was opened with, and the settings
    backslash commands change (per-query epsilon and delta, output format)."""

    def __init__(self, conn: Any, metadata: Metadata, *, analyst: str, epsilon: float,
                 delta: float, owner: bool = False, fmt: str = "table",
                 interactive: bool = False) -> None:
        self.conn = conn
        self.metadata = metadata
        self.analyst = analyst
        self.epsilon = epsilon
        self.delta = delta
        #: the noise mechanism of each query (\mechanism changes it)
        self.mechanism = "laplace"
        self.owner = owner
        self.fmt = fmt
        #: a terminal session: results taller than the screen go through the pager
        self.interactive = interactive
        self.pager = True  # \pager off turns it off
        self.expanded = False  # \x: one block per row
        #: \o FILE: where results go instead of standard output
        self.output: Path | None = None

    # -- output -------------------------------------------------------------------------------

    def echo(self, text: str = "", *, err: bool = False) -> None:
        click.echo(text, err=err)

    def show_result(self, text: str) -> None:
        """Query results: to the \\o file, through the pager when taller than the terminal
        (interactive sessions), or to standard output."""
        if self.output is not None:
            with self.output.open("a", encoding="utf-8") as out:
                out.write(text + "\n")
            return
        if self.interactive and self.pager and sys.stdout.isatty():
            height = shutil.get_terminal_size().lines
            if text.count("\n") + 1 > height - 2:
                click.echo_via_pager(text + "\n")
                return
        click.echo(text)

    def error(self, message: str) -> None:
        """One red line on standard error (colour is dropped when it is not a terminal)."""
        click.echo(click.style(f"error: {message}", fg="red"), err=True)

    def budget_status(self) -> Any | None:
        """The driver's BudgetStatus, or None when there is no ledger to ask."""
        try:
            return self.conn.budget
        except Error:
            return None

    # -- running ------------------------------------------------------------------------------

    def run_query(self, sql: str) -> None:
        """Run one SQL statement through the driver and print rows and the release line."""
        cur = self.conn.cursor()
        try:
            cur.execute(sql, epsilon=self.epsilon, delta=self.delta, mechanism=self.mechanism)
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
            release = cur.release
        finally:
            cur.close()
        shown, cells = with_interval_columns(names, rows, release)
        self.show_result(render_rows(shown, cells, self.fmt, expanded=self.expanded))
        status = self.budget_status()
        remaining = (status.epsilon_remaining, status.delta_remaining) if status else None
        # Footers go to standard error in every format: the data stay alone on standard
        # output (or in the \o file), ready to be piped.
        self.echo(row_count(len(rows)), err=True)
        self.echo(release_line(release, remaining), err=True)

    def run(self, item: Statement) -> bool:
        """Run one statement or command; print any error as one line. True if it succeeded.

        Raises QuitShell for ``\\q``.
        """
        try:
            if item.command:
                run_command(self, item.text)
            else:
                self.run_query(item.text)
        except CommandError as err:
            self.error(err.message)
            return False
        except Error as err:
            self.error(err.message + _where(err, item))
            caret = _caret(err, item)
            if caret:
                self.echo(caret, err=True)
            return False
        except (QuitShell, KeyboardInterrupt):
            raise
        except Exception as err:  # a bug must not end the session with a traceback
            self.error(f"internal error ({type(err).__name__}: {err}); please report this "
                       "dpsql bug with the statement that caused it")
            return False
        return True

    def run_all(self, items: Iterable[Statement], *, stop_on_error: bool) -> bool:
        """Run ``items`` in order; with ``stop_on_error`` stop at the first failure."""
        ok = True
        for item in items:
            if not self.run(item):
                ok = False
                if stop_on_error:
                    break
        return ok


def _caret(err: Error, item: Statement) -> str:
    """psql's two lines under a parse error: the statement's line, and a caret under the
    offending token ("" when the error has no position)."""
    if err.position is None:
        return ""
    line, column = err.position
    lines = item.text.splitlines() or [""]
    if not 1 <= line <= len(lines):
        return ""
    prefix = f"LINE {item.line + line - 1}: "
    text = lines[line - 1]
    if line == 1:  # the statement may start mid-line in the script: show it from its start
        text = " " * (item.column - 1) + text
        column += item.column - 1
    return f"{prefix}{text}\n{' ' * (len(prefix) + column - 1)}^"


def _where(err: Error, item: Statement) -> str:
    """The ' (line L, column C)' of a parse error, counted in the script or buffer typed."""
    if err.position is None:
        return ""
    line, column = err.position
    if line == 1:
        column += item.column - 1
    return f" (line {item.line + line - 1}, column {column})"


# ---------------------------------------------------------------------------------------------
# Completion and the interactive loop
# ---------------------------------------------------------------------------------------------

def _history(path: Path) -> Any:
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
        return FileHistory(str(path))
    except OSError:
        return InMemoryHistory()  # an unwritable cache folder must not stop the shell


def interact(shell: Shell, history_path: Path) -> int:
    """The prompt_toolkit loop. Ctrl-C clears the line, Ctrl-D (or ``\\q``) exits 0."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.filters import Condition
    from prompt_toolkit.lexers import PygmentsLexer
    from pygments.lexers.sql import SqlLexer

    # Enter inserts a newline until the statement is complete (ends with ';'). Read the main
    # buffer, not the focused one: during Ctrl-R the search buffer has the focus, and a
    # condition that flipped with its text moved the search between prompt_toolkit's inline
    # and toolbar search controls, so typed text landed in the statement instead.
    multiline = Condition(lambda: not statement_complete(session.default_buffer.text))
    session: PromptSession[str] = PromptSession(
        lexer=PygmentsLexer(SqlLexer),
        completer=sql_completer(shell.metadata),
        complete_while_typing=True,
        history=_history(history_path),
        multiline=multiline,
        prompt_continuation=lambda width, line, wrap: "...> ".rjust(width),
    )
    while True:
        try:
            text = session.prompt("dpsql> ")
        except KeyboardInterrupt:
            continue  # the line is discarded; the session goes on
        except EOFError:
            return 0
        try:
            shell.run_all(script_items(text), stop_on_error=False)
        except QuitShell:
            return 0
        except KeyboardInterrupt:
            shell.error("interrupted")


def _banner(shell: Shell, database: str) -> str:
    status = shell.budget_status()
    left = (f"budget left: epsilon {status.epsilon_remaining:g}, delta "
            f"{status.delta_remaining:g}" if status else "no ledger")
    return (f"dpsql shell: analyst {shell.analyst} on {database} ({left})\n"
            f"each query spends epsilon {shell.epsilon:g}, delta {shell.delta:g} (only joins of "
            "private tables use delta); \\help lists commands, Ctrl-D quits")


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _run_batch(shell: Shell, texts: Sequence[str]) -> int:
    """Batch mode: each -c text (or the piped script) in order, as psql runs repeated -c;
    exit 1 at the first error (the rest is not run), 0 after \\q or the end."""
    try:
        for text in texts:
            if not shell.run_all(script_items(text), stop_on_error=True):
                return 1
    except QuitShell:
        return 0
    return 0


def _remote_shell(url: str, epsilon: float, delta: float, fmt: str,
                  sql: Sequence[str] | None,
                  raw_counts: bool = False) -> int:
    """The shell over a `dpsql serve` connection: the analyst-facing schema comes from the
    server (``SHOW dpsql.schema``), the analyst is the URL's authenticated user."""
    from dpsql.remote import RemoteConnection

    conn = RemoteConnection(url, epsilon=epsilon, delta=delta, raw_counts=raw_counts)
    try:
        shell = Shell(conn, conn.schema, analyst=conn.analyst, epsilon=epsilon, delta=delta,
                      fmt=fmt, interactive=sql is None and sys.stdin.isatty())
        if sql is not None or not sys.stdin.isatty():
            return _run_batch(shell, sql if sql is not None else [sys.stdin.read()])
        click.echo(_banner(shell, conn.where))
        return interact(shell, history_file())
    finally:
        conn.close()


def history_file() -> Path:
    """The shell's persistent history: ``$DPSQL_HOME/shell_history`` (default under
    ``~/.cache/dpsql``)."""
    from dpsql.demo import dpsql_home

    return dpsql_home() / "shell_history"


@click.command("shell")
@click.argument("database_arg", required=False,
                metavar="[DATABASE|postgresql://USER@HOST:PORT/DB]")
@database_option(help="DuckDB database file, or a dpsql server's postgresql:// URL (the "
                 "DATABASE argument does the same, as psql's dbname); with --backend spark, the "
                 "Spark catalog database.")
@metadata_option(help="Metadata YAML describing the reachable tables (not needed with --demo).")
@analyst_option(help="Who is charged in the ledger (default: $DPSQL_ANALYST; with --demo: "
                "demo).")
@ledger_option()
@no_ledger_option
@epsilon_option(help="Epsilon each query spends (\\epsilon changes it).")
@delta_option(help="Delta each query may spend; only joins between private tables use it "
              "(\\delta changes it).")
@format_option(help="How results are printed (\\format changes it).")
@raw_option()
@click.option("--owner", is_flag=True,
              help="You own the data: enables \\explain (shows data-dependent values).")
@click.option("--demo", is_flag=True,
              help="Use the demo shop (built on first use) as analyst 'demo'.")
@click.option("-c", "--command", "commands", metavar="SQL", multiple=True,
              help="Run SQL (statements and backslash commands) and exit; exit 1 on an error. "
              "Repeatable, as in psql: each runs in order.")
@click.option("--execute", "execute_sql", metavar="SQL", hidden=True,
              help="Deprecated spelling of -c/--command.")
@backend_options
def command(database_arg: str | None, database: str | None, metadata: Path | None,
            analyst: str | None, ledger: str | None, no_ledger: bool, epsilon: float,
            delta: float, fmt: str, raw_counts: bool, owner: bool, demo: bool,
            commands: tuple[str, ...],
            execute_sql: str | None, backend: str, spark_master: str | None) -> int:
    """Interactive SQL shell with differential privacy (batch mode with -c or a piped script).

    SQL statements end with ';'. Results are noisy; each query spends the per-query epsilon
    from your budget, and a rejected query spends nothing. Type \\help for the commands.
    A privacy ledger is required (the metadata's `ledger:`, --ledger or $DPSQL_LEDGER) unless
    the data owner passes --no-ledger. With a server URL the shell is a client of `dpsql
    serve`, which holds the metadata and the ledger (pass only -e/--delta/-f/-c).
    """
    # repeated -c run in order, as in psql (only the last one used to run, silently)
    sql: list[str] | None = list(commands) or None
    if execute_sql is not None:
        if sql is not None:
            raise click.UsageError("--execute is the old spelling of -c/--command; pass one")
        click.echo("dpsql: --execute is deprecated; use -c/--command", err=True)
        sql = [execute_sql]
    if database_arg is not None and database is not None and database_arg != database:
        raise click.UsageError(f"two databases: {database_arg} and -d {database}; pass one")
    database = database if database is not None else database_arg
    if database is not None and database.startswith(("postgresql://", "postgres://")):
        if metadata is not None or analyst or ledger is not None or no_ledger or owner or demo:
            raise click.UsageError("a server URL takes no --metadata, --analyst, --ledger, "
                                   "--no-ledger, --owner or --demo: the server holds them")
        return _remote_shell(database, epsilon, delta, fmt, sql, raw_counts)
    if demo:
        if backend != "duckdb":
            raise click.UsageError("--demo is a DuckDB database; drop --backend spark")
        if database is not None or metadata is not None:
            raise click.UsageError("--demo chooses the database and metadata; drop DATABASE "
                                   "and --metadata, or drop --demo")
        from dpsql.demo import DEMO_ANALYST, create_demo, existing_demo

        if existing_demo() is None:
            click.echo("building the demo shop database (once)...", err=True)
        files = create_demo()
        database, metadata = str(files.database), files.metadata
        analyst = analyst or DEMO_ANALYST
    if metadata is None:
        raise click.UsageError("missing --metadata M.yaml (or use --demo)")
    # as in `dpsql query`: the analyst is who is charged; uncharged, the owner runs it
    analyst = (analyst or "owner") if no_ledger else analyst_required(analyst)
    spark = spark_argument(backend, spark_master)
    from dpsql.metadata import load_metadata

    md = load_metadata(metadata)
    conn = dpsql.connect(database, md,
                         analyst=analyst, ledger=ledger_argument(md, ledger, no_ledger),
                         backend=backend, spark=spark, raw_counts=raw_counts)
    try:
        shell = Shell(conn, conn.metadata, analyst=analyst, epsilon=epsilon, delta=delta,
                      owner=owner, fmt=fmt, interactive=sql is None and sys.stdin.isatty())
        if sql is not None or not sys.stdin.isatty():
            return _run_batch(shell, sql if sql is not None else [sys.stdin.read()])
        where = conn.database if backend == "spark" else (database or ":memory:")
        click.echo(_banner(shell, where))
        return interact(shell, history_file())
    finally:
        conn.close()
