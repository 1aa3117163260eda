"""The executed query of a release over two privacy units (dpsql.units.multi): the join
grouped by the pair of unit ids, or (plain counts and SUMs) its rows themselves.

:func:`pair_contributions` takes the exact query as the other passes leave it (``SELECT
<aggregates> AS __m<j> FROM .. WHERE ..``, no GROUP BY, every aggregate clamped and total),
computes each row's id in both units (``__u0``, ``__u1``: each along its unit path by LEFT JOINs
to unique keys, as dpsql.units.rewrite computes one) and groups by the pair, with one column
``__p<i>`` per R2T part: the pair's row count (COUNT) or sum of clamped non-negative /
non-positive values (a SUM's two parts) -- psi(q) of R2T's LP, per result pair. One database
query; the truncation (dpsql.noise.r2t_flow) runs on its rows.

**Flat** (:func:`flat_rows`: every part a ``COUNT(*)`` with every level below 2^31 rows, or a
SUM; no HAVING, DISTINCT, ORDER BY or LIMIT of its own; all public): the query returns its rows
ungrouped -- ``__u0, __u1`` and, per SUM part ``i``, the row's clamped value ``__v<i>`` (its
fixed-point steps as a DOUBLE: exact) -- since grouping 6M pairs costs DuckDB ~4x the join
itself (TPC-H Q7, issue #17). Each row is a result of R2T's LP (as in R2T's own formulation:
one variable per join result), psi 1 for a COUNT(*), its value for a SUM. A pair's rows are
parallel edges, which carry exactly what one edge of their summed capacity carries: no edge can
carry more than T (its unit's own cap bounds what enters or leaves it). So for counts every
level's Q_j is the grouped query's integer (dpsql.noise.r2t_flow's step is 1 below 2^31: no
flooring); for a SUM each row's capacity is floored at level j's step delta_j
(``floor(min(v, tau_j) / delta_j)``, dpsql.noise.r2t_flow) row by row, which loses less than
delta_j = tau_j 2^-30 per row (a bias, as the pairs' flooring per pair): less than tau_j / 128
per level up to 2^23 rows, tau_j / 16 up to the flat read's 2^26.

dpsql.units.multi_execute reads at most :func:`flat_guard` rows (:data:`FLAT_ROWS` with up to
three columns: the backend's stream stops past it, dpsql.backends.base.execute_flat_columns; a
LIMIT in the SQL would cost DuckDB its parallel result collection), and only from a backend
that fetches columns natively (DuckDB; Spark would collect them as Python tuples: it runs the
fallback at once, the same levels). More rows (the
fallback, :func:`regrouped`, compiled while preparing too) are grouped in the database, with
**the same capacities**: per pair, each COUNT(*) part's row count, and for each SUM part one
column ``__p<i>_<j>`` per level, the sum over the pair's rows of the very integers the flat
reading floors them to (IEEE arithmetic on the same DOUBLE: ``min`` and a power-of-two scale
are exact), capped at the level's T_j (a cap no flow can exceed). A level's flow needs its own
column only, so the columns are spread over several queries of at most
:data:`FALLBACK_COLUMNS` each, run one after the other: the fallback holds about as much per
pair at a time as the grouped pairs of one SUM did. Which of the two queries runs
depends on the data (the number of rows), so both must give the same levels: they do, exactly
(``tests/units/test_multi_flat.py``).

A row whose path to one unit does not resolve (NULL or orphan keys) has that id NULL: it
belongs to no unit of that table (it stays in every neighbour that keeps its other unit); the
truncation gives such a result a node of its own on that side (only its other unit binds it,
dpsql.units.multi_execute.pair_codes). No unit's removal removes those nodes. A row NULL on
both sides belongs to no unit at all: it is in every neighbour, so, as under one unit, its psi
is left out of the flow and added in full after the noise (c_NULL, dpsql.units.noise); the
fallback reads it with one more query (:func:`neither_totals`).
"""

from __future__ import annotations

import functools
import math

import sqlglot
from sqlglot import exp

from dpsql.noise.r2t_flow import level_step
from dpsql.rewrite import fixed_point
from dpsql.units.analysis import R2TPart, UnitRelease
from dpsql.units.grid import part_grid, part_levels
from dpsql.units.rewrite import (
    add_unit_id,
    drop_measurements,
    measurements,
    part_summand,
    select_parts,
)

#: the most rows a flat query of up to three columns (two ids and one SUM part's values)
#: returns before it is grouped in the database instead (:func:`flat_guard`: fewer with more
#: columns). Past it the rows read are thrown away (the grouped query runs), so it bounds that
#: waste and the memory of a flat read: 8-byte values, at most 3 * 2^26 of them, 1.5 GiB.
#: TPC-H SF10's two-unit queries (60M rows) read flat: Q7 over customer and supplier in 8 s
#: and 3.2 GB, Q21 over orders and supplier in 5 s and 2.6 GB, where grouping their pairs in
#: the database took 19 s and 5.3 GB, 14 s and 4.3 GB. Past it, where grouping pays (many
#: rows per pair), the fallback holds the pairs.
FLAT_ROWS = 1 << 26


def flat_guard(columns: int, rows: int | None = None) -> int:
    """The most rows a flat read of ``columns`` columns keeps: ``rows`` (default
    :data:`FLAT_ROWS`) up to three columns, proportionally fewer beyond, so no flat read
    holds more than 3 ``rows`` values whatever the number of SUM parts. Public: the SQL's
    shape alone."""
    rows = FLAT_ROWS if rows is None else rows
    return rows * 3 // max(3, columns)


def value_levels(part: R2TPart, release: UnitRelease) -> list[float]:
    """A part's levels in value units, as the flow reads them (``tau_j * b`` over the part's
    fine levels, dpsql.units.grid: the very numbers dpsql.units.multi_execute passes to
    dpsql.noise.r2t_flow)."""
    bound, _ = part_grid(part, release.unit)
    return [tau * bound for tau in part_levels(part, release.unit, fine=True)]


def pair_contributions(select: exp.Select, release: UnitRelease,
                       exponents: dict[int, int]) -> exp.Select:
    """The exact query grouped by (``__u0``, ``__u1``) with each part's psi, or flat
    (module docstring). Precondition: ``release.more`` holds the second unit,
    ``release.parts`` the R2T parts (no GROUP BY)."""
    assert len(release.more) == 1
    flat = flat_rows(select, release)
    add_unit_id(select, release.source, "__u0")
    add_unit_id(select, release.more[0][1], "__u1")
    if not flat:
        select_parts(select, release, exponents, sums_as_double=True)
        return select
    nodes = measurements(select)
    used: set[int] = set()
    for i, part in enumerate(release.parts):
        if not part.integer:  # a SUM part: the row's clamped value, exact as a DOUBLE
            steps = part_summand(nodes[part.index], part, release,
                                 reuse=part.index not in used)
            select.select(exp.alias_(fixed_point.to_value(steps, exponents[part.index]),
                                     f"__v{i}"), copy=False)
        used.add(part.index)
    select.set("group", None)
    drop_measurements(select)
    return select


def flat_rows(select: exp.Select, release: UnitRelease) -> bool:
    """Whether the query returns its rows flat (module docstring): every measurement a release
    part reads is a plain ``COUNT(*)`` (every level below 2^31 rows) or a SUM, and no HAVING,
    DISTINCT, ORDER BY or LIMIT of its own. Depends on the SQL and the metadata only."""
    if any(select.args.get(k) for k in ("having", "distinct", "order", "limit", "group")):
        return False
    nodes = measurements(select)
    for part in release.parts:
        agg = nodes.get(part.index)
        if not part.integer:
            if not isinstance(agg, exp.Sum):
                return False
            continue
        if not (isinstance(agg, exp.Count) and isinstance(agg.this, exp.Star)):
            return False
        bound, _ = part_grid(part, release.unit)
        if bound != 1 or max(part_levels(part, release.unit, fine=True)) * bound >= 2**31:
            return False
    return bool(release.parts)


@functools.lru_cache(maxsize=256)
def is_flat(exact_sql: str) -> bool:
    """Whether a two-unit exact query (its DuckDB text) is the flat form: the two unit ids
    (and a SUM part's row values), no GROUP BY."""
    tree = sqlglot.parse_one(exact_sql, read="duckdb")
    names = [e.alias_or_name for e in tree.expressions]
    return (names[:2] == ["__u0", "__u1"] and not tree.args.get("group")
            and all(n.startswith("__v") for n in names[2:]))


def guarded_flat(exact_sql: str, release: UnitRelease | None, exponents: dict[int, int]
                 ) -> tuple[str, tuple[str, ...]] | None:
    """For an executed query in the flat form (its final DuckDB text): the flat query itself
    (read behind :func:`flat_guard` by dpsql.units.multi_execute) and the grouped fallback's
    queries (:func:`regrouped`, then :func:`neither_totals`), all run with the same
    parameters; None for any other query. All are the plan's, compiled while preparing
    (dpsql.rewrite.plan.ExecutionPlan). ``exponents``: the clamps pass's k per SUM."""
    if release is None or not release.more or not is_flat(exact_sql):
        return None
    return _guarded_flat(exact_sql, release, tuple(sorted(exponents.items())))


@functools.lru_cache(maxsize=256)
def _guarded_flat(exact_sql: str, release: UnitRelease, exponents: tuple[tuple[int, int], ...]
                  ) -> tuple[str, tuple[str, ...]]:
    """:func:`guarded_flat`'s texts, memoised (from the SQL and the metadata only: a query
    prepared again parses nothing here)."""
    return exact_sql, (*regrouped(exact_sql, release),
                       neither_totals(exact_sql, release, dict(exponents)))


#: the most capacity columns one fallback query returns beside the two ids (a SUM part has one
#: per level): the fallback holds at most that many values per pair at a time, as the grouped
#: pairs of before did for one SUM's two parts and a COUNT
FALLBACK_COLUMNS = 3


def fallback_layout(release: UnitRelease) -> list[list[tuple[int, int | None]]]:
    """The capacity columns of the fallback's queries, in order: per query, ``(i, None)`` for
    COUNT(*) part i's row count and ``(i, j)`` for SUM part i's capacities at its level j, at
    most :data:`FALLBACK_COLUMNS` per query. Public: the release's parts and grid."""
    items: list[tuple[int, int | None]] = [
        (i, None) for i, part in enumerate(release.parts) if part.integer]
    items += [(i, j) for i, part in enumerate(release.parts) if not part.integer
              for j in range(len(value_levels(part, release)))]
    return [items[k:k + FALLBACK_COLUMNS] for k in range(0, len(items), FALLBACK_COLUMNS)]


def regrouped(flat_sql: str, release: UnitRelease) -> tuple[str, ...]:
    """The flat query (its DuckDB text) grouped by the pair in the database with the flat
    reading's capacities (module docstring), as the queries of :func:`fallback_layout`: each
    ``__u0, __u1``, then its columns, a COUNT(*) part's row count ``__p<i>`` or a SUM part's
    ``__p<i>_<j>`` (the pair's rows' floored capacities at level j, in steps delta_j, capped
    at T_j). Each level's flow reads one query's rows alone, so the queries run one at a time
    and their rows need no matching."""
    parsed = sqlglot.parse_one(flat_sql, read="duckdb")  # once: each query takes a copy
    out = []
    for chunk in fallback_layout(release):
        keys = [exp.column(k, "__f") for k in ("__u0", "__u1")]
        outer = exp.select(*keys).from_(
            exp.alias_(exp.Subquery(this=parsed.copy()), "__f", table=True))
        for i, j in chunk:
            if j is None:
                outer.select(exp.alias_(exp.Count(this=exp.Star()), f"__p{i}"), copy=False)
                continue
            value = exp.Coalesce(this=exp.column(f"__v{i}", "__f"),
                                 expressions=[exp.Literal.number(0)])
            tau = value_levels(release.parts[i], release)[j]
            outer.select(exp.alias_(level_capacity(value, tau), f"__p{i}_{j}"), copy=False)
        out.append(outer.group_by(*[k.copy() for k in keys], copy=False).sql("duckdb"))
    return tuple(out)


def neither_totals(flat_sql: str, release: UnitRelease, exponents: dict[int, int]) -> str:
    """The flat query's (DuckDB text) rows of neither unit (``__u0`` and ``__u1`` NULL) in
    full, one row: per part ``__z<i>``, a COUNT(*) part's row count or a SUM part's total,
    its exact sum of steps 2^-k (``exponents``) converted once -- the same double as the
    grouped query's psi of their pair and math.fsum of their flat values (a correctly rounded
    exact sum each). What the fallback reads for c_NULL (module docstring)."""
    sub = exp.alias_(exp.Subquery(this=sqlglot.parse_one(flat_sql, read="duckdb")), "__f",
                     table=True)
    outer = exp.select().from_(sub)
    for i, part in enumerate(release.parts):
        if part.integer:
            total: exp.Expression = exp.Count(this=exp.Star())
        else:
            k = exponents[part.index]
            value = exp.Coalesce(this=exp.column(f"__v{i}", "__f"),
                                 expressions=[exp.Literal.number(0)])
            total = fixed_point.to_value(fixed_point.exact_sum(fixed_point.scaled(value, k)), k)
        outer.select(exp.alias_(total, f"__z{i}"), copy=False)
    neither = exp.and_(*[exp.Is(this=exp.column(u, "__f"), expression=exp.Null())
                         for u in ("__u0", "__u1")])
    return outer.where(neither, copy=False).sql("duckdb")


def level_capacity(value: exp.Expression, tau: float) -> exp.Expression:
    """The summed capacity of a pair's rows at level ``tau`` (value units): ``min(sum over
    its rows of floor(min(v, tau) / delta), T)``, delta = dpsql.noise.r2t_flow.level_step(tau),
    T = floor(tau / delta) < 2^31, in exact arithmetic: ``v`` a DOUBLE, ``min`` with ``tau``'s
    own double and the scale by 2^-e exact, so each row's floor is the integer
    dpsql.noise.r2t_certify.level_caps computes for it; summed as DECIMAL(38, 0)."""
    delta = level_step(tau, False)
    exponent = math.frexp(delta)[1] - 1  # delta = 2^exponent
    least = exp.Anonymous(this="LEAST", expressions=[value.copy(), exp.convert(float(tau))])
    floored = exp.Anonymous(this="FLOOR", expressions=[fixed_point.scaled(least, -exponent)])
    total = fixed_point.exact_sum(floored)
    cap = exp.Anonymous(this="LEAST", expressions=[total, exp.Literal.number(
        math.floor(tau / delta))])
    return exp.Cast(this=cap, to=exp.DataType.build("BIGINT"))
