"""The ``--backend`` and ``--spark-master`` options of `query`, `shell` and `metadata build`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

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
