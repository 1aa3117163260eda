"""Quantiles in the Spark compile step: DuckDB's ``QUANTILE_CONT`` / ``QUANTILE_DISC`` /
``QUANTILE`` / ``MEDIAN`` as Spark SQL with the same answers (dpsql.backends.spark_sql).

sqlglot writes DuckDB's ``QUANTILE_CONT(x, q)`` for Spark as ``PERCENTILE_CONT(x, q)``, which
Spark refuses (it wants WITHIN GROUP), and Spark's own ``percentile`` / ``median`` interpolate as
``lo + (hi - lo) d``: NaN or infinite where DuckDB's answer is finite when the two order
statistics are infinite or differ by more than the double range. So each quantile is computed
from the group's sorted non-NULL values ``a = array_sort(collect_list(x))`` (bound once, by a
one-element ``transform``) with DuckDB's own arithmetic (its ``Interpolator``; checked on both
engines by tests/backends/test_spark_quantiles.py), n = size(a):

* ``QUANTILE_CONT(x, q)`` and ``MEDIAN(x)`` (q = 0.5): RN = double(n - 1) * double(q), FRN =
  floor(RN), CRN = ceil(RN); the value at FRN when FRN = CRN, else ``lo (1 - d) + hi d`` with
  lo, hi the DOUBLE values at FRN, CRN and d = RN - FRN;
* ``QUANTILE_DISC(x, q)`` and ``QUANTILE(x, q)``: the value at ``max(1, n - floor(n - n q)) -
  1`` (= ceil(n q) - 1, at least 0: the SQL standard's PERCENTILE_DISC), in exact decimal
  arithmetic for a decimal literal q (both engines type ``0.3`` as DECIMAL) and in double for a
  double literal (``3e-1``), as DuckDB does;
* NULL for a group without a non-NULL value; NULLs skipped; ties kept (one value per row);
  NaN sorts above every number on both engines.

The arguments are restricted to integer and floating-point types (sqlglot's types over the
registered schema). Over DECIMAL, DuckDB interpolates the unscaled integers and truncates to the
column's scale; over DATE / TIMESTAMP it interpolates a timestamp: those, an argument of
unknown type, and a fraction that is not one numeric literal in [0, 1] raise NotSupportedError
(fail closed, from the SQL and the schema alone), naming the fix: cast the argument to DOUBLE.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from dpsql.errors import NotSupportedError

SOURCE_DIALECT = "duckdb"

_NUMERIC = (*exp.DataType.INTEGER_TYPES, *exp.DataType.FLOAT_TYPES)


def _check_argument(node: exp.Expression, argument: exp.Expression) -> None:
    kind = argument.type
    if kind is None or not kind.is_type(*_NUMERIC):
        shown = "unknown" if kind is None else kind.sql(dialect=SOURCE_DIALECT)
        raise NotSupportedError(
            f"{node.sql(dialect=SOURCE_DIALECT)[:60]}: on the Spark backend a quantile's argument "
            f"must be an integer or floating-point value, and this one is {shown} (DuckDB and "
            "Spark interpolate other types differently): cast it, e.g. "
            "QUANTILE_CONT(CAST(x AS DOUBLE), 0.5), or use the DuckDB backend")


def _fraction(node: exp.Expression, fraction: exp.Expression | None) -> exp.Expression:
    literal = fraction.unnest() if fraction is not None else None
    if not (isinstance(literal, exp.Literal) and not literal.is_string
            and 0.0 <= float(literal.this) <= 1.0):
        raise NotSupportedError(
            f"{node.sql(dialect=SOURCE_DIALECT)[:60]}: on the Spark backend a quantile's "
            "fraction must be one numeric literal between 0 and 1")
    return literal.copy()


#: the lambda variable bound to the sorted values (no column of a generated query has it)
_VALUES = "__dpsql_sorted"

_CONT = f"""TRY_ELEMENT_AT(TRANSFORM(ARRAY(ARRAY_SORT(COLLECT_LIST(CAST(__arg AS DOUBLE)))),
  {_VALUES} -> CASE WHEN SIZE({_VALUES}) = 0 THEN NULL
  WHEN FLOOR(__rn) = CEIL(__rn) THEN TRY_ELEMENT_AT({_VALUES}, CAST(FLOOR(__rn) AS INT) + 1)
  ELSE TRY_ELEMENT_AT({_VALUES}, CAST(FLOOR(__rn) AS INT) + 1) * (CAST(1 AS DOUBLE)
    - (__rn - FLOOR(__rn)))
    + TRY_ELEMENT_AT({_VALUES}, CAST(CEIL(__rn) AS INT) + 1) * (__rn - FLOOR(__rn)) END), 1)"""
_RN = f"(CAST(SIZE({_VALUES}) - 1 AS DOUBLE) * CAST(__q AS DOUBLE))"

_DISC = f"""TRY_ELEMENT_AT(TRANSFORM(ARRAY(ARRAY_SORT(COLLECT_LIST(__arg))),
  {_VALUES} -> CASE WHEN SIZE({_VALUES}) = 0 THEN NULL
  ELSE TRY_ELEMENT_AT({_VALUES}, CAST(GREATEST(1, SIZE({_VALUES})
    - FLOOR(SIZE({_VALUES}) - SIZE({_VALUES}) * __q)) AS INT)) END), 1)"""


def _spark(template: str, argument: exp.Expression, fraction: exp.Expression) -> exp.Expression:
    """``template`` (Spark SQL) with ``__arg`` and ``__q`` replaced by the given nodes."""
    tree = sqlglot.parse_one(template.replace("__rn", _RN), read="spark")
    for column in list(tree.find_all(exp.Column)):
        if column.name == "__arg":
            column.replace(argument.copy())
        elif column.name == "__q":
            column.replace(fraction.copy())
    return tree


def translate_quantiles(tree: exp.Expression) -> exp.Expression:
    """Rewrite every DuckDB quantile of ``tree`` for Spark (module docstring).

    Precondition: ``tree`` is in DuckDB's dialect and typed (sqlglot's annotate_types over
    the registered schema). Guarantee: each ``QUANTILE_CONT(x, q)`` / ``MEDIAN(x)`` /
    ``QUANTILE_DISC(x, q)`` / ``QUANTILE(x, q)`` becomes a Spark expression computing DuckDB's
    answer from the sorted values; every one of them has an integer or floating-point argument
    and a literal fraction in [0, 1], or NotSupportedError is raised. A quantile written with
    WITHIN GROUP is left as sqlglot writes it.
    """
    for node in list(tree.find_all(exp.PercentileCont, exp.PercentileDisc, exp.Quantile,
                                   exp.Median)):
        if isinstance(node.parent, exp.WithinGroup):
            continue
        argument = node.this
        _check_argument(node, argument)
        if isinstance(node, exp.Median):
            node.replace(_spark(_CONT, argument, exp.Literal.number("0.5")))
            continue
        fraction = node.args.get("quantile") if isinstance(node, exp.Quantile) \
            else node.expression
        q = _fraction(node, fraction)
        template = _CONT if isinstance(node, exp.PercentileCont) else _DISC
        node.replace(_spark(template, argument, q))
    return tree
