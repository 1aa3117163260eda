"""Post-processing SQL bound before the charge: a refusal that depends on the SQL alone must
not be paid for.

The post-processing query (a HAVING, arithmetic over aggregates, the outer query over release
blocks) runs on noisy values after the charge, so any error it raises there stands charged: it
may depend on the noise. A *type* error (``HAVING COUNT(*) > DATE '2020-01-01'``, ``CAST(COUNT(*)
AS DATE)``) depends on neither the data nor the noise, only on the SQL and the column types.
:func:`check_rows` and :func:`check_tables` run the very post-processing SQL over EMPTY tables
of the same column types, before the charge: DuckDB's binder (and its folding of constants)
refuses such a query there, and nothing is charged. A cast DuckDB has no implementation for
(BIGINT to DATE) binds, and fails only when it casts a value: a second run over ONE row (the
first bin, every measurement 0) refuses that error alone; any other error there depends on the
values (``10 // COUNT(*)`` at 0) and is left to the release.

Contract: they read no private data and no noisy value. The tables' column types come from the
domains (public, read before the charge: the same values the release registers) -- or, for
groups selected from the data (partition selection: no domain to read), from the keys' column
types in the metadata or the database's schema, as typed NULLs -- and a measurement's type
from its function (COUNT: BIGINT, else DOUBLE, as dpsql.noise.apply makes
them). Over empty tables a query can only fail in binding or on constants, which depend on the
SQL, the parameters' values (public) and those types; the one-row run reads public domain
values and zeros: the refusal depends on nothing private.
Scalar blocks bound as parameters are checked with the placeholder value the session's binder
check uses (0.0).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import duckdb
import numpy as np

from dpsql.backends.base import columns_of
from dpsql.errors import ProgrammingError
from dpsql.execute.layout import Bins, Domains
from dpsql.rewrite.parameters import bind_params
from dpsql.rewrite.plan import NOISY_TABLE

#: bins registered to infer the key columns' types (DuckDB samples object columns)
_SAMPLE_BINS = 1000

_SAMPLE = "__dpsql_sample"


def measurement_dtypes(functions: Sequence[str]) -> list[type]:
    """The numpy type of each noisy measurement column (dpsql.noise.apply.noisy_values)."""
    return [np.int64 if f == "COUNT" else np.float64 for f in functions]


#: the two runs: over empty tables (any error refuses), then over one row (only
#: :func:`_types_only` errors refuse)
_RUNS = (0, 1)


def _types_only(err: duckdb.Error) -> bool:
    """An error DuckDB raises on every value of the types involved: a cast it has no
    implementation for."""
    return isinstance(err, duckdb.ConversionException) and \
        "Unimplemented type for cast" in str(err)


#: a column type as the metadata writes one (INTEGER, DECIMAL(15, 2), VARCHAR[]): anything else
#: is left untyped (NULL) rather than pasted into SQL
_SQL_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_ ]*(\([0-9, ]*\))?(\[\])?")


def _create_noisy(cur: duckdb.DuckDBPyConnection, domains: Domains, dtypes: Sequence[type],
                  rows: int, key_types: Sequence[str | None] = ()) -> None:
    """NOISY_TABLE as a temporary table with the columns the release registers and ``rows``
    (0 or 1) of them: the first bin, every measurement 0. Groups selected from the data
    (partition selection: no domain values before the charge) get each key as a NULL of its
    column's type (``key_types``, from the metadata or the database's schema)."""
    if not domains.values and key_types:
        _create_selected(cur, key_types, dtypes, rows)
        return
    bins = Bins(domains.types, [], domains.n_bins, domains.values)
    n = min(domains.n_bins, _SAMPLE_BINS) if domains.values else 1
    order = np.arange(n, dtype=np.intp)
    sample: dict[str, np.ndarray] = {
        f"__k{i}": bins.key(i, order) for i in range(len(domains.values))}
    sample.update({f"__m{j}": _zeros(n, d) for j, d in enumerate(dtypes)})
    cur.register(_SAMPLE, sample)
    try:
        cur.execute(f"CREATE TEMP TABLE {NOISY_TABLE} AS SELECT * FROM {_SAMPLE} LIMIT {rows}")
    finally:
        cur.unregister(_SAMPLE)


def _create_selected(cur: duckdb.DuckDBPyConnection, key_types: Sequence[str | None],
                     dtypes: Sequence[type], rows: int) -> None:
    """:func:`_create_noisy` for groups selected from the data: typed NULL keys (a type the
    metadata holds, never data), then the measurements' zeros."""
    keys = ", ".join(f"CAST(NULL AS {t}) AS __k{i}" if t and _SQL_TYPE.fullmatch(t)
                     else f"NULL AS __k{i}" for i, t in enumerate(key_types))
    if not dtypes:  # key-only (SELECT DISTINCT): no measurement column to register
        cur.execute(f"CREATE TEMP TABLE {NOISY_TABLE} AS SELECT {keys} LIMIT {rows}")
        return
    cur.register(_SAMPLE, {f"__m{j}": _zeros(1, d) for j, d in enumerate(dtypes)})
    try:
        cur.execute(f"CREATE TEMP TABLE {NOISY_TABLE} AS SELECT {keys}, * FROM {_SAMPLE} "
                    f"LIMIT {rows}")
    finally:
        cur.unregister(_SAMPLE)


def _zeros(n: int, dtype: type) -> np.ndarray:
    """``n`` zeros of a measurement's type; ``datetime.date`` (a date chosen by the
    exponential mechanism, dpsql.execute.selection) as an object column of one date."""
    if dtype is datetime.date:
        column = np.empty(n, dtype=object)
        column[:] = [datetime.date(1970, 1, 1)] * n
        return column
    return np.zeros(n, dtype=dtype)


def _refusal(err: duckdb.Error) -> ProgrammingError:
    return ProgrammingError(
        f"the query's post-processing (its HAVING, arithmetic over aggregates, or the query "
        f"outside its aggregate subqueries) cannot run on the aggregates' types: {err}. "
        "Nothing was charged")


def check_rows(cur: duckdb.DuckDBPyConnection, sql: str, positions: tuple[int, ...],
               params: Sequence[Any], domains: Domains, dtypes: Sequence[type],
               key_types: Sequence[str | None] = ()) -> None:
    """Run one release's post-processing ``sql`` over its noisy table, empty then with one row
    (module contract); raises ``ProgrammingError`` where it cannot run. Closes ``cur``.
    ``key_types``: the group keys' column types when the groups are selected from the data
    (no domains)."""
    try:
        for rows in _RUNS:
            try:
                _create_noisy(cur, domains, dtypes, rows, key_types)
                cur.execute(sql, bind_params(positions, params)).fetchall()
            except duckdb.Error as err:
                if rows == 0 or _types_only(err):
                    raise _refusal(err) from None
            finally:
                with suppress(duckdb.Error):
                    cur.execute(f"DROP TABLE IF EXISTS {NOISY_TABLE}")
    finally:
        cur.close()


PublicRows = tuple[str, tuple[str, ...], tuple[str | None, ...], list[tuple[Any, ...]]]
BlockTable = tuple[str, tuple[str, tuple[int, ...]], Domains, Sequence[type]]


def check_tables(cur: duckdb.DuckDBPyConnection, blocks: Sequence[BlockTable],
                 params: Sequence[Any], sql: str, positions: tuple[int, ...],
                 public: Sequence[PublicRows] = ()) -> None:
    """Blocks, then post-processing: each block's table (its own post-processing over its
    noisy table), the public tables the query reads (their rows, public, read before the
    charge, typed as the release types them), then ``sql`` over them; empty tables, then one
    row each (module contract). Closes ``cur``."""
    try:
        for rows in _RUNS:
            try:
                _run_tables(cur, blocks, params, sql, positions, public, rows)
            except duckdb.Error as err:
                if rows == 0 or _types_only(err):
                    raise _refusal(err) from None
    finally:
        cur.close()


def _run_tables(cur: duckdb.DuckDBPyConnection, blocks: Sequence[BlockTable],
                params: Sequence[Any], sql: str, positions: tuple[int, ...],
                public: Sequence[PublicRows], rows: int) -> None:
    created: list[str] = []
    try:
        for name, columns, declared, values in public:
            cur.register(_SAMPLE, {f"__c{i}": c for i, c in
                                   enumerate(columns_of(values, len(columns)))})
            select = ", ".join(
                f'CAST(__c{i} AS {t}) AS "{c}"' if t else f'__c{i} AS "{c}"'
                for i, (c, t) in enumerate(zip(columns, declared, strict=True)))
            created.append(name)
            try:
                cur.execute(f'CREATE TEMP TABLE "{name}" AS SELECT {select} FROM {_SAMPLE} '
                            f"LIMIT {rows}")
            finally:
                cur.unregister(_SAMPLE)
        for table, (block_sql, block_params), domains, dtypes in blocks:
            _create_noisy(cur, domains, dtypes, rows)
            created.append(table)
            cur.execute(f"CREATE TEMP TABLE {table} AS {block_sql}",
                        bind_params(block_params, params))
            cur.execute(f"DROP TABLE {NOISY_TABLE}")
        cur.execute(sql, bind_params(positions, params)).fetchall()
    finally:
        for name in [*created, NOISY_TABLE]:
            with suppress(duckdb.Error):
                cur.execute(f'DROP TABLE IF EXISTS "{name}"')
