"""FILTER as CASE, and the variance family's measurements and post-processing
(dpsql.analysis.aggregates): exact values on DuckDB."""

from __future__ import annotations

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from dpsql.analysis.aggregates import (
    VARIANCE_TYPES,
    moment_bounds,
    moment_labels,
    moment_nodes,
    unfilter,
    variance_sql,
)

CON = duckdb.connect(":memory:")


def parse(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, dialect="duckdb")


@pytest.mark.parametrize(("sql", "expected"), [
    ("COUNT(*) FILTER (WHERE x > 1)", "COUNT(CASE WHEN x > 1 THEN 1 END)"),
    ("COUNT(y) FILTER (WHERE x > 1)", "COUNT(CASE WHEN x > 1 THEN y END)"),
    ("COUNT(DISTINCT y) FILTER (WHERE x > 1)", "COUNT(DISTINCT CASE WHEN x > 1 THEN y END)"),
    ("SUM(x * 2) FILTER (WHERE s = 'a' AND x < 3)",
     "SUM(CASE WHEN s = 'a' AND x < 3 THEN x * 2 END)"),
    ("AVG(x) FILTER (WHERE TRUE)", "AVG(CASE WHEN TRUE THEN x END)"),
    ("VAR_POP(x) FILTER (WHERE x > 0)", "VAR_POP(CASE WHEN x > 0 THEN x END)"),
    ("SUM(x)", "SUM(x)"),
])
def test_unfilter(sql, expected):
    assert unfilter(parse(f"SELECT {sql}").expressions[0]).sql(dialect="duckdb") == expected


def test_filter_as_case_counts_and_sums_the_same_rows():
    rows = "(VALUES (1, 2), (2, NULL), (3, 5), (NULL, 1)) t(x, y)"
    for agg in ("COUNT(*)", "COUNT(y)", "COUNT(DISTINCT y)", "SUM(y)", "AVG(y)", "VAR_POP(y)"):
        node = parse(f"SELECT {agg} FILTER (WHERE x >= 2 OR x IS NULL)").expressions[0]
        direct = CON.execute(f"SELECT {node.sql(dialect='duckdb')} FROM {rows}").fetchone()
        case = CON.execute(f"SELECT {unfilter(node).sql(dialect='duckdb')} FROM {rows}").fetchone()
        assert direct == case, agg


VALUES = (0.0, 1.5, 7.0, 7.0, 3.25, 2.0)
BOUNDS = (0.0, 8.0)


def _moments(values, bounds) -> tuple[float, float, float]:
    """COUNT, centred SUM and SUM of squares computed by DuckDB from the measurement nodes."""
    arg = exp.column("v")
    nodes = moment_nodes(arg, bounds)
    table = "(VALUES " + ", ".join(f"({'NULL' if v is None else v})" for v in values) + ") t(v)"
    row = CON.execute("SELECT " + ", ".join(n.sql(dialect="duckdb") for n in nodes)
                      + f" FROM {table}").fetchone()
    assert row is not None
    return float(row[0]), float(row[1] or 0), float(row[2] or 0)


def _post(function: str, n: float, s1: float, s2: float, bounds=BOUNDS) -> float:
    node = parse(f"SELECT {function}(v)").expressions[0]
    sql = variance_sql(node, exp.convert(n), exp.convert(s1), exp.convert(s2),
                       moment_bounds(bounds)[0][1]).sql(dialect="duckdb")
    row = CON.execute(f"SELECT {sql}").fetchone()
    assert row is not None
    return float(row[0])


@pytest.mark.parametrize("function", ["VAR_POP", "VAR_SAMP", "VARIANCE", "STDDEV_POP",
                                      "STDDEV_SAMP", "STDDEV"])
def test_noise_free_moments_give_the_exact_variance(function):
    assert isinstance(parse(f"SELECT {function}(v)").expressions[0], VARIANCE_TYPES)
    n, s1, s2 = _moments(VALUES, BOUNDS)
    assert n == 6
    # centred at m = 4: S1 = sum(v) - 6 * 4
    assert s1 == pytest.approx(sum(VALUES) - 24)
    table = "(VALUES " + ", ".join(f"({v})" for v in VALUES) + ") t(v)"
    row = CON.execute(f"SELECT {function}(v) FROM {table}").fetchone()
    assert row is not None
    assert _post(function, n, s1, s2) == pytest.approx(float(row[0]), rel=1e-12)


def test_values_outside_the_bounds_are_clamped_and_null_is_skipped():
    n, s1, s2 = _moments((-5.0, 20.0, None), BOUNDS)  # -> 0 and 8; NULL not counted
    assert (n, s1, s2) == (2.0, 0.0, 32.0)
    assert _post("VAR_POP", n, s1, s2) == 16.0  # 0 and 8: the largest variance, h^2


@pytest.mark.parametrize(("function", "n", "s1", "s2", "expected"), [
    ("VAR_POP", -3.0, 5.0, -2.0, 0.0),  # n <= 0 -> 1; negative -> 0
    ("VAR_POP", 1.0, 0.0, 1e9, 16.0),  # above h^2 = 16 -> 16
    ("VAR_SAMP", 1.0, 0.0, 1e9, 32.0),  # n -> 2: at most h^2 * 2 / 1
    ("VAR_SAMP", 0.0, 0.0, 8.0, 8.0),  # n -> 2: (8 - 0) / 1
    ("STDDEV", 3.0, 0.0, -1.0, 0.0),
    ("STDDEV_POP", 4.0, 0.0, 36.0, 3.0),  # sqrt(36 / 4)
])
def test_post_processing_stays_in_range(function, n, s1, s2, expected):
    assert _post(function, n, s1, s2) == pytest.approx(expected)


def test_labels_are_shared_by_every_variance_of_one_argument():
    arg = exp.column("v", table="t")
    assert moment_labels(arg) == ("COUNT(t.v)", "SUM_CENTRED(t.v)", "SUM_CENTRED_SQUARES(t.v)")
    assert moment_bounds((-2.0, 6.0)) == ((-4.0, 4.0), (0.0, 16.0))
