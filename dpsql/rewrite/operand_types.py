"""The type of a compared operand, read from the SQL and the public metadata alone, for
dpsql.rewrite.literal_casts' check only (a string literal its type cannot read is refused
before any charge). Nothing here proves anything total: these types serve that check, never a
totality rule.

Contract of :func:`operand_types`: the type DuckDB gives the operand, or None (unknown: the
check then leaves the literal to TRY, as before). It reads the SQL text and the declared
column types, and asks DuckDB's binder on a private in-memory connection that holds no data
(:func:`bound_type`: ``typeof`` of the expression with every typed leaf replaced by a NULL of
its type). Typed are:

- a declared column; a CAST or TRY_CAST (its target type);
- a date part, EXTRACT or DATE_TRUNC of one; COUNT, MIN / MAX of one, SUM / AVG (some number:
  DOUBLE stands for it; a release's noisy SUM is a DOUBLE in post-processing);
- arithmetic, COALESCE, NULLIF, ABS, ROUND, FLOOR, CEIL, GREATEST and LEAST of typed operands
  and constants (``d + 1`` is a DATE, ``d + INTERVAL 1 DAY`` a TIMESTAMP: DuckDB's own
  binder decides, so its promotion rules need no table here);
- a column of a CTE or derived table whose projection is one of those, followed through
  nested CTEs, and through a set operation (UNION, INTERSECT, EXCEPT, by position) as the
  common type of every branch's projection, again DuckDB's.

``tests/rewrite/test_operand_types.py`` checks each kind against DuckDB's ``typeof`` on a
row of real data.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache

import duckdb
from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.metadata import Metadata
from dpsql.rewrite.safe_compare import column_types, enclosing_select, scope_sources

__all__ = ["OperandType", "bound_type", "data_free_answer", "operand_types"]

T = exp.DataType.Type

#: the declared type (SQL text) of a compared operand, or None when unknown
OperandType = Callable[[exp.Expression], "str | None"]

#: how many CTE or derived-table projections (or function arguments) :func:`operand_types`
#: follows from one operand
_MAX_HOPS = 16
#: expressions whose DuckDB result type is known from the SQL alone (the module docstring's
#: second item): date parts and COUNT are BIGINT; MIN / MAX keep their argument's type; SUM /
#: AVG are some number (DOUBLE stands for it: only a string no number reads is refused);
#: DATE_TRUNC of a DATE or TIMESTAMP is a TIMESTAMP, of a TIMESTAMPTZ a TIMESTAMPTZ (QA round
#: 6: date_trunc('month', d) = '2024-03' matched nothing, charged)
_BIGINT_RESULTS = (exp.Year, exp.Month, exp.Day, exp.Quarter, exp.Week, exp.DayOfWeek,
                   exp.DayOfYear, exp.Count)
_SAME_TYPE_AGGREGATES = (exp.Min, exp.Max)
_NUMBER_AGGREGATES = (exp.Sum, exp.Avg)
_TRUNCATIONS = (exp.TimestampTrunc, exp.DateTrunc)
_TRUNCATED = (T.DATE, T.TIMESTAMP, T.TIMESTAMPNTZ)  # sqlglot reads TIMESTAMP as either
#: computed expressions DuckDB's binder types from their operands' types (a positive list:
#: no subquery, window or aggregate reaches :func:`bound_type`)
_COMPUTED = (exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod,
             exp.Coalesce, exp.Nullif, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Greatest,
             exp.Least)
#: constants inside a computed expression, passed to the binder as written
_CONSTANTS = (exp.Literal, exp.Null, exp.Boolean, exp.Interval)

_lock = threading.Lock()
_connection: duckdb.DuckDBPyConnection | None = None


def data_free_answer(sql: str, params: list[object]) -> object:
    """The first value of ``sql`` on dpsql's private in-memory DuckDB connection, which holds
    no data (one lock: DuckDB connections are not shared between threads); raises
    duckdb.Error as DuckDB does."""
    global _connection
    with _lock:
        if _connection is None:
            _connection = duckdb.connect(":memory:")
        row = _connection.execute(sql, params).fetchone()
    return row[0] if row else None


@lru_cache(maxsize=4096)
def bound_type(expression_sql: str) -> str | None:
    """The type DuckDB's binder gives ``expression_sql`` (DuckDB SQL whose leaves are
    constants or typed NULLs: no data is read), or None when it cannot bind it (``d + d`` of
    two DATEs): unknown, nothing refused."""
    try:
        answer = data_free_answer(f"SELECT typeof({expression_sql})", [])
    except duckdb.Error:
        return None
    return answer if isinstance(answer, str) else None


def operand_types(select: exp.Select, metadata: Metadata | None,
                  ctes: frozenset[str]) -> OperandType:
    """The type of an operand in ``select``'s scope (module contract), or None (unknown);
    ``ctes`` the query's CTE names."""
    return lambda operand: _operand_type(operand, select, metadata, ctes, 0)


def _operand_type(operand: exp.Expression, select: exp.Select, metadata: Metadata | None,
                  ctes: frozenset[str], hops: int) -> str | None:
    """:func:`operand_types` of ``operand`` in ``select``, ``hops`` projections followed."""
    node = operand.unnest()
    if isinstance(node, exp.Cast):  # TRY_CAST too: its value is of the target type
        return node.to.sql(dialect="duckdb")
    if hops > _MAX_HOPS:
        return None
    if isinstance(node, _BIGINT_RESULTS):
        return "BIGINT"
    if isinstance(node, exp.Extract):  # EXTRACT(part FROM ..): BIGINT but for two parts
        return "DOUBLE" if node.name.upper() in ("EPOCH", "JULIAN") else "BIGINT"
    if isinstance(node, _SAME_TYPE_AGGREGATES):
        return _operand_type(node.this, select, metadata, ctes, hops + 1)
    if isinstance(node, _NUMBER_AGGREGATES):
        return "DOUBLE"  # some number: a string no number reads fails in any numeric type
    if isinstance(node, _TRUNCATIONS):
        inner = normalise(_operand_type(node.this, select, metadata, ctes, hops + 1))
        if inner is not None and inner.this == T.TIMESTAMPTZ:
            return "TIMESTAMPTZ"  # the time zone stays
        return "TIMESTAMP" if inner is not None and inner.this in _TRUNCATED else None
    if isinstance(node, _COMPUTED):
        return _computed_type(node, lambda leaf: _operand_type(leaf, select, metadata, ctes,
                                                                hops + 1))
    if not isinstance(node, exp.Column):
        return None
    declared = column_types(select, metadata, ctes)(node)
    if declared is not None:
        return declared
    projected = _projections(select, node)
    if not projected:
        return None
    types = [_operand_type(projection, body, metadata, ctes, hops + 1)
             for body, projection in projected]
    return _common_type(types)


def _computed_type(node: exp.Expression, leaf_type: OperandType) -> str | None:
    """The binder's type of a computed ``node`` (:data:`_COMPUTED`) whose leaves are constants
    or operands ``leaf_type`` types; None when a leaf is unknown."""
    copy = node.copy()
    typed = []
    for leaf in _leaves(node):
        found = normalise(leaf_type(leaf))
        if found is None:
            return None
        typed.append(found)
    for leaf, dtype in zip(_leaves(copy), typed, strict=True):
        leaf.replace(exp.cast(exp.null(), dtype))
    return bound_type(copy.sql(dialect="duckdb"))


def _leaves(node: exp.Expression) -> list[exp.Expression]:
    """The operands of a computed ``node`` that are neither computed nor constants, in one
    fixed order (so a copy's leaves pair with the original's)."""
    leaves: list[exp.Expression] = []
    stack = [node]
    while stack:
        inner = stack.pop()
        if isinstance(inner, _COMPUTED):
            stack.extend(reversed(list(inner.iter_expressions())))
        elif not isinstance(inner, _CONSTANTS):
            leaves.append(inner)
    return leaves


def _common_type(types: list[str | None]) -> str | None:
    """The type DuckDB gives a set operation's column whose branches have ``types`` (None if
    any is unknown): asked of a data-free UNION ALL of typed NULLs."""
    if any(t is None or normalise(t) is None for t in types):
        return None
    return _union_type(tuple(normalise(t).sql(dialect="duckdb")  # type: ignore[union-attr]
                             for t in types))


@lru_cache(maxsize=1024)
def _union_type(types: tuple[str, ...]) -> str | None:
    """:func:`_common_type` of declared types (DuckDB SQL), remembered."""
    if len(types) == 1:
        return types[0]
    branches = " UNION ALL ".join(f"SELECT CAST(NULL AS {t}) AS c" for t in types)
    try:
        answer = data_free_answer(f"SELECT typeof(c) FROM ({branches})", [])
    except duckdb.Error:
        return None
    return answer if isinstance(answer, str) else None


def _projections(scope: exp.Select, column: exp.Column
                 ) -> list[tuple[exp.Select, exp.Expression]]:
    """Each (SELECT, its projection) that the CTE or derived table ``scope`` (or a SELECT it
    is a subquery of) reads under ``column``'s table alias projects as ``column``: one for a
    SELECT; one per branch of a set operation, by the position of the column in its first
    branch (as SQL names a set operation's columns); empty when the alias names anything else,
    or the columns cannot be matched (a star, BY NAME, branches of other widths)."""
    body = _aliased_body(scope, column.table)
    branches = _branches(body) if body is not None else None
    if not branches:
        return []
    names = [p.alias_or_name.lower() for p in branches[0].expressions]
    if column.name.lower() not in names or any(
            len(b.expressions) != len(names) or any(isinstance(p, exp.Star) for p in b.expressions)
            for b in branches):
        return []
    position = names.index(column.name.lower())
    return [(b, b.expressions[position].unalias()) for b in branches]


def _branches(body: exp.Expression) -> list[exp.Select] | None:
    """The SELECTs of a query, in order: itself, or every branch of a set operation (None for
    anything else, or a set operation BY NAME, which matches columns by name)."""
    if isinstance(body, exp.Subquery):  # a parenthesised branch
        return _branches(body.this)
    if isinstance(body, exp.Select):
        return [body]
    if isinstance(body, exp.SetOperation) and not body.args.get("by_name"):
        left, right = _branches(body.this), _branches(body.expression)
        return None if left is None or right is None else left + right
    return None


def _aliased_body(scope: exp.Select, alias: str) -> exp.Expression | None:
    """The query behind ``alias`` in the innermost scope naming it, from ``scope`` outwards
    (as :func:`column_types` resolves aliases): a derived table's own query, or the CTE the
    name refers to (the nearest WITH defining it); None for a base table or anything else."""
    select: exp.Select | None = scope
    while select is not None:
        for source in scope_sources(select):
            if source.alias_or_name != alias:
                continue
            if isinstance(source, exp.Subquery):
                return source.this
            if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
                return _cte_body(select, source.name)
            return None
        select = enclosing_select(select)
    return None


def _cte_body(node: exp.Expression, name: str) -> exp.Expression | None:
    """The body of the CTE ``name`` visible from ``node``: the nearest enclosing WITH that
    defines it; None when none does (a base table)."""
    ancestor: exp.Expression | None = node
    while ancestor is not None:
        with_ = ancestor.args.get("with_") if isinstance(ancestor, exp.Query) else None
        if with_ is not None:
            for cte in with_.expressions:
                if cte.alias_or_name.lower() == name.lower():
                    return cte.this
        ancestor = ancestor.parent
    return None
