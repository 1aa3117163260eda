"""`dpsql explain`: the owner-only privacy derivation of a query (nothing is executed)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dpsql.cli.backend import backend_options, spark_argument
from dpsql.cli.options import database_option, delta_option, epsilon_option, metadata_option
from dpsql.errors import Error


@click.command("explain")
@metadata_option(required=True, help="Metadata YAML (ours or FLEX's schema.yaml).")
@epsilon_option(help="Epsilon the query would spend.")
@delta_option(help="Delta the query would spend (used only by smoothed releases).")
@click.option("--distance", "-k", default=0, show_default=True, type=click.IntRange(min=0),
              help="Report elastic_sensitivity at this distance k.")
@database_option(help="DuckDB file (opened read-only) to take undeclared column types from, so "
                   "join key types are checked; without it they are listed as unchecked. With "
                   "--backend spark: the Spark catalog database.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report.")
@backend_options
@click.argument("sql")
def command(metadata: Path, epsilon: float, delta: float, distance: int, database: str | None,
            as_json: bool, backend: str, spark_master: str | None, sql: str) -> int:
    """Show how dpsql would protect SQL: sensitivities, smoothing and noise scales.

    OWNER ONLY: the report contains max frequencies and data-dependent sensitivities.
    """
    spark = spark_argument(backend, spark_master)
    # imported here: the analysis pulls in sqlglot and DuckDB, which `dpsql --help` does not need
    from dpsql.analysis.explain import explain, explain_text
    from dpsql.backends import open_backend
    from dpsql.backends.types import fill_column_types
    from dpsql.metadata import load_metadata

    try:
        md = load_metadata(metadata)
        types_from = None  # the tables' types as the backend stores them, when there is one
        if spark is not None or database is not None:
            types_from = open_backend(backend, database, md, spark)
        if types_from is not None:
            try:
                md = fill_column_types(md, types_from)
            finally:
                types_from.close()
        if as_json:
            report = explain(sql, md, epsilon=epsilon, delta=delta, distance=distance)
            click.echo(json.dumps(report, indent=2))
        else:
            click.echo(explain_text(sql, md, epsilon=epsilon, delta=delta, distance=distance))
    except Error as err:
        if not as_json:
            raise
        click.echo(json.dumps(err.to_json()))
        return 1
    return 0
