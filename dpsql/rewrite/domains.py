"""Pass: each group key's domain as a relation ``(__v, __o)``: the declared values (or a
public table's), narrowed by the query's own conditions on the key column alone. Which bins
are released then depends on the SQL and public data only, never on private rows."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlglot import exp

from dpsql.analysis.derived_keys import INPUT, DerivedDomain
from dpsql.analysis.domains import typed_value
from dpsql.analysis.elastic import GroupKey
from dpsql.analysis.keytypes import normalise
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.metadata import Domain, Table
from dpsql.rewrite.context import RewriteContext, StoredData
from dpsql.rewrite.totality import make_total


def domain_relations(query: exp.Select, *, ctx: RewriteContext) -> exp.Select:
    """Record in ``ctx.domains`` one domain relation per group key, None for a
    partition-selected key (``query`` unchanged), and in ``ctx.domains_fixed`` whether they
    read nothing but constants and tables the backend registered (:func:`_reads_only`).
    Run after the clamps pass (it reads ``ctx.sources``)."""
    if not ctx.analysis.group_keys:
        return query
    conditions = _row_conditions(query, ctx)
    registered: set[str] = set()
    ctx.domains = [None if key.partition  # no domain: groups from the data, selected by DP
                   else derived_domain_relation(key.derived_domain, conditions)
                   if key.derived_domain is not None
                   else _domain_relation(key, conditions, ctx.sources, ctx.stored, registered)
                   for key in ctx.analysis.group_keys]
    ctx.domains_fixed = all(_reads_only(d, registered) for d in ctx.domains if d is not None)
    return query


def _reads_only(relation: exp.Expression, tables: set[str]) -> bool:
    """Whether ``relation`` reads no table but ``tables`` (registered domain tables): then the
    domain query's result is a function of its text and parameters for as long as the backend
    is open (the analysis refuses every volatile function), and may be read once."""
    return all(t.name in tables and not t.db for t in relation.find_all(exp.Table))


class _RowCondition(NamedTuple):
    """A conjunct that depends on one joined row alone, and the (table alias, column) pairs
    it reads."""

    node: exp.Expression
    columns: frozenset[tuple[str, str]]


#: a condition containing any of these may depend on other rows or tables
_NOT_ROW_LOCAL = (exp.Select, exp.Subquery, exp.Exists, exp.AggFunc, exp.Window)


def _row_conditions(select: exp.Select, ctx: RewriteContext | None = None
                    ) -> list[_RowCondition]:
    """The conjuncts every row of ``select``'s FROM/JOIN result satisfies before grouping (its
    WHERE and the ON conditions of its joins, inner: the analysis admits no other) that read
    at least one column and no subquery, aggregate or window; or that are a semi-join of one
    column with public data (:func:`public_semi_join`: it reads that column alone)."""
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
        semi = public_semi_join(condition, ctx) if ctx is not None else None
        if semi is not None:
            out.append(_RowCondition(condition, frozenset({(semi.table, semi.name)})))
            continue
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


def public_semi_join(condition: exp.Expression, ctx: RewriteContext) -> exp.Column | None:
    """The column ``c`` of a conjunct ``c IN (SELECT ... FROM public tables ...)`` whose
    subquery is uncorrelated and reads only tables the metadata declares public (no CTE);
    None for any other conjunct.

    Such a conjunct reads the row's column ``c`` and public rows only, so evaluated on a domain
    value it is the same public test (dpsql.analysis.correlated restricts a correlated
    subquery's histogram this way: docs/privacy.md, "Correlated scalar subqueries")."""
    if not isinstance(condition, exp.In) or not isinstance(condition.this, exp.Column):
        return None
    sub = condition.args.get("query")
    if ctx.metadata is None or not isinstance(sub, exp.Subquery) or condition.expressions:
        return None
    if not condition.this.table:
        return None
    inner = sub.this
    defined = set()
    for node in inner.find_all(exp.Table, exp.Subquery, exp.CTE):
        if isinstance(node, exp.Table):
            meta = ctx.metadata.tables.get(node.name.lower())
            if (meta is None or not meta.public or node.db
                    or node.name.lower() in ctx.cte_names()):
                return None
        defined.add(node.alias_or_name)
    if any(not col.table or col.table not in defined for col in inner.find_all(exp.Column)):
        return None
    return condition.this


def _over(condition: exp.Expression, value: exp.Expression) -> exp.Expression:
    """A copy of a condition on one column, that column replaced by ``value``: the column a
    semi-join tests (its subquery unchanged), or every column of a row-local conjunct."""
    node = copy_tree(condition)
    if isinstance(node, exp.In) and node.args.get("query") is not None:
        node.this.replace(value)
        return node
    return node.transform(lambda n: copy_tree(value) if isinstance(n, exp.Column) else n,
                          copy=False)


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    """``a AND (b AND c)`` -> [a, b, c]."""
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


def _domain_relation(key: GroupKey, conditions: list[_RowCondition],
                     sources: dict[str, tuple[exp.Table, Table]], stored: StoredData | None,
                     registered: set[str]) -> exp.Expression:
    """SELECT value __v, ordinal __o (INTEGER from 0) for group key ``key``'s declared domain,
    narrowed by the query's own conditions on the key column alone.

    Value lists keep their declared order; a table domain is ordered by value: the table the
    backend registered for it when ``stored`` promises one (:meth:`StoredData.domain_table`,
    its name added to ``registered``), else a DISTINCT scan (:func:`scan_relation`), the very
    relation the registered table holds.

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
    if domain.table is not None:
        assert domain.column is not None
        name = (stored.domain_table(domain.table, domain.column)
                if stored is not None else None)
        if name is None:
            scan = scan_relation(domain.table, domain.column)
            if not value_filters:
                return scan
            base: exp.Expression = _distinct(domain.table, domain.column)
            order = exp.column("__v")
        else:
            registered.add(name)
            table = _table(name)
            if not value_filters:  # the registered ordinals stand
                return exp.Select(expressions=[exp.column("__v"), exp.column("__o")],
                                  from_=exp.From(this=table))
            base = table.as_("__s", copy=False)
            order = exp.column("__o")
    else:
        if not value_filters:  # the listed values and ordinals stand
            return listed_relation(domain, key.type)
        base = _values_relation(domain.values or (), key.type)
        order = exp.column("__o")
    rank = exp.Sub(this=exp.Window(this=exp.RowNumber(), order=exp.Order(
        expressions=[exp.Ordered(this=order, nulls_first=False)])),
        expression=exp.Literal.number(1))
    ordinal = exp.Cast(this=rank, to=exp.DataType.build(exp.DataType.Type.INT))
    relation = exp.Select(expressions=[exp.column("__v"), exp.alias_(ordinal, "__o", copy=False)],
                          from_=exp.From(this=base))
    relation.set("where", exp.Where(this=_conjunction(value_filters)))
    return relation


def scan_relation(table: str, column: str) -> exp.Select:
    """``SELECT __v, ordinal __o FROM (SELECT DISTINCT column AS __v FROM table) AS __s``:
    a public table's column as a domain, its distinct values ascending (NULL last), ordinals
    (INTEGER) from 0. What a backend registers once as the column's domain table
    (dpsql.backends.duckdb.DuckDBBackend.domain_table) is this relation's result."""
    rank = exp.Sub(this=exp.Window(this=exp.RowNumber(), order=exp.Order(
        expressions=[exp.Ordered(this=exp.column("__v"), nulls_first=False)])),
        expression=exp.Literal.number(1))
    ordinal = exp.Cast(this=rank, to=exp.DataType.build(exp.DataType.Type.INT))
    return exp.Select(expressions=[exp.column("__v"), exp.alias_(ordinal, "__o", copy=False)],
                      from_=exp.From(this=_distinct(table, column)))


def _distinct(table: str, column: str) -> exp.Subquery:
    """``(SELECT DISTINCT column AS __v FROM table) AS __s``."""
    distinct = exp.Select(
        expressions=[exp.alias_(exp.column(column), "__v", copy=False)],
        from_=exp.From(this=_table(table)),
    ).distinct(copy=False)
    return exp.Subquery(this=distinct, alias=exp.TableAlias(this=exp.to_identifier("__s")))


#: id(domain) -> (a weak reference to it, {key type: its relation}): the relation of a declared
#: value list nothing narrows is the same in every query (public metadata alone), so it is built
#: once per Domain object, like a table's base relation; with its SQL (:func:`relation_sql`)
_LISTED: dict[int, tuple[weakref.ref[Domain], dict[str | None, exp.Select]]] = {}
#: id(relation) -> (the relation, its SQL) for the relations in _LISTED
_LISTED_SQL: dict[int, tuple[exp.Select, str]] = {}


def listed_relation(domain: Domain, type_text: str | None) -> exp.Select:
    """``SELECT __v, __o FROM (VALUES ...)`` for a declared value list (:func:`_values_relation`),
    memoised per Domain object and key type. The returned tree is shared: never mutate it."""
    key = id(domain)
    hit = _LISTED.get(key)
    if hit is None or hit[0]() is not domain:
        def forget(_ref: object, key: int = key) -> None:
            entry = _LISTED.pop(key, None)
            for relation in (entry[1].values() if entry is not None else ()):
                _LISTED_SQL.pop(id(relation), None)

        hit = (weakref.ref(domain, forget), {})
        _LISTED[key] = hit
    relation = hit[1].get(type_text)
    if relation is None:
        relation = exp.Select(expressions=[exp.column("__v"), exp.column("__o")],
                              from_=exp.From(this=_values_relation(domain.values or (),
                                                                   type_text)))
        _LISTED_SQL[id(relation)] = (relation, relation.sql(dialect=DIALECT, copy=False))
        hit[1][type_text] = relation
    return relation


def relation_sql(relation: exp.Expression) -> str:
    """A domain relation's DuckDB SQL (generated once for a :func:`listed_relation`)."""
    hit = _LISTED_SQL.get(id(relation))
    if hit is not None and hit[0] is relation:
        return hit[1]
    return relation.sql(dialect=DIALECT, copy=False)


def _values_relation(values: Sequence[Any], type_text: str | None) -> exp.Expression:
    """``(VALUES (v0, 0), (v1, 1), ...) AS __d(__v, __o)``: a declared value list, each value
    cast to the key column's type (dpsql.analysis.domains checked that the cast cannot fail),
    so the bin join compares stored keys without casting them."""
    rows = [exp.Tuple(expressions=[typed_value(v, type_text), exp.convert(j)])
            for j, v in enumerate(values)]
    return exp.Values(expressions=rows, alias=exp.TableAlias(
        this=exp.to_identifier("__d"),
        columns=[exp.to_identifier("__v"), exp.to_identifier("__o")]))


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
        out.append(_over(condition.node,
                         exp.TryCast(this=exp.column("__v"), to=copy_tree(dtype))))
    return out


def _conjunction(conditions: list[exp.Expression]) -> exp.Expression:
    """``(c1) AND (c2) ...`` over the given nodes themselves (pass copies you may give away)."""
    out = exp.Paren(this=conditions[0])
    for condition in conditions[1:]:
        out = exp.And(this=out, expression=exp.Paren(this=condition))
    return out


def _table(name: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(name))


def derived_domain_relation(derived: DerivedDomain,
                            conditions: Sequence[_RowCondition] = ()) -> exp.Select:
    """SELECT value __v, ordinal __o for a computed key (dpsql.analysis.derived_keys): the
    distinct values of the key's expression over its public inputs, in value order (NULL
    last), each evaluated as the exact query evaluates the key (made total with TRY, so an
    input the expression fails on gives the NULL bin, as a row would).

    Inputs: a declared value list (cast to the input column's type), a public table's column
    (DISTINCT, TRY_CAST to the key column's type), or every day between the day bounds
    (generate_series, cast to the column's type). Public data and the query text only: the
    bins do not depend on private rows.

    Narrowing, as for a plain key (:func:`_domain_relation`): when the input is a column the
    key's SELECT reads directly, its ``conditions`` (WHERE and inner-join conjuncts) reading
    that column alone are evaluated on each input (``l_shipdate BETWEEN DATE '1995-01-01'
    AND DATE '1996-12-31'`` keeps the days of those two years, so EXTRACT(year ...) has two
    bins). Every row reaching a bin satisfies them, so a dropped input is the input of no
    such row; the narrowing reads the query text and the inputs alone."""
    expr = make_total(copy_tree(derived.expr))
    image = exp.Select(expressions=[exp.alias_(expr, "__v", copy=False)],
                       from_=exp.From(this=_input_relation(derived))).distinct(copy=False)
    filters = _input_filters(derived, conditions)
    if filters:
        image.set("where", exp.Where(this=_conjunction(filters)))
    rank = exp.Sub(this=exp.Window(this=exp.RowNumber(), order=exp.Order(
        expressions=[exp.Ordered(this=exp.column("__v"), nulls_first=False)])),
        expression=exp.Literal.number(1))
    ordinal = exp.Cast(this=rank, to=exp.DataType.build(exp.DataType.Type.INT))
    return exp.Select(
        expressions=[exp.column("__v"), exp.alias_(ordinal, "__o", copy=False)],
        from_=exp.From(this=exp.Subquery(this=image,
                                         alias=exp.TableAlias(this=exp.to_identifier("__s")))))


def _input_relation(derived: DerivedDomain) -> exp.Expression:
    """The inputs of a derived domain as a relation with one column ``__x``."""
    alias = exp.TableAlias(this=exp.to_identifier("__r"), columns=[exp.to_identifier(INPUT)])
    domain = derived.values
    if domain is not None and domain.values is not None:
        rows = [exp.Tuple(expressions=[typed_value(v, derived.input_type)])
                for v in domain.values]
        return exp.Values(expressions=rows, alias=alias)
    if domain is not None:
        assert domain.table is not None and domain.column is not None
        # the public column's values in the key column's type (a comparable type, perhaps
        # another width: INTEGER against BIGINT), so the key's expression sees the same type
        value: exp.Expression = exp.column(domain.column)
        dtype = normalise(derived.input_type)
        if dtype is not None:
            value = exp.TryCast(this=value, to=copy_tree(dtype))
        distinct = exp.Select(
            expressions=[exp.alias_(value, INPUT, copy=False)],
            from_=exp.From(this=_table(domain.table)),
        ).distinct(copy=False)
        return exp.Subquery(this=distinct, alias=exp.TableAlias(this=exp.to_identifier("__r")))
    assert derived.days is not None
    first, last = (exp.Cast(this=exp.Literal.string(day.isoformat()),
                            to=exp.DataType.build("DATE")) for day in derived.days)
    series = exp.Select(expressions=[exp.alias_(exp.Unnest(expressions=[exp.func(
        "generate_series", first, last, exp.Interval(this=exp.Literal.string("1"),
                                                      unit=exp.Var(this="DAY")))]),
        "__y", copy=False)])
    dtype = normalise(derived.input_type) or exp.DataType.build("DATE")
    days = exp.Select(
        expressions=[exp.alias_(exp.Cast(this=exp.column("__y"), to=copy_tree(dtype)), INPUT,
                                copy=False)],
        from_=exp.From(this=exp.Subquery(this=series,
                                         alias=exp.TableAlias(this=exp.to_identifier("__g")))))
    return exp.Subquery(this=days, alias=exp.TableAlias(this=exp.to_identifier("__r")))


def _input_filters(derived: DerivedDomain,
                   conditions: Sequence[_RowCondition]) -> list[exp.Expression]:
    """The conditions reading only the derived key's input column, over ``__x`` (TRY_CAST to
    the column's type); none when the input is not such a column or its type is unknown."""
    dtype = normalise(derived.input_type)
    if derived.column is None or dtype is None:
        return []
    only = {derived.column}
    return [_over(c.node, exp.TryCast(this=exp.column(INPUT), to=copy_tree(dtype)))
            for c in conditions if c.columns == only]
