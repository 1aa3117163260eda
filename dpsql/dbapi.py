"""The PEP 249 (DB-API 2.0) driver: Connection and Cursor over :class:`dpsql.session.Session`.

    >>> import dpsql
    >>> with dpsql.connect("shop.duckdb", "shop.yaml", analyst="alice",
    ...                    epsilon=0.5) as conn:                      # doctest: +SKIP
    ...     cur = conn.cursor()
    ...     cur.execute("SELECT COUNT(*) AS n FROM orders WHERE status = ?", ["new"])
    ...     cur.fetchone(), cur.release.epsilon, conn.budget.epsilon_remaining

Decisions (docs/design.md, "Release pipeline" and "Driver"):

* **Every query is charged before anything is released** (:mod:`dpsql.session`). With a
  ledger, ``execute`` looks the query up in the ledger's answer cache; on a hit the stored
  noisy answer is returned again at no cost (``cursor.release.cached`` is True); on a miss
  the session charges the ledger (a durable commit that raises
  :class:`~dpsql.errors.BudgetExhaustedError` when the budget does not cover the query)
  BEFORE the database reads private data, and the noisy answer is stored in the cache before
  it is returned. Rejected queries (at any stage), failed and cancelled ones spend nothing;
  queries that read public tables only are answered exactly and spend nothing.
* **The metadata's ledger cannot be bypassed.** When the metadata names a ledger, every
  connection made with that metadata charges it. A ``ledger=`` argument naming a *different*
  file raises :class:`~dpsql.errors.ProgrammingError` (rather than being silently ignored, so a
  caller never believes it is charging one file while another is charged); naming the same file
  (by any path) is accepted.
* **Without any ledger nothing is charged or cached** (local experimentation on data the analyst
  may see anyway): each execution draws fresh noise, and :attr:`Connection.budget` raises.
  Budget enforcement and the averaging defence both need a ledger; a data owner enforces them by
  naming the ledger in the metadata file.
* **``with connect(...) as conn:`` closes the connection on exit** (like DuckDB's and
  psycopg 3's drivers, unlike sqlite3, whose ``__exit__`` commits). The connection is read-only,
  so there is no transaction for the block to commit; releasing the database and ledger files is
  the useful meaning. ``commit()`` and ``rollback()`` are no-ops on an open connection.
* ``executemany`` raises :class:`~dpsql.errors.NotSupportedError`: repeating a noisy query once
  per parameter set would spend budget silently, once per row.
* ``threadsafety = 1``: threads may share the module, not connections or cursors.

The release rules themselves (what is charged when, the answer cache) live in
:mod:`dpsql.session`; this module is the PEP 249 surface over it.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dpsql.accounting import BudgetStatus, CompositionReport, Ledger
from dpsql.backends import ledger_identity, open_backend
from dpsql.budget import Budget
from dpsql.errors import (
    Error,
    InterfaceError,
    InternalError,
    NotSupportedError,
    ProgrammingError,
)
from dpsql.metadata import Metadata, load_metadata
from dpsql.release.cache import cache_key
from dpsql.release.record import Release, Result
from dpsql.session import Principal, Session

Params = Sequence[Any] | None


# ---------------------------------------------------------------------------------------------
# PEP 249 type objects and constructors. ``description``'s type_code is DuckDB's type name
# ("BIGINT", "VARCHAR", ...); these objects compare equal to the names of their group.
# ---------------------------------------------------------------------------------------------


class DBAPITypeObject:
    """A PEP 249 type object: equal to every DuckDB type name in its group."""

    def __init__(self, *names: str) -> None:
        self.names = frozenset(names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            # DECIMAL(18,3) and VARCHAR[] style names: compare on the base name
            return other.split("(", 1)[0].upper() in self.names
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"DBAPITypeObject{tuple(sorted(self.names))!r}"


STRING = DBAPITypeObject("VARCHAR", "CHAR", "BPCHAR", "TEXT", "STRING", "UUID", "ENUM")
BINARY = DBAPITypeObject("BLOB", "BYTEA", "BINARY", "VARBINARY", "BIT")
NUMBER = DBAPITypeObject(
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL", "DECIMAL", "BOOLEAN",
)
DATETIME = DBAPITypeObject(
    "DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS", "TIMESTAMP_MS",
    "TIMESTAMP_S", "INTERVAL", "TIME WITH TIME ZONE",
)
ROWID = DBAPITypeObject()  # dpsql never releases row identifiers

Date = _dt.date
Time = _dt.time
Timestamp = _dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> _dt.date:  # PEP 249 name
    """PEP 249 constructor: the local date of a POSIX timestamp."""
    return _dt.date.fromtimestamp(ticks)


def TimeFromTicks(ticks: float) -> _dt.time:  # PEP 249 name
    """PEP 249 constructor: the local time of day of a POSIX timestamp."""
    return _dt.datetime.fromtimestamp(ticks).time()


def TimestampFromTicks(ticks: float) -> _dt.datetime:  # PEP 249 name
    """PEP 249 constructor: the local datetime of a POSIX timestamp."""
    return _dt.datetime.fromtimestamp(ticks)


# ---------------------------------------------------------------------------------------------
# connect / Connection
# ---------------------------------------------------------------------------------------------


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def connect(
    database: str | os.PathLike | None,
    metadata: str | os.PathLike | Metadata | Mapping,
    *,
    analyst: str,
    ledger: str | os.PathLike | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    backend: str = "duckdb",
    spark: Any = None,
) -> Connection:
    """Open a private, read-only connection to a DuckDB database (or to tables in Spark).

    Preconditions: ``database`` is a DuckDB file path, or None/":memory:" (tables backed by the
    CSV/Parquet sources the metadata declares); ``metadata`` is a metadata file path, a loaded
    :class:`~dpsql.metadata.Metadata` or a parsed mapping; ``analyst`` is the non-empty name
    charged in the ledger; ``ledger`` is the path of an existing ledger file (create it with
    ``dpsql budget set``); ``epsilon``/``delta`` are the default per-query budget
    (``Cursor.execute`` may override them; delta defaults to 0).

    ``backend="spark"`` computes the exact aggregates with Spark SQL (:mod:`dpsql.backends.spark`,
    the ``spark`` extra): ``spark`` is then a SparkSession or a master URL (``local[2]``,
    ``spark://host:7077``, ``yarn``), and ``database`` names the Spark catalog database holding
    the declared tables without a ``source`` (None: the current one). Its budgets are kept
    under ``spark://DATABASE`` (``spark://default`` for None).

    Guarantees: the ledger used is the metadata's when it names one (a different ``ledger=``
    raises ProgrammingError), else ``ledger``, else none (nothing charged or cached). A missing,
    unreadable or foreign ledger file raises OperationalError; a missing database file raises
    OperationalError; invalid metadata raises ProgrammingError. Nothing is charged by connecting.
    """
    return Connection(database, metadata, analyst=analyst, ledger=ledger, epsilon=epsilon,
                      delta=delta, backend=backend, spark=spark)


class Connection:
    """A PEP 249 connection (see :func:`connect` and the module docstring)."""

    def __init__(
        self,
        database: str | os.PathLike | None,
        metadata: str | os.PathLike | Metadata | Mapping,
        *,
        analyst: str,
        ledger: str | os.PathLike | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        backend: str = "duckdb",
        spark: Any = None,
    ) -> None:
        if not isinstance(analyst, str) or not analyst.strip():
            raise ProgrammingError("analyst must be a non-empty string: pass analyst='name'")
        # the defaults are validated here, once; a per-query override when it arrives
        Budget(1.0 if epsilon is None else epsilon, 0.0 if delta is None else delta)
        md = metadata if isinstance(metadata, Metadata) else load_metadata(metadata)
        ledger_path = self._choose_ledger(md, ledger)

        self.analyst = analyst
        #: default per-query budget (execute(..., epsilon=, delta=) overrides it)
        self.epsilon = None if epsilon is None else float(epsilon)
        self.delta = 0.0 if delta is None else float(delta)
        self.metadata = md
        #: the key under which the ledger keeps this database's budgets and cached answers
        self.database = ledger_identity(backend, database)
        #: the ledger file every query is charged to, or None (nothing charged)
        self.ledger_path = ledger_path
        self._closed = False

        # Open the ledger first: if it is unusable we fail closed before touching the data.
        self._ledger = Ledger(ledger_path, create=False) if ledger_path is not None else None
        try:
            self._backend = open_backend(backend, database, md, spark)
            try:
                self._session = Session(md, self._backend, ledger=self._ledger,
                                        principal=Principal(self.database, analyst))
                #: the metadata queries are analysed with: undeclared column types filled in
                #: from the database (dpsql.backends.types)
                self.metadata = self._session.metadata
            except BaseException:
                self._backend.close()
                raise
        except BaseException:
            if self._ledger is not None:
                self._ledger.close()
            raise

    @staticmethod
    def _choose_ledger(md: Metadata, ledger: str | os.PathLike | None) -> str | None:
        requested = None if ledger is None else os.fspath(ledger)
        if isinstance(requested, bytes):
            requested = os.fsdecode(requested)
        named = md.ledger
        if named is None:
            return requested
        if requested is not None and not _same_file(requested, named):
            where = f" ({md.path})" if md.path is not None else ""
            raise ProgrammingError(
                f"the metadata{where} names the privacy ledger {named!r}, which every query on "
                f"this database is charged to; ledger={requested!r} cannot replace it. Omit "
                "ledger= (or pass the same file)."
            )
        return named

    # -- PEP 249 ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the connection is closed; open a new one with dpsql.connect()")

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def cursor(self) -> Cursor:
        """A new cursor on this connection (InterfaceError if the connection is closed)."""
        self._check_open()
        return Cursor(self)

    def close(self) -> None:
        """Close the database and the ledger. Idempotent; every later use of the connection or
        of its cursors raises InterfaceError. Nothing is pending: every charge is already
        committed and every cached answer stored."""
        if self._closed:
            return
        self._closed = True
        try:
            self._session.close()
            self._backend.close()
        finally:
            if self._ledger is not None:
                self._ledger.close()

    def commit(self) -> None:
        """No-op: the connection is read-only and charges commit on their own, before release."""
        self._check_open()

    def rollback(self) -> None:
        """No-op: there is nothing to roll back (charges are never undone)."""
        self._check_open()

    def __enter__(self) -> Connection:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        # closes: see the module docstring for why (no transaction to commit)
        self.close()

    # -- extensions ------------------------------------------------------------------------

    def execute(
        self, sql: str, parameters: Params = None, *, epsilon: float | None = None,
        delta: float | None = None,
    ) -> Cursor:
        """Shortcut (as in sqlite3/DuckDB): a new cursor, executed; returns that cursor."""
        return self.cursor().execute(sql, parameters, epsilon=epsilon, delta=delta)

    @property
    def budget(self) -> BudgetStatus:
        """This analyst's budget on this database: totals, spent, remaining, charge history
        (each charge names its mechanism). ProgrammingError when the connection has no ledger."""
        return self._require_ledger().status(self.database, self.analyst)

    def budget_report(self, delta_prime: float = 1e-6) -> CompositionReport:
        """Composition bounds of the charge history at slack ``delta_prime``: basic (enforced),
        advanced (Dwork-Rothblum-Vadhan), KOV closed form and KOV optimal (reported only; see
        :func:`dpsql.accounting.compose`)."""
        return self.budget.composition(delta_prime)

    def _require_ledger(self) -> Ledger:
        self._check_open()
        if self._ledger is None:
            raise ProgrammingError(
                "this connection has no privacy ledger, so nothing is charged or budgeted; "
                "pass ledger='path' to dpsql.connect() or name a ledger in the metadata"
            )
        return self._ledger

    def cancel(self) -> None:
        """Cancel the query this connection is running (call from another thread): its
        ``execute`` raises QueryCancelledError and nothing is charged."""
        self._check_open()
        self._session.cancel()

    @property
    def session(self) -> Session:
        """The :class:`~dpsql.session.Session` answering this connection's queries."""
        self._check_open()
        return self._session


# ---------------------------------------------------------------------------------------------
# Cursor
# ---------------------------------------------------------------------------------------------


class Cursor:
    """A PEP 249 cursor. Results are materialised (aggregates are small)."""

    def __init__(self, connection: Connection) -> None:
        #: the connection this cursor belongs to (PEP 249 extension)
        self.connection = connection
        #: rows fetchmany() returns by default
        self.arraysize = 1
        self._closed = False
        self._result: Result | None = None
        self._pos = 0

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed; use connection.cursor() for a new one")
        self.connection._check_open()

    def _require_result(self) -> Result:
        self._check_open()
        if self._result is None:
            raise ProgrammingError("no query has been executed on this cursor; call execute()")
        return self._result

    @property
    def description(
        self,
    ) -> tuple[tuple[str, str, None, None, None, None, None], ...] | None:
        """(name, type_code, None, None, None, None, None) per column; type_code is the DuckDB
        type name (compares equal to dpsql.dbapi.NUMBER/STRING/...). None before a query."""
        if self._result is None:
            return None
        return tuple(
            (name, type_, None, None, None, None, None)
            for name, type_ in zip(self._result.names, self._result.types, strict=True)
        )

    @property
    def rowcount(self) -> int:
        """Number of rows of the last query's result; -1 before any query."""
        return -1 if self._result is None else len(self._result.rows)

    @property
    def release(self) -> Release | None:
        """The release record of the last query (epsilon, delta, mechanism per column,
        ``cached``), or None before a query."""
        return None if self._result is None else self._result.release

    def execute(
        self, sql: str, parameters: Params = None, *, epsilon: float | None = None,
        delta: float | None = None,
    ) -> Cursor:
        """Answer ``sql`` privately; returns this cursor.

        Preconditions: ``parameters`` is a sequence matching the ``?`` markers (qmark style);
        an epsilon comes from this call or from :func:`connect`.
        Guarantees: with a ledger, either the cached answer of an identical earlier request is
        returned (``release.cached``; nothing charged), or exactly the release's (epsilon,
        delta) is charged, durably, before the database reads private data, and the answer is
        cached. A rejected, failed or cancelled query, bad parameters, or BudgetExhaustedError
        spend nothing and leave the cursor without a result; so does a query on public tables
        only (it needs no epsilon). Errors are dpsql's PEP 249 classes; KeyboardInterrupt
        propagates.
        """
        self._check_open()
        self._result, self._pos = None, 0  # a failed execute leaves no stale result behind
        conn = self.connection
        eps = conn.epsilon if epsilon is None else epsilon
        dlt = conn.delta if delta is None else delta
        params = _check_params(parameters)
        try:
            result = conn._session.run(sql, params, epsilon=eps, delta=dlt)
        except Error:
            raise
        except Exception as exc:
            # PEP 249: everything the driver raises is an Error. Only the type is named: the
            # text of an unexpected exception could quote a private value.
            raise InternalError(
                f"unexpected {type(exc).__name__} while answering the query (a dpsql bug)"
            ) from None
        self._result = result
        return self

    def executemany(self, sql: str, seq_of_parameters: Sequence[Params]) -> None:
        """Not supported: one noisy answer per parameter set would spend budget silently."""
        self._check_open()
        raise NotSupportedError(
            "executemany() is not supported: each parameter set would be a separately charged "
            "noisy query; call execute() once per parameter set if you mean to spend that"
        )

    def fetchone(self) -> tuple[Any, ...] | None:
        """The next row, or None when the result is exhausted."""
        result = self._require_result()
        if self._pos >= len(result.rows):
            return None
        row = result.rows[self._pos]
        self._pos += 1
        return row

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        """Up to ``size`` (default :attr:`arraysize`) next rows; [] when exhausted."""
        result = self._require_result()
        n = self.arraysize if size is None else size
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ProgrammingError(f"fetchmany size must be an integer >= 0, got {n!r}")
        rows = result.rows[self._pos:self._pos + n]
        self._pos += len(rows)
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        """All remaining rows; [] when exhausted."""
        result = self._require_result()
        rows = result.rows[self._pos:]
        self._pos = len(result.rows)
        return rows

    def fetchdf(self) -> Any:
        """The remaining rows as a pandas DataFrame (needs the ``pandas`` extra)."""
        result = self._require_result()
        try:
            import pandas
        except ImportError:
            raise NotSupportedError(
                "fetchdf() needs pandas: pip install 'dpsql[pandas]' (or use fetchall())"
            ) from None
        return pandas.DataFrame.from_records(self.fetchall(), columns=list(result.names))

    def close(self) -> None:
        """Close the cursor (idempotent); every later use raises InterfaceError."""
        self._closed = True
        self._result = None

    def setinputsizes(self, sizes: Any) -> None:
        """No-op (PEP 249)."""
        self._check_open()

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """No-op (PEP 249)."""
        self._check_open()

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        self._require_result()
        return self

    def __next__(self) -> tuple[Any, ...]:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def __enter__(self) -> Cursor:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_params(parameters: Params) -> list[Any]:
    if parameters is None:
        return []
    if isinstance(parameters, (str, bytes, bytearray, Mapping)) or not isinstance(
        parameters, Sequence
    ):
        raise ProgrammingError(
            "parameters must be a sequence (list or tuple) matching the '?' markers; "
            f"got {type(parameters).__name__}"
        )
    return list(parameters)


__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "Binary",
    "Connection",
    "Cursor",
    "DBAPITypeObject",
    "Date",
    "DateFromTicks",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "cache_key",
    "connect",
]
