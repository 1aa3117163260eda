"""Correlated scalar aggregate subqueries keyed by one equality, as a released histogram
(docs/privacy.md section 2, "Correlated scalar subqueries"; TPC-H Q17).

The shape accepted (everything else is refused with the message of an uncorrelated-only
engine, naming the construct and the fix)::

    SELECT ... FROM ..., T AS o ... WHERE ... <expr over (SELECT agg-expr FROM U AS i
                                                   WHERE i.k = o.c [AND row conditions on U])>

* the subquery sits in the WHERE of the top-level query of two phases (no SELECT between them):
  it is a value of a row-local predicate;
* it reads one declared table U (no join, CTE, nested subquery, GROUP BY, HAVING, DISTINCT,
  ORDER BY, LIMIT) and selects one aggregate expression;
* its only reference to the enclosing query is ONE conjunct of its WHERE, ``i.k = o.c``: k a
  column of U, c a column of a declared table T of the enclosing FROM, of the same declared
  type.

Then the subquery's value for an outer row is g(c), where g(v) is the aggregate over U's rows
with k = v: a ``GROUP BY k`` histogram. :func:`lookup_block` writes that histogram as a query of
its own, ``SELECT i.k, agg-expr FROM U AS i WHERE <its other conjuncts> [AND i.k IN (SELECT o.c
FROM T AS o WHERE <the enclosing WHERE's conjuncts on o alone>)] GROUP BY i.k``; phase 1
releases it like any GROUP BY over k (k needs a declared domain and to be releasable: the same
refusal otherwise), and phase 2 runs the enclosing query with the noisy g as a PUBLIC lookup
(dpsql.rewrite.lookups). The ``IN`` restriction is written only when T is public: it reads
public rows alone, and narrows k's bins to the values c takes on the outer rows that the
enclosing WHERE can keep (dpsql.rewrite.domains.public_semi_join), so that which bins exist is
a function of the SQL and public data.

Contract: every decision here reads the SQL and the public metadata alone. The enclosing query
is analysed with the subquery replaced by a parameter (as for an uncorrelated threshold): its
analysis never reads a parameter's value, so its ES(k) holds for every value and therefore for
a value that is a public function of the row's column c (the lookup is public after phase 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.checks import sql_text
from dpsql.analysis.elastic import QueryAnalysis, analyze_query
from dpsql.analysis.keytypes import normalise
from dpsql.analysis.trees import copy_tree
from dpsql.errors import ProtectedBinError, UnsupportedConstructError
from dpsql.metadata import Metadata

__all__ = ["Lookup", "correlation_error", "histogram_query", "lookup_block",
           "outer_references"]

_Refuse = Callable[[str], UnsupportedConstructError]


@dataclass(frozen=True)
class Lookup:
    """How the enclosing query reads a released histogram: ``column`` (the outer column c, as
    the enclosing query names it) compared with the histogram's keys of type ``key_type``."""

    column: exp.Column
    key_type: str


def outer_references(select: exp.Select) -> list[exp.Column]:
    """The columns ``select`` reads from an enclosing query (none: uncorrelated)."""
    defined = {t.alias_or_name for t in select.find_all(exp.Table)}
    defined |= {s.alias for s in select.find_all(exp.Subquery) if s.alias}
    defined |= {c.alias_or_name for c in select.find_all(exp.CTE)}
    return [col for col in select.find_all(exp.Column) if col.table and col.table not in defined]


def correlation_error(select: exp.Select, col: exp.Column,
                      why: str = "") -> UnsupportedConstructError:
    """The refusal of a correlated subquery dpsql cannot release (``why``: the rule's unmet
    condition, when the shape came close)."""
    reason = f" ({why})" if why else ""
    return UnsupportedConstructError(
        f"the aggregate subquery ({sql_text(select)[:40]}...) refers to {sql_text(col)} "
        "of the enclosing query "
        "(a correlated subquery), which dpsql cannot release once for every row"
        f"{reason}: make it uncorrelated, correlate it by one equality `inner key = outer "
        "column` only (the key with a declared domain, the subquery in the outer WHERE), "
        "or join and GROUP BY instead"
    )


def lookup_block(select: exp.Select, enclosing: exp.Select, metadata: Metadata,
                 ctes: frozenset[str]) -> tuple[QueryAnalysis, Lookup]:
    """The analysis of the histogram standing for the correlated subquery ``select`` of
    ``enclosing``'s WHERE, and how the enclosing query reads it (module docstring); raises the
    refusal otherwise. ``ctes``: the lower-case CTE names the query defines."""
    histogram, lookup = histogram_query(select, enclosing, metadata, ctes)
    try:
        return analyze_query(histogram, metadata), lookup
    except ProtectedBinError:
        key = histogram.args["group"].expressions[0]
        raise correlation_error(
            select, lookup.column,
            f"it is released as a histogram GROUP BY {sql_text(key)}, which needs that column "
            "releasable with a declared domain") from None


def histogram_query(select: exp.Select, enclosing: exp.Select, metadata: Metadata,
                    ctes: frozenset[str]) -> tuple[exp.Select, Lookup]:
    """The histogram standing for the correlated subquery ``select`` (a query of its own, not
    yet analysed) and how the enclosing query reads it."""
    refs = outer_references(select)
    first = refs[0]

    def refuse(why: str) -> UnsupportedConstructError:
        return correlation_error(select, first, why)

    _check_position(select, enclosing, refuse)
    table = _single_table(select, metadata, ctes, refuse)
    if len(select.expressions) != 1:
        raise refuse("it must select one aggregate")
    where = select.args.get("where")
    conjuncts = _conjuncts(where.this) if where is not None else []
    correlated = [c for c in conjuncts if any(r in refs for r in _columns(c))]
    if len(correlated) != 1 or len(refs) != 1:
        raise refuse("it reads the enclosing query other than in one equality")
    eq = correlated[0]
    if not isinstance(eq, exp.EQ):
        raise refuse(f"{sql_text(eq)} is not an equality")
    inner, outer = ((eq.this, eq.expression) if eq.expression is first
                    else (eq.expression, eq.this))
    if outer is not first or not isinstance(inner, exp.Column) or (
            inner.table != table.alias_or_name):
        raise refuse(f"{sql_text(eq)} must compare a column of {table.name} with one of "
                     "the enclosing query")
    outer_table = _outer_table(first, enclosing, metadata, ctes, refuse)
    key_type = _column_type(metadata, table.name, inner.name)
    outer_type = _column_type(metadata, outer_table.name, first.name)
    k_type, c_type = normalise(key_type), normalise(outer_type)
    if key_type is None or k_type is None or c_type is None or k_type != c_type:
        raise refuse(f"{sql_text(inner)} and {sql_text(first)} must have the same declared "
                     "type, so that the lookup compares them as the subquery does")
    rest = [copy_tree(c) for c in conjuncts if c is not eq]
    if metadata.tables[outer_table.name.lower()].public:
        rest.append(_restriction(inner, first, outer_table, enclosing))
    value = select.expressions[0]
    name = value.alias if isinstance(value, exp.Alias) else ""
    if not name or name.startswith("_col_"):  # (qualify names an unnamed column _col_<i>)
        name = "value"
    key = copy_tree(inner)
    block = exp.Select(
        expressions=[exp.alias_(copy_tree(inner), inner.name, copy=False),
                     exp.alias_(copy_tree(value.unalias()), name, copy=False)],
        from_=exp.From(this=copy_tree(table)),
    )
    if rest:
        block.set("where", exp.Where(this=exp.and_(*rest, copy=False)))
    block.set("group", exp.Group(expressions=[key]))
    return block, Lookup(copy_tree(first), key_type)


def _check_position(select: exp.Select, enclosing: exp.Select, refuse: _Refuse) -> None:
    node: exp.Expression | None = select.parent  # the Subquery
    assert node is not None
    node = node.parent
    in_where = False
    while node is not None and node is not enclosing:
        if isinstance(node, (exp.Select, exp.Subquery, exp.AggFunc, exp.Window, exp.Join)):
            break
        in_where = isinstance(node, exp.Where)
        node = node.parent
    if node is not enclosing or not in_where:
        raise refuse("it must be a value in the WHERE of the outermost query")


def _single_table(select: exp.Select, metadata: Metadata, ctes: frozenset[str],
                  refuse: _Refuse) -> exp.Table:
    from_ = select.args.get("from_")
    table = from_.this if from_ is not None else None
    if (not isinstance(table, exp.Table) or table.db or table.name.lower() in ctes
            or table.name.lower() not in metadata.tables):
        raise refuse("it must read one declared table")
    if any(select.args.get(a) for a in ("joins", "group", "having", "distinct", "order",
                                        "limit", "offset", "with_", "qualify")):
        raise refuse("it must read one table, without GROUP BY, HAVING, DISTINCT, ORDER BY "
                     "or LIMIT")
    if any(n is not select for n in select.find_all(exp.Select)) or select.find(exp.Window):
        raise refuse("it must not contain a subquery or window")
    return table


def _outer_table(col: exp.Column, enclosing: exp.Select, metadata: Metadata,
                 ctes: frozenset[str], refuse: _Refuse) -> exp.Table:
    from_ = enclosing.args.get("from_")
    items = [from_.this] if from_ is not None else []
    items += [j.this for j in enclosing.args.get("joins") or []]
    for item in items:
        if item.alias_or_name == col.table:
            if (isinstance(item, exp.Table) and not item.db and item.name.lower() not in ctes
                    and item.name.lower() in metadata.tables):
                return item
            break
    raise refuse(f"{sql_text(col)} must be a column of a declared table the outermost query "
                 "reads")


def _restriction(key: exp.Column, col: exp.Column, table: exp.Table,
                 enclosing: exp.Select) -> exp.Expression:
    """``key IN (SELECT o.c FROM T AS o WHERE <enclosing WHERE's conjuncts on o alone>)``
    (T public; conjuncts with a subquery, aggregate, window or parameter are left out)."""
    where = enclosing.args.get("where")
    own = []
    for conjunct in _conjuncts(where.this) if where is not None else []:
        if conjunct.find(exp.Query, exp.Subquery, exp.AggFunc, exp.Window,
                         exp.Placeholder) is not None:
            continue
        columns = _columns(conjunct)
        if columns and all(c.table == col.table for c in columns):
            own.append(copy_tree(conjunct))
    inner = exp.Select(expressions=[copy_tree(col)], from_=exp.From(this=copy_tree(table)))
    if own:
        inner.set("where", exp.Where(this=exp.and_(*own, copy=False)))
    return exp.In(this=copy_tree(key), query=exp.Subquery(this=inner))


def _column_type(metadata: Metadata, table: str, column: str) -> str | None:
    declared = metadata.tables[table.lower()].columns.get(column.lower())
    return declared.type if declared is not None else None


def _columns(node: exp.Expression) -> list[exp.Column]:
    return list(node.find_all(exp.Column))


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


