"""The shell's backslash commands: a small registry (as litecli/pgcli do) and the built-ins.

A command is a function ``run(shell, argument)`` registered with a usage line and a help text;
``\\help`` lists them from the registry, so a command without help cannot hide. Handlers talk to
the shell only through the attributes and methods of :class:`dpsql.cli.shell.Shell`, and report
problems by raising :class:`CommandError` (the shell prints it as one error line).

Analyst-facing output never shows max frequencies or row counts of private tables: those are
data-dependent (docs/design.md, "Privacy model"). Bounds and domains are shown: they are
declared policy.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsql.budget import MECHANISMS
from dpsql.cli.output import FORMATS
from dpsql.errors import Error

if TYPE_CHECKING:
    from dpsql.cli.shell import Shell
    from dpsql.metadata import Column, Domain, Metadata, Table

Handler = Callable[["Shell", str], None]


class CommandError(Exception):
    """A backslash command failed; ``message`` says what to do instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QuitShell(Exception):
    """Raised by ``\\q`` to end the session (exit status 0)."""


@dataclass(frozen=True)
class Command:
    """One backslash command. ``name`` includes the backslash."""

    name: str
    usage: str
    help: str
    run: Handler
    owner_only: bool = False
    aliases: tuple[str, ...] = ()


class Registry:
    """Backslash commands by name (and alias), in registration order."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}
        self._names: dict[str, Command] = {}

    def register(self, name: str, usage: str, help: str, *, owner_only: bool = False,
                 aliases: tuple[str, ...] = ()) -> Callable[[Handler], Handler]:
        """Decorator registering ``run(shell, argument)`` as ``name``."""

        def decorate(run: Handler) -> Handler:
            command = Command(name, usage, help, run, owner_only, aliases)
            for key in (name, *aliases):
                if key in self._names:
                    raise ValueError(f"backslash command {key} is registered twice")
                self._names[key] = command
            self._commands[name] = command
            return run

        return decorate

    def __iter__(self) -> Iterator[Command]:
        return iter(self._commands.values())

    def names(self) -> list[str]:
        """Every name and alias (for completion)."""
        return list(self._names)

    def get(self, name: str) -> Command | None:
        return self._names.get(name)

    def lookup(self, name: str) -> Command:
        """The command called ``name``; CommandError with a suggestion if there is none."""
        command = self.get(name)
        if command is None:
            close = difflib.get_close_matches(name, self.names(), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise CommandError(f"unknown command {name}{hint} (\\help lists the commands)")
        return command


COMMANDS = Registry()


def split_command(line: str) -> tuple[str, str]:
    """``"\\describe orders;"`` -> ``("\\describe", "orders")`` (a trailing ``;`` is dropped)."""
    text = line.strip()
    name, _, argument = text.partition(" ")
    argument = argument.strip()
    while argument.endswith(";"):
        argument = argument[:-1].rstrip()
    if not argument:
        name = name.rstrip(";")
    return name, argument


def run_command(shell: Shell, line: str) -> None:
    """Run one backslash command line against ``shell``."""
    name, argument = split_command(line)
    command = COMMANDS.lookup(name)
    if command.owner_only and not shell.owner:
        raise CommandError(
            f"{command.name} is for the data owner only: it shows data-dependent values (max "
            "frequencies, sensitivities); if you own this data, reopen the shell with --owner"
        )
    command.run(shell, argument)


# ---------------------------------------------------------------------------------------------
# Built-in commands
# ---------------------------------------------------------------------------------------------


def tabulate(*args: Any, **kwargs: Any) -> str:
    """:func:`tabulate.tabulate`, imported on first use (the shell's startup does not need it)."""
    from tabulate import tabulate as _tabulate

    return _tabulate(*args, **kwargs)


def _no_argument(name: str, argument: str) -> None:
    if argument:
        raise CommandError(f"{name} takes no argument")


def _domain_text(domain: Domain | None, table: Table, column: Column, limit: int = 60) -> str:
    if domain is None:
        # groups from the data: a noisy threshold decides which exist, so delta > 0
        return "from the data (needs delta > 0)" if column.partition_selection else ""
    if domain.values is not None:
        text = ", ".join("NULL" if v is None else str(v) for v in domain.values)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    if table.public and (domain.table, domain.column) == (table.name, column.name):
        return "its own values"
    return f"{domain.table}.{domain.column}"


def _bounds_text(bounds: tuple[float, float] | None) -> str:
    if bounds is None:
        return ""
    return "[" + ", ".join(f"{b:g}" for b in bounds) + "]"


def _days_text(days) -> str:
    """Day bounds (the bins of date parts grouped by, dpsql.analysis.derived_keys)."""
    return "" if days is None else f"[{days[0].isoformat()}, {days[1].isoformat()}]"


@COMMANDS.register("\\tables", "\\tables", "List the tables you can query, public or private.",
                   aliases=("\\dt",))
def _tables(shell: Shell, argument: str) -> None:
    _no_argument("\\tables", argument)
    rows = [[t.name, "public" if t.public else "private", ", ".join(t.columns)]
            for t in shell.metadata.tables.values()]
    shell.echo(tabulate(rows, headers=["table", "kind", "columns"], tablefmt="simple"))
    if shell.metadata.privacy_unit is not None:
        shell.echo(_unit_line(shell.metadata))


def _protects(md: Metadata) -> str:
    """What a release protects under the metadata's privacy unit(s) (README, privacy units)."""
    from dpsql.metadata.unit_multi import all_units

    units = " and each ".join(f"{u.table}.{u.column}" for u in all_units(md))
    return f"privacy unit: every release protects each {units}, with every row linked to it"


def _unit_line(md: Metadata) -> str:
    return f"{_protects(md)} (\\describe TABLE shows its path)"


@COMMANDS.register(
    "\\describe", "\\describe TABLE",
    "Columns of TABLE: type, whether it may be a GROUP BY key (releasable) and over which "
    "domain, and the declared bounds SUM/AVG clamp to.",
    aliases=("\\d",),
)
def _describe(shell: Shell, argument: str) -> None:
    if not argument:
        raise CommandError("\\describe needs a table name, e.g. \\describe "
                           + next(iter(shell.metadata.tables), "orders"))
    try:
        table = shell.metadata.table(argument)
    except Error as err:
        raise CommandError(err.message) from None
    # Deliberately no max_freq and no row count: both describe the private data.
    rows = [[c.name, c.type or "", "yes" if c.releasable else "no",
             _bounds_text(c.bounds) or _days_text(c.date_bounds),
             _domain_text(c.domain, table, c)] for c in table.columns.values()]
    kind = ("public table: its values may be published" if table.public
            else "private table: only noisy aggregates are released")
    shell.echo(f"{table.name} ({kind})")
    shell.echo(tabulate(rows, headers=["column", "type", "releasable", "bounds", "domain"],
                        tablefmt="simple"))
    md = shell.metadata
    if md.privacy_unit is not None and not table.public:
        from dpsql.metadata.unit_multi import path_text

        shell.echo(f"{_protects(md)}; this table: {path_text(table, md)}")


@COMMANDS.register("\\budget", "\\budget",
                   "Your privacy budget: total, spent, remaining, and the per-query epsilon/delta.")
def _budget(shell: Shell, argument: str) -> None:
    _no_argument("\\budget", argument)
    status = shell.budget_status()
    lines = [f"analyst:   {shell.analyst}"]
    if status is None:
        lines.append("budget:    no ledger: spending is not recorded")
    else:
        total_eps = getattr(status, "epsilon_total", None)
        total_delta = getattr(status, "delta_total", None)
        if total_eps == 0 and total_delta == 0 and not status.history:
            # no budget (or one of zero): say so, as `dpsql budget show` does, not zeros
            lines.append("budget:    none on this database: every query of private tables is "
                         "refused; ask the data owner for one (dpsql budget set)")
            lines.append(f"per query: epsilon {shell.epsilon:g}  delta {shell.delta:g}")
            shell.echo("\n".join(lines))
            return
        if total_eps is not None:
            lines.append(f"budget:    epsilon {total_eps:g}  delta {total_delta:g}")
        lines.append(f"spent:     epsilon {status.epsilon_spent:g}  delta "
                     f"{getattr(status, 'delta_spent', 0.0):g}  ({len(status.history)} charges)")
        lines.append(f"remaining: epsilon {status.epsilon_remaining:g}  delta "
                     f"{status.delta_remaining:g}")
    lines.append(f"per query: epsilon {shell.epsilon:g}  delta {shell.delta:g}  "
                 "(change with \\epsilon E, \\delta D)")
    shell.echo("\n".join(lines))


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CommandError(f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise CommandError(f"{name} must be finite, got {text!r}")
    return value


@COMMANDS.register("\\epsilon", "\\epsilon [E]",
                   "Show, or set to E > 0, the epsilon each following query spends.")
def _epsilon(shell: Shell, argument: str) -> None:
    if argument:
        value = _number(argument, "epsilon")
        if value <= 0:
            raise CommandError(f"epsilon must be > 0, got {argument}")
        shell.epsilon = value
    shell.echo(f"epsilon per query: {shell.epsilon:g}")


@COMMANDS.register("\\delta", "\\delta [D]",
                   "Show, or set to 0 <= D < 1, the delta each following query may spend (only "
                   "joins between private tables use it).")
def _delta(shell: Shell, argument: str) -> None:
    if argument:
        value = _number(argument, "delta")
        if not 0 <= value < 1:
            raise CommandError(f"delta must be in [0, 1), got {argument}")
        shell.delta = value
    shell.echo(f"delta per query: {shell.delta:g}")


@COMMANDS.register("\\mechanism", "\\mechanism [laplace|gaussian]",
                   "Show or set the noise of each following query: Laplace (the default) or "
                   "Gaussian (needs delta > 0; not for joins of private tables).")
def _mechanism(shell: Shell, argument: str) -> None:
    if argument:
        if argument.lower() not in MECHANISMS:
            raise CommandError(f"unknown mechanism {argument!r}; use one of "
                               f"{', '.join(MECHANISMS)}")
        shell.mechanism = argument.lower()
    shell.echo(f"mechanism: {shell.mechanism}")


@COMMANDS.register("\\format", "\\format [table|csv|json]",
                   "Show or set how results are printed: aligned table, CSV or JSON.")
def _format(shell: Shell, argument: str) -> None:
    if argument:
        if argument.lower() not in FORMATS:
            raise CommandError(f"unknown format {argument!r}; use one of {', '.join(FORMATS)}")
        shell.fmt = argument.lower()
    shell.echo(f"format: {shell.fmt}")


@COMMANDS.register("\\x", "\\x [on|off]",
                   "Expanded display: each result row as a block of 'column | value' lines "
                   "(toggles without an argument).")
def _expanded(shell: Shell, argument: str) -> None:
    shell.expanded = _switch("\\x", argument, shell.expanded)
    shell.echo(f"expanded display is {'on' if shell.expanded else 'off'}")


@COMMANDS.register("\\pager", "\\pager [on|off]",
                   "Send results taller than the terminal through $PAGER (default less); on by "
                   "default in an interactive session (toggles without an argument).")
def _pager(shell: Shell, argument: str) -> None:
    shell.pager = _switch("\\pager", argument, shell.pager)
    shell.echo(f"pager is {'on' if shell.pager else 'off'}")


@COMMANDS.register("\\raw", "\\raw [on|off]",
                   "Show noisy counts as drawn, negative ones included (on), or clamped at 0 "
                   "(off, the default; --raw starts the shell with it on).")
def _raw(shell: Shell, argument: str) -> None:
    raw = _switch("\\raw", argument, bool(getattr(shell.conn, "raw_counts", False)))
    shell.conn.raw_counts = raw
    shell.echo(f"raw counts are {'on' if raw else 'off (clamped at 0)'}")


@COMMANDS.register("\\o", "\\o [FILE]",
                   "Append query results to FILE (footers stay on the terminal); without FILE, "
                   "back to standard output.")
def _output(shell: Shell, argument: str) -> None:
    if not argument:
        shell.output = None
        shell.echo("results go to standard output")
        return
    target = Path(argument).expanduser()
    try:
        target.open("a", encoding="utf-8").close()
    except OSError as err:
        raise CommandError(f"cannot write {argument}: {err.strerror}") from None
    shell.output = target
    shell.echo(f"results are appended to {target}")


def _switch(name: str, argument: str, current: bool) -> bool:
    if not argument:
        return not current
    if argument.lower() in ("on", "off"):
        return argument.lower() == "on"
    raise CommandError(f"{name} takes on or off, got {argument!r}")


@COMMANDS.register(
    "\\explain", "\\explain SQL",
    "Data owner only (shell opened with --owner): how SQL would be protected (stabilities, max "
    "frequencies, sensitivities, noise scale) at the current epsilon/delta. Runs nothing.",
    owner_only=True,
)
def _explain(shell: Shell, argument: str) -> None:
    if not argument:
        raise CommandError("\\explain needs a query, e.g. \\explain SELECT COUNT(*) FROM "
                           + next(iter(shell.metadata.tables), "orders"))
    # imported here: the analysis package is only needed by owners
    from dpsql.analysis.explain import explain_text

    shell.echo(explain_text(argument, shell.metadata, epsilon=shell.epsilon, delta=shell.delta))


@COMMANDS.register("\\help", "\\help [COMMAND]",
                   "List the commands, or explain one; SQL statements end with ';'.",
                   aliases=("\\?",))
def _help(shell: Shell, argument: str) -> None:
    if argument:
        name = argument if argument.startswith("\\") else "\\" + argument
        command = COMMANDS.lookup(name)
        shell.echo(f"{command.usage}\n  {command.help}")
        return
    rows = [[c.usage, c.help + (" (alias " + ", ".join(c.aliases) + ")" if c.aliases else "")]
            for c in COMMANDS]
    shell.echo("Type SQL ending with ';' (Enter continues an unfinished statement). Each query "
               "spends the per-query epsilon/delta; a rejected query spends nothing.")
    shell.echo(tabulate(rows, headers=["command", "what it does"], tablefmt="plain",
                        maxcolwidths=[None, 70]))


@COMMANDS.register("\\q", "\\q", "Quit the shell (Ctrl-D does the same).",
                   aliases=("\\quit",))
def _quit(shell: Shell, argument: str) -> None:
    _no_argument("\\q", argument)
    raise QuitShell
