"""Introspection answered from the analyst-facing schema, never from the data.

Clients probe the server on connect (``version()``, ``SHOW``, ``pg_catalog`` and
``information_schema`` lookups: psql's ``\\dt``, SQLAlchemy's dialect, JDBC's metadata calls).
They are answered by a *shadow* DuckDB (:mod:`dpsql.server.shadow`): in memory, holding empty
tables with the declared columns and types of the tables this analyst may query, and nothing
else; external access is disabled and its configuration locked. Such a query cannot read a row
of data, so it is answered exactly and costs nothing.

A query goes to the shadow only when every relation it names is a catalog relation
(``pg_catalog.*``, ``information_schema.*``, or an unqualified ``pg_*`` name), a table function
(``generate_series``) or none (``SELECT version()``); anything else is a private query for the
session. PostgreSQL-only spellings the shadow lacks are rewritten first (:func:`to_shadow_sql`).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from dpsql.metadata import Metadata
from dpsql.server.pgshims import EXTENDED as _EXTENDED
from dpsql.server.pgshims import RENAMED as _RENAMED
from dpsql.server.shadow import Shadows, build_shadow
from dpsql.sql import quote_literal

#: what ``SELECT version()`` and the ``server_version`` parameter say
SERVER_VERSION = "15.0"
VERSION_TEXT = f"PostgreSQL {SERVER_VERSION} (dpsql, differentially private)"

_CATALOG_SCHEMAS = {"pg_catalog", "information_schema"}

def _is_catalog_table(table: exp.Table) -> bool:
    schema = table.db.lower() if table.db else ""
    if schema:
        return schema in _CATALOG_SCHEMAS
    return table.name.lower().startswith("pg_") and not isinstance(table.this, exp.Func)


def is_catalog_query(tree: exp.Expression) -> bool:
    """True when ``tree`` is a SELECT that only reads, whose every relation is a catalog
    relation (or none). Depends on the SQL text alone."""
    if not isinstance(tree, exp.Query):
        return False
    if any(tree.find_all(exp.Into, exp.DML, exp.DDL, exp.Command)):
        # SELECT ... INTO (a CREATE TABLE) or a data-modifying CTE would change the analyst's
        # shadow, which their other connections share (dpsql.server.shadow): not a catalog read
        return False
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # generate_series(...), unnest(...): the shadow reads no files either
        if table.name.lower() in ctes and not table.db:
            continue
        if not _is_catalog_table(table):
            return False
    return True


def parse_postgres(sql: str) -> exp.Expression | None:
    """The statement as PostgreSQL would read it, or None when sqlglot cannot parse it (then
    the session's parser refuses it with dpsql's message, deep nesting included)."""
    try:
        trees = [t for t in sqlglot.parse(sql, read="postgres") if t is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
        return None
    return trees[0] if len(trees) == 1 else None


#: the mark of a relation inside an inlined definition (``pg_catalog.pg_class`` in pg_class's):
#: the shadow's own, never inlined again
_INLINED = "dpsql_shadow_inlined"


def to_shadow_sql(tree: exp.Expression, user: str = "dpsql") -> str:
    """``tree`` in DuckDB's dialect, with PostgreSQL-only spellings the shadow lacks replaced:
    ``pg_catalog.f()`` → ``f()``, ``version()`` → dpsql's version text, casts to ``reg*`` types
    → an OID lookup, ``COLLATE pg_catalog.default`` dropped, ``OPERATOR(pg_catalog.~)`` → ``~``."""

    quoted_user = quote_literal(user)

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func) and \
                node.this.name.lower() == "pg_catalog":
            return node.expression
        if isinstance(node, exp.CurrentVersion) or (
                isinstance(node, exp.Anonymous) and node.name.lower() == "version"
                and not node.expressions):
            return exp.alias_(exp.Literal.string(VERSION_TEXT), "version") \
                if isinstance(node.parent, exp.Select) else exp.Literal.string(VERSION_TEXT)
        if isinstance(node, exp.Operator):
            op = node.args.get("operator")
            text = op.name if isinstance(op, exp.Expression) else str(op)
            pattern = exp.RegexpLike(this=node.this, expression=node.expression)
            if text.endswith("!~"):
                return exp.Not(this=pattern)
            if text.endswith("~"):
                return pattern
            if text.endswith("="):
                return exp.EQ(this=node.this, expression=node.expression)
        if isinstance(node, exp.Anonymous) and node.name.lower() in _RENAMED:
            return exp.Anonymous(this=_RENAMED[node.name.lower()], expressions=node.expressions)
        if isinstance(node, exp.Anonymous) and node.name.lower() == "pg_get_expr":
            node.set("expressions", node.expressions[:2])  # the pretty flag: DuckDB has two
            return node
        if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier) and \
                node.db:  # pg_catalog.generate_series(...): DuckDB's are unqualified
            node.set("db", None)
            return node
        if isinstance(node, exp.Table) and node.name.lower() in _EXTENDED and \
                (not node.db or node.db.lower() == "pg_catalog") and \
                not node.meta.get(_INLINED):
            # inlined, not a view: a view would itself show up in the catalog's listings
            body = sqlglot.parse_one(_EXTENDED[node.name.lower()].format(user=quoted_user),
                                     read="duckdb")
            for inner in body.find_all(exp.Table):  # DuckDB's own pg_class: not again
                inner.meta[_INLINED] = True
            return exp.Subquery(this=body, alias=exp.TableAlias(
                this=exp.to_identifier(node.alias or node.name)))
        if isinstance(node, exp.Column) and node.args.get("db") is not None and \
                node.db.lower() == "pg_catalog":
            # pg_catalog.pg_class.relname → pg_class.relname: the subquery's alias, and DuckDB's
            # binder cannot resolve three-part names in a correlated subquery's join
            node.set("db", None)
            return node
        if isinstance(node, exp.Cast):
            target = node.to.sql().lower().split(".")[-1].strip('"')
            if target.startswith("reg"):
                return _reg_lookup(node.this, target)
        if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.USERDEFINED:
            kind = node.args.get("kind")
            name = (kind.sql() if isinstance(kind, exp.Expression) else str(kind or ""))
            name = name.lower().split(".")[-1].strip('"')
            if name in _TYPE_NAMES:
                return exp.DataType.build(_TYPE_NAMES[name])
        return node

    # A node ``fix`` replaces is not descended into: repeat until nothing changes.
    tree = tree.copy().transform(lambda n: n.this if isinstance(n, exp.Collate) else n)
    sql = tree.sql(dialect="duckdb")
    for _ in range(8):
        tree = tree.transform(fix)
        again = tree.sql(dialect="duckdb")
        if again == sql:
            break
        sql = again
    return sql


_TYPE_NAMES = {
    "oid": "BIGINT", "text": "VARCHAR", "name": "VARCHAR", "int2": "SMALLINT",
    "int4": "INTEGER", "int8": "BIGINT", "float4": "FLOAT", "float8": "DOUBLE",
    "bool": "BOOLEAN", "char": "VARCHAR", "bpchar": "VARCHAR", "int2vector": "SMALLINT[]",
    "oidvector": "BIGINT[]",
}


def _reg_lookup(value: exp.Expression, target: str) -> exp.Expression:
    """A cast to a ``reg*`` type: a name literal becomes its OID, an OID becomes its name."""
    table, name_column = {
        "regtype": ("pg_catalog.pg_type", "typname"),
        "regnamespace": ("pg_catalog.pg_namespace", "nspname"),
        "regproc": ("pg_catalog.pg_proc", "proname"),
        "regprocedure": ("pg_catalog.pg_proc", "proname"),
    }.get(target, ("pg_catalog.pg_class", "relname"))
    if isinstance(value, exp.Literal) and value.is_string:
        lookup = exp.select("oid").from_(table).where(
            exp.EQ(this=exp.column(name_column), expression=value.copy()))
    else:
        lookup = exp.select(name_column).from_(table).where(
            exp.EQ(this=exp.column("oid"), expression=value.copy()))
    return exp.Subquery(this=lookup.limit(1))


def _as_user(tree: exp.Expression, user: str) -> exp.Expression:
    """``current_user`` and ``session_user`` as the analyst's name (the shadow's own would
    say "duckdb"), named as PostgreSQL names the column."""

    def fix(node: exp.Expression) -> exp.Expression:
        call = node.expression if isinstance(node, exp.Dot) else node  # pg_catalog.f()
        name = {exp.CurrentUser: "current_user", exp.SessionUser: "session_user"}.get(
            type(call))
        if name is None and isinstance(call, exp.Anonymous) and not call.expressions and \
                call.name.lower() in ("current_user", "session_user"):
            name = call.name.lower()
        if name is None:
            return node
        value = exp.Literal.string(user)
        return exp.alias_(value, name) if isinstance(node.parent, exp.Select) else value

    return tree.copy().transform(fix)


def _with_settings(tree: exp.Expression, settings: dict[str, str]) -> exp.Expression:
    """``current_setting('name')`` as the session's value (the shadow has none of PostgreSQL's
    settings); a name the session does not know stays, and the shadow refuses it."""

    def fix(node: exp.Expression) -> exp.Expression:
        call = node.expression if isinstance(node, exp.Dot) else node  # pg_catalog.f()
        if not (isinstance(call, exp.Anonymous) and call.name.lower() == "current_setting"
                and call.expressions):
            return node
        arg = call.expressions[0]
        arg = arg.this if isinstance(arg, exp.Cast) else arg
        if not (isinstance(arg, exp.Literal) and arg.is_string):
            return node
        value = settings.get(arg.name.lower())
        if value is None:
            return node
        literal = exp.Literal.string(value)
        return exp.alias_(literal, "current_setting") if isinstance(node.parent, exp.Select) \
            else literal

    return tree.transform(fix)


def shadow_sql(tree: exp.Expression, user: str, settings: dict[str, str] | None = None) -> str:
    """The shadow's SQL for the catalog query ``tree`` of analyst ``user`` whose session has
    ``settings``: a function of its arguments alone."""
    tree = _as_user(tree, user)
    if settings:
        tree = _with_settings(tree, settings)
    return to_shadow_sql(tree, user)


@functools.lru_cache(maxsize=512)
def shadow_sql_of_text(sql: str, user: str, settings: tuple[tuple[str, str], ...]) -> str:
    """:func:`shadow_sql` of the catalog query text ``sql`` (which :func:`parse_postgres`
    reads), memoised for the process: clients send the same introspection texts on every
    connect, ~1 ms of parsing and rewriting each. ``settings`` as sorted items."""
    tree = parse_postgres(sql)
    if tree is None:
        raise ValueError("not a single statement PostgreSQL's grammar reads")
    return shadow_sql(tree, user, dict(settings))


@dataclass(frozen=True)
class CatalogAnswer:
    names: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]]


class Catalog:
    """One client connection's view of its analyst's shadow DuckDB (dpsql.server.shadow):
    thread-safe, one lock per connection."""

    def __init__(self, metadata: Metadata, tables: Iterable[str], user: str = "dpsql",
                 shadows: Shadows | None = None) -> None:
        """Through the server's ``shadows`` (shared with the analyst's other connections), or
        a shadow of its own when there are none."""
        tables = list(tables)
        self._con = (build_shadow(metadata, tables, user) if shadows is None
                     else shadows.connect(tables, user))
        self._lock = threading.Lock()
        self._user = user

    def run(self, tree: exp.Expression, settings: dict[str, str] | None = None) -> CatalogAnswer:
        """Answer a catalog query (see :func:`is_catalog_query`); ``current_setting(name)``
        says the session's ``settings``. Raises duckdb.Error when the shadow cannot answer
        it."""
        return self.run_sql(self.shadow_sql(tree, settings))

    def shadow_sql(self, tree: exp.Expression, settings: dict[str, str] | None = None) -> str:
        """What :meth:`run` sends the shadow for ``tree`` under ``settings``
        (:func:`shadow_sql`)."""
        return shadow_sql(tree, self._user, settings)

    def run_sql(self, sql: str) -> CatalogAnswer:
        """The shadow's answer to ``sql`` (from :meth:`shadow_sql`)."""
        with self._lock:
            cursor = self._con.execute(sql)
            description = cursor.description or []
            rows = cursor.fetchmany(100_000)
        return CatalogAnswer(tuple(d[0] for d in description),
                             tuple(str(d[1]) for d in description), rows)

    def interrupt(self) -> None:
        self._con.interrupt()

    def close(self) -> None:
        self._con.close()


# -- session commands: SET, SHOW, RESET, transactions ----------------------------------------

#: what ``SHOW`` answers before a SET (the names clients ask about on connect)
DEFAULT_SETTINGS = {
    "server_version": SERVER_VERSION,
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "datestyle": "ISO, MDY",
    "timezone": "UTC",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "transaction_isolation": "read committed",
    "transaction isolation level": "read committed",
    "default_transaction_read_only": "on",
    "search_path": "main",
    "application_name": "",
    "extra_float_digits": "1",
    "max_identifier_length": "63",
    "statement_timeout": "0",
    "default_table_access_method": "heap",
}

_SET = re.compile(
    r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?([A-Za-z_][\w.]*)\s*(?:=|\s+TO\s+|\s+)\s*(.+?)\s*;?\s*$",
    re.I | re.S)
_SET_TIME_ZONE = re.compile(r"^\s*SET\s+(?:SESSION\s+)?TIME\s+ZONE\s+(.+?)\s*;?\s*$", re.I | re.S)
_SHOW = re.compile(r"^\s*SHOW\s+(.+?)\s*;?\s*$", re.I | re.S)
_RESET = re.compile(r"^\s*RESET\s+(\w[\w.]*|ALL)\s*;?\s*$", re.I)
_SAVEPOINT = re.compile(
    r"^\s*(SAVEPOINT|RELEASE|ROLLBACK)\s+(?:TO\s+)?(?:SAVEPOINT\s+)?(?!TRANSACTION\b|WORK\b)"
    r"(\w+|\"[^\"]+\")\s*;?\s*$", re.I)
_NO_OP = re.compile(
    r"^\s*(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|ABORT|DISCARD\s+\w+|DEALLOCATE"
    r"(\s+PREPARE)?\s+(ALL|\w+)|CLOSE\s+(ALL|\w+)|UNLISTEN\s+\*)\b[^;]*;?\s*$", re.I)


@dataclass(frozen=True)
class SettingChange:
    name: str
    value: str | None  # None: RESET


#: the first words of every session command (a statement starting otherwise is none)
_COMMAND_WORDS = frozenset({
    "set", "reset", "show", "savepoint", "release", "rollback", "begin", "start", "commit",
    "end", "abort", "discard", "deallocate", "close", "unlisten"})
_FIRST_WORD = re.compile(r"\s*([A-Za-z]+)")


def parse_session_command(sql: str) -> tuple[str, Any] | None:
    """("set", SettingChange) | ("show", name) | ("noop", tag) | None for anything else."""
    first = _FIRST_WORD.match(sql)
    if first is None or first.group(1).lower() not in _COMMAND_WORDS:
        return None  # a query (SELECT, WITH, ...): one match instead of every pattern
    m = _SET_TIME_ZONE.match(sql)
    if m:
        return "set", SettingChange("timezone", _unquote(m.group(1)))
    m = _SET.match(sql)
    if m and m.group(1).lower() not in ("transaction", "session"):
        return "set", SettingChange(m.group(1).lower(), _unquote(m.group(2)))
    if re.match(r"^\s*SET\s+(SESSION\s+CHARACTERISTICS|TRANSACTION)\b", sql, re.I):
        return "noop", "SET"
    m = _RESET.match(sql)
    if m:
        return "set", SettingChange(m.group(1).lower(), None)
    m = _SHOW.match(sql)
    if m:
        return "show", " ".join(m.group(1).lower().split())
    m = _SAVEPOINT.match(sql)
    if m:  # psycopg's nested transaction(): nothing to save, nothing to undo
        word = m.group(1).upper()
        return "noop", "ROLLBACK TO" if word == "ROLLBACK" else word
    m = _NO_OP.match(sql)
    if m:
        word = m.group(1).split()[0].upper()
        tag = {"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}.get(word, word)
        if word == "DISCARD":
            tag = "DISCARD ALL"
        return "noop", tag
    return None


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace(value[0] * 2, value[0])
    return value


def inline_params(tree: exp.Expression, params: list[Any]) -> exp.Expression:
    """A catalog query's ``$n`` markers replaced by literals (the shadow holds no data, so
    inlining is harmless; it keeps DuckDB's binder out of PostgreSQL's parameter types)."""

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Parameter, exp.Placeholder)):
            raw = node.name or (node.this.name if isinstance(node.this, exp.Expression) else "")
            if raw.isdigit() and 1 <= int(raw) <= len(params):
                value = params[int(raw) - 1]
                if value is None:
                    return exp.Null()
                if isinstance(value, bool):
                    return exp.Boolean(this=value)
                if isinstance(value, (int, float)):
                    return exp.Literal.number(value)
                return exp.Literal.string(str(value))
        return node

    return tree.transform(fix)
