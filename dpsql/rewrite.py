"""The SQL dpsql actually executes: never the analyst's text, always this rewrite.

From a :class:`~dpsql.analysis.elastic.QueryAnalysis` it builds

* the *exact* query, run by the backend on private data: the exact measurements ``__m<j>``,
  and with GROUP BY the non-empty bins inside the declared domains (as bin indexes) plus the
  domains' values, from which the engine builds every bin of the domains' product, empty bins
  as 0 (:func:`build_exact`, :func:`dpsql.engine.exact_bins`); SUM/AVG arguments clamped to
  their declared bounds; every expression that could raise a data-dependent error (overflow,
  failed cast, division by zero, an implicit cast in a comparison) wrapped in ``TRY(...)`` so
  it yields NULL instead (an error would reveal that some row exists) -- comparisons that
  provably cannot fail (dpsql.safe_compare) are left plain;
  ``x NOT IN (subquery)`` evaluated with NOT EXISTS semantics (one NULL in the subquery must not
  empty the result);
* the *post-processing* query, run on an in-memory table of NOISY values only: the analyst's
  SELECT expressions, HAVING, ORDER BY, DISTINCT and LIMIT over the noisy aggregates.

Contract: with noise switched off, running both returns exactly what the analyst's SQL returns
on the same data (for group keys, restricted to and completed with the declared domain, itself
narrowed by the query's conditions on the key column; for SUM, when the data lie inside the
bounds; for NOT IN, when the subquery has no NULLs). Which bins are released never depends on
private data, and a SUM clamp is left out only where it cannot change any value.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

from sqlglot import exp

from dpsql.analysis.elastic import GroupKey, QueryAnalysis
from dpsql.analysis.keytypes import COMPARABLE_KEY, is_marked_comparable, normalise
from dpsql.analysis.parse import DIALECT
from dpsql.domains import typed_value
from dpsql.errors import NotSupportedError
from dpsql.metadata import Domain, Metadata, Table
from dpsql.safe_compare import ColumnKind, Kind, base_tables, column_kinds
from dpsql.totality import AGGREGATES, cte_names, make_total, total_query

NOISY_TABLE = "__noisy"
#: Most bins (the product of the GROUP BY keys' declared domains) one query may release: every
#: bin is materialised, noised and returned as a row (~100 bytes each in Python).
MAX_BINS = 10_000_000
_PARAM_PREFIX = "__dpsql_param_"

@dataclass(frozen=True)
class OutputSpec:
    """How one output column is read from the noisy row (the post-processing fast path)."""

    kind: str  # "key" | "measurement" | "avg"
    index: int  # key or measurement index (the SUM for avg)
    count_index: int = -1  # the COUNT for avg
    bounds: tuple[float, float] | None = None


@dataclass(frozen=True)
class ExecutionPlan:
    """The exact query for the backend, and how to post-process its noisy values."""

    exact_sql: str  # what the backend runs
    exact_params: tuple[int, ...]  # positions of the analyst's parameters it uses, in order
    n_keys: int
    n_measurements: int
    output_names: tuple[str, ...]
    post_sql: str | None  # over NOISY_TABLE; None when the fast path below suffices
    post_params: tuple[int, ...]
    fast_path: tuple[OutputSpec, ...] | None
    #: ORDER BY for the fast path: (output column, descending), most significant first
    fast_order: tuple[tuple[int, bool], ...] = ()
    #: per measurement: a COUNT (integer) or a SUM
    integer_measurements: tuple[bool, ...] = ()
    #: ``exact_sql`` with every SUM clamp in place: a normal form of the query that does not
    #: depend on the data (what the engine fingerprints); "" when it is ``exact_sql`` itself
    canonical_sql: str = ""

    #: parameters the engine binds itself: inlined public domains (name, values as text)
    exact_constants: tuple[tuple[str, tuple[str | None, ...]], ...] = ()
    #: with GROUP BY over listed domains only: the domain rows' own query (reads no table),
    #: and ``exact_sql`` then sends numbers only (see :func:`build_exact`)
    domain_sql: str | None = None
    domain_params: tuple[int, ...] = ()

    def exact_bindings(self, params: Sequence[Any]) -> dict[str, Any]:
        """Every named parameter ``exact_sql`` takes, from the analyst's qmark ``params``."""
        return self._bindings(self.exact_params, params)

    def domain_bindings(self, params: Sequence[Any]) -> dict[str, Any]:
        """Every named parameter ``domain_sql`` takes."""
        return self._bindings(self.domain_params, params)

    def _bindings(self, positions: tuple[int, ...], params: Sequence[Any]) -> dict[str, Any]:
        bound = bind_params(positions, params)
        for name, values in self.exact_constants:  # both queries hold every domain
            bound[name] = list(values)
        return bound

    @property
    def normal_form(self) -> str:
        """The exact SQL with every clamp (see ``canonical_sql``)."""
        return self.canonical_sql or self.exact_sql


# --------------------------------------------------------------------------- parameters


def _number_parameters(query: exp.Expression) -> exp.Expression:
    """Give each ``?`` a name carrying its position in the analyst's SQL text.

    Returns ``query`` itself (not a copy) when it has no ``?``: callers copy before mutating.
    """
    if query.find(exp.Placeholder) is None:
        return query
    query = query.copy()
    placeholders = [p for p in query.find_all(exp.Placeholder) if not p.this]
    for i, p in enumerate(placeholders):
        p.set("this", f"{_PARAM_PREFIX}tmp{i}")
    # The generator writes clauses in textual order, which is the order DuckDB binds ``?``.
    text = query.sql(dialect=DIALECT)
    order = [int(m) for m in re.findall(rf"\$?{_PARAM_PREFIX}tmp(\d+)", text)]
    position = {tmp: pos for pos, tmp in enumerate(order)}
    for i, p in enumerate(placeholders):
        p.set("this", f"{_PARAM_PREFIX}{position[i]}")
    return query


def _used_params(sql: str) -> tuple[int, ...]:
    return tuple(sorted({int(m) for m in re.findall(rf"{_PARAM_PREFIX}(\d+)", sql)}))


def bind_params(positions: tuple[int, ...], params) -> dict[str, object]:
    """The named parameters one generated query needs, from the analyst's qmark sequence."""
    if not positions:
        return {}
    return {f"{_PARAM_PREFIX}{i}": params[i] for i in positions}


# --------------------------------------------------------------------------- NOT IN

def _not_in_as_not_exists(query: exp.Expression) -> None:
    """``x NOT IN (SELECT y ...)`` -> ``NOT EXISTS (SELECT 1 FROM (...) s WHERE s.y = x)``."""
    for n, not_node in enumerate(list(query.find_all(exp.Not))):
        inner = not_node.this.unnest()
        if not (isinstance(inner, exp.In) and inner.args.get("query") is not None):
            continue
        sub = inner.args["query"]
        sub = sub.this if isinstance(sub, exp.Subquery) else sub
        alias = f"__dpsql_notin{n}"
        column = sub.selects[0].alias_or_name
        probe_eq = exp.EQ(this=exp.column(column, alias), expression=inner.this.copy())
        if is_marked_comparable(inner):  # the analysis proved the IN key's types comparable
            probe_eq.meta[COMPARABLE_KEY] = True
        probe = exp.select("1").from_(exp.alias_(sub.copy().subquery(), alias)).where(probe_eq)
        not_node.set("this", exp.Exists(this=probe))


def _not_exists_as_null_safe_not_in(query: exp.Expression) -> None:
    """The probes of :func:`_not_in_as_not_exists` whose comparison stayed plain (cannot fail,
    see :func:`dpsql.totality.make_total`) -> ``(x IS NULL OR NOT x IN (SELECT s.y FROM (...)
    s WHERE s.y IS NOT NULL))``, in place; run after :func:`dpsql.totality.total_query`.

    The same NOT EXISTS semantics (a NULL x is kept, a NULL y matches nothing), but DuckDB runs
    it as one mark join, while it decorrelates the NOT EXISTS through a duplicate-eliminated join
    over the outer rows (TPC-H Q16 at SF10: ~1.3x the time of the whole query). A probe whose
    comparison is wrapped in TRY stays NOT EXISTS: IN has no place for the TRY.
    """
    for exists in list(query.find_all(exp.Exists)):
        probe, not_node = exists.this, exists.parent
        if not (isinstance(not_node, exp.Not) and isinstance(probe, exp.Select)):
            continue
        source = probe.args.get("from_")
        eq = probe.args.get("where")
        eq = eq.this if eq is not None else None
        if not (source is not None and isinstance(source.this, exp.Subquery)
                and source.this.alias.startswith("__dpsql_notin") and isinstance(eq, exp.EQ)
                and isinstance(eq.this, exp.Column) and eq.this.table == source.this.alias):
            continue
        column, x = eq.this, eq.expression
        values = exp.Select(expressions=[column.copy()], from_=source.copy(), where=exp.Where(
            this=exp.Not(this=exp.Is(this=column.copy(), expression=exp.Null()))))
        not_node.replace(exp.Paren(this=exp.Or(
            this=exp.Is(this=x.copy(), expression=exp.Null()),
            expression=exp.Not(this=exp.In(this=x.copy(), query=exp.Subquery(this=values))))))


# --------------------------------------------------------------------------- exact query


def _clamp(arg: exp.Expression, bounds: tuple[float, float], kind: Kind | None) -> exp.Expression:
    """``arg`` clamped to ``bounds``; NULL stays NULL (SUM and COUNT(x) skip it).

    In the column's own integer or DECIMAL type when :func:`_native_bounds` allows (the same
    clamped values, summed exactly, without a per-row cast), else in DOUBLE.
    """
    native = _native_bounds(bounds, kind)
    if native is not None:
        lo, hi = native
        return exp.Case(ifs=[
            exp.If(this=exp.LT(this=arg.copy(), expression=lo), true=lo.copy()),
            exp.If(this=exp.GT(this=arg.copy(), expression=hi), true=hi.copy()),
        ], default=arg.copy())
    # TRY_CAST: a column of unknown or non-numeric type must not fail on one row's value (the
    # analysis rejects known non-numeric types). CASE, not LEAST/GREATEST: DuckDB runs it ~3x
    # faster, NULL falls through to ELSE (SUM skips it) and NaN sorts above hi, as before.
    value = exp.TryCast(this=arg.copy(), to=exp.DataType.build(exp.DataType.Type.DOUBLE))
    lo, hi = exp.convert(float(bounds[0])), exp.convert(float(bounds[1]))
    return exp.Case(ifs=[
        exp.If(this=exp.LT(this=value.copy(), expression=lo), true=lo.copy()),
        exp.If(this=exp.GT(this=value.copy(), expression=hi), true=hi.copy()),
    ], default=value)


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
    if kind.digits + kind.scale > (19 if kind.family == "int" else 18):
        return None  # UBIGINT, and DECIMALs wider than 64 bits
    literals = []
    for b in bounds:
        exact = Decimal(b)  # the double's exact binary value
        scaled = exact.scaleb(kind.scale)
        if scaled != scaled.to_integral_value() or abs(scaled) >= _NATIVE_LIMIT:
            return None
        whole_digits = len(str(abs(int(exact)))) if int(exact) != 0 else 0
        if whole_digits > kind.digits or (kind.family == "int" and whole_digits >= kind.digits):
            return None
        text = str(int(exact)) if kind.scale == 0 else f"{exact:.{kind.scale}f}"
        literals.append(exp.Neg(this=exp.Literal.number(text[1:])) if text.startswith("-")
                        else exp.Literal.number(text))
    return literals[0], literals[1]


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


class StoredData(Protocol):
    """What the backend promises about the stored data for as long as a plan is in use (the
    engine's view of :meth:`Backend.value_range` and :meth:`Backend.distinct_values`)."""

    def in_bounds(self, table: str, column: str, bounds: tuple[float, float]) -> bool:
        """True only when every value ``column`` of declared base table ``table`` holds lies
        inside ``bounds``."""
        ...

    def distinct_values(self, table: str, column: str) -> Sequence[Any] | None:
        """Every distinct value of a public table's column, ascending, NULL last; None when
        not promised (or too many to inline)."""
        ...

#: a SUM clamp the data make the identity, and the bare column it may be replaced by
Removable = tuple[exp.Expression, exp.Column]


def _measurement_sql(analysis: QueryAnalysis, column_kind: ColumnKind,
                     sources: dict[str, tuple[exp.Table, Table]],
                     stored: StoredData | None) -> tuple[list[exp.Expression], list[Removable]]:
    """The measurement list, and the clamps ``stored`` shows change no value (a SUM of a
    numeric base-table column whose stored values all lie inside its bounds)."""
    out, removable = [], []
    for m in analysis.measurements:
        node = m.node.copy()
        if m.function == "SUM":
            assert m.bounds is not None
            arg = node.this.unnest()
            kind = column_kind(arg) if isinstance(arg, exp.Column) else None
            clamp = _clamp(node.this, m.bounds, kind)
            node = exp.Sum(this=clamp)
            source = sources.get(arg.table) if isinstance(arg, exp.Column) else None
            if (source is not None and stored is not None and _sum_cannot_overflow(kind)
                    and stored.in_bounds(source[1].name, arg.name, m.bounds)):
                removable.append((clamp, arg))
        elif isinstance(node.this, exp.Expression) and not isinstance(node.this, exp.Star):
            # COUNT(a // b) must not raise
            node.set("this", make_total(node.this, column_kind))
        out.append(exp.alias_(node, f"__m{m.index}", copy=False))
    return out, removable


class _RowCondition(NamedTuple):
    """A conjunct that depends on one joined row alone, and the (table alias, column) pairs
    it reads."""

    node: exp.Expression
    columns: frozenset[tuple[str, str]]


#: a condition containing any of these may depend on other rows or tables
_NOT_ROW_LOCAL = (exp.Select, exp.Subquery, exp.Exists, exp.AggFunc, exp.Window)


def _row_conditions(select: exp.Select) -> list[_RowCondition]:
    """The conjuncts every row of ``select``'s FROM/JOIN result satisfies before grouping (its
    WHERE and the ON conditions of its joins, inner: the analysis admits no other) that read
    at least one column and no subquery, aggregate or window."""
    clauses = []
    where = select.args.get("where")
    if where is not None:
        clauses.append(where.this)
    for join in select.args.get("joins") or []:
        if join.side or join.kind not in ("", "INNER", "CROSS"):
            return []  # not reached (outer joins are rejected), but never restrict past one
        if join.args.get("on") is not None:
            clauses.append(join.args["on"])
    out = []
    for condition in (c for clause in clauses for c in _conjuncts(clause)):
        columns = set()
        for node in condition.walk():
            if isinstance(node, _NOT_ROW_LOCAL):
                break
            if isinstance(node, exp.Column):
                columns.add((node.table, node.name))
        else:
            if columns:
                out.append(_RowCondition(condition, frozenset(columns)))
    return out


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    """``a AND (b AND c)`` -> [a, b, c]."""
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


def _domain_relation(key: GroupKey, conditions: list[_RowCondition],
                     sources: dict[str, tuple[exp.Table, Table]], metadata: Metadata | None,
                     stored: StoredData | None,
                     constants: dict[str, list[str | None]]) -> tuple[exp.Expression, bool]:
    """SELECT value __v, ordinal __o (INTEGER from 0) for group key ``key``'s declared domain,
    narrowed by the query's own conditions on the key column alone; and whether it is a list
    (reads no table).

    Value lists keep their declared order; a table domain is ordered by value, and inlined as
    its value list when ``stored`` promises it (:func:`_inlined_values`).

    Narrowing (why it stays private and exact): every row reaching the key's bins satisfies
    all ``conditions`` (the WHERE and inner-join conjuncts). A conjunct that reads only the key
    column is evaluated on each domain value (the key replaced by the value cast to the
    column's declared type; nothing is narrowed when that type is unknown), so a value failing
    it could only label a bin no data can fill, and dropping it changes no other bin. The
    narrowed domain is a function of the declared domain and the query text alone, so which
    bins are released still does not depend on private data.
    """
    domain = key.domain
    value_filters = _substituted(conditions, key, sources.get(key.node.table))
    inlined = (_inlined_values(domain, metadata, stored, constants)
               if domain.table is not None else None)
    if domain.table is not None and inlined is None:
        distinct = exp.Select(
            expressions=[exp.alias_(exp.column(domain.column), "__v", copy=False)],
            from_=exp.From(this=_table(domain.table)),
        ).distinct(copy=False)
        base: exp.Expression = exp.Subquery(this=distinct,
                                            alias=exp.TableAlias(this=exp.to_identifier("__s")))
        order = exp.column("__v")
    else:
        base = inlined if inlined is not None else _values_relation(domain.values or (),
                                                                    key.type)
        if not value_filters:  # the listed ordinals stand
            return exp.Select(expressions=[exp.column("__v"), exp.column("__o")],
                              from_=exp.From(this=base)), True
        order = exp.column("__o")
    rank = exp.Sub(this=exp.Window(this=exp.RowNumber(), order=exp.Order(
        expressions=[exp.Ordered(this=order, nulls_first=False)])),
        expression=exp.Literal.number(1))
    ordinal = exp.Cast(this=rank, to=exp.DataType.build(exp.DataType.Type.INT))
    relation = exp.Select(expressions=[exp.column("__v"), exp.alias_(ordinal, "__o", copy=False)],
                          from_=exp.From(this=base))
    if value_filters:
        relation.set("where", exp.Where(this=_conjunction(value_filters)))
    return relation, domain.table is None or inlined is not None


def _values_relation(values: Sequence[Any], type_text: str | None) -> exp.Expression:
    """``(VALUES (v0, 0), (v1, 1), ...) AS __d(__v, __o)``: a declared value list, each value
    cast to the key column's type (dpsql.domains checked that the cast cannot fail), so the bin
    join compares stored keys without casting them."""
    rows = [exp.Tuple(expressions=[typed_value(v, type_text), exp.convert(j)])
            for j, v in enumerate(values)]
    return exp.Values(expressions=rows, alias=exp.TableAlias(
        this=exp.to_identifier("__d"),
        columns=[exp.to_identifier("__v"), exp.to_identifier("__o")]))


#: Python types whose text, CAST to the column's type, gives back exactly the stored value
_EXACT_TEXT_TYPES = (str, int, Decimal, datetime.date)

#: most values of a public table's column bound as a list (beyond, a DISTINCT scan per query)
MAX_INLINED_DOMAIN = 10_000

_DOMAIN_PREFIX = "__dpsql_domain_"


def _inlined_values(domain: Domain, metadata: Metadata | None, stored: StoredData | None,
                    constants: dict[str, list[str | None]]) -> exp.Expression | None:
    """A public table domain as the value list ``stored`` promises (public data, unchanged
    while the backend is open): ``SELECT CAST(UNNEST($list) AS <type>) AS __v, ...`` with the
    values bound as one VARCHAR[] parameter (added to ``constants``), so neither sqlglot nor
    DuckDB handles them as SQL text. None to scan the table in SQL instead: no promise,
    unknown type, too many values, or a value whose text does not give it back exactly."""
    if stored is None or metadata is None or domain.table is None or domain.column is None:
        return None
    table = metadata.tables.get(domain.table)
    declared = table.columns.get(domain.column) if table is not None else None
    dtype = normalise(declared.type) if declared is not None else None
    if dtype is None:
        return None
    values = stored.distinct_values(domain.table, domain.column)
    if values is None or len(values) > MAX_INLINED_DOMAIN:
        return None
    if not all(v is None or (isinstance(v, _EXACT_TEXT_TYPES) and not isinstance(v, bool)
                             and type(v) is not datetime.datetime)
               or (type(v) is float and math.isfinite(v)) for v in values):
        return None
    name = f"{_DOMAIN_PREFIX}{len(constants)}"
    # str(Decimal) and str(float) (shortest repr) round-trip exactly; dates are ISO text
    constants[name] = [None if v is None else str(v) for v in values]
    listed = exp.Select(expressions=[
        exp.alias_(exp.Cast(this=exp.Unnest(expressions=[exp.Placeholder(this=name)]),
                            to=dtype.copy()), "__v", copy=False),
        exp.alias_(exp.Cast(this=exp.Unnest(expressions=[exp.func(
            "range", exp.Literal.number(len(values)))]), to=exp.DataType.build("INT")),
            "__o", copy=False)])
    return exp.Subquery(this=listed, alias=exp.TableAlias(this=exp.to_identifier("__s")))


def _substituted(conditions: list[_RowCondition], key: GroupKey,
                 source: tuple[exp.Table, Table] | None) -> list[exp.Expression]:
    """The conditions reading only the key column, over the domain value ``__v`` (TRY_CAST to
    the column's declared type) instead; none when the key is not a base-table column of
    known type."""
    if source is None:
        return []
    declared = source[1].columns.get(key.node.name.lower())
    dtype = normalise(declared.type) if declared is not None else None
    if dtype is None:
        return []
    out = []
    only_key = {(key.node.table, key.node.name)}
    for condition in (c for c in conditions if c.columns == only_key):
        out.append(condition.node.copy().transform(
            lambda n: exp.TryCast(this=exp.column("__v"), to=dtype.copy())
            if isinstance(n, exp.Column) else n, copy=False))
    return out


def _conjunction(conditions: list[exp.Expression]) -> exp.Expression:
    """``(c1) AND (c2) ...`` over the given nodes themselves (pass copies you may give away)."""
    out = exp.Paren(this=conditions[0])
    for condition in conditions[1:]:
        out = exp.And(this=out, expression=exp.Paren(this=condition))
    return out


class ExactQuery(NamedTuple):
    """The exact query's tree, the SUM clamps in it that the data make the identity, the
    inlined public domains it binds as parameters (name -> values as text), and the separate
    domain query when there is one (see :func:`build_exact`)."""

    tree: exp.Expression
    removable_clamps: list[Removable]
    constants: dict[str, list[str | None]]
    domains: exp.Expression | None


def build_exact(analysis: QueryAnalysis, query: exp.Select, metadata: Metadata | None = None,
                stored: StoredData | None = None) -> ExactQuery:
    """The exact query: without GROUP BY one row of measurements. With GROUP BY, the layouts
    :func:`dpsql.engine.exact_bins` reads, rows in any order:

    * ``tree``: ``(__t, __i, __v0.., __m0..)`` rows, ``__t = 0`` for each non-empty bin inside
      the declared domains (``__i`` its index in the domains' product, row-major in key
      order, and its exact measurements), ``__t = 1 + i`` for each value of domain i (``__i``
      its ordinal, ``__v<i>`` the value);
    * when every domain is a list (declared values, or a public table's values bound as a
      parameter), the domain rows come from their own query instead, ``domains`` (``(__t,
      __i, __v0..)``, reading no table at all), and ``tree`` sends only ``(__i, __m0..)`` per
      non-empty bin: numbers only, which the backend can hand over as arrays
      (:meth:`Backend.execute_columns`) rather than one Python tuple per bin.

    Empty bins are not sent: the engine fills the domains' product with zeros before noise.

    ``metadata`` (declared column types) lets provably total comparisons go without TRY and
    SUM clamp in the column's own type; without it both stay conservative. ``stored`` reports
    the clamps that cannot change any value and the public domains that can be inlined (see
    :func:`plan_execution`).
    """
    inner = query.copy()
    for arg in ("order", "limit", "offset", "having", "distinct"):
        inner.set(arg, None)
    keys = [exp.alias_(k.node.copy(), f"__k{k.index}", copy=False) for k in analysis.group_keys]
    # Totality and NOT IN semantics apply to CTE bodies too, so transform before splitting
    # the WITH clause off; the measurement list is set afterwards (its clamp is already total).
    _not_in_as_not_exists(inner)
    total_query(inner, metadata)
    _not_exists_as_null_safe_not_in(inner)
    ctes = cte_names(inner)
    top_kinds = column_kinds(inner, metadata, ctes)
    sources = base_tables(inner, metadata, ctes)
    measurements, removable = _measurement_sql(analysis, top_kinds, sources, stored)
    inner.set("expressions", keys + measurements)
    if not analysis.group_keys:
        return ExactQuery(inner, removable, {}, None)

    # Every node below is built here: constructed directly (the builder helpers would copy
    # and parse strings, a measurable share of the analysis time).
    constants: dict[str, list[str | None]] = {}
    n = len(analysis.group_keys)
    null = exp.Null
    conditions = _row_conditions(inner)
    domain_ctes, joins, listed = [], [], True
    for key in analysis.group_keys:
        d = f"__d{key.index}"
        relation, is_list = _domain_relation(key, conditions, sources, metadata, stored,
                                             constants)
        listed = listed and is_list
        domain_ctes.append(_cte(d, relation))
        joins.append(exp.Join(this=_table(d), on=exp.NullSafeEQ(
            this=exp.column(f"__k{key.index}", "__e"), expression=exp.column("__v", d))))
    # Row-major index, first key slowest: ((o0 * |d1|) + o1) * |d2| + o2 (BIGINT: the
    # product of the domain sizes is at most MAX_BINS)
    flat: exp.Expression = exp.column("__o", "__d0")
    for i in range(1, n):
        size = exp.Subquery(this=exp.Select(expressions=[exp.Count(this=exp.Star())],
                                            from_=exp.From(this=_table(f"__d{i}"))))
        flat = exp.Add(this=exp.Mul(this=exp.Paren(this=flat), expression=size),
                       expression=exp.column("__o", f"__d{i}"))
    values = [exp.column(f"__m{m.index}", "__e") for m in analysis.measurements]

    def row(tag: int | None, index: exp.Expression, keys_, measures) -> list[exp.Expression]:
        cells = [] if tag is None else [exp.alias_(exp.Literal.number(tag), "__t", copy=False)]
        cells.append(exp.alias_(index, "__i", copy=False))
        cells += [exp.alias_(v or null(), f"__v{i}", copy=False) for i, v in enumerate(keys_)]
        cells += [exp.alias_(m or null(), f"__m{j}", copy=False) for j, m in enumerate(measures)]
        return cells

    def domain_rows(n_measures: int) -> exp.Query:
        union: exp.Query | None = None
        for i in range(n):
            d = f"__d{i}"
            branch = exp.Select(
                expressions=row(1 + i, exp.column("__o", d),
                                [exp.column("__v", d) if j == i else None for j in range(n)],
                                [None] * n_measures),
                from_=exp.From(this=_table(d)))
            union = branch if union is None else exp.Union(this=union, expression=branch,
                                                           distinct=False)
        assert union is not None
        return union

    # The analyst's WITH stays inside __exact: the domain relations below read declared tables
    # by name, and no name the analyst defines is in scope there (docs/privacy.md, "Names").
    ctes = [_cte("__exact", inner)]
    if listed:
        bins = exp.Select(expressions=row(None, flat, [], values),
                          from_=exp.From(this=_table("__exact", "__e")), joins=joins)
        bins.set("with_", exp.With(expressions=ctes + domain_ctes))
        domains = domain_rows(0)
        domains.set("with_", exp.With(expressions=[c.copy() for c in domain_ctes]))
        return ExactQuery(bins, removable, constants, domains)
    # Branch 0: the non-empty bins; branch 1 + i: domain i's values and ordinals. No ORDER
    # BY: the engine places every row by its tag and index.
    bins = exp.Select(expressions=row(0, flat, [None] * n, values),
                      from_=exp.From(this=_table("__exact", "__e")), joins=joins)
    union = exp.Union(this=bins, expression=domain_rows(len(values)), distinct=False)
    union.set("with_", exp.With(expressions=ctes + domain_ctes))
    return ExactQuery(union, removable, constants, None)


def _cte(name: str, body: exp.Expression) -> exp.CTE:
    return exp.CTE(this=body, alias=exp.TableAlias(this=exp.to_identifier(name)))


def _table(name: str, alias: str | None = None) -> exp.Table:
    table = exp.Table(this=exp.to_identifier(name))
    if alias is not None:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return table


# --------------------------------------------------------------------------- post-processing


def _replacement_map(analysis: QueryAnalysis) -> dict[str, exp.Expression]:
    """SQL text of a key / aggregate in the analyst's query -> its noisy column."""
    repl: dict[str, exp.Expression] = {}
    for key in analysis.group_keys:
        repl[key.node.sql(dialect=DIALECT)] = exp.column(f"__k{key.index}")
    by_label = {m.label: m for m in analysis.measurements}
    for agg_sql, m in by_label.items():
        repl[agg_sql] = exp.column(f"__m{m.index}")
    return repl


def _avg_expression(sum_i: int, count_i: int, bounds: tuple[float, float]) -> exp.Expression:
    # Post-processing of noisy values: a noisy count can be <= 0, so divide by max(count, 1)
    # and clamp to the bounds the true average lies in.
    ratio = exp.Div(this=exp.column(f"__m{sum_i}"),
                    expression=exp.func("GREATEST", exp.column(f"__m{count_i}"),
                                        exp.convert(1)))
    return exp.func("LEAST", exp.func("GREATEST", ratio, exp.convert(float(bounds[0]))),
                    exp.convert(float(bounds[1])))


def _avg_parts(analysis: QueryAnalysis, avg: exp.Avg) -> tuple[int, int, tuple[float, float]]:
    """The SUM and COUNT measurements an AVG is computed from, and its bounds."""
    arg = avg.this.unnest()
    by_label = {m.label: m for m in analysis.measurements}
    total = by_label[exp.Sum(this=arg.copy()).sql(dialect=DIALECT)]
    count = by_label[exp.Count(this=arg.copy()).sql(dialect=DIALECT)]
    assert total.bounds is not None
    return total.index, count.index, total.bounds


def _to_noisy(node: exp.Expression, analysis: QueryAnalysis, repl) -> exp.Expression:
    def transform(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Avg):
            return _avg_expression(*_avg_parts(analysis, n))
        if isinstance(n, (exp.Column, *AGGREGATES)):  # only these can be replaced
            key = n.sql(dialect=DIALECT)
            if key in repl:
                return repl[key].copy()
        return n

    return node.copy().transform(transform)


def build_post(analysis: QueryAnalysis, query: exp.Select) -> exp.Select:
    """The analyst's outer SELECT, evaluated over NOISY_TABLE."""
    repl = _replacement_map(analysis)
    post = exp.select(*[_to_noisy(e, analysis, repl) for e in query.expressions]).from_(
        NOISY_TABLE)
    having = query.args.get("having")
    if having is not None:
        post = post.where(_to_noisy(having.this, analysis, repl))
    order = query.args.get("order")
    if order is not None:
        post.set("order", _to_noisy(order, analysis, repl))
    for arg in ("limit", "offset", "distinct"):
        if query.args.get(arg) is not None:
            post.set(arg, query.args[arg].copy())
    return post


def _fast_path(analysis: QueryAnalysis, query: exp.Select) -> tuple[OutputSpec, ...] | None:
    """Output specs when post-processing is only picking (and ordering) columns: no SQL.

    Read from the analysis's output columns (which measurement or key each one is) rather than
    by generating SQL text again.
    """
    if any(query.args.get(a) is not None for a in ("having", "limit", "offset", "distinct")):
        return None
    key_index = {(k.node.table, k.node.name): k.index for k in analysis.group_keys}
    specs = []
    for col in analysis.columns:
        inner = col.node.this if isinstance(col.node, exp.Alias) else col.node
        if col.kind == "group_key" and isinstance(inner, exp.Column):
            index = key_index.get((inner.table, inner.name))
            if index is None:
                return None
            specs.append(OutputSpec("key", index))
        elif col.function in ("COUNT", "SUM") and len(col.measurements) == 1:
            specs.append(OutputSpec("measurement", col.measurements[0]))
        elif col.function == "AVG" and isinstance(inner, exp.Avg):
            specs.append(OutputSpec("avg", *_avg_parts(analysis, inner)))
        else:
            return None
    return tuple(specs)


def _fast_order(analysis: QueryAnalysis, query: exp.Select) -> tuple[tuple[int, bool], ...] | None:
    """ORDER BY as (output column, descending) pairs, when every term names an output column
    (qualify rewrites ``ORDER BY p_brand`` / an alias to the output's name); else None."""
    order = query.args.get("order")
    if order is None:
        return ()
    names = [c.name for c in analysis.columns]
    terms = []
    for ordered in order.expressions:
        term = ordered.this
        if not (isinstance(term, exp.Column) and not term.table and names.count(term.name) == 1):
            return None
        terms.append((names.index(term.name), bool(ordered.args.get("desc"))))
    return tuple(terms)


def check_bins(n_bins: int) -> None:
    """Reject a release of more than MAX_BINS bins (a lower bound when a domain is a table's
    column, whose size only the database knows; the engine checks the actual product)."""
    if n_bins > MAX_BINS:
        raise NotSupportedError(
            f"the GROUP BY keys' declared domains have {n_bins:,} combinations, more than the "
            f"{MAX_BINS:,} bins dpsql releases in one query: group by fewer keys, or add a "
            "WHERE condition and ask per value of one key"
        )


def post_processing_sql(analysis: QueryAnalysis) -> tuple[str, tuple[int, ...]]:
    """The post-processing SQL over NOISY_TABLE and the parameters it uses (what
    ``ExecutionPlan.post_sql`` holds when there is no fast path)."""
    query = _number_parameters(analysis.query)
    assert isinstance(query, exp.Select)
    sql = build_post(analysis, query).sql(dialect=DIALECT, copy=False)
    return sql, _used_params(sql)


def plan_execution(analysis: QueryAnalysis, metadata: Metadata | None = None,
                   stored: StoredData | None = None) -> ExecutionPlan:
    """Build the exact and post-processing queries for ``analysis`` (see module contract).

    Pass the ``metadata`` the query was analysed with: its declared column types spare TRY and
    DOUBLE casts that cannot matter (see :func:`build_exact`).

    ``stored`` (the engine's view of what the backend promises about stored data) allows two
    shortcuts that change no released value, only the running time (which the database's own
    plans already make data-dependent; timing is outside dpsql's privacy model,
    docs/privacy.md):

    * a SUM runs without its clamp when every stored value of its column lies inside the
      bounds: the clamp is then the identity on every row (DuckDB folds its comparisons from
      the same statistics but still pays ~8% of TPC-H J3's time for the CASE). The
      fingerprint analysts see is taken from ``canonical_sql``, which keeps every clamp, so it
      does not reveal whether the data fit;
    * a public table's domain is inlined as its (public) value list instead of a DISTINCT scan
      in every query (TPC-H Q16 at SF10: ~15 ms of ~230).
    """
    check_bins(math.prod(len(k.domain.values) for k in analysis.group_keys
                         if k.domain.values is not None))
    query = _number_parameters(analysis.query)  # not a copy: build_* copy what they change
    assert isinstance(query, exp.Select)
    # The exact and post trees are fresh copies owned here: generate without another copy.
    tree, removable, constants, domains = build_exact(analysis, query, metadata, stored)
    domain_sql = domains.sql(dialect=DIALECT, copy=False) if domains is not None else None
    exact_sql = canonical_sql = tree.sql(dialect=DIALECT, copy=False)
    if removable:
        for clamp, column in removable:
            clamp.replace(column.copy())
        exact_sql = tree.sql(dialect=DIALECT, copy=False)
    fast = _fast_path(analysis, query)
    order = _fast_order(analysis, query) if fast is not None else None
    if order is None:
        fast, order = None, ()
    # With a fast path the SQL is built only if the engine needs it (post_processing_sql: an
    # ORDER BY over group-key values that do not sort in Python, NULL or mixed types).
    post_sql = (None if fast is not None
                else build_post(analysis, query).sql(dialect=DIALECT, copy=False))
    return ExecutionPlan(
        exact_sql=exact_sql,
        exact_params=_used_params(exact_sql),
        n_keys=len(analysis.group_keys),
        n_measurements=len(analysis.measurements),
        output_names=tuple(c.name for c in analysis.columns),
        post_sql=post_sql,
        post_params=_used_params(post_sql) if post_sql else (),
        fast_path=fast,
        fast_order=order,
        integer_measurements=tuple(m.integer for m in analysis.measurements),
        canonical_sql="" if canonical_sql is exact_sql else canonical_sql,
        exact_constants=tuple((name, tuple(values)) for name, values in constants.items()),
        domain_sql=domain_sql,
        domain_params=_used_params(domain_sql) if domain_sql else (),
    )
