"""A COUNT(*) under one privacy unit read flat: the query of each row's unit id.

A count's R2T levels need each unit's contribution c_u; dpsql.units.rewrite computes them with
a GROUP BY over the join and returns their histogram. When the units are many, that GROUP BY
is a hash aggregate as costly as the join itself (TPC-H Q12 under orders: 6M lineitems into
1.5M orders, ~95 ms of ~200; issue #17's time goal). Reading the unit id of every joined row
(Arrow, one BIGINT column) and counting the ids with ``np.bincount`` costs less there.

:func:`flat_unit_ids` derives that read from the histogram query: the per-unit query's FROM and
WHERE with ``__u`` alone selected and no GROUP BY, read behind dpsql's row guard (the
backend's stream stops past FLAT_ROWS rows, dpsql.units.execute). The plan carries it beside
the histogram query (dpsql.rewrite.plan.ExecutionPlan.fallback_sql), compiled while
preparing. dpsql.units.execute runs it only on a columnar backend (DuckDB), only when the
unit's ids span more than :data:`MANY_UNITS` values (``many_units``: where DuckDB's perfect
hash aggregate stops), and only up to the guard; otherwise, or past it, the histogram query
runs. Its ``histogram_of_ids`` turns the ids into the histogram query's very rows, so the
levels are the same integers either way (a data-dependent choice of the time only: timing is
outside the model, docs/privacy.md section 2).
"""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp

from dpsql.units.analysis import UnitRelease
from dpsql.units.rewrite import counts_only

#: a unit id range past which the flat read pays: DuckDB's perfect hash aggregate holds up
#: to 2^18 groups here (dpsql.backends.duckdb.PERFECT_HT_BITS), and below it the GROUP BY is
#: cheaper than moving every row's id (TPC-H Q10 under customer, 150,000 ids: 10.7 ms grouped
#: against 13.9 flat; Q12 under orders, 6M ids: 192 ms against 158)
MANY_UNITS = 1 << 18


@functools.lru_cache(maxsize=256)
def flat_unit_ids(histogram_sql: str, release: UnitRelease | None) -> str | None:
    """The guarded flat read (DuckDB text) of a one-unit release whose one part is a
    ``COUNT(*)`` (module docstring); None for any other query. From the SQL and the metadata
    only (so memoised: a query prepared again parses nothing here)."""
    if release is None or release.more or not counts_only(release) or len(release.parts) != 1:
        return None
    tree = sqlglot.parse_one(histogram_sql, read="duckdb")
    source = tree.args.get("from_")
    inner = source.this.this if source is not None else None
    if (not isinstance(inner, exp.Select)
            or [e.alias_or_name for e in inner.expressions] != ["__u", "__p0"]):
        return None
    count = inner.expressions[1].this
    group = inner.args.get("group")
    if (not isinstance(count, exp.Count) or not isinstance(count.this, exp.Star)
            or group is None or len(group.expressions) != 1
            or any(inner.args.get(k) for k in ("having", "qualify", "distinct", "order",
                                               "limit", "offset"))):
        return None
    flat = inner.copy()
    flat.set("expressions", [flat.expressions[0]])
    flat.set("group", None)
    return flat.sql("duckdb")
