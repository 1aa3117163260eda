"""Post-processing: the analyst's outer SELECT over NOISY values only.

Most queries only pick (and order) columns: done with numpy (:func:`fast_post_process`).
Anything else (HAVING, expressions, LIMIT, DISTINCT, an ORDER BY over keys that do not sort in
Python) runs the plan's post-processing SQL on a connection of the process's scratch DuckDB
(dpsql.scratch: in-memory, external access off) that sees nothing but the noisy table. Its
errors may be shown as they are: it sees no exact value.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np

from dpsql.backends.base import columns_of
from dpsql.errors import ProgrammingError, QueryCancelledError, sigint_interrupted
from dpsql.execute.layout import Bins
from dpsql.execute.typed import finish, finish_columns, plain_values
from dpsql.rewrite.parameters import bind_params
from dpsql.rewrite.plan import NOISY_TABLE, ExecutionPlan
from dpsql.scratch import scratch_cursor

if TYPE_CHECKING:
    from dpsql.analysis.output_types import OutputRule

Rows = tuple[tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]


class PostProcessor:
    """Turns noisy bins into the analyst's rows for one session (its own connection to the
    process's scratch DuckDB, dpsql.scratch, opened on first use: most queries take the numpy
    path)."""

    def __init__(self) -> None:
        self._db: duckdb.DuckDBPyConnection | None = None

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._db is None:
            self._db = scratch_cursor()
        return self._db

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the post-processing DuckDB (dpsql.execute.post_check binds there)."""
        return self._connection().cursor()

    def rows(self, plan: ExecutionPlan, bins: Bins, noisy: list[np.ndarray],
             params: Sequence[Any], post_sql: Callable[..., tuple[str, tuple[int, ...]]],
             rules: Sequence[OutputRule] = (), *, raw_counts: bool = False,
             averages: list[tuple[np.ndarray, np.ndarray]] | None = None) -> Rows:
        """The analyst's result: names, type names, rows, each column finished by its rule in
        ``rules`` (dpsql.execute.typed: counts clamped unless ``raw_counts``, sums rounded).
        ``post_sql`` builds the SQL to fall back on when the plan holds none (rarely needed:
        only when the numpy path cannot order the keys); called with the plan's
        ``avg_intervals`` when ``averages`` is asked for. ``averages``: a list that gets, per
        entry of ``plan.avg_intervals``, the noisy SUM and COUNT of each result row, in the
        rows' order (dpsql.release.avg_rows)."""
        if plan.fast_path is not None:
            out = fast_post_process(plan, bins, noisy, rules, raw_counts=raw_counts,
                                    averages=averages)
            if out is not None:
                return out
        return finish(self._sql_rows(plan, bins, noisy, params, post_sql, averages), rules,
                      raw_counts=raw_counts)

    def _sql_rows(self, plan: ExecutionPlan, bins: Bins, noisy: list[np.ndarray],
                  params: Sequence[Any], post_sql: Callable[..., tuple[str, tuple[int, ...]]],
                  averages: list[tuple[np.ndarray, np.ndarray]] | None = None) -> Rows:
        """The plan's post-processing SQL over the noisy table; with ``averages``, the SQL
        that also selects each AVG's SUM and COUNT, stripped from the rows into it."""
        hidden = 2 * len(plan.avg_intervals) if averages is not None else 0
        if hidden and plan.avg_post_sql is not None:
            sql, positions = plan.avg_post_sql, plan.post_params
        elif hidden:
            sql, positions = post_sql(plan.avg_intervals)
        elif plan.post_sql is not None:
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
        if hidden:
            assert averages is not None
            extra = [r[-hidden:] for r in rows]
            for k in range(0, hidden, 2):
                averages.append((np.array([e[k] for e in extra], dtype=np.float64),
                                 np.array([e[k + 1] for e in extra], dtype=np.float64)))
            rows, types = [r[:-hidden] for r in rows], types[:-hidden]
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
        # Temporary tables and registered views belong to this cursor's own connection:
        # closing it drops them all (no DROP per table), and registering a name again replaces
        # it (no unregister): ~0.6 of a call's ~2.6 ms.
        cur = self._connection().cursor()
        try:
            with _post_errors():
                for name, columns, declared, public_rows in public:
                    cur.register("__public", {f"__c{i}": c for i, c in
                                              enumerate(columns_of(public_rows, len(columns)))})
                    select = ", ".join(
                        f'CAST(__c{i} AS {t}) AS "{c}"' if t else f'__c{i} AS "{c}"'
                        for i, (c, t) in enumerate(zip(columns, declared, strict=True)))
                    cur.execute(f'CREATE TEMP TABLE "{name}" AS SELECT {select} FROM __public')
                for table, (block_sql, block_params), bins, noisy in tables:
                    cur.register(NOISY_TABLE, _noisy_table(bins, noisy))
                    cur.execute(f"CREATE TEMP TABLE {table} AS {block_sql}",
                                bind_params(block_params, params))
                result = cur.execute(sql, bind_params(positions, params))
                rows = result.fetchall()
                types = [str(d[1]) for d in result.description]
        finally:
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
    except RuntimeError as err:
        if sigint_interrupted(err):  # Ctrl-C: a cancellation (the session refunds it)
            raise KeyboardInterrupt from None
        raise


def fast_post_process(plan: ExecutionPlan, bins: Bins, noisy: list[np.ndarray],
                      rules: Sequence[OutputRule] = (), *, raw_counts: bool = False,
                      averages: list[tuple[np.ndarray, np.ndarray]] | None = None
                      ) -> Rows | None:
    """Pick (and order) output columns with numpy: the post-processing that needs no SQL;
    each column then finished by its rule (dpsql.execute.typed.finish_columns, before the
    rows are built). ``averages``: as :meth:`PostProcessor.rows`'.

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
    if averages is not None:
        for average in plan.avg_intervals:
            parts = (noisy[average.total], noisy[average.count])
            averages.append(parts if order is None else (parts[0][order], parts[1][order]))
    filled = [bins.key(spec.index, order) if c is None else c
              for c, spec in zip(columns, plan.fast_path, strict=True)]
    out_types, finished = finish_columns(types, filled, rules, raw_counts=raw_counts)
    return plan.output_names, out_types, _rows(finished)


def _average(s: np.ndarray, c: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """AVG from its noisy SUM ``s`` and COUNT ``c`` (rewrite.post._avg_expression's numpy
    twin): the ratio clamped to the bounds, NaN where the noisy count is <= 0 (NULL in the
    rows: see _rows; ORDER BY sorts it last ascending, as DuckDB's NULLS LAST)."""
    ratio = np.clip(s / np.maximum(c, 1), bounds[0], bounds[1]).astype(np.float64)
    return np.where(c > 0, ratio, np.nan)


def sort_order(keys: list[np.ndarray], n: int) -> np.ndarray:
    """The permutation sorting the bins by ``keys`` (most significant first, each ascending),
    ties in bin order: ``np.lexsort`` (stable), with three shortcuts giving the same
    permutation faster:

    * a least significant key that never decreases in bin order is dropped: it orders each
      tie of the other keys as bin order does (a key whose domain is listed in ascending
      order, as a public table's is: ``ORDER BY numwait DESC, s_name``);
    * one integer key of a range narrower than 2**16 is sorted as uint16 by a stable
      ``argsort`` (a radix sort: 100,000 bins in ~1 ms, not ~6);
    * otherwise integer keys are folded with the bin index into one int64 key with distinct
      values (while the product of their value ranges fits), which a plain argsort orders
      ~7x faster than lexsort (187,500 bins: 3 ms, not 22 ms)."""
    if n == 0:  # no bin (a partition selection that kept no group): nothing to order
        return np.arange(0)
    rest = list(keys)
    while rest and n > 1 and _non_decreasing(rest[-1]):
        rest.pop()
    if not rest:
        return np.arange(n)
    if len(rest) == 1 and rest[0].dtype.kind in "iu":
        low, high = int(rest[0].min()), int(rest[0].max())
        if high - low < 2**16:
            narrow = (rest[0].astype(np.int64) - low).astype(np.uint16)
            return np.argsort(narrow, kind="stable")
    folded, span = np.arange(n, dtype=np.int64), n
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


def _non_decreasing(key: np.ndarray) -> bool:
    """Whether ``key`` never decreases from one bin to the next (False with a NaN)."""
    return bool(np.all(key[1:] >= key[:-1]))


def _rows(columns: list[Any]) -> list[tuple[Any, ...]]:
    """Result rows from columns, numpy arrays or sequences (run with the garbage collector
    paused, see ``gc_paused``). NaN in a float array is NULL (an AVG over a count <= 0: noisy
    values are never NaN)."""
    return list(zip(*(plain_values(c) for c in columns), strict=True))


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
    domain = bins.domains[i]
    if bins.product and not domain.flags.writeable:
        rank = _shared_ranks(domain)
    else:
        rank = _ranks(domain.tolist(), distinct=bins.product)
    return None if rank is None else rank[bins.key_codes(i)]


def _ranks(values: list[Any], *, distinct: bool) -> np.ndarray | None:
    """Each value's rank in ascending order (equal values, equal ranks: dense), or None if
    the values do not sort (a NULL, mixed types)."""
    if any(v is None for v in values):
        return None
    try:
        order = sorted(range(len(values)), key=values.__getitem__)
    except TypeError:
        return None
    rank = np.empty(len(values), dtype=np.int64)
    if distinct:  # a domain's values are distinct
        rank[order] = np.arange(len(values))
    else:  # selected groups repeat a key's value: equal values, equal ranks (dense)
        current = -1
        for position, j in enumerate(order):
            if position == 0 or values[j] != values[order[position - 1]]:
                current += 1
            rank[j] = current
    return rank


#: id(domain) -> (a weak reference to it, its ranks): a read-only domain array is one the
#: session's DomainMemo shares between runs (dpsql.execute.exact), so its ranks are computed
#: once (sorting 100,000 names takes ~10 ms)
_RANKS: dict[int, tuple[weakref.ref[np.ndarray], np.ndarray | None]] = {}


def _shared_ranks(domain: np.ndarray) -> np.ndarray | None:
    """:func:`_ranks` of a read-only domain's distinct values, memoised while it lives."""
    key = id(domain)
    hit = _RANKS.get(key)
    if hit is not None and hit[0]() is domain:
        return hit[1]
    rank = _ranks(domain.tolist(), distinct=True)
    if rank is not None:
        rank.flags.writeable = False

    def forget(_ref: object, key: int = key) -> None:
        _RANKS.pop(key, None)

    _RANKS[key] = (weakref.ref(domain, forget), rank)
    return rank
