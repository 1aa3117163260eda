"""The exact-result layout: the one place that writes the SQL shape the backend returns and
reads it back into bins.

Without GROUP BY the exact query is the rewritten query itself: one row of measurements
``__m0..``. With GROUP BY there are two queries:

* the *domain query* reads public data only (declared value lists, bound value lists, public
  tables): one row ``(__t, __i, __v0..)`` per value of each key's domain, ``__t = 1 + i`` for
  key i, ``__i`` the value's ordinal, ``__v<i>`` the value. The session runs it *before* the
  charge: the number of bins (the product of the domain sizes) is then known, and a query
  over too many bins is refused without being charged;
* the *bins query* reads private data: one row ``(__i, __m0..)`` per non-empty bin inside the
  domains, ``__i`` its index in the domains' product (row-major, first key slowest). Numbers
  only, which a backend can hand over as arrays.

Empty bins are not sent: :func:`read_bins` fills the product with exact zeros, so every bin of
the declared domains gets noise whether or not data fell in it.

With a partition-selected key (no declared domain, dpsql.noise.partition) there is no domain
query and no product: the *groups query* (:func:`write_selected`) returns every non-empty group
``(__k0.., __n, __m0..)``, its key values, its row count ``__n`` (what the selection thresholds)
and its measurements, keys with a declared domain kept inside it; the session keeps the groups
the noisy selection picks (:func:`selected_bins`), and only those are noised and released.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsql.errors import NotSupportedError, ProgrammingError

#: Most bins (the product of the GROUP BY keys' domains) one query may release: every bin is
#: materialised, noised and returned as a row (~100 bytes each in Python).
MAX_BINS = 10_000_000


@dataclass(frozen=True)
class ExactSQL:
    """The exact queries of one plan, in the backend's source dialect (DuckDB)."""

    bins_sql: str  # reads private data
    domain_sql: str | None  # reads public data only; None without GROUP BY


def write(inner_sql: str, domain_sqls: Sequence[str], n_measurements: int) -> ExactSQL:
    """The layout's SQL around ``inner_sql``, the rewritten query selecting ``__k<i>`` (its
    group keys) and ``__m<j>`` (its measurements), and ``domain_sqls``, one relation per key
    selecting ``__v`` (value) and ``__o`` (its ordinal, INTEGER from 0)."""
    n = len(domain_sqls)
    if n == 0:
        return ExactSQL(inner_sql, None)
    domains = ", ".join(f"__d{i} AS ({sql})" for i, sql in enumerate(domain_sqls))
    # Row-major index, first key slowest: ((o0 * |d1|) + o1) * |d2| + o2 (BIGINT: the product
    # of the domain sizes is at most MAX_BINS)
    flat = "__d0.__o"
    for i in range(1, n):
        flat = f"({flat}) * (SELECT COUNT(*) FROM __d{i}) + __d{i}.__o"
    measures = "".join(f", __e.__m{j} AS __m{j}" for j in range(n_measurements))
    joins = " ".join(f"JOIN __d{i} ON __e.__k{i} IS NOT DISTINCT FROM __d{i}.__v"
                     for i in range(n))
    # The analyst's WITH stays inside __exact: the domain relations read declared tables by
    # name, and no name the analyst defines is in scope there (docs/privacy.md, "Names").
    bins = (f"WITH __exact AS ({inner_sql}), {domains} "
            f"SELECT {flat} AS __i{measures} FROM __exact AS __e {joins}")
    branches = []
    for i in range(n):
        values = ", ".join(f"__d{i}.__v AS __v{j}" if j == i else f"NULL AS __v{j}"
                           for j in range(n))
        branches.append(f"SELECT {1 + i} AS __t, __d{i}.__o AS __i, {values} FROM __d{i}")
    return ExactSQL(bins, f"WITH {domains} " + " UNION ALL ".join(branches))


def write_selected(inner_sql: str, domain_sqls: Sequence[str | None],
                   n_measurements: int) -> ExactSQL:
    """The groups query around ``inner_sql`` (selecting ``__k<i>``, ``__m<j>`` and the group's
    row count ``__n``): one row per non-empty group, ordered by its keys; a key with a domain
    relation in ``domain_sqls`` (None for a partition-selected key) keeps only groups whose
    value is in that domain (a semi-join: a group appears at most once)."""
    n = len(domain_sqls)
    domains = [f"__d{i} AS ({sql})" for i, sql in enumerate(domain_sqls) if sql is not None]
    conditions = [f"EXISTS (SELECT 1 FROM __d{i} WHERE __e.__k{i} IS NOT DISTINCT FROM "
                  f"__d{i}.__v)" for i, sql in enumerate(domain_sqls) if sql is not None]
    keys = ", ".join(f"__e.__k{i} AS __k{i}" for i in range(n))
    measures = "".join(f", __e.__m{j} AS __m{j}" for j in range(n_measurements))
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    order = ", ".join(f"__k{i} NULLS LAST" for i in range(n))
    sql = (f"WITH __exact AS ({inner_sql}){''.join(', ' + d for d in domains)} "
           f"SELECT {keys}, __e.__n AS __n{measures} FROM __exact AS __e{where} "
           f"ORDER BY {order}")
    return ExactSQL(sql, None)


@dataclass(frozen=True)
class Groups:
    """The groups query's result: every non-empty group, before selection (private)."""

    key_types: list[str]
    keys: list[np.ndarray]  # per group key: its value in each group (object arrays)
    counts: np.ndarray  # each group's row count (int64)
    exact: list[np.ndarray]  # per measurement: its exact value in each group


def read_groups(n_keys: int, integer: Sequence[bool], rows: list[tuple[Any, ...]],
                types: list[str]) -> Groups:
    """The groups query's rows (:func:`write_selected`) as :class:`Groups`."""
    n = len(rows)
    columns = list(zip(*rows, strict=True)) if rows else [()] * (n_keys + 1 + len(integer))
    if len(columns) != n_keys + 1 + len(integer):
        raise ProgrammingError("the groups query's result is malformed")
    keys = []
    for i in range(n_keys):
        column = np.empty(n, dtype=object)
        column[:] = list(columns[i])
        keys.append(column)
    counts = _as_numbers(np.array(columns[n_keys], dtype=object), True)
    exact = [_as_numbers(np.array(columns[n_keys + 1 + j], dtype=object), integer[j])
             for j in range(len(integer))]
    return Groups(list(types[:n_keys]), keys, counts, exact)


def selected_bins(groups: Groups, kept: np.ndarray) -> Bins:
    """The bins of the kept groups (indices into ``groups``, ascending): one bin per kept
    group, no product, no empty bin."""
    return Bins(groups.key_types, [e[kept] for e in groups.exact], len(kept),
                [k[kept] for k in groups.keys], len(groups.counts), product=False)


@dataclass(frozen=True)
class Domains:
    """Each group key's domain values in ordinal order, and their type names."""

    values: list[np.ndarray]
    types: list[str]

    @property
    def n_bins(self) -> int:
        """Bins of the domains' product (1 without GROUP BY)."""
        return math.prod(len(d) for d in self.values)


NO_DOMAINS = Domains([], [])


def check_bins(n_bins: int) -> None:
    """Refuse a release of more than MAX_BINS bins. The count is public: declared domains and
    public tables' values, narrowed by the query's own conditions."""
    if n_bins > MAX_BINS:
        raise NotSupportedError(
            f"the GROUP BY keys' declared domains have {n_bins:,} combinations, more than the "
            f"{MAX_BINS:,} bins dpsql releases in one query: group by fewer keys, or add a "
            "WHERE condition and ask per value of one key"
        )


def read_domains(n_keys: int, rows: list[tuple[Any, ...]], types: list[str]) -> Domains:
    """The domain query's rows as :class:`Domains` (raises if they are malformed)."""
    found: list[list[tuple[int, Any]]] = [[] for _ in range(n_keys)]
    for r in rows:
        i = r[0] - 1
        if not 0 <= i < n_keys:
            raise ProgrammingError("the domain query's result is malformed (unknown tag)")
        found[i].append((r[1], r[2 + i]))
    values = []
    for i, entries in enumerate(found):
        if sorted(o for o, _ in entries) != list(range(len(entries))):
            raise ProgrammingError(f"domain {i} of the domain query's result is malformed")
        column = np.empty(len(entries), dtype=object)
        for ordinal, value in entries:
            column[ordinal] = value
        values.append(column)
    return Domains(values, list(types[2:2 + n_keys]))


@dataclass(frozen=True)
class Bins:
    """The exact result, one entry per bin: every combination of the group keys' domain values
    (in domain order, the first key varying slowest), or the single bin."""

    key_types: list[str]
    exact: list[np.ndarray]  # per measurement: its exact value in each bin (0 when empty)
    n_bins: int
    domains: list[np.ndarray]  # per group key: its domain values, in domain order
    #: rows the backend sent: the non-empty bins and the domains' values
    n_sent: int = 0
    #: False for selected groups (:func:`selected_bins`): bin j's key i is ``domains[i][j]``
    product: bool = True

    def key_codes(self, i: int) -> np.ndarray:
        """Each bin's ordinal in group key i's domain."""
        if not self.product:
            return np.arange(self.n_bins, dtype=np.intp)
        sizes = [len(d) for d in self.domains]
        return np.tile(np.repeat(np.arange(sizes[i], dtype=np.intp), math.prod(sizes[i + 1:])),
                       math.prod(sizes[:i]))

    def key(self, i: int, order: np.ndarray | None = None) -> np.ndarray:
        """Group key i's value in each bin (an object array), or in the bins ``order`` picks:
        indexing the domain once, rather than building the column and then reordering it."""
        codes = self.key_codes(i)
        return self.domains[i][codes if order is None else codes[order]]

    @property
    def keys(self) -> list[np.ndarray]:
        """Per group key: its value in each bin."""
        return [self.key(i) for i in range(len(self.domains))]


def read_bins(domains: Domains, integer: Sequence[bool], columns: list[np.ndarray]) -> Bins:
    """The bins query's columns (``__i`` then each measurement; without GROUP BY one row of
    measurements) over ``domains``: each measurement 0 in every bin but the non-empty ones,
    where it takes its exact value (NULL, a SUM over no non-NULL value, counts as 0)."""
    if not domains.values:
        exact = [_as_numbers(c, integer[j]) for j, c in enumerate(columns)]
        n = len(columns[0]) if columns else 1
        return Bins([], exact, n, [], n)
    index, measures = columns[0], columns[1:]
    n_bins = domains.n_bins
    exact = [np.zeros(n_bins, dtype=np.int64 if integer[j] else np.float64)
             for j in range(len(integer))]
    if len(index) and n_bins:
        index = np.ma.filled(index, -1).astype(np.int64)
        if index.min() < 0 or index.max() >= n_bins:
            raise ProgrammingError("the exact result is malformed (bin index out of range)")
        for j, column in enumerate(measures):
            exact[j][index] = _as_numbers(column, integer[j])
    return Bins(domains.types, exact, n_bins, domains.values,
                len(index) + sum(len(d) for d in domains.values))


def _as_numbers(column: np.ndarray, integer: bool) -> np.ndarray:
    """A measurement column as int64 / float64, whether numpy-typed (NULL masked) or objects
    (NULL as None); NULL is 0."""
    if isinstance(column, np.ma.MaskedArray):
        column = column.filled(0)
    if column.dtype == object:
        column = np.where(column == None, 0, column)  # noqa: E711 (element-wise)
    return column.astype(np.int64 if integer else np.float64)
