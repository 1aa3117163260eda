"""`dpsql query`: answer one SQL query privately and print the noisy result."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

import dpsql
from dpsql.budget import CALIBRATIONS, MECHANISMS
from dpsql.cli.backend import backend_options, ledger_argument, no_ledger_option, spark_argument
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
from dpsql.cli.output import json_value, release_line, render_rows, with_interval_columns
from dpsql.errors import Error
from dpsql.metadata import load_metadata


@click.command("query")
@metadata_option(required=True)
@database_option()
@epsilon_option(help="Epsilon the query spends.")
@delta_option(help="Delta the query may spend (only joins between private tables use it).")
@analyst_option(help="Who is charged in the ledger (default: $DPSQL_ANALYST); not needed "
                "with --no-ledger.")
@click.option("--mechanism", type=click.Choice(MECHANISMS), default="laplace", show_default=True,
              help="Noise: Laplace, or Gaussian (needs --delta > 0; not for joins of private "
                   "tables).")
@click.option("--calibration", type=click.Choice(CALIBRATIONS), default="analytic",
              show_default=True,
              help="Gaussian sigma: the exact (analytic) accountant, or the classical formula "
                   "(epsilon < 1 only).")
@ledger_option()
@no_ledger_option
@format_option()
@raw_option()
@backend_options
@click.argument("sql")
def command(metadata: Path, database: str | None, epsilon: float, delta: float,
            mechanism: str, calibration: str, analyst: str | None, ledger: str | None,
            no_ledger: bool, fmt: str, raw_counts: bool, backend: str,
            spark_master: str | None, sql: str) -> int:
    """Run SQL with differential privacy and print the noisy rows and the release record.

    A privacy ledger is required (the metadata's `ledger:`, --ledger or $DPSQL_LEDGER) unless
    the data owner passes --no-ledger; so is --analyst, the one charged.
    """
    spark = spark_argument(backend, spark_master)
    try:
        md = load_metadata(metadata)
        ledger_arg = ledger_argument(md, ledger, no_ledger)
        who = analyst_required(analyst) if ledger_arg is not None else (analyst or "owner")
        with dpsql.connect(database, md, analyst=who, ledger=ledger_arg, backend=backend,
                           spark=spark, raw_counts=raw_counts) as conn:
            cur = conn.cursor()
            cur.execute(sql, epsilon=epsilon, delta=delta, mechanism=mechanism,
                        calibration=calibration)
            names = [d[0] for d in cur.description or ()]
            rows = cur.fetchall()
            release = cur.release
            assert release is not None  # execute() succeeded
    except Error as err:
        if fmt != "json":
            raise
        click.echo(json.dumps(err.to_json()))
        return 1
    if fmt == "json":
        click.echo(json.dumps({"columns": names, "rows": [list(r) for r in rows],
                               "release": asdict(release)}, default=json_value))
    else:
        # data on standard output, footers on standard error, in every format (as psql -c)
        click.echo(render_rows(*with_interval_columns(names, rows, release), fmt))
        click.echo(release_line(release), err=True)
    return 0
