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
from collections.abc import Iterator
from functools import lru_cache

import duckdb
from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.analysis.parse import parse_query
from dpsql.errors import DataError, Error
from dpsql.metadata import Metadata
from dpsql.rewrite.parameters import PARAM_PREFIX, number_parameters
from dpsql.rewrite.safe_compare import ColumnType, column_types, scope_nodes
from dpsql.sample_aggregate.analysis import WRAPPER

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


def _typed_comparisons(node: exp.Expression, column_type: ColumnType, *, lists: bool
                       ) -> Iterator[tuple[exp.Expression, exp.Column, exp.Expression, str, str]]:
    """``(comparison, column, other operand, the column type's SQL, an example of it)`` for
    every comparison in ``node``'s
    scope that sets a bare column whose declared type casts a string (:data:`_EXAMPLES`)
    against another operand: binary comparisons either way round, and with ``lists`` each
    value of an IN list or BETWEEN as well."""
    for inner in scope_nodes(node):
        if isinstance(inner, _COMPARISONS):
            pairs = [(inner.this, inner.expression), (inner.expression, inner.this)]
        elif lists and isinstance(inner, exp.Between):
            pairs = [(inner.this, inner.args["low"]), (inner.this, inner.args["high"])]
        elif lists and isinstance(inner, exp.In):
            pairs = [(inner.this, e) for e in inner.expressions]
        else:
            continue
        for operand, other in pairs:
            column = operand.unnest()
            if not isinstance(column, exp.Column):
                continue
            dtype = normalise(column_type(column))
            if dtype is not None and dtype.this in _EXAMPLES:
                yield inner, column, other, dtype.sql(dialect="duckdb"), _EXAMPLES[dtype.this]


def _refusal(what: str, comparison: str, type_sql: str, example: str, verb: str) -> DataError:
    """The DataError naming ``what`` cannot be read, the comparison and a value to use."""
    return DataError(f"{what} cannot be read as type {type_sql}, so {comparison} would be "
                     f"NULL on every row: {verb} a value of type {type_sql} such as {example}")


def check_literal_casts(node: exp.Expression, column_type: ColumnType) -> None:
    """Refuse (DataError) a comparison in ``node`` of a typed column with a string literal
    its type does not take (module contract); subqueries are their own scope."""
    for inner, column, operand, type_sql, example in _typed_comparisons(node, column_type,
                                                                        lists=True):
        literal = operand.unnest()
        if (isinstance(literal, exp.Literal) and literal.is_string
                and _checked(inner, operand) and not casts(literal.this, type_sql)):
            raise _refusal(literal.sql(dialect="duckdb"),
                           f"its comparison with {column.sql(dialect='duckdb')} (of type "
                           f"{type_sql})", type_sql, example, "write")


#: one parameter compared with a typed column: (its position among the ``?``, the type's SQL,
#: an example of the type)
ParameterType = tuple[int, str, str]


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
        for _, _, other, type_sql, example in _typed_comparisons(select, column_type,
                                                                 lists=False):
            marker = other.unnest()
            if isinstance(marker, exp.Placeholder) and str(marker.this).startswith(PARAM_PREFIX):
                out.append((int(str(marker.this)[len(PARAM_PREFIX):]), type_sql, example))
    return tuple(out)


def check_parameter_casts(types: tuple[ParameterType, ...], values: list[object]) -> None:
    """Refuse (DataError) a string parameter its compared column's type cannot read
    (:func:`parameter_types`), before any charge: the analyst's own value, public."""
    for position, type_sql, example in types:
        value = values[position] if position < len(values) else None
        if isinstance(value, str) and not casts(value, type_sql):
            raise _refusal(f"parameter {position + 1} ({value[:40]!r})", "its comparison",
                           type_sql, example, "bind")


def parameter_types_of(sql: str, metadata: Metadata) -> tuple[ParameterType, ...]:
    """:func:`parameter_types` of the analyst's ``sql`` itself, for the requests whose prepared
    form keeps no single analysed query (release blocks, selections, sample-and-aggregate):
    parsed and qualified with every aggregate and the SAMPLE_AGGREGATE wrapper allowed (the
    request's own analysis already judged them); () when it does not parse."""
    try:
        query = parse_query(sql, metadata, allow_top_star=True, extra_funcs=(exp.AggFunc,),
                            extra_anonymous=frozenset({WRAPPER}))
    except Error:
        return ()
    return parameter_types(query, metadata)
