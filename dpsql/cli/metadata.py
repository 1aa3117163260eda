"""`dpsql metadata`: draft a metadata file from a database, check one, and write the
analyst-facing schema of one (owner-side)."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dpsql.cli.backend import backend_options, spark_argument
from dpsql.cli.options import database_option, ledger_option, metadata_option

if TYPE_CHECKING:
    from dpsql.metadata import Metadata, Table

#: the ledger a draft's `ledger:` line names when `metadata build` is not given -l/--ledger
DRAFT_LEDGER = "ledger.sqlite"

# dpsql.metadata.build and dpsql.analysis.domains (DuckDB, sqlglot) are imported by the
# commands that use them, so that `dpsql --help` does not load them.


@click.group("metadata")
def command() -> None:
    """Draft and check metadata files (max frequencies, bounds, releasable columns)."""


@command.command("build")
@database_option(
    help="DuckDB database file to profile (opened read-only); with --backend spark, the Spark "
         "catalog database (default: the current one).",
)
@click.option("--table", "-t", "tables", multiple=True,
              help="Describe only this table (repeatable; default: all tables and views).")
@click.option("--source", "sources", multiple=True, metavar="NAME=PATH",
              help="With --backend spark: profile the CSV/Parquet file(s) PATH as table NAME "
                   "(repeatable); the draft records the source.")
@click.option("--public", multiple=True, help="Mark this table as public (repeatable).")
@click.option("--unit", "units", metavar="TABLE.COLUMN", multiple=True,
              help="Declare this privacy unit (e.g. customer.c_custkey) and propose each "
                   "private table's path to it from key names and the data. Repeatable: "
                   "several unit tables (e.g. also supplier.s_suppkey), each table's path to "
                   "each; the first carries the bounds.")
@click.option("--domain-max", default=50, show_default=True, type=click.IntRange(min=0),
              help="Suggest a domain for columns with at most this many distinct values.")
@click.option("--progress/--no-progress", default=False,
              help="Show a progress bar (automatic above 1M rows in total).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the YAML here instead of standard output.")
@click.option("--force", is_flag=True,
              help="Overwrite an existing --output (and --analyst-schema) file.")
@ledger_option(help="The privacy ledger the draft's `ledger:` line names, written as given (a "
               "relative path is relative to the metadata file). Default: ledger.sqlite.")
@click.option("--analyst-schema", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the analyst-facing schema here (no max frequencies, row counts, "
                   "source paths or ledger; the privacy unit and its paths are kept); write "
                   "it again with `metadata analyst-schema` after the review.")
@backend_options
def build(
    database: str | None,
    tables: tuple[str, ...],
    sources: tuple[str, ...],
    public: tuple[str, ...],
    units: tuple[str, ...],
    domain_max: int,
    progress: bool,
    output: Path | None,
    force: bool,
    ledger: str | None,
    analyst_schema: Path | None,
    backend: str,
    spark_master: str | None,
) -> None:
    """Profile DATABASE (or tables in Spark) and write a draft metadata file to review.

    Bounds and candidate domains are written as comments: they are privacy decisions. With
    --unit, a private table with no proposed path is marked in the draft, which does not load
    until its path is declared (or the table is made public). With several --unit, so is a
    table whose proposed paths conflict (the hop rule: the draft says why and how to fix it).
    """
    unit = list(units) or None  # build_metadata: one entry is the one-unit draft
    spark = spark_argument(backend, spark_master)
    for target in (output, analyst_schema):
        if target is not None and target.exists() and not force:
            # a reviewed file holds the owner's decisions; never clobber it silently
            raise click.ClickException(f"{target} exists; pass --force to overwrite it")
    ledger = DRAFT_LEDGER if ledger is None else ledger
    if not ledger.strip():
        raise click.UsageError("--ledger is empty; name the ledger file (e.g. ledger.sqlite)")
    from dpsql.metadata import loads_metadata
    from dpsql.metadata.build import build_metadata, spark_profiling_backend

    if backend == "duckdb":
        if database is None:
            raise click.UsageError("missing --database FILE (the DuckDB database to profile)")
        if sources:
            raise click.UsageError("--source is for --backend spark; DuckDB reads --database")
        text = build_metadata(Path(database), list(tables) or None, public=public,
                              progress=progress, domain_max=domain_max, ledger=ledger,
                              unit=unit)
    else:
        spark_backend = spark_profiling_backend(
            spark, database=database,
            sources=_parse_sources(sources), tables=tables)
        try:
            # the backend holds exactly the --source and --table tables: describe them all
            text = build_metadata(spark_backend, None, public=public, progress=progress,
                                  domain_max=domain_max, ledger=ledger, unit=unit)
        finally:
            spark_backend.close()
    from dpsql.errors import ProgrammingError

    try:
        draft = loads_metadata(text)
    except ProgrammingError as exc:  # only --unit drafts: a table got no path (or conflicts)
        draft = None
        click.echo(f"warning: the draft does not load until you fix it: {exc.message}",
                   err=True)
    if analyst_schema is not None:
        if draft is None:
            click.echo(f"not written: {analyst_schema} (write it with `dpsql metadata "
                       "analyst-schema` once the draft loads)", err=True)
        else:
            from dpsql.metadata.analyst import write_analyst_schema

            write_analyst_schema(draft, analyst_schema)
            click.echo(f"wrote {analyst_schema} (analyst-facing schema of the draft: no bounds "
                       "or domains until you review them; write it again then)", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    if draft is None:
        import yaml

        n = len(yaml.safe_load(text)["tables"])
    else:
        n = len(draft.tables)
    click.echo(f"wrote {output} ({n} table{'s' if n != 1 else ''}); review it before use",
               err=True)


def _parse_sources(items: tuple[str, ...]) -> dict[str, str]:
    sources: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise click.UsageError(f"--source {item!r}: write NAME=PATH")
        sources[name.strip().lower()] = path.strip()
    return sources


def _summary(t: Table, base: Path | None, md: Metadata | None = None) -> str:
    from dpsql.metadata.unit_multi import path_text

    cols = list(t.columns.values())
    parts = [
        f"{t.name}: {'public' if t.public else 'private'}",
        *([path_text(t, md)] if md is not None and (t.unit is not None or t.unit_paths)
          else []),
        f"{len(cols)} column{'s' if len(cols) != 1 else ''}",
        f"{sum(c.max_freq is not None for c in cols)} with max_freq",
        f"{sum(c.bounds is not None for c in cols)} with bounds",
    ]
    if not t.public:
        released = [c for c in cols if c.releasable]
        parts.append(f"{len(released)} releasable")
        no_domain = [c.name for c in released if c.domain is None]
        if no_domain:
            # allowed, but GROUP BY on these is rejected until a domain is declared
            parts.append(f"no domain for {', '.join(no_domain)}")
    if t.rows is not None:
        parts.append(f"{t.rows} rows")
    if t.source is not None:
        shown = os.path.relpath(t.source, base) if base and os.path.isabs(t.source) else t.source
        found = "://" in t.source or glob.glob(t.source)
        parts.append(f"source {shown}" + ("" if found else " (no file matches)"))
    return ", ".join(parts)


@command.command("check")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@metadata_option(help="The metadata file to check (ours or FLEX's); or give it as PATH.")
@database_option(
    help="Also check the privacy unit on this DuckDB database (opened read-only): the unit's "
         "id and every 'to' column are keys, and each path's orphans and NULLs. The counts "
         "describe private rows: owner-only output.")
@click.pass_context
def check(ctx: click.Context, path: Path | None, metadata: Path | None,
          database: str | None) -> None:
    """Load and validate a metadata file (ours or FLEX's); print one line per table.

    With -d, verify the unit paths on the database: exit status 1 when a key is not unique
    (rows would belong to several units), 0 with warnings for orphans and NULLs (those rows
    belong to no unit).
    """
    from dpsql.analysis.domains import check_domains
    from dpsql.metadata import load_metadata

    if (path is None) == (metadata is None):
        raise click.UsageError("name the metadata file once: dpsql metadata check FILE, or -m "
                               "FILE")
    source = path if path is not None else metadata
    assert source is not None
    md = load_metadata(source)  # a ProgrammingError becomes one "error: ..." line in main()
    check_domains(md)  # listed values against declared types
    unit = md.privacy_unit
    if unit is not None:
        grid = "" if unit.level_base == 2.0 else f", levels base {unit.level_base:g}"
        if unit.max_sum is not None:
            grid += f", max_sum {unit.max_sum}"
        click.echo(f"privacy unit: {unit.table}.{unit.column} (max_contribution "
                   f"{unit.max_contribution}{grid}, max_groups {unit.max_groups}, "
                   f"max_rows_per_group {unit.max_rows_per_group})")
        for extra in md.extra_units:  # several units: the bounds are shared (unit_multi)
            click.echo(f"privacy unit: {extra.table}.{extra.column} (the same bounds)")
    for t in md.tables.values():
        click.echo(_summary(t, Path.cwd(), md))
        if unit is not None and t.sample_aggregate is not None and (
                t.unit is None or not t.unit.direct or t.sample_aggregate.by != t.unit.column):
            # what every SAMPLE_AGGREGATE over it refuses (dpsql.sample_aggregate.analysis)
            click.echo(f"warning: table {t.name!r}: under the privacy unit, SAMPLE_AGGREGATE "
                       "needs 'sample_aggregate: {by: ...}' naming the table's own unit column "
                       "(a direct 'unit:' path); every such query over it is refused",
                       err=True)
    if unit is not None and database is None:
        # the declared types of each path's two columns (dpsql.units.identity): what every
        # query under the unit would refuse, said before any is asked (with -d, on the types
        # a session reads, below)
        from dpsql.metadata.unit_multi import all_units, unit_view
        from dpsql.units.identity import path_type_mismatches

        mismatches = [m for u in all_units(md)
                      for m in path_type_mismatches(unit_view(md, u.table))]
        for message in dict.fromkeys(mismatches):
            click.echo(f"error: {message}", err=True)
        if mismatches:
            ctx.exit(1)
    if database is None:
        return
    if unit is None:
        click.echo("no privacy_unit declared: nothing to check on the database")
        return
    if _check_units(md, database):
        ctx.exit(1)


def _check_units(md: Metadata, database: str) -> bool:
    """Print the unit report of ``md`` on ``database`` (each unit's paths, on that unit's
    view when several are declared); True when a key is not unique."""
    from dpsql.backends import open_backend
    from dpsql.backends.types import fill_column_types
    from dpsql.metadata.unit_check import check_units, report_lines
    from dpsql.metadata.unit_multi import all_units, unit_view
    from dpsql.units.identity import check_path_types

    backend = open_backend("duckdb", database, md)
    lines: list[str] = []
    warnings: list[str] = []
    errors: list[str] = []
    try:
        # first what every query under the unit refuses (dpsql.units.identity), on the types
        # a session reads (undeclared ones from the database): a VARCHAR key compared with an
        # INTEGER column otherwise failed below as an opaque conversion error
        typed = fill_column_types(md, backend)
        for unit in all_units(typed):
            check_path_types(unit_view(typed, unit.table))
        for unit in all_units(md):
            view = unit_view(md, unit.table)
            report = check_units(view, lambda sql: backend.execute(sql)[0])
            more = report_lines(view, report)
            if md.extra_units:
                lines.append(f"unit {unit.table}.{unit.column}:")
            lines += more[0]
            warnings += more[1]
            errors += more[2]
    finally:
        backend.close()
    click.echo(f"checked on {database} (OWNER-ONLY: counts of private rows):")
    for line in lines:
        click.echo(f"  {line}")
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    for error in errors:
        click.echo(click.style(f"error: {error}", fg="red"), err=True)
    return bool(errors)


@command.command("analyst-schema")
@metadata_option(required=True, help="The owner's metadata file (ours or FLEX's).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the schema here instead of standard output.")
@click.option("--force", is_flag=True, help="Overwrite an existing --output file.")
def analyst_schema_command(metadata: Path, output: Path | None, force: bool) -> None:
    """Write the analyst-facing schema of a metadata file: tables, columns, types, releasable
    domains and bounds; never max frequencies, row counts, source paths or the ledger."""
    from dpsql.analysis.domains import check_domains
    from dpsql.metadata import load_metadata
    from dpsql.metadata.analyst import dumps_analyst_schema, write_analyst_schema

    if output is not None and output.exists() and not force:
        raise click.ClickException(f"{output} exists; pass --force to overwrite it")
    md = load_metadata(metadata)
    check_domains(md)  # the schema is what analysts write queries against: valid first
    if output is None:
        click.echo(dumps_analyst_schema(md), nl=False)
        return
    write_analyst_schema(md, output)
    n = len(md.tables)
    click.echo(f"wrote {output} ({n} table{'s' if n != 1 else ''}); share it with analysts",
               err=True)
