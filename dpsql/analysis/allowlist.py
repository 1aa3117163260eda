"""The allow-list: which syntax a query may contain, and which tables it may name.

Contract of :func:`check_allowed`: it raises unless every node of the parsed query is an
allow-listed construct (a deterministic scalar function, COUNT/SUM/AVG, the clauses and
operators of :data:`_ALLOWED_NODES`) and every table reference is a declared table or a CTE:
table functions, files, system catalogs, other schemas or catalogs, window functions, LATERAL,
recursive CTEs, DISTINCT ON and subqueries outside FROM / WITH / WHERE are refused with
``UnsupportedConstructError`` (``ProgrammingError`` for undeclared names and named parameter
markers). It reads the SQL and the public metadata only.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp

from dpsql.analysis.aggregates import VARIANCE_TYPES
from dpsql.errors import ProgrammingError, UnsupportedConstructError
from dpsql.metadata import Metadata

#: the dialect error messages quote constructs in (dpsql.analysis.parse.DIALECT's)
_DIALECT = "duckdb"

#: Schema prefixes that name the default namespace (FLEX's ``public``, DuckDB's ``main``).
DEFAULT_SCHEMAS = frozenset({"public", "main"})
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
    # day and time parts, names and string functions (QA round 7's most missed; each checked
    # on Spark against DuckDB: tests/backends/test_spark_functions.py)
    exp.DayOfYear, exp.Week, exp.WeekOfYear, exp.DayOfWeekIso, exp.Hour, exp.Minute,
    exp.Second, exp.Monthname, exp.Dayname, exp.LastDay, exp.Replace, exp.Reverse,
    exp.Contains,
)

#: allowed functions DuckDB calls with one argument, which sqlglot may read with more
_ONE_ARGUMENT: tuple[type[exp.Expression], ...] = (
    exp.DayOfYear, exp.Week, exp.WeekOfYear, exp.DayOfWeekIso, exp.Hour, exp.Minute,
    exp.Second, exp.Monthname, exp.Dayname, exp.LastDay, exp.Reverse,
)

#: Aggregates released through COUNT / SUM measurements (dpsql.analysis.aggregates): only in the
#: outermost SELECT, whose aggregates are measured; a subquery's or CTE's aggregates run inside
#: the exact query, where no totality rule covers them yet.
_TOP_LEVEL_AGGREGATES: tuple[type[exp.Expression], ...] = (exp.Filter, *VARIANCE_TYPES)

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
_BOUNDLESS_AGGREGATES = "MIN, MAX, MEDIAN, quantiles and other aggregates"


def check_allowed(query: exp.Expression, metadata: Metadata,
                  nodes: Iterable[exp.Expression] | None = None, *,
                  extra_funcs: tuple[type[exp.Expression], ...] = (),
                  extra_anonymous: frozenset[str] = frozenset()) -> None:
    """Raise unless every node is allow-listed and every table reference is a declared table.

    ``nodes``: ``query``'s nodes breadth first (``hygiene.check_shape``), else it is walked.
    ``extra_funcs`` / ``extra_anonymous`` (lower-case names): functions a caller with its own
    rules for them also allows (dpsql.sample_aggregate: its aggregates and its wrapper).
    """
    for node in query.walk() if nodes is None else nodes:
        cls = type(node)
        rules = _RULES_OF.get(cls)
        if rules is None:
            rules = _RULES_OF[cls] = tuple(r for r, types in _RULES if issubclass(cls, types))
        # The first rule whose type matches decides, as an if/elif chain over _RULES would;
        # the conditional ones (_PLACEHOLDER, _WITH, _DISTINCT, _CLAUSE) fall through to the
        # next matching rule when their condition does not hold.
        for rule in rules:
            if rule is _ALLOWED:
                break
            if rule is _TABLE:
                _check_table(node, metadata)
                break
            if rule is _FUNC:
                if not isinstance(node, extra_funcs):
                    _check_function(node)
                break
            if rule is _ANONYMOUS and str(node.this).lower() in extra_anonymous:
                break
            if rule is _TOP_LEVEL:
                _check_top_level(node, query)
                break
            error = _refusal(rule, node)
            if error is not None:
                raise error
        else:
            raise UnsupportedConstructError(_describe_unsupported(node))


# check_allowed's rules, in the order they apply: a node is judged by the first rule its type
# matches (the conditional rules only when their condition holds, see _refusal).
_TABLE, _ANONYMOUS, _PLACEHOLDER, _WINDOW, _LATERAL, _WITH, _DISTINCT, _CLAUSE, _ALLOWED, \
    _FUNC, _TOP_LEVEL = range(11)
_RULES: tuple[tuple[int, type | tuple[type, ...]], ...] = (
    (_TABLE, exp.Table), (_ANONYMOUS, exp.Anonymous), (_PLACEHOLDER, exp.Placeholder),
    (_WINDOW, exp.Window), (_LATERAL, exp.Lateral), (_WITH, exp.With),
    (_DISTINCT, exp.Distinct), (_CLAUSE, _CLAUSES_WITHOUT_SUBQUERIES),
    (_TOP_LEVEL, _TOP_LEVEL_AGGREGATES), (_ALLOWED, _ALLOWED_NODES), (_FUNC, exp.Func),
)
#: node class -> the rules its type matches, in order (the class alone decides this)
_RULES_OF: dict[type, tuple[int, ...]] = {}


def _refusal(rule: int, node: exp.Expression) -> Exception | None:
    """The error a refusing rule raises for ``node``; None when a conditional rule's condition
    does not hold (the next matching rule then decides)."""
    if rule == _ANONYMOUS:
        name = str(node.this).lower()
        if name in _NONDETERMINISTIC_NAMES:
            return UnsupportedConstructError(
                f"nondeterministic function {name}() is not allowed: remove it "
                "(dpsql adds all randomness itself)"
            )
        return UnsupportedConstructError(_not_allowed(name))
    if rule == _PLACEHOLDER:
        if not node.this:
            return None
        return ProgrammingError(
            f"parameter marker {node.sql(dialect=_DIALECT)} is not supported: dpsql uses "
            "qmark parameters, write ? and pass the values in order"
        )
    if rule == _WINDOW:
        return UnsupportedConstructError(
            "window functions (OVER ...) are not supported: use GROUP BY instead"
        )
    if rule == _LATERAL:
        return UnsupportedConstructError("LATERAL is not supported: use a join or GROUP BY")
    if rule == _WITH:
        if not node.args.get("recursive"):
            return None
        return UnsupportedConstructError(
            "recursive CTEs (WITH RECURSIVE) are not supported: write a non-recursive query"
        )
    if rule == _DISTINCT:
        if node.args.get("on") is None:
            return None
        # DISTINCT ON keeps one arbitrary row per key: the kept rows' other columns repeat
        # across keys (no mf 1) and a changed row can swap two representatives.
        return UnsupportedConstructError(
            "DISTINCT ON is not supported: it keeps an arbitrary row per key; use GROUP BY"
        )
    assert rule == _CLAUSE
    if not node.find(exp.Query):
        return None
    # No sensitivity rule looks at these clauses: an exact private aggregate in LIMIT (SELECT
    # COUNT(*) ...) would set how many rows are released, and a scalar subquery's "more than
    # one row" error depends on private data.
    clause = type(node).__name__.upper().replace("ORDER", "ORDER BY")
    clause = clause.replace("GROUP", "GROUP BY")
    return UnsupportedConstructError(
        f"a subquery in {clause} is not supported: only FROM, WITH and IN / EXISTS "
        "conditions in WHERE may contain subqueries"
    )


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
    sql = node.sql(dialect=_DIALECT)
    snippet = sql if len(sql) <= 60 else sql[:57] + "..."
    return f"SQL construct {node.key.upper()} ({snippet}) is not supported by dpsql"


def _check_function(node: exp.Func) -> None:
    if isinstance(node, _NONDETERMINISTIC):
        raise UnsupportedConstructError(
            f"nondeterministic function {written_name(node)}() is not allowed: remove it "
            "(dpsql adds all randomness itself)"
        )
    if isinstance(node, _ONE_ARGUMENT) and any(
            value is not None for key, value in node.args.items() if key != "this"):
        # sqlglot reads more arguments than DuckDB takes (dayname(d, 1) as strftime '%a',
        # last_day(d, 'week')) and would run a query DuckDB refuses (the public-path red team)
        raise UnsupportedConstructError(
            f"function {written_name(node)}() takes one argument: write "
            f"{written_name(node).lower()}(x)")
    if isinstance(node, _ALLOWED_FUNCS):
        return
    if isinstance(node, exp.AggFunc):
        raise UnsupportedConstructError(
            f"aggregate {written_name(node)}() is not supported here: {_BOUNDLESS_AGGREGATES} have "
            "no bounded sensitivity; use COUNT, SUM or AVG (with declared bounds), or MIN / MAX "
            "/ MEDIAN / quantiles of one bounded column in the top-level SELECT of a query with "
            "no other aggregate (the exponential mechanism)"
        )
    raise UnsupportedConstructError(_not_allowed(written_name(node)))


def written_name(node: exp.Func) -> str:
    """The function's name as DuckDB SQL spells it (STRFTIME, not sqlglot's TIME_TO_STR: QA
    round 7); sqlglot's name for a construct that is no call (COLLATE)."""
    head = node.sql(dialect=_DIALECT).split("(", 1)[0].strip()
    return head if head.replace("_", "").isalnum() else node.sql_name()


#: the scalar functions :data:`_ALLOWED_FUNCS` accepts, as DuckDB spells them (each parsed back
#: to an allowed node in tests/analysis/test_allowlist.py)
ALLOWED_FUNCTION_NAMES = (
    "abs, round, floor, ceil, sqrt, ln, log, exp, pow, sign, greatest, least, coalesce, "
    "nullif, if, upper, lower, length, substring, trim, concat, left, right, strpos, "
    "starts_with, replace, reverse, contains, extract, year, month, day, quarter, dayofweek, "
    "isodow, dayofyear, week, weekofyear, hour, minute, second, monthname, dayname, last_day, "
    "date_trunc, date_add, date_diff, CAST, TRY_CAST, CASE")


def _not_allowed(name: str) -> str:
    """The refusal of a scalar function outside the allow-list, naming the ones it has."""
    return (f"function {name}() is not allowed: dpsql runs only allow-listed deterministic "
            f"scalar functions ({ALLOWED_FUNCTION_NAMES}) and the aggregates; rewrite it with "
            "those")


def _check_top_level(node: exp.Expression, query: exp.Expression) -> None:
    """FILTER and the variance family only in the outermost SELECT (see
    :data:`_TOP_LEVEL_AGGREGATES`)."""
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Query):
        parent = parent.parent
    if parent is query and isinstance(query, exp.Select):
        if isinstance(node, exp.Filter) and not isinstance(
                node.this, (exp.Count, exp.Sum, exp.Avg, *VARIANCE_TYPES)):
            raise UnsupportedConstructError(
                "FILTER (WHERE ...) is supported only on COUNT, SUM, AVG and the variance "
                "aggregates"
            )
        return
    what = "FILTER (WHERE ...)" if isinstance(node, exp.Filter) else node.sql_name()
    raise UnsupportedConstructError(
        f"{what} is supported only in the outermost SELECT, not in a subquery, CTE or UNION: "
        "compute it in the outer query"
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
            f"catalog-qualified table {table.sql(dialect=_DIALECT)} is not reachable: "
            "use the declared table name without a catalog"
        )
    db = table.db.lower() if table.db else ""
    if db in _SYSTEM_SCHEMAS or table.name.lower().startswith(("duckdb_", "pragma_", "sqlite_")):
        raise UnsupportedConstructError(
            f"system catalog {table.sql(dialect=_DIALECT)} is not reachable: query declared tables"
        )
    if db in _FILE_SOURCE_SCHEMAS:
        raise UnsupportedConstructError(
            f"{table.sql(dialect=_DIALECT)} reads files (a Spark file source): query declared "
            "tables only"
        )
    if db and db not in DEFAULT_SCHEMAS:
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
