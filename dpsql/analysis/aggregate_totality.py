"""Totality above aggregates in a subquery the engine runs exactly (red team of issue #17).

The totality pass (:mod:`dpsql.rewrite.totality`) wraps every risky expression in ``TRY(...)``,
but DuckDB refuses an aggregate inside TRY ("aggregates are not allowed inside the TRY
expression"), so an operation applied to an aggregate's *value* is left bare. Where the
aggregate is computed in a subquery whose rows are never released (a derived table grouped by
the privacy unit, :mod:`dpsql.units.derived`: TPC-H Q13's ``c_orders``), such an operation
runs on exact per-group values: ``HAVING CAST(SUM(o.amount) AS UTINYINT) > 3`` raised a
ConversionException iff some unit's total was above 255 -- an error, released without noise,
that depends on one unit's data.

Contract of :func:`check_total_over_aggregates`: it reads the SQL only. It returns when every
operation above an aggregate in the SELECT's select list and HAVING is on the positive list
below, and raises :class:`~dpsql.errors.UnsupportedConstructError` naming the first that is
not. Positive list (each cannot raise for any aggregate value, by its operand types):

* COUNT (BIGINT), SUM, AVG (DOUBLE) themselves, with FILTER (their arguments are made total by
  the totality pass: they hold no aggregate);
* ``LEAST`` / ``GREATEST`` and the comparisons ``= <> < <= > >=`` and ``BETWEEN`` of such
  values and numeric literals of at most 15 digits, where every pair is one DuckDB compares
  without a failing cast: an integer literal with any of them (it widens to the other side's
  type); a decimal literal, a COUNT or an AVG with a COUNT or an AVG (BIGINT widens to DOUBLE
  or to DECIMAL(20, s)) and a COUNT with a SUM (BIGINT widens to HUGEINT or DECIMAL(38, s)).
  Not a SUM with a decimal literal or another SUM: a HUGEINT SUM is cast to DECIMAL(38, 1) to
  meet ``2.5`` and fails above 10^37;
* ``IS [NOT] NULL`` of such a value, and AND / OR / NOT of such conditions;
* ``TRY_CAST(...)`` as a whole select item (it yields NULL instead of failing).

Everything else above an aggregate -- arithmetic, CAST, other functions, parameters (DuckDB
casts their bound value to the context's type), CASE -- is refused: compute it over the noisy
result instead.
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql.errors import UnsupportedConstructError

__all__ = ["check_total_over_aggregates"]

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_INTEGER = re.compile(r"\d{1,15}")
_DECIMAL = re.compile(r"(?=[\d.]{1,16}$)\d*\.\d*")

# kinds of a total value: an aggregate's, or a literal's
COUNT, AVG, SUM, INT, DEC, BOOL = "count", "avg", "sum", "int", "dec", "bool"


def check_total_over_aggregates(select: exp.Select) -> None:
    """Refuse an operation above an aggregate in ``select``'s select list or HAVING that could
    raise on some aggregate value (module contract)."""
    for item in select.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.TryCast):
            continue  # TRY_CAST(x AS t) yields NULL instead of failing
        if _has_aggregate(node):
            _kind(node)
    having = select.args.get("having")
    if having is not None and _has_aggregate(having.this) and _kind(having.this) != BOOL:
        raise _refuse(having.this, "HAVING is not a comparison")


def _has_aggregate(node: exp.Expression) -> bool:
    return next(node.find_all(exp.AggFunc), None) is not None


def _refuse(node: exp.Expression, why: str) -> UnsupportedConstructError:
    return UnsupportedConstructError(
        f"{node.sql()} in a subquery applies an operation to an aggregate's exact value that "
        f"could fail on some values ({why}), and an error would depend on the data: keep "
        "COUNT / SUM / AVG bare there, or compare them (or LEAST / GREATEST) with integer "
        "constants, and compute anything else from the released result")


def _literal(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Neg):
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    if _INTEGER.fullmatch(node.this):
        return INT
    return DEC if _DECIMAL.fullmatch(node.this) else None


def _kind(node: exp.Expression) -> str:
    """The kind of a value computed from aggregates and literals on the positive list, or
    raise (module contract)."""
    node = node.unnest()
    literal = _literal(node)
    if literal is not None:
        return literal
    agg = node.this if isinstance(node, exp.Filter) else node
    if isinstance(agg, exp.Count):
        return COUNT
    if isinstance(agg, exp.Avg):
        return AVG
    if isinstance(agg, exp.Sum):
        return SUM
    if isinstance(node, (exp.And, exp.Or)):
        if _kind(node.left) == BOOL and _kind(node.right) == BOOL:
            return BOOL
        raise _refuse(node, "AND / OR of values that are not conditions")
    if isinstance(node, exp.Not):
        if _kind(node.this) == BOOL:
            return BOOL
        raise _refuse(node, "NOT of a value that is not a condition")
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        _kind(node.this)
        return BOOL
    if isinstance(node, (exp.Least, exp.Greatest, *_COMPARISONS, exp.Between)):
        operands = _operands(node)
        kinds = [_kind(o) for o in operands]
        if BOOL in kinds:
            raise _refuse(node, "a condition compared as a number")
        for i, a in enumerate(kinds):
            for b in kinds[i + 1:]:
                if not _pair_is_total(a, b):
                    raise _refuse(node, f"a {a} meets a {b}: a cast that can overflow")
        if isinstance(node, (exp.Least, exp.Greatest)):
            return next((k for k in (AVG, SUM, COUNT, DEC) if k in kinds), INT)
        return BOOL
    raise _refuse(node, f"{node.key.upper()} is not on the positive list")


def _operands(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, (exp.Least, exp.Greatest)):
        return [node.this, *node.expressions]
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    return [node.left, node.right]


def _pair_is_total(a: str, b: str) -> bool:
    """Whether DuckDB compares (or takes LEAST / GREATEST of) kinds a and b without a cast
    that can fail (module contract)."""
    pair = {a, b}
    if INT in pair:
        return True
    if SUM in pair:
        return pair <= {SUM, COUNT} and a != b
    return pair <= {COUNT, AVG, DEC}
