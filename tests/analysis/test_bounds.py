"""Exact bounds of SUM / AVG / variance arguments (dpsql.analysis.bounds), rule by rule, and the
measurements and sensitivities built from them (dpsql.analysis.measure, .aggregates).

Columns (tests/analysis/test_elastic.py's MD): order_cost [0, 1000], discount [-50, 10],
weight [2, 7], refund [-30, -5]; quantity and note have no bounds; status is VARCHAR.
"""

from __future__ import annotations

import pytest
from sqlglot import exp

from dpsql.analysis.bounds import argument_bounds, bounds_of
from dpsql.analysis.elastic import analyze
from dpsql.analysis.model import ColumnFacts
from dpsql.errors import (
    AggregateArithmeticError,
    MissingMetricError,
    UnsupportedConstructError,
)
from dpsql.metadata import Column, Metadata, Table
from tests.analysis.test_elastic import MD
from tests.typed_metadata import typed

BOUNDS = {"c": (0.0, 1000.0), "d": (-50.0, 10.0), "w": (2.0, 7.0), "r": (-30.0, -5.0),
          "u": None}


def facts_of(col: exp.Column) -> ColumnFacts | None:
    if col.name == "s":
        return ColumnFacts(None, None, type="VARCHAR")
    if col.name == "agg":
        return ColumnFacts.derived(from_aggregate=True)
    if col.name not in BOUNDS:
        return None
    return ColumnFacts(None, BOUNDS[col.name], type="DOUBLE")


def bounds(sql: str) -> tuple[float, float]:
    import sqlglot
    return argument_bounds("SUM", sqlglot.parse_one(sql, dialect="duckdb"), facts_of)


@pytest.mark.parametrize(("sql", "expected"), [
    ("c", (0, 1000)),
    ("2.5", (2.5, 2.5)),
    ("-c", (-1000, 0)),
    ("c + d", (-50, 1010)),
    ("c - d", (-10, 1050)),  # 0 - 10 .. 1000 + 50
    ("d * r", (-300, 1500)),  # ends: 1500, 250, -300, -50
    ("w * w", (4, 49)),
    ("c * (1 - d / 100)", (0, 1500)),  # 1 - [-0.5, 0.1] = [0.9, 1.5]
    ("c / 4", (0, 250)),
    ("c / -4", (-250, 0)),
    ("c / w", (0, 500)),  # [0, 1000] * [1/7, 1/2]
    ("d / r", (-2, 10)),  # [-50, 10] * [-1/5, -1/30]: ends 10, 5/3, -2, -1/3
    ("c / GREATEST(u, 1)", (0, 1000)),  # [1, inf) -> reciprocal (0, 1]
    ("CASE WHEN u > 1 THEN w ELSE r END", (-30, 7)),  # conditions need no bounds
    ("CASE WHEN u > 1 THEN w END", (2, 7)),  # missing ELSE: NULL, skipped
    ("CASE WHEN u > 1 THEN w ELSE NULL END", (2, 7)),
    ("CASE WHEN s LIKE 'P%' THEN c ELSE 0 END", (0, 1000)),  # TPC-H Q14's shape
    ("IF(u > 1, 3, d)", (-50, 10)),
    ("COALESCE(r, w)", (-30, 7)),
    ("COALESCE(NULL, w, 100)", (2, 100)),
    ("NULLIF(d, 0) * 2", (-100, 20)),
    ("LEAST(GREATEST(u, 0), 100)", (0, 100)),  # the analyst's own clamp
    ("GREATEST(LEAST(u, 100), 0)", (0, 100)),
    ("LEAST(GREATEST(u, -5), 5) * 2", (-10, 10)),
    ("LEAST(c, 10)", (0, 10)),
    ("LEAST(c, w)", (0, 1000)),  # both nullable: with w NULL, the least is c alone
    ("GREATEST(d, 0)", (0, 10)),
    ("ABS(d)", (0, 50)),
    ("ABS(r)", (5, 30)),
    ("SIGN(r)", (-1, -1)),
    ("SIGN(d)", (-1, 1)),
    ("FLOOR(w / 2)", (1, 4)),  # [1, 3.5] -> [floor(1), ceil(3.5)]
    ("ROUND(w / 3, 1)", (0, 3)),  # [0.67, 2.33] -> [0, 3]
    ("CAST(w / 3 AS INTEGER)", (0, 3)),
    ("CAST(w / 3 AS DECIMAL(10, 1))", (0.6, 2.4)),
    ("CAST(d AS DOUBLE)", (-50, 10)),
    ("TRY_CAST(w AS BIGINT)", (2, 7)),
    ("NULL", (0, 0)),  # never a value: sums to nothing
    ("w * 0 + u * 0", (0, 0)),  # 0 * anything is 0
])
def test_exact_bounds(sql, expected):
    lo, hi = bounds(sql)
    assert (lo, hi) == pytest.approx(expected)


@pytest.mark.parametrize(("sql", "culprit"), [
    ("u", "'u'"),  # a column without bounds
    ("c + u * 2", "'u'"),  # the smallest unbounded sub-expression is named
    ("LEAST(u, 100)", "u"),  # half a clamp: no lower bound
    ("GREATEST(c, u)", "u"),
    ("LEAST(GREATEST(c, 0), LENGTH(s))", "LENGTH(s)"),  # the argument unbounded below
    ("CASE WHEN c > 1 THEN u ELSE 0 END", "u"),
    ("LENGTH(s)", "LENGTH(s)"),  # no interval rule for the function: clamp it
    ("c * ?", "?"),  # parameters: bounds are derived before values are bound
    ("c / u", "u"),
])
def test_unbounded_sub_expressions_are_named(sql, culprit):
    with pytest.raises(MissingMetricError, match="needs bounds") as err:
        bounds(sql)
    assert culprit in str(err.value)
    assert "LEAST(GREATEST(" in str(err.value) or "constant" in str(err.value)


@pytest.mark.parametrize(("sql", "error", "match"), [
    ("c / d", MissingMetricError, r"denominator d .* can be 0 .*GREATEST\(d, c\) for a constant"),
    ("c / (w - 2)", MissingMetricError, "can be 0"),
    ("c / 0", MissingMetricError, "can be 0"),
    ("s", UnsupportedConstructError, "VARCHAR, not a number"),
    ("c + s", UnsupportedConstructError, "VARCHAR"),
    ("'abc'", UnsupportedConstructError, "string"),
    ("CAST(c AS VARCHAR)", UnsupportedConstructError, "not numeric"),
    ("agg * 2", AggregateArithmeticError, "aggregate in a subquery"),
])
def test_refusals(sql, error, match):
    with pytest.raises(error, match=match):
        bounds(sql)


def test_nullability_of_least_and_greatest():
    import sqlglot
    # a constant is never NULL, so LEAST(x, 10) <= 10 whatever x is
    got = bounds_of(sqlglot.parse_one("LEAST(c, 10)"), facts_of)
    assert got is not None and (got.lo, got.hi, got.nullable) == (0, 10, False)
    # x NULL: GREATEST(x, 0) is 0 in DuckDB and Spark (NULL arguments are skipped)
    got = bounds_of(sqlglot.parse_one("GREATEST(u, 0)"), facts_of)
    assert got is not None and (got.lo, got.nullable) == (0, False) and not got.bounded


# --------------------------------------------------------------------------- measurements


def test_sum_of_an_expression_has_the_sensitivity_of_its_derived_bounds():
    a = analyze("SELECT SUM(order_cost * (1 - discount / 100)) FROM orders", MD)
    (m,) = a.measurements
    # [0, 1000] * (1 - [-0.5, 0.1]) = [0, 1000] * [0.9, 1.5] = [0, 1500]: ES = 1500
    assert m.bounds == pytest.approx((0.0, 1500.0))
    assert m.sensitivity.at(0) == pytest.approx(1500.0)


def test_analyst_clamp_bounds_an_unbounded_column():
    a = analyze("SELECT SUM(LEAST(GREATEST(quantity, 0), 100)) FROM orders", MD)
    assert a.measurements[0].bounds == (0.0, 100.0)
    assert a.measurements[0].sensitivity.at(0) == 100.0


def test_avg_of_an_expression_is_a_sum_and_a_count():
    a = analyze("SELECT AVG(weight * 2) AS w FROM orders", MD)
    assert [m.function for m in a.measurements] == ["SUM", "COUNT"]
    assert a.measurements[0].bounds == (4.0, 14.0)
    assert [m.sensitivity.at(0) for m in a.measurements] == [14.0, 1.0]


def test_refusal_names_the_unbounded_column_in_a_query():
    with pytest.raises(MissingMetricError, match=r"because orders.note has none.*'note'"):
        analyze("SELECT SUM(order_cost * note) FROM orders", MD)


def test_filter_has_the_aggregates_own_sensitivity():
    a = analyze("SELECT COUNT(*) FILTER (WHERE quantity > 2) AS n, "
                "SUM(order_cost) FILTER (WHERE note = 'x') AS s, "
                "AVG(weight) FILTER (WHERE quantity = 1) AS w FROM orders", MD)
    labels = [m.label for m in a.measurements]
    assert labels == [
        "COUNT(CASE WHEN orders.quantity > 2 THEN 1 END)",
        "SUM(CASE WHEN orders.note = 'x' THEN orders.order_cost END)",
        "SUM(CASE WHEN orders.quantity = 1 THEN orders.weight END)",
        "COUNT(CASE WHEN orders.quantity = 1 THEN orders.weight END)",
    ]
    assert [m.sensitivity.at(0) for m in a.measurements] == [1.0, 1000.0, 7.0, 1.0]
    assert a.measurements[1].bounds == (0.0, 1000.0)


def test_filter_in_a_histogram_doubles_like_the_aggregate():
    a = analyze("SELECT quantity, COUNT(*) FILTER (WHERE order_cost > 5) FROM orders "
                "GROUP BY quantity", MD)
    assert a.measurements[0].sensitivity.at(0) == 2.0


@pytest.mark.parametrize(("sql", "error", "match"), [
    ("SELECT COUNT(*) FILTER (WHERE quantity IN (SELECT customer_id FROM customers)) "
     "FROM orders", UnsupportedConstructError, "subquery"),
    ("SELECT SUM(weight * ?) FROM orders", MissingMetricError,
     r"SUM\(orders.weight \* \?\) needs bounds because a parameter \(\?\) has none"),
    ("SELECT COUNT(*) FROM (SELECT COUNT(*) FILTER (WHERE quantity > 1) AS n FROM orders) t",
     UnsupportedConstructError, "outermost SELECT"),
    ("SELECT COUNT(*) FROM (SELECT VAR_POP(weight) AS v FROM orders) t",
     UnsupportedConstructError, "outermost SELECT"),
    ("SELECT VAR_POP(note) FROM orders", MissingMetricError, "needs bounds"),
    ("SELECT STDDEV(order_cost + note) FROM orders", MissingMetricError, "note"),
])
def test_filter_and_variance_refusals(sql, error, match):
    with pytest.raises(error, match=match):
        analyze(sql, MD)


def test_variance_is_measured_as_count_and_centred_sums():
    a = analyze("SELECT VAR_POP(weight) AS v, STDDEV(weight) AS s, AVG(weight) AS a "
                "FROM orders", MD)
    # weight in [2, 7]: m = 4.5, h = 2.5. COUNT(weight) is shared with AVG's.
    by_label = {m.label: m for m in a.measurements}
    assert sorted(by_label) == sorted([
        "COUNT(orders.weight)", "SUM_CENTRED(orders.weight)",
        "SUM_CENTRED_SQUARES(orders.weight)", "SUM(orders.weight)"])
    assert by_label["SUM_CENTRED(orders.weight)"].bounds == (-2.5, 2.5)
    assert by_label["SUM_CENTRED_SQUARES(orders.weight)"].bounds == (0.0, 6.25)
    # ES: S * (max(u, 0) - min(l, 0)): 5 for the centred sum, 6.25 for the squares (uncentred
    # squares in [4, 49] would have ES 49)
    assert by_label["SUM_CENTRED(orders.weight)"].sensitivity.at(0) == 5.0
    assert by_label["SUM_CENTRED_SQUARES(orders.weight)"].sensitivity.at(0) == 6.25
    assert len(a.measurements) == 4


def test_variance_of_a_string_or_unknown_column_is_refused():
    md = typed(Metadata(tables={"t": Table("t", {
        "v": Column("v", None, bounds=(0.0, 1.0), type="VARCHAR")})}))
    with pytest.raises(UnsupportedConstructError, match="VARCHAR"):
        analyze("SELECT VARIANCE(v * 2) FROM t", md)


# --------------------------------------------------------------------------- TPC-H


def test_tpch_q1_and_q14_sums_are_accepted_with_their_derived_bounds():
    from pathlib import Path

    from dpsql.metadata import load_metadata

    md = load_metadata(Path(__file__).resolve().parents[2] / "schemas" / "tpch.yaml")
    q1 = analyze(
        "SELECT l_returnflag, l_linestatus, SUM(l_quantity), "
        "SUM(l_extendedprice * (1 - l_discount)) AS disc, "
        "SUM(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS charge, AVG(l_quantity), "
        "COUNT(*) FROM lineitem WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY "
        "GROUP BY l_returnflag, l_linestatus", md)
    by_label = {m.label: m.bounds for m in q1.measurements}
    # l_extendedprice [0, 105000], l_discount [0, 0.1], l_tax [0, 0.08]
    assert by_label["SUM(lineitem.l_extendedprice * (1 - lineitem.l_discount))"] == (0, 105000)
    charge = by_label["SUM(lineitem.l_extendedprice * (1 - lineitem.l_discount) * "
                      "(1 + lineitem.l_tax))"]
    assert charge == pytest.approx((0, 113400))
    q14 = analyze(
        "SELECT 100.00 * SUM(CASE WHEN p_type LIKE 'PROMO%' THEN l_extendedprice * "
        "(1 - l_discount) ELSE 0 END) / SUM(l_extendedprice * (1 - l_discount)) AS promo "
        "FROM lineitem, part WHERE l_partkey = p_partkey AND l_shipdate >= DATE '1995-09-01' "
        "AND l_shipdate < DATE '1995-09-01' + INTERVAL '1' MONTH", md)
    assert [m.bounds for m in q14.measurements] == [(0, 105000), (0, 105000)]


def test_parameters_in_conditions_inside_aggregates_carry_their_names():
    """The exact query is built from the measurements' nodes: each ? there has the name the
    rewrite binds it by (its position in the text), and two aggregates differing only in
    which parameter they read stay two measurements."""
    a = analyze("SELECT ? AS c, COUNT(*) FILTER (WHERE quantity > ?) AS n, "
                "SUM(CASE WHEN quantity > ? THEN weight END) AS s FROM orders "
                "WHERE order_cost > ?", MD)
    assert [m.label for m in a.measurements] == [
        "COUNT(CASE WHEN orders.quantity > $__dpsql_param_1 THEN 1 END)",
        "SUM(CASE WHEN orders.quantity > $__dpsql_param_2 THEN orders.weight END)",
    ]
    assert a.measurements[1].bounds == (2.0, 7.0)
