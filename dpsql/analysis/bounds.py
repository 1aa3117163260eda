"""Interval arithmetic for SUM / AVG / variance arguments: the bounds [lo, hi] of a computed
per-row value, from the declared bounds of the columns it reads.

Contract of :func:`argument_bounds`: a pure function of the (qualified) argument expression,
the relation's column facts (declared bounds and types) and nothing else -- never of data,
max frequencies or epsilon. It returns finite bounds (lo <= hi) or raises
``MissingMetricError`` naming the *smallest* unbounded sub-expression (a column without
declared bounds, a function with no interval rule, a parameter) and how to bound it (declare
bounds, or clamp it in SQL with ``LEAST(GREATEST(expr, lo), hi)``), or
``UnsupportedConstructError`` for a value that is not a number (a string column or literal).

Why privacy does not rest on this arithmetic: the executed query clamps the *whole* per-row
value into the returned [lo, hi] (dpsql.rewrite.clamps) after making every sub-expression
total (dpsql.rewrite.totality: TRY turns an error into NULL), so whatever the database computes
-- integer overflow, floating rounding, NaN, a division the rules below did not foresee -- each
row contributes a value in [lo, hi] or nothing, which is all rules.sum_sensitivity assumes.
The rules only have to be *right* for accuracy: when they hold, the clamp changes no value and
the answer equals the analyst's SQL with noise off (tests/rewrite/test_expression_equivalence.py).

The rules (for the non-NULL values of each sub-expression; NULL is skipped by SUM and COUNT):

* column: its declared bounds; a numeric literal: [v, v]; NULL: no value at all;
* ``a + b``, ``a - b``, ``-a``, ``a * b``: interval arithmetic (0 * inf taken as 0);
* ``a / b``: a times [1/hi_b, 1/lo_b], only when b's bounds exclude 0 (a nonzero constant, or
  e.g. ``GREATEST(b, 1)``); otherwise refused;
* CASE / IF: the union of the branches' bounds (a missing ELSE is NULL); conditions only
  choose a branch and need no bounds (and may hold parameters);
* COALESCE: the union of its arguments' bounds; NULLIF(a, b): a's;
* LEAST / GREATEST (which skip NULL arguments in DuckDB and Spark): LEAST lies between the
  least lower bound and the upper bound of every argument that is never NULL (else the largest
  upper bound), GREATEST symmetrically -- so ``LEAST(GREATEST(x, 0), 100)`` is [0, 100] even
  for a column x without bounds (the analyst's own clamp, as BigQuery's contribution bounds);
* ABS, SIGN, FLOOR / CEIL / ROUND, CAST / TRY_CAST to a numeric type (integer targets round:
  [floor(lo), ceil(hi)]; DECIMAL(p, s) to s decimals likewise);
* anything else (another function, a parameter) is unbounded: it must be clamped.

A parameter is refused inside a bounded position although its value is public: the analysis
(and its memo, the prepared statement) is computed from the SQL text before any value is bound,
so bounds cannot depend on one; write the constant in the SQL instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.checks import sql_text
from dpsql.analysis.keytypes import numeric_or_unknown
from dpsql.analysis.model import ColumnFacts
from dpsql.analysis.trees import copy_tree
from dpsql.errors import AggregateArithmeticError, MissingMetricError, UnsupportedConstructError

INF = math.inf

#: column -> its facts in the relation (None when the relation does not know it)
FactsOf = Callable[[exp.Column], ColumnFacts | None]

_T = exp.DataType.Type
_INTEGER_TYPES = frozenset({_T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT, _T.INT128, _T.UTINYINT,
                            _T.USMALLINT, _T.UINT, _T.UBIGINT, _T.UINT128})
_FLOAT_TYPES = frozenset({_T.FLOAT, _T.DOUBLE})
_DECIMAL_TYPES = frozenset({_T.DECIMAL})


@dataclass(frozen=True)
class Interval:
    """Bounds of a sub-expression's non-NULL values (either side may be infinite).

    ``nullable``: the value may be NULL. ``culprit``: when a side is infinite, the smallest
    sub-expression responsible (for the refusal message).
    """

    lo: float
    hi: float
    nullable: bool = True
    culprit: exp.Expression | None = None

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)


#: an expression that is always NULL (no value to bound)
Bounds = Interval | None


def argument_bounds(fn: str, arg: exp.Expression, facts_of: FactsOf) -> tuple[float, float]:
    """The finite bounds [lo, hi] of the per-row value ``arg`` that ``fn`` aggregates (module
    contract). An argument that is always NULL sums to nothing: [0, 0]."""
    interval = bounds_of(arg, facts_of)
    if interval is None:
        return 0.0, 0.0
    if not interval.bounded:
        raise _unbounded(fn, arg, interval)
    return float(interval.lo), float(interval.hi)


def _unbounded(fn: str, arg: exp.Expression, interval: Interval) -> MissingMetricError:
    culprit = interval.culprit if interval.culprit is not None else arg
    text = "a parameter (?)" if isinstance(culprit, exp.Placeholder) else _text(culprit)
    if isinstance(culprit, exp.Column):
        how = (f"declare bounds: [lower, upper] for column {culprit.name!r} in the metadata, "
               f"or clamp it in SQL with LEAST(GREATEST({text}, lower), upper)")
    elif isinstance(culprit, exp.Placeholder):
        how = "write the constant in the SQL text: bounds are derived before values are bound"
    else:
        how = (f"clamp it in SQL with LEAST(GREATEST({text}, lower), upper), or use only "
               "+ - * /, CASE, COALESCE, LEAST/GREATEST, ABS and numeric CASTs of bounded "
               "columns")
    whole = _text(arg)
    where = "" if culprit is arg else f" because {text} has none"
    return MissingMetricError(f"{fn}({whole}) needs bounds{where}: {how}")


def _text(node: exp.Expression) -> str:
    """``node``'s SQL for a message, parameters shown as the analyst wrote them (``?``)."""
    if node.find(exp.Placeholder) is None:
        return sql_text(node)
    copy = copy_tree(node)
    for p in copy.find_all(exp.Placeholder):
        p.set("this", None)
    return sql_text(copy)


def bounds_of(node: exp.Expression, facts_of: FactsOf) -> Bounds:
    """The :class:`Interval` of ``node``'s non-NULL values (None: always NULL)."""
    node = node.unnest()
    rule = _RULES.get(type(node))
    if rule is not None:
        return rule(node, facts_of)
    if isinstance(node, exp.Literal):
        return _literal(node)
    return _free(node)


def _free(node: exp.Expression) -> Interval:
    """A value no rule bounds: unbounded, and itself the culprit."""
    return Interval(-INF, INF, True, node)


def _point(value: float) -> Interval:
    return Interval(value, value, False)


def _literal(node: exp.Literal) -> Interval:
    if node.is_string:
        raise UnsupportedConstructError(
            f"{_text(node)} is a string, not a number: aggregate a numeric value"
        )
    value = float(node.this)
    if not math.isfinite(value):
        raise UnsupportedConstructError(f"the constant {node.this} is not a finite number")
    return _point(value)


class UnboundedAggregateValue(AggregateArithmeticError):
    """A SUM / AVG / variance argument that reads a column a subquery computes with an
    aggregate, which has no bounds (only a clamped count, ``LEAST(COUNT(..), n)``, has:
    [0, n], dpsql.analysis.keyed_groups). It carries the parts of its message: ``construct``
    (the aggregate, ``SUM(d.s)``, when it sums the column itself; else the column inside a
    larger argument), ``alias`` and ``column`` (the subquery's column), so that a caller with
    more context (a derived table under a privacy unit, dpsql.units.derived) words its own
    refusal from them instead of editing this one's text."""

    def __init__(self, construct: str, alias: str, column: str, summed: bool) -> None:
        self.construct, self.alias, self.column, self.summed = construct, alias, column, summed
        super().__init__(
            f"{self.what}, which has no bounds: release the inner aggregate directly instead "
            "(a subquery's aggregate has bounds only as a clamped count, LEAST(COUNT(..), n): "
            "[0, n])")

    def __reduce__(self) -> tuple[type, tuple[str, str, str, bool]]:  # copy / pickle: the parts
        return type(self), (self.construct, self.alias, self.column, self.summed)

    @property
    def what(self) -> str:
        """``SUM(d.s) sums a value computed by an aggregate in a subquery`` (or ``d.n is
        computed ..``): the refusal's subject, whoever words the rest."""
        verb = "sums a value computed" if self.summed else "is computed"
        return f"{self.construct} {verb} by an aggregate in a subquery"


def _column(node: exp.Column, facts_of: FactsOf) -> Interval:
    facts = facts_of(node)
    if facts is not None and facts.from_aggregate:
        raise UnboundedAggregateValue(_text(node), node.table, node.name, summed=False)
    if facts is not None and not numeric_or_unknown(facts.type):
        # DuckDB would cast each stored value to a number: one unparsable row would make the
        # whole query fail, an error that depends on the data.
        raise UnsupportedConstructError(
            f"{_text(node)} is {facts.type}, not a number: aggregate a numeric column, or "
            "store this one as a number"
        )
    if facts is None or facts.bounds is None:
        return Interval(-INF, INF, True, node)
    lo, hi = facts.bounds
    return Interval(float(lo), float(hi), True)


def _joined(parts: Sequence[Bounds], lo: float, hi: float, nullable: bool) -> Interval:
    culprit = None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        culprit = next((p.culprit for p in parts if p is not None and not p.bounded
                        and p.culprit is not None), None)
    return Interval(lo, hi, nullable, culprit)


def _mul_ends(a: float, b: float) -> float:
    return 0.0 if a == 0.0 or b == 0.0 else a * b


def _product(a: Interval, b: Interval) -> Interval:
    ends = [_mul_ends(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return _joined((a, b), min(ends), max(ends), a.nullable or b.nullable)


def _binary(node: exp.Expression, facts_of: FactsOf) -> Bounds:
    a, b = bounds_of(node.this, facts_of), bounds_of(node.expression, facts_of)
    if a is None or b is None:
        return None  # NULL + x is NULL
    nullable = a.nullable or b.nullable
    if isinstance(node, exp.Add):
        return _joined((a, b), a.lo + b.lo, a.hi + b.hi, nullable)
    if isinstance(node, exp.Sub):
        return _joined((a, b), a.lo - b.hi, a.hi - b.lo, nullable)
    if isinstance(node, exp.Mul):
        return _product(a, b)
    assert isinstance(node, exp.Div)
    if b.lo <= 0.0 <= b.hi:
        if not b.bounded and b.culprit is not None:
            return _joined((b,), -INF, INF, True)  # refused as unbounded, naming the culprit
        raise MissingMetricError(
            f"the denominator {_text(node.expression)} of {_text(node)} can be 0 (its "
            f"bounds are [{b.lo:g}, {b.hi:g}]): divide by a nonzero constant or by an "
            f"expression whose bounds exclude 0, e.g. GREATEST({_text(node.expression)}, c) "
            "for a constant c > 0"
        )
    recip = Interval(1.0 / b.hi if math.isfinite(b.hi) else 0.0,
                     1.0 / b.lo if math.isfinite(b.lo) else 0.0, b.nullable, b.culprit)
    # a reciprocal of an unbounded b (bounded away from 0) is bounded: no culprit needed
    out = _product(a, Interval(min(recip.lo, recip.hi), max(recip.lo, recip.hi), b.nullable))
    return Interval(out.lo, out.hi, True, out.culprit)  # x / 0.0 would be NULL or inf


def _neg(node: exp.Neg, facts_of: FactsOf) -> Bounds:
    a = bounds_of(node.this, facts_of)
    return None if a is None else Interval(-a.hi, -a.lo, a.nullable, a.culprit)


def _union(parts: Sequence[Bounds], nullable: bool) -> Bounds:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    return _joined(present, min(p.lo for p in present), max(p.hi for p in present),
                   nullable or any(p.nullable for p in present))


def _case(node: exp.Case, facts_of: FactsOf) -> Bounds:
    branches = [bounds_of(i.args["true"], facts_of) for i in node.args.get("ifs") or []]
    default = node.args.get("default")
    if default is not None:
        branches.append(bounds_of(default, facts_of))
    return _union(branches, default is None or any(b is None for b in branches))


def _if(node: exp.If, facts_of: FactsOf) -> Bounds:
    false = node.args.get("false")
    branches = [bounds_of(node.args["true"], facts_of)]
    if false is not None:
        branches.append(bounds_of(false, facts_of))
    return _union(branches, false is None or any(b is None for b in branches))


def _operands(node: exp.Expression) -> list[exp.Expression]:
    return [node.this, *node.expressions]


def _coalesce(node: exp.Coalesce, facts_of: FactsOf) -> Bounds:
    parts = [bounds_of(o, facts_of) for o in _operands(node)]
    nullable = all(p is None or p.nullable for p in parts)
    return _union(parts, nullable)


def _least_greatest(node: exp.Expression, facts_of: FactsOf) -> Bounds:
    """NULL arguments are skipped: the result is the least (greatest) of a non-empty subset
    of the arguments that always contains every argument that is never NULL."""
    parts = [p for p in (bounds_of(o, facts_of) for o in _operands(node)) if p is not None]
    if not parts:
        return None
    sure = [p for p in parts if not p.nullable]
    nullable = not sure
    if isinstance(node, exp.Least):
        lo = min(p.lo for p in parts)
        hi = min([max(p.hi for p in parts), *(p.hi for p in sure)])
    else:
        hi = max(p.hi for p in parts)
        lo = max([min(p.lo for p in parts), *(p.lo for p in sure)])
    # name an argument that is unbounded on the side the result is unbounded on
    culprits = [p for p in parts if (not math.isfinite(lo) and p.lo == -INF)
                or (not math.isfinite(hi) and p.hi == INF)]
    return _joined(culprits or parts, lo, hi, nullable)


def _abs(node: exp.Abs, facts_of: FactsOf) -> Bounds:
    a = bounds_of(node.this, facts_of)
    if a is None:
        return None
    top = max(abs(a.lo), abs(a.hi))
    low = 0.0 if a.lo <= 0.0 <= a.hi else min(abs(a.lo), abs(a.hi))
    return Interval(low, top, a.nullable, a.culprit)


def _sign(node: exp.Sign, facts_of: FactsOf) -> Bounds:
    a = bounds_of(node.this, facts_of)
    if a is None:
        return None
    lo = -1.0 if a.lo < 0 else (0.0 if a.lo == 0 else 1.0)
    hi = 1.0 if a.hi > 0 else (0.0 if a.hi == 0 else -1.0)
    return Interval(lo, hi, a.nullable)


def _rounding(node: exp.Expression, facts_of: FactsOf) -> Bounds:
    """FLOOR / CEIL / ROUND: within [floor(lo), ceil(hi)] (ROUND to d >= 0 decimals too)."""
    decimals = node.args.get("decimals")
    if decimals is not None and not (isinstance(decimals, exp.Literal)
                                     and not decimals.is_string and float(decimals.this) >= 0):
        return _free(node)
    a = bounds_of(node.this, facts_of)
    if a is None:
        return None
    return _rounded(a, 0)


def _rounded(a: Interval, scale: int) -> Interval:
    if not a.bounded:
        return a
    unit = 10.0 ** scale
    return Interval(math.floor(a.lo * unit) / unit, math.ceil(a.hi * unit) / unit, a.nullable)


def _cast(node: exp.Cast, facts_of: FactsOf) -> Bounds:
    to = node.args.get("to")
    kind = to.this if isinstance(to, exp.DataType) else None
    if kind not in _INTEGER_TYPES | _FLOAT_TYPES | _DECIMAL_TYPES:
        raise UnsupportedConstructError(
            f"{_text(node)} casts to a type that is not numeric: aggregate a number "
            "(CAST to INTEGER, BIGINT, DOUBLE or DECIMAL)"
        )
    a = bounds_of(node.this, facts_of)
    if a is None:
        return None
    nullable = a.nullable or isinstance(node, exp.TryCast)
    a = Interval(a.lo, a.hi, nullable, a.culprit)
    if kind in _INTEGER_TYPES:
        return _rounded(a, 0)
    if kind in _DECIMAL_TYPES:
        assert isinstance(to, exp.DataType)
        params = to.expressions
        scale = int(params[1].this.this) if len(params) > 1 else 3  # DuckDB's default scale
        return _rounded(a, scale)
    return a


def _nullif(node: exp.Nullif, facts_of: FactsOf) -> Bounds:
    """NULLIF(a, b) is a or NULL."""
    a = bounds_of(node.this, facts_of)
    return None if a is None else Interval(a.lo, a.hi, True, a.culprit)


def _placeholder(node: exp.Placeholder, facts_of: FactsOf) -> Bounds:
    return _free(node)


_Rule = Callable[[exp.Expression, FactsOf], Bounds]
_RULES: dict[type, _Rule] = {
    exp.Column: _column,  # type: ignore[dict-item]
    exp.Null: lambda node, facts_of: None,
    exp.Add: _binary, exp.Sub: _binary, exp.Mul: _binary, exp.Div: _binary,
    exp.Neg: _neg,  # type: ignore[dict-item]
    exp.Case: _case,  # type: ignore[dict-item]
    exp.If: _if,  # type: ignore[dict-item]
    exp.Coalesce: _coalesce,  # type: ignore[dict-item]
    exp.Nullif: _nullif,  # type: ignore[dict-item]
    exp.Least: _least_greatest, exp.Greatest: _least_greatest,
    exp.Abs: _abs,  # type: ignore[dict-item]
    exp.Sign: _sign,  # type: ignore[dict-item]
    exp.Floor: _rounding, exp.Ceil: _rounding, exp.Round: _rounding,
    exp.Cast: _cast, exp.TryCast: _cast,  # type: ignore[dict-item]
    exp.Placeholder: _placeholder,  # type: ignore[dict-item]
}
