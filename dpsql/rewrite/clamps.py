"""Pass: SUM arguments clamped to their declared or derived bounds (the sensitivity assumes
them; a computed argument is made total first, then clamped as a whole), COUNT arguments made
total; and the clamps the stored data make the identity, recorded for removal.

A SUM of integers or DECIMALs is summed in the column's own type (exact). Any other SUM is
summed in fixed point (:mod:`dpsql.rewrite.fixed_point`): each clamped value an integer number
of steps 2^-k, summed exactly, converted to DOUBLE once -- floating-point addition depends on the
order of the rows, which can depend on the other rows."""

from __future__ import annotations

from decimal import Decimal

from sqlglot import exp

from dpsql.analysis.elastic import Measurement, QueryAnalysis
from dpsql.analysis.trees import copy_tree
from dpsql.errors import NotSupportedError
from dpsql.metadata import Table
from dpsql.rewrite import fixed_point
from dpsql.rewrite.context import Removable, RewriteContext, StoredData
from dpsql.rewrite.safe_compare import ColumnKind, Kind, base_tables, column_kinds
from dpsql.rewrite.totality import make_total


def clamp_measurements(query: exp.Select, *, ctx: RewriteContext) -> exp.Select:
    """Set the select list to the group keys ``__k<i>`` and the measurements ``__m<j>``, each
    SUM argument clamped (in the column's own type where that is exact), and record in
    ``ctx`` the outer tables and the clamps that change no stored value."""
    ctes = ctx.cte_names()
    ctx.sources = base_tables(query, ctx.metadata, ctes)
    measurements, ctx.removable, ctx.sum_exponents = _measurement_sql(
        ctx.analysis, column_kinds(query, ctx.metadata, ctes), ctx.sources, ctx.stored)
    # Each key as the GROUP BY clause holds it after the totality pass (a computed key is
    # wrapped in TRY there, and the select list must repeat it exactly).
    group = query.args["group"].expressions if ctx.analysis.group_keys else []
    keys = [exp.alias_(copy_tree(group[k.index]), f"__k{k.index}", copy=False)
            for k in ctx.analysis.group_keys]
    query.set("expressions", keys + measurements)
    return query


def _clamp(arg: exp.Expression, bounds: tuple[float, float], kind: Kind | None,
           k: int) -> exp.Expression:
    """``arg`` clamped to ``bounds``, as what SUM adds; NULL stays NULL (SUM and COUNT(x) skip
    it).

    In the column's own integer or DECIMAL type when :func:`_native_bounds` allows (the same
    clamped values, summed exactly, without a per-row cast), else as a BIGINT number of
    fixed-point steps 2^-k (:func:`dpsql.rewrite.fixed_point.row_steps`): a DOUBLE is never
    summed, because floating-point addition depends on the order of the rows.
    """
    native = _native_bounds(bounds, kind)
    if native is not None:
        lo, hi = native
        return exp.Case(ifs=[
            exp.If(this=exp.LT(this=copy_tree(arg), expression=lo), true=copy_tree(lo)),
            exp.If(this=exp.GT(this=copy_tree(arg), expression=hi), true=copy_tree(hi)),
        ], default=copy_tree(arg))
    # TRY_CAST: a column of unknown or non-numeric type must not fail on one row's value (the
    # analysis rejects known non-numeric types). CASE, not LEAST/GREATEST: DuckDB runs it ~3x
    # faster, NULL falls through to ELSE (SUM skips it) and NaN sorts above hi, as before.
    value = exp.TryCast(this=copy_tree(arg), to=exp.DataType.build(exp.DataType.Type.DOUBLE))
    return fixed_point.row_steps(value, bounds, k)


def _is_native(clamp: exp.Expression) -> bool:
    """Whether :func:`_clamp` clamped in the column's own type (no fixed-point steps)."""
    return not isinstance(clamp, exp.Cast)


#: clamped values times 10^scale stay below this, so a SUM (DuckDB: DECIMAL(38, s) or INT128
#: for integers) of up to 10^20 rows cannot overflow
_NATIVE_LIMIT = 10**18


def _native_bounds(bounds: tuple[float, float],
                   kind: Kind | None) -> tuple[exp.Literal, exp.Literal] | None:
    """The bounds as literals of the column's integer/DECIMAL type, when clamping there is
    exactly the DOUBLE clamp's interval and cannot fail.

    Conditions: the column is a signed integer of <= 64 bits or DECIMAL(p, s) with p <= 18
    (DuckDB sums them into INT128 / DECIMAL(38, s), and clamped values below 10^18 / 10^s
    cannot overflow that); each bound is *exactly* a number with at
    most s decimals (0.25 at scale 2 is; the double 0.1 is not), so the clamped values lie in
    the very interval the sensitivity was computed for; each bound has no more integer digits
    than the column (the CASE's type stays the column's type: no cast of stored values).
    """
    if kind is None or kind.family not in ("int", "decimal"):
        return None
    key = (kind, *((type(b), repr(b)) for b in bounds))  # repr: -0.0 is not 0.0 here
    if key in _NATIVE_TEXTS:
        texts = _NATIVE_TEXTS[key]
    else:
        texts = _native_texts(bounds, kind)
        if len(_NATIVE_TEXTS) >= 1024:
            _NATIVE_TEXTS.clear()
        _NATIVE_TEXTS[key] = texts
    if texts is None:
        return None
    lo, hi = (exp.Neg(this=exp.Literal.number(t[1:])) if t.startswith("-")
              else exp.Literal.number(t) for t in texts)
    return lo, hi


#: (kind, each bound's type and repr) -> :func:`_native_texts` (a pure function of them)
_NATIVE_TEXTS: dict[tuple[object, ...], tuple[str, ...] | None] = {}


def _native_texts(bounds: tuple[float, float], kind: Kind) -> tuple[str, ...] | None:
    """The text of each bound's literal for :func:`_native_bounds`, or None."""
    if kind.digits + kind.scale > (19 if kind.family == "int" else 18):
        return None  # UBIGINT, and DECIMALs wider than 64 bits
    texts = []
    for b in bounds:
        exact = Decimal(b)  # the double's exact binary value
        scaled = exact.scaleb(kind.scale)
        if scaled != scaled.to_integral_value() or abs(scaled) >= _NATIVE_LIMIT:
            return None
        whole_digits = len(str(abs(int(exact)))) if int(exact) != 0 else 0
        if whole_digits > kind.digits or (kind.family == "int" and whole_digits >= kind.digits):
            return None
        texts.append(str(int(exact)) if kind.scale == 0 else f"{exact:.{kind.scale}f}")
    return tuple(texts)


def _sum_cannot_overflow(kind: Kind | None) -> bool:
    """Whether DuckDB's SUM of a column of this kind cannot raise for any stored values and any
    number of rows: DOUBLE sums reach inf, never an error; integers of <= 64 bits sum in
    HUGEINT (2^64 * 2^64 < 2^127 for fewer than 2^63 rows); DECIMAL(p, s) with p <= 18 sums in
    DECIMAL(38, s) (fewer than 10^20 rows of < 10^18 units). Wider DECIMALs and HUGEINT sum in
    their own width and overflow on a few rows near the bounds, so their clamp (in DOUBLE)
    must stay even when the data fit the bounds."""
    if kind is None:
        return False
    if kind.family == "float":
        return True
    if kind.family == "int":
        return kind.digits <= 20  # up to UBIGINT
    return kind.family == "decimal" and kind.digits + kind.scale <= 18


def sum_bounds(m: Measurement, analysis: QueryAnalysis) -> tuple[float, float]:
    """The interval SUM measurement ``m``'s rows are clamped into: its bounds; under R2T also
    within its parts' top truncation levels (a row above the top level leaves every truncated
    sum as it is: its unit's contribution is truncated at each level either way), which keeps
    each row's steps below 2^63 whatever the owner's max_sum (dpsql.units.grid)."""
    assert m.bounds is not None
    release = analysis.unit
    if release is None or not release.r2t or release.more:
        return m.bounds
    from dpsql.units.grid import r2t_row_bounds

    return r2t_row_bounds(m, release)


def sum_exponent(m: Measurement, analysis: QueryAnalysis) -> int:
    """The fixed-point k of SUM measurement ``m`` (a function of its bounds and the metadata):
    a row's value at most 2^53 steps (:func:`dpsql.rewrite.fixed_point.exponent`), and under a
    privacy unit whose pass sums contributions over units, each contribution it sums below
    2^62 steps (:func:`dpsql.units.grid.summand_exponent`). Under R2T k >= 0: every level
    (an integer number of value units) is then a whole number of steps, as the noised
    increments' sensitivities assume (the red team found floored levels breaking them)."""
    lo, hi = sum_bounds(m, analysis)
    k = fixed_point.exponent(max(abs(lo), abs(hi)))
    release = analysis.unit
    if release is None or release.derived is not None or release.more:
        return k
    from dpsql.units.grid import summand_exponent

    k = min(k, summand_exponent(m, release))
    return max(k, 0) if release.r2t else k


def _check_grid(m: Measurement, bounds: tuple[float, float], k: int) -> None:
    """Refuse a SUM whose bounds hold no point of its fixed-point grid (under a unit, k may be
    capped so far that a step exceeds the bounds' width): a function of the metadata alone."""
    lo, hi = fixed_point.grid_bounds(*bounds, k)
    if lo > hi:
        raise NotSupportedError(
            f"{m.node.sql(dialect='duckdb')[:60]}: its bounds [{bounds[0]!r}, {bounds[1]!r}] "
            f"hold no multiple of 2^{-k}, the step its sum is added in exactly (under the "
            "privacy unit, the step grows with max_sum, max_contribution and "
            "max_rows_per_group so that no sum can overflow): declare smaller unit bounds, "
            "or wider bounds that include 0")


def units_scale(analysis: QueryAnalysis) -> bool:
    """Whether the privacy-unit pass sums the measurements again (per unit, per pair) and so
    converts fixed-point sums to values itself (dpsql.units.rewrite)."""
    return analysis.unit is not None and analysis.unit.derived is None


def _measurement_sql(analysis: QueryAnalysis, column_kind: ColumnKind,
                     sources: dict[str, tuple[exp.Table, Table]],
                     stored: StoredData | None
                     ) -> tuple[list[exp.Expression], list[Removable], dict[int, int]]:
    """The measurement list, the clamps ``stored`` shows change no value (a SUM of a numeric
    base-table column whose stored values all lie inside its bounds), and each fixed-point
    SUM's exponent k (by measurement index)."""
    out, removable, exponents = [], [], {}
    for m in analysis.measurements:
        node = copy_tree(m.node)
        if m.function == "SUM":
            assert m.bounds is not None
            arg = node.this.unnest()
            kind = column_kind(arg) if isinstance(arg, exp.Column) else None
            if not isinstance(arg, exp.Column):
                # a computed value: every sub-expression made total (an error becomes NULL,
                # which SUM skips), then the whole per-row value clamped, so each row adds a
                # value in the bounds or nothing whatever the database computes
                node.set("this", make_total(copy_tree(arg), column_kind))
            k = sum_exponent(m, analysis)
            bounds = sum_bounds(m, analysis)
            _check_grid(m, bounds, k)
            # under a unit every SUM is in steps: the pass sums contributions over units
            # again, which must be exact too, and one integer type serves every column type
            clamp = _clamp(node.this, bounds, None if units_scale(analysis) else kind, k)
            node = exp.Sum(this=clamp)
            if not _is_native(clamp):
                exponents[m.index] = k
                if not units_scale(analysis):
                    node = fixed_point.to_value(node, k)
            source = sources.get(arg.table) if isinstance(arg, exp.Column) else None
            if (source is not None and stored is not None and _sum_cannot_overflow(kind)
                    and stored.in_bounds(source[1].name, arg.name, bounds)):
                if _is_native(clamp):
                    removable.append((clamp, arg))
                elif fixed_point.on_grid(bounds, k):
                    # the CASE keeps every stored value as ROUND gives it: drop the CASE
                    case = clamp.this
                    removable.append((case, copy_tree(case.args["default"])))
        elif isinstance(node.this, exp.Expression) and not isinstance(node.this, exp.Star):
            # COUNT(a // b) must not raise
            node.set("this", make_total(node.this, column_kind))
        out.append(exp.alias_(node, f"__m{m.index}", copy=False))
    return out, removable, exponents
