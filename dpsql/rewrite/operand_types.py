"""The type of an operand, read from the SQL and the public metadata alone, for
dpsql.rewrite.literal_casts' check (a string literal its type cannot read is refused before
any charge) and dpsql.rewrite.set_operations (a set operation's branches cast to their common
type with TRY_CAST). Nothing here proves anything total: a type found here only decides a
refusal or adds a TRY_CAST, never leaves an expression unwrapped.

Contract of :func:`operand_types`: the type DuckDB gives the operand, or None (unknown: the
check then leaves the literal to TRY, as before). It reads the SQL text and the declared
column types, and asks DuckDB's binder on a private in-memory connection that holds no data
(:func:`bound_type`: ``typeof`` of the expression with every typed leaf replaced by a NULL of
its type). Typed are:

- a declared column; a CAST or TRY_CAST (its target type);
- a date part, EXTRACT or DATE_TRUNC of one; COUNT, MIN / MAX of one, SUM / AVG (some number:
  DOUBLE stands for it; a release's noisy SUM is a DOUBLE in post-processing);
- arithmetic, the allow-listed scalar functions (COALESCE, NULLIF, ABS, ROUND, LENGTH, UPPER,
  DATE_ADD, CASE, ...) and conditions of typed operands and constants (``d + 1`` is a DATE,
  ``d + INTERVAL 1 DAY`` a TIMESTAMP: DuckDB's own binder decides, so its promotion rules need
  no table here); an INTERVAL is a constant only of a literal (``INTERVAL (n) DAY`` reads a
  column and is unknown: the red team's break, which sent it to the binder as written);
- with ``exact`` (dpsql.rewrite.set_operations), SUM and AVG as the exact query computes them
  (the binder: HUGEINT for an INTEGER's SUM), not the released DOUBLE;
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

__all__ = ["OperandType", "bound_type", "branches", "common_type", "data_free_answer",
           "operand_types"]

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
                   exp.DayOfYear, exp.WeekOfYear, exp.DayOfWeekIso, exp.Hour, exp.Minute,
                   exp.Second, exp.Count)
_SAME_TYPE_AGGREGATES = (exp.Min, exp.Max)
_NUMBER_AGGREGATES = (exp.Sum, exp.Avg)
_TRUNCATIONS = (exp.TimestampTrunc, exp.DateTrunc)
_TRUNCATED = (T.DATE, T.TIMESTAMP, T.TIMESTAMPNTZ)  # sqlglot reads TIMESTAMP as either
#: computed expressions DuckDB's binder types from their operands' types: arithmetic, the
#: allow-listed deterministic scalar functions (dpsql.analysis.allowlist) and conditions (a
#: positive list: no subquery, window or aggregate reaches :func:`bound_type`)
_COMPUTED = (exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod,
             exp.Coalesce, exp.Nullif, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Greatest,
             exp.Least, exp.Sqrt, exp.Ln, exp.Log, exp.Exp, exp.Pow, exp.Sign, exp.Upper,
             exp.Lower, exp.Length, exp.Substring, exp.Trim, exp.Concat, exp.DPipe, exp.Left,
             exp.Right, exp.StrPosition, exp.StartsWith, exp.DateAdd, exp.DateSub,
             exp.DateDiff, exp.Case, exp.If, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
             exp.NullSafeEQ, exp.NullSafeNEQ, exp.And, exp.Or, exp.Not, exp.Is, exp.Like,
             exp.ILike, exp.Between, exp.In, exp.Monthname, exp.Dayname, exp.LastDay,
             exp.Replace, exp.Reverse, exp.Contains)
#: aggregates the binder types exactly (SUM of an INTEGER is a HUGEINT) when ``exact``: the
#: type DuckDB computes in the exact query (a released SUM is a DOUBLE in post-processing)
_EXACT_AGGREGATES = (exp.Sum, exp.Avg)
#: constants inside a computed expression, passed to the binder as written (an INTERVAL only
#: of a literal: ``INTERVAL (n) DAY`` reads a column; the red team's break)
_CONSTANTS = (exp.Literal, exp.Null, exp.Boolean, exp.Var)

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
                  ctes: frozenset[str], *, exact: bool = False) -> OperandType:
    """The type of an operand in ``select``'s scope (module contract), or None (unknown);
    ``ctes`` the query's CTE names. ``exact``: SUM and AVG typed as DuckDB computes them in
    the exact query (HUGEINT, DECIMAL(38, s) or DOUBLE), not as a released value's DOUBLE."""
    return lambda operand: _operand_type(operand, select, metadata, ctes, 0, exact)


def _operand_type(operand: exp.Expression, select: exp.Select, metadata: Metadata | None,
                  ctes: frozenset[str], hops: int, exact: bool = False) -> str | None:
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
        return _operand_type(node.this, select, metadata, ctes, hops + 1, exact)
    if isinstance(node, _NUMBER_AGGREGATES) and not exact:
        return "DOUBLE"  # some number: a string no number reads fails in any numeric type
    if isinstance(node, _TRUNCATIONS):
        inner = normalise(_operand_type(node.this, select, metadata, ctes, hops + 1, exact))
        if inner is not None and inner.this == T.TIMESTAMPTZ:
            return "TIMESTAMPTZ"  # the time zone stays
        return "TIMESTAMP" if inner is not None and inner.this in _TRUNCATED else None
    if isinstance(node, _COMPUTED) or (exact and isinstance(node, _EXACT_AGGREGATES)):
        return _computed_type(node, lambda leaf: _operand_type(leaf, select, metadata, ctes,
                                                                hops + 1, exact))
    if not isinstance(node, exp.Column):
        return None
    declared = column_types(select, metadata, ctes)(node)
    if declared is not None:
        return declared
    projected = _projections(select, node)
    if not projected:
        return None
    types = [_operand_type(projection, body, metadata, ctes, hops + 1, exact)
             for body, projection in projected]
    return common_type(types)


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
        leaf.replace(exp.cast(exp.null(), dtype))  # each leaf a typed NULL: no data, no column
    return bound_type(copy.sql(dialect="duckdb"))


def _leaves(node: exp.Expression) -> list[exp.Expression]:
    """The operands of a computed ``node`` that are neither computed nor constants, in one
    fixed order (so a copy's leaves pair with the original's)."""
    leaves: list[exp.Expression] = []
    stack = [node]
    while stack:
        inner = stack.pop()
        if isinstance(inner, (*_COMPUTED, *_EXACT_AGGREGATES)):
            stack.extend(reversed(list(inner.iter_expressions())))
        elif not _constant(inner):
            leaves.append(inner)
    return leaves


def _constant(node: exp.Expression) -> bool:
    """Whether ``node`` goes to the binder as written: a literal, NULL, TRUE/FALSE, a keyword
    (a date part), or an INTERVAL of a (signed) literal."""
    if isinstance(node, exp.Interval):
        value = node.this.unnest() if node.this is not None else None
        if isinstance(value, exp.Neg):
            value = value.this
        return isinstance(value, exp.Literal) and all(
            isinstance(part, (exp.Var, exp.Literal)) for part in node.iter_expressions()
            if part is not node.this)
    return isinstance(node, _CONSTANTS)


def common_type(types: list[str | None]) -> str | None:
    """The type DuckDB gives a set operation's column whose branches have ``types`` (None if
    any is unknown): asked of a data-free UNION ALL of typed NULLs."""
    if any(t is None or normalise(t) is None for t in types):
        return None
    return _union_type(tuple(normalise(t).sql(dialect="duckdb")  # type: ignore[union-attr]
                             for t in types))


@lru_cache(maxsize=1024)
def _union_type(types: tuple[str, ...]) -> str | None:
    """:func:`common_type` of declared types (DuckDB SQL), remembered."""
    if len(types) == 1:
        return types[0]
    union = " UNION ALL ".join(f"SELECT CAST(NULL AS {t}) AS c" for t in types)
    try:
        answer = data_free_answer(f"SELECT typeof(c) FROM ({union})", [])
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
    selects = branches(body) if body is not None else None
    if not selects:
        return []
    names = [p.alias_or_name.lower() for p in selects[0].expressions]
    if column.name.lower() not in names or any(
            len(b.expressions) != len(names) or any(isinstance(p, exp.Star) for p in b.expressions)
            for b in selects):
        return []
    position = names.index(column.name.lower())
    return [(b, b.expressions[position].unalias()) for b in selects]


def branches(body: exp.Expression) -> list[exp.Select] | None:
    """The SELECTs of a query, in order: itself, or every branch of a set operation (None for
    anything else, or a set operation BY NAME, which matches columns by name)."""
    if isinstance(body, exp.Subquery):  # a parenthesised branch
        return branches(body.this)
    if isinstance(body, exp.Select):
        return [body]
    if isinstance(body, exp.SetOperation) and not body.args.get("by_name"):
        left, right = branches(body.this), branches(body.expression)
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
