"""The executed query under a privacy unit: each unit's contribution, bounded in SQL.

Pass :func:`unit_contributions` (the last of dpsql.rewrite.plan.PASSES; the identity without a
unit) takes the exact query as the other passes leave it -- ``SELECT <keys> AS __k<i>,
<aggregates> AS __m<j> FROM .. WHERE .. GROUP BY <keys>``, every aggregate clamped and total --
and groups it by the unit as well (``__u``, computed along the unit path by LEFT JOINs to
unique keys: dpsql.units.paths), so each row of it is one unit's contribution. Then:

* without GROUP BY (R2T): one row per unit, ``__nu`` true on the row of no unit, and for
  every part i (dpsql.units.analysis.R2TPart: a COUNT, or the non-negative / non-positive
  part of a SUM) ``__q<i>`` = min(c_u, T_i), the unit's contribution truncated at the part's
  top level (dpsql.units.grid: rows for a COUNT, value units for a SUM part, b = 1; a SUM's in
  fixed-point steps 2^-k, a BIGINT; ``__k<i>`` the constant k), and ``__z<i>`` = the rows of
  no unit's c_NULL on their row.
  dpsql.units.execute sums min(__q, tau_j b) over the units for every level j in exact
  integers and converts each level once (as SQL's CAST of an exact sum would): cheaper than
  eight LEAST-and-SUM columns in the query (TPC-H Q11 under supplier: 10.6 -> ~9 ms, issue
  #17). The levels never include c_NULL (a DOUBLE level carrying a c_NULL far above tau_j
  would round by more than tau_j between neighbours, the red team's break): it is added after
  the noise;
  when every part is a COUNT (:func:`counts_only`), the query returns instead the histogram of
  the units' contributions -- rows ``(__h<i>, __n)``: n units contribute c rows to part i --
  and dpsql.units.execute evaluates ``Q(tau_j) = sum over the histogram of min(c, tau_j) * n``
  in exact integers: the same integers, without the L sums and LEASTs in the SQL (whose
  planning alone cost ~1.5 ms of TPC-H Q10's ~12 ms raw join, issue #17);
* with GROUP BY (two-stage): each unit keeps the ``max_groups`` groups with the smallest
  ``hash(hash(its id, their keys))`` (ties by the keys: deterministic, and a function of the
  unit's own rows; the id makes each unit's choice its own, so the groups share the
  truncation),
  its contribution to each clamped per group (dpsql.units.analysis.per_group_clamp); the
  result has the layout's ``__k<i>, __m<j>`` columns, so domains and bins work as without a unit.
  The rows of no unit are in every group they fall in, unclamped. With a partition-selected
  key this outer query also returns ``__n``: the number of units kept in the group plus the
  number of rows of no unit in it (:func:`_selection_count`), which
  dpsql.noise.unit_partition thresholds.

Rows whose path does not resolve (NULL or orphan keys) have ``__u`` NULL: the rows that belong to
no unit, the same in both neighbours (docs/privacy.md, "Privacy units"). They are never a unit:
their contribution c_NULL is added in full, not truncated, not clamped, not limited to
``max_groups`` groups (:func:`_no_unit`). Contract: every bound above is a bound on how far
the result moves between D and D + cascade(u); c_NULL (per part, per group) is a function of
the rows of no unit alone, so it is the same term in both neighbours and cancels from every
difference -- R2T's levels are the units' alone (c_NULL added to the release, a constant
across neighbours), the two-stage's bins and the selection's ``__n`` move exactly as
without it (each row of no unit in a bin is at most the per-row bound, so a bin's float
rounding keeps the documented residual). It cannot overflow where a unit could not: it is a sum of
the same per-row values (each below 2^62 steps: dpsql.units.grid.summand_exponent), and the
total over units and c_NULL is at most the sum over all aggregated rows.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import sqlglot
from sqlglot import exp

from dpsql.analysis.trees import copy_tree
from dpsql.rewrite import fixed_point
from dpsql.rewrite.context import RewriteContext
from dpsql.rewrite.post import avg_only_sums
from dpsql.units.analysis import R2TPart, UnitRelease, per_group_clamp
from dpsql.units.grid import part_grid, part_levels
from dpsql.units.paths import UnitSource


def _number(value: float) -> exp.Expression:
    if isinstance(value, int):  # exactly, beyond 2^53 too (levels in fixed-point steps)
        return exp.Literal.number(value) if value >= 0 else exp.Neg(
            this=exp.Literal.number(-value))
    if float(value).is_integer():
        return exp.Literal.number(int(value))
    return exp.Literal.number(repr(float(value)))


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table=table, quoted=False)


def _least(value: exp.Expression, bound: float) -> exp.Expression:
    """min(value, bound), NULL (a SUM over no non-NULL value) counting as 0: DuckDB's LEAST
    skips NULL arguments, so a NULL must not reach it."""
    zero = exp.Coalesce(this=value, expressions=[exp.Literal.number(0)])
    return exp.Anonymous(this="LEAST", expressions=[zero, _number(bound)])


def _count_total(value: exp.Expression) -> exp.Expression:
    """A count summed over units, with its type spelled out (Spark's translation sums only
    typed values exactly): BIGINT (DuckDB sums it into HUGEINT; a sum of at most one truncated
    count per unit stays below the table's row count)."""
    return exp.Sum(this=exp.Cast(this=value, to=exp.DataType.build("BIGINT")))


def _steps_total(value: exp.Expression, k: int) -> exp.Expression:
    """Integer fixed-point contributions (steps 2^-k, each below 2^62 steps:
    dpsql.units.grid.summand_exponent) summed over units exactly and converted to their value
    once (dpsql.rewrite.fixed_point): a DOUBLE sum over units would depend on their order."""
    return fixed_point.to_value(fixed_point.exact_sum(value), k)


def _steps(value: float | Fraction, k: int, *, up: bool = False) -> int:
    """``value`` in steps 2^-k, rounded down (up: rounded up), exactly."""
    lo, hi = fixed_point.grid_bounds(value, value, k)
    return lo if up else hi


def _greatest(value: exp.Expression, bound: float) -> exp.Expression:
    return exp.Anonymous(this="GREATEST", expressions=[value, _number(bound)])


def _no_unit(table: str) -> exp.Expression:
    """``<table>.__u IS NULL``: the row is the contribution of the rows of no unit."""
    return exp.Is(this=_col("__u", table), expression=exp.Null())


def _zero() -> exp.Expression:
    return exp.Literal.number(0)


def _in_full(value: exp.Expression) -> exp.Expression:
    """A contribution of the rows of no unit as it is: ``value``, NULL (a SUM over no value)
    as 0."""
    return exp.Coalesce(this=copy_tree(value), expressions=[exp.Literal.number(0)])


def _by_unit(table: str, no_unit: exp.Expression, unit: exp.Expression) -> exp.Expression:
    """``CASE WHEN <table>.__u IS NULL THEN no_unit ELSE unit END``: what the rows of no unit
    add (in full: they are the same in both neighbours, module docstring) and what a unit
    adds (truncated or clamped)."""
    return exp.Case(ifs=[exp.If(this=_no_unit(table), true=no_unit)], default=unit)


def add_unit_id(select: exp.Select, source: UnitSource, name: str) -> None:
    """``name`` (the unit id along ``source``'s path) selected and grouped by, the path's
    lookups LEFT JOINed (aliases ``<name>p<i>``): the one-unit query's ``__u``, the two-unit
    query's ``__u0`` and ``__u1``."""
    value: exp.Expression = _col(source.column, source.alias)
    for i, hop in enumerate(source.hops):
        alias = f"{name}p{i}"
        table = exp.alias_(exp.Table(this=exp.to_identifier(hop.table)), alias, table=True)
        on = exp.EQ(this=_col(hop.key, alias), expression=value)
        select.join(table, on=on, join_type="left", copy=False)
        value = _col(hop.column, alias)
    select.select(exp.alias_(value, name), copy=False)
    select.group_by(copy_tree(value), copy=False)


def measurements(select: exp.Select) -> dict[int, exp.Expression]:
    """``select``'s measurement aggregates by index (its ``<aggregate> AS __m<j>`` columns)."""
    return {int(e.alias[3:]): e.this for e in select.expressions
            if isinstance(e, exp.Alias) and e.alias.startswith("__m")}


def drop_measurements(select: exp.Select) -> None:
    """Remove ``select``'s ``__m<j>`` columns (replaced by what a unit's query reads)."""
    select.set("expressions", [e for e in select.expressions
                               if not (isinstance(e, exp.Alias) and e.alias.startswith("__m"))])


def counts_only(release: UnitRelease) -> bool:
    """Whether the R2T query returns the histogram of the units' contributions (every part a
    COUNT: integer contributions with few distinct values) rather than the truncated sums."""
    return all(part.integer for part in release.parts)


def select_parts(select: exp.Select, release: UnitRelease, exponents: dict[int, int], *,
                 sums_as_double: bool = False) -> None:
    """Replace ``select``'s measurement columns (``__m<j>``) by one column ``__p<i>`` per R2T
    part: the COUNT, or the SUM of the part's clamped values (a SUM with both parts splits into
    its non-negative and non-positive sums, each as a sum of values >= 0), in fixed-point steps
    2^-k (``exponents``: the clamps pass's k per SUM). Shared by the one-unit query (per unit)
    and the two-unit one (per pair of units, ``sums_as_double``: the flow reads each pair's
    value, converted once from its exact sum)."""
    nodes = measurements(select)
    kept: set[int] = set()
    for i, part in enumerate(release.parts):
        agg = nodes[part.index]
        if isinstance(agg, exp.Count):
            part_node: exp.Expression = agg if part.index not in kept else copy_tree(agg)
        else:
            part_node = exp.Sum(this=part_summand(agg, part, release,
                                                  reuse=part.index not in kept))
            if sums_as_double:
                part_node = fixed_point.to_value(part_node, exponents[part.index])
        kept.add(part.index)
        select.select(exp.alias_(part_node, f"__p{i}"), copy=False)
    drop_measurements(select)


def part_summand(agg: exp.Expression, part: R2TPart, release: UnitRelease, *,
                 reuse: bool) -> exp.Expression:
    """A SUM part's per-row summand: the measurement's clamped fixed-point steps (``agg``: its
    ``SUM``), negated for the non-positive part and floored at 0 when the SUM has both parts,
    so an integer >= 0 (NULL: no value). ``reuse``: take ``agg``'s argument itself (its first
    use) rather than a copy."""
    assert isinstance(agg, exp.Sum), agg
    arg = agg.this if reuse else copy_tree(agg.this)
    if part.sign < 0:
        arg = exp.Neg(this=exp.Paren(this=arg))
    if sum(1 for p in release.parts if p.index == part.index) == 2:
        arg = _greatest(arg, 0)
    return arg


def _r2t(select: exp.Select, release: UnitRelease, exponents: dict[int, int]) -> exp.Select:
    select_parts(select, release, exponents)
    per_unit = exp.alias_(exp.Subquery(this=select), "__c", table=True)
    if counts_only(release):
        return _r2t_histogram(per_unit, len(release.parts))
    return _r2t_per_unit(per_unit, release, exponents)


def _r2t_per_unit(per_unit: exp.Expression, release: UnitRelease, exponents: dict[int, int]
                  ) -> exp.Select:
    """With a SUM part: one row per unit (module docstring), ``__nu`` (the row of no unit),
    per part i ``__q<i>`` = min(c_u, T_i) with T_i the part's top level (tau_L * b; for a SUM
    in fixed-point steps 2^-k, rounded down: at most 2^62 (dpsql.units.grid, max_sum), so
    a BIGINT whatever the data), ``__z<i>`` on the row of no unit only: c_NULL in full (a
    count as BIGINT, a SUM's exact sum of steps converted to its value once, as
    :func:`_steps_total` converts a total), and ``__k<i>``: the constant k of those steps.
    Every level min(c_u, tau_j b) = min(__q, tau_j b) (tau_j b <= T_i), summed over the units
    in exact integers by dpsql.units.execute."""
    outer = exp.Select().select(exp.alias_(_no_unit("__c"), "__nu"), copy=False)
    for i, part in enumerate(release.parts):
        unit_bound, _ = part_grid(part, release.unit)
        k = exponents.get(part.index, 0)
        # exactly tau_L * b (levels reach 2^62: a float product would round them)
        top = Fraction(max(part_levels(part, release.unit))) * Fraction(unit_bound)
        value = _col(f"__p{i}", "__c")
        if part.integer:
            assert top.denominator == 1  # a count's b is a whole number of rows
            cap, full = int(top), _count_total_of_one(_in_full(value))
        else:  # min(c, T) = min(c, floor T) for an integer c
            cap, full = _steps(top, k), fixed_point.to_value(
                exp.Cast(this=_in_full(value), to=exp.DataType.build("DECIMAL(38, 0)")), k)
        truncated = exp.Cast(this=_least(copy_tree(value), cap),
                             to=exp.DataType.build("BIGINT"))
        outer.select(exp.alias_(truncated, f"__q{i}"), copy=False)
        no_unit = exp.Case(ifs=[exp.If(this=_no_unit("__c"), true=full)])
        outer.select(exp.alias_(no_unit, f"__z{i}"), copy=False)
        # the part's k (a constant: the steps __q is in), for the levels' conversion
        outer.select(exp.alias_(exp.Literal.number(k), f"__k{i}"), copy=False)
    return outer.from_(per_unit, copy=False)


@functools.lru_cache(maxsize=256)
def one_row_levels(per_unit_sql: str, release: UnitRelease | None) -> str | None:
    """For a per-unit R2T query (:func:`_r2t_per_unit`'s, its DuckDB text): the same levels as
    ONE row, ``__r<i>_<j>`` = the exact sum over units of min(c_u, tau_j b) converted once,
    then ``__z<i>`` = c_NULL, per part -- what a backend that is not columnar (Spark) runs
    instead: it would collect one row per unit to its driver, whose result size limit
    (``spark.driver.maxResultSize``) the number of units could pass, a failure that depends on
    the data (the red team's break). None for any other query. Compiled while preparing, with
    the per-unit query (dpsql.rewrite.plan.ExecutionPlan.fallback_sql)."""
    if release is None or not release.r2t or release.more or counts_only(release):
        return None
    tree = sqlglot.parse_one(per_unit_sql, read="duckdb")
    if not isinstance(tree, exp.Select) or tree.expressions[0].alias_or_name != "__nu":
        return None
    exponents = {part.index: int(e.this.this) for i, part in enumerate(release.parts)
                 for e in tree.expressions if e.alias_or_name == f"__k{i}"}
    source = tree.args["from_"].this
    outer = exp.Select()
    for i, part in enumerate(release.parts):
        unit_bound, _ = part_grid(part, release.unit)
        k = exponents.get(part.index, 0)
        for j, tau in enumerate(part_levels(part, release.unit)):
            cap = Fraction(tau) * Fraction(unit_bound)  # exactly (levels reach 2^62)
            value = _col(f"__p{i}", "__c")  # a node of its own in each expression
            if part.integer:
                assert cap.denominator == 1
                total = _count_total(_by_unit("__c", _zero(), _least(value, int(cap))))
            else:  # the level in steps, rounded down: min(c, T) = min(c, floor T), c integer
                total = _steps_total(_by_unit("__c", _zero(), _least(value, _steps(cap, k))),
                                     k)
            outer.select(exp.alias_(total, f"__r{i}_{j}"), copy=False)
        no_unit = _by_unit("__c", _in_full(_col(f"__p{i}", "__c")), _zero())
        total = _count_total(no_unit) if part.integer else _steps_total(no_unit, k)
        outer.select(exp.alias_(total, f"__z{i}"), copy=False)
    return outer.from_(source.copy(), copy=False).sql("duckdb")


def _count_total_of_one(value: exp.Expression) -> exp.Expression:
    """A count of the rows of no unit as BIGINT (below the table's row count)."""
    return exp.Cast(this=value, to=exp.DataType.build("BIGINT"))


def _r2t_histogram(per_unit: exp.Expression, n_parts: int) -> exp.Select:
    """Counts only: the histogram of the units' contributions, ``__h<i>`` a contribution to
    part i, ``__n`` how many units have it (a COUNT per unit has few distinct values: at
    most sqrt(2N) + 1 over N rows) and ``__z`` whether the rows of no unit (``__u`` NULL, one
    row of ``__c``) have it too (0 or 1). One part: ``GROUP BY __p0``. Several: one grouping
    set per part, so the rows stay per part (a unit's tuple of counts could be near-unique); a
    COUNT is never NULL, so a row's non-NULL ``__h<i>`` names its part (dpsql.units.execute
    reads it). ``Q(tau_j) = sum over part i's rows of (min(c, tau_j) * n + c * z)`` is then
    the same integer as ``sum_u min(c_u, tau_j) + c_NULL`` (the units with contribution c are
    n terms of min(c, tau_j); the rows of no unit are added in full, module docstring),
    evaluated exactly by dpsql.units.execute.levels_from_histogram."""
    hist = exp.Select()
    keys = [_col(f"__p{i}", "__c") for i in range(n_parts)]
    for i, key in enumerate(keys):
        hist.select(exp.alias_(copy_tree(key), f"__h{i}"), copy=False)
    units = exp.Count(this=_col("__u", "__c"))  # COUNT(__u) skips the one row of no unit
    hist.select(exp.alias_(units, "__n"), copy=False)
    hist.select(exp.alias_(exp.Sub(this=exp.Count(this=exp.Star()), expression=copy_tree(units)),
                           "__z"), copy=False)
    hist.from_(per_unit, copy=False)
    if n_parts == 1:
        return hist.group_by(keys[0], copy=False)
    sets = exp.GroupingSets(expressions=[exp.Paren(this=k) for k in keys])
    hist.set("group", exp.Group(expressions=[sets]))
    return hist


def _two_stage(select: exp.Select, release: UnitRelease, ctx: RewriteContext) -> exp.Select:
    analysis = ctx.analysis
    unit = release.unit
    n_keys = len(analysis.group_keys)
    keys = [_col(f"__k{i}", "__c") for i in range(n_keys)]
    if analysis.partition_selection:  # each (unit, group)'s rows, for __n (_selection_count)
        select.select(exp.alias_(exp.Count(this=exp.Star()), "__rows"), copy=False)
    # salted by the unit's id: each unit keeps its own pseudo-random kappa of its groups, so
    # the groups share the truncation (a hash of the keys alone ranks the groups the same for
    # every unit: all units over kappa groups would keep the same ones, emptying the others).
    # Hashed twice: DuckDB combines a multi-argument hash so weakly that, for one unit, the
    # order of hash(u, k) over k = 1, 2, 3 kept k = 2 for half the units (measured; a second
    # hash mixes it: a third each, tests/units/test_analysis.py)
    salted = exp.Anonymous(this="hash", expressions=[_col("__u", "__c"),
                                                     *(copy_tree(k) for k in keys)])
    order: list[exp.Expression] = [exp.Anonymous(this="hash", expressions=[salted])]
    order += [exp.Ordered(this=copy_tree(k), nulls_first=False) for k in keys]
    window = exp.Window(this=exp.RowNumber(), partition_by=[_col("__u", "__c")],
                        order=exp.Order(expressions=[
                            o if isinstance(o, exp.Ordered) else exp.Ordered(this=o)
                            for o in order]))
    ranked = exp.Select(expressions=[exp.Star(), exp.alias_(window, "__g")]).from_(
        exp.alias_(exp.Subquery(this=select), "__c", table=True), copy=False)
    outer = exp.Select()
    for i in range(n_keys):
        outer.select(exp.alias_(_col(f"__k{i}", "__r"), f"__k{i}"), copy=False)
    avg_counts = avg_only_sums(analysis)
    for m in analysis.measurements:
        lo, hi = per_group_clamp(m, unit)
        contribution = _col(f"__m{m.index}", "__r")
        # a unit's contribution clamped per group; the rows of no unit's in full (module
        # docstring)
        if m.function == "COUNT":  # typed, so Spark's exact-sum rewrite knows what it sums
            total = _count_total(_by_unit("__r", _in_full(contribution),
                                          _least(contribution, hi)))
        else:  # in steps 2^-k, the interval rounded inwards: it stays within [lo, hi]
            k = ctx.sum_exponents[m.index]
            kept = contribution  # an AVG's SUM: C rows' worth, as its COUNT is
            if m.index in avg_counts:
                kept = _rows_worth(contribution, _col(f"__m{avg_counts[m.index]}", "__r"),
                                   unit.max_rows_per_group)
            value = _least(kept, _steps(hi, k))
            value = _greatest(value, _steps(lo, k, up=True))
            total = _steps_total(_by_unit("__r", _in_full(contribution), value), k)
        outer.select(exp.alias_(total, f"__m{m.index}"), copy=False)
    if analysis.partition_selection:
        outer.select(exp.alias_(_selection_count(), "__n"), copy=False)
    outer = outer.from_(exp.alias_(exp.Subquery(this=ranked), "__r", table=True), copy=False)
    # each unit keeps its max_groups groups; the rows of no unit keep all of theirs
    kept = exp.LTE(this=_col("__g", "__r"), expression=exp.Literal.number(unit.max_groups))
    outer = outer.where(exp.Or(this=kept, expression=_no_unit("__r")), copy=False)
    if n_keys:
        outer = outer.group_by(*[_col(f"__k{i}", "__r") for i in range(n_keys)], copy=False)
    return outer


def _rows_worth(total: exp.Expression, count: exp.Expression, rows: int) -> exp.Expression:
    """A unit's sum in a group over its ``count`` rows scaled to ``rows`` rows' worth when it
    has more: ``FLOOR(total * rows / count)`` steps, its mean times ``rows`` (the expectation
    of keeping ``rows`` of them at random). For an AVG's SUM only (:func:`avg_only_sums`): its
    COUNT keeps min(count, rows), so the AVG is a mean of the units' own means, where
    clamping the sum to ``rows`` times the bound raised it (a unit's 5 rows of 2,500 at C = 1
    and bounds [0, 5,000] gave 5,000 over one row: QA rounds 4 and 5). Privacy: a function of
    the unit's own rows in the group, clamped into per_group_clamp after, as any sum is."""
    scaled = exp.Floor(this=exp.Div(
        this=exp.Mul(this=exp.Cast(this=copy_tree(total), to=exp.DataType.build("DOUBLE")),
                     expression=exp.Literal.number(rows)),
        expression=copy_tree(count)))
    return exp.Case(ifs=[exp.If(this=exp.GT(this=copy_tree(count),
                                            expression=exp.Literal.number(rows)),
                                true=scaled)], default=total)


def _selection_count() -> exp.Expression:
    """The two-stage's ``__n`` of a group (partition selection, dpsql.noise.unit_partition):
    ``SUM(CASE WHEN __u IS NULL THEN __rows ELSE 1 END)`` over its kept (unit, group) rows --
    the number of units kept in the group plus its number of rows of no unit (``__rows``, the
    inner query's COUNT(*) per (unit, group)).

    Contract. Precondition: the rows of ``__r`` are the two-stage's kept (unit, group) pairs,
    each unit's chosen from its own rows, and the rows of no unit's in every group. Guarantee:
    for D' = D + cascade(u), ``__n`` rises by exactly 1 in each of u's kept groups and is equal
    elsewhere (the rows of no unit are the same in both neighbours, so their term is too); a
    group non-empty in D' only holds u alone, so its ``__n`` is 1 -- the premises of
    dpsql.noise.unit_partition. And ``__n`` is exactly a ``COUNT(*)``'s two-stage value at
    ``max_rows_per_group`` 1 (each unit's count, at least 1 in a group it is in, clamped to 1;
    the rows of no unit in full), which dpsql.noise.unit_partition.shared_count relies on."""
    per_row = exp.Case(ifs=[exp.If(this=_no_unit("__r"), true=_col("__rows", "__r"))],
                       default=exp.Literal.number(1))
    return _count_total(per_row)


def unit_contributions(tree: exp.Expression, *, ctx: RewriteContext) -> exp.Expression:
    """Pass: the exact query with each unit's contribution bounded (module docstring)."""
    release = ctx.analysis.unit
    if release is None or release.derived is not None:
        # derived: one unit is at most one row of the derived table (dpsql.units.derived),
        # so the row-level query already bounds each unit: nothing to add
        return tree
    assert isinstance(tree, exp.Select)
    if release.more:  # a result row of two units: grouped by the pair (dpsql.units.multi)
        from dpsql.units.multi_rewrite import pair_contributions

        return pair_contributions(tree, release, ctx.sum_exponents)
    add_unit_id(tree, release.source, "__u")
    if release.r2t:
        return _r2t(tree, release, ctx.sum_exponents)
    return _two_stage(tree, release, ctx)
