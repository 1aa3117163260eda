"""Post-processing: the analyst's outer SELECT over NOISY values only.

Most queries only pick (and order) columns: done with numpy (:func:`fast_post_process`).
Anything else (HAVING, expressions, LIMIT, DISTINCT, an ORDER BY over keys that do not sort in
Python) runs the plan's post-processing SQL on an in-memory DuckDB that holds nothing but the
noisy table, with external access off. Its errors may be shown as they are: it sees no exact
value.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import duckdb
import numpy as np

from dpsql.backends.base import columns_of
from dpsql.errors import ProgrammingError, QueryCancelledError
from dpsql.execute.layout import Bins
from dpsql.rewrite.parameters import bind_params
from dpsql.rewrite.plan import NOISY_TABLE, ExecutionPlan

Rows = tuple[tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]


class PostProcessor:
    """Turns noisy bins into the analyst's rows for one session (owns the in-memory DuckDB,
    opened on first use: most queries take the numpy path, and opening costs milliseconds)."""

    def __init__(self) -> None:
        self._db: duckdb.DuckDBPyConnection | None = None

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._db is None:
            con = duckdb.connect(":memory:")
            con.execute("SET enable_external_access=false")
            con.execute("SET lock_configuration=true")
            self._db = con
        return self._db

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the post-processing DuckDB (dpsql.execute.post_check binds there)."""
        return self._connection().cursor()

    def rows(self, plan: ExecutionPlan, bins: Bins, noisy: list[np.ndarray],
             params: Sequence[Any], post_sql: Callable[[], tuple[str, tuple[int, ...]]]) -> Rows:
        """The analyst's result: names, type names, rows. ``post_sql`` builds the SQL to fall
        back on when the plan holds none (rarely needed: only when the numpy path cannot order
        the keys)."""
        if plan.fast_path is not None:
            out = fast_post_process(plan, bins, noisy)
            if out is not None:
                return out
        if plan.post_sql is not None:
            sql, positions = plan.post_sql, plan.post_params
        else:
            sql, positions = post_sql()
        cur = self._connection().cursor()
        try:
            with _post_errors():
                cur.register(NOISY_TABLE, _noisy_table(bins, noisy))
                result = cur.execute(sql, bind_params(positions, params))
                rows = result.fetchall()
                types = [str(d[1]) for d in result.description]
        finally:
            cur.close()
        return plan.output_names, tuple(types), rows

    def over_tables(self, tables: Sequence[tuple[str, tuple[str, tuple[int, ...]], Bins,
                                                list[np.ndarray]]],
                    params: Sequence[Any], sql: str, positions: tuple[int, ...],
                    names: tuple[str, ...],
                    public: Sequence[tuple[str, tuple[str, ...], tuple[str | None, ...],
                                           list[tuple[Any, ...]]]] = ()) -> Rows:
        """Release blocks (dpsql.analysis.blocks): each ``(table, (post SQL, its parameters),
        bins, noisy values)`` becomes the temporary table ``table`` of that block's noisy
        rows, then ``sql`` runs over those tables (nothing else is in this database). The
        tables live in this call's own connection and are dropped with it. ``public``: the
        ``(table, columns, declared types, rows)`` of public tables ``sql`` reads, copied in
        under their own names."""
        cur = self._connection().cursor()
        created = [t[0] for t in tables] + [p[0] for p in public]
        try:
            with _post_errors():
                for name, columns, declared, public_rows in public:
                    cur.register("__public", {f"__c{i}": c for i, c in
                                              enumerate(columns_of(public_rows, len(columns)))})
                    select = ", ".join(
                        f'CAST(__c{i} AS {t}) AS "{c}"' if t else f'__c{i} AS "{c}"'
                        for i, (c, t) in enumerate(zip(columns, declared, strict=True)))
                    cur.execute(f'CREATE TEMP TABLE "{name}" AS SELECT {select} FROM __public')
                    cur.unregister("__public")
                for table, (block_sql, block_params), bins, noisy in tables:
                    cur.register(NOISY_TABLE, _noisy_table(bins, noisy))
                    cur.execute(f"CREATE TEMP TABLE {table} AS {block_sql}",
                                bind_params(block_params, params))
                    cur.unregister(NOISY_TABLE)
                result = cur.execute(sql, bind_params(positions, params))
                rows = result.fetchall()
                types = [str(d[1]) for d in result.description]
        finally:
            for table in created:
                with suppress(duckdb.Error):
                    cur.execute(f'DROP TABLE IF EXISTS "{table}"')
            cur.close()
        return names, tuple(types), rows

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _noisy_table(bins: Bins, noisy: list[np.ndarray]) -> dict[str, Any]:
    """The noisy table's columns: the bins' keys ``__k<i>`` and noisy values ``__m<j>``."""
    table: dict[str, Any] = {f"__k{i}": k for i, k in enumerate(bins.keys)}
    table.update({f"__m{j}": v for j, v in enumerate(noisy)})
    return table


@contextmanager
def _post_errors() -> Iterator[None]:
    """DuckDB's errors in post-processing as dpsql's: a cancellation shows nothing."""
    try:
        yield
    except duckdb.InterruptException:
        raise QueryCancelledError("the query was cancelled before anything was released"
                                  ) from None
    except duckdb.Error as err:
        raise ProgrammingError(f"post-processing failed: {err}") from None


def fast_post_process(plan: ExecutionPlan, bins: Bins, noisy: list[np.ndarray]) -> Rows | None:
    """Pick (and order) output columns with numpy: the post-processing that needs no SQL.

    Returns None when an ORDER BY cannot be evaluated here (a NULL or mixed-type group key),
    and the caller runs the post-processing SQL instead.
    """
    assert plan.fast_path is not None
    columns: list[np.ndarray | None] = []  # None: a group key, built from its domain below
    sort_keys: list[np.ndarray] = []
    types: list[str] = []
    for spec in plan.fast_path:
        if spec.kind == "key":
            columns.append(None)
            types.append(bins.key_types[spec.index])
        elif spec.kind == "measurement":
            columns.append(noisy[spec.index])
            types.append("BIGINT" if plan.integer_measurements[spec.index] else "DOUBLE")
        else:
            assert spec.bounds is not None
            s, c = noisy[spec.index], noisy[spec.count_index]
            columns.append(_average(s, c, spec.bounds))
            types.append("DOUBLE")
    order = None
    if plan.fast_order:
        for column, descending in reversed(plan.fast_order):
            spec = plan.fast_path[column]
            if spec.kind == "key":
                rank = _domain_ranks(bins, spec.index)
                if rank is None:
                    return None
                sort_keys.append(-rank if descending else rank)
            else:
                values = columns[column]
                assert values is not None
                sort_keys.append(-values if descending else values)
        order = sort_order(sort_keys[::-1], bins.n_bins)
        columns = [None if c is None else c[order] for c in columns]
    filled = [bins.key(spec.index, order) if c is None else c
              for c, spec in zip(columns, plan.fast_path, strict=True)]
    return plan.output_names, tuple(types), _rows(filled)


def _average(s: np.ndarray, c: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """AVG from its noisy SUM ``s`` and COUNT ``c`` (rewrite.post._avg_expression's numpy
    twin): the ratio clamped to the bounds, NaN where the noisy count is <= 0 (NULL in the
    rows: see _rows; ORDER BY sorts it last ascending, as DuckDB's NULLS LAST)."""
    ratio = np.clip(s / np.maximum(c, 1), bounds[0], bounds[1]).astype(np.float64)
    return np.where(c > 0, ratio, np.nan)


def sort_order(keys: list[np.ndarray], n: int) -> np.ndarray:
    """The permutation sorting the bins by ``keys`` (most significant first, each ascending),
    ties in bin order: ``np.lexsort`` (stable), but integer keys are first folded with the bin
    index into one int64 key with distinct values (while the product of their value ranges
    fits), which a plain argsort orders ~7x faster (187,500 bins: 3 ms, not 22 ms)."""
    folded, span = np.arange(n, dtype=np.int64), n
    rest = list(keys)
    while rest and n and rest[-1].dtype.kind in "iu":
        low, high = int(rest[-1].min()), int(rest[-1].max())
        width = high - low + 1
        if width * span >= 2**62:
            break
        folded = (rest.pop().astype(np.int64) - low) * span + folded
        span *= width
    if not rest:
        return np.argsort(folded)  # distinct values: any sort gives the same order
    return np.lexsort([folded, *reversed(rest)])


def _rows(columns: list[np.ndarray]) -> list[tuple[Any, ...]]:
    """Result rows from columns (run with the garbage collector paused, see ``gc_paused``).
    NaN in a float column is NULL (an AVG over a count <= 0: noisy values are never NaN)."""
    return list(zip(*(_values(c) for c in columns), strict=True))


def _values(column: np.ndarray) -> list[Any]:
    if column.dtype.kind == "f" and np.isnan(column).any():
        return [None if v != v else v for v in column.tolist()]
    return column.tolist()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a result is read, noised and turned into rows:
    the hundreds of thousands of tuples made there (of numbers and strings: no cycles) would
    trigger collections that scan the whole heap and find nothing (~25 ms of ~100 when Q16
    released 187,500 bins). Reference counting still frees everything; cycles made meanwhile
    wait for the next collection. Nests, and leaves the collector off if the caller had
    switched it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _domain_ranks(bins: Bins, i: int) -> np.ndarray | None:
    """Each bin's rank of group key i's value in ascending order (SQL's order for numbers and
    strings: UTF-8 byte order is code point order), or None if the values do not sort."""
    values = bins.domains[i].tolist()
    if any(v is None for v in values):
        return None
    try:
        order = sorted(range(len(values)), key=values.__getitem__)
    except TypeError:
        return None
    rank = np.empty(len(values), dtype=np.int64)
    if bins.product:  # a domain's values are distinct
        rank[order] = np.arange(len(values))
    else:  # selected groups repeat a key's value: equal values, equal ranks (dense)
        current = -1
        for position, j in enumerate(order):
            if position == 0 or values[j] != values[order[position - 1]]:
                current += 1
            rank[j] = current
    return rank[bins.key_codes(i)]
