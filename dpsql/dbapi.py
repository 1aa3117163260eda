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
* **No ledger is an explicit choice.** When neither the metadata nor ``ledger=`` names a
  ledger, ``connect`` raises :class:`~dpsql.errors.ProgrammingError` unless the caller passes
  ``ledger=None``: the data owner's statement that the connection runs uncharged (each execution
  draws fresh noise, nothing is cached, :attr:`Connection.budget` raises). The default is not
  None, so forgetting a ledger never silently releases unbudgeted answers. The choice is asked
  of every connection, even one that will only read public tables (free anyway): the rule
  depends on the arguments alone, never on the queries to come. ``ledger=None`` with metadata
  that names a ledger is refused too (the metadata's ledger cannot be bypassed).
* **The answer cache follows the data and the metadata.** The connection computes the data
  version (:func:`dpsql.backends.data_version`) once, after opening the data, and the session
  hashes the metadata; both are in every cache key, so a rewritten database, a rewritten source
  file, a bumped ``data_version:`` or an edited metadata file make a repeat a charged miss.
* **Budgets of source-backed tables are keyed by their files**: in memory (no database file),
  the ledger identity is the metadata's source paths (:func:`dpsql.backends.ledger_identity`),
  so two metadata files over different CSV/Parquet files never share one ``:memory:`` budget.
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

import os
from collections.abc import Mapping
from typing import Any

from dpsql.accounting import BudgetStatus, CompositionReport, Ledger
from dpsql.backends import data_version, ledger_identity, open_backend
from dpsql.budget import Budget
from dpsql.cursor import Cursor, Params
from dpsql.dbapi_types import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    DBAPITypeObject,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)
from dpsql.errors import (
    InterfaceError,
    ProgrammingError,
)
from dpsql.metadata import Metadata, load_metadata
from dpsql.release.cache import cache_key
from dpsql.session import Principal, Session

# ---------------------------------------------------------------------------------------------
# connect / Connection
# ---------------------------------------------------------------------------------------------


class _Unset:
    """The type of :data:`UNSET`: "no ledger argument given" (None means "no ledger")."""

    def __repr__(self) -> str:
        return "UNSET"


#: the default of ``connect(ledger=)``: the metadata's ledger, else refuse (see connect)
UNSET = _Unset()

LedgerArg = str | os.PathLike | None | _Unset


def same_file(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name one file (the metadata's ledger rule, here and in the
    server)."""
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def connect(
    database: str | os.PathLike | None,
    metadata: str | os.PathLike | Metadata | Mapping | None = None,
    *,
    analyst: str | None = None,
    ledger: LedgerArg = UNSET,
    epsilon: float | None = None,
    delta: float | None = None,
    backend: str = "duckdb",
    spark: Any = None,
    mechanism: str | None = None,
    calibration: str | None = None,
    raw_counts: bool = False,
) -> Connection:
    """Open a private, read-only connection to a DuckDB database (or to tables in Spark).

    Preconditions: ``database`` is a DuckDB file path, or None/":memory:" (tables backed by the
    CSV/Parquet sources the metadata declares); ``metadata`` is a metadata file path, a loaded
    :class:`~dpsql.metadata.Metadata` or a parsed mapping; ``analyst`` is the non-empty name
    charged in the ledger (with ``ledger=None`` it may be omitted: "owner", as the CLI's
    ``--no-ledger``); ``ledger`` is the path of an existing ledger file (create it with
    ``dpsql budget set``), or None to run uncharged as the data owner (omitted: the
    metadata's ledger); ``epsilon``/``delta`` are the default per-query budget
    (``Cursor.execute`` may override them; delta defaults to 0); ``mechanism`` is the default
    noise, 'laplace' (the default) or 'gaussian' (needs delta > 0; pure releases only), and
    ``calibration`` the Gaussian's, 'analytic' (the default) or 'classical' (epsilon < 1);
    ``raw_counts=True`` keeps noisy counts as drawn, below 0 included (by default they are
    clamped at 0: post-processing, see dpsql.execute.typed).

    ``backend="spark"`` computes the exact aggregates with Spark SQL (:mod:`dpsql.backends.spark`,
    the ``spark`` extra): ``spark`` is then a SparkSession or a master URL (``local[2]``,
    ``spark://host:7077``, ``yarn``), and ``database`` names the Spark catalog database holding
    the declared tables without a ``source`` (None: the current one). Its budgets are kept
    under ``spark://DATABASE`` (``spark://default`` for None).

    Guarantees: the ledger used is the metadata's when it names one (a different ``ledger=``,
    or ``ledger=None``, raises ProgrammingError), else ``ledger``; with neither, connecting
    raises ProgrammingError unless ``ledger=None`` was passed explicitly (then nothing is
    charged or cached). The budgets are kept under :func:`dpsql.backends.ledger_identity`
    and answers cached under the data version and metadata hash (module docstring). A missing,
    unreadable or foreign ledger file raises OperationalError; a missing database file raises
    OperationalError; invalid metadata raises ProgrammingError. Nothing is charged by connecting.

    ``database`` may instead be a server URL, ``postgresql://alice@host:5433/shop``: the result
    is a :class:`~dpsql.remote.RemoteConnection` to a `dpsql serve` process, which holds the
    metadata and the ledger; pass no ``metadata`` and no ``analyst`` (the URL's user is the
    analyst the server authenticates), and optionally ``epsilon``/``delta`` defaults and
    ``raw_counts`` (sent as ``SET dpsql.raw_counts = on``).
    """
    from dpsql.remote import RemoteConnection, is_url

    if is_url(database):
        if metadata is not None or analyst is not None or ledger is not UNSET:
            raise ProgrammingError(
                "a server URL takes no metadata, analyst or ledger: the server holds them and "
                "the URL's user is the analyst")
        return RemoteConnection(str(database), epsilon=epsilon, delta=delta,  # type: ignore[return-value]
                                mechanism=mechanism, calibration=calibration,
                                raw_counts=raw_counts)
    if analyst is None and ledger is None:  # uncharged, as the owner (the CLI's --no-ledger)
        analyst = "owner"
    if metadata is None or analyst is None:
        raise ProgrammingError(
            "dpsql.connect(database, metadata, analyst=...) needs the metadata file and the "
            "analyst's name (or a server URL: dpsql.connect('postgresql://alice@host/db'))")
    return Connection(database, metadata, analyst=analyst, ledger=ledger, epsilon=epsilon,
                      delta=delta, backend=backend, spark=spark, mechanism=mechanism,
                      calibration=calibration, raw_counts=raw_counts)


class Connection:
    """A PEP 249 connection (see :func:`connect` and the module docstring)."""

    def __init__(
        self,
        database: str | os.PathLike | None,
        metadata: str | os.PathLike | Metadata | Mapping,
        *,
        analyst: str,
        ledger: LedgerArg = UNSET,
        epsilon: float | None = None,
        delta: float | None = None,
        backend: str = "duckdb",
        spark: Any = None,
        mechanism: str | None = None,
        calibration: str | None = None,
        raw_counts: bool = False,
    ) -> None:
        if not isinstance(analyst, str) or not analyst.strip():
            raise ProgrammingError("analyst must be a non-empty string: pass analyst='name'")
        # the defaults are validated here, once; a per-query override when it arrives
        Budget(1.0 if epsilon is None else epsilon, 0.0 if delta is None else delta,
               mechanism or "laplace", calibration or "analytic")
        md = metadata if isinstance(metadata, Metadata) else load_metadata(metadata)
        ledger_path = self._choose_ledger(md, ledger)

        self.analyst = analyst
        #: default per-query budget (execute(..., epsilon=, delta=) overrides it)
        self.epsilon = None if epsilon is None else float(epsilon)
        self.delta = 0.0 if delta is None else float(delta)
        #: default noise mechanism and Gaussian calibration (execute(..., mechanism=) overrides)
        self.mechanism = mechanism or "laplace"
        self.calibration = calibration or "analytic"
        #: keep noisy counts below 0 as drawn (default False: clamped at 0)
        self.raw_counts = bool(raw_counts)
        self.metadata = md
        #: the key under which the ledger keeps this database's budgets and cached answers
        self.database = ledger_identity(backend, database, md)
        #: the ledger file every query is charged to, or None (nothing charged)
        self.ledger_path = ledger_path
        self._closed = False

        # Open the ledger first: if it is unusable we fail closed before touching the data.
        self._ledger = Ledger(ledger_path, create=False) if ledger_path is not None else None
        try:
            self._backend = open_backend(backend, database, md, spark)
            try:
                # after opening: DuckDB holds the file, so its version is the one read
                version = (data_version(backend, database, md) if self._ledger is not None
                           else None)
                self._session = Session(md, self._backend, ledger=self._ledger,
                                        principal=Principal(self.database, analyst),
                                        data_version=version)
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
    def _choose_ledger(md: Metadata, ledger: LedgerArg) -> str | None:
        named = md.ledger
        where = f" ({md.path})" if md.path is not None else ""
        if isinstance(ledger, _Unset):
            if named is None:
                raise ProgrammingError(
                    f"no privacy ledger: the metadata{where} names none and no ledger= was "
                    "given, so answers would be released without a budget. Name a ledger in "
                    "the metadata (`ledger:`), pass ledger=PATH, or pass ledger=None to run "
                    "uncharged as the data owner"
                )
            return named
        if ledger is None:
            if named is not None:
                raise ProgrammingError(
                    f"the metadata{where} names the privacy ledger {named!r}, which every "
                    "query on this database is charged to; ledger=None cannot bypass it. Omit "
                    "ledger= (or pass the same file)."
                )
            return None
        requested = os.fsdecode(os.fspath(ledger))
        if named is None:
            return requested
        if not same_file(requested, named):
            raise ProgrammingError(
                f"the metadata{where} names the privacy ledger {named!r}, which every query on "
                f"this database is charged to; ledger={requested!r} cannot replace it. Omit "
                "ledger= (--ledger on the command line), or pass the same file."
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
        delta: float | None = None, mechanism: str | None = None,
        calibration: str | None = None,
    ) -> Cursor:
        """Shortcut (as in sqlite3/DuckDB): a new cursor, executed; returns that cursor."""
        return self.cursor().execute(sql, parameters, epsilon=epsilon, delta=delta,
                                     mechanism=mechanism, calibration=calibration)

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
                "this connection has no privacy ledger (opened with ledger=None), so nothing "
                "is charged or budgeted; pass ledger='path' to dpsql.connect() or name a "
                "ledger in the metadata"
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


__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "UNSET",
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
