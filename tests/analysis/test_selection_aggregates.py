"""dpsql/analysis/selection_aggregates.py: which queries are selection queries, their exact
sensitivity and grid, and refusals that read the SQL and the metadata only (no database is
opened here at all)."""

from __future__ import annotations

import datetime

import numpy as np
import pytest

from dpsql.analysis.selection_aggregates import (
    QuantileQuery,
    TopKQuery,
    analyze_selection,
    epsilon_shares,
)
from dpsql.analysis.selection_grid import MAX_CELLS, Grid
from dpsql.errors import (
    MissingMetricError,
    NotSupportedError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import loads_metadata

MD = loads_metadata("""
tables:
  t:
    columns:
      id: {max_freq: 1, type: INTEGER}
      g: {max_freq: 10, releasable: true, domain: {values: [1, 2, 3]}, type: INTEGER}
      h: {max_freq: 10, releasable: true, partition_selection: true, type: INTEGER}
      y: {max_freq: 10, bounds: [0, 10], type: INTEGER}
      v: {max_freq: 10, bounds: [-1.5, 2.5], type: DOUBLE}
      w: {max_freq: 10, type: DOUBLE}
      d: {max_freq: 10, type: DATE, bounds: ['2020-01-01', '2020-12-31']}
  u:
    columns:
      id: {max_freq: 1, type: INTEGER}
      y: {max_freq: 10, bounds: [0, 10], type: INTEGER}
  p:
    public: true
    columns:
      id: {max_freq: 2, type: INTEGER}
      y: {max_freq: 2, bounds: [0, 10], type: INTEGER}
""")


def quantile(sql: str) -> QuantileQuery:
    query = analyze_selection(sql, MD)
    assert isinstance(query, QuantileQuery)
    return query


@pytest.mark.parametrize(("sql", "function", "q", "discrete"), [
    ("SELECT MIN(y) FROM t", "MIN", 0.0, True),
    ("SELECT MAX(y) FROM t", "MAX", 1.0, True),
    ("SELECT MEDIAN(y) FROM t", "MEDIAN", 0.5, False),
    ("SELECT quantile(y, 0.9) FROM t", "QUANTILE_DISC", 0.9, True),
    ("SELECT quantile_disc(y, 0.25) FROM t", "QUANTILE_DISC", 0.25, True),
    ("SELECT quantile_cont(y, 0.75) FROM t", "QUANTILE_CONT", 0.75, False),
    ("SELECT percentile_cont(0.1) WITHIN GROUP (ORDER BY y) FROM t", "QUANTILE_CONT", 0.1,
     False),
    ("SELECT percentile_disc(0.3) WITHIN GROUP (ORDER BY y) FROM t", "QUANTILE_DISC", 0.3,
     True),
])
def test_each_spelling_is_one_quantile(sql, function, q, discrete):
    query = quantile(sql)
    (aggregate,) = query.aggregates
    assert (aggregate.function, aggregate.quantile, aggregate.discrete) == (function, q, discrete)
    assert query.sensitivity == 1.0  # S = 1, no GROUP BY
    assert query.argument == "t.y"


def test_grouped_sensitivity_is_two_s_and_public_join_multiplies_s():
    assert quantile("SELECT g, MEDIAN(y) FROM t GROUP BY g").sensitivity == 2.0
    # p.id has max frequency 2: each t row joins up to 2 p rows, S = 2
    assert quantile("SELECT MEDIAN(t.y) FROM t JOIN p ON t.id = p.id").sensitivity == 2.0
    assert quantile("SELECT t.g, MAX(t.y) FROM t JOIN p ON t.id = p.id "
                    "GROUP BY t.g").sensitivity == 4.0


def test_grid_is_exact_for_integers_and_cells_otherwise():
    assert quantile("SELECT MEDIAN(y) FROM t").grid == Grid(0.0, 10.0, 11, 1.0, True)
    grid = quantile("SELECT MEDIAN(v) FROM t").grid
    assert grid == Grid(-1.5, 2.5, MAX_CELLS, 4.0 / MAX_CELLS, False)
    np.testing.assert_allclose(grid.values()[[0, -1]], [-1.5 + 2.0 / MAX_CELLS,
                                                        2.5 - 2.0 / MAX_CELLS])
    # an expression: bounds by interval arithmetic, no declared integer type: cells
    assert quantile("SELECT MEDIAN(y * 2) FROM t").grid == Grid(0.0, 20.0, MAX_CELLS,
                                                                 20.0 / MAX_CELLS, False)
    assert Grid.of((0, 5000), True).cells == MAX_CELLS  # too many integers: cells
    assert Grid.of((3, 3), False).values().tolist() == [3.0]


def test_dates_choose_among_the_days_of_their_bounds():
    query = quantile("SELECT g, MIN(d), MEDIAN(d) FROM t GROUP BY g")
    assert query.grid.origin == datetime.date(2020, 1, 1)
    assert (query.grid.cells, query.grid.integer) == (366, True)  # 2020 is a leap year
    assert query.grid.released()[[0, -1]].tolist() == [datetime.date(2020, 1, 1),
                                                      datetime.date(2020, 12, 31)]
    assert query.sensitivity == 2.0
    long = Grid.of_days(datetime.date(1992, 1, 1), datetime.date(1998, 12, 31))
    assert (long.cells, long.integer) == (MAX_CELLS, False)
    assert long.released()[0] == datetime.date(1992, 1, 2)  # the middle day of 2.5 days


def test_distinct_aggregates_are_measurements_with_equal_shares():
    query = quantile("SELECT MIN(y) AS lo, MEDIAN(y), MAX(y) AS hi, MIN(y) + 1 AS lo1 FROM t")
    # measurement j of the outputs carrier is aggregates[j]; MIN(y) + 1 reuses MIN's
    assert [a.function for a in query.aggregates] == ["MIN", "MEDIAN", "MAX"]
    assert [c.measurements for c in query.outputs.columns] == [(0,), (1,), (2,), (0,)]
    assert [c.name for c in query.outputs.columns] == ["lo", "median(y)", "hi", "lo1"]
    assert epsilon_shares(query, 0.9) == pytest.approx((0.3, 0.3, 0.3))
    # the histogram: the cell is the last key, one COUNT(*)
    assert [k.name for k in query.histogram.group_keys] == ["__cell"]
    assert [m.function for m in query.histogram.measurements] == ["COUNT"]


def test_where_having_and_order_are_kept():
    query = quantile("SELECT g, MEDIAN(y) AS m FROM t WHERE v > 0 GROUP BY g "
                     "HAVING MEDIAN(y) > 2 ORDER BY m DESC LIMIT 2")
    assert "WHERE" in query.histogram.query.sql() and "HAVING" not in query.histogram.query.sql()
    assert query.outputs.query.args.get("having") is not None


@pytest.mark.parametrize(("sql", "error", "match"), [
    ("SELECT MEDIAN(y), COUNT(*) FROM t", UnsupportedQueryError, "separate queries"),
    ("SELECT MIN(y), MAX(v) FROM t", UnsupportedQueryError, "one query per argument"),
    ("SELECT MEDIAN(t.y) FROM t JOIN u ON t.id = u.id", UnsupportedQueryError,
     "join of private tables"),
    ("SELECT MEDIAN(w) FROM t", MissingMetricError, r"MEDIAN\(w\) needs bounds"),
    ("SELECT MIN(YEAR(d)) FROM t", MissingMetricError, r"MIN\(YEAR\(d\)\) needs bounds"),
    ("SELECT MIN(d) FROM (SELECT d FROM t) s", UnsupportedConstructError, "DATE or TIMESTAMP"),
    ("SELECT h, MEDIAN(y) FROM t GROUP BY h", UnsupportedQueryError, "declared domain"),
    ("SELECT MEDIAN(y + ?) FROM t", UnsupportedConstructError, "parameter"),
    ("SELECT quantile(y, 1.5) FROM t", UnsupportedConstructError, "between 0 and 1"),
    ("SELECT quantile(y, [0.1, 0.2]) FROM t", UnsupportedConstructError, "between 0 and 1"),
    ("SELECT MAX(y) FILTER (WHERE v > 0) FROM t", UnsupportedConstructError, "FILTER"),
    ("SELECT MAX(DISTINCT y) FROM t", UnsupportedConstructError, "DISTINCT"),
    ("SELECT MEDIAN(p.y) FROM p", NotSupportedError, "public tables only"),
    ("SELECT g, MEDIAN(y) FROM t GROUP BY g HAVING MEDIAN(y) > ?", UnsupportedConstructError,
     "HAVING"),
    ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY y DESC) FROM t",
     UnsupportedConstructError, "ascending"),
])
def test_refusals_name_the_construct_and_the_fix(sql, error, match):
    with pytest.raises(error, match=match):
        analyze_selection(sql, MD)


def test_not_a_selection_query():
    assert analyze_selection("SELECT COUNT(*) FROM t", MD) is None
    # MIN inside a subquery is the ordinary analysis's (which refuses it)
    assert analyze_selection("SELECT COUNT(*) FROM t WHERE y > (SELECT MIN(y) FROM t)",
                             MD) is None
    with pytest.raises(UnsupportedConstructError, match="give the argument"):
        analyze_selection("SELECT MIN() FROM t", MD)


def test_top_k_shape():
    query = analyze_selection(
        "SELECT g FROM t WHERE y > 2 GROUP BY g ORDER BY COUNT(*) DESC LIMIT 2", MD)
    assert isinstance(query, TopKQuery)
    assert (query.k, query.key_column, query.count_column, query.sensitivity) == (2, 0, None,
                                                                                   1.0)
    assert epsilon_shares(query, 1.0) == (1.0, 0.0)
    for sql, count in [("SELECT COUNT(*) AS n, g FROM t GROUP BY g ORDER BY n DESC LIMIT 1", 0),
                       ("SELECT g, COUNT(*) FROM t GROUP BY g ORDER BY 2 DESC LIMIT 3", 1)]:
        query = analyze_selection(sql, MD)
        assert isinstance(query, TopKQuery) and query.count_column == count
        assert epsilon_shares(query, 1.0) == (0.5, 0.5)
    joined = analyze_selection("SELECT t.g FROM t JOIN p ON t.id = p.id GROUP BY t.g "
                               "ORDER BY COUNT(*) DESC LIMIT 1", MD)
    assert isinstance(joined, TopKQuery) and joined.sensitivity == 2.0


@pytest.mark.parametrize("sql", [
    "SELECT g FROM t GROUP BY g ORDER BY COUNT(*) ASC LIMIT 2",  # smallest: not RNM's shape
    "SELECT g FROM t GROUP BY g ORDER BY COUNT(*) DESC",
    "SELECT g FROM t GROUP BY g ORDER BY COUNT(*) DESC LIMIT 2 OFFSET 1",
    "SELECT g, SUM(y) FROM t GROUP BY g ORDER BY COUNT(*) DESC LIMIT 2",
    "SELECT g + 1 FROM t GROUP BY g ORDER BY COUNT(*) DESC LIMIT 2",
    "SELECT g FROM t GROUP BY g HAVING COUNT(*) > 3 ORDER BY COUNT(*) DESC LIMIT 2",
    "SELECT t.g FROM t JOIN u ON t.id = u.id GROUP BY t.g ORDER BY COUNT(*) DESC LIMIT 2",
    "SELECT h FROM t GROUP BY h ORDER BY COUNT(*) DESC LIMIT 2",
    "SELECT g FROM t GROUP BY g ORDER BY COUNT(DISTINCT y) DESC LIMIT 2",
])
def test_other_order_by_limit_queries_keep_todays_path(sql):
    assert analyze_selection(sql, MD) is None
