"""A COUNT(*) under one privacy unit read flat: each row's unit id, counted in numpy.

A count's R2T levels need each unit's contribution c_u; dpsql.units.rewrite computes them with
a GROUP BY over the join and returns their histogram. When the units are many, that GROUP BY
is a hash aggregate as costly as the join itself (TPC-H Q12 under orders: 6M lineitems into
1.5M orders, ~95 ms of ~200; issue #17's time goal). Reading the unit id of every joined row
(Arrow, one BIGINT column) and counting the ids with ``np.bincount`` costs less there.

:func:`flat_unit_ids` derives that read from the histogram query: the per-unit query's FROM and
WHERE with ``__u`` alone selected and no GROUP BY, behind dpsql's row guard
(dpsql.units.multi_rewrite.limited: at most FLAT_ROWS + 1 rows). The plan carries it beside
the histogram query (dpsql.rewrite.plan.ExecutionPlan.fallback_sql), compiled while
preparing. dpsql.units.execute runs it only on a columnar backend (DuckDB), only when the
unit's ids span more than :data:`MANY_UNITS` values (:func:`many_units`: where DuckDB's
perfect hash aggregate stops), and only up to the guard; otherwise, or past it, the
histogram query runs. :func:`histogram_of_ids` turns the ids into the histogram query's very
rows, so the levels are the same integers either way (a data-dependent choice of the time
only: timing is outside the model, docs/privacy.md section 2).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sqlglot
from sqlglot import exp

from dpsql.backends.base import Backend
from dpsql.units.analysis import UnitRelease
from dpsql.units.rewrite import counts_only

#: a unit id range past which the flat read pays: DuckDB's perfect hash aggregate holds up
#: to 2^18 groups here (dpsql.backends.duckdb.PERFECT_HT_BITS), and below it the GROUP BY is
#: cheaper than moving every row's id (TPC-H Q10 under customer, 150,000 ids: 10.7 ms grouped
#: against 13.9 flat; Q12 under orders, 6M ids: 192 ms against 158)
MANY_UNITS = 1 << 18


def flat_unit_ids(histogram_sql: str, release: UnitRelease | None) -> str | None:
    """The guarded flat read (DuckDB text) of a one-unit release whose one part is a
    ``COUNT(*)`` (module docstring); None for any other query. From the SQL and the metadata
    only."""
    from dpsql.units.multi_rewrite import limited

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
    return limited(flat.sql("duckdb"))


def many_units(backend: Backend, release: UnitRelease) -> bool:
    """Whether the unit's id column spans more than :data:`MANY_UNITS` integers (the
    backend's :meth:`~dpsql.backends.base.Backend.value_range`; False when it cannot say)."""
    span = backend.value_range(release.unit.table, release.unit.column)
    if span is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in span):
        return False
    return span[1] - span[0] >= MANY_UNITS


def histogram_of_ids(ids: Any) -> list[tuple[int, int, int]]:
    """The histogram query's rows ``(c, n, z)`` (dpsql.units.rewrite._r2t_histogram: n units
    contribute c rows, z = 1 when the rows of no unit, the NULL ids, number c) from one unit
    id per row (a NULL masked or None), counted exactly (ids coded as the two-unit reads code
    them: dpsql.units.multi_execute.unit_codes)."""
    from dpsql.units.multi_execute import coded_ids

    codes, nulls = coded_ids(ids)
    if nulls is not None:
        codes = codes[~nulls]
    per_unit = np.bincount(codes) if codes.size else np.zeros(0, np.int64)
    per_unit = per_unit[per_unit > 0]  # offset codes leave gaps: no unit there
    values, units = np.unique(per_unit, return_counts=True)
    rows = {int(c): [int(n), 0] for c, n in zip(values, units, strict=True)}
    if nulls is not None:
        rows.setdefault(int(np.count_nonzero(nulls)), [0, 0])[1] = 1
    return [(c, n, z) for c, (n, z) in rows.items()]
