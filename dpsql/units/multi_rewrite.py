"""The executed query of a release over two privacy units (dpsql.units.multi): the join
grouped by the pair of unit ids, or for plain counts its rows themselves.

:func:`pair_contributions` takes the exact query as the other passes leave it (``SELECT
<aggregates> AS __m<j> FROM .. WHERE ..``, no GROUP BY, every aggregate clamped and total),
computes each row's id in both units (``__u0``, ``__u1``: each along its unit path by LEFT JOINs
to unique keys, as dpsql.units.rewrite computes one) and groups by the pair, with one column
``__p<i>`` per R2T part: the pair's row count (COUNT) or sum of clamped non-negative /
non-positive values (a SUM's two parts) -- psi(q) of R2T's LP, per result pair. One database
query; the truncation (dpsql.units.flow) runs on its rows.

**Plain counts, flat** (:func:`flat_counts`: every part a ``COUNT(*)`` and every level below
2^31 rows, both public): the query returns the rows' ``__u0, __u1`` only, ungrouped (grouping
6M pairs costs DuckDB ~4x the join itself); dpsql.units.multi_execute reads at most
:data:`FLAT_ROWS` + 1 of them (:func:`limited`: its guard, not the analyst's LIMIT; the
plan's exact query, :func:`guarded_flat_counts`). Each row
is a result of psi 1; a pair's rows are parallel edges of capacity 1 each, which carry
exactly what the pair's one edge of capacity min(psi, T) carries: no edge can carry more than
T (its unit's own cap bounds what enters or leaves it), so the maximum flow, hence every
level's Q_j, is the same integer (dpsql.noise.r2t_flow's step is 1 below 2^31: no flooring).
More rows than FLAT_ROWS (many rows per pair): dpsql.units.multi_execute runs the plan's
fallback query instead, grouped in the database (:func:`regrouped`), so memory stays bounded by
the pairs, as before; both queries are compiled while preparing.

A row whose path to one unit does not resolve (NULL or orphan keys) has that id NULL: it
belongs to no unit of that table (it stays in every neighbour that keeps its other unit); the
truncation treats each unit table's NULL as one more node, never removed.
"""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp

from dpsql.units.analysis import UnitRelease
from dpsql.units.grid import part_grid, part_levels
from dpsql.units.rewrite import add_unit_id, select_parts

#: the most rows a flat count query returns before it is grouped in the database instead.
#: Past it the rows read are thrown away (the grouped query runs), so it bounds that waste and
#: the memory of a flat read: two int64 ids per row, 128 MiB at 2^23 (TPC-H SF1's two-unit
#: counts read at most 6M rows; at SF10 they are grouped in the database, as before).
FLAT_ROWS = 1 << 23


def pair_contributions(select: exp.Select, release: UnitRelease,
                       exponents: dict[int, int]) -> exp.Select:
    """The exact query grouped by (``__u0``, ``__u1``) with each part's psi, or flat for plain
    counts (module docstring). Precondition: ``release.more`` holds the second unit,
    ``release.parts`` the R2T parts (no GROUP BY)."""
    assert len(release.more) == 1
    flat = flat_counts(select, release)
    add_unit_id(select, release.source, "__u0")
    add_unit_id(select, release.more[0][1], "__u1")
    if flat:
        select.set("group", None)
        select.set("expressions", [e for e in select.expressions
                                   if not (isinstance(e, exp.Alias)
                                           and e.alias.startswith("__m"))])
        return select
    select_parts(select, release, exponents, sums_as_double=True)
    return select


def flat_counts(select: exp.Select, release: UnitRelease) -> bool:
    """Whether the query returns its rows flat (module docstring): every measurement a
    release part reads is a plain ``COUNT(*)``, every level of every part below 2^31 rows, no
    HAVING, DISTINCT, ORDER BY or LIMIT of its own. Depends on the SQL and the metadata only."""
    if any(select.args.get(k) for k in ("having", "distinct", "order", "limit", "group")):
        return False
    nodes = {int(e.alias[3:]): e.this for e in select.expressions
             if isinstance(e, exp.Alias) and e.alias.startswith("__m")}
    for part in release.parts:
        agg = nodes.get(part.index)
        if not (part.integer and isinstance(agg, exp.Count) and isinstance(agg.this, exp.Star)):
            return False
        bound, _ = part_grid(part, release.unit)
        if bound != 1 or max(part_levels(part, release.unit)) * bound >= 2**31:
            return False
    return bool(release.parts)


@functools.lru_cache(maxsize=256)
def is_flat(exact_sql: str) -> bool:
    """Whether a two-unit exact query (its DuckDB text) is the flat form: it selects the two
    unit ids only."""
    tree = sqlglot.parse_one(exact_sql, read="duckdb")
    return [e.alias_or_name for e in tree.expressions] == ["__u0", "__u1"]


def guarded_flat_counts(exact_sql: str, release: UnitRelease | None) -> tuple[str, str] | None:
    """For an executed query in the flat form (its final DuckDB text): the query returning at
    most FLAT_ROWS + 1 of its rows (:func:`limited`) and the grouped fallback
    (:func:`regrouped`), both run with the same parameters; None for any other query. Both
    texts are the plan's, compiled while preparing (dpsql.rewrite.plan.ExecutionPlan)."""
    if release is None or not release.more or not is_flat(exact_sql):
        return None
    return limited(exact_sql), regrouped(exact_sql, len(release.parts))


def limited(flat_sql: str) -> str:
    """The flat query (its DuckDB text) returning at most FLAT_ROWS + 1 rows (dpsql's guard,
    not the analyst's LIMIT: all rows are used, or none and :func:`regrouped` runs)."""
    sub = exp.alias_(exp.Subquery(this=sqlglot.parse_one(flat_sql, read="duckdb")), "__f",
                     table=True)
    keys = [exp.column(k, "__f") for k in ("__u0", "__u1")]
    return exp.select(*keys).from_(sub).limit(FLAT_ROWS + 1).sql("duckdb")


def regrouped(flat_sql: str, n_parts: int) -> str:
    """The flat query (its DuckDB text) grouped by the pair in the database: ``__u0, __u1``
    and each part's row count ``__p<i>``, as a grouped query returns."""
    tree = sqlglot.parse_one(flat_sql, read="duckdb")
    keys = [exp.column(k, "__f") for k in ("__u0", "__u1")]
    outer = exp.select(*keys).from_(exp.alias_(exp.Subquery(this=tree), "__f", table=True))
    for i in range(n_parts):
        outer.select(exp.alias_(exp.Count(this=exp.Star()), f"__p{i}"), copy=False)
    return outer.group_by(*[k.copy() for k in keys], copy=False).sql("duckdb")
