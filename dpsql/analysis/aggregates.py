"""Aggregates released through COUNT and SUM measurements: FILTER and the variance family.

Both the measurement builder (dpsql.analysis.measure) and the post-processing query
(dpsql.rewrite.post) read aggregates through this module, so a FILTER or a VARIANCE is measured
and post-processed from the very same nodes (labels are their SQL text).

* ``agg(x) FILTER (WHERE p)`` is ``agg(CASE WHEN p THEN x END)`` (``COUNT(*)``: ``COUNT(CASE
  WHEN p THEN 1 END)``): the same rows are counted or summed, and the sensitivity is the
  aggregate's own (a filter only removes rows). The exact query runs the CASE form, which
  DuckDB and Spark both run (and totality wraps like any other expression).
* ``VAR_POP / VAR_SAMP (= VARIANCE) / STDDEV_POP / STDDEV_SAMP (= STDDEV)`` of an argument with
  bounds [l, u] are measured as COUNT(x), SUM(c - m) and SUM((c - m)^2), where c is x clamped to
  [l, u] (NULL stays NULL) and m = (l + u) / 2 the public midpoint. The variance is
  shift-invariant, and centring makes the bounds of the two sums [-h, h] and [0, h^2] with
  h = (u - l) / 2, instead of [l, u] and [0 or min(l^2, u^2), max(l^2, u^2)]: ES of the sum of
  squares drops from S * max(l^2, u^2) to S * h^2 (for [0, 500]: 250000 -> 62500).
  :func:`variance_sql` post-processes the three noisy values (see there).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.trees import copy_tree

#: dpsql.analysis.parse.DIALECT (not imported: the allow-list imports this module)
DIALECT = "duckdb"

#: the variance family: sqlglot class -> (sample variance?, square root?)
VARIANCES: dict[type[exp.Expression], tuple[bool, bool]] = {
    exp.VariancePop: (False, False),
    exp.Variance: (True, False),  # VARIANCE and VAR_SAMP
    exp.StddevPop: (False, True),
    exp.StddevSamp: (True, True),
    exp.Stddev: (True, True),  # STDDEV is the sample deviation in DuckDB and Spark
}
VARIANCE_TYPES = tuple(VARIANCES)
#: how the label of a variance's centred sum of squares begins (the release record notes it)
CENTRED_SQUARES = "SUM_CENTRED_SQUARES("


def unfilter(node: exp.Expression) -> exp.Expression:
    """``agg(x) FILTER (WHERE p)`` as ``agg(CASE WHEN p THEN x END)`` (a new tree); any other
    node unchanged (itself). ``COUNT(*)`` becomes ``COUNT(CASE WHEN p THEN 1 END)`` and
    ``COUNT(DISTINCT x)`` ``COUNT(DISTINCT CASE WHEN p THEN x END)`` (NULL is never counted)."""
    if not isinstance(node, exp.Filter):
        return node
    agg = copy_tree(node.this)
    cond = copy_tree(node.expression.this)
    target = agg.this
    distinct = isinstance(target, exp.Distinct)
    value = target.expressions[0] if distinct else target
    if isinstance(value, exp.Star):
        value = exp.Literal.number(1)
    case = exp.Case(ifs=[exp.If(this=cond, true=value)])
    if distinct:
        target.set("expressions", [case])
    else:
        agg.set("this", case)
    return agg


def filter_condition(node: exp.Filter) -> exp.Expression:
    """The WHERE condition of a FILTER clause."""
    return node.expression.this


def clamp_case(value: exp.Expression, lo: float, hi: float) -> exp.Expression:
    """``value`` clamped to [lo, hi], NULL kept NULL (a CASE: DuckDB's and Spark's LEAST and
    GREATEST skip NULL arguments, which would turn a NULL into a bound)."""
    low, high = exp.convert(float(lo)), exp.convert(float(hi))
    return exp.Case(ifs=[
        exp.If(this=exp.LT(this=copy_tree(value), expression=low), true=copy_tree(low)),
        exp.If(this=exp.GT(this=copy_tree(value), expression=high), true=copy_tree(high)),
    ], default=copy_tree(value))


def centred(arg: exp.Expression, bounds: tuple[float, float]) -> exp.Expression:
    """c - m: the argument clamped to ``bounds``, minus their midpoint m."""
    lo, hi = bounds
    return exp.Sub(this=exp.Paren(this=clamp_case(arg, lo, hi)),
                   expression=exp.convert(float((lo + hi) / 2.0)))


def moment_nodes(arg: exp.Expression,
                 bounds: tuple[float, float]) -> tuple[exp.Expression, exp.Expression,
                                                       exp.Expression]:
    """The COUNT, centred SUM and centred SUM of squares a variance of ``arg`` is released
    from, as aggregate nodes (their SQL texts are the measurements' labels)."""
    first = centred(arg, bounds)
    square = exp.Mul(this=exp.Paren(this=centred(arg, bounds)),
                     expression=exp.Paren(this=centred(arg, bounds)))
    return (exp.Count(this=copy_tree(arg)), exp.Sum(this=first), exp.Sum(this=square))


def moment_labels(arg: exp.Expression) -> tuple[str, str, str]:
    """The labels of the three measurements of a variance of ``arg`` (shared by every variance
    aggregate of the same argument; the COUNT is the one AVG uses too)."""
    text = copy_tree(arg).sql(dialect=DIALECT)
    count = exp.Count(this=copy_tree(arg)).sql(dialect=DIALECT)
    return count, f"SUM_CENTRED({text})", f"{CENTRED_SQUARES}{text})"


def half_width(bounds: tuple[float, float]) -> float:
    return (bounds[1] - bounds[0]) / 2.0


def moment_bounds(bounds: tuple[float, float]) -> tuple[tuple[float, float],
                                                          tuple[float, float]]:
    """The bounds of c - m and of (c - m)^2: [-h, h] and [0, h^2]."""
    h = half_width(bounds)
    return (-h, h), (0.0, h * h)


def variance_sql(node: exp.Expression, count: exp.Expression, first: exp.Expression,
                 square: exp.Expression, h: float) -> exp.Expression:
    """The post-processing of a variance-family aggregate ``node`` from the noisy COUNT n,
    centred SUM S1 and centred SUM of squares S2 (expressions over the noisy table), for an
    argument clamped to [m - h, m + h].

    Population: var = S2/n - (S1/n)^2 with n = max(n, 1), clamped to [0, h^2] (the largest
    variance of values in [l, u]). Sample: (S2 - S1^2/n) / (n - 1) with n = max(n, 2),
    clamped to [0, h^2 * n / (n - 1)] (two values at l and u reach it). STDDEV is the square
    root of the clamped variance. Every step is post-processing of noisy values; it is biased
    (clamping at 0, the ratio and the square of noisy sums), by O(scale^2 / n^2).
    """
    sample, root = VARIANCES[type(node)]
    h2 = h * h
    n = exp.func("GREATEST", copy_tree(count), exp.convert(2.0 if sample else 1.0))
    s1, s2 = copy_tree(first), copy_tree(square)
    if sample:
        spread = exp.Sub(this=s2, expression=exp.Div(
            this=exp.Mul(this=s1, expression=copy_tree(s1)), expression=copy_tree(n)))
        value: exp.Expression = exp.Div(
            this=exp.Paren(this=spread),
            expression=exp.Paren(this=exp.Sub(this=copy_tree(n), expression=exp.convert(1.0))))
        top: exp.Expression = exp.Div(
            this=exp.Mul(this=exp.convert(h2), expression=copy_tree(n)),
            expression=exp.Paren(this=exp.Sub(this=copy_tree(n), expression=exp.convert(1.0))))
    else:
        mean = exp.Div(this=s1, expression=copy_tree(n))
        value = exp.Sub(this=exp.Div(this=s2, expression=copy_tree(n)),
                        expression=exp.Mul(this=exp.Paren(this=mean),
                                           expression=exp.Paren(this=copy_tree(mean))))
        top = exp.convert(h2)
    clamped = exp.func("LEAST", exp.func("GREATEST", value, exp.convert(0.0)), top)
    return exp.func("SQRT", clamped) if root else clamped
