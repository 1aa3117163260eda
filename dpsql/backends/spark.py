"""The Spark backend: exact aggregates computed by Spark SQL, for data that outgrows one machine.

What runs where: dpsql's analysis, the ledger charge, the noise (:mod:`dpsql.noise.mechanisms`) and
post-processing stay on the driver, in Python. Spark only scans, filters, joins and aggregates,
running the SQL :mod:`dpsql.rewrite` generated (never the analyst's text), transpiled by sqlglot
from DuckDB's dialect to Spark's; its exact per-bin aggregates are collected to the driver
(in parts when they pass the driver's result limit: :mod:`dpsql.backends.spark_collect`).
Nothing random ever runs in Spark.

Isolation: the backend works in its own ``SparkSession.newSession()`` (separate SQL
configuration and temporary views, shared SparkContext), so the owner's session is not changed.
Every declared table becomes a temporary view of that session, from its metadata ``source``
(Parquet when the path contains ``.parquet``, else CSV with a header; globs and directories as
Spark reads them, on any file system Spark can reach) or, without a source, from the Spark
catalog table of the same name (in ``database`` when given). Its configuration:

* ``spark.sql.ansi.enabled=false``: division by zero, failed casts and out-of-range values give
  NULL instead of an error (an error would reveal that some row exists). Integer ``+ - *``
  wrap around instead of failing in this mode, so inside the rewrite's ``TRY(...)`` they become
  ``try_add``/``try_subtract``/``try_multiply`` (NULL on overflow, as DuckDB's TRY gives) and
  ``/`` becomes ``try_divide``, casts ``TRY_CAST``. This is how DuckDB's ``TRY`` is translated.
  (On dates and intervals Spark evaluates try_add/try_subtract under a general try, so
  ``d + INTERVAL`` overflows give NULL too.) Date functions Spark evaluates with exact
  arithmetic even then (add_months, timestampadd) over a column inside TRY are refused before
  Spark runs.
* ``spark.sql.runSQLOnFiles=false``: ``parquet.`/path``` and friends cannot name files.
* ``spark.sql.variable.substitute=false``: ``${...}`` in a literal stays text, never a
  configuration value.

Sums are exact, as in DuckDB, whose SUM of an integer column is a 128-bit integer and of a
DECIMAL(p, s) a DECIMAL(38, s). Spark would sum integers in 64 bits and, without ANSI mode,
wrap around on overflow (one row could then move a sum by 2^64, far beyond its sensitivity).
So every SUM argument is typed (sqlglot's annotate_types over the registered tables' schemas)
and integer or DECIMAL arguments are summed as DECIMAL(38, s); a SUM argument of unknown type
fails closed. Such sums come back as DECIMAL(38, s) (Python ``Decimal``) where DuckDB says
HUGEINT: the same numbers.

Comments (and so Spark hints) are dropped from the generated text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.schema import MappingSchema

from dpsql.backends.base import columns_of
from dpsql.backends.spark_collect import collect_rows
from dpsql.backends.spark_sources import read_source
from dpsql.backends.spark_sql import SOURCE_DIALECT, TARGET_DIALECT, to_spark_sql
from dpsql.errors import (
    OperationalError,
    ProgrammingError,
    QueryCancelledError,
)
from dpsql.metadata import Metadata

if TYPE_CHECKING:  # pyspark is an optional extra: import it only when a backend is created
    from pyspark.sql import DataFrame, SparkSession


#: The session settings every backend session gets (see module docstring).
SESSION_CONF: dict[str, str] = {
    "spark.sql.ansi.enabled": "false",
    "spark.sql.runSQLOnFiles": "false",
    "spark.sql.variable.substitute": "false",
}



def _require_pyspark() -> Any:
    try:
        import pyspark.sql
    except ImportError:
        raise ProgrammingError(
            "the Spark backend needs pyspark: pip install 'dpsql[spark]' (Java 17+ is needed "
            "too)"
        ) from None
    return pyspark.sql


def spark_session(master: str, app_name: str = "dpsql") -> SparkSession:
    """The active SparkSession for ``master`` (``local[2]``, ``spark://host:7077``, ``yarn``,
    ...), created when there is none. Settings beyond the master come from the usual Spark
    configuration (``spark-defaults.conf``, ``$SPARK_CONF_DIR``)."""
    sql = _require_pyspark()
    try:
        return sql.SparkSession.builder.master(master).appName(app_name).getOrCreate()
    except Exception as err:  # py4j / JVM start-up errors have many classes
        raise OperationalError(
            f"cannot start Spark with master {master!r} ({type(err).__name__}): check the "
            "master URL and that Java 17+ is installed"
        ) from None


# --------------------------------------------------------------------------- types

_SIMPLE_TYPES = {
    "ByteType": "TINYINT", "ShortType": "SMALLINT", "IntegerType": "INTEGER",
    "LongType": "BIGINT", "FloatType": "FLOAT", "DoubleType": "DOUBLE",
    "StringType": "VARCHAR", "CharType": "VARCHAR", "VarcharType": "VARCHAR",
    "BooleanType": "BOOLEAN", "DateType": "DATE", "TimestampType": "TIMESTAMP WITH TIME ZONE",
    "TimestampNTZType": "TIMESTAMP", "BinaryType": "BLOB", "NullType": "NULL",
    "DayTimeIntervalType": "INTERVAL", "YearMonthIntervalType": "INTERVAL",
}  # fmt: skip


def duckdb_type_name(data_type: Any) -> str:
    """The DuckDB name of a Spark ``DataType`` (what the engine and the DB-API report)."""
    kind = type(data_type).__name__
    if kind == "DecimalType":
        return f"DECIMAL({data_type.precision},{data_type.scale})"
    collation = getattr(data_type, "collation", None) if kind == "StringType" else None
    if collation and collation.upper() != "UTF8_BINARY":
        # 'a' = 'A' under UTF8_LCASE: the analysis refuses collated keys and group keys
        # (dpsql.analysis.keytypes.collation), so the collation must reach it
        return f"VARCHAR COLLATE {collation}"
    return _SIMPLE_TYPES.get(kind, data_type.simpleString().upper())


# --------------------------------------------------------------------------- the backend


def _is_parquet(source: str) -> bool:
    return ".parquet" in source.lower()


#: Spark type names a declared (DuckDB) type may be cast to in a CSV-backed view.
_SPARK_TYPES = frozenset({
    "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL", "STRING", "BOOLEAN",
    "DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "BINARY",
})


def _with_types(frame: DataFrame, types: Mapping[str, str]) -> DataFrame:
    """``frame`` with each column of a declared type cast to it (matched case-insensitively):
    CSV schema inference guesses INT where DuckDB's guesses BIGINT, and the metadata's types
    are the ones the analysis checked."""
    declared = {k.lower(): v for k, v in types.items()}
    columns = []
    for column in frame.columns:
        quoted = "`" + column.replace("`", "``") + "`"
        spark_type = None
        if column.lower() in declared:
            try:
                spark_type = exp.DataType.build(declared[column.lower()],
                                                dialect=SOURCE_DIALECT).sql(dialect=TARGET_DIALECT)
            except SqlglotError:
                spark_type = None
        if spark_type is not None and spark_type.split("(")[0] in _SPARK_TYPES:
            columns.append(f"CAST({quoted} AS {spark_type}) AS {quoted}")
        else:
            columns.append(quoted)
    return frame.selectExpr(*columns)


class SparkBackend:
    """Exact aggregates from Spark SQL (see module docstring).

    ``metadata`` declares the tables to register (None: none yet, see :meth:`register`);
    ``spark`` is a SparkSession or a master URL; ``database`` is the Spark catalog database
    holding the tables without a ``source`` (default: the session's current database).
    A declared table without a source that the catalog lacks is left out, as the DuckDB
    backend does (:attr:`missing`; a query on it fails when it runs); a source that cannot be
    read raises OperationalError.
    """

    columnar = False  # rows are collected as Python tuples: see Backend

    dialect = TARGET_DIALECT

    def __init__(
        self,
        metadata: Metadata | None,
        spark: SparkSession | str,
        *,
        database: str | None = None,
    ) -> None:
        _require_pyspark()
        base = spark_session(spark) if isinstance(spark, str) else spark
        self.database = database
        self.master = base.sparkContext.master
        self._session = base.newSession()
        for key, value in SESSION_CONF.items():
            self._session.conf.set(key, value)
        self._views: list[str] = []
        self._sources: dict[str, str] = {}
        self._schema: MappingSchema | None = None  # of the registered tables, built on demand
        self._translated: dict[str, str] = {}  # generated SQL -> Spark SQL
        self._job_group = f"dpsql-{id(self):x}"
        self._cancelled = False
        #: declared tables neither in the catalog nor given a source
        self.missing: list[str] = []
        for table in metadata.tables.values() if metadata is not None else ():
            if table.source is None and not self._in_catalog(table.name):
                self.missing.append(table.name)
            else:
                types = {c.name: c.type for c in table.columns.values() if c.type}
                self.register(table.name, table.source, types=types)

    @property
    def session(self) -> SparkSession:
        """The backend's own session (its temporary views are the declared tables)."""
        return self._session

    def register(self, name: str, source: str | None = None, *,
                 types: Mapping[str, str] | None = None) -> None:
        """Make ``name`` a temporary view: of the file(s) ``source``, else of the catalog table
        ``name`` (in :attr:`database`). A CSV has no types: its columns get the declared
        ``types`` ({column: DuckDB type}, as the metadata gives them), others Spark's guess."""
        try:
            frame = self._read(name, source)
            if source is not None and not _is_parquet(source) and types:
                frame = _with_types(frame, types)
            frame.createOrReplaceTempView(name)
        except OperationalError:
            raise
        except Exception as err:
            what = f"source {source!r}" if source else "the Spark catalog"
            raise OperationalError(
                f"cannot register table {name!r} from {what} ({type(err).__name__}): check "
                "the metadata's source path or the catalog"
            ) from None
        if name not in self._views:
            self._views.append(name)
        if source is not None:
            self._sources[name] = source
        self._schema = None
        self._translated.clear()

    @property
    def tables(self) -> list[str]:
        """The registered tables (temporary views of :attr:`session`), in registration order."""
        return list(self._views)

    @property
    def sources(self) -> dict[str, str]:
        """{table: source path} of the registered tables read from files."""
        return dict(self._sources)

    def _read(self, name: str, source: str | None) -> DataFrame:
        if source is not None:
            if source.lower().endswith((".json", ".ndjson")):
                raise ProgrammingError(f"unsupported table source {source!r}: use CSV or Parquet")
            return read_source(self._session, source, parquet=_is_parquet(source))
        if not self._in_catalog(name):
            raise OperationalError(
                f"table {self._qualified(name)!r} is not in the Spark catalog and the metadata "
                "declares no source for it: create the table or add `source: PATH` to the metadata"
            )
        return self._session.table(self._qualified(name))

    def _qualified(self, name: str) -> str:
        return f"{self.database}.{name}" if self.database else name

    def _in_catalog(self, name: str) -> bool:
        try:
            return bool(self._session.catalog.tableExists(self._qualified(name)))
        except Exception:  # e.g. the database itself does not exist
            return False

    def catalog_tables(self) -> list[str]:
        """Names of the tables and views in :attr:`database` of the Spark catalog (not this
        backend's temporary views). By ``SHOW TABLES``, which needs no row decoding into
        catalog objects (``catalog.listTables`` does, and fails with interpreted expressions)."""
        # the owner's database name, as written (a multi-part name too): as :meth:`_qualified`
        where = "" if self.database is None else f" IN {self.database}"
        rows = self._session.sql("SHOW TABLES" + where).collect()
        return sorted(r["tableName"] for r in rows if not r["isTemporary"])

    def table_schema(self, table: str) -> dict[str, str]:
        """{column: DuckDB type name} of a registered table."""
        if table not in self._views:
            raise ProgrammingError(f"table {table!r} is not registered with this backend")
        fields = self._session.table(table).schema.fields
        return {f.name: duckdb_type_name(f.dataType) for f in fields}

    def table_schemas(self, tables: Sequence[str]) -> dict[str, dict[str, str] | None]:
        """:meth:`table_schema` of each registered table of ``tables``, None for the others."""
        return {t: self.table_schema(t) if t in self._views else None for t in tables}

    def value_range(self, table: str, column: str) -> None:
        """None: nothing keeps a Spark catalog table or its files from changing between queries,
        so every SUM keeps its clamp."""
        return None

    def domain_table(self, table: str, column: str) -> None:
        """None, as :meth:`value_range`: domains of public tables are scanned in each query."""
        return None

    def compile(self, sql: str) -> str:
        """:func:`to_spark_sql` over the registered tables' schemas, memoised by text."""
        hit = self._translated.get(sql)
        if hit is None:
            if self._schema is None:
                self._schema = self._sqlglot_schema()
            hit = self._translated[sql] = to_spark_sql(sql, self._schema)
            if len(self._translated) > 1024:
                self._translated.pop(next(iter(self._translated)))
        return hit

    def _sqlglot_schema(self) -> MappingSchema:
        schema = MappingSchema(dialect=SOURCE_DIALECT)
        for name in self._views:
            columns = {}
            for column, type_name in self.table_schema(name).items():
                try:
                    exp.DataType.build(type_name, dialect=SOURCE_DIALECT)
                except SqlglotError:
                    type_name = "UNKNOWN"  # nested types: never a SUM argument
                columns[column] = type_name
            schema.add_table(name, columns)
        return schema

    def check(self, compiled: str, params: Mapping[str, Any] | None = None) -> None:
        """Spark's analysis of ``compiled`` (``spark.sql`` resolves names and types eagerly and
        runs nothing until an action); errors name only their class."""
        try:
            self._session.sql(compiled, args=dict(params) if params else None)
        except Exception as err:  # pyspark, py4j and JVM errors have many classes
            raise ProgrammingError(
                f"Spark refused the query while analysing it ({type(err).__name__}); check "
                "parameter types and the metadata's declared column types. Nothing was charged."
            ) from None

    def execute(
        self, compiled: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Run compiled Spark SQL; collect the rows to the driver (in parts when they pass
        ``spark.driver.maxResultSize``: :func:`dpsql.backends.spark_collect.collect_rows`, so
        no read fails on its number of rows).

        Spark errors become ``OperationalError`` naming only the error class: Spark's message
        can quote a private value, and the analyst may see this error.
        """
        context = self._session.sparkContext
        context.setJobGroup(self._job_group, "dpsql exact query", interruptOnCancel=True)
        self._cancelled = False
        try:
            frame = self._session.sql(compiled, args=dict(params) if params else None)
            rows = collect_rows(frame)
            types = [duckdb_type_name(f.dataType) for f in frame.schema.fields]
        except Exception as err:  # pyspark, py4j and JVM errors have many classes
            if self._cancelled:
                raise QueryCancelledError(
                    "the query was cancelled before anything was released") from None
            raise OperationalError(
                f"Spark could not run the query ({type(err).__name__}); check parameter types "
                "and the metadata's declared column types"
            ) from None
        if self._cancelled:
            # cancelJobGroup stops the jobs that run; one that came between the read's jobs
            # (a read in parts runs several, with Python work between them) stopped none
            raise QueryCancelledError("the query was cancelled before anything was released")
        return rows, types

    def interrupt(self) -> None:
        """Cancel this backend's running Spark jobs (its own job group)."""
        self._cancelled = True
        self._session.sparkContext.cancelJobGroup(self._job_group)

    def execute_columns(
        self, sql: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[np.ndarray], list[str]]:
        """:meth:`execute`, its rows as one object array per column."""
        rows, types = self.execute(sql, params)
        return columns_of(rows, len(types)), types

    def execute_flat_columns(
        self, sql: str, params: Mapping[str, Any] | None = None,
        max_rows: int | None = None
    ) -> tuple[list[np.ndarray], list[str]]:
        """:meth:`execute_columns` (Spark is not columnar: the engine runs the grouped
        fallback instead of a flat read, dpsql.units.multi_execute); ``max_rows`` collects at
        most one row more than it."""
        if max_rows is not None:
            sql = f"SELECT * FROM ({sql}) AS __flat LIMIT {int(max_rows) + 1}"
        return self.execute_columns(sql, params)

    def close(self) -> None:
        """Drop this backend's views. The SparkContext stays up: it may be shared."""
        for name in self._views:
            try:
                self._session.catalog.dropTempView(name)
            except Exception:  # a stopped context has nothing left to drop
                break
        self._views.clear()
        self._sources.clear()
