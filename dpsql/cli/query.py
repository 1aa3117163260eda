"""`dpsql query`: answer one SQL query privately and print the noisy result."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

import dpsql
from dpsql.budget import CALIBRATIONS, MECHANISMS
from dpsql.cli.backend import backend_options, ledger_argument, no_ledger_option, spark_argument
from dpsql.cli.output import FORMATS, release_line, render_rows
from dpsql.errors import Error
from dpsql.metadata import load_metadata


@click.command("query")
@click.option("--metadata", "-m", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Metadata YAML describing the reachable tables.")
@click.option("--database", "-d", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="DuckDB database file (default: in-memory, for CSV/Parquet-backed tables); "
                   "with --backend spark, the Spark catalog database.")
@click.option("--epsilon", "-e", required=True, type=float, help="Privacy budget to spend.")
@click.option("--delta", default=0.0, show_default=True, type=float,
              help="Delta to spend (needed by joins between private tables, e.g. 1e-8).")
@click.option("--mechanism", type=click.Choice(MECHANISMS), default="laplace", show_default=True,
              help="Noise: Laplace, or Gaussian (needs --delta > 0; not for joins of private "
                   "tables).")
@click.option("--calibration", type=click.Choice(CALIBRATIONS), default="analytic",
              show_default=True,
              help="Gaussian sigma: the exact (analytic) accountant, or the classical formula "
                   "(epsilon < 1 only).")
@click.option("--analyst", "-a", default="analyst", show_default=True,
              help="Who is charged in the ledger.")
@click.option("--ledger", "-l", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Privacy ledger (SQLite); the metadata's ledger always applies.")
@no_ledger_option
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True)
@backend_options
@click.argument("sql")
def command(metadata: Path, database: Path | None, epsilon: float, delta: float,
            mechanism: str, calibration: str, analyst: str,
            ledger: Path | None, no_ledger: bool, fmt: str, backend: str,
            spark_master: str | None, sql: str) -> int:
    """Run SQL with differential privacy and print the noisy rows and the release record.

    A privacy ledger is required (the metadata's `ledger:` or --ledger) unless the data
    owner passes --no-ledger.
    """
    spark = spark_argument(backend, spark_master)
    # with Spark: a catalog database name, not a file
    target = str(database) if backend == "spark" and database is not None else database
    try:
        md = load_metadata(metadata)
        ledger_arg = ledger_argument(md, ledger, no_ledger)
        with dpsql.connect(target, md, analyst=analyst, ledger=ledger_arg, backend=backend,
                           spark=spark) as conn:
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
                               "release": asdict(release)}, default=str))
    else:
        # data on standard output, footers on standard error, in every format (as psql -c)
        click.echo(render_rows(names, rows, fmt))
        click.echo(release_line(release), err=True)
    return 0
