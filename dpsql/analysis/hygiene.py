"""Structural rules on the analyst's query that no sensitivity rule covers (docs/privacy.md,
"Names, scopes and modifiers").

Contract: each ``check_*`` function raises (``ProgrammingError`` or ``UnsupportedConstructError``,
the message naming the construct and the fix) or returns ``None``; each reads the SQL text or
tree and the public metadata only, never data, max frequencies or row counts, so neighbouring
databases always get the same outcome.

* :func:`check_size` and :func:`check_shape` bound the work an analysis does, before the tree
  reaches sqlglot's ``qualify`` (quadratic in long AND chains).
* :func:`check_names` keeps analyst names apart from the engine's: no identifier starting with
  ``__`` (the prefix of every relation, column and parameter dpsql generates) and no CTE or alias
  named like a declared table (the engine reads public domain tables by name).
* :func:`check_modifiers` allows ORDER BY / LIMIT / OFFSET on the outermost SELECT only, where
  they post-process noisy values; anywhere else they run on private rows unanalysed.
* :func:`check_set_operations` rejects ``UNION ... BY NAME``: the analysis pairs branch columns
  by position.
* :func:`check_stars` allows ``*`` only as ``COUNT(*)`` or a subquery's projection list.
* :func:`check_columns_resolved` (after qualify) rejects a table or its alias used as a value,
  which DuckDB reads as a struct of every stored column, declared or not.
* :func:`check_join_order` (after qualify) rejects a join's ON reading a table joined later
  in the FROM, which is not in scope there (the analysis would read another binding than
  the database's).

The checks before qualify take the parsed tree's nodes as :func:`check_shape` lists them
(breadth first, the order of ``find_all``), so the tree is walked once for all of them rather
than once per check; each check visits the nodes it looks at in the same order as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dpsql.errors import ProgrammingError, UnsupportedConstructError, UnsupportedQueryError
from dpsql.metadata import Metadata

#: Longest query text dpsql analyses (the TPC-H queries are 0.3 to 2.5 KB).
MAX_SQL_CHARS = 32_768
#: Most syntax nodes in one query (TPC-H Q2, among the largest, has ~250).
MAX_NODES = 5_000
#: Deepest nesting of syntax nodes (TPC-H queries stay below 25).
MAX_DEPTH = 100
#: Most conditions joined by AND / OR in one query.
MAX_CONNECTIVES = 256

#: Identifiers dpsql generates all start with this (``__exact``, ``__d0``, ``__k0``, ``__m0``,
#: ``__noisy``, ``__dpsql_param_0``, ``__dpsql_notin0``, ...).
ENGINE_PREFIX = "__"

_MODIFIERS: tuple[type[exp.Expression], ...] = (exp.Order, exp.Limit, exp.Offset, exp.Fetch)


def check_size(sql: str) -> None:
    """Reject query texts longer than MAX_SQL_CHARS (checked before parsing)."""
    if len(sql) > MAX_SQL_CHARS:
        raise UnsupportedQueryError(
            f"the query is {len(sql):,} characters long, more than the {MAX_SQL_CHARS:,} dpsql "
            "analyses: shorten it (a long list of conditions can often be an IN list)"
        )


def check_shape(query: exp.Expression) -> list[exp.Expression]:
    """Reject trees with more than MAX_NODES nodes, deeper than MAX_DEPTH (a chain of one
    connective counts as one level), or with more than MAX_CONNECTIVES AND/OR connectives.
    Return the tree's nodes, breadth first (``query.walk()``'s order), for the other checks.

    Iterative, so a deep tree cannot exhaust the stack here; the bounds keep every recursive
    pass after it (qualify, the analysis, the rewrite) within Python's recursion limit.
    """
    # breadth first: nodes[i] is visited i-th; depths[i] is its depth
    nodes: list[exp.Expression] = [query]
    depths = [1]
    connectives = 0
    i = 0
    while i < len(nodes):
        node, depth = nodes[i], depths[i]
        i += 1
        if i > MAX_NODES:
            raise UnsupportedQueryError(
                f"the query has more than {MAX_NODES:,} syntax elements: split it into smaller "
                "queries"
            )
        if depth > MAX_DEPTH:
            raise UnsupportedQueryError(
                f"the query nests expressions more than {MAX_DEPTH} levels deep: flatten it"
            )
        connective = isinstance(node, exp.Connector)
        if connective:
            connectives += 1
            if connectives > MAX_CONNECTIVES:
                raise UnsupportedQueryError(
                    f"the query has more than {MAX_CONNECTIVES} AND/OR conditions: use IN lists "
                    "or split it into smaller queries"
                )
        for child in node.iter_expressions():
            nodes.append(child)
            # an AND chain is as deep as it is long: count it as one level (its length is
            # bounded by MAX_CONNECTIVES)
            depths.append(depth if connective and type(child) is type(node) else depth + 1)
    return nodes


def _of_type(nodes: Sequence[exp.Expression], *types: type[exp.Expression]) -> list:
    """The nodes of the given types, in the order listed (``find_all`` over a node list)."""
    return [node for node in nodes if isinstance(node, types)]


def check_names(nodes: Sequence[exp.Expression], metadata: Metadata) -> None:
    """No analyst identifier may start with ENGINE_PREFIX, and no CTE, derived table or table
    alias may be named like a declared table other than the one it aliases (``nodes``: see
    :func:`check_shape`)."""
    declared = {name.lower() for name in metadata.tables}
    for ident in _of_type(nodes, exp.Identifier):
        if ident.name.startswith(ENGINE_PREFIX):
            raise ProgrammingError(
                f"the name {ident.name!r} is reserved: names starting with "
                f"{ENGINE_PREFIX!r} belong to dpsql's generated SQL; rename it"
            )
    for cte in _of_type(nodes, exp.CTE):
        name = cte.alias_or_name.lower()
        if name in declared:
            raise ProgrammingError(
                f"the CTE {cte.alias_or_name!r} has the name of a declared table: a CTE may "
                "not hide a table; rename it"
            )
    for alias in _of_type(nodes, exp.TableAlias):
        name = alias.name.lower()
        parent = alias.parent
        if not name or name not in declared or isinstance(parent, exp.CTE):
            continue
        if isinstance(parent, exp.Table) and parent.name.lower() == name:
            continue  # ``orders AS orders``: the table's own name
        raise ProgrammingError(
            f"the alias {alias.name!r} is the name of a declared table: an alias may not hide "
            "a table; rename it"
        )


def check_modifiers(query: exp.Expression, nodes: Sequence[exp.Expression]) -> None:
    """ORDER BY, LIMIT, OFFSET and FETCH only on the outermost SELECT (post-processing of the
    noisy aggregates); GROUP BY ALL nowhere (its keys are not written out to be analysed).
    ``nodes``: ``query``'s, see :func:`check_shape`."""
    for node in _of_type(nodes, *_MODIFIERS, exp.Group):
        if isinstance(node, exp.Group):
            if node.args.get("all"):
                raise UnsupportedConstructError(
                    "GROUP BY ALL is not supported: list the group keys"
                )
            continue
        if node.parent is query and isinstance(query, exp.Select):
            continue
        clause = {exp.Order: "ORDER BY", exp.Limit: "LIMIT", exp.Offset: "OFFSET",
                  exp.Fetch: "FETCH"}[type(node)]
        raise UnsupportedConstructError(
            f"{clause} is allowed only at the end of the outermost SELECT (it then orders or "
            "limits the noisy result rows): remove it from the subquery, CTE, set operation "
            "or aggregate it is in"
        )


def check_set_operations(nodes: Sequence[exp.Expression]) -> None:
    """Reject set operations that match columns by name (DuckDB's ``UNION BY NAME``)."""
    for node in _of_type(nodes, exp.SetOperation):
        if node.args.get("by_name"):
            raise UnsupportedConstructError(
                "UNION / INTERSECT / EXCEPT BY NAME is not supported: list the same columns in "
                "the same order in every branch and drop BY NAME"
            )


def check_stars(nodes: Sequence[exp.Expression]) -> None:
    """``*`` only as ``COUNT(*)`` or in a subquery's projection list (expanded by qualify)."""
    for node in _of_type(nodes, exp.Star):
        holder = node.parent
        if isinstance(holder, exp.Column):  # ``t.*``
            star, holder = holder, holder.parent
        else:
            star = node
        if isinstance(holder, exp.Count) and star is node and holder.this is node:
            continue
        if isinstance(holder, exp.Select) and star in holder.expressions:
            continue
        raise UnsupportedConstructError(
            f"{star.sql()} is allowed only as COUNT(*) or as a subquery's "
            "column list: name the columns"
        )


def check_columns_resolved(query: exp.Expression,
                           nodes: Sequence[exp.Expression] | None = None) -> None:
    """After qualify: a column reference without a table that names a table, CTE or alias in
    the query is the whole row (DuckDB binds it as a STRUCT of every stored column)."""
    if nodes is None:  # ``query``'s nodes, walked once for the three lookups below
        nodes = list(query.walk())
    for node in _of_type(nodes, exp.TableColumn):  # what qualify makes of a bare table name
        raise _table_as_value(node.name)
    visible: dict[int, set[str]] = {}  # id(SELECT) -> the source names its scope sees
    for column in _of_type(nodes, exp.Column):
        if not column.table and column.name.lower() in _visible_sources(column, visible):
            raise _table_as_value(column.name)


def check_join_order(nodes: Sequence[exp.Expression]) -> None:
    """After qualify: a join's ON reads only the tables of the FROM up to that join (its own
    and the earlier ones). A later one is not in scope there: DuckDB refuses it, or binds the
    name to an enclosing query's table of that name, while sqlglot's scope (what the
    analysis reads) resolves it to the later table -- so the query is refused, naming it."""
    for select in _of_type(nodes, exp.Select):
        joins = select.args.get("joins") or []
        from_ = select.args.get("from_") or select.args.get("from")
        if not joins or from_ is None:
            continue
        names = [from_.this.alias_or_name] + [j.this.alias_or_name for j in joins]
        for i, join in enumerate(joins):
            on = join.args.get("on")
            later = {n.lower() for n in names[i + 2:] if n}
            if on is None or not later:
                continue
            for column in on.find_all(exp.Column):
                name = column.table.lower()
                if name in later and not _bound_below(column, on, name):
                    raise _joined_later(column, names[i + 1], column.table)


def _bound_below(column: exp.Column, stop: exp.Expression, name: str) -> bool:
    """Whether a SELECT between ``column`` and ``stop`` (a subquery in the ON) has a source
    ``name`` of its own, which the column then reads."""
    node = column.parent
    while node is not None and node is not stop:
        if isinstance(node, exp.Select) and name in _own_sources(node):
            return True
        node = node.parent
    return False


def _joined_later(column: exp.Column, joined: str, table: str) -> ProgrammingError:
    return ProgrammingError(
        f"the ON of the join with {joined} reads {column.sql()}, but {table} is not in scope "
        f"there: it is joined later in the FROM. Reorder the joins so that {table} is joined "
        f"before {joined} (or move the condition to a later ON, or to WHERE)"
    )


def _visible_sources(node: exp.Expression, memo: dict[int, set[str]]) -> set[str]:
    """The lower-cased names of the tables, aliases and CTEs a bare name at ``node`` could bind
    to as a whole row: those of the SELECTs enclosing it (its own and, for a correlated
    reference, the outer ones), never those of a subquery nested elsewhere. (An ORDER BY alias
    named like a table inside a derived table is an output column, not that table.)"""
    names: set[str] = set()
    scope = node.parent
    while scope is not None:
        if isinstance(scope, exp.Select):
            if id(scope) not in memo:
                memo[id(scope)] = _own_sources(scope)
            names |= memo[id(scope)]
        scope = scope.parent
    return names


def _own_sources(select: exp.Select) -> set[str]:
    """The names a SELECT's FROM, JOINs and WITH introduce (not its subqueries' own)."""
    names: set[str] = set()
    sources = [select.args.get("from_") or select.args.get("from")]
    sources += list(select.args.get("joins") or [])
    for holder in sources:
        if holder is None:
            continue
        source = holder.this
        name = source.alias_or_name
        if name:
            names.add(name.lower())
    with_ = select.args.get("with_") or select.args.get("with")
    for cte in (with_.expressions if with_ is not None else []):
        names.add(cte.alias_or_name.lower())
    return names


def _table_as_value(name: str) -> UnsupportedConstructError:
    return UnsupportedConstructError(
        f"{name!r} names a table, not a column: a table or its alias cannot be used as a "
        "value; name one of its columns"
    )
