"""Parse one SQL statement, enforce the allow-list, and qualify it against the metadata.

Contract: :func:`parse_query` returns a qualified ``exp.Query`` (every column reference carries its
table alias, USING is rewritten to ON, stars are expanded) in which only declared tables and
columns and allow-listed syntax occur. Anything else raises before any database is touched:
syntax errors and undeclared names as ``ProgrammingError``, non-queries as
``UnsupportedQueryError``, disallowed constructs as ``UnsupportedConstructError``.
"""

from __future__ import annotations

import logging
import weakref

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import OptimizeError, ParseError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from dpsql.analysis import hygiene
from dpsql.errors import (
    ProgrammingError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import Metadata

#: sqlglot's DuckDB dialect, as one instance: a dialect given by name is looked up and
#: instantiated on every parse and every ``.sql()`` call (~5 us each, ~13 per query)
DIALECT = Dialect.get_or_raise("duckdb")

# sqlglot warns on stderr when it falls back to a generic Command; we reject those anyway.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

#: Schema prefixes that name the default namespace (FLEX's ``public``, DuckDB's ``main``).
_DEFAULT_SCHEMAS = frozenset({"public", "main"})
_SYSTEM_SCHEMAS = frozenset({"information_schema", "pg_catalog", "system", "temp"})
#: Spark reads ``parquet.`/path``` (a data-source name as schema, a path as table) as a file.
_FILE_SOURCE_SCHEMAS = frozenset({
    "parquet", "csv", "json", "orc", "avro", "text", "binaryfile", "delta", "jdbc", "libsvm",
    "xml", "image", "hive", "file",
})

#: Syntax nodes a query may contain. Everything else is rejected: an allow-list, not a deny-list.
_ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.From, exp.Join, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered,
    exp.Limit, exp.Offset, exp.With, exp.CTE, exp.Subquery, exp.Union, exp.Intersect,
    exp.Except, exp.TableAlias, exp.Alias, exp.Identifier, exp.Table, exp.Column, exp.Literal,
    exp.Star, exp.Paren, exp.Neg, exp.Not, exp.And, exp.Or, exp.EQ, exp.NEQ, exp.GT, exp.GTE,
    exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.In, exp.Between, exp.Like,
    exp.ILike, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Null, exp.Boolean,
    exp.Placeholder, exp.DataType, exp.DataTypeParam, exp.Case, exp.If, exp.Exists,
    exp.Distinct, exp.Interval, exp.Var, exp.Tuple, exp.DPipe,
)

#: Deterministic scalar functions and the three aggregates with sensitivity rules.
_ALLOWED_FUNCS: tuple[type[exp.Expression], ...] = (
    exp.Count, exp.Sum, exp.Avg,
    exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Sqrt, exp.Ln, exp.Log, exp.Exp, exp.Pow,
    exp.Sign, exp.Greatest, exp.Least, exp.Coalesce, exp.Nullif, exp.Cast, exp.TryCast,
    exp.Upper, exp.Lower, exp.Length, exp.Substring, exp.Trim, exp.Concat, exp.Left,
    exp.Right, exp.StrPosition, exp.StartsWith, exp.Extract, exp.Year, exp.Month, exp.Day,
    exp.Quarter, exp.DayOfWeek, exp.DateTrunc, exp.TimestampTrunc, exp.DateAdd, exp.DateSub,
    exp.DateDiff, exp.If, exp.Case,
)

#: Clauses no sensitivity rule covers a subquery in (WHERE, FROM and WITH are analysed).
_CLAUSES_WITHOUT_SUBQUERIES: tuple[type[exp.Expression], ...] = (
    exp.Order, exp.Limit, exp.Offset, exp.Group, exp.Fetch,
)

_NONDETERMINISTIC: tuple[type[exp.Expression], ...] = (
    exp.Rand, exp.Uuid, exp.CurrentDate, exp.CurrentTimestamp, exp.CurrentTime,
    exp.CurrentDatetime,
)
_NONDETERMINISTIC_NAMES = frozenset(
    {"now", "random", "uuid", "gen_random_uuid", "setseed", "current_timestamp",
     "get_current_timestamp", "today", "transaction_timestamp", "current_localtimestamp"}
)
_BOUNDLESS_AGGREGATES = "MIN, MAX, MEDIAN, STDDEV, VARIANCE, quantiles and other aggregates"


def _position(err: ParseError) -> tuple[int, int] | None:
    if err.errors:
        first = err.errors[0]
        if first.get("line") is not None:
            return int(first["line"]), int(first.get("col") or 0)
    return None


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
    except ParseError as err:
        _reject_statement_keyword(sql)
        detail = err.errors[0].get("description") if err.errors else str(err)
        raise ProgrammingError(f"SQL syntax error: {detail}", position=_position(err)) from None
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


def check_allowed(query: exp.Expression, metadata: Metadata) -> None:
    """Raise unless every node is allow-listed and every table reference is a declared table."""
    for node in query.walk():
        if isinstance(node, exp.Table):
            _check_table(node, metadata)
        elif isinstance(node, exp.Anonymous):
            name = str(node.this).lower()
            if name in _NONDETERMINISTIC_NAMES:
                raise UnsupportedConstructError(
                    f"nondeterministic function {name}() is not allowed: remove it "
                    "(dpsql adds all randomness itself)"
                )
            raise UnsupportedConstructError(
                f"function {name}() is not allowed: dpsql only runs built-in deterministic "
                "scalar functions and COUNT/SUM/AVG (no macros or user functions)"
            )
        elif isinstance(node, exp.Placeholder) and node.this:
            raise ProgrammingError(
                f"parameter marker {node.sql(dialect=DIALECT)} is not supported: dpsql uses "
                "qmark parameters, write ? and pass the values in order"
            )
        elif isinstance(node, exp.Window):
            raise UnsupportedConstructError(
                "window functions (OVER ...) are not supported: use GROUP BY instead"
            )
        elif isinstance(node, exp.Lateral):
            raise UnsupportedConstructError("LATERAL is not supported: use a join or GROUP BY")
        elif isinstance(node, exp.With) and node.args.get("recursive"):
            raise UnsupportedConstructError(
                "recursive CTEs (WITH RECURSIVE) are not supported: write a non-recursive query"
            )
        elif isinstance(node, exp.Distinct) and node.args.get("on") is not None:
            # DISTINCT ON keeps one arbitrary row per key: the kept rows' other columns repeat
            # across keys (no mf 1) and a changed row can swap two representatives.
            raise UnsupportedConstructError(
                "DISTINCT ON is not supported: it keeps an arbitrary row per key; use GROUP BY"
            )
        elif isinstance(node, _CLAUSES_WITHOUT_SUBQUERIES) and node.find(exp.Query):
            # No sensitivity rule looks at these clauses: an exact private aggregate in
            # LIMIT (SELECT COUNT(*) ...) would set how many rows are released, and a scalar
            # subquery's "more than one row" error depends on private data.
            clause = type(node).__name__.upper().replace("ORDER", "ORDER BY")
            clause = clause.replace("GROUP", "GROUP BY")
            raise UnsupportedConstructError(
                f"a subquery in {clause} is not supported: only FROM, WITH and IN / EXISTS "
                "conditions in WHERE may contain subqueries"
            )
        elif isinstance(node, _ALLOWED_NODES):
            continue
        elif isinstance(node, exp.Func):
            _check_function(node)
        else:
            raise UnsupportedConstructError(_describe_unsupported(node))


def _describe_unsupported(node: exp.Expression) -> str:
    if isinstance(node, exp.TableSample):
        return "TABLESAMPLE / USING SAMPLE is not supported: dpsql needs the exact aggregate"
    if isinstance(node, exp.Values):
        return "VALUES lists are not supported as relations: query declared tables"
    if isinstance(node, (exp.Unnest, exp.Explode)):
        return "UNNEST is not supported: query declared tables"
    if isinstance(node, exp.Qualify):
        return "QUALIFY is not supported: window functions have no sensitivity rule"
    if isinstance(node, (exp.Cube, exp.Rollup, exp.GroupingSets)):
        return "ROLLUP / CUBE / GROUPING SETS are not supported: use one plain GROUP BY per query"
    if isinstance(node, exp.Filter):
        return "aggregate FILTER (WHERE ...) is not supported: move the condition into WHERE"
    sql = node.sql(dialect=DIALECT)
    snippet = sql if len(sql) <= 60 else sql[:57] + "..."
    return f"SQL construct {node.key.upper()} ({snippet}) is not supported by dpsql"


def _check_function(node: exp.Func) -> None:
    if isinstance(node, _NONDETERMINISTIC):
        raise UnsupportedConstructError(
            f"nondeterministic function {node.sql_name()} is not allowed: remove it "
            "(dpsql adds all randomness itself)"
        )
    if isinstance(node, _ALLOWED_FUNCS):
        return
    if isinstance(node, exp.AggFunc):
        raise UnsupportedConstructError(
            f"aggregate {node.sql_name()} is not supported: {_BOUNDLESS_AGGREGATES} have no "
            "bounded sensitivity; use COUNT, SUM or AVG (with declared bounds)"
        )
    raise UnsupportedConstructError(
        f"function {node.sql_name()}() is not allowed: dpsql runs only allow-listed "
        "deterministic scalar functions"
    )


def _check_table(table: exp.Table, metadata: Metadata) -> None:
    if not isinstance(table.this, exp.Identifier):
        # read_csv, glob, duckdb_tables(), ...: a function in FROM position
        func = table.this
        name = func.name if isinstance(func, exp.Anonymous) else getattr(func, "sql_name", str)()
        raise UnsupportedConstructError(
            f"table function {name}() is not allowed: query declared tables only"
        )
    if table.args.get("catalog") is not None:
        raise UnsupportedConstructError(
            f"catalog-qualified table {table.sql(dialect=DIALECT)} is not reachable: "
            "use the declared table name without a catalog"
        )
    db = table.db.lower() if table.db else ""
    if db in _SYSTEM_SCHEMAS or table.name.lower().startswith(("duckdb_", "pragma_", "sqlite_")):
        raise UnsupportedConstructError(
            f"system catalog {table.sql(dialect=DIALECT)} is not reachable: query declared tables"
        )
    if db in _FILE_SOURCE_SCHEMAS:
        raise UnsupportedConstructError(
            f"{table.sql(dialect=DIALECT)} reads files (a Spark file source): query declared "
            "tables only"
        )
    if db and db not in _DEFAULT_SCHEMAS:
        raise ProgrammingError(
            f"schema {table.db!r} is unknown: write the declared table name without a schema"
        )
    name = table.name
    if _is_cte_reference(table):
        return
    if any(ch in name for ch in "/\\*?") or name.lower().endswith(
        (".csv", ".parquet", ".json", ".tsv", ".gz", ".db", ".duckdb")
    ):
        raise UnsupportedConstructError(
            f"file path {name!r} cannot be used as a table: query declared tables only"
        )
    if "." in name:
        # "main.orders" quoted is ONE identifier: DuckDB looks for a table named main.orders,
        # while a schema prefix is dropped when the metadata is searched (Metadata.table), so
        # the analysis would read orders' max frequencies for a different table.
        raise ProgrammingError(
            f"table name {name!r} contains a dot inside one quoted identifier, which names a "
            "different table than the declared one: write the declared table name, or "
            "schema.table with each part quoted separately (\"main\".\"orders\")"
        )
    metadata.table(name)  # raises ProgrammingError for undeclared tables


def _is_cte_reference(table: exp.Table) -> bool:
    if table.db:
        return False
    name = table.name.lower()
    node: exp.Expression | None = table
    while node is not None:
        with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
        if with_ is not None and any(c.alias_or_name.lower() == name for c in with_.expressions):
            return True
        node = node.parent
    return False


def _strip_default_schema(query: exp.Expression) -> exp.Expression:
    for table in query.find_all(exp.Table):
        if table.db and table.db.lower() in _DEFAULT_SCHEMAS:
            table.set("db", None)
    return query


def _reject_star(query: exp.Expression) -> None:
    """``SELECT *`` at the top level releases raw rows (checked before qualify expands it)."""
    if isinstance(query, exp.Select) and any(
        isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star)
        for e in query.expressions
    ):
        raise UnsupportedQueryError(
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
    schema = MappingSchema(metadata.sqlglot_schema(), dialect=DIALECT)

    def forget(_ref: object, key: int = key) -> None:
        _SCHEMAS.pop(key, None)

    _SCHEMAS[key] = (weakref.ref(metadata, forget), schema)
    return schema


_POSITION_KEYS = ("line", "col", "start", "end")


def _drop_positions(query: exp.Expression) -> None:
    """Drop the parser's source positions from every node's meta, in place: nothing reads them
    after parsing (syntax errors take theirs from the ParseError), and every copy of the tree
    (qualify, the rewrite) deep-copies them in Python, a third of plan_execution's time."""
    for node in query.walk():
        meta = getattr(node, "_meta", None)
        if meta:
            for key in _POSITION_KEYS:
                meta.pop(key, None)
            if not meta:
                node._meta = None


def parse_query(sql: str, metadata: Metadata) -> exp.Query:
    """Parse, allow-list check and qualify ``sql`` against ``metadata`` (see module contract)."""
    hygiene.check_size(sql)
    query = parse_sql(sql)
    hygiene.check_shape(query)  # before anything recursive walks the tree
    _drop_positions(query)
    _reject_star(query)
    check_allowed(query, metadata)
    hygiene.check_names(query, metadata)
    hygiene.check_modifiers(query)
    hygiene.check_set_operations(query)
    hygiene.check_stars(query)
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
        raise ProgrammingError(f"{err}: use columns declared in the metadata") from None
    except SqlglotError as err:
        raise ProgrammingError(str(err)) from None
    except (OverflowError, RecursionError) as err:  # e.g. ORDER BY 9223372036854775807
        raise ProgrammingError(
            f"the query could not be resolved ({type(err).__name__}): check that ORDER BY and "
            "GROUP BY positions name an output column"
        ) from None
    assert isinstance(qualified, exp.Query)
    hygiene.check_columns_resolved(qualified)
    return qualified
