"""dpsql.units.analysis: the per-group clamp of the two-stage GROUP BY, by exact value."""

from __future__ import annotations

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.rewrite.plan import plan_execution
from dpsql.units.analysis import per_group_clamp
from tests.units import tiny


@pytest.mark.parametrize("sql,expected", [
    ("SELECT kind, COUNT(*) FROM items GROUP BY kind", (0.0, 3.0)),
    ("SELECT kind, SUM(qty) FROM items GROUP BY kind", (0.0, 12.0)),  # [0, 4]
    ("SELECT kind, SUM(amount) FROM items i JOIN orders o ON o.o_id = i.i_order"
     " GROUP BY kind", (-9.0, 15.0)),  # [-3, 5]
    # bounds away from zero: a unit with one row must not be raised to C rows' worth
    ("SELECT kind, SUM(qty + 1) FROM items GROUP BY kind", (0.0, 15.0)),  # [1, 5]
    ("SELECT kind, SUM(qty - 5) FROM items GROUP BY kind", (-15.0, 0.0)),  # [-5, -1]
])
def test_per_group_clamp_holds_every_sum_of_at_most_c_rows(sql, expected):
    md = tiny.metadata(max_groups=2, max_rows_per_group=3)
    analysis = analyze_request(sql, md)
    assert md.privacy_unit is not None
    assert per_group_clamp(analysis.measurements[0], md.privacy_unit) == expected


def test_two_stage_sums_are_exact_when_units_stay_within_the_bounds():
    # each customer: at most 2 kinds and 3 items per kind, so nothing is clamped or dropped
    md = tiny.metadata(max_groups=2, max_rows_per_group=3)
    db = {"customer": [(1, 1), (2, 2)], "orders": [(1, 1, 0), (2, 2, 0)],
          "items": [(1, 2, 1), (1, 0, 1), (1, 4, 2), (2, 1, 1)], "regions": [(1,), (2,)]}
    con = tiny.load(db)
    for sql, truth in [
        ("SELECT kind, SUM(qty + 1) FROM items GROUP BY kind", {0: 3 + 1 + 2, 1: 5}),
        ("SELECT kind, SUM(qty - 5) FROM items GROUP BY kind", {0: -3 - 5 - 4, 1: -1}),
        ("SELECT kind, COUNT(*) FROM items GROUP BY kind", {0: 3, 1: 1}),
    ]:
        analysis = analyze_request(sql, md)
        rows = con.execute(plan_execution(analysis, md).exact_sql).fetchall()
        assert {r[0]: r[1] for r in rows} == truth, sql
