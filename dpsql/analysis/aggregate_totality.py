"""Totality above aggregates in a subquery the engine runs exactly (red team of issue #17).

The totality pass (:mod:`dpsql.rewrite.totality`) wraps every risky expression in ``TRY(...)``,
but DuckDB refuses an aggregate inside TRY ("aggregates are not allowed inside the TRY
expression"), so an operation applied to an aggregate's *value* is left bare. Where the
aggregate is computed in a subquery whose rows are never released (a derived table grouped by
the privacy unit, :mod:`dpsql.units.derived`: TPC-H Q13's ``c_orders``), such an operation
runs on exact per-group values: ``HAVING CAST(SUM(o.amount) AS UTINYINT) > 3`` raised a
ConversionException iff some unit's total was above 255 -- an error, released without noise,
that depends on one unit's data.

Contract of :func:`check_total_over_aggregates`: it reads the SQL and the declared types of
the columns SUM reads (``column_type``). It returns when every operation above an aggregate in
the SELECT's select list and HAVING is on the positive list below, and raises
:class:`~dpsql.errors.UnsupportedConstructError` naming the first that is not. Positive list
(each cannot raise for any aggregate value, by its operand types):

* COUNT (BIGINT), AVG (DOUBLE) and SUM themselves, with FILTER (their arguments hold no
  aggregate: the totality pass makes them total); a SUM's type is known when it sums one
  column of a declared type: HUGEINT for integers, DECIMAL(38, s) for DECIMAL(p, s), DOUBLE
  for FLOAT / DOUBLE;
* ``LEAST`` / ``GREATEST`` and the comparisons ``= <> < <= > >=`` and ``BETWEEN`` of such
  values and numeric literals of at most 15 digits, where every pair meets in a type that
  holds both sides' every value: DOUBLE on either side; two integers (the wider holds both);
  otherwise DuckDB casts both to a DECIMAL with max(integer digits) + max(scale) digits, and
  that must be at most 38 (COUNT has 19 integer digits, a HUGEINT SUM 39, a DECIMAL(38, s) SUM
  38 - s, a literal its own). So a HUGEINT SUM never meets a decimal literal (``SUM(h) > 2.5``
  casts to DECIMAL(38, 1) and failed above 10^37), and ``SUM(x) > 999999999999999`` for a
  DECIMAL(38, 30) sum failed on every non-empty table;
* ``IS [NOT] NULL`` of such a value, and AND / OR / NOT of such conditions;
* ``TRY_CAST(...)`` as a whole select item (it yields NULL instead of failing).

Everything else above an aggregate -- arithmetic, CAST, other functions, parameters (DuckDB
casts their bound value to the context's type), CASE, a SUM of unknown type in a comparison --
is refused: compute it over the noisy result instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.errors import UnsupportedConstructError

__all__ = ["check_total_over_aggregates"]

T = exp.DataType.Type
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_INTEGER = re.compile(r"\d{1,15}")
_DECIMAL = re.compile(r"(?=[\d.]{1,16}$)(\d*)\.(\d*)")
#: integer column types whose SUM is a HUGEINT that cannot overflow (a HUGEINT column's can)
_INTEGERS = frozenset({T.TINYINT, T.UTINYINT, T.SMALLINT, T.USMALLINT, T.INT, T.UINT,
                       T.BIGINT, T.UBIGINT})
_MAX_DIGITS = 38


@dataclass(frozen=True)
class Kind:
    """The type of a total value: a condition, a DOUBLE, or a number with ``digits`` integer
    digits and ``scale`` decimals (scale None: an integer type); ``unknown``: a SUM of unknown
    type (total itself, but its comparisons are not)."""

    family: str  # "bool", "double", "number", "unknown"
    digits: int = 0
    scale: int | None = None


BOOL, DOUBLE, UNKNOWN = Kind("bool"), Kind("double"), Kind("unknown")
COUNT = Kind("number", 19)
HUGEINT = Kind("number", 39)

ColumnType = Callable[[exp.Column], str | None]


def _no_types(_column: exp.Column) -> str | None:
    return None


def check_total_over_aggregates(select: exp.Select, column_type: ColumnType = _no_types) -> None:
    """Refuse an operation above an aggregate in ``select``'s select list or HAVING that could
    raise on some aggregate value (module contract); ``column_type`` gives a column's declared
    type (None: unknown)."""
    for item in select.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.TryCast):
            continue  # TRY_CAST(x AS t) yields NULL instead of failing
        if _has_aggregate(node):
            _kind(node, column_type)
    having = select.args.get("having")
    if having is not None and _has_aggregate(having.this) and (
            _kind(having.this, column_type) != BOOL):
        raise _refuse(having.this, "HAVING is not a comparison")


def _has_aggregate(node: exp.Expression) -> bool:
    return next(node.find_all(exp.AggFunc), None) is not None


def _refuse(node: exp.Expression, why: str) -> UnsupportedConstructError:
    return UnsupportedConstructError(
        f"{node.sql()} in a subquery applies an operation to an aggregate's exact value that "
        f"could fail on some values ({why}), and an error would depend on the data: keep "
        "COUNT / SUM / AVG bare there, or compare them (or LEAST / GREATEST) with integer "
        "constants, and compute anything else from the released result")


def _literal(node: exp.Expression) -> Kind | None:
    if isinstance(node, exp.Neg):
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    if _INTEGER.fullmatch(node.this):
        return Kind("number", len(node.this.lstrip("0")) or 1)
    match = _DECIMAL.fullmatch(node.this)
    if match is None:
        return None
    return Kind("number", len(match.group(1).lstrip("0")) or 1, len(match.group(2)))


def _sum_kind(agg: exp.Sum, column_type: ColumnType) -> Kind:
    """The type of SUM(column) from the column's declared type (module contract)."""
    arg = agg.this
    if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
        arg = arg.expressions[0]
    dtype = normalise(column_type(arg)) if isinstance(arg, exp.Column) else None
    if dtype is None:
        return UNKNOWN
    if dtype.this in (T.FLOAT, T.DOUBLE):
        return DOUBLE
    if dtype.this in _INTEGERS:
        return HUGEINT
    if dtype.this == T.DECIMAL:
        params = [int(p.this.this) for p in dtype.expressions
                  if isinstance(p.this, exp.Literal)]
        scale = params[1] if len(params) == 2 else 3 if not params else 0
        return Kind("number", _MAX_DIGITS - scale, scale)
    return UNKNOWN


def _kind(node: exp.Expression, column_type: ColumnType) -> Kind:
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
        return DOUBLE
    if isinstance(agg, exp.Sum):
        return _sum_kind(agg, column_type)
    if isinstance(node, (exp.And, exp.Or)):
        if _kind(node.left, column_type) == BOOL and _kind(node.right, column_type) == BOOL:
            return BOOL
        raise _refuse(node, "AND / OR of values that are not conditions")
    if isinstance(node, exp.Not):
        if _kind(node.this, column_type) == BOOL:
            return BOOL
        raise _refuse(node, "NOT of a value that is not a condition")
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        _kind(node.this, column_type)
        return BOOL
    if isinstance(node, (exp.Least, exp.Greatest, *_COMPARISONS, exp.Between)):
        kinds = [_kind(o, column_type) for o in _operands(node)]
        if any(k.family in ("bool", "unknown") for k in kinds):
            raise _refuse(node, "a condition, or a SUM of unknown type, compared")
        common = _common(kinds)
        if common is None:
            raise _refuse(node, "its operands meet in a type that cannot hold them all")
        return common if isinstance(node, (exp.Least, exp.Greatest)) else BOOL
    raise _refuse(node, f"{node.key.upper()} is not on the positive list")


def _operands(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, (exp.Least, exp.Greatest)):
        return [node.this, *node.expressions]
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    return [node.left, node.right]


def _common(kinds: list[Kind]) -> Kind | None:
    """The type numbers of ``kinds`` meet in, when it holds every value of each (module
    contract), else None."""
    if any(k.family == "double" for k in kinds):
        return DOUBLE
    digits = max(k.digits for k in kinds)
    scales = [k.scale for k in kinds if k.scale is not None]
    if not scales:
        return Kind("number", digits)  # integers: the widest holds them all
    scale = max(scales)
    return Kind("number", digits, scale) if digits + scale <= _MAX_DIGITS else None
