"""Pass: floating-point aggregates below the top level run in an order fixed by their values.

A floating-point sum depends on the order of its terms, and the order a database reaches a
group's rows in can depend on rows of other groups (a parallel aggregate's chunks). Where a
query aggregates below its top level -- a derived table grouped by the privacy unit
(dpsql.units.derived), a keyed subquery (dpsql.analysis.keyed_groups), a scalar subquery --
each group's value must be a function of that group's rows alone: the sensitivity arguments
remove one unit or row and assume every other group's value stays as it is. So every
floating-point aggregate there (SUM, AVG, the variance family, CORR, COVAR) whose argument is
not provably exact (integer or DECIMAL arithmetic, which DuckDB adds exactly) runs with ORDER
BY its own arguments: ``SUM(x ORDER BY x)``, ``CORR(y, x ORDER BY y, x)``. Ties are equal terms,
so the result is a function of the group's multiset of values. Spark has no ordered
aggregates: its compile step folds over the sorted values (dpsql.backends.spark_ordered).

The top level's own SUMs are the measurements, summed exactly in fixed point by the clamps
pass (dpsql.rewrite.fixed_point); sample-and-aggregate orders its block aggregates with
:func:`ordered` (dpsql.sample_aggregate.rewrite). docs/privacy.md, section 4.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.trees import copy_tree
from dpsql.rewrite.context import RewriteContext
from dpsql.rewrite.safe_compare import ColumnKind, column_kinds

#: the aggregates whose floating-point result depends on the order of their terms
FLOATING_AGGREGATES: tuple[type[exp.Expression], ...] = (
    exp.Sum, exp.Avg, exp.Stddev, exp.StddevSamp, exp.StddevPop, exp.Variance,
    exp.VariancePop, exp.Corr, exp.CovarSamp, exp.CovarPop,
)


def ordered(agg: exp.Expression) -> exp.Expression:
    """``agg`` with ``ORDER BY`` its own arguments (module docstring); the pairs (y, x) for
    CORR / COVAR; a DISTINCT argument ordered by its value."""
    second = agg.args.get("expression")
    if second is not None:  # CORR / COVAR_*: order the (y, x) pairs
        keys = [copy_tree(agg.this), copy_tree(second)]
        agg.set("expression", exp.Order(this=second, expressions=[
            exp.Ordered(this=k, nulls_first=False) for k in keys]))
        return agg
    value = agg.this
    key = value.expressions[0] if isinstance(value, exp.Distinct) else value
    agg.set("this", exp.Order(this=value, expressions=[
        exp.Ordered(this=copy_tree(key), nulls_first=False)]))
    return agg


#: DuckDB's widest DECIMAL, and the most digits of a literal it reads as a number, not a DOUBLE
_MAX_WIDTH = 38


def _exact(node: exp.Expression, kind: ColumnKind) -> bool:
    """Whether DuckDB computes ``node`` in integer or DECIMAL arithmetic, so that its sum is
    exact in any order: :func:`_width` is not None."""
    return _width(node, kind) is not None


def _width(node: exp.Expression, kind: ColumnKind) -> tuple[bool, int] | None:
    """``(decimal, digits)`` of ``node`` when DuckDB provably computes it in integer or DECIMAL
    arithmetic, else None. Integers stay integers and DECIMALs DECIMALs under + - * (an
    overflow raises, which TRY makes NULL); a literal is a plain number of at most 38 digits
    (DuckDB reads a longer one as DOUBLE: the red team's finding). A DECIMAL product wider than
    38 digits is not claimed (conservative: ordering it costs time only). Division, casts and
    functions: not proved."""
    if isinstance(node, (exp.Paren, exp.Neg, exp.Try)):
        return _width(node.this, kind)
    if isinstance(node, exp.Column):
        k = kind(node)
        if k is None or k.family not in ("int", "decimal"):
            return None
        return (k.family == "decimal", k.digits + k.scale)
    if isinstance(node, exp.Literal):
        text = node.name
        digits = sum(ch.isdigit() for ch in text)
        if not node.is_number or "e" in text.lower() or digits > _MAX_WIDTH:
            return None
        return ("." in text, digits)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        left, right = _width(node.this, kind), _width(node.expression, kind)
        if left is None or right is None:
            return None
        decimal = left[0] or right[0]
        if isinstance(node, exp.Mul):
            digits = left[1] + right[1]
            if decimal and digits > _MAX_WIDTH:
                return None  # not claimed (DuckDB may refuse or widen it): conservative
            return (decimal, min(digits, _MAX_WIDTH))
        return (decimal, min(max(left[1], right[1]) + 1, _MAX_WIDTH))
    return None


def order_inner_aggregates(query: exp.Expression, *, ctx: RewriteContext) -> exp.Expression:
    """Pass: every floating-point aggregate of a SELECT below the top level ordered by its
    arguments, unless they are exact (module docstring)."""
    ctes = ctx.cte_names()
    for select in list(query.find_all(exp.Select)):
        if select is query:
            continue
        kind: ColumnKind | None = None
        for agg in list(select.find_all(*FLOATING_AGGREGATES)):
            if (agg.parent_select is not select or isinstance(agg.parent, exp.Window)
                    or isinstance(agg.this, exp.Order)
                    or isinstance(agg.args.get("expression"), exp.Order)):
                continue  # another SELECT's, a window's (not an aggregate of a group), done
            if kind is None:
                kind = column_kinds(select, ctx.metadata, ctes)
            values = [agg.this, agg.args.get("expression")]
            values = [v.expressions[0] if isinstance(v, exp.Distinct) else v
                      for v in values if v is not None]
            if not all(_exact(v, kind) for v in values):
                ordered(agg)
    return query
