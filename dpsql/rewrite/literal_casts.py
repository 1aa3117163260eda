"""A string literal compared with a typed column must be a value of that type: refused before
any charge, rather than answered as if no row matched.

DuckDB casts a string literal compared with a DATE, TIMESTAMP, number or BOOLEAN column to the
column's type (``visit_date >= '2023-13-01'`` casts '2023-13-01' to DATE). When that cast
fails, the database raises, but only once a row reaches the comparison, so the rewrite wraps
such a comparison in TRY (dpsql.rewrite.totality): it becomes NULL on every row, and the query
was answered -- and charged -- as if no row matched (the QA round's finding: month 13 gave a
noisy 0). :func:`check_literal_casts` refuses it instead, with DataError naming the literal,
the column and an example of the type (SQLSTATE 22007 for a date or time, 22P02 else, as
PostgreSQL: dpsql.server.sqlstates).

Contract: the refusal reads the SQL text and the declared column types (public metadata)
alone, and its test is DuckDB's own cast of the literal, ``TRY_CAST(literal AS type)``, on a
private in-memory connection that holds no data. A literal that casts is left to the totality
rules as before (nothing new is proved total here). Columns of unknown type (undeclared, or of
a CTE or derived table), and a literal of an IN list or
BETWEEN beside a typed constant (compared in their common type) are not checked: they stay
TRY-wrapped, answered as no match where they cannot be cast. A string bound to a ``?`` that a
binary comparison sets against a typed column is checked the same way before the charge
(:func:`parameter_types`, :func:`check_parameter_casts`; for release blocks, selections and
sample-and-aggregate from the analyst's own query, :func:`parameter_types_of`).
"""

from __future__ import annotations

import threading
from functools import lru_cache

import duckdb
from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.errors import DataError
from dpsql.metadata import Metadata
from dpsql.rewrite.parameters import PARAM_PREFIX, number_parameters
from dpsql.rewrite.safe_compare import ColumnType, column_types, scope_nodes

T = exp.DataType.Type

#: column types whose comparison with a string literal casts the literal (family -> example)
_EXAMPLES = {
    **dict.fromkeys(exp.DataType.TEMPORAL_TYPES, "'2024-01-31 12:00:00'"),  # timestamps
    **dict.fromkeys((T.DATE, T.DATE32), "'2024-01-31'"),
    **dict.fromkeys((T.TIME, T.TIMETZ, T.TIME_NS), "'12:00:00'"),
    T.BOOLEAN: "'true'",
    **dict.fromkeys(exp.DataType.NUMERIC_TYPES, "'42'"),
}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ)

_lock = threading.Lock()
_connection: duckdb.DuckDBPyConnection | None = None


@lru_cache(maxsize=4096)
def casts(text: str, type_sql: str) -> bool:
    """Whether DuckDB casts the string ``text`` to ``type_sql`` (one data-free query per
    literal and type, remembered); True when DuckDB cannot name the type (nothing refused)."""
    global _connection
    with _lock:
        if _connection is None:
            _connection = duckdb.connect(":memory:")
        try:
            row = _connection.execute(f"SELECT TRY_CAST($1 AS {type_sql}) IS NOT NULL",
                                      [text]).fetchone()
        except duckdb.Error:  # a type name DuckDB does not take here: unknown, not refused
            return True
    return bool(row and row[0])


def _checked(node: exp.Expression, literal: exp.Expression) -> bool:
    """Whether DuckDB casts ``literal`` to the compared column's own type in ``node``: always
    for a binary comparison; for an IN list or BETWEEN only when its other operands are string
    literals or NULLs. Otherwise DuckDB compares in the common type of every operand (``s IN
    (100000, '70000')`` of a SMALLINT ``s`` as INTEGER, where '70000' casts: the rules red
    team), so the literal is left to TRY unchecked rather than refused on the column's type."""
    if not isinstance(node, (exp.In, exp.Between)):
        return True
    others = ([node.args["low"], node.args["high"]] if isinstance(node, exp.Between)
              else list(node.expressions))
    return all(isinstance(o.unnest(), exp.Null)
               or (isinstance(o.unnest(), exp.Literal) and o.unnest().is_string)
               for o in others if o is not literal)


def _pairs(node: exp.Expression) -> list[tuple[exp.Expression, exp.Expression]]:
    """The operand pairs a comparison ``node`` compares (none for other nodes)."""
    if isinstance(node, exp.Between):
        return [(node.this, node.args["low"]), (node.this, node.args["high"])]
    if isinstance(node, exp.In):
        return [(node.this, e) for e in node.expressions]
    if isinstance(node, _COMPARISONS):
        return [(node.this, node.expression), (node.expression, node.this)]
    return []


def check_literal_casts(node: exp.Expression, column_type: ColumnType) -> None:
    """Refuse (DataError) a comparison in ``node`` of a typed column with a string literal
    its type does not take (module contract); subqueries are their own scope."""
    for inner in scope_nodes(node):
        for column, operand in _pairs(inner):
            column, literal = column.unnest(), operand.unnest()
            if not (isinstance(column, exp.Column) and isinstance(literal, exp.Literal)
                    and literal.is_string and _checked(inner, operand)):
                continue
            dtype = normalise(column_type(column))
            if dtype is None or dtype.this not in _EXAMPLES:
                continue
            type_sql = dtype.sql(dialect="duckdb")
            if not casts(literal.this, type_sql):
                raise DataError(
                    f"{literal.sql(dialect='duckdb')} cannot be read as type {type_sql}, so "
                    f"its comparison with {column.sql(dialect='duckdb')} (of type {type_sql}) "
                    f"would be NULL on every row: write a value of type {type_sql} such as "
                    f"{_EXAMPLES[dtype.this]}")


#: one parameter compared with a typed column: (its position among the ``?``, the type's SQL)
ParameterType = tuple[int, str]


def parameter_types(query: exp.Expression, metadata: Metadata) -> tuple[ParameterType, ...]:
    """The ``?`` a binary comparison sets against a typed column (``d >= ?`` of a DATE ``d``):
    a string bound there is cast to the column's type once a row reaches it, so
    :func:`check_parameter_casts` checks it before any charge, as a literal is. The analysed
    query and the metadata alone (memoised with the prepared query)."""
    if query.find(exp.Placeholder) is None:
        return ()
    numbered = number_parameters(query)
    ctes = frozenset(cte.alias_or_name.lower() for cte in numbered.find_all(exp.CTE))
    out = []
    for select in numbered.find_all(exp.Select):
        column_type = column_types(select, metadata, ctes)
        for inner in scope_nodes(select):
            if not isinstance(inner, _COMPARISONS):
                continue
            for column, marker in ((inner.this, inner.expression),
                                   (inner.expression, inner.this)):
                column, marker = column.unnest(), marker.unnest()
                if not (isinstance(column, exp.Column) and isinstance(marker, exp.Placeholder)
                        and str(marker.this).startswith(PARAM_PREFIX)):
                    continue
                dtype = normalise(column_type(column))
                if dtype is not None and dtype.this in _EXAMPLES:
                    out.append((int(str(marker.this)[len(PARAM_PREFIX):]),
                                dtype.sql(dialect="duckdb")))
    return tuple(out)


def check_parameter_casts(types: tuple[ParameterType, ...], values: list[object]) -> None:
    """Refuse (DataError) a string parameter its compared column's type cannot read
    (:func:`parameter_types`), before any charge: the analyst's own value, public."""
    for position, type_sql in types:
        value = values[position] if position < len(values) else None
        if isinstance(value, str) and not casts(value, type_sql):
            raise DataError(
                f"parameter {position + 1} ({value[:40]!r}) cannot be read as type {type_sql}, "
                f"so its comparison would be NULL on every row: bind a value of type "
                f"{type_sql} such as {_EXAMPLES[normalise(type_sql).this]}")  # type: ignore[union-attr]


def parameter_types_of(sql: str, metadata: Metadata) -> tuple[ParameterType, ...]:
    """:func:`parameter_types` of the analyst's ``sql`` itself, for the requests whose prepared
    form keeps no single analysed query (release blocks, selections, sample-and-aggregate):
    parsed and qualified with every aggregate and the SAMPLE_AGGREGATE wrapper allowed (the
    request's own analysis already judged them); () when it does not parse."""
    from dpsql.analysis.parse import parse_query
    from dpsql.errors import Error
    from dpsql.sample_aggregate.analysis import WRAPPER

    try:
        query = parse_query(sql, metadata, allow_top_star=True, extra_funcs=(exp.AggFunc,),
                            extra_anonymous=frozenset({WRAPPER}))
    except Error:
        return ()
    return parameter_types(query, metadata)
