"""Draft a metadata file from a DuckDB database or from tables in Spark (owner-side; README.md,
"Metadata").

The draft holds each table's row count, each column's max frequency and DuckDB type. Observed
numeric ranges and small sets of distinct values are written as YAML *comments*: clamping
bounds and releasable domains are privacy decisions the data owner makes, never something
derived from the data and applied automatically.

Everything in the draft describes the private data: it is for the data owner, not analysts.

With ``unit`` ("TABLE.COLUMN"), the draft declares that privacy unit and proposes each private
table's path to it from key names and the data (:mod:`dpsql.metadata.build_units`); with several
("TABLE.COLUMN" each), it declares them all and proposes each table's path to each
(:mod:`dpsql.metadata.build_multi`).

The profiling queries are written once, in DuckDB's dialect; on Spark they run through
:class:`dpsql.backends.spark.SparkBackend` (transpiled by sqlglot, executed as Spark jobs), so
both drafts are computed by the same SQL.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import duckdb

from dpsql.errors import OperationalError, ProgrammingError
from dpsql.metadata.build_multi import unit_targets, with_units
from dpsql.metadata.build_units import with_unit
from dpsql.metadata.load import load_metadata
from dpsql.metadata.yaml_io import _emit, _flow
from dpsql.sql import quote_ident

if TYPE_CHECKING:
    from dpsql.backends.spark import SparkBackend

#: more rows than this in total turns the progress bar on
PROGRESS_ROWS = 1_000_000

_NUMERIC = {
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
    "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT",
    "FLOAT", "DOUBLE",
}  # fmt: skip


def _is_numeric(duck_type: str) -> bool:
    return duck_type in _NUMERIC or duck_type.startswith("DECIMAL")


def _plain(value: object) -> tuple[bool, object]:
    """(ok, value) with value as a YAML-friendly scalar; ok is False for values a domain or
    bound cannot hold (NaN, UUIDs, blobs, nested values, ...)."""
    if value is None or isinstance(value, bool | int | str | _dt.date):
        return True, value  # datetime is a date subclass
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
        return True, value
    if isinstance(value, float):
        return math.isfinite(value), value
    return False, value


class _Relation:
    def __init__(self, catalog: str, schema: str, name: str, *, sql: str | None = None,
                 source: str | None = None) -> None:
        self.catalog, self.schema, self.name = catalog, schema, name
        self.sql = sql or ".".join(quote_ident(p) for p in (catalog, schema, name))
        self.key = name.lower()  # the metadata's table name
        self.source = source  # the CSV/Parquet path behind it, written to the draft

    def matches(self, wanted: str) -> bool:
        parts = [p.lower() for p in wanted.split(".")]
        mine = [self.catalog.lower(), self.schema.lower(), self.name.lower()]
        return mine[-len(parts) :] == parts


def _connect(con_or_path: duckdb.DuckDBPyConnection | str | os.PathLike) -> tuple[
    duckdb.DuckDBPyConnection, str, bool
]:
    if isinstance(con_or_path, duckdb.DuckDBPyConnection):
        return con_or_path, "a DuckDB connection", False
    path = Path(con_or_path)
    if not path.is_file():
        raise OperationalError(
            f"database file {str(path)!r} does not exist; pass an existing DuckDB file"
        )
    try:
        # read-only: profiling must never modify (or lock for writing) the owner's database
        return duckdb.connect(str(path), read_only=True), str(path), True
    except duckdb.Error as exc:
        raise OperationalError(f"cannot open {str(path)!r} read-only: {exc}") from None


class _DuckDBProfiler:
    """Profiling queries on a DuckDB connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def relations(self) -> list[_Relation]:
        return _relations(self.con)

    def columns(self, rel: _Relation) -> list[tuple[str, str]]:
        return [(c[0], c[1]) for c in self.con.execute(f"DESCRIBE {rel.sql}").fetchall()]

    def fetchall(self, sql: str) -> list[tuple]:
        return self.con.execute(sql).fetchall()


class _SparkProfiler:
    """Profiling queries as Spark jobs, over the tables a SparkBackend registered."""

    def __init__(self, backend: SparkBackend) -> None:
        self.backend = backend

    def relations(self) -> list[_Relation]:
        return sorted(
            (_Relation("spark", self.backend.database or "default", name,
                       sql=quote_ident(name), source=self.backend.sources.get(name))
             for name in self.backend.tables),
            key=lambda r: r.key,
        )

    def columns(self, rel: _Relation) -> list[tuple[str, str]]:
        return list(self.backend.table_schema(rel.name).items())

    def fetchall(self, sql: str) -> list[tuple]:
        return self.backend.execute(self.backend.compile(sql))[0]


def _relations(con: duckdb.DuckDBPyConnection) -> list[_Relation]:
    rows = con.execute(
        """
        SELECT database_name, schema_name, table_name FROM duckdb_tables()
        WHERE NOT internal AND database_name IN (current_database(), 'temp')
        UNION ALL
        SELECT database_name, schema_name, view_name FROM duckdb_views()
        WHERE NOT internal AND database_name IN (current_database(), 'temp')
        """
    ).fetchall()
    return sorted((_Relation(*r) for r in rows), key=lambda r: (r.catalog, r.schema, r.key))


def _select(all_rels: list[_Relation], tables: Sequence[str] | None) -> list[_Relation]:
    if tables is None:
        chosen = list(all_rels)
    else:
        chosen = []
        for wanted in tables:
            found = [r for r in all_rels if r.matches(wanted)]
            if not found:
                names = ", ".join(r.name for r in all_rels) or "(none)"
                raise ProgrammingError(
                    f"table {wanted!r} is not in the database; its tables are: {names}"
                )
            if len(found) > 1:
                raise ProgrammingError(
                    f"{wanted!r} matches several tables ("
                    + ", ".join(f"{r.schema}.{r.name}" for r in found)
                    + "); name one as schema.table"
                )
            if found[0] not in chosen:
                chosen.append(found[0])
    seen: dict[str, _Relation] = {}
    for r in chosen:
        if r.key in seen:
            other = seen[r.key]
            raise ProgrammingError(
                f"tables {other.schema}.{other.name} and {r.schema}.{r.name} would have the same "
                "name in the metadata (schema prefixes are dropped); choose one with --table"
            )
        seen[r.key] = r
    if not chosen:
        raise ProgrammingError("the database has no tables or views to describe")
    return chosen


def spark_profiling_backend(
    spark: Any,
    *,
    database: str | None = None,
    sources: Mapping[str, str] | None = None,
    tables: Sequence[str] | None = None,
) -> SparkBackend:
    """A SparkBackend holding the tables to profile: every ``sources`` entry (name -> CSV or
    Parquet path), plus the catalog tables ``tables`` of ``database`` not among them; with
    neither, every table of ``database`` in the Spark catalog. ``spark`` is a SparkSession or a
    master URL."""
    from dpsql.backends import open_backend

    backend: Any = open_backend("spark", database, None, spark)  # a SparkBackend
    try:
        for name, path in (sources or {}).items():
            backend.register(name.lower(), path)
        wanted = [t for t in tables or () if t.lower() not in backend.tables]
        if not sources and not tables:
            wanted = backend.catalog_tables()
        for name in wanted:
            backend.register(name.lower())
    except BaseException:
        backend.close()
        raise
    return backend


def build_metadata(
    con_or_path: duckdb.DuckDBPyConnection | str | os.PathLike | SparkBackend,
    tables: Sequence[str] | None = None,
    *,
    public: Sequence[str] = (),
    progress: bool = False,
    domain_max: int = 50,
    ledger: str | None = None,
    unit: str | Sequence[str] | None = None,
) -> str:
    """Profile a DuckDB database (or Spark tables) and return a draft metadata YAML text (our
    format).

    ``con_or_path`` is an open connection, a database file (opened read-only), or a
    :class:`~dpsql.backends.spark.SparkBackend` whose registered tables are profiled with
    Spark jobs (see :func:`spark_profiling_backend`; tables with a source get ``source:``
    in the draft). ``tables``
    restricts the draft to these tables (``name`` or ``schema.name``); ``public`` marks tables
    as public. Per column: one grouped query gives the max frequency (NULL counts as a value),
    the number of distinct values and the min/max; columns with at most ``domain_max`` distinct
    values get a commented candidate domain, numeric columns commented bounds. ``ledger`` is
    written as the draft's ``ledger:`` line, as given (a relative path is relative to the
    metadata file). ``unit`` ("TABLE.COLUMN") declares the privacy unit and proposes the
    paths (:mod:`dpsql.metadata.build_units`); a sequence of several declares them all
    (:mod:`dpsql.metadata.build_multi`; one is the same as ``unit`` itself). The text loads
    with :func:`dpsql.metadata.load_metadata`, unless a private table got no path, or only
    paths that conflict (it says so).
    """
    if not isinstance(con_or_path, (duckdb.DuckDBPyConnection, str, os.PathLike)):
        backend: Any = con_or_path  # a SparkBackend (its module imports pyspark: not here)
        return _build(_SparkProfiler(backend), f"Spark (master {backend.master})", tables,
                      public, progress, domain_max, ledger, unit)
    con, origin, owned = _connect(con_or_path)
    try:
        return _build(_DuckDBProfiler(con), origin, tables, public, progress, domain_max,
                      ledger, unit)
    except duckdb.Error as exc:
        raise OperationalError(f"profiling {origin} failed: {exc}") from None
    finally:
        if owned:
            con.close()


def _build(
    con: _DuckDBProfiler | _SparkProfiler,
    origin: str,
    tables: Sequence[str] | None,
    public: Sequence[str],
    progress: bool,
    domain_max: int,
    ledger: str | None = None,
    unit: str | Sequence[str] | None = None,
) -> str:
    units = [unit] if isinstance(unit, str) else list(unit or ())
    chosen = _select(con.relations(), tables)
    public_keys: set[str] = set()
    for name in public:
        match = [r for r in chosen if r.matches(name)]
        if not match:
            raise ProgrammingError(
                f"--public {name!r} is not one of the tables being described; add it with --table"
            )
        public_keys.update(r.key for r in match)

    columns = {r.key: con.columns(r) for r in chosen}
    if units:  # a wrong --unit fails before the profiling, not after
        names = {k: [c[0] for c in cols] for k, cols in columns.items()}
        unit_targets(names, public_keys, units)
    rows = {r.key: con.fetchall(f"SELECT count(*) FROM {r.sql}")[0][0] for r in chosen}
    show = progress or sum(rows.values()) > PROGRESS_ROWS

    doc_tables: dict[str, dict] = {}
    table_notes: dict[str, list[str]] = {}
    column_notes: dict[tuple[str, str], list[str]] = {}
    for r in chosen:
        doc_tables[r.key] = {"rows": rows[r.key], "columns": {}}
        if r.source is not None:
            doc_tables[r.key]["source"] = r.source
        if r.key in public_keys:
            doc_tables[r.key]["public"] = True
        if rows[r.key] == 0:
            table_notes[r.key] = [
                "empty when profiled: no max frequencies; set max_freq by hand if known"
            ]
    steps = [(r, c[0], c[1]) for r in chosen for c in columns[r.key]]
    bar = (
        click.progressbar(
            steps,
            label="profiling columns",
            file=sys.stderr,
            item_show_func=lambda s: f"{s[0].name}.{s[1]}" if s else None,
        )
        if show
        else contextlib.nullcontext(steps)
    )
    with bar as items:
        for r, col_name, col_type in items:
            spec, notes = _profile_column(
                con, r, col_name, col_type, r.key in public_keys, domain_max
            )
            doc_tables[r.key]["columns"][col_name.lower()] = spec
            if notes:
                column_notes[(r.key, col_name.lower())] = notes
    md = load_metadata({"tables": doc_tables} if ledger is None
                       else {"ledger": ledger, "tables": doc_tables})
    unit_header = []
    if units:
        table_sql = {r.key: r.sql for r in chosen}
        md, missing = (with_unit(md, units[0], table_sql, con.fetchall) if len(units) == 1
                       else with_units(md, units, table_sql, con.fetchall))
        for name, note in missing.items():
            table_notes.setdefault(name, []).extend(note)
        unit_header = [
            "Unit paths are proposals (a column named like a key; at least 99% of the rows with a",
            "value in it reach a unit through it; ORPHANS notes the rest): review them, and check",
            "them with `dpsql metadata check -m FILE -d DATABASE`.",
        ]
    header = [
        f"dpsql metadata drafted by `dpsql metadata build` from {origin}.",
        "OWNER-ONLY: rows, max_freq and the commented observations describe the private data;",
        "do not share this file with analysts; share its analyst-facing schema (`dpsql",
        "metadata analyst-schema`), written again after each review.",
        "Commented bounds/domains are observations, not decisions: clamping bounds and released",
        "domains are privacy choices. Review them, then uncomment the ones you accept.",
        *unit_header,
        "",
    ]
    return _emit(md, header=header, table_notes=table_notes, column_notes=column_notes)


def _profile_column(
    con: _DuckDBProfiler | _SparkProfiler,
    rel: _Relation,
    name: str,
    duck_type: str,
    is_public: bool,
    domain_max: int,
) -> tuple[dict, list[str]]:
    col = quote_ident(name)
    numeric = _is_numeric(duck_type)
    day = duck_type in ("DATE", "TIMESTAMP")  # both take day bounds (Column.date_bounds)
    minmax = "min(v), max(v)" if numeric or day else "NULL, NULL"
    # One grouped scan per column: the largest group is mf(a) (NULL is a group, as in SQL's
    # GROUP BY), the number of groups is the number of distinct values, and min/max over the
    # group keys is the column's range.
    ((mf, n_distinct, lo, hi),) = con.fetchall(
        f"SELECT max(c), count(*), {minmax} FROM "
        f"(SELECT {col} AS v, count(*) AS c FROM {rel.sql} GROUP BY {col})"
    )
    spec: dict[str, object] = {"type": duck_type}
    notes: list[str] = []
    if mf is not None:
        spec = {"max_freq": int(mf), **spec}
    if numeric and lo is not None:
        ok_lo, lo = _plain(lo)
        ok_hi, hi = _plain(hi)
        if ok_lo and ok_hi:
            notes.append(f"bounds: {_flow([lo, hi])}  # observed min/max: review before use")
    if day and isinstance(lo, _dt.date) and isinstance(hi, _dt.date):
        # day bounds: the bins of date parts grouped by (dpsql.analysis.derived_keys); a
        # TIMESTAMP's are its first and last days (QA round 6: none were drafted)
        first, last = (v.date() if isinstance(v, _dt.datetime) else v for v in (lo, hi))
        notes.append(f"bounds: {_flow([first.isoformat(), last.isoformat()])}  # observed "
                     "first/last day: set the period the data may cover, not the data's own")
    if not is_public and 0 < n_distinct <= domain_max:
        values = [
            v
            for (v,) in con.fetchall(
                f"SELECT DISTINCT {col} FROM {rel.sql} ORDER BY 1 NULLS LAST"
            )
        ]
        plain = [_plain(v) for v in values]
        if all(ok for ok, _ in plain):
            notes.append("releasable: true  # only if these values may be published")
            notes.append(
                f"domain: {_flow({'values': [v for _, v in plain]})}"
                f"  # the {len(values)} values seen: review before use"
            )
    return spec, notes
