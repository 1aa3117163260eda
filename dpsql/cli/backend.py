"""The ``--backend`` and ``--spark-master`` options of `query`, `shell`, `explain` and
`metadata build`, and the ``--no-ledger`` rule of `query` and `shell` (the shared options are in
:mod:`dpsql.cli.options`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from dpsql.metadata import Metadata

BACKEND_CHOICES = ("duckdb", "spark")


def backend_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--backend duckdb|spark`` and ``--spark-master URL`` to a click command."""
    func = click.option(
        "--spark-master", metavar="URL",
        help="Spark master for --backend spark: local[2], spark://host:7077, yarn, ...",
    )(func)
    return click.option(
        "--backend", type=click.Choice(BACKEND_CHOICES), default="duckdb", show_default=True,
        help="Where exact aggregates run: embedded DuckDB, or Spark (pip install 'dpsql[spark]'"
             "; -d then names the Spark catalog database).",
    )(func)


def spark_argument(backend: str, spark_master: str | None) -> str | None:
    """The ``spark=`` argument of :func:`dpsql.connect` for these options (UsageError if the
    combination is wrong)."""
    if backend == "spark":
        if not spark_master:
            raise click.UsageError("--backend spark needs --spark-master URL (e.g. local[2])")
        return spark_master
    if spark_master:
        raise click.UsageError("--spark-master is only used with --backend spark")
    return None


def no_ledger_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--no-ledger``: the data owner's explicit choice to run uncharged."""
    return click.option(
        "--no-ledger", is_flag=True,
        help="Run uncharged, with no budget and no answer cache (the data owner's choice); "
             "without it a ledger is required.",
    )(func)


def ledger_argument(metadata: Metadata, ledger: str | Path | None, no_ledger: bool) -> Any:
    """The ``ledger=`` argument of :func:`dpsql.connect` for ``--ledger``/``--no-ledger``.

    Mirrors the driver's rule with the command line's words: a ledger must be named (in the
    metadata, with ``--ledger`` or, failing both, ``$DPSQL_LEDGER``) unless ``--no-ledger`` is
    given; UsageError otherwise, and for ``--no-ledger`` with a ledger named on the command
    line or in the metadata (``$DPSQL_LEDGER`` is only a default: ``--no-ledger`` overrides it).
    """
    from dpsql.cli.options import LEDGER_ENV, ledger_default
    from dpsql.dbapi import UNSET

    if no_ledger:
        if ledger is not None:
            raise click.UsageError("--ledger and --no-ledger contradict each other; pass one")
        if metadata.ledger is not None:
            raise click.UsageError(
                f"the metadata names the privacy ledger {metadata.ledger}, which every query "
                "is charged to; drop --no-ledger")
        return None
    if ledger is None and metadata.ledger is not None:
        return UNSET  # the driver takes the metadata's (resolved relative to its file)
    chosen = ledger_default(None if ledger is None else str(ledger), None)
    if chosen is None:
        raise click.UsageError(
            "no privacy ledger: name one in the metadata (`ledger:`), pass --ledger PATH, set "
            f"${LEDGER_ENV}, or pass --no-ledger to run uncharged as the data owner")
    return chosen
