"""Spark's form of the order-fixed floating-point aggregates of sample-and-aggregate.

dpsql.sample_aggregate.rewrite writes each floating-point aggregate with ``ORDER BY`` its own
arguments (``SUM(x ORDER BY x)``, ``CORR(y, x ORDER BY y, x)``): a floating-point sum depends on
the order of its terms, and the order a database reaches a group's rows in can depend on rows of
other groups, so without it one block's answer could move when a row of another block changes
(docs/privacy.md, section 4, "Floating-point summation"). DuckDB runs ordered aggregates as
written. Spark has none: :func:`translate_ordered` rewrites each one as a fold over the sorted
array of its arguments, ``AGGREGATE(ARRAY_SORT(COLLECT_LIST(x)), ...)``, so it too adds the terms
in an order fixed by their values (ties are equal terms):

* SUM: the fold of ``acc + v`` from NULL (no non-NULL value: NULL, as SUM);
* AVG: that sum over the array's size (an empty block: NULL; non-ANSI Spark divides by 0 as
  NULL);
* VAR_POP / VAR_SAMP (VARIANCE) / STDDEV_POP / STDDEV_SAMP (STDDEV): two passes, the mean then
  the sum of squared deviations, over n or n - 1 (NULL below one or two values, as DuckDB), and
  its square root;
* COVAR_POP / COVAR_SAMP / CORR: the same over the sorted (y, x) pairs with both non-NULL.

DISTINCT collects a set instead of a list. The two-pass moments differ from DuckDB's
one-pass ones only by rounding (the S&A block answers are compared at 1e-9 relative in
tests/sample_aggregate/test_rewrite.py). Any other aggregate with ORDER BY fails closed.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from dpsql.errors import NotSupportedError

_SUM = ("AGGREGATE({L}, CAST(NULL AS DOUBLE), "
        "(__a, __v) -> COALESCE(__a, CAST(0 AS DOUBLE)) + __v)")
_MEAN = f"({_SUM} / SIZE({{L}}))"
_SQUARES = ("AGGREGATE({L}, CAST(0 AS DOUBLE), "
            "(__a, __v) -> __a + (__v - {M}) * (__v - {M}))")
_PAIR_MEAN = ("(AGGREGATE({L}, CAST(NULL AS DOUBLE), "
              "(__a, __p) -> COALESCE(__a, CAST(0 AS DOUBLE)) + __p.{f}) / SIZE({L}))")
_PRODUCTS = ("AGGREGATE({L}, CAST(0 AS DOUBLE), "
             "(__a, __p) -> __a + (__p.{f} - {M}) * (__p.{g} - {N}))")


def _list(value: str, distinct: bool) -> str:
    return f"ARRAY_SORT({'COLLECT_SET' if distinct else 'COLLECT_LIST'}({value}))"


def _one_argument(kind: type[exp.Expression], values: str) -> str:
    """The Spark text of aggregate ``kind`` over the sorted array ``values``."""
    if kind is exp.Sum:
        return _SUM.format(L=values)
    mean = _MEAN.format(L=values)
    if kind is exp.Avg:
        return mean
    squares = _SQUARES.format(L=values, M=mean)
    population = kind in (exp.VariancePop, exp.StddevPop)
    # NULL below one value (population) or two (sample), as DuckDB: 0 / (0 - 1) is -0.0
    least = 1 if population else 2
    variance = (f"(CASE WHEN SIZE({values}) < {least} THEN NULL ELSE {squares} / "
                f"(SIZE({values}) - {0 if population else 1}) END)")
    if kind in (exp.Stddev, exp.StddevSamp, exp.StddevPop):
        return f"SQRT({variance})"
    return variance


def _two_arguments(kind: type[exp.Expression], pairs: str) -> str:
    """The Spark text of CORR / COVAR_* over the sorted array ``pairs`` of (y, x) structs."""
    my = _PAIR_MEAN.format(L=pairs, f="y")
    mx = _PAIR_MEAN.format(L=pairs, f="x")
    products = _PRODUCTS.format(L=pairs, f="y", g="x", M=my, N=mx)
    if kind is exp.CovarPop:
        return f"(CASE WHEN SIZE({pairs}) < 1 THEN NULL ELSE {products} / SIZE({pairs}) END)"
    if kind is exp.CovarSamp:
        return (f"(CASE WHEN SIZE({pairs}) < 2 THEN NULL ELSE {products} / "
                f"(SIZE({pairs}) - 1) END)")
    yy = _PRODUCTS.format(L=pairs, f="y", g="y", M=my, N=my)
    xx = _PRODUCTS.format(L=pairs, f="x", g="x", M=mx, N=mx)
    return f"({products} / SQRT({yy} * {xx}))"


_ONE = (exp.Sum, exp.Avg, exp.Stddev, exp.StddevSamp, exp.StddevPop, exp.Variance,
        exp.VariancePop)
_TWO = (exp.Corr, exp.CovarSamp, exp.CovarPop)


def _replace(template: str, arguments: dict[str, exp.Expression]) -> exp.Expression:
    """``template`` (Spark SQL) parsed, each placeholder column replaced by its expression."""
    tree = sqlglot.parse_one(template, read="spark")
    for column in list(tree.find_all(exp.Column)):
        if not column.table and column.name in arguments:
            column.replace(arguments[column.name].copy())
    return tree


def translate_ordered(tree: exp.Expression) -> exp.Expression:
    """Every aggregate with an ORDER BY in ``tree`` as a fold over its sorted arguments (module
    docstring); NotSupportedError for an ordered aggregate it has no form for."""
    for order in list(tree.find_all(exp.Order)):
        agg = order.parent
        if agg is None or not isinstance(agg, exp.AggFunc):
            continue  # a query's own ORDER BY
        if isinstance(agg, _ONE) and agg.this is order:
            value = order.this
            distinct = isinstance(value, exp.Distinct)
            if distinct:
                (value,) = value.expressions
            text = _one_argument(type(agg), _list("__x", distinct))
            agg.replace(_replace(text, {"__x": value}))
        elif isinstance(agg, _TWO) and agg.args.get("expression") is order:
            y, x = agg.this, order.this
            both = ("IF(__y IS NULL OR __x IS NULL, NULL, NAMED_STRUCT('y', __y, 'x', __x))")
            text = _two_arguments(type(agg), _list(both, False))
            agg.replace(_replace(text, {"__y": y, "__x": x}))
        else:
            raise NotSupportedError(
                f"{agg.sql(dialect='duckdb')[:60]} has no Spark form: run it on the DuckDB "
                "backend")
    return tree
