"""The executed query under a privacy unit: each unit's contribution, bounded in SQL.

Pass :func:`unit_contributions` (the last of dpsql.rewrite.plan.PASSES; the identity without a
unit) takes the exact query as the other passes leave it -- ``SELECT <keys> AS __k<i>,
<aggregates> AS __m<j> FROM .. WHERE .. GROUP BY <keys>``, every aggregate clamped and total --
and groups it by the unit as well (``__u``, computed along the unit path by LEFT JOINs to
unique keys: dpsql.units.paths), so each row of it is one unit's contribution. Then:

* without GROUP BY (R2T): one row of truncated sums ``__r<i>_<j>`` = sum over units of
  min(c_u, tau_j * b) for every part i (dpsql.units.analysis.R2TPart: a COUNT, or the
  non-negative / non-positive part of a SUM) and level j of the part's grid
  (dpsql.units.grid: rows for a COUNT, value units for a SUM part, b = 1), all in one scan;
  when every part is a COUNT, through the histogram of the units' contributions (``GROUP BY``
  the contributions, then ``min(c, tau_j) * n`` per distinct value: the same integers, far
  fewer LEASTs);
* with GROUP BY (two-stage): each unit keeps the ``max_groups`` groups with the smallest
  hash of their keys (ties by the keys: deterministic, and a function of the unit's own rows),
  its contribution to each clamped per group (dpsql.units.analysis.per_group_clamp); the
  result has the layout's ``__k<i>, __m<j>`` columns, so domains and bins work as without a unit.
  With a partition-selected key, dpsql.rewrite.plan adds ``COUNT(*) AS __n`` to this outer
  query: the number of kept (unit, group) pairs, i.e. of distinct units kept in the group (the
  rows of no unit one pseudo-unit), which dpsql.noise.unit_partition thresholds.

Rows whose path does not resolve (NULL or orphan keys) have ``__u`` NULL: one group of rows
that belong to no unit, the same in both neighbours (docs/privacy.md, "Privacy units").
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.trees import copy_tree
from dpsql.noise.r2t import levels
from dpsql.rewrite.context import RewriteContext
from dpsql.units.analysis import UnitRelease, per_group_clamp
from dpsql.units.grid import part_grid, part_levels


def _number(value: float) -> exp.Expression:
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


def _as_total(value: exp.Expression, integer: bool) -> exp.Expression:
    """What is summed over units, with its type spelled out (Spark's translation sums only
    typed values exactly): counts as BIGINT (DuckDB sums them into HUGEINT; a sum of at most
    one truncated count per unit stays below the table's row count), sums as DOUBLE, whose sum
    cannot overflow into an error whatever the bounds (a DECIMAL sum can)."""
    return exp.Cast(this=value, to=exp.DataType.build("BIGINT" if integer else "DOUBLE"))


def _greatest(value: exp.Expression, bound: float) -> exp.Expression:
    return exp.Anonymous(this="GREATEST", expressions=[value, _number(bound)])


def _add_unit(select: exp.Select, release: UnitRelease) -> None:
    """``__u`` selected and grouped by, with the path's lookups joined."""
    source = release.source
    value: exp.Expression = _col(source.column, source.alias)
    for i, hop in enumerate(source.hops):
        alias = f"__up{i}"
        table = exp.alias_(exp.Table(this=exp.to_identifier(hop.table)), alias, table=True)
        on = exp.EQ(this=_col(hop.key, alias), expression=value)
        select.join(table, on=on, join_type="left", copy=False)
        value = _col(hop.column, alias)
    select.select(exp.alias_(value, "__u"), copy=False)
    select.group_by(copy_tree(value), copy=False)


def _measurement_nodes(select: exp.Select) -> dict[int, exp.Alias]:
    out = {}
    for e in select.expressions:
        if isinstance(e, exp.Alias) and e.alias.startswith("__m"):
            out[int(e.alias[3:])] = e
    return out


def _r2t(select: exp.Select, release: UnitRelease) -> exp.Select:
    nodes = _measurement_nodes(select)
    kept: set[int] = set()
    for i, part in enumerate(release.parts):
        node = nodes[part.index]
        agg = node.this
        name = f"__p{i}"
        if isinstance(agg, exp.Count):
            part_node: exp.Expression = agg if part.index not in kept else copy_tree(agg)
        else:
            assert isinstance(agg, exp.Sum), agg
            arg = agg.this if part.index not in kept else copy_tree(agg.this)
            both = sum(1 for p in release.parts if p.index == part.index) == 2
            if part.sign < 0:
                arg = exp.Neg(this=exp.Paren(this=arg))
            if both:
                arg = _greatest(arg, 0)
            part_node = exp.Sum(this=arg)
        kept.add(part.index)
        select.select(exp.alias_(part_node, name), copy=False)
    select.set("expressions", [e for e in select.expressions
                               if not (isinstance(e, exp.Alias) and e.alias.startswith("__m"))])
    per_unit = exp.alias_(exp.Subquery(this=select), "__c", table=True)
    if all(part.integer for part in release.parts):
        taus = levels(release.unit.max_contribution, release.unit.level_base)
        return _r2t_histogram(per_unit, release, taus)
    outer = exp.Select()
    for i, part in enumerate(release.parts):
        unit_bound, _ = part_grid(part, release.unit)
        for j, tau in enumerate(part_levels(part, release.unit)):
            least = _least(_col(f"__p{i}", "__c"), tau * unit_bound)
            outer.select(exp.alias_(exp.Sum(this=_as_total(least, part.integer)),
                                    f"__r{i}_{j}"), copy=False)
    return outer.from_(per_unit, copy=False)


def _r2t_histogram(per_unit: exp.Expression, release: UnitRelease,
                   taus: tuple[int, ...]) -> exp.Select:
    """Counts only: the units' contributions as a histogram (``__h<i>`` the contributions,
    ``__n`` how many units have them; a COUNT per unit has few distinct values), then
    ``Q(tau_j) = sum over the histogram of min(c, tau_j b) * n``: the same integers as summing
    ``min(c_u, tau_j b)`` over the units (exact BIGINT arithmetic, each product at most the
    units' total), with the L LEASTs evaluated once per distinct contribution instead of once
    per unit."""
    hist = exp.Select()
    for i in range(len(release.parts)):
        hist.select(exp.alias_(_col(f"__p{i}", "__c"), f"__h{i}"), copy=False)
        hist.group_by(_col(f"__p{i}", "__c"), copy=False)
    hist.select(exp.alias_(exp.Count(this=exp.Star()), "__n"), copy=False)
    hist.from_(per_unit, copy=False)
    outer = exp.Select()
    for i, part in enumerate(release.parts):
        for j, tau in enumerate(taus):
            least = _least(_col(f"__h{i}", "__h"), tau * part.bound)
            weighted = exp.Mul(this=least, expression=_col("__n", "__h"))
            outer.select(exp.alias_(exp.Sum(this=_as_total(weighted, True)), f"__r{i}_{j}"),
                         copy=False)
    return outer.from_(exp.alias_(exp.Subquery(this=hist), "__h", table=True), copy=False)


def _two_stage(select: exp.Select, release: UnitRelease, ctx: RewriteContext) -> exp.Select:
    analysis = ctx.analysis
    unit = release.unit
    n_keys = len(analysis.group_keys)
    keys = [_col(f"__k{i}", "__c") for i in range(n_keys)]
    order: list[exp.Expression] = [exp.Anonymous(this="hash", expressions=keys)]
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
    for m in analysis.measurements:
        lo, hi = per_group_clamp(m, unit)
        value = _least(_col(f"__m{m.index}", "__r"), hi)
        if m.function != "COUNT":
            value = _greatest(value, lo)
        else:  # typed, so Spark's exact-sum rewrite knows what it sums (at most C per unit)
            value = exp.Cast(this=value, to=exp.DataType.build("BIGINT"))
        outer.select(exp.alias_(exp.Sum(this=_as_total(value, m.integer)), f"__m{m.index}"),
                     copy=False)
    outer = outer.from_(exp.alias_(exp.Subquery(this=ranked), "__r", table=True), copy=False)
    outer = outer.where(exp.LTE(this=_col("__g", "__r"),
                                expression=exp.Literal.number(unit.max_groups)), copy=False)
    if n_keys:
        outer = outer.group_by(*[_col(f"__k{i}", "__r") for i in range(n_keys)], copy=False)
    return outer


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

        return pair_contributions(tree, release)
    _add_unit(tree, release)
    if release.r2t:
        return _r2t(tree, release)
    return _two_stage(tree, release, ctx)
