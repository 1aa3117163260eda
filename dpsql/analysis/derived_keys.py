"""Computed GROUP BY keys whose bins follow from the SQL and the public metadata alone.

A computed key F (``EXTRACT(year FROM o_orderdate)``, ``CASE WHEN age < 18 THEN 'minor' ELSE
'adult' END``, ``UPPER(l_shipmode)``, or a subquery's column holding one) is accepted when F is
a deterministic, allow-listed expression (dpsql.analysis.allowlist already refused everything
else) of exactly one *input*, and that input ranges over a set the metadata declares:

* a base column with a declared domain (a value list, or a public table's column; the column
  must be releasable, as for a plain key): the input set is the domain;
* a DATE or TIMESTAMP column with day bounds (``bounds: ['1992-01-01', '1998-12-31']``): the
  input set is every day in the bounds (at midnight for a TIMESTAMP, so there F may read the
  column only through a date-level function: EXTRACT of a date part, YEAR(), date_trunc to a
  day or coarser, CAST AS DATE);
* a CASE (or IF) whose results are all constants: the input is the branch taken, 0..n, and
  the bins are the results (NULL too when there is no ELSE);
* a column of a subquery or CTE that carries such a fact (:class:`DerivedDomain` in
  ``ColumnFacts.derived_domain``): F composed with the expression that computed it.

Contract of :func:`derive_key`: it reads only the query text, the relation's column facts
(themselves built from the SQL and the metadata) and the metadata; it returns a
:class:`DerivedDomain` whose bins, the image of ``expr`` over the input set, are computed by
the domain query from public data (dpsql.rewrite.domains.derived_domain_relation), or raises
``ProtectedBinError`` naming the key and what to declare. So which bins exist depends on the
SQL and the metadata only. Each row's key is a function of that row alone, so a changed row
still leaves at most one bin and enters at most one: histogram ES = 2·S per bin as for a
plain key (docs/privacy.md, "Computed group keys"). A row whose key falls outside the bins
(a date outside the bounds whose year is not inside them, a value outside the domain whose
image is not an image of the domain) is dropped from the bins; nothing is clamped.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.checks import sql_text
from dpsql.analysis.keytypes import collation, normalise
from dpsql.analysis.trees import copy_tree
from dpsql.errors import ProtectedBinError
from dpsql.metadata import Domain, Metadata

#: the name of the input in :attr:`DerivedDomain.expr`
INPUT = "__x"

#: most days a date input may span (the domain query computes the key over each of them)
MAX_DAYS = 100_000

#: date parts that do not depend on the time of day (EXTRACT / date_trunc units)
_DAY_LEVEL_PARTS = frozenset({
    "YEAR", "YEARS", "Y", "YR", "YRS", "ISOYEAR", "QUARTER", "QUARTERS", "MONTH", "MONTHS",
    "MON", "WEEK", "WEEKS", "W", "WEEKOFYEAR", "YEARWEEK", "DAY", "DAYS", "D", "DAYOFMONTH",
    "DOW", "DAYOFWEEK", "WEEKDAY", "ISODOW", "DOY", "DAYOFYEAR", "DECADE", "DECADES",
    "CENTURY", "CENTURIES", "MILLENNIUM", "MILLENNIA", "ERA", "JULIAN",
})
#: functions of a date that read only its day
_DAY_FUNCTIONS = (exp.Year, exp.Month, exp.Quarter, exp.Day, exp.DayOfWeek, exp.DayOfWeekIso,
                  exp.DayOfYear, exp.Week, exp.WeekOfYear, exp.Monthname, exp.Dayname,
                  exp.LastDay)
_DAY_TYPES = frozenset({exp.DataType.Type.DATE, exp.DataType.Type.DATE32})
_TIMESTAMP_TYPES = frozenset({
    exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.DATETIME,
    exp.DataType.Type.TIMESTAMP_S,
    exp.DataType.Type.TIMESTAMP_MS, exp.DataType.Type.TIMESTAMP_NS,
    exp.DataType.Type.DATETIME64,
})


@dataclass(frozen=True)
class DerivedDomain:
    """The bins of a computed key: ``expr`` (over the column ``__x``) applied to every input.

    Exactly one of ``values`` (a declared domain: listed values or a public table's column,
    of type ``input_type``) or ``days`` (first and last day, inputs of type ``input_type``,
    DATE or TIMESTAMP) is set.
    """

    expr: exp.Expression
    values: Domain | None = None
    days: tuple[datetime.date, datetime.date] | None = None
    input_type: str | None = None
    #: what the bins come from, for ``dpsql explain``
    label: str = ""
    #: the input column as the key's own SELECT names it, ``(alias, column)``, when the input
    #: is a column read there directly (not through a subquery's computed column): the
    #: rewrite narrows the inputs by that SELECT's conditions on this column alone
    column: tuple[str, str] | None = None


class _Input:
    """The one input found in a key expression: a column reference or a constant CASE."""

    def __init__(self, node: exp.Expression) -> None:
        self.node = node
        self.key = ((node.table, node.name) if isinstance(node, exp.Column)
                    else sql_text(node))


def derive_key(node: exp.Expression, columns: Mapping[tuple[str, str], object],
               metadata: Metadata) -> DerivedDomain:
    """The derived domain of the computed key ``node`` over a relation whose column facts
    are ``columns`` (``(alias, column) -> ColumnFacts``); raises ``ProtectedBinError`` when
    none is derivable (module contract)."""
    what = _Lazy(node)
    if node.find(exp.AggFunc, exp.Star, exp.Window, exp.Query) is not None:
        raise ProtectedBinError(
            f"GROUP BY {what}: a group key cannot contain an aggregate, * or a subquery: group "
            "by a column or an expression of one"
        )
    if node.find(exp.Placeholder) is not None:
        raise ProtectedBinError(
            f"GROUP BY {what}: a parameter inside a computed key would make its bins depend "
            "on the bound value's type; write the value in the SQL"
        )
    inputs: dict[object, _Input] = {}
    for found in _find_inputs(node):
        inputs.setdefault(found.key, found)
    if len(inputs) > 1:
        raise ProtectedBinError(
            f"GROUP BY {what} reads {len(inputs)} inputs "
            f"({', '.join(sql_text(i.node) for i in inputs.values())}); a computed key may "
            "read one column (or one CASE with constant results): group by each separately"
        )
    if not inputs:
        return DerivedDomain(copy_tree(node), values=Domain(values=(0,)), input_type="INTEGER",
                             label="a constant")
    (only,) = inputs.values()
    if not isinstance(only.node, exp.Column):
        return _case_domain(node, only)
    return _column_domain(node, only, columns, metadata, what)


def listed_domain(node: exp.Expression, where: exp.Expression | None) -> DerivedDomain | None:
    """The bins of a computed key that its own SELECT's WHERE restricts to listed constants
    (TPC-H Q22: ``substring(c_phone, 1, 2) IN ('13', '31', ...)``), or None.

    Contract: reads only the SQL. A top-level conjunct ``node IN (c1, ..., cn)`` (the same
    expression, constants only: string or integer literals, no NULL) means every row whose key
    is computed satisfies it, so the key takes one of those values; the bins are the listed
    constants, public because they are in the query text. Which bins exist therefore depends
    on the SQL alone, and each row's key is still a function of that row (histogram ES 2·S
    per bin, as for any key): a row whose key were outside them would be dropped from the
    bins, never given one of its own.
    """
    if isinstance(where, exp.Where):
        where = where.this
    for cond in _and_conjuncts(where):
        if not isinstance(cond, exp.In) or cond.args.get("query") is not None:
            continue
        if cond.args.get("unnest") is not None or cond.this != node:
            continue
        items = cond.expressions
        if not items or not all(isinstance(v, exp.Literal) for v in items):
            continue
        if all(v.is_string for v in items):
            values: tuple[object, ...] = tuple(dict.fromkeys(v.this for v in items))
            input_type = "VARCHAR"
        elif all(v.is_int for v in items):
            values = tuple(dict.fromkeys(int(v.this) for v in items))
            input_type = "BIGINT"
        else:
            continue
        return DerivedDomain(exp.column(INPUT), values=Domain(values=values),
                             input_type=input_type,
                             label=f"the {len(values)} values {sql_text(node)[:60]} IN lists")
    return None


def _and_conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """The AND-ed conjuncts of ``node`` (the tree is not changed)."""
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return _and_conjuncts(node.left) + _and_conjuncts(node.right)
    return [node]


def may_derive(node: exp.Expression, columns: Mapping[tuple[str, str], object],
               metadata: Metadata) -> bool:
    """A cheap test (no SQL generated, nothing raised) of whether :func:`derive_key` could
    succeed on ``node``: one input, a constant CASE or a column with a derived domain, a
    declared domain (or a public table's) or day bounds. The analyzer runs it on every
    computed column of a subquery before :func:`derive_key`."""
    if node.find(exp.Placeholder, exp.AggFunc, exp.Star, exp.Window, exp.Query) is not None:
        return False
    found = _find_inputs(node)
    if not found:
        return True  # a constant
    first = found[0]
    if any(f.key != first.key for f in found):
        return False
    if not isinstance(first.node, exp.Column):
        return True  # a constant CASE
    facts = columns.get((first.node.table, first.node.name))
    if getattr(facts, "derived_domain", None) is not None:
        return True
    origin = getattr(facts, "origin", None)
    table = metadata.tables.get(origin[0]) if origin is not None else None
    if table is None or origin is None:
        return False
    column = table.columns.get(origin[1])
    return column is not None and (table.public or column.domain is not None
                                   or column.date_bounds is not None)


class _Lazy:
    """A node's SQL text, generated only when a message is formatted (derive_key also runs on
    every computed column of a subquery, where a refusal is silent)."""

    def __init__(self, node: exp.Expression) -> None:
        self.node = node

    def __str__(self) -> str:
        return sql_text(self.node)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _find_inputs(node: exp.Expression) -> list[_Input]:
    if _constant_case(node):
        return [_Input(node)]
    if isinstance(node, exp.Column):
        return [_Input(node)]
    return [i for child in node.iter_expressions() for i in _find_inputs(child)]


def _is_constant(node: exp.Expression | None) -> bool:
    if node is None:
        return True  # no ELSE: NULL
    node = node.unnest()
    if isinstance(node, (exp.Literal, exp.Null, exp.Boolean)):
        return True
    if isinstance(node, exp.Neg):
        return isinstance(node.this, exp.Literal)
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return _is_constant(node.this)
    return False


def _results(node: exp.Expression) -> list[exp.Expression | None] | None:
    """A CASE's (or IF's) results, ELSE last (None when absent); None for other nodes."""
    if isinstance(node, exp.Case) and node.this is None:  # CASE WHEN ..., not CASE x WHEN
        return [i.args.get("true") for i in node.args.get("ifs") or []] + [
            node.args.get("default")]
    if isinstance(node, exp.If) and not isinstance(node.parent, exp.Case):
        return [node.args.get("true"), node.args.get("false")]
    return None


def _constant_case(node: exp.Expression) -> bool:
    results = _results(node)
    return results is not None and all(_is_constant(r) for r in results)


def _case_domain(key: exp.Expression, found: _Input) -> DerivedDomain:
    """A constant CASE: branch j (in order, the ELSE last) as input j."""
    results = _results(found.node)
    assert results is not None
    ifs = [exp.If(this=exp.EQ(this=exp.column(INPUT), expression=exp.Literal.number(j)),
                  true=copy_tree(r) if r is not None else exp.Null())
           for j, r in enumerate(results[:-1])]
    default = results[-1]
    case = exp.Case(ifs=ifs, default=copy_tree(default) if default is not None else None)
    expr = _substitute(key, found, case)
    return DerivedDomain(expr, values=Domain(values=tuple(range(len(results)))),
                         input_type="INTEGER",
                         label=f"the {len(results)} results of {sql_text(found.node)[:60]}")


def _substitute(key: exp.Expression, found: _Input, replacement: exp.Expression) -> exp.Expression:
    """A copy of ``key`` with every occurrence of the input replaced by ``replacement``."""
    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(found.node, exp.Column):
            hit = isinstance(n, exp.Column) and (n.table, n.name) == found.key
        else:
            hit = type(n) is type(found.node) and n == found.node
        return copy_tree(replacement) if hit else n

    return copy_tree(key).transform(swap, copy=False)


def _column_domain(key: exp.Expression, found: _Input,
                   columns: Mapping[tuple[str, str], object], metadata: Metadata,
                   what: object) -> DerivedDomain:
    col = found.node
    assert isinstance(col, exp.Column)
    facts = columns.get((col.table, col.name))
    derived = getattr(facts, "derived_domain", None)
    if isinstance(derived, DerivedDomain):  # computed in a subquery: compose
        expr = _substitute(key, found, derived.expr)
        result = DerivedDomain(expr, derived.values, derived.days, derived.input_type,
                               derived.label)
        _check_timestamp_use(result, what)
        return result
    origin = getattr(facts, "origin", None)
    if origin is None:
        raise ProtectedBinError(
            f"GROUP BY {what}: {sql_text(col)} is computed in a subquery whose values have no "
            "declared or derivable domain: group by a declared releasable column, a function "
            "of one, a date part of a column with day bounds, or a CASE with constant results"
        )
    table = metadata.table(origin[0])
    column = table.column(origin[1])
    expr = _substitute(key, found, exp.column(INPUT))
    domain = column.domain
    if domain is None and table.public:
        domain = Domain(table=table.name, column=column.name)
    where = f"{origin[0]}.{origin[1]}"
    if domain is not None:
        if not (table.public or column.releasable):
            raise ProtectedBinError(
                f"GROUP BY {what}: {where} is not releasable; the owner must declare it "
                "releasable with a domain (or group by a public table's column)"
            )
        if collation(column.type) is not None:
            raise ProtectedBinError(
                f"GROUP BY {what}: {where} is stored with the collation "
                f"{collation(column.type)}, under which different values compare equal: "
                "store it without a collation"
            )
        label = (f"{where}'s domain ({domain.table}.{domain.column})" if domain.table
                 else f"{where}'s {len(domain.values or ())} listed values")
        return DerivedDomain(expr, values=domain, input_type=column.type,
                             label=f"{sql_text(key)[:60]} over {label}",
                             column=(col.table, col.name))
    if column.date_bounds is None:
        raise ProtectedBinError(
            f"GROUP BY {what}: {where} has no declared domain and no day bounds, so which bins "
            "exist would depend on private data; the owner must declare domain: {values: "
            "[...]} (or, for a date column, bounds: ['first day', 'last day'])"
        )
    dtype = normalise(column.type)
    if dtype is None or dtype.this not in _DAY_TYPES | _TIMESTAMP_TYPES:
        raise ProtectedBinError(
            f"GROUP BY {what}: {where} has day bounds but its type is "
            f"{column.type or 'unknown'}; day bounds make bins only for a DATE or TIMESTAMP "
            "column (declare type: DATE)"
        )
    first, last = column.date_bounds
    if (last - first).days + 1 > MAX_DAYS:
        raise ProtectedBinError(
            f"GROUP BY {what}: the day bounds of {where} span {(last - first).days + 1:,} "
            f"days, more than the {MAX_DAYS:,} dpsql derives bins from: declare narrower "
            "bounds"
        )
    result = DerivedDomain(expr, days=(first, last), input_type=column.type,
                           label=f"{sql_text(key)[:60]} over the days {first} .. {last} of "
                                 f"{where}", column=(col.table, col.name))
    _check_timestamp_use(result, what)
    return result


def _check_timestamp_use(domain: DerivedDomain, what: object) -> None:
    """Over a TIMESTAMP input the bins come from midnights only: every use of the input must
    read its day alone."""
    if domain.days is None:
        return
    dtype = normalise(domain.input_type)
    if dtype is None or dtype.this in _DAY_TYPES:
        return
    for col in domain.expr.find_all(exp.Column):
        if col.name == INPUT and not _day_level(col):
            raise ProtectedBinError(
                f"GROUP BY {what} reads the time of day of a TIMESTAMP column whose bounds are "
                "days: group by a date part (EXTRACT(year FROM ts), date_trunc('month', ts), "
                "CAST(ts AS DATE))"
            )


def _day_level(col: exp.Column) -> bool:
    parent = col.parent
    if isinstance(parent, _DAY_FUNCTIONS) and parent.this is col:
        return True
    if isinstance(parent, exp.Extract) and parent.expression is col:
        return _part(parent.this) in _DAY_LEVEL_PARTS
    if isinstance(parent, (exp.DateTrunc, exp.TimestampTrunc)) and parent.this is col:
        return _part(parent.args.get("unit")) in _DAY_LEVEL_PARTS
    if isinstance(parent, exp.Cast) and parent.this is col:
        to = parent.args.get("to")
        return isinstance(to, exp.DataType) and to.this in _DAY_TYPES
    return False


def _part(node: exp.Expression | None) -> str:
    if node is None:
        return ""
    return (node.name if isinstance(node, (exp.Var, exp.Literal)) else node.sql()).upper()
