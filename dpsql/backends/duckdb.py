"""The embedded default backend: DuckDB, opened read-only with external access disabled.

The connection can read only the database file and the CSV/Parquet files the metadata declares
as table sources (registered as temporary views before the configuration is locked), so even a
rewrite bug cannot read other files, install extensions or write anything.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpsql.backends.arrow_stream import BATCH_ROWS, read_columns
from dpsql.errors import (
    OperationalError,
    ProgrammingError,
    QueryCancelledError,
    sigint_interrupted,
)
from dpsql.metadata import Metadata
from dpsql.rewrite.domains import scan_relation
from dpsql.sql import quote_ident, quote_literal

#: DuckDB's perfect_ht_threshold for dpsql's connection (bits of the group keys' value range):
#: at most 2^18 slots of aggregate states per thread (a few MB for the one or two aggregates of
#: a unit's contribution; DuckDB's default is 12)
PERFECT_HT_BITS = 18


def _is_glob(source: str) -> bool:
    return any(c in source for c in "*?[")


def _reader(source: str) -> str:
    lowered = source.lower()
    if ".parquet" in lowered:
        return "read_parquet"
    if lowered.endswith(".json") or lowered.endswith(".ndjson"):
        raise ProgrammingError(f"unsupported table source {source!r}: use CSV or Parquet")
    return "read_csv_auto"


#: the prefix of a registered domain table's name (:meth:`DuckDBBackend.domain_table`)
DOMAIN_TABLE_PREFIX = "__dpsql_domain_"


def domain_table_name(table: str, column: str) -> str:
    """The registered domain table of ``table.column`` (lower case): the prefix and 16 hex
    digits of a hash of both names, the same in every process."""
    digest = hashlib.sha256(f"{table}\0{column}".encode()).hexdigest()[:16]
    return f"{DOMAIN_TABLE_PREFIX}{digest}"


def _binder_error(err: Exception) -> ProgrammingError:
    return ProgrammingError(
        f"the database refused the query while planning it ({type(err).__name__}); check "
        "parameter types and the metadata's declared column types. Nothing was charged."
    )


def _stream_error(err: OSError) -> QueryCancelledError | OperationalError:
    """dpsql's error for one DuckDB met while its Arrow batches streamed: pyarrow raises it as
    a plain OSError holding DuckDB's text ("INTERRUPT Error: Interrupted!", "Conversion
    Error: Could not convert string 'x' ..."), not as a duckdb.Error, so :meth:`_guarded`'s
    mapping misses it. An interrupt (:meth:`DuckDBBackend.interrupt`) is the cancellation
    duckdb.InterruptException is; anything else an OperationalError naming only DuckDB's
    error kind, never its text (which can quote a private value)."""
    text = str(err)
    kind, sep, _ = text.partition(" Error:")
    if sep and kind.strip().upper() == "INTERRUPT":
        return QueryCancelledError("the query was cancelled before anything was released")
    words = kind.split() if sep and len(kind) <= 40 and kind.replace(" ", "").isalpha() else []
    name = "".join(w.capitalize() for w in words) + "Exception" if words else "Error"
    return OperationalError(
        f"the database could not run the query ({name}); check parameter types and the "
        "metadata's declared column types")


class DuckDBBackend:
    """Exact aggregates from DuckDB (see module docstring)."""

    columnar = True  # fetchnumpy: see Backend

    dialect = "duckdb"

    def __init__(
        self, database: str | os.PathLike | None, metadata: Metadata | None = None
    ) -> None:
        path = ":memory:" if database is None else os.fsdecode(database) or ":memory:"
        if path != ":memory:" and not Path(path).exists():
            raise OperationalError(f"database file {path!r} does not exist")
        try:
            # A file is opened read-only; an in-memory database is empty and private anyway.
            self._con = duckdb.connect(path, read_only=path != ":memory:")
            self._lock_down(metadata)
        except duckdb.Error as err:
            raise OperationalError(f"cannot open DuckDB database {path!r}: {err}") from None
        self.path = path
        #: (table, column) -> its registered domain table (:meth:`domain_table`)
        self._domains: dict[tuple[str, str], str] = {}
        self._domain_lock = threading.Lock()
        #: value_range's answers: the values cannot change while the backend is open
        self._ranges: dict[tuple[str, str], tuple[Any, Any]] = {}

    def _lock_down(self, metadata: Metadata | None) -> None:
        sources = [t for t in (metadata.tables.values() if metadata else ()) if t.source]
        self._views = {t.name.lower() for t in sources}
        # DuckDB shares one database instance between connections to the same file in a
        # process, so another dpsql connection may already have locked it down.
        locked = self._setting("lock_configuration")
        if not locked:
            paths = [t.source for t in sources if t.source]
            files = [p for p in paths if not _is_glob(p)]
            dirs = [str(Path(p).parent) for p in paths if _is_glob(p)]
            if files:
                self._con.execute(f"SET allowed_paths=[{', '.join(map(quote_literal, files))}]")
            if dirs:
                self._con.execute(
                    f"SET allowed_directories=[{', '.join(map(quote_literal, dirs))}]"
                )
            self._con.execute("SET enable_external_access=false")
            self._con.execute("SET autoinstall_known_extensions=false")
            self._con.execute("SET autoload_known_extensions=false")
            # a default collation would make distinct strings equal in every comparison; a
            # default order or null order would flip every ORDER BY the SQL leaves implicit
            # (the two-stage's choice of a unit's groups, dpsql.units.rewrite: the red team's
            # tests/redteam/test_two_stage_choice_attacks.py)
            self._con.execute("SET default_collation=''")
            self._con.execute("SET default_order='ASC'")
            self._con.execute("SET default_null_order='NULLS_LAST'")
            # speed only (results are the same): GROUP BY on integer keys whose range spans up to
            # 2^18 values aggregates in a perfect hash table (DuckDB's default stops at 2^12).
            # A query under a privacy unit groups every joined row by the unit's id: on TPC-H
            # SF1 150,000 customer keys, 29 -> 10 ms CPU for orders grouped by o_custkey
            # (benchmarks/README.md, "Privacy units"). A session setting: a second dpsql
            # connection to an instance already locked keeps DuckDB's default.
            self._con.execute(f"SET perfect_ht_threshold={PERFECT_HT_BITS}")
        elif self._setting("enable_external_access"):
            raise OperationalError(
                "this DuckDB database is already open in this process with external access "
                "enabled and its configuration locked; dpsql cannot lock it down"
            )
        if self._setting("default_collation"):
            raise OperationalError(
                "this DuckDB database is already open in this process with a default collation "
                "and its configuration locked; dpsql needs plain string comparisons"
            )
        order = (str(self._setting("default_order")).upper(),
                 str(self._setting("default_null_order")).upper())
        if order[0] not in ("ASC", "ASCENDING") or order[1] != "NULLS_LAST":
            raise OperationalError(
                "this DuckDB database is already open in this process with a default sort "
                f"order of {order[0]} {order[1]} and its configuration locked; dpsql needs "
                "ascending order with NULLs last")
        for table in sources:
            assert table.source is not None
            # Temporary views belong to this connection only.
            self._con.execute(
                f"CREATE OR REPLACE TEMP VIEW {quote_ident(table.name)} AS SELECT * FROM "
                f"{_reader(table.source)}({quote_literal(table.source)})"
            )
        if not locked:
            self._con.execute("SET lock_configuration=true")

    def _setting(self, name: str) -> Any:
        row = self._con.execute("SELECT current_setting(?)", [name]).fetchone()
        return row[0] if row else None

    def compile(self, sql: str) -> str:
        """The generated SQL is DuckDB's own: nothing to translate."""
        return sql

    def check(self, compiled: str, params: Mapping[str, Any] | None = None) -> None:
        """EXPLAIN ``compiled``: DuckDB parses, binds and plans it without reading a row (on
        this connection: the views over declared sources are its temporary views; 8-200 ms on
        TPC-H at SF1, so the session asks once per query text and parameter types).

        The message names only the error class: the analyst may see it, and although the
        binder reads no data, its text could quote a parameter or a bound domain value.
        """
        try:
            self._con.execute(f"EXPLAIN {compiled}", dict(params) if params else None).fetchall()
        except duckdb.InterruptException:
            raise QueryCancelledError("the query was cancelled; nothing was charged") from None
        except duckdb.Error as err:
            raise _binder_error(err) from None
        except RuntimeError as err:
            if sigint_interrupted(err):  # Ctrl-C: the KeyboardInterrupt DuckDB swallowed
                raise KeyboardInterrupt from None
            raise

    def execute(
        self, compiled: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Run generated SQL; DuckDB errors become ``OperationalError``.

        The message names only the error class: DuckDB's text can quote a private value
        (e.g. a failed conversion), and the analyst may see this error.
        """
        return self._run(compiled, params, lambda cur: cur.fetchall())

    def execute_columns(
        self, compiled: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[np.ndarray], list[str]]:
        """As :meth:`execute`, fetched as numpy arrays (DuckDB's ``fetchnumpy``; NULLs
        masked): Q16's 27,840 bins in under a millisecond instead of ~7 as tuples. Through the
        DB-API cursor: DuckDB's relation API (``sql(...).fetchnumpy()``) was measured on TPC-H
        Q7's flat read over two units, faster at SF1 (6M rows x 3 columns: ~0.39 -> 0.30 s) but
        slower and larger at SF10 (60M: 3.1 s and 3.1 GB peak -> 5.5 s and 4.1 GB)."""
        return self._run(compiled, params, lambda cur: list(cur.fetchnumpy().values()))

    def execute_flat_columns(
        self, compiled: str, params: Mapping[str, Any] | None = None,
        max_rows: int | None = None
    ) -> tuple[list[np.ndarray], list[str]]:
        """As :meth:`execute_columns`, for the flat read of a release over two privacy units
        (millions of rows of unit ids and DOUBLE values) and its grouped fallback, every id
        exact (``fetchnumpy`` gives DECIMAL and HUGEINT as doubles): the relation's Arrow
        record batches,
        streamed while the query runs (dpsql.backends.arrow_stream: about half the time of
        ``fetchnumpy``'s materialise-then-convert on TPC-H Q7 over two units). Past
        ``max_rows`` the stream stops (dpsql.backends.arrow_stream.read_columns) and the
        reader is closed, which ends the query."""

        def stream() -> tuple[list[np.ndarray], list[str]]:
            # a relation needs the connection free: a one-row read (fetchone) leaves its
            # result open until a fetch finds its end, so close it (every read here is whole)
            self._con.abort()
            rel = self._con.sql(compiled, params=dict(params) if params else None)
            reader = rel.to_arrow_reader(BATCH_ROWS)
            try:
                return (read_columns(reader, reader.schema, max_rows),
                        [str(t) for t in rel.types])
            except OSError as err:  # DuckDB's error after the reader was made: _stream_error
                raise _stream_error(err) from None
            finally:
                reader.close()

        return self._guarded(stream)

    def _run(self, sql: str, params: Mapping[str, Any] | None, fetch: Callable[[Any], Any]):
        def run() -> tuple[Any, list[str]]:
            cur = self._con.execute(sql, dict(params) if params else None)
            result = fetch(cur)
            return result, [str(d[1]) for d in cur.description or ()]

        return self._guarded(run)

    def _guarded(self, action: Callable[[], tuple[Any, list[str]]]) -> tuple[Any, list[str]]:
        """``action()``, DuckDB's errors mapped to dpsql's (the messages name only the error
        class: see :meth:`execute`)."""
        try:
            return action()
        except duckdb.InterruptException:
            raise QueryCancelledError("the query was cancelled before anything was released"
                                      ) from None
        except RuntimeError as err:
            if sigint_interrupted(err):  # Ctrl-C: the KeyboardInterrupt DuckDB swallowed
                raise KeyboardInterrupt from None
            raise
        except duckdb.BinderException as err:  # as check() reports it (no ledger: no check)
            raise _binder_error(err) from None
        except duckdb.Error as err:
            raise OperationalError(
                f"the database could not run the query ({type(err).__name__}); check parameter "
                "types and the metadata's declared column types"
            ) from None

    def interrupt(self) -> None:
        """Stop the running query (DuckDB's interrupt; safe from any thread)."""
        self._con.interrupt()

    def table_schema(self, table: str) -> dict[str, str]:
        """{column: DuckDB type} of a table or view, resolved as queries resolve ``table``
        (temporary views of declared sources first). ProgrammingError if there is none."""
        schema = self._described(table)
        return self._with_collations({table: schema})[table]

    def table_schemas(self, tables: Sequence[str]) -> dict[str, dict[str, str] | None]:
        """:meth:`table_schema` of each of ``tables`` (None for one the database lacks), the
        collations of all of them probed by one query (a probe is most of a schema's cost)."""
        described: dict[str, dict[str, str] | None] = {}
        for table in tables:
            try:
                described[table] = self._described(table)
            except ProgrammingError:
                described[table] = None
        present = self._with_collations({t: s for t, s in described.items() if s is not None})
        return {t: present.get(t) for t in described}

    def _described(self, table: str) -> dict[str, str]:
        try:
            rows = self._con.execute(f"DESCRIBE {quote_ident(table)}").fetchall()
        except duckdb.CatalogException:
            raise ProgrammingError(f"table {table!r} is not in the database") from None
        except duckdb.Error as err:
            raise OperationalError(
                f"cannot read the columns of table {table!r} ({type(err).__name__})"
            ) from None
        return {str(r[0]): str(r[1]) for r in rows}

    def _with_collations(self, schemas: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        """``schemas`` with ``COLLATE <name>`` appended to each VARCHAR column stored with a
        collation.

        DESCRIBE shows plain VARCHAR for ``VARCHAR COLLATE nocase``, so each collation is
        detected by what it does: a comparison of a value typed like the column (the column
        of an empty result, ``LIMIT 0``, which reads no row, outer-joined to one row, so a NULL
        that COALESCE replaces) with a case, accent or normalisation variant. A view's
        expression collation is found the same way. One query probes every table.
        """
        strings = [(t, c) for t, schema in schemas.items()
                   for c, type_ in schema.items() if type_.upper() == "VARCHAR"]
        if not strings:
            return schemas
        joins, probes = [], []
        for i, table in enumerate(dict.fromkeys(t for t, _ in strings)):
            columns = [(j, c) for j, (t, c) in enumerate(strings) if t == table]
            select = ", ".join(f"{quote_ident(c)} AS __c{j}" for j, c in columns)
            joins.append(f"LEFT JOIN (SELECT {select} FROM {quote_ident(table)} LIMIT 0) "
                         f"AS __t{i} ON TRUE")
        for j in range(len(strings)):
            probes.append(f"COALESCE(__c{j}, 'a') = 'A', COALESCE(__c{j}, 'a') = 'á', "
                          f"COALESCE(__c{j}, '\u00e9') = 'e\u0301'")
        try:
            row = self._con.execute(
                f"SELECT {', '.join(probes)} FROM (SELECT 1) AS __one {' '.join(joins)}"
            ).fetchone()
        except duckdb.Error as err:
            raise OperationalError(
                f"cannot read the collations of tables {', '.join(map(repr, schemas))} "
                f"({type(err).__name__})"
            ) from None
        assert row is not None
        out = {t: dict(schema) for t, schema in schemas.items()}
        for j, (table, column) in enumerate(strings):
            names = [n for n, hit in zip(("nocase", "noaccent", "nfc"), row[3 * j: 3 * j + 3],
                                         strict=True) if hit]
            if names:
                out[table][column] += f" COLLATE {'.'.join(names)}"
        return out

    def _unchanging(self, table: str) -> bool:
        """Whether ``table`` is a base table of the database file, whose stored values cannot
        change while this backend is open: the file is open read-only and DuckDB's file lock
        keeps every writer out meanwhile (no other process can open it read-write, and this
        process cannot open it with another configuration). Views over declared files and an
        in-memory database promise nothing."""
        if self.path == ":memory:" or table.lower() in self._views:
            return False
        row = self._con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE NOT temporary "
            "AND database_name = current_database() AND schema_name = current_schema() "
            "AND lower(table_name) = lower(?)", [table]).fetchone()
        return bool(row and row[0] == 1)

    def value_range(self, table: str, column: str) -> tuple[Any, Any] | None:
        """(least, greatest) non-NULL value of ``column`` in a base table of the database file
        ((None, None) if it has none), held while this backend is open (:meth:`_unchanging`),
        so read once; None for anything else or if anything fails."""
        key = (table.lower(), column.lower())
        if key in self._ranges:
            return self._ranges[key]
        try:
            if not self._unchanging(table):
                return None
            quoted = quote_ident(column)
            row = self._con.execute(
                f"SELECT MIN({quoted}), MAX({quoted}) FROM {quote_ident(table)}").fetchone()
        except duckdb.Error:
            return None
        if not row:
            return None
        self._ranges[key] = (row[0], row[1])
        return self._ranges[key]

    def domain_table(self, table: str, column: str) -> str | None:
        """The name of a temporary table of this connection holding ``(__v, __o)``: every
        distinct value of ``column`` in a base table of the database file, ascending with NULL
        last, and its ordinal (INTEGER from 0), exactly what a GROUP BY domain's DISTINCT scan
        of that column computes (it is made by that very SQL,
        :func:`dpsql.rewrite.domains.scan_relation`, and keeps the column's type and
        collation). Made on first use and held while this backend is open
        (:meth:`_unchanging`: the column's values cannot change meanwhile). None for anything
        else or if anything fails.

        The name is a function of (table, column) alone, so the SQL that reads it, and the
        query's fingerprint, are the same on every connection; it starts with ``__``, which no
        analyst identifier may (dpsql.analysis.hygiene), and the table lives in this
        connection's temporary catalog only."""
        key = (table.lower(), column.lower())
        with self._domain_lock:
            name = self._domains.get(key)
            if name is not None:
                return name
            name = domain_table_name(*key)
            try:
                if not self._unchanging(table) or self._exists(name):
                    return None
                scan = scan_relation(table, column).sql(dialect="duckdb", copy=False)
                self._con.execute(f"CREATE TEMP TABLE {quote_ident(name)} AS {scan}")
            except duckdb.Error:
                return None
            self._domains[key] = name
            return name

    def _exists(self, name: str) -> bool:
        """Whether a table or view named ``name`` exists in any schema this connection sees."""
        row = self._con.execute(
            "SELECT (SELECT count(*) FROM duckdb_tables() WHERE lower(table_name) = lower($n))"
            " + (SELECT count(*) FROM duckdb_views() WHERE lower(view_name) = lower($n))",
            {"n": name}).fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        self._con.close()
