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

The compared operand's type is read from the SQL and the metadata alone
(dpsql.rewrite.operand_types: declared columns, CASTs, date parts and truncations, aggregates,
arithmetic and COALESCE-like functions of those, CTE, derived-table and set-operation columns,
each typed as DuckDB types it). The operand may be either side of a comparison, or a simple
CASE's operand against each WHEN value. Contract: the refusal reads the SQL text and the
declared column types (public metadata) alone, and its test is DuckDB's own cast of the
literal, ``TRY_CAST(literal AS type)``, on a private in-memory connection that holds no data.
A literal that casts is left to the totality rules as before (nothing new is proved total
here: these types serve this check only, never a totality rule). Operands of unknown type
(undeclared columns, other functions, a window), and a literal of an IN list or BETWEEN
beside a typed constant (compared in their common type) are not checked: they stay
TRY-wrapped, answered as no match
where they cannot be cast. The whole query as written is checked before the charge, HAVING and
a release block's outer query included (their comparisons run in post-processing, after it:
dpsql.rewrite.totality.check_literals_pass; :func:`check_query_literals`). A string bound to a
``?`` set against such an operand is checked the same way before the charge
(:func:`parameter_types`, :func:`check_parameter_casts`; for release blocks, selections and
sample-and-aggregate from the analyst's own query, :func:`analyst_query`).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import duckdb
from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.analysis.parse import parse_query
from dpsql.errors import DataError, Error
from dpsql.metadata import Metadata
from dpsql.rewrite.operand_types import OperandType, data_free_answer, operand_types
from dpsql.rewrite.parameters import PARAM_PREFIX, number_parameters
from dpsql.rewrite.safe_compare import scope_nodes
from dpsql.sample_aggregate.analysis import WRAPPER

T = exp.DataType.Type

#: column types whose comparison with a string literal casts the literal (family -> example)
_EXAMPLES = {
    **dict.fromkeys(exp.DataType.TEMPORAL_TYPES, "'2024-01-31 12:00:00'"),  # timestamps
    **dict.fromkeys((T.DATE, T.DATE32), "'2024-01-31'"),
    **dict.fromkeys((T.TIME, T.TIMETZ, T.TIME_NS), "'12:00:00'"),
    T.BOOLEAN: "'true'",
    T.UUID: "'123e4567-e89b-12d3-a456-426614174000'",
    **dict.fromkeys(exp.DataType.NUMERIC_TYPES, "'42'"),
}
#: the types whose unreadable literal is PostgreSQL's 22007 (invalid datetime format)
_TEMPORAL = frozenset({*exp.DataType.TEMPORAL_TYPES, T.DATE, T.DATE32, T.TIME, T.TIMETZ,
                       T.TIME_NS})
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ)


@lru_cache(maxsize=4096)
def casts(text: str, type_sql: str) -> bool:
    """Whether DuckDB casts the string ``text`` to ``type_sql`` (one data-free query per
    literal and type, remembered); True when DuckDB cannot name the type (nothing refused)."""
    try:
        return bool(data_free_answer(f"SELECT TRY_CAST($1 AS {type_sql}) IS NOT NULL", [text]))
    except duckdb.Error:  # a type name DuckDB does not take here: unknown, not refused
        return True


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


def _typed_comparisons(node: exp.Expression, operand_type: OperandType, *, lists: bool
                       ) -> Iterator[tuple[exp.Expression, exp.Expression, exp.Expression, str,
                                           str]]:
    """``(comparison, operand, other operand, the operand type's SQL, an example of it)`` for
    every comparison in ``node``'s scope that sets an operand whose type
    (:func:`operand_types`) casts a string (:data:`_EXAMPLES`) against another operand:
    binary comparisons either way round, a simple CASE's operand against each WHEN value, and
    with ``lists`` each value of an IN list or BETWEEN as well."""
    for inner in scope_nodes(node):
        if isinstance(inner, _COMPARISONS):
            pairs = [(inner.this, inner.expression), (inner.expression, inner.this)]
        elif isinstance(inner, exp.Case) and inner.this is not None:
            # a simple CASE compares its operand with each WHEN value, one by one, as x = v
            pairs = [(inner.this, branch.this) for branch in inner.args.get("ifs") or []]
        elif lists and isinstance(inner, exp.Between):
            pairs = [(inner.this, inner.args["low"]), (inner.this, inner.args["high"])]
        elif lists and isinstance(inner, exp.In):
            pairs = [(inner.this, e) for e in inner.expressions]
        else:
            continue
        for operand, other in pairs:
            if isinstance(operand.unnest(), (exp.Literal, exp.Placeholder)):
                continue
            dtype = normalise(operand_type(operand))
            if dtype is not None and dtype.this in _EXAMPLES:
                yield (inner, operand.unnest(), other, dtype.sql(dialect="duckdb"),
                       _EXAMPLES[dtype.this])


def _refusal(what: str, comparison: str, type_sql: str, example: str, verb: str) -> DataError:
    """The DataError naming ``what`` cannot be read, the comparison and a value to use; its
    SQLSTATE from the type, as PostgreSQL's (a date or time: 22007, invalid datetime format;
    else 22P02, invalid text representation), not from the analyst's words."""
    dtype = normalise(type_sql)
    refusal = DataError(f"{what} cannot be read as type {type_sql}, so {comparison} would be "
                        f"NULL on every row: {verb} a value of type {type_sql} such as "
                        f"{example}")
    refusal.sqlstate = "22007" if dtype is not None and dtype.this in _TEMPORAL else "22P02"
    return refusal


def check_literal_casts(node: exp.Expression, operand_type: OperandType) -> None:
    """Refuse (DataError) a comparison in ``node`` of a typed operand (:func:`operand_types`)
    with a string literal its type does not take (module contract); subqueries are their own
    scope."""
    for inner, column, operand, type_sql, example in _typed_comparisons(node, operand_type,
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
    """The ``?`` a binary comparison sets against a typed operand (``d >= ?`` of a DATE ``d``,
    :func:`operand_types`): a string bound there is cast to that type once a row reaches it, so
    :func:`check_parameter_casts` checks it before any charge, as a literal is. The analysed
    query and the metadata alone (memoised with the prepared query)."""
    if query.find(exp.Placeholder) is None:
        return ()
    numbered = number_parameters(query)
    ctes = frozenset(cte.alias_or_name.lower() for cte in numbered.find_all(exp.CTE))
    out = []
    for select in numbered.find_all(exp.Select):
        for _, _, other, type_sql, example in _typed_comparisons(
                select, operand_types(select, metadata, ctes), lists=False):
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


def analyst_query(sql: str, metadata: Metadata) -> exp.Expression | None:
    """The analyst's ``sql`` parsed and qualified as a whole, for the requests whose prepared
    form keeps no single analysed query (release blocks, selections, sample-and-aggregate):
    every aggregate and the SAMPLE_AGGREGATE wrapper allowed (the request's own analysis
    already judged them); None when it does not parse."""
    try:
        return parse_query(sql, metadata, allow_top_star=True, extra_funcs=(exp.AggFunc,),
                           extra_anonymous=frozenset({WRAPPER}))
    except Error:
        return None


def check_query_literals(query: exp.Expression, metadata: Metadata) -> None:
    """:func:`check_literal_casts` on every SELECT of ``query`` (a release block's outer query
    is post-processing, run after the charge: it is checked here, before)."""
    ctes = frozenset(cte.alias_or_name.lower() for cte in query.find_all(exp.CTE))
    for select in query.find_all(exp.Select):
        check_literal_casts(select, operand_types(select, metadata, ctes))
