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


def test_each_unit_chooses_its_own_groups_so_the_groups_share_the_truncation():
    """Every customer has items of kinds 1, 2 and 3 and may keep one (max_groups 1). The
    choice is salted by the unit's id: the customers spread over the three kinds, about a
    third each, instead of all keeping the kind whose keys alone hash lowest (which released
    one kind with every customer and two with none: a histogram wrong in its shape, not
    only in its scale). Deterministic (DuckDB's hash); each kind's share lies within 6
    binomial standard deviations of 1/3 (a 1-in-10^8 split for a fair hash)."""
    md = tiny.metadata(max_groups=1, max_rows_per_group=1)
    n = 3000
    db = {"customer": [(c, 1) for c in range(1, n + 1)],
          "orders": [(c, c, 0) for c in range(1, n + 1)],
          "items": [(c, 1, kind) for c in range(1, n + 1) for kind in (1, 2, 3)],
          "regions": [(1,)]}
    con = tiny.load(db)
    analysis = analyze_request("SELECT kind, COUNT(*) FROM items GROUP BY kind", md)
    rows = dict(con.execute(plan_execution(analysis, md).exact_sql).fetchall())
    assert len(rows) == 3 and sum(rows.values()) == n, rows  # one kind per customer
    spread = 6 * (n * (1 / 3) * (2 / 3)) ** 0.5
    assert all(abs(kept - n / 3) <= spread for kept in rows.values()), rows


HUGE = """
privacy_unit: {units}
tables:
  people: {{columns: {{pid: {{type: INTEGER}}}}}}
  stores: {{{stores}columns: {{sid: {{type: INTEGER}}}}}}
  visits:
    unit: {path}
    columns: {{v_pid: {{type: INTEGER}}, v_sid: {{type: INTEGER}},
              region: {{type: INTEGER, releasable: true, domain: {{values: [1, 2]}}}},
              v: {{type: DOUBLE, bounds: [0, 1.0e+308]}}}}
"""


@pytest.mark.parametrize(("units", "path", "stores"), [
    ("{table: people, column: pid, max_contribution: 4}", "v_pid", "public: true, "),
    ("[{table: people, column: pid, max_contribution: 4}, {table: stores, column: sid}]",
     "{people: v_pid, stores: v_sid}", ""),
])
@pytest.mark.parametrize("sql", ["SELECT SUM(v) FROM visits",
                                 "SELECT region, SUM(v) FROM visits GROUP BY region"])
def test_a_unit_bound_past_the_largest_double_is_refused_by_the_metadata(units, path, stores,
                                                                          sql):
    """max_contribution (or max_groups x max_rows_per_group) times a SUM's bound past the
    largest double: a clear refusal naming the fix, not a ValueError (the red team's note)."""
    from dpsql.errors import NotSupportedError
    from dpsql.metadata import loads_metadata

    md = loads_metadata(HUGE.format(units=units, path=path, stores=stores), "<huge bounds>")
    with pytest.raises(NotSupportedError) as err:
        analyze_request(sql, md)
    assert "largest double" in str(err.value) and "bounds" in str(err.value)
