"""Parse one SQL statement, enforce the allow-list, and qualify it against the metadata.

Contract: :func:`parse_query` returns a qualified ``exp.Query`` (every column reference carries its
table alias, USING is rewritten to ON, stars are expanded) in which only declared tables and
columns and allow-listed syntax occur. Anything else raises before any database is touched:
syntax errors and undeclared names as ``ProgrammingError``, non-queries as
``UnsupportedQueryError``, disallowed constructs as ``UnsupportedConstructError``.
"""

from __future__ import annotations

import difflib
import logging
import re
import weakref
from collections.abc import Iterable
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect, DialectType
from sqlglot.errors import OptimizeError, ParseError, SqlglotError, TokenError
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from dpsql.analysis import hygiene
from dpsql.analysis.allowlist import DEFAULT_SCHEMAS, check_allowed
from dpsql.analysis.constant_subqueries import inline_constant_subqueries
from dpsql.analysis.outputs import rename_duplicate_outputs
from dpsql.analysis.syntax import syntax_error
from dpsql.errors import ProgrammingError, UnsupportedQueryError
from dpsql.metadata import Metadata

#: sqlglot's DuckDB dialect, as one instance: a dialect given by name is looked up and
#: instantiated on every parse and every ``.sql()`` call (~5 us each, ~13 per query)
DIALECT = Dialect.get_or_raise("duckdb")

# sqlglot warns on stderr when it falls back to a generic Command; we reject those anyway.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

_STATEMENT_KEYWORDS = frozenset({
    "ALTER", "ANALYZE", "ATTACH", "BEGIN", "CALL", "CHECKPOINT", "COMMIT", "COPY", "CREATE",
    "DEALLOCATE", "DELETE", "DESCRIBE", "DETACH", "DROP", "EXECUTE", "EXPORT", "FORCE", "GRANT",
    "IMPORT", "INSERT", "INSTALL", "LOAD", "MERGE", "PIVOT", "PRAGMA", "PREPARE", "RESET",
    "REVOKE", "ROLLBACK", "SET", "SHOW", "SUMMARIZE", "TRUNCATE", "UNPIVOT", "UPDATE", "USE",
    "VACUUM",
    # Spark SQL commands (the Spark backend): jars, files, caches, UDF and table refreshes
    "ADD", "LIST", "CACHE", "UNCACHE", "CLEAR", "REFRESH", "MSCK", "REPAIR",
})


def _reject_statement_keyword(sql: str) -> None:
    """Name a non-SELECT statement by its first keyword (sqlglot cannot parse them all)."""
    words = sql.strip().split(None, 1)
    first = words[0].upper().rstrip(";") if words else ""
    if first in _STATEMENT_KEYWORDS:
        raise UnsupportedQueryError(
            f"{first} statements are not allowed: dpsql answers only SELECT queries that "
            "compute aggregates (COUNT, SUM, AVG)"
        )


def parse_sql(sql: str) -> exp.Expression:
    """Parse exactly one statement (DuckDB dialect); reject several statements or a non-query."""
    try:
        statements = [s for s in sqlglot.parse(sql, dialect=DIALECT) if s is not None]
    except (ParseError, TokenError) as err:
        _reject_statement_keyword(sql)
        raise syntax_error(err, sql) from None
    except SqlglotError as err:
        raise ProgrammingError(f"SQL syntax error: {err}") from None
    except RecursionError:
        raise UnsupportedQueryError(
            "the query nests expressions too deeply to parse: flatten it"
        ) from None
    if not statements:
        raise ProgrammingError("empty query: write one SELECT statement")
    if len(statements) > 1:
        raise UnsupportedQueryError(
            f"{len(statements)} statements in one string: send exactly one SELECT per query"
        )
    stmt = statements[0]
    if not isinstance(stmt, exp.Query):
        _reject_statement_keyword(sql)
        kind = stmt.key.upper() if not isinstance(stmt, exp.Command) else str(stmt.this).upper()
        raise UnsupportedQueryError(
            f"{kind} statements are not allowed: dpsql answers only SELECT queries that "
            "compute aggregates (COUNT, SUM, AVG)"
        )
    return stmt


def _strip_default_schema(query: exp.Expression) -> exp.Expression:
    for table in query.find_all(exp.Table):
        if table.db and table.db.lower() in DEFAULT_SCHEMAS:
            table.set("db", None)
    return query


def _top_star(query: exp.Expression) -> bool:
    return isinstance(query, exp.Select) and any(
        isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star)
        for e in query.expressions
    )


def star_error() -> UnsupportedQueryError:
    """``SELECT *`` at the top level of a query over private rows releases raw rows."""
    return UnsupportedQueryError(
        "SELECT * releases raw rows: dpsql answers aggregate queries only "
        "(COUNT, SUM, AVG, optionally with GROUP BY)"
    )


def _name_outputs(query: exp.Expression) -> None:
    """Alias unnamed top-level outputs with their SQL text (``COUNT(*)``), as the analyst wrote
    them, instead of qualify's ``_col_0``."""
    if not isinstance(query, exp.Select):
        return
    for i, item in enumerate(query.expressions):
        if not isinstance(item, (exp.Alias, exp.Column, exp.Star)):
            query.expressions[i] = exp.alias_(item, item.sql(dialect=DIALECT), quoted=True)


class _Schema(MappingSchema):
    """A MappingSchema whose ``column_names`` is memoised by what its answer depends on: the
    table's parts (each part's class, name and quoting, which is all sqlglot normalises and
    looks up) and the call's options. The mapping is never changed after it is built, so
    qualify reads the same lists without normalising and hashing a copied Table node per
    source per query."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._column_names: dict[tuple[object, ...], tuple[str, ...]] = {}

    def column_names(self, table: exp.Table | str, only_visible: bool = False,
                     dialect: DialectType = None, normalize: bool | None = None) -> list[str]:
        if not isinstance(table, exp.Table):
            return super().column_names(table, only_visible, dialect, normalize)
        key = (tuple((type(p), p.name, p.args.get("quoted")) for p in table.parts),
               only_visible, dialect, normalize)
        hit = self._column_names.get(key)
        if hit is None:
            hit = tuple(super().column_names(table, only_visible, dialect, normalize))
            if len(self._column_names) >= 4096:
                self._column_names.clear()
            self._column_names[key] = hit
        return list(hit)


#: id(metadata) -> (weak reference to it, its sqlglot MappingSchema). Building the schema
#: (normalising every table and column name) took about half of qualify's time per query;
#: qualify only reads it, and Metadata is immutable, so one per Metadata object suffices.
_SCHEMAS: dict[int, tuple[weakref.ref, MappingSchema]] = {}


def _schema(metadata: Metadata) -> MappingSchema:
    """The MappingSchema qualify would build from ``metadata.sqlglot_schema()``, memoised."""
    key = id(metadata)
    hit = _SCHEMAS.get(key)
    if hit is not None and hit[0]() is metadata:
        return hit[1]
    schema = _Schema(metadata.sqlglot_schema(), dialect=DIALECT)

    def forget(_ref: object, key: int = key) -> None:
        _SCHEMAS.pop(key, None)

    _SCHEMAS[key] = (weakref.ref(metadata, forget), schema)
    return schema


_POSITION_KEYS = ("line", "col", "start", "end")


_UNRESOLVED = re.compile(r"Column '([^']+)' could not be resolved|Unknown column: (\S+)")


def _column_hint(message: str, metadata: Metadata) -> str:
    """"; did you mean 'x'?" for an unresolved column close to a declared one (QA round 5:
    table and keyword typos had a hint, column typos none), else ""."""
    found = _UNRESOLVED.search(message)
    if found is None:
        return ""
    name = (found.group(1) or found.group(2)).lower()
    declared = sorted({c for t in metadata.tables.values() for c in t.columns})
    close = difflib.get_close_matches(name, declared, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def _drop_annotations(nodes: Iterable[exp.Expression]) -> None:
    """Drop the parser's source positions from every node's meta, and empty meta dicts and
    comment lists, in place. Nothing reads the positions after parsing (syntax errors take
    theirs from the ParseError); an empty meta or comment list means what None means (no
    marks, no comments: generation, equality and ``node.meta`` are unchanged), but every copy
    of the tree (qualify, the rewrite) deep-copies each one through ``copy.deepcopy``: the
    positions were a third of plan_execution's time, and qualify leaves an empty meta on
    most columns it resolves."""
    for node in nodes:
        meta = node._meta
        if meta is not None:
            for key in _POSITION_KEYS:
                meta.pop(key, None)
            if not meta:
                node._meta = None
        if node.comments is not None and not node.comments:
            node.comments = None


def parse_query(sql: str, metadata: Metadata, *, allow_top_star: bool = False,
                extra_funcs: tuple[type[exp.Expression], ...] = (),
                extra_anonymous: frozenset[str] = frozenset()) -> exp.Query:
    """Parse, allow-list check and qualify ``sql`` against ``metadata`` (see module contract).

    ``allow_top_star``: a top-level ``SELECT *`` is expanded rather than refused, and the
    qualified query's ``meta["dpsql_top_star"]`` says it was there (dpsql.analysis.blocks
    allows it over aggregate CTEs only, and raises :func:`star_error` otherwise).
    ``extra_funcs`` / ``extra_anonymous``: passed to the allow-list (``check_allowed``)."""
    hygiene.check_size(sql)
    query = parse_sql(sql)
    nodes = hygiene.check_shape(query)  # before anything recursive walks the tree
    _drop_annotations(nodes)
    top_star = _top_star(query)
    if top_star and not allow_top_star:
        raise star_error()
    check_allowed(query, metadata, nodes, extra_funcs=extra_funcs,
                  extra_anonymous=extra_anonymous)
    hygiene.check_names(nodes, metadata)
    hygiene.check_modifiers(query, nodes)
    hygiene.check_set_operations(nodes)
    hygiene.check_stars(nodes)
    query = _strip_default_schema(query)
    _name_outputs(query)
    try:
        qualified = qualify(
            query,
            schema=_schema(metadata),
            dialect=DIALECT,
            validate_qualify_columns=True,
            quote_identifiers=False,
            identify=False,
        )
    except OptimizeError as err:
        # sqlglot's sentence ends with a full stop ("... could not be resolved.")
        raise ProgrammingError(f"{str(err).rstrip('.')}: use columns declared in the metadata"
                               f"{_column_hint(str(err), metadata)}") from None
    except SqlglotError as err:
        raise ProgrammingError(str(err)) from None
    except (OverflowError, RecursionError) as err:  # e.g. ORDER BY 9223372036854775807
        raise ProgrammingError(
            f"the query could not be resolved ({type(err).__name__}): check that ORDER BY and "
            "GROUP BY positions name an output column"
        ) from None
    assert isinstance(qualified, exp.Query)
    nodes = list(qualified.walk())
    _drop_annotations(nodes)  # what qualify left
    hygiene.check_columns_resolved(qualified, nodes)
    if qualified.find(exp.Subquery, exp.In) is not None:
        inline_constant_subqueries(qualified)
        nodes = list(qualified.walk())
    hygiene.check_join_order(nodes)
    rename_duplicate_outputs(qualified, nodes)  # as DuckDB binds them (analysis/outputs.py)
    if top_star:
        qualified.meta["dpsql_top_star"] = True
    return qualified
