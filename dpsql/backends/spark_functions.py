"""DuckDB's answers of scalar functions and operators on Spark, where sqlglot's transpilation
keeps the name but Spark computes something else (dpsql.backends.spark_sql applies
:func:`duckdb_functions` first; tests/backends/test_spark_functions.py compares every
allow-listed function on edge rows of both engines).

Each rewrite below is an expression of the same operands that Spark evaluates to DuckDB's value
(NULL where DuckDB gives NULL):

* the day of the week: DuckDB's ``dayofweek`` / ``EXTRACT(dow ...)`` count from Sunday = 0,
  Spark's ``DAYOFWEEK`` from Sunday = 1; ISO's Monday = 1 is ``(DAYOFWEEK(x) + 5) % 7 + 1``;
  ``week`` is ``WEEKOFYEAR`` (ISO in both); ``monthname`` / ``dayname`` are written in full
  (``DATE_FORMAT``: Spark's own are abbreviated);
* ``log(x)`` is base 10 in DuckDB and natural in Spark; ``ln``, ``log`` of 0 are -inf and of a
  negative number NaN in DuckDB, NULL in Spark;
* ``/`` is IEEE division in DuckDB: ``x / 0`` is +-inf, or NaN for ``0 / 0``, where Spark gives
  NULL; ``%`` of floating-point numbers by 0 is NaN (integers: NULL in both);
* ``floor`` and ``ceil`` of a DOUBLE stay DOUBLE in DuckDB; Spark's are BIGINT, which clips
  1e300 to 2^63 - 1;
* ``substring(s, start, length)``: DuckDB takes the positions [start, start + length) (a
  negative length counts back from start; a negative start from the end), clipped to the
  string; Spark reads a start of 0 as 1 and a negative length as empty;
* ``left`` / ``right`` with a negative count keep all but that many characters in DuckDB,
  nothing in Spark;
* ``date_diff(part, a, b)`` counts the part's boundaries crossed in DuckDB (one month from
  Jan 31 to Feb 1), whole parts elapsed in Spark.

What cannot be made faithful fails closed (NotSupportedError, before anything runs): a
floating-point number cast to text (Java writes 1.0E300 where DuckDB writes 1e+300), and
``reverse`` (Spark reverses code points, DuckDB whole characters: the public-path red team).
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.schema import MappingSchema

from dpsql.errors import NotSupportedError

__all__ = ["duckdb_functions"]

SOURCE_DIALECT = "duckdb"
T = exp.DataType.Type
#: EXTRACT parts naming the day of the week counted from Sunday = 0 (DuckDB) / 1 (Spark)
_SUNDAY_FIRST = frozenset({"DOW", "DAYOFWEEK"})
#: doubles at least this large are whole numbers (2^52): floor and ceil leave them
_WHOLE = 4503599627370496
_TEXT = (T.VARCHAR, T.TEXT, T.CHAR, T.NCHAR, T.NVARCHAR)


def _n(value: int) -> exp.Expression:
    return exp.Literal.number(value)


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    """A Spark function call printed as written."""
    return exp.Anonymous(this=name, expressions=list(args))


def _double(text: str) -> exp.Expression:
    """A DOUBLE constant Spark reads from text (NaN, +-Infinity)."""
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("DOUBLE"))


def _case(*branches: tuple[exp.Expression, exp.Expression],
          default: exp.Expression | None = None) -> exp.Expression:
    case = exp.Case()
    for condition, value in branches:
        case = case.when(condition, value)
    if default is not None:
        case = case.else_(default)
    return exp.Paren(this=case)


def _copy(node: exp.Expression) -> exp.Expression:
    return node.copy()


def _is_null(x: exp.Expression) -> exp.Expression:
    return exp.Is(this=_copy(x), expression=exp.Null())


def _floating(node: exp.Expression) -> bool:
    dtype = node.type
    return dtype is not None and dtype.is_type(*exp.DataType.FLOAT_TYPES)


def _day_of_week(x: exp.Expression, iso: bool) -> exp.Expression:
    dow = _call("DAYOFWEEK", x)
    if iso:
        return exp.Paren(this=exp.Add(this=exp.Mod(this=exp.Paren(this=exp.Add(
            this=dow, expression=_n(5))), expression=_n(7)), expression=_n(1)))
    return exp.Paren(this=exp.Sub(this=dow, expression=_n(1)))


def _logarithm(x: exp.Expression, spark: str) -> exp.Expression:
    """DuckDB's ``ln`` / ``log10`` of ``x``: -inf at 0, NaN below (and of NaN), NULL of NULL."""
    return _case((_is_null(x), exp.Null()),
                 (exp.GT(this=_copy(x), expression=_n(0)), _call(spark, _copy(x))),
                 (exp.EQ(this=_copy(x), expression=_n(0)), _double("-Infinity")),
                 default=_double("NaN"))


def _log(node: exp.Log) -> exp.Expression:
    if node.expression is None:  # log(x): base 10 in DuckDB
        return _logarithm(node.this, "LOG10")
    # log(b, x) = ln(x) / ln(b), with DuckDB's IEEE division by ln(1) = 0
    return _divide(_logarithm(node.expression, "LN"), _logarithm(node.this, "LN"))


def _divide(x: exp.Expression, y: exp.Expression) -> exp.Expression:
    """DuckDB's ``x / y``: IEEE division by zero (+-inf, NaN for 0 / 0 or NaN / 0)."""
    return _case((exp.EQ(this=_copy(y), expression=_n(0)),
                  _case((_is_null(x), exp.Null()),
                        (exp.GT(this=_copy(x), expression=_n(0)), _double("Infinity")),
                        (exp.LT(this=_copy(x), expression=_n(0)), _double("-Infinity")),
                        default=_double("NaN"))),
                 default=exp.Div(this=_copy(x), expression=_copy(y)))


def _nonzero_number(node: exp.Expression) -> bool:
    """Whether ``node`` is a numeric literal other than 0 (a division by it needs no case)."""
    value = node.unnest()
    if isinstance(value, exp.Neg):
        value = value.this
    if not (isinstance(value, exp.Literal) and not value.is_string):
        return False
    try:
        return float(value.this) != 0
    except ValueError:
        return False


def _floor_or_ceil(node: exp.Floor | exp.Ceil) -> exp.Expression:
    x = node.this
    rounded = exp.Cast(this=type(node)(this=_copy(x)), to=exp.DataType.build("DOUBLE"))
    return _case((exp.LT(this=exp.Abs(this=_copy(x)), expression=_n(_WHOLE)), rounded),
                 default=_copy(x))


def _substring(node: exp.Substring) -> exp.Expression:
    """DuckDB's positions [p, p + length) (or [p + length, p)), p = start, or counted from the
    end when negative, clipped to [1, LENGTH(s) + 1)."""
    s, start = node.this, node.args["start"]
    size = exp.Length(this=_copy(s))
    length = node.args.get("length")
    if length is None:  # to the end: a length past it from any start
        length = exp.Add(this=exp.Add(this=size.copy(), expression=_n(1)),
                         expression=exp.Abs(this=_copy(start)))
    p = _case((exp.LT(this=_copy(start), expression=_n(0)),
               exp.Add(this=exp.Add(this=size.copy(), expression=_copy(start)),
                       expression=_n(1))), default=_copy(start))
    end = exp.Add(this=p.copy(), expression=_copy(length))
    low = exp.Greatest(this=exp.Least(this=p.copy(), expressions=[end.copy()]),
                       expressions=[_n(1)])
    high = exp.Least(this=exp.Greatest(this=p.copy(), expressions=[end.copy()]),
                     expressions=[exp.Add(this=size.copy(), expression=_n(1))])
    nulls = exp.Or(this=exp.Or(this=_is_null(s), expression=_is_null(start)),
                   expression=_is_null(length))
    return _case((nulls, exp.Null()),
                 (exp.GT(this=high.copy(), expression=low.copy()),
                  _call("SUBSTRING", _copy(s), low.copy(),
                        exp.Sub(this=high.copy(), expression=low.copy()))),
                 default=exp.Literal.string(""))


def _left_or_right(node: exp.Left | exp.Right) -> exp.Expression:
    """A negative count keeps all but that many characters (at least none)."""
    s, k = node.this, node.expression
    kept = exp.Greatest(this=exp.Add(this=exp.Length(this=_copy(s)), expression=_copy(k)),
                        expressions=[_n(0)])
    count = _case((exp.LT(this=_copy(k), expression=_n(0)), kept), default=_copy(k))
    return _call("LEFT" if isinstance(node, exp.Left) else "RIGHT", _copy(s), count)


def _months(x: exp.Expression, per_year: int, part: str) -> exp.Expression:
    return exp.Add(this=exp.Mul(this=_call("YEAR", _copy(x)), expression=_n(per_year)),
                   expression=_call(part, _copy(x)))


def _date_diff(node: exp.DateDiff) -> exp.Expression:
    """DuckDB counts ``part`` boundaries from ``a`` to ``b`` (``node.expression``,
    ``node.this``): the difference of the truncated values."""
    unit = node.args.get("unit")
    part = (unit.name if isinstance(unit, (exp.Var, exp.Literal)) else "DAY").upper()
    a, b = node.expression, node.this
    if part in ("YEAR", "YEARS", "Y", "YR", "YRS"):
        return exp.Paren(this=exp.Sub(this=_call("YEAR", _copy(b)),
                                      expression=_call("YEAR", _copy(a))))
    if part in ("QUARTER", "QUARTERS"):
        return exp.Paren(this=exp.Sub(this=_months(b, 4, "QUARTER"),
                                      expression=_months(a, 4, "QUARTER")))
    if part in ("MONTH", "MONTHS", "MON", "MONS"):
        return exp.Paren(this=exp.Sub(this=_months(b, 12, "MONTH"),
                                      expression=_months(a, 12, "MONTH")))
    if part in ("DAY", "DAYS", "D", "DAYOFMONTH"):
        date = exp.DataType.build("DATE")
        return _call("DATEDIFF", exp.Cast(this=_copy(b), to=date),
                     exp.Cast(this=_copy(a), to=date))
    if part in ("HOUR", "HOURS", "H", "MINUTE", "MINUTES", "M", "SECOND", "SECONDS", "S"):
        spark_unit = {"H": "HOUR", "M": "MINUTE", "S": "SECOND"}.get(part, part.rstrip("S"))
        truncated = [_call("DATE_TRUNC", exp.Literal.string(spark_unit), _copy(x))
                     for x in (a, b)]
        return _call("DATEDIFF", exp.Var(this=spark_unit), *truncated)
    if part in ("WEEK", "WEEKS", "W"):  # whole weeks of days, as DuckDB's
        date = exp.DataType.build("DATE")
        days = _call("DATEDIFF", exp.Cast(this=_copy(b), to=date),
                     exp.Cast(this=_copy(a), to=date))
        return _call("CAST", exp.Alias(this=exp.Div(this=days, expression=_n(7)),
                                       alias=exp.Identifier(this="BIGINT")))
    raise NotSupportedError(f"date_diff of {part!r} has no faithful Spark form: use the DuckDB "
                            "backend, or a part among year, quarter, month, week, day, hour, "
                            "minute, second")


def _reverse(node: exp.Reverse) -> exp.Expression:
    raise NotSupportedError(
        "reverse() reverses code points on Spark and whole characters in DuckDB (an accent or a "
        "flag emoji differs): use the DuckDB backend")


def _cast(node: exp.Cast) -> exp.Expression:
    to = node.args.get("to")
    if (isinstance(to, exp.DataType) and to.is_type(*_TEXT) and _floating(node.this)):
        raise NotSupportedError(
            f"{node.sql(dialect=SOURCE_DIALECT)[:60]}: Spark writes floating-point numbers as "
            "text differently from DuckDB (1.0E300, not 1e+300): compare or group the number "
            "itself, or use the DuckDB backend")
    return node


def duckdb_functions(tree: exp.Expression, schema: MappingSchema) -> exp.Expression:
    """``tree`` (DuckDB SQL) with every function and operator Spark computes differently
    rewritten to DuckDB's value (module docstring); types from ``schema``."""
    annotate_types(tree, schema=schema, dialect=SOURCE_DIALECT)

    def translate(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.DayOfWeekIso):
            return _day_of_week(node.this, iso=True)
        if isinstance(node, exp.DayOfWeek):
            return _day_of_week(node.this, iso=False)
        if isinstance(node, exp.Extract) and isinstance(node.this, (exp.Var, exp.Literal)):
            part = node.this.name.upper()
            if part in _SUNDAY_FIRST or part == "ISODOW":
                return _day_of_week(node.expression, iso=part == "ISODOW")
        if isinstance(node, exp.Week):  # ISO week in both; Spark has no WEEK()
            return _call("WEEKOFYEAR", node.this)
        if isinstance(node, (exp.Monthname, exp.Dayname)):  # Spark's are abbreviated
            pattern = "MMMM" if isinstance(node, exp.Monthname) else "EEEE"
            return _call("DATE_FORMAT", node.this, exp.Literal.string(pattern))
        if isinstance(node, exp.Ln):
            return _logarithm(node.this, "LN")
        if isinstance(node, exp.Log):
            return _log(node)
        if isinstance(node, exp.Div) and not _nonzero_number(node.expression):
            return _divide(node.this, node.expression)
        if isinstance(node, exp.Mod) and (_floating(node.this) or _floating(node.expression)):
            return _case((exp.EQ(this=_copy(node.expression), expression=_n(0)),
                          _case((_is_null(node.this), exp.Null()), default=_double("NaN"))),
                         default=node.copy())
        if isinstance(node, (exp.Floor, exp.Ceil)) and _floating(node.this) and (
                node.args.get("decimals") is None):
            return _floor_or_ceil(node)
        if isinstance(node, exp.Substring):
            return _substring(node)
        if isinstance(node, (exp.Left, exp.Right)):
            return _left_or_right(node)
        if isinstance(node, exp.DateDiff):
            return _date_diff(node)
        if isinstance(node, exp.Cast):
            return _cast(node)
        if isinstance(node, exp.Reverse):
            return _reverse(node)
        return node

    return tree.transform(translate, copy=False)
