"""The options every `dpsql` command shares, defined once so a flag means one thing everywhere.

One convention across `query`, `shell`, `explain`, `audit`, `budget`, `serve` and `metadata`
(tests/cli/test_options.py holds every command to it):

==================  ==========================================================================
``-m/--metadata``   the owner's metadata YAML (``metadata`` parameter, a path)
``-d/--database``   the DuckDB database file, or with ``--backend spark`` the catalog database
                    (``database``, a string: ``spark://NAME`` must survive unchanged)
``-e/--epsilon``    epsilon one query spends, default :data:`DEFAULT_EPSILON`; in
                    ``budget set`` the analyst's *total* epsilon (required)
``--delta``         delta one query may spend, default :data:`DEFAULT_DELTA` (only smoothed
                    releases, i.e. joins between private tables, spend it); in ``budget set``
                    the analyst's *total* delta, default 0: no delta is granted unless the
                    owner says so, so joins between private tables are refused until then
``-a/--analyst``    who is charged (default ``$DPSQL_ANALYST``)
``-l/--ledger``     the privacy ledger; default the metadata's ``ledger:`` line, then
                    ``$DPSQL_LEDGER`` (:func:`ledger_default`)
``-f/--format``     ``table``, ``csv`` or ``json`` for commands that print rows
``-c/--command``    the shell's "run this and exit" (psql's ``-c``); ``-e`` is epsilon
``--raw``           release noisy counts as drawn, below 0 included (default: clamped at 0;
                    ``dpsql.connect(raw_counts=True)``)
==================  ==========================================================================

The epsilon/delta defaults are per-query spending only; they are public constants, never
derived from data. Each decorator takes an optional ``help`` so a command can say what the flag
means *there* while the name, type and default stay the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from dpsql.cli.output import FORMATS

#: epsilon one query spends when the command line does not say (shell, query, explain, audit)
DEFAULT_EPSILON = 0.1
#: delta one query may spend when the command line does not say; only smoothed releases (joins
#: between private tables) spend it, others are charged delta 0
DEFAULT_DELTA = 1e-8
#: the environment variables behind ``--ledger`` and ``--analyst``
LEDGER_ENV = "DPSQL_LEDGER"
ANALYST_ENV = "DPSQL_ANALYST"

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

EPSILON_TYPE = click.FloatRange(min=0, min_open=True)
DELTA_TYPE = click.FloatRange(min=0, max=1, max_open=True)
# totals of `budget set`: a zero total is a (closed) budget
TOTAL_EPSILON_TYPE = click.FloatRange(min=0)
TOTAL_DELTA_TYPE = click.FloatRange(min=0, max=1)


def metadata_option(*, required: bool = False, help: str | None = None) -> Decorator:
    """``-m/--metadata PATH``: the metadata YAML (a :class:`pathlib.Path`)."""
    from pathlib import Path

    return click.option(
        "-m", "--metadata", "metadata", required=required,
        type=click.Path(dir_okay=False, path_type=Path),
        help=help or "Metadata YAML describing the reachable tables.")


def database_option(*, required: bool = False, help: str | None = None) -> Decorator:
    """``-d/--database DB``: a DuckDB file, or the Spark catalog database (a string)."""
    return click.option(
        "-d", "--database", "database", required=required, type=click.Path(dir_okay=False),
        metavar="DATABASE",
        help=help or "DuckDB database file (default: in-memory, for CSV/Parquet-backed "
        "tables); with --backend spark, the Spark catalog database.")


def epsilon_option(*, help: str | None = None) -> Decorator:
    """``-e/--epsilon E``: the epsilon one query spends (default :data:`DEFAULT_EPSILON`)."""
    return click.option(
        "-e", "--epsilon", "epsilon", type=EPSILON_TYPE, default=DEFAULT_EPSILON,
        show_default=True, help=help or "Epsilon each query spends.")


def delta_option(*, help: str | None = None) -> Decorator:
    """``--delta D``: the delta one query may spend (default :data:`DEFAULT_DELTA`)."""
    return click.option(
        "--delta", "delta", type=DELTA_TYPE, default=DEFAULT_DELTA, show_default=True,
        help=help or "Delta each query may spend; only joins between private tables (smoothed "
        "releases) spend it.")


def total_epsilon_option() -> Decorator:
    """``-e/--epsilon E`` of `budget set`: the analyst's total epsilon (required)."""
    return click.option(
        "-e", "--epsilon", "epsilon", type=TOTAL_EPSILON_TYPE, required=True,
        help="Total epsilon granted (what all the analyst's queries may spend together).")


def total_delta_option() -> Decorator:
    """``--delta D`` of `budget set`: the analyst's total delta, default 0 (none granted)."""
    return click.option(
        "--delta", "delta", type=TOTAL_DELTA_TYPE, default=0.0, show_default=True,
        help="Total delta granted. 0 grants none: only pure-DP releases are possible and joins "
        "between private tables are refused; each join spends the per-query delta (1e-8 by "
        "default), so e.g. 1e-6 allows 100 of them.")


def analyst_option(*, required: bool = False, help: str | None = None) -> Decorator:
    """``-a/--analyst NAME`` (default ``$DPSQL_ANALYST``)."""
    return click.option(
        "-a", "--analyst", "analyst", envvar=ANALYST_ENV, required=required, default=None,
        help=help or f"Who is charged in the ledger (default: ${ANALYST_ENV}).")


def ledger_option(*, help: str | None = None) -> Decorator:
    """``-l/--ledger PATH``; None when not given (resolve it with :func:`ledger_default`)."""
    return click.option(
        "-l", "--ledger", "ledger", type=click.Path(dir_okay=False), default=None,
        help=help or f"Privacy ledger (SQLite). Default: the metadata's ledger: line, else "
        f"${LEDGER_ENV}.")


def format_option(*, help: str | None = None) -> Decorator:
    """``-f/--format table|csv|json`` (default table)."""
    return click.option(
        "-f", "--format", "fmt", type=click.Choice(FORMATS), default="table",
        show_default=True, help=help or "How results are printed.")


def raw_option() -> Decorator:
    """``--raw``: keep noisy counts as drawn (``raw_counts``; default off: clamped at 0)."""
    return click.option(
        "--raw", "raw_counts", is_flag=True, default=False,
        help="Show noisy counts as drawn, negative ones included (default: clamped at 0).")


def ledger_default(ledger: str | None, metadata_ledger: str | None) -> str | None:
    """The ledger a command uses: ``--ledger``, else the metadata's ``ledger:`` line, else
    ``$DPSQL_LEDGER``, else None. (Whether ``--ledger`` may differ from the metadata's is the
    caller's rule: connections and the server refuse it.)"""
    if ledger is not None:
        return ledger
    if metadata_ledger is not None:
        return metadata_ledger
    return os.environ.get(LEDGER_ENV) or None


def ledger_path(ledger: str | None, metadata: str | os.PathLike[str] | None) -> str:
    """The ledger an owner command (`budget`, `analyst`, `audit log`, `serve`) acts on:
    ``--ledger``, else the ``-m`` metadata's ``ledger:`` line, else ``$DPSQL_LEDGER``.

    A click.UsageError when none names one, or when ``--ledger`` is another file than the
    metadata's (it would hold budgets or accounts no connection of that metadata reads).
    """
    named = None
    if metadata is not None:
        from dpsql.metadata import load_metadata

        named = load_metadata(metadata).ledger

    def real(path: str) -> str:  # as dpsql.dbapi.same_file compares them (not imported: slow)
        return os.path.realpath(os.path.expanduser(path))

    if ledger is not None and named is not None and real(named) != real(ledger):
        raise click.UsageError(
            f"the metadata {metadata} names the ledger {named}, which its connections "
            f"charge; --ledger {ledger} is another file (omit --ledger, or pass that one)")
    chosen = ledger_default(ledger, named)
    if not chosen:
        raise click.UsageError(
            "name the privacy ledger: --ledger L.sqlite, a metadata file (-m M.yaml) with a "
            f"ledger: line, or ${LEDGER_ENV}")
    return chosen


def analyst_required(analyst: str | None) -> str:
    """``analyst``, or a click.UsageError naming both ways to give one."""
    if not analyst:
        raise click.UsageError(
            f"missing --analyst NAME (or ${ANALYST_ENV}): the ledger charges queries to someone")
    return analyst
