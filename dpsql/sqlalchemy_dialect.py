"""A SQLAlchemy dialect for dpsql in-process: ``create_engine("dpsql:///shop.duckdb?...")``.

    >>> import pandas, sqlalchemy
    >>> engine = sqlalchemy.create_engine(
    ...     "dpsql:///shop.duckdb?metadata=shop.yaml&analyst=alice&epsilon=0.5&delta=1e-8")
    ...                                                               # doctest: +SKIP
    >>> pandas.read_sql("SELECT status, COUNT(*) AS n FROM orders GROUP BY status", engine)
    ...                                                               # doctest: +SKIP

The URL follows SQLite's: ``dpsql:///relative/path.duckdb`` or ``dpsql:////absolute/path``
(``dpsql://`` alone, or ``dpsql:///:memory:``, for tables backed by the metadata's sources).
Its query string holds :func:`dpsql.connect`'s keywords: ``metadata`` (required), ``analyst``
(required), ``epsilon``, ``delta``, ``mechanism``, ``calibration``, ``raw_counts``, ``ledger``
(a path; omitted: the metadata's), or ``no_ledger=true`` (the CLI's ``--no-ledger``:
``ledger=None``, the data owner's uncharged mode). Keywords that are not strings
(``connect_args={"metadata": Metadata(...)}``) pass through ``create_engine``'s
``connect_args``. Every connection the engine's pool opens is a :class:`dpsql.dbapi.Connection`:
it charges the same ledger, with the same rules, as one opened by hand.

A server is reached with SQLAlchemy's own PostgreSQL dialect,
``postgresql+psycopg://alice@host:5433/shop`` (``dpsql serve`` speaks the protocol); a
``dpsql://`` URL with a host is refused with that advice.

Reflection (``sqlalchemy.inspect(engine)``, ``MetaData.reflect``) answers from the metadata
alone, as the server answers catalog queries: the declared tables and their columns with their
types, no keys, indexes or views. It reads no row and charges nothing.

The dialect compiles statements in dpsql's paramstyle (``?``), so ``sqlalchemy.text("... :q")``
with ``{"q": 2}`` and ``pandas.read_sql(sql, engine, params=(2,))`` both bind parameters.
dpsql accepts SELECT statements only; SQLAlchemy's DDL and DML constructs compile but are
refused by dpsql when executed.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import exc, types
from sqlalchemy.engine import URL, default, reflection
from sqlalchemy.engine.interfaces import ReflectedColumn

#: query-string keys of a dpsql:// URL that are numbers, and those that are flags
_FLOATS = ("epsilon", "delta")
_FLAGS = ("raw_counts", "no_ledger")
_STRINGS = ("metadata", "analyst", "ledger", "mechanism", "calibration")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

#: DuckDB type names (the metadata's and the database's) as SQLAlchemy types
_TYPES: dict[str, type[types.TypeEngine[Any]]] = {
    "BOOLEAN": types.Boolean, "TINYINT": types.SmallInteger, "SMALLINT": types.SmallInteger,
    "UTINYINT": types.SmallInteger, "INTEGER": types.Integer, "USMALLINT": types.Integer,
    "UINTEGER": types.BigInteger, "BIGINT": types.BigInteger, "UBIGINT": types.Numeric,
    "HUGEINT": types.Numeric, "UHUGEINT": types.Numeric, "FLOAT": types.Float,
    "REAL": types.Float, "DOUBLE": types.Double, "VARCHAR": types.String,
    "TEXT": types.String, "BLOB": types.LargeBinary, "DATE": types.Date, "TIME": types.Time,
    "TIMESTAMP": types.DateTime, "TIMESTAMP WITH TIME ZONE": types.DateTime,
    "INTERVAL": types.Interval, "UUID": types.Uuid,
}

_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def sqlalchemy_type(duckdb_type: str | None) -> types.TypeEngine[Any]:
    """The SQLAlchemy type of a DuckDB type name (DECIMAL(p,s) is Numeric(p, s); an unknown
    or undeclared type is NullType)."""
    if duckdb_type is None:
        return types.NullType()
    name = duckdb_type.strip().upper()
    decimal = _DECIMAL.match(name)
    if decimal:
        return types.Numeric(int(decimal.group(1)), int(decimal.group(2)))
    if name in ("DECIMAL", "NUMERIC"):
        return types.Numeric()
    if name.startswith("VARCHAR"):
        return types.String()
    if name == "TIMESTAMP WITH TIME ZONE":
        return types.DateTime(timezone=True)
    cls = _TYPES.get(name)
    return cls() if cls is not None else types.NullType()


def connect_kwargs(url: URL) -> dict[str, Any]:
    """:func:`dpsql.connect`'s keywords from a ``dpsql://`` URL (module docstring).

    Raises sqlalchemy.exc.ArgumentError for a URL with a host (a server: use
    postgresql+psycopg), an unknown query key, or a value that is not a number or a flag where
    one is needed. Missing ``metadata``/``analyst`` are left to dpsql.connect, which names them.
    """
    if url.host or url.username or url.port:
        raise exc.ArgumentError(
            "a dpsql:// URL names a local database (dpsql:///path/to/db.duckdb?metadata=..."
            "&analyst=...); to reach a `dpsql serve` server use SQLAlchemy's PostgreSQL "
            "dialect: postgresql+psycopg://analyst@host:port/db")
    kwargs: dict[str, Any] = {"database": url.database or None}
    ledger_off = False
    for key, value in url.query.items():
        if not isinstance(value, str):
            raise exc.ArgumentError(f"the URL gives {key!r} more than once; give it once")
        if key in _FLOATS:
            try:
                kwargs[key] = float(value)
            except ValueError:
                raise exc.ArgumentError(
                    f"{key}={value!r} in the URL is not a number (e.g. {key}=0.5)") from None
        elif key in _FLAGS:
            if value.lower() not in _TRUE + _FALSE:
                raise exc.ArgumentError(f"{key}={value!r} in the URL: use {key}=true or false")
            flag = value.lower() in _TRUE
            if key == "no_ledger":
                ledger_off = flag
            else:
                kwargs[key] = flag
        elif key in _STRINGS:
            kwargs[key] = value
        else:
            raise exc.ArgumentError(
                f"unknown key {key!r} in the dpsql:// URL; known: "
                f"{', '.join(sorted(_FLOATS + _FLAGS + _STRINGS))}")
    if ledger_off:
        if "ledger" in kwargs:
            raise exc.ArgumentError("the URL gives both ledger= and no_ledger=true; give one")
        kwargs["ledger"] = None
    return kwargs


class DpsqlDialect(default.DefaultDialect):
    """dpsql's SQLAlchemy dialect (module docstring)."""

    name = "dpsql"
    driver = "dpsql"
    supports_statement_cache = True
    default_paramstyle = "qmark"
    supports_native_decimal = True
    supports_native_boolean = True
    supports_alter = False
    supports_sequences = False
    supports_comments = False
    supports_schemas = False
    postfetch_lastrowid = False
    # dpsql is read-only: SQLAlchemy's transactions are no-ops on its connections
    supports_sane_rowcount = False
    supports_sane_multi_rowcount = False

    @classmethod
    def import_dbapi(cls) -> Any:
        import dpsql

        return dpsql

    def create_connect_args(self, url: URL) -> Any:
        return [], connect_kwargs(url)

    def _get_server_version_info(self, connection: Any) -> tuple[int, ...]:
        from importlib.metadata import version

        return tuple(int(p) for p in re.findall(r"\d+", version("dpsql"))[:3])

    def _get_default_schema_name(self, connection: Any) -> str:
        return "main"

    def get_isolation_level(self, dbapi_connection: Any) -> Any:
        return "SERIALIZABLE"  # read-only: every statement sees one version of the data

    def do_ping(self, dbapi_connection: Any) -> bool:
        return not dbapi_connection.closed

    # -- reflection: from the metadata, never from the data ---------------------------------

    @staticmethod
    def _metadata(connection: Any) -> Any:
        dbapi_connection = connection.connection.dbapi_connection
        return dbapi_connection.metadata

    @reflection.cache
    def get_schema_names(self, connection: Any, **kw: Any) -> list[str]:
        return ["main"]

    @reflection.cache
    def get_table_names(self, connection: Any, schema: str | None = None,
                        **kw: Any) -> list[str]:
        return sorted(self._metadata(connection).tables)

    def has_table(self, connection: Any, table_name: str, schema: str | None = None,
                  **kw: Any) -> bool:
        return table_name.lower() in self._metadata(connection).tables

    def get_view_names(self, connection: Any, schema: str | None = None,
                       **kw: Any) -> list[str]:
        return []

    @reflection.cache
    def get_columns(self, connection: Any, table_name: str, schema: str | None = None,
                    **kw: Any) -> list[ReflectedColumn]:
        table = self._metadata(connection).tables.get(table_name.lower())
        if table is None:
            raise exc.NoSuchTableError(table_name)
        return [ReflectedColumn(name=c.name, type=sqlalchemy_type(c.type), nullable=True,
                                default=None)
                for c in table.columns.values()]

    def _require_table(self, connection: Any, table_name: str) -> None:
        if not self.has_table(connection, table_name):
            raise exc.NoSuchTableError(table_name)

    def get_pk_constraint(self, connection: Any, table_name: str, schema: str | None = None,
                          **kw: Any) -> Any:
        self._require_table(connection, table_name)
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(self, connection: Any, table_name: str, schema: str | None = None,
                         **kw: Any) -> list[Any]:
        self._require_table(connection, table_name)
        return []

    def get_indexes(self, connection: Any, table_name: str, schema: str | None = None,
                    **kw: Any) -> list[Any]:
        self._require_table(connection, table_name)
        return []

    def get_unique_constraints(self, connection: Any, table_name: str,
                               schema: str | None = None, **kw: Any) -> list[Any]:
        self._require_table(connection, table_name)
        return []

    def get_check_constraints(self, connection: Any, table_name: str,
                              schema: str | None = None, **kw: Any) -> list[Any]:
        self._require_table(connection, table_name)
        return []


dialect = DpsqlDialect
